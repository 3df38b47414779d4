/* AdamW as torch.optim.AdamW computes it (see adamw.h): the same order of operations and the same
 * rounding points (scalars in double, tensors in float), so that steps agree to the last bits. */
#include "policy/adamw.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

pol_adamw_cfg pol_adamw_defaults(void)
{
    return (pol_adamw_cfg){
        .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2};
}

/* The hyperparameters torch.optim.AdamW accepts (NaN fails every comparison). */
static int check_cfg(const pol_adamw_cfg *cfg, const char *where, char *err, size_t errcap)
{
    if (!(cfg->lr >= 0) || !(cfg->beta1 >= 0 && cfg->beta1 < 1) ||
        !(cfg->beta2 >= 0 && cfg->beta2 < 1) || !(cfg->eps >= 0) || !(cfg->weight_decay >= 0)) {
        text_fmt(err, errcap, "%s: invalid hyperparameters (lr %g, betas %g %g, eps %g, wd %g)",
                 where, cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
        return -1;
    }
    return 0;
}

int pol_adamw_init(pol_adamw *o, size_t n, const pol_adamw_cfg *cfg, char *err, size_t errcap)
{
    memset(o, 0, sizeof *o);
    if (check_cfg(cfg, "adamw", err, errcap) != 0)
        return -1;
    o->m = calloc(n ? n : 1, sizeof(float));
    o->v = calloc(n ? n : 1, sizeof(float));
    if (!o->m || !o->v) {
        pol_adamw_deinit(o);
        text_fmt(err, errcap, "adamw: out of memory for %zu parameters", n);
        return -1;
    }
    o->cfg = *cfg;
    o->n = n;
    return 0;
}

void pol_adamw_deinit(pol_adamw *o)
{
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

/* torch's lerp: the formula it picks depends on the weight (for accuracy near 1). */
static float lerp(float self, float end, float w)
{
    return w < 0.5f ? self + w * (end - self) : end - (end - self) * (1.0f - w);
}

void pol_adamw_step(pol_adamw *o, float *params, const float *grads)
{
    const pol_adamw_cfg *c = &o->cfg;
    o->step++;
    double bc1 = 1.0 - pow(c->beta1, (double)o->step);
    double bc2 = 1.0 - pow(c->beta2, (double)o->step);
    float decay = (float)(1.0 - c->lr * c->weight_decay);
    float w1 = (float)(1.0 - c->beta1), b2 = (float)c->beta2, w2 = (float)(1.0 - c->beta2);
    float step_size = (float)(c->lr / bc1), bc2_sqrt = (float)sqrt(bc2), eps = (float)c->eps;
    const uint8_t *skip = o->no_decay;
#pragma omp parallel for schedule(static) if (o->n > 65536)
    for (size_t i = 0; i < o->n; i++) {
        float g = grads[i];
        if (!(skip && skip[i]))
            params[i] *= decay;
        o->m[i] = lerp(o->m[i], g, w1);
        o->v[i] = o->v[i] * b2 + w2 * g * g;
        float denom = sqrtf(o->v[i]) / bc2_sqrt + eps;
        params[i] += -step_size * (o->m[i] / denom);
    }
}

double pol_grad_norm(const float *grads, size_t n)
{
    double sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        sum += (double)grads[i] * grads[i];
    return sqrt(sum);
}

double pol_clip_grad_norm(float *grads, size_t n, double max_norm)
{
    double norm = pol_grad_norm(grads, n);
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0)
        for (size_t i = 0; i < n; i++)
            grads[i] *= (float)coef;
    return norm;
}

/* ---- state files ---- */

#define NAME_CAP 96

static void moment_name(char *out, const char *param, const char *which)
{
    text_fmt(out, NAME_CAP, "%s.%s", param, which);
}

int pol_adamw_save(const pol_adamw *o, const pol_model *m, const char *path, char *err,
                   size_t errcap)
{
    if (o->n != m->w.n) {
        text_fmt(err, errcap, "%s: optimizer holds %zu parameters, the model %zu", path, o->n,
                 m->w.n);
        return -1;
    }
    size_t n = 2 * m->n_tensors;
    pol_st_entry *e = calloc(n, sizeof *e);
    char(*names)[NAME_CAP] = calloc(n, sizeof *names);
    if (!e || !names) {
        free(e);
        free(names);
        text_fmt(err, errcap, "%s: out of memory", path);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const pol_param_info *p = &m->tensors[i / 2];
        moment_name(names[i], p->name, i % 2 ? "exp_avg_sq" : "exp_avg");
        e[i].name = names[i];
        e[i].dtype = POL_DT_F32;
        e[i].ndim = p->ndim;
        e[i].shape[0] = p->shape[0];
        e[i].shape[1] = p->shape[1];
        e[i].data = (i % 2 ? o->v : o->m) + p->offset;
    }
    char meta[6][40];
    const pol_adamw_cfg *c = &o->cfg;
    text_fmt(meta[0], sizeof meta[0], "%lld", (long long)o->step);
    text_fmt(meta[1], sizeof meta[1], "%.17g", c->lr);
    text_fmt(meta[2], sizeof meta[2], "%.17g", c->beta1);
    text_fmt(meta[3], sizeof meta[3], "%.17g", c->beta2);
    text_fmt(meta[4], sizeof meta[4], "%.17g", c->eps);
    text_fmt(meta[5], sizeof meta[5], "%.17g", c->weight_decay);
    const char *const md[] = {"format", "pt",    "kind",         "adamw", "step",  meta[0],
                              "lr",     meta[1], "beta1",        meta[2], "beta2", meta[3],
                              "eps",    meta[4], "weight_decay", meta[5], NULL};
    int rc = pol_st_write(path, e, n, md, err, errcap);
    free(e);
    free(names);
    return rc;
}

/* A metadata number; -1 when absent or malformed. */
static int meta_double(const pol_st *st, const char *key, double *out, const char *path, char *err,
                       size_t errcap)
{
    const char *s = pol_st_metadata(st, key);
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end != '\0' || errno) {
        text_fmt(err, errcap, "%s: metadata '%s' is %s", path, key, s ? "not a number" : "missing");
        return -1;
    }
    *out = v;
    return 0;
}

static int load_moment(pol_adamw *o, const pol_st *st, const pol_param_info *p, bool sq,
                       const char *path, char *err, size_t errcap)
{
    char name[NAME_CAP];
    moment_name(name, p->name, sq ? "exp_avg_sq" : "exp_avg");
    const pol_tensor *t = pol_st_find(st, name);
    if (!t || t->dtype != POL_DT_F32 || t->numel != (int64_t)p->numel) {
        text_fmt(err, errcap, "%s: tensor '%s' is %s", path, name,
                 !t ? "missing" : "not F32 of the parameter's size");
        return -1;
    }
    return pol_tensor_to_f32(t, (sq ? o->v : o->m) + p->offset);
}

int pol_adamw_load(pol_adamw *o, const pol_model *m, const char *path, char *err, size_t errcap)
{
    if (o->n != m->w.n) {
        text_fmt(err, errcap, "%s: optimizer holds %zu parameters, the model %zu", path, o->n,
                 m->w.n);
        return -1;
    }
    pol_st *st = NULL;
    if (pol_st_open(path, &st, err, errcap) != 0)
        return -1;
    double step = 0;
    pol_adamw_cfg c;
    int rc = meta_double(st, "step", &step, path, err, errcap) != 0 ||
                     meta_double(st, "lr", &c.lr, path, err, errcap) != 0 ||
                     meta_double(st, "beta1", &c.beta1, path, err, errcap) != 0 ||
                     meta_double(st, "beta2", &c.beta2, path, err, errcap) != 0 ||
                     meta_double(st, "eps", &c.eps, path, err, errcap) != 0 ||
                     meta_double(st, "weight_decay", &c.weight_decay, path, err, errcap) != 0
                 ? -1
                 : 0;
    if (rc == 0 && !(step >= 0 && step < 9e15)) {
        text_fmt(err, errcap, "%s: metadata 'step' is %g", path, step);
        rc = -1;
    }
    if (rc == 0)
        rc = check_cfg(&c, path, err, errcap); /* the metadata is input like any other */
    for (size_t i = 0; rc == 0 && i < 2 * m->n_tensors; i++)
        rc = load_moment(o, st, &m->tensors[i / 2], i % 2, path, err, errcap);
    pol_st_free(st);
    if (rc == 0) {
        o->step = (int64_t)step;
        o->cfg = c;
    }
    return rc;
}
