/* kgym-policy tokenize / detokenize: text -> ids and ids -> bytes through a tokenizer.json.
 * The chat-template code and the test suites call these, so their interface is kept stable:
 * ids travel as one JSON array (one per line with --jsonl), bytes as they are. */
#include "cmds.h"

#include "policy/tokenizer.h"
#include "util/strbuf.h"
#include "util/text.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char TOKENIZE_HELP[] =
    "usage: kgym-policy tokenize --tokenizer PATH [--no-special] [--text STR | --file F]\n"
    "                            [--jsonl] [--time]\n"
    "\n"
    "Encodes UTF-8 text with a Hugging Face tokenizer.json (byte-level BPE) and prints the token\n"
    "ids as one JSON array on stdout. No BOS or other token is added around the text.\n"
    "\n"
    "  --tokenizer PATH  tokenizer.json, or a model directory holding one\n"
    "  --text STR        the text to encode (default: standard input, read whole)\n"
    "  --file F          read the text from F\n"
    "  --no-special      encode special tokens written in the text (<|im_start|>, ...) as plain\n"
    "                    text instead of recognising them\n"
    "  --jsonl           the input holds one JSON string per line; prints one JSON array per line\n"
    "  --time            print the encoding time (loading excluded) and tokens/s on stderr\n"
    "\n"
    "exit status: 0 ok, 1 error (tokenizer refused, input unreadable or not UTF-8), 2 usage\n";

static const char DETOKENIZE_HELP[] =
    "usage: kgym-policy detokenize --tokenizer PATH [--skip-special] [--ids JSON | --file F]\n"
    "                              [--jsonl]\n"
    "\n"
    "Reads a JSON array of token ids (default: standard input) and writes the bytes they stand\n"
    "for to stdout as they are (a token may end in the middle of a UTF-8 character; nothing is\n"
    "added, not even a newline).\n"
    "\n"
    "  --tokenizer PATH  tokenizer.json, or a model directory holding one\n"
    "  --ids JSON        the ids, e.g. '[9707, 11, 1879]'\n"
    "  --file F          read the ids from F\n"
    "  --skip-special    leave special tokens out\n"
    "  --jsonl           the input holds one JSON array per line; prints one JSON string per line\n"
    "                    (there, each byte that is not valid UTF-8 becomes U+FFFD)\n"
    "\n"
    "exit status: 0 ok, 1 error (tokenizer refused, an id out of range, bad JSON), 2 usage\n";

typedef struct {
    const char *tokenizer, *text, *file;
    bool flag_a; /* tokenize: --no-special; detokenize: --skip-special */
    bool jsonl, time;
} tok_args;

/* ---- arguments and input --------------------------------------------------------------------- */

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "kgym-policy %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see kgym-policy %s --help)\n", cmd);
    return 2;
}

/* Parses argv; 0 to go on, 2 for a usage error, -1 when --help was printed. */
static int parse_args(const char *cmd, int argc, char **argv, const char *text_opt,
                      const char *flag_opt, bool timing_ok, tok_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(!strcmp(cmd, "tokenize") ? TOKENIZE_HELP : DETOKENIZE_HELP, stdout);
            return -1;
        } else if (!strcmp(o, flag_opt)) {
            a->flag_a = true;
        } else if (!strcmp(o, "--jsonl")) {
            a->jsonl = true;
        } else if (timing_ok && !strcmp(o, "--time")) {
            a->time = true;
        } else if (!strcmp(o, "--tokenizer") || !strcmp(o, text_opt) || !strcmp(o, "--file")) {
            if (!has_value)
                return usage_error(cmd, "%s needs a value", o);
            const char **slot = !strcmp(o, "--tokenizer") ? &a->tokenizer
                                : !strcmp(o, "--file")    ? &a->file
                                                          : &a->text;
            *slot = argv[++i];
        } else {
            return usage_error(cmd, "unknown argument '%s'", o);
        }
    }
    if (!a->tokenizer)
        return usage_error(cmd, "%s is required", "--tokenizer");
    if (a->text && a->file)
        return usage_error(cmd, "give %s or --file, not both", text_opt);
    return 0;
}

static int read_stream(FILE *f, strbuf *sb)
{
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        if (sb_append(sb, buf, n) < 0)
            return -1;
    return ferror(f) ? -1 : 0;
}

/* The input: --text/--ids as given, --file, or standard input. */
static int read_input(const char *cmd, const tok_args *a, strbuf *sb)
{
    if (a->text)
        return sb_puts(sb, a->text) < 0 ? -1 : 0;
    FILE *f = a->file ? fopen(a->file, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "kgym-policy %s: %s: %s\n", cmd, a->file, strerror(errno));
        return -1;
    }
    int rc = read_stream(f, sb);
    if (rc < 0)
        fprintf(stderr, "kgym-policy %s: %s: read failed\n", cmd, a->file ? a->file : "stdin");
    if (a->file)
        fclose(f);
    if (rc == 0 && !sb->data)
        rc = sb_puts(sb, ""); /* empty input: an empty text */
    return rc;
}

static pol_tok *load_tokenizer(const char *cmd, const char *path)
{
    char err[768];
    pol_tok *t;
    if (pol_tok_load(path, &t, err, sizeof err) < 0) {
        fprintf(stderr, "kgym-policy %s: %s\n", cmd, err);
        return NULL;
    }
    return t;
}

/* Calls fn on each line of buf (a final line without '\n' included, a final empty one not). */
static int for_each_line(char *buf, size_t len, int (*fn)(void *, char *, size_t, size_t),
                         void *ctx)
{
    size_t start = 0, lineno = 1;
    while (start < len) {
        char *nl = memchr(buf + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - buf) : len;
        if (fn(ctx, buf + start, end - start, lineno++) < 0)
            return -1;
        start = end + 1;
    }
    return 0;
}

/* ---- tokenize -------------------------------------------------------------------------------- */

typedef struct {
    const pol_tok *t;
    bool allow_special;
    strbuf out;
    size_t tokens, bytes;
    double ms;
} enc_run;

static int put_ids(strbuf *out, const int32_t *ids, size_t n)
{
    if (sb_putc(out, '[') < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char num[16];
        int k = snprintf(num, sizeof num, i ? ",%d" : "%d", ids[i]);
        if (sb_append(out, num, (size_t)k) < 0)
            return -1;
    }
    return sb_puts(out, "]\n");
}

static int encode_one(enc_run *r, const char *text, size_t len, const char *where)
{
    char err[512];
    int32_t *ids;
    size_t n;
    double t0 = text_mono_ms();
    int rc = pol_tok_encode(r->t, text, len, r->allow_special, &ids, &n, err, sizeof err);
    r->ms += text_mono_ms() - t0;
    if (rc < 0) {
        fprintf(stderr, "kgym-policy tokenize: %s%s\n", where, err);
        return -1;
    }
    r->tokens += n;
    r->bytes += len;
    rc = put_ids(&r->out, ids, n);
    free(ids);
    if (rc < 0)
        fprintf(stderr, "kgym-policy tokenize: out of memory\n");
    return rc;
}

static int encode_line(void *ctx, char *line, size_t len, size_t lineno)
{
    char where[48];
    snprintf(where, sizeof where, "line %zu: ", lineno);
    json_error_t jerr;
    json_t *s = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!json_is_string(s)) {
        fprintf(stderr, "kgym-policy tokenize: %sexpected one JSON string%s%s\n", where,
                s ? "" : ": ", s ? "" : jerr.text);
        json_decref(s);
        return -1;
    }
    int rc = encode_one(ctx, json_string_value(s), json_string_length(s), where);
    json_decref(s);
    return rc;
}

static int write_all(const char *bytes, size_t len)
{
    if (fwrite(bytes, 1, len, stdout) != len || fflush(stdout) != 0) {
        fprintf(stderr, "kgym-policy: writing stdout failed\n");
        return -1;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    tok_args a;
    int rc = parse_args("tokenize", argc, argv, "--text", "--no-special", true, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    strbuf in = STRBUF_INIT;
    pol_tok *t = NULL;
    enc_run r = {.allow_special = !a.flag_a, .out = STRBUF_INIT};
    rc = 1;
    if (read_input("tokenize", &a, &in) == 0 && (t = load_tokenizer("tokenize", a.tokenizer))) {
        r.t = t;
        int ok = a.jsonl ? for_each_line(in.data, in.len, encode_line, &r)
                         : encode_one(&r, in.data, in.len, "");
        if (ok == 0 && write_all(r.out.data ? r.out.data : "", r.out.len) == 0)
            rc = 0;
    }
    if (rc == 0 && a.time)
        fprintf(stderr,
                "kgym-policy tokenize: %zu tokens from %zu bytes in %.3f s (%.0f tokens/s)\n",
                r.tokens, r.bytes, r.ms / 1e3, r.ms > 0 ? r.tokens / (r.ms / 1e3) : 0.0);
    pol_tok_free(t);
    sb_free(&in);
    sb_free(&r.out);
    return rc;
}

/* ---- detokenize ------------------------------------------------------------------------------ */

typedef struct {
    const pol_tok *t;
    bool skip_special, jsonl;
    strbuf out;
} dec_run;

/* A JSON array of integers into a new array. */
static int parse_ids(json_t *arr, int32_t **ids, size_t *n, char *err, size_t errcap)
{
    if (!json_is_array(arr))
        return text_fmt(err, errcap, "expected a JSON array of token ids"), -1;
    *n = json_array_size(arr);
    *ids = malloc((*n ? *n : 1) * sizeof **ids);
    if (!*ids)
        return text_fmt(err, errcap, "out of memory"), -1;
    for (size_t i = 0; i < *n; i++) {
        json_t *v = json_array_get(arr, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || id < INT32_MIN || id > INT32_MAX) {
            free(*ids);
            *ids = NULL;
            return text_fmt(err, errcap, "element %zu is not a token id", i), -1;
        }
        (*ids)[i] = (int32_t)id;
    }
    return 0;
}

/* A decoded text as one JSON string line (invalid UTF-8 bytes replaced). */
static int put_json_string(strbuf *out, const char *bytes, size_t len)
{
    char *clean = text_is_utf8(bytes, len) ? NULL : text_sanitize_utf8(bytes, len);
    json_t *s = clean ? json_string(clean) : json_stringn(bytes, len);
    char *dump = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    int rc = dump && sb_puts(out, dump) == 0 && sb_putc(out, '\n') == 0 ? 0 : -1;
    free(dump);
    json_decref(s);
    free(clean);
    return rc;
}

static int decode_one(dec_run *r, const char *json, size_t len, const char *where)
{
    char err[512];
    json_error_t jerr;
    json_t *arr = json_loadb(json, len, JSON_DECODE_ANY, &jerr);
    int32_t *ids = NULL;
    size_t n = 0, outlen = 0;
    char *bytes = NULL;
    int rc = -1;
    if (!arr)
        text_fmt(err, sizeof err, "bad JSON: %s", jerr.text);
    else if (parse_ids(arr, &ids, &n, err, sizeof err) == 0 &&
             pol_tok_decode(r->t, ids, n, r->skip_special, &bytes, &outlen, err, sizeof err) == 0)
        rc = r->jsonl ? put_json_string(&r->out, bytes, outlen) : sb_append(&r->out, bytes, outlen);
    else
        rc = -2;
    if (rc == -1 && arr)
        text_fmt(err, sizeof err, "out of memory");
    if (rc < 0)
        fprintf(stderr, "kgym-policy detokenize: %s%s\n", where, err);
    json_decref(arr);
    free(ids);
    free(bytes);
    return rc < 0 ? -1 : 0;
}

static int decode_line(void *ctx, char *line, size_t len, size_t lineno)
{
    char where[48];
    snprintf(where, sizeof where, "line %zu: ", lineno);
    return decode_one(ctx, line, len, where);
}

int cmd_detokenize(int argc, char **argv)
{
    tok_args a;
    int rc = parse_args("detokenize", argc, argv, "--ids", "--skip-special", false, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    strbuf in = STRBUF_INIT;
    pol_tok *t = NULL;
    dec_run r = {.skip_special = a.flag_a, .jsonl = a.jsonl, .out = STRBUF_INIT};
    rc = 1;
    if (read_input("detokenize", &a, &in) == 0 && (t = load_tokenizer("detokenize", a.tokenizer))) {
        r.t = t;
        int ok = a.jsonl ? for_each_line(in.data, in.len, decode_line, &r)
                         : decode_one(&r, in.data, in.len, "");
        if (ok == 0 && write_all(r.out.data ? r.out.data : "", r.out.len) == 0)
            rc = 0;
    }
    pol_tok_free(t);
    sb_free(&in);
    sb_free(&r.out);
    return rc;
}
