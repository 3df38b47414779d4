/* bench_attention: kg_attention_forward / kg_attention_backward at Qwen2.5-0.5B's attention shape
 * (14 query heads, 2 kv heads, head_dim 64) on T = 8*2048 tokens packed as 8 documents of 2048,
 * plus one document of 2048 alone. TFLOP/s count the causal work only: 4 * n^2 / 2 * hd * Hq per
 * document of n tokens forward (QK^T and PV), 2.5x that backward (the backward's time includes
 * its scratch allocation, the D pass and the dq conversion). No decode shape: the API has no KV
 * cache, a decode step is not what these kernels do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kcheck.h"

typedef struct {
    int T, Hq, Hkv, hd;
    float scale;
    kg_bf16 *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse;
    int32_t *ds;
} att_ctx;

static void run_fwd(void *p)
{
    att_ctx *c = (att_ctx *)p;
    KC_CUDA(kg_attention_forward(c->out, c->lse, c->q, c->k, c->v, c->ds, c->T, c->Hq, c->Hkv,
                                 c->hd, c->scale, 0));
}

static void run_bwd(void *p)
{
    att_ctx *c = (att_ctx *)p;
    KC_CUDA(kg_attention_backward(c->dq, c->dk, c->dv, c->dout, c->out, c->lse, c->q, c->k, c->v,
                                  c->ds, c->T, c->Hq, c->Hkv, c->hd, c->scale, 0));
}

static void bench(int ndocs, int doc_len, int Hq, int Hkv, int hd)
{
    att_ctx c;
    c.T = ndocs * doc_len;
    c.Hq = Hq;
    c.Hkv = Hkv;
    c.hd = hd;
    c.scale = 1.f / sqrtf((float)hd);
    const size_t nq = (size_t)c.T * Hq * hd, nk = (size_t)c.T * Hkv * hd;
    float *f = (float *)malloc(nq * sizeof(float));
    kc_fill(f, nq, 1, -2.f, 2.f);
    c.q = kc_to_dev_bf(f, nq);
    kc_fill(f, nq, 2, -1.f, 1.f);
    c.dout = kc_to_dev_bf(f, nq);
    kc_fill(f, nk, 3, -2.f, 2.f);
    c.k = kc_to_dev_bf(f, nk);
    kc_fill(f, nk, 4, -1.f, 1.f);
    c.v = kc_to_dev_bf(f, nk);
    free(f);
    KC_CUDA(cudaMalloc((void **)&c.out, nq * 2));
    KC_CUDA(cudaMalloc((void **)&c.dq, nq * 2));
    KC_CUDA(cudaMalloc((void **)&c.dk, nk * 2));
    KC_CUDA(cudaMalloc((void **)&c.dv, nk * 2));
    KC_CUDA(cudaMalloc((void **)&c.lse, (size_t)c.T * Hq * sizeof(float)));
    int32_t *ds = (int32_t *)malloc((size_t)c.T * sizeof *ds);
    for (int t = 0; t < c.T; t++)
        ds[t] = t - t % doc_len;
    KC_CUDA(cudaMalloc((void **)&c.ds, (size_t)c.T * sizeof *ds));
    KC_CUDA(cudaMemcpy(c.ds, ds, (size_t)c.T * sizeof *ds, cudaMemcpyHostToDevice));
    free(ds);

    const double flop_fwd = (double)ndocs * 4.0 * (double)doc_len * doc_len / 2.0 * hd * Hq;
    float ms_f = kc_time_ms(run_fwd, &c, 3, 20);
    float ms_b = kc_time_ms(run_bwd, &c, 3, 20); /* out and lse: the forward's */
    printf("attention fwd T=%d (%d docs x %d) Hq=%d Hkv=%d hd=%d: %.3f ms, %.2f TFLOP/s\n", c.T,
           ndocs, doc_len, Hq, Hkv, hd, ms_f, flop_fwd / (ms_f * 1e-3) / 1e12);
    printf("attention bwd T=%d (%d docs x %d) Hq=%d Hkv=%d hd=%d: %.3f ms, %.2f TFLOP/s\n", c.T,
           ndocs, doc_len, Hq, Hkv, hd, ms_b, 2.5 * flop_fwd / (ms_b * 1e-3) / 1e12);

    kg_bf16 *b[] = {c.q, c.k, c.v, c.out, c.dout, c.dq, c.dk, c.dv};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        KC_CUDA(cudaFree(b[i]));
    KC_CUDA(cudaFree(c.lse));
    KC_CUDA(cudaFree(c.ds));
}

int main(void)
{
    bench(8, 2048, 14, 2, 64); /* the training shape: 8 packed documents of 2048 */
    bench(1, 2048, 14, 2, 64); /* one document alone: how the grid fills the GPU */
    return 0;
}
