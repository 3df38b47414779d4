/* test_logprob: kg_logprob_forward / kg_logprob_backward against a double-precision reference.
 *
 * Shapes: V in {7, 1000, 151936} with V_pad = V rounded up to 128, T in {1, 5, 64}; plus rows
 * that take the scalar path (V_pad not a multiple of 8), a vocabulary that is not a multiple of
 * 8 inside a vectorised row, and logits shifted to ~1000 (a naive exp overflows). Logits are
 * uniform in +-30 (bf16), padding columns hold +1e4 and NaN, which must change nothing.
 * Checks: logp and entropy (fp32) against double; each output alone (the other NULL) equals the
 * pair; dlogits against the analytic formula in double (normalised per element by the size of
 * its terms, so that tiny p_j are checked relatively too), padding columns exactly 0, w_ent NULL
 * and not; the analytic formula against central finite differences of the reference loss
 * (double) at a few (t, j), and the GPU against those; rows with an invalid target get NaN;
 * argument errors. */
#include "kcheck.h"

static int g_fail;

static void check(int ok)
{
    if (!ok)
        g_fail = 1;
}

static void check_true(const char *label, int ok)
{
    printf("%-4s %s\n", ok ? "ok" : "FAIL", label);
    check(ok);
}

/* logsumexp and entropy of z[0, V) in double, straight from the definitions */
static void ref_stats(const float *z, int V, double *lse, double *H)
{
    double m = -INFINITY, s = 0, h = 0;
    for (int j = 0; j < V; j++)
        m = z[j] > m ? z[j] : m;
    for (int j = 0; j < V; j++)
        s += exp((double)z[j] - m);
    *lse = m + log(s);
    for (int j = 0; j < V; j++) {
        double lp = (double)z[j] - *lse;
        h -= exp(lp) * lp;
    }
    *H = h;
}

/* kernels.h's dlogits formula in double; *scale receives the size of its terms, relative to
 * which the errors are judged (so that tiny p_j are checked relatively too) */
static double ref_grad(float z, int j, int y, double lse, double H, double wl, double we,
                       double *scale)
{
    double lp = (double)z - lse, p = exp(lp);
    *scale = p * (fabs(wl) + fabs(we) * (fabs(lp) + H + 1)) + (j == y ? fabs(wl) : 0) + 1e-30;
    return wl * ((j == y) - p) - we * p * (lp + H);
}

/* L(z_j = z_j + h) - L(z_j = z_j - h) for the loss L = w_logp logp + w_ent entropy of one row,
 * logp = z_y - m - log S, entropy = log S - A / S, S = sum_k e_k, A = sum_k e_k (z_k - m),
 * e_k = exp(z_k - m). Both evaluations share the sums over the other columns (Sr, Ar), and the
 * difference is rearranged exactly (no derivative taken) so that it keeps its precision in double
 * even where p_j is tiny and L is ~60:
 *   log S+ - log S- = log1p((e+ - e-) / S-),   e+ - e- = 2 e_j sinh h,
 *   A+/S+ - A-/S- = (Ar (e- - e+) + Sr (e+ d+ - e- d-) + e+ e- (d+ - d-)) / (S+ S-). */
static double loss_diff(const float *z, int V, int j, int y, double h, double wl, double we)
{
    double m = -INFINITY, Sr = 0, Ar = 0;
    for (int k = 0; k < V; k++)
        m = z[k] > m ? z[k] : m;
    for (int k = 0; k < V; k++) {
        if (k == j)
            continue;
        double d = (double)z[k] - m, e = exp(d);
        Sr += e;
        Ar += e * d;
    }
    double d0 = (double)z[j] - m, e0 = exp(d0), sh = sinh(h), ch = cosh(h);
    double Sp = Sr + e0 * exp(h), Sm = Sr + e0 * exp(-h);
    double dls = log1p(2 * e0 * sh / Sm);
    double dAS =
        (-2 * e0 * sh * Ar + 2 * e0 * (d0 * sh + h * ch) * Sr + 2 * h * e0 * e0) / (Sp * Sm);
    double dlogp = (j == y ? 2 * h : 0) - dls;
    return wl * dlogp + we * (dls - dAS);
}

typedef struct lp_case {
    int T, V, V_pad;
    float lo, hi;
} lp_case;

static int32_t *dev_targets(const int32_t *y, int T)
{
    int32_t *d;
    KC_CUDA(cudaMalloc((void **)&d, (size_t)T * sizeof *d + 1));
    KC_CUDA(cudaMemcpy(d, y, (size_t)T * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

/* the backward of one case against the reference (we NULL: w_ent NULL on the GPU, 0 here) */
static void check_backward(const lp_case *c, const char *tag, const float *z, const int32_t *y,
                           const double *lse, const double *H, const float *wl, const float *we,
                           const kg_bf16 *d_z, const int32_t *d_y, const float *d_wl,
                           const float *d_we)
{
    int T = c->T, V = c->V, Vp = c->V_pad;
    size_t nl = (size_t)T * Vp, nv = (size_t)T * V;
    kg_bf16 *d_dl;
    KC_CUDA(cudaMalloc((void **)&d_dl, nl * sizeof *d_dl));
    KC_CUDA(cudaMemset(d_dl, 0xff, nl * sizeof *d_dl)); /* NaN everywhere: every column written */
    KC_CUDA(kg_logprob_backward(d_dl, d_z, d_y, d_wl, d_we, T, V, Vp, 0));
    KC_CUDA(cudaDeviceSynchronize());
    float *dl = (float *)malloc(nl * sizeof *dl);
    kc_from_dev_bf(dl, d_dl, nl);

    float *got = (float *)malloc(nv * sizeof *got), *want = (float *)malloc(nv * sizeof *want);
    size_t npad = nl - nv;
    float *pad = (float *)malloc((npad ? npad : 1) * sizeof *pad);
    float *zero = (float *)calloc(npad ? npad : 1, sizeof *zero);
    size_t k = 0, kp = 0;
    for (int t = 0; t < T; t++) {
        double w1 = wl[t], w2 = we ? we[t] : 0;
        for (int j = 0; j < Vp; j++) {
            size_t i = (size_t)t * Vp + j;
            if (j >= V) {
                pad[kp++] = dl[i];
                continue;
            }
            double sc, g = ref_grad(z[i], j, y[t], lse[t], H[t], w1, w2, &sc);
            got[k] = (float)(dl[i] / sc);
            want[k] = (float)(g / sc);
            k++;
        }
    }
    char label[160];
    snprintf(label, sizeof label, "bwd dlogits/scale %s%s", tag, d_we ? " w_ent" : " w_ent=NULL");
    check(kc_close(label, got, want, nv, 1e-4f, 8e-3f));
    if (npad) {
        snprintf(label, sizeof label, "bwd padding == 0 %s%s", tag, d_we ? " w_ent" : "");
        check(kc_close(label, pad, zero, npad, 0.f, 0.f));
    }

    /* central finite differences of the loss at a few (t, j): the target, the two largest logits
     * (p_j large) and an arbitrary column (p_j tiny: loss_diff keeps its precision) */
    int ts[3] = {0, T / 2, T - 1};
    float fd[12], an[12], gpu[12];
    int nfd = 0;
    for (int a = 0; a < 3; a++) {
        int t = ts[a];
        if ((a == 1 && t == 0) || (a == 2 && (t == 0 || t == T / 2)))
            continue;
        const float *zr = z + (size_t)t * Vp;
        int j1 = 0, j2 = V > 1 ? 1 : 0;
        for (int j = 0; j < V; j++)
            if (zr[j] > zr[j1])
                j1 = j;
        for (int j = 0; j < V; j++)
            if (j != j1 && (j2 == j1 || zr[j] > zr[j2]))
                j2 = j;
        int js[4] = {y[t], j1, j2, (int)(((unsigned)t * 7919u + 13u) % (unsigned)V)};
        double w1 = wl[t], w2 = we ? we[t] : 0;
        for (int b = 0; b < 4; b++) {
            int j = js[b];
            const double h = 1e-4;
            double sc, g = ref_grad(zr[j], j, y[t], lse[t], H[t], w1, w2, &sc);
            double d = loss_diff(zr, V, j, y[t], h, w1, w2) / (2 * h);
            fd[nfd] = (float)(d / sc);
            an[nfd] = (float)(g / sc);
            gpu[nfd] = (float)(dl[(size_t)t * Vp + j] / sc);
            nfd++;
        }
    }
    snprintf(label, sizeof label, "bwd analytic vs finite diff %s%s", tag, d_we ? " w_ent" : "");
    check(kc_close(label, an, fd, (size_t)nfd, 1e-6f, 1e-6f));
    snprintf(label, sizeof label, "bwd gpu vs finite diff %s%s", tag, d_we ? " w_ent" : "");
    check(kc_close(label, gpu, fd, (size_t)nfd, 1e-4f, 8e-3f));

    free(got);
    free(want);
    free(pad);
    free(zero);
    free(dl);
    KC_CUDA(cudaFree(d_dl));
}

static void run_case(const lp_case *c, uint64_t seed)
{
    int T = c->T, V = c->V, Vp = c->V_pad;
    size_t nl = (size_t)T * Vp;
    char tag[96];
    snprintf(tag, sizeof tag, "T=%d V=%d V_pad=%d [%g,%g)", T, V, Vp, c->lo, c->hi);

    float *z = (float *)malloc(nl * sizeof *z);
    kc_fill(z, nl, seed, c->lo, c->hi);
    for (int t = 0; t < T; t++)
        for (int j = V; j < Vp; j++)
            z[(size_t)t * Vp + j] = (j % 2) ? kc_round_bf(1e4f) : NAN;
    int32_t *y = (int32_t *)malloc((size_t)T * sizeof *y);
    uint64_t st = seed * 7 + 3;
    for (int t = 0; t < T; t++)
        y[t] = (int32_t)(kc_next(&st) % (uint64_t)V);
    float *wl = (float *)malloc((size_t)T * sizeof *wl),
          *we = (float *)malloc((size_t)T * sizeof *we);
    kc_fill(wl, (size_t)T, seed + 1, -1.f, 1.f);
    kc_fill(we, (size_t)T, seed + 2, -1.f, 1.f);

    double *lse = (double *)malloc((size_t)T * sizeof *lse),
           *H = (double *)malloc((size_t)T * sizeof *H);
    float *lp_ref = (float *)malloc((size_t)T * sizeof *lp_ref);
    float *h_ref = (float *)malloc((size_t)T * sizeof *h_ref);
    for (int t = 0; t < T; t++) {
        const float *zr = z + (size_t)t * Vp;
        ref_stats(zr, V, &lse[t], &H[t]);
        lp_ref[t] = (float)((double)zr[y[t]] - lse[t]);
        h_ref[t] = (float)H[t];
    }

    kg_bf16 *d_z = kc_to_dev_bf(z, nl);
    int32_t *d_y = dev_targets(y, T);
    float *d_wl = kc_to_dev_f(wl, (size_t)T), *d_we = kc_to_dev_f(we, (size_t)T);
    float *d_lp, *d_h;
    KC_CUDA(cudaMalloc((void **)&d_lp, (size_t)T * sizeof *d_lp));
    KC_CUDA(cudaMalloc((void **)&d_h, (size_t)T * sizeof *d_h));

    /* forward, both outputs */
    KC_CUDA(kg_logprob_forward(d_lp, d_h, d_z, d_y, T, V, Vp, 0));
    KC_CUDA(cudaDeviceSynchronize());
    float *lp = (float *)malloc((size_t)T * sizeof *lp),
          *h = (float *)malloc((size_t)T * sizeof *h);
    float *lp1 = (float *)malloc((size_t)T * sizeof *lp1),
          *h1 = (float *)malloc((size_t)T * sizeof *h1);
    kc_from_dev_f(lp, d_lp, (size_t)T);
    kc_from_dev_f(h, d_h, (size_t)T);
    char label[160];
    snprintf(label, sizeof label, "fwd logp %s", tag);
    check(kc_close(label, lp, lp_ref, (size_t)T, 1e-4f, 1e-5f));
    snprintf(label, sizeof label, "fwd entropy %s", tag);
    check(kc_close(label, h, h_ref, (size_t)T, 1e-4f, 1e-4f));

    /* each output alone: the same numbers */
    KC_CUDA(cudaMemset(d_lp, 0, (size_t)T * sizeof *d_lp));
    KC_CUDA(cudaMemset(d_h, 0, (size_t)T * sizeof *d_h));
    KC_CUDA(kg_logprob_forward(d_lp, NULL, d_z, d_y, T, V, Vp, 0));
    KC_CUDA(kg_logprob_forward(NULL, d_h, d_z, NULL, T, V, Vp, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_f(lp1, d_lp, (size_t)T);
    kc_from_dev_f(h1, d_h, (size_t)T);
    snprintf(label, sizeof label, "fwd logp alone == pair %s", tag);
    check(kc_close(label, lp1, lp, (size_t)T, 0.f, 0.f));
    snprintf(label, sizeof label, "fwd entropy alone == pair %s", tag);
    check(kc_close(label, h1, h, (size_t)T, 0.f, 0.f));

    check_backward(c, tag, z, y, lse, H, wl, NULL, d_z, d_y, d_wl, NULL);
    check_backward(c, tag, z, y, lse, H, wl, we, d_z, d_y, d_wl, d_we);

    free(z);
    free(y);
    free(wl);
    free(we);
    free(lse);
    free(H);
    free(lp_ref);
    free(h_ref);
    free(lp);
    free(h);
    free(lp1);
    free(h1);
    KC_CUDA(cudaFree(d_z));
    KC_CUDA(cudaFree(d_y));
    KC_CUDA(cudaFree(d_wl));
    KC_CUDA(cudaFree(d_we));
    KC_CUDA(cudaFree(d_lp));
    KC_CUDA(cudaFree(d_h));
}

/* targets outside [0, V): NaN logp and NaN dlogits over [0, V) for those rows only */
static void invalid_targets(void)
{
    const int T = 4, V = 1000, Vp = 1024;
    size_t nl = (size_t)T * Vp;
    float *z = (float *)malloc(nl * sizeof *z);
    kc_fill(z, nl, 99, -30.f, 30.f);
    int32_t y[4] = {5, -1, V, V - 1};
    float wl[4] = {1.f, 1.f, 1.f, -0.5f};
    kg_bf16 *d_z = kc_to_dev_bf(z, nl), *d_dl;
    int32_t *d_y = dev_targets(y, T);
    float *d_wl = kc_to_dev_f(wl, 4), *d_lp;
    KC_CUDA(cudaMalloc((void **)&d_lp, T * sizeof *d_lp));
    KC_CUDA(cudaMalloc((void **)&d_dl, nl * sizeof *d_dl));
    KC_CUDA(kg_logprob_forward(d_lp, NULL, d_z, d_y, T, V, Vp, 0));
    KC_CUDA(kg_logprob_backward(d_dl, d_z, d_y, d_wl, NULL, T, V, Vp, 0));
    KC_CUDA(cudaDeviceSynchronize());
    float lp[4], *dl = (float *)malloc(nl * sizeof *dl);
    kc_from_dev_f(lp, d_lp, T);
    kc_from_dev_bf(dl, d_dl, nl);
    int ok = 1;
    for (int t = 0; t < T; t++) {
        int bad = y[t] < 0 || y[t] >= V;
        double lse, H;
        ref_stats(z + (size_t)t * Vp, V, &lse, &H);
        if (bad ? !isnan(lp[t]) : !(fabs(lp[t] - (z[(size_t)t * Vp + y[t]] - lse)) < 1e-4))
            ok = 0;
        for (int j = 0; j < Vp; j++) {
            float g = dl[(size_t)t * Vp + j];
            if (j >= V ? g != 0.f : (bad ? !isnan(g) : isnan(g)))
                ok = 0;
        }
    }
    check_true("invalid targets (-1, V): NaN logp and dlogits in their rows only", ok);
    free(z);
    free(dl);
    KC_CUDA(cudaFree(d_z));
    KC_CUDA(cudaFree(d_dl));
    KC_CUDA(cudaFree(d_y));
    KC_CUDA(cudaFree(d_wl));
    KC_CUDA(cudaFree(d_lp));
}

static void arg_errors(void)
{
    float *f;
    kg_bf16 *b;
    int32_t *y;
    KC_CUDA(cudaMalloc((void **)&f, 64));
    KC_CUDA(cudaMalloc((void **)&b, 64));
    KC_CUDA(cudaMalloc((void **)&y, 64));
    const cudaError_t inv = cudaErrorInvalidValue;
    int ok = 1;
    ok &= kg_logprob_forward(f, f, b, y, -1, 7, 8, 0) == inv;
    ok &= kg_logprob_forward(f, f, b, y, 1, 0, 8, 0) == inv;
    ok &= kg_logprob_forward(f, f, b, y, 1, 9, 8, 0) == inv;
    ok &= kg_logprob_forward(f, f, NULL, y, 1, 7, 8, 0) == inv;
    ok &= kg_logprob_forward(f, NULL, b, NULL, 1, 7, 8, 0) == inv;
    ok &= kg_logprob_backward(b, b, y, f, f, -1, 7, 8, 0) == inv;
    ok &= kg_logprob_backward(b, b, y, f, f, 1, 0, 8, 0) == inv;
    ok &= kg_logprob_backward(b, b, y, f, f, 1, 9, 8, 0) == inv;
    ok &= kg_logprob_backward(NULL, b, y, f, f, 1, 7, 8, 0) == inv;
    ok &= kg_logprob_backward(b, NULL, y, f, f, 1, 7, 8, 0) == inv;
    ok &= kg_logprob_backward(b, b, NULL, f, f, 1, 7, 8, 0) == inv;
    ok &= kg_logprob_backward(b, b, y, NULL, f, 1, 7, 8, 0) == inv;
    check_true("argument errors return cudaErrorInvalidValue", ok);
    ok = kg_logprob_forward(f, f, b, y, 0, 7, 8, 0) == cudaSuccess &&
         kg_logprob_forward(NULL, NULL, b, NULL, 3, 7, 8, 0) == cudaSuccess &&
         kg_logprob_backward(b, b, y, f, NULL, 0, 7, 8, 0) == cudaSuccess;
    KC_CUDA(cudaDeviceSynchronize());
    check_true("T = 0 and no outputs: cudaSuccess, nothing launched", ok);
    KC_CUDA(cudaFree(f));
    KC_CUDA(cudaFree(b));
    KC_CUDA(cudaFree(y));
}

static int round128(int v)
{
    return (v + 127) / 128 * 128;
}

int main(void)
{
    const int Vs[3] = {7, 1000, 151936}, Ts[3] = {1, 5, 64};
    uint64_t seed = 1;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            lp_case c = {Ts[b], Vs[a], round128(Vs[a]), -30.f, 30.f};
            run_case(&c, seed++);
        }
    const lp_case extra[] = {
        {3, 7, 7, -30.f, 30.f},               /* scalar path, no padding */
        {5, 1001, 1001, -30.f, 30.f},         /* scalar path */
        {5, 1000, 1003, -30.f, 30.f},         /* scalar path with padding */
        {3, 151935, 151936, -30.f, 30.f},     /* vector path, V not a multiple of 8 */
        {5, 1000, 1024, 970.f, 1030.f},       /* exp(z) overflows without the max */
        {2, 151936, 151936, -1030.f, -970.f}, /* and underflows */
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        run_case(&extra[i], seed++);
    invalid_targets();
    arg_errors();
    printf("%s\n", g_fail ? "test_logprob: FAIL" : "test_logprob: ok");
    return g_fail ? 1 : 0;
}
