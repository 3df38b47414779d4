// mish_binding.cpp: checks the tensor, allocates the output, calls mish_cpu. No computation.
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" void mish_cpu(float *y, const float *x, int64_t n);

static torch::Tensor mish_forward(const torch::Tensor &x)
{
    TORCH_CHECK(x.device().is_cpu(), "mish: CPU tensors only (this is the CPU example)");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "mish: float32 only");
    TORCH_CHECK(x.is_contiguous(), "mish: contiguous tensors only");
    torch::Tensor y = torch::empty_like(x);
    mish_cpu(y.data_ptr<float>(), x.data_ptr<float>(), x.numel());
    return y;
}

static void register_mish(pybind11::module_ &m)
{
    m.def("mish_forward", &mish_forward, "y = x * tanh(softplus(x)) (float32, CPU)");
}

REGISTER_BINDING(mish, register_mish);
