// CPU emulation test of conv2d_batchnorm_relu/kernels/conv_bn_relu.cu: the TF32 implicit-GEMM
// kernel (both tile widths, eval-mode epilogue and the training-mode raw + statistics epilogue
// with the finalize / apply kernels) and the direct fallback, against double references.
// The tensor-core results are compared with a reference built from TF32-rounded operands (tight
// tolerance: catches any indexing error), the direct kernel with the plain FP64 convolution.
// usage: test_conv2d_batchnorm_relu N Cin H W Cout K path(tc|direct) mode(eval|train)
#include "emu.h"
struct uint2 { uint32_t x, y; }; // CUDA's vector type, for the 64-bit B fragment loads
#include "cbr.inc"
#include <random>
#include <string>

int main(int argc, char **argv)
{
    if (argc < 9) { fprintf(stderr, "usage: N Cin H W Cout K tc|direct eval|train\n"); return 2; }
    const int N = atoi(argv[1]), Cin = atoi(argv[2]), H = atoi(argv[3]), W = atoi(argv[4]), Cout = atoi(argv[5]), K = atoi(argv[6]);
    const bool tc = std::string(argv[7]) == "tc", train = std::string(argv[8]) == "train";
    const int pad = K / 2;
    std::mt19937 rng(11); std::normal_distribution<float> nd; std::uniform_real_distribution<float> ud(0, 1);
    std::vector<float> x((size_t)N * Cin * H * W), w((size_t)Cout * Cin * K * K), g(Cout), b(Cout), rm(Cout), rv(Cout);
    for (auto &v : x) v = nd(rng) * 2;
    for (auto &v : w) v = (ud(rng) * 2 - 1) / sqrtf((float)Cin * K * K);
    for (int c = 0; c < Cout; ++c) { g[c] = 0.5f + ud(rng); b[c] = ud(rng) - 0.5f; rm[c] = nd(rng) * 0.2f; rv[c] = 0.3f + ud(rng); }
    const float eps = 1e-5f, mom = 0.1f;
    const long long HW = (long long)H * W, total = (long long)N * Cout * HW;
    std::vector<float> out(total, NAN);
    // reference conv (TF32-rounded operands for the tensor-core path)
    auto rnd = [&](float v) { return tc ? (double)u2f(emu_tf32(v)) : (double)v; };
    std::vector<double> conv(total, 0.0);
    for (int n = 0; n < N; ++n) for (int co = 0; co < Cout; ++co) for (int h = 0; h < H; ++h) for (int q = 0; q < W; ++q) {
        double s = 0;
        for (int ci = 0; ci < Cin; ++ci) for (int kh = 0; kh < K; ++kh) for (int kw = 0; kw < K; ++kw) {
            int ih = h + kh - pad, iw = q + kw - pad;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                s += rnd(x[((size_t)(n * Cin + ci) * H + ih) * W + iw]) * rnd(w[((size_t)(co * Cin + ci) * K + kh) * K + kw]);
        }
        conv[((size_t)(n * Cout + co) * H + h) * W + q] = s;
    }
    std::vector<double> mean(Cout), var(Cout);
    const double cnt = (double)N * HW;
    if (train) {
        for (long long i = 0; i < total; ++i) mean[(i / HW) % Cout] += conv[i] / cnt;
        for (long long i = 0; i < total; ++i) { double d = conv[i] - mean[(i / HW) % Cout]; var[(i / HW) % Cout] += d * d / cnt; }
    } else {
        for (int c = 0; c < Cout; ++c) { mean[c] = rm[c]; var[c] = rv[c]; }
    }
    std::vector<float> rm2 = rm, rv2 = rv; long long nbt = 3;
    const int TW = tile_w(W);
    if (tc && !fast_path(x.data(), W, K, K, pad, pad, 0)) { printf("shape not for the tc path\n"); return 2; }
    // scratch laid out as the launcher does: [re-laid weights][partials][scale/shift]
    std::vector<float> scratch(conv_bn_relu_scratch_floats(N, Cin, H, W, Cout, K, K, pad, pad, train, tc ? 0 : 1), NAN);
    float *tail = scratch.data() + (tc ? prep_words(Cin, Cout) : 0);
    float2 *part = reinterpret_cast<float2 *>(tail);
    const long long P = N * tiles_per_image(H, W, tc);
    if (tc) {
        uint32_t *wp = reinterpret_cast<uint32_t *>(scratch.data());
        const long long words = prep_words(Cin, Cout);
        emu_launch(dim3((unsigned)((words + 255) / 256)), dim3(256), 0, [&] { conv_prep_kernel(wp, w.data(), Cin, Cout, (Cin + CB_KC - 1) / CB_KC, words); });
        unsigned blocks = (unsigned)(P * ((Cout + CB_BN - 1) / CB_BN));
        int smem = TW == 128 ? ConvCfg<128>::SMEM_BYTES : ConvCfg<64>::SMEM_BYTES;
        emu_launch(dim3(blocks), dim3(CB_THREADS), smem, [&] {
            if (TW == 128) { if (train) conv3x3_tc_kernel<128, 1>(out.data(), part, x.data(), wp, nullptr, g.data(), b.data(), rm.data(), rv.data(), eps, N, Cin, H, W, Cout);
                             else conv3x3_tc_kernel<128, 0>(out.data(), part, x.data(), wp, nullptr, g.data(), b.data(), rm.data(), rv.data(), eps, N, Cin, H, W, Cout); }
            else { if (train) conv3x3_tc_kernel<64, 1>(out.data(), part, x.data(), wp, nullptr, g.data(), b.data(), rm.data(), rv.data(), eps, N, Cin, H, W, Cout);
                   else conv3x3_tc_kernel<64, 0>(out.data(), part, x.data(), wp, nullptr, g.data(), b.data(), rm.data(), rv.data(), eps, N, Cin, H, W, Cout); } });
    } else {
        emu_launch(dim3((unsigned)((total + 255) / 256)), dim3(256), 0, [&] {
            conv_direct_kernel(out.data(), x.data(), w.data(), nullptr, g.data(), b.data(), rm.data(), rv.data(), eps, N, Cin, H, W, Cout, K, K, pad, pad, train ? 1 : 0); });
        if (train) emu_launch(dim3(N * Cout), dim3(256), 0, [&] { plane_stats_kernel(part, out.data(), HW); });
    }
    int fails = 0;
    if (train) {
        // raw conv output first
        double worst = 0; long bad = 0;
        for (long long i = 0; i < total; ++i) { double e = fabs(out[i] - conv[i]); worst = std::max(worst, e); bad += !(e <= 1e-4 + 1e-4 * fabs(conv[i])); }
        printf("  raw conv: bad=%ld max|err|=%.2g\n", bad, worst); fails += bad != 0;
        float *ss = tail + 2 * P * Cout;
        emu_launch(dim3(1), dim3(256), 0, [&] { bn_finalize_kernel(ss, rm2.data(), rv2.data(), &nbt, part, g.data(), b.data(), eps, mom, (int)P, Cout, cnt); });
        if (HW % 4 == 0) emu_launch(dim3((unsigned)((total / 4 + 255) / 256)), dim3(256), 0, [&] { bn_apply_relu_kernel<4>(out.data(), ss, Cout, HW, total / 4); });
        else emu_launch(dim3((unsigned)((total + 255) / 256)), dim3(256), 0, [&] { bn_apply_relu_kernel<1>(out.data(), ss, Cout, HW, total); });
        double rerr = 0;
        for (int c = 0; c < Cout; ++c) {
            double um = 0.9 * rm[c] + 0.1 * mean[c], uv = 0.9 * rv[c] + 0.1 * var[c] * cnt / (cnt - 1);
            rerr = std::max({rerr, fabs(rm2[c] - um), fabs(rv2[c] - uv)});
        }
        bool rok = rerr < 1e-4 && nbt == 4;
        printf("  running stats: max|err|=%.2g nbt=%lld %s\n", rerr, nbt, rok ? "ok" : "BAD"); fails += !rok;
    }
    double worst = 0; long bad = 0;
    for (long long i = 0; i < total; ++i) {
        int c = (i / HW) % Cout;
        double ref = std::max((conv[i] - mean[c]) / sqrt(var[c] + eps) * g[c] + b[c], 0.0), e = fabs(out[i] - ref);
        worst = std::max(worst, e); bad += !(e <= 2e-4 + 2e-4 * fabs(ref));
    }
    printf("conv_bn_relu N=%d Cin=%d H=%d W=%d Cout=%d K=%d %s %s%s: bad=%ld max|err|=%.2g\n", N, Cin, H, W, Cout, K,
           tc ? (TW == 128 ? "tc(TW=128)" : "tc(TW=64)") : "direct", train ? "train" : "eval", emu_cp_early() ? " cp-early" : "", bad, worst);
    fails += bad != 0;
    return fails != 0;
}
