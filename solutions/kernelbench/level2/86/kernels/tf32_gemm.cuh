// tf32_gemm.cuh: the main loop of a hand-written tensor-core GEMM, C[M, N] = X[M, K] * W[N, K]^T
// (x @ W^T, nn.Linear's layout), for kernels that fuse their own epilogue.
//
// TF32 mma.sync.m16n8k8 with FP32 accumulation; operands rounded to TF32 with cvt.rna (round to
// nearest), so a K = 8192 dot product of O(1) terms keeps an error near 1e-3 of its scale, well
// inside atol = rtol = 1e-2. Eager PyTorch runs fp32 nn.Linear as an FP32 SIMT GEMM (TF32 is off
// by default), about 50 TFLOP/s on an H100/H200; TF32 tensor cores are several times faster.
//
// Block tile 128 x 128, 4 warps (2 x 2) of 64 x 64, K in steps of 32 through a 3-stage cp.async
// pipeline (96 KB of shared memory, two blocks per SM). Shared tiles are 128 rows x 32 floats
// with no padding: the 16-byte chunk c of row r sits at chunk c ^ ((r & 3) << 1), which makes
// both the cp.async stores and the fragment loads conflict-free. Fragments are read as float2:
// within each k-step of 8 the thread's two k values are physical columns 2t and 2t+1 instead of
// the PTX layout's t and t+4. That is a fixed permutation of k applied to A and B alike, so the
// dot products are unchanged. Tiles are visited in groups of 8 tile rows (blocks running together
// share W's column tiles in L2). M and N tails are zero-filled on load; the epilogues mask them.
// K % 4 != 0 or misaligned operands use synchronous guarded loads into the same shared layout
// (VEC = false); K == 0 leaves the accumulators at zero.
#pragma once
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define TG_BM 128
#define TG_BN 128
#define TG_BK 32
#define TG_STAGES 3
#define TG_THREADS 128
#define TG_GROUP_M 8
#define TG_TILE_FLOATS (TG_BM * TG_BK) // one operand's tile in a stage (TG_BN == TG_BM)
#define TG_STAGE_FLOATS (2 * TG_TILE_FLOATS)
#define TG_SMEM_BYTES (TG_STAGES * TG_STAGE_FLOATS * 4)

// Float offset of element (r, k) of a 128 x 32 shared tile.
__device__ __forceinline__ int tg_swz(int r, int k)
{
    return r * TG_BK + ((((k >> 2) ^ ((r & 3) << 1))) << 2) + (k & 3);
}

__device__ __forceinline__ uint32_t to_tf32(float f)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

__device__ __forceinline__ void cp_async16(void *smem_dst, const void *gsrc, int src_bytes)
{
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gsrc),
                 "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma_tf32(float *c, const uint32_t *a, const uint32_t *b)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// This block's output tile, in grouped order (TG_GROUP_M tile rows sweep the tile columns).
__device__ __forceinline__ void tg_tile_coords(int M, int N, int &row0, int &col0)
{
    const int tiles_m = (M + TG_BM - 1) / TG_BM, tiles_n = (N + TG_BN - 1) / TG_BN;
    const int pid = blockIdx.x;
    const int per_group = TG_GROUP_M * tiles_n;
    const int first_m = (pid / per_group) * TG_GROUP_M;
    const int gsize = min(tiles_m - first_m, TG_GROUP_M);
    row0 = (first_m + (pid % per_group) % gsize) * TG_BM;
    col0 = ((pid % per_group) / gsize) * TG_BN;
}

// Rows [row0, row0 + 128) x columns [k0, k0 + 32) of a row-major [rows, K] matrix into a shared
// tile; out-of-range elements become 0. VEC: K % 4 == 0 and g 16-byte aligned (cp.async).
template <bool VEC>
__device__ __forceinline__ void tg_load_tile(float *s, const float *__restrict__ g, int rows, int K,
                                             int row0, int k0)
{
#pragma unroll
    for (int i = 0; i < (TG_BM * TG_BK / 4) / TG_THREADS; ++i) {
        const int id = threadIdx.x + i * TG_THREADS;
        const int r = id >> 3, c = id & 7; // 8 chunks of 4 floats per row
        const int gr = row0 + r, gk = k0 + 4 * c;
        float *dst = s + r * TG_BK + ((c ^ ((r & 3) << 1)) << 2);
        if (VEC) {
            const bool ok = gr < rows && gk < K;
            cp_async16(dst, ok ? g + (long long)gr * K + gk : g, ok ? 16 : 0);
        } else {
            const float *src = g + (long long)gr * K + gk;
            const bool rok = gr < rows;
            float4 v;
            v.x = rok && gk < K ? src[0] : 0.f;
            v.y = rok && gk + 1 < K ? src[1] : 0.f;
            v.z = rok && gk + 2 < K ? src[2] : 0.f;
            v.w = rok && gk + 3 < K ? src[3] : 0.f;
            *reinterpret_cast<float4 *>(dst) = v;
        }
    }
}

// acc[mi][ni][e] = C at row row0 + wm*64 + mi*16 + g + (e >= 2 ? 8 : 0),
//                     col col0 + wn*64 + ni*8 + 2t + (e & 1),
// with warp = threadIdx.x / 32, wm = warp >> 1, wn = warp & 1, g = lane / 4, t = lane % 4.
// smem: TG_SMEM_BYTES, 16-byte aligned. On return all cp.async groups have landed and the block
// has synchronised, so the epilogue may reuse smem.
template <bool VEC>
__device__ __forceinline__ void
tg_mainloop(float (&acc)[4][8][4], float *smem, const float *__restrict__ X,
            const float *__restrict__ W, int M, int N, int K, int row0, int col0)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[mi][ni][e] = 0.f;
    const int KT = (K + TG_BK - 1) / TG_BK;

#pragma unroll
    for (int s = 0; s < TG_STAGES - 1; ++s) {
        if (s < KT) {
            float *st = smem + s * TG_STAGE_FLOATS;
            tg_load_tile<VEC>(st, X, M, K, row0, s * TG_BK);
            tg_load_tile<VEC>(st + TG_TILE_FLOATS, W, N, K, col0, s * TG_BK);
        }
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<TG_STAGES - 2>(); // this thread's copies of tile kt have landed ...
        __syncthreads();                // ... everyone's; and stage (kt - 1) % STAGES is free
        {
            const int nk = kt + TG_STAGES - 1;
            if (nk < KT) {
                float *st = smem + (nk % TG_STAGES) * TG_STAGE_FLOATS;
                tg_load_tile<VEC>(st, X, M, K, row0, nk * TG_BK);
                tg_load_tile<VEC>(st + TG_TILE_FLOATS, W, N, K, col0, nk * TG_BK);
            }
            cp_async_commit(); // possibly empty: keeps the group count in step
        }
        const float *As = smem + (kt % TG_STAGES) * TG_STAGE_FLOATS;
        const float *Bs = As + TG_TILE_FLOATS;
#pragma unroll
        for (int kk = 0; kk < TG_BK; kk += 8) {
            uint32_t a[4][4], b[8][2];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                const int r = wm * 64 + mi * 16 + g;
                const float2 lo = *reinterpret_cast<const float2 *>(As + tg_swz(r, kk + 2 * t));
                const float2 hi = *reinterpret_cast<const float2 *>(As + tg_swz(r + 8, kk + 2 * t));
                a[mi][0] = to_tf32(lo.x); // (row g,   logical k t)
                a[mi][1] = to_tf32(hi.x); // (row g+8, logical k t)
                a[mi][2] = to_tf32(lo.y); // (row g,   logical k t+4)
                a[mi][3] = to_tf32(hi.y); // (row g+8, logical k t+4)
            }
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
                const int n = wn * 64 + ni * 8 + g;
                const float2 v = *reinterpret_cast<const float2 *>(Bs + tg_swz(n, kk + 2 * t));
                b[ni][0] = to_tf32(v.x); // (logical k t,   col g)
                b[ni][1] = to_tf32(v.y); // (logical k t+4, col g)
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 8; ++ni)
                    mma_tf32(acc[mi][ni], a[mi], b[ni]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();
}

// Elementwise epilogue: out[row, col] = f(acc, colparam[col]) for the tile, masked to M x N;
// float2 stores when N is even and out 8-byte aligned.
template <class F>
__device__ __forceinline__ void tg_store(float *__restrict__ out, const float (&acc)[4][8][4],
                                         const float *__restrict__ colparam, int M, int N, int row0,
                                         int col0, F f)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, t = lane & 3;
    const bool pair_ok = (N % 2) == 0 && ((uintptr_t)out & 7) == 0;
#pragma unroll
    for (int ni = 0; ni < 8; ++ni) {
        const int col = col0 + wn * 64 + ni * 8 + 2 * t;
        const float p0 = col < N ? __ldg(colparam + col) : 0.f;
        const float p1 = col + 1 < N ? __ldg(colparam + col + 1) : 0.f;
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + wm * 64 + mi * 16 + g + 8 * h;
                if (row >= M)
                    continue;
                const float v0 = f(acc[mi][ni][2 * h], p0);
                const float v1 = f(acc[mi][ni][2 * h + 1], p1);
                float *o = out + (long long)row * N + col;
                if (pair_ok && col + 1 < N) {
                    *reinterpret_cast<float2 *>(o) = make_float2(v0, v1);
                } else {
                    if (col < N)
                        o[0] = v0;
                    if (col + 1 < N)
                        o[1] = v1;
                }
            }
        }
    }
}

// (max, sum of exp(v - max)) pairs; max == -inf means empty.
__device__ __forceinline__ float2 tg_lse_merge(float2 a, float2 b)
{
    const float m = fmaxf(a.x, b.x);
    if (m == -INFINITY)
        return make_float2(m, 0.f);
    const float sa = a.x == -INFINITY ? 0.f : a.y * __expf(a.x - m);
    const float sb = b.x == -INFINITY ? 0.f : b.y * __expf(b.x - m);
    return make_float2(m, sa + sb);
}

// Row-logsumexp epilogue: for each row of the tile, the (max, sum exp) pair of
// v = f(acc, colparam[col]) over the tile's columns < N goes to part[(col0 / TG_BN) * M + row].
// smem: at least 2 * TG_BM float2 (the main loop's buffer, free after tg_mainloop).
template <class F>
__device__ __forceinline__ void tg_row_lse(float2 *__restrict__ part, const float (&acc)[4][8][4],
                                           const float *__restrict__ colparam, int M, int N,
                                           int row0, int col0, float *smem, F f)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, t = lane & 3;
    float2 *red = reinterpret_cast<float2 *>(smem); // [2][TG_BM]: per column half
    float p[8][2];
    bool okc[8][2];
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int col = col0 + wn * 64 + ni * 8 + 2 * t + j;
            okc[ni][j] = col < N;
            p[ni][j] = okc[ni][j] ? __ldg(colparam + col) : 0.f;
        }
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float v[8][2];
            float m = -INFINITY;
#pragma unroll
            for (int ni = 0; ni < 8; ++ni)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    v[ni][j] = okc[ni][j] ? f(acc[mi][ni][2 * h + j], p[ni][j]) : -INFINITY;
                    m = fmaxf(m, v[ni][j]);
                }
            float s = 0.f;
            if (m != -INFINITY) {
#pragma unroll
                for (int ni = 0; ni < 8; ++ni)
#pragma unroll
                    for (int j = 0; j < 2; ++j)
                        s += okc[ni][j] ? __expf(v[ni][j] - m) : 0.f;
            }
            float2 a = make_float2(m, s);
#pragma unroll
            for (int o = 1; o <= 2; o <<= 1) { // the 4 lanes (t) sharing this row
                float2 b;
                b.x = __shfl_xor_sync(0xffffffffu, a.x, o);
                b.y = __shfl_xor_sync(0xffffffffu, a.y, o);
                a = tg_lse_merge(a, b);
            }
            if (t == 0)
                red[wn * TG_BM + wm * 64 + mi * 16 + g + 8 * h] = a;
        }
    }
    __syncthreads();
    for (int r = threadIdx.x; r < TG_BM; r += TG_THREADS) {
        const int row = row0 + r;
        if (row < M)
            part[(long long)(col0 / TG_BN) * M + row] = tg_lse_merge(red[r], red[TG_BM + r]);
    }
}
