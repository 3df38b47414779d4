/* matmul: C = op(A) op(B) (+ bias) through cuBLASLt (see kernels.h). kgym's tensors are row-major
 * and cuBLASLt's are column-major: a row-major [R, C] matrix is the column-major [C, R] one in
 * the same memory, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, with our B as
 * cuBLASLt's first operand. Descriptors are made per call (microseconds); caching them and the
 * chosen algorithm per shape is speed work for later. */
#include <cublasLt.h>
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
    return matmul_run(ctx, C, CUDA_R_16BF, A, B, bias, M, N, K, trans_a, trans_b, beta, s);
}

extern "C" cudaError_t kg_matmul_f32out(kg_matmul_ctx *ctx, float *C, const kg_bf16 *A,
                                        const kg_bf16 *B, int M, int N, int K, int trans_a,
                                        int trans_b, float beta, cudaStream_t s)
{
    return matmul_run(ctx, C, CUDA_R_32F, A, B, NULL, M, N, K, trans_a, trans_b, beta, s);
}
