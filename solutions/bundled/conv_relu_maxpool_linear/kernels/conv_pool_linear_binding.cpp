// conv_pool_linear_binding.cpp: checks, output and scratch allocation and launch of
// conv_pool_linear.cu (fused TF32 conv + bias + ReLU + max-pool, then a split-K 3xTF32 Linear
// with a deterministic split reduction + bias) on the current stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" int conv_relu_maxpool_linear_splits(int M, int N, int K, int config);
extern "C" cudaError_t
conv_relu_maxpool_linear_launcher(float *out, float *feat, float *part, const float *x,
                                  const float *conv_w, const float *conv_b, const float *fc_w,
                                  const float *fc_b, int N, int Cin, int H, int W, int Cout, int P,
                                  int classes, int splits, int config, cudaStream_t stream);

static void check_f32(const torch::Tensor &t, const torch::Tensor &x, const char *name)
{
    TORCH_CHECK(t.is_cuda() && t.device() == x.device(), "conv_relu_maxpool_linear: ", name,
                " must be a CUDA tensor on x's device");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32 && t.is_contiguous(),
                "conv_relu_maxpool_linear: ", name, " must be contiguous float32");
}

// x [N, Cin, H, W]; conv_w [Cout, Cin, 3, 3] (padding 1, stride 1); conv_b [Cout];
// max-pool `pool` x `pool` (stride pool, floor); fc_w [classes, Cout * (H / pool) * (W / pool)];
// fc_b [classes]. Returns logits [N, classes].
static torch::Tensor
conv_relu_maxpool_linear_forward(const torch::Tensor &x, const torch::Tensor &conv_w,
                                 const torch::Tensor &conv_b, const torch::Tensor &fc_w,
                                 const torch::Tensor &fc_b, int64_t pool, int64_t config)
{
    check_f32(x, x, "x");
    check_f32(conv_w, x, "conv weight");
    check_f32(conv_b, x, "conv bias");
    check_f32(fc_w, x, "linear weight");
    check_f32(fc_b, x, "linear bias");
    TORCH_CHECK(x.dim() == 4, "conv_relu_maxpool_linear: x must be [N, Cin, H, W]");
    const int64_t N = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
    TORCH_CHECK(conv_w.dim() == 4 && conv_w.size(1) == Cin && conv_w.size(2) == 3 &&
                    conv_w.size(3) == 3,
                "conv_relu_maxpool_linear: conv weight must be [Cout, Cin, 3, 3]");
    const int64_t Cout = conv_w.size(0);
    TORCH_CHECK(conv_b.dim() == 1 && conv_b.size(0) == Cout,
                "conv_relu_maxpool_linear: conv bias must be [Cout]");
    TORCH_CHECK(pool >= 1 && H >= pool && W >= pool,
                "conv_relu_maxpool_linear: pool must be in [1, min(H, W)]");
    const int64_t PH = H / pool, PW = W / pool, K = Cout * PH * PW;
    TORCH_CHECK(fc_w.dim() == 2 && fc_w.size(1) == K,
                "conv_relu_maxpool_linear: linear weight must be [classes, Cout * PH * PW]");
    const int64_t classes = fc_w.size(0);
    TORCH_CHECK(fc_b.dim() == 1 && fc_b.size(0) == classes,
                "conv_relu_maxpool_linear: linear bias must be [classes]");
    TORCH_CHECK(N <= INT32_MAX && Cin <= INT32_MAX && H <= INT32_MAX && W <= INT32_MAX &&
                    Cout <= INT32_MAX && K <= INT32_MAX && classes <= INT32_MAX,
                "conv_relu_maxpool_linear: dimensions too large");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty({N, classes}, x.options());
    if (out.numel() == 0)
        return out;
    TORCH_CHECK(Cin > 0 && Cout > 0, "conv_relu_maxpool_linear: empty channel dimension");
    const int splits =
        conv_relu_maxpool_linear_splits(static_cast<int>(N), static_cast<int>(classes),
                                        static_cast<int>(K), static_cast<int>(config));
    torch::Tensor feat = torch::empty({N, Cout, PH, PW}, x.options());
    torch::Tensor part = torch::empty({static_cast<int64_t>(splits), N, classes}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    const cudaError_t err = conv_relu_maxpool_linear_launcher(
        out.data_ptr<float>(), feat.data_ptr<float>(), part.data_ptr<float>(), x.data_ptr<float>(),
        conv_w.data_ptr<float>(), conv_b.data_ptr<float>(), fc_w.data_ptr<float>(),
        fc_b.data_ptr<float>(), static_cast<int>(N), static_cast<int>(Cin), static_cast<int>(H),
        static_cast<int>(W), static_cast<int>(Cout), static_cast<int>(pool),
        static_cast<int>(classes), splits, static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess,
                "conv_relu_maxpool_linear: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_conv_relu_maxpool_linear(pybind11::module_ &m)
{
    m.def("conv_relu_maxpool_linear_forward", &conv_relu_maxpool_linear_forward,
          "logits = linear(flatten(maxpool(relu(conv3x3(x) + b)))) (float32, tensor cores, CUDA)",
          pybind11::arg("x"), pybind11::arg("conv_weight"), pybind11::arg("conv_bias"),
          pybind11::arg("fc_weight"), pybind11::arg("fc_bias"), pybind11::arg("pool"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING(conv_relu_maxpool_linear, register_conv_relu_maxpool_linear);
