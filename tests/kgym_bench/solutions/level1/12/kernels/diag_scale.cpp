// diag_scale.cpp: KernelBench L1-12, C = diag(A) @ B, i.e. C[i][j] = A[i] * B[i][j] (CPU), one
// pass over B with no N x N matrix.
//
// DELIBERATELY WRONG (a kgym-bench fixture, expect "wrong"): an off-by-one at the tail. The row
// loop stops at N - 1, so the last row of C keeps the zeros it was allocated with. It compiles,
// runs and is right on every other row, and still fails any elementwise check at atol = 1e-2.
#include <cstdint>

extern "C" void diag_scale_cpu(float *__restrict__ out, const float *__restrict__ A,
                               const float *__restrict__ B, int64_t N, int64_t M)
{
    for (int64_t i = 0; i < N - 1; i++) { // the bug: should be i < N
        const float a = A[i];
        const float *b = B + i * M;
        float *o = out + i * M;
        for (int64_t j = 0; j < M; j++)
            o[j] = a * b[j];
    }
}
