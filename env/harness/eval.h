/* eval: the trusted evaluation behind Compile, Verify, Profile and Submit (DESIGN.md §3.4-3.7).
 *
 * The server owns one eval_server (toolchain, caches, GPU leases, where the harness lives); each
 * episode owns one ep_eval (its build dir, last build, best correct snapshot). An evaluation:
 *  1. builds the workspace's extension (build.h) and snapshots model_new.py + the module into a
 *     root-owned directory the candidate sees read-only;
 *  2. leases a GPU (lease.h) in CUDA mode;
 *  3. runs the trusted judge (env/harness/judge.py, never visible to the agent) with a job on
 *     stdin; the judge runs the reference itself, starts the candidate runner in the candidate
 *     sandbox (argv built here), exchanges tensors over shared memory and a socket, checks,
 *     times, and writes its verdict to a file only it and the server can reach;
 *  4. turns the verdict into reward components and, at the end, the milestone reward. */
#ifndef KGYM_EVAL_H
#define KGYM_EVAL_H

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "harness/build.h"
#include "harness/lease.h"
#include "harness/objcache.h"

struct sandbox;
struct task;

typedef enum eval_device { EVAL_DEVICE_NONE, EVAL_DEVICE_CPU, EVAL_DEVICE_CUDA } eval_device;

typedef struct eval_server {
    bool ready;            /* the toolchain was probed: tools can compile and evaluate */
    char unavailable[512]; /* why not, when !ready (said by the tools) */
    bool configured;       /* a Python was given: the first Compile/Verify probes it */
    bool probed;           /* the probe ran (ready says how it went) */
    pthread_mutex_t probe_lock;
    char probe_python[PATH_MAX], probe_cuda_home[PATH_MAX], probe_arch[32];
    build_toolchain tc;
    char harness_dir[PATH_MAX]; /* judge.py, runner.py, scan.py */
    char template_dir[PATH_MAX];
    char cache_dir[PATH_MAX]; /* objects, PCH, baselines */
    objcache objects;         /* the object cache's size cap */
    int compile_jobs;
    int compile_timeout_ms;
    int eval_timeout_ms; /* one Verify/Profile, compile excluded */
    int lease_timeout_ms;
    gpu_pool gpus;                 /* empty: no GPU, CUDA episodes get infra_error */
    struct sandbox *sbx;           /* the candidate profile runs here; NULL/inactive: weak mode */
    pthread_mutex_t baseline_lock; /* one baseline measurement per key at a time */
} eval_server;

/* Per episode: guarded by the episode's busy flag (one step at a time). */
typedef struct ep_eval {
    char build_dir[PATH_MAX]; /* <episode>/build */
    char eval_dir[PATH_MAX];  /* <episode>/eval: snapshots and verdicts */
    char so_path[PATH_MAX];   /* the last successful build, "" none */
    char build_key[65];
    json_t *best; /* components of the best correct Profile (reward_on best) */
    int n_evals;  /* numbers the snapshots */
} ep_eval;

/* The server's evaluation settings (from the command line / config). */
typedef struct eval_config {
    char python[PATH_MAX]; /* a Python with torch ("" = evaluation unavailable) */
    char template_dir[PATH_MAX];
    char harness_dir[PATH_MAX];
    char cache_dir[PATH_MAX];
    char cuda_home[PATH_MAX]; /* "" = none */
    char cuda_arch[32];       /* "" = probed from GPU 0 */
    char gpus[128];           /* "all" (default), "none", or ordinals "0,2" */
    char dev_dir[64];         /* where the GPU nodes are ("/dev"; tests use fake ones) */
    int compile_jobs, compile_timeout_ms, eval_timeout_ms, lease_timeout_ms;
    uint64_t cache_max_bytes; /* cap on the object cache (0 = none) */
} eval_config;

/* Probes the toolchain and the GPUs. A machine without torch still serves (the tools then say
 * why evaluation is unavailable); a bad setting (missing harness, bad --gpus) is an error. */
int eval_server_init(eval_server *es, const eval_config *cfg, struct sandbox *sbx, char *err,
                     size_t errcap);
void eval_server_deinit(eval_server *es);
/* Probes the toolchain on first use (torch takes seconds to import: the server starts without
 * waiting for it). Returns true when evaluation can run; es->unavailable says why not. */
bool eval_prepare(eval_server *es);
/* {ready, unavailable?, gpus, devices, toolchain?} for /v1/health. */
json_t *eval_server_json(eval_server *es);

void ep_eval_init(ep_eval *ev, const char *episode_dir);
void ep_eval_reset(ep_eval *ev); /* a reset episode forgets its builds and snapshots */
void ep_eval_deinit(ep_eval *ev);

struct tool_env;
/* One evaluation of the episode's workspace. mode: "verify" (checks only), "profile" (checks
 * and timing against the eager and torch.compile baselines), "final" (the same, at the end).
 * Returns the verdict's components (never NULL): {eval_status "ok"|"infra_error", compiled,
 * correct, error_code?, checks, t_candidate_ms?, t_eager_ms?, t_compile_ms?, spreads, ...}. */
json_t *eval_run(eval_server *es, const struct tool_env *env, const char *mode);

/* The eager and torch.compile baselines of a task, measured (or taken from the cache) without a
 * candidate: {eval_status, t_eager_ms, t_compile_ms?, spread_eager, spread_compile?,
 * baseline_cached, baseline_key, device_name, torch_version, compile_unavailable?}. On CUDA it
 * holds an exclusive GPU lease like any evaluation. warmup: instead, compile the reference once
 * with torch.compile, untimed, under a shared lease (so the measurement later finds Inductor's
 * caches warm): {eval_status, warmup: "compiled"|"cached"|"compile_failed", warmup_ms?}.
 * remeasure (a measurement only): measured even when cached, the new figures replacing the
 * cached ones. Never NULL. */
json_t *eval_baselines(eval_server *es, const struct task *tk, bool cpu, bool warmup,
                       bool remeasure);

#endif
