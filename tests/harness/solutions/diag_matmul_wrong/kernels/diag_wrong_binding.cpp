// diag_wrong_binding.cpp: checks the tensors, allocates the output, calls diag_wrong_cpu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" void diag_wrong_cpu(float *out, const float *a, const float *b, int64_t n, int64_t m);

static torch::Tensor diag_wrong_forward(const torch::Tensor &a, const torch::Tensor &b)
{
    TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "diag_wrong: CPU tensors only");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "diag_wrong: float32 only");
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && b.size(0) == a.size(0) && b.size(1) == a.size(0),
                "diag_wrong: shapes");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "diag_wrong: contiguous tensors only");
    torch::Tensor out = torch::empty({b.size(0), b.size(1)}, b.options());
    diag_wrong_cpu(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), b.size(0),
                   b.size(1));
    return out;
}

static void register_diag_wrong(pybind11::module_ &m)
{
    m.def("diag_wrong_forward", &diag_wrong_forward, "b @ diag(a): the transposed bug (CPU)");
}

REGISTER_BINDING(diag_wrong, register_diag_wrong);
