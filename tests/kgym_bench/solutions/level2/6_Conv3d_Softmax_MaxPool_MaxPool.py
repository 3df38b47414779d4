"""KernelBench L2-6 (Conv3d -> softmax over channels -> MaxPool3d(2) -> MaxPool3d(2)), KernelBench
style: ModelNew's kernel comes from torch.utils.cpp_extension.load_inline (kgym extracts and
builds the sources itself).

One fused pass on the CPU. Two non-overlapping 2-pools are one 4x4x4 pool over the conv output
cropped to a multiple of 4, so only the conv positions that some output window reads are computed
(12x28x28 of 14x30x30 here); each window's 64 positions are convolved for all 16 channels at once
(a channel vector, 4 positions along W per register tile), softmaxed across the channels in
registers and max-reduced into the window's 16 outputs. Eager PyTorch writes the 103 MB conv
output, reads and writes it again for the softmax, then pools twice. AVX2+FMA when the CPU has
it (checked at run time), else a plain scalar loop. Same __init__ and parameters as Model.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

fused_cpp = r"""
#include <torch/extension.h>

#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CSP_X86 1
#endif

namespace csp {

struct Shape {
    int64_t N, C, D, H, W; // input
    int64_t O, K;          // output channels, cubic kernel size
    int64_t P;             // combined pool window (p1 * p2)
    int64_t PD, PH, PW;    // output size
};

// Plain version (any CPU, any channel count): out[n][o][pd][ph][pw].
static void fused_generic(const float *x, const float *w, const float *b, float *out,
                          const Shape &s)
{
    std::vector<float> v(s.O), best(s.O);
    const int64_t K = s.K;
    for (int64_t n = 0; n < s.N; n++)
        for (int64_t pd = 0; pd < s.PD; pd++)
            for (int64_t ph = 0; ph < s.PH; ph++)
                for (int64_t pw = 0; pw < s.PW; pw++) {
                    for (int64_t o = 0; o < s.O; o++)
                        best[o] = -INFINITY;
                    for (int64_t dz = 0; dz < s.P; dz++)
                        for (int64_t dy = 0; dy < s.P; dy++)
                            for (int64_t dx = 0; dx < s.P; dx++) {
                                const int64_t od = pd * s.P + dz, oh = ph * s.P + dy,
                                              ow = pw * s.P + dx;
                                float mx = -INFINITY;
                                for (int64_t o = 0; o < s.O; o++) {
                                    float acc = b[o];
                                    for (int64_t c = 0; c < s.C; c++)
                                        for (int64_t kd = 0; kd < K; kd++)
                                            for (int64_t kh = 0; kh < K; kh++)
                                                for (int64_t kw = 0; kw < K; kw++)
                                                    acc += w[(((o * s.C + c) * K + kd) * K + kh) * K + kw] *
                                                           x[(((n * s.C + c) * s.D + od + kd) * s.H + oh + kh) * s.W + ow + kw];
                                    v[o] = acc;
                                    mx = acc > mx ? acc : mx;
                                }
                                float sum = 0.0f;
                                for (int64_t o = 0; o < s.O; o++) {
                                    v[o] = std::exp(v[o] - mx);
                                    sum += v[o];
                                }
                                for (int64_t o = 0; o < s.O; o++) {
                                    const float p = v[o] / sum;
                                    best[o] = p > best[o] ? p : best[o];
                                }
                            }
                    for (int64_t o = 0; o < s.O; o++)
                        out[(((n * s.O + o) * s.PD + pd) * s.PH + ph) * s.PW + pw] = best[o];
                }
}

#ifdef CSP_X86
// exp for x <= 0 (softmax arguments): 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], degree 6.
__attribute__((target("avx2,fma"))) static inline __m256 exp_neg(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma"))) static inline __m256 all_max(__m256 v)
{
    v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_max_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_max_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}

__attribute__((target("avx2,fma"))) static inline __m256 all_sum(__m256 v)
{
    v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_add_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_add_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}

// 16 output channels (two 8-lane halves), 3x3x3 kernel, pool window P a multiple of 4.
// wt: the weight as [c][kd][kh][kw][16 channels].
__attribute__((target("avx2,fma"))) static void fused_avx2(const float *x, const float *wt,
                                                           const float *b, float *out,
                                                           const Shape &s)
{
    const __m256 bias0 = _mm256_loadu_ps(b), bias1 = _mm256_loadu_ps(b + 8);
    const int64_t plane = s.H * s.W, vol = s.D * plane;
    for (int64_t n = 0; n < s.N; n++) {
        const float *xn = x + n * s.C * vol;
        for (int64_t pd = 0; pd < s.PD; pd++)
            for (int64_t ph = 0; ph < s.PH; ph++)
                for (int64_t pw = 0; pw < s.PW; pw++) {
                    __m256 best0 = _mm256_set1_ps(-INFINITY), best1 = best0;
                    for (int64_t dz = 0; dz < s.P; dz++)
                        for (int64_t dy = 0; dy < s.P; dy++)
                            for (int64_t dx = 0; dx < s.P; dx += 4) {
                                const int64_t od = pd * s.P + dz, oh = ph * s.P + dy,
                                              ow = pw * s.P + dx;
                                // conv at 4 positions along W, all 16 channels
                                __m256 a0[4], a1[4];
                                for (int j = 0; j < 4; j++) {
                                    a0[j] = bias0;
                                    a1[j] = bias1;
                                }
                                const float *wp = wt;
                                for (int64_t c = 0; c < s.C; c++)
                                    for (int64_t kd = 0; kd < 3; kd++)
                                        for (int64_t kh = 0; kh < 3; kh++) {
                                            const float *row = xn + c * vol + (od + kd) * plane +
                                                               (oh + kh) * s.W + ow;
                                            for (int64_t kw = 0; kw < 3; kw++, wp += 16) {
                                                const __m256 w0 = _mm256_loadu_ps(wp),
                                                             w1 = _mm256_loadu_ps(wp + 8);
                                                for (int j = 0; j < 4; j++) {
                                                    const __m256 xv = _mm256_broadcast_ss(row + j + kw);
                                                    a0[j] = _mm256_fmadd_ps(xv, w0, a0[j]);
                                                    a1[j] = _mm256_fmadd_ps(xv, w1, a1[j]);
                                                }
                                            }
                                        }
                                // softmax across the 16 channels of each position, then max
                                for (int j = 0; j < 4; j++) {
                                    const __m256 m = all_max(_mm256_max_ps(a0[j], a1[j]));
                                    const __m256 e0 = exp_neg(_mm256_sub_ps(a0[j], m));
                                    const __m256 e1 = exp_neg(_mm256_sub_ps(a1[j], m));
                                    const __m256 inv =
                                        _mm256_div_ps(_mm256_set1_ps(1.0f), all_sum(_mm256_add_ps(e0, e1)));
                                    best0 = _mm256_max_ps(best0, _mm256_mul_ps(e0, inv));
                                    best1 = _mm256_max_ps(best1, _mm256_mul_ps(e1, inv));
                                }
                            }
                    alignas(32) float r[16];
                    _mm256_store_ps(r, best0);
                    _mm256_store_ps(r + 8, best1);
                    const int64_t cell = (pd * s.PH + ph) * s.PW + pw, ostride = s.PD * s.PH * s.PW;
                    float *o = out + n * s.O * ostride + cell;
                    for (int64_t k = 0; k < 16; k++)
                        o[k * ostride] = r[k];
                }
    }
}

static bool has_avx2()
{
    static const bool yes = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return yes;
}
#endif

} // namespace csp

torch::Tensor conv3d_softmax_pool2_forward(torch::Tensor x, torch::Tensor weight,
                                           torch::Tensor bias, int64_t pool1, int64_t pool2)
{
    using namespace csp;
    TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu() && bias.device().is_cpu(),
                "conv3d_softmax_pool2: CPU tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                    bias.scalar_type() == torch::kFloat32,
                "conv3d_softmax_pool2: float32 only");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "conv3d_softmax_pool2: contiguous tensors only");
    TORCH_CHECK(x.dim() == 5 && weight.dim() == 5, "conv3d_softmax_pool2: 5-d input and weight");
    Shape s;
    s.N = x.size(0), s.C = x.size(1), s.D = x.size(2), s.H = x.size(3), s.W = x.size(4);
    s.O = weight.size(0), s.K = weight.size(2);
    TORCH_CHECK(weight.size(1) == s.C && weight.size(3) == s.K && weight.size(4) == s.K &&
                    bias.numel() == s.O,
                "conv3d_softmax_pool2: weight/bias shapes do not match the input");
    TORCH_CHECK(pool1 > 0 && pool2 > 0, "conv3d_softmax_pool2: pool sizes must be positive");
    TORCH_CHECK(s.D >= s.K && s.H >= s.K && s.W >= s.K, "conv3d_softmax_pool2: input too small");
    s.P = pool1 * pool2;
    // MaxPool3d(p) floors; two of them in a row floor twice: floor(floor(n / p1) / p2)
    s.PD = (s.D - s.K + 1) / pool1 / pool2;
    s.PH = (s.H - s.K + 1) / pool1 / pool2;
    s.PW = (s.W - s.K + 1) / pool1 / pool2;
    torch::Tensor out = torch::empty({s.N, s.O, s.PD, s.PH, s.PW}, x.options());
#ifdef CSP_X86
    if (has_avx2() && s.O == 16 && s.K == 3 && s.P % 4 == 0) {
        // the weight with the output channel innermost: [c][kd][kh][kw][16]
        torch::Tensor wt = torch::empty({s.C * 27 * 16}, x.options());
        const float *w = weight.data_ptr<float>();
        float *t = wt.data_ptr<float>();
        for (int64_t o = 0; o < 16; o++)
            for (int64_t i = 0; i < s.C * 27; i++)
                t[i * 16 + o] = w[o * s.C * 27 + i];
        fused_avx2(x.data_ptr<float>(), t, bias.data_ptr<float>(), out.data_ptr<float>(), s);
        return out;
    }
#endif
    fused_generic(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                  out.data_ptr<float>(), s);
    return out;
}
"""

fused_ext = load_inline(name="kb_l2_6_conv3d_softmax_pool", cpp_sources=fused_cpp,
                        functions=["conv3d_softmax_pool2_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.pool1 = nn.MaxPool3d(pool_kernel_size)
        self.pool2 = nn.MaxPool3d(pool_kernel_size)
        self.pool_kernel_size = pool_kernel_size

    def forward(self, x):
        return fused_ext.conv3d_softmax_pool2_forward(x.contiguous(), self.conv.weight,
                                                      self.conv.bias, self.pool_kernel_size,
                                                      self.pool_kernel_size)
