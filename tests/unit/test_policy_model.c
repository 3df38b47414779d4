/* Unit tests of the CPU reference model's pieces (policy/model.h, sample.h, adamw.h, critic.h)
 * against values worked out by hand, and a finite-difference check of the backward on a micro
 * model built in memory. (The comparison with HF transformers is tests/policy/test_model.py.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/adamw.h"
#include "policy/critic.h"
#include "policy/model.h"
#include "policy/sample.h"

#define ERRCAP 512

static void assert_near(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("got %.9g, want %.9g (tolerance %g)", got, want, tol);
}

/* ---- building blocks ---- */

static void test_rmsnorm_by_hand(void **state)
{
    (void)state;
    /* mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5 */
    const float x[4] = {1, 2, 3, 4}, w[4] = {1, 0.5f, 2, -1};
    float out[4], rstd;
    pol_rmsnorm(out, &rstd, x, w, 1, 4, 0.0f);
    double s = 1 / sqrt(7.5);
    assert_near(rstd, s, 1e-7);
    assert_near(out[0], 1 * s, 1e-6);
    assert_near(out[1], 0.5 * 2 * s, 1e-6);
    assert_near(out[2], 2 * 3 * s, 1e-6);
    assert_near(out[3], -4 * s, 1e-6);
    /* eps inside the square root */
    pol_rmsnorm(out, &rstd, x, w, 1, 4, 0.5f);
    assert_near(rstd, 1 / sqrt(8.0), 1e-7);
}

static void test_rmsnorm_backward_by_hand(void **state)
{
    (void)state;
    /* n = 2, x = (3, 4): s = 1/sqrt(12.5); y_i = w_i x_i s. With w = 1 and dy = (1, 0):
     * dx_0 = s - x_0^2 s^3 / 2,  dx_1 = -x_0 x_1 s^3 / 2,  dw = dy * x * s */
    const float x[2] = {3, 4}, w[2] = {1, 1}, dy[2] = {1, 0};
    float rstd, y[2], dx[2] = {0, 0}, dw[2] = {0, 0};
    pol_rmsnorm(y, &rstd, x, w, 1, 2, 0.0f);
    pol_rmsnorm_backward(dx, dw, dy, x, &rstd, w, 1, 2);
    double s = 1 / sqrt(12.5);
    assert_near(dx[0], s - 9 * s * s * s / 2, 1e-6);
    assert_near(dx[1], -12 * s * s * s / 2, 1e-6);
    assert_near(dw[0], 3 * s, 1e-6);
    assert_near(dw[1], 0, 1e-7);
}

static void test_rope_rotate_half(void **state)
{
    (void)state;
    /* hd 4: pairs (0, 2) and (1, 3). A quarter turn on the first pair, none on the second:
     * x0' = x0 cos - x2 sin = -3, x2' = x2 cos + x0 sin = 1; x1, x3 unchanged */
    float x[4] = {1, 2, 3, 4};
    const float c1[2] = {0, 1}, s1[2] = {1, 0};
    pol_rope_apply(x, 4, c1, s1, 1);
    assert_near(x[0], -3, 1e-7);
    assert_near(x[1], 2, 1e-7);
    assert_near(x[2], 1, 1e-7);
    assert_near(x[3], 4, 1e-7);
    /* sign -1 is the inverse rotation */
    pol_rope_apply(x, 4, c1, s1, -1);
    assert_near(x[0], 1, 1e-7);
    assert_near(x[2], 3, 1e-7);
    /* a general angle on the second pair */
    float y[4] = {0, 1, 0, 2};
    const float c2[2] = {1, cosf(0.5f)}, s2[2] = {0, sinf(0.5f)};
    pol_rope_apply(y, 4, c2, s2, 1);
    assert_near(y[1], cos(0.5) - 2 * sin(0.5), 1e-6);
    assert_near(y[3], 2 * cos(0.5) + sin(0.5), 1e-6);
}

static pol_config micro_config(void)
{
    pol_config c;
    memset(&c, 0, sizeof c);
    c.arch = POL_ARCH_QWEN3;
    c.vocab_size = 11;
    c.hidden = 8;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.head_dim = 6;
    c.ffn = 10;
    c.max_pos = 64;
    c.rms_eps = 1e-6f;
    c.rope_theta = 10000;
    c.attn_bias = true; /* both extras at once: every code path of the block */
    c.qk_norm = true;
    c.bos_id = -1;
    return c;
}

static void test_rope_inv_freq(void **state)
{
    (void)state;
    pol_config c = micro_config();
    c.head_dim = 4;
    float inv[2];
    pol_rope_inv_freq(&c, inv); /* theta^(-2i/d): 1, 10000^-0.5 */
    assert_near(inv[0], 1, 1e-7);
    assert_near(inv[1], 0.01, 1e-8);
    /* llama3: original context 64, factors 1 and 4 -> wavelengths above 64 are divided by 8,
     * below 16 kept; inv[1]'s wavelength is 628 */
    c.rope_type = POL_ROPE_LLAMA3;
    c.rope_factor = 8;
    c.rope_low_freq = 1;
    c.rope_high_freq = 4;
    c.rope_orig_max_pos = 64;
    pol_rope_inv_freq(&c, inv);
    assert_near(inv[0], 1, 1e-7);
    assert_near(inv[1], 0.01 / 8, 1e-9);
    /* a wavelength of 32 (theta = (32 / 2pi)^2) is inside the band: smooth = (64/32 - 1) / 3,
     * inv' = (1 - smooth) inv / 8 + smooth inv = inv * 10/24 */
    c.rope_theta = pow(32 / (2 * M_PI), 2);
    pol_rope_inv_freq(&c, inv);
    assert_near(inv[1], 2 * M_PI / 32 * 10.0 / 24.0, 1e-6);
}

static void test_log_softmax(void **state)
{
    (void)state;
    const float x[3] = {0, logf(2), logf(3)};
    float out[3];
    float lse = pol_log_softmax(out, x, 3);
    assert_near(lse, log(6), 1e-6);
    assert_near(out[0], log(1.0 / 6), 1e-6);
    assert_near(out[1], log(2.0 / 6), 1e-6);
    assert_near(out[2], log(3.0 / 6), 1e-6);
    /* large logits do not overflow */
    const float big[2] = {1000, 1000};
    pol_log_softmax(out, big, 2);
    assert_near(out[0], log(0.5), 1e-6);
}

static void test_linear_and_backward(void **state)
{
    (void)state;
    /* W = [[1, 2], [3, 4], [5, 6]], b = (1, 0, -1), x = (1, -1) -> y = (-1 + 1, -1, -1 - 1) */
    const float W[6] = {1, 2, 3, 4, 5, 6}, b[3] = {1, 0, -1}, x[2] = {1, -1};
    float y[3];
    pol_linear(y, x, W, b, 1, 2, 3);
    assert_near(y[0], 0, 1e-7);
    assert_near(y[1], -1, 1e-7);
    assert_near(y[2], -2, 1e-7);
    const float dy[3] = {1, 0, 2};
    float dx[2] = {0, 0}, dW[6] = {0}, db[3] = {0};
    pol_linear_backward(dx, dW, db, dy, x, W, 1, 2, 3);
    assert_near(dx[0], 1 + 10, 1e-6); /* dy W */
    assert_near(dx[1], 2 + 12, 1e-6);
    assert_near(dW[0], 1, 1e-7); /* dy^T x */
    assert_near(dW[1], -1, 1e-7);
    assert_near(dW[4], 2, 1e-7);
    assert_near(dW[5], -2, 1e-7);
    assert_near(db[2], 2, 1e-7);
}

/* ---- AdamW ---- */

static void test_adamw_one_step_by_hand(void **state)
{
    (void)state;
    pol_adamw o;
    char err[ERRCAP];
    pol_adamw_cfg c = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    assert_int_equal(pol_adamw_init(&o, 2, &c, err, ERRCAP), 0);
    float p[2] = {1, -2}, g[2] = {0.5f, 0};
    pol_adamw_step(&o, p, g);
    /* p0: decay 1 * (1 - 0.01) = 0.99; m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25;
     * 0.99 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.89. p1: zero gradient, decay only: -1.98 */
    assert_near(p[0], 0.89, 1e-6);
    assert_near(p[1], -1.98, 1e-6);
    assert_int_equal(o.step, 1);
    /* a second step with the same gradient: m = 0.095, v = 0.00049975;
     * m^ = 0.095 / 0.19 = 0.5, v^ = 0.00049975 / 0.001999 = 0.25 -> the same unit step */
    pol_adamw_step(&o, p, g);
    assert_near(p[0], 0.89 * 0.99 - 0.1, 1e-5);
    /* weight decay skipped where the mask says so */
    uint8_t skip[2] = {0, 1};
    o.no_decay = skip;
    float before = p[1];
    pol_adamw_step(&o, p, g);
    assert_near(p[1], before, 1e-7);
    pol_adamw_deinit(&o);
}

static void test_clip_grad_norm(void **state)
{
    (void)state;
    float g[2] = {3, 4};
    assert_near(pol_grad_norm(g, 2), 5, 1e-12);
    assert_near(pol_clip_grad_norm(g, 2, 10), 5, 1e-12); /* under the limit: untouched */
    assert_near(g[0], 3, 0);
    assert_near(pol_clip_grad_norm(g, 2, 1), 5, 1e-12);
    assert_near(g[0], 3 / (5 + 1e-6), 1e-7);
    assert_near(g[1], 4 / (5 + 1e-6), 1e-7);
}

static void test_adamw_rejects_bad_config(void **state)
{
    (void)state;
    pol_adamw o;
    char err[ERRCAP] = "";
    pol_adamw_cfg c = pol_adamw_defaults();
    c.beta2 = 1.0;
    assert_int_equal(pol_adamw_init(&o, 4, &c, err, ERRCAP), -1);
    assert_non_null(strstr(err, "adamw"));
}

/* ---- sampling ---- */

static void test_top_k_mask(void **state)
{
    (void)state;
    const float logits[5] = {1, 2, 3, 4, 5};
    float probs[5];
    int scratch[5];
    pol_sample_cfg c = {.temperature = 1, .top_k = 2, .top_p = 1};
    assert_int_equal(pol_sample_probs(logits, 5, &c, probs, scratch), 0);
    assert_near(probs[0] + probs[1] + probs[2], 0, 0);
    assert_near(probs[4], 1 / (1 + exp(-1)), 1e-6);
    assert_near(probs[3], exp(-1) / (1 + exp(-1)), 1e-6);
    /* temperature 2 flattens: the ratio becomes e^(1/2) */
    c.temperature = 2;
    pol_sample_probs(logits, 5, &c, probs, scratch);
    assert_near(probs[4] / probs[3], exp(0.5), 1e-5);
}

static void test_top_p_mask(void **state)
{
    (void)state;
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    float probs[4];
    int scratch[4];
    /* mass above each token: 0, 0.5, 0.8, 0.95: with top_p 0.7 the first two stay */
    pol_sample_cfg c = {.temperature = 1, .top_k = 0, .top_p = 0.7f};
    assert_int_equal(pol_sample_probs(logits, 4, &c, probs, scratch), 0);
    assert_near(probs[0], 0.5 / 0.8, 1e-6);
    assert_near(probs[1], 0.3 / 0.8, 1e-6);
    assert_near(probs[2] + probs[3], 0, 0);
    /* top_p 0.5: the first token alone reaches it (HF keeps tokens while the mass above < p) */
    c.top_p = 0.5f;
    pol_sample_probs(logits, 4, &c, probs, scratch);
    assert_near(probs[0], 1, 1e-6);
    /* a tiny top_p still keeps one token */
    c.top_p = 1e-6f;
    pol_sample_probs(logits, 4, &c, probs, scratch);
    assert_near(probs[0], 1, 1e-6);
    /* greedy: one-hot on the arg max */
    c.temperature = 0;
    pol_sample_probs(logits, 4, &c, probs, scratch);
    assert_near(probs[0], 1, 0);
    assert_near(probs[1] + probs[2] + probs[3], 0, 0);
}

static void draw_many(uint64_t seed, int *out, int n)
{
    const float logits[6] = {0.1f, 0.5f, 0.2f, 0.9f, 0.3f, 0.4f};
    float probs[6];
    int scratch[6];
    pol_sample_cfg c = {.temperature = 1, .top_k = 0, .top_p = 1};
    pol_rng rng;
    pol_rng_seed(&rng, seed);
    for (int i = 0; i < n; i++)
        out[i] = pol_sample(logits, 6, &c, &rng, probs, scratch);
}

static void test_sampling_is_seeded(void **state)
{
    (void)state;
    int a[200], b[200], c[200];
    draw_many(42, a, 200);
    draw_many(42, b, 200);
    draw_many(43, c, 200);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
}

static void test_sampling_frequencies(void **state)
{
    (void)state;
    const float logits[3] = {logf(0.5f), logf(0.25f), logf(0.25f)};
    float probs[3];
    int scratch[3], count[3] = {0, 0, 0};
    pol_sample_cfg c = {.temperature = 1, .top_k = 0, .top_p = 1};
    pol_rng rng;
    pol_rng_seed(&rng, 7);
    for (int i = 0; i < 20000; i++)
        count[pol_sample(logits, 3, &c, &rng, probs, scratch)]++;
    assert_near(count[0] / 20000.0, 0.5, 0.02);
    assert_near(count[1] / 20000.0, 0.25, 0.02);
}

static void test_padded_rows_never_sampled(void **state)
{
    (void)state;
    /* rows 6..9 stand for embedding padding past the tokenizer: huge logits, never chosen */
    float logits[10] = {0, 1, 0.5f, 0.2f, 0.1f, 0.3f, 50, 60, 70, 80};
    float probs[10];
    int scratch[10];
    pol_rng rng;
    pol_rng_seed(&rng, 1);
    pol_sample_cfg hot = {.temperature = 5, .top_k = 0, .top_p = 1}, greedy = {0};
    for (int i = 0; i < 2000; i++)
        assert_in_range(pol_sample(logits, 6, &hot, &rng, probs, scratch), 0, 5);
    assert_int_equal(pol_sample(logits, 6, &greedy, NULL, probs, scratch), 1);
    logits[2] = NAN;
    assert_int_equal(pol_sample(logits, 6, &hot, &rng, probs, scratch), -1);
}

/* ---- the micro model: forward consistency and finite differences ---- */

typedef struct {
    pol_model m;
    pol_fwd f;
    int32_t ids[8], targets[8], doc[8], pos[8];
    float weights[8];
} micro;

static void micro_init(micro *t, pol_head head, bool tied)
{
    char err[ERRCAP];
    pol_config c = micro_config();
    c.tie_embeddings = tied;
    assert_int_equal(pol_model_init(&t->m, &c, head, err, ERRCAP), 0);
    pol_model_init_random(&t->m, 1234, 0.4f);
    assert_int_equal(pol_model_grads_init(&t->m, err, ERRCAP), 0);
    /* two rows of 4; the second packs two documents (positions restart at the boundary) */
    const int32_t ids[8] = {1, 5, 9, 2, 3, 3, 7, 10};
    const int32_t doc[8] = {0, 0, 0, 0, 0, 0, 1, 1}, pos[8] = {0, 1, 2, 3, 0, 1, 0, 1};
    const int32_t targets[8] = {5, 9, 2, -1, 3, 4, 10, 0};
    const float weights[8] = {0.3f, 1, 0.7f, 0, 0.5f, 0, 1.2f, 0.9f};
    memcpy(t->ids, ids, sizeof ids);
    memcpy(t->doc, doc, sizeof doc);
    memcpy(t->pos, pos, sizeof pos);
    memcpy(t->targets, targets, sizeof targets);
    memcpy(t->weights, weights, sizeof weights);
    assert_int_equal(pol_fwd_init(&t->f, &t->m, 2, 4, true, err, ERRCAP), 0);
}

static void micro_free(micro *t)
{
    pol_fwd_deinit(&t->f);
    pol_model_deinit(&t->m);
}

static double micro_loss(micro *t)
{
    char err[ERRCAP];
    assert_int_equal(pol_model_forward(&t->m, &t->f, t->ids, t->pos, t->doc, err, ERRCAP), 0);
    if (t->m.head == POL_HEAD_VALUE) {
        const float targets[8] = {0.5f, -1, 2, 0, 1, 1, -0.5f, 0.25f};
        return pol_critic_value_loss(t->f.values, targets, t->weights, 8, NULL);
    }
    float lp[8];
    assert_int_equal(pol_model_logprobs(&t->m, &t->f, t->targets, lp, err, ERRCAP), 0);
    double loss = 0;
    for (int i = 0; i < 8; i++)
        loss -= t->targets[i] >= 0 ? (double)t->weights[i] * lp[i] : 0;
    return loss;
}

static void micro_backward(micro *t, double *loss)
{
    char err[ERRCAP];
    pol_model_zero_grad(&t->m);
    if (t->m.head == POL_HEAD_VALUE) {
        const float targets[8] = {0.5f, -1, 2, 0, 1, 1, -0.5f, 0.25f};
        float dv[8];
        assert_int_equal(pol_critic_forward(&t->m, &t->f, t->ids, t->pos, t->doc, err, ERRCAP), 0);
        *loss = pol_critic_value_loss(t->f.values, targets, t->weights, 8, dv);
        assert_int_equal(pol_critic_backward(&t->m, &t->f, dv, err, ERRCAP), 0);
        return;
    }
    assert_int_equal(pol_model_forward(&t->m, &t->f, t->ids, t->pos, t->doc, err, ERRCAP), 0);
    assert_int_equal(pol_model_backward(&t->m, &t->f, t->targets, t->weights, loss, err, ERRCAP),
                     0);
}

/* Central differences on a few elements of every tensor vs the analytic gradient. */
static void check_gradients(micro *t)
{
    double loss;
    micro_backward(t, &loss);
    assert_near(loss, micro_loss(t), 1e-5 * fabs(loss) + 1e-6);
    /* small enough for the truncation error (h^2/6 times the third derivative) of the curved
     * critic loss, large enough over the rounding of the fp32 forward */
    const float h = 3e-3f;
    for (size_t k = 0; k < t->m.n_tensors; k++) {
        const pol_param_info *p = &t->m.tensors[k];
        for (size_t j = 0; j < p->numel; j += p->numel / 3 + 1) {
            float *w = &t->m.w.data[p->offset + j];
            float saved = *w;
            *w = saved + h;
            double up = micro_loss(t);
            *w = saved - h;
            double down = micro_loss(t);
            *w = saved;
            double fd = (up - down) / (2 * h), an = t->m.g.data[p->offset + j];
            if (fabs(fd - an) > 2e-2 * fabs(fd) + 2e-3)
                fail_msg("%s[%zu]: analytic %.6g, finite difference %.6g", p->name, j, an, fd);
        }
    }
}

static void test_finite_differences_untied(void **state)
{
    (void)state;
    micro t;
    micro_init(&t, POL_HEAD_LM, false);
    check_gradients(&t);
    micro_free(&t);
}

static void test_finite_differences_tied(void **state)
{
    (void)state;
    micro t;
    micro_init(&t, POL_HEAD_LM, true);
    assert_ptr_equal(t.m.w.lm_head, t.m.w.embed);
    check_gradients(&t);
    micro_free(&t);
}

static void test_finite_differences_critic(void **state)
{
    (void)state;
    micro t;
    micro_init(&t, POL_HEAD_VALUE, false);
    assert_non_null(pol_model_find(&t.m, "score.weight"));
    assert_null(pol_model_find(&t.m, "lm_head.weight"));
    check_gradients(&t);
    micro_free(&t);
}

/* The KV-cache decode gives the batch forward's logits, token by token. */
static void test_decode_matches_forward(void **state)
{
    (void)state;
    micro t;
    char err[ERRCAP];
    micro_init(&t, POL_HEAD_LM, false);
    const int32_t ids[4] = {1, 5, 9, 2};
    pol_fwd f;
    assert_int_equal(pol_fwd_init(&f, &t.m, 1, 4, false, err, ERRCAP), 0);
    assert_int_equal(pol_model_forward(&t.m, &f, ids, NULL, NULL, err, ERRCAP), 0);
    pol_kv kv;
    assert_int_equal(pol_kv_init(&kv, &t.m, 4, err, ERRCAP), 0);
    float logits[11];
    assert_int_equal(pol_model_decode(&t.m, &kv, ids, 2, logits, err, ERRCAP), 0);
    for (int v = 0; v < 11; v++)
        assert_near(logits[v], f.logits[1 * 11 + v], 1e-5);
    for (int i = 2; i < 4; i++) {
        assert_int_equal(pol_model_decode(&t.m, &kv, &ids[i], 1, logits, err, ERRCAP), 0);
        for (int v = 0; v < 11; v++)
            assert_near(logits[v], f.logits[i * 11 + v], 1e-5);
    }
    /* the cache is full: one more token is refused, not written past the end */
    assert_int_equal(pol_model_decode(&t.m, &kv, ids, 1, logits, err, ERRCAP), -1);
    assert_non_null(strstr(err, "cache"));
    pol_kv_deinit(&kv);
    pol_fwd_deinit(&f);
    micro_free(&t);
}

static void test_bad_inputs_are_errors(void **state)
{
    (void)state;
    micro t;
    char err[ERRCAP] = "";
    micro_init(&t, POL_HEAD_LM, false);
    int32_t ids[8] = {1, 2, 3, 11, 0, 0, 0, 0}; /* 11 is past the vocabulary */
    assert_int_equal(pol_model_forward(&t.m, &t.f, ids, NULL, NULL, err, ERRCAP), -1);
    assert_non_null(strstr(err, "outside the vocabulary"));
    pol_fwd inference;
    assert_int_equal(pol_fwd_init(&inference, &t.m, 2, 4, false, err, ERRCAP), 0);
    ids[3] = 1;
    assert_int_equal(pol_model_forward(&t.m, &inference, ids, NULL, NULL, err, ERRCAP), 0);
    double loss;
    assert_int_equal(pol_model_backward(&t.m, &inference, t.targets, t.weights, &loss, err, ERRCAP),
                     -1);
    assert_non_null(strstr(err, "activations"));
    pol_fwd_deinit(&inference);
    pol_config c = micro_config();
    c.n_kv_heads = 3; /* does not divide the heads */
    pol_model m;
    assert_int_equal(pol_model_init(&m, &c, POL_HEAD_LM, err, ERRCAP), -1);
    assert_non_null(strstr(err, "heads"));
    assert_int_equal(pol_model_load(&m, "/nonexistent/kgym-model", POL_HEAD_LM, err, ERRCAP), -1);
    assert_non_null(strstr(err, "config.json"));
    micro_free(&t);
}

static void test_critic_from_policy(void **state)
{
    (void)state;
    micro t;
    char err[ERRCAP];
    micro_init(&t, POL_HEAD_LM, true);
    pol_model critic;
    assert_int_equal(pol_critic_from_policy(&critic, &t.m, 5, 0.1f, err, ERRCAP), 0);
    const pol_param_info *p = pol_model_find(&critic, "model.layers.1.mlp.down_proj.weight");
    const pol_param_info *q = pol_model_find(&t.m, "model.layers.1.mlp.down_proj.weight");
    assert_memory_equal(critic.w.data + p->offset, t.m.w.data + q->offset,
                        p->numel * sizeof(float));
    assert_true(critic.w.score_w[0] != 0);
    assert_true(critic.w.score_b[0] == 0);
    pol_model again;
    assert_int_equal(pol_critic_from_policy(&again, &t.m, 5, 0.1f, err, ERRCAP), 0);
    assert_memory_equal(again.w.score_w, critic.w.score_w, 8 * sizeof(float)); /* seeded */
    pol_model_deinit(&again);
    pol_model_deinit(&critic);
    micro_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_by_hand),
        cmocka_unit_test(test_rmsnorm_backward_by_hand),
        cmocka_unit_test(test_rope_rotate_half),
        cmocka_unit_test(test_rope_inv_freq),
        cmocka_unit_test(test_log_softmax),
        cmocka_unit_test(test_linear_and_backward),
        cmocka_unit_test(test_adamw_one_step_by_hand),
        cmocka_unit_test(test_clip_grad_norm),
        cmocka_unit_test(test_adamw_rejects_bad_config),
        cmocka_unit_test(test_top_k_mask),
        cmocka_unit_test(test_top_p_mask),
        cmocka_unit_test(test_sampling_is_seeded),
        cmocka_unit_test(test_sampling_frequencies),
        cmocka_unit_test(test_padded_rows_never_sampled),
        cmocka_unit_test(test_finite_differences_untied),
        cmocka_unit_test(test_finite_differences_tied),
        cmocka_unit_test(test_finite_differences_critic),
        cmocka_unit_test(test_decode_matches_forward),
        cmocka_unit_test(test_bad_inputs_are_errors),
        cmocka_unit_test(test_critic_from_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
