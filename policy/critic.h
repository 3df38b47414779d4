/* critic: the value model PPO trains beside the policy. It is a pol_model of its own (separate
 * weights, gradients and AdamW state) whose head is `score`: Linear(hidden -> 1) with a bias on
 * the final-normed hidden state, giving one value per token. The checkpoint layout
 * (`model.*` trunk + `score.weight` [1, hidden] + `score.bias` [1]) is the one HF's
 * AutoModelForTokenClassification(num_labels=1) reads, so a saved critic also loads there.
 *
 * A critic starts from a policy: the trunk is copied (the LM head is dropped) and the head is
 * drawn from a seeded normal(0, std) (std 0: zero), the bias zero. */
#ifndef KGYM_POLICY_CRITIC_H
#define KGYM_POLICY_CRITIC_H

#include <stddef.h>
#include <stdint.h>

#include "policy/adamw.h"
#include "policy/model.h"

/* A critic (POL_HEAD_VALUE model) initialised from a policy; copies its config text. */
int pol_critic_from_policy(pol_model *critic, const pol_model *policy, uint64_t seed,
                           float head_std, char *err, size_t errcap);
/* Loads a saved critic folder. */
int pol_critic_load(pol_model *critic, const char *dir, char *err, size_t errcap);

/* Values for the ids (B*T, pos/doc as pol_model_forward) into f->values. */
int pol_critic_forward(const pol_model *critic, pol_fwd *f, const int32_t *ids, const int32_t *pos,
                       const int32_t *doc, char *err, size_t errcap);

/* The weighted squared error L = sum_t w_t (V_t - target_t)^2 / 2; writes dL/dV_t into dvalues
 * (may be NULL) and returns L. Tokens with weight 0 (observations, padding) contribute nothing. */
double pol_critic_value_loss(const float *values, const float *targets, const float *weights,
                             size_t n, float *dvalues);

/* Adds the gradients of a loss with the given dL/dV_t [N] to critic->g. */
int pol_critic_backward(pol_model *critic, pol_fwd *f, const float *dvalues, char *err,
                        size_t errcap);

/* ---- training checkpoints ----
 * One folder: the policy as an HF folder (DIR/config.json, DIR/model.safetensors) with its AdamW
 * state in DIR/optimizer.safetensors, and the critic as an HF token-classification folder
 * DIR/critic/ with its own DIR/critic/optimizer.safetensors. Any part may be NULL (skipped).
 * Weights are saved in dtype (F32 for an exact resume); optimizer moments always in F32. */
int pol_checkpoint_save(const char *dir, const pol_model *policy, const pol_adamw *policy_opt,
                        const pol_model *critic, const pol_adamw *critic_opt, pol_dtype dtype,
                        char *err, size_t errcap);
/* Loads what the non-NULL arguments ask for; the optimizers are initialised here (step,
 * hyperparameters and moments from the files). On failure everything loaded is freed. */
int pol_checkpoint_load(const char *dir, pol_model *policy, pol_adamw *policy_opt,
                        pol_model *critic, pol_adamw *critic_opt, char *err, size_t errcap);

#endif
