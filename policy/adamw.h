/* adamw: the AdamW optimizer over one flat fp32 parameter buffer, step for step what
 * torch.optim.AdamW does (single tensor or foreach, amsgrad off, maximize off):
 *
 *   p  *= 1 - lr * wd                      (decoupled decay, before the update)
 *   m   = m + (1 - b1) (g - m)
 *   v   = b2 v + (1 - b2) g^2
 *   p  -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * plus torch.nn.utils.clip_grad_norm_'s global-norm clipping. The state (m, v, step) is saved as
 * safetensors under the parameter names of a table (`<name>.exp_avg`, `<name>.exp_avg_sq`) with
 * the step and hyperparameters in the metadata, so a resumed run continues bit for bit. */
#ifndef KGYM_POLICY_ADAMW_H
#define KGYM_POLICY_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "policy/model.h"

typedef struct pol_adamw_cfg {
    double lr, beta1, beta2, eps, weight_decay; /* doubles, as the Python floats torch gets */
} pol_adamw_cfg;

/* torch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2. */
pol_adamw_cfg pol_adamw_defaults(void);

typedef struct pol_adamw {
    pol_adamw_cfg cfg;
    size_t n;
    float *m, *v; /* first and second moments, n each */
    int64_t step;
    /* optional, caller-owned: n bytes, nonzero where weight decay is skipped (norms, biases) */
    const uint8_t *no_decay;
} pol_adamw;

int pol_adamw_init(pol_adamw *o, size_t n, const pol_adamw_cfg *cfg, char *err, size_t errcap);
void pol_adamw_deinit(pol_adamw *o);

/* One step at the configured lr (set o->cfg.lr between steps for a schedule). */
void pol_adamw_step(pol_adamw *o, float *params, const float *grads);

/* The L2 norm of the n gradients (accumulated in double). */
double pol_grad_norm(const float *grads, size_t n);
/* Scales the gradients so that their norm is at most max_norm, as clip_grad_norm_ (factor
 * max_norm / (norm + 1e-6), applied only when below 1); returns the norm before clipping. */
double pol_clip_grad_norm(float *grads, size_t n, double max_norm);

/* Saves / loads the state for the parameters of model m's table. Loading checks that every
 * moment is present with the table's shape, and restores the step and hyperparameters. */
int pol_adamw_save(const pol_adamw *o, const pol_model *m, const char *path, char *err,
                   size_t errcap);
int pol_adamw_load(pol_adamw *o, const pol_model *m, const char *path, char *err, size_t errcap);

#endif
