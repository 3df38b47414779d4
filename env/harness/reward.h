/* reward: the paper's milestone reward (DESIGN.md §3.4) and the ablation modes, computed from
 * an evaluation's components (eval.h). Pure functions: unit-tested on their own. */
#ifndef KGYM_REWARD_H
#define KGYM_REWARD_H

#include <jansson.h>
#include <stdbool.h>

typedef enum reward_mode {
    REWARD_MILESTONE,   /* -1 wrong, 1 correct, 2 > 5% faster than eager, 3 also than compile */
    REWARD_SPEEDUP,     /* t_eager / t_candidate when correct, 0 otherwise */
    REWARD_LOG_SPEEDUP, /* ln(t_eager / t_candidate) when correct, -1 otherwise */
} reward_mode;

/* "milestone", "speedup", "log_speedup" (NULL: milestone). Returns 0, or -1 when unknown. */
int reward_mode_parse(const char *name, reward_mode *mode);
const char *reward_mode_name(reward_mode mode);

/* The largest speed-up the speedup and log_speedup rewards (and the best-snapshot rank) pay:
 * a time near the trusted timing floor (the round trip's own noise, tens of microseconds) would
 * otherwise make an unbounded, noise-driven reward. The reported speedup_* figures stay raw;
 * speedup_capped says when the cap applied. */
#define REWARD_SPEEDUP_CAP 100.0

/* b(t, t0) of the paper: more than 5% faster than t0. */
bool reward_beats(double t, double t0);

/* Adds speedup_eager, speedup_compile, beats_eager, beats_compile, baselines_used, reward_mode
 * and reward to comp, and returns the reward. An infra_error pays nothing: reward null, NAN
 * returned. A correct evaluation without timings (Verify) pays 1 under milestone. */
double reward_apply(json_t *comp, reward_mode mode);

/* The reward_on="best" order: speed-up over torch.compile (over eager where compile is
 * unavailable); -INFINITY for an incorrect or untimed evaluation. */
double reward_rank(const json_t *comp);

#endif
