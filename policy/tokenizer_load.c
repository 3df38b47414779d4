/* tokenizer_load: reads a Hugging Face tokenizer.json (byte-level BPE) into a pol_tok, refusing
 * every option that would change the ids and that the encoder does not implement, so a file is
 * either tokenized as HF tokenizes it or rejected with the option named. */
#include "policy/tokenizer.h"
#include "tokenizer_internal.h"

#include "util/fileio.h"
#include "util/strbuf.h"
#include "util/text.h"

#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOK_FILE_MAX ((size_t)1 << 30)

/* GPT-2's split, which a ByteLevel pre-tokenizer with use_regex applies. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- small JSON helpers ---------------------------------------------------------------------- */

/* A boolean field: def when absent or null; -1 (message filled) when of another type. */
int ptok_json_bool(json_t *obj, const char *key, bool def, bool *out, const char *where, char *err,
                   size_t errcap)
{
    json_t *v = json_object_get(obj, key);
    *out = def;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return text_fail(err, errcap, "%s.%s: expected true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

/* The "type" string of a component, or NULL (message filled). */
const char *ptok_json_type(json_t *obj, const char *where, char *err, size_t errcap)
{
    if (!json_is_object(obj)) {
        text_fail(err, errcap, "%s: expected an object", where);
        return NULL;
    }
    const char *type = json_string_value(json_object_get(obj, "type"));
    if (!type)
        text_fail(err, errcap, "%s: \"type\" is missing", where);
    return type;
}

int ptok_json_id(json_t *v, const char *where, const char *name, int32_t *out, char *err,
                 size_t errcap)
{
    if (!json_is_integer(v))
        return text_fail(err, errcap, "%s: '%s': the id must be an integer", where, name);
    json_int_t id = json_integer_value(v);
    if (id < 0 || id > PTOK_ID_MAX)
        return text_fail(err, errcap, "%s: '%s': id %lld is out of range (0..%d)", where, name,
                         (long long)id, PTOK_ID_MAX);
    *out = (int32_t)id;
    return 0;
}

/* ---- normalizer ------------------------------------------------------------------------------ */

static int load_normalizer(pol_tok *t, json_t *root, char *err, size_t errcap)
{
    json_t *n = json_object_get(root, "normalizer");
    if (!n || json_is_null(n))
        return 0;
    const char *type = ptok_json_type(n, "normalizer", err, errcap);
    if (!type)
        return -1;
    if (!strcmp(type, "NFC")) {
        t->nfc = true;
        return 0;
    }
    if (strcmp(type, "Sequence"))
        return text_fail(err, errcap, "normalizer: '%s' is not supported (only NFC)", type);
    json_t *list = json_object_get(n, "normalizers");
    if (!json_is_array(list))
        return text_fail(err, errcap, "normalizer.normalizers: expected an array");
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item)
    {
        const char *itype = ptok_json_type(item, "normalizer.normalizers[]", err, errcap);
        if (!itype)
            return -1;
        if (strcmp(itype, "NFC"))
            return text_fail(err, errcap,
                             "normalizer.normalizers[%zu]: '%s' is not supported (only NFC)", i,
                             itype);
        t->nfc = true;
    }
    return 0;
}

/* ---- pre-tokenizer --------------------------------------------------------------------------- */

/* Unicode White_Space, which Oniguruma's \s (what HF runs) matches; PCRE2's \s also takes
 * U+180E, so \s is spelt out to keep the pieces identical. */
#define WHITE_SPACE_LIST                                                                           \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"       \
    "\\x{202F}\\x{205F}\\x{3000}"

/* Copies an Oniguruma-style pattern with each \s (and \S outside a class) replaced by the
 * explicit list. Tracks character classes, including a leading ']' or '^' and POSIX
 * [:name:] items, so the list lands inside the class that holds it. */
static int spell_out_white_space(const char *p, size_t n, strbuf *out)
{
    bool in_class = false;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (p[i] == '\\' && i + 1 < n) {
            char e = p[++i];
            if (e == 's')
                rc = sb_puts(out, in_class ? WHITE_SPACE_LIST : "[" WHITE_SPACE_LIST "]");
            else if (e == 'S' && !in_class)
                rc = sb_puts(out, "[^" WHITE_SPACE_LIST "]");
            else
                rc = sb_append(out, p + i - 1, 2);
        } else if (!in_class && p[i] == '[') {
            size_t start = i;
            in_class = true;
            if (i + 1 < n && p[i + 1] == '^')
                i++;
            if (i + 1 < n && p[i + 1] == ']') /* a ']' first in a class is a literal */
                i++;
            rc = sb_append(out, p + start, i - start + 1);
        } else if (in_class && p[i] == '[' && i + 1 < n && p[i + 1] == ':') {
            const char *end = memmem(p + i + 2, n - i - 2, ":]", 2);
            size_t stop = end ? (size_t)(end - p) + 1 : i;
            rc = sb_append(out, p + i, stop - i + 1);
            i = stop;
        } else {
            if (in_class && p[i] == ']')
                in_class = false;
            rc = sb_putc(out, p[i]);
        }
    }
    return rc;
}

/* Compiles a Split pattern. The pattern as written is compiled first, so errors point into it;
 * the one kept is the spelt-out form. */
static pcre2_code *compile_split(const char *pattern, size_t len, bool literal, int *code,
                                 PCRE2_SIZE *at)
{
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, code, at, NULL);
    if (!re || literal)
        return re;
    pcre2_code_free(re);
    strbuf spelt = STRBUF_INIT;
    re = NULL;
    if (spell_out_white_space(pattern, len, &spelt) == 0)
        re = pcre2_compile((PCRE2_SPTR)spelt.data, spelt.len, opts, code, at, NULL);
    else
        *code = PCRE2_ERROR_NOMEMORY, *at = 0;
    sb_free(&spelt);
    return re;
}

static int add_split(pol_tok *t, const char *pattern, size_t len, bool literal, const char *where,
                     char *err, size_t errcap)
{
    pcre2_code **splits = realloc(t->splits, (t->nsplits + 1) * sizeof *splits);
    if (!splits)
        return text_fail(err, errcap, "%s: out of memory", where);
    t->splits = splits;
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = compile_split(pattern, len, literal, &code, &at);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return text_fail(err, errcap, "%s: the pattern does not compile at offset %zu: %s", where,
                         (size_t)at, (char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT, pcre2_match interprets */
    t->splits[t->nsplits++] = re;
    return 0;
}

/* Split {pattern: {Regex | String}, behavior: "Isolated", invert: false}. */
static int load_split(pol_tok *t, json_t *split, const char *where, char *err, size_t errcap)
{
    const char *behavior = json_string_value(json_object_get(split, "behavior"));
    if (!behavior || strcmp(behavior, "Isolated"))
        return text_fail(err, errcap, "%s.behavior: '%s' is not supported (only Isolated)", where,
                         behavior ? behavior : "(missing)");
    bool invert;
    if (ptok_json_bool(split, "invert", false, &invert, where, err, errcap) < 0)
        return -1;
    if (invert)
        return text_fail(err, errcap, "%s.invert: true is not supported", where);
    json_t *pattern = json_object_get(split, "pattern");
    json_t *regex = json_object_get(pattern, "Regex"),
           *literal = json_object_get(pattern, "String");
    json_t *p = regex ? regex : literal;
    if (!json_is_string(p))
        return text_fail(err, errcap, "%s.pattern: expected {\"Regex\": ...} or {\"String\": ...}",
                         where);
    return add_split(t, json_string_value(p), json_string_length(p), p == literal, where, err,
                     errcap);
}

/* ByteLevel: the byte mapping (always last), and GPT-2's split when use_regex is set. HF's
 * defaults for absent fields are add_prefix_space = use_regex = true. */
static int load_bytelevel(pol_tok *t, json_t *bl, const char *where, char *err, size_t errcap)
{
    bool prefix, use_regex;
    if (ptok_json_bool(bl, "add_prefix_space", true, &prefix, where, err, errcap) < 0 ||
        ptok_json_bool(bl, "use_regex", true, &use_regex, where, err, errcap) < 0)
        return -1;
    if (prefix)
        return text_fail(err, errcap, "%s.add_prefix_space: true is not supported", where);
    if (use_regex)
        return add_split(t, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, false, where, err, errcap);
    return 0;
}

static int load_pre_tokenizer(pol_tok *t, json_t *root, char *err, size_t errcap)
{
    json_t *pt = json_object_get(root, "pre_tokenizer");
    if (!pt || json_is_null(pt))
        return text_fail(err, errcap, "pre_tokenizer: missing (a byte-level BPE needs ByteLevel)");
    const char *type = ptok_json_type(pt, "pre_tokenizer", err, errcap);
    if (!type)
        return -1;
    if (!strcmp(type, "ByteLevel"))
        return load_bytelevel(t, pt, "pre_tokenizer", err, errcap);
    if (strcmp(type, "Sequence"))
        return text_fail(err, errcap,
                         "pre_tokenizer: '%s' is not supported (ByteLevel or a Sequence of "
                         "Split and ByteLevel)",
                         type);
    json_t *list = json_object_get(pt, "pretokenizers");
    size_t n = json_array_size(list), i;
    json_t *item;
    json_array_foreach(list, i, item)
    {
        char where[64];
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        const char *itype = ptok_json_type(item, where, err, errcap);
        if (!itype)
            return -1;
        bool last = i + 1 == n;
        if (!strcmp(itype, "Split") && !last) {
            if (load_split(t, item, where, err, errcap) < 0)
                return -1;
        } else if (!strcmp(itype, "ByteLevel") && last) {
            return load_bytelevel(t, item, where, err, errcap);
        } else {
            return text_fail(err, errcap,
                             "%s: '%s' is not supported here (Splits, then one ByteLevel "
                             "last)",
                             where, itype);
        }
    }
    return text_fail(err, errcap, "pre_tokenizer: the Sequence must end with ByteLevel");
}

static int check_decoder_and_options(json_t *root, char *err, size_t errcap)
{
    json_t *dec = json_object_get(root, "decoder");
    if (!dec || json_is_null(dec))
        return text_fail(err, errcap, "decoder: missing (ByteLevel expected)");
    const char *type = ptok_json_type(dec, "decoder", err, errcap);
    if (!type)
        return -1;
    if (strcmp(type, "ByteLevel"))
        return text_fail(err, errcap, "decoder: '%s' is not supported (only ByteLevel)", type);
    json_t *trunc = json_object_get(root, "truncation");
    if (trunc && !json_is_null(trunc))
        return text_fail(err, errcap, "truncation: not supported (null expected)");
    /* post_processor only adds tokens when asked to (add_special_tokens), which this API never
     * does: chat templates write their own BOS. padding only concerns batches. */
    return 0;
}

/* ---- the file -------------------------------------------------------------------------------- */

static int read_json(const char *path, json_t **root, char *err, size_t errcap)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = file_read_all(path, TOK_FILE_MAX, &buf, &len);
    if (rc < 0)
        return text_fail(err, errcap, "%s", rc == -EFBIG ? "larger than 1 GiB" : strerror(-rc));
    json_error_t jerr;
    *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    free(buf);
    if (!*root)
        return text_fail(err, errcap, "line %d: %s", jerr.line, jerr.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        return text_fail(err, errcap, "expected a JSON object");
    }
    return 0;
}

static int load_parts(pol_tok *t, json_t *root, char *err, size_t errcap)
{
    ptok_bytemap_init(&t->bytemap);
    if (ptok_load_model(t, root, err, errcap) < 0 || load_normalizer(t, root, err, errcap) < 0 ||
        load_pre_tokenizer(t, root, err, errcap) < 0 ||
        check_decoder_and_options(root, err, errcap) < 0 ||
        ptok_load_added(t, root, err, errcap) < 0)
        return -1;
    if (!t->nids)
        return text_fail(err, errcap, "model.vocab: empty");
    return ptok_build_decoder(t, err, errcap);
}

/* A directory stands for the tokenizer.json inside it. Symbolic links are followed (a Hugging
 * Face cache links its snapshot files to blobs), which file_read_all alone would refuse. */
static int resolve_path(const char *path, char *file, size_t cap)
{
    struct stat st;
    bool dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (!(dir ? text_fmt(file, cap, "%s/tokenizer.json", path) : text_fmt(file, cap, "%s", path)))
        return -1;
    char real[PATH_MAX];
    if (realpath(file, real) && strlen(real) < cap)
        strcpy(file, real);
    return 0;
}

int pol_tok_load(const char *path, pol_tok **out, char *err, size_t errcap)
{
    *out = NULL;
    char file[4096], msg[512];
    if (resolve_path(path, file, sizeof file) < 0)
        return text_fail(err, errcap, "%s: path too long", path);
    json_t *root = NULL;
    if (read_json(file, &root, msg, sizeof msg) < 0)
        return text_fail(err, errcap, "%s: %s", file, msg);
    pol_tok *t = calloc(1, sizeof *t);
    int rc = t ? load_parts(t, root, msg, sizeof msg) : text_fail(msg, sizeof msg, "out of memory");
    json_decref(root);
    if (rc < 0) {
        pol_tok_free(t);
        return text_fail(err, errcap, "%s: %s", file, msg);
    }
    *out = t;
    return 0;
}

void pol_tok_free(pol_tok *t)
{
    if (!t)
        return;
    ptok_strmap_deinit(&t->vocab);
    ptok_mergemap_deinit(&t->merges);
    for (size_t i = 0; i < t->nsplits; i++)
        pcre2_code_free(t->splits[i]);
    free(t->splits);
    for (size_t i = 0; i < t->nadded; i++) {
        if (t->added[i].match != t->added[i].content)
            free(t->added[i].match);
        free(t->added[i].content);
    }
    free(t->added);
    ptok_strmap_deinit(&t->added_by_content);
    free(t->arena);
    free(t->dec_bytes);
    free(t->dec_off);
    free(t->dec_flags);
    free(t);
}
