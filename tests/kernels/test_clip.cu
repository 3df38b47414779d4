/* test_clip: kg_sumsq_accumulate and kg_clip_scale against double.
 * Sums of squares of one tensor at a time (sizes 1, 7, 1000, 4099, 1<<20 + 5, a misaligned one),
 * then of all of them accumulated into one scalar, and n = 0 (nothing changes, cudaSuccess, even
 * with grad NULL). The scale for norms above, at and below max_norm, for a zero sum and for a NaN
 * sum (NaN, as torch's clamp), and the argument errors. */
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

static double ref_sumsq(const float *g, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
}

static float get_scalar(const float *d)
{
    float f;
    KC_CUDA(cudaMemcpy(&f, d, sizeof f, cudaMemcpyDeviceToHost));
    return f;
}

static void set_scalar(float *d, float f)
{
    KC_CUDA(cudaMemcpy(d, &f, sizeof f, cudaMemcpyHostToDevice));
}

#define NT 6

static void sums(float *d_sum)
{
    const size_t ns[NT] = {1, 7, 1000, 4099, (1u << 20) + 5, 333};
    const int offs[NT] = {0, 0, 0, 0, 0, 1}; /* the last one starts 4 bytes into its buffer */
    float *h[NT], *base[NT], *d[NT];
    double total = 0;
    char label[128];
    for (int k = 0; k < NT; k++) {
        h[k] = (float *)malloc(ns[k] * sizeof *h[k]);
        kc_fill(h[k], ns[k], 10 + (uint64_t)k, -2.f, 2.f);
        KC_CUDA(cudaMalloc((void **)&base[k], (ns[k] + 1) * sizeof(float)));
        d[k] = base[k] + offs[k];
        KC_CUDA(cudaMemcpy(d[k], h[k], ns[k] * sizeof(float), cudaMemcpyHostToDevice));

        /* one tensor alone */
        KC_CUDA(cudaMemset(d_sum, 0, sizeof(float)));
        KC_CUDA(kg_sumsq_accumulate(d_sum, d[k], ns[k], 0));
        KC_CUDA(cudaDeviceSynchronize());
        double r = ref_sumsq(h[k], ns[k]);
        float got = get_scalar(d_sum), want = (float)r;
        snprintf(label, sizeof label, "sumsq n=%zu%s", ns[k], offs[k] ? " misaligned" : "");
        check(kc_close(label, &got, &want, 1, 0.f, 2e-5f));
        total += r;
    }

    /* all of them into one scalar, with n = 0 calls between (grad NULL and not) */
    KC_CUDA(cudaMemset(d_sum, 0, sizeof(float)));
    int ok0 = 1;
    for (int k = 0; k < NT; k++) {
        KC_CUDA(kg_sumsq_accumulate(d_sum, d[k], ns[k], 0));
        ok0 &= kg_sumsq_accumulate(d_sum, d[k], 0, 0) == cudaSuccess;
        ok0 &= kg_sumsq_accumulate(d_sum, NULL, 0, 0) == cudaSuccess;
    }
    KC_CUDA(cudaDeviceSynchronize());
    float got = get_scalar(d_sum), want = (float)total;
    check(kc_close("sumsq accumulated over 6 tensors (+ n = 0 calls)", &got, &want, 1, 0.f, 2e-5f));
    check_true("n = 0 returns cudaSuccess", ok0);

    /* n = 0 alone leaves the sum as it is */
    set_scalar(d_sum, 12.5f);
    KC_CUDA(kg_sumsq_accumulate(d_sum, d[0], 0, 0));
    KC_CUDA(cudaDeviceSynchronize());
    check_true("n = 0 leaves *sumsq unchanged", get_scalar(d_sum) == 12.5f);

    /* the scale of the accumulated sum, for max_norm below, at and above its norm */
    set_scalar(d_sum, got);
    double norm = sqrt((double)got);
    const double mults[4] = {0.25, 0.999, 1.0, 4.0};
    float *d_scale;
    KC_CUDA(cudaMalloc((void **)&d_scale, sizeof(float)));
    for (int k = 0; k < 4; k++) {
        float mn = (float)(norm * mults[k]);
        KC_CUDA(kg_clip_scale(d_scale, d_sum, mn, 0));
        KC_CUDA(cudaDeviceSynchronize());
        double c = (double)mn / (norm + 1e-6);
        float s = get_scalar(d_scale), w = (float)(c < 1 ? c : 1);
        snprintf(label, sizeof label, "clip scale, max_norm = %g x norm %g", mults[k], norm);
        check(kc_close(label, &s, &w, 1, 0.f, 1e-6f));
    }
    for (int k = 0; k < NT; k++) {
        free(h[k]);
        KC_CUDA(cudaFree(base[k]));
    }
    KC_CUDA(cudaFree(d_scale));
}

static void scales(float *d_sum)
{
    float *d_scale;
    KC_CUDA(cudaMalloc((void **)&d_scale, sizeof(float)));
    /* sumsq 16: norm 4 */
    const float mns[3] = {1.f, 4.f, 100.f};
    for (int k = 0; k < 3; k++) {
        set_scalar(d_sum, 16.f);
        KC_CUDA(kg_clip_scale(d_scale, d_sum, mns[k], 0));
        KC_CUDA(cudaDeviceSynchronize());
        double c = mns[k] / (4.0 + 1e-6);
        float s = get_scalar(d_scale), w = (float)(c < 1 ? c : 1);
        char label[96];
        snprintf(label, sizeof label, "clip scale, norm 4, max_norm %g", mns[k]);
        check(kc_close(label, &s, &w, 1, 0.f, 1e-6f));
    }
    set_scalar(d_sum, 0.f);
    KC_CUDA(kg_clip_scale(d_scale, d_sum, 1.f, 0));
    KC_CUDA(cudaDeviceSynchronize());
    check_true("clip scale, zero gradient: 1", get_scalar(d_scale) == 1.f);
    set_scalar(d_sum, NAN);
    KC_CUDA(kg_clip_scale(d_scale, d_sum, 1.f, 0));
    KC_CUDA(cudaDeviceSynchronize());
    check_true("clip scale, NaN sum: NaN", isnan(get_scalar(d_scale)));
    set_scalar(d_sum, INFINITY);
    KC_CUDA(kg_clip_scale(d_scale, d_sum, 1.f, 0));
    KC_CUDA(cudaDeviceSynchronize());
    check_true("clip scale, inf sum: 0", get_scalar(d_scale) == 0.f);

    const cudaError_t inv = cudaErrorInvalidValue;
    int ok = 1;
    ok &= kg_sumsq_accumulate(NULL, d_sum, 4, 0) == inv;
    ok &= kg_sumsq_accumulate(d_sum, NULL, 4, 0) == inv;
    ok &= kg_clip_scale(NULL, d_sum, 1.f, 0) == inv;
    ok &= kg_clip_scale(d_scale, NULL, 1.f, 0) == inv;
    ok &= kg_clip_scale(d_scale, d_sum, -1.f, 0) == inv;
    ok &= kg_clip_scale(d_scale, d_sum, NAN, 0) == inv;
    check_true("argument errors return cudaErrorInvalidValue", ok);
    KC_CUDA(cudaFree(d_scale));
}

int main(void)
{
    float *d_sum;
    KC_CUDA(cudaMalloc((void **)&d_sum, sizeof(float)));
    sums(d_sum);
    scales(d_sum);
    KC_CUDA(cudaFree(d_sum));
    printf("%s\n", g_fail ? "test_clip: FAIL" : "test_clip: ok");
    return g_fail ? 1 : 0;
}
