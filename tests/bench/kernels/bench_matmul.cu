/* bench_matmul: kg_matmul (cuBLASLt, bf16, fp32 accumulate) on the matmuls of a Qwen2.5-0.5B
 * training step at T = 8 x 2048 tokens and of one decode step at batch 1 and 64: ms per call
 * and TFLOP/s (against the H200's measured 790 TFLOP/s bf16 dense peak). Then the decode
 * shapes at M = 1 and 8 as a decode step sees them: the weight is not in L2 (calls cycle over
 * copies totalling more than the 50 MB L2), timed over 20 calls in a row; GB/s is the weight
 * read per call, against the H200's 4.8 TB/s. KGYM_MATMUL_SMALL_M=0 times cuBLASLt on them
 * instead of the small-M kernel. */
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

typedef struct {
    kg_matmul_ctx *ctx;
    kg_bf16 *X, *C, **W;
    int copies, next, M, N, K;
} gemv_job;

static void run_gemv(void *p)
{
    gemv_job *j = (gemv_job *)p;
    for (int i = 0; i < 20; i++, j->next = (j->next + 1) % j->copies)
        KC_CUDA(
            kg_matmul(j->ctx, j->C, j->X, j->W[j->next], NULL, j->M, j->N, j->K, 0, 1, 0.0f, 0));
}

static void bench_decode(kg_matmul_ctx *ctx, const char *what, int M, int N, int K)
{
    size_t wbytes = (size_t)N * K * 2;
    gemv_job j = {ctx, NULL, NULL, NULL, (int)((128u << 20) / wbytes) + 2, 0, M, N, K};
    j.W = (kg_bf16 **)calloc((size_t)j.copies, sizeof *j.W);
    KC_CUDA(cudaMalloc((void **)&j.X, (size_t)M * K * 2));
    KC_CUDA(cudaMalloc((void **)&j.C, (size_t)M * N * 2));
    KC_CUDA(cudaMemset(j.X, 0, (size_t)M * K * 2));
    for (int c = 0; c < j.copies; c++) {
        KC_CUDA(cudaMalloc((void **)&j.W[c], wbytes));
        KC_CUDA(cudaMemset(j.W[c], 0, wbytes));
    }
    float us = kc_time_ms(run_gemv, &j, 3, 15) * 1000 / 20;
    printf("%-28s M %6d N %6d K %6d  %8.2f us  %7.0f GB/s of weight  (%4.1f%% of 4800)\n", what, M,
           N, K, us, wbytes / (us * 1e3), 100 * wbytes / (us * 1e3) / 4800);
    for (int c = 0; c < j.copies; c++)
        cudaFree(j.W[c]);
    free(j.W);
    cudaFree(j.X);
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
    const char *env = getenv("KGYM_MATMUL_SMALL_M");
    printf("decode shapes, weight out of L2, M <= 8 on %s:\n",
           env && strcmp(env, "0") == 0 ? "cuBLASLt (KGYM_MATMUL_SMALL_M=0)"
                                        : "the small-M kernel");
    for (int M = 1; M <= 8; M += 7) {
        bench_decode(ctx, "decode q/o_proj", M, 896, 896);
        bench_decode(ctx, "decode qkv_proj", M, 1152, 896);
        bench_decode(ctx, "decode gate/up", M, 9728, 896);
        bench_decode(ctx, "decode down", M, 896, 4864);
        bench_decode(ctx, "decode lm_head", M, 151936, 896);
    }
    kg_matmul_ctx_free(ctx);
    return 0;
}
