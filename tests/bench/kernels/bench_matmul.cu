/* bench_matmul: kg_matmul (cuBLASLt, bf16, fp32 accumulate) on the matmuls of a Qwen2.5-0.5B
 * training step at T = 8 x 2048 tokens and of one decode step at batch 1 and 64: ms per call
 * and TFLOP/s (against the H200's measured 790 TFLOP/s bf16 dense peak). */
#include "kcheck.h"

typedef struct {
    kg_matmul_ctx *ctx;
    kg_bf16 *A, *B, *C;
    int M, N, K, ta, tb;
} mm_job;

static void run(void *p)
{
    mm_job *j = (mm_job *)p;
    KC_CUDA(kg_matmul(j->ctx, j->C, j->A, j->B, NULL, j->M, j->N, j->K, j->ta, j->tb, 0.0f, 0));
}

static void bench(kg_matmul_ctx *ctx, const char *what, int M, int N, int K, int ta, int tb)
{
    mm_job j = {ctx, NULL, NULL, NULL, M, N, K, ta, tb};
    KC_CUDA(cudaMalloc((void **)&j.A, (size_t)M * K * 2));
    KC_CUDA(cudaMalloc((void **)&j.B, (size_t)K * N * 2));
    KC_CUDA(cudaMalloc((void **)&j.C, (size_t)M * N * 2));
    KC_CUDA(cudaMemset(j.A, 0, (size_t)M * K * 2));
    KC_CUDA(cudaMemset(j.B, 0, (size_t)K * N * 2));
    float ms = kc_time_ms(run, &j, 5, 30);
    double tflops = 2.0 * M * N * K / (ms * 1e-3) / 1e12;
    printf("%-28s M %6d N %6d K %6d  %8.3f ms  %7.1f TFLOP/s  (%4.1f%% of 790)\n", what, M, N, K,
           ms, tflops, 100 * tflops / 790);
    cudaFree(j.A);
    cudaFree(j.B);
    cudaFree(j.C);
}

int main(void)
{
    kg_matmul_ctx *ctx = kg_matmul_ctx_new(32 << 20);
    if (!ctx)
        return 1;
    const int T = 8 * 2048;
    bench(ctx, "train q_proj y = x W^T", T, 896, 896, 0, 1);
    bench(ctx, "train kv_proj", T, 128, 896, 0, 1);
    bench(ctx, "train gate/up", T, 4864, 896, 0, 1);
    bench(ctx, "train down", T, 896, 4864, 0, 1);
    bench(ctx, "train lm_head", T, 151936, 896, 0, 1);
    bench(ctx, "train dX = dY W (down)", T, 4864, 896, 0, 0);
    bench(ctx, "train dW = dY^T X (down)", 896, 4864, T, 1, 0);
    bench(ctx, "decode b1 gate/up", 1, 4864, 896, 0, 1);
    bench(ctx, "decode b64 gate/up", 64, 4864, 896, 0, 1);
    bench(ctx, "decode b64 lm_head", 64, 151936, 896, 0, 1);
    kg_matmul_ctx_free(ctx);
    return 0;
}
