#include "gemm.inc"
#include <random>
int main(int argc, char **argv)
{
    int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]); bool fb = argc > 4 && atoi(argv[4]);
    std::mt19937 rng(1); std::normal_distribution<float> nd; std::uniform_real_distribution<float> ud(-1, 1);
    std::vector<float> X((size_t)M * K), W((size_t)N * K), b(N), out((size_t)M * N, NAN);
    for (auto &v : X) v = nd(rng) * 3;
    for (auto &v : W) v = ud(rng) / sqrtf(K);
    for (auto &v : b) v = ud(rng);
    if (!fb) {
        int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
        emu_launch(dim3(tiles), dim3(GEMM_THREADS), GEMM_SMEM_BYTES, [&] { gemm_bias_gelu_tf32_kernel(out.data(), X.data(), W.data(), b.data(), M, N, K); });
    } else {
        emu_launch(dim3((N + FB_T - 1) / FB_T, (M + FB_T - 1) / FB_T), dim3(256), 0, [&] { gemm_bias_gelu_fallback_kernel(out.data(), X.data(), W.data(), b.data(), M, N, K); });
    }
    double worst = 0, worst_t = 0; long bad = 0;
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        double s = b[j], st = b[j];
        for (int k = 0; k < K; ++k) {
            s += (double)X[(size_t)i * K + k] * W[(size_t)j * K + k];
            st += (double)u2f(emu_tf32(X[(size_t)i * K + k])) * u2f(emu_tf32(W[(size_t)j * K + k]));
        }
        double ref = 0.5 * s * (1 + erf(s / sqrt(2.0))), reft = 0.5 * st * (1 + erf(st / sqrt(2.0)));
        double o = out[(size_t)i * N + j];
        if (!(fabs(o - ref) <= 1e-2 + 1e-2 * fabs(ref))) ++bad;
        worst = std::max(worst, fabs(o - ref)); worst_t = std::max(worst_t, fabs(o - reft));
    }
    printf("M=%d N=%d K=%d %s: bad=%ld max|err| vs fp64 %.3g, vs tf32-rounded fp64 %.3g\n", M, N, K, fb ? "fallback" : "tf32", bad, worst, worst_t);
    return bad != 0;
}
