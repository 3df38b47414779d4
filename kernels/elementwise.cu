/* elementwise.cu: the small kernels the GPU model's host code needs beside the big ones (see
 * kernels.h): the residual-gradient add of the backward, the column sums over tokens that give
 * bias and value-head gradients, the value head's forward, and fp32 -> bf16 conversion.
 *
 * Memory-bound one-pass kernels. kg_add and kg_f32_to_bf16 are grid-stride loops (16-byte
 * accesses when every pointer allows them, else one element at a time). The column sums give
 * each thread one column of a band of CS_ROWS rows: neighbouring threads read neighbouring
 * columns of the same row (coalesced), each thread adds its band in fp32 in a register and then
 * adds that partial sum into the output with one atomicAdd, like rmsnorm's dw (not bitwise
 * deterministic from run to run). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/bf16_pack.cuh"
#include "kernels/kernels.h"

typedef __nv_bfloat16 bf16;

#define EW_THREADS 256
#define EW_MAX_BLOCKS 65535 /* enough to fill the GPU many times; larger counts loop */
#define EW_VEC 8            /* bf16 per 16-byte access */
#define CS_ROWS 64          /* rows per band of the column sums: partials per atomic */

/* ---- bf16 <-> float ---- */

static __device__ __forceinline__ void unpack8(float *f, uint4 u)
{
    f[0] = bf_lo(u.x), f[1] = bf_hi(u.x), f[2] = bf_lo(u.y), f[3] = bf_hi(u.y);
    f[4] = bf_lo(u.z), f[5] = bf_hi(u.z), f[6] = bf_lo(u.w), f[7] = bf_hi(u.w);
}

static __device__ __forceinline__ uint4 pack8(const float *f)
{
    uint4 u;
    u.x = bf_pack(f[0], f[1]), u.y = bf_pack(f[2], f[3]);
    u.z = bf_pack(f[4], f[5]), u.w = bf_pack(f[6], f[7]);
    return u;
}

/* ---- kernels ---- */

/* y += x: nvec groups of 8 (16-byte accesses), then elements nvec * 8 .. n - 1 one by one */
static __global__ void ew_add_kernel(bf16 *y, const bf16 *x, size_t nvec, size_t n)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = tid; i < nvec; i += stride) {
        float a[EW_VEC], b[EW_VEC];
        unpack8(a, reinterpret_cast<const uint4 *>(y)[i]);
        unpack8(b, reinterpret_cast<const uint4 *>(x)[i]);
#pragma unroll
        for (int k = 0; k < EW_VEC; k++)
            a[k] += b[k];
        reinterpret_cast<uint4 *>(y)[i] = pack8(a);
    }
    for (size_t i = nvec * EW_VEC + tid; i < n; i += stride)
        y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) + __bfloat162float(x[i]));
}

/* out[j] += sum over the band's rows r of scale[r] * x[r, j] (scale NULL: 1); with sum_scale,
 * one thread per band also adds sum_r scale[r] into *sum_scale (the value head's bias). */
static __global__ void ew_colsum_kernel(float *out, float *sum_scale, const bf16 *x,
                                        const float *scale, int T, int n, int rows_per)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int r0 = blockIdx.y * rows_per;
    int r1 = min(T, r0 + rows_per);
    if (j < n) {
        float acc = 0.0f;
        for (int r = r0; r < r1; r++) {
            float v = __bfloat162float(x[(size_t)r * (size_t)n + j]);
            acc += scale ? scale[r] * v : v;
        }
        atomicAdd(&out[j], acc);
    }
    if (sum_scale && blockIdx.x == 0 && threadIdx.x == 0) {
        float s = 0.0f;
        for (int r = r0; r < r1; r++)
            s += scale[r];
        atomicAdd(sum_scale, s);
    }
}

/* one warp per token: values[t] = h[t] . w (+ b[0]), fp32 sums of bf16 products */
static __global__ void vh_forward_kernel(float *values, const bf16 *h, const bf16 *w, const bf16 *b,
                                         int T, int n)
{
    long long t = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (t >= T) /* the whole warp leaves together */
        return;
    const bf16 *row = h + (size_t)t * (size_t)n;
    float acc = 0.0f;
    for (int i = lane; i < n; i += 32)
        acc += __bfloat162float(row[i]) * __bfloat162float(w[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0)
        values[t] = acc + (b ? __bfloat162float(b[0]) : 0.0f);
}

/* dh[t, i] = dvalues[t] * w[i] over the T * n elements */
static __global__ void vh_dh_kernel(bf16 *dh, const float *dvalues, const bf16 *w, int T, int n)
{
    size_t total = (size_t)T * (size_t)n;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t t = e / (size_t)n, i = e % (size_t)n;
        dh[e] = __float2bfloat16_rn(dvalues[t] * __bfloat162float(w[i]));
    }
}

/* dst = bf16(src): nvec groups of 8 (two 16-byte loads, one 16-byte store), then the rest */
static __global__ void ew_f32_to_bf16_kernel(bf16 *dst, const float *src, size_t nvec, size_t n)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = tid; i < nvec; i += stride) {
        float4 a = reinterpret_cast<const float4 *>(src)[2 * i];
        float4 b = reinterpret_cast<const float4 *>(src)[2 * i + 1];
        float f[EW_VEC] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        reinterpret_cast<uint4 *>(dst)[i] = pack8(f);
    }
    for (size_t i = nvec * EW_VEC + tid; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* ---- launchers ---- */

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* blocks of EW_THREADS for `items` threads' worth of work (at least one) */
static unsigned blocks_for(size_t items)
{
    size_t b = (items + EW_THREADS - 1) / EW_THREADS;
    if (b < 1)
        b = 1;
    return b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : (unsigned)b;
}

/* The column-sum grid: blocks of EW_THREADS columns by bands of rows; bands grow past CS_ROWS
 * only when T would need more than gridDim.y's 65535 of them. */
static cudaError_t colsum_launch(float *out, float *sum_scale, const kg_bf16 *x, const float *scale,
                                 int T, int n, cudaStream_t s)
{
    int rows_per = CS_ROWS;
    if ((T + rows_per - 1) / rows_per > 65535)
        rows_per = (T + 65534) / 65535;
    dim3 grid((unsigned)((n + EW_THREADS - 1) / EW_THREADS),
              (unsigned)((T + rows_per - 1) / rows_per));
    ew_colsum_kernel<<<grid, EW_THREADS, 0, s>>>(out, sum_scale, (const bf16 *)x, scale, T, n,
                                                 rows_per);
    return cudaGetLastError();
}

extern "C" {

cudaError_t kg_add(kg_bf16 *y, const kg_bf16 *x, size_t n, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    if (!y || !x)
        return cudaErrorInvalidValue;
    size_t nvec = aligned16(y) && aligned16(x) ? n / EW_VEC : 0;
    size_t items = nvec > 0 ? nvec : n;
    ew_add_kernel<<<blocks_for(items), EW_THREADS, 0, s>>>((bf16 *)y, (const bf16 *)x, nvec, n);
    return cudaGetLastError();
}

cudaError_t kg_bias_grad(float *db, const kg_bf16 *dy, int T, int n, cudaStream_t s)
{
    if (T < 0 || n <= 0)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!db || !dy)
        return cudaErrorInvalidValue;
    return colsum_launch(db, NULL, dy, NULL, T, n, s);
}

cudaError_t kg_value_head_forward(float *values, const kg_bf16 *h, const kg_bf16 *w,
                                  const kg_bf16 *b, int T, int n, cudaStream_t s)
{
    if (T < 0 || n <= 0)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!values || !h || !w)
        return cudaErrorInvalidValue;
    const int warps = EW_THREADS / 32;
    unsigned blocks = (unsigned)(((long long)T + warps - 1) / warps);
    vh_forward_kernel<<<blocks, EW_THREADS, 0, s>>>(values, (const bf16 *)h, (const bf16 *)w,
                                                    (const bf16 *)b, T, n);
    return cudaGetLastError();
}

cudaError_t kg_value_head_backward(kg_bf16 *dh, float *dw, float *db, const float *dvalues,
                                   const kg_bf16 *h, const kg_bf16 *w, int T, int n, cudaStream_t s)
{
    if (T < 0 || n <= 0)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!dh || !dw || !dvalues || !h || !w)
        return cudaErrorInvalidValue;
    vh_dh_kernel<<<blocks_for((size_t)T * (size_t)n), EW_THREADS, 0, s>>>((bf16 *)dh, dvalues,
                                                                          (const bf16 *)w, T, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    return colsum_launch(dw, db, h, dvalues, T, n, s);
}

cudaError_t kg_f32_to_bf16(kg_bf16 *dst, const float *src, size_t n, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return cudaErrorInvalidValue;
    size_t nvec = aligned16(dst) && aligned16(src) ? n / EW_VEC : 0;
    size_t items = nvec > 0 ? nvec : n;
    ew_f32_to_bf16_kernel<<<blocks_for(items), EW_THREADS, 0, s>>>((bf16 *)dst, src, nvec, n);
    return cudaGetLastError();
}

} /* extern "C" */
