/* ctest_model_gpu: the GPU model (policy/cuda/model_gpu.h) against the CPU reference
 * (policy/model.h, critic.h, adamw.h). Tiny models built in memory (hidden 128-256, head_dim 64,
 * 2-3 layers, vocabulary 300: not a multiple of 8):
 *   - a Qwen2 with q/k/v biases (GQA 4/2), its loss with an entropy term;
 *   - a Qwen3 with the per-head q/k norm (2/2 heads);
 *   - a Llama 3 with llama3 RoPE scaling and tied embeddings (GQA 4/2);
 *   - a critic (value head) made from a Qwen2 policy by pol_critic_from_policy;
 * and, unless KGYM_KERNEL_SMALL=1, a Qwen2.5-0.5B-shaped random model (forward only).
 *
 * The CPU model's weights are rounded to bf16 first, so that both sides compute with the same
 * weights and only the GPU's bf16 activations separate them. Batches are packed: three documents
 * of different lengths in one row, positions restarting at each document (the first continues an
 * earlier one), doc ids for the CPU and doc_start for the GPU. Checks, one line each:
 *   - the residual stream after every layer and the logits / values: relative L2 error and max
 *     abs error (tolerances argued at act_tol);
 *   - log-probs of targets vs pol_model_logprobs, entropies vs a double reference, masked targets
 *     giving 0;
 *   - every tensor's gradient vs pol_model_backward / pol_critic_backward (relative L2 and
 *     cosine, grad_ok), and the loss;
 *   - two micro-batches' backwards = the sum of each alone;
 *   - activation recomputation (pol_gpu_set_recompute) against none, same batch, same model: the
 *     outputs, every residual and the loss the same bits, every matrix's gradient the same bits
 *     and the atomic sums' within 1e-3 (check_same_grads), a smaller activation arena (the
 *     0.5B shape's forward too, which has no training state);
 *   - clip + two AdamW steps vs policy/adamw.c on the same (CPU) gradients: master weights, both
 *     moments, the step count and the norm; then a forward through the new bf16 weights;
 *   - bad input: head_dim 32, ids / positions / documents / targets / weights out of range,
 *     calls in the wrong state: each refused with a message, the model still usable after.
 * Ends with "model_gpu: all checks passed"; exit 1 on any failure. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/adamw.h"
#include "policy/critic.h"
#include "policy/cuda/model_gpu.h"
#include "policy/model.h"

#include "ctest_common.h"

/* Activation tolerance after `layer` layers (the logits count as one more).
 * Each bf16 rounding of a value is a relative error of at most 2^-9, ~2^-9/sqrt(3) = 1.1e-3 in
 * rms, and a layer rounds its stream about a dozen times (two norms' outputs, q/k/v, the
 * attention's output, the two residual sums, gate, up, their product). A CPU emulation of exactly
 * these roundings (fp32 math, bf16 at every point where the GPU stores bf16) against the fp32
 * reference measured, for these models and batches: 0.6% after the first layer, 0.8% after three,
 * 1.5% after the 0.5B shape's 24 (growing like sqrt(depth)), logits as the last layer. The
 * tolerance keeps ~2.5x above that at every depth: 1.5% growing to 3.7% at layer 24. A real bug
 * (a wrong RoPE frequency, a missing bias or norm, a lost residual or document mask) moves the
 * stream by 10-100%. */
static double act_tol(int layer)
{
    return 1.5e-2 * (1.0 + layer / 16.0);
}

/* Relative L2 within tol, and no element off by more than 8 tol rms: a bf16 rounding is relative
 * to the element, so large elements carry large absolute errors, but 8x the typical relative
 * error times the typical size is the most a few-sigma element should see. */
static void check_act(const char *label, const float *got, const float *want, size_t n, double tol)
{
    diff d = compare(got, want, n);
    double abs_tol = 8 * tol * d.rms;
    report(d.bad == 0 && d.rel <= tol && d.max_abs <= abs_tol,
           "%s: rel L2 %.2e (tol %.2e), max abs %.2e (tol %.2e)%s", label, d.rel, tol, d.max_abs,
           abs_tol, d.bad ? ", NON-FINITE values" : "");
}

/* Gradients: relative L2 below 5% and cosine above 0.999 per tensor. The GPU's weight gradients
 * are fp32 sums of products of bf16 activations and bf16 activation gradients (the backward's
 * own dozen roundings per layer, run in reverse). The emulation above measured 0.5-2% relative
 * L2 and cosines above 0.9998 for every tensor of these models, the worst on q/k projections and
 * q/k biases (through the softmax); the loss within 1.6e-4 relative. A wrong sign, a missed term
 * (a bias, a norm, the entropy, the tied head's half of the embedding's gradient), a transposed
 * product or a lost accumulation shows as 20% to 100%. */
#define GRAD_REL 5e-2
#define GRAD_COS 0.999

static bool grad_ok(const diff *d)
{
    return d->bad == 0 && d->rel <= GRAD_REL && d->cos >= GRAD_COS;
}

static void check_grads(const char *name, const pol_model *m, const float *got, const float *want)
{
    for (size_t i = 0; i < m->n_tensors; i++) {
        const pol_param_info *t = &m->tensors[i];
        diff d = compare(got + t->offset, want + t->offset, t->numel);
        report(grad_ok(&d), "%s grad %-44s rel L2 %.2e, cos %.6f, rms %.2e", name, t->name, d.rel,
               d.cos, d.rms);
    }
}

/* ---- batches ---- */

typedef struct batch {
    int n;
    int32_t *ids, *pos, *doc, *doc_start, *targets;
    float *w_logp, *w_ent;      /* the LM loss's weights */
    float *v_target, *v_weight; /* the value loss's */
} batch;

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* uniform in [0, 1) from (seed, i) */
static double unit(uint64_t seed, uint64_t i)
{
    return (double)(mix(seed * 0x100000001B3ULL ^ mix(i)) >> 11) * (1.0 / 9007199254740992.0);
}

/* Documents of the given lengths packed into one row. The first document continues an earlier
 * one (its positions start at 5); the others start at 0. Targets are random ids, masked (-1) on
 * each document's first two tokens (a prompt) and its last (nothing follows). */
static void batch_make(batch *b, const int *lens, int ndocs, int V, uint64_t seed)
{
    int n = 0;
    for (int k = 0; k < ndocs; k++)
        n += lens[k];
    b->n = n;
    b->ids = malloc(5 * (size_t)n * sizeof(int32_t));
    b->pos = b->ids + n;
    b->doc = b->pos + n;
    b->doc_start = b->doc + n;
    b->targets = b->doc_start + n;
    b->w_logp = malloc(4 * (size_t)n * sizeof(float));
    b->w_ent = b->w_logp + n;
    b->v_target = b->w_ent + n;
    b->v_weight = b->v_target + n;
    if (!b->ids || !b->w_logp) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    int t = 0;
    for (int k = 0; k < ndocs; k++) {
        int start = t, p0 = k == 0 ? 5 : 0;
        for (int j = 0; j < lens[k]; j++, t++) {
            b->ids[t] = (int32_t)(unit(seed, 6 * (uint64_t)t) * V);
            b->pos[t] = p0 + j;
            b->doc[t] = k;
            b->doc_start[t] = start;
            bool masked = j < 2 || j == lens[k] - 1;
            b->targets[t] = masked ? -1 : (int32_t)(unit(seed, 6 * (uint64_t)t + 1) * V);
            b->w_logp[t] = (float)((0.5 + unit(seed, 6 * (uint64_t)t + 2)) / n);
            /* an entropy bonus big enough to matter: its gradient is ~20% of the log-prob's */
            b->w_ent[t] = 4.0f * b->w_logp[t];
            b->v_target[t] = (float)(2 * unit(seed, 6 * (uint64_t)t + 3) - 1);
            b->v_weight[t] = masked ? 0.0f : 1.0f / n;
        }
    }
}

static void batch_free(batch *b)
{
    free(b->ids);
    free(b->w_logp);
    memset(b, 0, sizeof *b);
}

/* ---- models ---- */

/* A receiver for what the GPU model downloads: a model of m's table (its weights unused). */
static bool receiver(pol_model *r, const pol_model *m)
{
    char err[ERRCAP];
    return need(pol_model_init(r, &m->cfg, m->head, err, ERRCAP), "receiver init", err) &&
           need(pol_model_grads_init(r, err, ERRCAP), "receiver grads", err);
}

/* A train forward (every layer's activations kept); f is initialised only when it succeeds. */
static bool cpu_forward(pol_model *m, pol_fwd *f, const batch *b)
{
    char err[ERRCAP];
    if (!need(pol_fwd_init(f, m, 1, b->n, true, err, ERRCAP), "cpu fwd init", err))
        return false;
    if (need(pol_model_forward(m, f, b->ids, b->pos, b->doc, err, ERRCAP), "cpu forward", err))
        return true;
    pol_fwd_deinit(f);
    return false;
}

/* ---- forward checks ---- */

/* The GPU's logits of the last forward, as floats [n, V]. */
static void gpu_logits(pol_gpu *g, float *out, size_t count)
{
    kg_bf16 *tmp = malloc(count * sizeof *tmp);
    if (!tmp || cudaStreamSynchronize(pol_gpu_stream(g)) != cudaSuccess ||
        cudaMemcpy(tmp, pol_gpu_logits(g), count * sizeof *tmp, cudaMemcpyDeviceToHost) !=
            cudaSuccess) {
        fprintf(stderr, "cannot read the logits\n");
        exit(2);
    }
    for (size_t i = 0; i < count; i++)
        out[i] = bf16_to_float(tmp[i]);
    free(tmp);
}

/* Per layer and the outputs; returns the largest logit error (for the log-prob bounds). */
static double check_forward(const char *name, const pol_model *m, const pol_fwd *f, pol_gpu *g)
{
    char err[ERRCAP], label[160];
    pol_dims d = pol_dims_of(&m->cfg);
    size_t N = f->N, nD = N * d.D, nV = N * d.V;
    float *buf = malloc((nV > nD ? nV : nD) * sizeof *buf);
    for (int l = 0; l < d.L; l++) {
        const float *want = l + 1 < d.L ? f->layers[l + 1].x_in : f->x_final;
        if (!need(pol_gpu_residual(g, l, buf, err, ERRCAP), "residual", err))
            break;
        snprintf(label, sizeof label, "%s layer %2d residual", name, l);
        check_act(label, buf, want, nD, act_tol(l));
    }
    double max_dz = 0;
    if (m->head == POL_HEAD_LM) {
        gpu_logits(g, buf, nV);
        snprintf(label, sizeof label, "%s logits [%zu x %d]", name, N, d.V);
        check_act(label, buf, f->logits, nV, act_tol(d.L));
        max_dz = compare(buf, f->logits, nV).max_abs;
    } else if (need(pol_gpu_values(g, buf, err, ERRCAP), "values", err)) {
        snprintf(label, sizeof label, "%s values [%zu]", name, N);
        check_act(label, buf, f->values, N, act_tol(d.L));
    }
    free(buf);
    return max_dz;
}

/* log-probs: |d logp| <= |d z_target| + |d logsumexp| <= 2 max |dz| (logsumexp moves by at most
 * the largest logit change). Entropies: to first order |dH| <= sum_j |dH/dz_j| max |dz|, with
 * dH/dz_j = -p_j (log p_j + H) computed from the CPU's logits; 1.5x for the second order. */
static void check_logprobs(const char *name, const pol_model *m, const pol_fwd *f, pol_gpu *g,
                           const batch *b, double max_dz)
{
    char err[ERRCAP];
    int V = m->cfg.vocab_size, N = b->n;
    float *lp_cpu = malloc(4 * (size_t)N * sizeof(float)), *lp_gpu = lp_cpu + N;
    float *h_gpu = lp_gpu + N, *h_cpu = h_gpu + N;
    if (!need(pol_model_logprobs(m, f, b->targets, lp_cpu, err, ERRCAP), "cpu logprobs", err) ||
        !need(pol_gpu_logprobs(g, b->targets, lp_gpu, h_gpu, err, ERRCAP), "logprobs", err)) {
        free(lp_cpu);
        return;
    }
    double lip = 0, lp_err = 0;
    int masked_bad = 0, nonfinite = 0;
#pragma omp parallel for schedule(static) reduction(max : lip, lp_err) reduction(+ : masked_bad, nonfinite)
    for (int t = 0; t < N; t++) {
        const float *z = f->logits + (size_t)t * V;
        double mx = z[0], s = 0, H = 0, L = 0;
        for (int j = 1; j < V; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < V; j++)
            s += exp(z[j] - mx);
        double lse = mx + log(s);
        for (int j = 0; j < V; j++)
            H -= exp(z[j] - lse) * (z[j] - lse);
        for (int j = 0; j < V; j++)
            L += exp(z[j] - lse) * fabs(z[j] - lse + H);
        h_cpu[t] = (float)H;
        lip = L > lip ? L : lip;
        double e = fabs((double)lp_gpu[t] - lp_cpu[t]);
        if (isfinite(e))
            lp_err = e > lp_err ? e : lp_err;
        else
            nonfinite++;
        if (b->targets[t] < 0 && lp_gpu[t] != 0.0f)
            masked_bad++;
    }
    double tol = 2 * max_dz + 1e-4;
    report(lp_err <= tol && masked_bad == 0 && nonfinite == 0,
           "%s log-probs: max abs err %.2e (tol 2 max|dz| = %.2e), masked targets give 0%s%s", name,
           lp_err, tol, masked_bad ? ": NOT SO" : "", nonfinite ? ", NON-FINITE values" : "");
    diff dh = compare(h_gpu, h_cpu, (size_t)N);
    double htol = 1.5 * lip * max_dz + 1e-4;
    report(dh.bad == 0 && dh.max_abs <= htol, "%s entropies: max abs err %.2e (tol %.2e)", name,
           dh.max_abs, htol);
    free(lp_cpu);
}

/* ---- backward checks ---- */

/* The CPU's backward of L = -sum_t (w_t logp_t + e_t H_t) (pol_model_backward has no entropy
 * term): dL/dz_j = w (p_j - [j = y]) + e p_j (log p_j + H), in double from the CPU's logits,
 * then the LM head's and the trunk's backwards of the reference. Returns L. */
static double cpu_backward_entropy(pol_model *m, pol_fwd *f, const batch *b)
{
    char err[ERRCAP];
    int V = m->cfg.vocab_size, D = m->cfg.hidden;
    double loss = 0;
    for (int t = 0; t < b->n; t++) {
        const float *z = f->logits + (size_t)t * V;
        float *dl = f->d_logits + (size_t)t * V;
        int y = b->targets[t];
        if (y < 0) {
            memset(dl, 0, (size_t)V * sizeof *dl);
            continue;
        }
        double mx = z[0], s = 0, H = 0;
        for (int j = 1; j < V; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < V; j++)
            s += exp(z[j] - mx);
        double lse = mx + log(s);
        for (int j = 0; j < V; j++)
            H -= exp(z[j] - lse) * (z[j] - lse);
        double w = b->w_logp[t], e = b->w_ent[t];
        loss -= w * (z[y] - lse) + e * H;
        for (int j = 0; j < V; j++) {
            double p = exp(z[j] - lse);
            dl[j] = (float)(w * (p - (j == y)) + e * p * ((z[j] - lse) + H));
        }
    }
    memset(f->d_h, 0, f->N * (size_t)D * sizeof(float));
    pol_linear_backward(f->d_h, m->g.lm_head, NULL, f->d_logits, f->h, m->w.lm_head, f->N, D, V);
    if (!need(pol_model_backward_trunk(m, f, f->d_h, err, ERRCAP), "cpu trunk backward", err))
        return NAN;
    return loss;
}

/* Both backwards of the LM loss, the loss and every gradient compared. */
static void check_lm_backward(const char *name, pol_model *m, pol_fwd *f, pol_gpu *g,
                              const batch *b, bool entropy)
{
    char err[ERRCAP];
    double loss_cpu = NAN, loss_gpu = NAN;
    pol_model_zero_grad(m);
    if (entropy)
        loss_cpu = cpu_backward_entropy(m, f, b);
    else if (!need(pol_model_backward(m, f, b->targets, b->w_logp, &loss_cpu, err, ERRCAP),
                   "cpu backward", err))
        return;
    pol_model rm;
    if (!need(pol_gpu_zero_grad(g, err, ERRCAP), "zero_grad", err) ||
        !need(pol_gpu_backward(g, b->targets, b->w_logp, entropy ? b->w_ent : NULL, &loss_gpu, err,
                               ERRCAP),
              "backward", err) ||
        !receiver(&rm, m))
        return;
    /* the loss is a weighted mean of log-probs ~ -log V: their errors (2 max|dz| at worst, random
     * in sign) average out; the emulation measured 0.5-1.6e-4 relative */
    report(fabs(loss_gpu - loss_cpu) <= 1e-3 * fabs(loss_cpu),
           "%s loss%s: gpu %.6f cpu %.6f (rel tol 1e-3)", name, entropy ? " (with entropy)" : "",
           loss_gpu, loss_cpu);
    if (need(pol_gpu_download_grads(g, &rm, err, ERRCAP), "download_grads", err))
        check_grads(name, m, rm.g.data, m->g.data);
    pol_model_deinit(&rm);
}

/* ---- micro-batch accumulation ---- */

/* zero, then forward + backward of each batch in turn; the gradients into out (m's layout) */
static bool gpu_grads_of(pol_gpu *g, pol_model *rm, const batch *const *bs, int nb, float *out)
{
    char err[ERRCAP];
    double loss;
    if (!need(pol_gpu_zero_grad(g, err, ERRCAP), "zero_grad", err))
        return false;
    for (int i = 0; i < nb; i++)
        if (!need(pol_gpu_forward(g, bs[i]->ids, bs[i]->pos, bs[i]->doc_start, bs[i]->n, true, err,
                                  ERRCAP),
                  "forward", err) ||
            !need(pol_gpu_backward(g, bs[i]->targets, bs[i]->w_logp, NULL, &loss, err, ERRCAP),
                  "backward", err))
            return false;
    if (!need(pol_gpu_download_grads(g, rm, err, ERRCAP), "download_grads", err))
        return false;
    memcpy(out, rm->g.data, rm->g.n * sizeof *out);
    return true;
}

/* g(A then B) against g(A) + g(B), per tensor. Only the atomics' order of addition differs (last
 * bits of fp32 sums; rarely a bf16 activation gradient one step apart): 1e-3 is a wide margin,
 * while a gradient overwritten instead of accumulated (beta = 0, `=` for `+=`) misses by 30-100%.
 * B has fewer tokens than A: the activations are re-laid out in between. */
static void check_accumulation(const char *name, pol_gpu *g, const pol_model *m, const batch *A,
                               const batch *B)
{
    pol_model rm;
    if (!receiver(&rm, m))
        return;
    size_t n = m->w.n;
    float *ga = malloc(3 * n * sizeof(float)), *gb = ga + n, *gab = gb + n;
    const batch *a_only[] = {A}, *b_only[] = {B}, *both[] = {A, B};
    if (gpu_grads_of(g, &rm, a_only, 1, ga) && gpu_grads_of(g, &rm, b_only, 1, gb) &&
        gpu_grads_of(g, &rm, both, 2, gab)) {
        for (size_t i = 0; i < n; i++)
            ga[i] += gb[i];
        double worst = 0;
        size_t nonfinite = 0;
        const char *worst_name = "";
        for (size_t i = 0; i < m->n_tensors; i++) {
            const pol_param_info *t = &m->tensors[i];
            diff d = compare(gab + t->offset, ga + t->offset, t->numel);
            nonfinite += d.bad + !isfinite(d.rel);
            if (d.rel > worst) {
                worst = d.rel;
                worst_name = t->name;
            }
        }
        report(worst <= 1e-3 && nonfinite == 0,
               "%s micro-batches: grad(A then B) = grad(A) + grad(B), worst rel L2 %.2e (%s, "
               "tol 1e-3)%s",
               name, worst, worst_name, nonfinite ? ", NON-FINITE values" : "");
    }
    free(ga);
    pol_model_deinit(&rm);
}

/* ---- the optimizer ---- */

/* Compares x against want elementwise within atol + rtol |want|; the worst ratio is reported. */
static void check_close(const char *label, const float *got, const float *want, size_t n,
                        double atol, double rtol)
{
    double worst = 0, at = 0;
    size_t where = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]), lim = atol + rtol * fabs((double)want[i]);
        if (!isfinite(e))
            nonfinite++;
        else if (e > worst * lim) {
            worst = e / lim;
            at = e;
            where = i;
        }
    }
    report(worst <= 1.0 && nonfinite == 0, "%s: worst error %.2e at %zu (%.2fx its tolerance)%s",
           label, at, where, worst, nonfinite ? ", NON-FINITE values" : "");
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Two clipped AdamW steps on the CPU's gradients (m->g), on both sides from the same weights. Why
 * these tolerances: both sides run the same fp32 formula on the same inputs, except that the GPU
 * gets the clip factor from an fp32 sum of squares (1e-6 to 1e-5 relative off the CPU's double,
 * by the order of the additions) and the hyperparameters as floats (1 - beta2 is then 1.3e-5
 * relative off). Adam's update m / sqrt(v) is blind to the gradient's scale, so the master
 * weights agree to a few ulps (5e-7 relative, 1e-7 absolute); the moments and the norm carry the
 * scale: within 1e-4 relative. An emulation of kg_adamw_step's arithmetic (FMA contraction
 * included) against policy/adamw.c stayed within 0.4x of these. What they catch: weight decay on
 * a norm or bias (lr wd |w| = 1e-3), none on a matrix (5e-5), the step count (bias
 * corrections), the clip factor (m doubles). */
static void check_optimizer(const char *name, pol_gpu *g, pol_model *m)
{
    char err[ERRCAP];
    size_t n = m->w.n;
    pol_adamw_cfg cfg = {
        .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    pol_adamw cpu, gpu;
    pol_model rm;
    uint8_t *no_decay = calloc(n, 1);
    float *grads = malloc(n * sizeof *grads);
    if (!no_decay || !grads || !need(pol_adamw_init(&cpu, n, &cfg, err, ERRCAP), "adamw", err)) {
        free(no_decay);
        free(grads);
        return;
    }
    if (!need(pol_adamw_init(&gpu, n, &cfg, err, ERRCAP), "adamw", err)) {
        pol_adamw_deinit(&cpu);
        free(no_decay);
        free(grads);
        return;
    }
    for (size_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].is_norm_or_bias)
            memset(no_decay + m->tensors[i].offset, 1, m->tensors[i].numel);
    cpu.no_decay = no_decay;
    double max_norm = 0.5 * pol_grad_norm(m->g.data, n); /* the clip is active */
    double norm_cpu = 0, norm_gpu = 0;
    bool ok = need(pol_gpu_upload_grads(g, m, err, ERRCAP), "upload_grads", err);
    for (int step = 0; ok && step < 2; step++) {
        memcpy(grads, m->g.data, n * sizeof *grads);
        norm_cpu = pol_clip_grad_norm(grads, n, max_norm);
        pol_adamw_step(&cpu, m->w.data, grads);
        ok = need(pol_gpu_step(g, &cfg, max_norm, &norm_gpu, err, ERRCAP), "step", err);
    }
    if (ok && receiver(&rm, m)) {
        char label[128];
        if (need(pol_gpu_download(g, &rm, err, ERRCAP), "download", err) &&
            need(pol_gpu_download_adamw(g, &gpu, err, ERRCAP), "download_adamw", err)) {
            report(fabs(norm_gpu - norm_cpu) <= 1e-4 * norm_cpu,
                   "%s grad norm: gpu %.7g cpu %.7g (rel tol 1e-4)", name, norm_gpu, norm_cpu);
            report(gpu.step == cpu.step, "%s step count: gpu %lld cpu %lld", name,
                   (long long)gpu.step, (long long)cpu.step);
            snprintf(label, sizeof label, "%s adamw x2 master weights", name);
            check_close(label, rm.w.data, m->w.data, n, 1e-7, 5e-7);
            snprintf(label, sizeof label, "%s adamw x2 exp_avg", name);
            check_close(label, gpu.m, cpu.m, n, 1e-6 * max_abs(cpu.m, n), 1e-4);
            snprintf(label, sizeof label, "%s adamw x2 exp_avg_sq", name);
            check_close(label, gpu.v, cpu.v, n, 1e-6 * max_abs(cpu.v, n), 1e-4);
        }
        pol_model_deinit(&rm);
    }
    pol_adamw_deinit(&cpu);
    pol_adamw_deinit(&gpu);
    free(no_decay);
    free(grads);
}

/* After the steps: the GPU's bf16 weights are the new master weights rounded (adamw's param
 * output); the CPU's weights rounded the same way must give the same forward. The steps moved
 * each weight by ~2 lr = 0.02 against weights of std 0.05: stale bf16 weights would be off by
 * far more than act_tol. */
static void check_after_step(const char *name, pol_model *m, pol_gpu *g, const batch *b)
{
    char err[ERRCAP], label[128];
    pol_fwd f;
    round_weights(m);
    if (!cpu_forward(m, &f, b))
        return;
    if (need(pol_gpu_forward(g, b->ids, b->pos, b->doc_start, b->n, false, err, ERRCAP), "forward",
             err)) {
        pol_dims d = pol_dims_of(&m->cfg);
        size_t nV = f.N * d.V;
        float *buf = malloc(nV * sizeof *buf);
        gpu_logits(g, buf, nV);
        snprintf(label, sizeof label, "%s logits after the steps (inference forward)", name);
        check_act(label, buf, f.logits, nV, act_tol(d.L));
        free(buf);
    }
    pol_fwd_deinit(&f);
}

/* ---- activation recomputation ---- */

/* Whether the GPU computes a tensor's gradient as one cuBLASLt product per backward (fp32 out,
 * beta 1 onto zeroed gradients): every matrix but the embedding (atomic row adds, plus the tied
 * head's product) and the value head's row (a column sum). The rest (norms, biases, embedding,
 * value head) are sums that blocks add with atomics. */
static bool grad_by_matmul(const pol_param_info *t)
{
    return !t->is_norm_or_bias && strcmp(t->name, "model.embed_tokens.weight") != 0 &&
           strcmp(t->name, "score.weight") != 0;
}

/* What one train forward (+ backward) leaves, for comparing recompute off and on. */
typedef struct recompute_run {
    pol_model grads; /* a receiver of the downloaded gradients (with a backward) */
    bool has_grads;
    float *res;   /* [L, n, hidden] every layer's residual (after the backward, if any) */
    float *out;   /* the logits [n, V] or the values [n] of the forward */
    double loss;  /* the LM loss of the backward */
    size_t bytes; /* pol_gpu_activation_bytes after the forward */
} recompute_run;

static bool recompute_run_init(recompute_run *r, const pol_model *m, size_t n, bool backward)
{
    pol_dims d = pol_dims_of(&m->cfg);
    size_t nout = m->head == POL_HEAD_LM ? n * d.V : n;
    memset(r, 0, sizeof *r);
    r->res = malloc((size_t)d.L * n * d.D * sizeof *r->res);
    r->out = malloc(nout * sizeof *r->out);
    r->has_grads = backward && receiver(&r->grads, m);
    return r->res && r->out && (r->has_grads || !backward);
}

static void recompute_run_free(recompute_run *r)
{
    if (r->has_grads)
        pol_model_deinit(&r->grads);
    free(r->res);
    free(r->out);
}

/* With recompute on or off: (zero_grad,) a train forward, its outputs and arena size, (the
 * backward: the LM loss with or without entropy, or dvalues for a value head,) then every
 * layer's residual, read after the backward so that a recompute that wrote over a kept input
 * shows, (and the gradients). */
static bool recompute_run_once(pol_gpu *g, const pol_model *m, const batch *b, bool on,
                               bool entropy, const float *dvalues, recompute_run *r)
{
    char err[ERRCAP];
    pol_dims d = pol_dims_of(&m->cfg);
    size_t nD = (size_t)b->n * d.D;
    bool lm = m->head == POL_HEAD_LM;
    if (!need(pol_gpu_set_recompute(g, on, err, ERRCAP), "set_recompute", err) ||
        (r->has_grads && !need(pol_gpu_zero_grad(g, err, ERRCAP), "zero_grad", err)) ||
        !need(pol_gpu_forward(g, b->ids, b->pos, b->doc_start, b->n, true, err, ERRCAP), "forward",
              err))
        return false;
    r->bytes = pol_gpu_activation_bytes(g);
    if (lm)
        gpu_logits(g, r->out, (size_t)b->n * d.V);
    else if (!need(pol_gpu_values(g, r->out, err, ERRCAP), "values", err))
        return false;
    if (r->has_grads) {
        bool ok = lm ? need(pol_gpu_backward(g, b->targets, b->w_logp, entropy ? b->w_ent : NULL,
                                             &r->loss, err, ERRCAP),
                            "backward", err)
                     : need(pol_gpu_backward_value(g, dvalues, err, ERRCAP), "backward_value", err);
        if (!ok)
            return false;
    }
    for (int l = 0; l < d.L; l++)
        if (!need(pol_gpu_residual(g, l, r->res + (size_t)l * nD, err, ERRCAP), "residual", err))
            return false;
    return !r->has_grads ||
           need(pol_gpu_download_grads(g, &r->grads, err, ERRCAP), "download_grads", err);
}

/* The gradients with recompute against those without. The recompute reruns the forward's own
 * kernels on the same inputs, so every activation the backward reads is the same bits, and so is
 * every gradient that no atomic sum reaches: the matrices' (grad_by_matmul). At these sizes the
 * activation gradients see no order-dependent atomics: the attention backward's dq adds one
 * partial per 64-key tile into a row of <= 128 tokens, at most two onto zero, and two adds
 * commute; rmsnorm's dx is per row. The atomic sums themselves (norms, biases, embedding, value
 * head: kernels.h, not reproducible from run to run, recompute or not) get check_accumulation's
 * 1e-3, which a wrong recomputed activation (10-100%) would miss by far. */
static void check_same_grads(const char *name, const pol_model *m, const float *off,
                             const float *on)
{
    size_t exact = 0, exact_same = 0, atomic = 0, atomic_same = 0, nonfinite = 0;
    double worst = 0;
    const char *worst_name = "", *first_diff = NULL;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const pol_param_info *t = &m->tensors[i];
        const float *a = off + t->offset, *b = on + t->offset;
        bool same = memcmp(a, b, t->numel * sizeof *a) == 0;
        if (grad_by_matmul(t)) {
            exact++;
            exact_same += same;
            if (!same && !first_diff)
                first_diff = t->name;
            continue;
        }
        diff d = compare(b, a, t->numel);
        atomic++;
        atomic_same += same;
        nonfinite += d.bad + !isfinite(d.rel);
        if (d.rel > worst) {
            worst = d.rel;
            worst_name = t->name;
        }
    }
    report(exact_same == exact,
           "%s recompute: gradients bitwise equal (%zu tensors, of %zu matrices%s%s)", name,
           exact_same, exact, first_diff ? "; first differing: " : "",
           first_diff ? first_diff : "");
    report(worst <= 1e-3 && nonfinite == 0,
           "%s recompute: the %zu atomic-sum gradients (norms, biases, embedding, value head) "
           "within rel L2 %.2e (%s, tol 1e-3), %zu of them bitwise equal%s",
           name, atomic, worst, worst_name, atomic_same, nonfinite ? ", NON-FINITE values" : "");
}

/* Recompute keeps every layer's input and one layer's activations instead of every layer's: it
 * saves at least the other L - 1 layers' xn1, x_mid, xn2 (2 bytes x hidden each) and gate, up,
 * act (2 bytes x intermediate each) per token. */
static void check_recompute_bytes(const char *name, const pol_dims *d, size_t n, size_t off,
                                  size_t on)
{
    size_t saved_min = (size_t)(d->L - 1) * n * (6 * (size_t)d->D + 6 * (size_t)d->F);
    report(on > 0 && on + saved_min <= off,
           "%s recompute: activation arena %.2f MiB without, %.2f MiB with (%zu -> %zu bytes, "
           "%.0f -> %.0f per token; at least %zu saved expected)",
           name, (double)off / (1 << 20), (double)on / (1 << 20), off, on, (double)off / n,
           (double)on / n, saved_min);
}

/* The same batch with recompute off, then on, on the same model: the forward's outputs, every
 * layer's residual (after the backward) and the loss the same bits, the gradients as
 * check_same_grads says, the arena smaller. Without `backward` only the forward is compared (a
 * model without training state takes the setting too: it shapes its train forwards). Leaves
 * recompute off. */
static void check_recompute(const char *name, pol_gpu *g, const pol_model *m, const batch *b,
                            bool backward, bool entropy, const float *dvalues)
{
    char err[ERRCAP] = "";
    pol_dims d = pol_dims_of(&m->cfg);
    size_t n = (size_t)b->n, nout = m->head == POL_HEAD_LM ? n * d.V : n;
    recompute_run off, on;
    bool ready = recompute_run_init(&off, m, n, backward);
    ready = recompute_run_init(&on, m, n, backward) && ready;
    if (!ready)
        report(false, "%s recompute: out of host memory", name);
    if (ready && recompute_run_once(g, m, b, false, entropy, dvalues, &off) &&
        recompute_run_once(g, m, b, true, entropy, dvalues, &on)) {
        bool lm = m->head == POL_HEAD_LM;
        report(memcmp(on.out, off.out, nout * sizeof *on.out) == 0,
               "%s recompute: the forward's %s bitwise equal", name, lm ? "logits" : "values");
        report(memcmp(on.res, off.res, (size_t)d.L * n * d.D * sizeof *on.res) == 0,
               "%s recompute: residuals of all %d layers bitwise equal%s", name, d.L,
               backward ? " (read after the backward)" : "");
        if (backward && lm)
            report(on.loss == off.loss, "%s recompute: loss %.9g, without %.9g (equal)", name,
                   on.loss, off.loss);
        if (backward)
            check_same_grads(name, m, off.grads.g.data, on.grads.g.data);
        check_recompute_bytes(name, &d, n, off.bytes, on.bytes);
        /* the same setting again keeps the forward; a change drops it (its layout is gone) */
        report(pol_gpu_set_recompute(g, true, err, ERRCAP) == 0 && pol_gpu_n_tokens(g) == b->n,
               "%s recompute: setting it again keeps the forward", name);
        int rc = pol_gpu_set_recompute(g, false, err, ERRCAP);
        report(rc == 0 && pol_gpu_n_tokens(g) == 0 &&
                   pol_gpu_residual(g, 0, on.res, err, ERRCAP) != 0,
               "%s recompute: turning it off drops the forward (residual: \"%s\")", name, err);
    }
    need(pol_gpu_set_recompute(g, false, err, ERRCAP), "set_recompute", err);
    recompute_run_free(&off);
    recompute_run_free(&on);
}

/* ---- bad input ---- */

static void expect_refusal(const char *what, int rc, const char *err, const char *needle)
{
    report(rc != 0 && strstr(err, needle) != NULL, "refused %s: \"%s\"", what, rc ? err : "");
}

static void check_bad_inputs(const char *name, pol_model *m, const pol_fwd *f, pol_gpu *g,
                             const batch *b)
{
    char err[ERRCAP] = "";
    int n = b->n, V = m->cfg.vocab_size;
    double loss;
    int32_t *ids = malloc(3 * (size_t)n * sizeof *ids), *ds = ids + n, *tg = ds + n;
    /* room for a residual [n, hidden], should a refusal fail to happen */
    float *w = malloc((size_t)n * m->cfg.hidden * sizeof *w);

    /* head_dim 32: the attention kernel's limit */
    pol_config cfg = m->cfg;
    cfg.hidden = 128;
    cfg.n_heads = 4;
    cfg.n_kv_heads = 2;
    cfg.head_dim = 32;
    pol_model small;
    pol_gpu *none = NULL;
    if (need(pol_model_init(&small, &cfg, POL_HEAD_LM, err, ERRCAP), "init", err)) {
        expect_refusal("head_dim 32", pol_gpu_create(&none, &small, true, err, ERRCAP), err,
                       "head_dim");
        report(none == NULL, "no model made for head_dim 32");
        pol_model_deinit(&small);
    }

    memcpy(ids, b->ids, (size_t)n * sizeof *ids);
    ids[n / 2] = V;
    expect_refusal("id = vocab",
                   pol_gpu_forward(g, ids, b->pos, b->doc_start, n, true, err, ERRCAP), err,
                   "vocabulary");
    ids[n / 2] = -1;
    expect_refusal("id = -1", pol_gpu_forward(g, ids, b->pos, b->doc_start, n, true, err, ERRCAP),
                   err, "vocabulary");
    memcpy(ds, b->doc_start, (size_t)n * sizeof *ds);
    ds[n - 1] = 1; /* neither its predecessor's doc_start nor itself */
    expect_refusal("a broken document",
                   pol_gpu_forward(g, b->ids, b->pos, ds, n, true, err, ERRCAP), err, "doc_start");
    memcpy(tg, b->pos, (size_t)n * sizeof *tg);
    tg[1] = -3;
    expect_refusal("a negative position",
                   pol_gpu_forward(g, b->ids, tg, b->doc_start, n, true, err, ERRCAP), err,
                   "position");
    expect_refusal("zero tokens",
                   pol_gpu_forward(g, b->ids, b->pos, b->doc_start, 0, true, err, ERRCAP), err,
                   "tokens");
    expect_refusal("a backward with no forward left",
                   pol_gpu_backward(g, b->targets, b->w_logp, NULL, &loss, err, ERRCAP), err,
                   "forward");

    /* still usable: an inference forward gives the CPU's logits again */
    char label[128];
    if (need(pol_gpu_forward(g, b->ids, b->pos, b->doc_start, n, false, err, ERRCAP), "forward",
             err)) {
        size_t nV = (size_t)n * V;
        float *buf = malloc(nV * sizeof *buf);
        gpu_logits(g, buf, nV);
        snprintf(label, sizeof label, "%s logits after the refusals", name);
        check_act(label, buf, f->logits, nV, act_tol(m->cfg.n_layers));
        free(buf);
    }
    expect_refusal("a backward after an inference forward",
                   pol_gpu_backward(g, b->targets, b->w_logp, NULL, &loss, err, ERRCAP), err,
                   "activations");
    expect_refusal("the residual of an inference forward", pol_gpu_residual(g, 0, w, err, ERRCAP),
                   err, "activations");

    if (need(pol_gpu_forward(g, b->ids, b->pos, b->doc_start, n, true, err, ERRCAP), "forward",
             err)) {
        memcpy(tg, b->targets, (size_t)n * sizeof *tg);
        tg[n / 3] = V;
        expect_refusal("target = vocab",
                       pol_gpu_backward(g, tg, b->w_logp, NULL, &loss, err, ERRCAP), err, "target");
        expect_refusal("log-prob target = vocab", pol_gpu_logprobs(g, tg, w, NULL, err, ERRCAP),
                       err, "target");
        memcpy(w, b->w_logp, (size_t)n * sizeof *w);
        w[2] = NAN;
        expect_refusal("a NaN weight", pol_gpu_backward(g, b->targets, w, NULL, &loss, err, ERRCAP),
                       err, "weight");
        expect_refusal("layer L's residual", pol_gpu_residual(g, m->cfg.n_layers, w, err, ERRCAP),
                       err, "layer");
        expect_refusal("values of an LM head", pol_gpu_values(g, w, err, ERRCAP), err,
                       "value head");
        expect_refusal("a value backward of an LM head", pol_gpu_backward_value(g, w, err, ERRCAP),
                       err, "value head");
    }
    pol_adamw_cfg bad = pol_adamw_defaults();
    bad.beta1 = 1.0;
    expect_refusal("beta1 = 1", pol_gpu_step(g, &bad, 1.0, NULL, err, ERRCAP), err,
                   "hyperparameters");
    free(ids);
    free(w);
}

/* Recompute on a model without training state: accepted (the setting shapes train forwards
 * only); an inference forward after it gives the same bits as before (want, nV logits). */
static void check_recompute_inference(const char *name, pol_gpu *g, const batch *b,
                                      const float *want, size_t nV)
{
    char err[ERRCAP];
    float *got = malloc(nV * sizeof *got);
    if (!got)
        return;
    if (need(pol_gpu_set_recompute(g, true, err, ERRCAP), "set_recompute (inference model)", err) &&
        need(pol_gpu_forward(g, b->ids, NULL, NULL, b->n, false, err, ERRCAP), "forward", err)) {
        gpu_logits(g, got, nV);
        report(memcmp(got, want, nV * sizeof *got) == 0,
               "%s inference model: recompute accepted, the inference logits bitwise unchanged",
               name);
    }
    need(pol_gpu_set_recompute(g, false, err, ERRCAP), "set_recompute (inference model)", err);
    free(got);
}

/* Without training state, and with the defaults: pos NULL (position in the document) and
 * doc_start NULL (one document) against the CPU's NULL pos / doc (0..T-1, one document). */
static void check_inference_model(const char *name, pol_model *m, const batch *b)
{
    char err[ERRCAP], label[128];
    pol_gpu *g = NULL;
    pol_fwd f;
    double loss;
    if (!need(pol_fwd_init(&f, m, 1, b->n, false, err, ERRCAP), "cpu fwd init", err))
        return;
    if (need(pol_model_forward(m, &f, b->ids, NULL, NULL, err, ERRCAP), "cpu forward", err) &&
        need(pol_gpu_create(&g, m, false, err, ERRCAP), "create (inference)", err) &&
        need(pol_gpu_forward(g, b->ids, NULL, NULL, b->n, false, err, ERRCAP), "forward", err)) {
        size_t nV = f.N * (size_t)m->cfg.vocab_size;
        float *buf = malloc(nV * sizeof *buf);
        gpu_logits(g, buf, nV);
        snprintf(label, sizeof label, "%s inference model, default pos/doc_start: logits", name);
        check_act(label, buf, f.logits, nV, act_tol(m->cfg.n_layers));
        check_recompute_inference(name, g, b, buf, nV);
        free(buf);
        pol_adamw_cfg cfg = pol_adamw_defaults();
        expect_refusal("a step without training state",
                       pol_gpu_step(g, &cfg, 1.0, NULL, err, ERRCAP), err, "optimizer");
        expect_refusal("gradients without training state",
                       pol_gpu_download_grads(g, m, err, ERRCAP), err, "training");
        expect_refusal("a backward without training state",
                       pol_gpu_backward(g, b->targets, b->w_logp, NULL, &loss, err, ERRCAP), err,
                       "training");
    }
    pol_gpu_free(g);
    pol_fwd_deinit(&f);
}

/* ---- the cases ---- */

typedef struct lm_case {
    const char *name, *json;
    bool entropy, optimizer, accumulation, bad_inputs;
} lm_case;

static const int *doc_lens(int *ndocs, bool second)
{
    static const int a[] = {45, 70, 13}, b[] = {30, 50}, a_small[] = {17, 9, 14},
                     b_small[] = {11, 20};
    bool s = small_run();
    *ndocs = second ? 2 : 3;
    return second ? (s ? b_small : b) : (s ? a_small : a);
}

static void run_lm_case(const lm_case *c, uint64_t seed)
{
    char err[ERRCAP];
    pol_model m;
    pol_fwd f;
    pol_gpu *g = NULL;
    batch b = {0}, b2 = {0};
    int nd;
    printf("--- %s\n", c->name);
    if (!model_from_json(&m, c->json, POL_HEAD_LM, seed, 0.05f))
        return;
    const int *lens = doc_lens(&nd, false);
    batch_make(&b, lens, nd, m.cfg.vocab_size, seed + 1);
    if (cpu_forward(&m, &f, &b)) {
        if (need(pol_gpu_create(&g, &m, true, err, ERRCAP), "create", err) &&
            need(pol_gpu_forward(g, b.ids, b.pos, b.doc_start, b.n, true, err, ERRCAP), "forward",
                 err)) {
            double max_dz = check_forward(c->name, &m, &f, g);
            check_logprobs(c->name, &m, &f, g, &b, max_dz);
            check_lm_backward(c->name, &m, &f, g, &b, c->entropy);
            check_recompute(c->name, g, &m, &b, true, c->entropy, NULL);
            if (c->accumulation) {
                lens = doc_lens(&nd, true);
                batch_make(&b2, lens, nd, m.cfg.vocab_size, seed + 2);
                check_accumulation(c->name, g, &m, &b, &b2);
                batch_free(&b2);
            }
            if (c->bad_inputs)
                check_bad_inputs(c->name, &m, &f, g, &b);
            if (c->optimizer) { /* last: it changes the weights */
                check_optimizer(c->name, g, &m);
                check_after_step(c->name, &m, g, &b);
            }
        }
        pol_fwd_deinit(&f);
    }
    if (c->bad_inputs)
        check_inference_model(c->name, &m, &b);
    pol_gpu_free(g);
    batch_free(&b);
    pol_model_deinit(&m);
}

/* The critic: pol_critic_from_policy's value head (std 0.5 so the values are not tiny) on a
 * Qwen2 trunk; the loss is pol_critic_value_loss's, its dL/dV fed to both backwards. */
static void run_critic_case(uint64_t seed)
{
    static const char *json =
        "{\"model_type\": \"qwen2\", \"vocab_size\": 300, \"hidden_size\": 128, "
        "\"intermediate_size\": 320, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
        "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
        "\"tie_word_embeddings\": true}";
    char err[ERRCAP];
    pol_model policy, critic, rm;
    pol_fwd f;
    pol_gpu *g = NULL;
    batch b = {0};
    int nd;
    printf("--- critic (value head on a qwen2 trunk)\n");
    if (!model_from_json(&policy, json, POL_HEAD_LM, seed, 0.05f))
        return;
    bool made = need(pol_critic_from_policy(&critic, &policy, seed + 1, 0.5f, err, ERRCAP),
                     "critic from policy", err);
    pol_model_deinit(&policy);
    if (!made)
        return;
    round_weights(&critic);
    const int *lens = doc_lens(&nd, false);
    batch_make(&b, lens, nd, critic.cfg.vocab_size, seed + 2);
    float *dv = malloc((size_t)b.n * sizeof *dv);
    if (need(pol_model_grads_init(&critic, err, ERRCAP), "grads", err) &&
        need(pol_fwd_init(&f, &critic, 1, b.n, true, err, ERRCAP), "fwd init", err)) {
        if (need(pol_critic_forward(&critic, &f, b.ids, b.pos, b.doc, err, ERRCAP), "cpu forward",
                 err) &&
            need(pol_gpu_create(&g, &critic, true, err, ERRCAP), "create", err) &&
            need(pol_gpu_forward(g, b.ids, b.pos, b.doc_start, b.n, true, err, ERRCAP), "forward",
                 err)) {
            check_forward("critic", &critic, &f, g);
            pol_critic_value_loss(f.values, b.v_target, b.v_weight, (size_t)b.n, dv);
            if (need(pol_critic_backward(&critic, &f, dv, err, ERRCAP), "cpu backward", err) &&
                need(pol_gpu_backward_value(g, dv, err, ERRCAP), "backward_value", err) &&
                receiver(&rm, &critic)) {
                if (need(pol_gpu_download_grads(g, &rm, err, ERRCAP), "download_grads", err))
                    check_grads("critic", &critic, rm.g.data, critic.g.data);
                pol_model_deinit(&rm);
                check_recompute("critic", g, &critic, &b, true, false, dv);
            }
        }
        pol_fwd_deinit(&f);
    }
    free(dv);
    pol_gpu_free(g);
    batch_free(&b);
    pol_model_deinit(&critic);
}

/* ---- the Qwen2.5-0.5B shape ---- */

/* pol_model_init_random's serial normal draws would take ~10 s for 494M weights: a parallel
 * uniform of the same std (a = std sqrt 3) does the same job here. Norm weights 1 + noise. */
static void fill_random_fast(pol_model *m, uint64_t seed, float std)
{
    float a = std * sqrtf(3.0f);
    for (size_t k = 0; k < m->n_tensors; k++) {
        const pol_param_info *t = &m->tensors[k];
        float base = strstr(t->name, "norm.weight") ? 1.0f : 0.0f, *w = m->w.data + t->offset;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < t->numel; i++)
            w[i] = round_bf16(base + a * (float)(2 * unit(seed + k, i) - 1));
    }
}

static void run_big_case(uint64_t seed)
{
    static const char *json =
        "{\"model_type\": \"qwen2\", \"vocab_size\": 151936, \"hidden_size\": 896, "
        "\"intermediate_size\": 4864, \"num_hidden_layers\": 24, \"num_attention_heads\": 14, "
        "\"num_key_value_heads\": 2, \"max_position_embeddings\": 32768, \"rms_norm_eps\": 1e-6, "
        "\"rope_theta\": 1000000.0, \"tie_word_embeddings\": true}";
    static const int lens[] = {100, 120, 36};
    char err[ERRCAP];
    pol_config cfg;
    pol_model m;
    pol_fwd f;
    pol_gpu *g = NULL;
    batch b = {0};
    printf("--- qwen2.5-0.5b shape (random weights), forward of 256 tokens\n");
    if (!need(pol_config_parse(json, &cfg, err, ERRCAP), "config", err) ||
        !need(pol_model_init(&m, &cfg, POL_HEAD_LM, err, ERRCAP), "init", err))
        return;
    fill_random_fast(&m, seed, 0.02f);
    batch_make(&b, lens, 3, cfg.vocab_size, seed + 1);
    if (cpu_forward(&m, &f, &b)) {
        /* no training state: the upload goes through the bf16 staging path */
        if (need(pol_gpu_create(&g, &m, false, err, ERRCAP), "create", err) &&
            need(pol_gpu_forward(g, b.ids, b.pos, b.doc_start, b.n, true, err, ERRCAP), "forward",
                 err)) {
            double max_dz = check_forward("qwen2.5-0.5b", &m, &f, g);
            check_logprobs("qwen2.5-0.5b", &m, &f, g, &b, max_dz);
            /* no training state: the setting still shapes its train forwards */
            check_recompute("qwen2.5-0.5b", g, &m, &b, false, false, NULL);
        }
        pol_fwd_deinit(&f);
    }
    pol_gpu_free(g);
    batch_free(&b);
    pol_model_deinit(&m);
}

int main(void)
{
    static const lm_case cases[] = {
        {"qwen2", /* q/k/v biases, GQA 4/2, separate LM head; the entropy term */
         "{\"model_type\": \"qwen2\", \"vocab_size\": 300, \"hidden_size\": 256, "
         "\"intermediate_size\": 512, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
         "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
         "\"tie_word_embeddings\": false}",
         true, true, false, true},
        {"qwen3", /* per-head q/k RMSNorm, explicit head_dim, 2/2 heads */
         "{\"model_type\": \"qwen3\", \"vocab_size\": 300, \"hidden_size\": 128, "
         "\"intermediate_size\": 384, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
         "\"num_key_value_heads\": 2, \"head_dim\": 64, \"rms_norm_eps\": 1e-6, "
         "\"rope_theta\": 1000000.0, \"tie_word_embeddings\": false}",
         false, false, false, false},
        {"llama3", /* llama3 RoPE scaling (its ramp inside our positions), tied embeddings */
         "{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 256, "
         "\"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
         "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0, "
         "\"tie_word_embeddings\": true, \"rope_scaling\": {\"rope_type\": \"llama3\", "
         "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
         "\"original_max_position_embeddings\": 64}}",
         false, false, true, false},
    };
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        printf("FAIL model_gpu: no CUDA device\n");
        return 1;
    }
    uint64_t seed = 1000;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, seed += 10)
        run_lm_case(&cases[i], seed);
    run_critic_case(seed += 10);
    if (!small_run())
        run_big_case(seed += 10);
    printf("%s\n", g_failed ? "model_gpu: FAILED" : "model_gpu: all checks passed");
    return g_failed ? 1 : 0;
}
