/* Saving a pol_model as an HF folder (config.json, generation_config.json, model.safetensors)
 * that transformers' from_pretrained loads, and dumping a parameter-shaped buffer (gradients,
 * optimizer moments) under the weights' names. */
#include "policy/model.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/text.h"

/* mkdir -p for one path. */
static int make_dirs(const char *dir, char *err, size_t errcap)
{
    char path[4096];
    if (!text_fmt(path, sizeof path, "%s", dir)) {
        text_fmt(err, errcap, "%s: path too long", dir);
        return -1;
    }
    for (char *p = path + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            text_fmt(err, errcap, "%s: mkdir: %s", path, strerror(errno));
            return -1;
        }
        *p = c;
        if (c == '\0')
            return 0;
    }
}

/* Writes text to dir/name through a temporary file and a rename. */
static int write_text_atomic(const char *dir, const char *name, const char *text, char *err,
                             size_t errcap)
{
    char path[4096], tmp[4200];
    if (!text_fmt(path, sizeof path, "%s/%s", dir, name) ||
        !text_fmt(tmp, sizeof tmp, "%s.tmp", path)) {
        text_fmt(err, errcap, "%s: path too long", dir);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    size_t len = strlen(text);
    bool ok = f && fwrite(text, 1, len, f) == len;
    ok = f && fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok || rename(tmp, path) != 0) {
        text_fmt(err, errcap, "%s: write: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static json_t *rope_scaling_json(const pol_config *c)
{
    return json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor", c->rope_factor,
                     "low_freq_factor", c->rope_low_freq, "high_freq_factor", c->rope_high_freq,
                     "original_max_position_embeddings", c->rope_orig_max_pos);
}

static const char *arch_class(pol_arch a)
{
    return a == POL_ARCH_QWEN2   ? "Qwen2ForCausalLM"
           : a == POL_ARCH_QWEN3 ? "Qwen3ForCausalLM"
                                 : "LlamaForCausalLM";
}

/* A config.json for a model built in memory (no source text to copy). */
static char *config_from_cfg(const pol_config *c)
{
    json_t *eos = json_array();
    for (int i = 0; eos && i < c->n_eos; i++)
        json_array_append_new(eos, json_integer(c->eos_ids[i]));
    json_t *j = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:b, s:s, s:o}",
        "architectures", arch_class(c->arch), "model_type", pol_arch_name(c->arch), "vocab_size",
        c->vocab_size, "hidden_size", c->hidden, "intermediate_size", c->ffn, "num_hidden_layers",
        c->n_layers, "num_attention_heads", c->n_heads, "num_key_value_heads", c->n_kv_heads,
        "head_dim", c->head_dim, "max_position_embeddings", c->max_pos, "rms_norm_eps",
        (double)c->rms_eps, "rope_theta", c->rope_theta, "tie_word_embeddings", c->tie_embeddings,
        "attention_bias", c->attn_bias, "torch_dtype", "float32", "eos_token_id",
        eos ? eos : json_null());
    if (!j)
        return NULL;
    if (c->bos_id >= 0)
        json_object_set_new(j, "bos_token_id", json_integer(c->bos_id));
    if (c->rope_type == POL_ROPE_LLAMA3)
        json_object_set_new(j, "rope_scaling", rope_scaling_json(c));
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    return s;
}

static int save_configs(const pol_model *m, const char *dir, char *err, size_t errcap)
{
    char *made = m->config_json ? NULL : config_from_cfg(&m->cfg);
    const char *text = m->config_json ? m->config_json : made;
    if (!text) {
        text_fmt(err, errcap, "%s: out of memory for config.json", dir);
        return -1;
    }
    int rc = write_text_atomic(dir, "config.json", text, err, errcap);
    free(made);
    if (rc == 0 && m->generation_json)
        rc = write_text_atomic(dir, "generation_config.json", m->generation_json, err, errcap);
    return rc;
}

/* fp32 -> bf16, rounding to nearest even as torch does; NaN stays a (quiet) NaN. */
static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void fill_entry(pol_st_entry *e, const pol_param_info *p, pol_dtype dt, const void *data)
{
    memset(e, 0, sizeof *e);
    e->name = p->name;
    e->dtype = dt;
    e->ndim = p->ndim;
    e->shape[0] = p->shape[0];
    e->shape[1] = p->shape[1];
    e->data = data;
}

static const char *const PT_METADATA[] = {"format", "pt", NULL};

int pol_model_save(const pol_model *m, const char *dir, pol_dtype dtype, char *err, size_t errcap)
{
    if (dtype != POL_DT_F32 && dtype != POL_DT_BF16) {
        text_fmt(err, errcap, "%s: saving as %s is not supported (F32 or BF16)", dir,
                 pol_dtype_name(dtype) ? pol_dtype_name(dtype) : "?");
        return -1;
    }
    if (make_dirs(dir, err, errcap) != 0 || save_configs(m, dir, err, errcap) != 0)
        return -1;
    pol_st_entry *entries = calloc(m->n_tensors, sizeof *entries);
    uint16_t *half = dtype == POL_DT_BF16 ? malloc(m->w.n * sizeof *half) : NULL;
    if (!entries || (dtype == POL_DT_BF16 && !half)) {
        free(entries);
        text_fmt(err, errcap, "%s: out of memory", dir);
        return -1;
    }
    for (size_t i = 0; half && i < m->w.n; i++)
        half[i] = f32_to_bf16(m->w.data[i]);
    for (size_t i = 0; i < m->n_tensors; i++) {
        const pol_param_info *p = &m->tensors[i];
        const void *data = half ? (const void *)(half + p->offset) : m->w.data + p->offset;
        fill_entry(&entries[i], p, dtype, data);
    }
    char path[4096], index[4096];
    int rc = -1;
    if (text_fmt(path, sizeof path, "%s/model.safetensors", dir) &&
        text_fmt(index, sizeof index, "%s/model.safetensors.index.json", dir))
        rc = pol_st_write(path, entries, m->n_tensors, PT_METADATA, err, errcap);
    else
        text_fmt(err, errcap, "%s: path too long", dir);
    /* a sharded checkpoint saved here before would shadow the new file */
    if (rc == 0 && unlink(index) != 0 && errno != ENOENT) {
        text_fmt(err, errcap, "%s: cannot remove the stale index: %s", index, strerror(errno));
        rc = -1;
    }
    free(entries);
    free(half);
    return rc;
}

int pol_model_save_params(const pol_model *m, const pol_params *p, const char *path,
                          const pol_st_entry *extra, size_t n_extra, char *err, size_t errcap)
{
    size_t n = m->n_tensors + n_extra;
    pol_st_entry *entries = calloc(n ? n : 1, sizeof *entries);
    if (!entries) {
        text_fmt(err, errcap, "%s: out of memory", path);
        return -1;
    }
    for (size_t i = 0; i < m->n_tensors; i++)
        fill_entry(&entries[i], &m->tensors[i], POL_DT_F32, p->data + m->tensors[i].offset);
    for (size_t i = 0; i < n_extra; i++)
        entries[m->n_tensors + i] = extra[i];
    int rc = pol_st_write(path, entries, n, PT_METADATA, err, errcap);
    free(entries);
    return rc;
}
