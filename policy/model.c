/* The model's parameters: the tensor table (HF names and shapes, derived from the config), the flat
 * fp32 buffers it lays out, and the helpers that walk it (random init, trunk copy). Loading is
 * model_load.c, saving model_save.c, the math model_forward.c / model_backward.c / model_decode.c.
 */
#include "policy/model.h"
#include "policy/sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

/* Appends one tensor to the table; returns its offset. */
static size_t add_tensor(pol_model *m, size_t *off, const char *name, int64_t d0, int64_t d1)
{
    pol_param_info *t = &m->tensors[m->n_tensors++];
    text_fmt(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
    t->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    t->offset = *off;
    t->is_norm_or_bias = d1 <= 0;
    *off += t->numel;
    return t->offset;
}

/* The per-layer offsets, bound to pointers by bind(). */
typedef struct {
    size_t attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, mlp_norm, w_gate, w_up, w_down;
} layer_offsets;

typedef struct {
    size_t embed, final_norm, lm_head, score_w, score_b;
    layer_offsets *layers;
} offsets;

static void add_layer(pol_model *m, size_t *off, int l, layer_offsets *lo)
{
    const pol_config *c = &m->cfg;
    int64_t D = c->hidden, qd = (int64_t)c->n_heads * c->head_dim;
    int64_t kvd = (int64_t)c->n_kv_heads * c->head_dim, F = c->ffn;
    char p[64], n[80];
    text_fmt(p, sizeof p, "model.layers.%d.", l);
#define T(field, suffix, d0, d1)                                                                   \
    (text_fmt(n, sizeof n, "%s%s", p, suffix), lo->field = add_tensor(m, off, n, d0, d1))
    T(attn_norm, "input_layernorm.weight", D, 0);
    T(wq, "self_attn.q_proj.weight", qd, D);
    T(wk, "self_attn.k_proj.weight", kvd, D);
    T(wv, "self_attn.v_proj.weight", kvd, D);
    if (c->attn_bias) {
        T(bq, "self_attn.q_proj.bias", qd, 0);
        T(bk, "self_attn.k_proj.bias", kvd, 0);
        T(bv, "self_attn.v_proj.bias", kvd, 0);
    }
    if (c->qk_norm) {
        T(q_norm, "self_attn.q_norm.weight", c->head_dim, 0);
        T(k_norm, "self_attn.k_norm.weight", c->head_dim, 0);
    }
    T(wo, "self_attn.o_proj.weight", D, qd);
    T(mlp_norm, "post_attention_layernorm.weight", D, 0);
    T(w_gate, "mlp.gate_proj.weight", F, D);
    T(w_up, "mlp.up_proj.weight", F, D);
    T(w_down, "mlp.down_proj.weight", D, F);
#undef T
}

static void build_table(pol_model *m, offsets *o)
{
    const pol_config *c = &m->cfg;
    size_t off = 0;
    o->embed = add_tensor(m, &off, "model.embed_tokens.weight", c->vocab_size, c->hidden);
    for (int l = 0; l < c->n_layers; l++)
        add_layer(m, &off, l, &o->layers[l]);
    o->final_norm = add_tensor(m, &off, "model.norm.weight", c->hidden, 0);
    if (m->head == POL_HEAD_VALUE) {
        o->score_w = add_tensor(m, &off, "score.weight", 1, c->hidden);
        o->score_b = add_tensor(m, &off, "score.bias", 1, 0);
    } else if (!c->tie_embeddings) {
        o->lm_head = add_tensor(m, &off, "lm_head.weight", c->vocab_size, c->hidden);
    }
    m->w.n = off;
}

/* Points p's fields into p->data by the offsets. */
static void bind(const pol_model *m, const offsets *o, pol_params *p)
{
    const pol_config *c = &m->cfg;
    float *d = p->data;
    p->embed = d + o->embed;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_offsets *lo = &o->layers[l];
        pol_layer_params *lp = &p->layers[l];
        lp->attn_norm = d + lo->attn_norm;
        lp->wq = d + lo->wq;
        lp->wk = d + lo->wk;
        lp->wv = d + lo->wv;
        lp->bq = c->attn_bias ? d + lo->bq : NULL;
        lp->bk = c->attn_bias ? d + lo->bk : NULL;
        lp->bv = c->attn_bias ? d + lo->bv : NULL;
        lp->q_norm = c->qk_norm ? d + lo->q_norm : NULL;
        lp->k_norm = c->qk_norm ? d + lo->k_norm : NULL;
        lp->wo = d + lo->wo;
        lp->mlp_norm = d + lo->mlp_norm;
        lp->w_gate = d + lo->w_gate;
        lp->w_up = d + lo->w_up;
        lp->w_down = d + lo->w_down;
    }
    p->final_norm = d + o->final_norm;
    p->lm_head = NULL;
    p->score_w = p->score_b = NULL;
    if (m->head == POL_HEAD_VALUE) {
        p->score_w = d + o->score_w;
        p->score_b = d + o->score_b;
    } else {
        p->lm_head = c->tie_embeddings ? p->embed : d + o->lm_head;
    }
}

/* The pointer into data that sits where w_ptr sits in w.data (NULL stays NULL). */
static float *same_place(const pol_params *w, const float *w_ptr, float *data)
{
    return w_ptr ? data + (w_ptr - w->data) : NULL;
}

/* Binds p (p->data set, p->layers allocated) to the layout of w. */
static void mirror(const pol_model *m, const pol_params *w, pol_params *p)
{
#define M(field) p->field = same_place(w, w->field, p->data)
    M(embed);
    M(final_norm);
    M(lm_head);
    M(score_w);
    M(score_b);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        M(layers[l].attn_norm);
        M(layers[l].wq);
        M(layers[l].wk);
        M(layers[l].wv);
        M(layers[l].bq);
        M(layers[l].bk);
        M(layers[l].bv);
        M(layers[l].q_norm);
        M(layers[l].k_norm);
        M(layers[l].wo);
        M(layers[l].mlp_norm);
        M(layers[l].w_gate);
        M(layers[l].w_up);
        M(layers[l].w_down);
    }
#undef M
}

static bool shape_ok(const pol_config *c, char *err, size_t errcap)
{
    if (c->vocab_size < 1 || c->hidden < 1 || c->n_layers < 1 || c->n_heads < 1 ||
        c->n_kv_heads < 1 || c->head_dim < 2 || c->head_dim > 1024 || c->head_dim % 2 ||
        c->ffn < 1 || c->n_heads % c->n_kv_heads) {
        text_fmt(err, errcap,
                 "model config: unusable shape (vocab %d, hidden %d, layers %d, heads %d/%d, "
                 "head_dim %d, ffn %d)",
                 c->vocab_size, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
                 c->ffn);
        return false;
    }
    return true;
}

int pol_model_table(const pol_config *cfg, pol_head head, pol_param_info **tensors, size_t *n,
                    size_t *n_params, char *err, size_t errcap)
{
    *tensors = NULL;
    if (!shape_ok(cfg, err, errcap))
        return -1;
    pol_model tmp = {.cfg = *cfg, .head = head};
    offsets o = {0};
    tmp.tensors = calloc((size_t)cfg->n_layers * 16 + 8, sizeof *tmp.tensors);
    o.layers = calloc((size_t)cfg->n_layers, sizeof *o.layers);
    if (!tmp.tensors || !o.layers) {
        free(tmp.tensors);
        free(o.layers);
        text_fmt(err, errcap, "model: out of memory");
        return -1;
    }
    build_table(&tmp, &o);
    free(o.layers);
    *tensors = tmp.tensors;
    *n = tmp.n_tensors;
    *n_params = tmp.w.n;
    return 0;
}

static void set_ones(pol_model *m, pol_params *p)
{
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strstr(m->tensors[i].name, "norm.weight"))
            for (size_t j = 0; j < m->tensors[i].numel; j++)
                p->data[m->tensors[i].offset + j] = 1.0f;
}

int pol_model_init(pol_model *m, const pol_config *cfg, pol_head head, char *err, size_t errcap)
{
    memset(m, 0, sizeof *m);
    if (!shape_ok(cfg, err, errcap))
        return -1;
    m->cfg = *cfg;
    m->head = head;
    m->tensors = calloc((size_t)cfg->n_layers * 16 + 8, sizeof *m->tensors);
    m->w.layers = calloc((size_t)cfg->n_layers, sizeof *m->w.layers);
    m->g.layers = calloc((size_t)cfg->n_layers, sizeof *m->g.layers);
    offsets o = {0};
    o.layers = calloc((size_t)cfg->n_layers, sizeof *o.layers);
    if (!m->tensors || !m->w.layers || !m->g.layers || !o.layers)
        goto oom;
    build_table(m, &o);
    m->g.n = m->w.n;
    m->w.data = calloc(m->w.n, sizeof(float));
    if (!m->w.data)
        goto oom;
    bind(m, &o, &m->w);
    set_ones(m, &m->w);
    free(o.layers);
    return 0;
oom:
    free(o.layers);
    pol_model_deinit(m);
    text_fmt(err, errcap, "model: out of memory for %s (%d layers, hidden %d, vocab %d)",
             pol_arch_name(cfg->arch), cfg->n_layers, cfg->hidden, cfg->vocab_size);
    return -1;
}

void pol_model_deinit(pol_model *m)
{
    free(m->config_json);
    free(m->generation_json);
    free(m->tensors);
    free(m->w.data);
    free(m->w.layers);
    free(m->g.data);
    free(m->g.layers);
    memset(m, 0, sizeof *m);
}

size_t pol_model_n_params(const pol_model *m)
{
    return m->w.n;
}

const pol_param_info *pol_model_find(const pol_model *m, const char *name)
{
    for (size_t i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return &m->tensors[i];
    return NULL;
}

int pol_model_grads_init(pol_model *m, char *err, size_t errcap)
{
    if (m->g.data)
        return 0;
    m->g.data = calloc(m->w.n, sizeof(float));
    if (!m->g.data) {
        text_fmt(err, errcap, "model: out of memory for %zu gradients", m->w.n);
        return -1;
    }
    m->g.n = m->w.n;
    mirror(m, &m->w, &m->g);
    return 0;
}

void pol_model_zero_grad(pol_model *m)
{
    if (m->g.data)
        memset(m->g.data, 0, m->g.n * sizeof(float));
}

void pol_model_init_random(pol_model *m, uint64_t seed, float std)
{
    pol_rng rng;
    pol_rng_seed(&rng, seed);
    for (size_t i = 0; i < m->n_tensors; i++) {
        const pol_param_info *t = &m->tensors[i];
        float base = strstr(t->name, "norm.weight") ? 1.0f : 0.0f;
        for (size_t j = 0; j < t->numel; j++)
            m->w.data[t->offset + j] = base + std * pol_rng_normal(&rng);
    }
}

int pol_model_copy_shared(pol_model *dst, const pol_model *src, size_t *copied, char *err,
                          size_t errcap)
{
    *copied = 0;
    for (size_t i = 0; i < dst->n_tensors; i++) {
        const pol_param_info *d = &dst->tensors[i], *s = pol_model_find(src, d->name);
        if (!s)
            continue;
        if (s->numel != d->numel || s->shape[0] != d->shape[0] || s->shape[1] != d->shape[1]) {
            text_fmt(err, errcap, "model copy: tensor '%s' has different shapes", d->name);
            return -1;
        }
        memcpy(dst->w.data + d->offset, src->w.data + s->offset, d->numel * sizeof(float));
        (*copied)++;
    }
    return 0;
}
