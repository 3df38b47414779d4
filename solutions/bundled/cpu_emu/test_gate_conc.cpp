#include "emu.h"
#include "gate_conc.inc"
#include <random>
int main(int argc, char **argv)
{
    int B = atoi(argv[1]), C = atoi(argv[2]), grid = atoi(argv[4]); long long hw = atoll(argv[3]);
    std::mt19937 rng(5); std::normal_distribution<float> nd;
    long long planes = (long long)B * C, n = planes * hw;
    std::vector<float> x(n), o(n, NAN);
    for (long long p = 0; p < planes; ++p) { float off = 2 * nd(rng); for (long long i = 0; i < hw; ++i) x[p * hw + i] = nd(rng) + off; }
    float T = 2.f; std::vector<double> ref(n);
    for (int b = 0; b < B; ++b) {
        std::vector<double> m(C); double mx = -1e300, sum = 0;
        for (int c = 0; c < C; ++c) { double a = 0; for (long long i = 0; i < hw; ++i) a += x[(b * C + c) * hw + i]; m[c] = a / hw / T; mx = std::max(mx, m[c]); }
        for (int c = 0; c < C; ++c) sum += exp(m[c] - mx);
        for (int c = 0; c < C; ++c) for (long long i = 0; i < hw; ++i) { long long k = (b * C + c) * hw + i; ref[k] = x[k] * C * exp(m[c] - mx) / sum; }
    }
    int splits = (int)std::min<long long>(1024, std::max<long long>(1, (hw + CHUNK_FLOATS - 1) / CHUNK_FLOATS));
    long long chunk = (hw + splits - 1) / splits; chunk = (chunk + 3) / 4 * 4;
    std::vector<float> scratch(planes * (splits + 1), NAN);
    std::vector<int> sync(1 + 2 * B, 777);
    for (auto &v : sync) v = 0;
    float *partials = scratch.data(), *gates = scratch.data() + planes * splits;
    emu_launch_concurrent(dim3(grid), dim3(GATE_THREADS), [&] { if (hw % 4 == 0) gate_fused_kernel<true>(o.data(), x.data(), partials, gates, sync.data(), B, C, hw, splits, chunk, (float)(1.0 / hw), 1.f / T, (float)C);
        else gate_fused_kernel<false>(o.data(), x.data(), partials, gates, sync.data(), B, C, hw, splits, chunk, (float)(1.0 / hw), 1.f / T, (float)C); });
    long bad = 0; double worst = 0;
    for (long long k = 0; k < n; ++k) { double e = fabs(o[k] - ref[k]); if (!(e <= 1e-4 + 1e-4 * fabs(ref[k]))) ++bad; if (e > worst || e != e) worst = e; }
    printf("concurrent gate B=%d C=%d hw=%lld grid=%d splits=%d: bad=%ld worst=%.2g ticket=%d (total %lld)\n", B, C, hw, grid, splits, bad, worst, sync[0], 2 * planes * splits);
    return bad != 0;
}
