/* bench_rope: kg_rope on Qwen2.5-0.5B shapes (14 query heads, 2 kv heads, head_dim 64) at
 * T = 8*2048 tokens (packed documents of 2048) and at a batch-1 decode step. Memory-bound: GB/s
 * counts x read and written once plus pos and inv_freq. */
#include "kcheck.h"

typedef struct {
    kg_bf16 *x;
    int32_t *pos;
    float *inv;
    int T, heads, hd, sign;
} bench_ctx;

static void run_rope(void *p)
{
    bench_ctx *c = (bench_ctx *)p;
    KC_CUDA(kg_rope(c->x, c->pos, c->inv, c->T, c->heads, c->hd, c->sign, 0));
}

static void bench_shape(int T, int heads, int hd, int sign)
{
    size_t N = (size_t)T * heads * hd;
    float *h = (float *)malloc(N * sizeof *h);
    int32_t *pos = (int32_t *)malloc((size_t)T * sizeof *pos);
    float inv[256];
    bench_ctx c;
    c.T = T, c.heads = heads, c.hd = hd, c.sign = sign;
    kc_fill(h, N, 1, -1.0f, 1.0f);
    c.x = kc_to_dev_bf(h, N);
    for (int t = 0; t < T; t++)
        pos[t] = T == 1 ? 1000 : t % 2048; /* documents of 2048 tokens */
    KC_CUDA(cudaMalloc((void **)&c.pos, (size_t)T * sizeof *pos));
    KC_CUDA(cudaMemcpy(c.pos, pos, (size_t)T * sizeof *pos, cudaMemcpyHostToDevice));
    for (int i = 0; i < hd / 2; i++)
        inv[i] = 1.0f / powf(1e6f, (float)(2 * i) / (float)hd);
    c.inv = kc_to_dev_f(inv, (size_t)hd / 2);

    double bytes = 2.0 * N * 2 + T * 4.0 + hd / 2 * 4.0;
    float ms = kc_time_ms(run_rope, &c, 5, 50);
    printf("rope %s T %5d heads %2d hd %3d: %8.4f ms  %7.1f GB/s\n", sign > 0 ? "fwd" : "inv", T,
           heads, hd, ms, bytes / ms / 1e6);

    KC_CUDA(cudaFree(c.x));
    KC_CUDA(cudaFree(c.pos));
    KC_CUDA(cudaFree(c.inv));
    free(h);
    free(pos);
}

int main(void)
{
    bench_shape(8 * 2048, 14, 64, 1);  /* q */
    bench_shape(8 * 2048, 2, 64, 1);   /* k */
    bench_shape(8 * 2048, 14, 64, -1); /* dq in the backward */
    bench_shape(1, 14, 64, 1);         /* decode step, q */
    bench_shape(1, 2, 64, 1);          /* decode step, k */
    bench_shape(8 * 2048, 32, 128, 1); /* a larger model's heads, for scale */
    return 0;
}
