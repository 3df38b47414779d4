/* test_kvcache: kg_kv_write and kg_decode_attention.
 *
 * (1) kv_write: T tokens' k and v land at [slot, pos] bit for bit, in caches filled with a
 *     sentinel and wrapped in guard rows; tokens with slot or pos out of range are skipped (among
 *     them pos = -1 and pos = max_len, which an unchecked write would put inside the cache, in
 *     the neighbouring slot; and slot -1 / n_slots, which would land in the guards); nothing but
 *     the written rows changes. Vectorised rows (Hkv * hd a multiple of 8, aligned), rows longer
 *     than the block (threads loop), an odd row (37) and misaligned k/v or caches (scalar path).
 * (2) decode against a double CPU reference (softmax over the ctx_len cached tokens, query head
 *     h reading kv head h / (Hq / Hkv), the given scale), hd 64 and 128, Hq/Hkv 14/2, 8/8, 8/1
 *     and 4/4 (the decoder gives a block several warps per query head when Hq/Hkv is small: 4/4
 *     and 8/8 take that path). The chunk of keys per block depends on B * Hkv and max_len (32 at
 *     batch 1 and max_len 8192 with 2 kv heads, 256 at batch 64), so the cases cover chunk
 *     boundaries at several chunk sizes:
 *       - batch 1, ctx 1, 31, 32, 33, 300, 4097 in a max_len of 8192 (most chunks past ctx_len:
 *         their blocks must write nothing the merge reads), and invalid batch-1 calls;
 *       - batches of 8 and 10 with every ctx_len class (1 .. 4096: one chunk and several, 255/256/
 *         257, max_len 4096 and 1000 (a partial last chunk), a scale other than 1/sqrt(hd));
 *       - batches of 64 with random and mixed ctx_len (tiny ones beside 8192 in one call);
 *       - caches misaligned by one element (the scalar loads).
 *     Sequences live in shuffled slots. Every cache position that no sequence owns (other slots,
 *     and each slot past its ctx_len) holds NaN: a read of one shows up as NaN. Sequences with an
 *     invalid slot or ctx_len get a NaN row (kvcache.cu's stated behaviour) and do not disturb
 *     the others. The workspace is exactly kg_decode_attention_workspace_bytes, filled with NaN
 *     (a partial read before it is written shows up) and followed by guard bytes that must stay
 *     as they were (a write past the stated size shows up).
 * (3) consistency with kg_attention_forward: a packed prefill (causal, doc_start), its k/v
 *     written to the cache by kg_kv_write; then (a) the last token of each document decoded with
 *     ctx_len = its document's length, (b) every token decoded at once (B = T, ctx_len = its
 *     position + 1, the rest of the document in the cache after it), (c) step by step: a fresh
 *     (NaN) cache, one token per document appended per step and decoded, with one workspace
 *     sized for the largest step. All against the forward's rows; (c) must also equal bit for
 *     bit the same step's queries decoded against the full cache of (b) (same call shape, same
 *     arithmetic: what lies past ctx_len, future tokens or NaN, must not matter).
 * (4) slot reuse: a slot that held a long sequence (whose keys are its queries scaled up, so
 *     that any stale token read would dominate the softmax) then a shorter one, then a shorter
 *     still: decode with the short ctx_len matches the reference and equals bit for bit the same
 *     data decoded from a slot whose tail is NaN.
 * (5) argument errors of both (the decode workspace NULL, one byte short, misaligned among
 *     them), B = 0 and T = 0 as no-ops that write nothing; kg_decode_attention_workspace_bytes
 *     0 for invalid arguments and never smaller for a larger B.
 *
 * KGYM_KERNEL_SMALL=1 (compute-sanitizer) runs a few small shapes only, among them a batch-1
 * call over mostly empty chunks, a split of a chunk across warps and a multi-chunk merge. */
#include <limits.h>
#include <stdarg.h>

#include "kcheck.h"

/* a finite bf16 (about 1.5e16) that no row of values in [-2, 2] can be */
#define GUARD_BYTE 0x5A
#define GUARD_BF ((kg_bf16)0x5A5A)
/* cudaMemset with 0xFF: every bf16 is 0xFFFF, a NaN */
#define NAN_BYTE 0xFF

/* Tolerance against the double reference: out is rounded once to bf16, an error of at most
 * 2^-8 of its fp32 value. Before that the fp32 value differs from the exact one by fp32
 * rounding in the scores (a dot of hd terms of size <= 4 |scale|), in __expf (a few ulp) and in
 * the sums of at most 256 terms per chunk (the B = T calls of (3) use up to ~900) plus the
 * merge: with |v| <= 1 those move out by ~1e-6 typically and stay far under 1e-4. So |got - want|
 * <= 1e-4 + 2^-8 |want|. What this still catches: one token too few at ctx 4096 (p_j ~ 1e-3 there)
 * moves 1-5% of that sequence's values past the tolerance, at short contexts nearly all of them; a
 * lost chunk, a merge without its rescale, a wrong head, slot or scale move most values by 1e-2 or
 * more; a token read past ctx_len is a NaN (every unowned cache position is NaN). */
#define DEC_ATOL 1e-4f
#define DEC_RTOL (1.f / 256.f)
/* Decode against kg_attention_forward: the forward runs P V on the tensor cores, with each
 * probability rounded to bf16 (relative error <= 2^-8) while its row sum stays fp32, so its
 * fp32 output moves by up to 2^-8 sum_j p_j |v_j| / sum_j p_j <= 2^-8 (|v| <= 1 here); the
 * decode is fp32 throughout. Then both are rounded to bf16: at most one bf16 ulp apart (<= 2^-7
 * of either), 1% slack on the ulp for the relative-to-which-side term, plus the fp32 difference
 * (< 1e-4, as above). The decode's own accuracy is held to DEC_* against the double reference;
 * this check is about the two paths agreeing on layout (slots, positions, documents), which any
 * such error moves by far more. */
#define CONS_ATOL (1.f / 256.f + 1e-4f)
#define CONS_RTOL (1.01f / 128.f)

/* ---- small helpers ---- */

static kg_bf16 *dev_bf(size_t n)
{
    kg_bf16 *d;
    KC_CUDA(cudaMalloc((void **)&d, (n + 8) * sizeof *d));
    return d;
}

static void put_bf(kg_bf16 *d, const float *f, size_t n)
{
    kg_bf16 *h = (kg_bf16 *)malloc((n + 1) * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = kc_f2bf(f[i]);
    KC_CUDA(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
    free(h);
}

static int32_t *dev_i32(const int32_t *h, int n)
{
    int32_t *d;
    KC_CUDA(cudaMalloc((void **)&d, ((size_t)n + 1) * sizeof *d));
    KC_CUDA(cudaMemcpy(d, h, (size_t)n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

static float *get_bf(const kg_bf16 *d, size_t n)
{
    float *f = (float *)malloc((n + 1) * sizeof *f);
    kc_from_dev_bf(f, d, n);
    return f;
}

static float *host_rand(size_t n, uint64_t seed, float lo, float hi)
{
    float *f = (float *)malloc((n + 1) * sizeof *f);
    kc_fill(f, n, seed, lo, hi);
    return f;
}

static int expect(const char *label, cudaError_t got, cudaError_t want)
{
    int ok = got == want;
    printf("%-4s %s: got %s\n", ok ? "ok" : "FAIL", label, cudaGetErrorName(got));
    return ok;
}

/* "ok"/"FAIL", the label, then the printf-style detail */
static int report(const char *label, int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%-4s %s: ", ok ? "ok" : "FAIL", label);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    return ok;
}

/* a random permutation of 0..n-1 (Fisher-Yates) */
static void shuffle(int *p, int n, uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 5;
    for (int i = 0; i < n; i++)
        p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(kc_next(&st) % (uint64_t)(i + 1)), t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

/* ---- (1) kv_write ---- */

#define KVW_GUARD_ROWS 2

/* One cache (k or v) in a buffer of [guard rows][cache][guard rows] (+ slack for an offset),
 * all sentinel. The cache starts off elements into the buffer. */
typedef struct {
    kg_bf16 *buf, *cache;
    size_t n; /* elements in buf */
} guarded_cache;

static void guarded_alloc(guarded_cache *g, size_t cache_rows, int row, int off)
{
    g->n = (cache_rows + 2 * KVW_GUARD_ROWS) * (size_t)row + 8;
    KC_CUDA(cudaMalloc((void **)&g->buf, g->n * sizeof *g->buf));
    KC_CUDA(cudaMemset(g->buf, GUARD_BYTE, g->n * sizeof *g->buf));
    g->cache = g->buf + (size_t)KVW_GUARD_ROWS * row + off;
}

/* the whole buffer against want (bits); returns the count of differing values */
static size_t guarded_diff(const guarded_cache *g, const kg_bf16 *want, size_t *first)
{
    kg_bf16 *h = (kg_bf16 *)malloc(g->n * sizeof *h);
    KC_CUDA(cudaMemcpy(h, g->buf, g->n * sizeof *h, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < g->n; i++)
        if (h[i] != want[i] && bad++ == 0)
            *first = i;
    free(h);
    return bad;
}

/* (slot, pos) pairs: the first ones out of range, the rest distinct valid pairs (never the two
 * cache rows that pos -1 of slot 1 and pos max_len of slot 0 would hit if not skipped) */
static int make_write_targets(int32_t *slot, int32_t *pos, int T, int n_slots, int max_len,
                              uint64_t seed)
{
    const int32_t bad[][2] = {{1, -1},      {0, max_len},           {-1, max_len - 1},
                              {n_slots, 0}, {n_slots - 1, max_len}, {INT_MIN, 0},
                              {0, INT_MAX}};
    const int nbad = (int)(sizeof bad / sizeof bad[0]);
    const size_t rows = (size_t)n_slots * max_len;
    unsigned char *used = (unsigned char *)calloc(rows, 1);
    used[max_len - 1] = used[max_len] = 1; /* where {1, -1} and {0, max_len} would land */
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 9;
    int t = 0;
    for (; t < T && t < nbad; t++) {
        slot[t] = bad[t][0];
        pos[t] = bad[t][1];
    }
    for (; t < T; t++) {
        size_t r;
        do
            r = kc_next(&st) % rows;
        while (used[r]);
        used[r] = 1;
        slot[t] = (int32_t)(r / max_len);
        pos[t] = (int32_t)(r % max_len);
    }
    free(used);
    return T < nbad ? T : nbad; /* how many were invalid */
}

/* src_off / cache_off: k, v / the caches start that many elements into their buffers */
static int check_kv_write(int Hkv, int hd, int n_slots, int max_len, int T, int src_off,
                          int cache_off, uint64_t seed)
{
    const int row = Hkv * hd;
    const size_t rows = (size_t)n_slots * max_len, nsrc = (size_t)T * row;
    float *k = host_rand(nsrc, seed, -2.f, 2.f), *v = host_rand(nsrc, seed + 1, -2.f, 2.f);
    int32_t *slot = (int32_t *)malloc(((size_t)T + 1) * sizeof *slot);
    int32_t *pos = (int32_t *)malloc(((size_t)T + 1) * sizeof *pos);
    const int nbad = make_write_targets(slot, pos, T, n_slots, max_len, seed);

    kg_bf16 *kbuf = dev_bf(nsrc + 8), *vbuf = dev_bf(nsrc + 8);
    put_bf(kbuf + src_off, k, nsrc);
    put_bf(vbuf + src_off, v, nsrc);
    int32_t *slot_d = dev_i32(slot, T), *pos_d = dev_i32(pos, T);
    guarded_cache kc, vc;
    guarded_alloc(&kc, rows, row, cache_off);
    guarded_alloc(&vc, rows, row, cache_off);

    KC_CUDA(kg_kv_write(kc.cache, vc.cache, kbuf + src_off, vbuf + src_off, slot_d, pos_d, T,
                        n_slots, max_len, Hkv, hd, 0));
    KC_CUDA(cudaDeviceSynchronize());

    kg_bf16 *wk = (kg_bf16 *)malloc(kc.n * sizeof *wk), *wv = (kg_bf16 *)malloc(vc.n * sizeof *wv);
    for (size_t i = 0; i < kc.n; i++)
        wk[i] = wv[i] = GUARD_BF;
    const size_t base = (size_t)KVW_GUARD_ROWS * row + cache_off;
    for (int t = nbad; t < T; t++) {
        const size_t dst = base + ((size_t)slot[t] * max_len + pos[t]) * row;
        for (int i = 0; i < row; i++) {
            wk[dst + i] = kc_f2bf(k[(size_t)t * row + i]);
            wv[dst + i] = kc_f2bf(v[(size_t)t * row + i]);
        }
    }
    size_t fk = 0, fv = 0;
    const size_t bk = guarded_diff(&kc, wk, &fk), bv = guarded_diff(&vc, wv, &fv);
    char label[160];
    snprintf(label, sizeof label, "kv_write Hkv %2d hd %3d T %4d (%d skipped)%s%s", Hkv, hd, T,
             nbad, src_off ? " k/v misaligned" : "", cache_off ? " caches misaligned" : "");
    if (bk)
        fprintf(stderr, "FAIL %s: k cache buffer element %zu differs\n", label, fk);
    if (bv)
        fprintf(stderr, "FAIL %s: v cache buffer element %zu differs\n", label, fv);
    int ok = report(label, bk == 0 && bv == 0,
                    "%zu k and %zu v values differ from the expected buffers", bk, bv);

    KC_CUDA(cudaFree(kbuf));
    KC_CUDA(cudaFree(vbuf));
    KC_CUDA(cudaFree(slot_d));
    KC_CUDA(cudaFree(pos_d));
    KC_CUDA(cudaFree(kc.buf));
    KC_CUDA(cudaFree(vc.buf));
    free(k), free(v), free(slot), free(pos), free(wk), free(wv);
    return ok;
}

/* ---- the decode reference ---- */

/* out[Hq, hd] of one query q[Hq, hd] over k, v [ctx, Hkv, hd], in double */
static void ref_decode(float *out, const float *q, const float *k, const float *v, int ctx, int Hq,
                       int Hkv, int hd, double scale)
{
    double *p = (double *)malloc((size_t)ctx * sizeof *p);
    const int G = Hq / Hkv;
    for (int h = 0; h < Hq; h++) {
        const int hk = h / G;
        const float *qr = q + (size_t)h * hd;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < ctx; j++) {
            const float *kr = k + ((size_t)j * Hkv + hk) * hd;
            double s = 0;
            for (int d = 0; d < hd; d++)
                s += (double)qr[d] * kr[d];
            p[j] = s * scale;
            mx = p[j] > mx ? p[j] : mx;
        }
        for (int j = 0; j < ctx; j++) {
            p[j] = exp(p[j] - mx);
            sum += p[j];
        }
        for (int d = 0; d < hd; d++) {
            double o = 0;
            for (int j = 0; j < ctx; j++)
                o += p[j] * v[((size_t)j * Hkv + hk) * hd + d];
            out[(size_t)h * hd + d] = (float)(o / sum);
        }
    }
    free(p);
}

/* a pair of caches [n_slots, max_len, Hkv, hd], all NaN, starting off elements into their
 * buffers (off 1: not 16-byte aligned, the decoder's scalar loads) */
typedef struct {
    kg_bf16 *k, *v, *kbuf, *vbuf;
    int n_slots, max_len, Hkv, hd;
} dev_cache;

static void cache_alloc_off(dev_cache *c, int n_slots, int max_len, int Hkv, int hd, int off)
{
    const size_t n = (size_t)n_slots * max_len * Hkv * hd;
    c->n_slots = n_slots;
    c->max_len = max_len;
    c->Hkv = Hkv;
    c->hd = hd;
    c->kbuf = dev_bf(n + 8);
    c->vbuf = dev_bf(n + 8);
    KC_CUDA(cudaMemset(c->kbuf, NAN_BYTE, (n + 8) * sizeof *c->kbuf));
    KC_CUDA(cudaMemset(c->vbuf, NAN_BYTE, (n + 8) * sizeof *c->vbuf));
    c->k = c->kbuf + off;
    c->v = c->vbuf + off;
}

static void cache_alloc(dev_cache *c, int n_slots, int max_len, int Hkv, int hd)
{
    cache_alloc_off(c, n_slots, max_len, Hkv, hd, 0);
}

static void cache_free(dev_cache *c)
{
    KC_CUDA(cudaFree(c->kbuf));
    KC_CUDA(cudaFree(c->vbuf));
}

/* ---- the decode workspace ---- */

#define WS_GUARD 256
#define WS_GUARD_BYTE 0xA5

/* exactly kg_decode_attention_workspace_bytes(B, Hq, hd, max_len) bytes, all NaN floats, then
 * WS_GUARD guard bytes */
typedef struct {
    unsigned char *buf;
    size_t bytes;
} dec_ws;

static void ws_alloc(dec_ws *w, int B, int Hq, int hd, int max_len)
{
    w->bytes = kg_decode_attention_workspace_bytes(B, Hq, hd, max_len);
    if (w->bytes == 0) {
        fprintf(stderr, "kg_decode_attention_workspace_bytes(%d, %d, %d, %d) is 0\n", B, Hq, hd,
                max_len);
        exit(2);
    }
    KC_CUDA(cudaMalloc((void **)&w->buf, w->bytes + WS_GUARD));
    KC_CUDA(cudaMemset(w->buf, NAN_BYTE, w->bytes));
    KC_CUDA(cudaMemset(w->buf + w->bytes, WS_GUARD_BYTE, WS_GUARD));
    KC_CUDA(kg_decode_attention_workspace_init(w->buf, w->bytes, B, Hq, 0)); /* the counters */
}

/* frees w; 0 and a FAIL line when a kernel wrote past its stated size */
static int ws_free(dec_ws *w, const char *label)
{
    unsigned char h[WS_GUARD];
    KC_CUDA(cudaMemcpy(h, w->buf + w->bytes, WS_GUARD, cudaMemcpyDeviceToHost));
    KC_CUDA(cudaFree(w->buf));
    int bad = 0;
    for (int i = 0; i < WS_GUARD; i++)
        bad += h[i] != WS_GUARD_BYTE;
    if (bad)
        printf("FAIL %s: %d guard bytes past the %zu-byte workspace overwritten\n", label, bad,
               w->bytes);
    return bad == 0;
}

/* kg_decode_attention over the caches of c with the workspace w */
static cudaError_t decode(kg_bf16 *out, const kg_bf16 *q, const dev_cache *c, const int32_t *slot,
                          const int32_t *ctx, int B, int Hq, float scale, const dec_ws *w)
{
    return kg_decode_attention(out, q, c->k, c->v, slot, ctx, B, Hq, c->Hkv, c->hd, c->n_slots,
                               c->max_len, scale, w->buf, w->bytes, 0);
}

/* slot s's positions [0, len) to NaN again */
static void cache_clear_slot(dev_cache *c, int s, int len)
{
    const size_t row = (size_t)c->Hkv * c->hd, at = (size_t)s * c->max_len * row;
    KC_CUDA(cudaMemset(c->k + at, NAN_BYTE, (size_t)len * row * sizeof *c->k));
    KC_CUDA(cudaMemset(c->v + at, NAN_BYTE, (size_t)len * row * sizeof *c->v));
}

static int seq_valid(int slot, int ctx, int n_slots, int max_len)
{
    return slot >= 0 && slot < n_slots && ctx >= 1 && ctx <= max_len;
}

/* ---- (2) decode against the reference ---- */

/* B sequences, sequence b in slot[b] with ctx[b] tokens uploaded straight into the cache (so
 * that only decode is under test); entries with an invalid slot or ctx get no data and must
 * come back all NaN. cache_off: the caches start that many elements into their buffers. */
static int check_decode(const char *name, int Hq, int Hkv, int hd, int n_slots, int max_len, int B,
                        const int *ctx, const int *slot, float scale, int cache_off, uint64_t seed)
{
    const int row = Hkv * hd, qrow = Hq * hd;
    dev_cache c;
    cache_alloc_off(&c, n_slots, max_len, Hkv, hd, cache_off);
    float *q = host_rand((size_t)B * qrow, seed, -2.f, 2.f);
    float *want = (float *)malloc(((size_t)B * qrow + 1) * sizeof *want);
    float *gotv = (float *)malloc(((size_t)B * qrow + 1) * sizeof *gotv);
    int32_t *slot32 = (int32_t *)malloc(((size_t)B + 1) * sizeof *slot32);
    int32_t *ctx32 = (int32_t *)malloc(((size_t)B + 1) * sizeof *ctx32);
    int nvalid = 0;
    for (int b = 0; b < B; b++) {
        slot32[b] = slot[b];
        ctx32[b] = ctx[b];
        if (!seq_valid(slot[b], ctx[b], n_slots, max_len))
            continue;
        const size_t n = (size_t)ctx[b] * row, at = (size_t)slot[b] * max_len * row;
        float *k = host_rand(n, seed * 31 + 2 * b + 1, -2.f, 2.f);
        float *v = host_rand(n, seed * 31 + 2 * b + 2, -1.f, 1.f);
        put_bf(c.k + at, k, n);
        put_bf(c.v + at, v, n);
        ref_decode(want + (size_t)nvalid * qrow, q + (size_t)b * qrow, k, v, ctx[b], Hq, Hkv, hd,
                   (double)scale);
        nvalid++;
        free(k), free(v);
    }
    kg_bf16 *q_d = dev_bf((size_t)B * qrow), *out_d = dev_bf((size_t)B * qrow);
    put_bf(q_d, q, (size_t)B * qrow);
    int32_t *slot_d = dev_i32(slot32, B), *ctx_d = dev_i32(ctx32, B);

    dec_ws w;
    ws_alloc(&w, B, Hq, hd, max_len);
    KC_CUDA(decode(out_d, q_d, &c, slot_d, ctx_d, B, Hq, scale, &w));
    KC_CUDA(cudaDeviceSynchronize());
    float *got = get_bf(out_d, (size_t)B * qrow);
    /* the same call twice more on the same workspace, out reset to NaN bytes first: the same
     * bits each time (the merge counters at the workspace's end come back to 0 after a call, so
     * every call merges and writes every row again) */
    int again_same = 1;
    for (int rep = 0; rep < 2; rep++) {
        KC_CUDA(cudaMemset(out_d, NAN_BYTE, (size_t)B * qrow * sizeof *out_d));
        KC_CUDA(decode(out_d, q_d, &c, slot_d, ctx_d, B, Hq, scale, &w));
        KC_CUDA(cudaDeviceSynchronize());
        float *again = get_bf(out_d, (size_t)B * qrow);
        again_same &= memcmp(again, got, (size_t)B * qrow * sizeof *got) == 0;
        free(again);
    }

    /* the valid rows, packed in the reference's order; NaN count of the invalid ones */
    size_t nv = 0, not_nan = 0, ninv = 0;
    for (int b = 0; b < B; b++) {
        const float *r = got + (size_t)b * qrow;
        if (seq_valid(slot[b], ctx[b], n_slots, max_len)) {
            memcpy(gotv + nv, r, (size_t)qrow * sizeof *r);
            nv += qrow;
        } else {
            ninv++;
            for (int i = 0; i < qrow; i++)
                not_nan += !isnan(r[i]);
        }
    }
    char label[192];
    snprintf(label, sizeof label, "decode %s Hq %2d Hkv %d hd %3d B %2d max_len %4d%s", name, Hq,
             Hkv, hd, B, max_len, cache_off ? " caches misaligned" : "");
    int ok = nv == 0 || kc_close(label, gotv, want, nv, DEC_ATOL, DEC_RTOL);
    if (ninv) {
        snprintf(label, sizeof label, "decode %s Hq %2d Hkv %d hd %3d invalid sequences", name, Hq,
                 Hkv, hd);
        ok &= report(label, not_nan == 0, "%zu rows, %zu values not NaN", ninv, not_nan);
    }
    snprintf(label, sizeof label, "decode %s Hq %2d Hkv %d hd %3d B %2d: repeated calls", name, Hq,
             Hkv, hd, B);
    ok &= report(label, again_same, "3 calls on one workspace, the same bits");
    ok &= ws_free(&w, label);

    cache_free(&c);
    KC_CUDA(cudaFree(q_d));
    KC_CUDA(cudaFree(out_d));
    KC_CUDA(cudaFree(slot_d));
    KC_CUDA(cudaFree(ctx_d));
    free(q), free(want), free(gotv), free(got), free(slot32), free(ctx32);
    return ok;
}

/* the fixed batches of (2) for one head layout */
static int check_decode_batches(int Hq, int Hkv, int hd, uint64_t seed)
{
    int ok = 1;
    const float scale = 1.f / sqrtf((float)hd);
    /* every ctx_len class, in shuffled slots; slots 2, 6 and 8 belong to nobody (NaN) */
    const int ctx_a[] = {1, 2, 17, 255, 256, 257, 1000, 4096};
    const int slot_a[] = {9, 3, 0, 7, 10, 1, 5, 4};
    ok &= check_decode("lens 1..4096", Hq, Hkv, hd, 11, 4096, 8, ctx_a, slot_a, scale, 0, seed);
    /* max_len 1000: the last chunk partial; another scale; invalid entries among valid ones
     * (slot -1, slot n_slots, ctx 0, ctx max_len + 1) */
    const int ctx_b[] = {1000, 999, 0, 3, 744, 768, 7, 769, 1001, 5};
    const int slot_b[] = {2, 0, 1, 5, 3, 4, -1, 6, 7, 8};
    ok &= check_decode("max_len 1000", Hq, Hkv, hd, 8, 1000, 10, ctx_b, slot_b, 0.7f * scale, 0,
                       seed + 1);
    return ok;
}

/* Batch 1 in a cache of max_len 8192: at 2 kv heads the chunk is 32 keys, 256 chunks, so ctx
 * 31 / 32 / 33 end inside, at the end of, and one past the first chunk, and nearly every block
 * is past ctx_len. Slot 1 of 3: the neighbouring slots are NaN. Then calls whose only sequence
 * is invalid (ctx 0, ctx max_len + 1, slot 3): a NaN row. */
static int check_decode_single(int Hq, int Hkv, int hd, uint64_t seed)
{
    static const int ctxs[] = {1, 31, 32, 33, 300, 4097};
    const float scale = 1.f / sqrtf((float)hd);
    const int one = 1;
    int ok = 1;
    char name[32];
    for (int i = 0; i < (int)(sizeof ctxs / sizeof ctxs[0]); i++) {
        snprintf(name, sizeof name, "ctx %4d", ctxs[i]);
        ok &= check_decode(name, Hq, Hkv, hd, 3, 8192, 1, &ctxs[i], &one, scale, 0, seed + i);
    }
    static const int bad_ctx[] = {0, 8193, 5}, bad_slot[] = {1, 1, 3};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "ctx %d slot %d", bad_ctx[i], bad_slot[i]);
        ok &= check_decode(name, Hq, Hkv, hd, 3, 8192, 1, &bad_ctx[i], &bad_slot[i], scale, 0,
                           seed + 10 + i);
    }
    return ok;
}

/* B = 64 (the decode batch of the bench) with random ctx_len in [1, max_len] and slots */
static int check_decode_random(int Hq, int Hkv, int hd, int B, int max_len, uint64_t seed)
{
    const int n_slots = B + 6;
    int *perm = (int *)malloc((size_t)n_slots * sizeof *perm);
    int *ctx = (int *)malloc((size_t)B * sizeof *ctx);
    shuffle(perm, n_slots, seed);
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 13;
    for (int b = 0; b < B; b++)
        ctx[b] = 1 + (int)(kc_next(&st) % (uint64_t)max_len);
    ctx[0] = max_len;
    int ok = check_decode("random lens", Hq, Hkv, hd, n_slots, max_len, B, ctx, perm,
                          1.f / sqrtf((float)hd), 0, seed);
    free(perm), free(ctx);
    return ok;
}

/* B = 64 in max_len 8192 (chunk 256 at 2 kv heads), ctx_len mixed: the chunk-boundary and tiny
 * ones of batch 1, max_len itself, then half short (<= 64) and half anywhere, so that most
 * blocks of most sequences are past ctx_len while a few sequences use every chunk */
static int check_decode_mixed(int Hq, int Hkv, int hd, uint64_t seed)
{
    enum { B = 64, MAX_LEN = 8192 };
    static const int fixed[] = {1, 31, 32, 33, 255, 256, 257, 300, 4097, MAX_LEN, MAX_LEN - 1, 2};
    const int nfixed = (int)(sizeof fixed / sizeof fixed[0]), n_slots = B + 6;
    int perm[B + 6], ctx[B];
    shuffle(perm, n_slots, seed);
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 17;
    for (int b = 0; b < B; b++) {
        const uint64_t r = kc_next(&st);
        ctx[b] = b < nfixed ? fixed[b]
                 : r & 1    ? 1 + (int)((r >> 1) % 64)
                            : 1 + (int)((r >> 1) % MAX_LEN);
    }
    return check_decode("mixed lens", Hq, Hkv, hd, n_slots, MAX_LEN, B, ctx, perm,
                        1.f / sqrtf((float)hd), 0, seed);
}

/* ---- (3) consistency with kg_attention_forward ---- */

typedef struct {
    int T, Hq, Hkv, hd, ndocs;
    const int *lens, *slots; /* per document */
    int n_slots, max_len;
    float scale;
    int32_t *ds, *slot_t, *pos_t; /* host, per token */
    float *q, *k, *v;             /* host, bf16 values */
    kg_bf16 *q_d, *k_d, *v_d, *out_d;
    float *fwd; /* host copy of the forward's out */
} prefill;

static void prefill_setup(prefill *p, int Hq, int Hkv, int hd, const int *lens, const int *slots,
                          int ndocs, int n_slots, uint64_t seed)
{
    p->Hq = Hq, p->Hkv = Hkv, p->hd = hd, p->ndocs = ndocs;
    p->lens = lens, p->slots = slots, p->n_slots = n_slots;
    p->scale = 1.f / sqrtf((float)hd);
    p->T = 0;
    p->max_len = 1;
    for (int d = 0; d < ndocs; d++) {
        p->T += lens[d];
        p->max_len = lens[d] > p->max_len ? lens[d] : p->max_len;
    }
    p->max_len += 13; /* room past the longest document, and not a multiple of the chunk */
    const int T = p->T;
    p->ds = (int32_t *)malloc((size_t)T * sizeof *p->ds);
    p->slot_t = (int32_t *)malloc((size_t)T * sizeof *p->slot_t);
    p->pos_t = (int32_t *)malloc((size_t)T * sizeof *p->pos_t);
    for (int d = 0, t = 0; d < ndocs; d++)
        for (int i = 0; i < lens[d]; i++, t++) {
            p->ds[t] = t - i;
            p->slot_t[t] = slots[d];
            p->pos_t[t] = i;
        }
    const size_t nq = (size_t)T * Hq * hd, nk = (size_t)T * Hkv * hd;
    p->q = host_rand(nq, seed * 3, -2.f, 2.f);
    p->k = host_rand(nk, seed * 3 + 1, -2.f, 2.f);
    p->v = host_rand(nk, seed * 3 + 2, -1.f, 1.f);
    p->q_d = dev_bf(nq), p->k_d = dev_bf(nk), p->v_d = dev_bf(nk), p->out_d = dev_bf(nq);
    put_bf(p->q_d, p->q, nq);
    put_bf(p->k_d, p->k, nk);
    put_bf(p->v_d, p->v, nk);

    int32_t *ds_d = dev_i32(p->ds, T);
    float *lse_d;
    KC_CUDA(cudaMalloc((void **)&lse_d, (size_t)T * Hq * sizeof *lse_d));
    KC_CUDA(kg_attention_forward(p->out_d, lse_d, p->q_d, p->k_d, p->v_d, ds_d, T, Hq, Hkv, hd,
                                 p->scale, 0));
    KC_CUDA(cudaDeviceSynchronize());
    p->fwd = get_bf(p->out_d, nq);
    KC_CUDA(cudaFree(ds_d));
    KC_CUDA(cudaFree(lse_d));
}

static void prefill_free(prefill *p)
{
    KC_CUDA(cudaFree(p->q_d));
    KC_CUDA(cudaFree(p->k_d));
    KC_CUDA(cudaFree(p->v_d));
    KC_CUDA(cudaFree(p->out_d));
    free(p->ds), free(p->slot_t), free(p->pos_t), free(p->q), free(p->k), free(p->v), free(p->fwd);
}

static void prefill_desc(char *buf, size_t n, const prefill *p)
{
    snprintf(buf, n, "Hq %2d Hkv %d hd %3d T %4d docs %d", p->Hq, p->Hkv, p->hd, p->T, p->ndocs);
}

/* a NaN cache holding the whole prefill, written by kv_write (each document in its slot) */
static void full_cache(dev_cache *c, const prefill *p)
{
    cache_alloc(c, p->n_slots, p->max_len, p->Hkv, p->hd);
    int32_t *slot_d = dev_i32(p->slot_t, p->T), *pos_d = dev_i32(p->pos_t, p->T);
    KC_CUDA(kg_kv_write(c->k, c->v, p->k_d, p->v_d, slot_d, pos_d, p->T, p->n_slots, p->max_len,
                        p->Hkv, p->hd, 0));
    KC_CUDA(cudaDeviceSynchronize());
    KC_CUDA(cudaFree(slot_d));
    KC_CUDA(cudaFree(pos_d));
}

/* (a) and (b): the whole prefill written by kv_write, then decoded */
static int check_prefill_decode(const prefill *p)
{
    const int T = p->T, qrow = p->Hq * p->hd;
    char desc[96], label[192];
    prefill_desc(desc, sizeof desc, p);
    dev_cache c;
    full_cache(&c, p);
    int ok = 1;

    /* (a) the last token of each document, ctx_len = the document's length */
    const int nd = p->ndocs;
    int32_t *ctx = (int32_t *)malloc(((size_t)T + 1) * sizeof *ctx);
    int32_t *sl = (int32_t *)malloc(((size_t)nd + 1) * sizeof *sl);
    kg_bf16 *q_last = dev_bf((size_t)nd * qrow), *out_last = dev_bf((size_t)nd * qrow);
    float *want = (float *)malloc(((size_t)nd * qrow + 1) * sizeof *want);
    for (int d = 0, t = 0; d < nd; d++) {
        t += p->lens[d];
        ctx[d] = p->lens[d];
        sl[d] = p->slots[d];
        KC_CUDA(cudaMemcpy(q_last + (size_t)d * qrow, p->q_d + (size_t)(t - 1) * qrow,
                           (size_t)qrow * sizeof(kg_bf16), cudaMemcpyDeviceToDevice));
        memcpy(want + (size_t)d * qrow, p->fwd + (size_t)(t - 1) * qrow, qrow * sizeof *want);
    }
    int32_t *ctx_d = dev_i32(ctx, nd), *sl_d = dev_i32(sl, nd);
    dec_ws w;
    ws_alloc(&w, nd, p->Hq, p->hd, p->max_len);
    KC_CUDA(decode(out_last, q_last, &c, sl_d, ctx_d, nd, p->Hq, p->scale, &w));
    KC_CUDA(cudaDeviceSynchronize());
    float *got = get_bf(out_last, (size_t)nd * qrow);
    snprintf(label, sizeof label, "prefill+decode last tokens = forward %s", desc);
    ok &= kc_close(label, got, want, (size_t)nd * qrow, CONS_ATOL, CONS_RTOL);
    ok &= ws_free(&w, label);
    free(got);
    KC_CUDA(cudaFree(ctx_d));

    /* (b) every token at once: B = T, q is the prefill's own q, ctx_len = position + 1 (in the
     * full run a batch large enough for chunks longer than 256) */
    for (int t = 0; t < T; t++)
        ctx[t] = p->pos_t[t] + 1;
    ctx_d = dev_i32(ctx, T);
    int32_t *slot_d = dev_i32(p->slot_t, T);
    kg_bf16 *out_all = dev_bf((size_t)T * qrow);
    ws_alloc(&w, T, p->Hq, p->hd, p->max_len);
    KC_CUDA(decode(out_all, p->q_d, &c, slot_d, ctx_d, T, p->Hq, p->scale, &w));
    KC_CUDA(cudaDeviceSynchronize());
    got = get_bf(out_all, (size_t)T * qrow);
    snprintf(label, sizeof label, "prefill+decode every token = forward %s", desc);
    ok &= kc_close(label, got, p->fwd, (size_t)T * qrow, CONS_ATOL, CONS_RTOL);
    ok &= ws_free(&w, label);

    cache_free(&c);
    KC_CUDA(cudaFree(slot_d));
    KC_CUDA(cudaFree(ctx_d));
    KC_CUDA(cudaFree(sl_d));
    KC_CUDA(cudaFree(q_last));
    KC_CUDA(cudaFree(out_last));
    KC_CUDA(cudaFree(out_all));
    free(ctx), free(sl), free(want), free(got);
    return ok;
}

/* gather rows order[i] of src [*, rowlen] into dst (host) */
static void gather_rows(float *dst, const float *src, const int *order, int n, int rowlen)
{
    for (int i = 0; i < n; i++)
        memcpy(dst + (size_t)i * rowlen, src + (size_t)order[i] * rowlen,
               (size_t)rowlen * sizeof *dst);
}

/* (c) step by step from a NaN cache: step i appends token i of every document still running
 * (kv_write of one token per sequence) and decodes those tokens with ctx_len i + 1; the same
 * queries are also decoded against the full cache (the whole prefill written at once), a call
 * of the same shape. Tokens are laid out step-major on the device once, so the steps are only
 * launches, in stream order. One workspace, sized for the largest step (every document), serves
 * every step. */
static int check_step_by_step(const prefill *p)
{
    const int T = p->T, qrow = p->Hq * p->hd, row = p->Hkv * p->hd;
    int longest = 0;
    for (int d = 0; d < p->ndocs; d++)
        longest = p->lens[d] > longest ? p->lens[d] : longest;
    int *order = (int *)malloc((size_t)T * sizeof *order);
    int *step_off = (int *)malloc(((size_t)longest + 1) * sizeof *step_off);
    int m = 0;
    for (int i = 0; i < longest; i++) {
        step_off[i] = m;
        for (int d = 0, start = 0; d < p->ndocs; start += p->lens[d], d++)
            if (i < p->lens[d])
                order[m++] = start + i;
    }
    step_off[longest] = m;

    float *qs = (float *)malloc((size_t)T * qrow * sizeof *qs);
    float *ks = (float *)malloc((size_t)T * row * sizeof *ks);
    float *vs = (float *)malloc((size_t)T * row * sizeof *vs);
    int32_t *sl = (int32_t *)malloc((size_t)T * sizeof *sl),
            *pos = (int32_t *)malloc((size_t)T * sizeof *pos);
    int32_t *ctx = (int32_t *)malloc((size_t)T * sizeof *ctx);
    gather_rows(qs, p->q, order, T, qrow);
    gather_rows(ks, p->k, order, T, row);
    gather_rows(vs, p->v, order, T, row);
    for (int i = 0; i < T; i++) {
        sl[i] = p->slot_t[order[i]];
        pos[i] = p->pos_t[order[i]];
        ctx[i] = pos[i] + 1;
    }
    kg_bf16 *qs_d = dev_bf((size_t)T * qrow), *ks_d = dev_bf((size_t)T * row);
    kg_bf16 *vs_d = dev_bf((size_t)T * row), *out_d = dev_bf((size_t)T * qrow);
    kg_bf16 *full_d = dev_bf((size_t)T * qrow);
    put_bf(qs_d, qs, (size_t)T * qrow);
    put_bf(ks_d, ks, (size_t)T * row);
    put_bf(vs_d, vs, (size_t)T * row);
    int32_t *sl_d = dev_i32(sl, T), *pos_d = dev_i32(pos, T), *ctx_d = dev_i32(ctx, T);
    dev_cache c, cf;
    cache_alloc(&c, p->n_slots, p->max_len, p->Hkv, p->hd);
    full_cache(&cf, p);
    dec_ws w;
    ws_alloc(&w, p->ndocs, p->Hq, p->hd, p->max_len);

    for (int i = 0; i < longest; i++) {
        const int o = step_off[i], n = step_off[i + 1] - o;
        KC_CUDA(kg_kv_write(c.k, c.v, ks_d + (size_t)o * row, vs_d + (size_t)o * row, sl_d + o,
                            pos_d + o, n, p->n_slots, p->max_len, p->Hkv, p->hd, 0));
        KC_CUDA(decode(out_d + (size_t)o * qrow, qs_d + (size_t)o * qrow, &c, sl_d + o, ctx_d + o,
                       n, p->Hq, p->scale, &w));
        KC_CUDA(decode(full_d + (size_t)o * qrow, qs_d + (size_t)o * qrow, &cf, sl_d + o, ctx_d + o,
                       n, p->Hq, p->scale, &w));
    }
    KC_CUDA(cudaDeviceSynchronize());
    float *got = get_bf(out_d, (size_t)T * qrow), *full = get_bf(full_d, (size_t)T * qrow);
    float *want = (float *)malloc((size_t)T * qrow * sizeof *want);
    char desc[96], label[192];
    prefill_desc(desc, sizeof desc, p);
    gather_rows(want, p->fwd, order, T, qrow);
    snprintf(label, sizeof label, "decode step by step (%d steps) = forward %s", longest, desc);
    int ok = kc_close(label, got, want, (size_t)T * qrow, CONS_ATOL, CONS_RTOL);

    /* bit for bit the full-cache decode: NaN on either side counts as a difference */
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)T * qrow; i++)
        diff += !(got[i] == full[i]);
    snprintf(label, sizeof label, "decode step by step = full-cache decode bitwise %s", desc);
    ok &= report(label, diff == 0, "%zu of %zu values differ", diff, (size_t)T * qrow);
    ok &= ws_free(&w, label);

    cache_free(&c);
    cache_free(&cf);
    KC_CUDA(cudaFree(qs_d));
    KC_CUDA(cudaFree(ks_d));
    KC_CUDA(cudaFree(vs_d));
    KC_CUDA(cudaFree(out_d));
    KC_CUDA(cudaFree(full_d));
    KC_CUDA(cudaFree(sl_d));
    KC_CUDA(cudaFree(pos_d));
    KC_CUDA(cudaFree(ctx_d));
    free(order), free(step_off), free(qs), free(ks), free(vs), free(sl), free(pos), free(ctx);
    free(got), free(full), free(want);
    return ok;
}

static int check_consistency(int Hq, int Hkv, int hd, const int *lens, const int *slots, int ndocs,
                             int n_slots, uint64_t seed)
{
    prefill p;
    prefill_setup(&p, Hq, Hkv, hd, lens, slots, ndocs, n_slots, seed);
    int ok = check_prefill_decode(&p);
    ok &= check_step_by_step(&p);
    prefill_free(&p);
    return ok;
}

/* ---- (4) slot reuse ---- */

/* writes n tokens' k, v (host, [n, Hkv, hd]) to positions 0..n-1 of slot s through kv_write */
static void write_seq(dev_cache *c, int s, const float *k, const float *v, int n)
{
    const size_t nk = (size_t)n * c->Hkv * c->hd;
    kg_bf16 *k_d = dev_bf(nk), *v_d = dev_bf(nk);
    put_bf(k_d, k, nk);
    put_bf(v_d, v, nk);
    int32_t *sl = (int32_t *)malloc((size_t)n * sizeof *sl),
            *pos = (int32_t *)malloc((size_t)n * sizeof *pos);
    for (int i = 0; i < n; i++)
        sl[i] = s, pos[i] = i;
    int32_t *sl_d = dev_i32(sl, n), *pos_d = dev_i32(pos, n);
    KC_CUDA(kg_kv_write(c->k, c->v, k_d, v_d, sl_d, pos_d, n, c->n_slots, c->max_len, c->Hkv, c->hd,
                        0));
    KC_CUDA(cudaDeviceSynchronize());
    KC_CUDA(cudaFree(k_d));
    KC_CUDA(cudaFree(v_d));
    KC_CUDA(cudaFree(sl_d));
    KC_CUDA(cudaFree(pos_d));
    free(sl), free(pos);
}

/* Slot 1 first holds a long sequence whose key for kv head hk is 4x the query of head hk * G
 * (a score ~40 above the others: one stale token read would own the softmax) and whose values
 * are all 1; then each of the shorter sequences in turn is written over it, and also into slot
 * 2 after slot 2 is reset to NaN. Decode [slot 1, slot 2] with the short ctx_len. */
static int check_slot_reuse(int Hq, int Hkv, int hd, int long_len, const int *short_lens,
                            int nshort, uint64_t seed)
{
    const int G = Hq / Hkv, row = Hkv * hd, qrow = Hq * hd;
    const float scale = 1.f / sqrtf((float)hd);
    dev_cache c;
    cache_alloc(&c, 3, long_len + 16, Hkv, hd);
    float *q = host_rand((size_t)qrow, seed, -2.f, 2.f);
    float *k = (float *)malloc((size_t)long_len * row * sizeof *k);
    float *v = (float *)malloc((size_t)long_len * row * sizeof *v);
    for (int j = 0; j < long_len; j++)
        for (int hk = 0; hk < Hkv; hk++)
            for (int d = 0; d < hd; d++) {
                const size_t i = ((size_t)j * Hkv + hk) * hd + d;
                k[i] = 4.f * q[(size_t)hk * G * hd + d];
                v[i] = 1.f;
            }
    write_seq(&c, 1, k, v, long_len);
    free(k), free(v);

    kg_bf16 *q_d = dev_bf(2 * (size_t)qrow), *out_d = dev_bf(2 * (size_t)qrow);
    put_bf(q_d, q, qrow);
    put_bf(q_d + qrow, q, qrow);
    const int32_t slots[2] = {1, 2};
    int32_t *sl_d = dev_i32(slots, 2), *ctx_d;
    KC_CUDA(cudaMalloc((void **)&ctx_d, 2 * sizeof *ctx_d));
    dec_ws w;
    ws_alloc(&w, 2, Hq, hd, c.max_len);
    int ok = 1;
    for (int r = 0; r < nshort; r++) {
        const int n = short_lens[r];
        float *ks = host_rand((size_t)n * row, seed * 7 + 2 * r + 1, -2.f, 2.f);
        float *vs = host_rand((size_t)n * row, seed * 7 + 2 * r + 2, -1.f, 1.f);
        write_seq(&c, 1, ks, vs, n);
        cache_clear_slot(&c, 2, c.max_len);
        write_seq(&c, 2, ks, vs, n);
        const int32_t ctx[2] = {n, n};
        KC_CUDA(cudaMemcpy(ctx_d, ctx, sizeof ctx, cudaMemcpyHostToDevice));
        KC_CUDA(decode(out_d, q_d, &c, sl_d, ctx_d, 2, Hq, scale, &w));
        KC_CUDA(cudaDeviceSynchronize());
        float *got = get_bf(out_d, 2 * (size_t)qrow);
        float *want = (float *)malloc((size_t)qrow * sizeof *want);
        ref_decode(want, q, ks, vs, n, Hq, Hkv, hd, (double)scale);
        char label[160];
        snprintf(label, sizeof label, "slot reuse Hq %2d Hkv %d hd %3d ctx %4d over %4d stale", Hq,
                 Hkv, hd, n, r ? short_lens[r - 1] : long_len);
        ok &= kc_close(label, got, want, qrow, DEC_ATOL, DEC_RTOL);
        size_t diff = 0;
        for (int i = 0; i < qrow; i++)
            diff += !(got[i] == got[qrow + i]);
        snprintf(label, sizeof label, "slot reuse Hq %2d Hkv %d hd %3d ctx %4d = NaN-tail slot", Hq,
                 Hkv, hd, n);
        ok &= report(label, diff == 0, "%zu of %zu values differ", diff, (size_t)qrow);
        free(ks), free(vs), free(got), free(want);
    }
    ok &= ws_free(&w, "slot reuse");
    cache_free(&c);
    KC_CUDA(cudaFree(q_d));
    KC_CUDA(cudaFree(out_d));
    KC_CUDA(cudaFree(sl_d));
    KC_CUDA(cudaFree(ctx_d));
    free(q);
    return ok;
}

/* ---- (5) argument errors ---- */

/* kg_decode_attention_workspace_bytes: 0 for invalid arguments, positive otherwise, and never
 * smaller for a larger B (a decoder sizes one workspace for its largest call) */
static int check_workspace_bytes(void)
{
    int ok = 1;
    ok &= report("workspace bytes of invalid arguments are 0",
                 kg_decode_attention_workspace_bytes(0, 14, 64, 100) == 0 &&
                     kg_decode_attention_workspace_bytes(-1, 14, 64, 100) == 0 &&
                     kg_decode_attention_workspace_bytes(1, 0, 64, 100) == 0 &&
                     kg_decode_attention_workspace_bytes(1, 14, 96, 100) == 0 &&
                     kg_decode_attention_workspace_bytes(1, 14, 64, 0) == 0,
                 "B 0 / -1, Hq 0, hd 96, max_len 0");
    static const int lens[] = {1, 31, 33, 1000, 8192, 100000};
    int shrinks = 0, zero = 0;
    for (int i = 0; i < (int)(sizeof lens / sizeof lens[0]); i++)
        for (int hd = 64; hd <= 128; hd += 64) {
            size_t prev = 0;
            for (int B = 1; B <= 5000; B++) {
                const size_t n = kg_decode_attention_workspace_bytes(B, 14, hd, lens[i]);
                zero += n == 0;
                shrinks += n < prev;
                prev = n;
            }
        }
    ok &= report("workspace bytes grow with B", shrinks == 0 && zero == 0,
                 "B 1..5000, hd 64 and 128, max_len 1 .. 100000: %d decreases, %d zeros", shrinks,
                 zero);
    return ok;
}

static int run_arg_errors(void)
{
    const int Hq = 8, Hkv = 2, hd = 128, n_slots = 2, max_len = 4, B = 2;
    const size_t ncache = (size_t)n_slots * max_len * Hkv * hd, nq = (size_t)B * Hq * hd;
    dev_cache c;
    cache_alloc(&c, n_slots, max_len, Hkv, hd);
    kg_bf16 *q = dev_bf(nq), *out = dev_bf(nq), *k = dev_bf((size_t)B * Hkv * hd);
    kg_bf16 *v = dev_bf((size_t)B * Hkv * hd);
    KC_CUDA(cudaMemset(q, 0, nq * sizeof *q));
    KC_CUDA(cudaMemset(k, 0, (size_t)B * Hkv * hd * sizeof *k));
    KC_CUDA(cudaMemset(v, 0, (size_t)B * Hkv * hd * sizeof *v));
    KC_CUDA(cudaMemset(out, GUARD_BYTE, nq * sizeof *out)); /* must stay untouched */
    const int32_t hs[B] = {0, 1}, hp[B] = {1, 2};
    int32_t *sl = dev_i32(hs, B), *pos = dev_i32(hp, B), *ctx = dev_i32(hp, B);
    const cudaError_t inval = cudaErrorInvalidValue;
    const float sc = 0.125f;
    int ok = 1;
    /* a workspace large enough for every call below (they fail on another argument), and the
     * exact need of a valid call (B 2, Hq 8, Hkv 2, hd 64, max_len 4) for the workspace errors */
    const size_t ws_bytes = kg_decode_attention_workspace_bytes(B, Hq, hd, max_len);
    const size_t need = kg_decode_attention_workspace_bytes(B, 8, 64, 4);
    unsigned char *ws;
    KC_CUDA(cudaMalloc((void **)&ws, ws_bytes + 16));

#define DEC(o, q_, kc, vc, s_, c_, B_, Hq_, Hkv_, hd_, ns, ml)                                     \
    kg_decode_attention(o, q_, kc, vc, s_, c_, B_, Hq_, Hkv_, hd_, ns, ml, sc, ws, ws_bytes, 0)
#define DECW(w_, n_)                                                                               \
    kg_decode_attention(out, q, c.k, c.v, sl, ctx, B, 8, 2, 64, 2, 4, sc, w_, n_, 0)
    ok &= expect("decode hd 96", DEC(out, q, c.k, c.v, sl, ctx, B, 8, 2, 96, 2, 4), inval);
    ok &= expect("decode hd 32", DEC(out, q, c.k, c.v, sl, ctx, B, 8, 2, 32, 2, 4), inval);
    ok &= expect("decode hd 0", DEC(out, q, c.k, c.v, sl, ctx, B, 8, 2, 0, 2, 4), inval);
    ok &= expect("decode Hq 6 Hkv 4", DEC(out, q, c.k, c.v, sl, ctx, B, 6, 4, 64, 2, 4), inval);
    ok &= expect("decode Hq 2 Hkv 4", DEC(out, q, c.k, c.v, sl, ctx, B, 2, 4, 64, 2, 4), inval);
    ok &= expect("decode Hkv 0", DEC(out, q, c.k, c.v, sl, ctx, B, 8, 0, 64, 2, 4), inval);
    ok &= expect("decode Hq 0", DEC(out, q, c.k, c.v, sl, ctx, B, 0, 2, 64, 2, 4), inval);
    ok &= expect("decode B -1", DEC(out, q, c.k, c.v, sl, ctx, -1, 8, 2, 64, 2, 4), inval);
    ok &= expect("decode n_slots 0", DEC(out, q, c.k, c.v, sl, ctx, B, 8, 2, 64, 0, 4), inval);
    ok &= expect("decode max_len 0", DEC(out, q, c.k, c.v, sl, ctx, B, 8, 2, 64, 2, 0), inval);
    ok &= expect("decode out NULL", DEC(NULL, q, c.k, c.v, sl, ctx, B, 8, 2, 64, 2, 4), inval);
    ok &= expect("decode q NULL", DEC(out, NULL, c.k, c.v, sl, ctx, B, 8, 2, 64, 2, 4), inval);
    ok &= expect("decode k_cache NULL", DEC(out, q, NULL, c.v, sl, ctx, B, 8, 2, 64, 2, 4), inval);
    ok &= expect("decode v_cache NULL", DEC(out, q, c.k, NULL, sl, ctx, B, 8, 2, 64, 2, 4), inval);
    ok &= expect("decode slot NULL", DEC(out, q, c.k, c.v, NULL, ctx, B, 8, 2, 64, 2, 4), inval);
    ok &= expect("decode ctx_len NULL", DEC(out, q, c.k, c.v, sl, NULL, B, 8, 2, 64, 2, 4), inval);
    ok &= expect("decode B 0 is a no-op", DEC(out, q, c.k, c.v, sl, ctx, 0, 8, 2, 64, 2, 4),
                 cudaSuccess);
    ok &= expect("decode workspace NULL", DECW(NULL, need), inval);
    ok &= expect("decode workspace NULL, 0 bytes", DECW(NULL, 0), inval);
    ok &= expect("decode workspace 0 bytes", DECW(ws, 0), inval);
    ok &= expect("decode workspace 1 byte short", DECW(ws, need - 1), inval);
    ok &= expect("decode workspace misaligned (+8 bytes)", DECW(ws + 8, need), inval);
    ok &= expect("decode B 0 without a workspace is a no-op",
                 kg_decode_attention(out, q, c.k, c.v, sl, ctx, 0, 8, 2, 64, 2, 4, sc, NULL, 0, 0),
                 cudaSuccess);
#undef DECW
#undef DEC

#define KVW(kc, vc, k_, v_, s_, p_, T_, ns, ml, Hkv_, hd_)                                         \
    kg_kv_write(kc, vc, k_, v_, s_, p_, T_, ns, ml, Hkv_, hd_, 0)
    ok &= expect("kv_write T -1", KVW(c.k, c.v, k, v, sl, pos, -1, 2, 4, 2, 128), inval);
    ok &= expect("kv_write n_slots 0", KVW(c.k, c.v, k, v, sl, pos, B, 0, 4, 2, 128), inval);
    ok &= expect("kv_write max_len 0", KVW(c.k, c.v, k, v, sl, pos, B, 2, 0, 2, 128), inval);
    ok &= expect("kv_write Hkv 0", KVW(c.k, c.v, k, v, sl, pos, B, 2, 4, 0, 128), inval);
    ok &= expect("kv_write hd 0", KVW(c.k, c.v, k, v, sl, pos, B, 2, 4, 2, 0), inval);
    ok &= expect("kv_write hd -64", KVW(c.k, c.v, k, v, sl, pos, B, 2, 4, 2, -64), inval);
    ok &= expect("kv_write k_cache NULL", KVW(NULL, c.v, k, v, sl, pos, B, 2, 4, 2, 128), inval);
    ok &= expect("kv_write v_cache NULL", KVW(c.k, NULL, k, v, sl, pos, B, 2, 4, 2, 128), inval);
    ok &= expect("kv_write k NULL", KVW(c.k, c.v, NULL, v, sl, pos, B, 2, 4, 2, 128), inval);
    ok &= expect("kv_write v NULL", KVW(c.k, c.v, k, NULL, sl, pos, B, 2, 4, 2, 128), inval);
    ok &= expect("kv_write slot NULL", KVW(c.k, c.v, k, v, NULL, pos, B, 2, 4, 2, 128), inval);
    ok &= expect("kv_write pos NULL", KVW(c.k, c.v, k, v, sl, NULL, B, 2, 4, 2, 128), inval);
    ok &= expect("kv_write T 0 is a no-op", KVW(c.k, c.v, k, v, sl, pos, 0, 2, 4, 2, 128),
                 cudaSuccess);
#undef KVW
    ok &= check_workspace_bytes();
    ok &= expect("no launch error left behind", cudaDeviceSynchronize(), cudaSuccess);
    ok &= expect("no error pending", cudaGetLastError(), cudaSuccess);

    /* nothing ran: out keeps its guard, the caches their NaN */
    kg_bf16 *ho = (kg_bf16 *)malloc(nq * sizeof *ho), *hc = (kg_bf16 *)malloc(ncache * 2);
    KC_CUDA(cudaMemcpy(ho, out, nq * sizeof *ho, cudaMemcpyDeviceToHost));
    size_t touched = 0;
    for (size_t i = 0; i < nq; i++)
        touched += ho[i] != GUARD_BF;
    const kg_bf16 *caches[2] = {c.k, c.v};
    for (int w = 0; w < 2; w++) {
        KC_CUDA(cudaMemcpy(hc, caches[w], ncache * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < ncache; i++)
            touched += hc[i] != 0xFFFFu;
    }
    ok &= report("rejected, B = 0 and T = 0 calls wrote nothing", touched == 0,
                 "%zu values touched", touched);

    cache_free(&c);
    KC_CUDA(cudaFree(q));
    KC_CUDA(cudaFree(out));
    KC_CUDA(cudaFree(k));
    KC_CUDA(cudaFree(v));
    KC_CUDA(cudaFree(sl));
    KC_CUDA(cudaFree(pos));
    KC_CUDA(cudaFree(ctx));
    KC_CUDA(cudaFree(ws));
    free(ho), free(hc);
    return ok;
}

/* ---- main ---- */

/* Hq/Hkv: Qwen2.5-0.5B's 14/2; 8/8 and 4/4 (one query head per kv head: warps split a chunk's
 * tiles); 8/1 (every query head on one kv head) */
static const int heads[][2] = {{14, 2}, {8, 8}, {8, 1}, {4, 4}};
#define N_HEADS ((int)(sizeof heads / sizeof heads[0]))
static const int hds[] = {64, 128};

static int run_small(void)
{
    int ok = 1;
    ok &= check_kv_write(2, 64, 3, 40, 30, 0, 0, 1);
    ok &= check_kv_write(2, 64, 3, 40, 30, 1, 0, 2);
    ok &= check_kv_write(1, 37, 3, 40, 30, 0, 0, 3);
    const int ctx_a[] = {1, 2, 17, 255, 257, 300}, slot_a[] = {5, 0, 3, 7, 1, 6};
    ok &= check_decode("small", 14, 2, 64, 8, 300, 6, ctx_a, slot_a, 0.125f, 0, 4);
    const int ctx_b[] = {40, 1, 0, 17}, slot_b[] = {2, 0, 1, 3};
    ok &= check_decode("small", 8, 8, 128, 4, 40, 4, ctx_b, slot_b, 1.f / sqrtf(128.f), 0, 5);
    /* 4/4, B 2, max_len 8192: chunks of 128 keys split over 4 warps (ctx 20 and the last chunk
     * of ctx 300 leave some of them without a tile), 496 of 512 blocks past ctx_len */
    const int ctx_c[] = {20, 300}, slot_c[] = {2, 0};
    ok &= check_decode("split chunks", 4, 4, 64, 3, 8192, 2, ctx_c, slot_c, 0.125f, 0, 8);
    /* 8/1 hd 128 at batch 1: ten chunks of 32 to merge */
    const int ctx_d = 300, slot_d = 1;
    ok &= check_decode("batch 1", 8, 1, 128, 2, 512, 1, &ctx_d, &slot_d, 0.088f, 0, 9);
    /* 20 query heads on one kv head: 16 warps, the first 4 take a second head (the query in
     * shared memory rewritten) */
    const int ctx_f = 40, slot_f = 0;
    ok &= check_decode("20 heads on 1", 20, 1, 64, 1, 64, 1, &ctx_f, &slot_f, 0.125f, 0, 11);
    /* misaligned caches (scalar loads), two chunks of 32 */
    const int ctx_e = 45, slot_e = 0;
    ok &= check_decode("batch 1", 14, 2, 64, 1, 300, 1, &ctx_e, &slot_e, 0.125f, 1, 10);
    const int lens[] = {1, 7, 40}, slots[] = {2, 0, 3};
    ok &= check_consistency(14, 2, 64, lens, slots, 3, 4, 6);
    const int shorts[] = {40, 5};
    ok &= check_slot_reuse(14, 2, 64, 300, shorts, 2, 7);
    return ok;
}

static int run_full(void)
{
    int ok = 1;
    uint64_t seed = 1000;
    ok &= check_kv_write(2, 64, 5, 300, 400, 0, 0, seed++);  /* Qwen2.5-0.5B: vectorised */
    ok &= check_kv_write(8, 128, 5, 300, 400, 0, 0, seed++); /* vectorised, 128 threads */
    ok &= check_kv_write(20, 128, 3, 50, 100, 0, 0, seed++); /* 320 vectors a row: loop */
    ok &= check_kv_write(2, 64, 5, 300, 400, 1, 0, seed++);  /* k, v misaligned: scalar */
    ok &= check_kv_write(2, 64, 5, 300, 400, 0, 1, seed++);  /* caches misaligned: scalar */
    ok &= check_kv_write(1, 37, 5, 300, 400, 0, 0, seed++);  /* odd row: scalar */
    ok &= check_kv_write(2, 64, 5, 300, 8, 0, 0, seed++);    /* a decode step's few tokens */
    for (int h = 0; h < N_HEADS; h++)
        for (int d = 0; d < 2; d++) {
            ok &= check_decode_single(heads[h][0], heads[h][1], hds[d], seed += 20);
            ok &= check_decode_batches(heads[h][0], heads[h][1], hds[d], seed += 3);
        }
    ok &= check_decode_random(14, 2, 64, 64, 2048, seed++);
    ok &= check_decode_random(8, 8, 128, 64, 700, seed++);
    ok &= check_decode_mixed(14, 2, 64, seed++);
    ok &= check_decode_mixed(8, 1, 128, seed++);
    ok &= check_decode_mixed(4, 4, 64, seed++);
    /* more query heads per kv head than a block has warps (16): warps loop over heads */
    const int ctx_g[] = {1, 100, 2048}, slot_g[] = {3, 0, 1};
    ok &= check_decode("20 heads on 1", 20, 1, 64, 4, 2048, 3, ctx_g, slot_g, 0.125f, 0, seed++);
    ok &= check_decode("32 heads on 2", 64, 2, 128, 4, 2048, 3, ctx_g, slot_g, 0.088f, 0, seed++);
    /* caches one element off 16-byte alignment: the scalar loads, with one warp per query head
     * (14/2) and with chunks split over warps (4/4) */
    const int ctx_m[] = {1, 2, 17, 255, 256, 257, 1000, 4096}, slot_m[] = {9, 3, 0, 7, 10, 1, 5, 4};
    ok &= check_decode("lens 1..4096", 14, 2, 64, 11, 4096, 8, ctx_m, slot_m, 0.125f, 1, seed++);
    ok &= check_decode("lens 1..4096", 4, 4, 128, 11, 4096, 8, ctx_m, slot_m, 0.088f, 1, seed++);
    /* one long document (many chunks), short ones, one of length 1, in shuffled slots (slot 7
     * unused) */
    const int lens[] = {1, 37, 1100, 5, 129, 300, 64}, slots[] = {4, 0, 6, 2, 5, 1, 8};
    for (int h = 0; h < N_HEADS; h++)
        for (int d = 0; d < 2; d++)
            ok &= check_consistency(heads[h][0], heads[h][1], hds[d], lens, slots, 7, 9, seed++);
    const int shorts[] = {300, 50, 256};
    ok &= check_slot_reuse(14, 2, 64, 2000, shorts, 3, seed++);
    ok &= check_slot_reuse(8, 8, 128, 2000, shorts, 3, seed++);
    ok &= check_slot_reuse(8, 1, 128, 2000, shorts, 3, seed++);
    return ok;
}

int main(void)
{
    int ok = kc_small() ? run_small() : run_full();
    ok &= run_arg_errors();
    printf("%s\n", ok ? "kvcache: all checks passed" : "kvcache: FAILED");
    return ok ? 0 : 1;
}
