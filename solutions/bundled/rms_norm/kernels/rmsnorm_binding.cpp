// rmsnorm_binding.cpp: checks, output allocation and launch of rmsnorm.cu on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t rmsnorm_launcher(float *out, const float *x, const float *w, int rows,
                                        int dim, float eps, int config, cudaStream_t stream);

static torch::Tensor rmsnorm_forward(const torch::Tensor &x, const torch::Tensor &weight,
                                     double eps, int64_t config)
{
    TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "rmsnorm: CUDA tensors only");
    TORCH_CHECK(x.device() == weight.device(), "rmsnorm: x and weight on different GPUs");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32,
                "rmsnorm: float32 only");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous(), "rmsnorm: contiguous tensors only");
    TORCH_CHECK(x.dim() >= 1, "rmsnorm: x needs a last dimension");
    const int64_t dim = x.size(x.dim() - 1);
    TORCH_CHECK(weight.dim() == 1 && weight.size(0) == dim, "rmsnorm: weight must be [dim]");
    TORCH_CHECK(dim > 0 && dim <= INT32_MAX, "rmsnorm: bad last dimension");
    const int64_t rows = dim ? x.numel() / dim : 0;
    TORCH_CHECK(rows <= INT32_MAX, "rmsnorm: too many rows");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = rmsnorm_launcher(out.data_ptr<float>(), x.data_ptr<float>(),
                                       weight.data_ptr<float>(), static_cast<int>(rows),
                                       static_cast<int>(dim), static_cast<float>(eps),
                                       static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "rmsnorm: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_rmsnorm(pybind11::module_ &m)
{
    m.def("rmsnorm_forward", &rmsnorm_forward,
          "y = x * rsqrt(mean(x^2, -1) + eps) * weight (float32, CUDA)", pybind11::arg("x"),
          pybind11::arg("weight"), pybind11::arg("eps"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(rmsnorm, register_rmsnorm);
