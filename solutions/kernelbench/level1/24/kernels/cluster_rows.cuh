// cluster_rows.cuh: "reduce a row, then rewrite every element of it with the result" in one read
// and one write of the row, for rows too long for one block's shared memory.
//
// A row is split into `cs` contiguous chunks held by the cs blocks of one thread-block cluster
// (sm_90). Each block loads its chunk once into shared memory (float4 loads after a scalar head
// that brings the global address to 16 bytes; the chunk is stored so that global and shared
// alignment agree), folding each value into a per-thread accumulator as it arrives; the block
// reduces its accumulators and publishes the result in its shared memory; after a cluster
// barrier, warp 0 of every block reads all cs partial results through distributed shared memory
// (map_shared_rank) and merges them into the row's statistic; then every block rewrites its chunk
// from shared memory. A second, split cluster barrier (arrive after the remote reads, wait just
// before exit) keeps each block's shared memory alive until the others have read it.
//
// The operation is a policy class Op with
//   static float2 identity();                         the empty accumulator
//   static void add(float2 &a, float v);              fold one value
//   static void add4(float2 &a, float4 v);            fold four values
//   static float2 merge(float2 a, float2 b);          combine two accumulators
//   static float param(float2 a, long long L);        the row statistic from the full accumulator
//   static float apply(float x, float p);             the output element
//
// Fallbacks, same policy: rows_twopass_kernel (a block per row, two reads of the row, for rows
// too long for 16 blocks' shared memory or when no cluster fits) and strided_kernel (a thread
// per (outer, inner) column, for a reduced dimension that is not the last).
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define CR_THREADS 512
#define CR_HDR_F4 18 // shared header, in float4: [0] partial, [1] row parameter, [2..17] 32 float2

namespace cg = cooperative_groups;

// The elements [0, n) of a chunk starting at xs: a scalar head of `head` elements up to the first
// 16-byte boundary, nb float4 groups, a scalar tail of `tail` elements. off (0..3) is xs's
// position inside its 16 bytes, in floats: element e goes to shared buf[off + e], so groups are
// 16-byte aligned there too.
struct ChunkSplit {
    int off;
    long long head, nb, tail;
};

__device__ __forceinline__ ChunkSplit split_chunk(const float *xs, long long n)
{
    ChunkSplit s;
    s.off = (int)(((uintptr_t)xs >> 2) & 3);
    s.head = (4 - s.off) & 3;
    if (s.head > n)
        s.head = n;
    s.nb = (n - s.head) >> 2;
    s.tail = n - s.head - 4 * s.nb;
    return s;
}

// Accumulator over the block; the result is valid in every thread. red: 32 float2 of shared.
template <class Op> __device__ __forceinline__ float2 block_merge(float2 a, float2 *red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float2 b;
        b.x = __shfl_xor_sync(0xffffffffu, a.x, o);
        b.y = __shfl_xor_sync(0xffffffffu, a.y, o);
        a = Op::merge(a, b);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nwarps = (int)(blockDim.x >> 5);
    __syncthreads(); // red may still be read by an earlier call
    if (lane == 0)
        red[warp] = a;
    __syncthreads();
    float2 t = lane < nwarps ? red[lane] : Op::identity();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float2 b;
        b.x = __shfl_xor_sync(0xffffffffu, t.x, o);
        b.y = __shfl_xor_sync(0xffffffffu, t.y, o);
        t = Op::merge(t, b);
    }
    return t;
}

// Rows of length L, row r at x + r * L; cluster of cs = cluster.num_blocks() blocks per row,
// block `rank` owning elements [rank * chunk, min(L, (rank + 1) * chunk)). chunk % 4 == 0.
template <class Op>
__global__ void __launch_bounds__(CR_THREADS, 2)
    cluster_rows_kernel(float *__restrict__ out, const float *__restrict__ x, long long L,
                        long long chunk)
{
    extern __shared__ __align__(16) float4 cr_smem[];
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank(), cs = cluster.num_blocks();
    const long long row = blockIdx.x / cs;
    float2 *part = reinterpret_cast<float2 *>(cr_smem); // this block's partial
    float *param_slot = reinterpret_cast<float *>(cr_smem + 1);
    float2 *red = reinterpret_cast<float2 *>(cr_smem + 2);
    float *buf = reinterpret_cast<float *>(cr_smem + CR_HDR_F4);

    const long long c0 = (long long)rank * chunk;
    long long n = L - c0;
    if (n > chunk)
        n = chunk;
    if (n < 0)
        n = 0;
    const float *xs = x + row * L + c0;
    float *ys = out + row * L + c0;
    const ChunkSplit sp = split_chunk(xs, n);
    float *bs = buf + sp.off;
    const float4 *x4 = reinterpret_cast<const float4 *>(xs + sp.head);
    float4 *b4 = reinterpret_cast<float4 *>(bs + sp.head);

    // load once into shared memory, folding as the values arrive
    const long long T = blockDim.x;
    float2 acc = Op::identity();
    for (long long j0 = threadIdx.x; j0 < sp.nb; j0 += 4 * T) {
        float4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long j = j0 + k * T;
            if (j < sp.nb)
                v[k] = __ldcs(x4 + j);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long j = j0 + k * T;
            if (j < sp.nb) {
                b4[j] = v[k];
                Op::add4(acc, v[k]);
            }
        }
    }
    if (threadIdx.x < sp.head) {
        const float v = xs[threadIdx.x];
        bs[threadIdx.x] = v;
        Op::add(acc, v);
    }
    if (threadIdx.x < sp.tail) {
        const long long e = sp.head + 4 * sp.nb + threadIdx.x;
        const float v = xs[e];
        bs[e] = v;
        Op::add(acc, v);
    }
    acc = block_merge<Op>(acc, red);
    if (threadIdx.x == 0)
        *part = acc;
    cluster.sync(); // every block's partial is written and visible cluster-wide

    if (threadIdx.x < 32) {
        float2 t = Op::identity();
        if (threadIdx.x < cs)
            t = *cluster.map_shared_rank(part, (int)threadIdx.x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float2 b;
            b.x = __shfl_xor_sync(0xffffffffu, t.x, o);
            b.y = __shfl_xor_sync(0xffffffffu, t.y, o);
            t = Op::merge(t, b);
        }
        if (threadIdx.x == 0)
            *param_slot = Op::param(t, L);
    }
    auto token = cluster.barrier_arrive(); // this block is done reading the others' shared memory
    __syncthreads();                       // param_slot and the whole chunk are visible block-wide
    const float p = *param_slot;

    const bool vec_out = (((uintptr_t)ys ^ (uintptr_t)xs) & 15) == 0;
    float4 *y4 = reinterpret_cast<float4 *>(ys + sp.head);
    for (long long j = threadIdx.x; j < sp.nb; j += T) {
        const float4 v = b4[j];
        float4 r;
        r.x = Op::apply(v.x, p);
        r.y = Op::apply(v.y, p);
        r.z = Op::apply(v.z, p);
        r.w = Op::apply(v.w, p);
        if (vec_out) {
            __stcs(y4 + j, r);
        } else {
            float *q = ys + sp.head + 4 * j;
            q[0] = r.x;
            q[1] = r.y;
            q[2] = r.z;
            q[3] = r.w;
        }
    }
    if (threadIdx.x < sp.head)
        ys[threadIdx.x] = Op::apply(bs[threadIdx.x], p);
    if (threadIdx.x < sp.tail) {
        const long long e = sp.head + 4 * sp.nb + threadIdx.x;
        ys[e] = Op::apply(bs[e], p);
    }
    cluster.barrier_wait(std::move(token)); // nobody reads this block's shared memory any more
}

// A block per row, any length: one read to reduce, a second read (mostly from L2) to write.
template <class Op>
__global__ void __launch_bounds__(1024)
    rows_twopass_kernel(float *__restrict__ out, const float *__restrict__ x, long long L)
{
    __shared__ float2 red[32];
    const long long row = blockIdx.x;
    const float *xs = x + row * L;
    float *ys = out + row * L;
    const ChunkSplit sp = split_chunk(xs, L);
    const float4 *x4 = reinterpret_cast<const float4 *>(xs + sp.head);
    float2 acc = Op::identity();
    for (long long j = threadIdx.x; j < sp.nb; j += blockDim.x)
        Op::add4(acc, x4[j]);
    if (threadIdx.x < sp.head)
        Op::add(acc, xs[threadIdx.x]);
    if (threadIdx.x < sp.tail)
        Op::add(acc, xs[sp.head + 4 * sp.nb + threadIdx.x]);
    acc = block_merge<Op>(acc, red);
    const float p = Op::param(acc, L);
    const bool vec_out = (((uintptr_t)ys ^ (uintptr_t)xs) & 15) == 0;
    float4 *y4 = reinterpret_cast<float4 *>(ys + sp.head);
    for (long long j = threadIdx.x; j < sp.nb; j += blockDim.x) {
        const float4 v = x4[j];
        float4 r;
        r.x = Op::apply(v.x, p);
        r.y = Op::apply(v.y, p);
        r.z = Op::apply(v.z, p);
        r.w = Op::apply(v.w, p);
        if (vec_out) {
            __stcs(y4 + j, r);
        } else {
            float *q = ys + sp.head + 4 * j;
            q[0] = r.x;
            q[1] = r.y;
            q[2] = r.z;
            q[3] = r.w;
        }
    }
    if (threadIdx.x < sp.head)
        ys[threadIdx.x] = Op::apply(xs[threadIdx.x], p);
    if (threadIdx.x < sp.tail) {
        const long long e = sp.head + 4 * sp.nb + threadIdx.x;
        ys[e] = Op::apply(xs[e], p);
    }
}

// x viewed as (outer, L, inner), reduced over L: a thread per (outer, inner) column, two passes
// (a warp's loads are 32 consecutive floats of one row of the column block).
template <class Op>
__global__ void __launch_bounds__(256)
    strided_kernel(float *__restrict__ out, const float *__restrict__ x, long long outer,
                   long long L, long long inner)
{
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= outer * inner)
        return;
    const long long o = col / inner, i = col - o * inner;
    const float *xp = x + o * L * inner + i;
    float *yp = out + o * L * inner + i;
    float2 acc = Op::identity();
    for (long long l = 0; l < L; ++l)
        Op::add(acc, xp[l * inner]);
    const float p = Op::param(acc, L);
    for (long long l = 0; l < L; ++l)
        yp[l * inner] = Op::apply(xp[l * inner], p);
}
