/* bench_sample: kg_sample at the Qwen2.5-0.5B vocabulary (V = 151936, ld = V), one decode step for
 * B = 1, 8, 64, 256 sequences, in the four modes a rollout uses: greedy, temperature 1 (the whole
 * vocabulary kept), top_p 0.95 and top_k 50 (both at temperature 1). logp is asked for (the
 * rollout keeps it). The logits look like a language model's: normal around -2 (sd 2.5) with one
 * token in 500 lifted by 6 .. 14, so that top-p keeps tens to hundreds of tokens rather than one
 * or all. GB/s counts the logits read once (B * V * 2 bytes), the floor of any implementation;
 * the kernel reads a row once for greedy and about 2.5 times when sampling (see sample.cu).
 * Pass 1 (the whole of greedy) spreads a row over 38 blocks; the window and draw passes of a
 * sampled row still run in one block, so at B = 1 they dominate the sampled times. One
 * workspace of kg_sample_workspace_bytes(256, V) serves every B (the size only grows with B). */
#include "kcheck.h"

#define V 151936

/* hash of the index to a uniform in [0, 1) */
static __device__ float hash_uniform(uint64_t i, uint64_t seed)
{
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}

static __global__ void fill_logits(kg_bf16 *x, size_t n, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        /* the sum of four uniforms: near normal, sd 1/sqrt(3) */
        float g = hash_uniform(4 * i, seed) + hash_uniform(4 * i + 1, seed) +
                  hash_uniform(4 * i + 2, seed) + hash_uniform(4 * i + 3, seed) - 2.f;
        float z = 2.5f * 1.7320508f * g - 2.f;
        float lift = hash_uniform(i, seed ^ 0x1234567ULL);
        if (lift < 1.f / 500.f)
            z += 6.f + 8.f * lift * 500.f;
        x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(z));
    }
}

typedef struct mode {
    const char *name;
    float temperature;
    int top_k;
    float top_p;
} mode;

typedef struct ctx {
    int32_t *tokens;
    float *logp;
    kg_bf16 *logits;
    uint64_t *seed, *offset;
    void *ws;
    size_t ws_bytes;
    int B;
    const mode *m;
} ctx;

static void run(void *p)
{
    ctx *c = (ctx *)p;
    KC_CUDA(kg_sample(c->tokens, c->logp, c->logits, c->B, V, V, c->m->temperature, c->m->top_k,
                      c->m->top_p, c->seed, c->offset, c->ws, c->ws_bytes, 0));
}

int main(void)
{
    const int Bs[4] = {1, 8, 64, 256};
    const mode modes[4] = {
        {"greedy", 0.f, 0, 0.f},
        {"T=1", 1.f, 0, 0.f},
        {"top_p=0.95", 1.f, 0, 0.95f},
        {"top_k=50", 1.f, 50, 0.f},
    };
    const int B_max = 256;
    ctx c = {};
    KC_CUDA(cudaMalloc((void **)&c.logits, (size_t)B_max * V * sizeof(kg_bf16)));
    KC_CUDA(cudaMalloc((void **)&c.tokens, B_max * sizeof(int32_t)));
    KC_CUDA(cudaMalloc((void **)&c.logp, B_max * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&c.seed, B_max * sizeof(uint64_t)));
    KC_CUDA(cudaMalloc((void **)&c.offset, B_max * sizeof(uint64_t)));
    uint64_t h[256];
    for (int b = 0; b < B_max; b++)
        h[b] = 1000 + (uint64_t)b;
    KC_CUDA(cudaMemcpy(c.seed, h, sizeof h, cudaMemcpyHostToDevice));
    KC_CUDA(cudaMemcpy(c.offset, h, sizeof h, cudaMemcpyHostToDevice));
    fill_logits<<<2048, 256>>>(c.logits, (size_t)B_max * V, 777);
    KC_CUDA(cudaGetLastError());
    c.ws_bytes = kg_sample_workspace_bytes(B_max, V);
    if (c.ws_bytes)
        KC_CUDA(cudaMalloc(&c.ws, c.ws_bytes));
    KC_CUDA(cudaDeviceSynchronize());

    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 4; i++) {
            c.B = Bs[i];
            c.m = &modes[k];
            float ms = kc_time_ms(run, &c, 3, 50);
            double bytes = (double)c.B * V * sizeof(kg_bf16);
            printf("sample %-10s B=%-3d V=%d: %8.2f us  %7.1f GB/s (logits read once)\n",
                   modes[k].name, c.B, V, ms * 1e3, bytes / (ms * 1e6));
        }
    }

    KC_CUDA(cudaFree(c.logits));
    KC_CUDA(cudaFree(c.tokens));
    KC_CUDA(cudaFree(c.logp));
    KC_CUDA(cudaFree(c.seed));
    KC_CUDA(cudaFree(c.offset));
    if (c.ws)
        KC_CUDA(cudaFree(c.ws));
    return 0;
}
