/* Incremental decoding of one sequence with a KV cache (see model.h): a prompt is fed once, then
 * one token per step, each attending to the cached keys and values. The same math as
 * model_forward.c, without the activations a backward would need. */
#include "policy/model.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

int pol_kv_init(pol_kv *kv, const pol_model *m, int max_T, char *err, size_t errcap)
{
    memset(kv, 0, sizeof *kv);
    pol_dims d = pol_dims_of(&m->cfg);
    size_t n = (size_t)d.L * (size_t)(max_T > 0 ? max_T : 0) * d.kvd;
    kv->k = n ? malloc(n * sizeof(float)) : NULL;
    kv->v = n ? malloc(n * sizeof(float)) : NULL;
    if (!kv->k || !kv->v) {
        pol_kv_deinit(kv);
        text_fmt(err, errcap, "kv cache: cannot allocate %d positions", max_T);
        return -1;
    }
    kv->max_T = max_T;
    return 0;
}

void pol_kv_deinit(pol_kv *kv)
{
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

/* Work buffers of one decode call over n new tokens. */
typedef struct {
    float *x, *xn, *q, *att, *tmp, *gate, *up, *cos, *sin, *inv;
    float *block;
} work;

static int work_init(work *w, const pol_dims *d, int n)
{
    size_t nn = (size_t)n, half = (size_t)d->hd / 2;
    size_t total = nn * (3 * d->D + 2 * d->qd + 2 * (size_t)d->F + 2 * half) + half;
    w->block = malloc(total * sizeof(float));
    if (!w->block)
        return -1;
    float *p = w->block;
    w->x = p, p += nn * d->D;
    w->xn = p, p += nn * d->D;
    w->tmp = p, p += nn * d->D;
    w->q = p, p += nn * d->qd;
    w->att = p, p += nn * d->qd;
    w->gate = p, p += nn * d->F;
    w->up = p, p += nn * d->F;
    w->cos = p, p += nn * half;
    w->sin = p, p += nn * half;
    w->inv = p;
    return 0;
}

static float dotf(const float *a, const float *b, int n)
{
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

/* Per-head RMSNorm (when norm_w) and RoPE on n rows of n_heads heads, in place. */
static void norm_rope_rows(float *x, size_t row_stride, int n, int n_heads, const float *norm_w,
                           const work *w, const pol_dims *d, float eps)
{
    int half = d->hd / 2;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)i * row_stride + (size_t)h * d->hd;
            if (norm_w)
                pol_rmsnorm(v, NULL, v, norm_w, 1, d->hd, eps);
            pol_rope_apply(v, d->hd, w->cos + (size_t)i * half, w->sin + (size_t)i * half, 1);
        }
}

/* Attention of the n new queries over the cache's positions [0, p0 + i]. */
static int cached_attention(const work *w, const float *K, const float *V, int n, int p0,
                            const pol_dims *d)
{
    int group = d->H / d->KV, failed = 0;
    float scale = 1.0f / sqrtf((float)d->hd);
#pragma omp parallel
    {
        float *s = malloc((size_t)(p0 + n) * sizeof *s);
        if (!s) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < n; i++)
            for (int h = 0; h < d->H; h++) {
                if (!s)
                    continue;
                const float *q = w->q + (size_t)i * d->qd + (size_t)h * d->hd;
                float *o = w->att + (size_t)i * d->qd + (size_t)h * d->hd, mx = -INFINITY;
                size_t kh = (size_t)(h / group) * d->hd;
                int len = p0 + i + 1;
                for (int j = 0; j < len; j++) {
                    s[j] = dotf(q, K + (size_t)j * d->kvd + kh, d->hd) * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                float sum = 0;
                for (int j = 0; j < len; j++)
                    sum += (s[j] = expf(s[j] - mx));
                memset(o, 0, (size_t)d->hd * sizeof *o);
                for (int j = 0; j < len; j++) {
                    const float *v = V + (size_t)j * d->kvd + kh;
                    float p = s[j] / sum;
                    for (int e = 0; e < d->hd; e++)
                        o[e] += p * v[e];
                }
            }
        free(s);
    }
    return failed ? -1 : 0;
}

static int layer_step(const pol_model *m, int l, pol_kv *kv, work *w, int n, const pol_dims *d)
{
    const pol_layer_params *p = &m->w.layers[l];
    float eps = m->cfg.rms_eps;
    int p0 = kv->len;
    float *K = kv->k + (size_t)l * kv->max_T * d->kvd, *V = kv->v + (size_t)l * kv->max_T * d->kvd;
    float *k_new = K + (size_t)p0 * d->kvd, *v_new = V + (size_t)p0 * d->kvd;
    pol_rmsnorm(w->xn, NULL, w->x, p->attn_norm, (size_t)n, d->D, eps);
    pol_linear(w->q, w->xn, p->wq, p->bq, (size_t)n, d->D, (int)d->qd);
    pol_linear(k_new, w->xn, p->wk, p->bk, (size_t)n, d->D, (int)d->kvd);
    pol_linear(v_new, w->xn, p->wv, p->bv, (size_t)n, d->D, (int)d->kvd);
    norm_rope_rows(w->q, d->qd, n, d->H, p->q_norm, w, d, eps);
    norm_rope_rows(k_new, d->kvd, n, d->KV, p->k_norm, w, d, eps);
    if (cached_attention(w, K, V, n, p0, d) != 0)
        return -1;
    pol_linear(w->tmp, w->att, p->wo, NULL, (size_t)n, (int)d->qd, d->D);
    for (size_t i = 0; i < (size_t)n * d->D; i++)
        w->x[i] += w->tmp[i];
    pol_rmsnorm(w->xn, NULL, w->x, p->mlp_norm, (size_t)n, d->D, eps);
    pol_linear(w->gate, w->xn, p->w_gate, NULL, (size_t)n, d->D, d->F);
    pol_linear(w->up, w->xn, p->w_up, NULL, (size_t)n, d->D, d->F);
    for (size_t i = 0; i < (size_t)n * d->F; i++)
        w->gate[i] = w->gate[i] / (1.0f + expf(-w->gate[i])) * w->up[i];
    pol_linear(w->tmp, w->gate, p->w_down, NULL, (size_t)n, d->F, d->D);
    for (size_t i = 0; i < (size_t)n * d->D; i++)
        w->x[i] += w->tmp[i];
    return 0;
}

static int check_step(const pol_model *m, const pol_kv *kv, const int32_t *ids, int n, char *err,
                      size_t errcap)
{
    if (m->head != POL_HEAD_LM) {
        text_fmt(err, errcap, "decode: the model has no LM head");
        return -1;
    }
    if (n < 1 || kv->len + n > kv->max_T) {
        text_fmt(err, errcap, "decode: %d new tokens after %d do not fit the cache of %d", n,
                 kv->len, kv->max_T);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size) {
            text_fmt(err, errcap, "decode: token %d has id %d, outside the vocabulary [0, %d)", i,
                     ids[i], m->cfg.vocab_size);
            return -1;
        }
    return 0;
}

int pol_model_decode(const pol_model *m, pol_kv *kv, const int32_t *ids, int n, float *logits,
                     char *err, size_t errcap)
{
    if (check_step(m, kv, ids, n, err, errcap) != 0)
        return -1;
    pol_dims d = pol_dims_of(&m->cfg);
    work w;
    if (work_init(&w, &d, n) != 0) {
        text_fmt(err, errcap, "decode: out of memory for %d tokens", n);
        return -1;
    }
    int half = d.hd / 2, rc = 0;
    pol_rope_inv_freq(&m->cfg, w.inv);
    for (int i = 0; i < n; i++) {
        memcpy(w.x + (size_t)i * d.D, m->w.embed + (size_t)ids[i] * d.D, d.D * sizeof(float));
        for (int j = 0; j < half; j++) {
            float angle = (float)(kv->len + i) * w.inv[j];
            w.cos[(size_t)i * half + j] = cosf(angle);
            w.sin[(size_t)i * half + j] = sinf(angle);
        }
    }
    for (int l = 0; l < d.L && rc == 0; l++)
        rc = layer_step(m, l, kv, &w, n, &d);
    if (rc == 0) {
        const float *last = w.x + (size_t)(n - 1) * d.D;
        pol_rmsnorm(w.xn, NULL, last, m->w.final_norm, 1, d.D, m->cfg.rms_eps);
        pol_linear(logits, w.xn, m->w.lm_head, NULL, 1, d.D, d.V);
        kv->len += n;
    } else {
        text_fmt(err, errcap, "decode: out of memory");
    }
    free(w.block);
    return rc;
}

static bool is_eos(const pol_gen_opts *o, int32_t id)
{
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos[i] == id)
            return true;
    return false;
}

int pol_model_generate(const pol_model *m, const int32_t *prompt, int n_prompt,
                       const pol_gen_opts *o, int32_t **out, int *n_out, bool *hit_eos, char *err,
                       size_t errcap)
{
    *out = NULL;
    *n_out = 0;
    *hit_eos = false;
    int V = m->cfg.vocab_size, n_valid = o->n_valid > 0 && o->n_valid < V ? o->n_valid : V;
    if (n_prompt < 1 || o->max_new < 0) {
        text_fmt(err, errcap, "generate: %s", n_prompt < 1 ? "empty prompt" : "max_new < 0");
        return -1;
    }
    pol_kv kv;
    if (pol_kv_init(&kv, m, n_prompt + o->max_new, err, errcap) != 0)
        return -1;
    float *logits = malloc((size_t)V * sizeof *logits), *probs = malloc((size_t)V * sizeof *probs);
    int *scratch = malloc((size_t)V * sizeof *scratch);
    int32_t *ids = malloc(((size_t)o->max_new + 1) * sizeof *ids);
    pol_rng rng;
    pol_rng_seed(&rng, o->seed);
    int rc = logits && probs && scratch && ids ? 0 : -1;
    if (rc != 0)
        text_fmt(err, errcap, "generate: out of memory");
    else
        rc = pol_model_decode(m, &kv, prompt, n_prompt, logits, err, errcap);
    int n = 0;
    while (rc == 0 && n < o->max_new) {
        int next = pol_sample(logits, n_valid, &o->sample, &rng, probs, scratch);
        if (next < 0) {
            text_fmt(err, errcap, "generate: the logits hold NaN at step %d", n);
            rc = -1;
            break;
        }
        ids[n++] = next;
        if (is_eos(o, next)) {
            *hit_eos = true;
            break;
        }
        if (n < o->max_new)
            rc = pol_model_decode(m, &kv, &ids[n - 1], 1, logits, err, errcap);
    }
    free(logits);
    free(probs);
    free(scratch);
    pol_kv_deinit(&kv);
    if (rc != 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n_out = n;
    return 0;
}
