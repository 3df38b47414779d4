// mish.cpp: y = x * tanh(softplus(x)) in one pass over memory (CPU). PyTorch eager runs three
// kernels and writes two temporaries; this reads x once and writes y once.
#include <cmath>
#include <cstdint>

extern "C" void mish_cpu(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        // softplus as PyTorch computes it: linear above the threshold 20
        const float sp = v > 20.0f ? v : std::log1p(std::exp(v));
        y[i] = v * std::tanh(sp);
    }
}
