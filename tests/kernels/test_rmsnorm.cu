/* test_rmsnorm: kg_rmsnorm_forward / kg_rmsnorm_backward against a CPU reference in double that
 * follows policy/model_kernels.c's pol_rmsnorm / pol_rmsnorm_backward:
 *   s = 1 / sqrt(mean(x^2) + eps),  y = w * (x * s)
 *   dx = s w dy - x s^3 sum(w dy x) / n,  dw += sum_rows dy x s
 * Shapes: n in {896, 4864, 1000, 7, 8192} x T in {1, 3, 2048}, plus a misaligned row (the scalar
 * path for a length the vector path would take), a row whose dw partials need the shared-memory
 * opt-in (n = 20000) and rows too long for shared memory at all (the per-element atomic
 * fallback, vector and scalar). dw is pre-filled so that the += is checked. */
#include "kcheck.h"

#define EPS 1e-6f

/* CPU reference in double, fed exactly the bf16 values the GPU reads */
static void ref_forward(float *y, double *rstd, const float *x, const float *w, int T, int n,
                        float eps)
{
    for (int r = 0; r < T; r++) {
        const float *xr = x + (size_t)r * n;
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)xr[i] * xr[i];
        double s = 1.0 / sqrt(ss / n + eps);
        rstd[r] = s;
        for (int i = 0; i < n; i++)
            y[(size_t)r * n + i] = (float)(w[i] * (xr[i] * s));
    }
}

/* dx overwritten, dw accumulated into */
static void ref_backward(float *dx, float *dw, const float *dy, const float *x, const double *rstd,
                         const float *w, int T, int n)
{
    double *acc = (double *)calloc((size_t)n, sizeof *acc);
    for (int r = 0; r < T; r++) {
        const float *xr = x + (size_t)r * n, *dyr = dy + (size_t)r * n;
        double s = rstd[r], g = 0;
        for (int i = 0; i < n; i++)
            g += (double)w[i] * dyr[i] * xr[i];
        double c = s * s * s * g / n;
        for (int i = 0; i < n; i++) {
            dx[(size_t)r * n + i] = (float)(s * w[i] * dyr[i] - c * xr[i]);
            acc[i] += (double)dyr[i] * xr[i] * s;
        }
    }
    for (int i = 0; i < n; i++)
        dw[i] = (float)(dw[i] + acc[i]);
    free(acc);
}

/* a bf16 device copy starting `off` elements into its allocation (off = 1 breaks 16-byte
 * alignment); *base is what to cudaFree */
static kg_bf16 *dev_bf_at(const float *f, size_t n, int off, kg_bf16 **base)
{
    float *pad = (float *)calloc(n + (size_t)off, sizeof *pad);
    memcpy(pad + off, f, n * sizeof *f);
    *base = kc_to_dev_bf(pad, n + (size_t)off);
    free(pad);
    return *base + off;
}

static int run_case(int T, int n, int off, uint64_t seed)
{
    size_t N = (size_t)T * n;
    float *x = (float *)malloc(N * sizeof *x), *dy = (float *)malloc(N * sizeof *dy);
    float *w = (float *)malloc((size_t)n * sizeof *w),
          *dw = (float *)malloc((size_t)n * sizeof *dw);
    float *y_ref = (float *)malloc(N * sizeof *y_ref),
          *dx_ref = (float *)malloc(N * sizeof *dx_ref);
    float *got = (float *)malloc(N * sizeof *got), *rstd_got = (float *)malloc((size_t)T * 4);
    float *rstd_ref = (float *)malloc((size_t)T * 4), *dw_ref = (float *)malloc((size_t)n * 4);
    double *rstd_d = (double *)malloc((size_t)T * sizeof *rstd_d);

    kc_fill(x, N, seed, -2.0f, 2.0f);
    /* rows at different scales (powers of two: still exact in bf16), so rstd varies 16x */
    for (int r = 0; r < T; r++)
        for (int i = 0; i < n; i++)
            x[(size_t)r * n + i] *= ldexpf(1.0f, r % 5 - 2);
    kc_fill(w, (size_t)n, seed + 1, -1.5f, 1.5f);
    kc_fill(dy, N, seed + 2, -1.0f, 1.0f);
    kc_fill(dw, (size_t)n, seed + 3, -1.0f, 1.0f); /* what dw holds before: must be added to */

    ref_forward(y_ref, rstd_d, x, w, T, n, EPS);
    for (int r = 0; r < T; r++)
        rstd_ref[r] = (float)rstd_d[r];
    memcpy(dw_ref, dw, (size_t)n * sizeof *dw);
    ref_backward(dx_ref, dw_ref, dy, x, rstd_d, w, T, n);

    kg_bf16 *xb, *wb, *dyb, *yb, *dxb;
    kg_bf16 *x_d = dev_bf_at(x, N, off, &xb), *w_d = dev_bf_at(w, (size_t)n, off, &wb);
    kg_bf16 *dy_d = dev_bf_at(dy, N, off, &dyb);
    kg_bf16 *y_d = dev_bf_at(x, N, off, &yb), *dx_d = dev_bf_at(x, N, off, &dxb); /* garbage */
    float *rstd_dev, *dw_dev = kc_to_dev_f(dw, (size_t)n);
    KC_CUDA(cudaMalloc((void **)&rstd_dev, (size_t)T * sizeof(float)));

    char label[128];
    int ok = 1;
    KC_CUDA(kg_rmsnorm_forward(y_d, rstd_dev, x_d, w_d, T, n, EPS, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, y_d, N);
    snprintf(label, sizeof label, "rmsnorm fwd y    T %4d n %5d off %d", T, n, off);
    ok &= kc_close(label, got, y_ref, N, 1e-3f, 1e-2f);
    kc_from_dev_f(rstd_got, rstd_dev, (size_t)T);
    snprintf(label, sizeof label, "rmsnorm fwd rstd T %4d n %5d off %d", T, n, off);
    ok &= kc_close(label, rstd_got, rstd_ref, (size_t)T, 0.0f, 2e-5f);

    KC_CUDA(kg_rmsnorm_backward(dx_d, dw_dev, dy_d, x_d, rstd_dev, w_d, T, n, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, dx_d, N);
    snprintf(label, sizeof label, "rmsnorm bwd dx   T %4d n %5d off %d", T, n, off);
    ok &= kc_close(label, got, dx_ref, N, 1e-3f, 1e-2f);
    kc_from_dev_f(got, dw_dev, (size_t)n);
    snprintf(label, sizeof label, "rmsnorm bwd dw+= T %4d n %5d off %d", T, n, off);
    ok &= kc_close(label, got, dw_ref, (size_t)n, 1e-3f, 1e-4f);

    KC_CUDA(cudaFree(xb));
    KC_CUDA(cudaFree(wb));
    KC_CUDA(cudaFree(dyb));
    KC_CUDA(cudaFree(yb));
    KC_CUDA(cudaFree(dxb));
    KC_CUDA(cudaFree(rstd_dev));
    KC_CUDA(cudaFree(dw_dev));
    free(x), free(dy), free(w), free(dw), free(y_ref), free(dx_ref), free(got), free(rstd_got);
    free(rstd_ref), free(dw_ref), free(rstd_d);
    return ok;
}

/* rstd = NULL is allowed in the forward (inference keeps nothing) and gives the same y */
static int run_null_rstd(void)
{
    int T = 3, n = 896;
    size_t N = (size_t)T * n;
    float *x = (float *)malloc(N * 4), *w = (float *)malloc((size_t)n * 4);
    float *want = (float *)malloc(N * 4), *got = (float *)malloc(N * 4);
    double rstd[3];
    kc_fill(x, N, 77, -1.0f, 1.0f);
    kc_fill(w, (size_t)n, 78, 0.5f, 1.5f);
    ref_forward(want, rstd, x, w, T, n, EPS);
    kg_bf16 *x_d = kc_to_dev_bf(x, N), *w_d = kc_to_dev_bf(w, (size_t)n), *y_d = kc_to_dev_bf(x, N);
    KC_CUDA(kg_rmsnorm_forward(y_d, NULL, x_d, w_d, T, n, EPS, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, y_d, N);
    int ok = kc_close("rmsnorm fwd y with rstd NULL", got, want, N, 1e-3f, 1e-2f);
    KC_CUDA(cudaFree(x_d));
    KC_CUDA(cudaFree(w_d));
    KC_CUDA(cudaFree(y_d));
    free(x), free(w), free(want), free(got);
    return ok;
}

static int expect(const char *label, cudaError_t got, cudaError_t want)
{
    int ok = got == want;
    printf("%-4s %s: got %s\n", ok ? "ok" : "FAIL", label, cudaGetErrorName(got));
    return ok;
}

static int run_arg_errors(void)
{
    kg_bf16 *b;
    float *f;
    KC_CUDA(cudaMalloc((void **)&b, 64 * sizeof *b));
    KC_CUDA(cudaMalloc((void **)&f, 64 * sizeof *f));
    cudaError_t inval = cudaErrorInvalidValue;
    int ok = 1;
    ok &= expect("fwd n = 0", kg_rmsnorm_forward(b, f, b, b, 1, 0, EPS, 0), inval);
    ok &= expect("fwd T < 0", kg_rmsnorm_forward(b, f, b, b, -1, 8, EPS, 0), inval);
    ok &= expect("fwd x NULL", kg_rmsnorm_forward(b, f, NULL, b, 1, 8, EPS, 0), inval);
    ok &= expect("fwd w NULL", kg_rmsnorm_forward(b, f, b, NULL, 1, 8, EPS, 0), inval);
    ok &= expect("fwd eps < 0", kg_rmsnorm_forward(b, f, b, b, 1, 8, -1.0f, 0), inval);
    ok &= expect("fwd T = 0 is a no-op", kg_rmsnorm_forward(b, f, b, b, 0, 8, EPS, 0), cudaSuccess);
    ok &= expect("bwd n = 0", kg_rmsnorm_backward(b, f, b, b, f, b, 1, 0, 0), inval);
    ok &= expect("bwd T < 0", kg_rmsnorm_backward(b, f, b, b, f, b, -2, 8, 0), inval);
    ok &= expect("bwd dw NULL", kg_rmsnorm_backward(b, NULL, b, b, f, b, 1, 8, 0), inval);
    ok &= expect("bwd rstd NULL", kg_rmsnorm_backward(b, f, b, b, NULL, b, 1, 8, 0), inval);
    ok &=
        expect("bwd T = 0 is a no-op", kg_rmsnorm_backward(b, f, b, b, f, b, 0, 8, 0), cudaSuccess);
    ok &= expect("no launch error left behind", cudaDeviceSynchronize(), cudaSuccess);
    KC_CUDA(cudaFree(b));
    KC_CUDA(cudaFree(f));
    return ok;
}

int main(void)
{
    static const int ns[] = {896, 4864, 1000, 7, 8192};
    static const int Ts[] = {1, 3, 2048};
    int ok = 1;
    uint64_t seed = 1;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof Ts / sizeof Ts[0]; b++)
            ok &= run_case(Ts[b], ns[a], 0, seed++);
    ok &= run_case(37, 896, 1, seed++);  /* misaligned: the scalar path on a multiple of 8 */
    ok &= run_case(5, 20000, 0, seed++); /* dw partials past 48 KiB of shared memory */
    ok &= run_case(3, 70000, 0, seed++); /* past any shared memory: per-element atomics */
    ok &= run_case(2, 70001, 0, seed++); /* the same on the scalar path */
    ok &= run_null_rstd();
    ok &= run_arg_errors();
    printf("%s\n", ok ? "rmsnorm: all checks passed" : "rmsnorm: FAILED");
    return ok ? 0 : 1;
}
