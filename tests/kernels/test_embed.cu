/* test_embed: kg_embed_forward / kg_embed_backward against the CPU.
 *
 * Forward (a gather, so compared bit for bit): every row of out is its token's table row; tokens
 * repeat (one id at every 4th position, the last id vocab - 1 among them, so that an
 * off-by-one in the bound check shows); tokens outside [0, vocab) (-1, vocab, vocab + 1,
 * INT_MIN, INT_MAX) give an all-NaN row and leave the other rows right; nothing is written
 * outside out's T rows (sentinel guards around it). Shapes: hidden 896 (the vectorised path),
 * 2056 (vectorised, more vectors than threads), 8, 37 (odd: the scalar path), and 896 with out
 * or the table one element off 16-byte alignment (the scalar fallback).
 *
 * Backward (dtable += the dout rows of each token, fp32 atomics):
 *  - "exact": dout values are k/64 (|k| <= 64) and dtable starts at j/64 (|j| <= 1024), so every
 *    partial sum is a multiple of 2^-6 below 2^13 in magnitude: 19 significant bits, exact in
 *    fp32 in any order of addition. One token takes ~60% of the batch (thousands of atomics on
 *    the same row), and the result must equal the double reference exactly; a second call must
 *    add the same again (+=, not =). A lost or doubled atomic cannot hide in a tolerance.
 *  - "random": arbitrary bf16 dout and fp32 starting values, against the double reference
 *    within a rigorous bound on fp32 rounding (see backward_bound).
 * Both with invalid tokens, which must be skipped: the guard rows before and after dtable (where
 * tokens -1 and vocab would land) stay untouched. Then the argument errors and T = 0 (a no-op
 * that touches nothing).
 *
 * KGYM_KERNEL_SMALL=1 (compute-sanitizer) runs a few small shapes only. */
#include <limits.h>

#include "kcheck.h"

/* a finite bf16 (about 1.5e16) that no copied row of values in [-1, 1] nor a NaN row can be */
#define GUARD_BYTE 0x5A
#define GUARD_BF ((kg_bf16)0x5A5A)
/* dtable's guard: bytes 0x3F, the float 0.747...: small, so that a stray atomicAdd of a
 * gradient into it changes its bits (a huge guard would absorb the addition) */
#define GUARD_F_BYTE 0x3F
#define GUARD_F_BITS 0x3F3F3F3Fu

static int small_only(void)
{
    const char *e = getenv("KGYM_KERNEL_SMALL");
    return e && *e && strcmp(e, "0") != 0;
}

static int bf_is_nan(kg_bf16 b)
{
    return (b & 0x7fffu) > 0x7f80u;
}

static int f_is_guard(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u == GUARD_F_BITS;
}

static int token_valid(int32_t tok, int vocab)
{
    return tok >= 0 && tok < vocab;
}

/* T ids: random in [0, vocab); when repeat_last, the last id at every 4th position (repeats,
 * and the edge of the valid range); then out-of-range ids at a few spread positions */
static void make_tokens(int32_t *tok, int T, int vocab, int repeat_last, uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 3;
    for (int t = 0; t < T; t++)
        tok[t] = (int32_t)(kc_next(&st) % (uint64_t)vocab);
    for (int t = 0; repeat_last && t < T; t += 4)
        tok[t] = vocab - 1;
    const int32_t bad[] = {-1, vocab, vocab + 1, INT_MIN, INT_MAX};
    const int nbad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < nbad; i++) {
        int t = 1 + (int)((long long)i * (T - 1) / nbad); /* 1, ..., spread up to T - 1 */
        if (t < T)
            tok[t] = bad[i];
    }
}

static int32_t *dev_tokens(const int32_t *tok, int T)
{
    int32_t *d;
    KC_CUDA(cudaMalloc((void **)&d, ((size_t)T + 1) * sizeof *d));
    KC_CUDA(cudaMemcpy(d, tok, (size_t)T * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

/* ---- forward ---- */

/* out rows against the table, bit for bit; NaN rows for invalid tokens; guards intact.
 * buf holds [mis_out guard elements][T rows][one guard row][the rest of the slack] */
static int check_forward_rows(const char *label, const kg_bf16 *buf, size_t buf_n, int mis_out,
                              const kg_bf16 *table, const int32_t *tok, int T, int hidden,
                              int vocab)
{
    size_t exact = 0, nan_rows = 0, bad = 0, first_bad = 0, guards_bad = 0;
    const kg_bf16 *out = buf + mis_out;
    for (int t = 0; t < T; t++) {
        const kg_bf16 *row = out + (size_t)t * hidden;
        int row_ok = 1;
        for (int i = 0; i < hidden; i++) {
            int ok = token_valid(tok[t], vocab) ? row[i] == table[(size_t)tok[t] * hidden + i]
                                                : bf_is_nan(row[i]);
            if (!ok && bad++ == 0)
                first_bad = (size_t)t * hidden + i;
            row_ok &= ok;
        }
        if (row_ok && token_valid(tok[t], vocab))
            exact++;
        else if (row_ok)
            nan_rows++;
    }
    for (size_t i = 0; i < buf_n; i++) /* everything outside the T rows */
        if (i < (size_t)mis_out || i >= (size_t)mis_out + (size_t)T * hidden)
            guards_bad += buf[i] != GUARD_BF;
    int ok = bad == 0 && guards_bad == 0;
    if (bad)
        fprintf(stderr, "FAIL %s: first wrong value at row %zu col %zu (token %d): 0x%04x\n", label,
                first_bad / hidden, first_bad % hidden, tok[first_bad / hidden], out[first_bad]);
    printf("%-4s %s: %zu rows exact, %zu NaN rows, %zu wrong values, %zu guard values touched\n",
           ok ? "ok" : "FAIL", label, exact, nan_rows, bad, guards_bad);
    return ok;
}

/* out and table start mis_out / mis_table elements into their buffers (1: off 16-byte
 * alignment, so the scalar path runs) */
static int check_forward(int hidden, int vocab, int T, int mis_out, int mis_table, uint64_t seed)
{
    const size_t ntab = (size_t)vocab * hidden;
    float *tf = (float *)malloc(ntab * sizeof *tf);
    kg_bf16 *table = (kg_bf16 *)malloc(ntab * sizeof *table);
    kc_fill(tf, ntab, seed, -1.f, 1.f);
    for (size_t i = 0; i < ntab; i++)
        table[i] = kc_f2bf(tf[i]);
    int32_t *tok = (int32_t *)malloc(((size_t)T + 1) * sizeof *tok);
    make_tokens(tok, T, vocab, 1, seed);

    kg_bf16 *tab_buf, *out_buf;
    KC_CUDA(cudaMalloc((void **)&tab_buf, (ntab + 8) * sizeof *tab_buf));
    KC_CUDA(cudaMemcpy(tab_buf + mis_table, table, ntab * sizeof *table, cudaMemcpyHostToDevice));
    const size_t out_n = ((size_t)T + 1) * hidden + 8; /* T rows, a guard row, slack */
    KC_CUDA(cudaMalloc((void **)&out_buf, out_n * sizeof *out_buf));
    KC_CUDA(cudaMemset(out_buf, GUARD_BYTE, out_n * sizeof *out_buf));
    int32_t *tok_d = dev_tokens(tok, T);

    KC_CUDA(kg_embed_forward(out_buf + mis_out, tab_buf + mis_table, tok_d, T, hidden, vocab, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kg_bf16 *got = (kg_bf16 *)malloc(out_n * sizeof *got);
    KC_CUDA(cudaMemcpy(got, out_buf, out_n * sizeof *got, cudaMemcpyDeviceToHost));

    char label[128];
    snprintf(label, sizeof label, "embed fwd hidden %4d vocab %5d T %4d%s%s%s", hidden, vocab, T,
             mis_out ? " out misaligned" : "", mis_table ? " table misaligned" : "",
             mis_out || mis_table ? "" : " aligned");
    int ok = check_forward_rows(label, got, out_n, mis_out, table, tok, T, hidden, vocab);

    KC_CUDA(cudaFree(tab_buf));
    KC_CUDA(cudaFree(out_buf));
    KC_CUDA(cudaFree(tok_d));
    free(tf), free(table), free(tok), free(got);
    return ok;
}

/* ---- backward ---- */

/* dtable in a buffer with one guard row before and after it: tokens -1 and vocab would land
 * there if they were not skipped */
typedef struct {
    float *buf, *dtable; /* device */
    int hidden, vocab;
} dev_dtable;

static void dtable_alloc(dev_dtable *d, const float *init, int hidden, int vocab)
{
    const size_t n = ((size_t)vocab + 2) * hidden;
    d->hidden = hidden;
    d->vocab = vocab;
    KC_CUDA(cudaMalloc((void **)&d->buf, n * sizeof(float)));
    KC_CUDA(cudaMemset(d->buf, GUARD_F_BYTE, n * sizeof(float)));
    d->dtable = d->buf + hidden;
    KC_CUDA(cudaMemcpy(d->dtable, init, (size_t)vocab * hidden * sizeof(float),
                       cudaMemcpyHostToDevice));
}

/* dtable to host (got, vocab * hidden) and the number of guard values that changed */
static size_t dtable_fetch(const dev_dtable *d, float *got)
{
    const size_t n = ((size_t)d->vocab + 2) * d->hidden, tab = (size_t)d->vocab * d->hidden;
    float *all = (float *)malloc(n * sizeof *all);
    KC_CUDA(cudaMemcpy(all, d->buf, n * sizeof *all, cudaMemcpyDeviceToHost));
    size_t touched = 0;
    for (size_t i = 0; i < (size_t)d->hidden; i++)
        touched += !f_is_guard(all[i]);
    for (size_t i = (size_t)d->hidden + tab; i < n; i++)
        touched += !f_is_guard(all[i]);
    memcpy(got, all + d->hidden, tab * sizeof *got);
    free(all);
    return touched;
}

/* want[row tok[t]] += times * dout[t] in double, invalid tokens skipped */
static void ref_backward(double *want, const float *dout, const int32_t *tok, int T, int hidden,
                         int vocab, int times)
{
    for (int t = 0; t < T; t++) {
        if (!token_valid(tok[t], vocab))
            continue;
        double *row = want + (size_t)tok[t] * hidden;
        for (int i = 0; i < hidden; i++)
            row[i] += (double)times * dout[(size_t)t * hidden + i];
    }
}

/* A rigorous bound on fp32 accumulation error, whatever the order of the atomics: each of the
 * n_e additions into element e rounds once, by at most 2^-24 of the magnitude of its exact
 * result, which is at most A_e = |init_e| + sum |dout| (to first order). So |got - want| <=
 * n_e 2^-24 A_e; the largest over elements, with 1% slack for the second order term. */
static float backward_bound(const float *init, const float *dout, const int32_t *tok, int T,
                            int hidden, int vocab)
{
    const size_t tab = (size_t)vocab * hidden;
    double *mag = (double *)calloc(tab, sizeof *mag);
    int *count = (int *)calloc((size_t)vocab, sizeof *count);
    for (int t = 0; t < T; t++) {
        if (!token_valid(tok[t], vocab))
            continue;
        count[tok[t]]++;
        for (int i = 0; i < hidden; i++)
            mag[(size_t)tok[t] * hidden + i] += fabs((double)dout[(size_t)t * hidden + i]);
    }
    double worst = 0;
    for (size_t e = 0; e < tab; e++) {
        double b = count[e / hidden] * ldexp(1.0, -24) * (fabs((double)init[e]) + mag[e]);
        worst = b > worst ? b : worst;
    }
    free(mag);
    free(count);
    return (float)(worst * 1.01);
}

static float *to_float(const double *x, size_t n)
{
    float *f = (float *)malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

static int report_guards(const char *label, size_t touched)
{
    printf("%-4s %s: %zu guard values touched\n", touched ? "FAIL" : "ok", label, touched);
    return touched == 0;
}

/* exact: dyadic values (see the file comment) and one hot token; otherwise arbitrary values
 * and no hot token (so that the rigorous bound stays small) */
static int check_backward(int hidden, int vocab, int T, int exact, uint64_t seed)
{
    const size_t nd = (size_t)T * hidden, tab = (size_t)vocab * hidden;
    float *dout = (float *)malloc(nd * sizeof *dout), *init = (float *)malloc(tab * sizeof *init);
    int32_t *tok = (int32_t *)malloc(((size_t)T + 1) * sizeof *tok);
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 11;
    make_tokens(tok, T, vocab, exact, seed);
    if (exact) {
        const int hot = vocab / 3;
        for (int t = 0; t < T; t++) /* ~60% of the valid positions take the hot id */
            if (token_valid(tok[t], vocab) && kc_next(&st) % 5 < 3)
                tok[t] = hot;
        for (size_t i = 0; i < nd; i++)
            dout[i] = (float)((int)(kc_next(&st) % 129) - 64) / 64.f;
        for (size_t i = 0; i < tab; i++)
            init[i] = (float)((int)(kc_next(&st) % 2049) - 1024) / 64.f;
    } else {
        kc_fill(dout, nd, seed + 1, -1.f, 1.f);
        for (size_t i = 0; i < tab; i++)
            init[i] = kc_uniform(&st, -1.f, 1.f); /* any fp32, not only bf16 values */
    }
    int max_count = 0;
    {
        int *count = (int *)calloc((size_t)vocab, sizeof *count);
        for (int t = 0; t < T; t++)
            if (token_valid(tok[t], vocab) && ++count[tok[t]] > max_count)
                max_count = count[tok[t]];
        free(count);
    }

    kg_bf16 *dout_d = kc_to_dev_bf(dout, nd);
    int32_t *tok_d = dev_tokens(tok, T);
    dev_dtable dt;
    dtable_alloc(&dt, init, hidden, vocab);

    double *want = (double *)malloc(tab * sizeof *want);
    float *got = (float *)malloc(tab * sizeof *got);
    const float atol = exact ? 0.f : backward_bound(init, dout, tok, T, hidden, vocab);
    const char *kind = exact ? "exact " : "random";
    char label[160];
    int ok = 1;
    const int calls = exact ? 2 : 1; /* exact: a second call must add the same again */
    for (int c = 1; c <= calls; c++) {
        KC_CUDA(kg_embed_backward(dt.dtable, dout_d, tok_d, T, hidden, vocab, 0));
        KC_CUDA(cudaDeviceSynchronize());
        size_t touched = dtable_fetch(&dt, got);
        for (size_t i = 0; i < tab; i++)
            want[i] = init[i];
        ref_backward(want, dout, tok, T, hidden, vocab, c);
        float *w = to_float(want, tab); /* exact mode: exactly representable */
        snprintf(label, sizeof label,
                 "embed bwd %s hidden %4d vocab %5d T %4d (max %d repeats) call %d", kind, hidden,
                 vocab, T, max_count, c);
        ok &= kc_close(label, got, w, tab, atol, 0.f);
        snprintf(label, sizeof label, "embed bwd %s hidden %4d vocab %5d T %4d invalid skipped",
                 kind, hidden, vocab, T);
        ok &= report_guards(label, touched);
        free(w);
    }

    KC_CUDA(cudaFree(dout_d));
    KC_CUDA(cudaFree(tok_d));
    KC_CUDA(cudaFree(dt.buf));
    free(dout), free(init), free(tok), free(want), free(got);
    return ok;
}

/* ---- argument errors and T = 0 ---- */

static int expect(const char *label, cudaError_t got, cudaError_t want)
{
    int ok = got == want;
    printf("%-4s %s: got %s\n", ok ? "ok" : "FAIL", label, cudaGetErrorName(got));
    return ok;
}

static int run_arg_errors(void)
{
    const int hidden = 64, vocab = 4, T = 2;
    kg_bf16 *out, *table, *dout;
    float *dtable;
    int32_t *tok;
    const int32_t htok[T] = {1, 3};
    KC_CUDA(cudaMalloc((void **)&out, (size_t)T * hidden * sizeof *out));
    KC_CUDA(cudaMalloc((void **)&dout, (size_t)T * hidden * sizeof *dout));
    KC_CUDA(cudaMalloc((void **)&table, (size_t)vocab * hidden * sizeof *table));
    KC_CUDA(cudaMalloc((void **)&dtable, (size_t)vocab * hidden * sizeof *dtable));
    KC_CUDA(cudaMalloc((void **)&tok, T * sizeof *tok));
    KC_CUDA(cudaMemcpy(tok, htok, sizeof htok, cudaMemcpyHostToDevice));
    KC_CUDA(cudaMemset(table, 0, (size_t)vocab * hidden * sizeof *table));
    KC_CUDA(cudaMemset(dout, 0x3f, (size_t)T * hidden * sizeof *dout)); /* 0x3f3f: 0.75 */
    /* the outputs hold guards: nothing below may change them */
    KC_CUDA(cudaMemset(out, GUARD_BYTE, (size_t)T * hidden * sizeof *out));
    KC_CUDA(cudaMemset(dtable, GUARD_F_BYTE, (size_t)vocab * hidden * sizeof *dtable));

    const cudaError_t inval = cudaErrorInvalidValue;
    int ok = 1;
    ok &= expect("fwd T < 0", kg_embed_forward(out, table, tok, -1, hidden, vocab, 0), inval);
    ok &= expect("fwd hidden 0", kg_embed_forward(out, table, tok, T, 0, vocab, 0), inval);
    ok &= expect("fwd hidden < 0", kg_embed_forward(out, table, tok, T, -8, vocab, 0), inval);
    ok &= expect("fwd vocab 0", kg_embed_forward(out, table, tok, T, hidden, 0, 0), inval);
    ok &= expect("fwd out NULL", kg_embed_forward(NULL, table, tok, T, hidden, vocab, 0), inval);
    ok &= expect("fwd table NULL", kg_embed_forward(out, NULL, tok, T, hidden, vocab, 0), inval);
    ok &= expect("fwd tokens NULL", kg_embed_forward(out, table, NULL, T, hidden, vocab, 0), inval);
    ok &= expect("bwd T < 0", kg_embed_backward(dtable, dout, tok, -1, hidden, vocab, 0), inval);
    ok &= expect("bwd hidden 0", kg_embed_backward(dtable, dout, tok, T, 0, vocab, 0), inval);
    ok &= expect("bwd vocab 0", kg_embed_backward(dtable, dout, tok, T, hidden, 0, 0), inval);
    ok &= expect("bwd vocab < 0", kg_embed_backward(dtable, dout, tok, T, hidden, -1, 0), inval);
    ok &= expect("bwd dtable NULL", kg_embed_backward(NULL, dout, tok, T, hidden, vocab, 0), inval);
    ok &= expect("bwd dout NULL", kg_embed_backward(dtable, NULL, tok, T, hidden, vocab, 0), inval);
    ok &= expect("bwd tokens NULL", kg_embed_backward(dtable, dout, NULL, T, hidden, vocab, 0),
                 inval);
    ok &= expect("fwd T = 0 is a no-op", kg_embed_forward(out, table, tok, 0, hidden, vocab, 0),
                 cudaSuccess);
    ok &= expect("bwd T = 0 is a no-op", kg_embed_backward(dtable, dout, tok, 0, hidden, vocab, 0),
                 cudaSuccess);
    ok &= expect("no launch error left behind", cudaDeviceSynchronize(), cudaSuccess);

    /* none of the calls above launched: the guards are all there */
    kg_bf16 *ho = (kg_bf16 *)malloc((size_t)T * hidden * sizeof *ho);
    float *hd = (float *)malloc((size_t)vocab * hidden * sizeof *hd);
    KC_CUDA(cudaMemcpy(ho, out, (size_t)T * hidden * sizeof *ho, cudaMemcpyDeviceToHost));
    KC_CUDA(cudaMemcpy(hd, dtable, (size_t)vocab * hidden * sizeof *hd, cudaMemcpyDeviceToHost));
    size_t touched = 0;
    for (size_t i = 0; i < (size_t)T * hidden; i++)
        touched += ho[i] != GUARD_BF;
    for (size_t i = 0; i < (size_t)vocab * hidden; i++)
        touched += !f_is_guard(hd[i]);
    ok &= report_guards("rejected and T = 0 calls wrote nothing", touched);

    KC_CUDA(cudaFree(out));
    KC_CUDA(cudaFree(dout));
    KC_CUDA(cudaFree(table));
    KC_CUDA(cudaFree(dtable));
    KC_CUDA(cudaFree(tok));
    free(ho), free(hd);
    return ok;
}

int main(void)
{
    int ok = 1;
    uint64_t seed = 500;
    if (small_only()) {
        ok &= check_forward(64, 20, 40, 0, 0, seed++); /* vectorised */
        ok &= check_forward(64, 20, 40, 1, 0, seed++); /* scalar: out misaligned */
        ok &= check_forward(37, 20, 40, 0, 0, seed++); /* scalar: odd hidden */
        ok &= check_backward(37, 10, 64, 1, seed++);
        ok &= check_backward(64, 64, 64, 0, seed++);
    } else {
        ok &= check_forward(896, 3000, 1000, 0, 0, seed++);
        ok &= check_forward(896, 3000, 1000, 1, 0, seed++);
        ok &= check_forward(896, 3000, 1000, 0, 1, seed++);
        ok &= check_forward(2056, 500, 300, 0, 0, seed++); /* 257 vectors a row: threads loop */
        ok &= check_forward(8, 5, 256, 0, 0, seed++);      /* one vector a row, few ids */
        ok &= check_forward(37, 100, 300, 0, 0, seed++);
        ok &= check_backward(896, 5000, 4096, 1, seed++);
        ok &= check_backward(37, 50, 4096, 1, seed++);
        ok &= check_backward(896, 2048, 4096, 0, seed++);
        ok &= check_backward(37, 1000, 2048, 0, seed++);
    }
    ok &= run_arg_errors();
    printf("%s\n", ok ? "embed: all checks passed" : "embed: FAILED");
    return ok ? 0 : 1;
}
