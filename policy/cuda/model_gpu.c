/* The GPU model's life (see model_gpu.h): the device layout of the CPU model's table, creation,
 * weights / gradients / optimizer state up and down, the debug hook and the accessors. The
 * forward is model_gpu_forward.c, the backward model_gpu_backward.c, the optimizer
 * model_gpu_optim.c. */
#include "policy/cuda/model_gpu_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/text.h"

/* host-side staging of bf16 transfers, in elements (32 MiB) */
#define PG_HOST_CHUNK ((size_t)1 << 24)

int pg_ck(pg_run *r, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    if (r->layer >= 0)
        return text_fail(r->err, r->errcap, "model_gpu %s, layer %d: %s: %s (%s)", r->phase,
                         r->layer, what, cudaGetErrorName(e), cudaGetErrorString(e));
    return text_fail(r->err, r->errcap, "model_gpu %s: %s: %s (%s)", r->phase, what,
                     cudaGetErrorName(e), cudaGetErrorString(e));
}

int pg_sync(pg_run *r)
{
    return pg_ck(r, cudaStreamSynchronize(r->g->stream), "running the queued GPU work");
}

int pg_to_device(pg_run *r, float *dev, const float *host, int n, const char *what)
{
    return pg_ck(
        r,
        cudaMemcpyAsync(dev, host, (size_t)n * sizeof *dev, cudaMemcpyHostToDevice, r->g->stream),
        what);
}

int pg_to_host(pg_run *r, float *host, const float *dev, int n, const char *what)
{
    return pg_ck(
        r,
        cudaMemcpyAsync(host, dev, (size_t)n * sizeof *host, cudaMemcpyDeviceToHost, r->g->stream),
        what);
}

static size_t round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

static float bf16_to_float(kg_bf16 b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* dst[n] (host fp32) = src[n] (device bf16), through a bounded host buffer */
static int pg_copy_bf16_to_host(pg_run *r, float *dst, const kg_bf16 *src, size_t n)
{
    size_t cap = n < PG_HOST_CHUNK ? n : PG_HOST_CHUNK;
    kg_bf16 *stage = malloc((cap ? cap : 1) * sizeof *stage);
    if (!stage)
        return text_fail(r->err, r->errcap, "model_gpu %s: out of host memory", r->phase);
    int rc = 0;
    for (size_t done = 0; rc == 0 && done < n; done += cap) {
        size_t k = n - done < cap ? n - done : cap;
        rc = pg_ck(r,
                   cudaMemcpyAsync(stage, src + done, k * sizeof *stage, cudaMemcpyDeviceToHost,
                                   r->g->stream),
                   "copying to the host");
        if (rc == 0)
            rc = pg_sync(r);
        for (size_t i = 0; rc == 0 && i < k; i++)
            dst[done + i] = bf16_to_float(stage[i]);
    }
    free(stage);
    return rc;
}

/* ---- layout ---- */

/* The device offset of the tensor that p points to in m->w (tensors are sorted by offset);
 * PG_NONE for NULL. *ok turns false when p is not the start of a tensor. */
static size_t dev_of(const pol_gpu *g, const pol_model *m, const float *p, bool *ok)
{
    if (!p)
        return PG_NONE;
    size_t host = (size_t)(p - m->w.data), lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g->tensors[mid].offset < host)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < g->n_tensors && g->tensors[lo].offset == host)
        return g->dev_off[lo];
    *ok = false;
    return PG_NONE;
}

/* Binds the named offsets through the CPU model's own pointers (so no tensor name is parsed
 * here); false when one of them is missing or points inside a tensor. */
static bool bind_offsets(pol_gpu *g, const pol_model *m)
{
    bool ok = true;
    const pol_params *w = &m->w;
    g->embed = dev_of(g, m, w->embed, &ok);
    g->final_norm = dev_of(g, m, w->final_norm, &ok);
    g->lm_head = dev_of(g, m, w->lm_head, &ok);
    g->score_w = dev_of(g, m, w->score_w, &ok);
    g->score_b = dev_of(g, m, w->score_b, &ok);
    for (int l = 0; l < g->d.L; l++) {
        const pol_layer_params *p = &w->layers[l];
        pg_layer_off *o = &g->lo[l];
        o->attn_norm = dev_of(g, m, p->attn_norm, &ok);
        o->wq = dev_of(g, m, p->wq, &ok);
        o->wk = dev_of(g, m, p->wk, &ok);
        o->wv = dev_of(g, m, p->wv, &ok);
        o->bq = dev_of(g, m, p->bq, &ok);
        o->bk = dev_of(g, m, p->bk, &ok);
        o->bv = dev_of(g, m, p->bv, &ok);
        o->q_norm = dev_of(g, m, p->q_norm, &ok);
        o->k_norm = dev_of(g, m, p->k_norm, &ok);
        o->wo = dev_of(g, m, p->wo, &ok);
        o->mlp_norm = dev_of(g, m, p->mlp_norm, &ok);
        o->w_gate = dev_of(g, m, p->w_gate, &ok);
        o->w_up = dev_of(g, m, p->w_up, &ok);
        o->w_down = dev_of(g, m, p->w_down, &ok);
        ok = ok && o->attn_norm != PG_NONE && o->wq != PG_NONE && o->wk != PG_NONE &&
             o->wv != PG_NONE && o->wo != PG_NONE && o->mlp_norm != PG_NONE &&
             o->w_gate != PG_NONE && o->w_up != PG_NONE && o->w_down != PG_NONE &&
             (o->q_norm != PG_NONE && o->k_norm != PG_NONE) == g->cfg.qk_norm &&
             (o->bq != PG_NONE && o->bk != PG_NONE && o->bv != PG_NONE) == g->cfg.attn_bias;
    }
    bool head_ok = g->head == POL_HEAD_LM ? g->lm_head != PG_NONE
                                          : g->score_w != PG_NONE && g->score_b != PG_NONE;
    return ok && head_ok && g->embed != PG_NONE && g->final_norm != PG_NONE;
}

/* Copies the table and gives each tensor a 256-byte-aligned device offset. */
static int layout(pol_gpu *g, const pol_model *m, char *err, size_t errcap)
{
    size_t n = m->n_tensors;
    g->tensors = malloc(n * sizeof *g->tensors);
    g->dev_off = malloc(n * sizeof *g->dev_off);
    g->lo = calloc((size_t)g->d.L, sizeof *g->lo);
    if (!g->tensors || !g->dev_off || !g->lo)
        return text_fail(err, errcap, "model_gpu create: out of host memory");
    memcpy(g->tensors, m->tensors, n * sizeof *g->tensors);
    g->n_tensors = n;
    g->n_host = m->w.n;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && g->tensors[i].offset <= g->tensors[i - 1].offset)
            return text_fail(err, errcap, "model_gpu create: the tensor table is not in order");
        off = round_up(off, PG_ALIGN_ELEMS);
        g->dev_off[i] = off;
        off += g->tensors[i].numel;
    }
    g->n_dev = round_up(off, PG_ALIGN_ELEMS);
    if (!bind_offsets(g, m))
        return text_fail(err, errcap,
                         "model_gpu create: the model's tensors do not match its table");
    return 0;
}

/* Whether m has the table the GPU model was built from. */
static int same_table(const pol_gpu *g, const pol_model *m, pg_run *r)
{
    bool same = m->head == g->head && m->n_tensors == g->n_tensors && m->w.n == g->n_host &&
                m->w.data && m->tensors;
    for (size_t i = 0; same && i < g->n_tensors; i++)
        same = m->tensors[i].offset == g->tensors[i].offset &&
               m->tensors[i].numel == g->tensors[i].numel;
    if (same)
        return 0;
    return text_fail(r->err, r->errcap, "model_gpu %s: the model's tensor table is not the GPU's",
                     r->phase);
}

static int need_training(pg_run *r)
{
    if (r->g->training)
        return 0;
    return text_fail(r->err, r->errcap,
                     "model_gpu %s: the model was created without training state", r->phase);
}

/* ---- creation ---- */

/* cudaMalloc + zero, with the size in the message when it fails */
static int dev_alloc(pg_run *r, void **p, size_t bytes, const char *what)
{
    char msg[160];
    text_fmt(msg, sizeof msg, "allocating %s (%.1f MiB)", what, (double)bytes / (1 << 20));
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        return pg_ck(r, e, msg);
    }
    return pg_ck(r, cudaMemsetAsync(*p, 0, bytes, r->g->stream), msg);
}

static int alloc_buffers(pg_run *r)
{
    pol_gpu *g = r->g;
    size_t nb = g->n_dev * sizeof(kg_bf16), nf = g->n_dev * sizeof(float);
    if (dev_alloc(r, (void **)&g->w, nb, "the bf16 weights") != 0 ||
        dev_alloc(r, (void **)&g->inv_freq, (size_t)g->d.hd / 2 * sizeof(float),
                  "the RoPE frequencies") != 0 ||
        dev_alloc(r, (void **)&g->scalars, 2 * sizeof(float), "the optimizer's scalars") != 0)
        return -1;
    if (!g->training)
        return 0;
    if (dev_alloc(r, (void **)&g->master, nf, "the fp32 master weights") != 0 ||
        dev_alloc(r, (void **)&g->grad, nf, "the gradients") != 0 ||
        dev_alloc(r, (void **)&g->adam_m, nf, "AdamW's first moments") != 0 ||
        dev_alloc(r, (void **)&g->adam_v, nf, "AdamW's second moments") != 0)
        return -1;
    return 0;
}

static int upload_inv_freq(pg_run *r)
{
    float inv[64]; /* head_dim <= 128 */
    pol_rope_inv_freq(&r->g->cfg, inv);
    return pg_ck(r,
                 cudaMemcpyAsync(r->g->inv_freq, inv, (size_t)r->g->d.hd / 2 * sizeof(float),
                                 cudaMemcpyHostToDevice, r->g->stream),
                 "uploading the RoPE frequencies");
}

static int upload_weights(pg_run *r, const pol_model *m);

int pol_gpu_create(pol_gpu **out, const pol_model *m, bool training, char *err, size_t errcap)
{
    *out = NULL;
    const pol_config *c = &m->cfg;
    if (!m->w.data || !m->tensors || !m->w.layers)
        return text_fail(err, errcap, "model_gpu create: the model has no weights");
    if (c->head_dim != 64 && c->head_dim != 128)
        return text_fail(err, errcap,
                         "model_gpu create: head_dim %d is not supported on the GPU (the attention "
                         "kernel takes 64 or 128)",
                         c->head_dim);
    pol_gpu *g = calloc(1, sizeof *g);
    if (!g)
        return text_fail(err, errcap, "model_gpu create: out of host memory");
    g->cfg = *c;
    g->head = m->head;
    g->d = pol_dims_of(c);
    g->training = training;
    pg_run r = {g, err, errcap, "create", -1};
    if (layout(g, m, err, errcap) != 0)
        goto fail;
    g->a.layers = calloc((size_t)g->d.L, sizeof *g->a.layers);
    if (!g->a.layers) {
        text_fail(err, errcap, "model_gpu create: out of host memory");
        goto fail;
    }
    if (pg_ck(&r, cudaStreamCreate(&g->stream), "creating the stream") != 0)
        goto fail;
    g->mm = kg_matmul_ctx_new(PG_MATMUL_WORKSPACE);
    if (!g->mm) {
        text_fail(err, errcap, "model_gpu create: no cuBLASLt handle or workspace");
        goto fail;
    }
    if (alloc_buffers(&r) != 0 || upload_inv_freq(&r) != 0 || upload_weights(&r, m) != 0)
        goto fail;
    *out = g;
    return 0;
fail:
    pol_gpu_free(g);
    return -1;
}

void pol_gpu_free(pol_gpu *g)
{
    if (!g)
        return;
    if (g->stream)
        cudaStreamSynchronize(g->stream); /* nothing may still use the buffers */
    cudaFree(g->arena);
    cudaFree(g->w);
    cudaFree(g->master);
    cudaFree(g->grad);
    cudaFree(g->adam_m);
    cudaFree(g->adam_v);
    cudaFree(g->inv_freq);
    cudaFree(g->scalars);
    kg_matmul_ctx_free(g->mm);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    free(g->tensors);
    free(g->dev_off);
    free(g->lo);
    free(g->a.layers);
    free(g);
}

/* ---- weights ---- */

/* Training: each tensor into the master weights, then one rounding of the whole buffer into the
 * bf16 copy (padding is zero in both). Otherwise through a bounded fp32 staging buffer on the
 * device, rounded piece by piece. */
static int upload_weights(pg_run *r, const pol_model *m)
{
    pol_gpu *g = r->g;
    cudaStream_t s = g->stream;
    if (g->training) {
        for (size_t i = 0; i < g->n_tensors; i++) {
            const pol_param_info *t = &g->tensors[i];
            if (pg_ck(r,
                      cudaMemcpyAsync(g->master + g->dev_off[i], m->w.data + t->offset,
                                      t->numel * sizeof(float), cudaMemcpyHostToDevice, s),
                      "uploading the weights") != 0)
                return -1;
        }
        if (pg_ck(r, kg_f32_to_bf16(g->w, g->master, g->n_dev, s), "rounding the weights") != 0)
            return -1;
        return pg_sync(r);
    }
    size_t cap = g->n_host < PG_HOST_CHUNK ? g->n_host : PG_HOST_CHUNK;
    float *stage = NULL;
    if (dev_alloc(r, (void **)&stage, cap * sizeof(float), "the upload's staging buffer") != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < g->n_tensors; i++) {
        const pol_param_info *t = &g->tensors[i];
        for (size_t done = 0; rc == 0 && done < t->numel; done += cap) {
            size_t k = t->numel - done < cap ? t->numel - done : cap;
            rc = pg_ck(r,
                       cudaMemcpyAsync(stage, m->w.data + t->offset + done, k * sizeof(float),
                                       cudaMemcpyHostToDevice, s),
                       "uploading the weights");
            if (rc == 0)
                rc = pg_ck(r, kg_f32_to_bf16(g->w + g->dev_off[i] + done, stage, k, s),
                           "rounding the weights");
        }
    }
    if (rc == 0)
        rc = pg_sync(r);
    cudaStreamSynchronize(s); /* the staging buffer is idle before it goes */
    cudaFree(stage);
    return rc;
}

int pol_gpu_upload(pol_gpu *g, const pol_model *m, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "upload", -1};
    if (same_table(g, m, &r) != 0)
        return -1;
    return upload_weights(&r, m);
}

int pol_gpu_download(pol_gpu *g, pol_model *m, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "download", -1};
    if (same_table(g, m, &r) != 0)
        return -1;
    for (size_t i = 0; i < g->n_tensors; i++) {
        const pol_param_info *t = &g->tensors[i];
        float *dst = m->w.data + t->offset;
        int rc =
            g->training
                ? pg_ck(&r,
                        cudaMemcpyAsync(dst, g->master + g->dev_off[i], t->numel * sizeof(float),
                                        cudaMemcpyDeviceToHost, g->stream),
                        "copying the master weights")
                : pg_copy_bf16_to_host(&r, dst, g->w + g->dev_off[i], t->numel);
        if (rc != 0)
            return -1;
    }
    return pg_sync(&r);
}

/* ---- gradients and optimizer state: fp32, tensor by tensor ---- */

/* host[table offsets] <-> dev[device offsets] for every tensor */
static int copy_flat(pg_run *r, float *host, float *dev, bool to_host, const char *what)
{
    pol_gpu *g = r->g;
    for (size_t i = 0; i < g->n_tensors; i++) {
        const pol_param_info *t = &g->tensors[i];
        float *h = host + t->offset, *d = dev + g->dev_off[i];
        size_t bytes = t->numel * sizeof(float);
        cudaError_t e = to_host ? cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, g->stream)
                                : cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, g->stream);
        if (pg_ck(r, e, what) != 0)
            return -1;
    }
    return pg_sync(r);
}

int pol_gpu_download_grads(pol_gpu *g, pol_model *m, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "download_grads", -1};
    if (need_training(&r) != 0 || same_table(g, m, &r) != 0 ||
        pol_model_grads_init(m, err, errcap) != 0)
        return -1;
    return copy_flat(&r, m->g.data, g->grad, true, "copying the gradients");
}

int pol_gpu_upload_grads(pol_gpu *g, const pol_model *m, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "upload_grads", -1};
    if (need_training(&r) != 0 || same_table(g, m, &r) != 0)
        return -1;
    if (!m->g.data)
        return text_fail(err, errcap, "model_gpu upload_grads: the model has no gradients");
    return copy_flat(&r, m->g.data, g->grad, false, "uploading the gradients");
}

static int same_adamw(pg_run *r, const pol_adamw *o)
{
    if (need_training(r) != 0)
        return -1;
    if (o->n != r->g->n_host || !o->m || !o->v)
        return text_fail(r->err, r->errcap,
                         "model_gpu %s: the optimizer holds %zu parameters, the model %zu",
                         r->phase, o->n, r->g->n_host);
    return 0;
}

int pol_gpu_download_adamw(pol_gpu *g, pol_adamw *o, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "download_adamw", -1};
    if (same_adamw(&r, o) != 0 ||
        copy_flat(&r, o->m, g->adam_m, true, "copying AdamW's first moments") != 0 ||
        copy_flat(&r, o->v, g->adam_v, true, "copying AdamW's second moments") != 0)
        return -1;
    o->step = g->step;
    return 0;
}

int pol_gpu_upload_adamw(pol_gpu *g, const pol_adamw *o, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "upload_adamw", -1};
    if (same_adamw(&r, o) != 0 ||
        copy_flat(&r, o->m, g->adam_m, false, "uploading AdamW's first moments") != 0 ||
        copy_flat(&r, o->v, g->adam_v, false, "uploading AdamW's second moments") != 0)
        return -1;
    g->step = o->step;
    return 0;
}

/* ---- debugging and access ---- */

int pol_gpu_residual(pol_gpu *g, int layer, float *out, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "residual", -1};
    if (!g->fwd_valid || !g->a.train)
        return text_fail(err, errcap, "model_gpu residual: the last forward kept no activations");
    if (layer < 0 || layer >= g->d.L)
        return text_fail(err, errcap, "model_gpu residual: layer %d outside [0, %d)", layer,
                         g->d.L);
    const kg_bf16 *x = layer + 1 < g->d.L ? g->a.layers[layer + 1].x_in : g->a.x_final;
    return pg_copy_bf16_to_host(&r, out, x, (size_t)g->a.N * (size_t)g->d.D);
}

const kg_bf16 *pol_gpu_logits(const pol_gpu *g)
{
    return g->fwd_valid && g->head == POL_HEAD_LM ? g->a.logits : NULL;
}

int pol_gpu_n_tokens(const pol_gpu *g)
{
    return g->fwd_valid ? g->a.N : 0;
}

size_t pol_gpu_activation_bytes(const pol_gpu *g)
{
    return g->fwd_valid ? g->a.bytes : 0;
}

cudaStream_t pol_gpu_stream(const pol_gpu *g)
{
    return g->stream;
}
