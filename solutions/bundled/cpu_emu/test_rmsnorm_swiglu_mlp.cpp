// CPU emulation test of rmsnorm_swiglu_mlp/kernels/swiglu_mlp.cu: each stage (RMSNorm, fused
// gate/up GEMM with the SwiGLU epilogue, down GEMM) is compared with a double-precision reference
// fed the kernel's own previous stage (TF32-rounded where the tensor-core path rounds), and the
// final output with the exact double reference at the task's tolerance.
// usage: test_rmsnorm_swiglu_mlp M D H [fallback]
#include "emu.h"
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
#include "swiglu.inc"
#include <random>
static int M, D, H;
static bool fb;
template <bool SW> static void run_gemm(float *out, const float *a, const float *b0, const float *b1, int m, int n, int k)
{
    if (!fb) {
        int bno = SW ? 64 : 128, tiles = ((m + BM - 1) / BM) * ((n + bno - 1) / bno);
        emu_launch(dim3(tiles), dim3(GEMM_THREADS), GEMM_SMEM_BYTES, [&] { gemm_nt_tc_kernel<SW>(out, a, b0, b1, m, n, k); });
    } else {
        emu_launch(dim3((n + FB_T - 1) / FB_T, (m + FB_T - 1) / FB_T), dim3(256), 0, [&] { gemm_nt_fallback_kernel<SW>(out, a, b0, b1, m, n, k); });
    }
}
static double rt(float v) { return fb ? (double)v : (double)u2f(emu_tf32(v)); } // TF32 rounding of the tc path
static long cmp(const char *what, const std::vector<float> &got, const std::vector<double> &ref, double atol, double rtol)
{
    long bad = 0; double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        double e = fabs(got[i] - ref[i]);
        if (!(e <= atol + rtol * fabs(ref[i]))) ++bad;
        if (!(e <= worst)) worst = e;
    }
    printf("  %-34s bad=%ld max|err| %.3g\n", what, bad, worst);
    return bad;
}
int main(int argc, char **argv)
{
    M = atoi(argv[1]); D = atoi(argv[2]); H = atoi(argv[3]); fb = argc > 4 && atoi(argv[4]);
    std::mt19937 rng(4); std::normal_distribution<float> nd; std::uniform_real_distribution<float> ud(0.5f, 1.5f);
    std::vector<float> x((size_t)M * D), gw(D), wg((size_t)H * D), wu((size_t)H * D), wd((size_t)D * H);
    for (int i = 0; i < M; ++i) { float s = expf(nd(rng)); for (int j = 0; j < D; ++j) x[(size_t)i * D + j] = nd(rng) * s; }
    for (auto &v : gw) v = ud(rng);
    for (auto &v : wg) v = nd(rng) / sqrtf((float)D);
    for (auto &v : wu) v = nd(rng) / sqrtf((float)D);
    for (auto &v : wd) v = nd(rng) / sqrtf((float)H);
    const float eps = 1e-6f;
    std::vector<float> n((size_t)M * D, NAN), h((size_t)M * H, NAN), out((size_t)M * D, NAN);
    int vec = D % 4 == 0;
    emu_launch(dim3(M), dim3(256), 0, [&] { rmsnorm_kernel(n.data(), x.data(), gw.data(), D, eps, vec); });
    run_gemm<true>(h.data(), n.data(), wg.data(), wu.data(), M, H, D);
    run_gemm<false>(out.data(), h.data(), wd.data(), wd.data(), M, D, H);
    printf("swiglu M=%d D=%d H=%d %s\n", M, D, H, fb ? "fallback" : "tf32");
    // stage references
    std::vector<double> nref((size_t)M * D), href((size_t)M * H), oref((size_t)M * D), exact_n((size_t)M * D), exact_h((size_t)M * H), exact_o((size_t)M * D);
    for (int i = 0; i < M; ++i) {
        double ss = 0; for (int j = 0; j < D; ++j) ss += (double)x[(size_t)i * D + j] * x[(size_t)i * D + j];
        double inv = 1 / sqrt(ss / D + eps);
        for (int j = 0; j < D; ++j) exact_n[(size_t)i * D + j] = nref[(size_t)i * D + j] = x[(size_t)i * D + j] * inv * gw[j];
    }
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < H; ++j) {
            double sg = 0, su = 0, eg = 0, eu = 0;
            for (int k = 0; k < D; ++k) {
                double a = rt(n[(size_t)i * D + k]), ea = exact_n[(size_t)i * D + k];
                sg += a * rt(wg[(size_t)j * D + k]); su += a * rt(wu[(size_t)j * D + k]);
                eg += ea * wg[(size_t)j * D + k]; eu += ea * wu[(size_t)j * D + k];
            }
            href[(size_t)i * H + j] = sg / (1 + exp(-sg)) * su;
            exact_h[(size_t)i * H + j] = eg / (1 + exp(-eg)) * eu;
        }
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < D; ++j) {
            double s = 0, e = 0;
            for (int k = 0; k < H; ++k) { s += rt(h[(size_t)i * H + k]) * rt(wd[(size_t)j * H + k]); e += exact_h[(size_t)i * H + k] * wd[(size_t)j * H + k]; }
            oref[(size_t)i * D + j] = s; exact_o[(size_t)i * D + j] = e;
        }
    long bad = 0;
    bad += cmp("rmsnorm vs fp64", n, nref, 1e-5, 1e-5);
    bad += cmp("gate/up+swiglu vs fp64(own n)", h, href, 1e-5, 1e-5);
    bad += cmp("down vs fp64(own h)", out, oref, 1e-5, 1e-5);
    bad += cmp("output vs exact fp64 (task tol)", out, exact_o, 1e-2, 1e-2);
    return bad != 0;
}
