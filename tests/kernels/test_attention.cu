/* test_attention: kg_attention_forward / kg_attention_backward against a double CPU reference of
 * the same masked attention (causal within each packed document, GQA), fed the bf16-rounded
 * inputs. Checks out, lse, dq, dk, dv on T in {1, 17, 130, 600} (one document; several of
 * varied lengths, some of length 1, crossing the 64-token tiles), Hq/Hkv in {14/2, 4/4, 8/1},
 * hd in {64, 128}; that a token's results do not move when another document's tokens change;
 * and the argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcheck.h"

/* doc_start[T] from document lengths (they add up to T) */
static int32_t *make_doc_start(const int *lens, int ndocs, int T)
{
    int32_t *ds = (int32_t *)malloc((size_t)(T > 0 ? T : 1) * sizeof *ds);
    int t = 0;
    for (int d = 0; d < ndocs; d++)
        for (int i = 0; i < lens[d]; i++, t++)
            ds[t] = t - i;
    if (t != T) {
        fprintf(stderr, "document lengths add up to %d, not %d\n", t, T);
        exit(2);
    }
    return ds;
}

/* scores of query (t, h) against its visible keys j = ds[t]..t, scaled: sc[j - ds[t]] */
static void ref_scores(double *sc, const float *q, const float *k, const int32_t *ds, int t, int h,
                       int Hq, int Hkv, int hd, double scale)
{
    const int hk = h / (Hq / Hkv);
    const float *qr = q + ((size_t)t * Hq + h) * hd;
    for (int j = ds[t]; j <= t; j++) {
        const float *kr = k + ((size_t)j * Hkv + hk) * hd;
        double acc = 0;
        for (int d = 0; d < hd; d++)
            acc += (double)qr[d] * kr[d];
        sc[j - ds[t]] = acc * scale;
    }
}

/* softmax of sc[0..n) in place into probabilities; returns the log-sum-exp */
static double ref_softmax(double *sc, int n)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = sc[i] > mx ? sc[i] : mx;
    for (int i = 0; i < n; i++)
        sum += exp(sc[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++)
        sc[i] = exp(sc[i] - lse);
    return lse;
}

static void ref_forward(double *out, double *lse, const float *q, const float *k, const float *v,
                        const int32_t *ds, int T, int Hq, int Hkv, int hd, double scale)
{
    double *p = (double *)malloc((size_t)(T > 0 ? T : 1) * sizeof *p);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hq; h++) {
            const int hk = h / (Hq / Hkv), n = t - ds[t] + 1;
            ref_scores(p, q, k, ds, t, h, Hq, Hkv, hd, scale);
            lse[(size_t)h * T + t] = ref_softmax(p, n);
            double *o = out + ((size_t)t * Hq + h) * hd;
            for (int d = 0; d < hd; d++)
                o[d] = 0;
            for (int j = ds[t]; j <= t; j++) {
                const float *vr = v + ((size_t)j * Hkv + hk) * hd;
                for (int d = 0; d < hd; d++)
                    o[d] += p[j - ds[t]] * vr[d];
            }
        }
    free(p);
}

/* the analytic backward, with the exact (double) out of ref_forward */
static void ref_backward(double *dq, double *dk, double *dv, const float *dout, const double *out,
                         const float *q, const float *k, const float *v, const int32_t *ds, int T,
                         int Hq, int Hkv, int hd, double scale)
{
    memset(dq, 0, (size_t)T * Hq * hd * sizeof *dq);
    memset(dk, 0, (size_t)T * Hkv * hd * sizeof *dk);
    memset(dv, 0, (size_t)T * Hkv * hd * sizeof *dv);
    double *p = (double *)malloc((size_t)(T > 0 ? T : 1) * sizeof *p);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hq; h++) {
            const int hk = h / (Hq / Hkv), n = t - ds[t] + 1;
            const size_t row = ((size_t)t * Hq + h) * hd;
            ref_scores(p, q, k, ds, t, h, Hq, Hkv, hd, scale);
            ref_softmax(p, n);
            double D = 0;
            for (int d = 0; d < hd; d++)
                D += (double)dout[row + d] * out[row + d];
            for (int j = ds[t]; j <= t; j++) {
                const size_t kr = ((size_t)j * Hkv + hk) * hd;
                const double pj = p[j - ds[t]];
                double dp = 0;
                for (int d = 0; d < hd; d++)
                    dp += (double)dout[row + d] * v[kr + d];
                const double dsc = pj * (dp - D) * scale;
                for (int d = 0; d < hd; d++) {
                    dq[row + d] += dsc * k[kr + d];
                    dk[kr + d] += dsc * q[row + d];
                    dv[kr + d] += pj * dout[row + d];
                }
            }
        }
    free(p);
}

static float *to_float(const double *x, size_t n)
{
    float *f = (float *)malloc((n > 0 ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

/* the device side of one problem: inputs, forward outputs, gradients */
typedef struct {
    int T, Hq, Hkv, hd;
    kg_bf16 *q, *k, *v, *dout, *out, *dq, *dk, *dv;
    float *lse;
    int32_t *ds;
} dev_att;

static void dev_alloc(dev_att *a, int T, int Hq, int Hkv, int hd, const int32_t *ds)
{
    a->T = T;
    a->Hq = Hq;
    a->Hkv = Hkv;
    a->hd = hd;
    const size_t nq = (size_t)T * Hq * hd + 1, nk = (size_t)T * Hkv * hd + 1;
    KC_CUDA(cudaMalloc((void **)&a->q, nq * 2));
    KC_CUDA(cudaMalloc((void **)&a->dout, nq * 2));
    KC_CUDA(cudaMalloc((void **)&a->out, nq * 2));
    KC_CUDA(cudaMalloc((void **)&a->dq, nq * 2));
    KC_CUDA(cudaMalloc((void **)&a->k, nk * 2));
    KC_CUDA(cudaMalloc((void **)&a->v, nk * 2));
    KC_CUDA(cudaMalloc((void **)&a->dk, nk * 2));
    KC_CUDA(cudaMalloc((void **)&a->dv, nk * 2));
    KC_CUDA(cudaMalloc((void **)&a->lse, ((size_t)T * Hq + 1) * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&a->ds, ((size_t)T + 1) * sizeof(int32_t)));
    KC_CUDA(cudaMemcpy(a->ds, ds, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice));
}

static void dev_free(dev_att *a)
{
    kg_bf16 *b[] = {a->q, a->k, a->v, a->dout, a->out, a->dq, a->dk, a->dv};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        KC_CUDA(cudaFree(b[i]));
    KC_CUDA(cudaFree(a->lse));
    KC_CUDA(cudaFree(a->ds));
}

static void upload_bf(kg_bf16 *d, const float *f, size_t n)
{
    kg_bf16 *h = (kg_bf16 *)malloc((n > 0 ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = kc_f2bf(f[i]);
    KC_CUDA(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
    free(h);
}

/* forward then backward (on the forward's own out and lse), synchronised */
static void dev_run(dev_att *a, float scale)
{
    KC_CUDA(kg_attention_forward(a->out, a->lse, a->q, a->k, a->v, a->ds, a->T, a->Hq, a->Hkv,
                                 a->hd, scale, 0));
    KC_CUDA(kg_attention_backward(a->dq, a->dk, a->dv, a->dout, a->out, a->lse, a->q, a->k, a->v,
                                  a->ds, a->T, a->Hq, a->Hkv, a->hd, scale, 0));
    KC_CUDA(cudaDeviceSynchronize());
}

/* host inputs of one problem: q, k in [-2, 2) (softmaxes neither flat nor one-hot), v and dout
 * in [-1, 1), all bf16-rounded */
typedef struct {
    float *q, *k, *v, *dout;
} host_in;

static void host_fill(host_in *h, int T, int Hq, int Hkv, int hd, uint64_t seed)
{
    const size_t nq = (size_t)T * Hq * hd, nk = (size_t)T * Hkv * hd;
    h->q = (float *)malloc((nq + 1) * sizeof(float));
    h->dout = (float *)malloc((nq + 1) * sizeof(float));
    h->k = (float *)malloc((nk + 1) * sizeof(float));
    h->v = (float *)malloc((nk + 1) * sizeof(float));
    kc_fill(h->q, nq, seed * 4 + 0, -2.f, 2.f);
    kc_fill(h->k, nk, seed * 4 + 1, -2.f, 2.f);
    kc_fill(h->v, nk, seed * 4 + 2, -1.f, 1.f);
    kc_fill(h->dout, nq, seed * 4 + 3, -1.f, 1.f);
}

static void host_free(host_in *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->dout);
}

static void host_upload(dev_att *a, const host_in *h)
{
    const size_t nq = (size_t)a->T * a->Hq * a->hd, nk = (size_t)a->T * a->Hkv * a->hd;
    upload_bf(a->q, h->q, nq);
    upload_bf(a->k, h->k, nk);
    upload_bf(a->v, h->v, nk);
    upload_bf(a->dout, h->dout, nq);
}

/* one shape against the reference: out, lse, dq, dk, dv */
static int check_case(int T, const int *lens, int ndocs, int Hq, int Hkv, int hd, uint64_t seed)
{
    const size_t nq = (size_t)T * Hq * hd, nk = (size_t)T * Hkv * hd, nl = (size_t)T * Hq;
    const double scale = 1.0 / sqrt((double)hd);
    int32_t *ds = make_doc_start(lens, ndocs, T);
    host_in in;
    host_fill(&in, T, Hq, Hkv, hd, seed);

    double *out = (double *)malloc((nq + 1) * sizeof(double));
    double *lse = (double *)malloc((nl + 1) * sizeof(double));
    double *dq = (double *)malloc((nq + 1) * sizeof(double));
    double *dk = (double *)malloc((nk + 1) * sizeof(double));
    double *dv = (double *)malloc((nk + 1) * sizeof(double));
    ref_forward(out, lse, in.q, in.k, in.v, ds, T, Hq, Hkv, hd, scale);
    ref_backward(dq, dk, dv, in.dout, out, in.q, in.k, in.v, ds, T, Hq, Hkv, hd, scale);

    dev_att a;
    dev_alloc(&a, T, Hq, Hkv, hd, ds);
    host_upload(&a, &in);
    dev_run(&a, (float)scale);

    float *g_out = (float *)malloc((nq + 1) * sizeof(float));
    float *g_lse = (float *)malloc((nl + 1) * sizeof(float));
    float *g_dq = (float *)malloc((nq + 1) * sizeof(float));
    float *g_dk = (float *)malloc((nk + 1) * sizeof(float));
    float *g_dv = (float *)malloc((nk + 1) * sizeof(float));
    kc_from_dev_bf(g_out, a.out, nq);
    kc_from_dev_f(g_lse, a.lse, nl);
    kc_from_dev_bf(g_dq, a.dq, nq);
    kc_from_dev_bf(g_dk, a.dk, nk);
    kc_from_dev_bf(g_dv, a.dv, nk);

    char desc[96], label[128];
    snprintf(desc, sizeof desc, "T=%d docs=%d Hq=%d Hkv=%d hd=%d", T, ndocs, Hq, Hkv, hd);
    float *w;
    int ok = 1;
    w = to_float(out, nq);
    snprintf(label, sizeof label, "fwd out %s", desc);
    ok &= kc_close(label, g_out, w, nq, 1e-2f, 1e-2f);
    free(w);
    w = to_float(lse, nl);
    snprintf(label, sizeof label, "fwd lse %s", desc);
    ok &= kc_close(label, g_lse, w, nl, 1e-3f, 1e-4f);
    free(w);
    w = to_float(dq, nq);
    snprintf(label, sizeof label, "bwd dq  %s", desc);
    ok &= kc_close(label, g_dq, w, nq, 2e-2f, 2e-2f);
    free(w);
    w = to_float(dk, nk);
    snprintf(label, sizeof label, "bwd dk  %s", desc);
    ok &= kc_close(label, g_dk, w, nk, 2e-2f, 2e-2f);
    free(w);
    w = to_float(dv, nk);
    snprintf(label, sizeof label, "bwd dv  %s", desc);
    ok &= kc_close(label, g_dv, w, nk, 2e-2f, 2e-2f);
    free(w);

    free(g_out);
    free(g_lse);
    free(g_dq);
    free(g_dk);
    free(g_dv);
    free(out);
    free(lse);
    free(dq);
    free(dk);
    free(dv);
    dev_free(&a);
    host_free(&in);
    free(ds);
    return ok;
}

/* bf16 device tensor [T, H, hd] to host floats */
static float *fetch_bf(const kg_bf16 *d, size_t n)
{
    float *f = (float *)malloc((n + 1) * sizeof(float));
    kc_from_dev_bf(f, d, n);
    return f;
}

/* values of rows t outside [lo, hi) where a and b differ (a NaN counts as a difference; +0 and
 * -0 do not, since adding a masked +-0 product may flip the sign of a zero sum) */
static size_t diff_outside(const float *a, const float *b, int T, int row, int lo, int hi)
{
    size_t n = 0;
    for (int t = 0; t < T; t++) {
        if (t >= lo && t < hi)
            continue;
        for (int i = 0; i < row; i++)
            n += !(a[(size_t)t * row + i] == b[(size_t)t * row + i]);
    }
    return n;
}

static size_t diff_inside(const float *a, const float *b, int row, int lo, int hi)
{
    size_t n = 0;
    for (size_t i = (size_t)lo * row; i < (size_t)hi * row; i++)
        n += a[i] != b[i];
    return n;
}

/* The mask: change q, k, v and dout of one document's tokens and check that no other token's
 * out, lse (rows [h, t]), dk, dv (bitwise: their sums only gain exact zeros) or dq (atomics add
 * in any order: within a bf16 rounding) moves, while the changed document's do. */
static int check_mask(int Hq, int Hkv, int hd)
{
    const int lens[] = {40, 1, 50, 39}, ndocs = 4, T = 130, lo = 41, hi = 91;
    const size_t nq = (size_t)T * Hq * hd, nk = (size_t)T * Hkv * hd, nl = (size_t)T * Hq;
    const float scale = 1.f / sqrtf((float)hd);
    int32_t *ds = make_doc_start(lens, ndocs, T);
    host_in in;
    host_fill(&in, T, Hq, Hkv, hd, 77);
    dev_att a;
    dev_alloc(&a, T, Hq, Hkv, hd, ds);
    host_upload(&a, &in);
    dev_run(&a, scale);
    float *out0 = fetch_bf(a.out, nq), *dq0 = fetch_bf(a.dq, nq);
    float *dk0 = fetch_bf(a.dk, nk), *dv0 = fetch_bf(a.dv, nk);
    float *lse0 = (float *)malloc((nl + 1) * sizeof(float));
    kc_from_dev_f(lse0, a.lse, nl);

    /* new values for document 2 (tokens [lo, hi)) only */
    host_in other;
    host_fill(&other, T, Hq, Hkv, hd, 78);
    for (int t = lo; t < hi; t++) {
        size_t rq = (size_t)t * Hq * hd, rk = (size_t)t * Hkv * hd;
        memcpy(in.q + rq, other.q + rq, (size_t)Hq * hd * sizeof(float));
        memcpy(in.dout + rq, other.dout + rq, (size_t)Hq * hd * sizeof(float));
        memcpy(in.k + rk, other.k + rk, (size_t)Hkv * hd * sizeof(float));
        memcpy(in.v + rk, other.v + rk, (size_t)Hkv * hd * sizeof(float));
    }
    host_upload(&a, &in);
    dev_run(&a, scale);
    float *out1 = fetch_bf(a.out, nq), *dq1 = fetch_bf(a.dq, nq);
    float *dk1 = fetch_bf(a.dk, nk), *dv1 = fetch_bf(a.dv, nk);
    float *lse1 = (float *)malloc((nl + 1) * sizeof(float));
    kc_from_dev_f(lse1, a.lse, nl);

    /* lse is [Hq, T]: transpose to [T, Hq] rows for the same row test */
    float *l0 = (float *)malloc((nl + 1) * sizeof(float));
    float *l1 = (float *)malloc((nl + 1) * sizeof(float));
    for (int h = 0; h < Hq; h++)
        for (int t = 0; t < T; t++) {
            l0[(size_t)t * Hq + h] = lse0[(size_t)h * T + t];
            l1[(size_t)t * Hq + h] = lse1[(size_t)h * T + t];
        }

    int ok = 1;
    struct {
        const char *name;
        const float *a, *b;
        int row;
    } exact[] = {{"out", out0, out1, Hq * hd},
                 {"lse", l0, l1, Hq},
                 {"dk", dk0, dk1, Hkv * hd},
                 {"dv", dv0, dv1, Hkv * hd}};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        size_t moved = diff_outside(exact[i].a, exact[i].b, T, exact[i].row, lo, hi);
        size_t changed = diff_inside(exact[i].a, exact[i].b, exact[i].row, lo, hi);
        int pass = moved == 0 && changed > 0;
        ok &= pass;
        printf("%-4s mask %s Hq=%d Hkv=%d hd=%d: %zu values of other documents moved, %zu of the "
               "changed document changed\n",
               pass ? "ok" : "FAIL", exact[i].name, Hq, Hkv, hd, moved, changed);
    }
    /* dq of the unchanged documents: within rounding of the run before */
    size_t nrow = (size_t)Hq * hd, kept = nq - (size_t)(hi - lo) * nrow;
    float *g = (float *)malloc((kept + 1) * sizeof(float));
    float *w = (float *)malloc((kept + 1) * sizeof(float));
    size_t n = 0;
    for (int t = 0; t < T; t++) {
        if (t >= lo && t < hi)
            continue;
        memcpy(g + n, dq1 + (size_t)t * nrow, nrow * sizeof(float));
        memcpy(w + n, dq0 + (size_t)t * nrow, nrow * sizeof(float));
        n += nrow;
    }
    char label[96];
    snprintf(label, sizeof label, "mask dq of other documents Hq=%d Hkv=%d hd=%d", Hq, Hkv, hd);
    ok &= kc_close(label, g, w, kept, 1e-4f, 8e-3f);

    free(g);
    free(w);
    free(l0);
    free(l1);
    free(out0);
    free(dq0);
    free(dk0);
    free(dv0);
    free(lse0);
    free(out1);
    free(dq1);
    free(dk1);
    free(dv1);
    free(lse1);
    host_free(&other);
    host_free(&in);
    dev_free(&a);
    free(ds);
    return ok;
}

/* Placement: the same document at two offsets of a packed batch (one tile-aligned, one not,
 * after documents that end inside a tile) gets bitwise the same forward out and lse: the
 * forward's key tiles start at each document's first token (kernels/attention.cu), so the same
 * prompt prefills the same in any slot of a decoding batch. */
static int check_placement(int Hq, int Hkv, int hd)
{
    const int n = 150, lens[] = {n, 23, 10, n}, ndocs = 4, T = 2 * n + 33, second = n + 33;
    const size_t qrow = (size_t)Hq * hd, krow = (size_t)Hkv * hd;
    int32_t *ds = make_doc_start(lens, ndocs, T);
    host_in in;
    host_fill(&in, T, Hq, Hkv, hd, 91);
    /* the last document is a copy of the first */
    memcpy(in.q + second * qrow, in.q, n * qrow * sizeof(float));
    memcpy(in.k + second * krow, in.k, n * krow * sizeof(float));
    memcpy(in.v + second * krow, in.v, n * krow * sizeof(float));
    dev_att a;
    dev_alloc(&a, T, Hq, Hkv, hd, ds);
    host_upload(&a, &in);
    KC_CUDA(kg_attention_forward(a.out, a.lse, a.q, a.k, a.v, a.ds, T, Hq, Hkv, hd,
                                 1.f / sqrtf((float)hd), 0));
    KC_CUDA(cudaDeviceSynchronize());
    float *out = fetch_bf(a.out, (size_t)T * qrow);
    float *lse = (float *)malloc(((size_t)T * Hq + 1) * sizeof(float));
    kc_from_dev_f(lse, a.lse, (size_t)T * Hq);
    size_t diff = diff_inside(out, out + second * qrow, (int)qrow, 0, n);
    for (int h = 0; h < Hq; h++)
        for (int t = 0; t < n; t++)
            diff += lse[(size_t)h * T + t] != lse[(size_t)h * T + second + t];
    printf("%-4s placement Hq=%d Hkv=%d hd=%d: a document at tokens 0 and %d, %zu of %zu values "
           "differ\n",
           diff == 0 ? "ok" : "FAIL", Hq, Hkv, hd, second, diff, n * qrow + (size_t)n * Hq);
    free(out);
    free(lse);
    dev_free(&a);
    host_free(&in);
    free(ds);
    return diff == 0;
}

static int expect_invalid(const char *what, cudaError_t e)
{
    int pass = e == cudaErrorInvalidValue;
    printf("%-4s args %s: %s\n", pass ? "ok" : "FAIL", what, cudaGetErrorString(e));
    return pass;
}

/* arguments the kernels cannot take: nothing is launched, cudaErrorInvalidValue comes back */
static int check_args(void)
{
    const int T = 16, lens[] = {16};
    int32_t *ds = make_doc_start(lens, 1, T);
    dev_att a;
    dev_alloc(&a, T, 8, 2, 128, ds); /* big enough for every call below */
    int ok = 1;
    ok &= expect_invalid(
        "fwd hd=96", kg_attention_forward(a.out, a.lse, a.q, a.k, a.v, a.ds, T, 4, 2, 96, 0.1f, 0));
    ok &= expect_invalid("bwd hd=96",
                         kg_attention_backward(a.dq, a.dk, a.dv, a.dout, a.out, a.lse, a.q, a.k,
                                               a.v, a.ds, T, 4, 2, 96, 0.1f, 0));
    ok &= expect_invalid("fwd Hq=6 Hkv=4", kg_attention_forward(a.out, a.lse, a.q, a.k, a.v, a.ds,
                                                                T, 6, 4, 64, 0.125f, 0));
    ok &= expect_invalid("bwd Hq=6 Hkv=4",
                         kg_attention_backward(a.dq, a.dk, a.dv, a.dout, a.out, a.lse, a.q, a.k,
                                               a.v, a.ds, T, 6, 4, 64, 0.125f, 0));
    ok &= expect_invalid("fwd Hkv=0", kg_attention_forward(a.out, a.lse, a.q, a.k, a.v, a.ds, T, 4,
                                                           0, 64, 0.125f, 0));
    ok &= expect_invalid("fwd T=-1", kg_attention_forward(a.out, a.lse, a.q, a.k, a.v, a.ds, -1, 4,
                                                          2, 64, 0.125f, 0));
    cudaError_t e = cudaGetLastError();
    printf("%-4s args: no error left behind (%s)\n", e == cudaSuccess ? "ok" : "FAIL",
           cudaGetErrorString(e));
    ok &= e == cudaSuccess;
    dev_free(&a);
    free(ds);
    return ok;
}

int main(void)
{
    /* document layouts per T: one document, and several (length-1 ones included, boundaries off
     * the 64-token tiles) */
    static const int l1[] = {1};
    static const int l17a[] = {17}, l17b[] = {5, 1, 11};
    static const int l130a[] = {130}, l130b[] = {1, 64, 1, 30, 34};
    static const int l600a[] = {600}, l600b[] = {1, 200, 1, 63, 335};
    struct {
        int T;
        const int *lens;
        int ndocs;
    } layouts[] = {{1, l1, 1}, {17, l17a, 1}, {17, l17b, 3}, {130, l130a, 1}, {130, l130b, 5}};
    static const int heads[][2] = {{14, 2}, {4, 4}, {8, 1}};
    static const int hds[] = {64, 128};

    int ok = 1;
    uint64_t seed = 1;
    if (kc_small()) { /* under racecheck: the multi-tile, multi-document layout, each hd */
        ok &= check_case(130, l130b, 5, 14, 2, 64, seed++);
        ok &= check_case(130, l130b, 5, 4, 4, 128, seed++);
        ok &= check_case(17, l17b, 3, 8, 1, 64, seed++);
        ok &= check_args();
        printf("%s\n", ok ? "all attention checks passed (small shapes)" : "attention: FAILED");
        return ok ? 0 : 1;
    }
    /* every combination up to T = 130 */
    for (size_t li = 0; li < sizeof layouts / sizeof layouts[0]; li++)
        for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
            for (size_t di = 0; di < sizeof hds / sizeof hds[0]; di++)
                ok &= check_case(layouts[li].T, layouts[li].lens, layouts[li].ndocs, heads[hi][0],
                                 heads[hi][1], hds[di], seed++);
    /* T = 600 (10 tiles, long documents): each head layout and hd once or more, not all 12
     * combinations, so that the double reference stays within a few seconds */
    ok &= check_case(600, l600a, 1, 14, 2, 64, seed++);
    ok &= check_case(600, l600a, 1, 8, 1, 128, seed++);
    ok &= check_case(600, l600b, 5, 4, 4, 128, seed++);
    ok &= check_case(600, l600b, 5, 14, 2, 128, seed++);
    ok &= check_mask(14, 2, 64);
    ok &= check_mask(8, 1, 128);
    ok &= check_placement(14, 2, 64);
    ok &= check_placement(4, 4, 128);
    ok &= check_args();
    printf("%s\n", ok ? "all attention checks passed" : "SOME ATTENTION CHECKS FAILED");
    return ok ? 0 : 1;
}
