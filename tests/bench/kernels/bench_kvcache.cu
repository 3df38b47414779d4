/* bench_kvcache: kg_decode_attention and kg_kv_write at Qwen2.5-0.5B's attention shape (14 query
 * heads, 2 kv heads, head_dim 64).
 *
 * Decode: batch 1 and 64, every sequence at ctx_len 512, 2048, 8192 in a cache of max_len =
 * ctx_len (its own slot each); plus batch 1 at ctx 1 and 512 in a cache of max_len 8192, since
 * the grid is sized by max_len (the empty chunks' cost). Decode is memory-bound: GB/s counts the
 * K and V bytes read (B * ctx * Hkv * hd * 2 bytes, twice), the floor of any implementation; the
 * time is both kernels (partials and merge). The workspace is allocated once, outside the timed
 * calls, as a decoder does; the call itself allocates nothing.
 * kv_write: one decode step of 64 sequences and a prefill of 8 packed documents of 2048; GB/s
 * counts k and v read and written once. The cache contents do not change the work: they are a
 * constant (cudaMemset) rather than random, which keeps setup of the large caches instant. */
#include "kcheck.h"

#define HQ 14
#define HKV 2
#define HD 64

typedef struct {
    kg_bf16 *out, *q, *kc, *vc, *k, *v;
    int32_t *slot, *ctx, *pos;
    int B, T, n_slots, max_len;
    float scale;
    void *ws; /* decode workspace */
    size_t ws_bytes;
} kv_bench;

static void run_decode(void *p)
{
    kv_bench *c = (kv_bench *)p;
    KC_CUDA(kg_decode_attention(c->out, c->q, c->kc, c->vc, c->slot, c->ctx, c->B, HQ, HKV, HD,
                                c->n_slots, c->max_len, c->scale, c->ws, c->ws_bytes, 0));
}

static void run_write(void *p)
{
    kv_bench *c = (kv_bench *)p;
    KC_CUDA(kg_kv_write(c->kc, c->vc, c->k, c->v, c->slot, c->pos, c->T, c->n_slots, c->max_len,
                        HKV, HD, 0));
}

/* the caches [n_slots, max_len, HKV, HD], every value bf16 0x3C3C (about 0.0115) */
static void caches_alloc(kv_bench *c)
{
    const size_t n = (size_t)c->n_slots * c->max_len * HKV * HD * sizeof(kg_bf16);
    KC_CUDA(cudaMalloc((void **)&c->kc, n));
    KC_CUDA(cudaMalloc((void **)&c->vc, n));
    KC_CUDA(cudaMemset(c->kc, 0x3C, n));
    KC_CUDA(cudaMemset(c->vc, 0x3C, n));
}

static int32_t *dev_i32(const int32_t *h, int n)
{
    int32_t *d;
    KC_CUDA(cudaMalloc((void **)&d, (size_t)n * sizeof *d));
    KC_CUDA(cudaMemcpy(d, h, (size_t)n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

static void bench_decode(int B, int ctx, int max_len)
{
    kv_bench c = {};
    c.B = B, c.n_slots = B, c.max_len = max_len, c.scale = 1.f / sqrtf((float)HD);
    caches_alloc(&c);
    const size_t nq = (size_t)B * HQ * HD;
    float *f = (float *)malloc(nq * sizeof *f);
    kc_fill(f, nq, 1, -2.f, 2.f);
    c.q = kc_to_dev_bf(f, nq);
    free(f);
    KC_CUDA(cudaMalloc((void **)&c.out, nq * sizeof(kg_bf16)));
    int32_t *h = (int32_t *)malloc((size_t)B * sizeof *h);
    for (int b = 0; b < B; b++)
        h[b] = b;
    c.slot = dev_i32(h, B);
    for (int b = 0; b < B; b++)
        h[b] = ctx;
    c.ctx = dev_i32(h, B);
    free(h);
    c.ws_bytes = kg_decode_attention_workspace_bytes(B, HQ, HD, max_len);
    KC_CUDA(cudaMalloc(&c.ws, c.ws_bytes));
    KC_CUDA(kg_decode_attention_workspace_init(c.ws, c.ws_bytes, B, HQ, 0));

    const double bytes = 2.0 * B * ctx * HKV * HD * sizeof(kg_bf16);
    const float ms = kc_time_ms(run_decode, &c, 5, 50);
    printf("decode  B %2d ctx %5d max_len %5d Hq %d Hkv %d hd %d: %9.1f us %8.1f GB/s (K+V read)\n",
           B, ctx, max_len, HQ, HKV, HD, ms * 1e3, bytes / (ms * 1e-3) / 1e9);

    KC_CUDA(cudaFree(c.kc));
    KC_CUDA(cudaFree(c.vc));
    KC_CUDA(cudaFree(c.q));
    KC_CUDA(cudaFree(c.out));
    KC_CUDA(cudaFree(c.slot));
    KC_CUDA(cudaFree(c.ctx));
    KC_CUDA(cudaFree(c.ws));
}

/* T tokens: ndocs documents of T / ndocs tokens, document d in slot d at positions 0.. (a
 * decode step is T = ndocs: one token per sequence, at position at) */
static void bench_write(const char *what, int T, int ndocs, int max_len, int at)
{
    kv_bench c = {};
    c.T = T, c.n_slots = ndocs, c.max_len = max_len;
    caches_alloc(&c);
    const size_t nk = (size_t)T * HKV * HD;
    float *f = (float *)malloc(nk * sizeof *f);
    kc_fill(f, nk, 2, -2.f, 2.f);
    c.k = kc_to_dev_bf(f, nk);
    kc_fill(f, nk, 3, -1.f, 1.f);
    c.v = kc_to_dev_bf(f, nk);
    free(f);
    const int per = T / ndocs;
    int32_t *sl = (int32_t *)malloc((size_t)T * sizeof *sl);
    int32_t *pos = (int32_t *)malloc((size_t)T * sizeof *pos);
    for (int t = 0; t < T; t++) {
        sl[t] = t / per;
        pos[t] = at + t % per;
    }
    c.slot = dev_i32(sl, T);
    c.pos = dev_i32(pos, T);
    free(sl), free(pos);

    const double bytes = 2.0 * 2.0 * nk * sizeof(kg_bf16); /* k and v, read and written */
    const float ms = kc_time_ms(run_write, &c, 5, 50);
    printf("kv_write %-16s T %5d Hkv %d hd %d: %9.1f us %8.1f GB/s (k+v read and written)\n", what,
           T, HKV, HD, ms * 1e3, bytes / (ms * 1e-3) / 1e9);

    KC_CUDA(cudaFree(c.kc));
    KC_CUDA(cudaFree(c.vc));
    KC_CUDA(cudaFree(c.k));
    KC_CUDA(cudaFree(c.v));
    KC_CUDA(cudaFree(c.slot));
    KC_CUDA(cudaFree(c.pos));
}

int main(void)
{
    static const int Bs[] = {1, 64}, ctxs[] = {512, 2048, 8192};
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            bench_decode(Bs[b], ctxs[i], ctxs[i]);
    /* the grid follows max_len: at batch 1 and 8192, 256 chunks of 32 keys, nearly all empty */
    bench_decode(1, 1, 8192);
    bench_decode(1, 512, 8192);
    bench_write("decode step B 64", 64, 64, 2048, 1000);
    bench_write("prefill 8 x 2048", 8 * 2048, 8, 2048, 0);
    return 0;
}
