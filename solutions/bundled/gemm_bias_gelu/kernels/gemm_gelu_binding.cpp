// gemm_gelu_binding.cpp: checks, output allocation and launch of gemm_gelu.cu (own tensor-core
// GEMM with the bias + GELU epilogue) on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t gemm_bias_gelu_launcher(float *out, const float *x, const float *w,
                                               const float *bias, int M, int N, int K,
                                               int config, cudaStream_t stream);

static torch::Tensor gemm_bias_gelu_forward(const torch::Tensor &x, const torch::Tensor &weight,
                                            const torch::Tensor &bias, int64_t config)
{
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "gemm_bias_gelu: CUDA tensors only");
    TORCH_CHECK(weight.device() == x.device() && bias.device() == x.device(),
                "gemm_bias_gelu: tensors on different GPUs");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                    bias.scalar_type() == torch::kFloat32,
                "gemm_bias_gelu: float32 only");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "gemm_bias_gelu: contiguous tensors only");
    TORCH_CHECK(x.dim() >= 1 && weight.dim() == 2 && bias.dim() == 1,
                "gemm_bias_gelu: x [..., K], weight [N, K], bias [N]");
    const int64_t K = x.size(x.dim() - 1), N = weight.size(0);
    TORCH_CHECK(weight.size(1) == K && bias.size(0) == N, "gemm_bias_gelu: shape mismatch");
    const int64_t M = K > 0 ? x.numel() / K : 0;
    TORCH_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX,
                "gemm_bias_gelu: dimensions too large");

    std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
    out_shape.back() = N;
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty(out_shape, x.options());
    if (out.numel() == 0)
        return out;
    TORCH_CHECK(K > 0, "gemm_bias_gelu: K == 0 is not supported");
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = gemm_bias_gelu_launcher(
        out.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(),
        bias.data_ptr<float>(), static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
        static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "gemm_bias_gelu: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_gemm_bias_gelu(pybind11::module_ &m)
{
    m.def("gemm_bias_gelu_forward", &gemm_bias_gelu_forward,
          "y = gelu_erf(x @ weight^T + bias) (float32 in/out, TF32 tensor cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(gemm_bias_gelu, register_gemm_bias_gelu);
