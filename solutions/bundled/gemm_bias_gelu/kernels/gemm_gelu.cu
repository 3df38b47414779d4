// gemm_gelu.cu: y = gelu(x @ W^T + b) with the exact (erf) GELU, x [M, K], W [N, K], b [N].
//
// A hand-written tensor-core GEMM (no cuBLAS): TF32 mma.sync.m16n8k8 with FP32 accumulation.
// PyTorch's eager fp32 Linear runs an FP32 SIMT GEMM (TF32 is off by default), so TF32 tensor
// cores are several times faster; inputs are rounded to TF32 with cvt.rna (round to nearest),
// which keeps the error of a K=4096 dot product around 5e-4 of the output's scale, well inside
// atol = rtol = 1e-2. Bias and GELU are applied to the accumulators in registers (fused
// epilogue), so the 134 MB output is written once and never re-read.
//
// Tiling: a 128 x 128 output tile per block of 4 warps (2 x 2), 64 x 64 per warp (4 x 8 mma
// tiles, 128 accumulators per thread); K advances 32 at a time through a 3-stage cp.async
// pipeline in shared memory (rows padded to 36 floats: conflict-free fragment loads).
// 110.6 KB of shared memory per block, two blocks per SM. Tiles are visited in groups of 8 block
// rows, so the blocks running at once share W's column tiles in L2.
// M and N tails are zero-filled on load and masked on store; K must be a multiple of 4 with
// 16-byte aligned rows for cp.async, otherwise a plain FP32 tiled kernel runs instead.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define BM 128
#define BN 128
#define BK 32
#define STAGES 3
#define LDS (BK + 4) // padded shared row, in floats
#define GEMM_THREADS 128
#define GROUP_M 8
#define STAGE_FLOATS ((BM + BN) * LDS)
#define GEMM_SMEM_BYTES (STAGES * STAGE_FLOATS * 4)

__device__ __forceinline__ float gelu_erf(float v)
{
    return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
}

__device__ __forceinline__ uint32_t to_tf32(float f)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

__device__ __forceinline__ void cp_async16(uint32_t smem_addr, const void *gptr, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gptr),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void mma_tf32(float *c, const uint32_t *a, const uint32_t *b)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Copies rows [row0, row0 + 128) x columns [k0, k0 + 32) of a row-major [rows, K] matrix into a
// padded shared tile; out-of-range 16-byte chunks are zero-filled (K % 4 == 0, so a chunk is
// either wholly inside or wholly outside).
__device__ __forceinline__ void load_tile(uint32_t smem_tile, const float *__restrict__ g,
                                          int rows, int K, int row0, int k0)
{
#pragma unroll
    for (int i = 0; i < (128 * BK / 4) / GEMM_THREADS; ++i) {
        const int id = threadIdx.x + i * GEMM_THREADS;
        const int r = id >> 3, c4 = (id & 7) * 4; // 8 chunks of 4 floats per tile row
        const int gr = row0 + r, gk = k0 + c4;
        const bool ok = gr < rows && gk < K;
        const float *src = ok ? g + (long long)gr * K + gk : g;
        cp_async16(smem_tile + (uint32_t)(r * LDS + c4) * 4u, src, ok ? 16 : 0);
    }
}

__global__ void __launch_bounds__(GEMM_THREADS, 2)
    gemm_bias_gelu_tf32_kernel(float *__restrict__ out, const float *__restrict__ X,
                               const float *__restrict__ W, const float *__restrict__ bias, int M,
                               int N, int K)
{
    extern __shared__ __align__(16) float smem[];

    // grouped tile order: GROUP_M tile rows sweep the tile columns together
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * tiles_n;
    const int group = pid / per_group;
    const int first_m = group * GROUP_M;
    const int gsize = min(tiles_m - first_m, GROUP_M);
    const int tm = first_m + (pid % per_group) % gsize;
    const int tn = (pid % per_group) / gsize;
    const int row0 = tm * BM, col0 = tn * BN;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp >> 1, wn = warp & 1; // 2 x 2 warps, 64 x 64 each
    const int g = lane >> 2, t = lane & 3;

    const uint32_t smem_base = (uint32_t)__cvta_generic_to_shared(smem);
    const int KT = (K + BK - 1) / BK;

    float acc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) {
            const uint32_t st = smem_base + (uint32_t)(s * STAGE_FLOATS) * 4u;
            load_tile(st, X, M, K, row0, s * BK);
            load_tile(st + (uint32_t)(BM * LDS) * 4u, W, N, K, col0, s * BK);
        }
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>(); // tile kt has landed (this thread's copies) ...
        __syncthreads();             // ... everyone's, and stage (kt-1) % STAGES is free again
        {
            const int nk = kt + STAGES - 1;
            if (nk < KT) {
                const uint32_t st = smem_base + (uint32_t)((nk % STAGES) * STAGE_FLOATS) * 4u;
                load_tile(st, X, M, K, row0, nk * BK);
                load_tile(st + (uint32_t)(BM * LDS) * 4u, W, N, K, col0, nk * BK);
            }
            cp_async_commit(); // possibly empty: keeps the group count in step
        }
        const float *As = smem + (kt % STAGES) * STAGE_FLOATS + (wm * 64) * LDS;
        const float *Bs = smem + (kt % STAGES) * STAGE_FLOATS + BM * LDS + (wn * 64) * LDS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            uint32_t a[4][4], b[8][2];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                const float *p = As + (mi * 16 + g) * LDS + kk + t;
                a[mi][0] = to_tf32(p[0]);
                a[mi][1] = to_tf32(p[8 * LDS]);
                a[mi][2] = to_tf32(p[4]);
                a[mi][3] = to_tf32(p[8 * LDS + 4]);
            }
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
                const float *p = Bs + (ni * 8 + g) * LDS + kk + t;
                b[ni][0] = to_tf32(p[0]);
                b[ni][1] = to_tf32(p[4]);
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 8; ++ni)
                    mma_tf32(acc[mi][ni], a[mi], b[ni]);
        }
    }
    cp_async_wait<0>();

    // epilogue: + bias, GELU, store (c0,c1: row g, cols 2t, 2t+1; c2,c3: row g+8)
    const bool pair_ok = (N % 2) == 0; // float2 stores stay 8-byte aligned
#pragma unroll
    for (int ni = 0; ni < 8; ++ni) {
        const int col = col0 + wn * 64 + ni * 8 + 2 * t;
        const float b0 = col < N ? __ldg(bias + col) : 0.f;
        const float b1 = col + 1 < N ? __ldg(bias + col + 1) : 0.f;
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + wm * 64 + mi * 16 + g + h * 8;
                if (row >= M)
                    continue;
                const float v0 = gelu_erf(acc[mi][ni][2 * h] + b0);
                const float v1 = gelu_erf(acc[mi][ni][2 * h + 1] + b1);
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

// Fallback for shapes or alignments cp.async cannot take: FP32 SIMT, 64 x 64 tiles, 4 x 4 per
// thread, any M, N, K.
#define FB_T 64
#define FB_K 16
__global__ void __launch_bounds__(256)
    gemm_bias_gelu_fallback_kernel(float *__restrict__ out, const float *__restrict__ X,
                                   const float *__restrict__ W, const float *__restrict__ bias,
                                   int M, int N, int K)
{
    __shared__ float As[FB_K][FB_T + 1], Bs[FB_K][FB_T + 1];
    const int row0 = blockIdx.y * FB_T, col0 = blockIdx.x * FB_T;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += FB_K) {
        for (int i = threadIdx.x; i < FB_T * FB_K; i += 256) {
            const int r = i / FB_K, k = i % FB_K;
            const int gk = k0 + k;
            As[k][r] = (row0 + r < M && gk < K) ? X[(long long)(row0 + r) * K + gk] : 0.f;
            Bs[k][r] = (col0 + r < N && gk < K) ? W[(long long)(col0 + r) * K + gk] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < FB_K; ++k)
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    acc[i][j] += As[k][ty + 16 * i] * Bs[k][tx + 16 * j];
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
            if (r < M && c < N)
                out[(long long)r * N + c] = gelu_erf(acc[i][j] + bias[c]);
        }
}

// config: 0 -> TF32 tensor-core kernel when the shape allows it; 1 -> always the FP32 fallback.
extern "C" cudaError_t gemm_bias_gelu_launcher(float *out, const float *x, const float *w,
                                               const float *bias, int M, int N, int K,
                                               int config, cudaStream_t stream)
{
    if (M <= 0 || N <= 0)
        return cudaSuccess;
    const bool aligned = (((uintptr_t)x | (uintptr_t)w) & 15) == 0 && ((uintptr_t)out & 7) == 0;
    const long long tiles = (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    if (config != 1 && K > 0 && K % 4 == 0 && aligned && tiles <= 0x7fffffffLL) {
        static bool attr_set[64];
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || dev < 0)
            dev = 0;
        if (dev >= 64 || !attr_set[dev]) {
            cudaError_t e = cudaFuncSetAttribute(gemm_bias_gelu_tf32_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 GEMM_SMEM_BYTES);
            if (e != cudaSuccess)
                return e;
            if (dev < 64)
                attr_set[dev] = true;
        }
        gemm_bias_gelu_tf32_kernel<<<(unsigned)tiles, GEMM_THREADS, GEMM_SMEM_BYTES, stream>>>(
            out, x, w, bias, M, N, K);
        return cudaGetLastError();
    }
    const long long gy = (M + FB_T - 1) / FB_T, gx = (N + FB_T - 1) / FB_T;
    if (gy > 65535 || gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)gx, (unsigned)gy);
    gemm_bias_gelu_fallback_kernel<<<grid, 256, 0, stream>>>(out, x, w, bias, M, N, K);
    return cudaGetLastError();
}
