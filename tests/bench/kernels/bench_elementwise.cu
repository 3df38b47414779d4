/* bench_elementwise: elementwise.cu's kernels at Qwen2.5-0.5B shapes (hidden 896, k/v width 128)
 * for the training batch T = 8 x 2048 tokens, and kg_f32_to_bf16 over all 494,032,768 weights
 * (the master -> bf16 copy). Memory-bound: bytes count what each call must read and write once
 * (n = row length, N = T n):
 *   add             y += x                 6 N        x, y read; y written (bf16)
 *   bias_grad       db += colsum(dy)       2 N + 8 n  dy read; db read and written (fp32)
 *   value head fwd  values = h w + b       2 N + 2 n + 2 + 4 T
 *                                                     h, w, b read (bf16); values written (fp32)
 *   value head bwd  dh, dw, db             4 N + 4 T + 2 n + 8 n + 8
 *                                                     h read, dh written (bf16); dvalues (fp32)
 *                                                     and w read; dw, db read and written (fp32)
 *   f32_to_bf16     dst = bf16(src)        6 n        src read (fp32), dst written (bf16)
 * Vectors the kernels re-read from cache (w, dvalues, the column sums' per-band atomics into L2)
 * count once. GB/s is set against the H200's ~4.8 TB/s of HBM3e. */
#include "kcheck.h"

#define PEAK_GBS 4800.0 /* H200 HBM3e, spec sheet */

/* uniform in [lo, hi) from a hash of the index: no host copies of large buffers */
static __device__ float hash_uniform(size_t i, uint64_t seed, float lo, float hi)
{
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
    return lo + (hi - lo) * (float)(h >> 40) * (1.0f / 16777216.0f);
}

static __global__ void fill_f32(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = hash_uniform(i, seed, lo, hi);
}

static __global__ void fill_bf16(kg_bf16 *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(hash_uniform(i, seed, lo, hi)));
}

static float *dev_f32(size_t n, uint64_t seed, float lo, float hi)
{
    float *d;
    KC_CUDA(cudaMalloc((void **)&d, n * sizeof *d));
    fill_f32<<<2048, 256>>>(d, n, seed, lo, hi);
    KC_CUDA(cudaGetLastError());
    return d;
}

static kg_bf16 *dev_bf16(size_t n, uint64_t seed, float lo, float hi)
{
    kg_bf16 *d;
    KC_CUDA(cudaMalloc((void **)&d, n * sizeof *d));
    fill_bf16<<<2048, 256>>>(d, n, seed, lo, hi);
    KC_CUDA(cudaGetLastError());
    return d;
}

typedef struct {
    kg_bf16 *x, *y, *w, *b; /* x, y [T, n]: dy and h, y and dh; w [n]; b [1] */
    float *values, *dvalues, *dw, *db;
    int T, n;
} ew_ctx;

static void run_add(void *p)
{
    ew_ctx *c = (ew_ctx *)p;
    KC_CUDA(kg_add(c->y, c->x, (size_t)c->T * c->n, 0));
}

static void run_bias_grad(void *p)
{
    ew_ctx *c = (ew_ctx *)p;
    KC_CUDA(kg_bias_grad(c->dw, c->x, c->T, c->n, 0));
}

static void run_vh_fwd(void *p)
{
    ew_ctx *c = (ew_ctx *)p;
    KC_CUDA(kg_value_head_forward(c->values, c->x, c->w, c->b, c->T, c->n, 0));
}

static void run_vh_bwd(void *p)
{
    ew_ctx *c = (ew_ctx *)p;
    KC_CUDA(kg_value_head_backward(c->y, c->dw, c->db, c->dvalues, c->x, c->w, c->T, c->n, 0));
}

typedef struct {
    kg_bf16 *dst;
    float *src;
    size_t n;
} cvt_ctx;

static void run_cvt(void *p)
{
    cvt_ctx *c = (cvt_ctx *)p;
    KC_CUDA(kg_f32_to_bf16(c->dst, c->src, c->n, 0));
}

static void report(const char *what, int T, int n, float ms, double bytes)
{
    double gbs = bytes / (ms * 1e6);
    printf("%-16s T %5d n %4d: %9.2f us  %7.1f MB  %7.1f GB/s (%4.1f%% of %.0f)\n", what, T, n,
           ms * 1e3, bytes / 1e6, gbs, 100 * gbs / PEAK_GBS, PEAK_GBS);
}

/* every [T, n] kernel at one shape; value_head: also the value head (n = hidden only) */
static void bench_shape(int T, int n, int value_head)
{
    const size_t N = (size_t)T * n;
    ew_ctx c;
    c.T = T, c.n = n;
    c.x = dev_bf16(N, 1, -1.0f, 1.0f);
    c.y = dev_bf16(N, 2, -1.0f, 1.0f);
    c.w = dev_bf16((size_t)n, 3, -0.05f, 0.05f);
    c.b = dev_bf16(1, 4, -0.05f, 0.05f);
    c.dvalues = dev_f32((size_t)T, 5, -1.0f, 1.0f);
    KC_CUDA(cudaMalloc((void **)&c.values, (size_t)T * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&c.dw, (size_t)n * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&c.db, sizeof(float)));
    KC_CUDA(cudaMemset(c.dw, 0, (size_t)n * sizeof(float)));
    KC_CUDA(cudaMemset(c.db, 0, sizeof(float)));
    KC_CUDA(cudaDeviceSynchronize());

    const double tensor = 2.0 * N; /* one [T, n] bf16 tensor */
    if (value_head)                /* the residual add runs on the hidden width only */
        report("add", T, n, kc_time_ms(run_add, &c, 5, 50), 3 * tensor);
    report("bias_grad", T, n, kc_time_ms(run_bias_grad, &c, 5, 50), tensor + 8.0 * n);
    if (value_head) {
        report("value_head fwd", T, n, kc_time_ms(run_vh_fwd, &c, 5, 50),
               tensor + 2.0 * n + 2 + 4.0 * T);
        report("value_head bwd", T, n, kc_time_ms(run_vh_bwd, &c, 5, 50),
               2 * tensor + 4.0 * T + 2.0 * n + 8.0 * n + 8);
    }

    KC_CUDA(cudaFree(c.x));
    KC_CUDA(cudaFree(c.y));
    KC_CUDA(cudaFree(c.w));
    KC_CUDA(cudaFree(c.b));
    KC_CUDA(cudaFree(c.dvalues));
    KC_CUDA(cudaFree(c.values));
    KC_CUDA(cudaFree(c.dw));
    KC_CUDA(cudaFree(c.db));
}

static void bench_f32_to_bf16(size_t n)
{
    cvt_ctx c;
    c.n = n;
    c.src = dev_f32(n, 6, -0.1f, 0.1f);
    KC_CUDA(cudaMalloc((void **)&c.dst, n * sizeof(kg_bf16)));
    KC_CUDA(cudaDeviceSynchronize());
    float ms = kc_time_ms(run_cvt, &c, 2, 20);
    double bytes = 6.0 * (double)n, gbs = bytes / (ms * 1e6);
    printf("%-16s n %12zu: %9.2f us  %7.1f MB  %7.1f GB/s (%4.1f%% of %.0f)\n", "f32_to_bf16", n,
           ms * 1e3, bytes / 1e6, gbs, 100 * gbs / PEAK_GBS, PEAK_GBS);
    KC_CUDA(cudaFree(c.src));
    KC_CUDA(cudaFree(c.dst));
}

int main(void)
{
    const int T = 8 * 2048;
    bench_shape(T, 896, 1);       /* hidden: residual add, q_proj bias, the value head */
    bench_shape(T, 128, 0);       /* k_proj / v_proj bias */
    bench_f32_to_bf16(494032768); /* Qwen2.5-0.5B's weights, tied embeddings */
    return 0;
}
