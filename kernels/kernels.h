/* kernels: the CUDA kernels of the policy and the trainer (issue "policy (2/3)"), llm.c style: one
 * concern per file (rmsnorm.cu, rope.cu, swiglu.cu, attention.cu, matmul.cu, logprob.cu,
 * adamw.cu, clip.cu), each checked against a CPU reference by tests/kernels/test_<name>.cu and
 * timed by tests/bench/kernels/bench_<name>.cu.
 *
 * Conventions, for every launcher below:
 *  - pointers are device pointers; rows are contiguous (row-major, the last index fastest);
 *  - activations and weights are bf16 (kg_bf16: the bits of a __nv_bfloat16, so that C code can
 *    hold them), every reduction and accumulation is fp32;
 *  - work is queued on stream s and nothing synchronises; the return value is the launch's
 *    cudaError_t (cudaSuccess, or cudaErrorInvalidValue for arguments a kernel cannot take);
 *  - "T" counts tokens (rows of a packed batch), "n"/"hidden" the row length;
 *  - 16-byte-aligned buffers and row lengths that are multiples of 8 take the vectorised paths;
 *    anything else is correct, only slower;
 *  - sums that blocks add with atomics (rmsnorm's dw, attention's dq, clip's sumsq) are not
 *    bitwise deterministic from run to run: their order of addition varies.
 * C callable (the trainer's host code is C11). */
#ifndef KGYM_KERNELS_H
#define KGYM_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t kg_bf16;

/* ---- matmul.cu: C = op(A) op(B) (+ bias), bf16 in and out, fp32 accumulate ----
 * Row-major throughout: C is [M, N]; op(A) is [M, K] (A stored [M, K], or [K, M] when trans_a);
 * op(B) is [K, N] (B stored [K, N], or [N, K] when trans_b: a Linear weight [out, in] gives
 * y = x W^T with trans_b = 1). beta = 0 overwrites C, beta = 1 accumulates into it (gradient
 * accumulation). bias [N] (or NULL) is added to every row (beta must be 0 then). C must not
 * overlap A or B. Through cuBLASLt, except y = x W^T with M <= 8 rows, K a multiple of 8 and
 * 16-byte aligned operands (a decode step of a small batch), which a kernel of our own does: its
 * rows are computed alike whatever M, but a row may round differently (fp32 sums in another
 * order) than the same row in a call of more than 8.
 * ctx: a cuBLASLt handle and a workspace, made once per device by kg_matmul_ctx_new. */
typedef struct kg_matmul_ctx kg_matmul_ctx;
kg_matmul_ctx *kg_matmul_ctx_new(size_t workspace_bytes);
void kg_matmul_ctx_free(kg_matmul_ctx *ctx);
cudaError_t kg_matmul(kg_matmul_ctx *ctx, kg_bf16 *C, const kg_bf16 *A, const kg_bf16 *B,
                      const kg_bf16 *bias, int M, int N, int K, int trans_a, int trans_b,
                      float beta, cudaStream_t s);
/* Several y = x W^T (+ bias) products of one x [M, K] (beta 0), each into its own C [M, N]: the
 * q, k and v projections (norm: below). One launch when every part takes kg_matmul's small-M path
 * (M <= 8), else one kg_matmul per part; each C gets the bits its own kg_matmul would give. 1 to 3
 * parts; no C may overlap X or another C. */
typedef struct {
    kg_bf16 *C;
    const kg_bf16 *W, *bias; /* [N, K]; [N] or NULL */
    int N;
} kg_matmul_part;
/* An RMSNorm in front of the products of kg_matmul_parts and kg_matmul_swiglu (norm non-NULL):
 * X is then the norm's input, y = rmsnorm(X) * w [M, K] (kg_rmsnorm_forward's bits) is written
 * to y, and the products are of y. With rstd NULL (nothing kept for a backward), at M <= 8 with
 * K <= 2048 and 16-byte aligned X, y and w, the norm rides on the products' launch (each block
 * normalises the rows itself, with kg_rmsnorm_forward's thread layout and order of addition);
 * else kg_rmsnorm_forward(y, rstd, X, ...) runs first. y must not overlap X or an output. */
typedef struct {
    const kg_bf16 *w; /* [K] */
    float eps;
    kg_bf16 *y;  /* [M, K] */
    float *rstd; /* [M] 1 / rms per row, or NULL */
} kg_matmul_norm;
cudaError_t kg_matmul_parts(kg_matmul_ctx *ctx, const kg_bf16 *X, const kg_matmul_norm *norm,
                            const kg_matmul_part *parts, int n_parts, int M, int K, cudaStream_t s);
/* The MLP's first half: gate = x Wg^T, up = x Wu^T [M, F] (both kept: the backward reads them)
 * and h = silu(gate) * up. One launch when M <= 8 (the small-M path), else two kg_matmul and
 * kg_swiglu_forward; the bits of those three calls either way. h, gate and up must not overlap
 * X or each other. */
cudaError_t kg_matmul_swiglu(kg_matmul_ctx *ctx, kg_bf16 *h, kg_bf16 *gate, kg_bf16 *up,
                             const kg_bf16 *X, const kg_matmul_norm *norm, const kg_bf16 *Wg,
                             const kg_bf16 *Wu, int M, int F, int K, cudaStream_t s);
/* As kg_matmul with C in fp32 and no bias: weight gradients, accumulated over micro-batches in
 * fp32 (beta = 1) for the fp32 optimizer. */
cudaError_t kg_matmul_f32out(kg_matmul_ctx *ctx, float *C, const kg_bf16 *A, const kg_bf16 *B,
                             int M, int N, int K, int trans_a, int trans_b, float beta,
                             cudaStream_t s);

/* ---- rmsnorm.cu: y = w * x / sqrt(mean(x^2) + eps), per row (HF Qwen2/Llama RMSNorm) ---- */
/* rstd[T] (fp32, may be NULL) is kept for the backward. */
cudaError_t kg_rmsnorm_forward(kg_bf16 *y, float *rstd, const kg_bf16 *x, const kg_bf16 *w, int T,
                               int n, float eps, cudaStream_t s);
/* dx = (bf16) the input gradient (overwritten; may be dy itself); dw[n] (fp32) is ACCUMULATED
 * into (+=), so that micro-batches add up before the optimizer step. */
cudaError_t kg_rmsnorm_backward(kg_bf16 *dx, float *dw, const kg_bf16 *dy, const kg_bf16 *x,
                                const float *rstd, const kg_bf16 *w, int T, int n, cudaStream_t s);

/* ---- rope.cu: rotary embedding in HF's rotate_half layout, in place ----
 * x is [T, heads, hd]; token t rotates by angle pos[t] * inv_freq[i] for pair (i, i + hd/2),
 * i < hd/2: x_i' = x_i cos - x_{i+hd/2} sin, x_{i+hd/2}' = x_{i+hd/2} cos + x_i sin.
 * inv_freq[hd/2] is fp32 (computed on the host by pol_rope_inv_freq, llama3 scaling included).
 * sign = -1 applies the inverse rotation: the backward of the forward (dx from dy). */
cudaError_t kg_rope(kg_bf16 *x, const int32_t *pos, const float *inv_freq, int T, int heads, int hd,
                    int sign, cudaStream_t s);
/* kg_rope on q [T, Hq, hd] and k [T, Hkv, hd] (not overlapping) in one launch, with the bits of
 * two kg_rope calls. */
cudaError_t kg_rope_qk(kg_bf16 *q, kg_bf16 *k, const int32_t *pos, const float *inv_freq, int T,
                       int Hq, int Hkv, int hd, int sign, cudaStream_t s);
/* A decode step's RoPE and KV-cache write in one launch: kg_rope_qk (sign 1), then the rotated
 * k and v [T, Hkv, hd] written to the cache at [slot[t], pos[t]] as kg_kv_write writes them
 * (see kvcache.cu below; out-of-range tokens skipped); the bits of those two calls. */
typedef struct {
    kg_bf16 *k_cache, *v_cache; /* [n_slots, max_len, Hkv, hd] */
    const kg_bf16 *v;           /* [T, Hkv, hd] */
    const int32_t *slot;        /* [T] (device) */
    int n_slots, max_len;
} kg_kv_dest;
cudaError_t kg_rope_qk_kv_write(kg_bf16 *q, kg_bf16 *k, const int32_t *pos, const float *inv_freq,
                                int T, int Hq, int Hkv, int hd, const kg_kv_dest *dest,
                                cudaStream_t s);

/* ---- swiglu.cu: h = silu(gate) * up, gate and up [T, ffn] ---- */
cudaError_t kg_swiglu_forward(kg_bf16 *h, const kg_bf16 *gate, const kg_bf16 *up, size_t count,
                              cudaStream_t s);
/* dgate, dup (overwritten; they may be gate and up themselves) from dh */
cudaError_t kg_swiglu_backward(kg_bf16 *dgate, kg_bf16 *dup, const kg_bf16 *dh, const kg_bf16 *gate,
                               const kg_bf16 *up, size_t count, cudaStream_t s);

/* ---- logprob.cu: the fused log-softmax over the vocabulary, chunked over tokens ----
 * logits [T, V_pad] (bf16; columns >= V are padding, never part of the softmax). For token t
 * with target[t] (0 <= target < V):
 *   logp[t] = logits[t, target] - logsumexp(logits[t, :V]),
 *   entropy[t] = -sum_j p_j log p_j (either output may be NULL).
 * The backward writes dlogits (bf16, [T, V_pad], padding columns 0):
 *   dlogits[t, j] = w_logp[t] * (1[j == target] - p_j)
 *                 + w_ent[t] * (-p_j (log p_j + entropy[t]))        (d entropy / d logit)
 * with w_logp[t] = dL/dlogp[t] and w_ent[t] = dL/dentropy[t] (w_ent may be NULL: 0). Memory
 * stays O(T) beyond the logits: nothing [T, V] in fp32 is materialised. A target outside
 * [0, V) (the launcher cannot see device data) gives NaN logp and a NaN dlogits row: masked
 * tokens still need a valid target, with weight 0. */
cudaError_t kg_logprob_forward(float *logp, float *entropy, const kg_bf16 *logits,
                               const int32_t *target, int T, int V, int V_pad, cudaStream_t s);
cudaError_t kg_logprob_backward(kg_bf16 *dlogits, const kg_bf16 *logits, const int32_t *target,
                                const float *w_logp, const float *w_ent, int T, int V, int V_pad,
                                cudaStream_t s);

/* ---- adamw.cu: one AdamW step (torch.optim.AdamW semantics, decoupled weight decay) ----
 * master (fp32) is the parameter; param (bf16, may be NULL) receives its rounded copy; grad is
 * fp32 and is multiplied by grad_scale first (global-norm clipping's factor, 1 for none).
 * step counts from 1 (bias correction). */
cudaError_t kg_adamw_step(float *master, kg_bf16 *param, const float *grad, float *m, float *v,
                          size_t n, float lr, float beta1, float beta2, float eps,
                          float weight_decay, int step, float grad_scale, cudaStream_t s);

/* ---- clip.cu: global-norm clipping ----
 * Adds sum(grad^2) of n elements into *sumsq (fp32, device; zero it before the first tensor). */
cudaError_t kg_sumsq_accumulate(float *sumsq, const float *grad, size_t n, cudaStream_t s);
/* *scale = min(1, max_norm / (sqrt(*sumsq) + 1e-6)) on the device (torch's clip_grad_norm_
 * factor), for kg_adamw_step's grad_scale read back or passed as a device value. */
cudaError_t kg_clip_scale(float *scale, const float *sumsq, float max_norm, cudaStream_t s);

/* ---- elementwise.cu: the small kernels of the GPU model's host code (policy/cuda/) ----
 * y[i] = bf16(y[i] + x[i]) for n elements, fp32 math (the residual stream's gradient adding the
 * branch's). */
cudaError_t kg_add(kg_bf16 *y, const kg_bf16 *x, size_t n, cudaStream_t s);
/* db[j] += sum_t dy[t, j] over dy [T, n]: a Linear bias's gradient, ACCUMULATED into the fp32 db
 * (micro-batches add up; atomics: not bitwise deterministic). */
cudaError_t kg_bias_grad(float *db, const kg_bf16 *dy, int T, int n, cudaStream_t s);
/* The critic's value head (policy/critic.h), Linear(n -> 1) on h [T, n]:
 * values[t] = h[t] . w + b[0] (fp32 out; w [n]; b [1] or NULL for none). */
cudaError_t kg_value_head_forward(float *values, const kg_bf16 *h, const kg_bf16 *w,
                                  const kg_bf16 *b, int T, int n, cudaStream_t s);
/* Its backward from dvalues [T] (fp32): dh[t, i] = dvalues[t] w[i] (bf16, overwritten);
 * dw[i] += sum_t dvalues[t] h[t, i] and db[0] += sum_t dvalues[t] (fp32, ACCUMULATED; db may be
 * NULL). */
cudaError_t kg_value_head_backward(kg_bf16 *dh, float *dw, float *db, const float *dvalues,
                                   const kg_bf16 *h, const kg_bf16 *w, int T, int n,
                                   cudaStream_t s);
/* dst[i] = bf16(src[i]), round to nearest even (fp32 master weights -> their bf16 copy). */
cudaError_t kg_f32_to_bf16(kg_bf16 *dst, const float *src, size_t n, cudaStream_t s);

/* ---- attention.cu: causal GQA attention, flash style (online softmax, no [T, T] scores) ----
 * q [T, Hq, hd], k and v [T, Hkv, hd] (Hq a multiple of Hkv: query head h reads kv head
 * h / (Hq / Hkv)), out [T, Hq, hd]; lse [Hq, T] (fp32, log-sum-exp of the scaled scores, kept
 * for the backward). Packed sequences: doc_start[t] is the index of the first token of t's
 * document, and token t attends to tokens j with doc_start[t] <= j <= t; documents are
 * contiguous (doc_start is non-decreasing, doc_start[t] <= t). scale = 1/sqrt(hd) normally. hd
 * is 64 or 128. */
cudaError_t kg_attention_forward(kg_bf16 *out, float *lse, const kg_bf16 *q, const kg_bf16 *k,
                                 const kg_bf16 *v, const int32_t *doc_start, int T, int Hq, int Hkv,
                                 int hd, float scale, cudaStream_t s);
/* dq, dk, dv (bf16, overwritten) from dout; out and lse from the forward. */
cudaError_t kg_attention_backward(kg_bf16 *dq, kg_bf16 *dk, kg_bf16 *dv, const kg_bf16 *dout,
                                  const kg_bf16 *out, const float *lse, const kg_bf16 *q,
                                  const kg_bf16 *k, const kg_bf16 *v, const int32_t *doc_start,
                                  int T, int Hq, int Hkv, int hd, float scale, cudaStream_t s);

/* ---- embed.cu: token embeddings ----
 * out [T, hidden] = table[tokens[t]] (table [vocab, hidden], bf16). A token outside [0, vocab)
 * (device data: not checked by the launcher) gives a NaN row. */
cudaError_t kg_embed_forward(kg_bf16 *out, const kg_bf16 *table, const int32_t *tokens, int T,
                             int hidden, int vocab, cudaStream_t s);
/* dtable [vocab, hidden] (fp32) += dout[t] at row tokens[t], for every t (tokens repeat: rows
 * add up); invalid tokens are skipped. */
cudaError_t kg_embed_backward(float *dtable, const kg_bf16 *dout, const int32_t *tokens, int T,
                              int hidden, int vocab, cudaStream_t s);

/* ---- kvcache.cu: the decoding KV cache, in slots ----
 * k_cache and v_cache are [n_slots, max_len, Hkv, hd] (bf16): slot i holds one sequence, its
 * token p at [i, p]. A slot is reused by the next sequence once its episode ends (the caller
 * keeps the lengths; nothing needs clearing). */
/* Writes k, v [T, Hkv, hd] (T tokens: a packed prefill, or one new token per sequence) to
 * [slot[t], pos[t]]; slot in [0, n_slots) and pos in [0, max_len) (device data: out-of-range
 * tokens are skipped). */
cudaError_t kg_kv_write(kg_bf16 *k_cache, kg_bf16 *v_cache, const kg_bf16 *k, const kg_bf16 *v,
                        const int32_t *slot, const int32_t *pos, int T, int n_slots, int max_len,
                        int Hkv, int hd, cudaStream_t s);
/* One query token per sequence against its cache: q [B, Hq, hd], out [B, Hq, hd]; sequence b
 * lives in slot[b] and attends to its cached tokens 0 .. ctx_len[b] - 1 (the new token's k and
 * v written first, by kg_kv_write or kg_rope_qk_kv_write). GQA as in attention.cu; hd 64 or 128;
 * ctx_len[b] in [1, max_len]: a sequence whose slot or ctx_len is out of range gets a NaN row (the
 * others are unaffected). fp32 math, out rounded to bf16 once. Flash-decoding: the cached keys are
 * cut into chunks (a multiple of 32 keys, chosen from B, Hkv and max_len so that a batch of 1 still
 * spreads over the GPU), one block per (chunk, kv head, sequence), merged by their log-sum-exp;
 * chunks past ctx_len[b] cost next to nothing. The chunk depends on B, Hkv and max_len, so the same
 * sequence can round differently in calls of other shapes; calls of the same shape give the same
 * bits, whatever lies past ctx_len in the cache. workspace: device scratch of at least
 * kg_decode_attention_workspace_bytes(B, Hq, hd, max_len) bytes, 16-byte aligned (cudaMalloc's
 * are); NULL, smaller or misaligned: cudaErrorInvalidValue (B = 0 needs none). The call allocates
 * nothing. The workspace is in use until the kernels end (stream order). It ends with counters
 * that must be 0 before its first call (kg_decode_attention_workspace_init, once); every call
 * leaves them 0. */
/* Bytes of workspace kg_decode_attention needs for up to B sequences (any Hkv dividing Hq): it
 * only grows with B, so one workspace sized for the largest batch serves every call. 0 for
 * invalid arguments (B <= 0, hd not 64 or 128, ...). */
size_t kg_decode_attention_workspace_bytes(int B, int Hq, int hd, int max_len);
/* Zeroes the counters of a workspace of workspace_bytes sized for B sequences and Hq query heads
 * (stream-ordered; the rest of the workspace needs nothing). The counters sit at the end of
 * workspace_bytes: every call must pass the same workspace_bytes as this one. */
cudaError_t kg_decode_attention_workspace_init(void *workspace, size_t workspace_bytes, int B,
                                               int Hq, cudaStream_t s);
cudaError_t kg_decode_attention(kg_bf16 *out, const kg_bf16 *q, const kg_bf16 *k_cache,
                                const kg_bf16 *v_cache, const int32_t *slot, const int32_t *ctx_len,
                                int B, int Hq, int Hkv, int hd, int n_slots, int max_len,
                                float scale, void *workspace, size_t workspace_bytes,
                                cudaStream_t s);

/* ---- sample.cu: the next token of each row, policy/sample.c's distribution on the GPU ----
 * Greedy, or temperature, then top-k, then top-p, exactly as pol_sample_probs: greedy is the arg
 * max over [0, n_valid), the lowest id on ties; otherwise the candidates are ranked by logit,
 * descending, the lower id first on ties (-0 and +0 tie); top_k keeps the first top_k of the
 * ranking (top_k <= 0 or >= n_valid: all, ties at the cut by lowest id); softmax at temperature
 * T over them; top_p (off when <= 0 or >= 1) then keeps the shortest prefix of the ranking whose
 * mass reaches top_p * (the kept mass): a token stays while the mass ranked strictly above it is
 * below that, and the first always stays. Columns >= n_valid (padding) are never candidates,
 * whatever they hold (huge, inf, NaN).
 * No sort: blocks count the bf16 keys exactly (65,536 possible values) and walk the ranking by
 * key; masses are 64-bit fixed point, so the kept set and the draw are exact and bitwise
 * reproducible (sample.cu says how). The first pass over a row is split over several blocks (so
 * that a batch of 1 spreads over the GPU), in parts that depend on n_valid alone: a row gets the
 * same token, logp and probs, bit for bit, whatever B it comes in (with the same ld, and logits
 * 16-byte aligned as cudaMalloc's are). The draw walks the ranking, as pol_sample does:
 * t = u * (kept mass) with u in [0, 1) (53 bits from the first two 32-bit Philox outputs; advance
 * offset by 2 per draw for disjoint words), the token whose mass interval in ranking order holds
 * t. A row with a NaN among its candidates gets token -1 and logp NaN (kg_sample_probs: a NaN
 * row); the CPU returns -1 there. Logits are read as bf16; all math is fp32 or wider.
 * workspace: device scratch of at least kg_sample_workspace_bytes(B, n_valid) bytes, 16-byte
 * aligned (cudaMalloc's are), for both kg_sample and kg_sample_probs; NULL, smaller or
 * misaligned: cudaErrorInvalidValue (B = 0 needs none). Its contents need no initialising, the
 * call allocates nothing, and it is in use until the kernels end (stream order). */
/* Bytes of device workspace kg_sample needs for B rows of n_valid candidates (about 20 KB a row
 * for n_valid = 151,936): it only grows with B and n_valid, so one workspace sized for the
 * largest batch and the full vocabulary serves every call. 0 for B < 1 or n_valid < 1. */
size_t kg_sample_workspace_bytes(int B, int n_valid);
/* Draws one token per row of logits [B, ld] (bf16; row b at logits + b*ld), candidates
 * [0, n_valid) (1 <= n_valid <= ld). temperature <= 0: greedy. Row b's uniform comes from cuRAND's
 * Philox4_32_10 (curand_kernel.h device API) initialised with seed[b] and offset[b] (device arrays;
 * seed/offset may be NULL for greedy), so a (seed, offset) pair always gives the same draw.
 * tokens[b] (device int32) gets the id; logp[b] (device float, may be NULL) gets
 * log softmax(logits[b, 0:n_valid])[token] at temperature 1 (the model's log-prob, not the warped
 * distribution's). */
cudaError_t kg_sample(int32_t *tokens, float *logp, const kg_bf16 *logits, int B, int ld,
                      int n_valid, float temperature, int top_k, float top_p, const uint64_t *seed,
                      const uint64_t *offset, void *workspace, size_t workspace_bytes,
                      cudaStream_t s);
/* The distribution kg_sample draws row b from, probs [B, n_valid] fp32 (zero outside the kept set;
 * one-hot for greedy): for tests and for callers that need it. */
cudaError_t kg_sample_probs(float *probs, const kg_bf16 *logits, int B, int ld, int n_valid,
                            float temperature, int top_k, float top_p, void *workspace,
                            size_t workspace_bytes, cudaStream_t s);

/* ---- launch.cu: programmatic dependent launch for the calling thread's next launches ----
 * On (1): the launches of kg_embed_forward, kg_rmsnorm_forward, the small-M matmuls, the RoPE
 * launchers and kg_decode_attention may start while the kernel before them still runs, and wait
 * inside for it (launch.cuh says how). For a chain of small kernels such as a decode step; the
 * results are the same bits either way. Off (0) by default. Returns the previous setting. */
int kg_programmatic_launch(int on);

#ifdef __cplusplus
}
#endif

#endif
