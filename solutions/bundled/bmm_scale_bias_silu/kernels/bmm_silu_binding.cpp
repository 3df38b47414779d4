// bmm_silu_binding.cpp: checks, output allocation and launch of bmm_silu.cu (own 3xTF32
// tensor-core batched GEMM with the scale + bias + SiLU epilogue) on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t bmm_scale_bias_silu_launcher(float *out, const float *a, const float *b,
                                                    const float *bias, float scale, int batch,
                                                    int M, int N, int K, int config,
                                                    cudaStream_t stream);

static torch::Tensor bmm_scale_bias_silu_forward(const torch::Tensor &a, const torch::Tensor &b,
                                                 const torch::Tensor &bias, double scale,
                                                 int64_t config)
{
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && bias.is_cuda(),
                "bmm_scale_bias_silu: CUDA tensors only");
    TORCH_CHECK(b.device() == a.device() && bias.device() == a.device(),
                "bmm_scale_bias_silu: tensors on different GPUs");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32 &&
                    bias.scalar_type() == torch::kFloat32,
                "bmm_scale_bias_silu: float32 only");
    TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && bias.dim() == 1,
                "bmm_scale_bias_silu: a [B, M, K], b [B, K, N], bias [N]");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && bias.is_contiguous(),
                "bmm_scale_bias_silu: contiguous tensors only");
    const int64_t B = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
    TORCH_CHECK(b.size(0) == B && b.size(1) == K && bias.size(0) == N,
                "bmm_scale_bias_silu: shape mismatch");
    TORCH_CHECK(B <= INT32_MAX && M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX,
                "bmm_scale_bias_silu: dimensions too large");

    const c10::cuda::CUDAGuard guard(a.device());
    torch::Tensor out = torch::empty({B, M, N}, a.options());
    if (out.numel() == 0)
        return out;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = bmm_scale_bias_silu_launcher(
        out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), bias.data_ptr<float>(),
        static_cast<float>(scale), static_cast<int>(B), static_cast<int>(M), static_cast<int>(N),
        static_cast<int>(K), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "bmm_scale_bias_silu: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_bmm_scale_bias_silu(pybind11::module_ &m)
{
    m.def("bmm_scale_bias_silu_forward", &bmm_scale_bias_silu_forward,
          "y = silu(bmm(a, b) * scale + bias) (float32 in/out, 3xTF32 tensor cores, CUDA)",
          pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("bias"), pybind11::arg("scale"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(bmm_scale_bias_silu, register_bmm_scale_bias_silu);
