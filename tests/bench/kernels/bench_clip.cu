/* bench_clip: global-norm gradient clipping at Qwen2.5-0.5B's size (494,032,768 fp32 gradients,
 * tied embeddings: the count bench_adamw uses), three ways:
 *  - sumsq flat: one kg_sumsq_accumulate over the whole gradient buffer, the kernel's best case;
 *  - clip walk: what policy/cuda/model_gpu_optim.c does every step: clear the scalar, one
 *    kg_sumsq_accumulate per tensor (290 tensors in HF order, back to back in the same buffer),
 *    then kg_clip_scale; the gap to the flat call is the launches and the small tensors' tails;
 *  - clip scale: kg_clip_scale alone (one thread: launch latency).
 * Memory-bound. Bytes = 4 n: every gradient read once. Left out: the per-block atomics (at most
 * 1024 floats a call, into L2) and the 4-byte scalars; kg_clip_scale's line reports its time only.
 * GB/s is set against the H200's ~4.8 TB/s of HBM3e. */
#include "kcheck.h"

#define PEAK_GBS 4800.0 /* H200 HBM3e, spec sheet */
#define MAX_TENSORS 512

/* uniform in [lo, hi) from a hash of the index: no host copy of 2 GB */
static __global__ void fill_f32(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 29;
        x[i] = lo + (hi - lo) * (float)(h >> 40) * (1.0f / 16777216.0f);
    }
}

typedef struct {
    float *grad, *sumsq, *scale;
    size_t n;
    const size_t *numel; /* the walk's tensors, back to back from grad */
    int n_tensors;
} clip_ctx;

static void run_flat(void *p)
{
    clip_ctx *c = (clip_ctx *)p;
    KC_CUDA(kg_sumsq_accumulate(c->sumsq, c->grad, c->n, 0));
}

static void run_walk(void *p)
{
    clip_ctx *c = (clip_ctx *)p;
    KC_CUDA(cudaMemsetAsync(c->sumsq, 0, sizeof(float), 0));
    size_t off = 0;
    for (int i = 0; i < c->n_tensors; i++) {
        KC_CUDA(kg_sumsq_accumulate(c->sumsq, c->grad + off, c->numel[i], 0));
        off += c->numel[i];
    }
    KC_CUDA(kg_clip_scale(c->scale, c->sumsq, 1.0f, 0));
}

static void run_scale(void *p)
{
    clip_ctx *c = (clip_ctx *)p;
    KC_CUDA(kg_clip_scale(c->scale, c->sumsq, 1.0f, 0));
}

/* Qwen2.5-0.5B's tensors in HF order: the embeddings; 24 layers of input norm, q, q bias, k,
 * k bias, v, v bias, o, post-attention norm, gate, up, down; the final norm. Returns the count. */
static int qwen_tensors(size_t *numel)
{
    const size_t D = 896, KV = 128, FFN = 4864, V = 151936;
    const size_t layer[12] = {D,  D * D, D, D * KV,  KV,      D * KV,
                              KV, D * D, D, FFN * D, FFN * D, D * FFN};
    int k = 0;
    numel[k++] = V * D;
    for (int l = 0; l < 24; l++)
        for (int j = 0; j < 12; j++)
            numel[k++] = layer[j];
    numel[k++] = D;
    return k;
}

static void report(const char *what, size_t n, float ms, double bytes)
{
    double gbs = bytes / (ms * 1e6);
    printf("clip %-26s n %9zu: %9.2f us  %8.1f MB  %7.1f GB/s (%4.1f%% of %.0f)\n", what, n,
           ms * 1e3, bytes / 1e6, gbs, 100 * gbs / PEAK_GBS, PEAK_GBS);
}

int main(void)
{
    const size_t full = 494032768; /* Qwen2.5-0.5B's parameters */
    size_t numel[MAX_TENSORS];
    clip_ctx c;
    c.numel = numel;
    c.n_tensors = qwen_tensors(numel);
    c.n = 0;
    for (int i = 0; i < c.n_tensors; i++)
        c.n += numel[i];
    if (c.n != full) { /* the table above is wrong: the figures would be for another model */
        fprintf(stderr, "FAIL bench_clip: the tensor table sums to %zu, not %zu\n", c.n, full);
        return 1;
    }
    KC_CUDA(cudaMalloc((void **)&c.grad, c.n * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&c.sumsq, 2 * sizeof(float)));
    c.scale = c.sumsq + 1;
    fill_f32<<<2048, 256>>>(c.grad, c.n, 2, -1e-3f, 1e-3f);
    KC_CUDA(cudaGetLastError());
    KC_CUDA(cudaMemset(c.sumsq, 0, 2 * sizeof(float)));
    KC_CUDA(cudaDeviceSynchronize());

    const double bytes = 4.0 * (double)c.n;
    float ms = kc_time_ms(run_flat, &c, 2, 20);
    report("sumsq flat (1 call)", c.n, ms, bytes);
    ms = kc_time_ms(run_walk, &c, 2, 20);
    char what[64];
    snprintf(what, sizeof what, "walk (%d tensors + scale)", c.n_tensors);
    report(what, c.n, ms, bytes);
    ms = kc_time_ms(run_scale, &c, 5, 100);
    printf("clip %-26s            : %9.2f us  (one thread: launch latency)\n", "scale", ms * 1e3);

    KC_CUDA(cudaFree(c.grad));
    KC_CUDA(cudaFree(c.sumsq));
    return 0;
}
