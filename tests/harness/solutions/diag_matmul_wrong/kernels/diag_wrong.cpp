// diag_wrong.cpp: a plausible bug: scales columns instead of rows (computes B @ diag(a), i.e.
// out[i][j] = a[j] * b[i][j]). Compiles and runs; wrong for any a that is not constant.
#include <cstdint>

extern "C" void diag_wrong_cpu(float *out, const float *a, const float *b, int64_t n, int64_t m)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++)
            out[i * m + j] = a[j] * b[i * m + j];
}
