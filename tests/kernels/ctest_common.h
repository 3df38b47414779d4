/* ctest_common: what the GPU policy's C checks (tests/kernels/ctest_*.c) share: ok/FAIL
 * lines, bf16 on the host, the comparison of two float arrays, and tiny random models built from
 * a config.json text. Header-only (static functions): each check is one program. */
#ifndef KGYM_CTEST_COMMON_H
#define KGYM_CTEST_COMMON_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "policy/config.h"
#include "policy/model.h"

#define ERRCAP 512

static bool g_failed; /* any check failed */

static inline void __attribute__((format(printf, 2, 3))) report(bool ok, const char *fmt, ...)
{
    va_list ap;
    printf("%-4s ", ok ? "ok" : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!ok)
        g_failed = true;
}

/* A call that must succeed: reports a failure (with its message) and returns false. */
static inline bool need(int rc, const char *what, const char *err)
{
    if (rc != 0)
        report(false, "%s: %s", what, err);
    return rc == 0;
}

static inline bool small_run(void)
{
    const char *e = getenv("KGYM_KERNEL_SMALL");
    return e && *e && strcmp(e, "0") != 0;
}

/* ---- bf16 on the host ---- */

static inline float round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) <= 0x7f800000u) { /* not NaN: round to nearest even */
        u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
    }
    memcpy(&f, &u, 4);
    return f;
}

static inline float bf16_to_float(kg_bf16 b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The CPU model computes with exactly the weights the GPU holds. */
static inline void round_weights(pol_model *m)
{
    float *w = m->w.data;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < m->w.n; i++)
        w[i] = round_bf16(w[i]);
}

/* ---- comparisons ---- */

typedef struct diff {
    double rel;     /* ||got - want|| / ||want|| */
    double max_abs; /* max |got - want| */
    double cos;     /* cosine of the angle between got and want */
    double rms;     /* rms of want */
    size_t bad;     /* non-finite values in got */
} diff;

static inline diff compare(const float *got, const float *want, size_t n)
{
    double ee = 0, ww = 0, gg = 0, gw = 0, mx = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double gv = got[i], wv = want[i], e = gv - wv;
        if (!isfinite(gv)) {
            bad++;
            continue;
        }
        ee += e * e;
        ww += wv * wv;
        gg += gv * gv;
        gw += gv * wv;
        mx = fabs(e) > mx ? fabs(e) : mx;
    }
    diff d = {ww > 0 ? sqrt(ee / ww) : sqrt(ee), mx, gg > 0 && ww > 0 ? gw / sqrt(gg * ww) : 0,
              sqrt(ww / (double)(n ? n : 1)), bad};
    return d;
}

/* ---- models ---- */

/* A model of the config json with random weights (normal(0, std)), rounded to bf16 so that the
 * CPU reference computes with exactly the GPU's weights; gradients allocated. */
static inline bool model_from_json(pol_model *m, const char *json, pol_head head, uint64_t seed,
                                   float std)
{
    char err[ERRCAP];
    pol_config cfg;
    if (!need(pol_config_parse(json, &cfg, err, ERRCAP), "config", err) ||
        !need(pol_model_init(m, &cfg, head, err, ERRCAP), "model init", err))
        return false;
    pol_model_init_random(m, seed, std);
    round_weights(m);
    return need(pol_model_grads_init(m, err, ERRCAP), "grads init", err);
}

#endif
