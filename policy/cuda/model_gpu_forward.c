/* The GPU model's forward (see model_gpu.h), in the order of policy/model_forward.c:
 *
 *   x = embed[ids]; per layer
 *     xn1 = rms1(x); q, k, v = xn1 Wq^T + bq, ...; q, k = rope(q_norm(q)), rope(k_norm(k))
 *     x_mid = x + attention(q, k, v) Wo^T
 *     xn2 = rms2(x_mid); x_out = x_mid + (silu(xn2 Wg^T) * xn2 Wu^T) Wd^T
 *   h = rms_final(x); logits = h W_lm^T, or values = h . score_w + score_b
 *
 * Activations are bf16, every sum fp32 (cuBLASLt, the kernels). The residual adds ride on the
 * matmuls: x_mid starts as a copy of x and the o_proj product is accumulated into it (beta = 1),
 * so the sum is rounded to bf16 once. Everything lives in one device arena carved per call; a
 * train forward keeps every layer's activations for the backward, or with recompute only every
 * layer's input (the layers run through one shared buffer, and the backward reruns each layer
 * into it through the same pg_layer_forward); an inference one reuses one layer's. Also the reads
 * of a forward's outputs: log-probs, entropies, values. */
#include "policy/cuda/model_gpu_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

/* ---- the activation arena ---- */

#define TAKE_BF(n) ((kg_bf16 *)pg_take(base, used, (size_t)(n) * sizeof(kg_bf16)))
#define TAKE_F(n) ((float *)pg_take(base, used, (size_t)(n) * sizeof(float)))
#define TAKE_I(n) ((int32_t *)pg_take(base, used, (size_t)(n) * sizeof(int32_t)))

/* One layer's activations; with_input false leaves x_in NULL (recompute's shared buffer: its
 * input is each layer's kept one). */
static void carve_layer(pg_layer_acts *l, uint8_t *base, size_t *used, size_t N, const pol_dims *d,
                        bool qk_norm, bool with_input)
{
    memset(l, 0, sizeof *l);
    l->x_in = with_input ? TAKE_BF(N * d->D) : NULL;
    l->rstd1 = TAKE_F(N);
    l->xn1 = TAKE_BF(N * d->D);
    if (qk_norm) {
        l->q_raw = TAKE_BF(N * d->qd);
        l->k_raw = TAKE_BF(N * d->kvd);
        l->q_rstd = TAKE_F(N * d->H);
        l->k_rstd = TAKE_F(N * d->KV);
    }
    l->q = TAKE_BF(N * d->qd);
    l->k = TAKE_BF(N * d->kvd);
    l->v = TAKE_BF(N * d->kvd);
    l->att = TAKE_BF(N * d->qd);
    l->lse = TAKE_F(N * d->H);
    l->x_mid = TAKE_BF(N * d->D);
    l->rstd2 = TAKE_F(N);
    l->xn2 = TAKE_BF(N * d->D);
    l->gate = TAKE_BF(N * d->F);
    l->up = TAKE_BF(N * d->F);
    l->act = TAKE_BF(N * d->F);
}

/* The layers' part of the layout. Train: every layer in full, or with recompute every layer's
 * input and one shared layer (work) that the forward and the backward's reruns go through.
 * Inference: one layer, run in place. */
static void carve_layers(pol_gpu *g, uint8_t *base, size_t *used, size_t N, bool train)
{
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    memset(&a->work, 0, sizeof a->work);
    if (!a->recompute) {
        for (int l = 0; l < (train ? d->L : 1); l++)
            carve_layer(&a->layers[l], base, used, N, d, g->cfg.qk_norm, true);
        return;
    }
    for (int l = 0; l < d->L; l++) {
        memset(&a->layers[l], 0, sizeof a->layers[l]);
        a->layers[l].x_in = TAKE_BF(N * d->D);
    }
    carve_layer(&a->work, base, used, N, d, g->cfg.qk_norm, false);
}

/* Lays out every buffer of an N-token forward (and its backward when train) from base, or
 * with base NULL counts the bytes into *used. */
static void carve(pol_gpu *g, uint8_t *base, size_t *used, int n, bool train)
{
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    size_t N = (size_t)n;
    bool lm = g->head == POL_HEAD_LM;
    a->recompute = train && g->recompute;
    a->ids = TAKE_I(N);
    a->pos = TAKE_I(N);
    a->doc_start = TAKE_I(N);
    carve_layers(g, base, used, N, train);
    a->x_final = TAKE_BF(N * d->D);
    a->rstd_f = TAKE_F(N);
    a->h = TAKE_BF(N * d->D);
    a->logits = lm ? TAKE_BF(N * d->V) : NULL;
    a->values = lm ? NULL : TAKE_F(N);
    a->targets = TAKE_I(N);
    a->logp = TAKE_F(N);
    a->ent = TAKE_F(N);
    a->d_res = a->d_xn = a->d_att = a->dq = a->dk = a->dv = NULL;
    a->d_act = a->d_gate = a->d_up = a->dlogits = NULL;
    a->w_logp = a->w_ent = a->dvalues = NULL;
    if (!train)
        return;
    a->d_res = TAKE_BF(N * d->D);
    a->d_xn = TAKE_BF(N * d->D);
    a->d_att = TAKE_BF(N * d->qd);
    a->dq = TAKE_BF(N * d->qd);
    a->dk = TAKE_BF(N * d->kvd);
    a->dv = TAKE_BF(N * d->kvd);
    a->d_act = TAKE_BF(N * d->F);
    a->d_gate = TAKE_BF(N * d->F);
    a->d_up = TAKE_BF(N * d->F);
    a->dlogits = lm ? TAKE_BF(N * d->V) : NULL;
    a->w_logp = TAKE_F(N);
    a->w_ent = TAKE_F(N);
    a->dvalues = TAKE_F(N);
}

/* Points g->a at an arena big enough for n tokens, growing it when needed (the last forward's
 * activations are gone either way). */
static int prepare(pg_run *r, int n, bool train)
{
    pol_gpu *g = r->g;
    g->fwd_valid = false;
    size_t need = 0;
    carve(g, NULL, &need, n, train);
    if (need > g->arena_bytes) {
        cudaStreamSynchronize(g->stream); /* nothing queued may still use the old arena */
        cudaFree(g->arena);
        g->arena = NULL;
        g->arena_bytes = 0;
        char what[128];
        text_fmt(what, sizeof what, "allocating the activations of %d tokens (%.1f MiB)", n,
                 (double)need / (1 << 20));
        if (pg_ck(r, cudaMalloc(&g->arena, need), what) != 0) {
            g->arena = NULL;
            return -1;
        }
        g->arena_bytes = need;
    }
    size_t used = 0;
    carve(g, g->arena, &used, n, train);
    g->a.N = n;
    g->a.train = train;
    g->a.bytes = used;
    return 0;
}

int pol_gpu_set_recompute(pol_gpu *g, bool on, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "set_recompute", -1};
    if (g->recompute == on)
        return 0;
    g->recompute = on;
    g->fwd_valid = false; /* its layout is the other setting's */
    /* the arena goes, so that the next forward allocates what the new setting needs (turning
     * recompute on is how memory is given back); nothing queued may still use it */
    if (pg_sync(&r) != 0)
        return -1;
    cudaFree(g->arena);
    g->arena = NULL;
    g->arena_bytes = 0;
    return 0;
}

/* ---- inputs ---- */

/* Checks the inputs and writes what the device gets into host[3n]: ids, positions, doc_start. */
static int check_inputs(const pol_gpu *g, const int32_t *ids, const int32_t *pos,
                        const int32_t *doc_start, int n, int32_t *host, char *err, size_t errcap)
{
    int V = g->d.V;
    for (int t = 0; t < n; t++) {
        if (ids[t] < 0 || ids[t] >= V)
            return text_fail(err, errcap,
                             "model_gpu forward: token %d has id %d, outside the vocabulary "
                             "[0, %d)",
                             t, ids[t], V);
        int32_t ds = doc_start ? doc_start[t] : 0;
        bool contiguous = !doc_start || (t == 0 ? ds == 0 : ds == doc_start[t - 1] || ds == t);
        if (!contiguous)
            return text_fail(err, errcap,
                             "model_gpu forward: token %d has doc_start %d; documents must be "
                             "contiguous (doc_start[0] = 0, then doc_start[t] = doc_start[t-1] "
                             "or t)",
                             t, ds);
        int32_t p = pos ? pos[t] : t - ds;
        if (p < 0)
            return text_fail(err, errcap, "model_gpu forward: token %d has a negative position %d",
                             t, p);
        host[t] = ids[t];
        host[n + t] = p;
        host[2 * n + t] = ds;
    }
    return 0;
}

static int upload_inputs(pg_run *r, const int32_t *host)
{
    pg_acts *a = &r->g->a;
    size_t bytes = (size_t)a->N * sizeof(int32_t);
    cudaStream_t s = r->g->stream;
    return pg_ck(r, cudaMemcpyAsync(a->ids, host, bytes, cudaMemcpyHostToDevice, s), "ids") ||
           pg_ck(r, cudaMemcpyAsync(a->pos, host + a->N, bytes, cudaMemcpyHostToDevice, s),
                 "positions") ||
           pg_ck(r,
                 cudaMemcpyAsync(a->doc_start, host + 2 * (size_t)a->N, bytes,
                                 cudaMemcpyHostToDevice, s),
                 "doc_start");
}

/* ---- the layers ---- */

/* input norm, q/k/v projections (biases in the matmul's epilogue), the per-head q/k norm, RoPE */
int pg_qkv_forward(pg_run *r, const pg_layer_off *o, pg_layer_acts *A, int N, const int32_t *pos,
                   const kg_kv_dest *cache)
{
    pol_gpu *g = r->g;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    int qd = (int)d->qd, kvd = (int)d->kvd;
    bool qk = g->cfg.qk_norm;
    float eps = g->cfg.rms_eps;
    /* without the q/k norm the projections land in q and k and are rotated in place */
    kg_bf16 *qp = qk ? A->q_raw : A->q, *kp = qk ? A->k_raw : A->k;
    /* one launch for the three at a decode step's few rows (kg_matmul_parts) */
    const kg_matmul_part qkv[3] = {{qp, pg_w(g, o->wq), pg_w(g, o->bq), qd},
                                   {kp, pg_w(g, o->wk), pg_w(g, o->bk), kvd},
                                   {A->v, pg_w(g, o->wv), pg_w(g, o->bv), kvd}};
    /* input_layernorm in front (kg_matmul_norm): inside the q/k/v launch when no rstd is kept
     * (the decoder), else its own launch keeping rstd1 for the backward */
    const kg_matmul_norm norm = {pg_w(g, o->attn_norm), eps, A->xn1, A->rstd1};
    if (pg_ck(r, kg_matmul_parts(g->mm, A->x_in, &norm, qkv, 3, N, d->D, s),
              "input_layernorm + q/k/v_proj"))
        return -1;
    if (qk && (pg_ck(r,
                     kg_rmsnorm_forward(A->q, A->q_rstd, A->q_raw, pg_w(g, o->q_norm), N * d->H,
                                        d->hd, eps, s),
                     "q_norm") ||
               pg_ck(r,
                     kg_rmsnorm_forward(A->k, A->k_rstd, A->k_raw, pg_w(g, o->k_norm), N * d->KV,
                                        d->hd, eps, s),
                     "k_norm")))
        return -1;
    if (cache) /* the decoder: the cache write rides on the RoPE launch */
        return pg_ck(
            r, kg_rope_qk_kv_write(A->q, A->k, pos, g->inv_freq, N, d->H, d->KV, d->hd, cache, s),
            "q/k rope + kv cache write");
    return pg_ck(r, kg_rope_qk(A->q, A->k, pos, g->inv_freq, N, d->H, d->KV, d->hd, 1, s),
                 "q/k rope");
}

/* The attention block: input norm and q/k/v (pg_qkv_forward), attention, then
 * x_mid = x_in + att Wo^T (x_mid starts as a copy of x_in and the o_proj product is accumulated
 * into it). */
static int attn_block_forward(pg_run *r, const pg_layer_off *o, pg_layer_acts *A)
{
    pol_gpu *g = r->g;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    int N = g->a.N;
    size_t res_bytes = (size_t)N * d->D * sizeof(kg_bf16);
    float scale = 1.0f / sqrtf((float)d->hd);
    return pg_qkv_forward(r, o, A, N, g->a.pos, NULL) ||
           pg_ck(r,
                 kg_attention_forward(A->att, A->lse, A->q, A->k, A->v, g->a.doc_start, N, d->H,
                                      d->KV, d->hd, scale, s),
                 "attention") ||
           pg_ck(r, cudaMemcpyAsync(A->x_mid, A->x_in, res_bytes, cudaMemcpyDeviceToDevice, s),
                 "residual copy") ||
           pg_ck(r,
                 kg_matmul(g->mm, A->x_mid, A->att, pg_w(g, o->wo), NULL, N, d->D, (int)d->qd, 0, 1,
                           1.0f, s),
                 "o_proj + residual");
}

/* The MLP block: post-attention norm, gate / up, SwiGLU; then, unless out is NULL,
 * out = x_mid + act Wd^T (the same copy-and-accumulate). */
int pg_mlp_block_forward(pg_run *r, const pg_layer_off *o, pg_layer_acts *A, int N, kg_bf16 *out)
{
    pol_gpu *g = r->g;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    size_t res_bytes = (size_t)N * d->D * sizeof(kg_bf16);
    /* post_attention_layernorm in front, as pg_qkv_forward's (inside the launch without rstd2) */
    const kg_matmul_norm norm = {pg_w(g, o->mlp_norm), g->cfg.rms_eps, A->xn2, A->rstd2};
    if (pg_ck(r,
              kg_matmul_swiglu(g->mm, A->act, A->gate, A->up, A->x_mid, &norm, pg_w(g, o->w_gate),
                               pg_w(g, o->w_up), N, d->F, d->D, s),
              "post_attention_layernorm + gate_proj, up_proj, swiglu"))
        return -1;
    if (!out)
        return 0;
    return pg_ck(r, cudaMemcpyAsync(out, A->x_mid, res_bytes, cudaMemcpyDeviceToDevice, s),
                 "residual copy") ||
           pg_ck(r,
                 kg_matmul(g->mm, out, A->act, pg_w(g, o->w_down), NULL, N, d->D, d->F, 0, 1, 1.0f,
                           s),
                 "down_proj + residual");
}

/* The one code path of a layer's forward, for the forward and for the backward's recompute: the
 * same kernels on the same shapes and inputs (ids, pos, doc_start, inv_freq, weights) give the
 * same bits. */
int pg_layer_forward(pg_run *r, int l, pg_layer_acts *A, kg_bf16 *out)
{
    const pg_layer_off *o = &r->g->lo[l];
    r->layer = l;
    if (attn_block_forward(r, o, A) || pg_mlp_block_forward(r, o, A, r->g->a.N, out))
        return -1;
    r->layer = -1;
    return 0;
}

pg_layer_acts *pg_layer_acts_for(pg_acts *a, int l)
{
    if (!a->train)
        return &a->layers[0];
    if (!a->recompute)
        return &a->layers[l];
    a->work.x_in = a->layers[l].x_in;
    return &a->work;
}

static int heads_forward(pg_run *r)
{
    pol_gpu *g = r->g;
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    if (pg_ck(r,
              kg_rmsnorm_forward(a->h, a->rstd_f, a->x_final, pg_w(g, g->final_norm), a->N, d->D,
                                 g->cfg.rms_eps, s),
              "model.norm"))
        return -1;
    if (g->head == POL_HEAD_LM)
        return pg_ck(r,
                     kg_matmul(g->mm, a->logits, a->h, pg_w(g, g->lm_head), NULL, a->N, d->V, d->D,
                               0, 1, 0.0f, s),
                     "lm_head");
    return pg_ck(r,
                 kg_value_head_forward(a->values, a->h, pg_w(g, g->score_w), pg_w(g, g->score_b),
                                       a->N, d->D, s),
                 "score (value head)");
}

static int run_forward(pg_run *r)
{
    pol_gpu *g = r->g;
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    if (pg_ck(r,
              kg_embed_forward(a->layers[0].x_in, pg_w(g, g->embed), a->ids, a->N, d->D, d->V,
                               g->stream),
              "embed_tokens"))
        return -1;
    /* each layer's output is the next one's input: kept per layer by a train forward (with
     * recompute too), run in place by an inference one */
    for (int l = 0; l < d->L; l++) {
        pg_layer_acts *A = pg_layer_acts_for(a, l);
        kg_bf16 *out = l + 1 < d->L ? a->layers[a->train ? l + 1 : 0].x_in : a->x_final;
        if (pg_layer_forward(r, l, A, out) != 0)
            return -1;
    }
    return heads_forward(r);
}

int pol_gpu_forward(pol_gpu *g, const int32_t *ids, const int32_t *pos, const int32_t *doc_start,
                    int n, bool train, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "forward", -1};
    int heads = g->d.H > g->d.KV ? g->d.H : g->d.KV;
    if (!ids || n < 1 || (long long)n * heads > INT_MAX)
        return text_fail(err, errcap, "model_gpu forward: cannot run %d tokens", n);
    int32_t *host = malloc(3 * (size_t)n * sizeof *host);
    if (!host)
        return text_fail(err, errcap, "model_gpu forward: out of host memory");
    int rc = check_inputs(g, ids, pos, doc_start, n, host, err, errcap);
    if (rc == 0)
        rc = prepare(&r, n, train);
    if (rc == 0 && (upload_inputs(&r, host) || run_forward(&r) || pg_sync(&r))) {
        cudaStreamSynchronize(g->stream); /* the uploads are done with host before it goes */
        rc = -1;
    }
    free(host);
    g->fwd_valid = rc == 0;
    return rc;
}

/* ---- reading a forward's outputs ---- */

int pg_upload_targets(pg_run *r, const int32_t *targets)
{
    pol_gpu *g = r->g;
    int N = g->a.N, V = g->d.V;
    int32_t *t = malloc((size_t)N * sizeof *t);
    if (!t)
        return text_fail(r->err, r->errcap, "model_gpu %s: out of host memory", r->phase);
    for (int i = 0; i < N; i++) {
        if (targets[i] >= V) {
            free(t);
            return text_fail(r->err, r->errcap,
                             "model_gpu %s: token %d has target %d, outside the vocabulary "
                             "[0, %d)",
                             r->phase, i, targets[i], V);
        }
        /* the kernels give NaN for a target outside [0, V): masked tokens read row 0 instead
         * and are zeroed or weighted 0 by the callers */
        t[i] = targets[i] < 0 ? 0 : targets[i];
    }
    int rc = pg_ck(
        r,
        cudaMemcpyAsync(g->a.targets, t, (size_t)N * sizeof *t, cudaMemcpyHostToDevice, g->stream),
        "uploading the targets");
    if (rc == 0)
        rc = pg_sync(r);
    free(t);
    return rc;
}

int pol_gpu_logprobs(pol_gpu *g, const int32_t *targets, float *logp, float *entropy, char *err,
                     size_t errcap)
{
    pg_run r = {g, err, errcap, "logprobs", -1};
    if (g->head != POL_HEAD_LM)
        return text_fail(err, errcap, "model_gpu logprobs: the model has no LM head");
    if (!g->fwd_valid)
        return text_fail(err, errcap, "model_gpu logprobs: no forward to read");
    if (!targets != !logp)
        return text_fail(err, errcap, "model_gpu logprobs: targets and logp go together");
    if (!logp && !entropy)
        return 0;
    pg_acts *a = &g->a;
    bool failed =
        (targets && pg_upload_targets(&r, targets)) ||
        pg_ck(&r,
              kg_logprob_forward(logp ? a->logp : NULL, entropy ? a->ent : NULL, a->logits,
                                 targets ? a->targets : NULL, a->N, g->d.V, g->d.V, g->stream),
              "log-softmax") ||
        (logp && pg_to_host(&r, logp, a->logp, a->N, "copying the log-probs")) ||
        (entropy && pg_to_host(&r, entropy, a->ent, a->N, "copying the entropies")) || pg_sync(&r);
    if (failed)
        return -1;
    for (int i = 0; logp && i < a->N; i++)
        if (targets[i] < 0)
            logp[i] = 0.0f;
    return 0;
}

int pol_gpu_values(pol_gpu *g, float *values, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "values", -1};
    if (g->head != POL_HEAD_VALUE)
        return text_fail(err, errcap, "model_gpu values: the model has no value head");
    if (!g->fwd_valid)
        return text_fail(err, errcap, "model_gpu values: no forward to read");
    bool failed = pg_to_host(&r, values, g->a.values, g->a.N, "copying the values") || pg_sync(&r);
    return failed ? -1 : 0;
}
