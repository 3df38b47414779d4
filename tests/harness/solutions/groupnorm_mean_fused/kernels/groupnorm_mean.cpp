// groupnorm_mean.cpp: mean over (C, L) of GroupNorm(x) in one pass over x (CPU).
// For sample n, channel c in group g, with S_c = sum_l x and Q_c = sum_l x^2:
//   mean_g = sum_{c in g} S_c / (C_g L),  var_g = sum_{c in g} Q_c / (C_g L) - mean_g^2,
//   out[n] = 1 / (C L) * sum_c (w_c * rstd_g * (S_c - L mean_g) + L b_c).
// Eager reads x twice and writes a normalised copy; this reads it once. The channel sums are
// float32, like a GPU kernel's, so the result is the exact value plus other rounding noise than
// the reference's.
#include <cmath>
#include <cstdint>
#include <vector>

// Sum and sum of squares of one row, in LANES independent partial sums: one running sum is a
// chain of dependent adds that g++ may not reorder (no -ffast-math), so it cannot vectorise.
static void sum_row(const float *row, int64_t length, float *sum, float *squares)
{
    enum { LANES = 16 };
    float s[LANES] = {0}, q[LANES] = {0};
    int64_t l = 0;
    for (; l + LANES <= length; l += LANES)
        for (int k = 0; k < LANES; k++) {
            s[k] += row[l + k];
            q[k] += row[l + k] * row[l + k];
        }
    for (; l < length; l++) {
        s[0] += row[l];
        q[0] += row[l] * row[l];
    }
    float total_s = 0.0f, total_q = 0.0f;
    for (int k = 0; k < LANES; k++) {
        total_s += s[k];
        total_q += q[k];
    }
    *sum = total_s;
    *squares = total_q;
}

extern "C" void groupnorm_mean_cpu(float *out, const float *x, const float *w, const float *b,
                                   int64_t batch, int64_t channels, int64_t groups, int64_t length,
                                   double eps)
{
    const int64_t per_group = channels / groups;
    std::vector<float> sums(channels), squares(channels);
    for (int64_t n = 0; n < batch; n++) {
        for (int64_t c = 0; c < channels; c++) {
            sum_row(x + (n * channels + c) * length, length, &sums[c], &squares[c]);
        }
        float total = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            float s = 0.0f, q = 0.0f;
            for (int64_t c = g * per_group; c < (g + 1) * per_group; c++) {
                s += sums[c];
                q += squares[c];
            }
            const float count = (float)(per_group * length);
            const float mean = s / count;
            const float var = std::fmax(q / count - mean * mean, 0.0f);
            const float rstd = 1.0f / std::sqrt(var + (float)eps);
            for (int64_t c = g * per_group; c < (g + 1) * per_group; c++)
                total += w[c] * rstd * (sums[c] - (float)length * mean) + (float)length * b[c];
        }
        out[n] = total / (float)(channels * length);
    }
}
