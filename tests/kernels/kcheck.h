/* kcheck: what every kernel test (tests/kernels/test_<name>.cu) and bench
 * (tests/bench/kernels/bench_<name>.cu) shares: CUDA error checks, bf16 on the host, seeded
 * random data, tolerance checks that say where a comparison failed, and event timing.
 * Header-only (static functions): each test is one translation unit, built by nvcc. */
#ifndef KGYM_KCHECK_H
#define KGYM_KCHECK_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define KC_CUDA(call)                                                                              \
    do {                                                                                           \
        cudaError_t kc_e = (call);                                                                 \
        if (kc_e != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                          \
                    cudaGetErrorString(kc_e));                                                     \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* KGYM_KERNEL_SMALL=1: a test runs its small shapes only (compute-sanitizer's racecheck, ~100x
 * slower than the GPU, runs every test that way) */
static inline int kc_small(void)
{
    const char *e = getenv("KGYM_KERNEL_SMALL");
    return e && *e && strcmp(e, "0") != 0;
}

/* bf16 <-> fp32 on the host, round-to-nearest-even as the device's __float2bfloat16 */
static inline float kc_bf2f(kg_bf16 b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline kg_bf16 kc_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
        return (kg_bf16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (kg_bf16)(u >> 16);
}

/* the value a float takes once stored as bf16: references are fed exactly what the GPU reads */
static inline float kc_round_bf(float f)
{
    return kc_bf2f(kc_f2bf(f));
}

/* xorshift64*: seeded, the same numbers on every machine */
static inline uint64_t kc_next(uint64_t *st)
{
    *st ^= *st >> 12;
    *st ^= *st << 25;
    *st ^= *st >> 27;
    return *st * 0x2545F4914F6CDD1DULL;
}

/* uniform in [lo, hi) */
static inline float kc_uniform(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((kc_next(st) >> 40) * (1.0 / 16777216.0));
}

/* n values in [lo, hi), already rounded to bf16 (so the fp32 reference sees the same inputs) */
static inline void kc_fill(float *f, size_t n, uint64_t seed, float lo, float hi)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++)
        f[i] = kc_round_bf(kc_uniform(&st, lo, hi));
}

/* device copies */
static inline kg_bf16 *kc_to_dev_bf(const float *f, size_t n)
{
    kg_bf16 *h = (kg_bf16 *)malloc(n * sizeof *h), *d;
    for (size_t i = 0; i < n; i++)
        h[i] = kc_f2bf(f[i]);
    KC_CUDA(cudaMalloc((void **)&d, n * sizeof *d + 1));
    KC_CUDA(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static inline float *kc_to_dev_f(const float *f, size_t n)
{
    float *d;
    KC_CUDA(cudaMalloc((void **)&d, n * sizeof *d + 1));
    KC_CUDA(cudaMemcpy(d, f, n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

static inline void kc_from_dev_bf(float *f, const kg_bf16 *d, size_t n)
{
    kg_bf16 *h = (kg_bf16 *)malloc(n * sizeof *h);
    KC_CUDA(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        f[i] = kc_bf2f(h[i]);
    free(h);
}

/* 1 when the device bf16 arrays a and b [n] hold the same bits */
static inline int kc_dev_bf_equal(const kg_bf16 *a, const kg_bf16 *b, size_t n)
{
    kg_bf16 *x = (kg_bf16 *)malloc(n * sizeof *x), *y = (kg_bf16 *)malloc(n * sizeof *y);
    KC_CUDA(cudaMemcpy(x, a, n * sizeof *x, cudaMemcpyDeviceToHost));
    KC_CUDA(cudaMemcpy(y, b, n * sizeof *y, cudaMemcpyDeviceToHost));
    const int eq = memcmp(x, y, n * sizeof *x) == 0;
    free(x);
    free(y);
    return eq;
}

static inline void kc_from_dev_f(float *f, const float *d, size_t n)
{
    KC_CUDA(cudaMemcpy(f, d, n * sizeof *f, cudaMemcpyDeviceToHost));
}

/* got against want, elementwise |got - want| <= atol + rtol |want|. Prints the first failure
 * (index, values) and the largest errors under the label; returns 1 when all pass. */
static inline int kc_close(const char *label, const float *got, const float *want, size_t n,
                           float atol, float rtol)
{
    double max_abs = 0, max_rel = 0;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= atol + rtol * fabs((double)want[i]))) { /* NaN fails too */
            if (bad++ == 0)
                first = i;
        }
        if (d > max_abs)
            max_abs = d;
        if (fabs(want[i]) > 1e-6 && d / fabs(want[i]) > max_rel)
            max_rel = d / fabs(want[i]);
    }
    if (bad)
        fprintf(stderr,
                "FAIL %s: %zu of %zu outside atol %g rtol %g; first at %zu: got %g want %g\n",
                label, bad, n, atol, rtol, first, got[first], want[first]);
    printf("%-4s %s: n %zu, max abs err %.3g, max rel err %.3g\n", bad ? "FAIL" : "ok", label, n,
           max_abs, max_rel);
    return bad == 0;
}

/* milliseconds per call of fn(ctx), median of reps after warm-up, timed with CUDA events */
typedef void (*kc_fn)(void *ctx);
static inline int kc_cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static inline float kc_time_ms(kc_fn fn, void *ctx, int warmup, int reps)
{
    cudaEvent_t a, b;
    KC_CUDA(cudaEventCreate(&a));
    KC_CUDA(cudaEventCreate(&b));
    for (int i = 0; i < warmup; i++)
        fn(ctx);
    float *ms = (float *)malloc((size_t)reps * sizeof *ms);
    for (int i = 0; i < reps; i++) {
        KC_CUDA(cudaEventRecord(a, 0));
        fn(ctx);
        KC_CUDA(cudaEventRecord(b, 0));
        KC_CUDA(cudaEventSynchronize(b));
        KC_CUDA(cudaEventElapsedTime(&ms[i], a, b));
    }
    qsort(ms, (size_t)reps, sizeof *ms, kc_cmp_float);
    float med = ms[reps / 2];
    free(ms);
    KC_CUDA(cudaEventDestroy(a));
    KC_CUDA(cudaEventDestroy(b));
    return med;
}

#endif
