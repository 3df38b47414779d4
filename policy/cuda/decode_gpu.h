/* decode_gpu: batched decoding with a KV cache on the GPU model (model_gpu.h): the rollout engine.
 *
 * A pol_gpu_dec holds, for an LM-head pol_gpu, a KV cache of n_slots sequences of at most max_len
 * tokens each (every layer, bf16, k after its norm and RoPE) and the scratch of a call of at most
 * max_tokens tokens. A sequence lives in one slot from its first token to its end; the slot is
 * then released and the next sequence reuses it (nothing needs clearing).
 *
 * Low level: pol_gpu_dec_append feeds tokens to slots (whole prompts, a continuation such as a
 * tool's output, or one token per running sequence, in any mix), and leaves on the device the
 * logits after each slot's last token of the call; pol_gpu_dec_sample draws the next tokens from
 * them on the GPU (kernels/sample.cu) with each sequence's own seeded RNG stream: a draw depends on
 * the sequence's seed and position, never on its place in the batch (the logits themselves can
 * round apart in bf16 when the batch is made up differently).
 *
 * High level: pol_gpu_generate runs many prompts to their ends with continuous batching: as a
 * sequence stops (an EOS id, a stop string, max_new, or a full slot) its slot goes to the next
 * waiting prompt.
 *
 * Calls queue work on the model's stream and wait for it; each returns 0, or -1 with a message in
 * err, and a failed call leaves the decoder usable (the slots it touched keep their old lengths).
 * The model's weights may change between calls (a training step): cached keys and values were
 * made by the weights of their time, as in every rollout engine. */
#ifndef KGYM_POLICY_DECODE_GPU_H
#define KGYM_POLICY_DECODE_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/cuda/model_gpu.h"
#include "policy/sample.h"
#include "policy/tokenizer.h"

typedef struct pol_gpu_dec pol_gpu_dec;

/* A decoder over g (an LM-head model; g must outlive it). n_slots >= 1 sequences of max_len >= 1
 * tokens; max_tokens >= n_slots tokens per append (the longer prompts are fed in pieces by
 * pol_gpu_generate). */
int pol_gpu_dec_create(pol_gpu_dec **out, pol_gpu *g, int n_slots, int max_len, int max_tokens,
                       char *err, size_t errcap);
void pol_gpu_dec_free(pol_gpu_dec *d);

/* A free slot, its length set to 0; -1 when every slot is taken. */
int pol_gpu_dec_acquire(pol_gpu_dec *d);
/* Frees a slot (a slot out of range or already free is ignored). */
void pol_gpu_dec_release(pol_gpu_dec *d, int slot);
/* Tokens a slot holds (-1 for a free slot or one out of range). */
int pol_gpu_dec_len(const pol_gpu_dec *d, int slot);
/* The decoder's sizes, as created, and the model's vocabulary (rows of the LM head). */
void pol_gpu_dec_shape(const pol_gpu_dec *d, int *n_slots, int *max_len, int *max_tokens);
int pol_gpu_dec_vocab(const pol_gpu_dec *d);

/* Appends n tokens (1 <= n <= max_tokens): ids[t] goes to acquired slot slots[t] at that slot's
 * next position. A slot's tokens come in their order; they need not be contiguous. Refused, with
 * nothing changed, when an id is outside the vocabulary or a slot would pass max_len. Leaves one
 * logits row per distinct slot of the call, in order of each slot's LAST token in the call:
 * pol_gpu_dec_rows gives the slots of the rows. */
int pol_gpu_dec_append(pol_gpu_dec *d, const int32_t *slots, const int32_t *ids, int n, char *err,
                       size_t errcap);
/* Decode steps through CUDA graphs (on by default; off: kgym-policy-cuda bench --no-graphs):
 * on the H200 they took batch-1 decoding of Qwen2.5-0.5B from 559 to 915 tokens/s (README), the
 * launches no longer paced by the CPU. An append of one token in each of n slots, none a fresh
 * prompt, replays a graph captured at the second step of that n instead of launching every kernel.
 * The results are bitwise those without (the same kernels, arguments and order). */
void pol_gpu_dec_set_graphs(pol_gpu_dec *d, bool on);
/* Programmatic dependent launch of a step's kernels (on by default, off with KGYM_DECODE_PDL=0
 * in the environment; kgym-policy-cuda bench --no-pdl): each kernel may start while the one before
 * it finishes (kernels/launch.cuh), the small-M matmuls streaming their first weights meanwhile.
 * Bitwise the same results either way. Changing it drops the graphs captured so far. */
void pol_gpu_dec_set_pdl(pol_gpu_dec *d, bool on);
/* What the graphs did since the decoder was made: token counts captured, steps replayed, and
 * captures or launches refused (those counts run without a graph from then on). */
typedef struct pol_gpu_dec_graph_stats {
    long captured, replayed, refused;
} pol_gpu_dec_graph_stats;
pol_gpu_dec_graph_stats pol_gpu_dec_graphs(const pol_gpu_dec *d);
/* For benchmarks: the GPU's milliseconds per decode step with no host work between steps. The
 * last append, a decode step replayed from its graph, is replayed reps times back to back (it
 * writes the same cache rows and logits again: nothing changes) and *ms is the time per replay;
 * -1 when the last append was anything else. Set against a step's wall time it splits the step
 * into GPU time and the host's share (uploads, syncs, sampling). */
int pol_gpu_dec_time_step_graph(pol_gpu_dec *d, int reps, double *ms, char *err, size_t errcap);
/* The rows of the last append: *slots (the decoder's array, valid until the next append) and
 * their count; 0 rows before the first append or after a failed one. */
int pol_gpu_dec_rows(const pol_gpu_dec *d, const int32_t **slots);
/* The last append's logits, as fp32 [rows, vocab] on the host. */
int pol_gpu_dec_logits(pol_gpu_dec *d, float *out, char *err, size_t errcap);

/* Draws the next token of every row of the last append on the GPU: temperature / top-k / top-p
 * as policy/sample.h (temperature <= 0: greedy, the lowest id on ties), candidates [0, n_valid)
 * (n_valid <= 0: every row of the vocabulary). Row r's draw uses the RNG stream seeds[r] at
 * the words of its slot's length, so the uniform a seed gives at a position never depends on the
 * batch (seeds may be NULL for greedy). tokens[rows] get the ids; logp[rows] (may be NULL) the
 * token's log-probability under the model (log softmax of the logits over the candidates, at
 * temperature 1: what a PPO ratio is taken against). */
int pol_gpu_dec_sample(pol_gpu_dec *d, const pol_sample_cfg *cfg, int n_valid,
                       const uint64_t *seeds, int32_t *tokens, float *logp, char *err,
                       size_t errcap);

/* ---- generation with continuous batching ---- */

typedef enum pol_finish {
    POL_FINISH_NONE = 0, /* not run (pol_gpu_generate failed before reaching it) */
    POL_FINISH_EOS,      /* an EOS id (kept as the last token, as HF does) */
    POL_FINISH_STOP,     /* a stop string in the new text (its tokens kept) */
    POL_FINISH_LENGTH,   /* max_new tokens */
    POL_FINISH_CONTEXT,  /* the slot is full (prompt + new tokens reached max_len) */
} pol_finish;

/* "eos", "stop", "length", "context" or "none". */
const char *pol_finish_name(pol_finish f);

typedef struct pol_gpu_gen_opts {
    int max_new; /* new tokens at most per sequence (>= 1) */
    pol_sample_cfg sample;
    int n_valid;        /* candidate ids [0, n_valid); <= 0: all rows */
    const int32_t *eos; /* ids that stop a sequence */
    int n_eos;
    const char *const *stop; /* stop strings (need tok): a sequence stops once its new text holds */
    int n_stop;              /* one (matched over token boundaries; the tokens are kept) */
    const pol_tok *tok;
} pol_gpu_gen_opts;

/* One sequence: the prompt and seed in, the new tokens out. */
typedef struct pol_gpu_gen_seq {
    const int32_t *prompt; /* n_prompt >= 1 ids */
    int n_prompt;
    uint64_t seed;
    int32_t *ids; /* out: malloc'd new ids (free() them), n of them */
    float *logp;  /* out: malloc'd, each new id's log-probability (pol_gpu_dec_sample's) */
    int n;
    pol_finish finish;
} pol_gpu_gen_seq;

/* Generates every sequence to its end over d's free slots; a prompt longer than max_len, or with an
 * id outside the vocabulary, is an error (checked before any work). progress (may be NULL) is
 * called after each step with the number of sequences finished. On error the outputs already made
 * are kept (free them with pol_gpu_gen_free) and every slot taken is released. */
int pol_gpu_generate(pol_gpu_dec *d, pol_gpu_gen_seq *seqs, int n_seqs, const pol_gpu_gen_opts *o,
                     void (*progress)(void *ctx, int finished, int total), void *progress_ctx,
                     char *err, size_t errcap);
void pol_gpu_gen_free(pol_gpu_gen_seq *seqs, int n_seqs);

#endif
