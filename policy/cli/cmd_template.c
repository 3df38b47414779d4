/* kgym-policy template / parse-tools: a conversation rendered by a chat template, and tool calls
 * parsed out of generated text (policy/chat.h). */
#include "cmds.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/chat.h"
#include "policy/hf_file.h"
#include "util/strbuf.h"
#include "util/text.h"

#define INPUT_MAX ((size_t)1 << 30)

static const char TEMPLATE_HELP[] =
    "usage: kgym-policy template --template qwen3|qwen2.5|llama3 [--file FILE] [--tools FILE]\n"
    "                            [--no-generation-prompt] [--no-thinking]\n\n"
    "Renders a conversation with a model's chat template, exactly as Hugging Face\n"
    "apply_chat_template(..., tokenize=False) does, and prints the text (no newline added).\n\n"
    "input (stdin, or --file): {\"messages\": [...], \"tools\": [...]} or a bare array of "
    "messages;\n"
    "  messages are OpenAI-style: {\"role\": \"system|user|assistant|tool\", \"content\": "
    "\"...\",\n"
    "  \"reasoning_content\": \"...\" (Qwen3), \"tool_calls\": [{\"type\": \"function\", "
    "\"function\":\n"
    "  {\"name\": \"...\", \"arguments\": {...} or \"<json>\"}}]}\n\n"
    "options:\n"
    "  --template KIND          qwen3, qwen2.5 or llama3 (Llama 3.1 Instruct)\n"
    "  --file FILE              read the conversation from FILE instead of stdin\n"
    "  --tools FILE             a JSON array of tools (replaces the input's \"tools\")\n"
    "  --no-generation-prompt   end after the last message (no assistant header)\n"
    "  --no-thinking            Qwen3: enable_thinking=false (an empty <think></think> block)\n";

static const char PARSE_HELP[] =
    "usage: kgym-policy parse-tools --template qwen3|qwen2.5|llama3 [--file FILE]\n\n"
    "Reads a model's generated text (stdin, or --file) and prints one JSON line:\n"
    "  {\"calls\": [{\"name\", \"arguments\"}...], \"errors\": [{\"index\", \"error\", "
    "\"text\"}...],\n"
    "   \"content\": \"the text outside the calls\"}\n"
    "Qwen: <tool_call>{json}</tool_call> blocks; Llama 3: <|python_tag|> or a bare JSON object\n"
    "{\"name\", \"parameters\"}, several separated by ';'. Malformed calls go to \"errors\".\n";

typedef struct {
    int kind;
    const char *file;
    const char *tools_file;
    bool generation_prompt;
    bool thinking;
} template_args;

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "kgym-policy %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see kgym-policy %s --help)\n", cmd);
    return 2;
}

/* Parses the options both commands share and those of `template`; 0, 1 (--help) or 2 (usage). */
static int parse_args(const char *cmd, int argc, char **argv, template_args *a)
{
    const char *kind = NULL;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        bool has_value = i + 1 < argc;
        bool is_template = !strcmp(cmd, "template");
        if (!strcmp(o, "--help") || !strcmp(o, "-h"))
            return 1;
        if (!strcmp(o, "--template") || !strcmp(o, "--file") ||
            (is_template && !strcmp(o, "--tools"))) {
            if (!has_value)
                return usage_error(cmd, "%s needs a value", o);
            const char *v = argv[++i];
            if (!strcmp(o, "--template"))
                kind = v;
            else if (!strcmp(o, "--file"))
                a->file = v;
            else
                a->tools_file = v;
        } else if (is_template && !strcmp(o, "--no-generation-prompt")) {
            a->generation_prompt = false;
        } else if (is_template && !strcmp(o, "--no-thinking")) {
            a->thinking = false;
        } else {
            return usage_error(cmd, "unknown argument '%s'", o);
        }
    }
    if (!kind)
        return usage_error(cmd, "%s", "--template KIND is required");
    a->kind = pol_chat_kind_parse(kind);
    if (a->kind < 0)
        return usage_error(cmd, "unknown template '%s': qwen3, qwen2.5 or llama3", kind);
    return 0;
}

/* The whole input: --file, or stdin. */
static int read_input(const char *cmd, const char *file, char **out, size_t *len)
{
    if (file) {
        int rc = pol_hf_read_file(file, INPUT_MAX, out, len);
        if (rc != 0)
            fprintf(stderr, "kgym-policy %s: %s: %s\n", cmd, file,
                    rc == -EFBIG ? "larger than 1 GiB" : strerror(-rc));
        return rc ? -1 : 0;
    }
    strbuf sb = STRBUF_INIT;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
        if (sb.len + n > INPUT_MAX || sb_append(&sb, buf, n) != 0) {
            fprintf(stderr, "kgym-policy %s: stdin: too large or out of memory\n", cmd);
            sb_free(&sb);
            return -1;
        }
    if (ferror(stdin)) {
        fprintf(stderr, "kgym-policy %s: stdin: %s\n", cmd, strerror(errno));
        sb_free(&sb);
        return -1;
    }
    *len = sb.len;
    *out = sb_steal(&sb);
    return *out ? 0 : -1;
}

static json_t *load_json(const char *what, const char *text, size_t len)
{
    json_error_t jerr;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY, &jerr);
    if (!v)
        fprintf(stderr, "kgym-policy template: %s: bad JSON at line %d, column %d: %s\n", what,
                jerr.line, jerr.column, jerr.text);
    return v;
}

/* --tools FILE: a JSON array. */
static json_t *load_tools_file(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    if (read_input("template", path, &text, &len) != 0)
        return NULL;
    json_t *tools = load_json(path, text, len);
    free(text);
    if (tools && !json_is_array(tools)) {
        fprintf(stderr, "kgym-policy template: %s: the tools must be a JSON array\n", path);
        json_decref(tools);
        return NULL;
    }
    return tools;
}

/* Splits the input into its messages and tools (new references). */
static int split_input(json_t *in, json_t **messages, json_t **tools)
{
    if (json_is_array(in)) {
        *messages = json_incref(in);
        return 0;
    }
    json_t *m = json_is_object(in) ? json_object_get(in, "messages") : NULL;
    if (!m) {
        fprintf(stderr, "kgym-policy template: the input must be a JSON array of messages or an "
                        "object with \"messages\"\n");
        return -1;
    }
    json_t *t = json_object_get(in, "tools");
    *messages = json_incref(m);
    *tools = json_is_null(t) ? NULL : json_incref(t);
    return 0;
}

static int render_and_print(const template_args *a, json_t *messages, json_t *tools)
{
    pol_chat_opts opts = {.add_generation_prompt = a->generation_prompt,
                          .enable_thinking = a->thinking};
    char err[512], *text = NULL;
    if (pol_chat_render((pol_chat_kind)a->kind, messages, tools, &opts, &text, err, sizeof err)) {
        fprintf(stderr, "kgym-policy template: %s\n", err);
        return 1;
    }
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0;
    free(text);
    if (!ok)
        fprintf(stderr, "kgym-policy template: writing stdout: %s\n", strerror(errno));
    return ok ? 0 : 1;
}

int cmd_template(int argc, char **argv)
{
    template_args a = {.generation_prompt = true, .thinking = true};
    int rc = parse_args("template", argc, argv, &a);
    if (rc == 1) {
        fputs(TEMPLATE_HELP, stdout);
        return 0;
    }
    if (rc != 0)
        return rc;
    char *text = NULL;
    size_t len = 0;
    if (read_input("template", a.file, &text, &len) != 0)
        return 1;
    json_t *in = load_json(a.file ? a.file : "stdin", text, len);
    free(text);
    json_t *messages = NULL, *tools = NULL;
    rc = 1;
    if (in && split_input(in, &messages, &tools) == 0) {
        if (a.tools_file) {
            json_decref(tools);
            tools = load_tools_file(a.tools_file);
        }
        if (!a.tools_file || tools)
            rc = render_and_print(&a, messages, tools);
    }
    json_decref(in);
    json_decref(messages);
    json_decref(tools);
    return rc;
}

/* {"calls", "errors", "content"} on one line; the content made valid UTF-8 for JSON. */
static int print_parse(json_t *calls, json_t *errors, const char *content)
{
    char *clean = text_sanitize_utf8(content, strlen(content));
    json_t *out =
        clean ? json_pack("{s:O, s:O, s:s}", "calls", calls, "errors", errors, "content", clean)
              : NULL;
    free(clean);
    char *line = out ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    if (!line) {
        fprintf(stderr, "kgym-policy parse-tools: out of memory\n");
        return 1;
    }
    bool ok = printf("%s\n", line) > 0 && fflush(stdout) == 0;
    free(line);
    return ok ? 0 : 1;
}

int cmd_parse_tools(int argc, char **argv)
{
    template_args a = {0};
    int rc = parse_args("parse-tools", argc, argv, &a);
    if (rc == 1) {
        fputs(PARSE_HELP, stdout);
        return 0;
    }
    if (rc != 0)
        return rc;
    char *text = NULL;
    size_t len = 0;
    if (read_input("parse-tools", a.file, &text, &len) != 0)
        return 1;
    json_t *calls = NULL, *errors = NULL;
    char *content = NULL;
    int n = pol_chat_parse_tool_calls((pol_chat_kind)a.kind, text, len, &calls, &errors, &content);
    free(text);
    if (n < 0) {
        fprintf(stderr, "kgym-policy parse-tools: out of memory\n");
        return 1;
    }
    rc = print_parse(calls, errors, content);
    json_decref(calls);
    json_decref(errors);
    free(content);
    return rc;
}
