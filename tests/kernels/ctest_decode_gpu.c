/* ctest_decode_gpu: KV-cached decoding on the GPU (policy/cuda/decode_gpu.h) against the CPU
 * reference (policy/model.h) and against the GPU model's own full forward. Tiny random models
 * (Qwen2 with biases and GQA 4/2, Qwen3 with the q/k norm, Llama 3 with llama3 RoPE and tied
 * embeddings; head_dim 64, vocabulary 300) and one with Qwen3's real tokenizer and a padded
 * vocabulary (151,936 rows, tokenizer size below). Checks, one line each:
 *   - logits after a fresh prompt (flash attention), after single tokens appended one call at a
 *     time (attention over the cache), after a prompt fed in pieces, after a call mixing a new
 *     prompt with a running sequence, and in a reused slot over a longer sequence's stale cache:
 *     all against the CPU's fp32 forward and the GPU's own forward;
 *   - greedy generation with continuous batching (more prompts than slots, of different lengths)
 *     equals the CPU's greedy tokens up to the first step where the CPU's top two logits are closer
 *     than the logits' measured error, copies of a prompt in one batch too; log-probs;
 *   - seeded sampling: a rerun gives the same tokens, other seeds others; EOS, max_new and a
 *     full slot stop a sequence with the right finish reason and length;
 *   - stop strings matched over token boundaries (against the decoded text), padded vocabulary
 *     rows never chosen even when they would win;
 *   - decode steps as CUDA graphs give bitwise the same generations as without; timing a
 *     step's graph (the bench's diagnostic) changes no logits;
 *   - bad input refused with a message, nothing changed, the decoder usable after.
 * Ends with "decode_gpu: all checks passed"; exit 1 on any failure. */
#include <cuda_runtime.h>

#include "policy/cuda/decode_gpu.h"
#include "policy/cuda/model_gpu.h"
#include "policy/model.h"
#include "policy/tokenizer.h"

#include "ctest_common.h"

/* Logits tolerance (relative L2) of a bf16 model against fp32 after L layers: ctest_model_gpu's
 * act_tol at the logits (the same roundings; argued there). */
static double logits_tol(int L)
{
    return 1.5e-2 * (1.0 + (L + 1) / 16.0);
}

/* ---- references ---- */

/* The CPU model's fp32 logits [n, V] of one sequence (NULL on failure). */
static float *cpu_logits(const pol_model *m, const int32_t *ids, int n)
{
    char err[ERRCAP];
    pol_fwd f;
    if (!need(pol_fwd_init(&f, m, 1, n, false, err, ERRCAP), "cpu fwd init", err))
        return NULL;
    float *out = NULL;
    size_t count = (size_t)n * m->cfg.vocab_size;
    if (need(pol_model_forward(m, &f, ids, NULL, NULL, err, ERRCAP), "cpu forward", err) &&
        (out = malloc(count * sizeof *out)))
        memcpy(out, f.logits, count * sizeof *out);
    pol_fwd_deinit(&f);
    return out;
}

/* The GPU model's full-forward logits [n, V] of one sequence, as fp32. */
static float *gpu_forward_logits(pol_gpu *g, const int32_t *ids, int n, int V)
{
    char err[ERRCAP];
    if (!need(pol_gpu_forward(g, ids, NULL, NULL, n, false, err, ERRCAP), "gpu forward", err))
        return NULL;
    size_t count = (size_t)n * V;
    kg_bf16 *h = malloc(count * sizeof *h);
    float *out = malloc(count * sizeof *out);
    if (h && out &&
        cudaMemcpy(h, pol_gpu_logits(g), count * sizeof *h, cudaMemcpyDeviceToHost) ==
            cudaSuccess) {
        for (size_t i = 0; i < count; i++)
            out[i] = bf16_to_float(h[i]);
    } else {
        report(false, "copying the forward's logits");
        free(out);
        out = NULL;
    }
    free(h);
    return out;
}

/* Deterministic pseudo-random ids in [0, V). */
static void fill_ids(int32_t *ids, int n, int V, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)V);
    }
}

/* One appended call's logits for its rows, fetched to the host ([rows, V], malloc'd). */
static float *append_and_fetch(pol_gpu_dec *d, const int32_t *slots, const int32_t *ids, int n,
                               int V, int *rows)
{
    char err[ERRCAP];
    if (!need(pol_gpu_dec_append(d, slots, ids, n, err, ERRCAP), "append", err))
        return NULL;
    const int32_t *rs;
    *rows = pol_gpu_dec_rows(d, &rs);
    float *out = malloc((size_t)*rows * V * sizeof *out);
    if (out && !need(pol_gpu_dec_logits(d, out, err, ERRCAP), "logits", err)) {
        free(out);
        out = NULL;
    }
    return out;
}

/* One row of logits is one sample of the bf16 error, spread around the tensor-wide figure that
 * the tolerance is argued for: a row passes within ROW_SLACK x tol, and checks over many rows
 * also hold their aggregate to tol (as tests/gpu/test_policy_gpu.py does). */
#define ROW_SLACK 3.0

/* Rows compared so far: the aggregate relative L2, the worst row, the largest abs error. */
typedef struct rows_acc {
    double ee, ww, worst, max_abs;
    int bad;
} rows_acc;

/* got [V] against want [V]: within ROW_SLACK * tol (relative L2); into acc (may be NULL). */
static bool row_close(const float *got, const float *want, int V, double tol, rows_acc *acc)
{
    diff df = compare(got, want, (size_t)V);
    bool ok = df.bad == 0 && df.rel <= ROW_SLACK * tol;
    if (acc) {
        double ww = df.rms * df.rms * V;
        acc->ee += df.rel * df.rel * ww;
        acc->ww += ww;
        acc->worst = df.rel > acc->worst ? df.rel : acc->worst;
        acc->max_abs = df.max_abs > acc->max_abs ? df.max_abs : acc->max_abs;
        acc->bad += !ok;
    }
    return ok;
}

static double acc_rel(const rows_acc *a)
{
    return a->ww > 0 ? sqrt(a->ee / a->ww) : 0;
}

/* ---- case 1: logits of every way of feeding tokens ---- */

typedef struct seq_case {
    pol_model *m;
    pol_gpu *g;
    const char *name;
    int V, L;
    double tol;
    double max_err; /* the largest abs logit error seen against the CPU */
} seq_case;

/* A row against the CPU's: row_close, its abs error kept for the greedy checks' gap. */
static bool cpu_row_close(seq_case *c, const float *got, const float *want, rows_acc *acc)
{
    rows_acc one = {0};
    bool ok = row_close(got, want, c->V, c->tol, acc ? acc : &one);
    double m = acc ? acc->max_abs : one.max_abs;
    c->max_err = m > c->max_err ? m : c->max_err;
    return ok;
}

/* A prompt of P then C tokens one call at a time; every row against the CPU and the GPU's
 * forward. */
static void check_prompt_then_steps(seq_case *c, pol_gpu_dec *d)
{
    enum { P = 37, C = 23 };
    int32_t ids[P + C];
    fill_ids(ids, P + C, c->V, 11);
    float *cpu = cpu_logits(c->m, ids, P + C);
    float *fwd = gpu_forward_logits(c->g, ids, P + C, c->V);
    int slot = pol_gpu_dec_acquire(d), rows = 0;
    int32_t slots[P];
    for (int i = 0; i < P; i++)
        slots[i] = slot;
    float *got = cpu && fwd ? append_and_fetch(d, slots, ids, P, c->V, &rows) : NULL;
    if (got) {
        size_t at = (size_t)(P - 1) * c->V;
        report(rows == 1 && cpu_row_close(c, got, cpu + at, NULL) &&
                   row_close(got, fwd + at, c->V, c->tol, NULL),
               "%s fresh prompt of %d (flash attention): last logits = CPU and GPU forward",
               c->name, P);
    }
    free(got);
    rows_acc vs_cpu = {0}, vs_fwd = {0};
    bool fetched = true;
    for (int t = P; t < P + C; t++) {
        got = append_and_fetch(d, &slot, &ids[t], 1, c->V, &rows);
        size_t at = (size_t)t * c->V;
        fetched = fetched && got;
        if (got) {
            cpu_row_close(c, got, cpu + at, &vs_cpu);
            row_close(got, fwd + at, c->V, c->tol, &vs_fwd);
        }
        free(got);
    }
    report(fetched && vs_cpu.bad == 0 && vs_fwd.bad == 0 && acc_rel(&vs_cpu) <= c->tol &&
               acc_rel(&vs_fwd) <= c->tol && pol_gpu_dec_len(d, slot) == P + C,
           "%s %d tokens one call each (cached attention): rel L2 %.2e vs CPU, %.2e vs GPU "
           "forward (tol %.2e); worst row %.2e / %.2e (tol %.2e)",
           c->name, C, acc_rel(&vs_cpu), acc_rel(&vs_fwd), c->tol, vs_cpu.worst, vs_fwd.worst,
           ROW_SLACK * c->tol);
    pol_gpu_dec_release(d, slot);
    free(cpu);
    free(fwd);
}

/* The same prompt in pieces (the later ones attend to the cache), and a call mixing a fresh
 * prompt with a running sequence; then the slot of a long sequence reused for a short one. */
static void check_pieces_and_mixes(seq_case *c, pol_gpu_dec *d)
{
    enum { P = 41, Q = 11 };
    int32_t ids[P], other[Q];
    fill_ids(ids, P, c->V, 21);
    fill_ids(other, Q, c->V, 22);
    float *cpu = cpu_logits(c->m, ids, P), *cpu_o = cpu_logits(c->m, other, Q);
    int a = pol_gpu_dec_acquire(d), rows = 0;
    int32_t slots[P + 1];
    for (int i = 0; i < P; i++)
        slots[i] = a;
    static const int cuts[] = {0, 5, 6, 30, P};
    bool ok = cpu && cpu_o;
    for (int k = 0; ok && k + 1 < 5; k++) {
        float *got = append_and_fetch(d, slots, ids + cuts[k], cuts[k + 1] - cuts[k], c->V, &rows);
        ok =
            got && rows == 1 && cpu_row_close(c, got, cpu + (size_t)(cuts[k + 1] - 1) * c->V, NULL);
        free(got);
    }
    report(ok, "%s prompt of %d in pieces 5+1+24+11 = CPU after each piece", c->name, P);
    /* a new prompt in slot b next to a's next token: one call, two rows (b's last token last) */
    int b = pol_gpu_dec_acquire(d);
    int32_t mix_slots[Q + 1], mix_ids[Q + 1];
    mix_slots[0] = a;
    mix_ids[0] = other[0]; /* a's next token: a continues with other[0] */
    for (int i = 0; i < Q; i++) {
        mix_slots[i + 1] = b;
        mix_ids[i + 1] = other[i];
    }
    int32_t cont[P + 1];
    memcpy(cont, ids, sizeof ids);
    cont[P] = other[0];
    float *cpu_c = cpu_logits(c->m, cont, P + 1);
    float *got = ok && cpu_c ? append_and_fetch(d, mix_slots, mix_ids, Q + 1, c->V, &rows) : NULL;
    const int32_t *rs = NULL;
    pol_gpu_dec_rows(d, &rs);
    report(got && rows == 2 && rs[0] == a && rs[1] == b &&
               cpu_row_close(c, got, cpu_c + (size_t)P * c->V, NULL) &&
               cpu_row_close(c, got + c->V, cpu_o + (size_t)(Q - 1) * c->V, NULL),
           "%s one call: a running sequence's token + a new prompt of %d = CPU for both", c->name,
           Q);
    free(got);
    /* a (P + 1 tokens) ends; its slot takes the short prompt, fresh and cached paths */
    pol_gpu_dec_release(d, a);
    int a2 = pol_gpu_dec_acquire(d);
    for (int i = 0; i < Q; i++)
        slots[i] = a2;
    got = append_and_fetch(d, slots, other, Q, c->V, &rows);
    report(a2 == a && got && row_close(got, cpu_o + (size_t)(Q - 1) * c->V, c->V, c->tol, NULL),
           "%s slot reused after %d tokens by a prompt of %d (fresh) = CPU", c->name, P + 1, Q);
    free(got);
    pol_gpu_dec_release(d, a2);
    a2 = pol_gpu_dec_acquire(d);
    mix_slots[0] = b;
    mix_ids[0] = other[0];
    for (int i = 0; i < Q; i++) {
        mix_slots[i + 1] = a2;
        mix_ids[i + 1] = other[i];
    }
    got = append_and_fetch(d, mix_slots, mix_ids, Q + 1, c->V, &rows);
    report(got && rows == 2 &&
               row_close(got + c->V, cpu_o + (size_t)(Q - 1) * c->V, c->V, c->tol, NULL),
           "%s slot reused after %d tokens by a prompt of %d (cached path) = CPU", c->name, P + 1,
           Q);
    free(got);
    pol_gpu_dec_release(d, a2);
    pol_gpu_dec_release(d, b);
    free(cpu);
    free(cpu_o);
    free(cpu_c);
}

/* ---- case 2: generation ---- */

/* The CPU's greedy continuation of a prompt: ids[max_new], the gap between its top two logits
 * at each step, and the log-prob of each token. */
static bool cpu_greedy(const pol_model *m, const int32_t *prompt, int n, int max_new, int32_t *ids,
                       float *gap, float *logp)
{
    char err[ERRCAP];
    pol_kv kv;
    int V = m->cfg.vocab_size;
    if (!need(pol_kv_init(&kv, m, n + max_new, err, ERRCAP), "cpu kv", err))
        return false;
    float *logits = malloc((size_t)V * sizeof *logits), *lsm = malloc((size_t)V * sizeof *lsm);
    bool ok = logits && lsm &&
              need(pol_model_decode(m, &kv, prompt, n, logits, err, ERRCAP), "cpu decode", err);
    for (int t = 0; ok && t < max_new; t++) {
        int best = pol_argmax(logits, V);
        float second = -INFINITY;
        for (int j = 0; j < V; j++)
            if (j != best && logits[j] > second)
                second = logits[j];
        ids[t] = best;
        gap[t] = logits[best] - second;
        pol_log_softmax(lsm, logits, V);
        logp[t] = lsm[best];
        ok = t + 1 == max_new ||
             need(pol_model_decode(m, &kv, &ids[t], 1, logits, err, ERRCAP), "cpu decode", err);
    }
    free(logits);
    free(lsm);
    pol_kv_deinit(&kv);
    return ok;
}

static void count_progress(void *ctx, int finished, int total)
{
    int *calls = ctx;
    (*calls)++;
    if (finished > total)
        report(false, "progress: %d of %d finished", finished, total);
}

/* More prompts than slots, of different lengths, greedy: each equals the CPU's tokens up to its
 * first near tie. */
static void check_greedy_batching(seq_case *c, pol_gpu_dec *d)
{
    enum { N = 7, NEW = 24 };
    static const int lens[N] = {5, 40, 17, 1, 33, 12, 26};
    int32_t prompts[N][40];
    pol_gpu_gen_seq seqs[N];
    memset(seqs, 0, sizeof seqs);
    for (int i = 0; i < N; i++) {
        fill_ids(prompts[i], lens[i], c->V, 100 + (uint64_t)i);
        seqs[i].prompt = prompts[i];
        seqs[i].n_prompt = lens[i];
    }
    pol_gpu_gen_opts o = {.max_new = NEW};
    char err[ERRCAP];
    int calls = 0;
    if (!need(pol_gpu_generate(d, seqs, N, &o, count_progress, &calls, err, ERRCAP), "generate",
              err)) {
        pol_gpu_gen_free(seqs, N);
        return;
    }
    double gap_tol = 2 * c->max_err + 1e-3; /* each of the top two may be off by max_err */
    int compared = 0, total = 0, wrong = 0, bad_logp = 0;
    for (int i = 0; i < N; i++) {
        int32_t want[NEW];
        float gap[NEW], lp[NEW];
        if (!cpu_greedy(c->m, prompts[i], lens[i], NEW, want, gap, lp))
            continue;
        if (seqs[i].n != NEW || seqs[i].finish != POL_FINISH_LENGTH)
            wrong++;
        for (int t = 0; t < seqs[i].n && t < NEW; t++) {
            total++;
            if (gap[t] < gap_tol)
                break; /* a near tie: either token is right, and the rest follows from it */
            compared++;
            wrong += seqs[i].ids[t] != want[t];
            bad_logp += !(fabsf(seqs[i].logp[t] - lp[t]) <= 0.05f + (float)c->max_err);
        }
    }
    report(wrong == 0 && bad_logp == 0 && compared * 2 >= total && calls > 0,
           "%s greedy, %d prompts over 3 slots = CPU greedy: %d of %d tokens compared (gap tol "
           "%.3g), %d differ, %d log-probs off",
           c->name, N, compared, total, gap_tol, wrong, bad_logp);
    pol_gpu_gen_free(seqs, N);
}

/* Decode steps through CUDA graphs (pol_gpu_dec_set_graphs) against the same generations
 * without, on a decoder of its own: 12 slots of 40 tokens and 20 prompts of 1 to 30 tokens that
 * run until their slot is full, so sequences end at staggered steps and new prompts join running
 * ones: steps of many token counts (above 8 too, where the matmuls are cuBLASLt's, inside the
 * graph), calls mixing prompts and steps (never graphed), one-token prompts appended beside
 * running steps. Greedy, then seeded sampling, which replays the graphs captured during the
 * greedy run at other slots and positions. Tokens, finish reasons and log-probs must be bitwise
 * the same, and the graphs must have been captured and replayed, none refused (a refused one
 * falls back to the same launches, which this comparison alone could not tell). */
static bool same_generation(const pol_gpu_gen_seq *a, const pol_gpu_gen_seq *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i].n != b[i].n || a[i].finish != b[i].finish ||
            memcmp(a[i].ids, b[i].ids, (size_t)a[i].n * sizeof *a[i].ids) != 0 ||
            memcmp(a[i].logp, b[i].logp, (size_t)a[i].n * sizeof *a[i].logp) != 0)
            return false;
    return true;
}

static void check_graphs(seq_case *c)
{
    enum { N = 20, SLOTS = 12, MAX_LEN = 40, LONGEST = 30 };
    pol_gpu_dec *d = NULL;
    char err[ERRCAP];
    if (!need(pol_gpu_dec_create(&d, c->g, SLOTS, MAX_LEN, 256, err, ERRCAP), "dec create", err))
        return;
    pol_gpu_dec_set_graphs(d, false); /* on by default: the first run of each pair goes without */
    int32_t prompts[N][LONGEST];
    int lens[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 1 + (i * 7) % LONGEST;
        fill_ids(prompts[i], lens[i], c->V, 300 + (uint64_t)i);
    }
    pol_gpu_gen_opts opts[2] = {
        {.max_new = MAX_LEN},
        {.max_new = MAX_LEN, .sample = {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f}}};
    for (int k = 0; k < 2; k++) {
        pol_gpu_gen_seq plain[N], graphed[N];
        for (int i = 0; i < N; i++)
            plain[i] = graphed[i] = (pol_gpu_gen_seq){
                .prompt = prompts[i], .n_prompt = lens[i], .seed = 40 + (uint64_t)i};
        pol_gpu_dec_graph_stats before = pol_gpu_dec_graphs(d);
        bool ok = need(pol_gpu_generate(d, plain, N, &opts[k], NULL, NULL, err, ERRCAP),
                       "generate without graphs", err);
        pol_gpu_dec_set_graphs(d, true);
        ok = ok && need(pol_gpu_generate(d, graphed, N, &opts[k], NULL, NULL, err, ERRCAP),
                        "generate with graphs", err);
        pol_gpu_dec_set_graphs(d, false);
        pol_gpu_dec_graph_stats st = pol_gpu_dec_graphs(d);
        long replayed = st.replayed - before.replayed;
        report(ok && same_generation(plain, graphed, N) && replayed > 0 && st.captured > 0 &&
                   st.refused == 0,
               "%s %s generation with decode steps as CUDA graphs = without, bitwise (%d prompts "
               "over %d slots; %ld token counts captured so far, %ld steps replayed, %ld refused)",
               c->name, k == 0 ? "greedy" : "sampled", N, SLOTS, st.captured, replayed, st.refused);
        pol_gpu_gen_free(plain, N);
        pol_gpu_gen_free(graphed, N);
    }
    pol_gpu_dec_free(d);
}

/* Programmatic dependent launch (pol_gpu_dec_set_pdl, on by default) against the same
 * generations without it, with and without graphs: staggered prompts over 6 slots (steps of 1 to
 * 6 tokens, prefills through cuBLASLt between them), greedy and sampled. The test models'
 * vocabularies are too small for the wide LM-head blocks: test_matmul's PDL chain runs those. A
 * kernel that touched its predecessor's output before its pdl_wait would race, and its tokens or
 * log-probs would differ in some run. */
static void check_pdl(seq_case *c)
{
    enum { N = 10, SLOTS = 6, MAX_LEN = 48, LONGEST = 20 };
    pol_gpu_dec *d = NULL;
    char err[ERRCAP];
    if (!need(pol_gpu_dec_create(&d, c->g, SLOTS, MAX_LEN, 128, err, ERRCAP), "dec create", err))
        return;
    int32_t prompts[N][LONGEST];
    int lens[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 1 + (i * 5) % LONGEST;
        fill_ids(prompts[i], lens[i], c->V, 900 + (uint64_t)i);
    }
    pol_gpu_gen_opts opts[2] = {
        {.max_new = MAX_LEN},
        {.max_new = MAX_LEN, .sample = {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f}}};
    for (int run = 0; run < 4; run++) {
        const int k = run % 2;
        const bool graphs = run >= 2;
        pol_gpu_gen_seq without[N], with[N];
        for (int i = 0; i < N; i++)
            without[i] = with[i] = (pol_gpu_gen_seq){
                .prompt = prompts[i], .n_prompt = lens[i], .seed = 70 + (uint64_t)i};
        pol_gpu_dec_set_graphs(d, graphs);
        pol_gpu_dec_set_pdl(d, false);
        bool ok = need(pol_gpu_generate(d, without, N, &opts[k], NULL, NULL, err, ERRCAP),
                       "generate without pdl", err);
        pol_gpu_dec_set_pdl(d, true);
        ok = ok && need(pol_gpu_generate(d, with, N, &opts[k], NULL, NULL, err, ERRCAP),
                        "generate with pdl", err);
        report(ok && same_generation(without, with, N),
               "%s %s generation with programmatic dependent launch = without, bitwise (%s, %d "
               "prompts over %d slots)",
               c->name, k == 0 ? "greedy" : "sampled", graphs ? "graphs" : "no graphs", N, SLOTS);
        pol_gpu_gen_free(without, N);
        pol_gpu_gen_free(with, N);
    }
    pol_gpu_dec_free(d);
}

/* Two slots' logits after a prompt each and `steps` decode steps of both (graphs on: the second
 * step is captured and replayed), fetched to the host ([2, V], malloc'd). With reps > 0 the
 * graph of step time_after is timed (pol_gpu_dec_time_step_graph, *ms) right after that step. */
static float *two_slot_steps(seq_case *c, pol_gpu_dec *d, int steps, int time_after, int reps,
                             double *ms)
{
    enum { P = 9 };
    char err[ERRCAP];
    int32_t slots[2] = {pol_gpu_dec_acquire(d), pol_gpu_dec_acquire(d)}, ids[2 * P];
    fill_ids(ids, 2 * P, c->V, 4242);
    int32_t both[2 * P] = {0};
    for (int t = 0; t < 2 * P; t++)
        both[t] = slots[t / P];
    float *out = malloc(2 * (size_t)c->V * sizeof *out);
    bool ok = out && need(pol_gpu_dec_append(d, both, ids, 2 * P, err, ERRCAP), "prompts", err);
    for (int k = 0; ok && k < steps; k++) {
        int32_t next[2] = {ids[k % P], ids[P + (k * 3) % P]};
        ok = need(pol_gpu_dec_append(d, slots, next, 2, err, ERRCAP), "a step", err);
        if (ok && reps > 0 && k + 1 == time_after)
            ok = need(pol_gpu_dec_time_step_graph(d, reps, ms, err, ERRCAP), "timing", err);
    }
    ok = ok && need(pol_gpu_dec_logits(d, out, err, ERRCAP), "logits", err);
    pol_gpu_dec_release(d, slots[0]);
    pol_gpu_dec_release(d, slots[1]);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

/* pol_gpu_dec_time_step_graph (the bench's GPU time per step): refused after a prefill, and
 * its replays change nothing: the step's logits, then the next step's, equal bitwise those of a
 * decoder whose graph was never timed. */
static void check_graph_timing(seq_case *c)
{
    enum { SLOTS = 2, MAX_LEN = 32 };
    pol_gpu_dec *timed = NULL, *plain = NULL;
    char err[ERRCAP];
    if (!need(pol_gpu_dec_create(&timed, c->g, SLOTS, MAX_LEN, 32, err, ERRCAP), "dec create",
              err) ||
        !need(pol_gpu_dec_create(&plain, c->g, SLOTS, MAX_LEN, 32, err, ERRCAP), "dec create",
              err)) {
        pol_gpu_dec_free(timed);
        return;
    }
    double ms = 0;
    float *a3 = two_slot_steps(c, timed, 0, 0, 0, NULL);
    int rc = pol_gpu_dec_time_step_graph(timed, 5, &ms, err, ERRCAP);
    report(a3 && rc == -1 && err[0], "%s the step timing refused after a prefill (%s)", c->name,
           err);
    free(a3);
    double timed_ms = 0;
    /* the replayed step's own logits, then two steps after the timing */
    float *t = two_slot_steps(c, timed, 3, 3, 5, &timed_ms),
          *p = two_slot_steps(c, plain, 3, 0, 0, NULL);
    float *t4 = two_slot_steps(c, timed, 5, 3, 7, &ms),
          *p4 = two_slot_steps(c, plain, 5, 0, 0, NULL);
    /* refused after a prefill again, now that the 2-token step's graph is ready: replaying it
     * over the prefill's plan would read token ids as slots */
    float *again = two_slot_steps(c, timed, 0, 0, 0, NULL);
    int rc_ready = pol_gpu_dec_time_step_graph(timed, 5, &ms, err, ERRCAP);
    report(again && rc_ready == -1,
           "%s the step timing refused after a prefill, a step's graph ready", c->name);
    free(again);
    size_t bytes = 2 * (size_t)c->V * sizeof(float);
    report(t && p && t4 && p4 && timed_ms > 0 && memcmp(t, p, bytes) == 0 &&
               memcmp(t4, p4, bytes) == 0 && pol_gpu_dec_graphs(timed).replayed > 0,
           "%s timing a step's graph (%.3f ms per replay) leaves its logits and the next steps' "
           "bitwise as without",
           c->name, timed_ms);
    free(t);
    free(p);
    free(t4);
    free(p4);
    pol_gpu_dec_free(timed);
    pol_gpu_dec_free(plain);
}

/* Copies of one prompt in one batch; seeds; EOS; max_new; a full slot. */
static void check_sampling_and_stops(seq_case *c, pol_gpu_dec *d)
{
    enum { N = 4, NEW = 20, P = 9 };
    int32_t prompt[P];
    fill_ids(prompt, P, c->V, 7);
    pol_gpu_gen_seq s[N], again[N];
    static const uint64_t seeds[N] = {1, 2, 3, 4};
    for (int i = 0; i < N; i++)
        s[i] = again[i] = (pol_gpu_gen_seq){.prompt = prompt, .n_prompt = P, .seed = seeds[i]};
    pol_gpu_gen_opts o = {.max_new = NEW,
                          .sample = {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f}};
    char err[ERRCAP];
    if (need(pol_gpu_generate(d, s, N, &o, NULL, NULL, err, ERRCAP), "sampled generate", err) &&
        need(pol_gpu_generate(d, again, N, &o, NULL, NULL, err, ERRCAP), "sampled generate", err)) {
        bool rerun = true, finite = true, differ = true;
        for (int i = 0; i < N; i++) {
            rerun = rerun && s[i].n == again[i].n &&
                    !memcmp(s[i].ids, again[i].ids, (size_t)s[i].n * sizeof(int32_t));
            for (int t = 0; t < s[i].n; t++)
                finite = finite && isfinite(s[i].logp[t]) && s[i].logp[t] <= 0;
            if (i > 0)
                differ = differ && memcmp(s[i - 1].ids, s[i].ids, NEW * sizeof(int32_t)) != 0;
        }
        report(rerun && differ && finite,
               "%s sampling (T 0.8, top-k 40, top-p 0.9): a rerun with the same seeds gives the "
               "same tokens, other seeds other tokens, log-probs finite and <= 0",
               c->name);
    }
    pol_gpu_gen_free(s, N);
    pol_gpu_gen_free(again, N);
    /* greedy copies in one batch: each is the CPU's greedy run up to its first near tie (the
     * copies sit at different offsets of the packed prefill, whose sums may round apart) */
    pol_gpu_gen_opts gr = {.max_new = NEW};
    int32_t want[NEW], clear[P];
    float gap[NEW], lp[NEW];
    double gap_tol = 2 * c->max_err + 1e-3;
    /* a prompt whose first steps are no near ties, so that the check compares tokens */
    bool found = false;
    for (uint64_t seed = 40; !found && seed < 80; seed++) {
        fill_ids(clear, P, c->V, seed);
        found = cpu_greedy(c->m, clear, P, NEW, want, gap, lp) && gap[0] >= gap_tol &&
                gap[1] >= gap_tol;
    }
    for (int i = 0; i < N; i++)
        s[i] = (pol_gpu_gen_seq){.prompt = clear, .n_prompt = P};
    if (!found)
        report(false, "%s greedy copies: no prompt of 40 tried starts without a near tie", c->name);
    else if (need(pol_gpu_generate(d, s, N, &gr, NULL, NULL, err, ERRCAP), "greedy copies", err)) {
        int wrong = 0, compared = 0;
        for (int i = 0; i < N; i++)
            for (int t = 0; t < s[i].n && gap[t] >= gap_tol; t++, compared++)
                wrong += s[i].ids[t] != want[t];
        report(wrong == 0 && compared > 0,
               "%s greedy: %d copies of a prompt in one batch = CPU greedy (%d tokens compared)",
               c->name, N, compared);
    }
    pol_gpu_gen_free(s, N);
    /* EOS: a solo run, then the same run with its step-5 token as EOS (the same computation) */
    pol_gpu_gen_seq ref = {.prompt = prompt, .n_prompt = P}, e = ref;
    if (need(pol_gpu_generate(d, &ref, 1, &gr, NULL, NULL, err, ERRCAP), "greedy solo", err) &&
        ref.n == NEW) {
        int32_t eos = ref.ids[5];
        int first = 0;
        while (ref.ids[first] != eos)
            first++;
        pol_gpu_gen_opts eo = gr;
        eo.eos = &eos;
        eo.n_eos = 1;
        if (need(pol_gpu_generate(d, &e, 1, &eo, NULL, NULL, err, ERRCAP), "eos generate", err))
            report(e.finish == POL_FINISH_EOS && e.n == first + 1 &&
                       !memcmp(e.ids, ref.ids, (size_t)e.n * sizeof(int32_t)),
                   "%s EOS id %d: stops after %d tokens (kept), finish %s", c->name, eos, e.n,
                   pol_finish_name(e.finish));
    }
    pol_gpu_gen_free(&ref, 1);
    pol_gpu_gen_free(&e, 1);
    /* max_new, then a slot that fills (max_len = P + 4: the 5th token is drawn from a full one) */
    pol_gpu_gen_seq l = {.prompt = prompt, .n_prompt = P};
    gr.max_new = 3;
    if (need(pol_gpu_generate(d, &l, 1, &gr, NULL, NULL, err, ERRCAP), "max_new generate", err))
        report(l.n == 3 && l.finish == POL_FINISH_LENGTH, "%s max_new 3: %d tokens, finish %s",
               c->name, l.n, pol_finish_name(l.finish));
    pol_gpu_gen_free(&l, 1);
    pol_gpu_dec *small;
    if (need(pol_gpu_dec_create(&small, c->g, 1, P + 4, 16, err, ERRCAP), "small decoder", err)) {
        gr.max_new = 50;
        if (need(pol_gpu_generate(small, &l, 1, &gr, NULL, NULL, err, ERRCAP), "context generate",
                 err))
            report(l.n == 5 && l.finish == POL_FINISH_CONTEXT,
                   "%s slot of %d tokens, prompt %d: %d new tokens, finish %s", c->name, P + 4, P,
                   l.n, pol_finish_name(l.finish));
        pol_gpu_gen_free(&l, 1);
        pol_gpu_dec_free(small);
    }
}

/* ---- case 3: bad input ---- */

static void expect_refused(const char *label, int rc, const char *err)
{
    report(rc != 0 && err[0], "refused: %s (%s)", label, rc != 0 ? err : "accepted");
}

static bool all_slots_free(pol_gpu_dec *d, int n_slots)
{
    bool ok = true;
    for (int i = 0; i < n_slots; i++)
        ok = ok && pol_gpu_dec_len(d, i) == -1;
    return ok;
}

static void check_bad_input(seq_case *c, pol_gpu_dec *d, int n_slots, int max_len, int max_tokens)
{
    char err[ERRCAP];
    int32_t ids[4] = {1, 2, 3, 4}, slots[4];
    int a = pol_gpu_dec_acquire(d);
    for (int i = 0; i < 4; i++)
        slots[i] = a;
    int32_t free_slot = a + 1, bad_id = c->V, neg = -1;
    err[0] = 0;
    expect_refused("append to a free slot", pol_gpu_dec_append(d, &free_slot, ids, 1, err, ERRCAP),
                   err);
    err[0] = 0;
    expect_refused("id = vocab", pol_gpu_dec_append(d, slots, &bad_id, 1, err, ERRCAP), err);
    err[0] = 0;
    expect_refused("id -1", pol_gpu_dec_append(d, slots, &neg, 1, err, ERRCAP), err);
    err[0] = 0;
    expect_refused("0 tokens", pol_gpu_dec_append(d, slots, ids, 0, err, ERRCAP), err);
    err[0] = 0;
    expect_refused("sample with no append",
                   pol_gpu_dec_sample(d, NULL, 0, NULL, ids, NULL, err, ERRCAP), err);
    int32_t *many = calloc((size_t)max_len + max_tokens + 1, sizeof *many);
    int32_t *many_slots = malloc(((size_t)max_len + max_tokens + 1) * sizeof *many_slots);
    for (int i = 0; many_slots && i < max_len + max_tokens + 1; i++)
        many_slots[i] = a;
    err[0] = 0;
    expect_refused("more tokens than a call holds",
                   pol_gpu_dec_append(d, many_slots, many, max_tokens + 1, err, ERRCAP), err);
    report(pol_gpu_dec_len(d, a) == 0, "refused appends left the slot empty (length %d)",
           pol_gpu_dec_len(d, a));
    /* fill the slot to max_len - 1, then 2 more is too many */
    int fill = max_len - 1, done = 0;
    while (done < fill) {
        int k = fill - done < max_tokens ? fill - done : max_tokens;
        if (!need(pol_gpu_dec_append(d, many_slots, many, k, err, ERRCAP), "fill", err))
            break;
        done += k;
    }
    err[0] = 0;
    expect_refused("past max_len", pol_gpu_dec_append(d, slots, ids, 2, err, ERRCAP), err);
    report(pol_gpu_dec_len(d, a) == fill, "the full slot still holds %d tokens", fill);
    pol_gpu_dec_release(d, a);
    free(many);
    /* generation's own checks, before any work: no slot stays taken */
    pol_gpu_gen_seq s = {.prompt = many_slots, .n_prompt = max_len + 1};
    pol_gpu_gen_opts o = {.max_new = 4};
    err[0] = 0;
    expect_refused("prompt longer than a slot",
                   pol_gpu_generate(d, &s, 1, &o, NULL, NULL, err, ERRCAP), err);
    s.prompt = &bad_id;
    s.n_prompt = 1;
    err[0] = 0;
    expect_refused("prompt id = vocab", pol_gpu_generate(d, &s, 1, &o, NULL, NULL, err, ERRCAP),
                   err);
    s.prompt = ids;
    o.max_new = 0;
    err[0] = 0;
    expect_refused("max_new 0", pol_gpu_generate(d, &s, 1, &o, NULL, NULL, err, ERRCAP), err);
    const char *stop = "x";
    o = (pol_gpu_gen_opts){.max_new = 4, .stop = &stop, .n_stop = 1};
    err[0] = 0;
    expect_refused("stop strings without a tokenizer",
                   pol_gpu_generate(d, &s, 1, &o, NULL, NULL, err, ERRCAP), err);
    free(many_slots);
    report(all_slots_free(d, n_slots), "no slot left taken after the refusals");
    /* still usable: a fresh prompt gives the CPU's logits */
    float *cpu = cpu_logits(c->m, ids, 4);
    int rows;
    a = pol_gpu_dec_acquire(d);
    for (int i = 0; i < 4; i++)
        slots[i] = a;
    float *got = cpu ? append_and_fetch(d, slots, ids, 4, c->V, &rows) : NULL;
    report(got && row_close(got, cpu + 3 * (size_t)c->V, c->V, c->tol, NULL),
           "%s after the refusals: a prompt's logits = CPU", c->name);
    pol_gpu_dec_release(d, a);
    free(cpu);
    free(got);
}

static void run_case(const char *name, const char *json, uint64_t seed)
{
    printf("--- %s\n", name);
    char err[ERRCAP];
    pol_model m;
    if (!model_from_json(&m, json, POL_HEAD_LM, seed, 0.08f))
        return;
    pol_gpu *g = NULL;
    pol_gpu_dec *d = NULL;
    enum { SLOTS = 3, MAX_LEN = 160, MAX_TOKENS = 64 };
    if (need(pol_gpu_create(&g, &m, false, err, ERRCAP), "gpu create", err) &&
        need(pol_gpu_dec_create(&d, g, SLOTS, MAX_LEN, MAX_TOKENS, err, ERRCAP), "dec create",
             err)) {
        seq_case c = {&m, g, name, m.cfg.vocab_size, m.cfg.n_layers, logits_tol(m.cfg.n_layers), 0};
        check_prompt_then_steps(&c, d);
        check_pieces_and_mixes(&c, d);
        report(all_slots_free(d, SLOTS), "%s every slot free again", name);
        check_greedy_batching(&c, d);
        check_sampling_and_stops(&c, d);
        check_graphs(&c);
        check_pdl(&c);
        check_graph_timing(&c);
        report(all_slots_free(d, SLOTS), "%s generation left every slot free", name);
        check_bad_input(&c, d, SLOTS, MAX_LEN, MAX_TOKENS);
    }
    pol_gpu_dec_free(d);
    pol_gpu_free(g);
    pol_model_deinit(&m);
}

/* ---- case 4: a real tokenizer: stop strings and padded rows ---- */

/* The first generated token after which the decoded text holds stop (-1: never). */
static int first_stop(const pol_tok *tok, const int32_t *ids, int n, const char *stop)
{
    for (int j = 0; j < n; j++) {
        char *text = NULL, err[ERRCAP];
        size_t len = 0;
        if (pol_tok_decode(tok, ids, (size_t)j + 1, false, &text, &len, err, ERRCAP) != 0)
            return -2;
        bool hit = memmem(text, len, stop, strlen(stop)) != NULL;
        free(text);
        if (hit)
            return j;
    }
    return -1;
}

static void check_stop_strings(pol_gpu_dec *d, const pol_tok *tok, const int32_t *prompt, int P)
{
    enum { NEW = 16 };
    char err[ERRCAP];
    int n_valid = (int)pol_tok_vocab_size(tok);
    pol_gpu_gen_seq s = {.prompt = prompt, .n_prompt = P};
    pol_gpu_gen_opts o = {.max_new = NEW, .n_valid = n_valid};
    if (!need(pol_gpu_generate(d, &s, 1, &o, NULL, NULL, err, ERRCAP), "tokenizer generate", err))
        return;
    /* a stop string of 3 bytes straddling the boundary after token 7 where possible */
    char *text = NULL, *head = NULL;
    size_t len = 0, head_len = 0;
    if (!need(pol_tok_decode(tok, s.ids, (size_t)s.n, false, &text, &len, err, ERRCAP), "decode",
              err) ||
        !need(pol_tok_decode(tok, s.ids, 8, false, &head, &head_len, err, ERRCAP), "decode", err) ||
        len < 4) {
        report(false, "stop strings: the generated text is too short (%zu bytes)", len);
        free(text);
        free(head);
        pol_gpu_gen_free(&s, 1);
        return;
    }
    size_t at = head_len >= 2 && head_len + 1 <= len ? head_len - 2 : 0;
    char stop[4] = {text[at], text[at + 1], text[at + 2], 0};
    bool printable = stop[0] && stop[1] && stop[2];
    int want = first_stop(tok, s.ids, s.n, stop);
    pol_gpu_gen_seq t = {.prompt = prompt, .n_prompt = P};
    const char *stops[2] = {"\x01never\x02", stop};
    o.stop = stops;
    o.n_stop = 2;
    o.tok = tok;
    if (printable &&
        need(pol_gpu_generate(d, &t, 1, &o, NULL, NULL, err, ERRCAP), "stop generate", err))
        report(want >= 0 && t.finish == POL_FINISH_STOP && t.n == want + 1 &&
                   !memcmp(t.ids, s.ids, (size_t)t.n * sizeof(int32_t)),
               "stop string of 3 bytes at byte %zu: stops after %d tokens (decoded text says %d), "
               "finish %s",
               at, t.n, want + 1, pol_finish_name(t.finish));
    else
        report(false, "stop strings: no usable stop string in the generated text");
    free(text);
    free(head);
    pol_gpu_gen_free(&s, 1);
    pol_gpu_gen_free(&t, 1);
}

/* Rows past the tokenizer made to win: chosen without n_valid, never with it. */
static void check_padding(pol_model *m, pol_gpu *g, pol_gpu_dec *d, int n_valid,
                          const int32_t *prompt, int P)
{
    char err[ERRCAP];
    int V = m->cfg.vocab_size, D = m->cfg.hidden;
    float *cpu = cpu_logits(m, prompt, P);
    if (!cpu)
        return;
    int best = pol_argmax(cpu + (size_t)(P - 1) * V, V);
    const pol_param_info *head = pol_model_find(m, "lm_head.weight");
    if (!head) {
        report(false, "padding: no lm_head.weight");
        free(cpu);
        return;
    }
    float *w = m->w.data + head->offset;
    for (int r = n_valid; r < V; r++)
        for (int j = 0; j < D; j++)
            w[(size_t)r * D + j] = round_bf16(4.0f * w[(size_t)best * D + j]);
    free(cpu);
    if (!need(pol_gpu_upload(g, m, err, ERRCAP), "upload", err))
        return;
    enum { NEW = 8 };
    pol_gpu_gen_seq all = {.prompt = prompt, .n_prompt = P}, valid[3];
    pol_gpu_gen_opts o = {.max_new = NEW};
    bool picked_pad = false, never = true;
    if (need(pol_gpu_generate(d, &all, 1, &o, NULL, NULL, err, ERRCAP), "padding generate", err))
        picked_pad = all.n > 0 && all.ids[0] >= n_valid;
    o.n_valid = n_valid;
    for (int k = 0; k < 3; k++)
        valid[k] = (pol_gpu_gen_seq){.prompt = prompt, .n_prompt = P, .seed = 5 + (uint64_t)k};
    o.sample = (pol_sample_cfg){.temperature = 1.0f, .top_p = 1.0f};
    if (need(pol_gpu_generate(d, valid, 1, &(pol_gpu_gen_opts){.max_new = NEW, .n_valid = n_valid},
                              NULL, NULL, err, ERRCAP),
             "padding greedy", err) &&
        need(pol_gpu_generate(d, valid + 1, 2, &o, NULL, NULL, err, ERRCAP), "padding sampled",
             err))
        for (int k = 0; k < 3; k++)
            for (int t = 0; t < valid[k].n; t++)
                never = never && valid[k].ids[t] < n_valid;
    report(picked_pad && never,
           "padded rows %d..%d (made to win: picked without n_valid: %s) never chosen with "
           "n_valid, greedy and sampled",
           n_valid, V - 1, picked_pad ? "yes" : "NO");
    pol_gpu_gen_free(&all, 1);
    pol_gpu_gen_free(valid, 3);
}

static void run_tokenizer_case(void)
{
    printf("--- qwen2 with Qwen3's tokenizer, vocabulary padded to 151936\n");
    const char *path = getenv("KGYM_TEST_TOKENIZER");
    if (!path || !*path)
        path = "../shared/tokenizers/qwen3";
    char err[ERRCAP];
    pol_tok *tok = NULL;
    if (!need(pol_tok_load(path, &tok, err, ERRCAP), "tokenizer (set KGYM_TEST_TOKENIZER)", err))
        return;
    static const char json[] =
        "{\"model_type\": \"qwen2\", \"vocab_size\": 151936, \"hidden_size\": 128, "
        "\"intermediate_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
        "\"num_key_value_heads\": 1, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
        "\"tie_word_embeddings\": false}";
    pol_model m;
    pol_gpu *g = NULL;
    pol_gpu_dec *d = NULL;
    int32_t *prompt = NULL;
    size_t P = 0;
    const char *text = "def add(a, b):\n    return a + b\n";
    if (model_from_json(&m, json, POL_HEAD_LM, 77, 0.08f) &&
        need(pol_tok_encode(tok, text, strlen(text), true, &prompt, &P, err, ERRCAP), "encode",
             err) &&
        need(pol_gpu_create(&g, &m, false, err, ERRCAP), "gpu create", err) &&
        need(pol_gpu_dec_create(&d, g, 3, 128, 64, err, ERRCAP), "dec create", err)) {
        check_stop_strings(d, tok, prompt, (int)P);
        check_padding(&m, g, d, (int)pol_tok_vocab_size(tok), prompt, (int)P);
    }
    free(prompt);
    pol_gpu_dec_free(d);
    pol_gpu_free(g);
    pol_model_deinit(&m);
    pol_tok_free(tok);
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        printf("FAIL decode_gpu: no CUDA device\n");
        return 1;
    }
    run_case("qwen2",
             "{\"model_type\": \"qwen2\", \"vocab_size\": 300, \"hidden_size\": 256, "
             "\"intermediate_size\": 512, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
             "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
             "\"tie_word_embeddings\": false}",
             2000);
    run_case("qwen3",
             "{\"model_type\": \"qwen3\", \"vocab_size\": 300, \"hidden_size\": 128, "
             "\"intermediate_size\": 384, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
             "\"num_key_value_heads\": 2, \"head_dim\": 64, \"rms_norm_eps\": 1e-6, "
             "\"rope_theta\": 1000000.0, \"tie_word_embeddings\": false}",
             2010);
    run_case("llama3",
             "{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 256, "
             "\"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
             "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0, "
             "\"tie_word_embeddings\": true, \"rope_scaling\": {\"rope_type\": \"llama3\", "
             "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
             "\"original_max_position_embeddings\": 64}}",
             2020);
    run_tokenizer_case();
    printf("%s\n", g_failed ? "decode_gpu: FAILED" : "decode_gpu: all checks passed");
    return g_failed ? 1 : 0;
}
