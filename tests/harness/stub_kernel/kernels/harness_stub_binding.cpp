// harness_stub_binding.cpp: the binding of harness_stub.cpp (see there).
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" void harness_stub_copy_cpu(float *out, const float *x, int64_t n);

static torch::Tensor harness_stub_copy(const torch::Tensor &x)
{
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
                "harness_stub_copy: contiguous float32 CPU tensors only");
    torch::Tensor out = torch::empty_like(x);
    harness_stub_copy_cpu(out.data_ptr<float>(), x.data_ptr<float>(), x.numel());
    return out;
}

static void register_harness_stub(pybind11::module_ &m)
{
    m.def("harness_stub_copy", &harness_stub_copy, "out = x (test stub, CPU)");
}

REGISTER_BINDING(harness_stub, register_harness_stub);
