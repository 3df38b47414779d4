/* policy-gpu-check: a test-only program that tests/gpu/test_policy_gpu.py drives. It runs the GPU
 * model (policy/cuda/model_gpu.h) and its decoder (policy/cuda/decode_gpu.h) on a batch and dumps
 * what the test compares against HF transformers, as safetensors (policy/safetensors.h) or JSON
 * lines. A thin layer over the library: every number comes from the GPU API; the CPU model
 * (policy/model.h) only loads the checkpoint and lays out the gradients' names.
 *
 * A batch is JSON, as tests/policy/policy_check.c's: {"ids": [[...], ...], "targets": [[...]],
 * "weights": [[...]], "ent_weights": [[...]]} (all B x T; ids required). Each row is one
 * document (doc_start = the row's first token) of the one packed forward.
 *
 *   logits DIR BATCH OUT        logits [B,T,V], hidden.<l> [B,T,D] (the residual stream after
 *                               layer l), entropy [B,T], and logprobs [B,T] given targets
 *   grads  DIR BATCH OUT        loss and every parameter's gradient (by its name), from a
 *                               training model: L = -sum(weights logp + ent_weights entropy)
 *   decode DIR BATCH OUT --prefill K [--chunk C] [--interleave]
 *                               one decoder slot per row: the first K tokens of every row in one
 *                               append, then C (default 1) tokens per row per append; logits
 *                               [B,S,V] after each append's last token of each row, positions [S]
 *                               (the token index each step's logits follow: K-1, K-1+C, ...).
 *                               --interleave feeds the rows' tokens of an append position-major
 *                               (row 0 token 0, row 1 token 0, ...) instead of row after row.
 *   generate DIR --ids JSON --max-new N [--batch-copies C] [--eos ID,ID|none] [--n-valid NV]
 *            [--slots S] [--max-tokens M]
 *                               greedy pol_gpu_generate of every prompt (--ids: a list of ids or a
 *                               list of lists), each C times in one batch; one JSON line per
 *                               sequence, in order (prompt-major): {"prompt", "copy", "ids",
 *                               "logp", "finish"}. EOS ids default to the model's; S slots
 *                               (default: one per sequence) and M tokens per append (default:
 *                               every prompt at once). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/cuda/decode_gpu.h"
#include "policy/cuda/model_gpu.h"
#include "policy/model.h"
#include "util/text.h"

#include "tests/policy/check_batch.h"

#define MAX_EOS 16

/* ---- input ---- */

/* ---- output ---- */

static float bf16_to_f32(kg_bf16 b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The last forward's device logits [n, V] (bf16), as fp32 on the host. */
static int fetch_logits(const pol_gpu *g, float *out, size_t count, char *err)
{
    const kg_bf16 *dev = pol_gpu_logits(g);
    kg_bf16 *tmp = malloc(count * sizeof *tmp);
    int rc = 0;
    cudaError_t ce = cudaSuccess;
    if (!dev || !tmp)
        rc = text_fail(err, ERRCAP, "logits: %s", !dev ? "no LM-head forward" : "out of memory");
    else if ((ce = cudaMemcpy(tmp, dev, count * sizeof *tmp, cudaMemcpyDeviceToHost)) !=
             cudaSuccess)
        rc = text_fail(err, ERRCAP, "logits: copying to the host: %s", cudaGetErrorString(ce));
    for (size_t i = 0; rc == 0 && i < count; i++)
        out[i] = bf16_to_f32(tmp[i]);
    free(tmp);
    return rc;
}

/* ---- the packed forward ---- */

/* Each row of b one document: doc_start of token t of row r is r*T. */
static int32_t *row_doc_starts(const batch *b)
{
    size_t n = (size_t)b->B * (size_t)b->T;
    int32_t *ds = malloc(n * sizeof *ds);
    for (size_t i = 0; ds && i < n; i++)
        ds[i] = (int32_t)(i - i % (size_t)b->T);
    return ds;
}

/* Loads dir and builds its GPU model (the CPU copy stays in m for the caller). */
static int load_gpu(const char *dir, bool training, pol_model *m, pol_gpu **g, char *err)
{
    if (pol_model_load(m, dir, POL_HEAD_LM, err, ERRCAP) != 0)
        return -1;
    if (pol_gpu_create(g, m, training, err, ERRCAP) != 0) {
        pol_model_deinit(m);
        return -1;
    }
    return 0;
}

/* One train forward of the batch (train keeps every layer's residual for pol_gpu_residual). */
static int forward_batch(pol_gpu *g, const batch *b, char *err)
{
    int32_t *ds = row_doc_starts(b);
    int rc = ds ? pol_gpu_forward(g, b->ids, NULL, ds, b->B * b->T, true, err, ERRCAP)
                : text_fail(err, ERRCAP, "out of memory");
    free(ds);
    return rc;
}

static int cmd_logits(const char *dir, const batch *b, const char *out, char *err)
{
    pol_model m;
    pol_gpu *g;
    if (load_gpu(dir, false, &m, &g, err) != 0)
        return -1;
    pol_dims d = pol_dims_of(&m.cfg);
    pol_model_deinit(&m); /* the GPU model holds the weights: free the fp32 copy early */
    size_t N = (size_t)b->B * (size_t)b->T, nD = N * (size_t)d.D, nV = N * (size_t)d.V;
    float *logits = malloc(nV * sizeof *logits);
    float *hidden = malloc(nD * (size_t)d.L * sizeof *hidden);
    float *lp = malloc(2 * N * sizeof *lp), *ent = lp + N;
    pol_st_entry *e = malloc(((size_t)d.L + 3) * sizeof *e);
    char(*names)[32] = malloc((size_t)d.L * sizeof *names);
    int rc = -1;
    if (!logits || !hidden || !lp || !e || !names) {
        text_fail(err, ERRCAP, "out of memory");
        goto done;
    }
    if (forward_batch(g, b, err) != 0 || fetch_logits(g, logits, nV, err) != 0 ||
        pol_gpu_logprobs(g, b->targets, b->targets ? lp : NULL, ent, err, ERRCAP) != 0)
        goto done;
    size_t n = 0;
    e[n++] = f32_entry("logits", logits, 3, b->B, b->T, d.V);
    e[n++] = f32_entry("entropy", ent, 2, b->B, b->T, 0);
    if (b->targets)
        e[n++] = f32_entry("logprobs", lp, 2, b->B, b->T, 0);
    for (int l = 0; l < d.L; l++) {
        float *h = hidden + (size_t)l * nD;
        if (pol_gpu_residual(g, l, h, err, ERRCAP) != 0)
            goto done;
        snprintf(names[l], sizeof names[l], "hidden.%d", l);
        e[n++] = f32_entry(names[l], h, 3, b->B, b->T, d.D);
    }
    rc = pol_st_write(out, e, n, NULL, err, ERRCAP);
done:
    free(names);
    free(e);
    free(lp);
    free(hidden);
    free(logits);
    pol_gpu_free(g);
    return rc;
}

static int cmd_grads(const char *dir, const batch *b, const char *out, char *err)
{
    if (!b->targets || !b->weights)
        return text_fail(err, ERRCAP, "batch: grads needs 'targets' and 'weights'");
    pol_model m;
    pol_gpu *g;
    if (load_gpu(dir, true, &m, &g, err) != 0)
        return -1;
    double loss = 0;
    int rc = -1;
    if (forward_batch(g, b, err) == 0 &&
        pol_gpu_backward(g, b->targets, b->weights, b->ent_weights, &loss, err, ERRCAP) == 0 &&
        pol_gpu_download_grads(g, &m, err, ERRCAP) == 0) {
        pol_st_entry e = {.name = "loss", .dtype = POL_DT_F64, .ndim = 1, .data = &loss};
        e.shape[0] = 1;
        rc = pol_model_save_params(&m, &m.g, out, &e, 1, err, ERRCAP);
    }
    pol_gpu_free(g);
    pol_model_deinit(&m);
    return rc;
}

/* ---- decode ---- */

/* What a decode run feeds and collects. */
typedef struct dec_run {
    pol_gpu_dec *d;
    const batch *b;
    int V;
    int32_t *slot;              /* [B] the slot of each row */
    int32_t *in_slots, *in_ids; /* [B * max chunk] one append's tokens */
    float *rows;                /* [B, V] one append's logits */
    float *logits;              /* [B, S, V] */
    int32_t *positions;         /* [S] */
    bool interleave;
} dec_run;

/* Appends tokens [from, from + n) of every row, then files the logits under step s. */
static int dec_step(dec_run *r, int from, int n, int s, int S, char *err)
{
    const batch *b = r->b;
    int k = 0;
    for (int i = 0; i < n * b->B; i++) {
        int row = r->interleave ? i % b->B : i / n, t = from + (r->interleave ? i / b->B : i % n);
        r->in_slots[k] = r->slot[row];
        r->in_ids[k++] = b->ids[(size_t)row * b->T + t];
    }
    if (pol_gpu_dec_append(r->d, r->in_slots, r->in_ids, k, err, ERRCAP) != 0 ||
        pol_gpu_dec_logits(r->d, r->rows, err, ERRCAP) != 0)
        return -1;
    const int32_t *slots;
    int n_rows = pol_gpu_dec_rows(r->d, &slots);
    if (n_rows != b->B)
        return text_fail(err, ERRCAP, "decode step %d: %d logits rows for %d slots", s, n_rows,
                         b->B);
    for (int i = 0; i < n_rows; i++) {
        int row = -1;
        for (int q = 0; q < b->B; q++)
            row = r->slot[q] == slots[i] ? q : row;
        if (row < 0)
            return text_fail(err, ERRCAP, "decode step %d: row %d is slot %d, not ours", s, i,
                             slots[i]);
        if (pol_gpu_dec_len(r->d, slots[i]) != from + n)
            return text_fail(err, ERRCAP, "decode step %d: slot %d holds %d tokens, not %d", s,
                             slots[i], pol_gpu_dec_len(r->d, slots[i]), from + n);
        memcpy(r->logits + ((size_t)row * S + s) * r->V, r->rows + (size_t)i * r->V,
               (size_t)r->V * sizeof *r->rows);
    }
    r->positions[s] = from + n - 1;
    return 0;
}

static int cmd_decode(const char *dir, const batch *b, const char *out, int argc, char **argv,
                      char *err)
{
    int K = atoi(opt(argc, argv, "--prefill", "1")), C = atoi(opt(argc, argv, "--chunk", "1"));
    if (K < 1 || K > b->T || C < 1)
        return text_fail(err, ERRCAP, "decode: --prefill 1..%d, --chunk >= 1", b->T);
    pol_model m;
    pol_gpu *g;
    if (load_gpu(dir, false, &m, &g, err) != 0)
        return -1;
    int V = m.cfg.vocab_size, S = 1 + (b->T - K + C - 1) / C, widest = K > C ? K : C;
    pol_model_deinit(&m);
    dec_run r = {.b = b, .V = V, .interleave = flag(argc, argv, "--interleave")};
    r.slot = malloc((size_t)b->B * sizeof *r.slot);
    r.in_slots = malloc((size_t)b->B * widest * sizeof *r.in_slots);
    r.in_ids = malloc((size_t)b->B * widest * sizeof *r.in_ids);
    r.rows = malloc((size_t)b->B * V * sizeof *r.rows);
    r.logits = malloc((size_t)b->B * S * V * sizeof *r.logits);
    r.positions = malloc((size_t)S * sizeof *r.positions);
    int rc = -1;
    if (!r.slot || !r.in_slots || !r.in_ids || !r.rows || !r.logits || !r.positions) {
        text_fail(err, ERRCAP, "out of memory");
        goto done;
    }
    if (pol_gpu_dec_create(&r.d, g, b->B, b->T, b->B * widest, err, ERRCAP) != 0)
        goto done;
    for (int row = 0; row < b->B; row++)
        if ((r.slot[row] = pol_gpu_dec_acquire(r.d)) < 0) {
            text_fail(err, ERRCAP, "decode: no free slot for row %d of %d", row, b->B);
            goto done;
        }
    if (dec_step(&r, 0, K, 0, S, err) != 0)
        goto done;
    for (int s = 1, from = K; from < b->T; s++, from += C)
        if (dec_step(&r, from, from + C < b->T ? C : b->T - from, s, S, err) != 0)
            goto done;
    pol_st_entry e[2] = {
        f32_entry("logits", r.logits, 3, b->B, S, V),
        {.name = "positions", .dtype = POL_DT_I32, .ndim = 1, .data = r.positions}};
    e[1].shape[0] = S;
    rc = pol_st_write(out, e, 2, NULL, err, ERRCAP);
done:
    pol_gpu_dec_free(r.d);
    free(r.positions);
    free(r.logits);
    free(r.rows);
    free(r.in_ids);
    free(r.in_slots);
    free(r.slot);
    pol_gpu_free(g);
    return rc;
}

/* ---- generate ---- */

/* The prompts of --ids: a list of ids (one prompt) or a list of lists. */
typedef struct prompts {
    int n;
    int32_t **ids;
    int *len;
} prompts;

static void prompts_free(prompts *p)
{
    for (int i = 0; p->ids && i < p->n; i++)
        free(p->ids[i]);
    free(p->ids);
    free(p->len);
}

static int read_ids(json_t *list, int32_t **out, int *n, char *err)
{
    size_t k = json_array_size(list);
    if (!json_is_array(list) || k == 0)
        return text_fail(err, ERRCAP, "--ids: a prompt is not a non-empty list of ids");
    if (!(*out = malloc(k * sizeof **out)))
        return text_fail(err, ERRCAP, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *v = json_array_get(list, i);
        if (!json_is_integer(v))
            return text_fail(err, ERRCAP, "--ids: element %zu of a prompt is not an id", i);
        (*out)[i] = (int32_t)json_integer_value(v);
    }
    *n = (int)k;
    return 0;
}

static int prompts_parse(const char *text, prompts *p, char *err)
{
    memset(p, 0, sizeof *p);
    json_error_t je;
    json_t *root = json_loads(text ? text : "", 0, &je);
    if (!json_is_array(root) || json_array_size(root) == 0) {
        json_decref(root);
        return text_fail(err, ERRCAP, "--ids: not a JSON list (%s)", root ? "empty" : je.text);
    }
    bool nested = json_is_array(json_array_get(root, 0));
    p->n = nested ? (int)json_array_size(root) : 1;
    p->ids = calloc((size_t)p->n, sizeof *p->ids);
    p->len = calloc((size_t)p->n, sizeof *p->len);
    int rc = p->ids && p->len ? 0 : text_fail(err, ERRCAP, "out of memory");
    for (int i = 0; rc == 0 && i < p->n; i++)
        rc = read_ids(nested ? json_array_get(root, (size_t)i) : root, &p->ids[i], &p->len[i], err);
    json_decref(root);
    return rc;
}

/* --eos "2,7" / "none"; without it, the model's EOS ids (what HF generate stops on). */
static int parse_eos(const char *arg, const pol_model *m, int32_t *eos, char *err)
{
    if (!arg)
        return pol_model_eos_ids(m, eos, MAX_EOS);
    if (!strcmp(arg, "none"))
        return 0;
    int n = 0;
    for (const char *s = arg; *s && n < MAX_EOS; n++) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || v < 0)
            return text_fail(err, ERRCAP, "--eos: '%s' is not a list of ids", arg);
        eos[n] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

static void print_seq(int prompt, int copy, const pol_gpu_gen_seq *s)
{
    json_t *ids = json_array(), *logp = json_array();
    for (int i = 0; i < s->n; i++) {
        json_array_append_new(ids, json_integer(s->ids[i]));
        json_array_append_new(logp, json_real(s->logp[i]));
    }
    json_t *o = json_pack("{s:i, s:i, s:o, s:o, s:s}", "prompt", prompt, "copy", copy, "ids", ids,
                          "logp", logp, "finish", pol_finish_name(s->finish));
    char *text = json_dumps(o, JSON_COMPACT);
    printf("%s\n", text ? text : "{}");
    free(text);
    json_decref(o);
}

/* Sizes the decoder from the sequences and the options (see the usage at the top). */
static int make_decoder(pol_gpu *g, const prompts *p, int n_seqs, int max_new, int argc,
                        char **argv, pol_gpu_dec **d, char *err)
{
    int longest = 0, all = 0;
    for (int i = 0; i < p->n; i++) {
        longest = p->len[i] > longest ? p->len[i] : longest;
        all += p->len[i] * (n_seqs / p->n);
    }
    int slots = atoi(opt(argc, argv, "--slots", "0"));
    slots = slots > 0 ? slots : n_seqs;
    int max_tokens = atoi(opt(argc, argv, "--max-tokens", "0"));
    max_tokens = max_tokens > 0 ? max_tokens : all;
    max_tokens = max_tokens > slots ? max_tokens : slots;
    return pol_gpu_dec_create(d, g, slots, longest + max_new, max_tokens, err, ERRCAP);
}

static int cmd_generate(const char *dir, int argc, char **argv, char *err)
{
    int max_new = atoi(opt(argc, argv, "--max-new", "16"));
    int copies = atoi(opt(argc, argv, "--batch-copies", "1"));
    if (max_new < 1 || copies < 1)
        return text_fail(err, ERRCAP, "generate: --max-new and --batch-copies must be >= 1");
    prompts p;
    if (prompts_parse(opt(argc, argv, "--ids", NULL), &p, err) != 0) {
        prompts_free(&p);
        return -1;
    }
    pol_model m;
    pol_gpu *g = NULL;
    pol_gpu_dec *d = NULL;
    int32_t eos[MAX_EOS];
    int n_seqs = p.n * copies, rc = -1, n_eos = 0;
    pol_gpu_gen_seq *seqs = calloc((size_t)n_seqs, sizeof *seqs);
    if (!seqs) {
        text_fail(err, ERRCAP, "out of memory");
        goto done;
    }
    if (load_gpu(dir, false, &m, &g, err) != 0)
        goto done;
    n_eos = parse_eos(opt(argc, argv, "--eos", NULL), &m, eos, err);
    pol_model_deinit(&m);
    if (n_eos < 0 || make_decoder(g, &p, n_seqs, max_new, argc, argv, &d, err) != 0)
        goto done;
    for (int i = 0; i < n_seqs; i++) {
        seqs[i].prompt = p.ids[i / copies];
        seqs[i].n_prompt = p.len[i / copies];
        seqs[i].seed = (uint64_t)i;
    }
    pol_gpu_gen_opts o = {.max_new = max_new,
                          .sample = {.temperature = 0, .top_k = 0, .top_p = 1},
                          .n_valid = atoi(opt(argc, argv, "--n-valid", "0")),
                          .eos = eos,
                          .n_eos = n_eos};
    if (pol_gpu_generate(d, seqs, n_seqs, &o, NULL, NULL, err, ERRCAP) != 0)
        goto done;
    for (int i = 0; i < n_seqs; i++)
        print_seq(i / copies, i % copies, &seqs[i]);
    rc = 0;
done:
    if (seqs)
        pol_gpu_gen_free(seqs, n_seqs);
    free(seqs);
    pol_gpu_dec_free(d);
    pol_gpu_free(g);
    prompts_free(&p);
    return rc;
}

/* ---- main ---- */

static int usage(void)
{
    fprintf(stderr, "usage: policy-gpu-check logits|grads|decode DIR BATCH OUT [options]\n"
                    "       policy-gpu-check generate DIR --ids JSON --max-new N [options]\n"
                    "(see tests/gpu/policy_gpu_check.c)\n");
    return 2;
}

static int run_batch_cmd(const char *cmd, int argc, char **argv, char *err)
{
    batch b;
    if (batch_load(argv[3], &b, err) != 0) {
        batch_free(&b);
        return -1;
    }
    const char *dir = argv[2], *out = argv[4];
    int rc = !strcmp(cmd, "logits")  ? cmd_logits(dir, &b, out, err)
             : !strcmp(cmd, "grads") ? cmd_grads(dir, &b, out, err)
                                     : cmd_decode(dir, &b, out, argc, argv, err);
    batch_free(&b);
    return rc;
}

int main(int argc, char **argv)
{
    char err[ERRCAP] = "";
    if (argc < 3)
        return usage();
    const char *cmd = argv[1];
    int rc;
    if (!strcmp(cmd, "generate"))
        rc = cmd_generate(argv[2], argc, argv, err);
    else if (argc >= 5 &&
             (!strcmp(cmd, "logits") || !strcmp(cmd, "grads") || !strcmp(cmd, "decode")))
        rc = run_batch_cmd(cmd, argc, argv, err);
    else
        return usage();
    if (rc != 0) {
        fprintf(stderr, "policy-gpu-check %s: %s\n", cmd, err);
        return 1;
    }
    return 0;
}
