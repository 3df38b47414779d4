// swiglu_mlp_binding.cpp: checks, scratch and output allocation, and launch of swiglu_mlp.cu
// (RMSNorm, fused gate/up TF32 GEMM with the SwiGLU epilogue, down TF32 GEMM) on the current
// stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t rmsnorm_swiglu_mlp_launcher(float *out, float *nbuf, float *hbuf,
                                                   const float *x, const float *norm_w,
                                                   const float *w_gate, const float *w_up,
                                                   const float *w_down, float eps, int M, int D,
                                                   int H, int config, cudaStream_t stream);

static torch::Tensor rmsnorm_swiglu_mlp_forward(const torch::Tensor &x,
                                                const torch::Tensor &norm_w,
                                                const torch::Tensor &w_gate,
                                                const torch::Tensor &w_up,
                                                const torch::Tensor &w_down, double eps,
                                                int64_t config)
{
    const torch::Tensor *all[] = {&x, &norm_w, &w_gate, &w_up, &w_down};
    for (const torch::Tensor *t : all) {
        TORCH_CHECK(t->is_cuda(), "rmsnorm_swiglu_mlp: CUDA tensors only");
        TORCH_CHECK(t->device() == x.device(), "rmsnorm_swiglu_mlp: tensors on different GPUs");
        TORCH_CHECK(t->scalar_type() == torch::kFloat32, "rmsnorm_swiglu_mlp: float32 only");
        TORCH_CHECK(t->is_contiguous(), "rmsnorm_swiglu_mlp: contiguous tensors only");
    }
    TORCH_CHECK(x.dim() >= 1 && norm_w.dim() == 1 && w_gate.dim() == 2 && w_up.dim() == 2 &&
                    w_down.dim() == 2,
                "rmsnorm_swiglu_mlp: x [..., D], norm weight [D], gate/up [H, D], down [D, H]");
    const int64_t D = x.size(x.dim() - 1), H = w_gate.size(0);
    TORCH_CHECK(norm_w.size(0) == D && w_gate.size(1) == D && w_up.size(0) == H &&
                    w_up.size(1) == D && w_down.size(0) == D && w_down.size(1) == H,
                "rmsnorm_swiglu_mlp: shape mismatch");
    TORCH_CHECK(D > 0 && H > 0, "rmsnorm_swiglu_mlp: empty feature dimension");
    const int64_t M = x.numel() / D;
    TORCH_CHECK(M <= INT32_MAX && D <= INT32_MAX && H <= INT32_MAX,
                "rmsnorm_swiglu_mlp: dimensions too large");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty(x.sizes(), x.options());
    if (M == 0)
        return out;
    torch::Tensor nbuf = torch::empty({M, D}, x.options()); // normalised x
    torch::Tensor hbuf = torch::empty({M, H}, x.options()); // silu(gate) * up
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = rmsnorm_swiglu_mlp_launcher(
        out.data_ptr<float>(), nbuf.data_ptr<float>(), hbuf.data_ptr<float>(),
        x.data_ptr<float>(), norm_w.data_ptr<float>(), w_gate.data_ptr<float>(),
        w_up.data_ptr<float>(), w_down.data_ptr<float>(), static_cast<float>(eps),
        static_cast<int>(M), static_cast<int>(D), static_cast<int>(H), static_cast<int>(config),
        stream);
    TORCH_CHECK(err == cudaSuccess, "rmsnorm_swiglu_mlp: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_rmsnorm_swiglu_mlp(pybind11::module_ &m)
{
    m.def("rmsnorm_swiglu_mlp_forward", &rmsnorm_swiglu_mlp_forward,
          "y = down(silu(gate(n)) * up(n)), n = rmsnorm(x) (float32 in/out, TF32 tensor cores, "
          "CUDA)",
          pybind11::arg("x"), pybind11::arg("norm_weight"), pybind11::arg("w_gate"),
          pybind11::arg("w_up"), pybind11::arg("w_down"), pybind11::arg("eps"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(rmsnorm_swiglu_mlp, register_rmsnorm_swiglu_mlp);
