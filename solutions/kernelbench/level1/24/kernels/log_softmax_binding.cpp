// log_softmax_binding.cpp: checks, output allocation and launch of log_softmax.cu on the current
// stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t log_softmax_launcher(float *out, const float *x, long long outer,
                                            long long L, long long inner, int config,
                                            cudaStream_t stream);

static torch::Tensor log_softmax_forward(const torch::Tensor &x, int64_t dim, int64_t config)
{
    TORCH_CHECK(x.is_cuda(), "log_softmax: CUDA tensor only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "log_softmax: float32 only");
    TORCH_CHECK(x.is_contiguous(), "log_softmax: contiguous tensor only");
    TORCH_CHECK(x.dim() >= 1, "log_softmax: x needs at least one dimension");
    if (dim < 0)
        dim += x.dim();
    TORCH_CHECK(dim >= 0 && dim < x.dim(), "log_softmax: dim out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d)
        outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d)
        inner *= x.size(d);

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    if (x.numel() == 0)
        return out;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = log_softmax_launcher(out.data_ptr<float>(), x.data_ptr<float>(), outer,
                                           x.size(dim), inner, static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "log_softmax: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_log_softmax(pybind11::module_ &m)
{
    m.def("log_softmax_forward", &log_softmax_forward, "y = x - logsumexp(x, dim) (float32, CUDA)",
          pybind11::arg("x"), pybind11::arg("dim"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(log_softmax, register_log_softmax);
