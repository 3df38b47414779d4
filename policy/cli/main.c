/* kgym-policy: the policy's command line (see cmds.h for the subcommands). */
#include "cmds.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} command;

static const command COMMANDS[] = {
    {"inspect", cmd_inspect, "a checkpoint's config, tensors, dtypes and sizes"},
    {"generate", cmd_generate, "continue a prompt (greedy or sampled)"},
    {"score", cmd_score, "per-token log-probabilities of a text"},
    {"chat", cmd_chat, "one assistant turn for a conversation, through the chat template"},
    {"tokenize", cmd_tokenize, "text -> token ids (JSON)"},
    {"detokenize", cmd_detokenize, "token ids (JSON) -> text"},
    {"template", cmd_template, "render a conversation (JSON) with a model's chat template"},
    {"parse-tools", cmd_parse_tools, "tool calls (JSON) out of generated text"},
    {"bench", cmd_bench, "the GPU policy's training and decoding speed (CUDA build)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: kgym-policy COMMAND [options]   (COMMAND --help for its options)\n\n"
               "The kgym policy: Hugging Face checkpoints (safetensors, config.json, "
               "tokenizer.json) run by kgym's own C code.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].what);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name))
            return COMMANDS[i].run(argc - 2, argv + 2);
    fprintf(stderr, "kgym-policy: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
