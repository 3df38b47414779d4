/* sample: choosing the next token from logits: greedy, or temperature / top-k / top-p sampling
 * with an explicit, seeded RNG (the same seed gives the same tokens). Only the first n_valid
 * logits are candidates: embedding rows past the tokenizer's vocabulary (padding) are never
 * chosen, which HF does not guarantee.
 *
 * Order as HF's logits processors: divide by the temperature, keep the top_k largest, then keep
 * the smallest set of most likely tokens whose probability reaches top_p (at least one). */
#ifndef KGYM_POLICY_SAMPLE_H
#define KGYM_POLICY_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* xoshiro256** seeded through splitmix64: small, fast, and the same on every machine. */
typedef struct pol_rng {
    uint64_t s[4];
} pol_rng;

void pol_rng_seed(pol_rng *r, uint64_t seed);
uint64_t pol_rng_next(pol_rng *r);
/* Uniform in [0, 1) with 24 random bits (exactly representable as float). */
float pol_rng_uniform(pol_rng *r);
/* Standard normal (Box-Muller). */
float pol_rng_normal(pol_rng *r);

typedef struct pol_sample_cfg {
    float temperature; /* <= 0: greedy */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1 or <= 0: off */
} pol_sample_cfg;

/* The distribution sampling draws from: probs[n_valid] (zero for every masked token), after
 * temperature, top-k and top-p. Greedy gives a one-hot on the arg max. scratch holds n_valid
 * ints. Returns 0, or -1 when n_valid < 1 or a logit is NaN. */
int pol_sample_probs(const float *logits, int n_valid, const pol_sample_cfg *cfg, float *probs,
                     int *scratch);

/* The arg max of logits[0..n_valid) (the lowest id on ties). */
int pol_argmax(const float *logits, int n_valid);

/* Draws the next token: greedy needs no RNG (rng may be NULL then). probs and scratch as above
 * (n_valid floats and ints). Returns the id, or -1 as pol_sample_probs. */
int pol_sample(const float *logits, int n_valid, const pol_sample_cfg *cfg, pol_rng *rng,
               float *probs, int *scratch);

#endif
