/* The GPU model's backward (see model_gpu.h), in the order of policy/model_backward.c: a head's
 * backward gives dL/dh, then the trunk runs the layers in reverse from the activations the train
 * forward kept, or, with recompute, from the ones pg_layer_forward writes again into the shared
 * layer buffer from the layer's kept input right before the layer's backward. Activation
 * gradients are bf16; weight gradients are fp32 and
 * ACCUMULATED (kg_matmul_f32out with beta = 1, and the kernels' += on norm weights, biases and
 * the embedding), so that micro-batches add up until pol_gpu_zero_grad.
 *
 * The residual stream's gradient d_res flows down the layers; each branch's contribution (a norm's
 * input gradient, written by kg_rmsnorm_backward into d_xn) is added into it by kg_add. Scratch
 * buffers are shared by all layers: only the forward's activations are per layer. */
#include "policy/cuda/model_gpu_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

/* d_res (dL/d layer output) -> d_res (dL/d x_mid), weight gradients of the MLP */
static int mlp_backward(pg_run *r, const pg_layer_off *o, const pg_layer_acts *A)
{
    pol_gpu *g = r->g;
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    kg_matmul_ctx *mm = g->mm;
    int N = a->N;
    return pg_ck(r,
                 kg_matmul(mm, a->d_act, a->d_res, pg_w(g, o->w_down), NULL, N, d->F, d->D, 0, 0,
                           0.0f, s),
                 "down_proj dx") ||
           pg_ck(r,
                 kg_matmul_f32out(mm, pg_g(g, o->w_down), a->d_res, A->act, d->D, d->F, N, 1, 0,
                                  1.0f, s),
                 "down_proj dW") ||
           pg_ck(r,
                 kg_swiglu_backward(a->d_gate, a->d_up, a->d_act, A->gate, A->up, (size_t)N * d->F,
                                    s),
                 "swiglu") ||
           pg_ck(r,
                 kg_matmul(mm, a->d_xn, a->d_gate, pg_w(g, o->w_gate), NULL, N, d->D, d->F, 0, 0,
                           0.0f, s),
                 "gate_proj dx") ||
           pg_ck(r,
                 kg_matmul(mm, a->d_xn, a->d_up, pg_w(g, o->w_up), NULL, N, d->D, d->F, 0, 0, 1.0f,
                           s),
                 "up_proj dx") ||
           pg_ck(r,
                 kg_matmul_f32out(mm, pg_g(g, o->w_gate), a->d_gate, A->xn2, d->F, d->D, N, 1, 0,
                                  1.0f, s),
                 "gate_proj dW") ||
           pg_ck(r,
                 kg_matmul_f32out(mm, pg_g(g, o->w_up), a->d_up, A->xn2, d->F, d->D, N, 1, 0, 1.0f,
                                  s),
                 "up_proj dW") ||
           pg_ck(r,
                 kg_rmsnorm_backward(a->d_xn, pg_g(g, o->mlp_norm), a->d_xn, A->x_mid, A->rstd2,
                                     pg_w(g, o->mlp_norm), N, d->D, s),
                 "post_attention_layernorm") ||
           pg_ck(r, kg_add(a->d_res, a->d_xn, (size_t)N * d->D, s), "residual add");
}

/* dq, dk (after RoPE) -> the projections' gradients: RoPE undone, then the q/k norm's backward
 * (in place), then the biases' gradients */
static int qk_backward(pg_run *r, const pg_layer_off *o, const pg_layer_acts *A)
{
    pol_gpu *g = r->g;
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    int N = a->N;
    if (pg_ck(r, kg_rope(a->dq, a->pos, g->inv_freq, N, d->H, d->hd, -1, s), "q rope dx") ||
        pg_ck(r, kg_rope(a->dk, a->pos, g->inv_freq, N, d->KV, d->hd, -1, s), "k rope dx"))
        return -1;
    if (g->cfg.qk_norm &&
        (pg_ck(r,
               kg_rmsnorm_backward(a->dq, pg_g(g, o->q_norm), a->dq, A->q_raw, A->q_rstd,
                                   pg_w(g, o->q_norm), N * d->H, d->hd, s),
               "q_norm") ||
         pg_ck(r,
               kg_rmsnorm_backward(a->dk, pg_g(g, o->k_norm), a->dk, A->k_raw, A->k_rstd,
                                   pg_w(g, o->k_norm), N * d->KV, d->hd, s),
               "k_norm")))
        return -1;
    if (!g->cfg.attn_bias)
        return 0;
    return pg_ck(r, kg_bias_grad(pg_g(g, o->bq), a->dq, N, (int)d->qd, s), "q_proj bias") ||
           pg_ck(r, kg_bias_grad(pg_g(g, o->bk), a->dk, N, (int)d->kvd, s), "k_proj bias") ||
           pg_ck(r, kg_bias_grad(pg_g(g, o->bv), a->dv, N, (int)d->kvd, s), "v_proj bias");
}

/* dq/dk/dv -> d_xn (through the three projections) and their weight gradients; then the input
 * norm's backward and the residual add */
static int qkv_proj_backward(pg_run *r, const pg_layer_off *o, const pg_layer_acts *A)
{
    pol_gpu *g = r->g;
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    kg_matmul_ctx *mm = g->mm;
    int N = a->N, qd = (int)d->qd, kvd = (int)d->kvd;
    return pg_ck(r, kg_matmul(mm, a->d_xn, a->dq, pg_w(g, o->wq), NULL, N, d->D, qd, 0, 0, 0.0f, s),
                 "q_proj dx") ||
           pg_ck(r,
                 kg_matmul(mm, a->d_xn, a->dk, pg_w(g, o->wk), NULL, N, d->D, kvd, 0, 0, 1.0f, s),
                 "k_proj dx") ||
           pg_ck(r,
                 kg_matmul(mm, a->d_xn, a->dv, pg_w(g, o->wv), NULL, N, d->D, kvd, 0, 0, 1.0f, s),
                 "v_proj dx") ||
           pg_ck(r, kg_matmul_f32out(mm, pg_g(g, o->wq), a->dq, A->xn1, qd, d->D, N, 1, 0, 1.0f, s),
                 "q_proj dW") ||
           pg_ck(r,
                 kg_matmul_f32out(mm, pg_g(g, o->wk), a->dk, A->xn1, kvd, d->D, N, 1, 0, 1.0f, s),
                 "k_proj dW") ||
           pg_ck(r,
                 kg_matmul_f32out(mm, pg_g(g, o->wv), a->dv, A->xn1, kvd, d->D, N, 1, 0, 1.0f, s),
                 "v_proj dW") ||
           pg_ck(r,
                 kg_rmsnorm_backward(a->d_xn, pg_g(g, o->attn_norm), a->d_xn, A->x_in, A->rstd1,
                                     pg_w(g, o->attn_norm), N, d->D, s),
                 "input_layernorm") ||
           pg_ck(r, kg_add(a->d_res, a->d_xn, (size_t)N * d->D, s), "residual add");
}

/* d_res (dL/d x_mid) -> d_res (dL/d layer input), weight gradients of the attention block */
static int attn_backward(pg_run *r, const pg_layer_off *o, const pg_layer_acts *A)
{
    pol_gpu *g = r->g;
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    int N = a->N;
    float scale = 1.0f / sqrtf((float)d->hd);
    return pg_ck(r,
                 kg_matmul(g->mm, a->d_att, a->d_res, pg_w(g, o->wo), NULL, N, (int)d->qd, d->D, 0,
                           0, 0.0f, s),
                 "o_proj dx") ||
           pg_ck(r,
                 kg_matmul_f32out(g->mm, pg_g(g, o->wo), a->d_res, A->att, d->D, (int)d->qd, N, 1,
                                  0, 1.0f, s),
                 "o_proj dW") ||
           pg_ck(r,
                 kg_attention_backward(a->dq, a->dk, a->dv, a->d_att, A->att, A->lse, A->q, A->k,
                                       A->v, a->doc_start, N, d->H, d->KV, d->hd, scale, s),
                 "attention") ||
           qk_backward(r, o, A) || qkv_proj_backward(r, o, A);
}

/* Layer l's activations again, from its kept input into the shared buffer A, by the forward's
 * own code (bit for bit the first forward's); its output is not needed (the next layer's input is
 * kept), so the down projection is skipped. Errors name the recompute. */
static int recompute_layer(pg_run *r, int l, pg_layer_acts *A)
{
    const char *phase = r->phase;
    r->phase = "backward (recompute)";
    int rc = pg_layer_forward(r, l, A, NULL);
    r->phase = phase;
    return rc;
}

int pg_trunk_backward(pg_run *r)
{
    pol_gpu *g = r->g;
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    r->layer = -1;
    /* dh sits in d_xn; the final norm's input gradient starts the residual stream's */
    if (pg_ck(r,
              kg_rmsnorm_backward(a->d_res, pg_g(g, g->final_norm), a->d_xn, a->x_final, a->rstd_f,
                                  pg_w(g, g->final_norm), a->N, d->D, g->stream),
              "model.norm"))
        return -1;
    for (int l = d->L - 1; l >= 0; l--) {
        pg_layer_acts *A = pg_layer_acts_for(a, l);
        if (a->recompute && recompute_layer(r, l, A) != 0)
            return -1;
        r->layer = l;
        if (mlp_backward(r, &g->lo[l], A) || attn_backward(r, &g->lo[l], A))
            return -1;
    }
    r->layer = -1;
    return pg_ck(
        r, kg_embed_backward(pg_g(g, g->embed), a->d_res, a->ids, a->N, d->D, d->V, g->stream),
        "embed_tokens");
}

/* what every backward needs: a training model and a train forward to go back through */
static int ready(pg_run *r, pol_head head)
{
    pol_gpu *g = r->g;
    const char *why = NULL;
    if (g->head != head)
        why = head == POL_HEAD_LM ? "the model has no LM head" : "the model has no value head";
    else if (!g->training)
        why = "the model was created without training state";
    else if (!g->fwd_valid)
        why = "no forward to go back through";
    else if (!g->a.train)
        why = "the last forward kept no activations";
    return why ? text_fail(r->err, r->errcap, "model_gpu %s: %s", r->phase, why) : 0;
}

/* The kernels' weights from the API's: the kernel's backward gives the gradient of
 * +sum (w_logp logp + w_ent H), ours is of L = -sum (...), so both are negated; masked tokens
 * (target < 0) get 0. host holds 2N floats. */
static int loss_weights(pg_run *r, const int32_t *targets, const float *w_logp, const float *w_ent,
                        float *host)
{
    int N = r->g->a.N;
    for (int i = 0; i < N; i++) {
        if (!isfinite(w_logp[i]) || (w_ent && !isfinite(w_ent[i])))
            return text_fail(r->err, r->errcap, "model_gpu %s: token %d has a weight of %g / %g",
                             r->phase, i, (double)w_logp[i], w_ent ? (double)w_ent[i] : 0.0);
        bool masked = targets[i] < 0;
        host[i] = masked ? 0.0f : -w_logp[i];
        host[N + i] = masked || !w_ent ? 0.0f : -w_ent[i];
    }
    return 0;
}

/* -sum over unmasked tokens of (w_logp logp + w_ent H), in double */
static double lm_loss(const int32_t *targets, const float *w_logp, const float *w_ent,
                      const float *logp, const float *ent, int N)
{
    double loss = 0;
    for (int i = 0; i < N; i++)
        if (targets[i] >= 0)
            loss -= (double)w_logp[i] * logp[i] + (w_ent ? (double)w_ent[i] * ent[i] : 0.0);
    return loss;
}

/* dL/dlogits (the fused log-softmax backward), then dh = dlogits W_lm into d_xn and the LM
 * head's weight gradient (the embedding's, when tied) */
static int lm_head_backward(pg_run *r, bool entropy)
{
    pol_gpu *g = r->g;
    pg_acts *a = &g->a;
    const pol_dims *d = &g->d;
    cudaStream_t s = g->stream;
    int N = a->N;
    return pg_ck(r,
                 kg_logprob_forward(a->logp, entropy ? a->ent : NULL, a->logits, a->targets, N,
                                    d->V, d->V, s),
                 "log-softmax") ||
           pg_ck(r,
                 kg_logprob_backward(a->dlogits, a->logits, a->targets, a->w_logp,
                                     entropy ? a->w_ent : NULL, N, d->V, d->V, s),
                 "log-softmax backward") ||
           pg_ck(r,
                 kg_matmul(g->mm, a->d_xn, a->dlogits, pg_w(g, g->lm_head), NULL, N, d->D, d->V, 0,
                           0, 0.0f, s),
                 "lm_head dx") ||
           pg_ck(r,
                 kg_matmul_f32out(g->mm, pg_g(g, g->lm_head), a->dlogits, a->h, d->V, d->D, N, 1, 0,
                                  1.0f, s),
                 "lm_head dW");
}

int pol_gpu_backward(pol_gpu *g, const int32_t *targets, const float *w_logp, const float *w_ent,
                     double *loss, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "backward", -1};
    if (ready(&r, POL_HEAD_LM) != 0)
        return -1;
    pg_acts *a = &g->a;
    int N = a->N;
    float *host = malloc(4 * (size_t)N * sizeof *host); /* kernel weights [2N], logp, entropy */
    if (!host)
        return text_fail(err, errcap, "model_gpu backward: out of host memory");
    float *logp = host + 2 * N, *ent = host + 3 * N;
    bool failed = loss_weights(&r, targets, w_logp, w_ent, host) ||
                  pg_upload_targets(&r, targets) ||
                  pg_to_device(&r, a->w_logp, host, N, "uploading the weights") ||
                  pg_to_device(&r, a->w_ent, host + N, N, "uploading the weights") ||
                  lm_head_backward(&r, w_ent != NULL) || pg_trunk_backward(&r) ||
                  pg_to_host(&r, logp, a->logp, N, "copying the log-probs") ||
                  (w_ent && pg_to_host(&r, ent, a->ent, N, "copying the entropies")) || pg_sync(&r);
    if (!failed)
        *loss = lm_loss(targets, w_logp, w_ent, logp, ent, N);
    else
        cudaStreamSynchronize(g->stream); /* no copy may still use host */
    free(host);
    return failed ? -1 : 0;
}

int pol_gpu_backward_value(pol_gpu *g, const float *dvalues, char *err, size_t errcap)
{
    pg_run r = {g, err, errcap, "backward_value", -1};
    if (ready(&r, POL_HEAD_VALUE) != 0)
        return -1;
    pg_acts *a = &g->a;
    for (int i = 0; i < a->N; i++)
        if (!isfinite(dvalues[i]))
            return text_fail(err, errcap, "model_gpu backward_value: token %d has dvalue %g", i,
                             (double)dvalues[i]);
    bool failed =
        pg_to_device(&r, a->dvalues, dvalues, a->N, "uploading dvalues") ||
        pg_ck(&r,
              kg_value_head_backward(a->d_xn, pg_g(g, g->score_w), pg_g(g, g->score_b), a->dvalues,
                                     a->h, pg_w(g, g->score_w), a->N, g->d.D, g->stream),
              "score (value head)") ||
        pg_trunk_backward(&r) || pg_sync(&r);
    return failed ? -1 : 0;
}
