// gemm_add_relu.cu: y = relu(x @ W^T + bias), x [M, K], W [N, K] (nn.Linear without its own
// bias), bias [N] a separate parameter: the TF32 tensor-core GEMM of tf32_gemm.cuh with the
// bias add and ReLU applied to the accumulators before the only store of y.
#include <cuda_runtime.h>
#include <stdint.h>

#include "tf32_gemm.cuh"

template <bool VEC>
__global__ void __launch_bounds__(TG_THREADS, 2)
    gemm_add_relu_kernel(float *__restrict__ out, const float *__restrict__ X,
                         const float *__restrict__ W, const float *__restrict__ bias, int M, int N,
                         int K)
{
    extern __shared__ __align__(16) float4 tg_smem4[];
    float *smem = reinterpret_cast<float *>(tg_smem4);
    int row0, col0;
    tg_tile_coords(M, N, row0, col0);
    float acc[4][8][4];
    tg_mainloop<VEC>(acc, smem, X, W, M, N, K, row0, col0);
    tg_store(out, acc, bias, M, N, row0, col0, [](float v, float b) {
        const float r = v + b;
        return r < 0.f ? 0.f : r; // NaN stays NaN, as torch.relu keeps it
    });
}

// ---- host launcher ----
#include "tf32_gemm_host.cuh"

// config: 0 default; 1 forces the synchronous-load variant.
extern "C" cudaError_t gemm_add_relu_launcher(float *out, const float *x, const float *w,
                                              const float *bias, int M, int N, int K, int config,
                                              cudaStream_t stream)
{
    if (config != 1 && tg_vec_ok(x, w, K))
        return tg_launch(gemm_add_relu_kernel<true>, M, N, stream, out, x, w, bias, M, N, K);
    return tg_launch(gemm_add_relu_kernel<false>, M, N, stream, out, x, w, bias, M, N, K);
}
