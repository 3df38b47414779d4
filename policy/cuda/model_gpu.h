/* model_gpu: the policy model (policy/model.h) on one NVIDIA GPU, over the kernels of
 * kernels/kernels.h: the same decoder (Qwen2 q/k/v biases, Qwen3 per-head q/k norm, Llama 3 with
 * llama3 RoPE scaling), the same LM head or value head (critic.h), the same losses and the same
 * AdamW (adamw.h), in bf16 with fp32 reductions instead of fp32 throughout.
 *
 * A pol_gpu is built from a loaded (or pol_model_init'ed) CPU pol_model and mirrors its tensor
 * table: every device buffer is flat, walked tensor by tensor in the table's order, and the
 * weights travel back into a pol_model (for pol_model_save) and the gradients into its g (for
 * checks). On the device each tensor starts on a 256-byte boundary (cuBLASLt's and the vectorised
 * kernels' alignment), so device offsets are the table's rounded up, not equal to them:
 *   - the weights in bf16 (what every forward reads);
 *   - with `training`: fp32 master weights, fp32 gradients (ACCUMULATED: backward calls add up
 *     until pol_gpu_zero_grad), and AdamW's fp32 moments m and v. A tied embedding is one tensor,
 *     as on the CPU: the LM head's and the embedding's gradients add into it.
 *
 * Batches are PACKED: one stream of N tokens holding whole documents one after another. Token t
 * has an id, a RoPE position and doc_start[t], the index of the first token of its document; it
 * attends causally to the tokens of its own document only.
 *
 * Every call queues its work on the model's stream and waits for it before returning, so an
 * error (named by call and layer) is reported by the call that caused it. Outputs of a forward
 * (logits, values) stay on the device until fetched. Every call returns 0, or -1 with a message
 * in err; a failed call frees what it allocated and leaves the model usable. One model is used by
 * one thread at a time. */
#ifndef KGYM_POLICY_MODEL_GPU_H
#define KGYM_POLICY_MODEL_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "policy/adamw.h"
#include "policy/model.h"

typedef struct pol_gpu pol_gpu;

/* ---- the model's life ---- */

/* A GPU copy of m (weights uploaded; m is not kept). training adds the master weights,
 * gradients (zero) and AdamW state (zero, step 0). head_dim must be 64 or 128 (the attention
 * kernel's). */
int pol_gpu_create(pol_gpu **out, const pol_model *m, bool training, char *err, size_t errcap);
void pol_gpu_free(pol_gpu *g);

/* Weights from / to a pol_model of the same table: upload replaces the weights (and the master
 * weights when training; gradients and optimizer state stay); download writes m->w from the
 * master weights when training, else from the bf16 weights. */
int pol_gpu_upload(pol_gpu *g, const pol_model *m, char *err, size_t errcap);
int pol_gpu_download(pol_gpu *g, pol_model *m, char *err, size_t errcap);
/* Gradients (training only): download into m->g (allocated when missing), upload from m->g
 * (replacing the accumulated ones). */
int pol_gpu_download_grads(pol_gpu *g, pol_model *m, char *err, size_t errcap);
int pol_gpu_upload_grads(pol_gpu *g, const pol_model *m, char *err, size_t errcap);
/* AdamW state (training only) from / to a pol_adamw of the table's size (pol_adamw_init'ed): the
 * moments and the step count (the hyperparameters are the caller's, passed to each step). For
 * pol_adamw_save / pol_adamw_load checkpoints. */
int pol_gpu_download_adamw(pol_gpu *g, pol_adamw *o, char *err, size_t errcap);
int pol_gpu_upload_adamw(pol_gpu *g, const pol_adamw *o, char *err, size_t errcap);

/* ---- forward ---- */

/* Runs the model on n packed tokens: ids [n] (each in [0, vocab)); pos [n] (>= 0) or NULL for the
 * position inside the document (t - doc_start[t]); doc_start [n] or NULL for one document
 * (documents contiguous: doc_start[0] = 0, then doc_start[t] is doc_start[t - 1] or t). Fills the
 * logits (LM head) or values (value head) on the device. train keeps what a backward needs:
 * every activation, or with recompute (below) every layer's input. Inputs are checked on the host
 * before anything is uploaded. A failed forward leaves no forward to read: fetches and backwards
 * refuse until the next one succeeds. */
int pol_gpu_forward(pol_gpu *g, const int32_t *ids, const int32_t *pos, const int32_t *doc_start,
                    int n, bool train, char *err, size_t errcap);

/* Activation recomputation, off by default. Off, a train forward keeps all of every layer's
 * activations for the backward: per token and layer 8D + 4qd + 4kvd + 6F + 4H + 8 bytes (D
 * hidden, qd / kvd the q / kv widths, F intermediate, H heads; the q/k norm adds
 * 2qd + 2kvd + 4H + 4KV), 40 KB for Qwen2.5-0.5B. On, it keeps only each layer's input residual
 * x_in (2D bytes per token and layer) and runs every layer through one shared layer buffer; the
 * backward reruns layer l's forward from its kept input into that buffer right before layer l's
 * backward. The layers' activations drop from L layers to about one layer + L residuals, for one
 * more forward of the trunk per backward (less the down projections, whose outputs are kept
 * already). Nothing else is kept per layer: the per-row scalars (rstd, the attention's lse) would
 * spare no work, as the tensors they normalise are recomputed anyway. The recompute is the
 * forward's own code on the same inputs, so its activations are the first forward's bit for bit
 * and the gradients those without recompute (up to the run-to-run order of the backward's atomic
 * sums, kernels.h, which is the same either way). It matters to train forwards only, on any model
 * (an inference-only one too: its train forwards then keep less); inference forwards always run
 * through one layer's buffers. A change invalidates the last forward and frees the activation
 * arena (the next forward allocates what the setting needs). With recompute the backward reads
 * the weights again: change none (pol_gpu_upload, pol_gpu_step) between a forward and its
 * backward. */
int pol_gpu_set_recompute(pol_gpu *g, bool on, char *err, size_t errcap);

/* From the last forward (LM head), to the host: logp[t] = log softmax(logits_t)[targets[t]]
 * (0 where targets[t] < 0; targets >= vocab are an error) and entropy[t] = -sum_j p_j log p_j of
 * every token. logp and targets are both NULL or both set; entropy may be NULL. */
int pol_gpu_logprobs(pol_gpu *g, const int32_t *targets, float *logp, float *entropy, char *err,
                     size_t errcap);
/* The values [n] of the last forward (value head), to the host. */
int pol_gpu_values(pol_gpu *g, float *values, char *err, size_t errcap);

/* ---- backward (training model, after a train forward; gradients ADD UP) ---- */

/* The LM head's loss, pol_model_backward's contract plus an optional entropy term:
 *     L = -sum_t (w_logp[t] * log p_t(targets[t]) + w_ent[t] * entropy_t)
 * (w_ent NULL: no entropy term). Tokens with targets[t] < 0 contribute nothing; targets >= vocab
 * and non-finite weights are errors. *loss gets L (double sum on the host). */
int pol_gpu_backward(pol_gpu *g, const int32_t *targets, const float *w_logp, const float *w_ent,
                     double *loss, char *err, size_t errcap);
/* The value head's: from dL/dvalue [n] (e.g. pol_critic_value_loss's dvalues), as
 * pol_critic_backward. */
int pol_gpu_backward_value(pol_gpu *g, const float *dvalues, char *err, size_t errcap);

/* ---- optimizer (training model) ---- */

int pol_gpu_zero_grad(pol_gpu *g, char *err, size_t errcap);
/* One AdamW step of every tensor at cfg (weight decay on tensors that are not norms or biases,
 * pol_param_info.is_norm_or_bias), after clip_grad_norm_-style clipping of the global gradient
 * norm to max_norm (max_norm <= 0 or infinite: no clipping). *grad_norm (may be NULL) gets the
 * norm before clipping. The gradients are not changed (the clip factor is applied inside the
 * step) nor cleared. The bf16 weights are rewritten from the new master weights. A non-finite
 * gradient norm is an error and the step is skipped (torch would write NaN weights). */
int pol_gpu_step(pol_gpu *g, const pol_adamw_cfg *cfg, double max_norm, double *grad_norm,
                 char *err, size_t errcap);

/* ---- access and debugging ---- */

/* The residual stream after layer `layer` (0-based; the last is the final norm's input) of the
 * last TRAIN forward (with recompute too: the layers' inputs are what it keeps), as fp32
 * [n, hidden] on the host: the per-layer check against the CPU. */
int pol_gpu_residual(pol_gpu *g, int layer, float *out, char *err, size_t errcap);
/* The last forward's logits [n, vocab] (device, bf16; NULL without an LM-head forward), its
 * token count, and the model's stream (for work queued after the model's own). */
const kg_bf16 *pol_gpu_logits(const pol_gpu *g);
int pol_gpu_n_tokens(const pol_gpu *g);
cudaStream_t pol_gpu_stream(const pol_gpu *g);
/* The device bytes that the last forward's activations (and its backward's scratch, for a train
 * forward) take in the activation arena; 0 without a forward to read. For tests and memory
 * planning: the arena itself may be larger, kept from a bigger forward. */
size_t pol_gpu_activation_bytes(const pol_gpu *g);

#endif
