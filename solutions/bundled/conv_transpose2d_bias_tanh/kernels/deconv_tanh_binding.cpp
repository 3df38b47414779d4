// deconv_tanh_binding.cpp: checks, output and scratch allocation and launch of deconv_tanh.cu
// (sub-pixel TF32 implicit GEMM for the stride-2 transposed convolution, bias + tanh fused) on
// the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" long long deconv_tanh_scratch_words(int Cin, int Cout);
extern "C" cudaError_t deconv_tanh_launcher(float *out, const float *x, const float *w,
                                            const float *bias, const float *bias2,
                                            void *scratch, int N, int Cin, int Hi, int Wi,
                                            int Cout, int Ho, int Wo, int KH, int KW, int sh,
                                            int sw, int ph, int pw, int oph, int opw, int config,
                                            cudaStream_t stream);

static const float *opt_vec(const c10::optional<torch::Tensor> &t, const torch::Tensor &x,
                            int64_t C, const char *name)
{
    if (!t.has_value() || !t->defined())
        return nullptr;
    TORCH_CHECK(t->is_cuda() && t->device() == x.device() && t->scalar_type() == torch::kFloat32 &&
                    t->is_contiguous() && t->numel() == C,
                "deconv_tanh: ", name, " must be a contiguous float32 CUDA tensor of Cout values");
    return t->data_ptr<float>();
}

// y = tanh(conv_transpose2d(x, weight, deconv_bias) + bias): x [N, Cin, Hi, Wi], weight
// [Cin, Cout, KH, KW] (groups 1, dilation 1), deconv_bias [Cout] or None, bias [Cout] (any shape
// with Cout elements, e.g. [Cout, 1, 1]) or None.
static torch::Tensor deconv_tanh_forward(const torch::Tensor &x, const torch::Tensor &weight,
                                         const c10::optional<torch::Tensor> &deconv_bias,
                                         const c10::optional<torch::Tensor> &bias,
                                         std::vector<int64_t> stride, std::vector<int64_t> padding,
                                         std::vector<int64_t> output_padding,
                                         std::vector<int64_t> dilation, int64_t groups,
                                         int64_t config)
{
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && weight.device() == x.device(),
                "deconv_tanh: x and weight must be CUDA tensors on one device");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                    x.is_contiguous() && weight.is_contiguous(),
                "deconv_tanh: contiguous float32 x and weight only");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4, "deconv_tanh: x [N, Cin, H, W], weight 4-d");
    TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && output_padding.size() == 2 &&
                    dilation.size() == 2,
                "deconv_tanh: 2-d stride / padding / output_padding / dilation expected");
    TORCH_CHECK(groups == 1 && dilation[0] == 1 && dilation[1] == 1,
                "deconv_tanh: only groups 1 and dilation 1 are supported");
    TORCH_CHECK(stride[0] >= 1 && stride[1] >= 1 && padding[0] >= 0 && padding[1] >= 0 &&
                    output_padding[0] >= 0 && output_padding[1] >= 0,
                "deconv_tanh: bad stride / padding");
    const int64_t N = x.size(0), Cin = x.size(1), Hi = x.size(2), Wi = x.size(3);
    TORCH_CHECK(weight.size(0) == Cin, "deconv_tanh: weight must be [Cin, Cout, KH, KW]");
    const int64_t Cout = weight.size(1), KH = weight.size(2), KW = weight.size(3);
    const int64_t Ho = (Hi - 1) * stride[0] - 2 * padding[0] + (KH - 1) + output_padding[0] + 1;
    const int64_t Wo = (Wi - 1) * stride[1] - 2 * padding[1] + (KW - 1) + output_padding[1] + 1;
    TORCH_CHECK(Ho > 0 && Wo > 0, "deconv_tanh: empty output");
    TORCH_CHECK(N <= INT32_MAX && Cin <= INT32_MAX && Ho <= INT32_MAX && Wo <= INT32_MAX &&
                    Cout <= INT32_MAX,
                "deconv_tanh: dimensions too large");
    const float *b1 = opt_vec(deconv_bias, x, Cout, "deconv bias");
    const float *b2 = opt_vec(bias, x, Cout, "bias");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty({N, Cout, Ho, Wo}, x.options());
    // re-laid TF32 weights of the fast path (32-bit words)
    torch::Tensor scratch =
        torch::empty({deconv_tanh_scratch_words((int)Cin, (int)Cout)}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = deconv_tanh_launcher(
        out.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(), b1, b2,
        scratch.data_ptr(), (int)N, (int)Cin, (int)Hi, (int)Wi, (int)Cout, (int)Ho, (int)Wo,
        (int)KH, (int)KW, (int)stride[0], (int)stride[1], (int)padding[0], (int)padding[1],
        (int)output_padding[0], (int)output_padding[1], static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "deconv_tanh: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_deconv_tanh(pybind11::module_ &m)
{
    m.def("deconv_tanh_forward", &deconv_tanh_forward,
          "y = tanh(conv_transpose2d(x) + bias) (float32 in/out, TF32 tensor cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("deconv_bias"),
          pybind11::arg("bias"), pybind11::arg("stride"), pybind11::arg("padding"),
          pybind11::arg("output_padding"), pybind11::arg("dilation"), pybind11::arg("groups"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(deconv_tanh, register_deconv_tanh);
