// diag_scale_binding.cpp: checks the tensors, allocates the output, calls diag_scale_cpu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" void diag_scale_cpu(float *out, const float *a, const float *b, int64_t n, int64_t m);

static torch::Tensor diag_scale_forward(const torch::Tensor &a, const torch::Tensor &b)
{
    TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "diag_scale: CPU tensors only");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "diag_scale: float32 only");
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && b.size(0) == a.size(0), "diag_scale: shapes");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "diag_scale: contiguous tensors only");
    torch::Tensor out = torch::empty({b.size(0), b.size(1)}, b.options());
    diag_scale_cpu(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), b.size(0),
                   b.size(1));
    return out;
}

static void register_diag_scale(pybind11::module_ &m)
{
    m.def("diag_scale_forward", &diag_scale_forward, "diag(a) @ b as a row scaling (CPU)");
}

REGISTER_BINDING(diag_scale, register_diag_scale);
