/* bench_logprob: kg_logprob_forward / kg_logprob_backward at the Qwen2.5-0.5B vocabulary
 * (V = 151936, already a multiple of 128), for the training batch T = 8*2048, one sequence
 * T = 2048, and T = 1 (one token's log-prob, as a rollout would ask for it). GB/s counts the bytes
 * each kernel moves: the forward reads the logits once (+ target, logp, entropy); the backward
 * reads them twice (statistics, then the gradient) and writes dlogits. */
#include "kcheck.h"

/* logits uniform in [-15, 15) from a hash of the index: no host copy of gigabytes */
static __global__ void fill_logits(kg_bf16 *x, size_t n, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 29;
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(30.f * u - 15.f));
    }
}

static __global__ void fill_targets(int32_t *y, float *w, int T, int V)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < T; t += gridDim.x * blockDim.x) {
        y[t] = (int32_t)(((uint32_t)t * 2654435761u) % (uint32_t)V);
        w[t] = (t % 3) ? 0.5f : -0.25f;
    }
}

typedef struct ctx {
    float *logp, *ent, *wl, *we;
    kg_bf16 *logits, *dlogits;
    int32_t *target;
    int T, V, V_pad;
} ctx;

static void run_fwd(void *p)
{
    ctx *c = (ctx *)p;
    KC_CUDA(kg_logprob_forward(c->logp, c->ent, c->logits, c->target, c->T, c->V, c->V_pad, 0));
}

static void run_bwd(void *p)
{
    ctx *c = (ctx *)p;
    KC_CUDA(kg_logprob_backward(c->dlogits, c->logits, c->target, c->wl, c->we, c->T, c->V,
                                c->V_pad, 0));
}

int main(void)
{
    const int V = 151936, V_pad = 151936;
    const int Ts[3] = {8 * 2048, 2048, 1};
    for (int k = 0; k < 3; k++) {
        ctx c;
        c.T = Ts[k];
        c.V = V;
        c.V_pad = V_pad;
        size_t nl = (size_t)c.T * V_pad;
        KC_CUDA(cudaMalloc((void **)&c.logits, nl * sizeof(kg_bf16)));
        KC_CUDA(cudaMalloc((void **)&c.dlogits, nl * sizeof(kg_bf16)));
        KC_CUDA(cudaMalloc((void **)&c.target, (size_t)c.T * sizeof(int32_t)));
        KC_CUDA(cudaMalloc((void **)&c.logp, (size_t)c.T * sizeof(float)));
        KC_CUDA(cudaMalloc((void **)&c.ent, (size_t)c.T * sizeof(float)));
        KC_CUDA(cudaMalloc((void **)&c.wl, (size_t)c.T * sizeof(float)));
        KC_CUDA(cudaMalloc((void **)&c.we, (size_t)c.T * sizeof(float)));
        fill_logits<<<2048, 256>>>(c.logits, nl, 12345);
        fill_targets<<<64, 256>>>(c.target, c.wl, c.T, V);
        KC_CUDA(cudaMemcpy(c.we, c.wl, (size_t)c.T * sizeof(float), cudaMemcpyDeviceToDevice));
        KC_CUDA(cudaGetLastError());
        KC_CUDA(cudaDeviceSynchronize());

        int reps = c.T >= 2048 ? 10 : 100;
        double small = (double)c.T * (4 + 4 + 4); /* target, logp, entropy (or w_logp, w_ent) */
        float ms = kc_time_ms(run_fwd, &c, 2, reps);
        double bytes = (double)nl * 2 + small;
        printf("logprob fwd  T=%-6d V=%d V_pad=%d: %8.3f ms  %7.1f GB/s\n", c.T, V, V_pad, ms,
               bytes / (ms * 1e6));
        ms = kc_time_ms(run_bwd, &c, 2, reps);
        bytes = (double)nl * 2 * 3 + small;
        printf("logprob bwd  T=%-6d V=%d V_pad=%d: %8.3f ms  %7.1f GB/s (2 reads + 1 write)\n", c.T,
               V, V_pad, ms, bytes / (ms * 1e6));

        KC_CUDA(cudaFree(c.logits));
        KC_CUDA(cudaFree(c.dlogits));
        KC_CUDA(cudaFree(c.target));
        KC_CUDA(cudaFree(c.logp));
        KC_CUDA(cudaFree(c.ent));
        KC_CUDA(cudaFree(c.wl));
        KC_CUDA(cudaFree(c.we));
    }
    return 0;
}
