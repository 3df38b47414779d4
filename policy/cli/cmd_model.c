/* kgym-policy generate / score / chat: a checkpoint run on the CPU reference or the GPU (runner.h,
 * --device) with the tokenizer and chat templates of policy/. */
#include "cli_common.h"
#include "cmds.h"
#include "runner.h"

#include "policy/chat.h"
#include "policy/model.h"
#include "policy/tokenizer.h"
#include "util/text.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SAMPLING_HELP[] =
    "  --max-new N        new tokens at most (default 64)\n"
    "  --temperature T    sample at temperature T (default 0: greedy)\n"
    "  --top-k K          sample among the K most likely tokens (default: all)\n"
    "  --top-p P          sample among the most likely tokens holding mass P (default 1)\n"
    "  --seed S           the sampler's seed (default 0): the same seed gives the same tokens\n"
    "                     on one device (cpu and cuda have RNGs of their own)\n"
    "  --stop TEXT        end once the new text holds TEXT, its tokens kept (repeatable; needs a\n"
    "                     tokenizer). The GPU stops there; the CPU decodes on to an EOS or\n"
    "                     --max-new, then cuts after the same token.\n";

/* %s: what this binary has. */
static const char DEVICE_HELP[] =
    "  --device D         auto (default), cuda or cpu. auto: the GPU when this binary has CUDA\n"
    "                     and finds one, else the CPU (the JSON output says which ran).\n"
    "                     %s\n";

static const char GENERATE_HELP[] =
    "usage: kgym-policy generate --model DIR [--tokenizer DIR] (--prompt TEXT | --ids JSON)\n"
    "                            [--max-new N] [--temperature T --top-k K --top-p P --seed S]\n"
    "                            [--stop TEXT]... [--device auto|cuda|cpu] [--json]\n"
    "\n"
    "Continues a prompt with the CPU reference model (fp32, KV cache) or the GPU model (bf16:\n"
    "greedy can pick another token where two logits nearly tie). Greedy by default; stops at an\n"
    "EOS id of config.json / generation_config.json, a --stop text, or after --max-new tokens.\n"
    "Embedding rows past the tokenizer's vocabulary (padding) are never chosen.\n"
    "\n"
    "  --model DIR        HF folder: config.json + model.safetensors (or sharded)\n"
    "  --tokenizer DIR    tokenizer.json or its folder (default: the model folder's, if any)\n"
    "  --prompt TEXT      the prompt, encoded with special tokens recognised (needs a tokenizer)\n"
    "  --ids JSON         the prompt as token ids, e.g. '[1, 2, 3]'\n"
    "%s%s"
    "  --json             {\"prompt_ids\", \"ids\", \"text\", \"finish_reason\", "
    "\"tokens_per_s\", \"device\"}\n"
    "                     (+ \"logprobs\" of the new ids on cuda); finish_reason: \"eos\",\n"
    "                     \"stop\", \"length\" or (cuda) \"context\"\n"
    "\n"
    "Prints the generated text (or, without a tokenizer, the ids as JSON).\n"
    "exit status: 0 ok, 1 error (checkpoint or tokenizer refused, bad ids, device missing),\n"
    "2 usage\n";

static const char SCORE_HELP[] =
    "usage: kgym-policy score --model DIR [--tokenizer DIR] (--text TEXT | --ids JSON)\n"
    "                         [--device auto|cuda|cpu]\n"
    "\n"
    "Prints, as JSON, each token's log-probability given the tokens before it (null for the\n"
    "first): {\"ids\", \"logprobs\", \"sum\", \"device\"} (+ \"tokens\" with a tokenizer).\n"
    "\n"
    "  --model DIR        HF folder: config.json + model.safetensors (or sharded)\n"
    "  --tokenizer DIR    tokenizer.json or its folder (default: the model folder's, if any)\n"
    "  --text TEXT        the text, encoded with special tokens recognised (needs a tokenizer)\n"
    "  --ids JSON         token ids, e.g. '[1, 2, 3]'\n"
    "%s"
    "\n"
    "exit status: 0 ok, 1 error (checkpoint or tokenizer refused, bad ids, device missing),\n"
    "2 usage\n";

static const char CHAT_HELP[] =
    "usage: kgym-policy chat --model DIR --template qwen3|qwen2.5|llama3 [--tokenizer DIR]\n"
    "                        [--tools FILE] [--no-thinking] [--max-new N] [sampling]\n"
    "                        [--stop TEXT]... [--device auto|cuda|cpu] [--json]\n"
    "\n"
    "Reads a conversation on stdin (a JSON array of messages, or {\"messages\": [...], \"tools\":\n"
    "[...]}), renders it with the chat template (generation prompt added), generates the\n"
    "assistant's turn and prints its text, then one line per tool call parsed out of it.\n"
    "\n"
    "  --model DIR        HF folder: config.json + model.safetensors (or sharded)\n"
    "  --template NAME    qwen3, qwen2.5 or llama3\n"
    "  --tokenizer DIR    tokenizer.json or its folder (default: the model folder's)\n"
    "  --tools FILE       the tools (a JSON array of OpenAI-style function specs)\n"
    "  --no-thinking      Qwen3: enable_thinking=false (the empty <think></think> block)\n"
    "%s%s"
    "  --json             {\"text\", \"content\", \"tool_calls\", \"tool_call_errors\", \"ids\",\n"
    "                     \"prompt_ids\", \"finish_reason\", \"device\"}\n"
    "\n"
    "exit status: 0 ok, 1 error (device missing too), 2 usage\n";

/* Sampling options shared by generate and chat. */
typedef struct {
    const char *max_new, *temperature, *top_k, *top_p, *seed;
} sampling_args;

static int sampling_from(const char *cmd, const sampling_args *a, pol_gen_opts *o)
{
    long max_new = 64, top_k = 0, seed = 0;
    double t = 0, top_p = 1;
    if (a->max_new && !cli_parse_long(a->max_new, 0, 1 << 20, &max_new))
        return cli_usage_error(cmd, "--max-new takes a count 0..1048576");
    if (a->temperature && !cli_parse_double(a->temperature, 0, 1e6, &t))
        return cli_usage_error(cmd, "--temperature takes a number >= 0");
    if (a->top_k && !cli_parse_long(a->top_k, 0, 1L << 30, &top_k))
        return cli_usage_error(cmd, "--top-k takes a count >= 0");
    /* 0 would read as "off" to the sampler (sample.h), not as "the top token alone" */
    if (a->top_p && (!cli_parse_double(a->top_p, 0, 1, &top_p) || top_p == 0))
        return cli_usage_error(cmd, "--top-p takes a number in (0, 1]");
    if (a->seed && !cli_parse_long(a->seed, 0, 0x7fffffffffffffffL, &seed))
        return cli_usage_error(cmd, "--seed takes a number >= 0");
    o->max_new = (int)max_new;
    o->sample =
        (pol_sample_cfg){.temperature = (float)t, .top_k = (int)top_k, .top_p = (float)top_p};
    o->seed = (uint64_t)seed;
    return 0;
}

/* ---- shared loading ---- */

/* The tokenizer: --tokenizer, else the model folder's tokenizer.json when there is one (then
 * *tok may stay NULL). required: a missing one is an error. */
static int load_tokenizer(const char *tok_path, const char *model_dir, bool required, pol_tok **tok,
                          char *err)
{
    char path[4096];
    *tok = NULL;
    if (!tok_path) {
        if (!text_fmt(path, sizeof path, "%s/tokenizer.json", model_dir) || !cli_is_file(path)) {
            if (required)
                text_fmt(err, ERRCAP, "%s has no tokenizer.json: pass --tokenizer", model_dir);
            return required ? -1 : 0;
        }
        tok_path = path;
    }
    return pol_tok_load(tok_path, tok, err, ERRCAP);
}

/* ids from a JSON array text. */
static int parse_ids(const char *text, int32_t **ids, int *n, char *err)
{
    json_error_t je;
    json_t *a = json_loads(text, 0, &je);
    *ids = NULL;
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > (1u << 24)) {
        text_fmt(err, ERRCAP, "--ids: not a non-empty JSON array of ids%s%s", a ? "" : ": ",
                 a ? "" : je.text);
        json_decref(a);
        return -1;
    }
    *n = (int)json_array_size(a);
    *ids = malloc((size_t)*n * sizeof **ids);
    for (int i = 0; *ids && i < *n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            text_fmt(err, ERRCAP, "--ids: element %d is not a token id", i);
            free(*ids);
            *ids = NULL;
            break;
        }
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    json_decref(a);
    return *ids ? 0 : -1;
}

/* The prompt: --ids, or --text encoded (special tokens recognised, as HF tokenizers do). */
static int prompt_ids(const char *ids_json, const char *text, const pol_tok *tok, int32_t **ids,
                      int *n, char *err)
{
    if (ids_json)
        return parse_ids(ids_json, ids, n, err);
    if (!tok) {
        text_fmt(err, ERRCAP, "a text prompt needs a tokenizer: pass --tokenizer");
        return -1;
    }
    size_t count = 0;
    if (pol_tok_encode(tok, text, strlen(text), true, ids, &count, err, ERRCAP) != 0)
        return -1;
    if (count == 0 || count > INT32_MAX) {
        free(*ids);
        *ids = NULL;
        text_fmt(err, ERRCAP, "the text encodes to no tokens");
        return -1;
    }
    *n = (int)count;
    return 0;
}

/* ---- device and stop strings ---- */

#define MAX_STOPS 16

/* The --device lines of a help, saying what this binary has. */
static void device_help(char *out, size_t cap)
{
    text_fmt(out, cap, DEVICE_HELP,
             runner_has_cuda() ? "This binary has CUDA."
                               : "This binary is CPU only: build/kgym-policy-cuda has CUDA.");
}

/* --device's value (NULL: auto); 2 after a usage error. */
static int device_from(const char *cmd, const char *s, runner_device *d)
{
    return runner_parse_device(s, d) ? 0 : cli_usage_error(cmd, "--device takes auto, cuda or cpu");
}

static bool takes_value(const char *arg, const opt_spec *specs, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(arg, specs[k].name))
            return specs[k].takes_value;
    return false;
}

/* Moves every "--stop TEXT" of argv into stops[] (cli_parse_args keeps one value per option)
 * and the other arguments, in order, into rest[]. The values of specs' options are passed over,
 * so a prompt reading "--stop" stays a prompt. Returns 0, or 2 after a usage error. */
static int take_stops(const char *cmd, int argc, char **argv, const opt_spec *specs, size_t n,
                      const char **stops, int *n_stops, char **rest, int *n_rest)
{
    *n_stops = *n_rest = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--stop") != 0) {
            rest[(*n_rest)++] = argv[i];
            if (takes_value(argv[i], specs, n) && i + 1 < argc)
                rest[(*n_rest)++] = argv[++i];
            continue;
        }
        if (i + 1 >= argc || !argv[i + 1][0])
            return cli_usage_error(cmd, "--stop takes a non-empty text");
        if (*n_stops == MAX_STOPS)
            return cli_usage_error(cmd, "at most 16 --stop texts");
        stops[(*n_stops)++] = argv[++i];
    }
    return 0;
}

/* cli_parse_args with --stop repeatable: the same returns (0 go on, 1 help shown, 2 usage). */
static int parse_args_with_stops(const char *cmd, const char *help, int argc, char **argv,
                                 const opt_spec *specs, size_t n, const char **stops, int *n_stops)
{
    char **rest = malloc(((size_t)argc + 1) * sizeof *rest);
    if (!rest)
        return cli_usage_error(cmd, "out of memory");
    int n_rest = 0;
    int rc = take_stops(cmd, argc, argv, specs, n, stops, n_stops, rest, &n_rest);
    if (rc == 0)
        rc = cli_parse_args(cmd, help, n_rest, rest, specs, n, NULL);
    free(rest);
    return rc;
}

/* ---- generate ---- */

/* What generate, score and chat share: the runner, tokenizer, options and the run. */
typedef struct {
    runner r;
    pol_tok *tok;
    runner_gen_opts o;
    int32_t eos[POL_MAX_EOS * 2];
    const char *stops[MAX_STOPS];
    int32_t *prompt;
    int n_prompt;
    runner_gen_out out;
    double secs;
} gen_run;

static int gen_setup(gen_run *g, const char *model_dir, const char *tok_path, bool need_tok,
                     runner_device device, char *err)
{
    if (!cli_is_dir(model_dir)) {
        text_fmt(err, ERRCAP, "%s: not a model folder", model_dir);
        return -1;
    }
    if (runner_load(&g->r, model_dir, device, err, ERRCAP) != 0)
        return -1;
    if (load_tokenizer(tok_path, model_dir, need_tok, &g->tok, err) != 0)
        return -1;
    g->o.gen.n_eos = pol_model_eos_ids(&g->r.m, g->eos, (int)(sizeof g->eos / sizeof g->eos[0]));
    g->o.gen.eos = g->eos;
    g->o.gen.n_valid = g->tok ? (int)pol_tok_vocab_size(g->tok) : 0;
    g->o.stop = g->stops;
    g->o.tok = g->tok;
    return 0;
}

static void gen_free(gen_run *g)
{
    runner_free(&g->r);
    pol_tok_free(g->tok);
    free(g->prompt);
    runner_gen_out_free(&g->out);
}

static int gen_run_once(gen_run *g, char *err)
{
    double t0 = text_mono_ms();
    int rc = runner_generate(&g->r, g->prompt, g->n_prompt, &g->o, &g->out, err, ERRCAP);
    g->secs = (text_mono_ms() - t0) / 1000.0;
    return rc;
}

static bool gen_hit_eos(const gen_run *g)
{
    return g->out.finish && !strcmp(g->out.finish, "eos");
}

/* The generated text (a final EOS left out), or NULL without a tokenizer / on error. */
static char *gen_text(const gen_run *g, char *err)
{
    if (!g->tok)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    size_t n = (size_t)g->out.n - (gen_hit_eos(g) ? 1 : 0);
    if (pol_tok_decode(g->tok, g->out.ids, n, false, &text, &len, err, ERRCAP) != 0)
        return NULL;
    return text;
}

/* Generated text as a JSON string: each byte that is not valid UTF-8 becomes U+FFFD. */
static json_t *text_json(const char *text)
{
    char *s = text_sanitize_utf8(text, strlen(text));
    json_t *j = s ? json_string(s) : json_null();
    free(s);
    return j;
}

/* Log-probabilities as a JSON array (null for one that is not finite, which JSON cannot hold). */
static json_t *logprobs_json(const float *lp, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, isfinite(lp[i]) ? json_real(lp[i]) : json_null());
    return a;
}

static void print_generated(const gen_run *g, const char *text, bool as_json)
{
    if (as_json) {
        json_t *j = json_pack(
            "{s:o, s:o, s:s, s:f, s:s}", "prompt_ids", cli_ids_json(g->prompt, g->n_prompt), "ids",
            cli_ids_json(g->out.ids, g->out.n), "finish_reason", g->out.finish, "tokens_per_s",
            g->secs > 0 ? g->out.n / g->secs : 0.0, "device", runner_device_name(g->r.device));
        if (j && text)
            json_object_set_new(j, "text", text_json(text));
        if (j && g->out.logp)
            json_object_set_new(j, "logprobs", logprobs_json(g->out.logp, g->out.n));
        cli_print_json(j);
        json_decref(j);
    } else if (text) {
        fwrite(text, 1, strlen(text), stdout);
        putchar('\n');
    } else {
        json_t *a = cli_ids_json(g->out.ids, g->out.n);
        cli_print_json(a);
        json_decref(a);
    }
}

int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *tok_path = NULL, *prompt = NULL, *ids = NULL, *device = NULL;
    sampling_args sa = {0};
    bool as_json = false;
    opt_spec specs[] = {
        {"--model", true, &model, NULL},        {"--tokenizer", true, &tok_path, NULL},
        {"--prompt", true, &prompt, NULL},      {"--ids", true, &ids, NULL},
        {"--max-new", true, &sa.max_new, NULL}, {"--temperature", true, &sa.temperature, NULL},
        {"--top-k", true, &sa.top_k, NULL},     {"--top-p", true, &sa.top_p, NULL},
        {"--seed", true, &sa.seed, NULL},       {"--device", true, &device, NULL},
        {"--json", false, NULL, &as_json}};
    char help[8192], dev_help[512];
    device_help(dev_help, sizeof dev_help);
    text_fmt(help, sizeof help, GENERATE_HELP, SAMPLING_HELP, dev_help);
    gen_run g = {0};
    int rc = parse_args_with_stops("generate", help, argc, argv, specs,
                                   sizeof specs / sizeof specs[0], g.stops, &g.o.n_stop);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (!model)
        return cli_usage_error("generate", "missing --model");
    if (!prompt == !ids)
        return cli_usage_error("generate", "give one of --prompt and --ids");
    runner_device dev;
    if (sampling_from("generate", &sa, &g.o.gen) != 0 || device_from("generate", device, &dev) != 0)
        return 2;
    char err[ERRCAP] = "";
    char *text = NULL;
    rc = 1;
    /* a text prompt or a stop string needs the tokenizer */
    if (gen_setup(&g, model, tok_path, prompt != NULL || g.o.n_stop > 0, dev, err) != 0 ||
        prompt_ids(ids, prompt, g.tok, &g.prompt, &g.n_prompt, err) != 0 ||
        gen_run_once(&g, err) != 0)
        goto done;
    text = gen_text(&g, err);
    if (g.tok && !text)
        goto done;
    rc = 0;
    print_generated(&g, text, as_json);
done:
    if (rc)
        cli_fail("generate", err);
    free(text);
    gen_free(&g);
    return rc;
}

/* ---- score ---- */

static json_t *score_json(const int32_t *ids, int n, const float *lp, const pol_tok *tok,
                          runner_device device)
{
    json_t *lps = json_array(), *tokens = tok ? json_array() : NULL;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        json_array_append_new(lps, i == 0 ? json_null() : json_real(lp[i - 1]));
        sum += i ? lp[i - 1] : 0;
        const char *bytes;
        size_t len;
        if (tokens && pol_tok_token_bytes(tok, ids[i], &bytes, &len) == 0) {
            char *s = text_sanitize_utf8(bytes, len);
            json_array_append_new(tokens, s ? json_string(s) : json_null());
            free(s);
        } else if (tokens) {
            json_array_append_new(tokens, json_null());
        }
    }
    json_t *j = json_pack("{s:o, s:o, s:f, s:s}", "ids", cli_ids_json(ids, n), "logprobs", lps,
                          "sum", sum, "device", runner_device_name(device));
    if (j && tokens)
        json_object_set_new(j, "tokens", tokens);
    return j;
}

int cmd_score(int argc, char **argv)
{
    const char *model = NULL, *tok_path = NULL, *text = NULL, *ids = NULL, *device = NULL;
    opt_spec specs[] = {{"--model", true, &model, NULL},
                        {"--tokenizer", true, &tok_path, NULL},
                        {"--text", true, &text, NULL},
                        {"--ids", true, &ids, NULL},
                        {"--device", true, &device, NULL}};
    char help[4096], dev_help[512];
    device_help(dev_help, sizeof dev_help);
    text_fmt(help, sizeof help, SCORE_HELP, dev_help);
    int rc = cli_parse_args("score", help, argc, argv, specs, sizeof specs / sizeof specs[0], NULL);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (!model)
        return cli_usage_error("score", "missing --model");
    if (!text == !ids)
        return cli_usage_error("score", "give one of --text and --ids");
    runner_device dev;
    if (device_from("score", device, &dev) != 0)
        return 2;
    gen_run g = {0};
    float *lp = NULL;
    char err[ERRCAP] = "";
    rc = 1;
    if (gen_setup(&g, model, tok_path, text != NULL, dev, err) != 0 ||
        prompt_ids(ids, text, g.tok, &g.prompt, &g.n_prompt, err) != 0)
        goto done;
    lp = malloc((size_t)g.n_prompt * sizeof *lp);
    if (!lp) {
        text_fmt(err, ERRCAP, "out of memory");
        goto done;
    }
    if (runner_score(&g.r, g.prompt, g.n_prompt, lp, err, ERRCAP) != 0)
        goto done;
    json_t *j = score_json(g.prompt, g.n_prompt, lp, g.tok, g.r.device);
    cli_print_json(j);
    json_decref(j);
    rc = 0;
done:
    if (rc)
        cli_fail("score", err);
    free(lp);
    gen_free(&g);
    return rc;
}

/* ---- chat ---- */

/* stdin: an array of messages, or {"messages": [...], "tools": [...]}. */
static int read_conversation(json_t **messages, json_t **tools, char *err)
{
    json_error_t je;
    json_t *root = json_loadf(stdin, 0, &je);
    *messages = *tools = NULL;
    if (!root) {
        text_fmt(err, ERRCAP, "stdin: not JSON: %s (line %d)", je.text, je.line);
        return -1;
    }
    if (json_is_array(root)) {
        *messages = root;
        return 0;
    }
    json_t *m = json_object_get(root, "messages"), *t = json_object_get(root, "tools");
    if (json_is_null(t))
        t = NULL; /* as `template` reads it */
    if (!json_is_array(m) || (t && !json_is_array(t))) {
        text_fmt(err, ERRCAP, "stdin: expected a JSON array of messages or {\"messages\": [...]}");
        json_decref(root);
        return -1;
    }
    *messages = json_incref(m);
    *tools = t ? json_incref(t) : NULL;
    json_decref(root);
    return 0;
}

static int read_tools_file(const char *path, json_t **tools, char *err)
{
    json_error_t je;
    json_decref(*tools);
    *tools = json_load_file(path, 0, &je);
    if (!json_is_array(*tools)) {
        text_fmt(err, ERRCAP, "%s: not a JSON array of tools%s%s", path, *tools ? "" : ": ",
                 *tools ? "" : je.text);
        json_decref(*tools);
        *tools = NULL;
        return -1;
    }
    return 0;
}

static void print_chat(const char *text, json_t *calls, json_t *errors)
{
    printf("%s\n", text);
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c)
    {
        char *args = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT);
        printf("tool call: %s %s\n", json_string_value(json_object_get(c, "name")),
               args ? args : "{}");
        free(args);
    }
    json_array_foreach(errors, i, c)
        printf("malformed tool call: %s\n", json_string_value(json_object_get(c, "error")));
}

typedef struct {
    const char *model, *tok_path, *template_name, *tools_path, *device;
    bool no_thinking, as_json;
    sampling_args sa;
} chat_args;

/* Renders the conversation and encodes it into g->prompt. */
static int chat_prompt(gen_run *g, const chat_args *a, pol_chat_kind kind, char *err)
{
    json_t *messages, *tools;
    if (read_conversation(&messages, &tools, err) != 0)
        return -1;
    int rc = a->tools_path ? read_tools_file(a->tools_path, &tools, err) : 0;
    pol_chat_opts co = {.add_generation_prompt = true, .enable_thinking = !a->no_thinking};
    char *rendered = NULL;
    if (rc == 0)
        rc = pol_chat_render(kind, messages, tools, &co, &rendered, err, ERRCAP);
    json_decref(messages);
    json_decref(tools);
    if (rc != 0)
        return -1;
    size_t n = 0;
    rc = pol_tok_encode(g->tok, rendered, strlen(rendered), true, &g->prompt, &n, err, ERRCAP);
    free(rendered);
    g->n_prompt = (int)n;
    if (rc == 0 && n == 0) {
        text_fmt(err, ERRCAP, "the rendered conversation encodes to no tokens");
        rc = -1;
    }
    return rc;
}

static int chat_output(const gen_run *g, pol_chat_kind kind, bool as_json, char *err)
{
    char *text = gen_text(g, err);
    if (!text)
        return -1;
    json_t *calls = NULL, *errors = NULL;
    char *content = NULL;
    if (pol_chat_parse_tool_calls(kind, text, strlen(text), &calls, &errors, &content) < 0) {
        free(text);
        text_fmt(err, ERRCAP, "out of memory");
        return -1;
    }
    if (as_json) {
        json_t *j = json_pack("{s:o, s:o, s:O, s:O, s:o, s:o, s:s, s:s}", "text", text_json(text),
                              "content", text_json(content ? content : ""), "tool_calls", calls,
                              "tool_call_errors", errors, "ids", cli_ids_json(g->out.ids, g->out.n),
                              "prompt_ids", cli_ids_json(g->prompt, g->n_prompt), "finish_reason",
                              g->out.finish, "device", runner_device_name(g->r.device));
        cli_print_json(j);
        json_decref(j);
    } else {
        print_chat(text, calls, errors);
    }
    json_decref(calls);
    json_decref(errors);
    free(content);
    free(text);
    return 0;
}

int cmd_chat(int argc, char **argv)
{
    chat_args a = {0};
    opt_spec specs[] = {{"--model", true, &a.model, NULL},
                        {"--tokenizer", true, &a.tok_path, NULL},
                        {"--template", true, &a.template_name, NULL},
                        {"--tools", true, &a.tools_path, NULL},
                        {"--no-thinking", false, NULL, &a.no_thinking},
                        {"--max-new", true, &a.sa.max_new, NULL},
                        {"--temperature", true, &a.sa.temperature, NULL},
                        {"--top-k", true, &a.sa.top_k, NULL},
                        {"--top-p", true, &a.sa.top_p, NULL},
                        {"--seed", true, &a.sa.seed, NULL},
                        {"--device", true, &a.device, NULL},
                        {"--json", false, NULL, &a.as_json}};
    char help[8192], dev_help[512];
    device_help(dev_help, sizeof dev_help);
    text_fmt(help, sizeof help, CHAT_HELP, SAMPLING_HELP, dev_help);
    gen_run g = {0};
    int rc = parse_args_with_stops("chat", help, argc, argv, specs, sizeof specs / sizeof specs[0],
                                   g.stops, &g.o.n_stop);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (!a.model || !a.template_name)
        return cli_usage_error("chat", "missing --model or --template");
    int kind = pol_chat_kind_parse(a.template_name);
    if (kind < 0)
        return cli_usage_error("chat", "--template takes qwen3, qwen2.5 or llama3");
    runner_device dev;
    if (sampling_from("chat", &a.sa, &g.o.gen) != 0 || device_from("chat", a.device, &dev) != 0)
        return 2;
    char err[ERRCAP] = "";
    rc = gen_setup(&g, a.model, a.tok_path, true, dev, err) != 0 ||
                 chat_prompt(&g, &a, (pol_chat_kind)kind, err) != 0 || gen_run_once(&g, err) != 0 ||
                 chat_output(&g, (pol_chat_kind)kind, a.as_json, err) != 0
             ? 1
             : 0;
    if (rc)
        cli_fail("chat", err);
    gen_free(&g);
    return rc;
}
