/* kvcache.cu: the decoding KV cache in slots, and flash-decoding attention over it.
 *
 * kg_decode_attention: two kernels over the caller's workspace (no allocation per call: with
 * the default pool, a cudaMallocAsync/cudaFreeAsync pair re-maps memory after every
 * synchronisation, and that cost ~90 us per call, more than the attention itself at batch 1).
 *
 * Partial kernel: one block per (chunk of `chunk` cached keys, kv head, sequence). A block's
 * warps each own one query head of the kv head's G = Hq / Hkv (and, when G is small, one slice
 * of the chunk's 32-key tiles, so that a block still has several warps). The warps of a block
 * read the same K and V rows, which therefore come from DRAM once and from L1 after. A warp walks
 * its tiles with an online softmax held in registers:
 *   - scores: lane j takes key j of the tile and computes the whole dot product with the query
 *     (fp32 in shared memory, read as broadcasts): no shuffle reduction per key, K rows read as
 *     16-byte vectors;
 *   - one warp max per tile to rescale, then P V with the lanes over head dimensions (HD / 32
 *     contiguous ones each, coalesced V rows), the probability of key j broadcast by a shuffle.
 * Nothing in that needs __syncthreads; the one left combines the slices of a chunk. The block
 * writes, per query head, the chunk's max score m, its sum of exponentials l and its
 * unnormalised output o (all fp32).
 * The grid is sized by max_len (the host cannot read ctx_len): a block whose chunk lies wholly
 * past ctx_len[b], or of an invalid sequence, reads two ints and returns without writing.
 *
 * Merge kernel: one block per (sequence, query head) reads ctx_len[b] itself and combines only
 * the ceil(ctx_len / chunk) chunks that hold keys, by their log-sum-exp: a block-wide max of the
 * chunks' m, then each warp sums its share of the chunks and the warps' sums meet in shared
 * memory. A sequence with one used chunk is a normalisation (o / l); an invalid one a NaN row.
 *
 * The chunk (dec_chunk) is chosen on the host from B * Hkv and max_len, so that a batch of 1 still
 * spreads over the whole GPU and a large batch does not cut its keys finer than it needs to.
 *
 * By default the merge runs in the partial kernel's last block instead of a kernel of its own (a
 * launch saved per layer: at batch 1 the merge kernel took 3.7 us of a ~11 us attention): each
 * working block of a (sequence, kv head) publishes its partials (__threadfence), then counts
 * itself on that pair's counter at the workspace's end; the block that brings the count to the
 * number of used chunks merges the pair's G query heads, reading the partials past L1 (__ldcg),
 * and puts the counter back to 0 for the next call. Nothing ever waits on another block. The
 * counters must be 0 before the first call: kg_decode_attention_workspace_init.
 * KGYM_DECODE_MERGE=kernel keeps the separate merge kernel (to measure one against the other). */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16_pack.cuh"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/warp_sum.cuh"

/* one block per token t: copies its Hkv * hd values of k and v to [slot[t], pos[t]] */
static __global__ void kv_write_kernel(__nv_bfloat16 *kc, __nv_bfloat16 *vc, const __nv_bfloat16 *k,
                                       const __nv_bfloat16 *v, const int32_t *slot,
                                       const int32_t *pos, int n_slots, int max_len, int row,
                                       int vec)
{
    const int t = blockIdx.x;
    const int sl = slot[t], p = pos[t];
    if (sl < 0 || sl >= n_slots || p < 0 || p >= max_len)
        return;
    const size_t dst = ((size_t)sl * max_len + p) * row, src = (size_t)t * row;
    if (vec) {
        for (int i = threadIdx.x; i < row / 8; i += blockDim.x) {
            ((uint4 *)(kc + dst))[i] = ((const uint4 *)(k + src))[i];
            ((uint4 *)(vc + dst))[i] = ((const uint4 *)(v + src))[i];
        }
    } else {
        for (int i = threadIdx.x; i < row; i += blockDim.x) {
            kc[dst + i] = k[src + i];
            vc[dst + i] = v[src + i];
        }
    }
}

/* ---- decode attention ---- */

#define DEC_TILE 32 /* keys a warp scores at once: one per lane */
/* The grid is aimed at the H200's 132 SMs. At least DEC_MIN_BLOCKS blocks when max_len allows:
 * 4 per SM (a block of 7 warps is small; 4 of them per SM still fit in one wave and hide more of
 * the DRAM latency than 2 would), and at most about DEC_MAX_BLOCKS: past that the chunks grow
 * instead, which keeps the workspace and the merge small for large batches. */
#define DEC_SMS 132
#define DEC_MIN_BLOCKS (4 * DEC_SMS)
#define DEC_MAX_BLOCKS (32 * DEC_SMS)
/* the longest chunk the minimum-blocks rule picks (8 tiles: the serial work of one warp) */
#define DEC_CHUNK_MAX 256
/* warps of a partial block along query heads; a kv head with more query heads loops */
#define DEC_HEAD_WARPS 16
/* with fewer than this many query heads per kv head, warps split a chunk's tiles up to this
 * many warps in all */
#define DEC_SLICE_WARPS 8
/* Two blocks of the largest size per SM, i.e. at most 64 registers: with more room ptxas hoists
 * so many loads that it spills (seen with CUDA 13 for sm_90a). */
#define DEC_PARTIAL_MIN_BLOCKS 2
/* warps of a merge block: at batch 1 a block combines up to a few hundred chunks */
#define DEC_MERGE_WARPS 16

typedef struct {
    float *o;   /* [B, Hq, n_chunks, hd] each chunk's output, unnormalised (scaled by e^-m) */
    float2 *ml; /* [B, Hq, n_chunks] each chunk's (m, l): max score, sum of e^(score - m) */
    const __nv_bfloat16 *q, *kc, *vc;
    const int32_t *slot, *ctx_len;
    int Hq, Hkv, n_slots, max_len;
    int chunk, n_chunks; /* keys per partial block (a multiple of DEC_TILE); chunks of max_len */
    int head_warps;      /* warps along query heads: min(G, DEC_HEAD_WARPS) */
    int slices;          /* warps per query head (> 1 only when head_warps == G) */
    int vec;             /* both caches 16-byte aligned: vector loads */
    float scale;
    int *counters;      /* [B, Hkv] working blocks done; NULL: the merge kernel merges */
    __nv_bfloat16 *out; /* [B, Hq, HD] */
} dec_args;

template <int HD> struct dec_state {
    float m, l;         /* running max score; sum of e^(score - m) (one warp's, reduced) */
    float acc[HD / 32]; /* this lane's HD / 32 contiguous dims of sum e^(score - m) v */
};

static __device__ __forceinline__ float warp_max(float x)
{
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* ctx_len[b] when sequence b is valid (slot in [0, n_slots), ctx_len in [1, max_len]), else 0;
 * its slot in *sl */
static __device__ __forceinline__ int dec_len(const dec_args &a, int b, int *sl)
{
    const int len = a.ctx_len[b], s = a.slot[b];
    *sl = s;
    return len >= 1 && len <= a.max_len && s >= 0 && s < a.n_slots ? len : 0;
}

/* q . k over HD dims: qs fp32 (shared, every lane the same address: broadcasts), kr one cached
 * key row. Two accumulators (even and odd dims) halve the chain of dependent FMAs; the scalar
 * path (misaligned caches) adds in the same order, so both give the same bits. */
template <int HD>
static __device__ __forceinline__ float key_dot(const float *qs, const __nv_bfloat16 *kr, int vec)
{
    float s0 = 0.f, s1 = 0.f;
    if (vec) {
        const uint4 *k4 = (const uint4 *)kr;
        const float4 *q4 = (const float4 *)qs;
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            const uint4 u = __ldg(k4 + i);
            const float4 a = q4[2 * i], b = q4[2 * i + 1];
            s0 = fmaf(a.x, bf_lo(u.x), s0);
            s1 = fmaf(a.y, bf_hi(u.x), s1);
            s0 = fmaf(a.z, bf_lo(u.y), s0);
            s1 = fmaf(a.w, bf_hi(u.y), s1);
            s0 = fmaf(b.x, bf_lo(u.z), s0);
            s1 = fmaf(b.y, bf_hi(u.z), s1);
            s0 = fmaf(b.z, bf_lo(u.w), s0);
            s1 = fmaf(b.w, bf_hi(u.w), s1);
        }
    } else {
#pragma unroll 8
        for (int d = 0; d < HD; d += 2) {
            s0 = fmaf(qs[d], __bfloat162float(kr[d]), s0);
            s1 = fmaf(qs[d + 1], __bfloat162float(kr[d + 1]), s1);
        }
    }
    return s0 + s1;
}

/* v[e] = vr[e], e < HD / 32: one lane's contiguous dims of a V row (4 or 8 bytes) */
template <int HD>
static __device__ __forceinline__ void load_v(float (&v)[HD / 32], const __nv_bfloat16 *vr, int vec)
{
    if (!vec) {
#pragma unroll
        for (int e = 0; e < HD / 32; e++)
            v[e] = __bfloat162float(vr[e]);
    } else if constexpr (HD == 64) {
        const uint32_t u = __ldg((const unsigned int *)vr);
        v[0] = bf_lo(u);
        v[1] = bf_hi(u);
    } else {
        const uint2 u = __ldg((const uint2 *)vr);
        v[0] = bf_lo(u.x);
        v[1] = bf_hi(u.x);
        v[2] = bf_lo(u.y);
        v[3] = bf_hi(u.y);
    }
}

/* One warp: the query qs against tiles first, first + step, ... of a chunk's n keys (kb, vb: the
 * chunk's first K and V row of this kv head, rows `row` elements apart). All 32 lanes run every
 * line (the loop bounds are warp-uniform), so the full-mask shuffles are safe. Keys at or past n
 * are never read (they may be another sequence's, or NaN). */
template <int HD>
static __device__ dec_state<HD> attend_tiles(const float *qs, const __nv_bfloat16 *kb,
                                             const __nv_bfloat16 *vb, size_t row, int n, int first,
                                             int step, int vec)
{
    constexpr int E = HD / 32;
    const int lane = threadIdx.x & 31;
    dec_state<HD> st;
    st.m = -INFINITY;
    float l = 0.f; /* this lane's share of the sum; reduced once at the end */
#pragma unroll
    for (int e = 0; e < E; e++)
        st.acc[e] = 0.f;
    const int n_tiles = (n + DEC_TILE - 1) / DEC_TILE;
    for (int t = first; t < n_tiles; t += step) {
        const int j0 = t * DEC_TILE, nk = min(DEC_TILE, n - j0);
        const bool has = lane < nk;
        const float s = has ? key_dot<HD>(qs, kb + (size_t)(j0 + lane) * row, vec) : -INFINITY;
        /* the tile holds a key, so m_new is finite; on the first tile m is -inf: alpha 0 */
        const float m_new = fmaxf(st.m, warp_max(s));
        const float alpha = st.m == -INFINITY ? 0.f : __expf(st.m - m_new);
        const float p = has ? __expf(s - m_new) : 0.f;
        l = fmaf(l, alpha, p);
#pragma unroll
        for (int e = 0; e < E; e++)
            st.acc[e] *= alpha;
        /* P V, branch-free so that the unrolled loop can issue its V loads together: a key
         * past the tile's end (p = 0) rereads the tile's last valid row, never a row past n */
        const __nv_bfloat16 *vt = vb + (size_t)j0 * row + lane * E;
#pragma unroll
        for (int jj = 0; jj < DEC_TILE; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
            float v[E];
            load_v<HD>(v, vt + (size_t)min(jj, nk - 1) * row, vec);
#pragma unroll
            for (int e = 0; e < E; e++)
                st.acc[e] = fmaf(pj, v[e], st.acc[e]);
        }
        st.m = m_new;
    }
    st.l = warp_sum(l);
    return st;
}

/* One warp writes its (m, l, o) as row r of the partials (o rows 16-byte aligned: the workspace
 * is, and a row is HD floats) */
template <int HD>
static __device__ __forceinline__ void write_partial(const dec_args &a, size_t r,
                                                     const dec_state<HD> &st)
{
    const int lane = threadIdx.x & 31;
    float *o = a.o + r * HD + lane * (HD / 32);
    if constexpr (HD == 64)
        *(float2 *)o = make_float2(st.acc[0], st.acc[1]);
    else
        *(float4 *)o = make_float4(st.acc[0], st.acc[1], st.acc[2], st.acc[3]);
    if (lane == 0)
        a.ml[r] = make_float2(st.m, st.l);
}

/* A row of NaN (an invalid sequence's), written by the whole block */
template <int HD> static __device__ __forceinline__ void nan_row(__nv_bfloat16 *ob)
{
    for (int d = threadIdx.x; d < HD; d += blockDim.x)
        ob[d] = __float2bfloat16(__int_as_float(0x7fc00000));
}

/* slices > 1: slice 0 (warp w = wh * slices) combines its head's slices, warps w .. w + slices -
 * 1, by their max (slice 0 holds the chunk's first tile, so M is finite; a slice without tiles
 * has m -inf and weighs 0), into partial row r */
template <int HD>
static __device__ void combine_slices(const dec_args &a, const float (*stash)[HD + 4], int w,
                                      size_t r)
{
    constexpr int E = HD / 32;
    const int lane = threadIdx.x & 31;
    float M = -INFINITY;
    for (int i = 0; i < a.slices; i++)
        M = fmaxf(M, stash[w + i][HD]);
    dec_state<HD> st;
    st.m = M;
    st.l = 0.f;
#pragma unroll
    for (int e = 0; e < E; e++)
        st.acc[e] = 0.f;
    for (int i = 0; i < a.slices; i++) {
        const float *si = stash[w + i], mi = si[HD];
        const float f = mi == -INFINITY ? 0.f : __expf(mi - M);
        st.l = fmaf(f, si[HD + 1], st.l);
#pragma unroll
        for (int e = 0; e < E; e++)
            st.acc[e] = fmaf(f, si[lane * E + e], st.acc[e]);
    }
    write_partial<HD>(a, r, st);
}

/* Output row bh = (b, h) of a valid sequence of len keys, by the whole block (at most
 * DEC_MERGE_WARPS warps; every thread must call it): sum_c e^(m_c - M) o_c / sum_c e^(m_c - M)
 * l_c over the chunks that hold keys (every one of them has a finite m_c). The partials are read
 * past L1 (__ldcg): in the partial kernel's last block they were written by other blocks during
 * this kernel, and an earlier call's merge on this SM may have left the same addresses in L1. */
template <int HD>
static __device__ void merge_row(__nv_bfloat16 *ob, const dec_args &a, int bh, int len)
{
    constexpr int E = HD / 32;
    __shared__ float wmax[DEC_MERGE_WARPS];
    /* each warp's sum of rescaled o, its sum of rescaled l at HD */
    __shared__ __align__(16) float wsum[DEC_MERGE_WARPS][HD + 4];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int used = (len + a.chunk - 1) / a.chunk;
    const size_t r0 = (size_t)bh * a.n_chunks;
    if (used == 1) { /* nothing to combine (block-uniform) */
        const float l = __ldcg(&a.ml[r0]).y;
        for (int d = threadIdx.x; d < HD; d += blockDim.x)
            ob[d] = __float2bfloat16(__ldcg(a.o + r0 * HD + d) / l);
        return;
    }
    __syncthreads(); /* the block's previous row is done with wmax and wsum */
    float m = -INFINITY;
    for (int c = threadIdx.x; c < used; c += blockDim.x)
        m = fmaxf(m, __ldcg(&a.ml[r0 + c]).x);
    m = warp_max(m);
    if (lane == 0)
        wmax[w] = m;
    __syncthreads();
    float M = wmax[0];
    for (int i = 1; i < nw; i++)
        M = fmaxf(M, wmax[i]);

    float l = 0.f, acc[E];
#pragma unroll
    for (int e = 0; e < E; e++)
        acc[e] = 0.f;
        /* unrolled so that a warp has several chunks' loads in flight */
#pragma unroll 4
    for (int c = w; c < used; c += nw) {
        const float2 mc = __ldcg(&a.ml[r0 + c]);
        const float f = __expf(mc.x - M);
        const float *oc = a.o + (r0 + c) * HD + lane * E;
        float v[E];
        if constexpr (HD == 64) {
            const float2 t = __ldcg((const float2 *)oc);
            v[0] = t.x, v[1] = t.y;
        } else {
            const float4 t = __ldcg((const float4 *)oc);
            v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
        }
        l = fmaf(f, mc.y, l);
#pragma unroll
        for (int e = 0; e < E; e++)
            acc[e] = fmaf(f, v[e], acc[e]);
    }
#pragma unroll
    for (int e = 0; e < E; e++)
        wsum[w][lane * E + e] = acc[e];
    if (lane == 0)
        wsum[w][HD] = l;
    __syncthreads();
    for (int d = threadIdx.x; d < HD; d += blockDim.x) {
        float num = 0.f, den = 0.f;
        for (int i = 0; i < nw; i++) {
            num += wsum[i][d];
            den += wsum[i][HD];
        }
        ob[d] = __float2bfloat16(num / den);
    }
}

/* After a working partial block of (sequence b, kv head hk) has written its partials: counts it,
 * and the block that completes the count merges the pair's G output rows (see the top). Every
 * thread of the block must call it. */
template <int HD> static __device__ void merge_if_last(const dec_args &a, int b, int hk, int len)
{
    __shared__ int last;
    __threadfence(); /* this thread's partials, visible before the block is counted */
    __syncthreads();
    if (threadIdx.x == 0) {
        int *ctr = a.counters + (size_t)b * a.Hkv + hk;
        const int used = (len + a.chunk - 1) / a.chunk;
        last = atomicAdd(ctr, 1) == used - 1;
        if (last)
            *ctr = 0; /* every working block has counted: ready for the next call */
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const int G = a.Hq / a.Hkv;
    for (int g = 0; g < G; g++) {
        const int bh = b * a.Hq + hk * G + g;
        merge_row<HD>(a.out + (size_t)bh * HD, a, bh, len);
    }
}

/* Partials of (chunk blockIdx.x, kv head blockIdx.y, sequence blockIdx.z). Warp w is query head
 * slot w / slices (heads g, g + head_warps, ...) and tile slice w % slices. */
template <int HD>
static __global__ void __launch_bounds__(DEC_HEAD_WARPS * 32, DEC_PARTIAL_MIN_BLOCKS)
    decode_partial_kernel(dec_args a)
{
    constexpr int E = HD / 32;
    __shared__ __align__(16) float qs[DEC_HEAD_WARPS][HD]; /* each warp's query, scaled */
    /* the slices' states when slices > 1 (then at most DEC_SLICE_WARPS warps): acc, m at HD, l
     * at HD + 1; rows padded to a multiple of 16 bytes */
    __shared__ __align__(16) float stash[DEC_SLICE_WARPS][HD + 4];
    pdl_launch_dependents();
    pdl_wait(); /* q and the cache rows come from the kernels before */
    const int c = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    int sl;
    const int len = dec_len(a, b, &sl), j0 = c * a.chunk;
    if (len == 0 && c == 0 && a.counters) /* an invalid sequence: its kv head's NaN rows */
        for (int g = 0; g < a.Hq / a.Hkv; g++)
            nan_row<HD>(a.out + ((size_t)b * a.Hq + hk * (a.Hq / a.Hkv) + g) * HD);
    if (j0 >= len) /* past ctx_len, or an invalid sequence (len 0): the merge never reads it */
        return;
    const int n = min(a.chunk, len - j0);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int wh = w / a.slices, ws = w % a.slices, G = a.Hq / a.Hkv;
    const size_t row = (size_t)a.Hkv * HD;
    const size_t at = ((size_t)sl * a.max_len + j0) * row + (size_t)hk * HD;

    for (int g = wh; g < G; g += a.head_warps) {
        const int h = hk * G + g;
        const __nv_bfloat16 *qr = a.q + ((size_t)b * a.Hq + h) * HD;
        for (int d = lane; d < HD; d += 32)
            qs[w][d] = __bfloat162float(qr[d]) * a.scale;
        __syncwarp();
        const dec_state<HD> st =
            attend_tiles<HD>(qs[w], a.kc + at, a.vc + at, row, n, ws, a.slices, a.vec);
        __syncwarp(); /* every lane is done with qs[w] before the next head rewrites it */
        if (a.slices == 1) {
            write_partial<HD>(a, ((size_t)b * a.Hq + h) * a.n_chunks + c, st);
        } else { /* one head per warp here (head_warps == G): the loop runs once */
#pragma unroll
            for (int e = 0; e < E; e++)
                stash[w][lane * E + e] = st.acc[e];
            if (lane == 0) {
                stash[w][HD] = st.m;
                stash[w][HD + 1] = st.l;
            }
        }
    }
    if (a.slices > 1) { /* block-uniform */
        __syncthreads();
        if (ws == 0)
            combine_slices<HD>(a, stash, w, ((size_t)b * a.Hq + hk * G + wh) * a.n_chunks + c);
    }
    if (a.counters)
        merge_if_last<HD>(a, b, hk, len);
}

/* out row (b, h) = blockIdx.x, when the partial kernel's last blocks do not merge */
template <int HD>
static __global__ void __launch_bounds__(DEC_MERGE_WARPS * 32)
    decode_merge_kernel(__nv_bfloat16 *out, dec_args a)
{
    pdl_launch_dependents();
    pdl_wait(); /* the partials come from the kernel before */
    const int bh = blockIdx.x, b = bh / a.Hq;
    __nv_bfloat16 *ob = out + (size_t)bh * HD;
    int sl;
    const int len = dec_len(a, b, &sl);
    if (len == 0) /* invalid slot or ctx_len: a NaN row, as documented */
        nan_row<HD>(ob);
    else
        merge_row<HD>(ob, a, bh, len);
}

/* ---- decode attention: host side ---- */

static uint64_t ceil_div_u64(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

static uint64_t round_up_tile(uint64_t n)
{
    return ceil_div_u64(n, DEC_TILE) * DEC_TILE;
}

/* Keys per partial block for seq_heads = B * Hkv (sequence, kv head) pairs: the longest multiple
 * of DEC_TILE, at most DEC_CHUNK_MAX, that still gives DEC_MIN_BLOCKS blocks (at least one
 * tile); then long enough for at most ~DEC_MAX_BLOCKS blocks; never more than max_len needs.
 * Non-decreasing in seq_heads: more sequences, longer (never more) chunks. */
static int dec_chunk(uint64_t seq_heads, int max_len)
{
    const uint64_t keys = (uint64_t)max_len * seq_heads; /* (sequence, kv head, key) triples */
    uint64_t c = round_up_tile(ceil_div_u64(keys, DEC_MIN_BLOCKS));
    c = c < DEC_TILE ? DEC_TILE : c > DEC_CHUNK_MAX ? DEC_CHUNK_MAX : c;
    const uint64_t hi = round_up_tile(ceil_div_u64(keys, DEC_MAX_BLOCKS));
    c = c < hi ? hi : c;
    const uint64_t whole = round_up_tile((uint64_t)max_len);
    return (int)(c < whole ? c : whole);
}

/* Partial rows (B * Hq * n_chunks) any call with at most B sequences and any Hkv needs. With
 * P = B' * Hkv pairs, the chunk is >= max_len * P / DEC_MAX_BLOCKS (or covers max_len), so
 * P * n_chunks <= DEC_MAX_BLOCKS + P, and B' * n_chunks <= DEC_MAX_BLOCKS / Hkv + B' <=
 * DEC_MAX_BLOCKS + B; the chunk is also >= DEC_TILE: n_chunks <= ceil(max_len / DEC_TILE). The
 * bound grows with B, so a workspace sized for B serves every smaller batch. */
static size_t dec_rows_bound(int B, int Hq, int max_len)
{
    const size_t per_seq = (size_t)B * ceil_div_u64((uint64_t)max_len, DEC_TILE);
    const size_t by_blocks = (size_t)DEC_MAX_BLOCKS + (size_t)B;
    return (size_t)Hq * (per_seq < by_blocks ? per_seq : by_blocks);
}

/* a partial row: hd floats of o, then (m, l) */
static size_t dec_row_bytes(int hd)
{
    return (size_t)hd * sizeof(float) + sizeof(float2);
}

template <int HD>
static cudaError_t decode_launch(__nv_bfloat16 *out, dec_args a, int B, cudaStream_t s)
{
    const dim3 grid(a.n_chunks, a.Hkv, B);
    cudaError_t e =
        kg_launch(decode_partial_kernel<HD>, grid, a.head_warps * a.slices * 32, 0, s, a);
    if (e != cudaSuccess || a.counters) /* merged by the partial kernel's last blocks */
        return e;
    const int merge_warps = a.n_chunks < DEC_MERGE_WARPS ? a.n_chunks : DEC_MERGE_WARPS;
    return kg_launch(decode_merge_kernel<HD>, B * a.Hq, merge_warps * 32, 0, s, out, a);
}

extern "C" {

cudaError_t kg_kv_write(kg_bf16 *k_cache, kg_bf16 *v_cache, const kg_bf16 *k, const kg_bf16 *v,
                        const int32_t *slot, const int32_t *pos, int T, int n_slots, int max_len,
                        int Hkv, int hd, cudaStream_t s)
{
    if (T < 0 || n_slots <= 0 || max_len <= 0 || Hkv <= 0 || hd <= 0)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!k_cache || !v_cache || !k || !v || !slot || !pos)
        return cudaErrorInvalidValue;
    const int row = Hkv * hd;
    const int vec = row % 8 == 0 && (uintptr_t)k_cache % 16 == 0 && (uintptr_t)v_cache % 16 == 0 &&
                    (uintptr_t)k % 16 == 0 && (uintptr_t)v % 16 == 0;
    const int work = vec ? row / 8 : row;
    const int threads = work >= 256 ? 256 : (work >= 128 ? 128 : 64);
    kv_write_kernel<<<T, threads, 0, s>>>((__nv_bfloat16 *)k_cache, (__nv_bfloat16 *)v_cache,
                                          (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, slot,
                                          pos, n_slots, max_len, row, vec);
    return cudaGetLastError();
}

/* The merge counters: [B, Hkv] ints at the workspace's end, room for B * Hq of them. A call with
 * fewer sequences uses the tail of that room, which no call's partials reach (a workspace of B
 * sequences holds the partials of B and the counters of B past them). */
static int *dec_counters(void *workspace, size_t workspace_bytes, int B, int Hq)
{
    const uintptr_t end = ((uintptr_t)workspace + workspace_bytes) & ~(uintptr_t)3;
    return (int *)(end - (size_t)B * (size_t)Hq * sizeof(int));
}

/* KGYM_DECODE_MERGE=kernel: the separate merge kernel (read once; a static is thread-safe) */
static bool merge_in_partial_kernel(void)
{
    static const bool in_partial = [] {
        const char *v = getenv("KGYM_DECODE_MERGE");
        return !(v && strcmp(v, "kernel") == 0);
    }();
    return in_partial;
}

size_t kg_decode_attention_workspace_bytes(int B, int Hq, int hd, int max_len)
{
    if (B <= 0 || Hq <= 0 || (hd != 64 && hd != 128) || max_len <= 0)
        return 0;
    return dec_rows_bound(B, Hq, max_len) * dec_row_bytes(hd) + (size_t)B * Hq * sizeof(int);
}

cudaError_t kg_decode_attention_workspace_init(void *workspace, size_t workspace_bytes, int B,
                                               int Hq, cudaStream_t s)
{
    if (!workspace || B <= 0 || Hq <= 0 || (uintptr_t)workspace % 16 != 0 ||
        workspace_bytes < (size_t)B * Hq * sizeof(int) + 4)
        return cudaErrorInvalidValue;
    return cudaMemsetAsync(dec_counters(workspace, workspace_bytes, B, Hq), 0,
                           (size_t)B * Hq * sizeof(int), s);
}

cudaError_t kg_decode_attention(kg_bf16 *out, const kg_bf16 *q, const kg_bf16 *k_cache,
                                const kg_bf16 *v_cache, const int32_t *slot, const int32_t *ctx_len,
                                int B, int Hq, int Hkv, int hd, int n_slots, int max_len,
                                float scale, void *workspace, size_t workspace_bytes,
                                cudaStream_t s)
{
    if (B < 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0 || (hd != 64 && hd != 128) || n_slots <= 0 ||
        max_len <= 0)
        return cudaErrorInvalidValue;
    if (B == 0)
        return cudaSuccess;
    if (!out || !q || !k_cache || !v_cache || !slot || !ctx_len)
        return cudaErrorInvalidValue;
    if (B > 65535 || Hkv > 65535 || (long long)B * Hq > INT32_MAX)
        return cudaErrorInvalidValue;
    if (!workspace || (uintptr_t)workspace % 16 != 0 ||
        workspace_bytes < kg_decode_attention_workspace_bytes(B, Hq, hd, max_len))
        return cudaErrorInvalidValue;

    const int G = Hq / Hkv;
    dec_args a;
    a.q = (const __nv_bfloat16 *)q;
    a.kc = (const __nv_bfloat16 *)k_cache;
    a.vc = (const __nv_bfloat16 *)v_cache;
    a.slot = slot;
    a.ctx_len = ctx_len;
    a.Hq = Hq, a.Hkv = Hkv, a.n_slots = n_slots, a.max_len = max_len;
    a.chunk = dec_chunk((uint64_t)B * Hkv, max_len);
    a.n_chunks = (max_len + a.chunk - 1) / a.chunk;
    a.head_warps = G < DEC_HEAD_WARPS ? G : DEC_HEAD_WARPS;
    /* few query heads (G < DEC_SLICE_WARPS, so head_warps == G): more warps per chunk, each on
     * a slice of its tiles, rather than a block of one or two warps walking all of them */
    const int tiles = a.chunk / DEC_TILE, spare = DEC_SLICE_WARPS / a.head_warps;
    a.slices = spare < 1 ? 1 : spare < tiles ? spare : tiles;
    a.vec = (uintptr_t)k_cache % 16 == 0 && (uintptr_t)v_cache % 16 == 0;
    a.scale = scale;
    /* o first (its rows stay 16-byte aligned), then (m, l) */
    const size_t rows = (size_t)B * Hq * a.n_chunks;
    a.o = (float *)workspace;
    a.ml = (float2 *)((char *)workspace + rows * hd * sizeof(float));
    a.out = (__nv_bfloat16 *)out;
    a.counters = merge_in_partial_kernel() ? dec_counters(workspace, workspace_bytes, B, Hq) : NULL;
    return hd == 64 ? decode_launch<64>((__nv_bfloat16 *)out, a, B, s)
                    : decode_launch<128>((__nv_bfloat16 *)out, a, B, s);
}

} /* extern "C" */
