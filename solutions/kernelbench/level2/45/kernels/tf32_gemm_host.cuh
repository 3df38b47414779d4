// tf32_gemm_host.cuh: the host side of tf32_gemm.cuh (include it after the kernels).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "tf32_gemm.cuh"

// Whether X [M, K] and W [N, K] can take the cp.async path.
static inline bool tg_vec_ok(const float *X, const float *W, int K)
{
    return K % 4 == 0 && (((uintptr_t)X | (uintptr_t)W) & 15) == 0;
}

static inline long long tg_tiles(int M, int N)
{
    return (long long)((M + TG_BM - 1) / TG_BM) * ((N + TG_BN - 1) / TG_BN);
}

// Launches a GEMM kernel over the tiles of an M x N output: one block of TG_THREADS per tile,
// TG_SMEM_BYTES of dynamic shared memory (the attribute is set on every call: a cheap host call
// that keeps this right on any device).
template <class... KArgs, class... Args>
static cudaError_t tg_launch(void (*kern)(KArgs...), int M, int N, cudaStream_t stream,
                             Args... args)
{
    const long long tiles = tg_tiles(M, N);
    if (tiles <= 0)
        return cudaSuccess;
    if (tiles > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, TG_SMEM_BYTES);
    if (e != cudaSuccess)
        return e;
    kern<<<(unsigned)tiles, TG_THREADS, TG_SMEM_BYTES, stream>>>(args...);
    return cudaGetLastError();
}
