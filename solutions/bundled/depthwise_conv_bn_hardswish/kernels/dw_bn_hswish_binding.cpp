// dw_bn_hswish_binding.cpp: checks, output (and training-mode scratch) allocation and launch of
// dw_bn_hswish.cu on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t dw_bn_hswish_launcher(float *out, const float *x, const float *w,
                                             const float *gamma, const float *beta,
                                             float *rmean, float *rvar, long long *nbt,
                                             void *scratch, int train, float eps,
                                             float momentum, int N, int C, int H, int W,
                                             int config, cudaStream_t stream);

static void check_vec(const torch::Tensor &t, const torch::Tensor &x, int64_t C, const char *name)
{
    TORCH_CHECK(t.is_cuda() && t.device() == x.device(), "dw_bn_hswish: ", name,
                " must be a CUDA tensor on x's device");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.numel() == C,
                "dw_bn_hswish: ", name, " must be a contiguous float32 [C] tensor");
}

// x [N, C, H, W]; weight [C, 1, 3, 3]; BatchNorm weight, bias, running_mean, running_var [C].
// training: batch statistics, and running_mean / running_var / num_batches_tracked updated in
// place (momentum < 0 stands for momentum=None); otherwise the running statistics are used.
static torch::Tensor dw_bn_hswish_forward(const torch::Tensor &x, const torch::Tensor &weight,
                                          const torch::Tensor &gamma, const torch::Tensor &beta,
                                          torch::Tensor running_mean, torch::Tensor running_var,
                                          torch::Tensor num_batches_tracked, bool training,
                                          double momentum, double eps, int64_t config)
{
    TORCH_CHECK(x.is_cuda(), "dw_bn_hswish: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.dim() == 4,
                "dw_bn_hswish: x must be a contiguous float32 [N, C, H, W] tensor");
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    TORCH_CHECK(weight.is_cuda() && weight.device() == x.device() &&
                    weight.scalar_type() == torch::kFloat32 && weight.is_contiguous(),
                "dw_bn_hswish: weight must be a contiguous float32 CUDA tensor on x's device");
    TORCH_CHECK(weight.dim() == 4 && weight.size(0) == C && weight.size(1) == 1 &&
                    weight.size(2) == 3 && weight.size(3) == 3,
                "dw_bn_hswish: weight must be [C, 1, 3, 3] (depthwise 3x3)");
    check_vec(gamma, x, C, "bn.weight");
    check_vec(beta, x, C, "bn.bias");
    check_vec(running_mean, x, C, "running_mean");
    check_vec(running_var, x, C, "running_var");
    TORCH_CHECK(N <= INT32_MAX && C <= INT32_MAX && H <= INT32_MAX && W <= INT32_MAX &&
                    N * C <= INT32_MAX,
                "dw_bn_hswish: dimensions too large");
    long long *nbt = nullptr;
    if (training && num_batches_tracked.defined() && num_batches_tracked.numel() > 0) {
        TORCH_CHECK(num_batches_tracked.is_cuda() && num_batches_tracked.device() == x.device() &&
                        num_batches_tracked.scalar_type() == torch::kInt64,
                    "dw_bn_hswish: num_batches_tracked must be an int64 CUDA tensor");
        nbt = reinterpret_cast<long long *>(num_batches_tracked.data_ptr<int64_t>());
    }

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    torch::Tensor scratch;
    if (training) // (sum, sum of squares) per (n, c) as doubles, then scale/shift per channel
        scratch = torch::empty({4 * N * C + 2 * C}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = dw_bn_hswish_launcher(
        out.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(),
        gamma.data_ptr<float>(), beta.data_ptr<float>(), running_mean.data_ptr<float>(),
        running_var.data_ptr<float>(), nbt, training ? scratch.data_ptr() : nullptr,
        training ? 1 : 0, static_cast<float>(eps), static_cast<float>(momentum),
        static_cast<int>(N), static_cast<int>(C), static_cast<int>(H), static_cast<int>(W),
        static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "dw_bn_hswish: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_dw_bn_hswish(pybind11::module_ &m)
{
    m.def("dw_bn_hswish_forward", &dw_bn_hswish_forward,
          "y = hardswish(batchnorm(depthwise_conv3x3(x))) (float32, CUDA)", pybind11::arg("x"),
          pybind11::arg("weight"), pybind11::arg("gamma"), pybind11::arg("beta"),
          pybind11::arg("running_mean"), pybind11::arg("running_var"),
          pybind11::arg("num_batches_tracked"), pybind11::arg("training"),
          pybind11::arg("momentum"), pybind11::arg("eps"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(dw_bn_hswish, register_dw_bn_hswish);
