// CPU emulation test of conv2d_groupnorm_silu/kernels/conv_gn_silu.cu: TF32 implicit-GEMM conv
// with the bias + statistics epilogue (both tile widths), GroupNorm finalize and the SiLU pass,
// and the direct fallback, against double references (for the tensor-core path: TF32-rounded
// operands, as the emulated mma computes; tight tolerance), over tails in
// every dimension and groups straddling channel tiles.
// usage: test_conv2d_groupnorm_silu N Cin H W Cout G K tc|direct
#include "emu.h"
inline double __shfl_xor_sync(unsigned, double v, int o)
{
    WarpX &w = mywarp(); int l = threadIdx.x & 31;
    memcpy(&w.u[l][0], &v, 8); w.bar->arrive_and_wait();
    double r; memcpy(&r, &w.u[l ^ o][0], 8); w.bar->arrive_and_wait(); return r;
}
struct uint2 { uint32_t x, y; }; // CUDA's vector type, for the 64-bit B fragment loads
#include "gn.inc"
#include <random>
#include <string>

int main(int argc, char **argv)
{
    if (argc < 9) { fprintf(stderr, "usage: N Cin H W Cout G K tc|direct\n"); return 2; }
    const int N = atoi(argv[1]), Cin = atoi(argv[2]), H = atoi(argv[3]), W = atoi(argv[4]), Cout = atoi(argv[5]);
    const int G = atoi(argv[6]), K = atoi(argv[7]);
    const bool tc = std::string(argv[8]) == "tc";
    const int pad = K / 2, cpg = Cout / G;
    std::mt19937 rng(17); std::normal_distribution<float> nd; std::uniform_real_distribution<float> ud(0, 1);
    std::vector<float> x((size_t)N * Cin * H * W), w((size_t)Cout * Cin * K * K), bias(Cout), g(Cout), b(Cout);
    for (auto &v : x) v = nd(rng) * 2;
    for (auto &v : w) v = (ud(rng) * 2 - 1) / sqrtf((float)Cin * K * K);
    for (int c = 0; c < Cout; ++c) { bias[c] = nd(rng) * 0.3f; g[c] = 0.5f + ud(rng); b[c] = ud(rng) - 0.5f; }
    const float eps = 1e-5f;
    const long long HW = (long long)H * W, total = (long long)N * Cout * HW;
    auto rnd = [&](float v) { return tc ? (double)u2f(emu_tf32(v)) : (double)v; };
    std::vector<double> conv(total);
    for (int n = 0; n < N; ++n) for (int co = 0; co < Cout; ++co) for (int h = 0; h < H; ++h) for (int q = 0; q < W; ++q) {
        double s = bias[co];
        for (int ci = 0; ci < Cin; ++ci) for (int kh = 0; kh < K; ++kh) for (int kw = 0; kw < K; ++kw) {
            int ih = h + kh - pad, iw = q + kw - pad;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                s += rnd(x[((size_t)(n * Cin + ci) * H + ih) * W + iw]) * rnd(w[((size_t)(co * Cin + ci) * K + kh) * K + kw]);
        }
        conv[((size_t)(n * Cout + co) * H + h) * W + q] = s;
    }
    std::vector<double> ref(total);
    for (int n = 0; n < N; ++n) for (int gi = 0; gi < G; ++gi) {
        double m = 0, v = 0; const double cnt = (double)cpg * HW;
        const size_t base = ((size_t)n * Cout + gi * cpg) * HW;
        for (size_t i = 0; i < (size_t)(cpg * HW); ++i) m += conv[base + i] / cnt;
        for (size_t i = 0; i < (size_t)(cpg * HW); ++i) v += (conv[base + i] - m) * (conv[base + i] - m) / cnt;
        for (size_t i = 0; i < (size_t)(cpg * HW); ++i) {
            int c = gi * cpg + (int)(i / HW);
            double y = (conv[base + i] - m) / sqrt(v + eps) * g[c] + b[c];
            ref[base + i] = y / (1 + exp(-y));
        }
    }
    if (tc && !fast_path(x.data(), W, K, K, pad, pad, 0)) { printf("shape not for the tc path\n"); return 2; }
    std::vector<float> out(total, NAN), scratch(conv_gn_silu_scratch_floats(N, Cin, H, W, Cout, K, K, pad, pad, tc ? 0 : 1), NAN);
    const long long tpi = tiles_per_image(H, W, tc);
    // laid out as the launcher does: [re-laid weights][partials][per-plane affine]
    float2 *part = reinterpret_cast<float2 *>(scratch.data() + (tc ? prep_words(Cin, Cout) : 0)), *ab = part + N * tpi * Cout;
    const int TW = tile_w(W);
    if (tc) {
        uint32_t *wp = reinterpret_cast<uint32_t *>(scratch.data());
        const long long words = prep_words(Cin, Cout);
        emu_launch(dim3((unsigned)((words + 255) / 256)), dim3(256), 0, [&] { conv_prep_kernel(wp, w.data(), Cin, Cout, (Cin + CB_KC - 1) / CB_KC, words); });
        unsigned blocks = (unsigned)(N * tpi * ((Cout + CB_BN - 1) / CB_BN));
        emu_launch(dim3(blocks), dim3(CB_THREADS), TW == 128 ? ConvCfg<128>::SMEM_BYTES : ConvCfg<64>::SMEM_BYTES, [&] {
            if (TW == 128) conv3x3_tc_kernel<128>(out.data(), part, x.data(), wp, bias.data(), N, Cin, H, W, Cout);
            else conv3x3_tc_kernel<64>(out.data(), part, x.data(), wp, bias.data(), N, Cin, H, W, Cout); });
    } else {
        emu_launch(dim3((unsigned)((total + 255) / 256)), dim3(256), 0, [&] { conv_direct_kernel(out.data(), x.data(), w.data(), bias.data(), N, Cin, H, W, Cout, K, K, pad, pad); });
        emu_launch(dim3(N * Cout), dim3(256), 0, [&] { plane_stats_kernel(part, out.data(), HW); });
    }
    int fails = 0;
    {
        double worst = 0; long bad = 0;
        for (long long i = 0; i < total; ++i) { double e = fabs(out[i] - conv[i]); worst = std::max(worst, e); bad += !(e <= 1e-4 + 1e-4 * fabs(conv[i])); }
        printf("  raw conv + bias: bad=%ld max|err|=%.2g\n", bad, worst); fails += bad != 0;
    }
    emu_launch(dim3(N * G), dim3(256), 0, [&] { gn_finalize_kernel(ab, part, g.data(), b.data(), eps, Cout, G, (int)tpi, (double)cpg * HW); });
    if (HW % 4 == 0) emu_launch(dim3((unsigned)((total / 4 + 255) / 256)), dim3(256), 0, [&] { gn_apply_silu_kernel<4>(out.data(), ab, HW, total / 4); });
    else emu_launch(dim3((unsigned)((total + 255) / 256)), dim3(256), 0, [&] { gn_apply_silu_kernel<1>(out.data(), ab, HW, total); });
    double worst = 0; long bad = 0;
    for (long long i = 0; i < total; ++i) { double e = fabs(out[i] - ref[i]); worst = std::max(worst, e); bad += !(e <= 2e-4 + 2e-4 * fabs(ref[i])); }
    printf("conv_gn_silu N=%d Cin=%d H=%d W=%d Cout=%d G=%d K=%d %s%s: bad=%ld max|err|=%.2g\n", N, Cin, H, W, Cout, G, K,
           tc ? (TW == 128 ? "tc(TW=128)" : "tc(TW=64)") : "direct", emu_cp_early() ? " cp-early" : "", bad, worst);
    fails += bad != 0;
    return fails != 0;
}
