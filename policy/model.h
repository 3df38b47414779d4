/* model: the CPU reference of the policy (and of the critic's trunk), in plain fp32 C with OpenMP
 * over rows and heads. A decoder in HF transformers' semantics for Qwen2/Qwen2.5 (q/k/v biases),
 * Qwen3 (per-head q/k RMSNorm, explicit head_dim) and Llama 3 (optional llama3 RoPE scaling):
 *
 *   x = embed[ids]; then per layer
 *     x += o_proj(attention(rope(q_norm(q_proj(rms1(x)))), rope(k_norm(k_proj(rms1(x)))),
 *                           v_proj(rms1(x))))
 *     x += down_proj(silu(gate_proj(rms2(x))) * up_proj(rms2(x)))
 *   h = rms_final(x); logits = h lm_head^T (lm_head is the embedding when tied)
 *
 * RoPE uses HF's rotate_half layout (pairs i and i + head_dim/2); GQA groups are contiguous (q head
 * h reads kv head h / (H/KV)); the attention is causal and, for packed batches, limited to the
 * query's own document.
 *
 * Every parameter lives in one flat fp32 buffer (`w`), laid out by a table of HF tensor names
 * (`tensors`), so an optimizer, a gradient buffer (`g`, same layout) and a checkpoint all walk
 * the same table. The head is either the LM head (the policy) or a value head `score.weight`
 * [1, hidden] + `score.bias` [1] (the critic, see critic.h): the layout HF's
 * `AutoModelForTokenClassification(num_labels=1)` loads.
 *
 * Training: pol_model_forward keeps every activation the backward needs in a pol_fwd (no
 * recomputation); pol_model_backward then adds the gradients of
 *     L = -sum_t w_t * log softmax(logits_t)[target_t]
 * to `g` (so micro-batches accumulate; pol_model_zero_grad clears). The per-token weights make
 * this one backward serve plain cross-entropy (w_t = 1/N), masked SFT (w_t = 0 on prompt tokens)
 * and policy-gradient losses (w_t = -dLoss/dlogp_t). */
#ifndef KGYM_POLICY_MODEL_H
#define KGYM_POLICY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/config.h"
#include "policy/safetensors.h"
#include "policy/sample.h"

typedef enum { POL_HEAD_LM, POL_HEAD_VALUE } pol_head;

/* One parameter tensor of the flat buffer: its HF name, shape and place. */
typedef struct pol_param_info {
    char name[80];
    int ndim;
    int64_t shape[2];
    size_t offset; /* in floats, into the flat buffer */
    size_t numel;
    bool is_norm_or_bias; /* 1-D: the usual weight-decay exclusions */
} pol_param_info;

/* Pointers into one flat buffer (weights, or gradients of the same layout). */
typedef struct pol_layer_params {
    float *attn_norm;       /* [D] */
    float *wq, *wk, *wv;    /* [H*hd, D], [KV*hd, D], [KV*hd, D] */
    float *bq, *bk, *bv;    /* [H*hd], [KV*hd], [KV*hd]; NULL without attn_bias */
    float *q_norm, *k_norm; /* [hd]; NULL without qk_norm */
    float *wo;              /* [D, H*hd] */
    float *mlp_norm;        /* [D] */
    float *w_gate, *w_up;   /* [F, D] */
    float *w_down;          /* [D, F] */
} pol_layer_params;

typedef struct pol_params {
    float *data; /* n floats, owned by the model */
    size_t n;
    float *embed; /* [V, D] */
    pol_layer_params *layers;
    float *final_norm; /* [D] */
    float *lm_head;    /* [V, D]; == embed when tied; NULL for a value head */
    float *score_w;    /* [D] value head (POL_HEAD_VALUE), else NULL */
    float *score_b;    /* [1] */
} pol_params;

typedef struct pol_model {
    pol_config cfg;
    pol_head head;
    /* the source config.json and generation_config.json texts, copied into saved checkpoints
     * (NULL for a model built in memory / when the source had none) */
    char *config_json, *generation_json;
    pol_param_info *tensors;
    size_t n_tensors;
    pol_params w; /* weights */
    pol_params g; /* gradients: g.data NULL until pol_model_grads_init */
} pol_model;

/* Activations of one forward pass over B rows of T tokens (N = B*T), kept for the backward. */
typedef struct pol_layer_acts {
    float *x_in;            /* [N, D] residual stream entering the layer */
    float *rstd1, *xn1;     /* [N], [N, D] input RMSNorm: 1/rms and the normed, weighted rows */
    float *q_raw, *k_raw;   /* [N, H*hd], [N, KV*hd] projections before q/k norm (qk_norm only) */
    float *q_rstd, *k_rstd; /* [N*H], [N*KV] (qk_norm only) */
    float *q, *k, *v;       /* [N, H*hd], [N, KV*hd], [N, KV*hd] after norm and RoPE */
    float *probs;           /* [B, H, T, T] attention probabilities */
    float *att;             /* [N, H*hd] attention output before o_proj */
    float *x_mid;           /* [N, D] residual stream after attention */
    float *rstd2, *xn2;     /* [N], [N, D] */
    float *gate, *up, *act; /* [N, F]: act = silu(gate) * up */
} pol_layer_acts;

typedef struct pol_fwd {
    int B, T;
    size_t N;
    bool train;   /* activations kept for a backward */
    int32_t *ids; /* [N] */
    int32_t *pos; /* [N] RoPE positions */
    int32_t *doc; /* [N] document ids (attention stays inside one document of a row) */
    float *rope_cos, *rope_sin; /* [N, hd/2] */
    pol_layer_acts *layers;     /* n_layers entries (train), or 1 reused entry (inference) */
    float *x_final;             /* [N, D] residual stream after the last layer */
    float *rstd_f;              /* [N] */
    float *h;                   /* [N, D] final-normed hidden states */
    float *logits;              /* [N, V] (POL_HEAD_LM) */
    float *values;              /* [N] (POL_HEAD_VALUE) */
    /* backward scratch (train only) */
    float *d_res, *d_tmp, *d_h; /* [N, D] */
    float *d_q, *d_att;         /* [N, H*hd] */
    float *d_k, *d_v;           /* [N, KV*hd] */
    float *d_q2, *d_k2;         /* [N, H*hd], [N, KV*hd] before the q/k norm (qk_norm only) */
    float *d_gate, *d_up;       /* [N, F] */
    float *d_logits;            /* [N, V] (POL_HEAD_LM) */
    float *arena;               /* every buffer above lives in here */
    size_t arena_n;
} pol_fwd;

/* ---- models ---- */

/* A model of cfg's shape with every weight zero (norm weights one), no source config text. */
int pol_model_init(pol_model *m, const pol_config *cfg, pol_head head, char *err, size_t errcap);
/* The tensor table of a cfg-shaped model without allocating its weights (for inspecting big
 * checkpoints): *tensors malloc'd (*n entries), *n_params the floats they hold. */
int pol_model_table(const pol_config *cfg, pol_head head, pol_param_info **tensors, size_t *n,
                    size_t *n_params, char *err, size_t errcap);
/* Loads an HF folder: config.json (+ generation_config.json when present) and the safetensors
 * (single or sharded). POL_HEAD_LM expects lm_head.weight unless the config ties it;
 * POL_HEAD_VALUE expects score.weight and score.bias. A missing tensor, a wrong shape or dtype, or
 * an unknown extra tensor is an error naming it; known-harmless extras (rotary inv_freq, a
 * redundant lm_head.weight of a tied model) are skipped. */
int pol_model_load(pol_model *m, const char *dir, pol_head head, char *err, size_t errcap);
void pol_model_deinit(pol_model *m);
/* What pol_model_load checks without loading: every tensor of cfg's table present in st with its
 * shape and a float dtype, no unknown extras. Returns 0, or -1 with the first problem in err
 * (where: the checkpoint's name for the messages). */
int pol_model_check_tensors(const pol_config *cfg, pol_head head, const pol_st *st,
                            const char *where, char *err, size_t errcap);
/* The ids that end generation: config.json's eos_token_id and generation_config.json's (an id or
 * a list), without repeats. Writes at most cap; returns the count. */
int pol_model_eos_ids(const pol_model *m, int32_t *ids, int cap);
/* Number of parameters (tied embeddings counted once). */
size_t pol_model_n_params(const pol_model *m);
/* The tensor named name, or NULL. */
const pol_param_info *pol_model_find(const pol_model *m, const char *name);
/* Allocates (zeroed) gradients, once; pol_model_zero_grad clears them. */
int pol_model_grads_init(pol_model *m, char *err, size_t errcap);
void pol_model_zero_grad(pol_model *m);
/* Fills every weight from a seeded normal(0, std); norm weights 1 + normal(0, std) so they are
 * not trivially one (for tests and a fresh critic head). */
void pol_model_init_random(pol_model *m, uint64_t seed, float std);
/* Copies src's weights into dst for every tensor name both have with the same shape; counts them
 * into *copied. Used to seed a critic's trunk from a policy. */
int pol_model_copy_shared(pol_model *dst, const pol_model *src, size_t *copied, char *err,
                          size_t errcap);

/* Saves an HF-loadable folder: config.json (the source text, or one written from cfg),
 * generation_config.json when the source had one, and model.safetensors in dtype (F32 or BF16,
 * rounded to nearest even), written atomically. Creates dir when missing; removes a stale
 * model.safetensors.index.json there (it would shadow the new file). */
int pol_model_save(const pol_model *m, const char *dir, pol_dtype dtype, char *err, size_t errcap);
/* Writes a buffer laid out like the weights (m->w, or the gradients m->g) into a safetensors file
 * under the weights' names, fp32; the caller's extra entries (e.g. a loss) follow. */
int pol_model_save_params(const pol_model *m, const pol_params *p, const char *path,
                          const pol_st_entry *extra, size_t n_extra, char *err, size_t errcap);

/* ---- forward and backward ---- */

/* Allocates activations for B rows of T tokens; train keeps all layers' activations. */
int pol_fwd_init(pol_fwd *f, const pol_model *m, int B, int T, bool train, char *err,
                 size_t errcap);
void pol_fwd_deinit(pol_fwd *f);

/* Runs the model on ids [B*T]. pos: RoPE positions [B*T] or NULL (0..T-1 in each row); doc:
 * document ids [B*T] or NULL (one document per row). A token attends to the earlier tokens of
 * its row with the same doc id. Fills f->logits (LM head) or f->values (value head). An id out of
 * range is an error. */
int pol_model_forward(const pol_model *m, pol_fwd *f, const int32_t *ids, const int32_t *pos,
                      const int32_t *doc, char *err, size_t errcap);

/* log softmax(logits_t)[targets_t] for each of the N tokens of the last forward into lp (0 where
 * targets_t < 0). */
int pol_model_logprobs(const pol_model *m, const pol_fwd *f, const int32_t *targets, float *lp,
                       char *err, size_t errcap);

/* Adds the gradients of L = -sum_t weights_t * log softmax(logits_t)[targets_t] to m->g (targets
 * < 0 and weights 0 are skipped); *loss gets L. The forward must have been a train one. */
int pol_model_backward(pol_model *m, pol_fwd *f, const int32_t *targets, const float *weights,
                       double *loss, char *err, size_t errcap);

/* The trunk's backward from dL/dh [N, D] (gradient of the final-normed hidden states): adds to
 * m->g every trunk gradient. The heads' backwards (LM, value) end here. */
int pol_model_backward_trunk(pol_model *m, pol_fwd *f, float *dh, char *err, size_t errcap);

/* ---- incremental decoding (one sequence, KV cache) ---- */

typedef struct pol_kv {
    int max_T;    /* positions the cache holds */
    int len;      /* positions filled */
    float *k, *v; /* [L][max_T][KV*hd] after norm and RoPE */
} pol_kv;

int pol_kv_init(pol_kv *kv, const pol_model *m, int max_T, char *err, size_t errcap);
void pol_kv_deinit(pol_kv *kv);
/* Appends n tokens at positions kv->len.. and writes the logits of the last one into
 * logits[V] (an LM-head model). Gives what pol_model_forward gives for the whole sequence. */
int pol_model_decode(const pol_model *m, pol_kv *kv, const int32_t *ids, int n, float *logits,
                     char *err, size_t errcap);

/* Generation options: greedy unless sample.temperature > 0. */
typedef struct pol_gen_opts {
    int max_new; /* new tokens at most */
    pol_sample_cfg sample;
    uint64_t seed;
    int n_valid;        /* candidate ids [0, n_valid): the tokenizer's size; <= 0: all rows */
    const int32_t *eos; /* ids that stop generation (kept in the output, as HF does) */
    int n_eos;
} pol_gen_opts;

/* Continues prompt[n_prompt] through a KV cache: *out (malloc'd) gets the *n_out new ids, *hit_eos
 * whether the last one is an EOS id. */
int pol_model_generate(const pol_model *m, const int32_t *prompt, int n_prompt,
                       const pol_gen_opts *o, int32_t **out, int *n_out, bool *hit_eos, char *err,
                       size_t errcap);

/* ---- building blocks (exposed for the unit tests and the CUDA port's checks) ---- */

/* The model's dimensions under the names the formulas use. */
typedef struct pol_dims {
    int D, H, KV, hd, F, V, L;
    size_t qd, kvd; /* H*hd, KV*hd */
} pol_dims;
pol_dims pol_dims_of(const pol_config *c);

/* out = x * rsqrt(mean(x^2) + eps) * w over rows of n; rstd (may be NULL) gets 1/rms per row. */
void pol_rmsnorm(float *out, float *rstd, const float *x, const float *w, size_t rows, int n,
                 float eps);
/* dx += RMSNorm backward of dout for rows of n; dw += the weight's gradient. */
void pol_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                          const float *rstd, const float *w, size_t rows, int n);
/* RoPE inverse frequencies inv[hd/2] for cfg (default or llama3-scaled), as HF computes them. */
void pol_rope_inv_freq(const pol_config *cfg, float *inv);
/* Rotates one head vector x[hd] in place, rotate_half layout: x*cos + rotate_half(x)*sin with
 * cos/sin[hd/2] (sign -1 applies the inverse rotation, for the backward). */
void pol_rope_apply(float *x, int hd, const float *cos, const float *sin, int sign);
/* out[n] = log softmax(x[n]) (out may be x); returns log-sum-exp. */
float pol_log_softmax(float *out, const float *x, int n);
/* y[N, O] = x[N, I] W[O, I]^T (+ b[O] when b) : an HF Linear. */
void pol_linear(float *y, const float *x, const float *W, const float *b, size_t N, int I, int O);
/* Backward of pol_linear: dx += dy W (dx may be NULL), dW += dy^T x, db += column sums of dy
 * (db may be NULL). */
void pol_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, size_t N, int I, int O);

#endif
