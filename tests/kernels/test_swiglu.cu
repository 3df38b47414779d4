/* test_swiglu: kg_swiglu_forward / kg_swiglu_backward against a CPU reference in double:
 *   h = silu(g) * up, silu(g) = g * sigmoid(g)
 *   dgate = dh * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dup = dh * silu(g)
 * Counts {1, 4863, 8*4864+5} (the 8-wide path with tails of 1, 7 and 5), 8*4864 (no tail), 4863
 * on misaligned pointers (the scalar path), and outputs written over their inputs. gate includes
 * values far enough out (|g| up to 100) that e^-g overflows or underflows in fp32. */
#include "kcheck.h"

static double sigmoid(double g)
{
    return 1.0 / (1.0 + exp(-g));
}

static void ref_swiglu(float *h, float *dgate, float *dup, const float *dh, const float *g,
                       const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double s = sigmoid(g[i]), silu = g[i] * s;
        h[i] = (float)(silu * u[i]);
        dgate[i] = (float)((double)dh[i] * u[i] * s * (1.0 + g[i] * (1.0 - s)));
        dup[i] = (float)(dh[i] * silu);
    }
}

/* a bf16 device copy starting `off` elements into its allocation; *base is what to cudaFree */
static kg_bf16 *dev_bf_at(const float *f, size_t n, int off, kg_bf16 **base)
{
    float *pad = (float *)calloc(n + (size_t)off, sizeof *pad);
    memcpy(pad + off, f, n * sizeof *f);
    *base = kc_to_dev_bf(pad, n + (size_t)off);
    free(pad);
    return *base + off;
}

static int run_case(size_t n, int off, int in_place, uint64_t seed)
{
    float *g = (float *)malloc(n * 4), *u = (float *)malloc(n * 4), *dh = (float *)malloc(n * 4);
    float *h_ref = (float *)malloc(n * 4), *dg_ref = (float *)malloc(n * 4);
    float *du_ref = (float *)malloc(n * 4), *got = (float *)malloc(n * 4);
    kc_fill(g, n, seed, -6.0f, 6.0f);
    static const float far[] = {-100.0f, -90.0f, -30.0f, -12.0f, 12.0f, 30.0f, 90.0f, 100.0f};
    for (size_t i = 3; i < n; i += 97) /* saturated sigmoids here and there */
        g[i] = far[(i / 97) % 8];
    kc_fill(u, n, seed + 1, -2.0f, 2.0f);
    kc_fill(dh, n, seed + 2, -1.0f, 1.0f);
    ref_swiglu(h_ref, dg_ref, du_ref, dh, g, u, n);

    kg_bf16 *gb, *ub, *dhb, *hb, *dgb, *dub;
    kg_bf16 *g_d = dev_bf_at(g, n, off, &gb), *u_d = dev_bf_at(u, n, off, &ub);
    kg_bf16 *dh_d = dev_bf_at(dh, n, off, &dhb);
    kg_bf16 *h_d = dev_bf_at(dh, n, off, &hb); /* garbage the kernels must overwrite */
    kg_bf16 *dg_d = dev_bf_at(dh, n, off, &dgb), *du_d = dev_bf_at(dh, n, off, &dub);

    char label[128];
    int ok = 1;
    const char *how = in_place ? "in place" : "";
    if (in_place) { /* outputs over inputs: h over up, then dgate over gate and dup over dh */
        KC_CUDA(kg_swiglu_forward(u_d, g_d, u_d, n, 0));
        h_d = u_d;
    } else {
        KC_CUDA(kg_swiglu_forward(h_d, g_d, u_d, n, 0));
    }
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, h_d, n);
    snprintf(label, sizeof label, "swiglu fwd h   n %6zu off %d %s", n, off, how);
    ok &= kc_close(label, got, h_ref, n, 1e-3f, 1e-2f);

    if (in_place) { /* restore up (h went over it), then write the gradients over gate and dh */
        kg_bf16 *tmp = kc_to_dev_bf(u, n);
        KC_CUDA(cudaMemcpy(u_d, tmp, n * sizeof *tmp, cudaMemcpyDeviceToDevice));
        KC_CUDA(cudaFree(tmp));
        KC_CUDA(kg_swiglu_backward(g_d, dh_d, dh_d, g_d, u_d, n, 0));
        dg_d = g_d, du_d = dh_d;
    } else {
        KC_CUDA(kg_swiglu_backward(dg_d, du_d, dh_d, g_d, u_d, n, 0));
    }
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, dg_d, n);
    snprintf(label, sizeof label, "swiglu bwd dg  n %6zu off %d %s", n, off, how);
    ok &= kc_close(label, got, dg_ref, n, 1e-3f, 1e-2f);
    kc_from_dev_bf(got, du_d, n);
    snprintf(label, sizeof label, "swiglu bwd dup n %6zu off %d %s", n, off, how);
    ok &= kc_close(label, got, du_ref, n, 1e-3f, 1e-2f);

    KC_CUDA(cudaFree(gb));
    KC_CUDA(cudaFree(ub));
    KC_CUDA(cudaFree(dhb));
    KC_CUDA(cudaFree(hb));
    KC_CUDA(cudaFree(dgb));
    KC_CUDA(cudaFree(dub));
    free(g), free(u), free(dh), free(h_ref), free(dg_ref), free(du_ref), free(got);
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
    KC_CUDA(cudaMalloc((void **)&b, 64 * sizeof *b));
    cudaError_t inval = cudaErrorInvalidValue;
    int ok = 1;
    ok &= expect("swiglu fwd h NULL", kg_swiglu_forward(NULL, b, b, 8, 0), inval);
    ok &= expect("swiglu fwd gate NULL", kg_swiglu_forward(b, NULL, b, 8, 0), inval);
    ok &= expect("swiglu fwd up NULL", kg_swiglu_forward(b, b, NULL, 8, 0), inval);
    ok &= expect("swiglu bwd dgate NULL", kg_swiglu_backward(NULL, b, b, b, b, 8, 0), inval);
    ok &= expect("swiglu bwd dh NULL", kg_swiglu_backward(b, b, NULL, b, b, 8, 0), inval);
    ok &= expect("swiglu fwd count 0 is a no-op", kg_swiglu_forward(b, b, b, 0, 0), cudaSuccess);
    ok &= expect("swiglu bwd count 0 is a no-op", kg_swiglu_backward(b, b, b, b, b, 0, 0),
                 cudaSuccess);
    ok &= expect("no launch error left behind", cudaDeviceSynchronize(), cudaSuccess);
    KC_CUDA(cudaFree(b));
    return ok;
}

int main(void)
{
    int ok = 1;
    ok &= run_case(1, 0, 0, 11);
    ok &= run_case(4863, 0, 0, 12);
    ok &= run_case((size_t)8 * 4864 + 5, 0, 0, 13);
    ok &= run_case((size_t)8 * 4864, 0, 0, 14);
    ok &= run_case(4863, 1, 0, 15); /* misaligned: one element per thread */
    ok &= run_case((size_t)8 * 4864 + 5, 0, 1, 16);
    ok &= run_arg_errors();
    printf("%s\n", ok ? "swiglu: all checks passed" : "swiglu: FAILED");
    return ok ? 0 : 1;
}
