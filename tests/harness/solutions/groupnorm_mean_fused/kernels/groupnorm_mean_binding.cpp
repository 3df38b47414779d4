// groupnorm_mean_binding.cpp: checks the tensors, allocates the output, calls groupnorm_mean_cpu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" void groupnorm_mean_cpu(float *out, const float *x, const float *w, const float *b,
                                   int64_t batch, int64_t channels, int64_t groups, int64_t length,
                                   double eps);

static torch::Tensor groupnorm_mean_forward(const torch::Tensor &x, const torch::Tensor &w,
                                            const torch::Tensor &b, int64_t groups, double eps)
{
    TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu() && b.device().is_cpu(),
                "groupnorm_mean: CPU tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&
                    b.scalar_type() == torch::kFloat32,
                "groupnorm_mean: float32 only");
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(),
                "groupnorm_mean: contiguous tensors only");
    TORCH_CHECK(x.dim() == 3, "groupnorm_mean: x must be [batch, channels, length]");
    const int64_t channels = x.size(1);
    TORCH_CHECK(groups > 0 && channels % groups == 0, "groupnorm_mean: groups must divide channels");
    TORCH_CHECK(w.dim() == 1 && b.dim() == 1 && w.size(0) == channels && b.size(0) == channels,
                "groupnorm_mean: w and b must have one value per channel");
    torch::Tensor out = torch::empty({x.size(0)}, x.options());
    groupnorm_mean_cpu(out.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                       b.data_ptr<float>(), x.size(0), channels, groups, x.size(2), eps);
    return out;
}

static void register_groupnorm_mean(pybind11::module_ &m)
{
    m.def("groupnorm_mean_forward", &groupnorm_mean_forward,
          "mean over (C, L) of GroupNorm(x) in one pass (CPU)");
}

REGISTER_BINDING(groupnorm_mean, register_groupnorm_mean);
