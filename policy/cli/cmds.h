/* kgym-policy's subcommands: each takes the arguments after its name and returns the exit
 * status (0 ok, 1 failure, 2 usage). Each prints its own --help. */
#ifndef KGYM_POLICY_CLI_CMDS_H
#define KGYM_POLICY_CLI_CMDS_H

/* cmd_inspect.c: a checkpoint's config and tensors; cmd_model.c: decoding, per-token log-probs,
 * a chat turn */
int cmd_inspect(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_chat(int argc, char **argv);
/* cmd_tok.c: text -> ids and ids -> text through a tokenizer.json */
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
/* cmd_template.c: a chat rendered by a model's template; tool calls parsed out of text */
int cmd_template(int argc, char **argv);
int cmd_parse_tools(int argc, char **argv);
/* cmd_bench.c: training tokens/s and MFU, decoding tokens/s on the GPU (kgym-policy-cuda) */
int cmd_bench(int argc, char **argv);

#endif
