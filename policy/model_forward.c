/* The forward pass over a batch (see model.h): activations kept in one arena for the backward. */
#include "policy/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

/* The model's dimensions, named as in the formulas. */

/* Carves n floats off the arena (cursor NULL: only counts). */
static float *take(float **cursor, size_t *used, size_t n)
{
    float *p = *cursor ? *cursor + *used : NULL;
    *used += n;
    return p;
}

static void carve_layer(pol_layer_acts *a, float **base, size_t *used, const pol_fwd *f,
                        const pol_dims *d, bool qk_norm)
{
    size_t N = f->N;
    a->x_in = take(base, used, N * d->D);
    a->rstd1 = take(base, used, N);
    a->xn1 = take(base, used, N * d->D);
    if (qk_norm) {
        a->q_raw = take(base, used, N * d->qd);
        a->k_raw = take(base, used, N * d->kvd);
        a->q_rstd = take(base, used, N * d->H);
        a->k_rstd = take(base, used, N * d->KV);
    }
    a->q = take(base, used, N * d->qd);
    a->k = take(base, used, N * d->kvd);
    a->v = take(base, used, N * d->kvd);
    a->probs = take(base, used, (size_t)f->B * d->H * f->T * f->T);
    a->att = take(base, used, N * d->qd);
    a->x_mid = take(base, used, N * d->D);
    a->rstd2 = take(base, used, N);
    a->xn2 = take(base, used, N * d->D);
    a->gate = take(base, used, N * d->F);
    a->up = take(base, used, N * d->F);
    a->act = take(base, used, N * d->F);
}

/* Lays every buffer out in the arena (or, with *base NULL, counts the floats into *used). */
static void carve(pol_fwd *f, float **base, size_t *used, const pol_model *m)
{
    pol_dims d = pol_dims_of(&m->cfg);
    size_t N = f->N;
    int n_acts = f->train ? d.L : 1;
    f->rope_cos = take(base, used, N * (d.hd / 2));
    f->rope_sin = take(base, used, N * (d.hd / 2));
    for (int l = 0; l < n_acts; l++)
        carve_layer(&f->layers[l], base, used, f, &d, m->cfg.qk_norm);
    f->x_final = take(base, used, N * d.D);
    f->rstd_f = take(base, used, N);
    f->h = take(base, used, N * d.D);
    f->logits = m->head == POL_HEAD_LM ? take(base, used, N * d.V) : NULL;
    f->values = m->head == POL_HEAD_VALUE ? take(base, used, N) : NULL;
    if (!f->train)
        return;
    f->d_res = take(base, used, N * d.D);
    f->d_tmp = take(base, used, N * d.D);
    f->d_h = take(base, used, N * d.D);
    f->d_q = take(base, used, N * d.qd);
    f->d_att = take(base, used, N * d.qd);
    f->d_k = take(base, used, N * d.kvd);
    f->d_v = take(base, used, N * d.kvd);
    if (m->cfg.qk_norm) {
        f->d_q2 = take(base, used, N * d.qd);
        f->d_k2 = take(base, used, N * d.kvd);
    }
    f->d_gate = take(base, used, N * d.F);
    f->d_up = take(base, used, N * d.F);
    f->d_logits = m->head == POL_HEAD_LM ? take(base, used, N * d.V) : NULL;
}

int pol_fwd_init(pol_fwd *f, const pol_model *m, int B, int T, bool train, char *err, size_t errcap)
{
    memset(f, 0, sizeof *f);
    if (B < 1 || T < 1) {
        text_fmt(err, errcap, "forward: batch of %d x %d tokens", B, T);
        return -1;
    }
    f->B = B;
    f->T = T;
    f->N = (size_t)B * T;
    f->train = train;
    f->layers = calloc(train ? (size_t)m->cfg.n_layers : 1, sizeof *f->layers);
    f->ids = malloc(3 * f->N * sizeof *f->ids);
    if (!f->layers || !f->ids)
        goto oom;
    f->pos = f->ids + f->N;
    f->doc = f->pos + f->N;
    float *none = NULL;
    size_t n = 0;
    carve(f, &none, &n, m);
    f->arena = malloc(n * sizeof(float));
    if (!f->arena)
        goto oom;
    f->arena_n = n;
    n = 0;
    carve(f, &f->arena, &n, m);
    return 0;
oom:
    text_fmt(err, errcap, "forward: out of memory for %d x %d tokens", B, T);
    pol_fwd_deinit(f);
    return -1;
}

void pol_fwd_deinit(pol_fwd *f)
{
    free(f->layers);
    free(f->ids);
    free(f->arena);
    memset(f, 0, sizeof *f);
}

static int set_inputs(const pol_model *m, pol_fwd *f, const int32_t *ids, const int32_t *pos,
                      const int32_t *doc, char *err, size_t errcap)
{
    for (size_t i = 0; i < f->N; i++) {
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size) {
            text_fmt(err, errcap, "forward: token %zu has id %d, outside the vocabulary [0, %d)", i,
                     ids[i], m->cfg.vocab_size);
            return -1;
        }
        if (pos && pos[i] < 0) {
            text_fmt(err, errcap, "forward: token %zu has a negative position %d", i, pos[i]);
            return -1;
        }
        f->ids[i] = ids[i];
        f->pos[i] = pos ? pos[i] : (int32_t)(i % (size_t)f->T);
        f->doc[i] = doc ? doc[i] : 0;
    }
    return 0;
}

static void rope_tables(const pol_model *m, pol_fwd *f)
{
    int half = m->cfg.head_dim / 2;
    float inv[half];
    pol_rope_inv_freq(&m->cfg, inv);
    for (size_t i = 0; i < f->N; i++)
        for (int j = 0; j < half; j++) {
            float angle = (float)f->pos[i] * inv[j];
            f->rope_cos[i * half + j] = cosf(angle);
            f->rope_sin[i * half + j] = sinf(angle);
        }
}

/* Per-head RMSNorm (Qwen3) then RoPE, on n_heads heads of each of the N rows. */
static void norm_and_rope(float *out, float *raw, float *rstd, const float *norm_w,
                          const pol_fwd *f, int n_heads, int hd, float eps)
{
    size_t rows = f->N * (size_t)n_heads;
    if (norm_w)
        pol_rmsnorm(out, rstd, raw, norm_w, rows, hd, eps);
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (rows > 64)
    for (size_t r = 0; r < rows; r++) {
        size_t tok = r / (size_t)n_heads;
        pol_rope_apply(out + r * hd, hd, f->rope_cos + tok * half, f->rope_sin + tok * half, 1);
    }
}

static float dotf(const float *a, const float *b, int n)
{
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

/* Causal attention inside documents: for each row b and head h, probs = softmax(q k^T / sqrt(hd))
 * over the allowed keys, att = probs v. Masked probabilities are stored as zero. */
static void attention(pol_layer_acts *a, const pol_fwd *f, const pol_dims *d)
{
    int T = f->T, group = d->H / d->KV;
    float scale = 1.0f / sqrtf((float)d->hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < f->B; b++)
        for (int h = 0; h < d->H; h++) {
            int kh = h / group;
            float *P = a->probs + ((size_t)b * d->H + h) * T * T;
            for (int i = 0; i < T; i++) {
                size_t qi = (size_t)b * T + i;
                const float *q = a->q + qi * d->qd + (size_t)h * d->hd;
                float *p = P + (size_t)i * T, mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    size_t kj = (size_t)b * T + j;
                    p[j] = -INFINITY;
                    if (j <= i && f->doc[kj] == f->doc[qi])
                        p[j] = dotf(q, a->k + kj * d->kvd + (size_t)kh * d->hd, d->hd) * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                float sum = 0;
                for (int j = 0; j <= i; j++) {
                    p[j] = p[j] == -INFINITY ? 0.0f : expf(p[j] - mx);
                    sum += p[j];
                }
                for (int j = 0; j < T; j++)
                    p[j] = j <= i ? p[j] / sum : 0.0f;
                float *o = a->att + qi * d->qd + (size_t)h * d->hd;
                memset(o, 0, d->hd * sizeof *o);
                for (int j = 0; j <= i; j++) {
                    const float *v = a->v + ((size_t)b * T + j) * d->kvd + (size_t)kh * d->hd;
                    if (p[j] != 0)
                        for (int e = 0; e < d->hd; e++)
                            o[e] += p[j] * v[e];
                }
            }
        }
}

static float silu(float x)
{
    return x / (1.0f + expf(-x));
}

static void add_into(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* One decoder layer: a->x_in -> out (out may be a->x_in: the input is dead by then). */
static void layer_forward(const pol_model *m, const pol_layer_params *w, pol_layer_acts *a,
                          const pol_fwd *f, float *out, const pol_dims *d, float *tmp)
{
    size_t N = f->N;
    float eps = m->cfg.rms_eps;
    pol_rmsnorm(a->xn1, a->rstd1, a->x_in, w->attn_norm, N, d->D, eps);
    float *q_dst = m->cfg.qk_norm ? a->q_raw : a->q, *k_dst = m->cfg.qk_norm ? a->k_raw : a->k;
    pol_linear(q_dst, a->xn1, w->wq, w->bq, N, d->D, (int)d->qd);
    pol_linear(k_dst, a->xn1, w->wk, w->bk, N, d->D, (int)d->kvd);
    pol_linear(a->v, a->xn1, w->wv, w->bv, N, d->D, (int)d->kvd);
    /* without q/k norm the projections were written to q and k and are rotated in place */
    norm_and_rope(a->q, a->q_raw, a->q_rstd, w->q_norm, f, d->H, d->hd, eps);
    norm_and_rope(a->k, a->k_raw, a->k_rstd, w->k_norm, f, d->KV, d->hd, eps);
    attention(a, f, d);
    pol_linear(tmp, a->att, w->wo, NULL, N, (int)d->qd, d->D);
    add_into(a->x_mid, a->x_in, tmp, N * d->D);
    pol_rmsnorm(a->xn2, a->rstd2, a->x_mid, w->mlp_norm, N, d->D, eps);
    pol_linear(a->gate, a->xn2, w->w_gate, NULL, N, d->D, d->F);
    pol_linear(a->up, a->xn2, w->w_up, NULL, N, d->D, d->F);
    for (size_t i = 0; i < N * d->F; i++)
        a->act[i] = silu(a->gate[i]) * a->up[i];
    pol_linear(tmp, a->act, w->w_down, NULL, N, d->F, d->D);
    add_into(out, a->x_mid, tmp, N * d->D);
}

static void heads_forward(const pol_model *m, pol_fwd *f, const pol_dims *d)
{
    pol_rmsnorm(f->h, f->rstd_f, f->x_final, m->w.final_norm, f->N, d->D, m->cfg.rms_eps);
    if (m->head == POL_HEAD_LM)
        pol_linear(f->logits, f->h, m->w.lm_head, NULL, f->N, d->D, d->V);
    else
        pol_linear(f->values, f->h, m->w.score_w, m->w.score_b, f->N, d->D, 1);
}

int pol_model_forward(const pol_model *m, pol_fwd *f, const int32_t *ids, const int32_t *pos,
                      const int32_t *doc, char *err, size_t errcap)
{
    if (set_inputs(m, f, ids, pos, doc, err, errcap) != 0)
        return -1;
    pol_dims d = pol_dims_of(&m->cfg);
    float *tmp = malloc(f->N * d.D * sizeof *tmp);
    if (!tmp) {
        text_fmt(err, errcap, "forward: out of memory");
        return -1;
    }
    rope_tables(m, f);
    float *x0 = f->layers[0].x_in;
    for (size_t i = 0; i < f->N; i++)
        memcpy(x0 + i * d.D, m->w.embed + (size_t)f->ids[i] * d.D, d.D * sizeof *x0);
    for (int l = 0; l < d.L; l++) {
        pol_layer_acts *a = &f->layers[f->train ? l : 0];
        float *out = l + 1 < d.L ? f->layers[f->train ? l + 1 : 0].x_in : f->x_final;
        layer_forward(m, &m->w.layers[l], a, f, out, &d, tmp);
    }
    free(tmp);
    heads_forward(m, f, &d);
    return 0;
}

int pol_model_logprobs(const pol_model *m, const pol_fwd *f, const int32_t *targets, float *lp,
                       char *err, size_t errcap)
{
    if (m->head != POL_HEAD_LM || !f->logits) {
        text_fmt(err, errcap, "logprobs: the model has no LM head");
        return -1;
    }
    int V = m->cfg.vocab_size;
    for (size_t i = 0; i < f->N; i++) {
        if (targets[i] >= V) {
            text_fmt(err, errcap, "logprobs: target %zu is %d, outside the vocabulary [0, %d)", i,
                     targets[i], V);
            return -1;
        }
    }
#pragma omp parallel for schedule(static) if (f->N > 4)
    for (size_t i = 0; i < f->N; i++) {
        if (targets[i] < 0) {
            lp[i] = 0;
            continue;
        }
        const float *row = f->logits + i * (size_t)V;
        float mx = row[0];
        for (int v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        double sum = 0;
        for (int v = 0; v < V; v++)
            sum += exp((double)(row[v] - mx));
        lp[i] = (float)((double)(row[targets[i]] - mx) - log(sum));
    }
    return 0;
}
