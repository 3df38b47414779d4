/* bench_adamw: kg_adamw_step over the whole Qwen2.5-0.5B parameter buffer (494,032,768 fp32
 * parameters, tied embeddings) with and without the bf16 copy, and over one MLP matrix
 * (896 x 4864) as a per-tensor call would see it. GB/s counts master, grad, m, v read and
 * master, m, v (+ param) written: 28 (30) bytes per parameter. */
#include "kcheck.h"

static __global__ void fill(float *x, size_t n, uint64_t seed, float lo, float hi)
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

typedef struct ctx {
    float *master, *grad, *m, *v;
    kg_bf16 *param;
    size_t n;
    int step;
} ctx;

static void run(void *p)
{
    ctx *c = (ctx *)p;
    c->step++;
    KC_CUDA(kg_adamw_step(c->master, c->param, c->grad, c->m, c->v, c->n, 1e-6f, 0.9f, 0.999f,
                          1e-8f, 0.01f, c->step, 0.5f, 0));
}

int main(void)
{
    /* Qwen2.5-0.5B: 24 layers x (q 896x896+896, k 896x128+128, v 896x128+128, o 896x896,
     * gate/up/down 3 x 896x4864, two norms 896) + embeddings 151936x896 + final norm 896 */
    const size_t layer =
        896 * 896 + 896 + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896;
    const size_t full = 24 * layer + (size_t)151936 * 896 + 896;
    const size_t ns[3] = {full, full, (size_t)896 * 4864};
    const int with_param[3] = {1, 0, 1};
    for (int k = 0; k < 3; k++) {
        ctx c;
        c.n = ns[k];
        c.step = 0;
        KC_CUDA(cudaMalloc((void **)&c.master, c.n * sizeof(float)));
        KC_CUDA(cudaMalloc((void **)&c.grad, c.n * sizeof(float)));
        KC_CUDA(cudaMalloc((void **)&c.m, c.n * sizeof(float)));
        KC_CUDA(cudaMalloc((void **)&c.v, c.n * sizeof(float)));
        c.param = NULL;
        if (with_param[k])
            KC_CUDA(cudaMalloc((void **)&c.param, c.n * sizeof(kg_bf16)));
        fill<<<2048, 256>>>(c.master, c.n, 1, -0.1f, 0.1f);
        fill<<<2048, 256>>>(c.grad, c.n, 2, -1e-3f, 1e-3f);
        KC_CUDA(cudaMemset(c.m, 0, c.n * sizeof(float)));
        KC_CUDA(cudaMemset(c.v, 0, c.n * sizeof(float)));
        KC_CUDA(cudaGetLastError());
        KC_CUDA(cudaDeviceSynchronize());

        int reps = c.n > 100000000 ? 10 : 100;
        float ms = kc_time_ms(run, &c, 2, reps);
        double bytes = (double)c.n * (with_param[k] ? 30 : 28);
        printf("adamw n=%-10zu %-11s: %8.3f ms  %7.1f GB/s\n", c.n,
               with_param[k] ? "param" : "param=NULL", ms, bytes / (ms * 1e6));

        KC_CUDA(cudaFree(c.master));
        KC_CUDA(cudaFree(c.grad));
        KC_CUDA(cudaFree(c.m));
        KC_CUDA(cudaFree(c.v));
        if (c.param)
            KC_CUDA(cudaFree(c.param));
    }
    return 0;
}
