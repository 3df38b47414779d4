/* The CPU reference's building blocks (see model.h): RMSNorm, RoPE, log-softmax and the Linear
 * layer, forward and backward. fp32 throughout; reductions use `omp simd` so that the compiler may
 * vectorise them (OpenMP allows the reassociation), which keeps the reference usable on real
 * checkpoints. */
#include "policy/model.h"

#include <math.h>

pol_dims pol_dims_of(const pol_config *c)
{
    return (pol_dims){c->hidden,
                      c->n_heads,
                      c->n_kv_heads,
                      c->head_dim,
                      c->ffn,
                      c->vocab_size,
                      c->n_layers,
                      (size_t)c->n_heads * c->head_dim,
                      (size_t)c->n_kv_heads * c->head_dim};
}

static float dot(const float *a, const float *b, int n)
{
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

void pol_rmsnorm(float *out, float *rstd, const float *x, const float *w, size_t rows, int n,
                 float eps)
{
#pragma omp parallel for schedule(static) if (rows > 16)
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * (size_t)n;
        float *o = out + r * (size_t)n;
        float s = 1.0f / sqrtf(dot(xr, xr, n) / (float)n + eps);
        for (int i = 0; i < n; i++)
            o[i] = w[i] * (xr[i] * s);
        if (rstd)
            rstd[r] = s;
    }
}

/* y = w * x * s with s = (mean(x^2) + eps)^(-1/2):
 *   dw += dy * x * s;   dx += s * (w dy) - x * s^3 * sum(w dy x) / n */
void pol_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                          const float *rstd, const float *w, size_t rows, int n)
{
#pragma omp parallel for schedule(static) if (rows > 16)
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * (size_t)n, *dy = dout + r * (size_t)n;
        float *dxr = dx + r * (size_t)n;
        float s = rstd[r], gx = 0;
        for (int i = 0; i < n; i++)
            gx += w[i] * dy[i] * xr[i];
        float c = s * s * s * gx / (float)n;
        for (int i = 0; i < n; i++)
            dxr[i] += s * w[i] * dy[i] - c * xr[i];
    }
    /* the weight's gradient sums over rows: one thread per column, no races */
#pragma omp parallel for schedule(static) if (rows * (size_t)n > 4096)
    for (int i = 0; i < n; i++) {
        float acc = 0;
        for (size_t r = 0; r < rows; r++)
            acc += dout[r * (size_t)n + i] * x[r * (size_t)n + i] * rstd[r];
        dw[i] += acc;
    }
}

/* HF's _compute_llama3_parameters, in float32 as torch computes it. */
static void llama3_scale(const pol_config *c, float *inv, int half)
{
    float factor = (float)c->rope_factor, lo = (float)c->rope_low_freq;
    float hi = (float)c->rope_high_freq, old = (float)c->rope_orig_max_pos;
    float lo_wavelen = old / lo, hi_wavelen = old / hi;
    for (int i = 0; i < half; i++) {
        float wavelen = 2.0f * (float)M_PI / inv[i];
        float scaled = wavelen > lo_wavelen ? inv[i] / factor : inv[i];
        if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) {
            float smooth = (old / wavelen - lo) / (hi - lo);
            scaled = (1 - smooth) * scaled / factor + smooth * scaled;
        }
        inv[i] = scaled;
    }
}

void pol_rope_inv_freq(const pol_config *cfg, float *inv)
{
    int hd = cfg->head_dim, half = hd / 2;
    float theta = (float)cfg->rope_theta;
    for (int i = 0; i < half; i++)
        inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
    if (cfg->rope_type == POL_ROPE_LLAMA3)
        llama3_scale(cfg, inv, half);
}

/* x*cos + rotate_half(x)*sin with rotate_half(x) = cat(-x[half:], x[:half]); sign -1 rotates
 * back (the transpose), which is the backward. */
void pol_rope_apply(float *x, int hd, const float *cos, const float *sin, int sign)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half], s = sign < 0 ? -sin[i] : sin[i];
        x[i] = a * cos[i] - b * s;
        x[i + half] = b * cos[i] + a * s;
    }
}

float pol_log_softmax(float *out, const float *x, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(x[i] - mx));
    /* subtract the max first: x - (mx + log sum) would round at the scale of mx */
    float log_sum = (float)log(sum);
    for (int i = 0; i < n; i++)
        out[i] = (x[i] - mx) - log_sum;
    return mx + log_sum;
}

void pol_linear(float *y, const float *x, const float *W, const float *b, size_t N, int I, int O)
{
#pragma omp parallel for collapse(2) schedule(static) if (N * (size_t)O * (size_t)I > 32768)
    for (size_t n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            y[n * (size_t)O + o] = dot(x + n * (size_t)I, W + (size_t)o * I, I) + (b ? b[o] : 0.0f);
}

static void axpy(float *y, float a, const float *x, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

void pol_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, size_t N, int I, int O)
{
    int big = N * (size_t)O * (size_t)I > 32768;
    if (dx) {
#pragma omp parallel for schedule(static) if (big)
        for (size_t n = 0; n < N; n++)
            for (int o = 0; o < O; o++)
                axpy(dx + n * (size_t)I, dy[n * (size_t)O + o], W + (size_t)o * I, I);
    }
#pragma omp parallel for schedule(static) if (big)
    for (int o = 0; o < O; o++) {
        float acc = 0;
        for (size_t n = 0; n < N; n++) {
            float g = dy[n * (size_t)O + o];
            axpy(dW + (size_t)o * I, g, x + n * (size_t)I, I);
            acc += g;
        }
        if (db)
            db[o] += acc;
    }
}
