/* clip: global-norm gradient clipping as torch.nn.utils.clip_grad_norm_ computes it.
 *
 * kg_sumsq_accumulate adds one tensor's sum of squares into a device scalar: each block reduces
 * its grid-stride share (fp32, four elements per 16-byte load when the pointer allows) and adds it
 * with one atomicAdd, so that the tensors of a model can be summed one after another into the same
 * scalar without a host round trip. kg_clip_scale then turns the total into the factor. The
 * atomics make the last bits of the sum depend on the blocks' order. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define CL_THREADS 256
#define CL_WARPS (CL_THREADS / 32)
#define CL_MAX_BLOCKS 1024 /* bounds the number of atomics per tensor */

static __global__ void __launch_bounds__(CL_THREADS)
    cl_sumsq_kernel(float *sumsq, const float *grad, size_t n, int vec)
{
    __shared__ float part[CL_WARPS];
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nvec = vec ? n / 4 : 0;
    float acc = 0.f;
    for (size_t i = i0; i < nvec; i += stride) {
        float4 g = ((const float4 *)grad)[i];
        acc = fmaf(g.x, g.x, acc);
        acc = fmaf(g.y, g.y, acc);
        acc = fmaf(g.z, g.z, acc);
        acc = fmaf(g.w, g.w, acc);
    }
    for (size_t i = nvec * 4 + i0; i < n; i += stride)
        acc = fmaf(grad[i], grad[i], acc);

    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0)
        part[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < CL_WARPS ? part[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0)
            atomicAdd(sumsq, acc);
    }
}

/* one thread: a kernel so that the factor stays on the device, in the stream's order */
static __global__ void cl_scale_kernel(float *scale, const float *sumsq, float max_norm)
{
    float c = max_norm / (sqrtf(*sumsq) + 1e-6f);
    /* min(1, c) that keeps a NaN (NaN gradients) as NaN, as torch's clamp does, instead of
     * fminf's 1: a poisoned step should show, not pass unclipped */
    *scale = c > 1.f ? 1.f : c;
}

extern "C" {

cudaError_t kg_sumsq_accumulate(float *sumsq, const float *grad, size_t n, cudaStream_t s)
{
    if (!sumsq)
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    if (!grad)
        return cudaErrorInvalidValue;
    int vec = ((uintptr_t)grad & 15u) == 0;
    size_t items = vec ? (n + 3) / 4 : n;
    size_t blocks = (items + CL_THREADS - 1) / CL_THREADS;
    if (blocks > CL_MAX_BLOCKS)
        blocks = CL_MAX_BLOCKS;
    cl_sumsq_kernel<<<(unsigned)blocks, CL_THREADS, 0, s>>>(sumsq, grad, n, vec);
    return cudaGetLastError();
}

cudaError_t kg_clip_scale(float *scale, const float *sumsq, float max_norm, cudaStream_t s)
{
    if (!scale || !sumsq || !(max_norm >= 0.f))
        return cudaErrorInvalidValue;
    cl_scale_kernel<<<1, 1, 0, s>>>(scale, sumsq, max_norm);
    return cudaGetLastError();
}

} /* extern "C" */
