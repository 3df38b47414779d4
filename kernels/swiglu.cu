/* swiglu.cu: h = silu(gate) * up and its backward, elementwise; see kernels.h.
 *
 *   silu(g) = g * sigmoid(g)
 *   dgate   = dh * up * sigmoid(g) * (1 + g * (1 - sigmoid(g)))      (d silu / dg times up)
 *   dup     = dh * silu(g)
 *
 * When every pointer is 16-byte aligned a thread handles 8 elements (16-byte loads and stores)
 * and the count % 8 leftover elements go to the grid's first threads; otherwise one element per
 * thread. Grid-stride loops, so any count fits one launch. Each thread reads all of an element's
 * inputs before writing its outputs, so outputs may alias inputs (h == gate, dgate == gate,
 * dup == up, ...). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/bf16_pack.cuh"
#include "kernels/swiglu_math.cuh"
#include "kernels/kernels.h"

typedef __nv_bfloat16 bf16;

#define SWIGLU_VEC 8
#define SWIGLU_THREADS 256
/* enough blocks to fill an H200 many times over; larger counts loop */
#define SWIGLU_MAX_BLOCKS 65535

/* ---- bf16 vectors held as floats ---- */

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

/* ---- one group of V elements at index e ---- */

template <int V>
static __device__ __forceinline__ void swiglu_fwd_at(bf16 *h, const bf16 *gate, const bf16 *up,
                                                     size_t e)
{
    float g[V], u[V], out[V];
    load_bf<V>(g, gate + e);
    load_bf<V>(u, up + e);
#pragma unroll
    for (int k = 0; k < V; k++)
        out[k] = swiglu_value(g[k], u[k]);
    store_bf<V>(h + e, out);
}

template <int V>
static __device__ __forceinline__ void swiglu_bwd_at(bf16 *dgate, bf16 *dup, const bf16 *dh,
                                                     const bf16 *gate, const bf16 *up, size_t e)
{
    float d[V], g[V], u[V], dg[V], du[V];
    load_bf<V>(d, dh + e);
    load_bf<V>(g, gate + e);
    load_bf<V>(u, up + e);
#pragma unroll
    for (int k = 0; k < V; k++) {
        float sg = swiglu_sigmoid(g[k]);
        dg[k] = d[k] * u[k] * sg * (1.0f + g[k] * (1.0f - sg));
        du[k] = d[k] * (g[k] * sg);
    }
    store_bf<V>(dgate + e, dg);
    store_bf<V>(dup + e, du);
}

/* ---- kernels: nvec groups of V, then count - nvec * V single elements ---- */

template <int V>
static __global__ void swiglu_forward_kernel(bf16 *h, const bf16 *gate, const bf16 *up, size_t nvec,
                                             size_t count)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t v = tid; v < nvec; v += stride)
        swiglu_fwd_at<V>(h, gate, up, v * V);
    size_t e = nvec * V + tid; /* the tail is shorter than V <= the grid's threads */
    if (e < count)
        swiglu_fwd_at<1>(h, gate, up, e);
}

template <int V>
static __global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const bf16 *dh,
                                              const bf16 *gate, const bf16 *up, size_t nvec,
                                              size_t count)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t v = tid; v < nvec; v += stride)
        swiglu_bwd_at<V>(dgate, dup, dh, gate, up, v * V);
    size_t e = nvec * V + tid;
    if (e < count)
        swiglu_bwd_at<1>(dgate, dup, dh, gate, up, e);
}

/* ---- launchers ---- */

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* blocks for n threads' worth of work (n >= 1 guaranteed by the callers' tails) */
static unsigned blocks_for(size_t n)
{
    size_t b = (n + SWIGLU_THREADS - 1) / SWIGLU_THREADS;
    if (b < 1)
        b = 1;
    return b > SWIGLU_MAX_BLOCKS ? SWIGLU_MAX_BLOCKS : (unsigned)b;
}

extern "C" {

cudaError_t kg_swiglu_forward(kg_bf16 *h, const kg_bf16 *gate, const kg_bf16 *up, size_t count,
                              cudaStream_t s)
{
    if (count == 0)
        return cudaSuccess;
    if (!h || !gate || !up)
        return cudaErrorInvalidValue;
    bf16 *hb = (bf16 *)h;
    const bf16 *gb = (const bf16 *)gate, *ub = (const bf16 *)up;
    if (aligned16(h) && aligned16(gate) && aligned16(up)) {
        size_t nvec = count / SWIGLU_VEC;
        unsigned grid = blocks_for(nvec > 0 ? nvec : 1);
        swiglu_forward_kernel<SWIGLU_VEC><<<grid, SWIGLU_THREADS, 0, s>>>(hb, gb, ub, nvec, count);
    } else {
        swiglu_forward_kernel<1>
            <<<blocks_for(count), SWIGLU_THREADS, 0, s>>>(hb, gb, ub, count, count);
    }
    return cudaGetLastError();
}

cudaError_t kg_swiglu_backward(kg_bf16 *dgate, kg_bf16 *dup, const kg_bf16 *dh, const kg_bf16 *gate,
                               const kg_bf16 *up, size_t count, cudaStream_t s)
{
    if (count == 0)
        return cudaSuccess;
    if (!dgate || !dup || !dh || !gate || !up)
        return cudaErrorInvalidValue;
    bf16 *dgb = (bf16 *)dgate, *dub = (bf16 *)dup;
    const bf16 *dhb = (const bf16 *)dh, *gb = (const bf16 *)gate, *ub = (const bf16 *)up;
    if (aligned16(dgate) && aligned16(dup) && aligned16(dh) && aligned16(gate) && aligned16(up)) {
        size_t nvec = count / SWIGLU_VEC;
        unsigned grid = blocks_for(nvec > 0 ? nvec : 1);
        swiglu_backward_kernel<SWIGLU_VEC>
            <<<grid, SWIGLU_THREADS, 0, s>>>(dgb, dub, dhb, gb, ub, nvec, count);
    } else {
        swiglu_backward_kernel<1>
            <<<blocks_for(count), SWIGLU_THREADS, 0, s>>>(dgb, dub, dhb, gb, ub, count, count);
    }
    return cudaGetLastError();
}

} /* extern "C" */
