// layer_norm_binding.cpp: checks, output and scratch allocation, and launch of layer_norm.cu on
// the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" long long layer_norm_scratch_floats(long long rows, long long D);
extern "C" cudaError_t layer_norm_launcher(float *out, float *scratch, const float *x,
                                           const float *w, const float *b, long long rows,
                                           long long D, float eps, int config, cudaStream_t stream);

static torch::Tensor layer_norm_forward(const torch::Tensor &x, const torch::Tensor &weight,
                                        const torch::Tensor &bias, double eps, int64_t config)
{
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "layer_norm: CUDA tensors only");
    TORCH_CHECK(weight.device() == x.device() && bias.device() == x.device(),
                "layer_norm: tensors on different GPUs");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                    bias.scalar_type() == torch::kFloat32,
                "layer_norm: float32 only");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "layer_norm: contiguous tensors only");
    TORCH_CHECK(weight.sizes() == bias.sizes(), "layer_norm: weight and bias shapes differ");
    const int64_t k = weight.dim();
    TORCH_CHECK(x.dim() >= k, "layer_norm: x has fewer dimensions than normalized_shape");
    for (int64_t d = 0; d < k; ++d)
        TORCH_CHECK(x.size(x.dim() - k + d) == weight.size(d),
                    "layer_norm: x's trailing dimensions differ from normalized_shape");
    const int64_t D = weight.numel();

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    if (x.numel() == 0 || D == 0)
        return out;
    const int64_t rows = x.numel() / D;
    torch::Tensor scratch = torch::empty({layer_norm_scratch_floats(rows, D)}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err =
        layer_norm_launcher(out.data_ptr<float>(), scratch.data_ptr<float>(), x.data_ptr<float>(),
                            weight.data_ptr<float>(), bias.data_ptr<float>(), rows, D,
                            static_cast<float>(eps), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "layer_norm: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_layer_norm(pybind11::module_ &m)
{
    m.def("layer_norm_forward", &layer_norm_forward,
          "nn.LayerNorm forward over weight.shape trailing dims (float32, CUDA)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("eps"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(layer_norm, register_layer_norm);
