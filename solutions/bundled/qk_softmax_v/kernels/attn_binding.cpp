// attn_binding.cpp: checks, output allocation and launch of attn.cu (fused q k^T, softmax and
// weighted sum of v on tensor cores) on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t qk_softmax_v_launcher(float *out, const float *q, const float *k,
                                             const float *v, float scale, int B, int Lq, int Lk,
                                             int D, int config, cudaStream_t stream);

static torch::Tensor qk_softmax_v_forward(const torch::Tensor &q, const torch::Tensor &k,
                                          const torch::Tensor &v, double scale, int64_t config)
{
    TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda(), "qk_softmax_v: CUDA tensors only");
    TORCH_CHECK(k.device() == q.device() && v.device() == q.device(),
                "qk_softmax_v: tensors on different GPUs");
    TORCH_CHECK(q.scalar_type() == torch::kFloat32 && k.scalar_type() == torch::kFloat32 &&
                    v.scalar_type() == torch::kFloat32,
                "qk_softmax_v: float32 only");
    TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
                "qk_softmax_v: q [B, Lq, D], k [B, Lk, D], v [B, Lk, D]");
    TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(),
                "qk_softmax_v: contiguous tensors only");
    const int64_t B = q.size(0), Lq = q.size(1), D = q.size(2), Lk = k.size(1);
    TORCH_CHECK(k.size(0) == B && k.size(2) == D && v.size(0) == B && v.size(1) == Lk &&
                    v.size(2) == D,
                "qk_softmax_v: shape mismatch (v must have q's head size)");
    TORCH_CHECK(D <= 256, "qk_softmax_v: head size above 256 is not supported");
    TORCH_CHECK(B <= INT32_MAX && Lq <= INT32_MAX && Lk <= INT32_MAX,
                "qk_softmax_v: dimensions too large");

    const c10::cuda::CUDAGuard guard(q.device());
    torch::Tensor out = torch::empty({B, Lq, D}, q.options());
    if (out.numel() == 0)
        return out;
    TORCH_CHECK(Lk > 0, "qk_softmax_v: no keys");
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = qk_softmax_v_launcher(
        out.data_ptr<float>(), q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
        static_cast<float>(scale), static_cast<int>(B), static_cast<int>(Lq),
        static_cast<int>(Lk), static_cast<int>(D), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "qk_softmax_v: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_qk_softmax_v(pybind11::module_ &m)
{
    m.def("qk_softmax_v_forward", &qk_softmax_v_forward,
          "y = softmax(q @ k^T * scale) @ v (float32 in/out, fused, 3xTF32 tensor cores, CUDA)",
          pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("scale"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(qk_softmax_v, register_qk_softmax_v);
