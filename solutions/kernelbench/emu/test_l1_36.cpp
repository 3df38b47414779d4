// L1-36 RMSNorm across dim 1: register kernels (every MAXC bound) and the generic kernel
// against double precision, with odd spatial sizes and channel counts below each bound.
#include "emu.h"
#include "l1_36.inc"
#include <random>

int main()
{
    std::mt19937 rng(36);
    std::normal_distribution<float> nd;
    int bad = 0;
    struct Case { long long B; int C; long long S; };
    for (Case cs : {Case{2, 3, 37}, Case{3, 16, 40}, Case{2, 29, 65}, Case{2, 64, 33}, Case{1, 70, 45}}) {
        const long long B = cs.B, S = cs.S; const int C = cs.C;
        const long long n = B * C * S, positions = B * S;
        std::vector<float> x(n), y(n);
        for (auto &v : x) v = nd(rng) * 2.f + 0.3f;
        const float eps = 1e-5f;
        for (int path = 0; path < 2; ++path) {
            if (path == 0 && C > 64) continue;
            std::fill(y.begin(), y.end(), NAN);
            const unsigned gb = (unsigned)((positions + RMS_THREADS - 1) / RMS_THREADS);
            emu_launch(dim3(gb), dim3(RMS_THREADS), 0, [&] {
                if (path == 1) rms_dim1_generic_kernel(y.data(), x.data(), C, S, positions, eps);
                else if (C <= 8) rms_dim1_reg_kernel<8>(y.data(), x.data(), C, S, positions, eps);
                else if (C <= 16) rms_dim1_reg_kernel<16>(y.data(), x.data(), C, S, positions, eps);
                else if (C <= 32) rms_dim1_reg_kernel<32>(y.data(), x.data(), C, S, positions, eps);
                else rms_dim1_reg_kernel<64>(y.data(), x.data(), C, S, positions, eps);
            });
            double worst = 0; int b = 0;
            for (long long bb = 0; bb < B; ++bb)
                for (long long s = 0; s < S; ++s) {
                    double ss = 0;
                    for (int c = 0; c < C; ++c) { double v = x[(bb * C + c) * S + s]; ss += v * v; }
                    double rms = sqrt(ss / C + eps);
                    for (int c = 0; c < C; ++c) {
                        long long i = (bb * C + c) * S + s;
                        double ref = x[i] / rms, e = fabs(y[i] - ref);
                        worst = std::max(worst, e); b += !(e <= 1e-5 + 1e-5 * fabs(ref));
                    }
                }
            printf("L1-36 B=%lld C=%d S=%lld %s: bad=%d max|err|=%.2g\n", B, C, S, path ? "generic" : "reg", b, worst);
            bad += b;
        }
    }
    return bad != 0;
}
