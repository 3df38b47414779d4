// gemm_lse_mish_binding.cpp: checks, output and scratch allocation, and launch of
// gemm_lse_mish.cu (TF32 tensor-core GEMM with a row-logsumexp epilogue, then l * mish(l)) on the
// current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <vector>

#include "../binding_registry.h"

extern "C" long long gemm_lse_mish_scratch_floats(int M, int N);
extern "C" cudaError_t gemm_lse_mish_launcher(float *out, float *scratch, const float *x,
                                              const float *w, const float *bias, int M, int N,
                                              int K, float scale, float lo, float hi, int config,
                                              cudaStream_t stream);

static torch::Tensor gemm_lse_mish_forward(const torch::Tensor &x, const torch::Tensor &weight,
                                           const torch::Tensor &bias, double scale_factor,
                                           double clamp_min, double clamp_max, int64_t config)
{
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "gemm_lse_mish: CUDA tensors only");
    TORCH_CHECK(weight.device() == x.device() && bias.device() == x.device(),
                "gemm_lse_mish: tensors on different GPUs");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                    bias.scalar_type() == torch::kFloat32,
                "gemm_lse_mish: float32 only");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "gemm_lse_mish: contiguous tensors only");
    TORCH_CHECK(x.dim() >= 1 && weight.dim() == 2 && bias.dim() == 1,
                "gemm_lse_mish: x [..., K], weight [N, K], bias [N]");
    const int64_t K = x.size(x.dim() - 1), N = weight.size(0);
    TORCH_CHECK(weight.size(1) == K && bias.size(0) == N, "gemm_lse_mish: shape mismatch");
    int64_t M = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d)
        M *= x.size(d);
    TORCH_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX,
                "gemm_lse_mish: dimensions too large");
    TORCH_CHECK(x.dim() == 2, "gemm_lse_mish: x must be [batch, input_size]");
    TORCH_CHECK(N > 0, "gemm_lse_mish: logsumexp over an empty dimension");
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty({M, 1}, x.options());
    if (M == 0)
        return out;
    torch::Tensor scratch = torch::empty(
        {gemm_lse_mish_scratch_floats(static_cast<int>(M), static_cast<int>(N))}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = gemm_lse_mish_launcher(
        out.data_ptr<float>(), scratch.data_ptr<float>(), x.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), static_cast<int>(M), static_cast<int>(N),
        static_cast<int>(K), static_cast<float>(scale_factor), static_cast<float>(clamp_min),
        static_cast<float>(clamp_max), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess,
                "gemm_lse_mish: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_gemm_lse_mish(pybind11::module_ &m)
{
    m.def("gemm_lse_mish_forward", &gemm_lse_mish_forward,
          "l = logsumexp(clamp(2 scale (x @ weight^T + bias), lo, hi), 1); y = l * mish(l) "
          "(float32 in/out, TF32 tensor cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"),
          pybind11::arg("scale_factor"), pybind11::arg("clamp_min"), pybind11::arg("clamp_max"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(gemm_lse_mish, register_gemm_lse_mish);
