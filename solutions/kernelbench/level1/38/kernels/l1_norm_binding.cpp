// l1_norm_binding.cpp: checks, output allocation and launch of l1_norm.cu on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t l1_norm_launcher(float *out, const float *x, long long outer, long long L,
                                        long long inner, int config, cudaStream_t stream);

// Normalises over dimension 1, as the task's Model does.
static torch::Tensor l1_norm_forward(const torch::Tensor &x, int64_t config)
{
    TORCH_CHECK(x.is_cuda(), "l1_norm: CUDA tensor only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "l1_norm: float32 only");
    TORCH_CHECK(x.is_contiguous(), "l1_norm: contiguous tensor only");
    TORCH_CHECK(x.dim() >= 2, "l1_norm: x needs a dimension 1");
    int64_t inner = 1;
    for (int64_t d = 2; d < x.dim(); ++d)
        inner *= x.size(d);

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    if (x.numel() == 0)
        return out;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = l1_norm_launcher(out.data_ptr<float>(), x.data_ptr<float>(), x.size(0),
                                       x.size(1), inner, static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "l1_norm: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_l1_norm(pybind11::module_ &m)
{
    m.def("l1_norm_forward", &l1_norm_forward,
          "y = x / mean(|x|, dim=1, keepdim=True) (float32, CUDA)", pybind11::arg("x"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(l1_norm, register_l1_norm);
