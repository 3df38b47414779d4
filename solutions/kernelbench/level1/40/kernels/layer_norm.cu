// layer_norm.cu: y = (x - mean) / sqrt(var + eps) * weight + bias over the last D elements of
// each row (nn.LayerNorm; the task normalises 16 rows of D = 64 * 256 * 256 = 4.2M floats).
//
// With 16 rows, a block per row (eager PyTorch's moments kernel) leaves 116 of 132 SMs idle, so
// the statistics are split:
//   1. ln_partial_kernel, grid (D / 8192 chunks, rows): each block holds an 8192-element chunk
//      in registers (8 float4 per thread) and writes the chunk's mean and its sum of squared
//      deviations from that mean (two passes over registers: no cancellation);
//   2. ln_stats_kernel, a block per row: combines the chunks in double (mean = weighted mean
//      of the chunk means; M2 = sum of chunk M2 + n_c (mean_c - mean)^2) into mean and rstd;
//   3. ln_apply_kernel: a thread owns 2 float4 columns, loads their weight and bias once and
//      walks down all rows, so weight and bias (32 MB) are read once instead of once per row.
// Traffic: x twice, weight and bias once, y once (about 0.8 GB), against eager's slow moments
// pass plus an apply that re-reads weight and bias for every row.
// Misaligned pointers or D % 4 != 0 take scalar variants of kernels 1 and 3.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define LN_THREADS 256
#define LN_VPT 8                           // float4 per thread in the partial kernel
#define LN_CHUNK (LN_THREADS * LN_VPT * 4) // elements per partial block
#define LN_APPLY_V 2                       // float4 columns per thread in the apply kernel

// Sum over the block, valid in every thread. red: 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float *red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads(); // red may still be read by the previous call
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float t = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

// partial[(row * chunks + c) * 2 + {0, 1}] = chunk mean, chunk M2.
template <bool VEC>
__global__ void __launch_bounds__(LN_THREADS)
    ln_partial_kernel(float *__restrict__ partial, const float *__restrict__ x, long long D)
{
    __shared__ float red[32];
    const int c = blockIdx.x, chunks = gridDim.x;
    const long long row = blockIdx.y;
    const long long c0 = (long long)c * LN_CHUNK;
    const long long n = D - c0 < LN_CHUNK ? D - c0 : LN_CHUNK;
    const float *xs = x + row * D + c0;
    float v[LN_VPT * 4];
    float s = 0.f;
    if (VEC) {
        const float4 *x4 = reinterpret_cast<const float4 *>(xs);
#pragma unroll
        for (int k = 0; k < LN_VPT; ++k) {
            const int i = threadIdx.x + k * LN_THREADS;
            float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
            if (4LL * i < n)
                q = x4[i];
            v[4 * k] = q.x;
            v[4 * k + 1] = q.y;
            v[4 * k + 2] = q.z;
            v[4 * k + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < LN_VPT * 4; ++k) {
            const int i = threadIdx.x + k * LN_THREADS;
            v[k] = i < n ? xs[i] : 0.f;
        }
    }
#pragma unroll
    for (int k = 0; k < LN_VPT * 4; ++k)
        s += v[k];
    const float mean = block_sum(s, red) / (float)n;
    float m2 = 0.f;
#pragma unroll
    for (int k = 0; k < LN_VPT * 4; ++k) {
        // element index of v[k]: VEC: 4 * (tid + (k / 4) * T) + k % 4; scalar: tid + k * T
        const long long e = VEC ? 4LL * (threadIdx.x + (k >> 2) * LN_THREADS) + (k & 3)
                                : (long long)threadIdx.x + (long long)k * LN_THREADS;
        const float d = e < n ? v[k] - mean : 0.f;
        m2 += d * d;
    }
    m2 = block_sum(m2, red);
    if (threadIdx.x == 0) {
        partial[(row * chunks + c) * 2] = mean;
        partial[(row * chunks + c) * 2 + 1] = m2;
    }
}

// stats[row * 2 + {0, 1}] = mean, rstd. One block per row, double precision.
__global__ void __launch_bounds__(LN_THREADS)
    ln_stats_kernel(float *__restrict__ stats, const float *__restrict__ partial, int chunks,
                    long long D, float eps)
{
    __shared__ double red[32];
    __shared__ double s_mean;
    const long long row = blockIdx.x;
    const float *p = partial + row * chunks * 2;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    // pass 1: sum of n_c * mean_c
    double a = 0.0;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        const long long nc =
            D - (long long)c * LN_CHUNK < LN_CHUNK ? D - (long long)c * LN_CHUNK : LN_CHUNK;
        a += (double)nc * (double)p[2 * c];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        a += __shfl_xor_sync(0xffffffffu, a, o);
    if (lane == 0)
        red[warp] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < nw; ++w)
            t += red[w];
        s_mean = t / (double)D;
    }
    __syncthreads();
    const double mean = s_mean;
    // pass 2: M2 = sum of M2_c + n_c (mean_c - mean)^2
    double m2 = 0.0;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        const long long nc =
            D - (long long)c * LN_CHUNK < LN_CHUNK ? D - (long long)c * LN_CHUNK : LN_CHUNK;
        const double d = (double)p[2 * c] - mean;
        m2 += (double)p[2 * c + 1] + (double)nc * d * d;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        m2 += __shfl_xor_sync(0xffffffffu, m2, o);
    __syncthreads(); // everyone has read red (pass 1) before it is reused
    if (lane == 0)
        red[warp] = m2;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < nw; ++w)
            t += red[w];
        stats[row * 2] = (float)mean;
        stats[row * 2 + 1] = (float)(1.0 / sqrt(t / (double)D + (double)eps));
    }
}

// y = (x - mean_r) * rstd_r * w + b. VEC: each thread owns LN_APPLY_V float4 columns and walks
// down the rows; scalar: each thread owns LN_APPLY_V * 4 scalar columns.
template <bool VEC>
__global__ void __launch_bounds__(LN_THREADS)
    ln_apply_kernel(float *__restrict__ out, const float *__restrict__ x,
                    const float *__restrict__ w, const float *__restrict__ b,
                    const float *__restrict__ stats, int rows, long long D)
{
    if (VEC) {
        const long long D4 = D >> 2;
        const long long j0 = (long long)blockIdx.x * (LN_THREADS * LN_APPLY_V) + threadIdx.x;
        float4 wv[LN_APPLY_V], bv[LN_APPLY_V];
#pragma unroll
        for (int k = 0; k < LN_APPLY_V; ++k) {
            const long long j = j0 + k * LN_THREADS;
            if (j < D4) {
                wv[k] = __ldcs(reinterpret_cast<const float4 *>(w) + j);
                bv[k] = __ldcs(reinterpret_cast<const float4 *>(b) + j);
            }
        }
#pragma unroll 2
        for (int r = 0; r < rows; ++r) {
            const float mean = __ldg(stats + 2 * r), rstd = __ldg(stats + 2 * r + 1);
            const float4 *xr = reinterpret_cast<const float4 *>(x + (long long)r * D);
            float4 *yr = reinterpret_cast<float4 *>(out + (long long)r * D);
            float4 xv[LN_APPLY_V];
#pragma unroll
            for (int k = 0; k < LN_APPLY_V; ++k) {
                const long long j = j0 + k * LN_THREADS;
                if (j < D4)
                    xv[k] = __ldcs(xr + j);
            }
#pragma unroll
            for (int k = 0; k < LN_APPLY_V; ++k) {
                const long long j = j0 + k * LN_THREADS;
                if (j < D4) {
                    float4 o;
                    o.x = (xv[k].x - mean) * rstd * wv[k].x + bv[k].x;
                    o.y = (xv[k].y - mean) * rstd * wv[k].y + bv[k].y;
                    o.z = (xv[k].z - mean) * rstd * wv[k].z + bv[k].z;
                    o.w = (xv[k].w - mean) * rstd * wv[k].w + bv[k].w;
                    __stcs(yr + j, o);
                }
            }
        }
    } else {
        const long long j0 = (long long)blockIdx.x * (LN_THREADS * LN_APPLY_V * 4) + threadIdx.x;
        float wv[LN_APPLY_V * 4], bv[LN_APPLY_V * 4];
#pragma unroll
        for (int k = 0; k < LN_APPLY_V * 4; ++k) {
            const long long j = j0 + k * LN_THREADS;
            wv[k] = j < D ? w[j] : 0.f;
            bv[k] = j < D ? b[j] : 0.f;
        }
        for (int r = 0; r < rows; ++r) {
            const float mean = stats[2 * r], rstd = stats[2 * r + 1];
            const float *xr = x + (long long)r * D;
            float *yr = out + (long long)r * D;
#pragma unroll
            for (int k = 0; k < LN_APPLY_V * 4; ++k) {
                const long long j = j0 + k * LN_THREADS;
                if (j < D)
                    yr[j] = (xr[j] - mean) * rstd * wv[k] + bv[k];
            }
        }
    }
}

// ---- host launcher ----
extern "C" long long layer_norm_scratch_floats(long long rows, long long D)
{
    const long long chunks = (D + LN_CHUNK - 1) / LN_CHUNK;
    return rows * chunks * 2 + rows * 2;
}

// config: 0 default; 1 forces the scalar variants.
extern "C" cudaError_t layer_norm_launcher(float *out, float *scratch, const float *x,
                                           const float *w, const float *b, long long rows,
                                           long long D, float eps, int config, cudaStream_t stream)
{
    if (rows <= 0 || D <= 0)
        return cudaSuccess;
    const long long chunks = (D + LN_CHUNK - 1) / LN_CHUNK;
    if (rows > 65535 || chunks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    float *partial = scratch, *stats = scratch + rows * chunks * 2;
    const bool vec = config != 1 && D % 4 == 0 &&
                     (((uintptr_t)out | (uintptr_t)x | (uintptr_t)w | (uintptr_t)b) & 15) == 0;
    const dim3 pgrid((unsigned)chunks, (unsigned)rows);
    if (vec)
        ln_partial_kernel<true><<<pgrid, LN_THREADS, 0, stream>>>(partial, x, D);
    else
        ln_partial_kernel<false><<<pgrid, LN_THREADS, 0, stream>>>(partial, x, D);
    ln_stats_kernel<<<(unsigned)rows, LN_THREADS, 0, stream>>>(stats, partial, (int)chunks, D, eps);
    const long long per_block = (long long)LN_THREADS * LN_APPLY_V * 4;
    const long long ablocks = (D + per_block - 1) / per_block;
    if (vec)
        ln_apply_kernel<true>
            <<<(unsigned)ablocks, LN_THREADS, 0, stream>>>(out, x, w, b, stats, (int)rows, D);
    else
        ln_apply_kernel<false>
            <<<(unsigned)ablocks, LN_THREADS, 0, stream>>>(out, x, w, b, stats, (int)rows, D);
    return cudaGetLastError();
}
