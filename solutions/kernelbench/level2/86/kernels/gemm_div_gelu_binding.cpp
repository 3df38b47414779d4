// gemm_div_gelu_binding.cpp: checks, output allocation and launch of gemm_div_gelu.cu (TF32
// tensor-core GEMM, bias + division + GELU epilogue) on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <vector>

#include "../binding_registry.h"

extern "C" cudaError_t gemm_div_gelu_launcher(float *out, const float *x, const float *w,
                                              const float *bias, int M, int N, int K, float divisor,
                                              int config, cudaStream_t stream);

static torch::Tensor gemm_div_gelu_forward(const torch::Tensor &x, const torch::Tensor &weight,
                                           const torch::Tensor &bias, double divisor,
                                           int64_t config)
{
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "gemm_div_gelu: CUDA tensors only");
    TORCH_CHECK(weight.device() == x.device() && bias.device() == x.device(),
                "gemm_div_gelu: tensors on different GPUs");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                    bias.scalar_type() == torch::kFloat32,
                "gemm_div_gelu: float32 only");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "gemm_div_gelu: contiguous tensors only");
    TORCH_CHECK(x.dim() >= 1 && weight.dim() == 2 && bias.dim() == 1,
                "gemm_div_gelu: x [..., K], weight [N, K], bias [N]");
    const int64_t K = x.size(x.dim() - 1), N = weight.size(0);
    TORCH_CHECK(weight.size(1) == K && bias.size(0) == N, "gemm_div_gelu: shape mismatch");
    int64_t M = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d)
        M *= x.size(d);
    TORCH_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX,
                "gemm_div_gelu: dimensions too large");

    std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
    out_shape.back() = N;
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty(out_shape, x.options());
    if (out.numel() == 0)
        return out;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = gemm_div_gelu_launcher(
        out.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(),
        bias.data_ptr<float>(), static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
        static_cast<float>(divisor), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess,
                "gemm_div_gelu: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_gemm_div_gelu(pybind11::module_ &m)
{
    m.def("gemm_div_gelu_forward", &gemm_div_gelu_forward,
          "y = gelu((x @ weight^T + bias) / divisor) (float32 in/out, TF32 tensor cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"),
          pybind11::arg("divisor"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(gemm_div_gelu, register_gemm_div_gelu);
