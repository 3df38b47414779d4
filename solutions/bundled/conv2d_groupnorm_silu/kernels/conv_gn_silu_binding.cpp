// conv_gn_silu_binding.cpp: checks, output and scratch allocation and launch of conv_gn_silu.cu
// (implicit-GEMM TF32 conv with bias + statistics epilogue, GroupNorm finalize, SiLU pass) on
// the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" long long conv_gn_silu_scratch_floats(int N, int Cin, int H, int W, int Cout, int KH,
                                                 int KW, int ph, int pw, int config);
extern "C" cudaError_t conv_gn_silu_launcher(float *out, const float *x, const float *w,
                                             const float *bias, const float *gamma,
                                             const float *beta, float *scratch, float eps, int G,
                                             int N, int Cin, int H, int W, int Cout, int KH,
                                             int KW, int ph, int pw, int config,
                                             cudaStream_t stream);

static void check_f32(const torch::Tensor &t, const torch::Tensor &x, const char *name)
{
    TORCH_CHECK(t.is_cuda() && t.device() == x.device(), "conv_gn_silu: ", name,
                " must be a CUDA tensor on x's device");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32 && t.is_contiguous(), "conv_gn_silu: ", name,
                " must be contiguous float32");
}

// x [N, Cin, H, W]; weight [Cout, Cin, KH, KW]; bias [Cout] or None; GroupNorm weight / bias
// [Cout] (None: the identity affine is not supported); stride, dilation, groups 1 and 'same'
// zero padding, as the module's attributes say.
static torch::Tensor conv_gn_silu_forward(const torch::Tensor &x, const torch::Tensor &weight,
                                          const c10::optional<torch::Tensor> &bias,
                                          const torch::Tensor &gamma, const torch::Tensor &beta,
                                          int64_t num_groups, double eps,
                                          std::vector<int64_t> stride,
                                          std::vector<int64_t> padding,
                                          std::vector<int64_t> dilation, int64_t groups,
                                          int64_t config)
{
    check_f32(x, x, "x");
    check_f32(weight, x, "weight");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4, "conv_gn_silu: x [N, Cin, H, W], weight 4-d");
    TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
                "conv_gn_silu: 2-d stride / padding / dilation expected");
    TORCH_CHECK(stride[0] == 1 && stride[1] == 1 && dilation[0] == 1 && dilation[1] == 1 &&
                    groups == 1,
                "conv_gn_silu: only stride 1, dilation 1, groups 1 are supported");
    const int64_t N = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    TORCH_CHECK(weight.size(1) == Cin, "conv_gn_silu: weight / x channel mismatch");
    TORCH_CHECK(KH == 2 * padding[0] + 1 && KW == 2 * padding[1] + 1,
                "conv_gn_silu: only 'same' convolutions (odd kernel, padding = kernel // 2)");
    TORCH_CHECK(num_groups > 0 && Cout % num_groups == 0,
                "conv_gn_silu: Cout must be a multiple of num_groups");
    const float *bias_ptr = nullptr;
    if (bias.has_value() && bias->defined()) {
        check_f32(*bias, x, "conv bias");
        TORCH_CHECK(bias->numel() == Cout, "conv_gn_silu: conv bias must be [Cout]");
        bias_ptr = bias->data_ptr<float>();
    }
    check_f32(gamma, x, "GroupNorm weight");
    check_f32(beta, x, "GroupNorm bias");
    TORCH_CHECK(gamma.numel() == Cout && beta.numel() == Cout,
                "conv_gn_silu: GroupNorm affine must be [Cout]");
    TORCH_CHECK(N <= INT32_MAX && Cin <= INT32_MAX && H <= INT32_MAX && W <= INT32_MAX &&
                    Cout <= INT32_MAX && N * Cout <= INT32_MAX && N * num_groups <= INT32_MAX,
                "conv_gn_silu: dimensions too large");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty({N, Cout, H, W}, x.options());
    torch::Tensor scratch =
        torch::empty({conv_gn_silu_scratch_floats((int)N, (int)Cin, (int)H, (int)W, (int)Cout,
                                                  (int)KH, (int)KW, (int)padding[0],
                                                  (int)padding[1], (int)config)},
                     x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = conv_gn_silu_launcher(
        out.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(), bias_ptr,
        gamma.data_ptr<float>(), beta.data_ptr<float>(), scratch.data_ptr<float>(),
        static_cast<float>(eps), (int)num_groups, (int)N, (int)Cin, (int)H, (int)W, (int)Cout,
        (int)KH, (int)KW, (int)padding[0], (int)padding[1], static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "conv_gn_silu: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_conv_gn_silu(pybind11::module_ &m)
{
    m.def("conv_gn_silu_forward", &conv_gn_silu_forward,
          "y = silu(group_norm(conv2d(x) + bias)) (float32 in/out, TF32 tensor cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"),
          pybind11::arg("gamma"), pybind11::arg("beta"), pybind11::arg("num_groups"),
          pybind11::arg("eps"), pybind11::arg("stride"), pybind11::arg("padding"),
          pybind11::arg("dilation"), pybind11::arg("groups"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(conv_gn_silu, register_conv_gn_silu);
