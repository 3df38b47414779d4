/* The backward pass (see model.h): the LM head's weighted log-prob loss, then the trunk layer by
 * layer from the activations the forward kept. Gradients add into m->g. */
#include "policy/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

static void zero(float *p, size_t n)
{
    memset(p, 0, n * sizeof *p);
}

static float dotf(const float *a, const float *b, int n)
{
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

static void axpy(float *y, float a, const float *x, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* One query row of one head: dP_j = dO.v_j, dS_j = P_j (dP_j - sum P dP), then
 * dq += scale dS_j k_j, dk_j += scale dS_j q, dv_j += P_j dO. */
static void attention_row_backward(const pol_layer_acts *a, pol_fwd *f, const pol_dims *d, int b,
                                   int h, int i, float *dp)
{
    int T = f->T, kh = h / (d->H / d->KV);
    float scale = 1.0f / sqrtf((float)d->hd);
    size_t qi = (size_t)b * T + i, qoff = qi * d->qd + (size_t)h * d->hd;
    const float *P = a->probs + (((size_t)b * d->H + h) * T + i) * T;
    const float *dO = f->d_att + qoff, *q = a->q + qoff;
    float *dq = f->d_q + qoff, sum = 0;
    for (int j = 0; j <= i; j++) {
        size_t koff = ((size_t)b * T + j) * d->kvd + (size_t)kh * d->hd;
        dp[j] = P[j] != 0 ? dotf(dO, a->v + koff, d->hd) : 0.0f;
        sum += P[j] * dp[j];
    }
    for (int j = 0; j <= i; j++) {
        if (P[j] == 0)
            continue;
        size_t koff = ((size_t)b * T + j) * d->kvd + (size_t)kh * d->hd;
        float ds = P[j] * (dp[j] - sum) * scale;
        axpy(dq, ds, a->k + koff, d->hd);
        axpy(f->d_k + koff, ds, q, d->hd);
        axpy(f->d_v + koff, P[j], dO, d->hd);
    }
}

/* d_att -> d_q, d_k, d_v (after RoPE). One thread per (row, kv head): the heads of a GQA group
 * write the same dk/dv rows, so they stay on one thread. */
static int attention_backward(const pol_layer_acts *a, pol_fwd *f, const pol_dims *d)
{
    int group = d->H / d->KV, failed = 0;
    zero(f->d_q, f->N * d->qd);
    zero(f->d_k, f->N * d->kvd);
    zero(f->d_v, f->N * d->kvd);
#pragma omp parallel
    {
        float *dp = malloc((size_t)f->T * sizeof *dp);
        if (!dp) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < f->B; b++)
            for (int kh = 0; kh < d->KV; kh++)
                for (int h = kh * group; dp && h < (kh + 1) * group; h++)
                    for (int i = 0; i < f->T; i++)
                        attention_row_backward(a, f, d, b, h, i, dp);
        free(dp);
    }
    return failed ? -1 : 0;
}

/* Undoes RoPE on the gradient of n_heads heads per row (the rotation's transpose). */
static void rope_backward(float *g, const pol_fwd *f, int n_heads, int hd)
{
    size_t rows = f->N * (size_t)n_heads;
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (rows > 64)
    for (size_t r = 0; r < rows; r++) {
        size_t tok = r / (size_t)n_heads;
        pol_rope_apply(g + r * hd, hd, f->rope_cos + tok * half, f->rope_sin + tok * half, -1);
    }
}

static void mlp_backward(const pol_layer_params *w, pol_layer_params *g, const pol_layer_acts *a,
                         pol_fwd *f, const pol_dims *d)
{
    size_t N = f->N, NF = N * d->F;
    float *d_act = f->d_gate;
    zero(d_act, NF);
    pol_linear_backward(d_act, g->w_down, NULL, f->d_res, a->act, w->w_down, N, d->F, d->D);
    for (size_t i = 0; i < NF; i++) {
        float x = a->gate[i], s = 1.0f / (1.0f + expf(-x));
        f->d_up[i] = d_act[i] * x * s;
        f->d_gate[i] = d_act[i] * a->up[i] * s * (1.0f + x * (1.0f - s));
    }
    zero(f->d_tmp, N * d->D);
    pol_linear_backward(f->d_tmp, g->w_gate, NULL, f->d_gate, a->xn2, w->w_gate, N, d->D, d->F);
    pol_linear_backward(f->d_tmp, g->w_up, NULL, f->d_up, a->xn2, w->w_up, N, d->D, d->F);
    pol_rmsnorm_backward(f->d_res, g->mlp_norm, f->d_tmp, a->x_mid, a->rstd2, w->mlp_norm, N, d->D);
}

/* Through q/k norm (Qwen3): d_q/d_k (gradients of the normed heads) -> d_q2/d_k2; returns the
 * buffers that now hold the projections' gradients. */
static void qk_norm_backward(const pol_layer_params *w, pol_layer_params *g,
                             const pol_layer_acts *a, pol_fwd *f, const pol_dims *d, float **dq,
                             float **dk)
{
    *dq = f->d_q;
    *dk = f->d_k;
    if (!w->q_norm)
        return;
    zero(f->d_q2, f->N * d->qd);
    zero(f->d_k2, f->N * d->kvd);
    pol_rmsnorm_backward(f->d_q2, g->q_norm, f->d_q, a->q_raw, a->q_rstd, w->q_norm, f->N * d->H,
                         d->hd);
    pol_rmsnorm_backward(f->d_k2, g->k_norm, f->d_k, a->k_raw, a->k_rstd, w->k_norm, f->N * d->KV,
                         d->hd);
    *dq = f->d_q2;
    *dk = f->d_k2;
}

static int attn_block_backward(const pol_layer_params *w, pol_layer_params *g,
                               const pol_layer_acts *a, pol_fwd *f, const pol_dims *d)
{
    size_t N = f->N;
    zero(f->d_att, N * d->qd);
    pol_linear_backward(f->d_att, g->wo, NULL, f->d_res, a->att, w->wo, N, (int)d->qd, d->D);
    if (attention_backward(a, f, d) != 0)
        return -1;
    rope_backward(f->d_q, f, d->H, d->hd);
    rope_backward(f->d_k, f, d->KV, d->hd);
    float *dq, *dk;
    qk_norm_backward(w, g, a, f, d, &dq, &dk);
    zero(f->d_tmp, N * d->D);
    pol_linear_backward(f->d_tmp, g->wq, g->bq, dq, a->xn1, w->wq, N, d->D, (int)d->qd);
    pol_linear_backward(f->d_tmp, g->wk, g->bk, dk, a->xn1, w->wk, N, d->D, (int)d->kvd);
    pol_linear_backward(f->d_tmp, g->wv, g->bv, f->d_v, a->xn1, w->wv, N, d->D, (int)d->kvd);
    pol_rmsnorm_backward(f->d_res, g->attn_norm, f->d_tmp, a->x_in, a->rstd1, w->attn_norm, N,
                         d->D);
    return 0;
}

int pol_model_backward_trunk(pol_model *m, pol_fwd *f, float *dh, char *err, size_t errcap)
{
    if (!f->train || !m->g.data) {
        text_fmt(err, errcap, "backward: %s",
                 !f->train ? "the forward kept no activations" : "gradients not allocated");
        return -1;
    }
    pol_dims d = pol_dims_of(&m->cfg);
    zero(f->d_res, f->N * d.D);
    pol_rmsnorm_backward(f->d_res, m->g.final_norm, dh, f->x_final, f->rstd_f, m->w.final_norm,
                         f->N, d.D);
    for (int l = d.L - 1; l >= 0; l--) {
        const pol_layer_params *w = &m->w.layers[l];
        pol_layer_params *g = &m->g.layers[l];
        mlp_backward(w, g, &f->layers[l], f, &d);
        if (attn_block_backward(w, g, &f->layers[l], f, &d) != 0) {
            text_fmt(err, errcap, "backward: out of memory");
            return -1;
        }
    }
    /* rows of one id add up: serial over tokens, vectorised over the row */
    for (size_t i = 0; i < f->N; i++)
        axpy(m->g.embed + (size_t)f->ids[i] * d.D, 1.0f, f->d_res + i * d.D, d.D);
    return 0;
}

/* dlogits_t = w_t (softmax(logits_t) - onehot(target_t)); returns -sum_t w_t logp_t. */
static double loss_and_dlogits(const pol_fwd *f, int V, const int32_t *targets,
                               const float *weights)
{
    double loss = 0;
#pragma omp parallel for schedule(static) reduction(+ : loss) if (f->N > 4)
    for (size_t i = 0; i < f->N; i++) {
        float *dl = f->d_logits + i * (size_t)V;
        if (targets[i] < 0 || weights[i] == 0) {
            zero(dl, V);
            continue;
        }
        pol_log_softmax(dl, f->logits + i * (size_t)V, V);
        loss -= (double)weights[i] * dl[targets[i]];
        for (int v = 0; v < V; v++)
            dl[v] = weights[i] * expf(dl[v]);
        dl[targets[i]] -= weights[i];
    }
    return loss;
}

int pol_model_backward(pol_model *m, pol_fwd *f, const int32_t *targets, const float *weights,
                       double *loss, char *err, size_t errcap)
{
    if (m->head != POL_HEAD_LM || !f->train || !m->g.data) {
        text_fmt(err, errcap, "backward: %s",
                 m->head != POL_HEAD_LM ? "the model has no LM head"
                 : !f->train            ? "the forward kept no activations"
                                        : "gradients not allocated");
        return -1;
    }
    int V = m->cfg.vocab_size;
    for (size_t i = 0; i < f->N; i++)
        if (targets[i] >= V || !isfinite(weights[i])) {
            text_fmt(err, errcap, "backward: token %zu has target %d / weight %g", i, targets[i],
                     (double)weights[i]);
            return -1;
        }
    *loss = loss_and_dlogits(f, V, targets, weights);
    zero(f->d_h, f->N * m->cfg.hidden);
    pol_linear_backward(f->d_h, m->g.lm_head, NULL, f->d_logits, f->h, m->w.lm_head, f->N,
                        m->cfg.hidden, V);
    return pol_model_backward_trunk(m, f, f->d_h, err, errcap);
}
