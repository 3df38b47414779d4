/* runner: where kgym-policy's model commands (cmd_model.c) run a checkpoint. Either the CPU
 * reference (policy/model.h: fp32) or, in the kgym-policy-cuda build (compiled with
 * KGYM_WITH_CUDA), the GPU model (policy/cuda/model_gpu.h, decode_gpu.h: bf16 weights and
 * activations, sampling on the GPU). The commands load, score and generate through this one
 * interface and never ask which device they got, except to report it.
 *
 * Devices: "cpu", "cuda", or "auto" (cuda when this binary has CUDA and the CUDA runtime finds a
 * GPU, else cpu). The two devices agree up to bf16 rounding: a greedy run can pick another token
 * where two logits nearly tie, and a seed draws other tokens on each (each has its own RNG). */
#ifndef KGYM_POLICY_CLI_RUNNER_H
#define KGYM_POLICY_CLI_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/model.h"
#include "policy/tokenizer.h"

typedef enum runner_device { RUNNER_AUTO, RUNNER_CPU, RUNNER_CUDA } runner_device;

/* "auto", "cpu" or "cuda" (NULL: auto) into *d; false for anything else. */
bool runner_parse_device(const char *s, runner_device *d);
/* "auto", "cpu" or "cuda". */
const char *runner_device_name(runner_device d);
/* Whether this binary was built with CUDA (kgym-policy-cuda). */
bool runner_has_cuda(void);

struct pol_gpu;

typedef struct runner {
    runner_device device; /* cpu or cuda once loaded */
    /* The checkpoint. On cuda only its config, table and source texts stay (EOS ids, sizes):
     * the weights were dropped once uploaded, the GPU holding its own copy. */
    pol_model m;
    struct pol_gpu *gpu; /* cuda: the inference model */
} runner;

/* Picks the device (want, auto resolved) and loads the HF folder dir for it, LM head. A device
 * this binary or machine cannot give is an error naming why; the checkpoint is not read then. */
int runner_load(runner *r, const char *dir, runner_device want, char *err, size_t errcap);
void runner_free(runner *r);

/* Teacher-forced log-probabilities of ids[n] (n >= 1): lp[t] = log p(ids[t + 1] | ids[0..t])
 * for t < n - 1, and lp[n - 1] = 0. */
int runner_score(runner *r, const int32_t *ids, int n, float *lp, char *err, size_t errcap);

typedef struct runner_gen_opts {
    pol_gen_opts gen;        /* max_new (0 allowed), sampling, seed, n_valid, EOS ids */
    const char *const *stop; /* stop strings (need tok): the run ends once the new text holds */
    int n_stop;              /* one, its tokens kept (on cpu: cut after the run, see below) */
    const pol_tok *tok;
} runner_gen_opts;

typedef struct runner_gen_out {
    int32_t *ids; /* malloc'd: the new ids, an EOS id kept as the last */
    float *logp;  /* malloc'd on cuda: each new id's log-probability (temperature 1); NULL on cpu */
    int n;
    const char *finish; /* "eos", "stop", "length" (max_new) or "context" (cuda: the slot full) */
} runner_gen_out;

/* Continues prompt[n_prompt] (n_prompt >= 1). On cpu the stop strings are applied after the
 * run: the reference decodes to an EOS or max_new, then the output is cut after the token that
 * completes the first stop string (the same tokens the GPU's early stop keeps). */
int runner_generate(runner *r, const int32_t *prompt, int n_prompt, const runner_gen_opts *o,
                    runner_gen_out *out, char *err, size_t errcap);
void runner_gen_out_free(runner_gen_out *out);

#ifdef KGYM_WITH_CUDA
/* The CUDA half (runner_cuda.c). The number of GPUs the CUDA runtime sees (0 when none: *why
 * then says what it answered). */
int runner_cuda_devices(char *why, size_t whycap);
/* r->m loaded: uploads it as an inference model and drops the host weights. */
int runner_cuda_load(runner *r, char *err, size_t errcap);
void runner_cuda_free(runner *r);
int runner_cuda_score(runner *r, const int32_t *ids, int n, float *lp, char *err, size_t errcap);
int runner_cuda_generate(runner *r, const int32_t *prompt, int n_prompt, const runner_gen_opts *o,
                         runner_gen_out *out, char *err, size_t errcap);
#endif

#endif
