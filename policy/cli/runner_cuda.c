/* runner: the CUDA half (kgym-policy-cuda only): the checkpoint as an inference pol_gpu
 * (policy/cuda/model_gpu.h), scored by one forward, continued by a one-slot decoder
 * (policy/cuda/decode_gpu.h) with the CPU path's EOS ids and sampling options.
 *
 * The CPU build's wildcard compiles this file too, without KGYM_WITH_CUDA (and without the CUDA
 * headers): it is then empty. */
#ifdef KGYM_WITH_CUDA

#include "runner.h"

#include "policy/cuda/decode_gpu.h"
#include "policy/cuda/model_gpu.h"
#include "util/text.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Tokens fed to the decoder per call: a longer prompt goes in pieces of this many. */
#define PREFILL_CHUNK 8192

int runner_cuda_devices(char *why, size_t whycap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        text_fmt(why, whycap, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0)
        text_fmt(why, whycap, "cudaGetDeviceCount found none");
    return n;
}

int runner_cuda_load(runner *r, char *err, size_t errcap)
{
    char why[768];
    if (pol_gpu_create(&r->gpu, &r->m, false, why, sizeof why) != 0)
        return text_fail(err, errcap, "%s (--device cpu runs this checkpoint on the CPU)", why);
    /* The GPU keeps its own (bf16) copy: the fp32 host weights would only hold memory. The
     * config, the tensor table and the source texts stay for the EOS ids and the sizes. */
    free(r->m.w.data);
    free(r->m.w.layers);
    memset(&r->m.w, 0, sizeof r->m.w);
    return 0;
}

void runner_cuda_free(runner *r)
{
    pol_gpu_free(r->gpu);
    r->gpu = NULL;
}

int runner_cuda_score(runner *r, const int32_t *ids, int n, float *lp, char *err, size_t errcap)
{
    int32_t *targets = malloc((size_t)n * sizeof *targets);
    if (!targets)
        return text_fail(err, errcap, "out of memory");
    for (int t = 0; t < n; t++)
        targets[t] = t + 1 < n ? ids[t + 1] : -1; /* logp 0 at the last position */
    int rc = pol_gpu_forward(r->gpu, ids, NULL, NULL, n, false, err, errcap);
    if (rc == 0)
        rc = pol_gpu_logprobs(r->gpu, targets, lp, NULL, err, errcap);
    free(targets);
    return rc;
}

/* max_new 0: nothing to decode (the decoder takes max_new >= 1). */
static int generate_nothing(runner_gen_out *out, char *err, size_t errcap)
{
    out->ids = malloc(sizeof *out->ids);
    out->logp = malloc(sizeof *out->logp);
    out->n = 0;
    out->finish = "length";
    return out->ids && out->logp ? 0 : text_fail(err, errcap, "out of memory");
}

int runner_cuda_generate(runner *r, const int32_t *prompt, int n_prompt, const runner_gen_opts *o,
                         runner_gen_out *out, char *err, size_t errcap)
{
    if (o->gen.max_new == 0)
        return generate_nothing(out, err, errcap);
    /* One slot; one position more than prompt + max_new so that max_new, not a full slot, is
     * what ends a run that reaches it ("length", as on the CPU). */
    long max_len = (long)n_prompt + o->gen.max_new + 1;
    if (max_len > INT_MAX)
        return text_fail(err, errcap, "generate: prompt + --max-new is too long");
    int max_tokens = n_prompt < PREFILL_CHUNK ? n_prompt : PREFILL_CHUNK;
    pol_gpu_dec *d = NULL;
    if (pol_gpu_dec_create(&d, r->gpu, 1, (int)max_len, max_tokens, err, errcap) != 0)
        return -1;
    pol_gpu_gen_opts go = {.max_new = o->gen.max_new,
                           .sample = o->gen.sample,
                           .n_valid = o->gen.n_valid,
                           .eos = o->gen.eos,
                           .n_eos = o->gen.n_eos,
                           .stop = o->stop,
                           .n_stop = o->n_stop,
                           .tok = o->tok};
    pol_gpu_gen_seq seq = {.prompt = prompt, .n_prompt = n_prompt, .seed = o->gen.seed};
    int rc = pol_gpu_generate(d, &seq, 1, &go, NULL, NULL, err, errcap);
    if (rc == 0) {
        out->ids = seq.ids; /* the outputs are malloc'd: ours now */
        out->logp = seq.logp;
        out->n = seq.n;
        out->finish = pol_finish_name(seq.finish);
    } else {
        pol_gpu_gen_free(&seq, 1);
    }
    pol_gpu_dec_free(d);
    return rc;
}

#else

/* ISO C wants a declaration in every translation unit. */
typedef int runner_cuda_not_built;

#endif
