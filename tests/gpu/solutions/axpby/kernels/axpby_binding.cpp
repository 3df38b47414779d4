// axpby_binding.cpp: the PyTorch side of the example. It checks the tensors, allocates the
// output, and launches the kernel on PyTorch's current stream. Tensor handling only: every
// computation happens in axpby.cu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t axpby_launcher(float *out, const float *a, const float *b, float alpha,
                                      long long n, int config, cudaStream_t stream);

static torch::Tensor axpby_forward(const torch::Tensor &a, const torch::Tensor &b, double alpha,
                                   int64_t config)
{
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "axpby: a and b must be CUDA tensors");
    TORCH_CHECK(a.device() == b.device(), "axpby: a and b must be on the same GPU");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "axpby: float32 tensors only");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "axpby: contiguous tensors only");
    TORCH_CHECK(a.sizes() == b.sizes(), "axpby: a and b differ in shape");

    const c10::cuda::CUDAGuard guard(a.device()); // launch on the inputs' GPU
    torch::Tensor out = torch::empty_like(a);     // allocation only: no PyTorch compute
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = axpby_launcher(out.data_ptr<float>(), a.data_ptr<float>(),
                                     b.data_ptr<float>(), static_cast<float>(alpha), a.numel(),
                                     static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "axpby: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_axpby(pybind11::module_ &m)
{
    m.def("axpby_forward", &axpby_forward, "out = alpha * a + b (float32, CUDA)",
          pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("alpha"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(axpby, register_axpby);
