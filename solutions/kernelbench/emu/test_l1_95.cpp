// L1-95 cross-entropy: row kernel (vector and scalar) + mean kernel against double precision,
// including -inf logits, ignored rows (-100) and an out-of-range target (NaN expected).
#include "emu.h"
#include "l1_95.inc"
#include <random>

static double run_case(int rows, int C, bool vec, bool specials, std::mt19937 &rng, int &bad)
{
    std::normal_distribution<float> nd;
    std::vector<float> x((size_t)rows * C), scratch(2 * rows);
    std::vector<long long> tg(rows);
    for (auto &v : x) v = nd(rng) * 3.f;
    for (auto &t : tg) t = rng() % C;
    if (specials) {
        tg[1] = -100;                       // ignored
        for (int c = 0; c < C; c += 3) x[2 * (size_t)C + c] = -INFINITY; // -inf logits
        x[2 * (size_t)C + 1] = 50.f;
        tg[2] = 1;
    }
    float out = NAN;
    emu_launch(dim3(rows), dim3(CE_THREADS), 0, [&] {
        if (vec) ce_row_kernel<true>(scratch.data(), scratch.data() + rows, x.data(), tg.data(), C);
        else ce_row_kernel<false>(scratch.data(), scratch.data() + rows, x.data(), tg.data(), C);
    });
    emu_launch(dim3(1), dim3(128), 0, [&] { ce_mean_kernel(&out, scratch.data(), scratch.data() + rows, rows); });
    double tot = 0; int cnt = 0;
    for (int r = 0; r < rows; ++r) {
        if (tg[r] == -100) continue;
        double m = -INFINITY;
        for (int c = 0; c < C; ++c) m = std::max(m, (double)x[(size_t)r * C + c]);
        double s = 0;
        for (int c = 0; c < C; ++c) s += exp(x[(size_t)r * C + c] - m);
        tot += m + log(s) - x[(size_t)r * C + tg[r]]; ++cnt;
    }
    double ref = tot / cnt, e = fabs(out - ref);
    bool ok = e <= 1e-5 + 1e-5 * fabs(ref);
    printf("L1-95 rows=%d C=%d %s%s: got %.7g want %.7g %s\n", rows, C, vec ? "vec" : "scalar", specials ? " (specials)" : "", out, ref, ok ? "ok" : "BAD");
    bad += !ok;
    return out;
}

int main()
{
    std::mt19937 rng(95);
    int bad = 0;
    for (int vec = 0; vec < 2; ++vec) {
        run_case(5, 4096 / 8, vec, false, rng, bad);
        run_case(7, 1000, vec, true, rng, bad);
        run_case(3, 2052, vec, false, rng, bad);
        if (!vec) run_case(4, 37, vec, true, rng, bad);
    }
    { // out-of-range target: NaN
        std::vector<float> x(2 * 8, 0.5f), scratch(4); std::vector<long long> tg = {3, 9};
        float out = 0;
        emu_launch(dim3(2), dim3(CE_THREADS), 0, [&] { ce_row_kernel<true>(scratch.data(), scratch.data() + 2, x.data(), tg.data(), 8); });
        emu_launch(dim3(1), dim3(64), 0, [&] { ce_mean_kernel(&out, scratch.data(), scratch.data() + 2, 2); });
        printf("L1-95 out-of-range target: %g %s\n", out, std::isnan(out) ? "ok (NaN)" : "BAD");
        bad += !std::isnan(out);
    }
    return bad != 0;
}
