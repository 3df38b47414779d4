/* test_adamw: kg_adamw_step against a double-precision CPU AdamW (torch.optim.AdamW's formula,
 * written out below), 10 steps with fresh gradients each, weight decay and grad_scale != 1.
 * n in {1, 1023, 1<<20 + 3}, param NULL and not, plus a misaligned buffer (the scalar path) and
 * a run without weight decay. Checks master, m, v against double after the 10 steps, param equal
 * to bf16(master) bit for bit and close to the double master, and the argument errors. */
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

typedef struct aw_cfg {
    float lr, beta1, beta2, eps, wd, grad_scale;
} aw_cfg;

/* one AdamW step in double, torch.optim.AdamW's semantics:
 * g *= grad_scale; p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= lr * mhat / (sqrt(vhat) + eps), mhat = m / (1 - b1^t), vhat = v / (1 - b2^t) */
static void ref_step(double *p, double *m, double *v, const float *grad, size_t n, const aw_cfg *c,
                     int step)
{
    double lr = c->lr, b1 = c->beta1, b2 = c->beta2, eps = c->eps, wd = c->wd;
    double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * (double)c->grad_scale;
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        p[i] *= 1 - lr * wd;
        p[i] -= lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + eps);
    }
}

/* device buffer of n floats starting `off` floats into an allocation (off = 1: misaligned) */
static float *dev_f(const float *h, size_t n, int off, float **base)
{
    KC_CUDA(cudaMalloc((void **)base, (n + 1) * sizeof(float)));
    float *d = *base + off;
    if (h)
        KC_CUDA(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    else
        KC_CUDA(cudaMemset(d, 0, n * sizeof *d));
    return d;
}

static float *to_float(const double *d, size_t n)
{
    float *f = (float *)malloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)d[i];
    return f;
}

static void run_case(size_t n, int with_param, int off, const aw_cfg *c, uint64_t seed)
{
    const int steps = 10;
    char tag[128];
    snprintf(tag, sizeof tag, "n=%zu%s%s wd=%g gs=%g", n, with_param ? " param" : " param=NULL",
             off ? " misaligned" : "", c->wd, c->grad_scale);

    float *p0 = (float *)malloc(n * sizeof *p0), *g = (float *)malloc(n * sizeof *g);
    kc_fill(p0, n, seed, -1.f, 1.f);
    double *p = (double *)malloc(n * sizeof *p);
    double *m = (double *)calloc(n, sizeof *m), *v = (double *)calloc(n, sizeof *v);
    for (size_t i = 0; i < n; i++)
        p[i] = p0[i];

    float *bp, *bg, *bm, *bv;
    float *d_p = dev_f(p0, n, off, &bp), *d_g = dev_f(NULL, n, off, &bg);
    float *d_m = dev_f(NULL, n, off, &bm), *d_v = dev_f(NULL, n, off, &bv);
    uint16_t *bparam = NULL;
    kg_bf16 *d_param = NULL;
    if (with_param) {
        KC_CUDA(cudaMalloc((void **)&bparam, (n + 1) * sizeof *bparam));
        d_param = bparam + off;
    }

    for (int step = 1; step <= steps; step++) {
        kc_fill(g, n, seed * 131 + (uint64_t)step, -1.f, 1.f);
        KC_CUDA(cudaMemcpy(d_g, g, n * sizeof *g, cudaMemcpyHostToDevice));
        KC_CUDA(kg_adamw_step(d_p, d_param, d_g, d_m, d_v, n, c->lr, c->beta1, c->beta2, c->eps,
                              c->wd, step, c->grad_scale, 0));
        ref_step(p, m, v, g, n, c, step);
    }
    KC_CUDA(cudaDeviceSynchronize());

    float *gp = (float *)malloc(n * sizeof *gp), *gm = (float *)malloc(n * sizeof *gm);
    float *gv = (float *)malloc(n * sizeof *gv);
    kc_from_dev_f(gp, d_p, n);
    kc_from_dev_f(gm, d_m, n);
    kc_from_dev_f(gv, d_v, n);
    float *rp = to_float(p, n), *rm = to_float(m, n), *rv = to_float(v, n);
    char label[192];
    snprintf(label, sizeof label, "master after %d steps %s", steps, tag);
    check(kc_close(label, gp, rp, n, 2e-6f, 1e-5f));
    snprintf(label, sizeof label, "m after %d steps %s", steps, tag);
    check(kc_close(label, gm, rm, n, 1e-6f, 1e-5f));
    snprintf(label, sizeof label, "v after %d steps %s", steps, tag);
    check(kc_close(label, gv, rv, n, 1e-7f, 1e-5f));
    if (with_param) {
        float *gb = (float *)malloc(n * sizeof *gb), *rb = (float *)malloc(n * sizeof *rb);
        kc_from_dev_bf(gb, d_param, n);
        for (size_t i = 0; i < n; i++)
            rb[i] = kc_round_bf(gp[i]);
        snprintf(label, sizeof label, "param == bf16(master) %s", tag);
        check(kc_close(label, gb, rb, n, 0.f, 0.f));
        snprintf(label, sizeof label, "param vs double master %s", tag);
        check(kc_close(label, gb, rp, n, 1e-5f, 8e-3f));
        free(gb);
        free(rb);
        KC_CUDA(cudaFree(bparam));
    }

    free(p0);
    free(g);
    free(p);
    free(m);
    free(v);
    free(gp);
    free(gm);
    free(gv);
    free(rp);
    free(rm);
    free(rv);
    KC_CUDA(cudaFree(bp));
    KC_CUDA(cudaFree(bg));
    KC_CUDA(cudaFree(bm));
    KC_CUDA(cudaFree(bv));
}

static void arg_errors(void)
{
    float *f;
    kg_bf16 *b;
    KC_CUDA(cudaMalloc((void **)&f, 64));
    KC_CUDA(cudaMalloc((void **)&b, 64));
    const cudaError_t inv = cudaErrorInvalidValue;
    int ok = 1;
    ok &= kg_adamw_step(NULL, b, f, f, f, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, NULL, f, f, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, NULL, f, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, f, NULL, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, f, f, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 0, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, f, f, 4, -1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, f, f, 4, 1e-3f, 1.0f, 0.999f, 1e-8f, 0.f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, f, f, 4, 1e-3f, 0.9f, 1.0f, 1e-8f, 0.f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, f, f, 4, 1e-3f, 0.9f, 0.999f, -1e-8f, 0.f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, f, f, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, -0.1f, 1, 1.f, 0) == inv;
    ok &= kg_adamw_step(f, b, f, f, f, 4, NAN, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f, 0) == inv;
    check_true("argument errors return cudaErrorInvalidValue", ok);
    ok = kg_adamw_step(NULL, NULL, NULL, NULL, NULL, 0, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f,
                       0) == cudaSuccess;
    KC_CUDA(cudaDeviceSynchronize());
    check_true("n = 0: cudaSuccess, nothing launched", ok);
    KC_CUDA(cudaFree(f));
    KC_CUDA(cudaFree(b));
}

int main(void)
{
    const aw_cfg c = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.37f};
    const aw_cfg nowd = {3e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1.f};
    const size_t ns[3] = {1, 1023, (1u << 20) + 3};
    uint64_t seed = 1;
    for (int a = 0; a < 3; a++)
        for (int wp = 0; wp < 2; wp++)
            run_case(ns[a], wp, 0, &c, seed++);
    run_case(1023, 1, 1, &c, seed++);    /* misaligned: one element at a time */
    run_case(4099, 1, 0, &nowd, seed++); /* no weight decay, no scaling */
    arg_errors();
    printf("%s\n", g_fail ? "test_adamw: FAIL" : "test_adamw: ok");
    return g_fail ? 1 : 0;
}
