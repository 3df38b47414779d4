/* runner: the choice of device, the dispatch, and the CPU half (the reference of policy/model.h).
 * The CUDA half is runner_cuda.c, present in the kgym-policy-cuda build only. */
#include "runner.h"

#include "util/strbuf.h"
#include "util/text.h"

#include <stdlib.h>
#include <string.h>

#define NO_CUDA_HINT                                                                               \
    "this build has no CUDA; build build/kgym-policy-cuda with `make kernels` (needs nvcc)"

bool runner_parse_device(const char *s, runner_device *d)
{
    if (!s || !strcmp(s, "auto"))
        *d = RUNNER_AUTO;
    else if (!strcmp(s, "cpu"))
        *d = RUNNER_CPU;
    else if (!strcmp(s, "cuda"))
        *d = RUNNER_CUDA;
    else
        return false;
    return true;
}

const char *runner_device_name(runner_device d)
{
    return d == RUNNER_CPU ? "cpu" : d == RUNNER_CUDA ? "cuda" : "auto";
}

bool runner_has_cuda(void)
{
#ifdef KGYM_WITH_CUDA
    return true;
#else
    return false;
#endif
}

/* want with auto resolved: cuda only when this binary has it and a GPU is there. Asking for cuda
 * where there is none is an error (never a quiet fallback: the caller asked for speed). */
static int resolve_device(runner_device want, runner_device *got, char *err, size_t errcap)
{
    *got = RUNNER_CPU;
    if (want == RUNNER_CPU)
        return 0;
#ifdef KGYM_WITH_CUDA
    char why[256] = "";
    if (runner_cuda_devices(why, sizeof why) > 0)
        *got = RUNNER_CUDA;
    else if (want == RUNNER_CUDA)
        return text_fail(err, errcap, "--device cuda: no CUDA device found (%s)", why);
    return 0;
#else
    if (want == RUNNER_CUDA)
        return text_fail(err, errcap, NO_CUDA_HINT);
    return 0;
#endif
}

int runner_load(runner *r, const char *dir, runner_device want, char *err, size_t errcap)
{
    memset(r, 0, sizeof *r);
    if (resolve_device(want, &r->device, err, errcap) != 0)
        return -1;
    if (pol_model_load(&r->m, dir, POL_HEAD_LM, err, errcap) != 0)
        return -1;
#ifdef KGYM_WITH_CUDA
    if (r->device == RUNNER_CUDA)
        return runner_cuda_load(r, err, errcap);
#endif
    return 0;
}

void runner_free(runner *r)
{
#ifdef KGYM_WITH_CUDA
    runner_cuda_free(r);
#endif
    pol_model_deinit(&r->m);
}

/* ---- score ---- */

static int cpu_score(const pol_model *m, const int32_t *ids, int n, float *lp, char *err,
                     size_t errcap)
{
    pol_fwd f = {0};
    int32_t *targets = malloc((size_t)n * sizeof *targets);
    int rc = -1;
    if (!targets) {
        text_fail(err, errcap, "out of memory");
        goto done;
    }
    /* token t + 1 is scored by the logits at t; the last position has nothing to score */
    for (int t = 0; t < n; t++)
        targets[t] = t + 1 < n ? ids[t + 1] : -1;
    if (pol_fwd_init(&f, m, 1, n, false, err, errcap) != 0 ||
        pol_model_forward(m, &f, ids, NULL, NULL, err, errcap) != 0 ||
        pol_model_logprobs(m, &f, targets, lp, err, errcap) != 0)
        goto done;
    rc = 0;
done:
    free(targets);
    pol_fwd_deinit(&f);
    return rc;
}

int runner_score(runner *r, const int32_t *ids, int n, float *lp, char *err, size_t errcap)
{
    if (n < 1)
        return text_fail(err, errcap, "score: no tokens");
#ifdef KGYM_WITH_CUDA
    if (r->device == RUNNER_CUDA)
        return runner_cuda_score(r, ids, n, lp, err, errcap);
#endif
    return cpu_score(&r->m, ids, n, lp, err, errcap);
}

/* ---- generate ---- */

void runner_gen_out_free(runner_gen_out *out)
{
    free(out->ids);
    free(out->logp);
    memset(out, 0, sizeof *out);
}

/* Whether one of the stop strings occurs in text[from..len). */
static bool has_stop(const char *text, size_t from, size_t len, const runner_gen_opts *o)
{
    for (int s = 0; s < o->n_stop; s++) {
        size_t n = strlen(o->stop[s]);
        if (n > 0 && memmem(text + from, len - from, o->stop[s], n))
            return true;
    }
    return false;
}

/* Cuts out after the token that completes the first stop string (matched across token
 * boundaries, in the text before a final EOS: the GPU's rule, where an EOS wins), with finish
 * "stop"; leaves it as it is when no stop string occurs. */
static int cut_at_stop(runner_gen_out *out, const runner_gen_opts *o, char *err, size_t errcap)
{
    if (o->n_stop <= 0 || out->n == 0)
        return 0;
    if (!o->tok)
        return text_fail(err, errcap, "stop strings need a tokenizer");
    size_t longest = 0;
    for (int s = 0; s < o->n_stop; s++)
        longest = strlen(o->stop[s]) > longest ? strlen(o->stop[s]) : longest;
    if (longest == 0)
        return 0;
    int n_text = out->n - (out->finish && !strcmp(out->finish, "eos") ? 1 : 0);
    strbuf text = STRBUF_INIT;
    int rc = 0;
    /* The text grows a token at a time; a match new at token k ends in k's bytes, so only the
     * last longest - 1 bytes before them need searching again. */
    for (int k = 0; k < n_text; k++) {
        const char *bytes;
        size_t len, from = text.len >= longest ? text.len - (longest - 1) : 0;
        if (pol_tok_token_bytes(o->tok, out->ids[k], &bytes, &len) != 0)
            continue; /* an id past the tokenizer (a padding row, as the GPU's): no text */
        if (sb_append(&text, bytes, len) != 0) {
            rc = text_fail(err, errcap, "out of memory");
            break;
        }
        if (text.data && has_stop(text.data, from, text.len, o)) {
            out->n = k + 1;
            out->finish = "stop";
            break;
        }
    }
    sb_free(&text);
    return rc;
}

static int cpu_generate(const pol_model *m, const int32_t *prompt, int n_prompt,
                        const runner_gen_opts *o, runner_gen_out *out, char *err, size_t errcap)
{
    bool hit_eos = false;
    if (pol_model_generate(m, prompt, n_prompt, &o->gen, &out->ids, &out->n, &hit_eos, err,
                           errcap) != 0)
        return -1;
    out->finish = hit_eos ? "eos" : "length";
    return cut_at_stop(out, o, err, errcap);
}

int runner_generate(runner *r, const int32_t *prompt, int n_prompt, const runner_gen_opts *o,
                    runner_gen_out *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    if (n_prompt < 1)
        return text_fail(err, errcap, "generate: empty prompt");
    if (o->n_stop > 0 && !o->tok)
        return text_fail(err, errcap, "stop strings need a tokenizer");
    int rc;
#ifdef KGYM_WITH_CUDA
    if (r->device == RUNNER_CUDA)
        rc = runner_cuda_generate(r, prompt, n_prompt, o, out, err, errcap);
    else
#endif
        rc = cpu_generate(&r->m, prompt, n_prompt, o, out, err, errcap);
    if (rc != 0)
        runner_gen_out_free(out);
    return rc;
}
