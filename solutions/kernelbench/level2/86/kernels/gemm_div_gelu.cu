// gemm_div_gelu.cu: y = gelu((x @ W^T + b) / divisor) with the exact (erf) GELU, x [M, K],
// W [N, K], b [N]: the TF32 tensor-core GEMM of tf32_gemm.cuh with bias, division and GELU
// applied to the accumulators before the only store of y.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "tf32_gemm.cuh"

template <bool VEC>
__global__ void __launch_bounds__(TG_THREADS, 2)
    gemm_div_gelu_kernel(float *__restrict__ out, const float *__restrict__ X,
                         const float *__restrict__ W, const float *__restrict__ bias, int M, int N,
                         int K, float divisor)
{
    extern __shared__ __align__(16) float4 tg_smem4[];
    float *smem = reinterpret_cast<float *>(tg_smem4);
    int row0, col0;
    tg_tile_coords(M, N, row0, col0);
    float acc[4][8][4];
    tg_mainloop<VEC>(acc, smem, X, W, M, N, K, row0, col0);
    tg_store(out, acc, bias, M, N, row0, col0, [=](float v, float b) {
        const float r = (v + b) / divisor;
        return 0.5f * r * (1.f + erff(r * 0.70710678118654752f));
    });
}

// ---- host launcher ----
#include "tf32_gemm_host.cuh"

// config: 0 default; 1 forces the synchronous-load variant.
extern "C" cudaError_t gemm_div_gelu_launcher(float *out, const float *x, const float *w,
                                              const float *bias, int M, int N, int K, float divisor,
                                              int config, cudaStream_t stream)
{
    if (config != 1 && tg_vec_ok(x, w, K))
        return tg_launch(gemm_div_gelu_kernel<true>, M, N, stream, out, x, w, bias, M, N, K,
                         divisor);
    return tg_launch(gemm_div_gelu_kernel<false>, M, N, stream, out, x, w, bias, M, N, K, divisor);
}
