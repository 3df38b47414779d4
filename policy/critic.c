/* The critic (see critic.h): a value-head pol_model; its head's forward is in model_forward.c,
 * its backward here, ending in the shared trunk backward. */
#include "policy/critic.h"
#include "policy/sample.h"

#include <stdlib.h>
#include <string.h>

#include "util/text.h"

int pol_critic_from_policy(pol_model *critic, const pol_model *policy, uint64_t seed,
                           float head_std, char *err, size_t errcap)
{
    if (pol_model_init(critic, &policy->cfg, POL_HEAD_VALUE, err, errcap) != 0)
        return -1;
    size_t copied = 0;
    if (pol_model_copy_shared(critic, policy, &copied, err, errcap) != 0)
        goto fail;
    if (copied + 2 != critic->n_tensors) {
        text_fmt(err, errcap, "critic: the policy gave %zu of the trunk's %zu tensors", copied,
                 critic->n_tensors - 2);
        goto fail;
    }
    pol_rng rng;
    pol_rng_seed(&rng, seed);
    for (int i = 0; i < critic->cfg.hidden; i++)
        critic->w.score_w[i] = head_std * pol_rng_normal(&rng);
    critic->w.score_b[0] = 0;
    if (policy->config_json && !(critic->config_json = strdup(policy->config_json))) {
        text_fmt(err, errcap, "critic: out of memory");
        goto fail;
    }
    return 0;
fail:
    pol_model_deinit(critic);
    return -1;
}

int pol_critic_load(pol_model *critic, const char *dir, char *err, size_t errcap)
{
    return pol_model_load(critic, dir, POL_HEAD_VALUE, err, errcap);
}

int pol_critic_forward(const pol_model *critic, pol_fwd *f, const int32_t *ids, const int32_t *pos,
                       const int32_t *doc, char *err, size_t errcap)
{
    if (critic->head != POL_HEAD_VALUE) {
        text_fmt(err, errcap, "critic: the model has no value head");
        return -1;
    }
    return pol_model_forward(critic, f, ids, pos, doc, err, errcap);
}

double pol_critic_value_loss(const float *values, const float *targets, const float *weights,
                             size_t n, float *dvalues)
{
    double loss = 0;
    for (size_t i = 0; i < n; i++) {
        double diff = (double)values[i] - targets[i];
        loss += 0.5 * weights[i] * diff * diff;
        if (dvalues)
            dvalues[i] = (float)(weights[i] * diff);
    }
    return loss;
}

int pol_critic_backward(pol_model *critic, pol_fwd *f, const float *dvalues, char *err,
                        size_t errcap)
{
    if (critic->head != POL_HEAD_VALUE || !f->train || !critic->g.data) {
        text_fmt(err, errcap, "critic backward: %s",
                 critic->head != POL_HEAD_VALUE ? "the model has no value head"
                 : !f->train                    ? "the forward kept no activations"
                                                : "gradients not allocated");
        return -1;
    }
    int D = critic->cfg.hidden;
    memset(f->d_h, 0, f->N * (size_t)D * sizeof(float));
    pol_linear_backward(f->d_h, critic->g.score_w, critic->g.score_b, dvalues, f->h,
                        critic->w.score_w, f->N, D, 1);
    return pol_model_backward_trunk(critic, f, f->d_h, err, errcap);
}

/* ---- training checkpoints ---- */

static int save_part(const char *dir, const pol_model *m, const pol_adamw *o, pol_dtype dtype,
                     char *err, size_t errcap)
{
    char path[4096];
    if (m && pol_model_save(m, dir, dtype, err, errcap) != 0)
        return -1;
    if (!o)
        return 0;
    if (!m) {
        text_fmt(err, errcap, "%s: an optimizer state needs its model", dir);
        return -1;
    }
    if (!text_fmt(path, sizeof path, "%s/optimizer.safetensors", dir)) {
        text_fmt(err, errcap, "%s: path too long", dir);
        return -1;
    }
    return pol_adamw_save(o, m, path, err, errcap);
}

int pol_checkpoint_save(const char *dir, const pol_model *policy, const pol_adamw *policy_opt,
                        const pol_model *critic, const pol_adamw *critic_opt, pol_dtype dtype,
                        char *err, size_t errcap)
{
    char sub[4096];
    if (!text_fmt(sub, sizeof sub, "%s/critic", dir)) {
        text_fmt(err, errcap, "%s: path too long", dir);
        return -1;
    }
    if (save_part(dir, policy, policy_opt, dtype, err, errcap) != 0)
        return -1;
    return critic || critic_opt ? save_part(sub, critic, critic_opt, dtype, err, errcap) : 0;
}

static int load_part(const char *dir, pol_head head, pol_model *m, pol_adamw *o, char *err,
                     size_t errcap)
{
    char path[4096];
    pol_adamw_cfg defaults = pol_adamw_defaults();
    if (!text_fmt(path, sizeof path, "%s/optimizer.safetensors", dir)) {
        text_fmt(err, errcap, "%s: path too long", dir);
        return -1;
    }
    if (pol_model_load(m, dir, head, err, errcap) != 0)
        return -1;
    if (o && (pol_adamw_init(o, m->w.n, &defaults, err, errcap) != 0 ||
              pol_adamw_load(o, m, path, err, errcap) != 0)) {
        pol_adamw_deinit(o);
        pol_model_deinit(m);
        return -1;
    }
    return 0;
}

int pol_checkpoint_load(const char *dir, pol_model *policy, pol_adamw *policy_opt,
                        pol_model *critic, pol_adamw *critic_opt, char *err, size_t errcap)
{
    char sub[4096];
    if (!text_fmt(sub, sizeof sub, "%s/critic", dir) || (!policy && policy_opt) ||
        (!critic && critic_opt)) {
        text_fmt(err, errcap, "%s: %s", dir,
                 (!policy && policy_opt) || (!critic && critic_opt)
                     ? "an optimizer state needs its model"
                     : "path too long");
        return -1;
    }
    if (policy && load_part(dir, POL_HEAD_LM, policy, policy_opt, err, errcap) != 0)
        return -1;
    if (critic && load_part(sub, POL_HEAD_VALUE, critic, critic_opt, err, errcap) != 0) {
        if (policy_opt)
            pol_adamw_deinit(policy_opt);
        if (policy)
            pol_model_deinit(policy);
        return -1;
    }
    return 0;
}
