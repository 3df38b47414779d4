// cross_entropy_binding.cpp: checks, output and scratch allocation, and launch of
// cross_entropy.cu on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cmath>

#include "../binding_registry.h"

extern "C" cudaError_t cross_entropy_launcher(float *out, float *scratch, const float *logits,
                                              const long long *targets, int rows, int C, int config,
                                              cudaStream_t stream);

static torch::Tensor cross_entropy_forward(const torch::Tensor &logits,
                                           const torch::Tensor &targets, int64_t config)
{
    TORCH_CHECK(logits.is_cuda() && targets.is_cuda(), "cross_entropy: CUDA tensors only");
    TORCH_CHECK(logits.device() == targets.device(), "cross_entropy: tensors on different GPUs");
    TORCH_CHECK(logits.scalar_type() == torch::kFloat32, "cross_entropy: float32 logits only");
    TORCH_CHECK(targets.scalar_type() == torch::kInt64, "cross_entropy: int64 class targets only");
    TORCH_CHECK(logits.is_contiguous() && targets.is_contiguous(),
                "cross_entropy: contiguous tensors only");
    TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "cross_entropy: logits [N, C] and targets [N]");
    const int64_t N = logits.size(0), C = logits.size(1);
    TORCH_CHECK(N <= INT32_MAX && C <= INT32_MAX, "cross_entropy: too large");

    const c10::cuda::CUDAGuard guard(logits.device());
    if (N == 0)
        return torch::full({}, NAN, logits.options());
    TORCH_CHECK(C > 0, "cross_entropy: no classes");
    torch::Tensor out = torch::empty({}, logits.options());
    torch::Tensor scratch = torch::empty({2 * N}, logits.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = cross_entropy_launcher(
        out.data_ptr<float>(), scratch.data_ptr<float>(), logits.data_ptr<float>(),
        reinterpret_cast<const long long *>(targets.data_ptr<int64_t>()), static_cast<int>(N),
        static_cast<int>(C), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess,
                "cross_entropy: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_cross_entropy(pybind11::module_ &m)
{
    m.def("cross_entropy_forward", &cross_entropy_forward,
          "mean over rows of logsumexp(logits) - logits[target] (ignore_index -100; CUDA)",
          pybind11::arg("logits"), pybind11::arg("targets"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(cross_entropy, register_cross_entropy);
