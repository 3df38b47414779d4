// rms_dim1_binding.cpp: checks, output allocation and launch of rms_dim1.cu on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t rms_dim1_launcher(float *out, const float *x, long long B, int C,
                                         long long S, float eps, int config, cudaStream_t stream);

static torch::Tensor rms_dim1_forward(const torch::Tensor &x, double eps, int64_t config)
{
    TORCH_CHECK(x.is_cuda(), "rms_dim1: CUDA tensor only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "rms_dim1: float32 only");
    TORCH_CHECK(x.is_contiguous(), "rms_dim1: contiguous tensor only");
    TORCH_CHECK(x.dim() >= 2, "rms_dim1: x must be (batch, features, ...)");
    const int64_t B = x.size(0), C = x.size(1);
    TORCH_CHECK(C <= INT32_MAX, "rms_dim1: too many features");
    int64_t S = 1;
    for (int64_t d = 2; d < x.dim(); ++d)
        S *= x.size(d);

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    if (x.numel() == 0)
        return out;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err =
        rms_dim1_launcher(out.data_ptr<float>(), x.data_ptr<float>(), B, static_cast<int>(C), S,
                          static_cast<float>(eps), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "rms_dim1: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_rms_dim1(pybind11::module_ &m)
{
    m.def("rms_dim1_forward", &rms_dim1_forward,
          "y = x / sqrt(mean(x^2, dim=1, keepdim=True) + eps) (float32, CUDA)", pybind11::arg("x"),
          pybind11::arg("eps"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(rms_dim1, register_rms_dim1);
