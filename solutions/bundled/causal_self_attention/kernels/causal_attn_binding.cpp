// causal_attn_binding.cpp: checks, scratch and output allocation, and launch of causal_attn.cu
// (qkv GEMM + bias, causal flash attention, proj GEMM + bias; 3xTF32 tensor cores) on the current
// stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t causal_self_attention_launcher(float *out, float *qkv, float *att,
                                                      const float *x, const float *w_qkv,
                                                      const float *b_qkv, const float *w_proj,
                                                      const float *b_proj, int B, int S, int D,
                                                      int H, int config, cudaStream_t stream);

static torch::Tensor
causal_self_attention_forward(const torch::Tensor &x, const torch::Tensor &w_qkv,
                              const torch::Tensor &b_qkv, const torch::Tensor &w_proj,
                              const torch::Tensor &b_proj, int64_t n_heads, int64_t config)
{
    const torch::Tensor *all[] = {&x, &w_qkv, &b_qkv, &w_proj, &b_proj};
    for (const torch::Tensor *t : all) {
        TORCH_CHECK(t->is_cuda(), "causal_self_attention: CUDA tensors only");
        TORCH_CHECK(t->device() == x.device(), "causal_self_attention: tensors on different GPUs");
        TORCH_CHECK(t->scalar_type() == torch::kFloat32, "causal_self_attention: float32 only");
        TORCH_CHECK(t->is_contiguous(), "causal_self_attention: contiguous tensors only");
    }
    TORCH_CHECK(x.dim() == 3, "causal_self_attention: x must be [B, S, D]");
    const int64_t B = x.size(0), S = x.size(1), D = x.size(2);
    TORCH_CHECK(w_qkv.dim() == 2 && w_qkv.size(0) == 3 * D && w_qkv.size(1) == D &&
                    b_qkv.dim() == 1 && b_qkv.size(0) == 3 * D,
                "causal_self_attention: qkv weight [3D, D] and bias [3D] expected");
    TORCH_CHECK(w_proj.dim() == 2 && w_proj.size(0) == D && w_proj.size(1) == D &&
                    b_proj.dim() == 1 && b_proj.size(0) == D,
                "causal_self_attention: proj weight [D, D] and bias [D] expected");
    TORCH_CHECK(n_heads > 0 && D % n_heads == 0,
                "causal_self_attention: d_model must be a multiple of n_heads");
    TORCH_CHECK(D / n_heads <= 256, "causal_self_attention: head size above 256 is not supported");
    TORCH_CHECK(B * S <= INT32_MAX && 3 * D <= INT32_MAX,
                "causal_self_attention: dimensions too large");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty({B, S, D}, x.options());
    if (out.numel() == 0)
        return out;
    torch::Tensor qkv = torch::empty({B * S, 3 * D}, x.options()); // q | k | v per token
    torch::Tensor att = torch::empty({B * S, D}, x.options());     // heads side by side
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = causal_self_attention_launcher(
        out.data_ptr<float>(), qkv.data_ptr<float>(), att.data_ptr<float>(), x.data_ptr<float>(),
        w_qkv.data_ptr<float>(), b_qkv.data_ptr<float>(), w_proj.data_ptr<float>(),
        b_proj.data_ptr<float>(), static_cast<int>(B), static_cast<int>(S), static_cast<int>(D),
        static_cast<int>(n_heads), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess,
                "causal_self_attention: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_causal_self_attention(pybind11::module_ &m)
{
    m.def("causal_self_attention_forward", &causal_self_attention_forward,
          "y = proj(causal softmax(q k^T / sqrt(dh)) v), q, k, v = split(qkv(x)) (float32 in/out, "
          "3xTF32 tensor cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("w_qkv"), pybind11::arg("b_qkv"),
          pybind11::arg("w_proj"), pybind11::arg("b_proj"), pybind11::arg("n_heads"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(causal_self_attention, register_causal_self_attention);
