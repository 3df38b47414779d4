// gemm_gn_hswish_binding.cpp: checks, output (and, for unfused group sizes, scratch)
// allocation and launch of gemm_gn_hswish.cu (TF32 tensor-core GEMM with GroupNorm + HardSwish
// fused into its epilogue) on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" long long gemm_groupnorm_hardswish_scratch(const float *x, const float *w,
                                                      const float *out, int M, int N, int K,
                                                      int G, int config);
extern "C" cudaError_t gemm_groupnorm_hardswish_launcher(float *out, float *scratch,
                                                         const float *x, const float *w,
                                                         const float *bias, const float *gamma,
                                                         const float *beta, float eps, int M,
                                                         int N, int K, int G, int config,
                                                         cudaStream_t stream);

static torch::Tensor gemm_groupnorm_hardswish_forward(
    const torch::Tensor &x, const torch::Tensor &weight, const torch::Tensor &bias,
    const torch::Tensor &gamma, const torch::Tensor &beta, int64_t groups, double eps,
    int64_t config)
{
    const torch::Tensor *all[] = {&x, &weight, &bias, &gamma, &beta};
    for (const torch::Tensor *t : all) {
        TORCH_CHECK(t->is_cuda(), "gemm_groupnorm_hardswish: CUDA tensors only");
        TORCH_CHECK(t->device() == x.device(),
                    "gemm_groupnorm_hardswish: tensors on different GPUs");
        TORCH_CHECK(t->scalar_type() == torch::kFloat32, "gemm_groupnorm_hardswish: float32 only");
        TORCH_CHECK(t->is_contiguous(), "gemm_groupnorm_hardswish: contiguous tensors only");
    }
    TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && bias.dim() == 1 && gamma.dim() == 1 &&
                    beta.dim() == 1,
                "gemm_groupnorm_hardswish: x [M, K], weight [N, K], bias/gamma/beta [N]");
    const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
    TORCH_CHECK(weight.size(1) == K && bias.size(0) == N && gamma.size(0) == N &&
                    beta.size(0) == N,
                "gemm_groupnorm_hardswish: shape mismatch");
    TORCH_CHECK(groups > 0 && N % groups == 0,
                "gemm_groupnorm_hardswish: features not divisible by groups");
    TORCH_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX,
                "gemm_groupnorm_hardswish: dimensions too large");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty({M, N}, x.options());
    if (out.numel() == 0)
        return out;
    const long long nscratch = gemm_groupnorm_hardswish_scratch(
        x.data_ptr<float>(), weight.data_ptr<float>(), out.data_ptr<float>(),
        static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
        static_cast<int>(groups), static_cast<int>(config));
    torch::Tensor scratch; // the linear output, only where the epilogue cannot be fused
    if (nscratch > 0)
        scratch = torch::empty({static_cast<int64_t>(nscratch)}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = gemm_groupnorm_hardswish_launcher(
        out.data_ptr<float>(), nscratch > 0 ? scratch.data_ptr<float>() : nullptr,
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
        gamma.data_ptr<float>(), beta.data_ptr<float>(), static_cast<float>(eps),
        static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), static_cast<int>(groups),
        static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "gemm_groupnorm_hardswish: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_gemm_groupnorm_hardswish(pybind11::module_ &m)
{
    m.def("gemm_groupnorm_hardswish_forward", &gemm_groupnorm_hardswish_forward,
          "y = hardswish(groupnorm(x @ weight^T + bias)) (float32 in/out, TF32 tensor cores, "
          "CUDA)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"),
          pybind11::arg("gamma"), pybind11::arg("beta"), pybind11::arg("groups"),
          pybind11::arg("eps"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(gemm_groupnorm_hardswish, register_gemm_groupnorm_hardswish);
