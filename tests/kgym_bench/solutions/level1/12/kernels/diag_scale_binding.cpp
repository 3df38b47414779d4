// diag_scale_binding.cpp: checks the tensors, allocates the output (zeroed), calls
// diag_scale_cpu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" void diag_scale_cpu(float *out, const float *A, const float *B, int64_t N, int64_t M);

static torch::Tensor diag_scale_forward(const torch::Tensor &A, const torch::Tensor &B)
{
    TORCH_CHECK(A.device().is_cpu() && B.device().is_cpu(), "diag_scale: CPU tensors only");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32,
                "diag_scale: float32 only");
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "diag_scale: contiguous tensors only");
    TORCH_CHECK(A.dim() == 1 && B.dim() == 2 && B.size(0) == A.size(0),
                "diag_scale: A must be (N,) and B (N, M)");
    const int64_t N = B.size(0), M = B.size(1);
    torch::Tensor out = torch::zeros({N, M}, B.options());
    diag_scale_cpu(out.data_ptr<float>(), A.data_ptr<float>(), B.data_ptr<float>(), N, M);
    return out;
}

static void register_diag_scale(pybind11::module_ &m)
{
    m.def("diag_scale_forward", &diag_scale_forward,
          "diag(A) @ B as a row scaling (with an off-by-one: the last row is left zero)");
}

REGISTER_BINDING(diag_scale, register_diag_scale);
