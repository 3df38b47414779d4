/* The GPU model's optimizer (see model_gpu.h): policy/adamw.c's clip_grad_norm_ + AdamW on the
 * device. One walk of the table sums every tensor's squared gradients into one device scalar
 * (kg_sumsq_accumulate), kg_clip_scale turns it into the clip factor, and a second walk steps each
 * tensor (kg_adamw_step), with weight decay only where the CPU's no_decay mask would allow it
 * (pol_param_info.is_norm_or_bias), writing the bf16 weights as it goes. The factor is read back
 * once per step: kg_adamw_step takes it as a host float. */
#include "policy/cuda/model_gpu_internal.h"

#include <math.h>
#include <string.h>

#include "util/text.h"

int pol_gpu_zero_grad(pol_gpu *g, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "zero_grad", -1};
    if (!g->training)
        return text_fail(err, errcap, "model_gpu zero_grad: the model has no gradients");
    bool failed = pg_ck(&r, cudaMemsetAsync(g->grad, 0, g->n_dev * sizeof(float), g->stream),
                        "clearing the gradients") ||
                  pg_sync(&r);
    return failed ? -1 : 0;
}

/* torch.optim.AdamW's accepted hyperparameters, as policy/adamw.c checks them */
static int check_cfg(const pol_adamw_cfg *c, char *err, size_t errcap)
{
    if (!(c->lr >= 0) || !(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1) ||
        !(c->eps >= 0) || !(c->weight_decay >= 0))
        return text_fail(err, errcap,
                         "model_gpu step: invalid hyperparameters (lr %g, betas %g %g, eps %g, "
                         "wd %g)",
                         c->lr, c->beta1, c->beta2, c->eps, c->weight_decay);
    return 0;
}

/* The global gradient norm (fp32 sum of squares on the device) and the factor that clips it to
 * max_norm (1 without clipping), both read back to the host. */
static int clip_factor(pg_run *r, double max_norm, double *norm, float *factor)
{
    pol_gpu *g = r->g;
    cudaStream_t s = g->stream;
    float *sumsq = g->scalars, *scale = g->scalars + 1, host[2] = {0.0f, 1.0f};
    bool clip = max_norm > 0 && isfinite(max_norm);
    if (pg_ck(r, cudaMemsetAsync(sumsq, 0, sizeof(float), s), "clearing the sum of squares"))
        return -1;
    for (size_t i = 0; i < g->n_tensors; i++)
        if (pg_ck(r, kg_sumsq_accumulate(sumsq, g->grad + g->dev_off[i], g->tensors[i].numel, s),
                  "gradient norm"))
            return -1;
    if ((clip && pg_ck(r, kg_clip_scale(scale, sumsq, (float)max_norm, s), "clip factor")) ||
        pg_ck(r,
              cudaMemcpyAsync(host, g->scalars, (clip ? 2 : 1) * sizeof(float),
                              cudaMemcpyDeviceToHost, s),
              "reading the gradient norm") ||
        pg_sync(r))
        return -1;
    *norm = sqrt((double)host[0]);
    *factor = host[1];
    return 0;
}

int pol_gpu_step(pol_gpu *g, const pol_adamw_cfg *cfg, double max_norm, double *grad_norm,
                 char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "step", -1};
    if (!g->training)
        return text_fail(err, errcap, "model_gpu step: the model has no optimizer state");
    if (check_cfg(cfg, err, errcap) != 0)
        return -1;
    if (g->step >= INT32_MAX)
        return text_fail(err, errcap, "model_gpu step: step count %lld is too large",
                         (long long)g->step);
    double norm = 0;
    float factor = 1.0f;
    if (clip_factor(&r, max_norm, &norm, &factor) != 0)
        return -1;
    if (grad_norm)
        *grad_norm = norm;
    if (!isfinite(norm) || !isfinite(factor))
        return text_fail(err, errcap,
                         "model_gpu step: the gradient norm is %g; step skipped, weights kept",
                         norm);
    int step = (int)(g->step + 1);
    for (size_t i = 0; i < g->n_tensors; i++) {
        size_t off = g->dev_off[i];
        float wd = g->tensors[i].is_norm_or_bias ? 0.0f : (float)cfg->weight_decay;
        r.layer = -1;
        if (pg_ck(&r,
                  kg_adamw_step(g->master + off, g->w + off, g->grad + off, g->adam_m + off,
                                g->adam_v + off, g->tensors[i].numel, (float)cfg->lr,
                                (float)cfg->beta1, (float)cfg->beta2, (float)cfg->eps, wd, step,
                                factor, g->stream),
                  g->tensors[i].name))
            return -1;
    }
    if (pg_sync(&r) != 0)
        return -1;
    g->step = step;
    return 0;
}
