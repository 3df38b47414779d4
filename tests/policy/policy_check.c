/* policy-check: a test-only program the policy pytest drives. It runs the CPU reference on a batch
 * and dumps what the test compares against HF transformers and PyTorch, as safetensors. A thin
 * layer over the library: every number comes from policy/model.h, critic.h and adamw.h.
 *
 * A batch is JSON: {"ids": [[...], ...], "targets": [[...]], "weights": [[...]],
 *                   "pos": [[...]], "doc": [[...]], "values": [[...]]}   (all B x T; ids required)
 *
 *   logits DIR BATCH OUT                      logits [B,T,V] (+ logprobs [B,T] given targets)
 *   decode DIR BATCH OUT --prefill K          logits through the KV cache: K tokens, then 1 by 1
 *   grads  DIR BATCH OUT                      loss and every parameter's gradient (by its name)
 *   adamw  DIR BATCH OUT --steps N [--lr --beta1 --beta2 --eps --wd --clip C]
 *          [--resume-at K --scratch DIR] [--critic]
 *                                             losses [N], final parameters (by name); with
 *                                             --resume-at, a save/load round trip of model and
 *                                             optimizer after K steps
 *   critic-init POLICY_DIR OUT_DIR --seed S --std X
 *   critic CRITIC_DIR BATCH OUT               values [B,T], value loss, gradients by name
 *   save   DIR OUT_DIR [--dtype F32|BF16] [--critic]   load and save again */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/adamw.h"
#include "policy/critic.h"
#include "policy/model.h"

#include "tests/policy/check_batch.h"

/* ---- output ---- */

/* ---- subcommands ---- */

static int cmd_logits(const char *dir, const batch *b, const char *out, char *err)
{
    pol_model m;
    pol_fwd f = {0};
    float *lp = NULL;
    int rc = -1;
    if (pol_model_load(&m, dir, POL_HEAD_LM, err, ERRCAP) != 0)
        return -1;
    if (pol_fwd_init(&f, &m, b->B, b->T, false, err, ERRCAP) != 0 ||
        pol_model_forward(&m, &f, b->ids, b->pos, b->doc, err, ERRCAP) != 0)
        goto done;
    pol_st_entry e[2];
    size_t n = 0;
    e[n++] = f32_entry("logits", f.logits, 3, b->B, b->T, m.cfg.vocab_size);
    if (b->targets) {
        lp = malloc(f.N * sizeof *lp);
        if (!lp || pol_model_logprobs(&m, &f, b->targets, lp, err, ERRCAP) != 0)
            goto done;
        e[n++] = f32_entry("logprobs", lp, 2, b->B, b->T, 0);
    }
    rc = pol_st_write(out, e, n, NULL, err, ERRCAP);
done:
    free(lp);
    pol_fwd_deinit(&f);
    pol_model_deinit(&m);
    return rc;
}

static int cmd_decode(const char *dir, const batch *b, const char *out, int prefill, char *err)
{
    pol_model m;
    if (pol_model_load(&m, dir, POL_HEAD_LM, err, ERRCAP) != 0)
        return -1;
    size_t V = (size_t)m.cfg.vocab_size;
    float *logits = calloc((size_t)b->B * b->T * V, sizeof *logits);
    int rc = logits ? 0 : -1;
    for (int r = 0; rc == 0 && r < b->B; r++) {
        pol_kv kv;
        if (pol_kv_init(&kv, &m, b->T, err, ERRCAP) != 0) {
            rc = -1;
            break;
        }
        const int32_t *ids = b->ids + (size_t)r * b->T;
        int first = prefill < b->T ? prefill : b->T;
        /* the prefill's last logits, then one token at a time */
        for (int t = first > 0 ? first : 1; rc == 0 && t <= b->T; t++) {
            int start = kv.len, n = t - start;
            rc = pol_model_decode(&m, &kv, ids + start, n, logits + ((size_t)r * b->T + t - 1) * V,
                                  err, ERRCAP);
        }
        pol_kv_deinit(&kv);
    }
    if (rc == 0) {
        pol_st_entry e = f32_entry("logits", logits, 3, b->B, b->T, (int64_t)V);
        rc = pol_st_write(out, &e, 1, NULL, err, ERRCAP);
    }
    free(logits);
    pol_model_deinit(&m);
    return rc;
}

/* One forward + backward of the batch's loss on a loaded model (grads zeroed first). */
static int loss_and_grads(pol_model *m, pol_fwd *f, const batch *b, double *loss, char *err)
{
    pol_model_zero_grad(m);
    if (m->head == POL_HEAD_LM) {
        return pol_model_forward(m, f, b->ids, b->pos, b->doc, err, ERRCAP) ||
                       pol_model_backward(m, f, b->targets, b->weights, loss, err, ERRCAP)
                   ? -1
                   : 0;
    }
    float *dv = malloc(f->N * sizeof *dv);
    int rc = !dv || pol_critic_forward(m, f, b->ids, b->pos, b->doc, err, ERRCAP) ? -1 : 0;
    if (rc == 0) {
        *loss = pol_critic_value_loss(f->values, b->values, b->weights, f->N, dv);
        rc = pol_critic_backward(m, f, dv, err, ERRCAP);
    }
    free(dv);
    return rc;
}

static int check_loss_fields(const batch *b, pol_head head, char *err)
{
    if (!b->weights || (head == POL_HEAD_LM ? !b->targets : !b->values)) {
        snprintf(err, ERRCAP, "batch: needs 'weights' and '%s'",
                 head == POL_HEAD_LM ? "targets" : "values");
        return -1;
    }
    return 0;
}

static int cmd_grads(const char *dir, const batch *b, const char *out, pol_head head, char *err)
{
    pol_model m;
    pol_fwd f = {0};
    int rc = -1;
    double loss = 0;
    if (check_loss_fields(b, head, err) != 0 || pol_model_load(&m, dir, head, err, ERRCAP) != 0)
        return -1;
    if (pol_model_grads_init(&m, err, ERRCAP) != 0 ||
        pol_fwd_init(&f, &m, b->B, b->T, true, err, ERRCAP) != 0 ||
        loss_and_grads(&m, &f, b, &loss, err) != 0)
        goto done;
    pol_st_entry extra[2] = {f64_entry("loss", &loss, 1)};
    size_t n_extra = 1;
    if (head == POL_HEAD_VALUE)
        extra[n_extra++] = f32_entry("values", f.values, 2, b->B, b->T, 0);
    rc = pol_model_save_params(&m, &m.g, out, extra, n_extra, err, ERRCAP);
done:
    pol_fwd_deinit(&f);
    pol_model_deinit(&m);
    return rc;
}

static pol_adamw_cfg adamw_cfg_from(int argc, char **argv)
{
    pol_adamw_cfg c = pol_adamw_defaults();
    c.lr = atof(opt(argc, argv, "--lr", "1e-3"));
    c.beta1 = atof(opt(argc, argv, "--beta1", "0.9"));
    c.beta2 = atof(opt(argc, argv, "--beta2", "0.999"));
    c.eps = atof(opt(argc, argv, "--eps", "1e-8"));
    c.weight_decay = atof(opt(argc, argv, "--wd", "0.01"));
    return c;
}

/* Saves model + optimizer as a training checkpoint in scratch and loads both back (what a
 * resumed run does); the lr is restored from the file. */
static int round_trip(pol_model *m, pol_adamw *o, const char *scratch, char *err)
{
    bool lm = m->head == POL_HEAD_LM;
    if (pol_checkpoint_save(scratch, lm ? m : NULL, lm ? o : NULL, lm ? NULL : m, lm ? NULL : o,
                            POL_DT_F32, err, ERRCAP) != 0)
        return -1;
    pol_model_deinit(m);
    pol_adamw_deinit(o);
    if (pol_checkpoint_load(scratch, lm ? m : NULL, lm ? o : NULL, lm ? NULL : m, lm ? NULL : o,
                            err, ERRCAP) != 0)
        return -1;
    return pol_model_grads_init(m, err, ERRCAP);
}

static int cmd_adamw(const char *dir, const batch *b, const char *out, int argc, char **argv,
                     char *err)
{
    pol_head head = flag(argc, argv, "--critic") ? POL_HEAD_VALUE : POL_HEAD_LM;
    int steps = atoi(opt(argc, argv, "--steps", "10"));
    int resume_at = atoi(opt(argc, argv, "--resume-at", "-1"));
    double clip = atof(opt(argc, argv, "--clip", "0"));
    const char *scratch = opt(argc, argv, "--scratch", NULL);
    pol_adamw_cfg c = adamw_cfg_from(argc, argv);
    if (steps < 1 || steps > 1000 || (resume_at >= 0 && !scratch)) {
        snprintf(err, ERRCAP, "adamw: --steps 1..1000; --resume-at needs --scratch");
        return -1;
    }
    if (check_loss_fields(b, head, err) != 0)
        return -1;
    pol_model m;
    pol_fwd f = {0};
    pol_adamw o = {0};
    double losses[1000], norms[1000];
    int rc = -1;
    if (pol_model_load(&m, dir, head, err, ERRCAP) != 0)
        return -1;
    if (pol_model_grads_init(&m, err, ERRCAP) || pol_adamw_init(&o, m.w.n, &c, err, ERRCAP) ||
        pol_fwd_init(&f, &m, b->B, b->T, true, err, ERRCAP))
        goto done;
    for (int s = 0; s < steps; s++) {
        if (s == resume_at && round_trip(&m, &o, scratch, err) != 0)
            goto done;
        if (loss_and_grads(&m, &f, b, &losses[s], err) != 0)
            goto done;
        norms[s] =
            clip > 0 ? pol_clip_grad_norm(m.g.data, m.g.n, clip) : pol_grad_norm(m.g.data, m.g.n);
        pol_adamw_step(&o, m.w.data, m.g.data);
    }
    pol_st_entry extra[2] = {f64_entry("losses", losses, steps),
                             f64_entry("grad_norms", norms, steps)};
    rc = pol_model_save_params(&m, &m.w, out, extra, 2, err, ERRCAP);
done:
    pol_fwd_deinit(&f);
    pol_adamw_deinit(&o);
    pol_model_deinit(&m);
    return rc;
}

static int cmd_critic_init(const char *policy_dir, const char *out_dir, int argc, char **argv,
                           char *err)
{
    pol_model p, c;
    if (pol_model_load(&p, policy_dir, POL_HEAD_LM, err, ERRCAP) != 0)
        return -1;
    int rc = pol_critic_from_policy(&c, &p, strtoull(opt(argc, argv, "--seed", "0"), NULL, 10),
                                    (float)atof(opt(argc, argv, "--std", "0.02")), err, ERRCAP);
    pol_model_deinit(&p);
    if (rc != 0)
        return -1;
    rc = pol_model_save(&c, out_dir, POL_DT_F32, err, ERRCAP);
    pol_model_deinit(&c);
    return rc;
}

static int cmd_save(const char *dir, const char *out_dir, int argc, char **argv, char *err)
{
    const char *dt = opt(argc, argv, "--dtype", "F32");
    int dtype = pol_dtype_parse(dt);
    if (dtype < 0) {
        snprintf(err, ERRCAP, "save: unknown dtype '%s'", dt);
        return -1;
    }
    pol_model m;
    pol_head head = flag(argc, argv, "--critic") ? POL_HEAD_VALUE : POL_HEAD_LM;
    if (pol_model_load(&m, dir, head, err, ERRCAP) != 0)
        return -1;
    int rc = pol_model_save(&m, out_dir, (pol_dtype)dtype, err, ERRCAP);
    pol_model_deinit(&m);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: policy-check logits|decode|grads|adamw|critic|critic-init|save ...\n"
                    "(see tests/policy/policy_check.c)\n");
    return 2;
}

static int run_batch_cmd(const char *cmd, int argc, char **argv, char *err)
{
    batch b;
    if (batch_load(argv[3], &b, err) != 0) {
        batch_free(&b);
        return -1;
    }
    int rc = -1;
    const char *dir = argv[2], *out = argv[4];
    if (!strcmp(cmd, "logits"))
        rc = cmd_logits(dir, &b, out, err);
    else if (!strcmp(cmd, "decode"))
        rc = cmd_decode(dir, &b, out, atoi(opt(argc, argv, "--prefill", "1")), err);
    else if (!strcmp(cmd, "grads"))
        rc = cmd_grads(dir, &b, out, POL_HEAD_LM, err);
    else if (!strcmp(cmd, "critic"))
        rc = cmd_grads(dir, &b, out, POL_HEAD_VALUE, err);
    else if (!strcmp(cmd, "adamw"))
        rc = cmd_adamw(dir, &b, out, argc, argv, err);
    batch_free(&b);
    return rc;
}

int main(int argc, char **argv)
{
    char err[ERRCAP] = "";
    if (argc < 4)
        return usage();
    const char *cmd = argv[1];
    int rc;
    if (!strcmp(cmd, "critic-init"))
        rc = cmd_critic_init(argv[2], argv[3], argc, argv, err);
    else if (!strcmp(cmd, "save"))
        rc = cmd_save(argv[2], argv[3], argc, argv, err);
    else if (argc >= 5 &&
             (!strcmp(cmd, "logits") || !strcmp(cmd, "decode") || !strcmp(cmd, "grads") ||
              !strcmp(cmd, "critic") || !strcmp(cmd, "adamw")))
        rc = run_batch_cmd(cmd, argc, argv, err);
    else
        return usage();
    if (rc != 0) {
        fprintf(stderr, "policy-check %s: %s\n", cmd, err);
        return 1;
    }
    return 0;
}
