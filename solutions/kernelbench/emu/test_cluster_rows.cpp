// L1-24 log_softmax and L1-38 L1 norm (cluster_rows.cuh): the cluster kernel (every cluster size
// 1..16, blocks of a cluster running at once, distributed shared memory emulated), the
// block-per-row two-pass kernel and the strided kernel, against double precision; odd row
// lengths, misaligned row starts and misaligned outputs (scalar stores).
#include "emu.h"
namespace lsm {
#include "l1_24.inc"
}
namespace l1n {
#include "l1_38.inc"
}
#include <functional>
#include <random>

using RefFn = std::function<void(const float *, float *, long long, long long)>; // one row, stride

static void ref_lsm(const float *x, float *y, long long L, long long st)
{
    double m = -INFINITY;
    for (long long i = 0; i < L; ++i) m = std::max(m, (double)x[i * st]);
    double s = 0;
    for (long long i = 0; i < L; ++i) s += exp(x[i * st] - m);
    for (long long i = 0; i < L; ++i) y[i * st] = (float)(x[i * st] - (m + log(s)));
}
static void ref_l1(const float *x, float *y, long long L, long long st)
{
    double s = 0;
    for (long long i = 0; i < L; ++i) s += fabs((double)x[i * st]);
    for (long long i = 0; i < L; ++i) y[i * st] = (float)(x[i * st] / (s / L));
}

static int compare(const char *what, const std::vector<float> &got, const std::vector<float> &want, size_t off, size_t n, double tol)
{
    int bad = 0; double worst = 0;
    for (size_t i = 0; i < n; ++i) {
        double e = fabs((double)got[off + i] - want[i]);
        worst = std::max(worst, e);
        if (!(e <= tol + tol * fabs(want[i]))) ++bad;
    }
    printf("%s: bad=%d max|err|=%.2g\n", what, bad, worst);
    return bad;
}

template <class LaunchCluster, class LaunchTwo, class LaunchStrided>
static int run_op(const char *name, RefFn ref, LaunchCluster cl, LaunchTwo two, LaunchStrided strided, std::mt19937 &rng, float shift)
{
    std::normal_distribution<float> nd;
    int bad = 0;
    struct Case { long long rows, L; int cs; int xoff, yoff; unsigned threads; };
    for (Case c : {Case{3, 1001, 4, 0, 0, 64}, Case{2, 4096, 16, 0, 0, 64}, Case{3, 999, 2, 1, 1, 32},
                   Case{2, 5003, 8, 3, 1, 64}, Case{2, 7, 4, 2, 2, 32}, Case{2, 1030, 1, 0, 3, 96},
                   Case{4, 65535 / 16, 4, 0, 0, 128}}) {
        const long long n = c.rows * c.L;
        std::vector<float> xb(n + 8), yb(n + 8, NAN), want(n);
        for (long long i = 0; i < n; ++i) xb[c.xoff + i] = nd(rng) * 3.f + shift;
        const float *x = xb.data() + c.xoff;
        for (long long r = 0; r < c.rows; ++r) ref(x + r * c.L, want.data() + r * c.L, c.L, 1);
        long long chunk = (c.L + c.cs - 1) / c.cs; chunk = (chunk + 3) / 4 * 4;
        const size_t bytes = CR_HDR_F4 * 16 + (chunk + 4) * 4;
        emu_launch_cluster(dim3((unsigned)(c.rows * c.cs)), dim3(c.threads), bytes, c.cs,
                           [&] { cl(yb.data() + c.yoff, x, c.L, chunk); });
        char what[160];
        snprintf(what, sizeof what, "%s cluster rows=%lld L=%lld cs=%d xoff=%d yoff=%d threads=%u", name, c.rows, c.L, c.cs, c.xoff, c.yoff, c.threads);
        bad += compare(what, yb, want, c.yoff, n, 1e-5);
        std::fill(yb.begin(), yb.end(), NAN);
        emu_launch(dim3((unsigned)c.rows), dim3(c.threads), 0, [&] { two(yb.data() + c.yoff, x, c.L); });
        snprintf(what, sizeof what, "%s two-pass rows=%lld L=%lld xoff=%d yoff=%d", name, c.rows, c.L, c.xoff, c.yoff);
        bad += compare(what, yb, want, c.yoff, n, 1e-5);
    }
    { // strided: (outer, L, inner)
        const long long outer = 3, L = 37, inner = 50, n = outer * L * inner;
        std::vector<float> x(n), y(n, NAN), want(n);
        for (auto &v : x) v = nd(rng) * 3.f + shift;
        for (long long o = 0; o < outer; ++o)
            for (long long i = 0; i < inner; ++i) ref(x.data() + o * L * inner + i, want.data() + o * L * inner + i, L, inner);
        emu_launch(dim3((unsigned)((outer * inner + 63) / 64)), dim3(64), 0, [&] { strided(y.data(), x.data(), outer, L, inner); });
        char what[96];
        snprintf(what, sizeof what, "%s strided outer=%lld L=%lld inner=%lld", name, outer, L, inner);
        bad += compare(what, y, want, 0, n, 1e-5);
    }
    return bad;
}

int main()
{
    std::mt19937 rng(2438);
    int bad = 0;
    bad += run_op("L1-24 log_softmax", ref_lsm,
                  [](float *y, const float *x, long long L, long long chunk) { lsm::cluster_rows_kernel<lsm::LogSoftmaxOp>(y, x, L, chunk); },
                  [](float *y, const float *x, long long L) { lsm::rows_twopass_kernel<lsm::LogSoftmaxOp>(y, x, L); },
                  [](float *y, const float *x, long long o, long long L, long long i) { lsm::strided_kernel<lsm::LogSoftmaxOp>(y, x, o, L, i); },
                  rng, 0.f);
    bad += run_op("L1-38 l1_norm", ref_l1,
                  [](float *y, const float *x, long long L, long long chunk) { l1n::cluster_rows_kernel<l1n::L1NormOp>(y, x, L, chunk); },
                  [](float *y, const float *x, long long L) { l1n::rows_twopass_kernel<l1n::L1NormOp>(y, x, L); },
                  [](float *y, const float *x, long long o, long long L, long long i) { l1n::strided_kernel<l1n::L1NormOp>(y, x, o, L, i); },
                  rng, 0.5f);
    return bad != 0;
}
