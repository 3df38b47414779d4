/* test_rope: kg_rope against a CPU reference that follows policy/model_kernels.c's
 * pol_rope_apply (HF rotate_half: pair (i, i + hd/2) rotated by pos[t] * inv_freq[i], the angle
 * formed in fp32 as the policy's rope tables form it; sign -1 rotates back). For each shape:
 *   - the forward against the reference;
 *   - the inverse (sign -1) against the reference;
 *   - forward then inverse gives x back within two bf16 roundings;
 *   - the inverse is the forward's transpose, i.e. the exact backward:
 *     <rope(x), dy> = <x, rope^-1(dy)>, within the bf16 rounding of both sides.
 * Shapes: hd in {64, 128} x heads in {14, 2} x T in {1, 37, 2048}; positions restart at 0 at
 * each packed document (and T = 1 is a decode step at a late position). */
#include "kcheck.h"

/* inv_freq as pol_rope_inv_freq computes it without llama3 scaling */
static void make_inv_freq(float *inv, int hd, float theta)
{
    for (int i = 0; i < hd / 2; i++)
        inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
}

/* packed documents of random lengths, positions restarting at 0; the first document continues
 * one that began earlier (its positions start at 300) */
static void make_positions(int32_t *pos, int T, uint64_t seed)
{
    if (T == 1) {
        pos[0] = 4095; /* a decode step deep into a sequence */
        return;
    }
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 7;
    int t = 0, p0 = 300;
    while (t < T) {
        int len = 1 + (int)(kc_next(&st) % (uint64_t)(T / 3 + 1));
        for (int j = 0; j < len && t < T; j++)
            pos[t++] = p0 + j;
        p0 = 0;
    }
}

/* in place on x [T, heads, hd], in double from the fp32 angle */
static void ref_rope(float *x, const int32_t *pos, const float *inv, int T, int heads, int hd,
                     int sign)
{
    int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * inv[i];
            double c = cos((double)angle), s = sign * sin((double)angle);
            for (int h = 0; h < heads; h++) {
                float *v = x + ((size_t)t * heads + h) * hd;
                double a = v[i], b = v[i + half];
                v[i] = (float)(a * c - b * s);
                v[i + half] = (float)(b * c + a * s);
            }
        }
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* sqrt(sum (a_i b_i)^2): the scale of the rounding noise in <a, b> */
static double dot_noise(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += ((double)a[i] * b[i]) * ((double)a[i] * b[i]);
    return sqrt(s);
}

static int run_case(int T, int heads, int hd, uint64_t seed)
{
    size_t N = (size_t)T * heads * hd;
    int half = hd / 2;
    float *x = (float *)malloc(N * 4), *dy = (float *)malloc(N * 4), *want = (float *)malloc(N * 4);
    float *fx = (float *)malloc(N * 4), *idy = (float *)malloc(N * 4),
          *back = (float *)malloc(N * 4);
    float *inv = (float *)malloc((size_t)half * 4);
    int32_t *pos = (int32_t *)malloc((size_t)T * 4);
    kc_fill(x, N, seed, -1.0f, 1.0f);
    kc_fill(dy, N, seed + 1, -1.0f, 1.0f);
    make_inv_freq(inv, hd, hd == 64 ? 1e6f : 1e4f);
    make_positions(pos, T, seed);

    kg_bf16 *x_d = kc_to_dev_bf(x, N), *dy_d = kc_to_dev_bf(dy, N);
    float *inv_d = kc_to_dev_f(inv, (size_t)half);
    int32_t *pos_d;
    KC_CUDA(cudaMalloc((void **)&pos_d, (size_t)T * 4));
    KC_CUDA(cudaMemcpy(pos_d, pos, (size_t)T * 4, cudaMemcpyHostToDevice));

    char label[128];
    int ok = 1;

    /* forward */
    KC_CUDA(kg_rope(x_d, pos_d, inv_d, T, heads, hd, 1, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(fx, x_d, N);
    memcpy(want, x, N * 4);
    ref_rope(want, pos, inv, T, heads, hd, 1);
    snprintf(label, sizeof label, "rope fwd       T %4d heads %2d hd %3d", T, heads, hd);
    ok &= kc_close(label, fx, want, N, 1e-3f, 1e-2f);

    /* forward then inverse: x again, up to the two bf16 roundings (|x| <= 1, |rope(x)| <= 1.5) */
    KC_CUDA(kg_rope(x_d, pos_d, inv_d, T, heads, hd, -1, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(back, x_d, N);
    snprintf(label, sizeof label, "rope fwd+inv=x T %4d heads %2d hd %3d", T, heads, hd);
    ok &= kc_close(label, back, x, N, 1.5e-2f, 1e-2f);

    /* inverse of dy against the reference */
    KC_CUDA(kg_rope(dy_d, pos_d, inv_d, T, heads, hd, -1, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(idy, dy_d, N);
    memcpy(want, dy, N * 4);
    ref_rope(want, pos, inv, T, heads, hd, -1);
    snprintf(label, sizeof label, "rope inv       T %4d heads %2d hd %3d", T, heads, hd);
    ok &= kc_close(label, idy, want, N, 1e-3f, 1e-2f);

    /* adjoint: each side carries a bf16 rounding of at most 2^-8 relative per element, random
     * in sign, so the sums differ by about 2^-8/sqrt(3) * sqrt(sum (a_i b_i)^2); allow ~14x
     * that. Using the forward for the backward would miss by ~30x more than the allowance. */
    double lhs = dot(fx, dy, N), rhs = dot(x, idy, N);
    double tol = 8.0 / 256.0 *
                 sqrt(dot_noise(fx, dy, N) * dot_noise(fx, dy, N) +
                      dot_noise(x, idy, N) * dot_noise(x, idy, N));
    float lf = (float)lhs, rf = (float)rhs;
    snprintf(label, sizeof label, "rope <Rx,dy>=<x,R^-1 dy> T %4d heads %2d hd %3d", T, heads, hd);
    ok &= kc_close(label, &lf, &rf, 1, (float)tol + 1e-6f, 0.0f);

    KC_CUDA(cudaFree(x_d));
    KC_CUDA(cudaFree(dy_d));
    KC_CUDA(cudaFree(inv_d));
    KC_CUDA(cudaFree(pos_d));
    free(x), free(dy), free(want), free(fx), free(idy), free(back), free(inv), free(pos);
    return ok;
}

/* kg_rope_qk on q and k gives bitwise what kg_rope on each gives (the decode step's one launch) */
static int run_qk_case(int T, int Hq, int Hkv, int hd, int sign, uint64_t seed)
{
    size_t nq = (size_t)T * Hq * hd, nk = (size_t)T * Hkv * hd;
    float *q = (float *)malloc(nq * 4), *k = (float *)malloc(nk * 4),
          *inv = (float *)malloc(hd * 2);
    int32_t *pos = (int32_t *)malloc((size_t)T * 4), *pos_d;
    kc_fill(q, nq, seed, -1.0f, 1.0f);
    kc_fill(k, nk, seed + 1, -1.0f, 1.0f);
    make_inv_freq(inv, hd, 1e6f);
    make_positions(pos, T, seed);
    KC_CUDA(cudaMalloc((void **)&pos_d, (size_t)T * 4));
    KC_CUDA(cudaMemcpy(pos_d, pos, (size_t)T * 4, cudaMemcpyHostToDevice));
    float *inv_d = kc_to_dev_f(inv, (size_t)hd / 2);
    kg_bf16 *qa = kc_to_dev_bf(q, nq), *ka = kc_to_dev_bf(k, nk);
    kg_bf16 *qb = kc_to_dev_bf(q, nq), *kb = kc_to_dev_bf(k, nk);
    KC_CUDA(kg_rope(qa, pos_d, inv_d, T, Hq, hd, sign, 0));
    KC_CUDA(kg_rope(ka, pos_d, inv_d, T, Hkv, hd, sign, 0));
    KC_CUDA(kg_rope_qk(qb, kb, pos_d, inv_d, T, Hq, Hkv, hd, sign, 0));
    KC_CUDA(cudaDeviceSynchronize());
    int ok = kc_dev_bf_equal(qa, qb, nq) && kc_dev_bf_equal(ka, kb, nk);
    printf("%-4s rope_qk = rope(q), rope(k) bitwise T %4d Hq %2d Hkv %d hd %3d sign %+d\n",
           ok ? "ok" : "FAIL", T, Hq, Hkv, hd, sign);
    kg_bf16 *dev[] = {qa, ka, qb, kb};
    for (int i = 0; i < 4; i++)
        KC_CUDA(cudaFree(dev[i]));
    KC_CUDA(cudaFree(pos_d));
    KC_CUDA(cudaFree(inv_d));
    free(q), free(k), free(inv), free(pos);
    return ok;
}

/* The tokens of run_qk_cache_case. The valid ones on distinct cells (so the result does not
 * depend on the order of the writes): slot t % n_slots, position 1 + (t / n_slots * 5) %
 * (max_len - 2), never 0 (each k is really rotated: a copy of k before its rotation would differ)
 * and never max_len - 1. Every 5th-but-2 has slot -1 or n_slots, every 7th-but-5 position -1 or
 * max_len (t = 33: both): were those written, they would land on a slot's position 0 or
 * max_len - 1, which no valid token writes, or in the guard slots around the cache. Needs
 * T <= n_slots * (max_len - 2). */
static void make_cache_tokens(int32_t *slot, int32_t *pos, int T, int n_slots, int max_len)
{
    for (int t = 0; t < T; t++) {
        slot[t] = t % n_slots;
        pos[t] = 1 + (t / n_slots * 5) % (max_len - 2);
        if (t % 5 == 3)
            slot[t] = (t / 5) % 2 ? n_slots : -1;
        if (t % 7 == 5)
            pos[t] = (t / 7) % 2 ? max_len : -1;
    }
}

/* kg_rope_qk_kv_write = kg_rope_qk then kg_kv_write, bitwise: q and k rotated in place, and the
 * whole cache (rows written and rows left alone; tokens with an out-of-range slot or position
 * skipped) the same, with CACHE_GUARD slots on either side that must stay as they were. */
#define CACHE_GUARD 2
static int run_qk_cache_case(int T, int Hq, int Hkv, int hd, uint64_t seed)
{
    const int n_slots = 3, max_len = 16;
    if (T > n_slots * (max_len - 2)) {
        printf("FAIL rope_qk_kv_write case T %d: more tokens than distinct cells\n", T);
        return 0;
    }
    size_t nq = (size_t)T * Hq * hd, nk = (size_t)T * Hkv * hd;
    size_t guard = (size_t)CACHE_GUARD * max_len * Hkv * hd; /* elements of the guard slots */
    size_t nc = (size_t)(n_slots + 2 * CACHE_GUARD) * max_len * Hkv * hd;
    float *q = (float *)malloc(nq * 4), *k = (float *)malloc(nk * 4), *v = (float *)malloc(nk * 4);
    float *c0 = (float *)malloc(nc * 4), *inv = (float *)malloc((size_t)hd * 2);
    int32_t *pos = (int32_t *)malloc((size_t)T * 4), *slot = (int32_t *)malloc((size_t)T * 4);
    kc_fill(q, nq, seed, -1.0f, 1.0f);
    kc_fill(k, nk, seed + 1, -1.0f, 1.0f);
    kc_fill(v, nk, seed + 2, -1.0f, 1.0f);
    kc_fill(c0, nc, seed + 3, -1.0f, 1.0f); /* what the cache held before */
    make_inv_freq(inv, hd, 1e6f);
    make_cache_tokens(slot, pos, T, n_slots, max_len);
    int32_t *pos_d, *slot_d;
    KC_CUDA(cudaMalloc((void **)&pos_d, (size_t)T * 4));
    KC_CUDA(cudaMalloc((void **)&slot_d, (size_t)T * 4));
    KC_CUDA(cudaMemcpy(pos_d, pos, (size_t)T * 4, cudaMemcpyHostToDevice));
    KC_CUDA(cudaMemcpy(slot_d, slot, (size_t)T * 4, cudaMemcpyHostToDevice));
    float *inv_d = kc_to_dev_f(inv, (size_t)hd / 2);
    kg_bf16 *d[9] = {kc_to_dev_bf(q, nq),  kc_to_dev_bf(k, nk),  kc_to_dev_bf(v, nk),
                     kc_to_dev_bf(c0, nc), kc_to_dev_bf(c0, nc), kc_to_dev_bf(q, nq),
                     kc_to_dev_bf(k, nk),  kc_to_dev_bf(c0, nc), kc_to_dev_bf(c0, nc)};
    /* two calls: q d0, k d1, v d2, caches d3 (k) d4 (v); one call: q d5, k d6, caches d7, d8;
     * each cache starts `guard` elements into its allocation */
    KC_CUDA(kg_rope_qk(d[0], d[1], pos_d, inv_d, T, Hq, Hkv, hd, 1, 0));
    KC_CUDA(kg_kv_write(d[3] + guard, d[4] + guard, d[1], d[2], slot_d, pos_d, T, n_slots, max_len,
                        Hkv, hd, 0));
    const kg_kv_dest dest = {d[7] + guard, d[8] + guard, d[2], slot_d, n_slots, max_len};
    KC_CUDA(kg_rope_qk_kv_write(d[5], d[6], pos_d, inv_d, T, Hq, Hkv, hd, &dest, 0));
    KC_CUDA(cudaDeviceSynchronize());
    const size_t n[4] = {nq, nk, nc, nc};
    const int pairs[4][2] = {{0, 5}, {1, 6}, {3, 7}, {4, 8}};
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= kc_dev_bf_equal(d[pairs[i][0]], d[pairs[i][1]], n[i]);
    printf("%-4s rope_qk_kv_write = rope_qk + kv_write bitwise (q, k, both caches) T %3d Hq %2d "
           "Hkv %d hd %3d\n",
           ok ? "ok" : "FAIL", T, Hq, Hkv, hd);
    for (int i = 0; i < 9; i++)
        KC_CUDA(cudaFree(d[i]));
    KC_CUDA(cudaFree(pos_d));
    KC_CUDA(cudaFree(slot_d));
    KC_CUDA(cudaFree(inv_d));
    free(q), free(k), free(v), free(c0), free(inv), free(pos), free(slot);
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
    kg_bf16 *x;
    int32_t *pos;
    float *inv;
    KC_CUDA(cudaMalloc((void **)&x, 256 * sizeof *x));
    KC_CUDA(cudaMalloc((void **)&pos, 4 * sizeof *pos));
    KC_CUDA(cudaMalloc((void **)&inv, 64 * sizeof *inv));
    cudaError_t inval = cudaErrorInvalidValue;
    int ok = 1;
    ok &= expect("rope hd odd", kg_rope(x, pos, inv, 1, 2, 63, 1, 0), inval);
    ok &= expect("rope hd = 0", kg_rope(x, pos, inv, 1, 2, 0, 1, 0), inval);
    ok &= expect("rope heads = 0", kg_rope(x, pos, inv, 1, 0, 64, 1, 0), inval);
    ok &= expect("rope T < 0", kg_rope(x, pos, inv, -1, 2, 64, 1, 0), inval);
    ok &= expect("rope sign 0", kg_rope(x, pos, inv, 1, 2, 64, 0, 0), inval);
    ok &= expect("rope sign 2", kg_rope(x, pos, inv, 1, 2, 64, 2, 0), inval);
    ok &= expect("rope x NULL", kg_rope(NULL, pos, inv, 1, 2, 64, 1, 0), inval);
    ok &= expect("rope pos NULL", kg_rope(x, NULL, inv, 1, 2, 64, 1, 0), inval);
    ok &= expect("rope inv_freq NULL", kg_rope(x, pos, NULL, 1, 2, 64, 1, 0), inval);
    ok &= expect("rope T = 0 is a no-op", kg_rope(x, pos, inv, 0, 2, 64, 1, 0), cudaSuccess);
    ok &= expect("rope_qk k NULL", kg_rope_qk(x, NULL, pos, inv, 1, 2, 2, 64, 1, 0), inval);
    ok &= expect("rope_qk Hkv = 0", kg_rope_qk(x, x, pos, inv, 1, 2, 0, 64, 1, 0), inval);
    const kg_kv_dest no_cache = {NULL, x, x, pos, 1, 1}, no_slots = {x, x, x, pos, 0, 1};
    ok &= expect("rope_qk_kv_write dest NULL",
                 kg_rope_qk_kv_write(x, x, pos, inv, 1, 2, 2, 64, NULL, 0), inval);
    ok &= expect("rope_qk_kv_write k_cache NULL",
                 kg_rope_qk_kv_write(x, x, pos, inv, 1, 2, 2, 64, &no_cache, 0), inval);
    ok &= expect("rope_qk_kv_write n_slots 0",
                 kg_rope_qk_kv_write(x, x, pos, inv, 1, 2, 2, 64, &no_slots, 0), inval);
    const kg_kv_dest no_len = {x, x, x, pos, 1, 0}, no_v = {x, x, NULL, pos, 1, 1},
                     no_slot = {x, x, x, NULL, 1, 1}, good = {x, x, x, pos, 1, 1},
                     none = {NULL, NULL, NULL, NULL, 1, 1};
    ok &= expect("rope_qk_kv_write max_len 0",
                 kg_rope_qk_kv_write(x, x, pos, inv, 1, 2, 2, 64, &no_len, 0), inval);
    ok &= expect("rope_qk_kv_write v NULL",
                 kg_rope_qk_kv_write(x, x, pos, inv, 1, 2, 2, 64, &no_v, 0), inval);
    ok &= expect("rope_qk_kv_write slot NULL",
                 kg_rope_qk_kv_write(x, x, pos, inv, 1, 2, 2, 64, &no_slot, 0), inval);
    ok &= expect("rope_qk_kv_write Hkv 0",
                 kg_rope_qk_kv_write(x, x, pos, inv, 1, 2, 0, 64, &good, 0), inval);
    ok &= expect("rope_qk_kv_write hd odd",
                 kg_rope_qk_kv_write(x, x, pos, inv, 1, 2, 2, 63, &good, 0), inval);
    ok &= expect("rope_qk_kv_write T = 0 is a no-op (no buffers needed)",
                 kg_rope_qk_kv_write(NULL, NULL, NULL, NULL, 0, 2, 2, 64, &none, 0), cudaSuccess);
    ok &= expect("no launch error left behind", cudaDeviceSynchronize(), cudaSuccess);
    KC_CUDA(cudaFree(x));
    KC_CUDA(cudaFree(pos));
    KC_CUDA(cudaFree(inv));
    return ok;
}

int main(void)
{
    static const int hds[] = {64, 128}, headss[] = {14, 2}, Ts[] = {1, 37, 2048};
    int ok = 1;
    uint64_t seed = 100;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++)
                ok &= run_case(Ts[c], headss[b], hds[a], seed += 2);
    ok &= run_case(5, 5, 6, seed += 2); /* odd half, heads not a multiple of the thread's 4 */
    ok &= run_qk_case(1, 14, 2, 64, 1, seed += 2); /* a decode step of Qwen2.5-0.5B */
    ok &= run_qk_case(37, 14, 2, 64, -1, seed += 2);
    ok &= run_qk_case(3, 16, 8, 128, 1, seed += 2);
    ok &= run_qk_case(5, 5, 3, 6, 1, seed += 2);
    ok &= run_qk_cache_case(1, 14, 2, 64, seed += 4);   /* a decode step of one sequence */
    ok &= run_qk_cache_case(40, 14, 2, 64, seed += 4);  /* several, some skipped */
    ok &= run_qk_cache_case(9, 5, 3, 6, seed += 4);     /* odd half, partial head groups */
    ok &= run_qk_cache_case(12, 16, 8, 128, seed += 4); /* hd 128, two whole k and v groups */
    ok &= run_qk_cache_case(42, 12, 6, 128, seed += 4); /* a partial second group; T at its most */
    ok &= run_arg_errors();
    printf("%s\n", ok ? "rope: all checks passed" : "rope: FAILED");
    return ok ? 0 : 1;
}
