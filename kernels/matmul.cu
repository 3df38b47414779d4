/* matmul: C = op(A) op(B) (+ bias) through cuBLASLt (see kernels.h). kgym's tensors are row-major
 * and cuBLASLt's are column-major: a row-major [R, C] matrix is the column-major [C, R] one in
 * the same memory, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, with our B as
 * cuBLASLt's first operand. Descriptors are made per call (microseconds); caching them and the
 * chosen algorithm per shape is speed work for later.
 *
 * A handful of rows times a Linear weight (y = x W^T, M <= 8: a decode step of a small batch)
 * skips cuBLASLt for a GEMV-style kernel of our own (small_m_kernel below): cuBLASLt's kernels
 * for those shapes took 5-7 us each at the Qwen2.5-0.5B shape on the H200 (ncu), a few times the
 * time to read the weight once, which is the bound. */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/swiglu_math.cuh"
#include "kernels/warp_sum.cuh"

struct kg_matmul_ctx {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
};

/* A stored matrix as cuBLASLt sees it: rows x cols, column-major, leading dimension ld. */
typedef struct {
    uint64_t rows, cols;
    int64_t ld;
    cublasOperation_t op;
} lt_operand;

/* Our row-major operand of logical shape [r, c] after op, stored transposed when trans. In
 * cuBLASLt's terms we need its transpose, [c, r]: row-major [r, c] storage is that already. */
static lt_operand as_transposed(int r, int c, int trans)
{
    if (!trans) /* stored row-major [r, c] = column-major [c, r]: no op needed */
        return (lt_operand){(uint64_t)c, (uint64_t)r, c, CUBLAS_OP_N};
    /* stored row-major [c, r] = column-major [r, c]: transpose it */
    return (lt_operand){(uint64_t)r, (uint64_t)c, r, CUBLAS_OP_T};
}

extern "C" kg_matmul_ctx *kg_matmul_ctx_new(size_t workspace_bytes)
{
    kg_matmul_ctx *ctx = (kg_matmul_ctx *)calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    if (cublasLtCreate(&ctx->lt) != CUBLAS_STATUS_SUCCESS) {
        free(ctx);
        return NULL;
    }
    if (workspace_bytes && cudaMalloc(&ctx->workspace, workspace_bytes) != cudaSuccess) {
        cublasLtDestroy(ctx->lt);
        free(ctx);
        return NULL;
    }
    ctx->workspace_bytes = workspace_bytes;
    return ctx;
}

extern "C" void kg_matmul_ctx_free(kg_matmul_ctx *ctx)
{
    if (!ctx)
        return;
    cudaFree(ctx->workspace);
    cublasLtDestroy(ctx->lt);
    free(ctx);
}

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} lt_plan;

static void plan_free(lt_plan *p)
{
    if (p->pref)
        cublasLtMatmulPreferenceDestroy(p->pref);
    if (p->c)
        cublasLtMatrixLayoutDestroy(p->c);
    if (p->b)
        cublasLtMatrixLayoutDestroy(p->b);
    if (p->a)
        cublasLtMatrixLayoutDestroy(p->a);
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
}

/* The largest power of two (up to cuBLASLt's default assumption of 256) dividing p's address. */
static uint32_t pointer_alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p | 256u;
    return (uint32_t)(a & (~a + 1));
}

/* Tells the heuristic how aligned the operands really are (the first's, the second's, C's):
 * it assumes 256 bytes otherwise, and may pick a kernel that fails on a pointer into a tensor. */
static bool plan_set_alignments(lt_plan *p, const void *first, const void *second, const void *C)
{
    static const cublasLtMatmulPreferenceAttributes_t ATTR[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const void *ptr[4] = {first, second, C, C};
    for (int i = 0; i < 4; i++) {
        uint32_t a = pointer_alignment(ptr[i]);
        if (cublasLtMatmulPreferenceSetAttribute(p->pref, ATTR[i], &a, sizeof a) !=
            CUBLAS_STATUS_SUCCESS)
            return false;
    }
    return true;
}

/* The descriptors of one call; false when cuBLASLt refuses one of them. */
static bool plan_make(lt_plan *p, const lt_operand *first, const lt_operand *second, int M, int N,
                      const kg_bf16 *bias, cudaDataType_t c_type, size_t workspace_bytes)
{
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
        return false;
    bool ok = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &first->op,
                                             sizeof first->op) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &second->op,
                                             sizeof second->op) == CUBLAS_STATUS_SUCCESS;
    if (ok && bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bias_type = CUDA_R_16BF;
        ok = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                            sizeof epi) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof bias) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                            sizeof bias_type) == CUBLAS_STATUS_SUCCESS;
    }
    ok = ok &&
         cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, first->rows, first->cols, first->ld) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, second->rows, second->cols, second->ld) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&p->c, c_type, (uint64_t)N, (uint64_t)M, N) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceCreate(&p->pref) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspace_bytes,
                                              sizeof workspace_bytes) == CUBLAS_STATUS_SUCCESS;
    return ok;
}

/* ---- the small-M path: C[M, N] = X[M, K] W[N, K]^T (+ bias) (+ beta C), M <= 8 ----
 * The bound is reading W once, so the kernel is shaped for loads in flight, not for reuse: a
 * block owns COLS output columns for all M rows and its threads split K between them in
 * 16-byte vectors (8 bf16). Each thread holds its next weight vectors in flight while it uses
 * the current ones (x, M x K, stays in L1/L2), and its first ones are issued before pdl_wait:
 * weights are never written by the kernels of a decode step, so under programmatic launch
 * (launch.cuh) they stream in while the kernel before still runs. A first version gave each warp
 * two whole columns: 56 blocks for N = 896, too few loads in flight (the down projection at M 1
 * took 18.5 us against 5.9 us with a block per 4 columns, H200).
 * fp32 sums are reduced across the warp, then across the block's warps in shared memory, and
 * rounded once to bf16, like cuBLASLt's. The block size and the reduction order depend on K
 * only, never on M or COLS, so a row's result does not depend on its batch (the decode tests
 * compare batches bitwise).
 *
 * COLS is 4, or 8 for products of very many columns (the LM head: 151,936 columns of K 896 gave
 * 37,984 blocks of one vector per thread each, 76.5 us at M 1 against the 57 us bound; H200).
 *
 * One launch can hold several products of the same X (the q, k and v projections: "parts", the
 * blocks of part 0 first), or the MLP's gate and up together with the SwiGLU (R = 2: a block
 * reads COLS rows of both weights and writes gate, up and silu(gate) * up). Either gives the
 * bits separate launches would: a column's sum does not depend on what else its block does. */
#define SM_MAX_M 8
#define SM_COLS 4
#define SM_WIDE_COLS 8
#define SM_MAX_WARPS 8
#define SM_MAX_PARTS 3

typedef struct {
    __nv_bfloat16 *C;              /* [M, N] */
    const __nv_bfloat16 *W, *bias; /* [N, K]; [N] or NULL */
    int N;
} sm_part;

typedef struct {
    sm_part part[SM_MAX_PARTS];
    int n_parts;
    const __nv_bfloat16 *X; /* [M, K] */
    int K;
    float beta;
    __nv_bfloat16 *h; /* R = 2: silu(part 0) * part 1, [M, N] */
    /* the fused RMSNorm (kg_matmul_norm), norm_w NULL for none: the products are of
     * y = rmsnorm(X) * norm_w, which block 0 also writes to y */
    const __nv_bfloat16 *norm_w;
    float eps;
    __nv_bfloat16 *y;
} sm_args;

/* threads per block: enough warps to give each thread about one vector of K, at most 8 warps */
static unsigned small_m_threads(int K)
{
    unsigned warps = ((unsigned)(K / 8) + 31) / 32;
    return 32 * (warps < 1 ? 1 : warps > SM_MAX_WARPS ? SM_MAX_WARPS : warps);
}

static __host__ __device__ int small_m_blocks(int N, int cols)
{
    return (N + cols - 1) / cols;
}

/* a 16-byte vector of 8 bf16 as floats */
static __device__ __forceinline__ void sm_unpack8(uint4 v, float *f)
{
    const __nv_bfloat162 *p = (const __nv_bfloat162 *)&v;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 u = __bfloat1622float2(p[i]);
        f[2 * i] = u.x, f[2 * i + 1] = u.y;
    }
}

/* The part a block works on (R = 1: the blocks of part 0 come first, then 1's, ...) and the
 * block's index inside it. */
template <int COLS> static __device__ __forceinline__ int sm_block_part(const sm_args &a, int *b)
{
    int p = 0;
#pragma unroll
    for (int q = 0; q + 1 < SM_MAX_PARTS; q++) { /* constant indices: no local copy */
        const int nb = small_m_blocks(a.part[q].N, COLS);
        if (p == q && q + 1 < a.n_parts && *b >= nb)
            *b -= nb, p = q + 1;
    }
    return p;
}

/* a.part[p] without indexing the kernel's parameters by a run-time index (which copies them
 * all to local memory) */
static __device__ __forceinline__ sm_part sm_part_at(const sm_args &a, int p)
{
    return p == 0 ? a.part[0] : p == 1 ? a.part[1] : a.part[2];
}

/* The vectors k8 of the block's weight rows n0 .. n0 + COLS - 1 of each of its R parts (zeros
 * past N). */
template <int R, int COLS>
static __device__ __forceinline__ void sm_load_w(uint4 (&w)[R][COLS], const sm_part (&P)[R], int n0,
                                                 int N, int K, int k8)
{
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < COLS; c++)
            w[r][c] = n0 + c < N ? __ldg((const uint4 *)(P[r].W + (size_t)(n0 + c) * K) + k8)
                                 : make_uint4(0, 0, 0, 0);
}

/* x[8] (vector k8 of a row of X) normalised as rmsnorm_forward_kernel writes it (rs: the row's
 * 1 / rms), rounded to bf16: returned as floats in x and packed in *y. */
static __device__ __forceinline__ void sm_norm_apply(const sm_args &a, int k8, float rs, float *x,
                                                     uint4 *y)
{
    float w[8];
    sm_unpack8(__ldg((const uint4 *)a.norm_w + k8), w);
    __nv_bfloat162 *yb = (__nv_bfloat162 *)y;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        yb[i] =
            __floats2bfloat162_rn(w[2 * i] * (x[2 * i] * rs), w[2 * i + 1] * (x[2 * i + 1] * rs));
        const float2 f = __bfloat1622float2(yb[i]);
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

/* Vector k8 of row m of X. The fused-norm launches (COHERENT) read it through L2
 * (ld.global.cg), never the non-coherent path __ldg takes: their X is the residual stream, which
 * the kernels before rewrite in place, and under PDL this grid starts while they still write;
 * ld.global.nc is only safe for data no grid writes during this one's lifetime. This fixed the
 * decoder's failures with the fused norm on (docs/policy-speed.md: 14 of ctest_decode_gpu's 107
 * checks failed with __ldg, none with __ldcg, both on an H100); the other launches keep __ldg. */
template <bool COHERENT>
static __device__ __forceinline__ uint4 sm_load_x(const sm_args &a, int m, int k8)
{
    const uint4 *row = (const uint4 *)(a.X + (size_t)m * a.K);
    if constexpr (COHERENT)
        return __ldcg(row + k8);
    else
        return __ldg(row + k8);
}

/* 1 / rms of each of the M rows of X for the fused norm, as rmsnorm_forward_kernel computes it:
 * the block's threads are its own (one vector of 8 per thread, norm_fits), each sums the squares
 * of its vector in element order, then the block sums them as its block_sum does (warp_sum,
 * the warps' sums in shared memory, warp_sum over them). Every thread gets all
 * M; block 0 also writes the normalised rows to y (here, so the product loop stores nothing). */
template <int M>
static __device__ __forceinline__ void sm_norm_rows(const sm_args &a, float (&rs)[M])
{
    __shared__ float red[M][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int k8 = (int)threadIdx.x, K = a.K;
#pragma unroll
    for (int m = 0; m < M; m++) {
        float ss = 0.0f;
        if (k8 < K / 8) {
            float x[8];
            sm_unpack8(sm_load_x<true>(a, m, k8), x);
#pragma unroll
            for (int i = 0; i < 8; i++)
                ss += x[i] * x[i];
        }
        ss = warp_sum(ss);
        if (lane == 0)
            red[m][warp] = ss;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < M; m++) {
        const float ss = warp_sum(lane < warps ? red[m][lane] : 0.0f);
        rs[m] = 1.0f / sqrtf(ss / (float)K + a.eps);
        if (blockIdx.x == 0 && k8 < K / 8) {
            float x[8];
            uint4 y;
            sm_unpack8(sm_load_x<true>(a, m, k8), x);
            sm_norm_apply(a, k8, rs[m], x, &y);
            *((uint4 *)(a.y + (size_t)m * K) + k8) = y;
        }
    }
}

/* Writes column n of row m of one part: + bias, + beta C, rounded to bf16; the rounded value. */
static __device__ __forceinline__ float sm_store(const sm_part &P, int m, int n, float v,
                                                 float beta)
{
    if (P.bias)
        v += __bfloat162float(P.bias[n]);
    if (beta != 0.0f) /* beta = 0 never reads C (it may hold anything) */
        v = fmaf(beta, __bfloat162float(P.C[(size_t)m * P.N + n]), v);
    const __nv_bfloat16 r = __float2bfloat16(v);
    P.C[(size_t)m * P.N + n] = r;
    return __bfloat162float(r);
}

template <int M, int R, int COLS, bool NORM>
static __global__ void __launch_bounds__(SM_MAX_WARPS * 32) small_m_kernel(sm_args a)
{
    __shared__ float partial[SM_MAX_WARPS][R * COLS * M];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int b = (int)blockIdx.x;
    const int p = R == 1 ? sm_block_part<COLS>(a, &b) : 0;
    sm_part P[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        P[r] = sm_part_at(a, p + r);
    const int N = P[0].N, n0 = b * COLS;
    const int K = a.K, K8 = K / 8, step = (int)blockDim.x;
    int k8 = (int)threadIdx.x;
    uint4 w[R][COLS];
    if (k8 < K8) /* before the wait: no kernel of the step writes weights */
        sm_load_w<R, COLS>(w, P, n0, N, K, k8);
    pdl_launch_dependents();
    pdl_wait();         /* X, and C when beta != 0, come from the kernels before */
    float rs[M];        /* the fused norm's 1 / rms per row */
    if constexpr (NORM) /* a template flag: a run-time one doubled the registers of M 1 */
        sm_norm_rows<M>(a, rs);
    float acc[R][COLS][M];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < COLS; c++)
#pragma unroll
            for (int m = 0; m < M; m++)
                acc[r][c][m] = 0.f;
    for (; k8 < K8; k8 += step) {
        float wf[R][COLS][8];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int c = 0; c < COLS; c++)
                sm_unpack8(w[r][c], wf[r][c]);
        if (k8 + step < K8) /* the next vectors in flight while these are used */
            sm_load_w<R, COLS>(w, P, n0, N, K, k8 + step);
#pragma unroll
        for (int m = 0; m < M; m++) {
            float xf[8];
            sm_unpack8(sm_load_x<NORM>(a, m, k8), xf);
            if constexpr (NORM) {
                uint4 unused;
                sm_norm_apply(a, k8, rs[m], xf, &unused);
            }
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int c = 0; c < COLS; c++)
#pragma unroll
                    for (int i = 0; i < 8; i++) /* in element order: the same sum for any M */
                        acc[r][c][m] = fmaf(wf[r][c][i], xf[i], acc[r][c][m]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < COLS; c++)
#pragma unroll
            for (int m = 0; m < M; m++) {
                acc[r][c][m] = warp_sum(acc[r][c][m]);
                if (lane == 0)
                    partial[warp][(r * COLS + c) * M + m] = acc[r][c][m];
            }
    __syncthreads();
    /* (c, m) sums the warps' partials in warp order and writes C[m, n0 + c] */
    for (int i = (int)threadIdx.x; i < COLS * M; i += step) {
        const int c = i / M, m = i % M, n = n0 + c;
        if (n >= N)
            continue;
        float v[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float sum = 0.f;
            for (int w8 = 0; w8 < warps; w8++)
                sum += partial[w8][(r * COLS + c) * M + m];
            v[r] = sm_store(P[r], m, n, sum, a.beta);
        }
        if (R == 2) /* from the rounded gate and up, as kg_swiglu_forward reads them */
            a.h[(size_t)m * N + n] = __float2bfloat16_rn(swiglu_value(v[0], v[R - 1]));
    }
}

/* A product the small-M path takes: the small-M shape with 16-byte aligned rows. */
static bool small_m_fits(const void *A, const void *B, int M, int K, int trans_a, int trans_b)
{
    return M <= SM_MAX_M && !trans_a && trans_b && K % 8 == 0 &&
           ((uintptr_t)A | (uintptr_t)B) % 16 == 0;
}

/* KGYM_MATMUL_SMALL_M=0 sends the small-M shapes to cuBLASLt too: for measuring one path
 * against the other in the same binary (read once; a function-local static is thread-safe). */
static bool small_m_enabled(void)
{
    static const bool enabled = [] {
        const char *v = getenv("KGYM_MATMUL_SMALL_M");
        return !(v && strcmp(v, "0") == 0);
    }();
    return enabled;
}

/* The columns per block of a product of one weight at M <= 4 (small_m_launch_any asks only
 * then): 8 from SM_WIDE_FROM_BLOCKS blocks of 4 on (the LM head;
 * the largest other decode product, the down projection's 896 columns, is 224 blocks).
 * KGYM_MATMUL_SM_COLS=4 or 8 forces one width, for measuring one against the other. */
#define SM_WIDE_FROM_BLOCKS 8192

static int small_m_cols(const sm_args &a)
{
    static const int forced = [] {
        const char *v = getenv("KGYM_MATMUL_SM_COLS");
        return v && strcmp(v, "8") == 0 ? SM_WIDE_COLS : v && strcmp(v, "4") == 0 ? SM_COLS : 0;
    }();
    if (forced)
        return forced;
    int blocks = 0;
    for (int p = 0; p < a.n_parts; p++)
        blocks += small_m_blocks(a.part[p].N, SM_COLS);
    return blocks >= SM_WIDE_FROM_BLOCKS ? SM_WIDE_COLS : SM_COLS;
}

template <int M, int R, int COLS, bool NORM = false>
static cudaError_t small_m_launch(const sm_args &a, cudaStream_t s)
{
    unsigned blocks = 0;
    for (int p = 0; p < (R == 2 ? 1 : a.n_parts); p++)
        blocks += (unsigned)small_m_blocks(a.part[p].N, COLS);
    return kg_launch(small_m_kernel<M, R, COLS, NORM>, blocks, small_m_threads(a.K), 0, s, a);
}

/* M <= 4 of one weight may take the wide blocks (small_m_cols), unless the norm is fused */
template <int M, int R> static cudaError_t small_m_launch_any(const sm_args &a, cudaStream_t s)
{
    if (a.norm_w) /* the fused norm takes the narrow blocks (its products: q/k/v, gate/up) */
        return small_m_launch<M, R, SM_COLS, true>(a, s);
    if constexpr (R == 1 && M <= 4)
        if (small_m_cols(a) == SM_WIDE_COLS)
            return small_m_launch<M, R, SM_WIDE_COLS>(a, s);
    return small_m_launch<M, R, SM_COLS>(a, s);
}

template <int R> static cudaError_t small_m_run(const sm_args &a, int M, cudaStream_t s)
{
    switch (M) {
    case 1:
        return small_m_launch_any<1, R>(a, s);
    case 2:
        return small_m_launch_any<2, R>(a, s);
    case 3:
        return small_m_launch_any<3, R>(a, s);
    case 4:
        return small_m_launch_any<4, R>(a, s);
    case 5:
        return small_m_launch_any<5, R>(a, s);
    case 6:
        return small_m_launch_any<6, R>(a, s);
    case 7:
        return small_m_launch_any<7, R>(a, s);
    default:
        return small_m_launch_any<8, R>(a, s);
    }
}

static bool matmul_args_ok(kg_matmul_ctx *ctx, const void *C, const void *A, const void *B,
                           const kg_bf16 *bias, int M, int N, int K, float beta)
{
    return ctx && C && A && B && M > 0 && N > 0 && K > 0 && !(bias && beta != 0.0f);
}

/* The one call both entry points make: C (of c_type) = op(A) op(B) (+ bias) (+ beta C). */
static cudaError_t matmul_run(kg_matmul_ctx *ctx, void *C, cudaDataType_t c_type, const kg_bf16 *A,
                              const kg_bf16 *B, const kg_bf16 *bias, int M, int N, int K,
                              int trans_a, int trans_b, float beta, cudaStream_t s)
{
    if (!matmul_args_ok(ctx, C, A, B, bias, M, N, K, beta))
        return cudaErrorInvalidValue;
    /* C^T [N, M] = op(B)^T [N, K] . op(A)^T [K, M] */
    lt_operand first = as_transposed(K, N, trans_b);  /* op(B) is [K, N] */
    lt_operand second = as_transposed(M, K, trans_a); /* op(A) is [M, K] */
    lt_plan p;
    memset(&p, 0, sizeof p);
    cudaError_t rc = cudaErrorInvalidValue;
    if (plan_make(&p, &first, &second, M, N, bias, c_type, ctx->workspace_bytes) &&
        plan_set_alignments(&p, B, A, C)) {
        cublasLtMatmulHeuristicResult_t h;
        int found = 0;
        if (cublasLtMatmulAlgoGetHeuristic(ctx->lt, p.op, p.a, p.b, p.c, p.c, p.pref, 1, &h,
                                           &found) == CUBLAS_STATUS_SUCCESS &&
            found > 0) {
            float alpha = 1.0f;
            cublasStatus_t st =
                cublasLtMatmul(ctx->lt, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c,
                               &h.algo, ctx->workspace, ctx->workspace_bytes, s);
            rc = st == CUBLAS_STATUS_SUCCESS ? cudaGetLastError() : cudaErrorUnknown;
        }
    }
    plan_free(&p);
    return rc;
}

/* The small-M kernel's arguments for parts [n_parts] of X [M, K] (h: R = 2's SwiGLU output;
 * norm: the fused RMSNorm, or NULL). */
static sm_args small_m_args(const kg_bf16 *X, const kg_matmul_part *parts, int n_parts, int K,
                            float beta, kg_bf16 *h, const kg_matmul_norm *norm)
{
    sm_args a = {};
    for (int i = 0; i < n_parts; i++)
        a.part[i] = {(__nv_bfloat16 *)parts[i].C, (const __nv_bfloat16 *)parts[i].W,
                     (const __nv_bfloat16 *)parts[i].bias, parts[i].N};
    a.n_parts = n_parts;
    a.X = (const __nv_bfloat16 *)X;
    a.K = K;
    a.beta = beta;
    a.h = (__nv_bfloat16 *)h;
    if (norm) {
        a.norm_w = (const __nv_bfloat16 *)norm->w;
        a.eps = norm->eps;
        a.y = (__nv_bfloat16 *)norm->y;
    }
    return a;
}

extern "C" cudaError_t kg_matmul(kg_matmul_ctx *ctx, kg_bf16 *C, const kg_bf16 *A, const kg_bf16 *B,
                                 const kg_bf16 *bias, int M, int N, int K, int trans_a, int trans_b,
                                 float beta, cudaStream_t s)
{
    if (matmul_args_ok(ctx, C, A, B, bias, M, N, K, beta) &&
        small_m_fits(A, B, M, K, trans_a, trans_b) && small_m_enabled()) {
        const kg_matmul_part one = {C, B, bias, N};
        return small_m_run<1>(small_m_args(A, &one, 1, K, beta, NULL, NULL), M, s);
    }
    return matmul_run(ctx, C, CUDA_R_16BF, A, B, bias, M, N, K, trans_a, trans_b, beta, s);
}

/* Every part's weight fits the small-M path with X. */
static bool parts_fit(const kg_bf16 *X, const kg_matmul_part *parts, int n_parts, int M, int K)
{
    for (int i = 0; i < n_parts; i++)
        if (!small_m_fits(X, parts[i].W, M, K, 0, 1))
            return false;
    return small_m_enabled();
}

/* KGYM_MATMUL_FUSED_NORM=1 lets a norm ride on the small-M launch; by default it gets its own
 * kg_rmsnorm_forward launch. Off by default since its first GPU run (H100, 2026-12-05): with it,
 * and programmatic dependent launch on, ctest_decode_gpu's decoder lost its bitwise equalities
 * (PDL = without, graphs = without for sampling: 14 of 107 checks). Reading X through L2
 * (sm_load_x) fixed that (all pass, H100), but it is slower: a batch-1 decode step's graph took
 * ~70-80 us longer with it on both an H200 and an H100 (2026-12-05, README). So it stays off; a
 * switch, for the next kernel that makes it pay. Read once. */
static bool fused_norm_enabled(void)
{
    static const bool enabled = [] {
        const char *v = getenv("KGYM_MATMUL_FUSED_NORM");
        return v && strcmp(v, "1") == 0;
    }();
    return enabled;
}

/* Whether the norm can ride on a small-M launch over X: no rstd to keep, one vector of 8 per thread
 * in a block of small_m_threads(K), which is then rmsnorm_forward_kernel's layout (its row_threads
 * gives the same count up to 256 vectors), and that kernel's vectorised path (16-byte aligned X, y,
 * w). */
static bool norm_fits(const kg_bf16 *X, const kg_matmul_norm *norm, int K)
{
    return !norm->rstd && K % 8 == 0 && K / 8 <= SM_MAX_WARPS * 32 &&
           ((uintptr_t)X | (uintptr_t)norm->y | (uintptr_t)norm->w) % 16 == 0 &&
           fused_norm_enabled();
}

/* A norm kg_rmsnorm_forward would take (eps >= 0), its output somewhere else than X (the fused
 * kernel's block 0 writes y while the others read X); or none. */
static bool norm_args_ok(const kg_matmul_norm *norm, const kg_bf16 *X)
{
    return !norm || (norm->w && norm->y && norm->y != X && norm->eps >= 0.0f);
}

/* Settles the norm in front of the products of X: NULL to fuse it into the small-M launch (or no
 * norm); else kg_rmsnorm_forward runs now and *X becomes its output y. *small: whether the
 * products (of the final *X) take the small-M path. */
static cudaError_t norm_first(const kg_bf16 **X, const kg_matmul_norm *norm,
                              const kg_matmul_part *parts, int n_parts, int M, int K, bool *small,
                              const kg_matmul_norm **fused, cudaStream_t s)
{
    *small = parts_fit(*X, parts, n_parts, M, K);
    *fused = NULL;
    if (!norm)
        return cudaSuccess;
    if (*small && norm_fits(*X, norm, K)) {
        *fused = norm;
        return cudaSuccess;
    }
    cudaError_t e = kg_rmsnorm_forward(norm->y, norm->rstd, *X, norm->w, M, K, norm->eps, s);
    *X = norm->y;
    *small = parts_fit(*X, parts, n_parts, M, K);
    return e;
}

extern "C" cudaError_t kg_matmul_parts(kg_matmul_ctx *ctx, const kg_bf16 *X,
                                       const kg_matmul_norm *norm, const kg_matmul_part *parts,
                                       int n_parts, int M, int K, cudaStream_t s)
{
    if (!parts || n_parts < 1 || n_parts > SM_MAX_PARTS || !norm_args_ok(norm, X))
        return cudaErrorInvalidValue;
    for (int i = 0; i < n_parts; i++)
        if (!matmul_args_ok(ctx, parts[i].C, X, parts[i].W, NULL, M, parts[i].N, K, 0.0f))
            return cudaErrorInvalidValue;
    bool small;
    const kg_matmul_norm *fused;
    cudaError_t e = norm_first(&X, norm, parts, n_parts, M, K, &small, &fused, s);
    if (e != cudaSuccess)
        return e;
    if (!small) {
        for (int i = 0; i < n_parts; i++) {
            e = kg_matmul(ctx, parts[i].C, X, parts[i].W, parts[i].bias, M, parts[i].N, K, 0, 1,
                          0.0f, s);
            if (e != cudaSuccess)
                return e;
        }
        return cudaSuccess;
    }
    return small_m_run<1>(small_m_args(X, parts, n_parts, K, 0.0f, NULL, fused), M, s);
}

extern "C" cudaError_t kg_matmul_swiglu(kg_matmul_ctx *ctx, kg_bf16 *h, kg_bf16 *gate, kg_bf16 *up,
                                        const kg_bf16 *X, const kg_matmul_norm *norm,
                                        const kg_bf16 *Wg, const kg_bf16 *Wu, int M, int F, int K,
                                        cudaStream_t s)
{
    if (!h || !matmul_args_ok(ctx, gate, X, Wg, NULL, M, F, K, 0.0f) ||
        !matmul_args_ok(ctx, up, X, Wu, NULL, M, F, K, 0.0f) || !norm_args_ok(norm, X))
        return cudaErrorInvalidValue;
    const kg_matmul_part both[2] = {{gate, Wg, NULL, F}, {up, Wu, NULL, F}};
    bool small;
    const kg_matmul_norm *fused;
    cudaError_t e = norm_first(&X, norm, both, 2, M, K, &small, &fused, s);
    if (e != cudaSuccess)
        return e;
    if (!small) {
        e = kg_matmul(ctx, gate, X, Wg, NULL, M, F, K, 0, 1, 0.0f, s);
        if (e == cudaSuccess)
            e = kg_matmul(ctx, up, X, Wu, NULL, M, F, K, 0, 1, 0.0f, s);
        return e == cudaSuccess ? kg_swiglu_forward(h, gate, up, (size_t)M * F, s) : e;
    }
    return small_m_run<2>(small_m_args(X, both, 2, K, 0.0f, h, fused), M, s);
}

extern "C" cudaError_t kg_matmul_f32out(kg_matmul_ctx *ctx, float *C, const kg_bf16 *A,
                                        const kg_bf16 *B, int M, int N, int K, int trans_a,
                                        int trans_b, float beta, cudaStream_t s)
{
    return matmul_run(ctx, C, CUDA_R_32F, A, B, NULL, M, N, K, trans_a, trans_b, beta, s);
}
