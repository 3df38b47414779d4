// scale_shift_binding.cpp: checks the tensors, allocates the output, calls scale_shift_cpu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" void scale_shift_cpu(float *y, const float *x, const float *w, const float *b,
                                int64_t rows, int64_t dim);

static torch::Tensor scale_shift_forward(const torch::Tensor &x, const torch::Tensor &w,
                                         const torch::Tensor &b)
{
    TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu() && b.device().is_cpu(),
                "scale_shift: CPU tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&
                    b.scalar_type() == torch::kFloat32,
                "scale_shift: float32 only");
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(),
                "scale_shift: contiguous tensors only");
    TORCH_CHECK(x.dim() >= 1 && w.dim() == 1 && b.dim() == 1 && w.size(0) == x.size(-1) &&
                    b.size(0) == x.size(-1),
                "scale_shift: w and b must match x's last dimension");
    const int64_t dim = x.size(-1);
    const int64_t rows = dim ? x.numel() / dim : 0;
    torch::Tensor y = torch::empty_like(x);
    scale_shift_cpu(y.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                    b.data_ptr<float>(), rows, dim);
    return y;
}

static void register_scale_shift(pybind11::module_ &m)
{
    m.def("scale_shift_forward", &scale_shift_forward,
          "clamp(x * w + b, -1, 1) * 0.5 in one pass (CPU)");
}

REGISTER_BINDING(scale_shift, register_scale_shift);
