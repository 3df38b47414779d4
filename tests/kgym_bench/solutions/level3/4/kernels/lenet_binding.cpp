// lenet_binding.cpp: checks the tensors, allocates the output and the per-block scratch, calls
// lenet5_cpu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

extern "C" int lenet5_cpu(float *out, const float *x, int64_t batch, const float *w1,
                          const float *b1, const float *w2, const float *b2, const float *fw1,
                          const float *fb1, const float *fw2, const float *fb2, const float *fw3,
                          const float *fb3, int64_t h1, int64_t h2, int64_t nc,
                          void *block_scratch);
extern "C" int64_t lenet_block_bytes();

static void check(const torch::Tensor &t, std::initializer_list<int64_t> shape, const char *name)
{
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous(),
                "lenet5: ", name, " must be a contiguous float32 CPU tensor");
    TORCH_CHECK(t.sizes() == torch::IntArrayRef(shape), "lenet5: ", name, " has shape ",
                t.sizes(), ", expected ", torch::IntArrayRef(shape));
}

static torch::Tensor lenet5_forward(const torch::Tensor &x, const torch::Tensor &w1,
                                    const torch::Tensor &b1, const torch::Tensor &w2,
                                    const torch::Tensor &b2, const torch::Tensor &fw1,
                                    const torch::Tensor &fb1, const torch::Tensor &fw2,
                                    const torch::Tensor &fb2, const torch::Tensor &fw3,
                                    const torch::Tensor &fb3)
{
    TORCH_CHECK(x.dim() == 4, "lenet5: x must be (batch, 1, 32, 32)");
    const int64_t batch = x.size(0), h1 = fw1.size(0), h2 = fw2.size(0), nc = fw3.size(0);
    check(x, {batch, 1, 32, 32}, "x");
    check(w1, {6, 1, 5, 5}, "conv1.weight");
    check(b1, {6}, "conv1.bias");
    check(w2, {16, 6, 5, 5}, "conv2.weight");
    check(b2, {16}, "conv2.bias");
    check(fw1, {h1, 400}, "fc1.weight");
    check(fb1, {h1}, "fc1.bias");
    check(fw2, {h2, h1}, "fc2.weight");
    check(fb2, {h2}, "fc2.bias");
    check(fw3, {nc, h2}, "fc3.weight");
    check(fb3, {nc}, "fc3.bias");
    torch::Tensor out = torch::empty({batch, nc}, x.options());
    torch::Tensor scratch = torch::empty({lenet_block_bytes()}, x.options().dtype(torch::kUInt8));
    const int rc = lenet5_cpu(out.data_ptr<float>(), x.data_ptr<float>(), batch,
                              w1.data_ptr<float>(), b1.data_ptr<float>(), w2.data_ptr<float>(),
                              b2.data_ptr<float>(), fw1.data_ptr<float>(), fb1.data_ptr<float>(),
                              fw2.data_ptr<float>(), fb2.data_ptr<float>(), fw3.data_ptr<float>(),
                              fb3.data_ptr<float>(), h1, h2, nc, scratch.data_ptr<uint8_t>());
    TORCH_CHECK(rc == 0, "lenet5: fc widths must be 1..256");
    return out;
}

static void register_lenet(pybind11::module_ &m)
{
    m.def("lenet5_forward", &lenet5_forward,
          "LeNet-5 forward, 8 images per SIMD vector, all layers fused per block (CPU, float32)");
}

REGISTER_BINDING(lenet, register_lenet);
