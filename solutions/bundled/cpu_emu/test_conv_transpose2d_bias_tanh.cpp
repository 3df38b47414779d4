// CPU emulation test of conv_transpose2d_bias_tanh/kernels/deconv_tanh.cu: the weight re-layout
// + sub-pixel TF32 implicit-GEMM kernel (compared with a scatter-form reference on TF32-rounded
// operands, tight tolerance) and the direct gather kernel for other ConvTranspose2d settings
// (plain FP64 reference), over channel / row / column / output-channel tails.
// usage: test_conv_transpose2d_bias_tanh N Cin Hi Wi Cout K stride pad outpad tc|direct
#include "emu.h"
struct uint2 { uint32_t x, y; }; // CUDA's vector type, for the 64-bit B fragment loads
#include "dt.inc"
#include <random>
#include <string>

int main(int argc, char **argv)
{
    if (argc < 11) { fprintf(stderr, "usage: N Cin Hi Wi Cout K stride pad outpad tc|direct\n"); return 2; }
    const int N = atoi(argv[1]), Cin = atoi(argv[2]), Hi = atoi(argv[3]), Wi = atoi(argv[4]), Cout = atoi(argv[5]);
    const int K = atoi(argv[6]), S = atoi(argv[7]), P = atoi(argv[8]), OP = atoi(argv[9]);
    const bool tc = std::string(argv[10]) == "tc";
    const int Ho = (Hi - 1) * S - 2 * P + K - 1 + OP + 1, Wo = (Wi - 1) * S - 2 * P + K - 1 + OP + 1;
    std::mt19937 rng(13); std::normal_distribution<float> nd; std::uniform_real_distribution<float> ud(0, 1);
    std::vector<float> x((size_t)N * Cin * Hi * Wi), w((size_t)Cin * Cout * K * K), bias(Cout), bias2(Cout);
    for (auto &v : x) v = nd(rng) * 2;
    for (auto &v : w) v = (ud(rng) * 2 - 1) * 1.5f / sqrtf((float)Cin * 4);
    for (auto &v : bias) v = nd(rng) * 0.5f;
    for (auto &v : bias2) v = nd(rng) * 0.1f;
    const long long total = (long long)N * Cout * Ho * Wo;
    auto rnd = [&](float v) { return tc ? (double)u2f(emu_tf32(v)) : (double)v; };
    std::vector<double> ref(total, 0.0);
    for (int n = 0; n < N; ++n) for (int ci = 0; ci < Cin; ++ci) for (int ih = 0; ih < Hi; ++ih) for (int iw = 0; iw < Wi; ++iw)
        for (int co = 0; co < Cout; ++co) for (int kh = 0; kh < K; ++kh) for (int kw = 0; kw < K; ++kw) {
            int oh = ih * S - P + kh, ow = iw * S - P + kw;
            if (oh < 0 || oh >= Ho || ow < 0 || ow >= Wo) continue;
            ref[((size_t)(n * Cout + co) * Ho + oh) * Wo + ow] += rnd(x[((size_t)(n * Cin + ci) * Hi + ih) * Wi + iw]) * rnd(w[((size_t)(ci * Cout + co) * K + kh) * K + kw]);
        }
    for (long long i = 0; i < total; ++i) ref[i] = tanh(ref[i] + bias[(i / ((long long)Ho * Wo)) % Cout] + bias2[(i / ((long long)Ho * Wo)) % Cout]);
    std::vector<float> out(total, NAN);
    if (tc) {
        if (!deconv_fast_path(x.data(), Wi, K, K, S, S, P, P, OP, OP, 0)) { printf("shape not for the tc path\n"); return 2; }
        const int CoutP = deconv_coutp(Cout), KT = (Cin + DT_KC - 1) / DT_KC;
        std::vector<uint32_t> wt(deconv_tanh_scratch_words(Cin, Cout), 0xffffffffu);
        emu_launch(dim3((unsigned)((wt.size() + 255) / 256)), dim3(256), 0, [&] { deconv_prep_kernel(wt.data(), w.data(), Cin, Cout, KT, (long long)wt.size()); });
        unsigned blocks = (unsigned)((long long)N * ((Hi + DT_TI - 1) / DT_TI) * ((Wi + DT_TJ - 1) / DT_TJ) * (CoutP / DT_BN));
        emu_launch(dim3(blocks), dim3(DT_THREADS), DT_SMEM_BYTES, [&] { deconv_tanh_tc_kernel(out.data(), x.data(), wt.data(), bias.data(), bias2.data(), N, Cin, Hi, Wi, Cout, CoutP); });
    } else {
        emu_launch(dim3((unsigned)((total + 255) / 256)), dim3(256), 0, [&] { deconv_direct_kernel(out.data(), x.data(), w.data(), bias.data(), bias2.data(), N, Cin, Hi, Wi, Cout, Ho, Wo, K, K, S, S, P, P); });
    }
    double worst = 0; long bad = 0;
    for (long long i = 0; i < total; ++i) { double e = fabs(out[i] - ref[i]); worst = std::max(worst, e); bad += !(e <= 2e-5 + 2e-5 * fabs(ref[i])); }
    printf("deconv_tanh N=%d Cin=%d Hi=%d Wi=%d Cout=%d K=%d s=%d p=%d op=%d %s%s: out %dx%d bad=%ld max|err|=%.2g\n", N, Cin, Hi, Wi, Cout, K, S, P, OP,
           tc ? "tc" : "direct", emu_cp_early() ? " cp-early" : "", Ho, Wo, bad, worst);
    return bad != 0;
}
