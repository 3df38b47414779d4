// L1-88 MinGPT new GELU: float4 and scalar kernels against a double-precision reference, on
// mixed-sign inputs over a wide range (the tanh saturates at both ends) and odd sizes.
#include "emu.h"
#include "l1_88.inc"
#include <random>

int main()
{
    std::mt19937 rng(88);
    std::normal_distribution<float> nd;
    int bad = 0;
    for (long long n : {1LL, 3LL, 4LL, 1027LL, 4096LL + 7}) {
        std::vector<float> x(n), y(n, NAN);
        for (auto &v : x) v = nd(rng) * 4.f;
        if (n > 10) { x[0] = 0.f; x[1] = -30.f; x[2] = 30.f; x[3] = -3.5f; }
        for (int path = 0; path < 2; ++path) {
            std::fill(y.begin(), y.end(), NAN);
            long long done = 0;
            if (path == 0) {
                long long n4 = n / 4, per = VEC_THREADS * VEC_PER_THREAD;
                if (n4 > 0)
                    emu_launch(dim3((unsigned)((n4 + per - 1) / per)), dim3(VEC_THREADS), 0, [&] {
                        new_gelu_vec_kernel((float4 *)y.data(), (const float4 *)x.data(), n4); });
                done = n4 * 4;
            }
            if (done < n)
                emu_launch(dim3(2), dim3(64), 0, [&] { new_gelu_scalar_kernel(y.data(), x.data(), done, n); });
            double worst = 0;
            int b = 0;
            for (long long i = 0; i < n; ++i) {
                double v = x[i];
                double ref = 0.5 * v * (1 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
                double e = fabs(y[i] - ref);
                worst = std::max(worst, e);
                b += !(e <= 1e-5 + 1e-5 * fabs(ref));
            }
            printf("L1-88 n=%lld %s: bad=%d max|err|=%.2g\n", n, path ? "scalar" : "vec", b, worst);
            bad += b;
        }
    }
    return bad != 0;
}
