// L1-40 LayerNorm: partial + stats + apply kernels (vector and scalar) against double precision,
// with a chunk count that leaves a partial last chunk, D % 4 != 0 for the scalar path, and an
// offset mean (cancellation check).
#include "emu.h"
#include "l1_40.inc"
#include <random>

int main()
{
    std::mt19937 rng(40);
    std::normal_distribution<float> nd;
    int bad = 0;
    struct Case { int rows; long long D; bool vec; float offset; };
    for (Case c : {Case{3, LN_CHUNK * 2 + 4 * 37, true, 0.5f}, Case{2, 5 * LN_CHUNK / 4 + 3, false, 0.f},
                   Case{4, 4 * 33, true, 100.f}, Case{2, LN_CHUNK, true, -3.f}}) {
        const long long n = c.rows * c.D, chunks = (c.D + LN_CHUNK - 1) / LN_CHUNK;
        std::vector<float> x(n), w(c.D), b(c.D), y(n, NAN), scratch(c.rows * chunks * 2 + c.rows * 2);
        for (auto &v : x) v = nd(rng) * 1.5f + c.offset;
        for (auto &v : w) v = 1.f + 0.3f * nd(rng);
        for (auto &v : b) v = 0.2f * nd(rng);
        const float eps = 1e-5f;
        float *partial = scratch.data(), *stats = scratch.data() + c.rows * chunks * 2;
        emu_launch(dim3((unsigned)chunks, (unsigned)c.rows), dim3(LN_THREADS), 0, [&] {
            if (c.vec) ln_partial_kernel<true>(partial, x.data(), c.D); else ln_partial_kernel<false>(partial, x.data(), c.D); });
        emu_launch(dim3((unsigned)c.rows), dim3(64), 0, [&] { ln_stats_kernel(stats, partial, (int)chunks, c.D, eps); });
        const long long per = (long long)LN_THREADS * LN_APPLY_V * 4;
        emu_launch(dim3((unsigned)((c.D + per - 1) / per)), dim3(LN_THREADS), 0, [&] {
            if (c.vec) ln_apply_kernel<true>(y.data(), x.data(), w.data(), b.data(), stats, c.rows, c.D);
            else ln_apply_kernel<false>(y.data(), x.data(), w.data(), b.data(), stats, c.rows, c.D); });
        double worst = 0; long long nb = 0;
        for (int r = 0; r < c.rows; ++r) {
            double m = 0, v = 0;
            for (long long j = 0; j < c.D; ++j) m += x[r * c.D + j];
            m /= c.D;
            for (long long j = 0; j < c.D; ++j) { double d = x[r * c.D + j] - m; v += d * d; }
            v /= c.D;
            for (long long j = 0; j < c.D; ++j) {
                double ref = (x[r * c.D + j] - m) / sqrt(v + eps) * w[j] + b[j], e = fabs(y[r * c.D + j] - ref);
                worst = std::max(worst, e); nb += !(e <= 1e-4 + 1e-4 * fabs(ref));
            }
        }
        printf("L1-40 rows=%d D=%lld %s offset=%g: bad=%lld max|err|=%.2g\n", c.rows, c.D, c.vec ? "vec" : "scalar", c.offset, nb, worst);
        bad += nb != 0;
    }
    return bad != 0;
}
