// gemm_sig_gemm_lse_binding.cpp: checks, output and scratch allocation, and launch of
// gemm_sig_gemm_lse.cu (two TF32 tensor-core GEMMs: bias + sigmoid epilogue, then a
// row-logsumexp epilogue) on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <vector>

#include "../binding_registry.h"

extern "C" long long gemm_sig_gemm_lse_scratch_floats(int M, int H, int N);
extern "C" cudaError_t gemm_sig_gemm_lse_launcher(float *out, float *scratch, const float *x,
                                                  const float *w1, const float *b1, const float *w2,
                                                  const float *b2, int M, int K, int H, int N,
                                                  int config, cudaStream_t stream);

static torch::Tensor gemm_sig_gemm_lse_forward(const torch::Tensor &x, const torch::Tensor &w1,
                                               const torch::Tensor &b1, const torch::Tensor &w2,
                                               const torch::Tensor &b2, int64_t config)
{
    TORCH_CHECK(x.is_cuda() && w1.is_cuda() && b1.is_cuda() && w2.is_cuda() && b2.is_cuda(),
                "gemm_sig_gemm_lse: CUDA tensors only");
    for (const torch::Tensor *t : {&w1, &b1, &w2, &b2}) {
        TORCH_CHECK(t->device() == x.device(), "gemm_sig_gemm_lse: tensors on different GPUs");
        TORCH_CHECK(t->scalar_type() == torch::kFloat32 && t->is_contiguous(),
                    "gemm_sig_gemm_lse: contiguous float32 tensors only");
    }
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
                "gemm_sig_gemm_lse: contiguous float32 tensors only");
    TORCH_CHECK(x.dim() == 2 && w1.dim() == 2 && b1.dim() == 1 && w2.dim() == 2 && b2.dim() == 1,
                "gemm_sig_gemm_lse: x [M, K], w1 [H, K], b1 [H], w2 [N, H], b2 [N]");
    const int64_t M = x.size(0), K = x.size(1), H = w1.size(0), N = w2.size(0);
    TORCH_CHECK(w1.size(1) == K && b1.size(0) == H && w2.size(1) == H && b2.size(0) == N,
                "gemm_sig_gemm_lse: shape mismatch");
    TORCH_CHECK(M <= INT32_MAX && K <= INT32_MAX && H <= INT32_MAX && N <= INT32_MAX,
                "gemm_sig_gemm_lse: dimensions too large");
    TORCH_CHECK(N > 0, "gemm_sig_gemm_lse: logsumexp over an empty dimension");
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty({M}, x.options());
    if (M == 0)
        return out;
    torch::Tensor scratch =
        torch::empty({gemm_sig_gemm_lse_scratch_floats(static_cast<int>(M), static_cast<int>(H),
                                                       static_cast<int>(N))},
                     x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = gemm_sig_gemm_lse_launcher(
        out.data_ptr<float>(), scratch.data_ptr<float>(), x.data_ptr<float>(), w1.data_ptr<float>(),
        b1.data_ptr<float>(), w2.data_ptr<float>(), b2.data_ptr<float>(), static_cast<int>(M),
        static_cast<int>(K), static_cast<int>(H), static_cast<int>(N), static_cast<int>(config),
        stream);
    TORCH_CHECK(err == cudaSuccess,
                "gemm_sig_gemm_lse: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_gemm_sig_gemm_lse(pybind11::module_ &m)
{
    m.def("gemm_sig_gemm_lse_forward", &gemm_sig_gemm_lse_forward,
          "logsumexp(sigmoid(x @ w1^T + b1) @ w2^T + b2, dim=1) (float32 in/out, TF32 tensor "
          "cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("w1"), pybind11::arg("b1"), pybind11::arg("w2"),
          pybind11::arg("b2"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(gemm_sig_gemm_lse, register_gemm_sig_gemm_lse);
