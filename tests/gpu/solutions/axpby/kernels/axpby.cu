// axpby.cu: the example kernel, out = alpha * a + b over n floats.
// Plain CUDA with no PyTorch header, so it compiles in seconds; PyTorch tensors are handled in
// axpby_binding.cpp, which calls the extern "C" launcher below.
#include <cuda_runtime.h>

// Grid-stride loop: any grid size covers any n, so the launch can cap the grid.
__global__ void axpby_kernel(float *__restrict__ out, const float *__restrict__ a,
                             const float *__restrict__ b, float alpha, long long n)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = alpha * a[i] + b[i];
}

// config chooses the block size (0: 256 threads, 1: 128, 2: 512), so launch shapes can be
// compared from Python without recompiling. Returns the launch status.
extern "C" cudaError_t axpby_launcher(float *out, const float *a, const float *b, float alpha,
                                      long long n, int config, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    const int threads = config == 1 ? 128 : config == 2 ? 512 : 256;
    long long blocks = (n + threads - 1) / threads;
    if (blocks > 65536) // plenty of blocks per SM on any GPU; the loop does the rest
        blocks = 65536;
    axpby_kernel<<<(unsigned)blocks, threads, 0, stream>>>(out, a, b, alpha, n);
    return cudaGetLastError();
}
