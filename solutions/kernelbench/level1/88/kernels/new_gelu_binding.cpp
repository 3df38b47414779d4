// new_gelu_binding.cpp: checks, output allocation and launch of new_gelu.cu on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t new_gelu_launcher(float *out, const float *x, long long n, int config,
                                         cudaStream_t stream);

static torch::Tensor new_gelu_forward(const torch::Tensor &x, int64_t config)
{
    TORCH_CHECK(x.is_cuda(), "new_gelu: CUDA tensor only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "new_gelu: float32 only");
    TORCH_CHECK(x.is_contiguous(), "new_gelu: contiguous tensor only");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    if (x.numel() == 0)
        return out;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err =
        new_gelu_launcher(out.data_ptr<float>(), x.data_ptr<float>(),
                          static_cast<long long>(x.numel()), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "new_gelu: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_new_gelu(pybind11::module_ &m)
{
    m.def("new_gelu_forward", &new_gelu_forward,
          "y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (float32, CUDA)", pybind11::arg("x"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(new_gelu, register_new_gelu);
