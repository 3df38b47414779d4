// diag_scale.cpp: out = diag(a) @ b computed as what it is, a row scaling: out[i][j] = a[i] * b[i][j].
// O(N*M) work instead of the reference's O(N*N*M) matmul (CPU, float32, row-major).
#include <cstdint>

extern "C" void diag_scale_cpu(float *out, const float *a, const float *b, int64_t n, int64_t m)
{
    for (int64_t i = 0; i < n; i++) {
        const float s = a[i];
        const float *row = b + i * m;
        float *dst = out + i * m;
        for (int64_t j = 0; j < m; j++)
            dst[j] = s * row[j];
    }
}
