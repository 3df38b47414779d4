// conv_bn_relu_binding.cpp: checks, output and scratch allocation and launch of
// conv_bn_relu.cu (implicit-GEMM TF32 conv with the BatchNorm + ReLU epilogue) on the current
// stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" long long conv_bn_relu_scratch_floats(int N, int Cin, int H, int W, int Cout, int KH,
                                                 int KW, int ph, int pw, int train, int config);
extern "C" cudaError_t conv_bn_relu_launcher(float *out, const float *x, const float *w,
                                             const float *bias, const float *gamma,
                                             const float *beta, float *rmean, float *rvar,
                                             long long *nbt, float *scratch, int train,
                                             float eps, float momentum, int N, int Cin, int H,
                                             int W, int Cout, int KH, int KW, int ph, int pw,
                                             int config, cudaStream_t stream);

static void check_f32(const torch::Tensor &t, const torch::Tensor &x, const char *name)
{
    TORCH_CHECK(t.is_cuda() && t.device() == x.device(), "conv_bn_relu: ", name,
                " must be a CUDA tensor on x's device");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32 && t.is_contiguous(), "conv_bn_relu: ", name,
                " must be contiguous float32");
}

// x [N, Cin, H, W]; weight [Cout, Cin, KH, KW]; bias [Cout] or None; BatchNorm weight, bias,
// running_mean, running_var [Cout]; stride, dilation, groups must be 1 (checked from the
// module's attributes), zero padding (ph, pw) keeping the size (KH = 2 ph + 1, KW = 2 pw + 1).
static torch::Tensor conv_bn_relu_forward(
    const torch::Tensor &x, const torch::Tensor &weight, const c10::optional<torch::Tensor> &bias,
    const torch::Tensor &gamma, const torch::Tensor &beta, torch::Tensor running_mean,
    torch::Tensor running_var, torch::Tensor num_batches_tracked, std::vector<int64_t> stride,
    std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups, bool training,
    double momentum, double eps, int64_t config)
{
    check_f32(x, x, "x");
    check_f32(weight, x, "weight");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4, "conv_bn_relu: x [N, Cin, H, W], weight 4-d");
    TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
                "conv_bn_relu: 2-d stride / padding / dilation expected");
    TORCH_CHECK(stride[0] == 1 && stride[1] == 1 && dilation[0] == 1 && dilation[1] == 1 &&
                    groups == 1,
                "conv_bn_relu: only stride 1, dilation 1, groups 1 are supported");
    const int64_t N = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    TORCH_CHECK(weight.size(1) == Cin, "conv_bn_relu: weight / x channel mismatch");
    TORCH_CHECK(KH == 2 * padding[0] + 1 && KW == 2 * padding[1] + 1,
                "conv_bn_relu: only 'same' convolutions (odd kernel, padding = kernel // 2)");
    const float *bias_ptr = nullptr;
    if (bias.has_value() && bias->defined()) {
        check_f32(*bias, x, "conv bias");
        TORCH_CHECK(bias->numel() == Cout, "conv_bn_relu: conv bias must be [Cout]");
        bias_ptr = bias->data_ptr<float>();
    }
    for (auto *p : {&gamma, &beta}) {
        check_f32(*p, x, "BatchNorm affine");
        TORCH_CHECK(p->numel() == Cout, "conv_bn_relu: BatchNorm affine must be [Cout]");
    }
    for (auto *p : {&running_mean, &running_var}) {
        check_f32(*p, x, "BatchNorm running statistics");
        TORCH_CHECK(p->numel() == Cout, "conv_bn_relu: running statistics must be [Cout]");
    }
    TORCH_CHECK(N <= INT32_MAX && Cin <= INT32_MAX && H <= INT32_MAX && W <= INT32_MAX &&
                    Cout <= INT32_MAX && N * Cout <= INT32_MAX,
                "conv_bn_relu: dimensions too large");
    long long *nbt = nullptr;
    if (training && num_batches_tracked.defined() && num_batches_tracked.numel() > 0) {
        TORCH_CHECK(num_batches_tracked.is_cuda() && num_batches_tracked.device() == x.device() &&
                        num_batches_tracked.scalar_type() == torch::kInt64,
                    "conv_bn_relu: num_batches_tracked must be an int64 CUDA tensor");
        nbt = reinterpret_cast<long long *>(num_batches_tracked.data_ptr<int64_t>());
    }

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty({N, Cout, H, W}, x.options());
    // re-laid TF32 weights (+ training-mode statistics)
    torch::Tensor scratch = torch::empty(
        {conv_bn_relu_scratch_floats((int)N, (int)Cin, (int)H, (int)W, (int)Cout, (int)KH,
                                     (int)KW, (int)padding[0], (int)padding[1], training ? 1 : 0,
                                     (int)config)},
        x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = conv_bn_relu_launcher(
        out.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(), bias_ptr,
        gamma.data_ptr<float>(), beta.data_ptr<float>(), running_mean.data_ptr<float>(),
        running_var.data_ptr<float>(), nbt, scratch.data_ptr<float>(),
        training ? 1 : 0, static_cast<float>(eps), static_cast<float>(momentum), (int)N,
        (int)Cin, (int)H, (int)W, (int)Cout, (int)KH, (int)KW, (int)padding[0],
        (int)padding[1], static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "conv_bn_relu: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_conv_bn_relu(pybind11::module_ &m)
{
    m.def("conv_bn_relu_forward", &conv_bn_relu_forward,
          "y = relu(batchnorm(conv2d(x))) (float32 in/out, TF32 tensor cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"),
          pybind11::arg("gamma"), pybind11::arg("beta"), pybind11::arg("running_mean"),
          pybind11::arg("running_var"), pybind11::arg("num_batches_tracked"),
          pybind11::arg("stride"), pybind11::arg("padding"), pybind11::arg("dilation"),
          pybind11::arg("groups"), pybind11::arg("training"), pybind11::arg("momentum"),
          pybind11::arg("eps"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(conv_bn_relu, register_conv_bn_relu);
