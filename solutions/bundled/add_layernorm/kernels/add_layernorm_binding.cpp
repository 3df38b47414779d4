// add_layernorm_binding.cpp: checks, output allocation and launch of add_layernorm.cu on the
// current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t add_layernorm_launcher(float *out, const float *x, const float *res,
                                              const float *w, const float *b, long long rows,
                                              int dim, float eps, int config, cudaStream_t stream);

static torch::Tensor add_layernorm_forward(const torch::Tensor &x, const torch::Tensor &residual,
                                           const torch::Tensor &weight, const torch::Tensor &bias,
                                           double eps, int64_t config)
{
    TORCH_CHECK(x.is_cuda() && residual.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "add_layernorm: CUDA tensors only");
    TORCH_CHECK(residual.device() == x.device() && weight.device() == x.device() &&
                    bias.device() == x.device(),
                "add_layernorm: tensors on different GPUs");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && residual.scalar_type() == torch::kFloat32 &&
                    weight.scalar_type() == torch::kFloat32 &&
                    bias.scalar_type() == torch::kFloat32,
                "add_layernorm: float32 only");
    TORCH_CHECK(x.is_contiguous() && residual.is_contiguous() && weight.is_contiguous() &&
                    bias.is_contiguous(),
                "add_layernorm: contiguous tensors only");
    TORCH_CHECK(x.sizes() == residual.sizes(), "add_layernorm: x and residual differ in shape");
    TORCH_CHECK(x.dim() >= 1, "add_layernorm: x needs a last dimension");
    const int64_t dim = x.size(x.dim() - 1);
    TORCH_CHECK(dim > 0 && dim <= INT32_MAX, "add_layernorm: bad last dimension");
    TORCH_CHECK(weight.dim() == 1 && weight.size(0) == dim && bias.dim() == 1 &&
                    bias.size(0) == dim,
                "add_layernorm: weight and bias must be [dim]");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = add_layernorm_launcher(
        out.data_ptr<float>(), x.data_ptr<float>(), residual.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), x.numel() / dim, static_cast<int>(dim),
        static_cast<float>(eps), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "add_layernorm: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_add_layernorm(pybind11::module_ &m)
{
    m.def("add_layernorm_forward", &add_layernorm_forward,
          "y = layernorm(x + residual) * weight + bias (float32, CUDA)", pybind11::arg("x"),
          pybind11::arg("residual"), pybind11::arg("weight"), pybind11::arg("bias"),
          pybind11::arg("eps"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(add_layernorm, register_add_layernorm);
