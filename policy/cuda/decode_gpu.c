/* The GPU model's KV-cached decoding (see decode_gpu.h): the forward of model_gpu_forward.c for
 * tokens appended to cached sequences, and the GPU sampler over the logits it leaves.
 *
 * One append runs T tokens of any slots through the layers at once (a batched matmul per weight,
 * whatever the mix of prompts and single decode tokens), writes each layer's k and v into the
 * slots' caches at the tokens' positions, then attends:
 *   - when every slot of the call starts empty and its tokens are contiguous (fresh prompts), with
 *     the flash attention of training over the packed prompts (kg_attention_forward);
 *   - otherwise each token as its own query against its slot's cache up to itself
 *     (kg_decode_attention, ctx_len = position + 1): continuations, decode steps, mixes.
 * Only the rows that need logits (each slot's last token) go through the final norm and the LM
 * head. A decode step replays a CUDA graph of that work, one per token count (run_step), unless
 * pol_gpu_dec_set_graphs turned them off. */
#include "policy/cuda/decode_gpu.h"

#include "policy/cuda/model_gpu_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

/* The scratch of one append of up to max_tokens tokens (device; bf16 unless float). */
typedef struct dec_scratch {
    /* [6 * max_tokens]: an append of n tokens keeps its ids, slot, pos, ctx_len and doc_start
     * [n] each, then the rows' token indices, packed n apart (dec_ints), so that one copy
     * uploads its plan; a step's graph holds the addresses of its n */
    int32_t *ints;
    kg_bf16 *x, *xn;                          /* [T, D] residual stream, normed */
    float *rstd;                              /* [T * max(H, KV)] norms' 1/rms (not kept) */
    kg_bf16 *q_raw, *k_raw, *q, *k, *v, *att; /* [T, qd|kvd] */
    float *lse;                               /* [H, T] */
    kg_bf16 *gate, *up, *act;                 /* [T, F] */
    kg_bf16 *xr, *hr;                         /* [rows, D] the rows' residual, normed */
    kg_bf16 *logits;                          /* [rows, V] */
    /* [2 * max rows] each, an R-row draw's pairs packed R apart so that each pair is one
     * copy: the tokens drawn then their logp (float), the seeds then their offsets */
    int32_t *drawn;
    uint64_t *rng;
    void *sample_ws;
    size_t sample_ws_bytes;
    void *attn_ws; /* kg_decode_attention's partials, sized for max_tokens queries */
    size_t attn_ws_bytes;
} dec_scratch;

struct pol_gpu_dec {
    pol_gpu *g;
    int n_slots, max_len, max_tokens;
    int *len;         /* [n_slots] tokens held; -1 when free */
    kg_bf16 *k_cache; /* [L][n_slots][max_len][kvd] */
    kg_bf16 *v_cache;
    size_t layer_stride; /* elements of one layer's cache */
    void *arena;
    dec_scratch s;
    /* host staging, pinned: an upload or read-back is one asynchronous copy */
    int32_t *h_ints;   /* [6 * max_tokens] as s.ints */
    int32_t *h_out;    /* [2 * max rows] as s.drawn */
    uint64_t *h_rng;   /* [2 * max rows] as s.rng */
    int last_step_n;   /* tokens of the last append if it was a decode step, else 0 */
    int32_t *row_slot; /* [max_tokens] the slots of the last append's rows */
    int n_rows;
    int *slot_count, *slot_seen; /* [n_slots] per-append counters */
    /* CUDA graphs of decode steps (pol_gpu_dec_set_graphs), one per token count n: [n_slots + 1] */
    bool graphs;
    bool pdl; /* programmatic dependent launch inside a step (pol_gpu_dec_set_pdl) */
    cudaGraphExec_t *step_exec;
    uint8_t *step_state; /* STEP_* */
    pol_gpu_dec_graph_stats stats;
};

/* A token count's graph: not seen yet, run once without (a count met once, e.g. the tail of a
 * batch, is not worth capturing), captured, or refused by the capture (run without, always). */
enum { STEP_NEW, STEP_SEEN, STEP_READY, STEP_NO_GRAPH };

/* ---- creation ---- */

/* Programmatic launch inside steps unless KGYM_DECODE_PDL=0: the switch for every user of the
 * decoder (the trainer's rollouts too), without a rebuild, should a driver or GPU misbehave. */
static bool pdl_default(void)
{
    const char *v = getenv("KGYM_DECODE_PDL");
    return !(v && strcmp(v, "0") == 0);
}

#define TAKE(type, n) ((type *)pg_take(base, used, (size_t)(n) * sizeof(type)))

/* Lays out the scratch for T tokens and R rows from base (NULL: counts into *used). */
static void carve(const pol_gpu *g, dec_scratch *s, uint8_t *base, size_t *used, size_t T, size_t R,
                  size_t sample_ws, size_t attn_ws)
{
    const pol_dims *d = &g->d;
    size_t heads = (size_t)(d->H > d->KV ? d->H : d->KV);
    s->ints = TAKE(int32_t, 6 * T);
    s->x = TAKE(kg_bf16, T * d->D);
    s->xn = TAKE(kg_bf16, T * d->D);
    s->rstd = TAKE(float, T *heads);
    s->q_raw = g->cfg.qk_norm ? TAKE(kg_bf16, T * d->qd) : NULL;
    s->k_raw = g->cfg.qk_norm ? TAKE(kg_bf16, T * d->kvd) : NULL;
    s->q = TAKE(kg_bf16, T * d->qd);
    s->k = TAKE(kg_bf16, T * d->kvd);
    s->v = TAKE(kg_bf16, T * d->kvd);
    s->att = TAKE(kg_bf16, T * d->qd);
    s->lse = TAKE(float, T * d->H);
    s->gate = TAKE(kg_bf16, T * d->F);
    s->up = TAKE(kg_bf16, T * d->F);
    s->act = TAKE(kg_bf16, T * d->F);
    s->xr = TAKE(kg_bf16, R * d->D);
    s->hr = TAKE(kg_bf16, R * d->D);
    s->logits = TAKE(kg_bf16, R * d->V);
    s->drawn = TAKE(int32_t, 2 * R);
    s->rng = TAKE(uint64_t, 2 * R);
    s->sample_ws = pg_take(base, used, sample_ws);
    s->sample_ws_bytes = sample_ws;
    s->attn_ws = pg_take(base, used, attn_ws);
    s->attn_ws_bytes = attn_ws;
}

/* The pinned staging buffers hold bytes (NULL when they cannot be had). */
static void *pinned(size_t bytes)
{
    void *p = NULL;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static int alloc_host(pol_gpu_dec *d, int max_rows)
{
    size_t T = (size_t)d->max_tokens;
    d->len = malloc((size_t)d->n_slots * sizeof *d->len);
    d->slot_count = calloc((size_t)d->n_slots, sizeof *d->slot_count);
    d->slot_seen = calloc((size_t)d->n_slots, sizeof *d->slot_seen);
    d->h_ints = pinned(6 * T * sizeof *d->h_ints);
    d->h_out = pinned(2 * (size_t)max_rows * sizeof *d->h_out);
    d->h_rng = pinned(2 * (size_t)max_rows * sizeof *d->h_rng);
    d->row_slot = malloc(T * sizeof *d->row_slot);
    d->step_exec = calloc((size_t)d->n_slots + 1, sizeof *d->step_exec);
    d->step_state = calloc((size_t)d->n_slots + 1, sizeof *d->step_state);
    if (!d->len || !d->slot_count || !d->slot_seen || !d->h_ints || !d->h_out || !d->h_rng ||
        !d->row_slot || !d->step_exec || !d->step_state)
        return -1;
    for (int i = 0; i < d->n_slots; i++)
        d->len[i] = -1;
    return 0;
}

int pol_gpu_dec_create(pol_gpu_dec **out, pol_gpu *g, int n_slots, int max_len, int max_tokens,
                       char *err, size_t errcap)
{
    *out = NULL;
    if (g->head != POL_HEAD_LM)
        return text_fail(err, errcap, "decode_gpu: the model has no LM head");
    if (n_slots < 1 || max_len < 1 || max_tokens < n_slots ||
        (long long)max_tokens * (g->d.H > g->d.KV ? g->d.H : g->d.KV) > INT_MAX)
        return text_fail(err, errcap,
                         "decode_gpu: cannot make %d slots of %d tokens with %d tokens per call "
                         "(need slots >= 1, length >= 1, tokens per call >= slots)",
                         n_slots, max_len, max_tokens);
    int R = max_tokens < n_slots ? max_tokens : n_slots;
    pol_gpu_dec *d = calloc(1, sizeof *d);
    if (!d || (d->g = g, d->n_slots = n_slots, d->max_len = max_len, d->max_tokens = max_tokens,
               d->graphs = true, d->pdl = pdl_default(), alloc_host(d, R) != 0)) {
        pol_gpu_dec_free(d);
        return text_fail(err, errcap, "decode_gpu: out of host memory (or pinned memory)");
    }
    size_t ws = kg_sample_workspace_bytes(R, g->d.V);
    /* enough for any append: the size only grows with the number of queries */
    size_t attn_ws = kg_decode_attention_workspace_bytes(max_tokens, g->d.H, g->d.hd, max_len);
    size_t used = 0;
    carve(g, &d->s, NULL, &used, (size_t)max_tokens, (size_t)R, ws, attn_ws);
    d->layer_stride = (size_t)n_slots * (size_t)max_len * g->d.kvd;
    size_t cache_bytes = 2 * (size_t)g->d.L * d->layer_stride * sizeof(kg_bf16);
    pg_run r = {g, err, errcap, "decode_gpu create", -1};
    char what[160];
    text_fmt(what, sizeof what, "allocating the KV cache (%d slots x %d tokens, %.1f MiB)", n_slots,
             max_len, (double)cache_bytes / (1 << 20));
    if (pg_ck(&r, cudaMalloc((void **)&d->k_cache, cache_bytes), what)) {
        d->k_cache = NULL;
        pol_gpu_dec_free(d);
        return -1;
    }
    d->v_cache = d->k_cache + (size_t)g->d.L * d->layer_stride;
    text_fmt(what, sizeof what, "allocating the decoding scratch (%.1f MiB)",
             (double)used / (1 << 20));
    if (pg_ck(&r, cudaMalloc(&d->arena, used), what)) {
        d->arena = NULL;
        pol_gpu_dec_free(d);
        return -1;
    }
    used = 0;
    carve(g, &d->s, d->arena, &used, (size_t)max_tokens, (size_t)R, ws, attn_ws);
    if (pg_ck(&r,
              kg_decode_attention_workspace_init(d->s.attn_ws, d->s.attn_ws_bytes, max_tokens,
                                                 g->d.H, g->stream),
              "decode attention workspace")) {
        pol_gpu_dec_free(d);
        return -1;
    }
    *out = d;
    return 0;
}

void pol_gpu_dec_free(pol_gpu_dec *d)
{
    if (!d)
        return;
    if (d->g)
        cudaStreamSynchronize(d->g->stream);
    for (int n = 0; d->step_exec && n <= d->n_slots; n++)
        if (d->step_exec[n])
            cudaGraphExecDestroy(d->step_exec[n]);
    free(d->step_exec);
    free(d->step_state);
    cudaFree(d->k_cache);
    cudaFree(d->arena);
    free(d->len);
    free(d->slot_count);
    free(d->slot_seen);
    cudaFreeHost(d->h_ints);
    cudaFreeHost(d->h_out);
    cudaFreeHost(d->h_rng);
    free(d->row_slot);
    free(d);
}

int pol_gpu_dec_acquire(pol_gpu_dec *d)
{
    for (int i = 0; i < d->n_slots; i++)
        if (d->len[i] < 0) {
            d->len[i] = 0;
            return i;
        }
    return -1;
}

void pol_gpu_dec_release(pol_gpu_dec *d, int slot)
{
    if (slot >= 0 && slot < d->n_slots)
        d->len[slot] = -1;
}

int pol_gpu_dec_len(const pol_gpu_dec *d, int slot)
{
    return slot >= 0 && slot < d->n_slots ? d->len[slot] : -1;
}

void pol_gpu_dec_shape(const pol_gpu_dec *d, int *n_slots, int *max_len, int *max_tokens)
{
    *n_slots = d->n_slots;
    *max_len = d->max_len;
    *max_tokens = d->max_tokens;
}

int pol_gpu_dec_vocab(const pol_gpu_dec *d)
{
    return d->g->d.V;
}

int pol_gpu_dec_rows(const pol_gpu_dec *d, const int32_t **slots)
{
    *slots = d->row_slot;
    return d->n_rows;
}

/* After a failed call: nothing of it still runs, and its (non-sticky) error is not left for
 * the next call to report as its own. */
static void drain_failed_call(cudaStream_t st)
{
    cudaStreamSynchronize(st);
    cudaGetLastError();
}

/* ---- one append ---- */

/* What the host works out for an append before anything runs. */
typedef struct append_plan {
    int n, rows;
    bool fresh; /* every slot starts empty and its tokens are contiguous: flash attention */
} append_plan;

/* The k-th array of an n-token append in a [6 * max_tokens] block (s.ints or h_ints): ids, slot,
 * pos, ctx_len, doc_start, then the rows' token indices (DEC_*). */
enum { DEC_IDS, DEC_SLOT, DEC_POS, DEC_CTX, DEC_DOC, DEC_ROW_TOK };
static int32_t *dec_ints(int32_t *block, int n, int k)
{
    return block + (size_t)k * (size_t)n;
}

/* Checks the tokens and fills the staging arrays: ids, slot, pos, ctx_len, doc_start [n] each,
 * the rows' token indices and slots. */
static int plan_append(pol_gpu_dec *d, const int32_t *slots, const int32_t *ids, int n,
                       append_plan *p, char *err, size_t errcap)
{
    if (n < 1 || n > d->max_tokens || !slots || !ids)
        return text_fail(err, errcap, "decode_gpu append: %d tokens (1 to %d per call)", n,
                         d->max_tokens);
    for (int t = 0; t < n; t++) {
        int s = slots[t];
        if (s < 0 || s >= d->n_slots || d->len[s] < 0)
            return text_fail(err, errcap,
                             "decode_gpu append: token %d names slot %d, not an "
                             "acquired slot",
                             t, s);
        if (ids[t] < 0 || ids[t] >= d->g->d.V)
            return text_fail(err, errcap,
                             "decode_gpu append: token %d has id %d, outside the vocabulary "
                             "[0, %d)",
                             t, ids[t], d->g->d.V);
        d->slot_count[s] = 0;
        d->slot_seen[s] = -1; /* index of the slot's previous token in the call */
    }
    int32_t *h_ids = dec_ints(d->h_ints, n, DEC_IDS), *h_slot = dec_ints(d->h_ints, n, DEC_SLOT),
            *h_pos = dec_ints(d->h_ints, n, DEC_POS), *h_ctx = dec_ints(d->h_ints, n, DEC_CTX),
            *h_doc = dec_ints(d->h_ints, n, DEC_DOC),
            *h_row_tok = dec_ints(d->h_ints, n, DEC_ROW_TOK);
    p->n = n;
    p->fresh = true;
    for (int t = 0; t < n; t++) {
        int s = slots[t];
        if (d->slot_seen[s] >= 0 && d->slot_seen[s] != t - 1)
            p->fresh = false; /* not contiguous */
        if (d->len[s] != 0)
            p->fresh = false;
        int pos = d->len[s] + d->slot_count[s]++;
        if (pos >= d->max_len)
            return text_fail(err, errcap,
                             "decode_gpu append: slot %d would hold %d tokens, more than its %d", s,
                             pos + 1, d->max_len);
        h_doc[t] = d->slot_seen[s] < 0 ? t : h_doc[d->slot_seen[s]];
        d->slot_seen[s] = t;
        h_ids[t] = ids[t];
        h_slot[t] = s;
        h_pos[t] = pos;
        h_ctx[t] = pos + 1;
    }
    /* a slot's row is its last token: slot_seen now holds that index */
    p->rows = 0;
    for (int t = 0; t < n; t++)
        if (d->slot_seen[slots[t]] == t) {
            h_row_tok[p->rows] = t;
            d->row_slot[p->rows++] = slots[t];
        }
    return 0;
}

/* The plan's six arrays in one copy: both blocks hold them n apart. The pinned staging is not
 * touched again before the append's closing sync. */
static int upload_plan(pg_run *r, pol_gpu_dec *d, const append_plan *p)
{
    size_t count = 5 * (size_t)p->n + (size_t)p->rows;
    return pg_ck(r,
                 cudaMemcpyAsync(d->s.ints, d->h_ints, count * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, d->g->stream),
                 "uploading the tokens");
}

/* The scratch as one layer's activations for the model's shared layer code (pg_qkv_forward,
 * pg_mlp_block_forward): the residual stream is both the layer's input and its x_mid (the adds
 * are accumulated into it in place), the norms share one output (their rstd is not kept, so the
 * layer norms ride on the matmuls). */
static pg_layer_acts layer_view(dec_scratch *s)
{
    pg_layer_acts A = {
        .x_in = s->x,
        .rstd1 = NULL, /* no backward: the norms may ride on the matmuls (kg_matmul_norm) */
        .xn1 = s->xn,
        .q_raw = s->q_raw,
        .k_raw = s->k_raw,
        .q_rstd = s->rstd,
        .k_rstd = s->rstd,
        .q = s->q,
        .k = s->k,
        .v = s->v,
        .att = s->att,
        .lse = s->lse,
        .x_mid = s->x,
        .rstd2 = NULL,
        .xn2 = s->xn,
        .gate = s->gate,
        .up = s->up,
        .act = s->act,
    };
    return A;
}

/* One layer over the T tokens of the plan, the residual stream s->x updated in place. */
static int dec_layer(pg_run *r, pol_gpu_dec *d, int l, const append_plan *p)
{
    pol_gpu *g = d->g;
    const pol_dims *dm = &g->d;
    const pg_layer_off *o = &g->lo[l];
    dec_scratch *s = &d->s;
    cudaStream_t st = g->stream;
    int T = p->n;
    const int32_t *slot = dec_ints(s->ints, T, DEC_SLOT), *pos = dec_ints(s->ints, T, DEC_POS),
                  *ctx = dec_ints(s->ints, T, DEC_CTX), *doc = dec_ints(s->ints, T, DEC_DOC);
    kg_bf16 *kc = d->k_cache + (size_t)l * d->layer_stride,
            *vc = d->v_cache + (size_t)l * d->layer_stride;
    float scale = 1.0f / sqrtf((float)dm->hd);
    pg_layer_acts A = layer_view(s);
    r->layer = l;
    /* the new tokens' k and v go to the cache in the RoPE launch (kg_rope_qk_kv_write) */
    const kg_kv_dest cache = {kc, vc, s->v, slot, d->n_slots, d->max_len};
    if (pg_qkv_forward(r, o, &A, T, pos, &cache))
        return -1;
    cudaError_t e = p->fresh ? kg_attention_forward(s->att, s->lse, s->q, s->k, s->v, doc, T, dm->H,
                                                    dm->KV, dm->hd, scale, st)
                             : kg_decode_attention(s->att, s->q, kc, vc, slot, ctx, T, dm->H,
                                                   dm->KV, dm->hd, d->n_slots, d->max_len, scale,
                                                   s->attn_ws, s->attn_ws_bytes, st);
    /* the residual adds ride on the matmuls (beta = 1), as in the training forward, here in
     * place: the stream is both the layer's input and its x_mid */
    if (pg_ck(r, e, p->fresh ? "attention (prefill)" : "attention (cached)") ||
        pg_ck(r,
              kg_matmul(g->mm, s->x, s->att, pg_w(g, o->wo), NULL, T, dm->D, (int)dm->qd, 0, 1,
                        1.0f, st),
              "o_proj + residual") ||
        pg_mlp_block_forward(r, o, &A, T, NULL) ||
        pg_ck(r,
              kg_matmul(g->mm, s->x, s->act, pg_w(g, o->w_down), NULL, T, dm->D, dm->F, 0, 1, 1.0f,
                        st),
              "down_proj + residual"))
        return -1;
    r->layer = -1;
    return 0;
}

/* The rows' residuals gathered (the embedding kernel over the stream as its table), normed, and
 * through the LM head. */
static int dec_head(pg_run *r, pol_gpu_dec *d, const append_plan *p)
{
    pol_gpu *g = d->g;
    const pol_dims *dm = &g->d;
    dec_scratch *s = &d->s;
    cudaStream_t st = g->stream;
    return pg_ck(r,
                 kg_embed_forward(s->xr, s->x, dec_ints(s->ints, p->n, DEC_ROW_TOK), p->rows, dm->D,
                                  p->n, st),
                 "gathering the rows") ||
           pg_ck(r,
                 kg_rmsnorm_forward(s->hr, s->rstd, s->xr, pg_w(g, g->final_norm), p->rows, dm->D,
                                    g->cfg.rms_eps, st),
                 "model.norm") ||
           pg_ck(r,
                 kg_matmul(g->mm, s->logits, s->hr, pg_w(g, g->lm_head), NULL, p->rows, dm->V,
                           dm->D, 0, 1, 0.0f, st),
                 "lm_head");
}

/* The device work of an append once its plan is uploaded: embedding, layers, LM head. */
static int run_kernels(pg_run *r, pol_gpu_dec *d, const append_plan *p)
{
    pol_gpu *g = d->g;
    if (pg_ck(r,
              kg_embed_forward(d->s.x, pg_w(g, g->embed), dec_ints(d->s.ints, p->n, DEC_IDS), p->n,
                               g->d.D, g->d.V, g->stream),
              "embed_tokens"))
        return -1;
    for (int l = 0; l < g->d.L; l++)
        if (dec_layer(r, d, l, p) != 0)
            return -1;
    return dec_head(r, d, p);
}

/* run_kernels with the step's kernels launched programmatically when d->pdl (kernels.h,
 * kg_programmatic_launch): each starts while the one before finishes, the gaps between ~200
 * small kernels of a batch-1 step overlapped. The setting is the calling thread's; it is put
 * back as it was. */
static int run_append(pg_run *r, pol_gpu_dec *d, const append_plan *p)
{
    const int was = kg_programmatic_launch(d->pdl);
    const int rc = run_kernels(r, d, p);
    kg_programmatic_launch(was);
    return rc;
}

/* Captures run_append for the plan's token count as a graph: 0, or -1 (nothing kept, no error
 * left pending) when the capture or the instantiation fails. Nothing runs while capturing. */
static int capture_step(pg_run *r, pol_gpu_dec *d, const append_plan *p)
{
    cudaStream_t st = d->g->stream;
    cudaGraph_t graph = NULL;
    /* thread-local: a call that is unsafe while capturing (cudaMalloc, a synchronous copy) in
     * some launcher fails the capture, which then falls back, instead of running at once and
     * leaving the graph a pointer it freed */
    if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    int rc = run_append(r, d, p);
    cudaError_t e = cudaStreamEndCapture(st, &graph);
    if (rc == 0 && e == cudaSuccess && graph)
        e = cudaGraphInstantiate(&d->step_exec[p->n], graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    if (rc != 0 || e != cudaSuccess) {
        d->step_exec[p->n] = NULL;
        cudaGetLastError(); /* the failed capture's error is not the append's */
        return -1;
    }
    return 0;
}

/* A graph of token count n that failed to launch is dropped, its count runs without one. */
static void drop_graph(pol_gpu_dec *d, int n)
{
    cudaGraphExecDestroy(d->step_exec[n]);
    d->step_exec[n] = NULL;
    d->step_state[n] = STEP_NO_GRAPH;
    d->stats.refused++;
    cudaGetLastError();
}

/* A decode step (one token in each of n slots, none a fresh prompt) through its token count's
 * graph: the same kernels with the same arguments every time (the tokens, slots and positions
 * are device data the upload rewrote), so one launch replaces ~16 per layer and the host's
 * launch gaps between them. The second step of a count captures it; the first, and any count
 * whose capture (or launch) failed, run without a graph: the same work, the same results. */
static int run_step(pg_run *r, pol_gpu_dec *d, const append_plan *p)
{
    uint8_t *state = &d->step_state[p->n];
    if (*state == STEP_NEW) {
        *state = STEP_SEEN;
        return run_append(r, d, p);
    }
    if (*state == STEP_SEEN) {
        if (capture_step(r, d, p) == 0) {
            *state = STEP_READY;
            d->stats.captured++;
        } else {
            *state = STEP_NO_GRAPH;
            d->stats.refused++;
        }
    }
    if (*state == STEP_NO_GRAPH)
        return run_append(r, d, p);
    if (cudaGraphLaunch(d->step_exec[p->n], d->g->stream) != cudaSuccess) {
        drop_graph(d, p->n);
        return run_append(r, d, p);
    }
    d->stats.replayed++;
    return 0;
}

void pol_gpu_dec_set_graphs(pol_gpu_dec *d, bool on)
{
    d->graphs = on;
}

/* The graphs captured so far hold their launches' attributes: a change drops them, and each
 * token count is captured again under the new setting. */
void pol_gpu_dec_set_pdl(pol_gpu_dec *d, bool on)
{
    if (d->pdl == on)
        return;
    d->pdl = on;
    for (int n = 0; n <= d->n_slots; n++) {
        if (d->step_exec[n])
            cudaGraphExecDestroy(d->step_exec[n]);
        d->step_exec[n] = NULL;
        d->step_state[n] = STEP_NEW;
    }
}

pol_gpu_dec_graph_stats pol_gpu_dec_graphs(const pol_gpu_dec *d)
{
    return d->stats;
}

int pol_gpu_dec_append(pol_gpu_dec *d, const int32_t *slots, const int32_t *ids, int n, char *err,
                       size_t errcap)
{
    pol_gpu *g = d->g;
    pg_run r = {g, err, errcap, "decode", -1};
    append_plan p = {0, 0, false};
    d->n_rows = 0;
    d->last_step_n = 0;
    if (plan_append(d, slots, ids, n, &p, err, errcap) != 0)
        return -1;
    /* rows == n: each slot has one token, so n <= n_slots (the graph arrays' size) */
    bool step = d->graphs && !p.fresh && p.rows == p.n && p.n <= d->n_slots;
    bool failed = upload_plan(&r, d, &p) || (step ? run_step(&r, d, &p) : run_append(&r, d, &p)) ||
                  pg_sync(&r);
    if (failed) {
        drain_failed_call(g->stream);
        return -1;
    }
    for (int t = 0; t < n; t++)
        d->len[slots[t]]++;
    d->n_rows = p.rows;
    d->last_step_n = step ? p.n : 0;
    return 0;
}

/* Replaying the last step's graph recomputes that step from the same uploaded plan: the same
 * cache rows and logits are written again, so nothing a later call reads changes. */
int pol_gpu_dec_time_step_graph(pol_gpu_dec *d, int reps, double *ms, char *err, size_t errcap)
{
    int n = d->last_step_n;
    *ms = 0;
    if (reps < 1 || n < 1 || d->step_state[n] != STEP_READY)
        return text_fail(err, errcap,
                         "decode_gpu: the last append was not a decode step replayed from a graph");
    pg_run r = {d->g, err, errcap, "timing the step's graph", -1};
    cudaStream_t st = d->g->stream;
    cudaEvent_t ev[2] = {NULL, NULL};
    float elapsed = 0;
    bool failed = pg_ck(&r, cudaEventCreate(&ev[0]), "an event") ||
                  pg_ck(&r, cudaEventCreate(&ev[1]), "an event") ||
                  pg_ck(&r, cudaEventRecord(ev[0], st), "recording an event");
    for (int i = 0; !failed && i < reps; i++)
        failed = pg_ck(&r, cudaGraphLaunch(d->step_exec[n], st), "replaying the step");
    failed = failed || pg_ck(&r, cudaEventRecord(ev[1], st), "recording an event") || pg_sync(&r) ||
             pg_ck(&r, cudaEventElapsedTime(&elapsed, ev[0], ev[1]), "reading the events");
    if (failed)
        drain_failed_call(st);
    for (int i = 0; i < 2; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    *ms = failed ? 0 : (double)elapsed / reps;
    return failed ? -1 : 0;
}

int pol_gpu_dec_logits(pol_gpu_dec *d, float *out, char *err, size_t errcap)
{
    pg_run r = {d->g, err, errcap, "decode logits", -1};
    size_t count = (size_t)d->n_rows * d->g->d.V;
    if (d->n_rows == 0)
        return text_fail(err, errcap, "decode_gpu logits: no append to read");
    kg_bf16 *host = malloc(count * sizeof *host);
    if (!host)
        return text_fail(err, errcap, "decode_gpu logits: out of host memory");
    int rc = pg_ck(&r,
                   cudaMemcpyAsync(host, d->s.logits, count * sizeof *host, cudaMemcpyDeviceToHost,
                                   d->g->stream),
                   "copying the logits")
                 ? -1
                 : pg_sync(&r);
    for (size_t i = 0; rc == 0 && i < count; i++) {
        uint32_t u = (uint32_t)host[i] << 16;
        memcpy(&out[i], &u, sizeof u);
    }
    free(host);
    return rc;
}

int pol_gpu_dec_sample(pol_gpu_dec *d, const pol_sample_cfg *cfg, int n_valid,
                       const uint64_t *seeds, int32_t *tokens, float *logp, char *err,
                       size_t errcap)
{
    pol_gpu *g = d->g;
    pg_run r = {g, err, errcap, "decode sample", -1};
    int R = d->n_rows, V = g->d.V;
    if (R == 0)
        return text_fail(err, errcap, "decode_gpu sample: no append to draw from");
    if (n_valid <= 0 || n_valid > V)
        n_valid = V;
    bool greedy = !cfg || !(cfg->temperature > 0);
    if (!greedy && !seeds)
        return text_fail(err, errcap, "decode_gpu sample: sampling needs seeds");
    cudaStream_t st = g->stream;
    dec_scratch *s = &d->s;
    if (!greedy) {
        /* the draw for the token at position len: each draw takes two 32-bit Philox words
         * (kg_sample), so position p owns words 2p and 2p + 1 of its sequence's stream */
        memcpy(d->h_rng, seeds, (size_t)R * sizeof *seeds);
        for (int i = 0; i < R; i++)
            d->h_rng[R + i] = 2 * (uint64_t)d->len[d->row_slot[i]];
    }
    /* seeds and offsets in one copy, tokens and logp back in one: each pair is packed R apart
     * on the device and in the pinned staging */
    int32_t *dev_tokens = s->drawn;
    float *dev_logp = (float *)(s->drawn + R);
    uint64_t *dev_seeds = s->rng, *dev_offsets = s->rng + R;
    bool failed =
        (!greedy && pg_ck(&r,
                          cudaMemcpyAsync(dev_seeds, d->h_rng, 2 * (size_t)R * sizeof *d->h_rng,
                                          cudaMemcpyHostToDevice, st),
                          "seeds")) ||
        pg_ck(&r,
              kg_sample(dev_tokens, dev_logp, s->logits, R, V, n_valid,
                        greedy ? 0.0f : cfg->temperature, greedy ? 0 : cfg->top_k,
                        greedy ? 1.0f : cfg->top_p, greedy ? NULL : dev_seeds,
                        greedy ? NULL : dev_offsets, s->sample_ws, s->sample_ws_bytes, st),
              "sampling") ||
        pg_ck(&r,
              cudaMemcpyAsync(d->h_out, dev_tokens, 2 * (size_t)R * sizeof *d->h_out,
                              cudaMemcpyDeviceToHost, st),
              "copying the tokens") ||
        pg_sync(&r);
    if (failed) {
        drain_failed_call(st);
        return -1;
    }
    memcpy(tokens, d->h_out, (size_t)R * sizeof *tokens);
    if (logp)
        memcpy(logp, d->h_out + R, (size_t)R * sizeof *logp);
    for (int i = 0; i < R; i++)
        if (tokens[i] < 0)
            return text_fail(err, errcap, "decode_gpu sample: row %d (slot %d) has NaN logits", i,
                             d->row_slot[i]);
    return 0;
}
