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
 * Each warp owns SM_COLS output columns for all M rows: its lanes stride over K in 16-byte
 * vectors (8 bf16), each weight vector is read once and used for every row (x, M x K, stays in
 * L1), fp32 sums are reduced across the warp and rounded once to bf16, like cuBLASLt's. Every
 * row is computed the same way whatever M is, so a row's result does not depend on its batch. */
#define SM_MAX_M 8
#define SM_WARPS 8
#define SM_COLS 2

/* sum of the 8 products of two 16-byte vectors of bf16, added to acc */
static __device__ __forceinline__ float sm_dot8(uint4 a, uint4 b, float acc)
{
    const __nv_bfloat162 *x = (const __nv_bfloat162 *)&a, *y = (const __nv_bfloat162 *)&b;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 u = __bfloat1622float2(x[i]), v = __bfloat1622float2(y[i]);
        acc = fmaf(u.x, v.x, acc);
        acc = fmaf(u.y, v.y, acc);
    }
    return acc;
}

template <int M>
static __global__ void __launch_bounds__(SM_WARPS * 32)
    small_m_kernel(__nv_bfloat16 *C, const __nv_bfloat16 *X, const __nv_bfloat16 *W,
                   const __nv_bfloat16 *bias, int N, int K, float beta)
{
    const int lane = threadIdx.x & 31;
    const int n0 = (int)(blockIdx.x * SM_WARPS + (threadIdx.x >> 5)) * SM_COLS;
    if (n0 >= N) /* the whole warp leaves together */
        return;
    float acc[SM_COLS][M];
#pragma unroll
    for (int c = 0; c < SM_COLS; c++)
#pragma unroll
        for (int m = 0; m < M; m++)
            acc[c][m] = 0.f;
    const int K8 = K / 8;
    for (int k8 = lane; k8 < K8; k8 += 32) {
        uint4 w[SM_COLS];
#pragma unroll
        for (int c = 0; c < SM_COLS; c++)
            w[c] = n0 + c < N ? __ldg((const uint4 *)(W + (size_t)(n0 + c) * K) + k8)
                              : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int m = 0; m < M; m++) {
            const uint4 x = __ldg((const uint4 *)(X + (size_t)m * K) + k8);
#pragma unroll
            for (int c = 0; c < SM_COLS; c++)
                acc[c][m] = sm_dot8(w[c], x, acc[c][m]);
        }
    }
#pragma unroll
    for (int c = 0; c < SM_COLS; c++)
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                acc[c][m] += __shfl_xor_sync(0xffffffffu, acc[c][m], o);
                /* lane m (< M) writes row m of the warp's columns */
#pragma unroll
    for (int m = 0; m < M; m++)
        if (lane == m)
#pragma unroll
            for (int c = 0; c < SM_COLS; c++) {
                const int n = n0 + c;
                if (n >= N)
                    break;
                float v = acc[c][m];
                if (bias)
                    v += __bfloat162float(bias[n]);
                if (beta != 0.0f) /* beta = 0 never reads C (it may hold anything) */
                    v = fmaf(beta, __bfloat162float(C[(size_t)m * N + n]), v);
                C[(size_t)m * N + n] = __float2bfloat16(v);
            }
}

/* Takes the call when it is the small-M shape with 16-byte aligned rows; false: use cuBLASLt. */
static bool small_m_fits(const void *A, const void *B, int M, int K, int trans_a, int trans_b)
{
    return M <= SM_MAX_M && !trans_a && trans_b && K % 8 == 0 &&
           ((uintptr_t)A | (uintptr_t)B) % 16 == 0;
}

template <int M>
static cudaError_t small_m_launch(kg_bf16 *C, const kg_bf16 *X, const kg_bf16 *W,
                                  const kg_bf16 *bias, int N, int K, float beta, cudaStream_t s)
{
    const unsigned per_block = SM_WARPS * SM_COLS;
    small_m_kernel<M><<<((unsigned)N + per_block - 1) / per_block, SM_WARPS * 32, 0, s>>>(
        (__nv_bfloat16 *)C, (const __nv_bfloat16 *)X, (const __nv_bfloat16 *)W,
        (const __nv_bfloat16 *)bias, N, K, beta);
    return cudaGetLastError();
}

static cudaError_t small_m_run(kg_bf16 *C, const kg_bf16 *X, const kg_bf16 *W, const kg_bf16 *bias,
                               int M, int N, int K, float beta, cudaStream_t s)
{
    switch (M) {
    case 1:
        return small_m_launch<1>(C, X, W, bias, N, K, beta, s);
    case 2:
        return small_m_launch<2>(C, X, W, bias, N, K, beta, s);
    case 3:
        return small_m_launch<3>(C, X, W, bias, N, K, beta, s);
    case 4:
        return small_m_launch<4>(C, X, W, bias, N, K, beta, s);
    case 5:
        return small_m_launch<5>(C, X, W, bias, N, K, beta, s);
    case 6:
        return small_m_launch<6>(C, X, W, bias, N, K, beta, s);
    case 7:
        return small_m_launch<7>(C, X, W, bias, N, K, beta, s);
    default:
        return small_m_launch<8>(C, X, W, bias, N, K, beta, s);
    }
}

/* The one call both entry points make: C (of c_type) = op(A) op(B) (+ bias) (+ beta C). */
static cudaError_t matmul_run(kg_matmul_ctx *ctx, void *C, cudaDataType_t c_type, const kg_bf16 *A,
                              const kg_bf16 *B, const kg_bf16 *bias, int M, int N, int K,
                              int trans_a, int trans_b, float beta, cudaStream_t s)
{
    if (!ctx || !C || !A || !B || M <= 0 || N <= 0 || K <= 0 || (bias && beta != 0.0f))
        return cudaErrorInvalidValue;
    /* C^T [N, M] = op(B)^T [N, K] . op(A)^T [K, M] */
    lt_operand first = as_transposed(K, N, trans_b);  /* op(B) is [K, N] */
    lt_operand second = as_transposed(M, K, trans_a); /* op(A) is [M, K] */
    lt_plan p;
    memset(&p, 0, sizeof p);
    cudaError_t rc = cudaErrorInvalidValue;
    if (plan_make(&p, &first, &second, M, N, bias, c_type, ctx->workspace_bytes)) {
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

extern "C" cudaError_t kg_matmul(kg_matmul_ctx *ctx, kg_bf16 *C, const kg_bf16 *A, const kg_bf16 *B,
                                 const kg_bf16 *bias, int M, int N, int K, int trans_a, int trans_b,
                                 float beta, cudaStream_t s)
{
    if (ctx && C && A && B && M > 0 && N > 0 && K > 0 && !(bias && beta != 0.0f) &&
        small_m_fits(A, B, M, K, trans_a, trans_b))
        return small_m_run(C, A, B, bias, M, N, K, beta, s);
    return matmul_run(ctx, C, CUDA_R_16BF, A, B, bias, M, N, K, trans_a, trans_b, beta, s);
}

extern "C" cudaError_t kg_matmul_f32out(kg_matmul_ctx *ctx, float *C, const kg_bf16 *A,
                                        const kg_bf16 *B, int M, int N, int K, int trans_a,
                                        int trans_b, float beta, cudaStream_t s)
{
    return matmul_run(ctx, C, CUDA_R_32F, A, B, NULL, M, N, K, trans_a, trans_b, beta, s);
}
