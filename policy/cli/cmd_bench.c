/* kgym-policy bench: the GPU policy's speed (issue 8): training tokens/s and MFU of whole
 * optimizer steps over a packed batch, and batched decoding tokens/s, on a Qwen2.5-0.5B-shaped
 * model with random weights (or an HF folder). The kgym-policy-cuda build runs it; the CPU build
 * parses the options (--help works) and then refuses.
 *
 * Training is timed over whole steps (zero_grad, train forward, backward, AdamW step: each call
 * waits for its work, so a monotonic clock around the step measures the GPU). Decoding is timed as
 * the difference of two generates on the same prompts: max_new 1 (the prefill and one sampling)
 * and max_new N, so that the N - 1 decode steps are what is left. */
#include "cli_common.h"
#include "cmds.h"

#include "policy/model.h"
#include "util/text.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KGYM_WITH_CUDA
#include "policy/cuda/decode_gpu.h"
#include "policy/cuda/model_gpu.h"

#include <cuda_runtime_api.h>
#endif

#define NEEDS_CUDA "needs the CUDA build (build/kgym-policy-cuda, `make kernels`)"
/* The H200's bf16 dense matmul throughput as measured (cuBLASLt, large square GEMMs), not the
 * datasheet's 989: MFU against what the chip actually reaches. */
#define DEFAULT_PEAK_TFLOPS 790.0
#define MAX_DECODE_BATCHES 16
/* The decoder's tokens per append at most: longer prefills go in pieces (pol_gpu_generate). */
#define MAX_APPEND_TOKENS 16384
#define WARMUP_STEPS 2

static const char BENCH_HELP[] =
    "usage: kgym-policy bench [--shape qwen2.5-0.5b | --model DIR] [--seed S]\n"
    "                         [--train-batch B] [--seq T] [--steps N] [--recompute]\n"
    "                         [--decode-batches LIST] [--prompt P] [--new N] [--no-graphs]\n"
    "                         [--no-pdl] [--skip-train] [--skip-decode] [--peak-tflops X] [--json "
    "FILE]\n"
    "\n"
    "The GPU policy's speed (kgym-policy-cuda only; the CPU build refuses with exit 1).\n"
    "\n"
    "Training: a packed batch of B documents of T random tokens, targets the next token\n"
    "(none after each document's last), every weight 1; each step is zero_grad, train forward,\n"
    "backward, AdamW (lr 1e-5, gradient clipping at 1.0). 2 warm-up steps, then N timed.\n"
    "Reported: ms/step, tokens/s (B*T per step), model FLOPs per token\n"
    "    6 * N_matmul + 6 * L * H * hd * T\n"
    "(N_matmul: every matmul weight, the LM head included (the embedding when tied), not the\n"
    "embedding lookup, norms or biases; the attention term is half of full attention's\n"
    "12 * L * H * hd * T, as it is causal; recomputation is not counted), TFLOP/s and\n"
    "MFU = TFLOP/s / peak.\n"
    "\n"
    "Decoding, per batch size Bd: Bd prompts of P random ids, greedy, no EOS. A warm-up\n"
    "generate (max_new 3), then one with max_new 1 (prefill + 1 token, time t1) and one\n"
    "with max_new N (time tN): decode tokens/s = Bd * (N - 1) / (tN - t1), prefill\n"
    "tokens/s = Bd * P / t1, end to end = Bd * N / tN.\n"
    "\n"
    "  --shape NAME        qwen2.5-0.5b (default): the built-in config, random weights\n"
    "  --model DIR         an HF folder instead: its weights when it has model.safetensors\n"
    "                      (or an index), else random weights of its config.json\n"
    "  --seed S            seed of the random weights (normal, std 0.02) and tokens (default 0)\n"
    "  --train-batch B     documents per step (default 8)\n"
    "  --seq T             tokens per document (default 2048)\n"
    "  --steps N           timed steps (default 10)\n"
    "  --recompute         activation recomputation (pol_gpu_set_recompute)\n"
    "  --decode-batches L  comma-separated batch sizes (default 1,64)\n"
    "  --prompt P          prompt tokens per sequence (default 128)\n"
    "  --new N             new tokens per sequence, >= 2 (default 256)\n"
    "  --no-graphs         decode steps launched kernel by kernel, not replayed as CUDA\n"
    "                      graphs (the decoder's default; --graphs says it)\n"
    "  --no-pdl            a step's kernels launched one after the other, without\n"
    "                      programmatic dependent launch (the decoder launches them\n"
    "                      programmatically by default)\n"
    "  --skip-train        no training measurement\n"
    "  --skip-decode       no decoding measurement\n"
    "  --peak-tflops X     the MFU's peak (default 790: the H200's measured bf16 rate)\n"
    "  --json FILE         every figure as JSON into FILE\n"
    "\n"
    "Prints one line per measurement on stdout, progress on stderr.\n"
    "exit status: 0 ok, 1 error (no CUDA build or GPU, out of memory, ...), 2 usage\n";

typedef struct bench_args {
    const char *shape, *model_dir, *json_path;
    long seed, train_batch, seq, steps, prompt, new_tokens;
    int decode_batches[MAX_DECODE_BATCHES];
    int n_decode_batches;
    double peak_tflops;
    bool recompute, graphs, no_graphs, no_pdl, skip_train, skip_decode;
} bench_args;

/* "1,64": counts in [1, MAX_APPEND_TOKENS] (the decoder's slots must fit one append). */
static bool parse_batches(const char *s, int *out, int *n)
{
    *n = 0;
    char buf[256];
    if (!text_fmt(buf, sizeof buf, "%s", s))
        return false;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (*n == MAX_DECODE_BATCHES || !cli_parse_long(tok, 1, MAX_APPEND_TOKENS, &v))
            return false;
        out[(*n)++] = (int)v;
    }
    return *n > 0;
}

typedef struct {
    const char *seed, *train_batch, *seq, *steps, *batches, *prompt, *new_tokens, *peak;
} raw_args;

/* Values into a; 0, or 2 after a usage error. */
static int check_args(const raw_args *r, bench_args *a)
{
    if (a->shape && a->model_dir)
        return cli_usage_error("bench", "give one of --shape and --model");
    if (a->shape && strcmp(a->shape, "qwen2.5-0.5b") != 0)
        return cli_usage_error("bench", "--shape takes qwen2.5-0.5b");
    if (r->seed && !cli_parse_long(r->seed, 0, 0x7fffffffffffffffL, &a->seed))
        return cli_usage_error("bench", "--seed takes a number >= 0");
    if (r->train_batch && !cli_parse_long(r->train_batch, 1, 1 << 16, &a->train_batch))
        return cli_usage_error("bench", "--train-batch takes a count 1..65536");
    if (r->seq && !cli_parse_long(r->seq, 2, 1 << 20, &a->seq))
        return cli_usage_error("bench", "--seq takes a count 2..1048576");
    if (a->train_batch * a->seq > (1L << 24))
        return cli_usage_error("bench", "--train-batch x --seq is over 16M tokens");
    if (r->steps && !cli_parse_long(r->steps, 1, 100000, &a->steps))
        return cli_usage_error("bench", "--steps takes a count 1..100000");
    if (r->batches && !parse_batches(r->batches, a->decode_batches, &a->n_decode_batches))
        return cli_usage_error("bench", "--decode-batches takes up to 16 comma-separated counts "
                                        "1..16384");
    if (r->prompt && !cli_parse_long(r->prompt, 1, 1 << 20, &a->prompt))
        return cli_usage_error("bench", "--prompt takes a count 1..1048576");
    if (r->new_tokens && !cli_parse_long(r->new_tokens, 2, 1 << 20, &a->new_tokens))
        return cli_usage_error("bench", "--new takes a count 2..1048576");
    for (int i = 0; i < a->n_decode_batches; i++)
        if ((long)a->decode_batches[i] * a->prompt > (1L << 24))
            return cli_usage_error("bench", "a decode batch x --prompt is over 16M tokens");
    if (r->peak && (!cli_parse_double(r->peak, 0, 1e6, &a->peak_tflops) || a->peak_tflops == 0))
        return cli_usage_error("bench", "--peak-tflops takes a number > 0");
    if (a->skip_train && a->skip_decode)
        return cli_usage_error("bench", "--skip-train and --skip-decode leave nothing to run");
    if (a->graphs && a->no_graphs)
        return cli_usage_error("bench", "give one of --graphs and --no-graphs");
    a->graphs = !a->no_graphs; /* the decoder's default */
    return 0;
}

/* 0 to go on, 1 after --help, 2 after a usage error. */
static int parse_bench_args(int argc, char **argv, bench_args *a)
{
    raw_args r = {0};
    *a = (bench_args){.train_batch = 8,
                      .seq = 2048,
                      .steps = 10,
                      .decode_batches = {1, 64},
                      .n_decode_batches = 2,
                      .prompt = 128,
                      .new_tokens = 256,
                      .peak_tflops = DEFAULT_PEAK_TFLOPS};
    opt_spec specs[] = {{"--shape", true, &a->shape, NULL},
                        {"--model", true, &a->model_dir, NULL},
                        {"--seed", true, &r.seed, NULL},
                        {"--train-batch", true, &r.train_batch, NULL},
                        {"--seq", true, &r.seq, NULL},
                        {"--steps", true, &r.steps, NULL},
                        {"--recompute", false, NULL, &a->recompute},
                        {"--decode-batches", true, &r.batches, NULL},
                        {"--prompt", true, &r.prompt, NULL},
                        {"--new", true, &r.new_tokens, NULL},
                        {"--graphs", false, NULL, &a->graphs},
                        {"--no-graphs", false, NULL, &a->no_graphs},
                        {"--no-pdl", false, NULL, &a->no_pdl},
                        {"--skip-train", false, NULL, &a->skip_train},
                        {"--skip-decode", false, NULL, &a->skip_decode},
                        {"--peak-tflops", true, &r.peak, NULL},
                        {"--json", true, &a->json_path, NULL}};
    int rc = cli_parse_args("bench", BENCH_HELP, argc, argv, specs, sizeof specs / sizeof specs[0],
                            NULL);
    if (rc)
        return rc;
    return check_args(&r, a);
}

#ifdef KGYM_WITH_CUDA

/* ---- the model and its FLOPs ---- */

/* Qwen2.5-0.5B's config.json, the fields the model reads. */
static const char QWEN25_05B_CONFIG[] =
    "{\"model_type\": \"qwen2\", \"vocab_size\": 151936, \"hidden_size\": 896,"
    " \"intermediate_size\": 4864, \"num_hidden_layers\": 24, \"num_attention_heads\": 14,"
    " \"num_key_value_heads\": 2, \"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-06,"
    " \"tie_word_embeddings\": true, \"max_position_embeddings\": 32768,"
    " \"torch_dtype\": \"bfloat16\"}";

/* The matmul weights' count: per layer q, k, v, o and the three MLP projections, plus the LM
 * head (the embedding matrix when tied). The embedding lookup, norms and biases do no matmul. */
static double matmul_params(const pol_config *c)
{
    pol_dims d = pol_dims_of(c);
    double per_layer = (double)d.D * (double)(2 * d.qd + 2 * d.kvd) + 3.0 * d.D * d.F;
    return d.L * per_layer + (double)d.V * d.D;
}

/* Model FLOPs per trained token: 6 per matmul weight (forward 2, backward 4) and causal attention
 * over documents of T tokens: QK^T and PV are 4 * T * hd per head and layer forward, times 3 with
 * the backward, halved by the causal mask. */
static double train_flops_per_token(const pol_config *c, long T)
{
    pol_dims d = pol_dims_of(c);
    return 6.0 * matmul_params(c) + 6.0 * d.L * (double)d.H * d.hd * (double)T;
}

static bool has_weights(const char *dir)
{
    char path[4096];
    return (text_fmt(path, sizeof path, "%s/model.safetensors", dir) && cli_is_file(path)) ||
           (text_fmt(path, sizeof path, "%s/model.safetensors.index.json", dir) &&
            cli_is_file(path));
}

/* The host model: the folder's checkpoint, or random weights of the built-in (or the folder's)
 * config. *random_weights says which. */
static int build_model(const bench_args *a, pol_model *m, bool *random_weights, char *err)
{
    memset(m, 0, sizeof *m);
    *random_weights = !a->model_dir || !has_weights(a->model_dir);
    if (!*random_weights) {
        fprintf(stderr, "bench: loading %s\n", a->model_dir);
        return pol_model_load(m, a->model_dir, POL_HEAD_LM, err, ERRCAP);
    }
    pol_config cfg;
    int rc = a->model_dir ? pol_config_load(a->model_dir, &cfg, err, ERRCAP)
                          : pol_config_parse(QWEN25_05B_CONFIG, &cfg, err, ERRCAP);
    if (rc != 0 || pol_model_init(m, &cfg, POL_HEAD_LM, err, ERRCAP) != 0)
        return -1;
    fprintf(stderr, "bench: random weights (%zu parameters, seed %ld)\n", pol_model_n_params(m),
            a->seed);
    pol_model_init_random(m, (uint64_t)a->seed, 0.02f);
    return 0;
}

/* ---- small helpers ---- */

/* splitmix64: the random token ids (any fixed stream does; this one needs no state but a word). */
static uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void random_ids(int32_t *ids, size_t n, int vocab, uint64_t *state)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)(next_random(state) % (uint64_t)vocab);
}

/* v with thousands separators and no decimals: "132,800". */
static const char *grouped(double v, char *buf, size_t cap)
{
    char digits[32];
    text_fmt(digits, sizeof digits, "%.0f", v < 0 ? 0 : v);
    size_t n = strlen(digits), o = 0;
    for (size_t i = 0; i < n && o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

/* Bytes of device memory in use (all processes), 0 when the runtime cannot say. */
static size_t device_used(void)
{
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        return 0;
    return total - free_b;
}

static int cuda_ok(cudaError_t e, const char *what, char *err)
{
    if (e == cudaSuccess)
        return 0;
    return text_fail(err, ERRCAP, "%s: %s", what, cudaGetErrorString(e));
}

/* ---- training ---- */

typedef struct train_batch {
    int n;
    int32_t *ids, *doc_start, *targets;
    float *weights;
} train_batch;

static void train_batch_free(train_batch *b)
{
    free(b->ids);
    free(b->doc_start);
    free(b->targets);
    free(b->weights);
}

/* B documents of T random ids one after another; each token's target is the next id of its
 * document (none after the last). */
static int train_batch_make(train_batch *b, long B, long T, int vocab, uint64_t seed, char *err)
{
    b->n = (int)(B * T);
    size_t n = (size_t)b->n;
    b->ids = malloc(n * sizeof *b->ids);
    b->doc_start = malloc(n * sizeof *b->doc_start);
    b->targets = malloc(n * sizeof *b->targets);
    b->weights = malloc(n * sizeof *b->weights);
    if (!b->ids || !b->doc_start || !b->targets || !b->weights)
        return text_fail(err, ERRCAP, "out of host memory for %ld x %ld tokens", B, T);
    uint64_t state = seed ^ 0x7261696e;
    random_ids(b->ids, n, vocab, &state);
    for (size_t t = 0; t < n; t++) {
        b->doc_start[t] = (int32_t)(t - t % (size_t)T);
        b->targets[t] = (t + 1) % (size_t)T ? b->ids[t + 1] : -1;
        b->weights[t] = 1.0f;
    }
    return 0;
}

typedef struct train_result {
    double ms_per_step, ms_min, tokens_per_s, flops_per_token, tflops, mfu;
    double loss_first, loss_last;
    size_t activation_bytes, device_before, device_model, device_peak;
} train_result;

/* What the warm-up steps sample: the most device memory in use after any call, and the
 * activation arena's share after the forward. */
typedef struct mem_sample {
    size_t peak, activations;
} mem_sample;

static void note_memory(mem_sample *s)
{
    size_t used = device_used();
    s->peak = used > s->peak ? used : s->peak;
}

/* One optimizer step; mem (may be NULL: the timed steps) gets the memory after each call. */
static int train_step(pol_gpu *g, const train_batch *b, double *loss, mem_sample *mem, char *err)
{
    pol_adamw_cfg opt = pol_adamw_defaults();
    opt.lr = 1e-5;
    if (pol_gpu_zero_grad(g, err, ERRCAP) != 0 ||
        pol_gpu_forward(g, b->ids, NULL, b->doc_start, b->n, true, err, ERRCAP) != 0)
        return -1;
    if (mem) {
        note_memory(mem);
        mem->activations = pol_gpu_activation_bytes(g);
    }
    if (pol_gpu_backward(g, b->targets, b->weights, NULL, loss, err, ERRCAP) != 0)
        return -1;
    if (mem)
        note_memory(mem);
    if (pol_gpu_step(g, &opt, 1.0, NULL, err, ERRCAP) != 0)
        return -1;
    if (mem)
        note_memory(mem);
    return 0;
}

/* Warm-up steps (memory sampled), then a->steps timed ones. */
static int train_steps(pol_gpu *g, const bench_args *a, const train_batch *b, train_result *res,
                       char *err)
{
    double total = 0, loss = 0;
    mem_sample mem = {0};
    res->ms_min = 1e300;
    for (int s = 0; s < WARMUP_STEPS; s++) {
        if (train_step(g, b, &loss, &mem, err) != 0)
            return -1;
        if (s == 0)
            res->loss_first = loss;
        fprintf(stderr, "bench: train warm-up %d/%d (loss %.4g)\n", s + 1, WARMUP_STEPS, loss);
    }
    for (long s = 0; s < a->steps; s++) {
        double t0 = text_mono_ms();
        if (train_step(g, b, &loss, NULL, err) != 0)
            return -1;
        double ms = text_mono_ms() - t0;
        total += ms;
        res->ms_min = ms < res->ms_min ? ms : res->ms_min;
        fprintf(stderr, "bench: train step %ld/%ld: %.1f ms (loss %.4g)\n", s + 1, a->steps, ms,
                loss);
    }
    res->loss_last = loss;
    res->ms_per_step = total / (double)a->steps;
    res->device_peak = mem.peak;
    res->activation_bytes = mem.activations;
    return 0;
}

static int bench_train(const bench_args *a, const pol_model *m, train_result *res, char *err)
{
    memset(res, 0, sizeof *res);
    train_batch b = {0};
    pol_gpu *g = NULL;
    res->device_before = device_used();
    int rc =
        train_batch_make(&b, a->train_batch, a->seq, m->cfg.vocab_size, (uint64_t)a->seed, err);
    if (rc == 0) {
        fprintf(stderr, "bench: uploading the training model\n");
        rc = pol_gpu_create(&g, m, true, err, ERRCAP);
    }
    if (rc == 0 && a->recompute)
        rc = pol_gpu_set_recompute(g, true, err, ERRCAP);
    res->device_model = device_used();
    if (rc == 0)
        rc = train_steps(g, a, &b, res, err);
    if (rc == 0) {
        res->tokens_per_s = b.n / (res->ms_per_step / 1000.0);
        res->flops_per_token = train_flops_per_token(&m->cfg, a->seq);
        res->tflops = res->tokens_per_s * res->flops_per_token / 1e12;
        res->mfu = res->tflops / a->peak_tflops;
    }
    pol_gpu_free(g);
    train_batch_free(&b);
    return rc;
}

/* ---- decoding ---- */

typedef struct decode_result {
    int batch;
    double prefill_ms, full_ms, tokens_per_s, prefill_tokens_per_s, e2e_tokens_per_s;
    long graphs_replayed, graphs_refused; /* unless --no-graphs */
    /* a decode step's wall time, and its graph's GPU time replayed back to back (0: not
     * measured): the difference is the host's share, the sampler's included */
    double step_ms, graph_step_ms;
} decode_result;

/* Replays of the last step's graph for its GPU time per step. */
#define GRAPH_TIMING_REPS 100

/* Greedy, no EOS, max_new tokens for every prompt; *ms the wall time. */
static int timed_generate(pol_gpu_dec *d, const int32_t *prompts, int Bd, int P, int max_new,
                          double *ms, char *err)
{
    pol_gpu_gen_seq *seqs = calloc((size_t)Bd, sizeof *seqs);
    if (!seqs)
        return text_fail(err, ERRCAP, "out of host memory");
    for (int i = 0; i < Bd; i++)
        seqs[i] = (pol_gpu_gen_seq){.prompt = prompts + (size_t)i * P, .n_prompt = P};
    pol_gpu_gen_opts o = {.max_new = max_new, .sample = {.temperature = 0}};
    double t0 = text_mono_ms();
    int rc = pol_gpu_generate(d, seqs, Bd, &o, NULL, NULL, err, ERRCAP);
    *ms = text_mono_ms() - t0;
    for (int i = 0; rc == 0 && i < Bd; i++)
        if (seqs[i].n != max_new)
            rc = text_fail(err, ERRCAP, "decode: sequence %d made %d tokens, not %d", i, seqs[i].n,
                           max_new);
    pol_gpu_gen_free(seqs, Bd);
    free(seqs);
    return rc;
}

/* A diagnostic after a timed run: the last step's graph timed alone (res->graph_step_ms),
 * against the step's wall time; a failure is reported and the run's figures stand. */
static void report_step_split(pol_gpu_dec *d, decode_result *res)
{
    char why[ERRCAP];
    if (pol_gpu_dec_time_step_graph(d, GRAPH_TIMING_REPS, &res->graph_step_ms, why, sizeof why) !=
        0) {
        fprintf(stderr, "bench: decode batch %d: the step's graph was not timed: %s\n", res->batch,
                why);
        return;
    }
    fprintf(stderr,
            "bench: decode batch %d: a step takes %.1f us, its graph alone %.1f us on the GPU "
            "(host, copies and sampling: %.1f us)\n",
            res->batch, 1000 * res->step_ms, 1000 * res->graph_step_ms,
            1000 * (res->step_ms - res->graph_step_ms));
}

static int decode_one(pol_gpu *g, const bench_args *a, int Bd, int vocab, decode_result *res,
                      char *err)
{
    int P = (int)a->prompt, N = (int)a->new_tokens;
    long want = (long)Bd * P;
    int max_tokens = (int)(want > MAX_APPEND_TOKENS ? MAX_APPEND_TOKENS : want);
    int32_t *prompts = malloc((size_t)want * sizeof *prompts);
    if (!prompts)
        return text_fail(err, ERRCAP, "out of host memory");
    uint64_t state = (uint64_t)a->seed ^ ((uint64_t)Bd << 32);
    random_ids(prompts, (size_t)want, vocab, &state);
    pol_gpu_dec *d = NULL;
    double warm_ms = 0;
    res->batch = Bd;
    int rc = pol_gpu_dec_create(&d, g, Bd, P + N + 1, max_tokens, err, ERRCAP);
    if (rc == 0) {
        pol_gpu_dec_set_graphs(d, a->graphs);
        pol_gpu_dec_set_pdl(d, !a->no_pdl);
    }
    /* the warm-up's two decode steps also capture the step's graph (unless --no-graphs) */
    if (rc == 0)
        rc = timed_generate(d, prompts, Bd, P, 3, &warm_ms, err);
    if (rc == 0)
        rc = timed_generate(d, prompts, Bd, P, 1, &res->prefill_ms, err);
    if (rc == 0)
        rc = timed_generate(d, prompts, Bd, P, N, &res->full_ms, err);
    if (rc == 0 && res->full_ms <= res->prefill_ms)
        rc = text_fail(err, ERRCAP, "decode batch %d: %d tokens took no longer than 1 (%.3f ms)",
                       Bd, N, res->full_ms);
    if (rc == 0) {
        res->tokens_per_s = (double)Bd * (N - 1) / ((res->full_ms - res->prefill_ms) / 1000.0);
        res->prefill_tokens_per_s = (double)want / (res->prefill_ms / 1000.0);
        res->e2e_tokens_per_s = (double)Bd * N / (res->full_ms / 1000.0);
        res->step_ms = (res->full_ms - res->prefill_ms) / (N - 1);
        fprintf(stderr, "bench: decode batch %d: prefill+1 %.1f ms, %d tokens %.1f ms\n", Bd,
                res->prefill_ms, N, res->full_ms);
    }
    if (rc == 0 && a->graphs) {
        report_step_split(d, res);
        /* a refused capture runs the same launches: say so, or a plain figure passes for a
         * graphed one */
        pol_gpu_dec_graph_stats st = pol_gpu_dec_graphs(d);
        res->graphs_replayed = st.replayed;
        res->graphs_refused = st.refused;
        fprintf(stderr,
                "bench: decode batch %d: graphs: %ld captured, %ld steps replayed, %ld refused\n",
                Bd, st.captured, st.replayed, st.refused);
    }
    pol_gpu_dec_free(d);
    free(prompts);
    return rc;
}

static int bench_decode(const bench_args *a, const pol_model *m, decode_result *res, char *err)
{
    pol_gpu *g = NULL;
    fprintf(stderr, "bench: uploading the inference model\n");
    if (pol_gpu_create(&g, m, false, err, ERRCAP) != 0)
        return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < a->n_decode_batches; i++)
        rc = decode_one(g, a, a->decode_batches[i], m->cfg.vocab_size, &res[i], err);
    pol_gpu_free(g);
    return rc;
}

/* ---- output ---- */

typedef struct bench_report {
    char device[256];
    const char *source; /* the shape's name or the folder */
    bool random_weights;
    double n_params, n_matmul;
    bool trained, decoded;
    train_result train;
    decode_result decode[MAX_DECODE_BATCHES];
} bench_report;

static void print_header(const bench_args *a, const bench_report *r, const pol_model *m)
{
    pol_dims d = pol_dims_of(&m->cfg);
    printf("bench on %s: %s (%s weights), %.1fM parameters, %.1fM in matmuls\n", r->device,
           r->source, r->random_weights ? "random" : "checkpoint", r->n_params / 1e6,
           r->n_matmul / 1e6);
    if (!a->skip_train)
        printf("model FLOPs/token = 6*N_matmul + 6*L*H*hd*T = 6*%.0f + 6*%d*%d*%d*%ld = %.4g "
               "(MFU against %.0f TFLOP/s)\n",
               r->n_matmul, d.L, d.H, d.hd, a->seq, train_flops_per_token(&m->cfg, a->seq),
               a->peak_tflops);
}

static void print_report(const bench_args *a, const bench_report *r)
{
    char b1[48], b2[48], b3[48];
    if (r->trained) {
        const train_result *t = &r->train;
        printf("train  B %ld x T %ld%s: %.1f ms/step, %s tokens/s, %.0f TFLOP/s, MFU %.1f%% "
               "(activations %.2f GB, peak device memory %.2f GB)\n",
               a->train_batch, a->seq, a->recompute ? " (recompute)" : "", t->ms_per_step,
               grouped(t->tokens_per_s, b1, sizeof b1), t->tflops, 100 * t->mfu,
               t->activation_bytes / 1e9,
               t->device_peak > t->device_before ? (t->device_peak - t->device_before) / 1e9 : 0.0);
    }
    for (int i = 0; r->decoded && i < a->n_decode_batches; i++) {
        const decode_result *d = &r->decode[i];
        printf("decode batch %d (%s, %s): %s tokens/s (prefill %s tokens/s, end to end %s "
               "tokens/s)\n",
               d->batch, a->graphs ? "graphs" : "no graphs", a->no_pdl ? "no pdl" : "pdl",
               grouped(d->tokens_per_s, b1, sizeof b1),
               grouped(d->prefill_tokens_per_s, b2, sizeof b2),
               grouped(d->e2e_tokens_per_s, b3, sizeof b3));
    }
}

static json_t *train_json(const bench_args *a, const train_result *t)
{
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, "
        "s:I}",
        "batch", (json_int_t)a->train_batch, "seq", (json_int_t)a->seq, "steps",
        (json_int_t)a->steps, "warmup_steps", (json_int_t)WARMUP_STEPS, "recompute", a->recompute,
        "ms_per_step", t->ms_per_step, "ms_min", t->ms_min, "tokens_per_s", t->tokens_per_s,
        "flops_per_token", t->flops_per_token, "tflops", t->tflops, "mfu", t->mfu, "peak_tflops",
        a->peak_tflops, "loss_first", t->loss_first, "loss_last", t->loss_last, "activation_bytes",
        (json_int_t)t->activation_bytes, "device_bytes_before", (json_int_t)t->device_before,
        "device_bytes_model", (json_int_t)t->device_model, "device_bytes_peak",
        (json_int_t)t->device_peak);
}

static json_t *decode_json(const bench_args *a, const bench_report *r)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < a->n_decode_batches; i++) {
        const decode_result *d = &r->decode[i];
        json_array_append_new(
            arr, json_pack("{s:i, s:I, s:I, s:b, s:b, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
                           "batch", d->batch, "prompt", (json_int_t)a->prompt, "new",
                           (json_int_t)a->new_tokens, "graphs", a->graphs, "pdl", !a->no_pdl,
                           "graphs_replayed", (json_int_t)d->graphs_replayed, "graphs_refused",
                           (json_int_t)d->graphs_refused, "prefill1_ms", d->prefill_ms, "full_ms",
                           d->full_ms, "tokens_per_s", d->tokens_per_s, "prefill_tokens_per_s",
                           d->prefill_tokens_per_s, "end_to_end_tokens_per_s", d->e2e_tokens_per_s,
                           "step_ms", d->step_ms, "graph_step_ms", d->graph_step_ms));
    }
    return arr;
}

static int write_json(const bench_args *a, const bench_report *r, const pol_model *m, char *err)
{
    pol_dims d = pol_dims_of(&m->cfg);
    json_t *j = json_pack(
        "{s:s, s:s, s:b, s:f, s:f, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i}, s:s, s:f}", "device",
        r->device, "model", r->source, "random_weights", r->random_weights, "n_params", r->n_params,
        "n_params_matmul", r->n_matmul, "shape", "vocab", d.V, "hidden", d.D, "intermediate", d.F,
        "layers", d.L, "heads", d.H, "kv_heads", d.KV, "head_dim", d.hd, "flops_formula",
        "6*n_params_matmul + 6*layers*heads*head_dim*seq", "peak_tflops", a->peak_tflops);
    if (!j)
        return text_fail(err, ERRCAP, "out of memory");
    json_object_set_new(j, "train", r->trained ? train_json(a, &r->train) : json_null());
    json_object_set_new(j, "decode", r->decoded ? decode_json(a, r) : json_null());
    int rc = json_dump_file(j, a->json_path, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    json_decref(j);
    return rc == 0 ? 0 : text_fail(err, ERRCAP, "%s: cannot write the JSON", a->json_path);
}

/* The GPU's name into r->device; an error when there is none. */
static int find_gpu(bench_report *r, char *err)
{
    int n = 0;
    if (cuda_ok(cudaGetDeviceCount(&n), "no CUDA device (cudaGetDeviceCount)", err) != 0)
        return -1;
    if (n == 0)
        return text_fail(err, ERRCAP, "no CUDA device found");
    struct cudaDeviceProp p;
    if (cuda_ok(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties", err) != 0)
        return -1;
    text_fmt(r->device, sizeof r->device, "%s", p.name);
    return 0;
}

static int run_bench(const bench_args *a, char *err)
{
    bench_report *r = calloc(1, sizeof *r);
    pol_model m = {0};
    if (!r)
        return text_fail(err, ERRCAP, "out of host memory");
    r->source = a->model_dir ? a->model_dir : "qwen2.5-0.5b";
    int rc = find_gpu(r, err);
    if (rc == 0)
        rc = build_model(a, &m, &r->random_weights, err);
    if (rc == 0) {
        r->n_params = (double)pol_model_n_params(&m);
        r->n_matmul = matmul_params(&m.cfg);
        print_header(a, r, &m);
        fflush(stdout);
    }
    if (rc == 0 && !a->skip_train) {
        rc = bench_train(a, &m, &r->train, err);
        r->trained = rc == 0;
    }
    if (rc == 0 && !a->skip_decode) {
        rc = bench_decode(a, &m, r->decode, err);
        r->decoded = rc == 0;
    }
    if (rc == 0)
        print_report(a, r);
    if (rc == 0 && a->json_path)
        rc = write_json(a, r, &m, err);
    pol_model_deinit(&m);
    free(r);
    return rc;
}

#endif

int cmd_bench(int argc, char **argv)
{
    bench_args a;
    int rc = parse_bench_args(argc, argv, &a);
    if (rc)
        return rc == 1 ? 0 : 2;
#ifdef KGYM_WITH_CUDA
    char err[ERRCAP] = "";
    if (run_bench(&a, err) != 0)
        return cli_fail("bench", err);
    return 0;
#else
    return cli_fail("bench", NEEDS_CUDA);
#endif
}
