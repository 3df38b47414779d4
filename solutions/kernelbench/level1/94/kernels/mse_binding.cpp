// mse_binding.cpp: checks, output and scratch allocation, and launch of mse.cu on the current
// stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cmath>

#include "../binding_registry.h"

extern "C" int mse_scratch_floats();
extern "C" cudaError_t mse_launcher(float *out, float *scratch, const float *p, const float *t,
                                    long long n, int config, cudaStream_t stream);

static torch::Tensor mse_forward(const torch::Tensor &predictions, const torch::Tensor &targets,
                                 int64_t config)
{
    TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "mse: CUDA tensors only");
    TORCH_CHECK(predictions.device() == targets.device(), "mse: tensors on different GPUs");
    TORCH_CHECK(predictions.scalar_type() == torch::kFloat32 &&
                    targets.scalar_type() == torch::kFloat32,
                "mse: float32 only");
    TORCH_CHECK(predictions.is_contiguous() && targets.is_contiguous(),
                "mse: contiguous tensors only");
    TORCH_CHECK(predictions.sizes() == targets.sizes(),
                "mse: predictions and targets must have the same shape (no broadcasting)");

    const c10::cuda::CUDAGuard guard(predictions.device());
    if (predictions.numel() == 0) // the mean of nothing, as torch.mean gives it
        return torch::full({}, NAN, predictions.options());
    torch::Tensor out = torch::empty({}, predictions.options());
    torch::Tensor scratch = torch::empty({mse_scratch_floats()}, predictions.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err =
        mse_launcher(out.data_ptr<float>(), scratch.data_ptr<float>(),
                     predictions.data_ptr<float>(), targets.data_ptr<float>(),
                     static_cast<long long>(predictions.numel()), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "mse: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_mse(pybind11::module_ &m)
{
    m.def("mse_forward", &mse_forward, "mean((predictions - targets)^2) (float32, CUDA)",
          pybind11::arg("predictions"), pybind11::arg("targets"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(mse, register_mse);
