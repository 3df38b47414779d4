// diag_naive_binding.cpp: checks the tensors, allocates the output and the N x N scratch matrix,
// calls diag_naive_cpu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" void diag_naive_cpu(float *out, float *d, const float *a, const float *b, int64_t n,
                               int64_t m);

static torch::Tensor diag_naive_forward(const torch::Tensor &a, const torch::Tensor &b)
{
    TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "diag_naive: CPU tensors only");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "diag_naive: float32 only");
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && b.size(0) == a.size(0), "diag_naive: shapes");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "diag_naive: contiguous tensors only");
    const int64_t n = b.size(0), m = b.size(1);
    torch::Tensor out = torch::empty({n, m}, b.options());
    torch::Tensor d = torch::empty({n, n}, b.options());
    diag_naive_cpu(out.data_ptr<float>(), d.data_ptr<float>(), a.data_ptr<float>(),
                   b.data_ptr<float>(), n, m);
    return out;
}

static void register_diag_naive(pybind11::module_ &m)
{
    m.def("diag_naive_forward", &diag_naive_forward, "diag(a) @ b by a naive triple loop (CPU)");
}

REGISTER_BINDING(diag_naive, register_diag_naive);
