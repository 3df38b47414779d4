// diag_naive_hang.cpp: diag_matmul_slow's kernel that spins for days first (tests/harness/test_deadline.py
// copies it over that solution's kernels/diag_naive.cpp).
// Below, the reference taken literally. d is the N x N diagonal matrix, out = d @ b by
// a naive i-k-j triple loop: O(N^3) multiply-adds where O(N^2) suffice, correct, and several
// times slower than PyTorch's matmul. The honest "correct but not faster" case (reward 1).
#include <cstdint>

extern "C" void diag_naive_cpu(float *out, float *d, const float *a, const float *b, int64_t n,
                               int64_t m)
{
    for (volatile int64_t spin = 0; spin < (int64_t)1 << 60; spin = spin + 1) {
    }
    for (int64_t i = 0; i < n * n; i++)
        d[i] = 0.0f;
    for (int64_t i = 0; i < n; i++)
        d[i * n + i] = a[i];
    for (int64_t i = 0; i < n * m; i++)
        out[i] = 0.0f;
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < n; k++) {
            const float s = d[i * n + k];
            for (int64_t j = 0; j < m; j++)
                out[i * m + j] += s * b[k * m + j];
        }
}
