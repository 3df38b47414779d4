// CPU emulation test of depthwise_conv_bn_hardswish/kernels/dw_bn_hswish.cu against a double
// reference: eval-mode BatchNorm (running statistics) through the float4 and the scalar kernel,
// and training mode (batch statistics + running-statistics update), over odd sizes and tails.
#include "emu.h"
inline double __shfl_xor_sync(unsigned, double v, int o)
{
    WarpX &w = mywarp(); int l = threadIdx.x & 31;
    memcpy(&w.u[l][0], &v, 8); w.bar->arrive_and_wait();
    double r; memcpy(&r, &w.u[l ^ o][0], 8); w.bar->arrive_and_wait(); return r;
}
#include "dw.inc"
#include <random>

static double hsw(double v) { return v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0; }

int main()
{
    std::mt19937 rng(5); std::normal_distribution<float> nd; std::uniform_real_distribution<float> ud(0, 1);
    int fails = 0;
    struct S { int N, C, H, W; } sizes[] = {{2, 3, 5, 8}, {1, 2, 9, 12}, {2, 3, 7, 5}, {1, 2, 3, 4}, {1, 1, 17, 3}, {3, 2, 1, 1}};
    for (auto sz : sizes) {
        const int N = sz.N, C = sz.C, H = sz.H, W = sz.W; const long long HW = (long long)H * W;
        std::vector<float> x(N * C * HW), w(C * 9), g(C), b(C), rm(C), rv(C), out(x.size());
        for (auto &v : x) v = nd(rng) * 3;
        for (auto &v : w) v = nd(rng) * 0.4f;
        for (int c = 0; c < C; ++c) { g[c] = 0.5f + ud(rng); b[c] = ud(rng) - 0.5f; rm[c] = nd(rng) * 0.3f; rv[c] = 0.2f + ud(rng) * 2; }
        const float eps = 1e-5f, mom = 0.1f;
        std::vector<double> conv(x.size());
        for (int n = 0; n < N; ++n) for (int c = 0; c < C; ++c) for (int h = 0; h < H; ++h) for (int q = 0; q < W; ++q) {
            double s = 0;
            for (int a = 0; a < 3; ++a) for (int e = 0; e < 3; ++e) {
                int hh = h + a - 1, ww = q + e - 1;
                if (hh >= 0 && hh < H && ww >= 0 && ww < W) s += (double)x[((n * C + c) * H + hh) * W + ww] * w[c * 9 + a * 3 + e];
            }
            conv[((n * C + c) * H + h) * W + q] = s;
        }
        auto check = [&](const char *what, const std::vector<double> &mean, const std::vector<double> &var) {
            double worst = 0; long bad = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                int c = (i / HW) % C;
                double ref = hsw((conv[i] - mean[c]) / sqrt(var[c] + eps) * g[c] + b[c]), e = fabs(out[i] - ref);
                worst = std::max(worst, e); bad += !(e <= 1e-4 + 1e-4 * fabs(ref));
            }
            printf("dw N=%d C=%d H=%d W=%d %-12s bad=%ld max|err|=%.2g\n", N, C, H, W, what, bad, worst);
            fails += bad != 0;
        };
        // eval mode, float4 and scalar kernels
        std::vector<double> m0(rm.begin(), rm.end()), v0(rv.begin(), rv.end());
        for (int V : {4, 1}) {
            if (V == 4 && W % 4) continue;
            std::fill(out.begin(), out.end(), NAN);
            long long items = (long long)N * C * ((H + DW_ROWS - 1) / DW_ROWS) * (W / V);
            emu_launch(dim3((items + DW_THREADS - 1) / DW_THREADS), dim3(DW_THREADS), 0, [&] {
                if (V == 4) dw_bn_hswish_kernel<4, DW_ROWS>(out.data(), x.data(), w.data(), g.data(), b.data(), rm.data(), rv.data(), nullptr, eps, N, C, H, W);
                else dw_bn_hswish_kernel<1, DW_ROWS>(out.data(), x.data(), w.data(), g.data(), b.data(), rm.data(), rv.data(), nullptr, eps, N, C, H, W); });
            check(V == 4 ? "eval float4" : "eval scalar", m0, v0);
        }
        // training mode: stats -> finalize -> main with scale/shift
        std::vector<double> part(2 * N * C); std::vector<float> ss(2 * C);
        std::vector<float> rm2 = rm, rv2 = rv; long long nbt = 7;
        const int V = W % 4 ? 1 : 4;
        emu_launch(dim3(N * C), dim3(DW_THREADS), 0, [&] {
            if (V == 4) dw_stats_kernel<4, DW_ROWS>(part.data(), x.data(), w.data(), C, H, W);
            else dw_stats_kernel<1, DW_ROWS>(part.data(), x.data(), w.data(), C, H, W); });
        emu_launch(dim3(1), dim3(DW_THREADS), 0, [&] {
            dw_finalize_kernel(ss.data(), rm2.data(), rv2.data(), &nbt, part.data(), g.data(), b.data(), eps, mom, N, C, HW); });
        std::fill(out.begin(), out.end(), NAN);
        long long items = (long long)N * C * ((H + DW_ROWS - 1) / DW_ROWS) * (W / V);
        emu_launch(dim3((items + DW_THREADS - 1) / DW_THREADS), dim3(DW_THREADS), 0, [&] {
            if (V == 4) dw_bn_hswish_kernel<4, DW_ROWS>(out.data(), x.data(), w.data(), g.data(), b.data(), rm.data(), rv.data(), ss.data(), eps, N, C, H, W);
            else dw_bn_hswish_kernel<1, DW_ROWS>(out.data(), x.data(), w.data(), g.data(), b.data(), rm.data(), rv.data(), ss.data(), eps, N, C, H, W); });
        std::vector<double> bm(C, 0), bv(C, 0);
        const double cnt = (double)N * HW;
        for (size_t i = 0; i < x.size(); ++i) bm[(i / HW) % C] += conv[i] / cnt;
        for (size_t i = 0; i < x.size(); ++i) { double d = conv[i] - bm[(i / HW) % C]; bv[(i / HW) % C] += d * d / cnt; }
        check("train", bm, bv);
        double rerr = 0;
        for (int c = 0; c < C; ++c) {
            double um = 0.9 * rm[c] + 0.1 * bm[c], uv = 0.9 * rv[c] + 0.1 * (cnt > 1 ? bv[c] * cnt / (cnt - 1) : bv[c]);
            rerr = std::max({rerr, fabs(rm2[c] - um), fabs(rv2[c] - uv)});
        }
        bool rok = rerr < 1e-5 && nbt == 8;
        printf("dw N=%d C=%d H=%d W=%d running stats: max|err|=%.2g nbt=%lld %s\n", N, C, H, W, rerr, nbt, rok ? "ok" : "BAD");
        fails += !rok;
    }
    return fails != 0;
}
