/* bench_swiglu: kg_swiglu_forward / kg_swiglu_backward on Qwen2.5-0.5B shapes (ffn 4864) at
 * T = 8*2048 tokens and at a batch-1 decode step. Memory-bound: GB/s counts the bytes each call
 * must read and write once (forward 3 tensors, backward 5). */
#include "kcheck.h"

typedef struct {
    kg_bf16 *gate, *up, *h, *dh, *dgate, *dup;
    size_t count;
} bench_ctx;

static void run_fwd(void *p)
{
    bench_ctx *c = (bench_ctx *)p;
    KC_CUDA(kg_swiglu_forward(c->h, c->gate, c->up, c->count, 0));
}

static void run_bwd(void *p)
{
    bench_ctx *c = (bench_ctx *)p;
    KC_CUDA(kg_swiglu_backward(c->dgate, c->dup, c->dh, c->gate, c->up, c->count, 0));
}

static void bench_shape(int T, int ffn)
{
    size_t n = (size_t)T * ffn;
    float *f = (float *)malloc(n * sizeof *f);
    bench_ctx c;
    c.count = n;
    kc_fill(f, n, 1, -4.0f, 4.0f);
    c.gate = kc_to_dev_bf(f, n);
    kc_fill(f, n, 2, -1.0f, 1.0f);
    c.up = kc_to_dev_bf(f, n);
    c.h = kc_to_dev_bf(f, n);
    c.dgate = kc_to_dev_bf(f, n);
    c.dup = kc_to_dev_bf(f, n);
    kc_fill(f, n, 3, -1.0f, 1.0f);
    c.dh = kc_to_dev_bf(f, n);

    float ms = kc_time_ms(run_fwd, &c, 5, 50);
    printf("swiglu fwd T %5d ffn %4d: %8.4f ms  %7.1f GB/s\n", T, ffn, ms, 3.0 * n * 2 / ms / 1e6);
    ms = kc_time_ms(run_bwd, &c, 5, 50);
    printf("swiglu bwd T %5d ffn %4d: %8.4f ms  %7.1f GB/s\n", T, ffn, ms, 5.0 * n * 2 / ms / 1e6);

    KC_CUDA(cudaFree(c.gate));
    KC_CUDA(cudaFree(c.up));
    KC_CUDA(cudaFree(c.h));
    KC_CUDA(cudaFree(c.dgate));
    KC_CUDA(cudaFree(c.dup));
    KC_CUDA(cudaFree(c.dh));
    free(f);
}

int main(void)
{
    bench_shape(8 * 2048, 4864); /* Qwen2.5-0.5B MLP, training batch */
    bench_shape(1, 4864);        /* decode step */
    return 0;
}
