/* test_sample: kg_sample_probs and kg_sample against policy/sample.c's algorithm (pol_sample_probs,
 * pol_argmax), transcribed below in double (the test is built from this file and the kernel
 * objects alone).
 *
 * (1) kg_sample_probs against the reference over shapes V in {7, 100, 1000, 5000, 40000, 151936}
 *     with B 1 .. 64, ld = V (16-byte loads), ld % 8 != 0 (scalar loads) and n_valid < ld (the
 *     padding columns hold 1e4, +inf and NaN: they must never matter), for five kinds of rows:
 *     uniform in +-30; LLM-like (normal, a few tokens far above); small integers (runs of tied
 *     values straddling every cut); all zeros of both signs (-0 and +0 tie: the ranking is the
 *     ids); and values over a huge dynamic range (+-2^-60 .. 2^61, at temperatures ~1e18 so that
 *     they still spread the mass), which fill far more key bins than one window and so take the
 *     kernel's multi-window paths. Configs: greedy (T 0 and -1), temperature alone, top_k 1, 50,
 *     n_valid/2, n_valid and beyond, top_p 0.1, 0.9, 0.999 and 1, and combinations. The kept sets
 *     must be identical (a token with mass on one side has it on the other) and the
 *     probabilities within 1e-6 + 1e-5 relative. A row whose top-p cut sits on the CPU's float
 *     rounding (its mass above a token is a sum of float copies) may go either way: such a row
 *     is accepted when it matches the same reference with exact double sums, and counted.
 * (2) kg_sample on the same rows: the token is inside the reference's kept set with nonzero
 *     probability (so never >= n_valid), greedy gives the arg max with the lowest id on ties
 *     (seed/offset NULL), logp is the CPU's log softmax at temperature 1 within 1e-3 (plus 1e-6
 *     relative, for the wide rows' logits of ~1e18), and a second call gives the same tokens and
 *     logp bit for bit. On small vocabularies, 20,000 draws (one row each, the same seed,
 *     offsets 0 .. N-1) against the reference distribution: a chi-square test and the total
 *     variation distance, no draw outside the kept set, and the draws vary with the offset;
 *     among them ties cut by top_k and the multi-window draws.
 * (3) argument errors return cudaErrorInvalidValue (a workspace NULL, one byte short or not
 *     16-byte aligned among them); B == 0 is a no-op.
 * (4) a NaN among a row's candidates (in its third part of pass 1) gives that row token -1,
 *     logp NaN and NaN probs, and the other rows (one with NaN in its padding) come out as
 *     without it.
 * (5) a row gives the same bits alone (B = 1) as inside a batch of 8: token and logp of
 *     kg_sample (greedy, temperature alone, top_k with top_p; each row with its own seed and
 *     offset, the same when alone) and kg_sample_probs' row, at V = 151936 (38 parts of pass
 *     1, 16-byte loads), 151931 with ld 152000 (a short last part) and 5000 with ld 5003 (2
 *     parts, scalar loads). The batch and the single rows use workspaces of their own size.
 * Every workspace starts filled with garbage (the kernels must not need it cleared).
 *
 * KGYM_KERNEL_SMALL=1 (compute-sanitizer, whose racecheck takes minutes per thousand 1024-thread
 * blocks) runs three small shapes, 500 draws and (5) at V = 100 and 5000 only. */
#include <algorithm>

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

/* ---- the reference: policy/sample.c in double ---- */

typedef struct ref_cfg {
    float T;
    int top_k;
    float top_p;
} ref_cfg;

static int ref_argmax(const float *z, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (z[i] > z[best])
            best = i;
    return best;
}

/* by_logit_desc: descending by logit, the lower id first on ties */
static void ref_rank(const float *z, int n, int *order, int *pos)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    std::sort(order, order + n, [z](int i, int j) { return z[i] != z[j] ? z[i] > z[j] : i < j; });
    for (int r = 0; r < n; r++)
        pos[order[r]] = r;
}

/* pol_sample_probs given the ranking: probs (float, as the CPU stores them), returns the number
 * kept (a prefix of the ranking), -1 for NaN. exact_above: add up the top-p mass from the double
 * probabilities instead of the CPU's float copies (for rows on a rounding boundary). */
static int ref_probs(const float *z, int n, const int *order, const ref_cfg *c, int exact_above,
                     float *probs)
{
    for (int i = 0; i < n; i++)
        if (isnan(z[i]))
            return -1;
    for (int i = 0; i < n; i++)
        probs[i] = 0;
    if (!(c->T > 0)) {
        probs[ref_argmax(z, n)] = 1;
        return 1;
    }
    int keep = c->top_k > 0 && c->top_k < n ? c->top_k : n;
    double *p = (double *)malloc((size_t)keep * sizeof *p);
    double top = z[order[0]] / (double)c->T, sum = 0;
    for (int r = 0; r < keep; r++) {
        p[r] = exp(z[order[r]] / (double)c->T - top);
        probs[order[r]] = (float)p[r];
        sum += p[r];
    }
    if (c->top_p > 0 && c->top_p < 1) {
        double above = 0;
        int cut = keep;
        for (int r = 0; r < keep; r++) {
            if (r > 0 && above >= c->top_p * sum) {
                cut = r;
                break;
            }
            above += exact_above ? p[r] : (double)probs[order[r]];
        }
        for (int r = cut; r < keep; r++) {
            sum -= exact_above ? p[r] : (double)probs[order[r]];
            probs[order[r]] = 0;
        }
        keep = cut;
    }
    for (int r = 0; r < keep; r++)
        probs[order[r]] = (float)((exact_above ? p[r] : (double)probs[order[r]]) / sum);
    free(p);
    return keep;
}

/* log softmax(z[0, n))[i] at temperature 1 */
static double ref_logp(const float *z, int n, int i)
{
    double m = -INFINITY, s = 0;
    for (int j = 0; j < n; j++)
        m = z[j] > m ? z[j] : m;
    for (int j = 0; j < n; j++)
        s += exp((double)z[j] - m);
    return ((double)z[i] - m) - log(s);
}

/* logp within 1e-3, plus fp32's relative precision for the wide rows (logits ~1e18) */
static int logp_close(float got, double want)
{
    return fabs((double)got - want) <= 1e-3 + 1e-6 * fabs(want);
}

/* ---- rows ---- */

enum { D_UNIFORM, D_LLM, D_TIES, D_ZEROS, D_WIDE, D_COUNT };
static const char *const dist_name[D_COUNT] = {"uniform+-30", "llm-like", "integers(ties)",
                                               "+-0(all tied)", "wide-range"};
/* the wide rows' values reach 2^61: a temperature of this order spreads their mass */
static const float dist_tscale[D_COUNT] = {1.f, 1.f, 1.f, 1.f, 1e18f};

static float gauss(uint64_t *st)
{
    double u1 = 1.0 - kc_uniform(st, 0.f, 1.f), u2 = kc_uniform(st, 0.f, 1.f);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* n candidates of one row (bf16 values), then padding up to ld: 1e4, +inf, NaN in turn */
static void fill_row(float *z, int n, int ld, int dist, uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 11;
    for (int i = 0; i < n; i++) {
        float v = 0;
        switch (dist) {
        case D_UNIFORM:
            v = kc_uniform(&st, -30.f, 30.f);
            break;
        case D_LLM:
            v = 2.5f * gauss(&st) - 2.f;
            if (kc_next(&st) % 997 == 0)
                v += kc_uniform(&st, 6.f, 14.f);
            break;
        case D_TIES:
            v = (float)((int)(kc_next(&st) % 17) - 8);
            break;
        case D_ZEROS:
            v = (kc_next(&st) & 1) ? -0.f : 0.f;
            break;
        case D_WIDE: {
            int e = (int)(kc_next(&st) % 121) - 60;
            v = ldexpf(kc_uniform(&st, 1.f, 2.f), e) * ((kc_next(&st) & 1) ? -1.f : 1.f);
            break;
        }
        }
        z[i] = kc_round_bf(v);
    }
    for (int i = n; i < ld; i++)
        z[i] = (i % 3 == 0) ? kc_round_bf(1e4f) : (i % 3 == 1) ? INFINITY : NAN;
}

/* ---- (1) and (2): probabilities and draws against the reference ---- */

typedef struct shape {
    int V, ld, B;
} shape;

enum { K_ABS, K_N, K_N_PLUS, K_HALF };
typedef struct cfg {
    float T;
    int k_mode, top_k;
    float top_p;
} cfg;

static const cfg cfgs[] = {
    {0.f, K_ABS, 0, 0.f},     {-1.f, K_ABS, 50, 0.5f}, {1.f, K_ABS, 0, 0.f},
    {0.7f, K_ABS, 0, 1.f},    {1.5f, K_ABS, -3, 0.f},  {1.f, K_ABS, 1, 0.f},
    {1.f, K_ABS, 50, 0.f},    {0.8f, K_N, 0, 0.f},     {1.f, K_N_PLUS, 0, 0.f},
    {1.f, K_HALF, 0, 0.f},    {1.f, K_ABS, 0, 0.1f},   {1.f, K_ABS, 0, 0.9f},
    {1.3f, K_ABS, 0, 0.999f}, {0.8f, K_ABS, 50, 0.9f}, {1.2f, K_ABS, 1000, 0.95f},
    {0.5f, K_ABS, 20, 0.5f},  {2.f, K_HALF, 0, 0.99f},
};
#define N_CFGS ((int)(sizeof cfgs / sizeof cfgs[0]))

static ref_cfg effective(const cfg *c, int n, int dist)
{
    ref_cfg r;
    r.T = c->T * dist_tscale[dist];
    r.top_k = c->k_mode == K_N        ? n
              : c->k_mode == K_N_PLUS ? n + 5
              : c->k_mode == K_HALF   ? n / 2
                                      : c->top_k;
    r.top_p = c->top_p;
    return r;
}

typedef struct row_ref {
    int *order, *pos;
} row_ref;

typedef struct errs {
    double max_abs, max_rel;
    int borderline, checked;
} errs;

/* the kept sets agree: GPU mass only on kept tokens, and every kept token of visible mass has it */
static int same_kept(const float *g, const float *r, const int *pos, int keep, int n, int *where)
{
    for (int i = 0; i < n; i++) {
        int kept = pos[i] < keep;
        if ((g[i] > 0 && !kept) || (kept && r[i] >= 1e-30f && !(g[i] > 0))) {
            *where = i;
            return 0;
        }
    }
    return 1;
}

/* one row of one config: returns 1 when it passes */
static int check_row(const char *tag, int b, const float *z, int n, const row_ref *rr,
                     const ref_cfg *rc, const float *g, int32_t tok, float lp, float *ref, errs *e)
{
    int keep = ref_probs(z, n, rr->order, rc, 0, ref), where = -1;
    if (!same_kept(g, ref, rr->pos, keep, n, &where)) {
        int keep2 = ref_probs(z, n, rr->order, rc, 1, ref), w2;
        if (!same_kept(g, ref, rr->pos, keep2, n, &w2)) {
            fprintf(stderr,
                    "FAIL %s row %d: kept sets differ at id %d (rank %d, ref keeps %d): gpu %g ref "
                    "%g\n",
                    tag, b, where, rr->pos[where], keep, g[where], ref[where]);
            return 0;
        }
        keep = keep2;
        e->borderline++;
    }
    for (int i = 0; i < n; i++) {
        double d = fabs((double)g[i] - ref[i]);
        if (!(d <= 1e-6 + 1e-5 * fabs(ref[i]))) {
            fprintf(stderr, "FAIL %s row %d: probs[%d] gpu %.9g ref %.9g\n", tag, b, i, g[i],
                    ref[i]);
            return 0;
        }
        e->max_abs = d > e->max_abs ? d : e->max_abs;
        if (ref[i] > 1e-6 && d / ref[i] > e->max_rel)
            e->max_rel = d / ref[i];
    }
    if (!(rc->T > 0)) {
        if (tok != ref_argmax(z, n)) {
            fprintf(stderr, "FAIL %s row %d: greedy token %d, arg max %d\n", tag, b, tok,
                    ref_argmax(z, n));
            return 0;
        }
    } else if (tok < 0 || tok >= n || rr->pos[tok] >= keep || !(ref[tok] > 0)) {
        fprintf(stderr, "FAIL %s row %d: token %d outside the kept set (%d kept)\n", tag, b, tok,
                keep);
        return 0;
    }
    double want = ref_logp(z, n, tok);
    if (!logp_close(lp, want)) {
        fprintf(stderr, "FAIL %s row %d: logp %.6g, want %.6g\n", tag, b, lp, want);
        return 0;
    }
    e->checked++;
    return 1;
}

/* a workspace for B rows of n candidates, filled with garbage: the kernels must not need it
 * cleared */
static void *dev_ws(int B, int n, size_t *bytes)
{
    void *w = NULL;
    *bytes = kg_sample_workspace_bytes(B, n);
    if (*bytes) {
        KC_CUDA(cudaMalloc(&w, *bytes));
        KC_CUDA(cudaMemset(w, 0xa5, *bytes));
    }
    return w;
}

static uint64_t *dev_u64(const uint64_t *h, int n)
{
    uint64_t *d;
    KC_CUDA(cudaMalloc((void **)&d, (size_t)n * sizeof *d + 1));
    KC_CUDA(cudaMemcpy(d, h, (size_t)n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

static void run_shape_dist(const shape *s, int dist, uint64_t seed)
{
    const int V = s->V, ld = s->ld, B = s->B;
    const size_t nz = (size_t)B * ld;
    float *z = (float *)malloc(nz * sizeof *z);
    for (int b = 0; b < B; b++)
        fill_row(z + (size_t)b * ld, V, ld, dist, seed * 1000 + b);
    row_ref *rr = (row_ref *)malloc((size_t)B * sizeof *rr);
    for (int b = 0; b < B; b++) {
        rr[b].order = (int *)malloc((size_t)V * sizeof(int));
        rr[b].pos = (int *)malloc((size_t)V * sizeof(int));
        ref_rank(z + (size_t)b * ld, V, rr[b].order, rr[b].pos);
    }
    kg_bf16 *d_z = kc_to_dev_bf(z, nz);
    float *d_p, *d_lp, *d_lp2;
    int32_t *d_tok, *d_tok2;
    KC_CUDA(cudaMalloc((void **)&d_p, (size_t)B * V * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&d_lp, (size_t)B * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&d_lp2, (size_t)B * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&d_tok, (size_t)B * sizeof(int32_t)));
    KC_CUDA(cudaMalloc((void **)&d_tok2, (size_t)B * sizeof(int32_t)));
    uint64_t *h_seed = (uint64_t *)malloc((size_t)B * sizeof(uint64_t));
    uint64_t *h_off = (uint64_t *)malloc((size_t)B * sizeof(uint64_t));
    float *g = (float *)malloc((size_t)B * V * sizeof(float)),
          *ref = (float *)malloc((size_t)V * sizeof(float));
    float *lp = (float *)malloc((size_t)B * sizeof(float)),
          *lp2 = (float *)malloc((size_t)B * sizeof(float));
    int32_t *tok = (int32_t *)malloc((size_t)B * sizeof(int32_t)),
            *tok2 = (int32_t *)malloc((size_t)B * sizeof(int32_t));
    size_t ws_bytes;
    void *ws = dev_ws(B, V, &ws_bytes);

    errs e = {0, 0, 0, 0};
    int ok = 1;
    for (int ci = 0; ci < N_CFGS; ci++) {
        const ref_cfg rc = effective(&cfgs[ci], V, dist);
        char tag[200];
        snprintf(tag, sizeof tag, "V=%d ld=%d B=%d %s T=%g top_k=%d top_p=%g", V, ld, B,
                 dist_name[dist], rc.T, rc.top_k, rc.top_p);
        for (int b = 0; b < B; b++) {
            h_seed[b] = seed * 7919 + (uint64_t)b;
            h_off[b] = (uint64_t)(2 * ci);
        }
        const int greedy = !(rc.T > 0);
        uint64_t *d_seed = greedy ? NULL : dev_u64(h_seed, B),
                 *d_off = greedy ? NULL : dev_u64(h_off, B);
        KC_CUDA(kg_sample_probs(d_p, d_z, B, ld, V, rc.T, rc.top_k, rc.top_p, ws, ws_bytes, 0));
        KC_CUDA(kg_sample(d_tok, d_lp, d_z, B, ld, V, rc.T, rc.top_k, rc.top_p, d_seed, d_off, ws,
                          ws_bytes, 0));
        KC_CUDA(kg_sample(d_tok2, d_lp2, d_z, B, ld, V, rc.T, rc.top_k, rc.top_p, d_seed, d_off, ws,
                          ws_bytes, 0));
        KC_CUDA(cudaDeviceSynchronize());
        kc_from_dev_f(g, d_p, (size_t)B * V);
        kc_from_dev_f(lp, d_lp, (size_t)B);
        kc_from_dev_f(lp2, d_lp2, (size_t)B);
        KC_CUDA(cudaMemcpy(tok, d_tok, (size_t)B * sizeof(int32_t), cudaMemcpyDeviceToHost));
        KC_CUDA(cudaMemcpy(tok2, d_tok2, (size_t)B * sizeof(int32_t), cudaMemcpyDeviceToHost));
        if (memcmp(tok, tok2, (size_t)B * sizeof(int32_t)) ||
            memcmp(lp, lp2, (size_t)B * sizeof(float))) {
            fprintf(stderr, "FAIL %s: a second call with the same seeds drew differently\n", tag);
            ok = 0;
        }
        for (int b = 0; b < B; b++)
            ok &= check_row(tag, b, z + (size_t)b * ld, V, &rr[b], &rc, g + (size_t)b * V, tok[b],
                            lp[b], ref, &e);
        if (d_seed) {
            KC_CUDA(cudaFree(d_seed));
            KC_CUDA(cudaFree(d_off));
        }
    }
    printf("%-4s probs and draws V=%d ld=%d B=%d %s: %d configs, %d rows, max abs err %.3g, max "
           "rel err %.3g, "
           "%d rows on a rounding boundary\n",
           ok ? "ok" : "FAIL", V, ld, B, dist_name[dist], N_CFGS, e.checked, e.max_abs, e.max_rel,
           e.borderline);
    check(ok);

    for (int b = 0; b < B; b++) {
        free(rr[b].order);
        free(rr[b].pos);
    }
    free(rr);
    free(z);
    free(g);
    free(ref);
    free(lp);
    free(lp2);
    free(tok);
    free(tok2);
    free(h_seed);
    free(h_off);
    if (ws)
        KC_CUDA(cudaFree(ws));
    KC_CUDA(cudaFree(d_z));
    KC_CUDA(cudaFree(d_p));
    KC_CUDA(cudaFree(d_lp));
    KC_CUDA(cudaFree(d_lp2));
    KC_CUDA(cudaFree(d_tok));
    KC_CUDA(cudaFree(d_tok2));
}

/* ---- (2) the distribution of the draws ---- */

static void draws_case(int V, int dist, const cfg *c, int N, uint64_t seed)
{
    const ref_cfg rc = effective(c, V, dist);
    char tag[200];
    snprintf(tag, sizeof tag, "%d draws V=%d %s T=%g top_k=%d top_p=%g", N, V, dist_name[dist],
             rc.T, rc.top_k, rc.top_p);
    float *row = (float *)malloc((size_t)V * sizeof *row);
    fill_row(row, V, V, dist, seed);
    float *z = (float *)malloc((size_t)N * V * sizeof *z);
    for (int b = 0; b < N; b++)
        memcpy(z + (size_t)b * V, row, (size_t)V * sizeof *row);
    int *order = (int *)malloc((size_t)V * sizeof(int)),
        *pos = (int *)malloc((size_t)V * sizeof(int));
    ref_rank(row, V, order, pos);
    float *p = (float *)malloc((size_t)V * sizeof *p);
    int keep = ref_probs(row, V, order, &rc, 0, p);

    uint64_t *h_seed = (uint64_t *)malloc((size_t)N * sizeof(uint64_t)),
             *h_off = (uint64_t *)malloc((size_t)N * sizeof(uint64_t));
    for (int b = 0; b < N; b++) {
        h_seed[b] = 0x5eed0000 + seed;
        h_off[b] = (uint64_t)b;
    }
    kg_bf16 *d_z = kc_to_dev_bf(z, (size_t)N * V);
    uint64_t *d_seed = dev_u64(h_seed, N), *d_off = dev_u64(h_off, N);
    int32_t *d_tok;
    float *d_lp;
    KC_CUDA(cudaMalloc((void **)&d_tok, (size_t)N * sizeof(int32_t)));
    KC_CUDA(cudaMalloc((void **)&d_lp, (size_t)N * sizeof(float)));
    size_t ws_bytes;
    void *ws = dev_ws(N, V, &ws_bytes);
    KC_CUDA(kg_sample(d_tok, d_lp, d_z, N, V, V, rc.T, rc.top_k, rc.top_p, d_seed, d_off, ws,
                      ws_bytes, 0));
    KC_CUDA(cudaDeviceSynchronize());
    int32_t *tok = (int32_t *)malloc((size_t)N * sizeof(int32_t));
    float *lp = (float *)malloc((size_t)N * sizeof(float));
    KC_CUDA(cudaMemcpy(tok, d_tok, (size_t)N * sizeof(int32_t), cudaMemcpyDeviceToHost));
    kc_from_dev_f(lp, d_lp, (size_t)N);

    int *count = (int *)calloc((size_t)V, sizeof(int)), outside = 0, bad_lp = 0, distinct = 0;
    for (int b = 0; b < N; b++) {
        if (tok[b] < 0 || tok[b] >= V || !(p[tok[b]] > 0)) {
            outside++;
            continue;
        }
        count[tok[b]]++;
        if (!logp_close(lp[b], ref_logp(row, V, tok[b])))
            bad_lp++;
    }
    /* chi-square over the tokens expected at least 5 times, the rest pooled */
    double chi2 = 0, tv = 0, tv_expect = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int i = 0; i < V; i++) {
        double e = (double)N * p[i], o = count[i];
        distinct += count[i] > 0;
        tv += fabs(o / N - p[i]) / 2;
        tv_expect += sqrt(2.0 * p[i] * (1 - p[i]) / (3.141592653589793 * N)) / 2;
        if (e >= 5) {
            chi2 += (o - e) * (o - e) / e;
            cells++;
        } else {
            pool_e += e;
            pool_o += o;
        }
    }
    if (pool_e >= 5) {
        chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    }
    const int df = cells > 1 ? cells - 1 : 1;
    const double chi2_max =
        df + 6 * sqrt(2.0 * df) +
        10; /* far in the tail: a wrong distribution at this N lands well beyond */
    const double tv_max = 2.5 * tv_expect + 0.005;
    const int min_distinct = keep < 5 ? keep : 5;
    int ok =
        outside == 0 && bad_lp == 0 && chi2 <= chi2_max && tv <= tv_max && distinct >= min_distinct;
    printf("%-4s %s: %d kept, chi2 %.1f (df %d, max %.1f), TV %.4f (max %.4f), %d distinct, %d "
           "outside, %d bad logp\n",
           ok ? "ok" : "FAIL", tag, keep, chi2, df, chi2_max, tv, tv_max, distinct, outside,
           bad_lp);
    check(ok);

    free(row);
    free(z);
    free(order);
    free(pos);
    free(p);
    free(h_seed);
    free(h_off);
    free(tok);
    free(lp);
    free(count);
    KC_CUDA(cudaFree(ws));
    KC_CUDA(cudaFree(d_z));
    KC_CUDA(cudaFree(d_seed));
    KC_CUDA(cudaFree(d_off));
    KC_CUDA(cudaFree(d_tok));
    KC_CUDA(cudaFree(d_lp));
}

/* ---- (3) arguments ---- */

static void arg_errors(void)
{
    kg_bf16 *z;
    float *f;
    int32_t *t;
    uint64_t *u;
    KC_CUDA(cudaMalloc((void **)&z, 64 * sizeof *z));
    KC_CUDA(cudaMalloc((void **)&f, 64 * sizeof *f));
    KC_CUDA(cudaMalloc((void **)&t, 64 * sizeof *t));
    KC_CUDA(cudaMalloc((void **)&u, 64 * sizeof *u));
    const cudaError_t inv = cudaErrorInvalidValue;
    size_t ws;
    void *w = dev_ws(2, 8, &ws);
    char *w_odd = (char *)w + 8; /* 8-byte aligned, not 16 */
    int ok = ws > 0;
    ok &= kg_sample(t, f, z, -1, 8, 8, 1.f, 0, 0.f, u, u, w, ws, 0) == inv;
    ok &= kg_sample(t, f, z, 2, 8, 0, 1.f, 0, 0.f, u, u, w, ws, 0) == inv;
    ok &= kg_sample(t, f, z, 2, 8, 9, 1.f, 0, 0.f, u, u, w, ws, 0) == inv;
    ok &= kg_sample(NULL, f, z, 2, 8, 8, 1.f, 0, 0.f, u, u, w, ws, 0) == inv;
    ok &= kg_sample(t, f, NULL, 2, 8, 8, 1.f, 0, 0.f, u, u, w, ws, 0) == inv;
    ok &= kg_sample(t, f, z, 2, 8, 8, 1.f, 0, 0.f, NULL, u, w, ws, 0) == inv;
    ok &= kg_sample(t, f, z, 2, 8, 8, 1.f, 0, 0.f, u, NULL, w, ws, 0) == inv;
    ok &= kg_sample_probs(f, z, -1, 8, 8, 1.f, 0, 0.f, w, ws, 0) == inv;
    ok &= kg_sample_probs(f, z, 2, 8, 0, 1.f, 0, 0.f, w, ws, 0) == inv;
    ok &= kg_sample_probs(f, z, 2, 8, 9, 1.f, 0, 0.f, w, ws, 0) == inv;
    ok &= kg_sample_probs(NULL, z, 2, 8, 8, 1.f, 0, 0.f, w, ws, 0) == inv;
    ok &= kg_sample_probs(f, NULL, 2, 8, 8, 1.f, 0, 0.f, w, ws, 0) == inv;
    /* a workspace one byte short, NULL, or misaligned; greedy needs one too */
    ok &= kg_sample(t, f, z, 2, 8, 8, 1.f, 0, 0.f, u, u, w, ws - 1, 0) == inv;
    ok &= kg_sample_probs(f, z, 2, 8, 8, 1.f, 0, 0.f, w, ws - 1, 0) == inv;
    ok &= kg_sample(t, f, z, 2, 8, 8, 0.f, 0, 0.f, NULL, NULL, NULL, ws, 0) == inv;
    ok &= kg_sample_probs(f, z, 2, 8, 8, 1.f, 0, 0.f, NULL, ws, 0) == inv;
    ok &= kg_sample(t, f, z, 2, 8, 8, 1.f, 0, 0.f, u, u, w_odd, ws, 0) == inv;
    ok &= kg_sample_probs(f, z, 2, 8, 8, 1.f, 0, 0.f, w_odd, ws, 0) == inv;
    /* the size grows with B and n_valid (a workspace for the largest call serves the rest) */
    ok &= kg_sample_workspace_bytes(0, 8) == 0 && kg_sample_workspace_bytes(2, 0) == 0 &&
          kg_sample_workspace_bytes(1, 8) <= ws &&
          kg_sample_workspace_bytes(4, 151936) <= kg_sample_workspace_bytes(8, 151936) &&
          kg_sample_workspace_bytes(8, 151000) <= kg_sample_workspace_bytes(8, 151936);
    check_true("argument errors return cudaErrorInvalidValue (workspace NULL, short, misaligned)",
               ok);
    ok = kg_sample(NULL, NULL, NULL, 0, 8, 8, 1.f, 0, 0.f, NULL, NULL, NULL, 0, 0) == cudaSuccess &&
         kg_sample_probs(NULL, NULL, 0, 8, 8, 1.f, 0, 0.f, NULL, 0, 0) == cudaSuccess &&
         kg_sample(t, NULL, z, 2, 8, 8, 0.f, 0, 0.f, NULL, NULL, w, ws, 0) == cudaSuccess;
    KC_CUDA(cudaDeviceSynchronize());
    check_true("B = 0 is a no-op (NULL pointers taken); greedy takes NULL seed, offset and logp",
               ok);
    KC_CUDA(cudaFree(w));
    KC_CUDA(cudaFree(z));
    KC_CUDA(cudaFree(f));
    KC_CUDA(cudaFree(t));
    KC_CUDA(cudaFree(u));
}

/* ---- (4) NaN rows ---- */

static void nan_rows(void)
{
    const int B = 4, V = 10000, ld = 10008;
    float *z = (float *)malloc((size_t)B * ld * sizeof *z);
    for (int b = 0; b < B; b++)
        fill_row(z + (size_t)b * ld, V, ld, D_LLM, 500 + b);
    kg_bf16 *d_clean = kc_to_dev_bf(z, (size_t)B * ld);
    z[2 * ld + 8517] = NAN;  /* a candidate (pass 1's third part): row 2 is NaN */
    z[1 * ld + V + 2] = NAN; /* padding: row 1 is not */
    kg_bf16 *d_nan = kc_to_dev_bf(z, (size_t)B * ld);
    uint64_t hs[4] = {1, 2, 3, 4}, ho[4] = {10, 20, 30, 40};
    uint64_t *d_s = dev_u64(hs, B), *d_o = dev_u64(ho, B);
    float *d_p, *d_lp;
    int32_t *d_t;
    KC_CUDA(cudaMalloc((void **)&d_p, (size_t)2 * B * V * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&d_lp, (size_t)4 * B * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&d_t, (size_t)4 * B * sizeof(int32_t)));
    size_t wb;
    void *w = dev_ws(B, V, &wb);
    int ok = 1;
    const float Ts[2] = {0.f, 0.9f};
    for (int k = 0; k < 2; k++) {
        float T = Ts[k];
        KC_CUDA(kg_sample_probs(d_p, d_clean, B, ld, V, T, 40, 0.9f, w, wb, 0));
        KC_CUDA(kg_sample_probs(d_p + B * V, d_nan, B, ld, V, T, 40, 0.9f, w, wb, 0));
        KC_CUDA(kg_sample(d_t, d_lp, d_clean, B, ld, V, T, 40, 0.9f, d_s, d_o, w, wb, 0));
        KC_CUDA(kg_sample(d_t + B, d_lp + B, d_nan, B, ld, V, T, 40, 0.9f, d_s, d_o, w, wb, 0));
        KC_CUDA(cudaDeviceSynchronize());
        float *p = (float *)malloc((size_t)2 * B * V * sizeof(float)), lp[8];
        int32_t t[8];
        kc_from_dev_f(p, d_p, (size_t)2 * B * V);
        kc_from_dev_f(lp, d_lp, 2 * B);
        KC_CUDA(cudaMemcpy(t, d_t, 2 * B * sizeof(int32_t), cudaMemcpyDeviceToHost));
        for (int b = 0; b < B; b++) {
            const float *pc = p + (size_t)b * V, *pn = p + (size_t)(B + b) * V;
            if (b == 2) {
                ok &= t[B + b] == -1 && isnan(lp[B + b]);
                for (int i = 0; i < V; i++)
                    ok &= isnan(pn[i]);
            } else {
                ok &= t[B + b] == t[b] && memcmp(&lp[B + b], &lp[b], sizeof(float)) == 0 &&
                      memcmp(pn, pc, (size_t)V * sizeof(float)) == 0;
                ok &= t[b] >= 0 && t[b] < V && pc[t[b]] > 0;
            }
        }
        free(p);
    }
    check_true(
        "a NaN candidate: token -1, logp NaN, probs NaN in its row only (NaN padding ignored)", ok);
    free(z);
    KC_CUDA(cudaFree(w));
    KC_CUDA(cudaFree(d_clean));
    KC_CUDA(cudaFree(d_nan));
    KC_CUDA(cudaFree(d_s));
    KC_CUDA(cudaFree(d_o));
    KC_CUDA(cudaFree(d_p));
    KC_CUDA(cudaFree(d_lp));
    KC_CUDA(cudaFree(d_t));
}

/* ---- (5) a row alone and inside a batch ---- */

#define AB_ROWS 8

typedef struct ab_buf {
    int32_t *tok; /* [2 AB_ROWS]: the batch's, then the rows' alone */
    float *lp;    /* [2 AB_ROWS] */
    float *p;     /* [2 AB_ROWS][V] */
} ab_buf;

/* one config: the batch into the first half of buf, each row alone into the second */
static void ab_run(const ab_buf *d, const kg_bf16 *d_z, int V, int ld, const ref_cfg *rc,
                   const uint64_t *d_s, const uint64_t *d_o, void *wb, size_t wb_bytes, void *w1,
                   size_t w1_bytes)
{
    const int B = AB_ROWS, greedy = !(rc->T > 0);
    const uint64_t *s = greedy ? NULL : d_s, *o = greedy ? NULL : d_o;
    KC_CUDA(kg_sample(d->tok, d->lp, d_z, B, ld, V, rc->T, rc->top_k, rc->top_p, s, o, wb, wb_bytes,
                      0));
    KC_CUDA(kg_sample_probs(d->p, d_z, B, ld, V, rc->T, rc->top_k, rc->top_p, wb, wb_bytes, 0));
    for (int b = 0; b < B; b++) {
        const kg_bf16 *row = d_z + (size_t)b * ld;
        KC_CUDA(kg_sample(d->tok + B + b, d->lp + B + b, row, 1, ld, V, rc->T, rc->top_k, rc->top_p,
                          greedy ? NULL : s + b, greedy ? NULL : o + b, w1, w1_bytes, 0));
        KC_CUDA(kg_sample_probs(d->p + (size_t)(B + b) * V, row, 1, ld, V, rc->T, rc->top_k,
                                rc->top_p, w1, w1_bytes, 0));
    }
    KC_CUDA(cudaDeviceSynchronize());
}

static void alone_vs_batch(int V, int ld)
{
    const int B = AB_ROWS;
    float *z = (float *)malloc((size_t)B * ld * sizeof *z);
    for (int b = 0; b < B; b++) /* every kind of row, wide-range included */
        fill_row(z + (size_t)b * ld, V, ld, b % D_COUNT, 9000 + (uint64_t)b);
    kg_bf16 *d_z = kc_to_dev_bf(z, (size_t)B * ld);
    uint64_t hs[AB_ROWS], ho[AB_ROWS];
    for (int b = 0; b < B; b++) {
        hs[b] = 0xab5000 + 17 * (uint64_t)b;
        ho[b] = 6 + 2 * (uint64_t)b;
    }
    uint64_t *d_s = dev_u64(hs, B), *d_o = dev_u64(ho, B);
    ab_buf d;
    KC_CUDA(cudaMalloc((void **)&d.tok, 2 * B * sizeof(int32_t)));
    KC_CUDA(cudaMalloc((void **)&d.lp, 2 * B * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&d.p, (size_t)2 * B * V * sizeof(float)));
    size_t wb_bytes, w1_bytes;
    void *wb = dev_ws(B, V, &wb_bytes), *w1 = dev_ws(1, V, &w1_bytes);
    float *p = (float *)malloc((size_t)2 * B * V * sizeof(float)), lp[2 * AB_ROWS];
    int32_t tok[2 * AB_ROWS];
    /* greedy; the whole vocabulary at T = 1; top_k then top_p */
    const ref_cfg rcs[3] = {{0.f, 0, 0.f}, {1.f, 0, 0.f}, {0.8f, 50, 0.9f}};
    int ok = 1;
    for (int ci = 0; ci < 3; ci++) {
        ab_run(&d, d_z, V, ld, &rcs[ci], d_s, d_o, wb, wb_bytes, w1, w1_bytes);
        KC_CUDA(cudaMemcpy(tok, d.tok, sizeof tok, cudaMemcpyDeviceToHost));
        kc_from_dev_f(lp, d.lp, 2 * B);
        kc_from_dev_f(p, d.p, (size_t)2 * B * V);
        for (int b = 0; b < B; b++) {
            const int same =
                tok[b] == tok[B + b] && memcmp(&lp[b], &lp[B + b], sizeof(float)) == 0 &&
                memcmp(p + (size_t)b * V, p + (size_t)(B + b) * V, (size_t)V * sizeof(float)) == 0;
            if (!same || tok[b] < 0 || tok[b] >= V) {
                fprintf(stderr,
                        "FAIL V=%d ld=%d T=%g top_k=%d top_p=%g row %d: batch token %d logp %.9g, "
                        "alone token %d logp %.9g%s\n",
                        V, ld, rcs[ci].T, rcs[ci].top_k, rcs[ci].top_p, b, tok[b], lp[b],
                        tok[B + b], lp[B + b], same ? " (token out of range)" : "");
                ok = 0;
            }
        }
    }
    printf("%-4s a row alone (B=1) gives the same bits as in a batch of %d: V=%d ld=%d, tokens, "
           "logp and probs, greedy and sampled\n",
           ok ? "ok" : "FAIL", B, V, ld);
    check(ok);
    free(z);
    free(p);
    KC_CUDA(cudaFree(wb));
    KC_CUDA(cudaFree(w1));
    KC_CUDA(cudaFree(d_z));
    KC_CUDA(cudaFree(d_s));
    KC_CUDA(cudaFree(d_o));
    KC_CUDA(cudaFree(d.tok));
    KC_CUDA(cudaFree(d.lp));
    KC_CUDA(cudaFree(d.p));
}

int main(void)
{
    const shape full[] = {
        {7, 8, 5},         {100, 104, 64},      {1000, 1003, 16},    {5000, 5000, 4},
        {40000, 40003, 1}, {151936, 151936, 4}, {151931, 152000, 2},
    };
    const shape small[] = {{7, 8, 2}, {100, 104, 2}, {1000, 1003, 1}};
    const shape *shapes = kc_small() ? small : full;
    const int n_shapes = kc_small() ? 3 : (int)(sizeof full / sizeof full[0]);
    uint64_t seed = 1;
    for (int s = 0; s < n_shapes; s++)
        for (int d = 0; d < D_COUNT; d++)
            run_shape_dist(&shapes[s], d, seed++);

    const int N = kc_small() ? 500 : 20000;
    /* llm-like 64: everything kept; 200 at T 2: top_k 20 then top_p 0.9 both cut; integers:
     * top_k 10 ends inside a run of ties (its lowest ids kept); wide-range 300 (~120 key bins):
     * the top-p draw walks several windows, and top_k n/2 lies below the first window (the mass of
     * the bins between) */
    const cfg all = {1.f, K_ABS, 0, 0.f}, kp = {2.f, K_ABS, 20, 0.9f}, tie = {1.f, K_ABS, 10, 0.f},
              wide = {1.f, K_ABS, 0, 0.95f}, deep = {1.f, K_HALF, 0, 0.f};
    draws_case(64, D_LLM, &all, N, 1);
    draws_case(200, D_LLM, &kp, N, 2);
    draws_case(100, D_TIES, &tie, N, 3);
    draws_case(300, D_WIDE, &wide, N, 4);
    draws_case(300, D_WIDE, &deep, N, 5);
    arg_errors();
    nan_rows();
    if (kc_small()) {
        alone_vs_batch(100, 104);
        alone_vs_batch(5000, 5003);
    } else {
        alone_vs_batch(151936, 151936);
        alone_vs_batch(151931, 152000);
        alone_vs_batch(5000, 5003);
    }
    printf("%s\n", g_fail ? "test_sample: FAIL" : "test_sample: ok");
    return g_fail ? 1 : 0;
}
