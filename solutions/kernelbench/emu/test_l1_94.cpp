// L1-94 MSE: partial + final kernels (vector and scalar variants, several grid sizes, odd n)
// against a double-precision sum.
#include "emu.h"
#include "l1_94.inc"
#include <random>

int main()
{
    std::mt19937 rng(94);
    std::normal_distribution<float> nd;
    int bad = 0;
    for (long long n : {1LL, 5LL, 4099LL, 70001LL}) {
        std::vector<float> p(n), t(n), part(MSE_MAX_BLOCKS);
        float sc = 0.3f + (rng() % 100) / 50.f;
        for (long long i = 0; i < n; ++i) { p[i] = nd(rng) * sc; t[i] = nd(rng) + 0.5f; }
        double ref = 0;
        for (long long i = 0; i < n; ++i) ref += ((double)p[i] - t[i]) * ((double)p[i] - t[i]);
        ref /= n;
        for (int vec = 0; vec < 2; ++vec)
            for (int blocks : {1, 3, 7}) {
                float out = NAN;
                if (vec) emu_launch(dim3(blocks), dim3(MSE_THREADS / 4), 0, [&] { mse_partial_kernel<true>(part.data(), p.data(), t.data(), n); });
                else emu_launch(dim3(blocks), dim3(MSE_THREADS / 4), 0, [&] { mse_partial_kernel<false>(part.data(), p.data(), t.data(), n); });
                emu_launch(dim3(1), dim3(64), 0, [&] { mse_final_kernel(&out, part.data(), blocks, n); });
                double e = fabs(out - ref) / ref;
                bool ok = e < 1e-5;
                bad += !ok;
                if (!ok || blocks == 3) printf("L1-94 n=%lld %s blocks=%d: got %.7g want %.7g rel.err %.2g %s\n", n, vec ? "vec" : "scalar", blocks, out, ref, e, ok ? "ok" : "BAD");
            }
    }
    return bad != 0;
}
