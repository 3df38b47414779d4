#include "emu.h"
namespace gate {
#include "gate.inc"
}
namespace mish {
#include "mish.inc"
}
#include <random>
using namespace gate;
int main()
{
    std::mt19937 rng(3); std::normal_distribution<float> nd;
    int bad_total = 0;
    struct S { int B, C; long long hw; };
    for (S s : {S{3, 5, 64}, S{2, 16, 8193}, S{2, 7, 16384}, S{1, 4, 6}, S{4, 3, 4100}, S{2, 2, 12}}) {
        long long planes = (long long)s.B * s.C, n = planes * s.hw;
        std::vector<float> x(n), o(n, NAN);
        for (long long p = 0; p < planes; ++p) { float off = 2 * nd(rng); for (long long i = 0; i < s.hw; ++i) x[p * s.hw + i] = nd(rng) + off; }
        float T = 2.f;
        std::vector<double> ref(n);
        for (int b = 0; b < s.B; ++b) {
            std::vector<double> m(s.C); double mx = -1e300, sum = 0;
            for (int c = 0; c < s.C; ++c) { double a = 0; for (long long i = 0; i < s.hw; ++i) a += x[(b * s.C + c) * s.hw + i]; m[c] = a / s.hw / T; mx = std::max(mx, m[c]); }
            for (int c = 0; c < s.C; ++c) sum += exp(m[c] - mx);
            for (int c = 0; c < s.C; ++c) for (long long i = 0; i < s.hw; ++i) { long long k = (b * s.C + c) * s.hw + i; ref[k] = x[k] * s.C * exp(m[c] - mx) / sum; }
        }
        bool vec = s.hw % 4 == 0;
        int splits = (int)std::min<long long>(1024, std::max<long long>(1, (s.hw + CHUNK_FLOATS - 1) / CHUNK_FLOATS));
        long long chunk = (s.hw + splits - 1) / splits; chunk = (chunk + 3) / 4 * 4;
        for (int cfg = 0; cfg < 2; ++cfg) {
            std::fill(o.begin(), o.end(), NAN);
            std::vector<float> scratch(planes * (splits + 1), NAN);
            std::vector<int> sync(1 + 2 * s.B, 12345);
            float inv_hw = (float)(1.0 / s.hw), inv_temp = 1.f / T, cs = (float)s.C;
            float *partials = scratch.data(), *gates = scratch.data() + planes * splits;
            if (cfg == 0) {
                emu_launch(dim3(1), dim3(256), 0, [&] { gate_init_kernel(sync.data(), 1 + 2 * s.B); });
                emu_launch(dim3(1), dim3(GATE_THREADS), 0, [&] { if (vec) gate_fused_kernel<true>(o.data(), x.data(), partials, gates, sync.data(), s.B, s.C, s.hw, splits, chunk, inv_hw, inv_temp, cs);
                                                                 else gate_fused_kernel<false>(o.data(), x.data(), partials, gates, sync.data(), s.B, s.C, s.hw, splits, chunk, inv_hw, inv_temp, cs); });
            } else {
                emu_launch(dim3(planes), dim3(GATE_THREADS), 0, [&] { if (vec) gate_pool_kernel<true>(partials, x.data(), s.hw); else gate_pool_kernel<false>(partials, x.data(), s.hw); });
                emu_launch(dim3(s.B), dim3(GATE_THREADS), 0, [&] { gate_softmax_kernel(gates, partials, s.C, inv_hw, inv_temp, cs); });
                emu_launch(dim3(planes), dim3(GATE_THREADS), 0, [&] { if (vec) gate_scale_kernel<true>(o.data(), x.data(), gates, planes, s.hw); else gate_scale_kernel<false>(o.data(), x.data(), gates, planes, s.hw); });
            }
            double worst = 0; long bad = 0;
            for (long long k = 0; k < n; ++k) { double e = fabs(o[k] - ref[k]); if (!(e <= 1e-4 + 1e-4 * fabs(ref[k]))) ++bad; if (e > worst || e != e) worst = e; }
            printf("gate B=%d C=%d hw=%lld splits=%d config %d: bad=%ld worst=%.2g ticket=%d\n", s.B, s.C, s.hw, splits, cfg, bad, worst, cfg == 0 ? sync[0] : -1);
            bad_total += bad;
        }
    }
    // mish
    for (long long n : {1LL, 3LL, 4LL, 1029LL, 4096LL, 5003LL}) {
        std::vector<float> x(n), o(n, NAN);
        for (auto &v : x) v = nd(rng) * 30;
        long long n4 = n / 4, per = 256 * 4;
        if (n4) emu_launch(dim3((n4 + per - 1) / per), dim3(256), 0, [&] { mish::mish_vec_kernel<4>((float4 *)o.data(), (const float4 *)x.data(), n4); });
        if (n - n4 * 4) emu_launch(dim3(1), dim3(256), 0, [&] { mish::mish_scalar_kernel(o.data() + n4 * 4, x.data() + n4 * 4, n - n4 * 4); });
        long bad = 0; double worst = 0;
        for (long long i = 0; i < n; ++i) { double xv = x[i], sp = xv > 20 ? xv : log1p(exp(xv)), ref = xv * tanh(sp), e = fabs(o[i] - ref);
            if (!(e <= 1e-5 + 1e-5 * fabs(ref))) ++bad; if (e > worst || e != e) worst = e; }
        printf("mish n=%lld: bad=%ld worst=%.2g\n", n, bad, worst); bad_total += bad;
    }
    return bad_total != 0;
}
