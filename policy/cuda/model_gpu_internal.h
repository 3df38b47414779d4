/* model_gpu_internal: what the model_gpu*.c files share (not part of the API): the model's
 * struct, the device layout of its tensors and activations, and the error helpers. */
#ifndef KGYM_POLICY_MODEL_GPU_INTERNAL_H
#define KGYM_POLICY_MODEL_GPU_INTERNAL_H

#include <stdint.h>

#include "policy/cuda/model_gpu.h"

/* Device tensors start on 256-byte boundaries (cuBLASLt's default assumption): offsets are
 * multiples of 128 elements, 256 bytes in bf16 and 512 in fp32. */
#define PG_ALIGN_ELEMS 128
/* Activation buffers too. */
#define PG_ALIGN_BYTES 256
/* The offset of a tensor the model does not have (biases without attn_bias, ...). */
#define PG_NONE SIZE_MAX
/* cuBLASLt's workspace (its recommendation for Hopper) */
#define PG_MATMUL_WORKSPACE ((size_t)32 << 20)

/* Carves bytes off an arena at *used, PG_ALIGN_BYTES-aligned; base NULL only counts (the same
 * layout code sizes an arena, then lays it out). */
static inline void *pg_take(uint8_t *base, size_t *used, size_t bytes)
{
    void *p = base ? base + *used : NULL;
    *used += (bytes + PG_ALIGN_BYTES - 1) / PG_ALIGN_BYTES * PG_ALIGN_BYTES;
    return p;
}

/* Device offsets (in elements, into every flat buffer) of one layer's tensors. */
typedef struct pg_layer_off {
    size_t attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, mlp_norm, w_gate, w_up, w_down;
} pg_layer_off;

/* One layer's activations on the device (bf16 unless float), kept for the backward by a train
 * forward; the same names as pol_layer_acts. With recompute a layer keeps only x_in, and the rest
 * lives in pg_acts.work, which every layer shares. */
typedef struct pg_layer_acts {
    kg_bf16 *x_in;            /* [N, D] residual stream entering the layer */
    float *rstd1;             /* [N] */
    kg_bf16 *xn1;             /* [N, D] */
    kg_bf16 *q_raw, *k_raw;   /* [N, qd], [N, kvd] before the q/k norm (qk_norm only) */
    float *q_rstd, *k_rstd;   /* [N * H], [N * KV] (qk_norm only) */
    kg_bf16 *q, *k, *v;       /* [N, qd], [N, kvd], [N, kvd] after norm and RoPE */
    kg_bf16 *att;             /* [N, qd] attention output */
    float *lse;               /* [H, N] the attention's log-sum-exp */
    kg_bf16 *x_mid;           /* [N, D] residual stream after attention */
    float *rstd2;             /* [N] */
    kg_bf16 *xn2;             /* [N, D] */
    kg_bf16 *gate, *up, *act; /* [N, F] */
} pg_layer_acts;

/* Everything one forward (and its backward) works in, carved out of one device arena. */
typedef struct pg_acts {
    int N;
    bool train;
    bool recompute; /* train with recompute: the layers keep only x_in, the backward reruns them */
    size_t bytes;   /* the arena bytes this layout takes (the arena may be larger) */
    int32_t *ids, *pos, *doc_start; /* [N] */
    /* L entries (host array): every one carved in full by a train forward, only their x_in with
     * recompute; without train only [0], which every layer runs through */
    pg_layer_acts *layers;
    /* recompute only: the one layer's activations (x_in aside) that every layer runs through, in
     * the forward and again in the backward; pg_layer_acts_for points its x_in at the layer's */
    pg_layer_acts work;
    kg_bf16 *x_final, *h; /* [N, D] */
    float *rstd_f;        /* [N] */
    kg_bf16 *logits;      /* [N, V] (LM head) */
    float *values;        /* [N] (value head) */
    int32_t *targets;     /* [N] log-prob targets (masked ones set to 0) */
    float *logp, *ent;    /* [N] */
    /* backward scratch (train only) */
    kg_bf16 *d_res, *d_xn;          /* [N, D] gradient of the residual stream; of a norm's output */
    kg_bf16 *d_att, *dq;            /* [N, qd] */
    kg_bf16 *dk, *dv;               /* [N, kvd] */
    kg_bf16 *d_act, *d_gate, *d_up; /* [N, F] */
    kg_bf16 *dlogits;               /* [N, V] (LM head) */
    float *w_logp, *w_ent, *dvalues; /* [N] */
} pg_acts;

struct pol_gpu {
    pol_config cfg;
    pol_head head;
    pol_dims d;
    /* the table (a copy of the CPU model's) and each tensor's device offset */
    pol_param_info *tensors;
    size_t n_tensors;
    size_t *dev_off;
    size_t n_host; /* floats of the CPU model's flat buffer */
    size_t n_dev;  /* elements of each device buffer (padding included, zero) */
    pg_layer_off *lo;
    size_t embed, final_norm, lm_head, score_w, score_b; /* PG_NONE when absent */
    bool training;
    bool recompute; /* pol_gpu_set_recompute's setting, for the next train forward */

    cudaStream_t stream;
    kg_matmul_ctx *mm;
    kg_bf16 *w;                             /* bf16 weights */
    float *master, *grad, *adam_m, *adam_v; /* training only */
    int64_t step;
    float *inv_freq; /* [head_dim / 2] RoPE inverse frequencies (llama3 scaling included) */
    float *scalars;  /* [2] the step's sum of squares and clip factor */

    void *arena;
    size_t arena_bytes;
    pg_acts a;
    bool fwd_valid; /* a.* holds a complete forward */
};

/* Where the current call is, for its error messages. */
typedef struct pg_run {
    pol_gpu *g;
    char *err;
    size_t errcap;
    const char *phase; /* "forward", "backward", ... */
    int layer;         /* -1 outside the layers */
} pg_run;

/* 0 on cudaSuccess, else the message "<phase>[ layer l]: <what>: <CUDA error>" and -1. */
int pg_ck(pg_run *r, cudaError_t e, const char *what);
/* Waits for the model's stream: the asynchronous errors of everything queued surface here. */
int pg_sync(pg_run *r);

/* n floats host -> device / device -> host, queued on the model's stream (the host side must
 * stay valid until the next pg_sync). */
int pg_to_device(pg_run *r, float *dev, const float *host, int n, const char *what);
int pg_to_host(pg_run *r, float *host, const float *dev, int n, const char *what);

/* The bf16 weight / fp32 gradient at a device offset (NULL for PG_NONE). */
static inline kg_bf16 *pg_w(const pol_gpu *g, size_t off)
{
    return off == PG_NONE ? NULL : g->w + off;
}

static inline float *pg_g(const pol_gpu *g, size_t off)
{
    return off == PG_NONE || !g->grad ? NULL : g->grad + off;
}

/* Shared by backward and logprobs: uploads targets [N] with the masked ones (< 0) set to 0, after
 * checking that none reaches the vocabulary. */
int pg_upload_targets(pg_run *r, const int32_t *targets);

/* Where layer l's activations live in the current layout: its own entry after a train forward;
 * with recompute the shared a->work, whose x_in this points at layer l's kept input; without train
 * entry 0, which every layer reuses. */
pg_layer_acts *pg_layer_acts_for(pg_acts *a, int l);

/* One decoder layer of the forward: A->x_in -> every activation in A -> out (out may be A->x_in:
 * the input is dead by then). out NULL stops once the activations the backward reads are written
 * (a recompute: the layer's output is already kept as the next layer's input). */
int pg_layer_forward(pg_run *r, int l, pg_layer_acts *A, kg_bf16 *out);

/* A layer's q, k, v for N tokens at positions pos from A->x_in: the input norm into A->xn1 (rstd
 * into A->rstd1; A->rstd1 NULL keeps none, and the norm rides on the projections' launch), the
 * projections (biases in the epilogue), the per-head q/k norm (into A->q_raw / k_raw first, rstd
 * into A->q_rstd / k_rstd), RoPE. Shared by the forward (cache NULL) and the decoder
 * (decode_gpu.c), whose k and v also go to its KV cache in the RoPE launch (cache: where; its v is
 * A->v). */
int pg_qkv_forward(pg_run *r, const pg_layer_off *o, pg_layer_acts *A, int N, const int32_t *pos,
                   const kg_kv_dest *cache);
/* A layer's MLP block for N tokens from A->x_mid: post-attention norm (into A->xn2; A->rstd2
 * NULL: none kept, the norm rides on the gate/up launch), gate / up, SwiGLU into A->act; then,
 * unless out is NULL, out = x_mid + act Wd^T. Shared like pg_qkv_forward. */
int pg_mlp_block_forward(pg_run *r, const pg_layer_off *o, pg_layer_acts *A, int N, kg_bf16 *out);

/* The trunk's backward from dL/dh (in a.d_xn), ending in the embedding's gradient. */
int pg_trunk_backward(pg_run *r);

#endif
