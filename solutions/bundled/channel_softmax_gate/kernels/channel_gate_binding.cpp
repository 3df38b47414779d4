// channel_gate_binding.cpp: checks, allocation of the output and of the kernels' scratch (means,
// gates, counters: all written by the kernels before they are read), launch on the current
// stream.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" int channel_gate_splits(long long hw);
extern "C" cudaError_t channel_gate_launcher(float *out, const float *x, float *scratch,
                                             int *sync, int B, int C, long long hw,
                                             float temperature, int config, cudaStream_t stream);

static torch::Tensor channel_gate_forward(const torch::Tensor &x, double temperature,
                                          int64_t config)
{
    TORCH_CHECK(x.is_cuda(), "channel_gate: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "channel_gate: float32 only");
    TORCH_CHECK(x.is_contiguous(), "channel_gate: x must be contiguous");
    TORCH_CHECK(x.dim() == 4, "channel_gate: x must be [B, C, H, W]");
    TORCH_CHECK(temperature != 0.0, "channel_gate: temperature must be non-zero");
    const int64_t B = x.size(0), C = x.size(1), hw = x.size(2) * x.size(3);
    TORCH_CHECK(B <= INT32_MAX / 4 && C <= INT32_MAX / 4 && 2 * B * C <= INT32_MAX,
                "channel_gate: too many images x channels");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    if (out.numel() == 0)
        return out;
    // partial sums (B * C * splits) and gates (B * C); written by the kernels before being read
    const int64_t splits = channel_gate_splits(hw);
    TORCH_CHECK(2 * B * C * splits <= INT32_MAX, "channel_gate: too many work items");
    torch::Tensor scratch = torch::empty({B * C * (splits + 1)}, x.options());
    torch::Tensor sync = torch::empty({1 + 2 * B}, x.options().dtype(torch::kInt32));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaError_t err = channel_gate_launcher(
        out.data_ptr<float>(), x.data_ptr<float>(), scratch.data_ptr<float>(),
        sync.data_ptr<int>(), static_cast<int>(B), static_cast<int>(C), hw,
        static_cast<float>(temperature), static_cast<int>(config), stream);
    TORCH_CHECK(err == cudaSuccess, "channel_gate: kernel launch failed: ",
                cudaGetErrorString(err));
    return out;
}

static void register_channel_gate(pybind11::module_ &m)
{
    m.def("channel_gate_forward", &channel_gate_forward,
          "y = x * C * softmax_c(mean_hw(x) / T) (float32 NCHW, CUDA). config 0: fused "
          "persistent kernel; 1: pool, softmax and scale kernels",
          pybind11::arg("x"), pybind11::arg("temperature"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(channel_gate, register_channel_gate);
