/* config: a Hugging Face config.json to pol_config, with transformers' per-architecture defaults
 * (checked against transformers 5.x: Qwen2Config, Qwen3Config, LlamaConfig and the RoPE
 * standardisation of modeling_rope_utils). Features the policy does not implement (sliding
 * window, other RoPE scalings, MLP biases, other activations) are refused by name rather than
 * silently read as something else. */
#include "policy/config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "policy/hf_file.h"
#include "util/text.h"

/* Bounds that keep every size product the model code forms (vocab x hidden, heads x head_dim, ...)
 * far from overflow; real checkpoints are orders of magnitude below them. */
#define CFG_MAX_DIM (1 << 20)
#define CFG_MAX_VOCAB (1 << 24)
#define CFG_MAX_COUNT (1 << 16)
#define CFG_MAX_FILE (16u << 20)

/* Where a message is going: the file name that starts it, and the caller's buffer. */
typedef struct cfg_ctx {
    const json_t *root;
    const char *file;
    char *err;
    size_t errcap;
} cfg_ctx;

__attribute__((format(printf, 2, 3))) static int cfg_fail(const cfg_ctx *cx, const char *fmt, ...)
{
    if (cx->err && cx->errcap) {
        int n = snprintf(cx->err, cx->errcap, "%s: ", cx->file);
        if (n >= 0 && (size_t)n < cx->errcap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(cx->err + n, cx->errcap - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

const char *pol_arch_name(pol_arch a)
{
    switch (a) {
    case POL_ARCH_QWEN2:
        return "qwen2";
    case POL_ARCH_QWEN3:
        return "qwen3";
    case POL_ARCH_LLAMA:
        return "llama";
    }
    return "unknown";
}

/* ---- typed field readers: absent or null takes the default ----------------------------------- */

static bool absent(const json_t *v)
{
    return v == NULL || json_is_null(v);
}

/* An integer field in [lo, hi]; `required` makes absence an error. */
static int get_int(const cfg_ctx *cx, const json_t *obj, const char *key, bool required,
                   long long dflt, long long lo, long long hi, int *out)
{
    const json_t *v = json_object_get(obj, key);
    long long x = dflt;
    if (absent(v)) {
        if (required)
            return cfg_fail(cx, "missing required field '%s'", key);
    } else if (!json_is_integer(v)) {
        return cfg_fail(cx, "field '%s' is not an integer", key);
    } else {
        x = json_integer_value(v);
    }
    if (x < lo || x > hi)
        return cfg_fail(cx, "field '%s' = %lld is out of range [%lld, %lld]%s", key, x, lo, hi,
                        absent(v) ? " (the architecture's default)" : "");
    *out = (int)x;
    return 0;
}

/* A number (integer or real) that must be > 0. */
static int get_positive(const cfg_ctx *cx, const json_t *obj, const char *key, double dflt,
                        double *out)
{
    const json_t *v = json_object_get(obj, key);
    double x = dflt;
    if (!absent(v)) {
        if (!json_is_number(v))
            return cfg_fail(cx, "field '%s' is not a number", key);
        x = json_number_value(v);
    }
    if (!(x > 0) || !isfinite(x))
        return cfg_fail(cx, "field '%s' = %g must be a positive number", key, x);
    *out = x;
    return 0;
}

static int get_bool(const cfg_ctx *cx, const json_t *obj, const char *key, bool dflt, bool *out)
{
    const json_t *v = json_object_get(obj, key);
    if (absent(v))
        *out = dflt;
    else if (json_is_boolean(v))
        *out = json_is_true(v);
    else
        return cfg_fail(cx, "field '%s' is not true or false", key);
    return 0;
}

/* ---- the pieces of a config ------------------------------------------------------------------ */

static int parse_arch(const cfg_ctx *cx, pol_arch *arch)
{
    const json_t *v = json_object_get(cx->root, "model_type");
    if (absent(v))
        return cfg_fail(cx, "missing required field 'model_type'");
    if (!json_is_string(v))
        return cfg_fail(cx, "field 'model_type' is not a string");
    const char *s = json_string_value(v);
    if (strcmp(s, "qwen2") == 0)
        *arch = POL_ARCH_QWEN2;
    else if (strcmp(s, "qwen3") == 0)
        *arch = POL_ARCH_QWEN3;
    else if (strcmp(s, "llama") == 0)
        *arch = POL_ARCH_LLAMA;
    else
        return cfg_fail(cx, "model_type '%s' is not supported (qwen2, qwen3, llama)", s);
    return 0;
}

/* The sizes. HF defaults: num_key_value_heads 32 for Qwen2/Qwen3 (their class default) but the
 * head count for Llama (and when null); head_dim 128 for Qwen3, hidden / heads otherwise. */
static int parse_sizes(const cfg_ctx *cx, pol_config *c)
{
    const json_t *r = cx->root;
    if (get_int(cx, r, "vocab_size", true, 0, 1, CFG_MAX_VOCAB, &c->vocab_size) < 0 ||
        get_int(cx, r, "hidden_size", true, 0, 1, CFG_MAX_DIM, &c->hidden) < 0 ||
        get_int(cx, r, "intermediate_size", true, 0, 1, CFG_MAX_DIM, &c->ffn) < 0 ||
        get_int(cx, r, "num_hidden_layers", true, 0, 1, CFG_MAX_COUNT, &c->n_layers) < 0 ||
        get_int(cx, r, "num_attention_heads", true, 0, 1, CFG_MAX_COUNT, &c->n_heads) < 0)
        return -1;
    const json_t *kv = json_object_get(r, "num_key_value_heads");
    int kv_default = c->arch != POL_ARCH_LLAMA && kv == NULL ? 32 : c->n_heads;
    if (get_int(cx, r, "num_key_value_heads", false, kv_default, 1, CFG_MAX_COUNT, &c->n_kv_heads) <
        0)
        return -1;
    if (c->n_heads % c->n_kv_heads != 0)
        return cfg_fail(cx, "num_key_value_heads (%d%s) does not divide num_attention_heads (%d)",
                        c->n_kv_heads, kv == NULL ? ", HF's default" : "", c->n_heads);
    bool explicit_hd = !absent(json_object_get(r, "head_dim"));
    if (!explicit_hd && c->arch != POL_ARCH_QWEN3 && c->hidden % c->n_heads != 0)
        return cfg_fail(cx, "hidden_size (%d) is not a multiple of num_attention_heads (%d)",
                        c->hidden, c->n_heads);
    int hd_default = c->arch == POL_ARCH_QWEN3 ? 128 : c->hidden / c->n_heads;
    if (get_int(cx, r, "head_dim", false, hd_default, 1, CFG_MAX_DIM, &c->head_dim) < 0)
        return -1;
    if (c->head_dim % 2 != 0)
        return cfg_fail(cx, "head_dim (%d) is odd: RoPE rotates pairs", c->head_dim);
    if ((long long)c->n_heads * c->head_dim > CFG_MAX_DIM)
        return cfg_fail(cx, "num_attention_heads x head_dim (%lld) is too large",
                        (long long)c->n_heads * c->head_dim);
    return get_int(cx, r, "max_position_embeddings", false,
                   c->arch == POL_ARCH_LLAMA ? 2048 : 32768, 1, INT_MAX, &c->max_pos);
}

/* The llama3 scaling's four parameters (original_max_position_embeddings defaults to
 * max_position_embeddings, as HF's standardisation does). */
static int parse_llama3(const cfg_ctx *cx, const json_t *rp, pol_config *c)
{
    static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor"};
    for (size_t i = 0; i < 3; i++)
        if (absent(json_object_get(rp, need[i])))
            return cfg_fail(cx, "llama3 rope scaling: missing '%s'", need[i]);
    if (get_positive(cx, rp, "factor", 0, &c->rope_factor) < 0 ||
        get_positive(cx, rp, "low_freq_factor", 0, &c->rope_low_freq) < 0 ||
        get_positive(cx, rp, "high_freq_factor", 0, &c->rope_high_freq) < 0 ||
        get_int(cx, rp, "original_max_position_embeddings", false, c->max_pos, 1, INT_MAX,
                &c->rope_orig_max_pos) < 0)
        return -1;
    if (c->rope_high_freq <= c->rope_low_freq)
        return cfg_fail(cx,
                        "llama3 rope scaling: high_freq_factor (%g) must exceed low_freq_factor "
                        "(%g)",
                        c->rope_high_freq, c->rope_low_freq);
    c->rope_type = POL_ROPE_LLAMA3;
    return 0;
}

static int check_partial_rotary(const cfg_ctx *cx, const json_t *obj)
{
    const json_t *v = json_object_get(obj, "partial_rotary_factor");
    if (!absent(v) && !(json_is_number(v) && json_number_value(v) == 1.0))
        return cfg_fail(cx, "partial_rotary_factor other than 1 is not supported");
    return 0;
}

/* RoPE: "rope_scaling" (transformers 4) wins over "rope_parameters" (transformers 5), as in
 * HF; rope_theta comes from that object, else the top level, else 10000. */
static int parse_rope(const cfg_ctx *cx, pol_config *c)
{
    const json_t *rp = json_object_get(cx->root, "rope_scaling");
    const char *which = "rope_scaling";
    if (absent(rp)) {
        rp = json_object_get(cx->root, "rope_parameters");
        which = "rope_parameters";
    }
    if (!absent(rp) && !json_is_object(rp))
        return cfg_fail(cx, "field '%s' is not an object", which);
    c->rope_type = POL_ROPE_DEFAULT;
    c->rope_theta = 10000.0;
    if (get_positive(cx, cx->root, "rope_theta", 10000.0, &c->rope_theta) < 0 ||
        check_partial_rotary(cx, cx->root) < 0)
        return -1;
    if (absent(rp))
        return 0;
    if (get_positive(cx, rp, "rope_theta", c->rope_theta, &c->rope_theta) < 0 ||
        check_partial_rotary(cx, rp) < 0)
        return -1;
    const json_t *t = json_object_get(rp, "rope_type");
    if (absent(t))
        t = json_object_get(rp, "type");
    const char *type = absent(t) ? "default" : json_string_value(t);
    if (!type)
        return cfg_fail(cx, "%s: 'rope_type' is not a string", which);
    if (strcmp(type, "default") == 0)
        return 0;
    if (strcmp(type, "llama3") == 0)
        return parse_llama3(cx, rp, c);
    return cfg_fail(cx, "%s: rope type '%s' is not supported (default, llama3)", which, type);
}

static int parse_token_id(const cfg_ctx *cx, const char *key, const json_t *v, int *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX)
        return cfg_fail(cx, "field '%s' holds something other than a token id", key);
    *out = (int)json_integer_value(v);
    return 0;
}

/* bos_token_id / eos_token_id: an id, a list of ids or null. Llama's defaults (when the key is
 * absent, not null) are 1 and 2; Qwen has none. */
static int parse_special_ids(const cfg_ctx *cx, pol_config *c)
{
    const json_t *bos = json_object_get(cx->root, "bos_token_id");
    const json_t *eos = json_object_get(cx->root, "eos_token_id");
    bool llama = c->arch == POL_ARCH_LLAMA;
    c->bos_id = bos == NULL && llama ? 1 : -1;
    c->n_eos = 0;
    if (eos == NULL && llama)
        c->eos_ids[c->n_eos++] = 2;
    if (json_is_array(bos))
        bos = json_array_get(bos, 0); /* a list: its first id (none when empty) */
    if (!absent(bos) && parse_token_id(cx, "bos_token_id", bos, &c->bos_id) < 0)
        return -1;
    if (absent(eos))
        return 0;
    if (!json_is_array(eos))
        return parse_token_id(cx, "eos_token_id", eos, &c->eos_ids[c->n_eos++]);
    if (json_array_size(eos) > POL_MAX_EOS)
        return cfg_fail(cx, "field 'eos_token_id' lists %zu ids (at most %d)", json_array_size(eos),
                        POL_MAX_EOS);
    for (size_t i = 0; i < json_array_size(eos); i++)
        if (parse_token_id(cx, "eos_token_id", json_array_get(eos, i), &c->eos_ids[c->n_eos++]) < 0)
            return -1;
    return 0;
}

/* Things HF models of these families can be configured to do that the policy does not do. */
static int check_unsupported(const cfg_ctx *cx)
{
    const json_t *r = cx->root;
    const json_t *act = json_object_get(r, "hidden_act");
    if (!absent(act) && !(json_is_string(act) && strcmp(json_string_value(act), "silu") == 0))
        return cfg_fail(cx, "hidden_act other than \"silu\" is not supported");
    bool flag = false;
    if (get_bool(cx, r, "mlp_bias", false, &flag) < 0)
        return -1;
    if (flag)
        return cfg_fail(cx, "mlp_bias = true is not supported");
    if (get_bool(cx, r, "use_sliding_window", false, &flag) < 0)
        return -1;
    if (flag)
        return cfg_fail(cx, "use_sliding_window = true is not supported");
    const json_t *lt = json_object_get(r, "layer_types");
    for (size_t i = 0; json_is_array(lt) && i < json_array_size(lt); i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        if (!s || strcmp(s, "full_attention") != 0)
            return cfg_fail(cx, "layer_types[%zu] is not \"full_attention\": not supported", i);
    }
    return 0;
}

/* transformers 5 writes "dtype", older versions "torch_dtype". */
static int parse_dtype(const cfg_ctx *cx, pol_config *c)
{
    const char *key = "dtype";
    const json_t *v = json_object_get(cx->root, key);
    if (absent(v)) {
        key = "torch_dtype";
        v = json_object_get(cx->root, key);
    }
    c->torch_dtype[0] = '\0';
    if (absent(v))
        return 0;
    if (!json_is_string(v) ||
        !text_fmt(c->torch_dtype, sizeof c->torch_dtype, "%s", json_string_value(v))) {
        c->torch_dtype[0] = '\0';
        return cfg_fail(cx, "field '%s' is not a dtype name", key);
    }
    return 0;
}

static int parse_root(const cfg_ctx *cx, pol_config *c)
{
    const json_t *r = cx->root;
    memset(c, 0, sizeof *c);
    if (parse_arch(cx, &c->arch) < 0 || check_unsupported(cx) < 0 || parse_sizes(cx, c) < 0)
        return -1;
    double eps;
    if (get_positive(cx, r, "rms_norm_eps", 1e-6, &eps) < 0)
        return -1;
    c->rms_eps = (float)eps;
    if (parse_rope(cx, c) < 0 ||
        get_bool(cx, r, "tie_word_embeddings", false, &c->tie_embeddings) < 0 ||
        get_bool(cx, r, "attention_bias", false, &c->attn_bias) < 0)
        return -1;
    if (c->arch == POL_ARCH_QWEN2)
        c->attn_bias = true; /* Qwen2's q/k/v always have biases, whatever the field says */
    c->qk_norm = c->arch == POL_ARCH_QWEN3;
    return parse_special_ids(cx, c) < 0 ? -1 : parse_dtype(cx, c);
}

static int parse_labelled(const char *json_text, const char *file, pol_config *c, char *err,
                          size_t errcap)
{
    cfg_ctx cx = {.root = NULL, .file = file, .err = err, .errcap = errcap};
    if (!json_text || !c)
        return cfg_fail(&cx, "no JSON text");
    json_error_t jerr;
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cfg_fail(&cx, "not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                        jerr.column);
    cx.root = root;
    int rc = json_is_object(root) ? parse_root(&cx, c) : cfg_fail(&cx, "not a JSON object");
    json_decref(root);
    return rc;
}

int pol_config_parse(const char *json_text, pol_config *c, char *err, size_t errcap)
{
    return parse_labelled(json_text, "config.json", c, err, errcap);
}

int pol_config_load(const char *path, pol_config *c, char *err, size_t errcap)
{
    cfg_ctx cx = {.root = NULL, .file = path ? path : "(null)", .err = err, .errcap = errcap};
    if (!path || !c)
        return cfg_fail(&cx, "no path");
    char file[4096];
    struct stat sb;
    bool is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (!text_fmt(file, sizeof file, "%s%s", path, is_dir ? "/config.json" : ""))
        return cfg_fail(&cx, "path too long");
    char *text = NULL;
    size_t len = 0;
    int rc = pol_hf_read_file(file, CFG_MAX_FILE, &text, &len);
    if (rc != 0) {
        cx.file = file;
        return cfg_fail(&cx, "%s", rc == -EFBIG ? "too large for a config" : strerror(-rc));
    }
    rc = parse_labelled(text, file, c, err, errcap);
    free(text);
    return rc;
}
