/* Loading an HF folder into a pol_model: config.json through pol_config_load, every tensor of the
 * table through the safetensors reader, converted to fp32. Strict: a tensor the table expects must
 * be there with the right shape; a tensor the table does not know is an error unless it is known
 * to change nothing. */
#include "policy/model.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/hf_file.h"
#include "util/text.h"

#define MAX_JSON_FILE (16u << 20)

/* Reads dir/name into *out; a missing file leaves *out NULL and is no error unless required. */
static int read_side_file(const char *dir, const char *name, bool required, char **out, char *err,
                          size_t errcap)
{
    char path[4096];
    size_t len;
    *out = NULL;
    if (!text_fmt(path, sizeof path, "%s/%s", dir, name)) {
        text_fmt(err, errcap, "%s: path too long", dir);
        return -1;
    }
    int rc = pol_hf_read_file(path, MAX_JSON_FILE, out, &len);
    if (rc == 0 || (rc == -ENOENT && !required))
        return 0;
    text_fmt(err, errcap, "%s: %s", path, strerror(-rc));
    return -1;
}

/* Tensors a checkpoint may carry that the model does not need and HF ignores too. */
static bool harmless_extra(const pol_config *cfg, pol_head head, const char *name)
{
    size_t n = strlen(name);
    static const char inv_freq[] = "rotary_emb.inv_freq";
    if (n >= sizeof inv_freq - 1 && !strcmp(name + n - (sizeof inv_freq - 1), inv_freq))
        return true;
    /* a tied model that also stored its LM head: HF ties it to the embedding on load */
    return head == POL_HEAD_LM && cfg->tie_embeddings && !strcmp(name, "lm_head.weight");
}

static void shape_str(char *out, size_t cap, int ndim, const int64_t *shape)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < ndim && used < cap; i++) {
        int w = snprintf(out + used, cap - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
        used += w > 0 ? (size_t)w : 0;
    }
}

/* Whether the checkpoint tensor t can fill table entry p; err names the problem. */
static int check_tensor(const pol_config *cfg, const pol_tensor *t, const pol_param_info *p,
                        const char *where, char *err, size_t errcap)
{
    char want[64], got[64];
    shape_str(want, sizeof want, p->ndim, p->shape);
    if (!t) {
        text_fmt(err, errcap, "%s: missing tensor '%s' (expected shape [%s] for this %s config)",
                 where, p->name, want, pol_arch_name(cfg->arch));
        return -1;
    }
    bool same = t->ndim == p->ndim;
    for (int i = 0; same && i < p->ndim; i++)
        same = t->shape[i] == p->shape[i];
    if (!same) {
        shape_str(got, sizeof got, t->ndim, t->shape);
        text_fmt(err, errcap, "%s: tensor '%s' has shape [%s], the config needs [%s]", t->file,
                 p->name, got, want);
        return -1;
    }
    if (t->dtype != POL_DT_F32 && t->dtype != POL_DT_BF16 && t->dtype != POL_DT_F16) {
        text_fmt(err, errcap, "%s: tensor '%s' has dtype %s (F32, BF16 or F16 needed)", t->file,
                 p->name, pol_dtype_name(t->dtype) ? pol_dtype_name(t->dtype) : "?");
        return -1;
    }
    return 0;
}

static int check_all(const pol_config *cfg, pol_head head, const pol_param_info *tensors, size_t n,
                     const pol_st *st, const char *where, char *err, size_t errcap)
{
    for (size_t i = 0; i < n; i++)
        if (check_tensor(cfg, pol_st_find(st, tensors[i].name), &tensors[i], where, err, errcap) !=
            0)
            return -1;
    for (size_t i = 0; i < pol_st_count(st); i++) {
        const pol_tensor *t = pol_st_at(st, i);
        bool known = false;
        for (size_t j = 0; j < n && !known; j++)
            known = !strcmp(tensors[j].name, t->name);
        if (!known && !harmless_extra(cfg, head, t->name)) {
            text_fmt(err, errcap,
                     "%s: unexpected tensor '%s' (not part of a %s %s with this config)", t->file,
                     t->name, pol_arch_name(cfg->arch),
                     head == POL_HEAD_LM ? "language model" : "value model");
            return -1;
        }
    }
    return 0;
}

int pol_model_check_tensors(const pol_config *cfg, pol_head head, const pol_st *st,
                            const char *where, char *err, size_t errcap)
{
    pol_param_info *tensors;
    size_t n, n_params;
    if (pol_model_table(cfg, head, &tensors, &n, &n_params, err, errcap) != 0)
        return -1;
    int rc = check_all(cfg, head, tensors, n, st, where, err, errcap);
    free(tensors);
    return rc;
}

static int load_tensors(pol_model *m, const pol_st *st, const char *dir, char *err, size_t errcap)
{
    if (check_all(&m->cfg, m->head, m->tensors, m->n_tensors, st, dir, err, errcap) != 0)
        return -1;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const pol_param_info *p = &m->tensors[i];
        if (pol_tensor_to_f32(pol_st_find(st, p->name), m->w.data + p->offset) != 0) {
            text_fmt(err, errcap, "%s: tensor '%s' could not be converted", dir, p->name);
            return -1;
        }
    }
    return 0;
}

int pol_model_load(pol_model *m, const char *dir, pol_head head, char *err, size_t errcap)
{
    memset(m, 0, sizeof *m);
    pol_config cfg;
    char *config_text = NULL, *gen_text = NULL;
    pol_st *st = NULL;
    /* the weights are checked against the config before the parameters are allocated, so a
     * config claiming a huge model next to small weights fails without allocating it */
    if (read_side_file(dir, "config.json", true, &config_text, err, errcap) != 0 ||
        pol_config_load(dir, &cfg, err, errcap) != 0 ||
        read_side_file(dir, "generation_config.json", false, &gen_text, err, errcap) != 0 ||
        pol_st_open(dir, &st, err, errcap) != 0 ||
        pol_model_check_tensors(&cfg, head, st, dir, err, errcap) != 0 ||
        pol_model_init(m, &cfg, head, err, errcap) != 0) {
        free(config_text);
        free(gen_text);
        pol_st_free(st);
        return -1;
    }
    m->config_json = config_text;
    m->generation_json = gen_text;
    int rc = load_tensors(m, st, dir, err, errcap);
    pol_st_free(st);
    if (rc != 0)
        pol_model_deinit(m);
    return rc;
}

static int add_eos(int32_t *ids, int n, int cap, json_int_t id)
{
    if (id < 0 || id > INT32_MAX || n >= cap)
        return n;
    for (int i = 0; i < n; i++)
        if (ids[i] == (int32_t)id)
            return n;
    ids[n] = (int32_t)id;
    return n + 1;
}

int pol_model_eos_ids(const pol_model *m, int32_t *ids, int cap)
{
    int n = 0;
    for (int i = 0; i < m->cfg.n_eos; i++)
        n = add_eos(ids, n, cap, m->cfg.eos_ids[i]);
    json_t *gen = m->generation_json ? json_loads(m->generation_json, 0, NULL) : NULL;
    json_t *eos = json_object_get(gen, "eos_token_id");
    if (json_is_integer(eos))
        n = add_eos(ids, n, cap, json_integer_value(eos));
    for (size_t i = 0; json_is_array(eos) && i < json_array_size(eos); i++)
        if (json_is_integer(json_array_get(eos, i)))
            n = add_eos(ids, n, cap, json_integer_value(json_array_get(eos, i)));
    json_decref(gen);
    return n;
}
