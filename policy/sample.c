#include "policy/sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void pol_rng_seed(pol_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t pol_rng_next(pol_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float pol_rng_uniform(pol_rng *r)
{
    return (float)(pol_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float pol_rng_normal(pol_rng *r)
{
    /* 1 - u keeps the logarithm's argument in (0, 1] */
    double u1 = 1.0 - (double)(pol_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    double u2 = (double)(pol_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

int pol_argmax(const float *logits, int n_valid)
{
    int best = 0;
    for (int i = 1; i < n_valid; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Descending by logit, the lower id first on ties, so the order is total and reproducible. */
static int by_logit_desc(const void *a, const void *b, void *ctx)
{
    const float *l = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    if (l[i] != l[j])
        return l[i] > l[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static bool any_nan(const float *x, int n)
{
    for (int i = 0; i < n; i++)
        if (isnan(x[i]))
            return true;
    return false;
}

static bool is_greedy(const pol_sample_cfg *cfg)
{
    return cfg == NULL || !(cfg->temperature > 0);
}

/* Softmax at temperature t over the `keep` best tokens (order[0..keep)); returns their sum. */
static double softmax_kept(const float *logits, const int *order, int keep, float t, float *probs)
{
    double top = logits[order[0]] / (double)t, sum = 0;
    for (int r = 0; r < keep; r++) {
        double p = exp(logits[order[r]] / (double)t - top);
        probs[order[r]] = (float)p;
        sum += p;
    }
    return sum;
}

/* Keeps the smallest prefix of the ranking whose mass reaches top_p: a token stays when the
 * mass ranked strictly above it is still below top_p (HF's TopPLogitsWarper, said in descending
 * order). Returns the new count. */
static int top_p_cut(const int *order, int keep, const float *probs, double sum, float top_p)
{
    double above = 0;
    for (int r = 0; r < keep; r++) {
        if (r > 0 && above >= top_p * sum)
            return r;
        above += probs[order[r]];
    }
    return keep;
}

int pol_sample_probs(const float *logits, int n_valid, const pol_sample_cfg *cfg, float *probs,
                     int *scratch)
{
    if (n_valid < 1 || any_nan(logits, n_valid))
        return -1;
    for (int i = 0; i < n_valid; i++)
        probs[i] = 0;
    if (is_greedy(cfg)) {
        scratch[0] = pol_argmax(logits, n_valid);
        probs[scratch[0]] = 1;
        return 0;
    }
    for (int i = 0; i < n_valid; i++)
        scratch[i] = i;
    qsort_r(scratch, (size_t)n_valid, sizeof *scratch, by_logit_desc, (void *)logits);
    int keep = cfg->top_k > 0 && cfg->top_k < n_valid ? cfg->top_k : n_valid;
    double sum = softmax_kept(logits, scratch, keep, cfg->temperature, probs);
    if (cfg->top_p > 0 && cfg->top_p < 1) {
        int cut = top_p_cut(scratch, keep, probs, sum, cfg->top_p);
        for (int r = cut; r < keep; r++) {
            sum -= probs[scratch[r]];
            probs[scratch[r]] = 0;
        }
        keep = cut;
    }
    for (int r = 0; r < keep; r++)
        probs[scratch[r]] = (float)(probs[scratch[r]] / sum);
    return 0;
}

int pol_sample(const float *logits, int n_valid, const pol_sample_cfg *cfg, pol_rng *rng,
               float *probs, int *scratch)
{
    if (is_greedy(cfg))
        return n_valid < 1 || any_nan(logits, n_valid) ? -1 : pol_argmax(logits, n_valid);
    if (rng == NULL || pol_sample_probs(logits, n_valid, cfg, probs, scratch) != 0)
        return -1;
    /* scratch holds the ranking; the kept tokens are its prefix with nonzero probability */
    double u = pol_rng_uniform(rng), acc = 0;
    int last = scratch[0];
    for (int r = 0; r < n_valid && probs[scratch[r]] > 0; r++) {
        last = scratch[r];
        acc += probs[last];
        if (u < acc)
            return last;
    }
    return last;
}
