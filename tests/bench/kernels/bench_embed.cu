/* bench_embed: kg_embed_forward (a gather of rows) and kg_embed_backward (a scatter-add of rows)
 * at Qwen2.5-0.5B's vocabulary and hidden size: table [151936, 896] (bf16, 272 MB; its fp32
 * gradient 545 MB), for the training batch T = 8 x 2048 and, forward only, a decode step of 64
 * sequences. Token ids are drawn from the first 50,000 ids, where most of a real text's tokens
 * fall, two ways: uniform, and Zipf-like (P(id) ~ 1/(id + 1), the shape of real token
 * frequencies: id 0 alone takes ~6% of the tokens, so the backward's atomics pile onto a few rows).
 * A line per draw says how many distinct rows the tokens touch (their share of the vocabulary)
 * and how often the most repeated one comes.
 * Bytes, counted per token as the kernels issue them (H = hidden):
 *   forward  = T (2H + 2H + 4): a bf16 table row read, a bf16 output row written, the id;
 *   backward = T (2H + 8H + 4): a bf16 dout row read, an fp32 dtable row read and written (the
 *              atomics' read-modify-write), the id.
 * Repeated ids re-read rows already in cache, and the rows touched (~14,000 x 1.75 KB = 25 MB for
 * the uniform draw) may partly stay in the H200's 50 MB L2 from one repetition to the next: these
 * are effective rates, set against HBM's ~4.8 TB/s; the DRAM floor would count distinct rows. */
#include "kcheck.h"

#define PEAK_GBS 4800.0 /* H200 HBM3e, spec sheet */
#define VOCAB 151936
#define HIDDEN 896
#define ID_RANGE 50000 /* ids drawn from [0, ID_RANGE) */

/* uniform in [-1, 1) from a hash of the index, as bf16: no host copy of the table */
static __global__ void fill_bf16(kg_bf16 *x, size_t n, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 29;
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(2.f * u - 1.f));
    }
}

typedef struct {
    kg_bf16 *out, *table, *dout;
    float *dtable;
    int32_t *tokens;
    int T;
} embed_ctx;

static void run_fwd(void *p)
{
    embed_ctx *c = (embed_ctx *)p;
    KC_CUDA(kg_embed_forward(c->out, c->table, c->tokens, c->T, HIDDEN, VOCAB, 0));
}

static void run_bwd(void *p)
{
    embed_ctx *c = (embed_ctx *)p;
    KC_CUDA(kg_embed_backward(c->dtable, c->dout, c->tokens, c->T, HIDDEN, VOCAB, 0));
}

/* T ids in [0, ID_RANGE): uniform, or log-uniform (id = floor(ID_RANGE^u) - 1, so that
 * P(id = k) = ln((k + 2) / (k + 1)) / ln(ID_RANGE), about 1/(k + 1)) */
static void draw_tokens(int32_t *tok, int T, int zipf, uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (int t = 0; t < T; t++) {
        float u = kc_uniform(&st, 0.0f, 1.0f);
        int id = zipf ? (int)floor(exp((double)u * log((double)ID_RANGE))) - 1
                      : (int)((double)u * ID_RANGE);
        tok[t] = id < 0 ? 0 : (id >= ID_RANGE ? ID_RANGE - 1 : id);
    }
}

/* prints the distinct rows the ids touch and the largest repeat count */
static void token_stats(const char *draw, const int32_t *tok, int T)
{
    int *count = (int *)calloc(VOCAB, sizeof *count);
    int distinct = 0, max_rep = 0;
    for (int t = 0; t < T; t++) {
        int k = ++count[tok[t]];
        distinct += k == 1;
        max_rep = k > max_rep ? k : max_rep;
    }
    printf("tokens    %-7s T %5d: %6d distinct rows (%5.2f%% of %d), most repeated x%d\n", draw, T,
           distinct, 100.0 * distinct / VOCAB, VOCAB, max_rep);
    free(count);
}

static void report(const char *what, const char *draw, int T, float ms, double bytes)
{
    double gbs = bytes / (ms * 1e6);
    printf("embed %-3s %-7s T %5d H %d: %9.2f us  %7.1f MB  %7.1f GB/s (%4.1f%% of %.0f)\n", what,
           draw, T, HIDDEN, ms * 1e3, bytes / 1e6, gbs, 100 * gbs / PEAK_GBS, PEAK_GBS);
}

/* the table and its gradient are shared by every shape */
static void bench_shape(embed_ctx *c, int T, int zipf, int backward)
{
    const char *draw = zipf ? "zipf" : "uniform";
    int32_t *tok = (int32_t *)malloc((size_t)T * sizeof *tok);
    draw_tokens(tok, T, zipf, 7);
    token_stats(draw, tok, T);
    c->T = T;
    KC_CUDA(cudaMalloc((void **)&c->tokens, (size_t)T * sizeof *tok));
    KC_CUDA(cudaMemcpy(c->tokens, tok, (size_t)T * sizeof *tok, cudaMemcpyHostToDevice));
    KC_CUDA(cudaMalloc((void **)&c->out, (size_t)T * HIDDEN * sizeof(kg_bf16)));
    KC_CUDA(cudaMalloc((void **)&c->dout, (size_t)T * HIDDEN * sizeof(kg_bf16)));
    fill_bf16<<<1024, 256>>>(c->dout, (size_t)T * HIDDEN, 3);
    KC_CUDA(cudaGetLastError());
    KC_CUDA(cudaDeviceSynchronize());

    const double fwd_bytes = (double)T * (2.0 * HIDDEN + 2.0 * HIDDEN + 4);
    const double bwd_bytes = (double)T * (2.0 * HIDDEN + 8.0 * HIDDEN + 4);
    report("fwd", draw, T, kc_time_ms(run_fwd, c, 5, 50), fwd_bytes);
    if (backward)
        report("bwd", draw, T, kc_time_ms(run_bwd, c, 5, 50), bwd_bytes);

    KC_CUDA(cudaFree(c->tokens));
    KC_CUDA(cudaFree(c->out));
    KC_CUDA(cudaFree(c->dout));
    free(tok);
}

int main(void)
{
    const size_t n = (size_t)VOCAB * HIDDEN;
    embed_ctx c;
    KC_CUDA(cudaMalloc((void **)&c.table, n * sizeof(kg_bf16)));
    KC_CUDA(cudaMalloc((void **)&c.dtable, n * sizeof(float)));
    fill_bf16<<<2048, 256>>>(c.table, n, 1);
    KC_CUDA(cudaGetLastError());
    KC_CUDA(cudaMemset(c.dtable, 0, n * sizeof(float)));
    KC_CUDA(cudaDeviceSynchronize());

    bench_shape(&c, 8 * 2048, 0, 1); /* training batch, uniform ids */
    bench_shape(&c, 8 * 2048, 1, 1); /* training batch, Zipf-like ids */
    bench_shape(&c, 64, 0, 0);       /* decode step of 64 sequences */

    KC_CUDA(cudaFree(c.table));
    KC_CUDA(cudaFree(c.dtable));
    return 0;
}
