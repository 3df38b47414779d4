/* rmsnorm.cu: RMSNorm forward and backward (HF Qwen2/Llama), see kernels.h.
 *
 * Forward: one block per row. Pass 1 sums x^2 (fp32, block reduction), pass 2 writes
 * y = w * (x * rstd); the second read of the row hits L1/L2.
 *
 * Backward: a grid of about one wave of blocks, each walking rows blockIdx.x, +gridDim.x, ...
 * A thread always owns the same columns of every row it touches, so it can accumulate its share
 * of dw = sum_r dy * x * rstd in a private slot of shared memory (no atomics, no races); each
 * block adds its partial sums into dw with one atomicAdd per column at the end. When a row's
 * partials do not fit in shared memory (n beyond ~57000), the same kernel falls back to one
 * atomicAdd per element.
 *
 * Rows whose length is a multiple of 8 and whose pointers are 16-byte aligned are read and
 * written 8 bf16 (16 bytes) at a time; anything else takes the scalar path. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/bf16_pack.cuh"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/warp_sum.cuh"

typedef __nv_bfloat16 bf16;

/* widest access: 8 bf16 = 16 bytes */
#define RMS_VEC 8
/* at most this many threads per block; rows longer than that loop */
#define RMS_MAX_THREADS 512

/* ---- bf16 vectors held as floats ---- */

/* V consecutive elements at p (16-byte aligned when V == 8) */
template <int V> static __device__ __forceinline__ void load_bf(float *f, const bf16 *p)
{
    if constexpr (V == 8) {
        uint4 u = *reinterpret_cast<const uint4 *>(p);
        f[0] = bf_lo(u.x), f[1] = bf_hi(u.x), f[2] = bf_lo(u.y), f[3] = bf_hi(u.y);
        f[4] = bf_lo(u.z), f[5] = bf_hi(u.z), f[6] = bf_lo(u.w), f[7] = bf_hi(u.w);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            f[k] = __bfloat162float(p[k]);
    }
}

template <int V> static __device__ __forceinline__ void store_bf(bf16 *p, const float *f)
{
    if constexpr (V == 8) {
        uint4 u;
        u.x = bf_pack(f[0], f[1]), u.y = bf_pack(f[2], f[3]);
        u.z = bf_pack(f[4], f[5]), u.w = bf_pack(f[6], f[7]);
        *reinterpret_cast<uint4 *>(p) = u;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            p[k] = __float2bfloat16_rn(f[k]);
    }
}

/* ---- reductions ---- */

/* The sum of v over the block, returned to every thread. blockDim.x is a multiple of 32 (at most
 * 1024) and every thread of the block must call it. red[32] is scratch; the leading barrier lets
 * a loop call this again while slow warps still read the previous result. */
static __device__ float block_sum(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < nwarps ? red[lane] : 0.0f;
    return warp_sum(v);
}

/* ---- kernels ---- */

/* one block per row; V elements per access, n a multiple of V */
template <int V>
static __global__ void rmsnorm_forward_kernel(bf16 *y, float *rstd, const bf16 *x, const bf16 *w,
                                              int n, float eps)
{
    __shared__ float red[32];
    pdl_launch_dependents();
    pdl_wait(); /* x comes from the kernel before */
    size_t off = (size_t)blockIdx.x * (size_t)n;
    int nv = n / V;

    float ss = 0.0f;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float xv[V];
        load_bf<V>(xv, x + off + (size_t)i * V);
#pragma unroll
        for (int k = 0; k < V; k++)
            ss += xv[k] * xv[k];
    }
    ss = block_sum(ss, red);
    float s = 1.0f / sqrtf(ss / (float)n + eps);
    if (rstd && threadIdx.x == 0)
        rstd[blockIdx.x] = s;

    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float xv[V], wv[V], yv[V];
        load_bf<V>(xv, x + off + (size_t)i * V);
        load_bf<V>(wv, w + (size_t)i * V);
#pragma unroll
        for (int k = 0; k < V; k++)
            yv[k] = wv[k] * (xv[k] * s);
        store_bf<V>(y + off + (size_t)i * V, yv);
    }
}

/* Rows blockIdx.x, blockIdx.x + gridDim.x, ... With SMEM, dynamic shared memory holds n floats:
 * part[k * nv + i] is column i * V + k, touched only by the thread that owns vector i (laid out
 * so that neighbouring threads hit neighbouring banks). */
template <int V, bool SMEM>
static __global__ void rmsnorm_backward_kernel(bf16 *dx, float *dw, const bf16 *dy, const bf16 *x,
                                               const float *rstd, const bf16 *w, int T, int n)
{
    extern __shared__ float part[];
    __shared__ float red[32];
    int nv = n / V;

    if constexpr (SMEM) {
        for (int i = threadIdx.x; i < nv; i += blockDim.x)
#pragma unroll
            for (int k = 0; k < V; k++)
                part[k * nv + i] = 0.0f;
    }

    for (long long row = blockIdx.x; row < T; row += gridDim.x) {
        size_t off = (size_t)row * (size_t)n;
        float s = rstd[row];

        /* pass 1: g = sum(w dy x) for dx, and this row's dy x s into the dw partials */
        float g = 0.0f;
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            float dyv[V], xv[V], wv[V];
            load_bf<V>(dyv, dy + off + (size_t)i * V);
            load_bf<V>(xv, x + off + (size_t)i * V);
            load_bf<V>(wv, w + (size_t)i * V);
#pragma unroll
            for (int k = 0; k < V; k++) {
                g += wv[k] * dyv[k] * xv[k];
                float d = dyv[k] * xv[k] * s;
                if constexpr (SMEM)
                    part[k * nv + i] += d;
                else
                    atomicAdd(&dw[i * V + k], d);
            }
        }
        g = block_sum(g, red);
        float c = s * s * s * g / (float)n;

        /* pass 2: dx = s w dy - c x (each thread rereads only the elements it read in pass 1,
         * so dx may alias dy) */
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            float dyv[V], xv[V], wv[V], dxv[V];
            load_bf<V>(dyv, dy + off + (size_t)i * V);
            load_bf<V>(xv, x + off + (size_t)i * V);
            load_bf<V>(wv, w + (size_t)i * V);
#pragma unroll
            for (int k = 0; k < V; k++)
                dxv[k] = s * wv[k] * dyv[k] - c * xv[k];
            store_bf<V>(dx + off + (size_t)i * V, dxv);
        }
    }

    if constexpr (SMEM) {
        for (int i = threadIdx.x; i < nv; i += blockDim.x)
#pragma unroll
            for (int k = 0; k < V; k++)
                atomicAdd(&dw[i * V + k], part[k * nv + i]);
    }
}

/* ---- launchers ---- */

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* threads for a row of nv vectors: as few loop trips as RMS_MAX_THREADS allows, spread evenly
 * (608 vectors get 2 x 320, not 512 + 96), rounded up to whole warps */
static int row_threads(int nv)
{
    int trips = (nv + RMS_MAX_THREADS - 1) / RMS_MAX_THREADS;
    int t = (nv + trips - 1) / trips;
    return (t + 31) / 32 * 32;
}

extern "C" {

cudaError_t kg_rmsnorm_forward(kg_bf16 *y, float *rstd, const kg_bf16 *x, const kg_bf16 *w, int T,
                               int n, float eps, cudaStream_t s)
{
    if (T < 0 || n <= 0 || !(eps >= 0.0f))
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!y || !x || !w) /* rstd may be NULL: inference needs no backward */
        return cudaErrorInvalidValue;
    bf16 *yb = (bf16 *)y;
    const bf16 *xb = (const bf16 *)x, *wb = (const bf16 *)w;
    if (n % RMS_VEC == 0 && aligned16(y) && aligned16(x) && aligned16(w)) {
        int threads = row_threads(n / RMS_VEC);
        return kg_launch(rmsnorm_forward_kernel<RMS_VEC>, T, threads, 0, s, yb, rstd, xb, wb, n,
                         eps);
    }
    return kg_launch(rmsnorm_forward_kernel<1>, T, row_threads(n), 0, s, yb, rstd, xb, wb, n, eps);
}

cudaError_t kg_rmsnorm_backward(kg_bf16 *dx, float *dw, const kg_bf16 *dy, const kg_bf16 *x,
                                const float *rstd, const kg_bf16 *w, int T, int n, cudaStream_t s)
{
    if (T < 0 || n <= 0)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!dx || !dw || !dy || !x || !rstd || !w)
        return cudaErrorInvalidValue;

    bool vec = n % RMS_VEC == 0 && aligned16(dx) && aligned16(dy) && aligned16(x) && aligned16(w);
    int threads = row_threads(vec ? n / RMS_VEC : n);

    int dev, sms, smem_optin;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess)
        return e;

    /* the partials of dw in shared memory when they fit (beside red[32]) */
    size_t smem = (size_t)n * sizeof(float);
    bool use_smem = smem + 32 * sizeof(float) <= (size_t)smem_optin;
    void (*kern)(bf16 *, float *, const bf16 *, const bf16 *, const float *, const bf16 *, int,
                 int);
    if (vec)
        kern = use_smem ? rmsnorm_backward_kernel<RMS_VEC, true>
                        : rmsnorm_backward_kernel<RMS_VEC, false>;
    else
        kern = use_smem ? rmsnorm_backward_kernel<1, true> : rmsnorm_backward_kernel<1, false>;
    if (!use_smem)
        smem = 0;
    /* past the default 48 KiB per block (red[32] counts too): opt in, per kernel, idempotent */
    if (smem + 32 * sizeof(float) > 48 * 1024) {
        e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
        if (e != cudaSuccess)
            return e;
    }

    /* About 1024 threads' worth of blocks per SM: enough loads in flight for a memory-bound
     * kernel, while the partial-sum atomics (n per block) stay a small fraction of the work. */
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, smem);
    if (e != cudaSuccess)
        return e;
    int cap = 1024 / threads;
    if (per_sm > cap)
        per_sm = cap;
    if (per_sm < 1)
        per_sm = 1;
    long long grid = (long long)sms * per_sm;
    if (grid > T)
        grid = T;

    kern<<<(unsigned)grid, threads, smem, s>>>((bf16 *)dx, dw, (const bf16 *)dy, (const bf16 *)x,
                                               rstd, (const bf16 *)w, T, n);
    return cudaGetLastError();
}

} /* extern "C" */
