/* sample: the next token of each row of logits on the GPU (see kernels.h), the same distribution
 * as policy/sample.c's pol_sample_probs: greedy, or temperature, then top-k, then top-p.
 *
 * Two kernels per call. sp_part_kernel does pass 1 (below) over one "part" of a row per block
 * (SP_PART_LEN = 4096 candidates, 256 threads: a Qwen row of 151,936 makes 38 parts), so that
 * a single row still spreads over the GPU; sp_kernel, one block of 1024 threads per row, merges
 * the parts of its row and does the rest, its scratch in shared memory. The parts' results lie
 * in the caller's workspace: sp_part [B][nparts] (24 bytes each), then, 256-byte aligned, the
 * coarse counts uint16 [B][nparts][256] (written when sampling). Every part writes its entries
 * before the merge reads them (stream order), so the workspace needs no initialising.
 *
 * Ranking without sorting. The CPU ranks the candidates by logit, descending, the lower id first
 * on ties. A bf16 has 65,536 bit patterns, and they map to a 16-bit key that orders like the
 * value (negative values flipped, -0 folded onto +0 since the two compare equal), so the ranking
 * is: key descending, then id ascending. Counting keys is therefore exact, and so is every
 * decision below; no value is rounded before it is ranked. Keys split into 256 "coarse bins" by
 * their high byte (sign and the top 7 exponent bits: two binary octaves each) of 256 keys each.
 *
 * The passes over a row (each reads n_valid bf16, 16-byte loads when the row allows):
 *  1. the max and the lowest id holding it (the greedy token), a NaN check, the log-sum-exp at
 *     temperature 1 when logp is wanted, and, when sampling, a count per coarse bin. Greedy is
 *     done after it. Each part p finds these over its own ids (sp_part: the max key with the lowest
 *     id holding it, a NaN flag, (m_p, s_p = sum exp(z - m_p)), 256 coarse counts); the merge is
 *     exact for all but the log-sum-exp: the max of (key, ~id) pairs, an OR, integer sums. The
 *     (m, s) pairs combine as m = max(m1, m2), s = s1 e^(m1 - m) + s2 e^(m2 - m), for all parts
 *     at once: M = max_p m_p, then the terms s_p e^(m_p - M) summed in a fixed shape (thread t
 *     adds parts t, t + 1024, ... in order, then a fixed tree over threads and warps). The
 *     parts (their length, count and order) depend on n_valid alone, so a row's token and logp
 *     are the same bits whatever B it comes in, and from run to run.
 *  2. a window: the exact count of every key in up to 32 non-empty coarse bins from the top, as
 *     a [32][256] histogram in shared memory. Real rows fill far fewer than 32 coarse bins (+-30
 *     uniform fills about 20), so one window covers the whole ranking down to rank k.
 *     From the counts:
 *       top_k: the key v_k of rank k (the coarse counts give its bin, the window its key), and
 *         how many of its ties are kept: k minus the count above it, the lowest ids, as the CPU;
 *       masses: a key's mass is w(v) = round(exp((v - max) / T) 2^s), in 64-bit fixed point (exp
 *         in double; s = 62 - ceil(log2 n_valid), so that n_valid masses fit). Every run of tied
 *         keys has a single mass, so the mass of any rank range is exact integer arithmetic on
 *         counts, and the same whatever adds it in whatever order: results never depend on
 *         thread timing, and the draw below cannot fall off the end of its kept mass;
 *       top_p: a block-wide scan of the masses in ranking order (key bins, highest first) finds
 *         where the mass ranked strictly above reaches top_p * (mass of the top-k), the CPU's
 *         rule, down to the position inside a run of ties (ranks j of a run of mass w each stay
 *         while above + j w < top_p * sum);
 *       the draw: u in [0, 1) from Philox (53 bits of two 32-bit outputs), t = floor(u * kept
 *         mass); a second scan in ranking order finds the key whose mass interval holds t, and
 *         j, which of its kept ties. The draw walks the ranking as pol_sample does (in
 *         distribution the same; for a given u, the same token unless the CPU's float rounding
 *         sits on a boundary).
 *  3. the token: the j-th element (in id order) with that key, a sweep in id order that stops
 *     where it is found (half a row on average).
 * A row spread over more coarse bins than a window holds (values over a huge dynamic range:
 * +-2^-60 .. 2^60, say) takes further window passes down the ranking; pass 2 then also sums
 * the mass of the bins between the window and rank k (all of them kept by top-k) and counts the
 * keys of rank k's bin, so that the top-k mass is known after one window. Each further window is
 * one more pass; the result is the same.
 *
 * kg_sample_probs runs the same selection, then writes the distribution (fp32 exp, normalised by
 * the kept mass) in a last pass that numbers the ties of the cut key in id order.
 *
 * A row with a NaN among its candidates: token -1, logp NaN, probs NaN (the CPU returns -1). A
 * row whose max is +inf (or all -inf) has no finite masses: it falls back to greedy. */
#include <cuda_runtime.h>
#include <curand_kernel.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define SP_THREADS 1024
#define SP_WARPS (SP_THREADS / 32)
#define SP_VEC 8     /* bf16 per 16-byte load */
#define SP_UNROLL 4  /* loads each thread keeps in flight */
#define SP_NSLOT 32  /* coarse bins of exact key counts that shared memory holds at once */
#define SP_BINS 8    /* keys per thread in a scan over a window (SP_NSLOT * 256 / SP_THREADS) */
#define SP_SKIP (-1) /* slot_of: a coarse bin the window pass ignores */
#define SP_MID (-2)  /* slot_of: a coarse bin inside the top-k, below the window: mass only */
#define SP_FULL 0xffffffffu

/* pass 1's parts: SP_PART_LEN candidates per block (a multiple of SP_VEC, so that a part starts
 * on a 16-byte load), all of its loads in flight at once; rows so long that this would make more
 * than SP_MAX_PARTS parts (grid.y's limit) take longer parts */
#define SP_PART_THREADS 256
#define SP_PART_WARPS (SP_PART_THREADS / 32)
#define SP_PART_LEN 4096
#define SP_PART_UNROLL (SP_PART_LEN / (SP_VEC * SP_PART_THREADS))
#define SP_MAX_PARTS 65535
#define SP_WS_ALIGN 256 /* the workspace's arrays start on this */

static_assert(SP_WARPS == 32, "block reductions take one warp's worth of warp totals");
static_assert(SP_NSLOT * 256 == SP_THREADS * SP_BINS, "a window scan gives each thread SP_BINS");
static_assert(SP_PART_THREADS == 256, "a part's block writes one coarse count per thread");
static_assert(SP_PART_LEN % SP_VEC == 0 && SP_PART_UNROLL >= 1, "parts start on a 16-byte load");
static_assert(SP_PART_LEN <= 65535, "a part's coarse counts are 16-bit");

/* what pass 1 leaves in the workspace for each part of a row (its coarse counts, 16-bit, lie in
 * a second array) */
typedef struct sp_part {
    uint64_t best; /* key << 32 | ~id: the part's max key, then the lowest id holding it */
    float m, s;    /* log-sum-exp statistics of the part: s = sum exp(z - m) */
    int nan;       /* a NaN among the part's candidates */
    int pad;
} sp_part;

typedef struct sp_args {
    int32_t *tokens;
    float *logp;
    float *probs;
    const uint16_t *logits;
    const uint64_t *seed, *offset;
    sp_part *parts; /* workspace: [B][nparts] */
    uint16_t *hist; /* workspace: [B][nparts][256] coarse counts (sampling only) */
    size_t ld;
    int n;        /* n_valid */
    int nparts;   /* pass 1's parts per row */
    int part_len; /* candidates per part (the last may have fewer) */
    int vec;      /* rows 16-byte aligned and ld % 8 == 0: 16-byte loads */
    int lse;      /* the log-sum-exp is wanted (kg_sample with logp) */
    int greedy;   /* temperature <= 0 (or NaN, as the CPU) */
    int k;        /* top-k in effect: n when off */
    int top_p_on; /* 0 < top_p < 1 */
    float top_p;
    float temperature;
    double wscale; /* 2^s: the fixed-point mass of the max */
} sp_args;

typedef struct sp_shared {
    uint32_t fine[SP_NSLOT * 256]; /* a window: the count of each key, slot-major */
    uint32_t coarse[256];
    uint8_t ne[256];     /* the non-empty coarse bins, highest first */
    int8_t slot_of[256]; /* per coarse bin: its slot in the window, SP_MID or SP_SKIP */
    uint8_t slot_coarse[SP_NSLOT];
    uint64_t red64[SP_WARPS];
    uint32_t red32[SP_WARPS][SP_UNROLL];
    /* one thread writes, all read after a barrier */
    int nan;
    uint32_t kmax; /* the max key and the lowest id holding it */
    int arg;
    int pos_k;              /* rank k's coarse bin, as an index into ne */
    uint32_t above_k;       /* the count of keys in coarse bins above it */
    uint32_t v_k, n_k, c_k; /* rank k's key, its ties kept by top-k, its ties in all */
    uint64_t mid;
    uint64_t t; /* the draw's point in the kept mass */
    uint32_t hit_key, hit_j;
    int hit_id;
} sp_shared;

/* a window: ne[start .. start + nw) are walked (slots 0 .. nw-1); kslot holds rank k's coarse bin
 * (the last walked slot when complete, an extra slot in an incomplete first window, else -1) */
typedef struct sp_window {
    int start, nw, nslots, kslot, complete;
} sp_window;

/* the kept set: keys above v, and the first n (in id order) of the c keys equal to v */
typedef struct sp_cut {
    uint32_t v, n, c;
    uint64_t mass;
} sp_cut;

static __device__ int sp_lane(void)
{
    return threadIdx.x & 31;
}

static __device__ int sp_warp(void)
{
    return threadIdx.x >> 5;
}

/* ---- keys ---- */

/* -0 and +0 compare equal (the CPU ranks them by id): one pattern for both */
static __device__ uint32_t sp_canon(uint32_t b)
{
    return b == 0x8000u ? 0u : b;
}

static __device__ uint32_t sp_key(uint32_t b)
{
    return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}

static __device__ uint32_t sp_bits(uint32_t key)
{
    return (key & 0x8000u) ? (key & 0x7fffu) : (~key & 0xffffu);
}

static __device__ float sp_val(uint32_t b)
{
    return __uint_as_float(b << 16);
}

static __device__ int sp_is_nan(uint32_t b)
{
    return (b & 0x7fffu) > 0x7f80u;
}

/* the fixed-point mass of the value with bits b: round(exp((z - max) / T) 2^s). One function
 * everywhere, so that a key has one mass whoever computes it. */
static __device__ uint64_t sp_weight(uint32_t b, float m, const sp_args &a)
{
    const double d = ((double)sp_val(b) - (double)m) / (double)a.temperature;
    return __double2ull_rn(exp(d) * a.wscale);
}

/* ---- block-wide reductions (every thread calls; every thread gets the result) ---- */

template <class T> static __device__ T sp_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(SP_FULL, v, o);
    return v;
}

template <class T> static __device__ T sp_warp_max(T v)
{
    for (int o = 16; o > 0; o >>= 1) {
        T y = __shfl_xor_sync(SP_FULL, v, o);
        v = y > v ? y : v;
    }
    return v;
}

template <class T> static __device__ T sp_warp_incl(T v)
{
    for (int o = 1; o < 32; o <<= 1) {
        T y = __shfl_up_sync(SP_FULL, v, o);
        if (sp_lane() >= o)
            v += y;
    }
    return v;
}

/* the barrier first: the previous reduction's readers of red64 are done */
static __device__ uint64_t sp_block_sum(uint64_t v, sp_shared &sh)
{
    v = sp_warp_sum(v);
    __syncthreads();
    if (sp_lane() == 0)
        sh.red64[sp_warp()] = v;
    __syncthreads();
    return sp_warp_sum(sh.red64[sp_lane()]);
}

static __device__ uint64_t sp_block_max(uint64_t v, sp_shared &sh)
{
    v = sp_warp_max(v);
    __syncthreads();
    if (sp_lane() == 0)
        sh.red64[sp_warp()] = v;
    __syncthreads();
    return sp_warp_max(sh.red64[sp_lane()]);
}

/* exclusive prefix of v in thread order; *total gets the block's sum */
static __device__ uint64_t sp_block_excl(uint64_t v, uint64_t *total, sp_shared &sh)
{
    const uint64_t inc = sp_warp_incl(v);
    __syncthreads();
    if (sp_lane() == 31)
        sh.red64[sp_warp()] = inc;
    __syncthreads();
    const uint64_t wt = sh.red64[sp_lane()];
    const uint64_t winc = sp_warp_incl(wt);
    *total = __shfl_sync(SP_FULL, winc, 31);
    return __shfl_sync(SP_FULL, winc - wt, sp_warp()) + inc - v;
}

/* exclusive prefix of cnt[u] in the order (u, thread), the id order of a sweep step; returns the
 * step's total */
static __device__ uint32_t sp_block_excl4(const uint32_t *cnt, uint32_t *excl, sp_shared &sh)
{
    uint32_t inc[SP_UNROLL];
#pragma unroll
    for (int u = 0; u < SP_UNROLL; u++)
        inc[u] = sp_warp_incl(cnt[u]);
    __syncthreads();
    if (sp_lane() == 31)
        for (int u = 0; u < SP_UNROLL; u++)
            sh.red32[sp_warp()][u] = inc[u];
    __syncthreads();
    uint32_t base = 0;
#pragma unroll
    for (int u = 0; u < SP_UNROLL; u++) {
        const uint32_t wt = sh.red32[sp_lane()][u];
        const uint32_t winc = sp_warp_incl(wt);
        excl[u] = base + __shfl_sync(SP_FULL, winc - wt, sp_warp()) + inc[u] - cnt[u];
        base += __shfl_sync(SP_FULL, winc, 31);
    }
    return base;
}

/* log-sum-exp statistics (m, s = sum exp(z - m)) of the union of two parts */
static __device__ void sp_lse_merge(float &m, float &s, float m2, float s2)
{
    const float M = fmaxf(m, m2);
    if (M == -INFINITY)
        return;
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

/* a warp's (m, s) merged in a fixed butterfly. Lane 0's result is fixed by the inputs, and only
 * it is used: the lanes may differ in the last bit of s, since nvcc contracts the merge's sum into
 * an fma (s * e + (s2 * e2)), which is not symmetric in the two sides */
static __device__ void sp_warp_lse(float &m, float &s)
{
    for (int o = 16; o > 0; o >>= 1)
        sp_lse_merge(m, s, __shfl_xor_sync(SP_FULL, m, o), __shfl_xor_sync(SP_FULL, s, o));
}

/* a float as a key that orders like its value (NaN aside), and back */
static __device__ uint32_t sp_fkey(float f)
{
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __device__ float sp_funkey(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

static __device__ float sp_block_maxf(float v, sp_shared &sh)
{
    return sp_funkey((uint32_t)sp_block_max(sp_fkey(v), sh));
}

/* a float sum in a fixed tree (warp butterflies, then one over the warp totals): the same bits
 * for the same inputs in the same threads */
static __device__ float sp_block_sumf(float v, sp_shared &sh)
{
    v = sp_warp_sum(v);
    __syncthreads();
    if (sp_lane() == 0)
        sh.red64[sp_warp()] = __float_as_uint(v);
    __syncthreads();
    return sp_warp_sum(__uint_as_float((uint32_t)sh.red64[sp_lane()]));
}

/* ---- reading a row ---- */

static __device__ uint32_t sp_half(const uint4 &v, int k)
{
    const uint32_t w = k < 2 ? v.x : k < 4 ? v.y : k < 6 ? v.z : v.w;
    return (k & 1) ? w >> 16 : w & 0xffffu;
}

/* f(id, bits) for each candidate id in [lo, hi) of the row (bits canonical; lo a multiple of
 * SP_VEC), spread over NT threads; a thread sees its ids in increasing order. UNROLL loads are
 * issued before any is used, to keep enough bytes in flight. */
template <int NT, int UNROLL, class F>
static __device__ void sp_for_range(const uint16_t *row, const sp_args &a, uint32_t lo, uint32_t hi,
                                    F f)
{
    if (a.vec) {
        const uint32_t end = (hi + SP_VEC - 1) / SP_VEC;
        const uint4 *p = (const uint4 *)row;
        for (uint32_t c0 = lo / SP_VEC + threadIdx.x; c0 < end; c0 += UNROLL * NT) {
            uint4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const uint32_t c = c0 + u * NT;
                v[u] = c < end ? __ldg(p + c) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const uint32_t c = c0 + u * NT;
#pragma unroll
                for (int k = 0; k < SP_VEC; k++)
                    if (c < end && c * SP_VEC + k < hi)
                        f((int)(c * SP_VEC + k), sp_canon(sp_half(v[u], k)));
            }
        }
    } else {
        for (uint32_t j0 = lo + threadIdx.x; j0 < hi; j0 += UNROLL * NT) {
            uint32_t v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const uint32_t j = j0 + u * NT;
                v[u] = j < hi ? __ldg(row + j) : 0u;
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const uint32_t j = j0 + u * NT;
                if (j < hi)
                    f((int)j, sp_canon(v[u]));
            }
        }
    }
}

/* f(id, bits) for each candidate of the row, over sp_kernel's block */
template <class F> static __device__ void sp_for_each(const uint16_t *row, const sp_args &a, F f)
{
    sp_for_range<SP_THREADS, SP_UNROLL>(row, a, 0u, (uint32_t)a.n, f);
}

/* The row in id order, a step of SP_UNROLL loads per thread at a time: f(id, bits, rank) for each
 * candidate, rank being, when bits == match, its number among the matches in id order (from 0).
 * Stops after the step in which more than `stop` matches have been seen (all threads alike). */
template <class F>
static __device__ void sp_sweep(const uint16_t *row, const sp_args &a, uint32_t match,
                                uint32_t stop, sp_shared &sh, F f)
{
    const uint32_t n = (uint32_t)a.n;
    uint32_t seen = 0, cnt[SP_UNROLL], excl[SP_UNROLL];
    if (a.vec) {
        const uint32_t chunks = (n + SP_VEC - 1) / SP_VEC;
        const uint4 *p = (const uint4 *)row;
        for (uint32_t c0 = 0; c0 < chunks; c0 += SP_UNROLL * SP_THREADS) {
            uint4 v[SP_UNROLL];
#pragma unroll
            for (int u = 0; u < SP_UNROLL; u++) {
                const uint32_t c = c0 + u * SP_THREADS + threadIdx.x;
                v[u] = c < chunks ? __ldg(p + c) : make_uint4(0, 0, 0, 0);
                cnt[u] = 0;
#pragma unroll
                for (int k = 0; k < SP_VEC; k++)
                    cnt[u] +=
                        c < chunks && c * SP_VEC + k < n && sp_canon(sp_half(v[u], k)) == match;
            }
            const uint32_t total = sp_block_excl4(cnt, excl, sh);
#pragma unroll
            for (int u = 0; u < SP_UNROLL; u++) {
                const uint32_t c = c0 + u * SP_THREADS + threadIdx.x;
                uint32_t r = seen + excl[u];
#pragma unroll
                for (int k = 0; k < SP_VEC; k++) {
                    if (c < chunks && c * SP_VEC + k < n) {
                        const uint32_t b = sp_canon(sp_half(v[u], k));
                        f((int)(c * SP_VEC + k), b, r);
                        r += b == match;
                    }
                }
            }
            seen += total;
            if (seen > stop)
                break;
        }
    } else {
        for (uint32_t j0 = 0; j0 < n; j0 += SP_UNROLL * SP_THREADS) {
            uint32_t v[SP_UNROLL];
#pragma unroll
            for (int u = 0; u < SP_UNROLL; u++) {
                const uint32_t j = j0 + u * SP_THREADS + threadIdx.x;
                v[u] = j < n ? sp_canon(__ldg(row + j)) : 0u;
                cnt[u] = j < n && v[u] == match;
            }
            const uint32_t total = sp_block_excl4(cnt, excl, sh);
#pragma unroll
            for (int u = 0; u < SP_UNROLL; u++) {
                const uint32_t j = j0 + u * SP_THREADS + threadIdx.x;
                if (j < n)
                    f((int)j, v[u], seen + excl[u]);
            }
            seen += total;
            if (seen > stop)
                break;
        }
    }
}

/* ---- pass 1, one part of a row per block: max, arg max, NaN, log-sum-exp, coarse counts ---- */

/* a thread's share of a part */
typedef struct sp_acc {
    int bad;
    uint64_t best; /* key << 32 | ~id: the max is the largest key, then the lowest id */
    float m, s;
} sp_acc;

static __device__ void sp_acc_add(sp_acc &t, int id, uint32_t b, bool lse)
{
    t.bad |= sp_is_nan(b);
    const uint64_t cand = ((uint64_t)sp_key(b) << 32) | (uint32_t) ~(uint32_t)id;
    t.best = cand > t.best ? cand : t.best;
    if (lse) { /* online: rescale when the max grows; -inf (and NaN) adds nothing */
        const float z = sp_val(b);
        if (z > t.m) {
            t.s = t.s * expf(t.m - z) + 1.f;
            t.m = z;
        } else if (z > -INFINITY) {
            t.s += expf(z - t.m);
        }
    }
}

typedef struct sp_part_shared {
    uint64_t best[SP_PART_WARPS];
    float m[SP_PART_WARPS], s[SP_PART_WARPS];
} sp_part_shared;

/* the threads' shares to the part's sp_part (warp 0 writes it; no barrier after the first) */
static __device__ void sp_part_reduce(const sp_args &a, sp_part *out, const sp_acc &t, int bad,
                                      sp_part_shared &sh)
{
    uint64_t best = sp_warp_max(t.best);
    float m = t.m, s = t.s;
    if (a.lse)
        sp_warp_lse(m, s);
    if (sp_lane() == 0) {
        sh.best[sp_warp()] = best;
        sh.m[sp_warp()] = m;
        sh.s[sp_warp()] = s;
    }
    __syncthreads();
    if (sp_warp() != 0)
        return;
    const bool mine = sp_lane() < SP_PART_WARPS; /* the other lanes hold the identities */
    best = sp_warp_max(mine ? sh.best[sp_lane()] : (uint64_t)0);
    m = mine ? sh.m[sp_lane()] : -INFINITY;
    s = mine ? sh.s[sp_lane()] : 0.f;
    if (a.lse)
        sp_warp_lse(m, s);
    if (sp_lane() == 0) {
        out->best = best;
        out->m = m;
        out->s = s;
        out->nan = bad;
        out->pad = 0;
    }
}

/* the part's coarse counts, from lane_hist[bin][lane]: thread t sums bin t's 32 columns, starting
 * at column t (mod 32) so that a warp's reads fall in 32 different banks */
static __device__ void sp_part_hist_out(uint16_t *out, const uint32_t *lane_hist)
{
    const uint32_t bin = threadIdx.x;
    uint32_t sum = 0;
#pragma unroll
    for (uint32_t l = 0; l < 32; l++)
        sum += lane_hist[bin * 32 + ((l + bin) & 31u)];
    out[bin] = (uint16_t)sum; /* at most SP_PART_LEN <= 65535 */
}

/* Block (row, part) of pass 1. Coarse counts (HIST: when sampling) go to a column per lane in
 * shared memory, so that the lanes of a warp never add to the same word: logits crowd into a few
 * coarse bins, and a single counter per bin would serialise on them. */
template <bool HIST>
static __global__ void __launch_bounds__(SP_PART_THREADS) sp_part_kernel(sp_args a)
{
    __shared__ __align__(16) uint32_t lane_hist[HIST ? 256 * 32 : 4];
    __shared__ sp_part_shared sh;
    const int row_i = blockIdx.x, part = blockIdx.y;
    const size_t slot = (size_t)row_i * a.nparts + part;
    const uint16_t *row = a.logits + (size_t)row_i * a.ld;
    const uint32_t lo = (uint32_t)part * (uint32_t)a.part_len;
    const uint32_t hi = min((uint32_t)a.n, lo + (uint32_t)a.part_len);
    if (HIST) {
        uint4 *z = (uint4 *)lane_hist;
        for (int i = threadIdx.x; i < 256 * 32 / 4; i += SP_PART_THREADS)
            z[i] = make_uint4(0, 0, 0, 0);
        __syncthreads();
    }
    uint32_t *col = lane_hist + sp_lane();
    sp_acc t = {0, 0, -INFINITY, 0.f};
    sp_for_range<SP_PART_THREADS, SP_PART_UNROLL>(row, a, lo, hi, [&](int id, uint32_t b) {
        sp_acc_add(t, id, b, a.lse);
        if (HIST)
            atomicAdd(col + (sp_key(b) >> 8) * 32, 1u);
    });
    /* the barrier also completes lane_hist for sp_part_hist_out */
    const int bad = __syncthreads_or(t.bad);
    sp_part_reduce(a, a.parts + slot, t, bad, sh);
    if (HIST)
        sp_part_hist_out(a.hist + slot * 256, lane_hist);
}

/* ---- the merge of a row's parts (sp_kernel) ---- */

/* part p's term of the row's s at the row's max M (a part of no finite candidate adds nothing;
 * one whose max is M adds s_p exactly). A part holding +inf has s_p NaN already (inf - inf in
 * its own merges), so a row whose max is +inf gets logp NaN, as before the split and as the
 * double-precision log softmax */
static __device__ float sp_part_term(const sp_part &q, float M)
{
    if (q.m == -INFINITY)
        return 0.f;
    return q.m == M ? q.s : q.s * expf(q.m - M);
}

/* sh.coarse[c] = the sum over the row's parts of their count of bin c (integers: any order).
 * Thread t adds bins 2q, 2q + 1 (q = t % 128, one 32-bit word) of parts t / 128, + 8, ... */
static __device__ void sp_merge_coarse(const sp_args &a, int row_i, sp_shared &sh)
{
    const uint32_t *h = (const uint32_t *)(a.hist + (size_t)row_i * a.nparts * 256);
    const int q = threadIdx.x & 127;
    uint32_t even = 0, odd = 0;
    for (int p = threadIdx.x >> 7; p < a.nparts; p += SP_THREADS / 128) {
        const uint32_t w = h[(size_t)p * 128 + q];
        even += w & 0xffffu;
        odd += w >> 16;
    }
    if (even)
        atomicAdd(&sh.coarse[2 * q], even);
    if (odd)
        atomicAdd(&sh.coarse[2 * q + 1], odd);
}

/* What pass 1 found over the whole row, from its parts: sh.nan, sh.kmax, sh.arg, sh.coarse
 * (when sampling), and (m_lse, s_lse) in every thread (-inf, 0 when the lse is not wanted). */
static __device__ __noinline__ void sp_merge_parts(const sp_args &a, int row_i, sp_shared &sh,
                                                   float &m_lse, float &s_lse)
{
    const sp_part *parts = a.parts + (size_t)row_i * a.nparts;
    const bool hist = !a.greedy;
    if (hist)
        for (int c = threadIdx.x; c < 256; c += SP_THREADS)
            sh.coarse[c] = 0;
    int bad = 0;
    uint64_t best = 0;
    float m = -INFINITY;
    for (int p = threadIdx.x; p < a.nparts; p += SP_THREADS) {
        bad |= parts[p].nan;
        best = parts[p].best > best ? parts[p].best : best;
        m = fmaxf(m, parts[p].m);
    }
    bad = __syncthreads_or(bad); /* also orders the zeroing of sh.coarse before the adds */
    best = sp_block_max(best, sh);
    float s = 0.f;
    if (a.lse) {
        m = sp_block_maxf(m, sh);
        for (int p = threadIdx.x; p < a.nparts; p += SP_THREADS)
            s += sp_part_term(parts[p], m);
        s = sp_block_sumf(s, sh);
    }
    m_lse = a.lse ? m : -INFINITY;
    s_lse = s;
    if (threadIdx.x == 0) {
        sh.nan = bad;
        sh.kmax = (uint32_t)(best >> 32);
        sh.arg = (int)~(uint32_t)best;
    }
    if (hist)
        sp_merge_coarse(a, row_i, sh);
    __syncthreads();
}

/* warp 0: the non-empty coarse bins in ranking order, and the one holding rank k (with the count
 * above it). Lane l looks at bins 255 - 8l .. 248 - 8l. */
static __device__ void sp_find_k_bin(const sp_args &a, sp_shared &sh)
{
    if (sp_warp() != 0)
        return;
    uint32_t cnt[8], sum = 0, ne = 0;
    for (int i = 0; i < 8; i++) {
        cnt[i] = sh.coarse[255 - (sp_lane() * 8 + i)];
        sum += cnt[i];
        ne += cnt[i] > 0;
    }
    const uint32_t sum_inc = sp_warp_incl(sum), ne_inc = sp_warp_incl(ne);
    uint32_t cum = sum_inc - sum, pos = ne_inc - ne;
    const uint32_t k = (uint32_t)a.k;
    for (int i = 0; i < 8; i++) {
        if (cnt[i] == 0)
            continue;
        sh.ne[pos] = (uint8_t)(255 - (sp_lane() * 8 + i));
        if (cum < k && k <= cum + cnt[i]) {
            sh.pos_k = (int)pos;
            sh.above_k = cum;
        }
        pos++;
        cum += cnt[i];
    }
}

/* ---- windows ---- */

/* the window whose first coarse bin is ne[start]: it walks down to rank k's bin when that fits;
 * an incomplete first window keeps its last slot for rank k's bin */
static __device__ sp_window sp_window_at(const sp_shared &sh, int start, bool first)
{
    sp_window w;
    const int to_k = sh.pos_k + 1 - start;
    w.start = start;
    if (to_k <= SP_NSLOT) {
        w.nw = w.nslots = to_k;
        w.kslot = to_k - 1;
        w.complete = 1;
    } else {
        w.nw = first ? SP_NSLOT - 1 : SP_NSLOT;
        w.nslots = SP_NSLOT;
        w.kslot = first ? SP_NSLOT - 1 : -1;
        w.complete = 0;
    }
    return w;
}

/* Counts the keys of the window's coarse bins. An incomplete first window also counts rank k's
 * bin and sums into sh.mid the masses of the bins between (all inside the top-k). */
static __device__ __noinline__ void sp_window_pass(const uint16_t *row, const sp_args &a,
                                                   const sp_window &w, bool first, float m,
                                                   sp_shared &sh)
{
    const bool mid = first && !w.complete;
    __syncthreads(); /* the last window's readers are done */
    for (int c = threadIdx.x; c < 256; c += SP_THREADS)
        sh.slot_of[c] = SP_SKIP;
    for (int i = threadIdx.x; i < w.nslots * 256; i += SP_THREADS)
        sh.fine[i] = 0;
    __syncthreads();
    if ((int)threadIdx.x < w.nw) {
        const int c = sh.ne[w.start + threadIdx.x];
        sh.slot_of[c] = (int8_t)threadIdx.x;
        sh.slot_coarse[threadIdx.x] = (uint8_t)c;
    }
    if (mid) {
        if (threadIdx.x == 0) {
            sh.slot_of[sh.ne[sh.pos_k]] = (int8_t)w.kslot;
            sh.slot_coarse[w.kslot] = sh.ne[sh.pos_k];
        }
        for (int i = w.start + w.nw + threadIdx.x; i < sh.pos_k; i += SP_THREADS)
            sh.slot_of[sh.ne[i]] = SP_MID;
    }
    __syncthreads();
    uint64_t mass = 0;
    sp_for_each(row, a, [&](int, uint32_t b) {
        const uint32_t key = sp_key(b);
        const int s = sh.slot_of[key >> 8];
        if (s >= 0)
            atomicAdd(&sh.fine[s * 256 + (key & 255)], 1u);
        else if (s == SP_MID)
            mass += sp_weight(b, m, a);
    });
    if (mid)
        mass = sp_block_sum(mass, sh);
    if (first && threadIdx.x == 0)
        sh.mid = mid ? mass : 0;
    __syncthreads();
}

/* the thread's SP_BINS keys of a window scan: slot = warp, keys descending across the lanes */
static __device__ uint32_t sp_low(int i)
{
    return 255u - (uint32_t)(sp_lane() * SP_BINS + i);
}

/* the count of a run of tied keys that a cut keeps: all above v, n of those equal to v */
static __device__ uint32_t sp_clamp(uint32_t c, uint32_t key, uint32_t v, uint32_t n)
{
    return key > v ? c : key == v ? min(c, n) : 0u;
}

/* warp 0, after the first window: rank k's key (sh.v_k), how many of its ties the top-k keeps
 * (sh.n_k) and how many there are (sh.c_k) */
static __device__ void sp_find_k_key(const sp_args &a, const sp_window &w, sp_shared &sh)
{
    if (sp_warp() == 0) {
        const uint32_t need = (uint32_t)a.k - sh.above_k; /* >= 1 */
        const uint32_t *f = sh.fine + w.kslot * 256;
        const uint32_t hi = (uint32_t)sh.slot_coarse[w.kslot] << 8;
        uint32_t cnt[SP_BINS], sum = 0;
        for (int i = 0; i < SP_BINS; i++) {
            cnt[i] = f[sp_low(i)];
            sum += cnt[i];
        }
        uint32_t cum = sp_warp_incl(sum) - sum;
        for (int i = 0; i < SP_BINS; i++) {
            if (cum < need && need <= cum + cnt[i]) {
                sh.v_k = hi | sp_low(i);
                sh.n_k = need - cum;
                sh.c_k = cnt[i];
            }
            cum += cnt[i];
        }
    }
    __syncthreads();
}

/* the mass of the top-k: the window's and rank k's slots, clamped at rank k, and the bins between
 */
static __device__ uint64_t sp_topk_mass(const sp_args &a, const sp_window &w, float m,
                                        sp_shared &sh)
{
    uint64_t mass = 0;
    if (sp_warp() < w.nslots) {
        const uint32_t hi = (uint32_t)sh.slot_coarse[sp_warp()] << 8;
        for (int i = 0; i < SP_BINS; i++) {
            const uint32_t key = hi | sp_low(i);
            const uint32_t c = sp_clamp(sh.fine[sp_warp() * 256 + sp_low(i)], key, sh.v_k, sh.n_k);
            if (c)
                mass += c * sp_weight(sp_bits(key), m, a);
        }
    }
    return sp_block_sum(mass, sh) + sh.mid;
}

/* the kept counts and masses of this thread's keys of the window under the cut (v, n); returns
 * their total mass */
static __device__ uint64_t sp_window_keys(const sp_args &a, const sp_window &w, float m, uint32_t v,
                                          uint32_t n, sp_shared &sh, uint32_t *key, uint32_t *cnt,
                                          uint64_t *wt)
{
    uint64_t tot = 0;
    const bool mine = sp_warp() < w.nw;
    const uint32_t hi = mine ? (uint32_t)sh.slot_coarse[sp_warp()] << 8 : 0u;
    for (int i = 0; i < SP_BINS; i++) {
        key[i] = hi | sp_low(i);
        cnt[i] = mine ? sp_clamp(sh.fine[sp_warp() * 256 + sp_low(i)], key[i], v, n) : 0u;
        wt[i] = cnt[i] ? sp_weight(sp_bits(key[i]), m, a) : 0u;
        tot += cnt[i] * wt[i];
    }
    return tot;
}

/* How many of a run of c tied ranks of mass w each, with mass A ranked above the first, top-p
 * keeps: rank j stays while the mass above it, A + j w, is below the target. */
static __device__ uint32_t sp_stays(uint64_t A, uint32_t c, uint64_t w, double target)
{
    if (c == 0 || (double)A >= target)
        return 0;
    if (w == 0)
        return c;
    /* the first j with A + j w >= target (j >= 1 since A < target), from a double estimate made
     * exact by stepping (the test on (double) of an integer is monotone in j) */
    const double g = ceil((target - (double)A) / (double)w);
    uint64_t j = g < 1.0 ? 1u : g > (double)c ? (uint64_t)c + 1u : (uint64_t)g;
    while (j > 1 && (double)(A + (j - 1) * w) >= target)
        j--;
    while (j <= c && (double)(A + j * w) < target)
        j++;
    return j > c ? c : (uint32_t)j;
}

/* One window of the top-p walk; carry is the mass ranked above the window. Adds what it keeps to
 * cut->mass and, where it keeps anything, sets cut->v/n/c to its last kept key. Returns whether the
 * walk ends here (the cut is in this window, or the window reaches rank k). */
static __device__ __noinline__ bool sp_top_p_window(const sp_args &a, const sp_window &w, float m,
                                                    double target, uint64_t &carry, sp_cut *cut,
                                                    sp_shared &sh)
{
    uint32_t key[SP_BINS], cnt[SP_BINS];
    uint64_t wt[SP_BINS], total;
    uint64_t A = sp_window_keys(a, w, m, sh.v_k, sh.n_k, sh, key, cnt, wt);
    A = carry + sp_block_excl(A, &total, sh);
    uint64_t kept = 0, last = 0; /* last: (position + 1) << 32 | ranks kept there */
    for (int i = 0; i < SP_BINS; i++) {
        const uint32_t st = sp_stays(A, cnt[i], wt[i], target);
        if (st) {
            kept += st * wt[i];
            last = ((uint64_t)(threadIdx.x * SP_BINS + i + 1) << 32) | st;
        }
        A += cnt[i] * wt[i];
    }
    kept = sp_block_sum(kept, sh);
    last = sp_block_max(last, sh);
    carry += total;
    cut->mass += kept;
    if (last) {
        const uint32_t q = (uint32_t)(last >> 32) - 1u, slot = q >> 8, low = 255u - (q & 255u);
        cut->v = ((uint32_t)sh.slot_coarse[slot] << 8) | low;
        cut->n = (uint32_t)last;
        cut->c = sh.fine[slot * 256 + low];
    }
    return (double)carry >= target || w.complete;
}

/* One window of the draw: finds the kept rank whose mass interval holds t (sh.hit_key, and
 * sh.hit_j: which of that key's ties). Returns whether it is in this window. */
static __device__ __noinline__ bool sp_draw_window(const sp_args &a, const sp_window &w, float m,
                                                   const sp_cut &cut, uint64_t t, uint64_t &carry,
                                                   sp_shared &sh)
{
    uint32_t key[SP_BINS], cnt[SP_BINS];
    uint64_t wt[SP_BINS], total;
    uint64_t A = sp_window_keys(a, w, m, cut.v, cut.n, sh, key, cnt, wt);
    A = carry + sp_block_excl(A, &total, sh);
    for (int i = 0; i < SP_BINS; i++) {
        const uint64_t run = cnt[i] * wt[i];
        if (run && A <= t && t < A + run) {
            sh.hit_key = key[i];
            sh.hit_j = (uint32_t)((t - A) / wt[i]);
        }
        A += run;
    }
    carry += total;
    __syncthreads();
    return t < carry;
}

/* ---- the kernel ---- */

/* the row's uniform: 53 bits from the first two outputs of Philox4_32_10(seed, 0, offset) */
static __device__ __noinline__ double sp_uniform(uint64_t seed, uint64_t offset)
{
    curandStatePhilox4_32_10_t st;
    curand_init(seed, 0ull, offset, &st);
    const uint64_t x = curand(&st), y = curand(&st);
    return (double)((x << 21) | (y >> 11)) * (1.0 / 9007199254740992.0);
}

static __device__ void sp_write_greedy(const sp_args &a, int row_i, int arg, float lp)
{
    if (a.probs) {
        float *out = a.probs + (size_t)row_i * a.n;
        for (int i = threadIdx.x; i < a.n; i += SP_THREADS)
            out[i] = i == arg ? 1.f : 0.f;
    } else if (threadIdx.x == 0) {
        a.tokens[row_i] = arg;
        if (a.logp)
            a.logp[row_i] = lp;
    }
}

static __device__ void sp_write_nan(const sp_args &a, int row_i)
{
    const float nan = __int_as_float(0x7fc00000);
    if (a.probs) {
        float *out = a.probs + (size_t)row_i * a.n;
        for (int i = threadIdx.x; i < a.n; i += SP_THREADS)
            out[i] = nan;
    } else if (threadIdx.x == 0) {
        a.tokens[row_i] = -1;
        if (a.logp)
            a.logp[row_i] = nan;
    }
}

/* the cut: top-k (from the first window), then top-p walking windows down the ranking. *w is
 * the window left in shared memory. */
static __device__ __noinline__ sp_cut sp_find_cut(const uint16_t *row, const sp_args &a, float m,
                                                  sp_window *w, sp_shared &sh)
{
    *w = sp_window_at(sh, 0, true);
    sp_window_pass(row, a, *w, true, m, sh);
    sp_find_k_key(a, *w, sh);
    sp_cut cut;
    cut.v = sh.v_k;
    cut.n = sh.n_k;
    cut.c = sh.c_k;
    cut.mass = sp_topk_mass(a, *w, m, sh);
    if (!a.top_p_on || cut.mass == 0)
        return cut;
    const double target = (double)a.top_p * (double)cut.mass;
    uint64_t carry = 0;
    cut.mass = 0;
    while (!sp_top_p_window(a, *w, m, target, carry, &cut, sh)) {
        *w = sp_window_at(sh, w->start + w->nw, false);
        sp_window_pass(row, a, *w, false, m, sh);
    }
    return cut;
}

/* kg_sample_probs' last pass: exp((z - max) / T) / kept mass over the kept set, 0 elsewhere */
static __device__ __noinline__ void sp_write_probs(const uint16_t *row, const sp_args &a, int row_i,
                                                   float m, const sp_cut &cut, sp_shared &sh)
{
    float *out = a.probs + (size_t)row_i * a.n;
    const float inv_mass = (float)(a.wscale / (double)cut.mass);
    const bool all_ties = cut.n >= cut.c;
    sp_sweep(row, a, sp_bits(cut.v), 0xffffffffu, sh, [&](int id, uint32_t b, uint32_t r) {
        const uint32_t key = sp_key(b);
        const bool kept = key > cut.v || (key == cut.v && (all_ties || r < cut.n));
        out[id] = kept ? expf((sp_val(b) - m) / a.temperature) * inv_mass : 0.f;
    });
}

/* the id of the j-th element (from 0, in id order) whose key is `key` */
static __device__ __noinline__ int sp_locate(const uint16_t *row, const sp_args &a, uint32_t key,
                                             uint32_t j, sp_shared &sh)
{
    const uint32_t match = sp_bits(key);
    if (threadIdx.x == 0)
        sh.hit_id = -1; /* ordered before the sweep's writes by its first barrier */
    sp_sweep(row, a, match, j, sh, [&](int id, uint32_t b, uint32_t r) {
        if (b == match && r == j)
            sh.hit_id = id;
    });
    __syncthreads();
    return sh.hit_id;
}

/* the draw: t in the kept mass, the key and tie it falls on, then that element's id */
static __device__ int sp_draw(const uint16_t *row, const sp_args &a, int row_i, float m,
                              const sp_cut &cut, sp_window w, sp_shared &sh)
{
    if (threadIdx.x == 0) {
        const double u = sp_uniform(a.seed[row_i], a.offset[row_i]);
        const uint64_t t = (uint64_t)(u * (double)cut.mass);
        sh.t = t < cut.mass ? t : cut.mass - 1;
    }
    __syncthreads();
    const uint64_t t = sh.t;
    if (w.start != 0) { /* the top-p walk left a lower window: start again from the top */
        w = sp_window_at(sh, 0, false);
        sp_window_pass(row, a, w, false, m, sh);
    }
    uint64_t carry = 0;
    while (!sp_draw_window(a, w, m, cut, t, carry, sh)) {
        w = sp_window_at(sh, w.start + w.nw, false);
        sp_window_pass(row, a, w, false, m, sh);
    }
    return sp_locate(row, a, sh.hit_key, sh.hit_j, sh);
}

template <bool PROBS> static __global__ void __launch_bounds__(SP_THREADS, 1) sp_kernel(sp_args a)
{
    __shared__ sp_shared sh;
    const int row_i = blockIdx.x;
    const uint16_t *row = a.logits + (size_t)row_i * a.ld;
    float m_lse, s_lse;
    sp_merge_parts(a, row_i, sh, m_lse, s_lse);
    if (sh.nan) {
        sp_write_nan(a, row_i);
        return;
    }
    const float m = sp_val(sp_bits(sh.kmax));
    const int arg = sh.arg;
    /* logp of the arg max: its z - max is 0 */
    const float lp_arg = -logf(s_lse) + (m - m_lse);
    if (a.greedy) {
        sp_write_greedy(a, row_i, arg, lp_arg);
        return;
    }
    sp_find_k_bin(a, sh);
    __syncthreads();
    sp_window w;
    const sp_cut cut = sp_find_cut(row, a, m, &w, sh);
    if (cut.mass == 0) { /* no finite mass (max +inf, or all -inf): greedy */
        sp_write_greedy(a, row_i, arg, lp_arg);
        return;
    }
    if (PROBS) {
        sp_write_probs(row, a, row_i, m, cut, sh);
        return;
    }
    const int token = sp_draw(row, a, row_i, m, cut, w, sh);
    if (threadIdx.x == 0) {
        a.tokens[row_i] = token;
        if (a.logp)
            a.logp[row_i] = (sp_val(sp_bits(sh.hit_key)) - m_lse) - logf(s_lse);
    }
}

/* ---- launchers ---- */

/* 2^(62 - ceil(log2 n)): n masses of at most this fit in 62 bits */
static double sp_wscale(int n)
{
    int bits = 0;
    while (bits < 31 && (1u << bits) < (unsigned)n)
        bits++;
    return ldexp(1.0, 62 - bits);
}

/* pass 1's part length for rows of n candidates: SP_PART_LEN, or longer (a multiple of SP_VEC)
 * where that would make more than SP_MAX_PARTS parts. A function of n alone. */
static int sp_part_len(int n)
{
    const long long need = ((long long)n + SP_MAX_PARTS - 1) / SP_MAX_PARTS;
    const long long len = (need + SP_VEC - 1) / SP_VEC * SP_VEC;
    return len > SP_PART_LEN ? (int)len : SP_PART_LEN;
}

static int sp_nparts(int n)
{
    const long long len = sp_part_len(n);
    return (int)(((long long)n + len - 1) / len);
}

/* the workspace: sp_part [B][nparts], then (at SP_WS_ALIGN) the coarse counts [B][nparts][256] */
static size_t sp_parts_bytes(int B, int nparts)
{
    const size_t bytes = (size_t)B * (size_t)nparts * sizeof(sp_part);
    return (bytes + SP_WS_ALIGN - 1) / SP_WS_ALIGN * SP_WS_ALIGN;
}

static size_t sp_ws_bytes(int B, int nparts)
{
    return sp_parts_bytes(B, nparts) + (size_t)B * (size_t)nparts * 256 * sizeof(uint16_t);
}

static sp_args sp_setup(const kg_bf16 *logits, int B, int ld, int n_valid, float temperature,
                        int top_k, float top_p, void *workspace)
{
    sp_args a = {};
    a.logits = logits;
    a.ld = (size_t)ld;
    a.n = n_valid;
    a.part_len = sp_part_len(n_valid);
    a.nparts = sp_nparts(n_valid);
    a.parts = (sp_part *)workspace;
    a.hist = (uint16_t *)((uint8_t *)workspace + sp_parts_bytes(B, a.nparts));
    a.vec = ld % SP_VEC == 0 && ((uintptr_t)logits & 15u) == 0;
    a.greedy = !(temperature > 0);
    a.k = top_k > 0 && top_k < n_valid ? top_k : n_valid;
    a.top_p_on = top_p > 0 && top_p < 1;
    a.top_p = top_p;
    a.temperature = temperature;
    a.wscale = sp_wscale(n_valid);
    return a;
}

/* the workspace holds B rows of n_valid, and is aligned for sp_part's 64-bit word and the
 * 16-byte-aligned arrays that follow */
static bool sp_ws_ok(int B, int n_valid, const void *workspace, size_t workspace_bytes)
{
    return workspace && ((uintptr_t)workspace & 15u) == 0 &&
           workspace_bytes >= kg_sample_workspace_bytes(B, n_valid);
}

/* pass 1 over every part of every row, then a block per row for the rest (PROBS: the
 * distribution) */
template <bool PROBS> static cudaError_t sp_launch(const sp_args &a, int B, cudaStream_t s)
{
    const dim3 grid((unsigned)B, (unsigned)a.nparts);
    if (a.greedy)
        sp_part_kernel<false><<<grid, SP_PART_THREADS, 0, s>>>(a);
    else
        sp_part_kernel<true><<<grid, SP_PART_THREADS, 0, s>>>(a);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    sp_kernel<PROBS><<<B, SP_THREADS, 0, s>>>(a);
    return cudaGetLastError();
}

extern "C" {

/* The bound on the parts, min(SP_MAX_PARTS, ceil(n / SP_PART_LEN)), rather than sp_nparts: it
 * only grows with n_valid, so a workspace sized for a vocabulary serves every n_valid below it
 * (and one sized for B rows every smaller batch). */
size_t kg_sample_workspace_bytes(int B, int n_valid)
{
    if (B < 1 || n_valid < 1)
        return 0;
    const long long parts = ((long long)n_valid + SP_PART_LEN - 1) / SP_PART_LEN;
    return sp_ws_bytes(B, parts < SP_MAX_PARTS ? (int)parts : SP_MAX_PARTS);
}

cudaError_t kg_sample(int32_t *tokens, float *logp, const kg_bf16 *logits, int B, int ld,
                      int n_valid, float temperature, int top_k, float top_p, const uint64_t *seed,
                      const uint64_t *offset, void *workspace, size_t workspace_bytes,
                      cudaStream_t s)
{
    if (B < 0 || n_valid < 1 || ld < n_valid)
        return cudaErrorInvalidValue;
    if (B == 0)
        return cudaSuccess;
    const int greedy = !(temperature > 0);
    if (!tokens || !logits || (!greedy && (!seed || !offset)) ||
        !sp_ws_ok(B, n_valid, workspace, workspace_bytes))
        return cudaErrorInvalidValue;
    sp_args a = sp_setup(logits, B, ld, n_valid, temperature, top_k, top_p, workspace);
    a.tokens = tokens;
    a.logp = logp;
    a.lse = logp != NULL;
    a.seed = seed;
    a.offset = offset;
    return sp_launch<false>(a, B, s);
}

cudaError_t kg_sample_probs(float *probs, const kg_bf16 *logits, int B, int ld, int n_valid,
                            float temperature, int top_k, float top_p, void *workspace,
                            size_t workspace_bytes, cudaStream_t s)
{
    if (B < 0 || n_valid < 1 || ld < n_valid)
        return cudaErrorInvalidValue;
    if (B == 0)
        return cudaSuccess;
    if (!probs || !logits || !sp_ws_ok(B, n_valid, workspace, workspace_bytes))
        return cudaErrorInvalidValue;
    sp_args a = sp_setup(logits, B, ld, n_valid, temperature, top_k, top_p, workspace);
    a.probs = probs;
    return sp_launch<true>(a, B, s);
}

} /* extern "C" */
