// log_softmax.cu: y = x - logsumexp(x) along one dimension, in one read and one write of x.
//
// For the last dimension (the task: 4096 rows of 393216 floats, 1.5 MB each) a row is spread
// over a cluster of up to 16 blocks (cluster_rows.cuh): each block loads its chunk (96 KB for
// the task, two blocks per SM) into shared memory once, folding every value into an online
// (max, sum of exp(x - max)) pair; the pairs meet through distributed shared memory, and each
// block writes x - (max + log(sum)) from shared memory. Eager PyTorch reads such a row at least
// twice (its non-persistent softmax kernel: max / sum passes, then the write pass), and so does a
// plain block-per-row kernel; this is the one-read, one-write minimum (12.9 GB for the task).
// Rows too long for 16 blocks, or no cluster fitting, take a block-per-row two-pass kernel; a
// reduced dimension that is not the last takes a thread-per-column kernel.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cluster_rows.cuh"

// (x: running max, y: sum of exp(v - max)); x == -inf means nothing finite folded yet.
struct LogSoftmaxOp {
    __device__ __forceinline__ static float2 identity()
    {
        return make_float2(-INFINITY, 0.f);
    }
    __device__ __forceinline__ static void add(float2 &a, float v)
    {
        if (v > a.x) {
            a.y = a.x == -INFINITY ? 0.f : a.y * __expf(a.x - v);
            a.x = v;
        }
        if (a.x != -INFINITY)
            a.y += __expf(v - a.x);
    }
    __device__ __forceinline__ static void add4(float2 &a, float4 v)
    {
        const float mx = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
        if (mx > a.x) {
            a.y = a.x == -INFINITY ? 0.f : a.y * __expf(a.x - mx);
            a.x = mx;
        }
        if (a.x != -INFINITY)
            a.y += __expf(v.x - a.x) + __expf(v.y - a.x) + __expf(v.z - a.x) + __expf(v.w - a.x);
    }
    __device__ __forceinline__ static float2 merge(float2 a, float2 b)
    {
        const float m = fmaxf(a.x, b.x);
        if (m == -INFINITY)
            return make_float2(m, 0.f);
        const float sa = a.x == -INFINITY ? 0.f : a.y * __expf(a.x - m);
        const float sb = b.x == -INFINITY ? 0.f : b.y * __expf(b.x - m);
        return make_float2(m, sa + sb);
    }
    __device__ __forceinline__ static float param(float2 a, long long)
    {
        return a.x + logf(a.y);
    }
    __device__ __forceinline__ static float apply(float v, float lse)
    {
        return v - lse;
    }
};

// ---- host launcher ----
#include "cluster_rows_host.cuh"

// x viewed as (outer, L, inner), log_softmax over L. config: 0 default; 1 skips the cluster
// kernel (block-per-row two-pass kernel for inner == 1).
extern "C" cudaError_t log_softmax_launcher(float *out, const float *x, long long outer,
                                            long long L, long long inner, int config,
                                            cudaStream_t stream)
{
    if (outer <= 0 || L <= 0 || inner <= 0)
        return cudaSuccess;
    if (inner > 1) {
        const long long blocks = (outer * inner + 255) / 256;
        if (blocks > 0x7fffffffLL)
            return cudaErrorInvalidValue;
        strided_kernel<LogSoftmaxOp><<<(unsigned)blocks, 256, 0, stream>>>(out, x, outer, L, inner);
        return cudaGetLastError();
    }
    cudaError_t err;
    if (config != 1 && launch_cluster_rows<LogSoftmaxOp>(out, x, outer, L, stream, &err))
        return err;
    if (outer > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    rows_twopass_kernel<LogSoftmaxOp><<<(unsigned)outer, 1024, 0, stream>>>(out, x, L);
    return cudaGetLastError();
}
