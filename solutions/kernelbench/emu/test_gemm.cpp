// Level-2 fixtures (tf32_gemm.cuh and its epilogues): L2-12, L2-22, L2-45, L2-76, L2-86 against a
// double-precision reference, once with TF32-rounded operands (tight: checks the fragment layouts,
// the k permutation, the swizzle and the pipeline) and once in full precision (the task's
// tolerance). Shapes with M, N and K tails, K % 4 != 0 (synchronous-load variant), and more
// than 8 tile rows (grouped raster). usage: test_gemm M N K
#include "emu.h"
namespace g76 {
#include "l2_76.inc"
}
namespace g12 {
#include "l2_12.inc"
}
namespace g86 {
#include "l2_86.inc"
}
namespace g22 {
#include "l2_22.inc"
}
namespace g45 {
#include "l2_45.inc"
}
#include <functional>
#include <random>
#include <string>

static int M, N, K;
static int bad_total = 0;

static double tf(float v) { return emu_u2f(emu_tf32(v)); }

// C = X W^T in double: exact and TF32-rounded operands.
static void ref_gemm(const std::vector<float> &X, const std::vector<float> &W, int m, int n, int k,
                     std::vector<double> &c, std::vector<double> &ct)
{
    c.assign((size_t)m * n, 0); ct.assign((size_t)m * n, 0);
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double s = 0, st = 0;
            for (int q = 0; q < k; ++q) {
                s += (double)X[(size_t)i * k + q] * W[(size_t)j * k + q];
                st += tf(X[(size_t)i * k + q]) * tf(W[(size_t)j * k + q]);
            }
            c[(size_t)i * n + j] = s; ct[(size_t)i * n + j] = st;
        }
}

static void report(const std::string &what, const std::vector<float> &got, const std::vector<double> &want,
                   const std::vector<double> &want_t, double tight)
{
    double w = 0, wt = 0; long bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        double e = fabs(got[i] - want[i]), et = fabs(got[i] - want_t[i]);
        w = std::max(w, e); wt = std::max(wt, et);
        if (!(e <= 1e-2 + 1e-2 * fabs(want[i])) || !(et <= tight + tight * fabs(want_t[i])) || std::isnan(got[i])) ++bad;
    }
    printf("%s M=%d N=%d K=%d: bad=%ld max|err| vs fp64 %.2g, vs tf32-operand fp64 %.2g\n", what.c_str(), M, N, K, bad, w, wt);
    bad_total += bad != 0;
}

template <class Kern>
static void launch_tiles(int m, int n, Kern k)
{
    int tiles = ((m + TG_BM - 1) / TG_BM) * ((n + TG_BN - 1) / TG_BN);
    emu_launch(dim3(tiles), dim3(TG_THREADS), TG_SMEM_BYTES, k);
}

int main(int argc, char **argv)
{
    M = atoi(argv[1]); N = atoi(argv[2]); K = atoi(argv[3]);
    const bool vec = K % 4 == 0;
    std::mt19937 rng(M * 7 + N * 3 + K);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> ud(-1, 1);
    std::vector<float> X((size_t)M * K), W((size_t)N * K), b(N), out((size_t)M * N);
    for (auto &v : X) v = nd(rng);
    for (auto &v : W) v = ud(rng) / sqrtf((float)K);
    for (auto &v : b) v = ud(rng) * 0.5f;
    std::vector<double> C, Ct;
    ref_gemm(X, W, M, N, K, C, Ct);
    const char *path = vec ? "cp.async" : "sync-load";
    auto elementwise = [&](const std::string &name, std::function<void()> run, std::function<double(double, double)> f) {
        std::fill(out.begin(), out.end(), NAN);
        run();
        std::vector<double> want(C.size()), want_t(C.size());
        for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
            want[(size_t)i * N + j] = f(C[(size_t)i * N + j], b[j]);
            want_t[(size_t)i * N + j] = f(Ct[(size_t)i * N + j], b[j]);
        }
        report(name + " (" + path + ")", out, want, want_t, 2e-5);
    };
    elementwise("L2-76 gemm+bias+relu", [&] { launch_tiles(M, N, [&] {
        if (vec) g76::gemm_add_relu_kernel<true>(out.data(), X.data(), W.data(), b.data(), M, N, K);
        else g76::gemm_add_relu_kernel<false>(out.data(), X.data(), W.data(), b.data(), M, N, K); }); },
        [](double v, double bb) { return std::max(0.0, v + bb); });
    elementwise("L2-12 gemm*2+leaky", [&] { launch_tiles(M, N, [&] {
        if (vec) g12::gemm_mul_lrelu_kernel<true>(out.data(), X.data(), W.data(), b.data(), M, N, K, 2.f, 0.1f);
        else g12::gemm_mul_lrelu_kernel<false>(out.data(), X.data(), W.data(), b.data(), M, N, K, 2.f, 0.1f); }); },
        [](double v, double bb) { double r = (v + bb) * 2; return r > 0 ? r : 0.1 * r; });
    elementwise("L2-86 gemm/10+gelu", [&] { launch_tiles(M, N, [&] {
        if (vec) g86::gemm_div_gelu_kernel<true>(out.data(), X.data(), W.data(), b.data(), M, N, K, 0.25f);
        else g86::gemm_div_gelu_kernel<false>(out.data(), X.data(), W.data(), b.data(), M, N, K, 0.25f); }); },
        [](double v, double bb) { double r = (v + bb) / 0.25; return 0.5 * r * (1 + erf(r / sqrt(2.0))); });

    // L2-22: clamp(2 (v + b) s, lo, hi) -> logsumexp -> l * mish(l); lo/hi chosen to clip
    {
        const float s = 2.f, lo = -1.5f, hi = 1.2f;
        const int tn = (N + TG_BN - 1) / TG_BN;
        std::vector<float> part(2 * (size_t)tn * M), y(M, NAN);
        launch_tiles(M, N, [&] {
            if (vec) g22::gemm_lse_partial_kernel<true>((float2 *)part.data(), X.data(), W.data(), b.data(), M, N, K, s, lo, hi);
            else g22::gemm_lse_partial_kernel<false>((float2 *)part.data(), X.data(), W.data(), b.data(), M, N, K, s, lo, hi); });
        emu_launch(dim3((M + 63) / 64), dim3(64), 0, [&] { g22::lse_mish_kernel(y.data(), (const float2 *)part.data(), tn, M); });
        std::vector<double> want(M), want_t(M);
        for (int pass = 0; pass < 2; ++pass) {
            const std::vector<double> &c = pass ? Ct : C;
            for (int i = 0; i < M; ++i) {
                std::vector<double> z(N); double m = -INFINITY, acc = 0;
                for (int j = 0; j < N; ++j) { z[j] = std::min<double>(hi, std::max<double>(lo, 2 * ((c[(size_t)i * N + j] + b[j]) * s))); m = std::max(m, z[j]); }
                for (int j = 0; j < N; ++j) acc += exp(z[j] - m);
                double l = m + log(acc);
                (pass ? want_t : want)[i] = l * (l * tanh(log1p(exp(l))));
            }
        }
        report(std::string("L2-22 gemm+clamp+lse+mish (") + path + ")", y, want, want_t, 1e-4);
    }
    // L2-45: h = sigmoid(x W1^T + b1) [M, N]; z = h W2^T + b2 [M, N2]; y = logsumexp(z)
    {
        const int N2 = 136 + (N % 5);
        const int H = N;
        std::vector<float> W2((size_t)N2 * H), b2(N2), h((size_t)M * H, NAN), y(M, NAN);
        for (auto &v : W2) v = ud(rng) * 2.f / sqrtf((float)H);
        for (auto &v : b2) v = ud(rng);
        const int tn = (N2 + TG_BN - 1) / TG_BN;
        std::vector<float> part(2 * (size_t)tn * M);
        launch_tiles(M, H, [&] {
            if (vec) g45::gemm_sigmoid_kernel<true>(h.data(), X.data(), W.data(), b.data(), M, H, K);
            else g45::gemm_sigmoid_kernel<false>(h.data(), X.data(), W.data(), b.data(), M, H, K); });
        std::vector<double> hw(h.size()), hwt(h.size());
        for (int i = 0; i < M; ++i) for (int j = 0; j < H; ++j) {
            hw[(size_t)i * H + j] = 1 / (1 + exp(-(C[(size_t)i * H + j] + b[j])));
            hwt[(size_t)i * H + j] = 1 / (1 + exp(-(Ct[(size_t)i * H + j] + b[j])));
        }
        report(std::string("L2-45 stage 1 gemm+sigmoid (") + path + ")", h, hw, hwt, 2e-5);
        const bool vec2 = H % 4 == 0;
        launch_tiles(M, N2, [&] {
            if (vec2) g45::gemm_lse_partial_kernel<true>((float2 *)part.data(), h.data(), W2.data(), b2.data(), M, N2, H);
            else g45::gemm_lse_partial_kernel<false>((float2 *)part.data(), h.data(), W2.data(), b2.data(), M, N2, H); });
        emu_launch(dim3((M + 63) / 64), dim3(64), 0, [&] { g45::lse_final_kernel(y.data(), (const float2 *)part.data(), tn, M); });
        // stage 2 reference from the kernel's own h (exact and TF32-rounded), plus end to end from fp64 h
        std::vector<float> hf(h);
        std::vector<double> Z, Zt, want(M), want_t(M), want_e2e(M);
        ref_gemm(hf, W2, M, N2, H, Z, Zt);
        for (int i = 0; i < M; ++i) {
            double m = -INFINITY, mt = -INFINITY, me = -INFINITY, s1 = 0, s2 = 0, s3 = 0;
            std::vector<double> ze(N2);
            for (int j = 0; j < N2; ++j) {
                double e = b2[j];
                for (int q = 0; q < H; ++q) e += hw[(size_t)i * H + q] * W2[(size_t)j * H + q];
                ze[j] = e;
                m = std::max(m, Z[(size_t)i * N2 + j] + b2[j]); mt = std::max(mt, Zt[(size_t)i * N2 + j] + b2[j]); me = std::max(me, e);
            }
            for (int j = 0; j < N2; ++j) { s1 += exp(Z[(size_t)i * N2 + j] + b2[j] - m); s2 += exp(Zt[(size_t)i * N2 + j] + b2[j] - mt); s3 += exp(ze[j] - me); }
            want[i] = m + log(s1); want_t[i] = mt + log(s2); want_e2e[i] = me + log(s3);
        }
        report(std::string("L2-45 stage 2 gemm+lse (") + (vec2 ? "cp.async" : "sync-load") + ")", y, want, want_t, 1e-4);
        report("L2-45 end to end (vs fp64 h)", y, want_e2e, want_e2e, 1e-2);
    }
    return bad_total != 0;
}
