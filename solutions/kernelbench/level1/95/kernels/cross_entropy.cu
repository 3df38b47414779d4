// cross_entropy.cu: F.cross_entropy(logits [N, C], targets [N] int64), reduction 'mean',
// ignore_index -100: mean over the rows whose target is not ignored of
// logsumexp(logits[i]) - logits[i, targets[i]].
//
// One block per row streams the row once (float4 loads when the rows are 16-byte aligned),
// each thread keeping an online (max, sum of exp(x - max)) pair, folded per float4 (one rescale
// per group of four); pairs merge across the warp by shuffles and across warps through shared
// memory. Thread 0 gathers the target's logit and writes the row's loss and whether it counts.
// A one-block kernel adds the losses in double in a fixed order and divides by the count.
// Eager PyTorch writes the whole log_softmax (512 MB) and reads it back in nll_loss; this reads
// the logits once and writes 256 KB.
// A target outside [0, C) (other than ignore_index) makes the loss NaN, where PyTorch would stop
// with a device-side assertion.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define CE_THREADS 256
#define CE_IGNORE_INDEX (-100)

struct LseAcc {
    float m, s; // running max and sum of exp(x - m); m == -inf means nothing finite yet
};

__device__ __forceinline__ void lse_add4(LseAcc &a, float4 v)
{
    const float mx = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
    if (mx > a.m) {
        a.s = a.m == -INFINITY ? 0.f : a.s * __expf(a.m - mx);
        a.m = mx;
    }
    if (a.m != -INFINITY)
        a.s += __expf(v.x - a.m) + __expf(v.y - a.m) + __expf(v.z - a.m) + __expf(v.w - a.m);
}

__device__ __forceinline__ void lse_add1(LseAcc &a, float v)
{
    if (v > a.m) {
        a.s = a.m == -INFINITY ? 0.f : a.s * __expf(a.m - v);
        a.m = v;
    }
    if (a.m != -INFINITY)
        a.s += __expf(v - a.m);
}

__device__ __forceinline__ LseAcc lse_merge(LseAcc a, LseAcc b)
{
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY)
        return {m, 0.f};
    const float sa = a.m == -INFINITY ? 0.f : a.s * __expf(a.m - m);
    const float sb = b.m == -INFINITY ? 0.f : b.s * __expf(b.m - m);
    return {m, sa + sb};
}

template <bool VEC>
__global__ void __launch_bounds__(CE_THREADS)
    ce_row_kernel(float *__restrict__ row_loss, float *__restrict__ row_valid,
                  const float *__restrict__ logits, const long long *__restrict__ targets, int C)
{
    __shared__ LseAcc red[32];
    const long long row = blockIdx.x;
    const float *xr = logits + row * C;
    LseAcc a{-INFINITY, 0.f};
    if (VEC) {
        const float4 *x4 = reinterpret_cast<const float4 *>(xr);
        const int c4 = C >> 2;
        for (int i0 = threadIdx.x; i0 < c4; i0 += 4 * CE_THREADS) {
            float4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = i0 + k * CE_THREADS;
                if (i < c4)
                    v[k] = __ldcs(x4 + i);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (i0 + k * CE_THREADS < c4)
                    lse_add4(a, v[k]);
        }
    } else {
        for (int i = threadIdx.x; i < C; i += CE_THREADS)
            lse_add1(a, xr[i]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        LseAcc b;
        b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
        b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
        a = lse_merge(a, b);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
        red[warp] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        LseAcc t = red[0];
        for (int w = 1; w < CE_THREADS / 32; ++w)
            t = lse_merge(t, red[w]);
        const long long tgt = targets[row];
        float loss = 0.f, valid = 0.f;
        if (tgt != CE_IGNORE_INDEX) {
            valid = 1.f;
            loss = (tgt >= 0 && tgt < C) ? (t.m + logf(t.s)) - xr[tgt] : NAN;
        }
        row_loss[row] = loss;
        row_valid[row] = valid;
    }
}

// out[0] = sum(row_loss) / sum(row_valid), in double, one block.
__global__ void __launch_bounds__(1024)
    ce_mean_kernel(float *__restrict__ out, const float *__restrict__ row_loss,
                   const float *__restrict__ row_valid, int rows)
{
    __shared__ double red_l[32], red_v[32];
    double l = 0.0, v = 0.0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        l += (double)row_loss[i];
        v += (double)row_valid[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, o);
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    if ((threadIdx.x & 31) == 0) {
        red_l[threadIdx.x >> 5] = l;
        red_v[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double tl = 0.0, tv = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
            tl += red_l[w];
            tv += red_v[w];
        }
        out[0] = (float)(tl / tv); // no counted row: 0 / 0 = NaN, as PyTorch gives
    }
}

// ---- host launcher ----
// scratch: 2 * rows floats. config: 0 default; 1 forces the scalar row kernel.
extern "C" cudaError_t cross_entropy_launcher(float *out, float *scratch, const float *logits,
                                              const long long *targets, int rows, int C, int config,
                                              cudaStream_t stream)
{
    if (rows <= 0 || C <= 0)
        return cudaErrorInvalidValue;
    float *row_loss = scratch, *row_valid = scratch + rows;
    const bool vec = config != 1 && C % 4 == 0 && ((uintptr_t)logits & 15) == 0;
    if (vec)
        ce_row_kernel<true>
            <<<rows, CE_THREADS, 0, stream>>>(row_loss, row_valid, logits, targets, C);
    else
        ce_row_kernel<false>
            <<<rows, CE_THREADS, 0, stream>>>(row_loss, row_valid, logits, targets, C);
    ce_mean_kernel<<<1, 1024, 0, stream>>>(out, row_loss, row_valid, rows);
    return cudaGetLastError();
}
