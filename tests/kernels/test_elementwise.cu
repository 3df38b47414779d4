/* test_elementwise: the small kernels of elementwise.cu against double-precision CPU references.
 *   - kg_add: y += x against the sum rounded once to bf16 (aligned and misaligned buffers, counts
 *     that leave a tail after the 8-wide groups);
 *   - kg_bias_grad: column sums ACCUMULATED into a db that starts non-zero (an overwrite would
 *     lose the start value), T of 1, a few bands, and enough rows to take several bands;
 *   - kg_value_head_forward / _backward: values = h w + b, dh = dv w, dw += dv^T h, db += sum dv,
 *     the accumulations again on non-zero starts, and the forward without a bias;
 *   - kg_f32_to_bf16: bit for bit against round-to-nearest-even, ties and specials included;
 *   - the argument errors, and the no-ops (T = 0, n = 0).
 * KGYM_KERNEL_SMALL=1 keeps only the small shapes. */
#include "kcheck.h"

static int g_ok = 1;

static void check(int ok)
{
    g_ok &= ok;
}

/* ---- kg_add ---- */

static void add_case(size_t n, int misalign, uint64_t seed)
{
    /* misalign: the data start one element (2 bytes) into the allocations, so the 16-byte path
     * cannot be taken */
    size_t off = misalign ? 1 : 0;
    float *y = (float *)malloc((n + 1) * 4), *x = (float *)malloc((n + 1) * 4);
    float *got = (float *)malloc(n * 4), *want = (float *)malloc(n * 4);
    kc_fill(y, n + 1, seed, -4.f, 4.f);
    kc_fill(x, n + 1, seed + 1, -4.f, 4.f);
    kg_bf16 *yd = kc_to_dev_bf(y, n + 1), *xd = kc_to_dev_bf(x, n + 1);
    KC_CUDA(kg_add(yd + off, xd + off, n, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, yd + off, n);
    for (size_t i = 0; i < n; i++)
        want[i] = kc_round_bf((float)((double)y[i + off] + (double)x[i + off]));
    char label[96];
    snprintf(label, sizeof label, "add n %zu%s", n, misalign ? " misaligned" : "");
    /* the kernel rounds the fp32 sum, the reference the exact one: they can differ by one bf16
     * step (2^-8 relative) when the fp32 sum itself rounded; x (the wrong operand) or y alone
     * would miss by |x| or |y|, far more */
    check(kc_close(label, got, want, n, 1e-6f, 1.0f / 128));
    KC_CUDA(cudaFree(yd));
    KC_CUDA(cudaFree(xd));
    free(y), free(x), free(got), free(want);
}

/* ---- kg_bias_grad ---- */

static void bias_case(int T, int n, uint64_t seed)
{
    size_t nd = (size_t)T * n;
    float *dy = (float *)malloc(nd * 4), *db0 = (float *)malloc((size_t)n * 4);
    float *got = (float *)malloc((size_t)n * 4), *want = (float *)malloc((size_t)n * 4);
    kc_fill(dy, nd, seed, -1.f, 1.f);
    kc_fill(db0, (size_t)n, seed + 1, -3.f, 3.f);
    kg_bf16 *dyd = kc_to_dev_bf(dy, nd);
    float *dbd = kc_to_dev_f(db0, (size_t)n);
    KC_CUDA(kg_bias_grad(dbd, dyd, T, n, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_f(got, dbd, (size_t)n);
    for (int j = 0; j < n; j++) {
        double s = db0[j];
        for (int t = 0; t < T; t++)
            s += dy[(size_t)t * n + j];
        want[j] = (float)s;
    }
    char label[96];
    snprintf(label, sizeof label, "bias_grad T %d n %d (+= onto a non-zero db)", T, n);
    /* fp32 sums of T terms |dy| <= 1, in bands of 64 then one atomic per band: the rounding
     * (~1e-7 of each partial, random in sign) stays far below 2e-6 * T; a row missed or counted
     * twice moves a sum by |dy| ~ 0.5, an overwrite by |db0| ~ 1.5 */
    check(kc_close(label, got, want, (size_t)n, 2e-6f * (float)T + 1e-5f, 1e-5f));
    KC_CUDA(cudaFree(dyd));
    KC_CUDA(cudaFree(dbd));
    free(dy), free(db0), free(got), free(want);
}

/* ---- the value head ---- */

static void value_case(int T, int n, int with_bias, uint64_t seed)
{
    size_t nh = (size_t)T * n;
    float *h = (float *)malloc(nh * 4), *w = (float *)malloc((size_t)n * 4), b = 0.f;
    float *dv = (float *)malloc((size_t)T * 4), *dw0 = (float *)malloc((size_t)n * 4), db0;
    kc_fill(h, nh, seed, -2.f, 2.f);
    kc_fill(w, (size_t)n, seed + 1, -0.1f, 0.1f);
    kc_fill(&b, 1, seed + 2, -1.f, 1.f);
    kc_fill(dv, (size_t)T, seed + 3, -1.f, 1.f);
    kc_fill(dw0, (size_t)n, seed + 4, -1.f, 1.f);
    kc_fill(&db0, 1, seed + 5, -1.f, 1.f);
    for (int t = 0; t < T; t++) /* dvalues are fp32: give them bits below bf16's */
        dv[t] += 1e-4f * (float)(t % 7);

    kg_bf16 *hd = kc_to_dev_bf(h, nh), *wd = kc_to_dev_bf(w, (size_t)n), *bd = kc_to_dev_bf(&b, 1),
            *dhd;
    float *vd, *dvd = kc_to_dev_f(dv, (size_t)T), *dwd = kc_to_dev_f(dw0, (size_t)n);
    float *dbd = kc_to_dev_f(&db0, 1);
    KC_CUDA(cudaMalloc((void **)&vd, (size_t)T * 4));
    KC_CUDA(cudaMalloc((void **)&dhd, nh * 2));

    float *got = (float *)malloc(nh * 4), *want = (float *)malloc(nh * 4);
    char label[128];

    /* forward: sums of n products |h w| <= 0.2 in fp32; bias missing or doubled misses by |b| */
    KC_CUDA(kg_value_head_forward(vd, hd, wd, with_bias ? bd : NULL, T, n, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_f(got, vd, (size_t)T);
    for (int t = 0; t < T; t++) {
        double s = with_bias ? b : 0.0;
        for (int i = 0; i < n; i++)
            s += (double)h[(size_t)t * n + i] * w[i];
        want[t] = (float)s;
    }
    snprintf(label, sizeof label, "value_head fwd T %d n %d%s", T, n, with_bias ? "" : " no bias");
    check(kc_close(label, got, want, (size_t)T, 1e-5f, 1e-5f));

    /* backward */
    KC_CUDA(kg_value_head_backward(dhd, dwd, dbd, dvd, hd, wd, T, n, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, dhd, nh);
    for (size_t e = 0; e < nh; e++)
        want[e] = (float)((double)dv[e / n] * w[e % n]);
    snprintf(label, sizeof label, "value_head dh T %d n %d", T, n);
    check(kc_close(label, got, want, nh, 1e-8f, 1.0f / 128)); /* one bf16 rounding */

    kc_from_dev_f(got, dwd, (size_t)n);
    for (int i = 0; i < n; i++) {
        double s = dw0[i];
        for (int t = 0; t < T; t++)
            s += (double)dv[t] * h[(size_t)t * n + i];
        want[i] = (float)s;
    }
    snprintf(label, sizeof label, "value_head dw T %d n %d (+=)", T, n);
    check(kc_close(label, got, want, (size_t)n, 4e-6f * (float)T + 1e-5f, 1e-5f));

    float dbg;
    kc_from_dev_f(&dbg, dbd, 1);
    double dbw = db0;
    for (int t = 0; t < T; t++)
        dbw += dv[t];
    float dbf = (float)dbw;
    snprintf(label, sizeof label, "value_head db T %d (+=)", T);
    check(kc_close(label, &dbg, &dbf, 1, 2e-6f * (float)T + 1e-5f, 1e-5f));

    KC_CUDA(cudaFree(hd));
    KC_CUDA(cudaFree(wd));
    KC_CUDA(cudaFree(bd));
    KC_CUDA(cudaFree(dhd));
    KC_CUDA(cudaFree(vd));
    KC_CUDA(cudaFree(dvd));
    KC_CUDA(cudaFree(dwd));
    KC_CUDA(cudaFree(dbd));
    free(h), free(w), free(dv), free(dw0), free(got), free(want);
}

/* ---- kg_f32_to_bf16 ---- */

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void convert_case(size_t n, int misalign, uint64_t seed)
{
    float *src = (float *)malloc((n + 1) * 4);
    uint64_t st = seed;
    for (size_t i = 0; i < n + 1; i++) { /* any bit pattern but NaN: all exponents, roundings */
        uint32_t u = (uint32_t)(kc_next(&st) >> 32);
        if ((u & 0x7f800000u) == 0x7f800000u)
            u &= 0xbfffffffu; /* inf / NaN exponent: halve it instead */
        src[i] = from_bits(u);
    }
    /* the exact ties (round to even, both ways), overflow to inf, inf, zeros, a subnormal */
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800000u,
                                0xff800000u, 0x00000000u, 0x80000000u, 0x00000001u};
    for (size_t k = 0; k < sizeof special / sizeof special[0] && k < n; k++)
        src[k + 1] = from_bits(special[k]);
    float *sd = kc_to_dev_f(src, n + 1);
    kg_bf16 *dd, *host = (kg_bf16 *)malloc((n + 1) * 2);
    KC_CUDA(cudaMalloc((void **)&dd, (n + 1) * 2));
    size_t off = misalign ? 1 : 0;
    KC_CUDA(kg_f32_to_bf16(dd + off, sd + off, n, 0));
    KC_CUDA(cudaDeviceSynchronize());
    KC_CUDA(cudaMemcpy(host, dd + off, n * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (host[i] != kc_f2bf(src[i + off]) && bad++ == 0)
            first = i;
    printf("%-4s f32_to_bf16 n %zu%s: %zu of %zu bits differ", bad ? "FAIL" : "ok", n,
           misalign ? " misaligned" : "", bad, n);
    if (bad)
        printf(" (first at %zu: %a -> 0x%04x, want 0x%04x)", first, (double)src[first + off],
               host[first], kc_f2bf(src[first + off]));
    printf("\n");
    check(bad == 0);
    KC_CUDA(cudaFree(sd));
    KC_CUDA(cudaFree(dd));
    free(src), free(host);
}

/* ---- argument errors ---- */

static int expect(const char *label, cudaError_t got, cudaError_t want)
{
    int ok = got == want;
    printf("%-4s %s: got %s\n", ok ? "ok" : "FAIL", label, cudaGetErrorName(got));
    return ok;
}

static void arg_errors(void)
{
    kg_bf16 *b;
    float *f;
    KC_CUDA(cudaMalloc((void **)&b, 256 * 2));
    KC_CUDA(cudaMalloc((void **)&f, 256 * 4));
    cudaError_t inval = cudaErrorInvalidValue, fine = cudaSuccess;
    check(expect("add y NULL", kg_add(NULL, b, 4, 0), inval));
    check(expect("add x NULL", kg_add(b, NULL, 4, 0), inval));
    check(expect("add n = 0 is a no-op", kg_add(NULL, NULL, 0, 0), fine));
    check(expect("bias_grad T < 0", kg_bias_grad(f, b, -1, 4, 0), inval));
    check(expect("bias_grad n = 0", kg_bias_grad(f, b, 4, 0, 0), inval));
    check(expect("bias_grad db NULL", kg_bias_grad(NULL, b, 4, 4, 0), inval));
    check(expect("bias_grad dy NULL", kg_bias_grad(f, NULL, 4, 4, 0), inval));
    check(expect("bias_grad T = 0 is a no-op", kg_bias_grad(f, b, 0, 4, 0), fine));
    check(expect("value fwd T < 0", kg_value_head_forward(f, b, b, b, -1, 4, 0), inval));
    check(expect("value fwd n = 0", kg_value_head_forward(f, b, b, b, 4, 0, 0), inval));
    check(expect("value fwd values NULL", kg_value_head_forward(NULL, b, b, b, 4, 4, 0), inval));
    check(expect("value fwd h NULL", kg_value_head_forward(f, NULL, b, b, 4, 4, 0), inval));
    check(expect("value fwd w NULL", kg_value_head_forward(f, b, NULL, b, 4, 4, 0), inval));
    check(expect("value fwd T = 0 is a no-op", kg_value_head_forward(f, b, b, b, 0, 4, 0), fine));
    check(expect("value bwd dh NULL", kg_value_head_backward(NULL, f, f, f, b, b, 4, 4, 0), inval));
    check(expect("value bwd dw NULL", kg_value_head_backward(b, NULL, f, f, b, b, 4, 4, 0), inval));
    check(expect("value bwd dv NULL", kg_value_head_backward(b, f, f, NULL, b, b, 4, 4, 0), inval));
    check(expect("value bwd h NULL", kg_value_head_backward(b, f, f, f, NULL, b, 4, 4, 0), inval));
    check(expect("value bwd w NULL", kg_value_head_backward(b, f, f, f, b, NULL, 4, 4, 0), inval));
    check(expect("value bwd n = 0", kg_value_head_backward(b, f, f, f, b, b, 4, 0, 0), inval));
    check(expect("f32_to_bf16 dst NULL", kg_f32_to_bf16(NULL, f, 4, 0), inval));
    check(expect("f32_to_bf16 src NULL", kg_f32_to_bf16(b, NULL, 4, 0), inval));
    check(expect("f32_to_bf16 n = 0 is a no-op", kg_f32_to_bf16(NULL, NULL, 0, 0), fine));
    check(expect("no launch error left behind", cudaDeviceSynchronize(), fine));
    KC_CUDA(cudaFree(b));
    KC_CUDA(cudaFree(f));
}

int main(void)
{
    int small = kc_small();
    uint64_t seed = 7;
    add_case(1, 0, seed++);
    add_case(77, 0, seed++);
    add_case(77, 1, seed++);
    bias_case(1, 5, seed++);
    bias_case(130, 77, seed++); /* three bands, a partial block of columns */
    value_case(1, 64, 1, seed++);
    value_case(37, 77, 1, seed++);
    value_case(9, 64, 0, seed++);
    convert_case(1, 0, seed++);
    convert_case(4099, 0, seed++);
    convert_case(4099, 1, seed++);
    if (!small) { /* Qwen2.5-0.5B shapes: a residual of 4096 tokens, bias grads, the head */
        add_case((size_t)4096 * 896 + 3, 0, seed++);
        bias_case(4096, 896, seed++);
        bias_case(4096, 128, seed++);
        value_case(4096, 896, 1, seed++);
        convert_case((size_t)1 << 22, 0, seed++);
    }
    arg_errors();
    printf("%s\n", g_ok ? "elementwise: all checks passed" : "elementwise: FAILED");
    return g_ok ? 0 : 1;
}
