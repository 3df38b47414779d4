// mish_binding.cpp: checks the input, allocates the output, launches mish.cu on the current
// stream. Tensor plumbing only.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t mish_launcher(float *out, const float *in, long long n, int config,
                                     cudaStream_t stream);

static torch::Tensor mish_forward(const torch::Tensor &x, int64_t config)
{
    TORCH_CHECK(x.is_cuda(), "mish: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "mish: float32 only");
    TORCH_CHECK(x.is_contiguous(), "mish: x must be contiguous");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = mish_launcher(out.data_ptr<float>(), x.data_ptr<float>(), x.numel(),
                                    static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "mish: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_mish(pybind11::module_ &m)
{
    m.def("mish_forward", &mish_forward, "y = x * tanh(softplus(x)) (float32, CUDA)",
          pybind11::arg("x"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(mish, register_mish);
