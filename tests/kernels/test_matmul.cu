/* kg_matmul against a double-precision CPU product of the same bf16 inputs: every combination of
 * transposes, bias, accumulation (beta = 1), the shapes of a Qwen2.5-0.5B layer (and awkward
 * ones), and the argument errors. */
#include "kcheck.h"

/* C[M, N] = op(A) op(B) (+ bias) + beta C, row-major, in double */
static void ref_matmul(float *C, const float *A, const float *B, const float *bias, int M, int N,
                       int K, int ta, int tb, float beta)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                double b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                acc += a * b;
            }
            if (bias)
                acc += bias[j];
            C[(size_t)i * N + j] = (float)(acc + (double)beta * C[(size_t)i * N + j]);
        }
}

static int check_case(kg_matmul_ctx *ctx, int M, int N, int K, int ta, int tb, int with_bias,
                      float beta, uint64_t seed)
{
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *A = (float *)malloc(na * 4), *B = (float *)malloc(nb * 4),
          *bias = (float *)malloc(N * 4);
    float *C = (float *)malloc(nc * 4), *got = (float *)malloc(nc * 4);
    kc_fill(A, na, seed, -1, 1);
    kc_fill(B, nb, seed + 1, -1, 1);
    kc_fill(bias, (size_t)N, seed + 2, -1, 1);
    kc_fill(C, nc, seed + 3, -1, 1); /* what beta = 1 accumulates into */
    kg_bf16 *dA = kc_to_dev_bf(A, na), *dB = kc_to_dev_bf(B, nb), *dbias = kc_to_dev_bf(bias, N);
    kg_bf16 *dC = kc_to_dev_bf(C, nc);
    KC_CUDA(kg_matmul(ctx, dC, dA, dB, with_bias ? dbias : NULL, M, N, K, ta, tb, beta, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, dC, nc);
    ref_matmul(C, A, B, with_bias ? bias : NULL, M, N, K, ta, tb, beta);
    char label[128];
    snprintf(label, sizeof label, "matmul M%d N%d K%d ta%d tb%d bias%d beta%g", M, N, K, ta, tb,
             with_bias, beta);
    /* sums of K products of U(-1, 1): |C| ~ sqrt(K / 9); the output is rounded to bf16 */
    int ok = kc_close(label, got, C, nc, 2e-2f * sqrtf((float)K / 9.0f) + 1e-2f, 1e-2f);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dbias);
    cudaFree(dC);
    free(A);
    free(B);
    free(bias);
    free(C);
    free(got);
    return ok;
}

/* A small-M shape whose operands are not 16-byte aligned (8 bytes past an allocation) goes to
 * cuBLASLt, and is as right as an aligned one. */
static int check_misaligned(kg_matmul_ctx *ctx, uint64_t seed)
{
    const int M = 3, N = 40, K = 64, off = 4; /* 4 bf16 = 8 bytes */
    size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    float *A = (float *)malloc(na * 4), *B = (float *)malloc(nb * 4), *C = (float *)malloc(nc * 4);
    float *got = (float *)malloc(nc * 4), *pad = (float *)calloc(off + nb, 4);
    kc_fill(A, na, seed, -1, 1);
    kc_fill(B, nb, seed + 1, -1, 1);
    memcpy(pad + off, B, nb * 4);
    kg_bf16 *dA = kc_to_dev_bf(A, na), *dBpad = kc_to_dev_bf(pad, off + nb);
    kg_bf16 *dC = kc_to_dev_bf(A, nc > na ? nc : na); /* any contents: beta = 0 */
    KC_CUDA(kg_matmul(ctx, dC, dA, dBpad + off, NULL, M, N, K, 0, 1, 0.0f, 0));
    KC_CUDA(cudaDeviceSynchronize());
    kc_from_dev_bf(got, dC, nc);
    ref_matmul(C, A, B, NULL, M, N, K, 0, 1, 0.0f);
    int ok = kc_close("matmul M3 N40 K64 x W^T with W 8 bytes off alignment", got, C, nc,
                      2e-2f * sqrtf((float)K / 9.0f) + 1e-2f, 1e-2f);
    cudaFree(dA);
    cudaFree(dBpad);
    cudaFree(dC);
    free(A), free(B), free(C), free(got), free(pad);
    return ok;
}

/* Programmatic dependent launch (kg_programmatic_launch): a chain in which every kernel reads
 * what the one before wrote, as in a decode step. Each link: y = rmsnorm(C); logits[i] = y Wh^T
 * (40,000 columns: the wide blocks at M <= 4); h = swiglu of rmsnorm(C) Wg^T, Wu^T (the norm
 * fused, R = 2); C += h Wd^T (beta 1). 24 links at M 1 and M 3 must give the bits of the same
 * chain launched plainly, C and every link's logits: a kernel that read C, y or h before its
 * pdl_wait, or wrote them while the one before still read them, would race and differ. The
 * chain captured as a graph under PDL must hold programmatic edges (the attribute is really
 * attached). */
typedef struct {
    int M, N, NH, links;
    kg_bf16 *W, *Wh, *Wg, *Wu, *norm_w, *C0;  /* weights; C's start */
    kg_bf16 *C, *y, *y2, *gate, *up, *h, *lg; /* lg: [links, M, NH] */
} pdl_chain;

static void run_chain(kg_matmul_ctx *ctx, pdl_chain *c, cudaStream_t s)
{
    const int M = c->M, N = c->N;
    const kg_matmul_norm norm = {c->norm_w, 1e-6f, c->y2, NULL};
    KC_CUDA(
        cudaMemcpyAsync(c->C, c->C0, (size_t)M * N * sizeof(kg_bf16), cudaMemcpyDeviceToDevice, s));
    for (int i = 0; i < c->links; i++) {
        KC_CUDA(kg_rmsnorm_forward(c->y, NULL, c->C, c->norm_w, M, N, 1e-6f, s));
        KC_CUDA(kg_matmul(ctx, c->lg + (size_t)i * M * c->NH, c->y, c->Wh, NULL, M, c->NH, N, 0, 1,
                          0.0f, s));
        KC_CUDA(kg_matmul_swiglu(ctx, c->h, c->gate, c->up, c->C, &norm, c->Wg, c->Wu, M, N, N, s));
        KC_CUDA(kg_matmul(ctx, c->C, c->h, c->W, NULL, M, N, N, 0, 1, 1.0f, s));
    }
}

/* Programmatic edges in the graph of one link captured under PDL. */
static size_t programmatic_edges(kg_matmul_ctx *ctx, pdl_chain *c, cudaStream_t s)
{
    const int links = c->links, was = kg_programmatic_launch(1);
    c->links = 1;
    cudaGraph_t g;
    KC_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    run_chain(ctx, c, s);
    KC_CUDA(cudaStreamEndCapture(s, &g));
    c->links = links;
    kg_programmatic_launch(was);
    size_t n = 0, prog = 0;
    KC_CUDA(cudaGraphGetEdges(g, NULL, NULL, NULL, &n));
    cudaGraphNode_t *from = (cudaGraphNode_t *)calloc(n + 1, sizeof *from),
                    *to = (cudaGraphNode_t *)calloc(n + 1, sizeof *to);
    cudaGraphEdgeData *data = (cudaGraphEdgeData *)calloc(n + 1, sizeof *data);
    KC_CUDA(cudaGraphGetEdges(g, from, to, data, &n));
    for (size_t i = 0; i < n; i++)
        prog += data[i].type == cudaGraphDependencyTypeProgrammatic;
    free(from), free(to), free(data);
    cudaGraphDestroy(g);
    return prog;
}

static int check_pdl_chain(kg_matmul_ctx *ctx, int M, uint64_t seed)
{
    pdl_chain c;
    memset(&c, 0, sizeof c);
    c.M = M, c.N = 896, c.NH = 40000, c.links = 24;
    const size_t nc = (size_t)M * c.N, nw = (size_t)c.N * c.N, nh = (size_t)c.NH * c.N,
                 nl = (size_t)c.links * M * c.NH;
    float *h = (float *)malloc(nh * 4);
    kc_fill(h, nw, seed, -0.05f, 0.05f);
    c.W = kc_to_dev_bf(h, nw);
    kc_fill(h, nw, seed + 1, -0.05f, 0.05f);
    c.Wg = kc_to_dev_bf(h, nw);
    kc_fill(h, nw, seed + 2, -0.05f, 0.05f);
    c.Wu = kc_to_dev_bf(h, nw);
    kc_fill(h, nh, seed + 3, -0.05f, 0.05f);
    c.Wh = kc_to_dev_bf(h, nh);
    kc_fill(h, c.N, seed + 4, 0.5f, 1.5f);
    c.norm_w = kc_to_dev_bf(h, c.N);
    kc_fill(h, nc, seed + 5, -1, 1);
    c.C0 = kc_to_dev_bf(h, nc);
    kg_bf16 **bufs[6] = {&c.C, &c.y, &c.y2, &c.gate, &c.up, &c.h};
    for (int i = 0; i < 6; i++)
        KC_CUDA(cudaMalloc((void **)bufs[i], nc * sizeof(kg_bf16)));
    kg_bf16 *plain_C, *plain_lg;
    KC_CUDA(cudaMalloc((void **)&c.lg, nl * sizeof(kg_bf16)));
    KC_CUDA(cudaMalloc((void **)&plain_C, nc * sizeof(kg_bf16)));
    KC_CUDA(cudaMalloc((void **)&plain_lg, nl * sizeof(kg_bf16)));
    cudaStream_t s; /* a stream of its own, as the decoder's */
    KC_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    run_chain(ctx, &c, s);
    KC_CUDA(cudaStreamSynchronize(s));
    KC_CUDA(cudaMemcpy(plain_C, c.C, nc * sizeof(kg_bf16), cudaMemcpyDeviceToDevice));
    KC_CUDA(cudaMemcpy(plain_lg, c.lg, nl * sizeof(kg_bf16), cudaMemcpyDeviceToDevice));
    int ok = 1;
    for (int rep = 0; rep < 3 && ok; rep++) {
        KC_CUDA(cudaMemset(c.lg, 0, nl * sizeof(kg_bf16)));
        const int was = kg_programmatic_launch(1);
        run_chain(ctx, &c, s);
        kg_programmatic_launch(was);
        KC_CUDA(cudaStreamSynchronize(s));
        ok = kc_dev_bf_equal(c.C, plain_C, nc) && kc_dev_bf_equal(c.lg, plain_lg, nl);
    }
    const size_t prog = programmatic_edges(ctx, &c, s);
    printf("%-4s rmsnorm / wide LM-head / normed gate-up / down chain (%d links, M %d) under "
           "programmatic dependent launch = plain launches, bitwise, 3 runs\n",
           ok ? "ok" : "FAIL", c.links, M);
    printf("%-4s a link captured under programmatic dependent launch has programmatic edges "
           "(%zu)\n",
           prog >= 3 ? "ok" : "FAIL", prog);
    free(h);
    cudaStreamDestroy(s);
    kg_bf16 *all[] = {c.W,  c.Wh,   c.Wg, c.Wu, c.norm_w, c.C0,    c.C,     c.y,
                      c.y2, c.gate, c.up, c.h,  c.lg,     plain_C, plain_lg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cudaFree(all[i]);
    return ok && prog >= 3;
}

/* The small-M path computes each row the same way whatever M is (decoding compares a sequence
 * decoded alone with the same one in a batch, bitwise): row r of an M-row product equals the
 * 1-row product of that row alone, bit for bit, for every M up to 8. */
static int check_rows_batch_independent(kg_matmul_ctx *ctx, int N, int K, uint64_t seed)
{
    const int MAXM = 8;
    size_t na = (size_t)MAXM * K, nb = (size_t)N * K, nc = (size_t)MAXM * N;
    float *A = (float *)malloc(na * 4), *B = (float *)malloc(nb * 4);
    float *one = (float *)malloc((size_t)N * 4), *many = (float *)malloc(nc * 4);
    kc_fill(A, na, seed, -1, 1);
    kc_fill(B, nb, seed + 1, -1, 1);
    kg_bf16 *dA = kc_to_dev_bf(A, na), *dB = kc_to_dev_bf(B, nb), *dC;
    KC_CUDA(cudaMalloc((void **)&dC, nc * sizeof(kg_bf16))); /* beta = 0: never read */
    int ok = 1;
    for (int M = 2; M <= MAXM && ok; M++) {
        KC_CUDA(kg_matmul(ctx, dC, dA, dB, NULL, M, N, K, 0, 1, 0.0f, 0));
        KC_CUDA(cudaDeviceSynchronize());
        kc_from_dev_bf(many, dC, (size_t)M * N);
        for (int r = 0; r < M && ok; r++) {
            KC_CUDA(kg_matmul(ctx, dC, dA + (size_t)r * K, dB, NULL, 1, N, K, 0, 1, 0.0f, 0));
            KC_CUDA(cudaDeviceSynchronize());
            kc_from_dev_bf(one, dC, (size_t)N);
            ok = memcmp(one, many + (size_t)r * N, (size_t)N * 4) == 0;
            if (!ok)
                printf("     row %d of M %d differs from the row alone\n", r, M);
        }
    }
    printf("%-4s matmul small-M rows bitwise independent of M (N %d K %d)\n", ok ? "ok" : "FAIL", N,
           K);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    free(A), free(B), free(one), free(many);
    return ok;
}

static kg_bf16 *dev_random(size_t n, uint64_t seed)
{
    float *f = (float *)malloc(n * 4);
    kc_fill(f, n, seed, -1, 1);
    kg_bf16 *d = kc_to_dev_bf(f, n);
    free(f);
    return d;
}

static kg_bf16 *dev_alloc(size_t n)
{
    kg_bf16 *d;
    KC_CUDA(cudaMalloc((void **)&d, n * 2));
    return d;
}

/* The shape of one fused-vs-separate check: three part widths (q, k, v), the MLP width F, K,
 * and how many elements past a 16-byte boundary part 1's weight starts (4: 8 bytes off, which
 * sends kg_matmul_parts to its one-kg_matmul-per-part fallback even at M <= 8). */
typedef struct {
    int N[3], F, K, w1_off;
} fused_shape;

/* kg_matmul_parts (q, k, v with biases: one launch when M <= 8) = one kg_matmul per part, and
 * kg_matmul_swiglu = two kg_matmul then kg_swiglu_forward, bit for bit (M > 8: the fallback).
 * With norm, both take an RMSNorm in front (kg_matmul_norm: inside their launch at M <= 8 and
 * K <= 2048, else a launch of its own) and must give the bits of kg_rmsnorm_forward followed by
 * the separate calls, the norm's output included. norm 2 also keeps rstd (never fused): it must
 * be kg_rmsnorm_forward's too. */
static int check_fused_equal_separate(kg_matmul_ctx *ctx, int M, const fused_shape *sh, int norm,
                                      uint64_t seed)
{
    const int K = sh->K, F = sh->F;
    kg_bf16 *X_in = dev_random((size_t)M * K, seed), *W[3], *bias[3];
    kg_bf16 *norm_w = dev_random((size_t)K, seed + 9), *y = dev_alloc((size_t)M * K),
            *y_ref = dev_alloc((size_t)M * K);
    const float eps = 1e-6f;
    float *rstd, *rstd_ref;
    KC_CUDA(cudaMalloc((void **)&rstd, (size_t)M * sizeof(float)));
    KC_CUDA(cudaMalloc((void **)&rstd_ref, (size_t)M * sizeof(float)));
    if (norm) /* the separate calls' input: the norm's output */
        KC_CUDA(kg_rmsnorm_forward(y_ref, rstd_ref, X_in, norm_w, M, K, eps, 0));
    const kg_bf16 *X = norm ? y_ref : X_in;
    const kg_matmul_norm nrm = {norm_w, eps, y, norm == 2 ? rstd : NULL};
    for (int i = 0; i < 3; i++) {
        W[i] = dev_random((size_t)sh->N[i] * K + (i == 1 ? sh->w1_off : 0), seed + 1 + i);
        bias[i] = dev_random((size_t)sh->N[i], seed + 4 + i);
    }
    const kg_bf16 *Wp[3] = {W[0], W[1] + sh->w1_off, W[2]};
    kg_bf16 *Wg = dev_random((size_t)F * K, seed + 7), *Wu = dev_random((size_t)F * K, seed + 8);
    kg_bf16 *o[6], *r[6];
    const size_t n[6] = {(size_t)M * sh->N[0], (size_t)M * sh->N[1], (size_t)M * sh->N[2],
                         (size_t)M * F,        (size_t)M * F,        (size_t)M * F};
    for (int i = 0; i < 6; i++)
        o[i] = dev_alloc(n[i]), r[i] = dev_alloc(n[i]);
    for (int i = 0; i < 3; i++)
        KC_CUDA(kg_matmul(ctx, r[i], X, Wp[i], bias[i], M, sh->N[i], K, 0, 1, 0.0f, 0));
    KC_CUDA(kg_matmul(ctx, r[3], X, Wg, NULL, M, F, K, 0, 1, 0.0f, 0));
    KC_CUDA(kg_matmul(ctx, r[4], X, Wu, NULL, M, F, K, 0, 1, 0.0f, 0));
    KC_CUDA(kg_swiglu_forward(r[5], r[3], r[4], n[5], 0));
    kg_matmul_part qkv[3];
    for (int i = 0; i < 3; i++)
        qkv[i] = {o[i], Wp[i], bias[i], sh->N[i]};
    KC_CUDA(cudaMemset(y, 0xff, (size_t)M * K * sizeof(kg_bf16))); /* NaNs until written */
    KC_CUDA(kg_matmul_parts(ctx, norm ? X_in : X, norm ? &nrm : NULL, qkv, 3, M, K, 0));
    int parts = 1, glu = 1;
    KC_CUDA(cudaDeviceSynchronize());
    if (norm) /* each call writes the norm's output: the parts' first, the SwiGLU's below */
        parts &= kc_dev_bf_equal(y, y_ref, (size_t)M * K);
    if (norm == 2) {
        float got[16], want[16]; /* M <= 11 */
        KC_CUDA(cudaMemcpy(got, rstd, (size_t)M * sizeof(float), cudaMemcpyDeviceToHost));
        KC_CUDA(cudaMemcpy(want, rstd_ref, (size_t)M * sizeof(float), cudaMemcpyDeviceToHost));
        parts &= memcmp(got, want, (size_t)M * sizeof(float)) == 0;
    }
    KC_CUDA(cudaMemset(y, 0xff, (size_t)M * K * sizeof(kg_bf16)));
    KC_CUDA(kg_matmul_swiglu(ctx, o[5], o[3], o[4], norm ? X_in : X, norm ? &nrm : NULL, Wg, Wu, M,
                             F, K, 0));
    KC_CUDA(cudaDeviceSynchronize());
    if (norm)
        glu &= kc_dev_bf_equal(y, y_ref, (size_t)M * K);
    for (int i = 0; i < 3; i++)
        parts &= kc_dev_bf_equal(o[i], r[i], n[i]);
    for (int i = 3; i < 6; i++)
        glu &= kc_dev_bf_equal(o[i], r[i], n[i]);
    const char *pre = norm == 2 ? "rmsnorm (rstd kept) + " : norm ? "rmsnorm + " : "";
    printf("%-4s %smatmul_parts q/k/v = %sthree kg_matmul, bitwise (M %d N %d/%d/%d K %d%s)\n",
           parts ? "ok" : "FAIL", norm ? "normed " : "", pre, M, sh->N[0], sh->N[1], sh->N[2], K,
           sh->w1_off ? ", k's weight misaligned" : "");
    printf("%-4s %smatmul_swiglu gate/up/h = %skg_matmul x2 + swiglu, bitwise (M %d F %d K %d)\n",
           glu ? "ok" : "FAIL", norm ? "normed " : "", pre, M, F, K);
    kg_bf16 *all[] = {X_in, W[0], W[1], W[2], bias[0], bias[1], bias[2], Wg, Wu, norm_w, y, y_ref};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cudaFree(all[i]);
    for (int i = 0; i < 6; i++)
        cudaFree(o[i]), cudaFree(r[i]);
    cudaFree(rstd), cudaFree(rstd_ref);
    return parts && glu;
}

/* kg_matmul_f32out: fp32 C, accumulated twice (two micro-batches' dW += dY^T X), so that the
 * fp32 sum keeps what a bf16 C would round away: the tolerance is fp32-sized, not bf16-sized. */
static int check_f32out(kg_matmul_ctx *ctx, int M, int N, int K, int ta, int tb, uint64_t seed)
{
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *A = (float *)malloc(na * 4), *B = (float *)malloc(nb * 4);
    float *C = (float *)malloc(nc * 4), *got = (float *)malloc(nc * 4);
    kc_fill(A, na, seed, -1, 1);
    kc_fill(B, nb, seed + 1, -1, 1);
    for (size_t i = 0; i < nc; i++)
        C[i] = 1000.0f + (float)(i % 7) * 1e-3f; /* bf16 could not hold the 1e-3 steps */
    kg_bf16 *dA = kc_to_dev_bf(A, na), *dB = kc_to_dev_bf(B, nb);
    float *dC = kc_to_dev_f(C, nc);
    KC_CUDA(kg_matmul_f32out(ctx, dC, dA, dB, M, N, K, ta, tb, 1.0f, 0));
    KC_CUDA(kg_matmul_f32out(ctx, dC, dA, dB, M, N, K, ta, tb, 1.0f, 0));
    KC_CUDA(cudaDeviceSynchronize());
    KC_CUDA(cudaMemcpy(got, dC, nc * 4, cudaMemcpyDeviceToHost));
    ref_matmul(C, A, B, NULL, M, N, K, ta, tb, 1.0f);
    ref_matmul(C, A, B, NULL, M, N, K, ta, tb, 1.0f);
    char label[128];
    snprintf(label, sizeof label, "matmul f32out x2 M%d N%d K%d ta%d tb%d", M, N, K, ta, tb);
    /* fp32 products of bf16 inputs are exact; only the fp32 sums round (|C| ~ 1000) */
    int ok = kc_close(label, got, C, nc, 2e-4f * 1000.0f / 64.0f + 1e-3f, 1e-5f);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    free(A), free(B), free(C), free(got);
    return ok;
}

int main(void)
{
    kg_matmul_ctx *ctx = kg_matmul_ctx_new(32 << 20);
    if (!ctx) {
        fprintf(stderr, "kg_matmul_ctx_new failed\n");
        return 1;
    }
    int ok = 1;
    uint64_t seed = 1;
    /* every transpose combination on an awkward shape, with and without bias / accumulation */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            ok &= check_case(ctx, 37, 53, 71, ta, tb, 0, 0.0f, seed++);
            ok &= check_case(ctx, 37, 53, 71, ta, tb, 0, 1.0f, seed++);
            ok &= check_case(ctx, 37, 53, 71, ta, tb, 1, 0.0f, seed++);
        }
    /* a Qwen2.5-0.5B layer: y = x W^T (q, o, gate/up, down), dX = dY W, dW += dY^T X */
    ok &= check_case(ctx, 64, 896, 896, 0, 1, 1, 0.0f, seed++);  /* q_proj with bias */
    ok &= check_case(ctx, 64, 4864, 896, 0, 1, 0, 0.0f, seed++); /* gate/up */
    ok &= check_case(ctx, 64, 896, 4864, 0, 1, 0, 0.0f, seed++); /* down */
    ok &= check_case(ctx, 64, 896, 4864, 0, 0, 0, 0.0f, seed++); /* dX = dY W */
    ok &= check_case(ctx, 896, 4864, 64, 1, 0, 0, 1.0f, seed++); /* dW += dY^T X */
    ok &= check_case(ctx, 1, 896, 896, 0, 1, 0, 0.0f, seed++);   /* decode: one token */
    /* the small-M path (M <= 8, x W^T, K a multiple of 8): every M, bias, accumulation, an odd
     * N (a warp's last column pair half empty), the 0.5B shapes; and shapes it leaves to
     * cuBLASLt (M 9, K not a multiple of 8) */
    for (int m = 1; m <= 8; m++)
        ok &=
            check_case(ctx, m, 53, 72, 0, 1, m % 2 && m % 3 != 0, m % 3 == 0 ? 1.0f : 0.0f, seed++);
    ok &= check_case(ctx, 2, 1152, 896, 0, 1, 1, 0.0f, seed++); /* qkv with bias */
    ok &= check_case(ctx, 4, 9728, 896, 0, 1, 0, 0.0f, seed++); /* gate/up */
    ok &= check_case(ctx, 8, 896, 4864, 0, 1, 0, 1.0f, seed++); /* down + residual */
    ok &= check_case(ctx, 1, 896, 4864, 0, 1, 0, 1.0f, seed++);
    ok &= check_case(ctx, 8, 896, 896, 0, 1, 1, 0.0f, seed++);    /* M 8 with bias */
    ok &= check_case(ctx, 5, 7, 72, 0, 1, 1, 0.0f, seed++);       /* N not a multiple of 4 */
    ok &= check_case(ctx, 3, 1, 8, 0, 1, 0, 1.0f, seed++);        /* N 1, K one vector */
    ok &= check_case(ctx, 1, 151936, 896, 0, 1, 0, 0.0f, seed++); /* the LM head */
    ok &= check_case(ctx, 9, 53, 72, 0, 1, 1, 0.0f, seed++);
    ok &= check_case(ctx, 3, 53, 71, 0, 1, 0, 1.0f, seed++);
    ok &= check_misaligned(ctx, seed++);
    ok &= check_rows_batch_independent(ctx, 1152, 896, seed++);
    ok &= check_rows_batch_independent(ctx, 901, 4864, seed++);
    /* the wide blocks (8 columns, M <= 4 of very many columns): the LM head, and a part's last
     * block partly empty, with bias and with accumulation; rows as M 5..8's narrow blocks */
    ok &= check_case(ctx, 4, 151936, 896, 0, 1, 0, 0.0f, seed++);
    ok &= check_case(ctx, 3, 32771, 72, 0, 1, 1, 0.0f, seed++);
    ok &= check_case(ctx, 2, 40001, 8, 0, 1, 0, 1.0f, seed++);
    ok &= check_rows_batch_independent(ctx, 151936, 896, seed++);
    ok &= check_pdl_chain(ctx, 1, seed++);
    ok &= check_pdl_chain(ctx, 3, seed++);
    /* the Qwen2.5-0.5B layer; part widths not multiples of a block's 4 columns (a part's last
     * block half empty, the next part's first block right after it); a misaligned part */
    const fused_shape fused[4] = {{{896, 128, 128}, 4864, 896, 0},
                                  {{37, 13, 6}, 53, 72, 0},
                                  {{40, 24, 16}, 44, 64, 4},
                                  {{96, 32, 32}, 64, 4864, 0}}; /* K over the fused norm's 2048 */
    const int fused_m[4] = {1, 5, 8, 11}; /* the small-M path's (8: its largest), cuBLASLt's */
    for (int f = 0; f < 4; f++)
        for (int i = 0; i < 4; i++)
            for (int norm = 0; norm < 3; norm++)
                ok &= check_fused_equal_separate(ctx, fused_m[i], &fused[f], norm, seed += 10);
    ok &= check_f32out(ctx, 896, 4864, 64, 1, 0, seed++); /* dW += dY^T X in fp32 */
    ok &= check_f32out(ctx, 37, 53, 71, 0, 1, seed++);
    ok &= check_f32out(ctx, 37, 53, 71, 1, 1, seed++);
    /* argument errors */
    kg_bf16 *d;
    KC_CUDA(cudaMalloc((void **)&d, 64));
    const kg_matmul_part one_part = {d, d, NULL, 4};
    const kg_matmul_norm no_y = {d, 1e-6f, NULL, NULL}, no_w = {NULL, 1e-6f, d, NULL};
    const kg_matmul_norm y_is_x = {d, 1e-6f, d, NULL}, bad_eps = {d, -1.0f, d + 8, NULL};
    int errs =
        kg_matmul_parts(ctx, d, &no_y, &one_part, 1, 1, 8, 0) == cudaErrorInvalidValue &&
        kg_matmul_parts(ctx, d, &no_w, &one_part, 1, 1, 8, 0) == cudaErrorInvalidValue &&
        kg_matmul_swiglu(ctx, d, d, d, d, &no_y, d, d, 1, 4, 8, 0) == cudaErrorInvalidValue &&
        kg_matmul_parts(ctx, d, &y_is_x, &one_part, 1, 1, 8, 0) == cudaErrorInvalidValue &&
        kg_matmul_parts(ctx, d, &bad_eps, &one_part, 1, 1, 8, 0) == cudaErrorInvalidValue &&
        kg_matmul(ctx, d, d, d, NULL, 0, 4, 4, 0, 0, 0.0f, 0) == cudaErrorInvalidValue &&
        kg_matmul(ctx, d, d, d, NULL, 4, 4, -1, 0, 0, 0.0f, 0) == cudaErrorInvalidValue &&
        kg_matmul(ctx, d, d, d, d, 4, 4, 4, 0, 0, 1.0f, 0) == cudaErrorInvalidValue &&
        kg_matmul(NULL, d, d, d, NULL, 4, 4, 4, 0, 0, 0.0f, 0) == cudaErrorInvalidValue &&
        /* the same refusals on the small-M path's shape */
        kg_matmul(ctx, d, d, d, d, 1, 4, 8, 0, 1, 1.0f, 0) == cudaErrorInvalidValue &&
        kg_matmul(NULL, d, d, d, NULL, 1, 4, 8, 0, 1, 0.0f, 0) == cudaErrorInvalidValue &&
        kg_matmul(ctx, d, d, d, NULL, 1, 0, 8, 0, 1, 0.0f, 0) == cudaErrorInvalidValue &&
        kg_matmul_f32out(ctx, NULL, d, d, 4, 4, 4, 0, 0, 0.0f, 0) == cudaErrorInvalidValue &&
        kg_matmul_parts(ctx, d, NULL, NULL, 1, 1, 8, 0) == cudaErrorInvalidValue &&
        kg_matmul_swiglu(ctx, NULL, d, d, d, NULL, d, d, 1, 4, 8, 0) == cudaErrorInvalidValue &&
        kg_matmul_swiglu(ctx, d, d, d, d, NULL, d, d, 1, 4, 0, 0) == cudaErrorInvalidValue &&
        kg_matmul_f32out(ctx, (float *)d, d, d, 4, 0, 4, 0, 0, 0.0f, 0) == cudaErrorInvalidValue;
    printf("%-4s matmul argument errors\n", errs ? "ok" : "FAIL");
    ok &= errs;
    cudaFree(d);
    kg_matmul_ctx_free(ctx);
    printf("%s\n", ok ? "test_matmul: all passed" : "test_matmul: FAILED");
    return ok ? 0 : 1;
}
