/* bench_rmsnorm: kg_rmsnorm_forward / kg_rmsnorm_backward on Qwen2.5-0.5B shapes (hidden 896)
 * at T = 8*2048 tokens and at a batch-1 decode step. Memory-bound: GB/s counts the bytes each
 * call must read and write once. */
#include "kcheck.h"

typedef struct {
    kg_bf16 *y, *x, *w, *dy, *dx;
    float *rstd, *dw;
    int T, n;
} bench_ctx;

static void run_fwd(void *p)
{
    bench_ctx *c = (bench_ctx *)p;
    KC_CUDA(kg_rmsnorm_forward(c->y, c->rstd, c->x, c->w, c->T, c->n, 1e-6f, 0));
}

static void run_bwd(void *p)
{
    bench_ctx *c = (bench_ctx *)p;
    KC_CUDA(kg_rmsnorm_backward(c->dx, c->dw, c->dy, c->x, c->rstd, c->w, c->T, c->n, 0));
}

static void bench_shape(int T, int n)
{
    size_t N = (size_t)T * n;
    float *h = (float *)malloc(N * sizeof *h);
    bench_ctx c;
    c.T = T, c.n = n;
    kc_fill(h, N, 1, -1.0f, 1.0f);
    c.x = kc_to_dev_bf(h, N);
    c.y = kc_to_dev_bf(h, N);
    c.dx = kc_to_dev_bf(h, N);
    kc_fill(h, N, 2, -1.0f, 1.0f);
    c.dy = kc_to_dev_bf(h, N);
    kc_fill(h, (size_t)n, 3, 0.5f, 1.5f);
    c.w = kc_to_dev_bf(h, (size_t)n);
    memset(h, 0, (size_t)n * sizeof *h);
    c.dw = kc_to_dev_f(h, (size_t)n);
    KC_CUDA(cudaMalloc((void **)&c.rstd, (size_t)T * sizeof(float)));
    run_fwd(&c); /* rstd for the backward */

    double row = (double)N * 2;                               /* one [T, n] bf16 tensor */
    double fwd_bytes = 2 * row + n * 2.0 + T * 4.0;           /* x in, y out, w, rstd */
    double bwd_bytes = 3 * row + n * 2.0 + T * 4.0 + n * 8.0; /* dy, x in, dx out; dw rw */
    float ms = kc_time_ms(run_fwd, &c, 5, 50);
    printf("rmsnorm fwd T %5d n %5d: %8.4f ms  %7.1f GB/s\n", T, n, ms, fwd_bytes / ms / 1e6);
    ms = kc_time_ms(run_bwd, &c, 5, 50);
    printf("rmsnorm bwd T %5d n %5d: %8.4f ms  %7.1f GB/s\n", T, n, ms, bwd_bytes / ms / 1e6);

    KC_CUDA(cudaFree(c.x));
    KC_CUDA(cudaFree(c.y));
    KC_CUDA(cudaFree(c.dx));
    KC_CUDA(cudaFree(c.dy));
    KC_CUDA(cudaFree(c.w));
    KC_CUDA(cudaFree(c.dw));
    KC_CUDA(cudaFree(c.rstd));
    free(h);
}

int main(void)
{
    bench_shape(8 * 2048, 896);  /* Qwen2.5-0.5B hidden, training batch */
    bench_shape(1, 896);         /* decode step */
    bench_shape(8 * 2048, 4096); /* a wider model, for scale */
    return 0;
}
