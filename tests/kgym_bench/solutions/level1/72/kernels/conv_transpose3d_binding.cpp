// conv_transpose3d_binding.cpp: checks the tensors, computes the output size, allocates the
// output, calls conv_transpose3d_cpu.
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

struct Conv3dShape {
    int64_t N, Cin, D, H, W;
    int64_t Cout, KD, KH, KW;
    int64_t SD, SH, SW;
    int64_t PD, PH, PW;
    int64_t OD, OH, OW;
    int64_t groups;
};

extern "C" void conv_transpose3d_cpu(float *out, const float *x, const float *w,
                                     const Conv3dShape *s);

static torch::Tensor conv_transpose3d_forward(const torch::Tensor &x, const torch::Tensor &w,
                                              std::vector<int64_t> stride,
                                              std::vector<int64_t> padding,
                                              std::vector<int64_t> output_padding, int64_t groups)
{
    TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "conv_transpose3d: CPU tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32,
                "conv_transpose3d: float32 only");
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "conv_transpose3d: contiguous only");
    TORCH_CHECK(x.dim() == 5 && w.dim() == 5 && stride.size() == 3 && padding.size() == 3 &&
                    output_padding.size() == 3 && groups > 0 && x.size(1) == w.size(0) &&
                    x.size(1) % groups == 0,
                "conv_transpose3d: bad shapes or arguments");
    Conv3dShape s;
    s.N = x.size(0), s.Cin = x.size(1), s.D = x.size(2), s.H = x.size(3), s.W = x.size(4);
    s.Cout = w.size(1) * groups, s.KD = w.size(2), s.KH = w.size(3), s.KW = w.size(4);
    s.SD = stride[0], s.SH = stride[1], s.SW = stride[2];
    s.PD = padding[0], s.PH = padding[1], s.PW = padding[2];
    s.OD = (s.D - 1) * s.SD - 2 * s.PD + s.KD + output_padding[0];
    s.OH = (s.H - 1) * s.SH - 2 * s.PH + s.KH + output_padding[1];
    s.OW = (s.W - 1) * s.SW - 2 * s.PW + s.KW + output_padding[2];
    s.groups = groups;
    torch::Tensor out = torch::empty({s.N, s.Cout, s.OD, s.OH, s.OW}, x.options());
    conv_transpose3d_cpu(out.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(), &s);
    return out;
}

static void register_conv_transpose3d(pybind11::module_ &m)
{
    m.def("conv_transpose3d_forward", &conv_transpose3d_forward,
          "grouped ConvTranspose3d without bias, as a gather (CPU)");
}

REGISTER_BINDING(conv_transpose3d, register_conv_transpose3d);
