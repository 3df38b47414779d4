/* run: kgym-bench's evaluation loop. Every selected task's solution goes through a kgym-env
 * server's trusted evaluation (an episode per task: the files uploaded, Profile for each earlier
 * snapshot, Submit at the end with reward_on = "best"); results are appended, one JSON line per
 * task, to RESULTS_DIR/results.jsonl as they finish (fsync'd: a killed run loses nothing and
 * resumes where it stopped), then results.json, report.md and the summary are written.
 * The server is either the caller's (--server URL) or one kgym-bench starts on a free port of
 * 127.0.0.1 and stops at the end. */
#ifndef KGYM_BENCH_RUN_H
#define KGYM_BENCH_RUN_H

#include <stdbool.h>

#include "bench/metrics.h" /* BENCH_MAX_LEVEL */

#define BENCH_MAX_SERVER_ARGS 32
#define BENCH_MAX_ONLY 1024

typedef struct bench_opts {
    const char *server_url; /* NULL: start a private server */
    const char *server_bin; /* kgym-env to start (default: beside kgym-bench) */
    const char *server_args[BENCH_MAX_SERVER_ARGS]; /* --server-arg, passed through */
    int n_server_args;
    const char *kernelbench; /* --kernelbench PATH (checkout folder or JSONL) */
    const char *tasks;       /* --tasks PATH (a kgym task store) */
    const char *solutions;   /* --solutions DIR */
    const char *out_dir;     /* --out RESULTS_DIR */
    const char *python;      /* --python: the Python with torch the server evaluates with */
    bool levels_given;       /* --levels: only the levels marked in level_on */
    bool level_on[BENCH_MAX_LEVEL + 1];
    const char *only[BENCH_MAX_ONLY]; /* --only ID (repeatable or comma list); none = all */
    int n_only;
    int jobs;        /* parallel evaluations (0: one per GPU, 1 on the CPU) */
    int warmup_jobs; /* baselines: parallel torch.compile warm-ups (-1: 2 per GPU; 0: none) */
    double remeasure_above; /* baselines: stored figures with a spread above it are measured
                             * again (0: never) */
    double task_timeout_s;  /* one task's whole evaluation */
    const char *variant;    /* "gpu" (default) or "cpu" */
    bool restart;           /* ignore an earlier results.jsonl */
    bool quiet;             /* no progress line */
} bench_opts;

/* kgym-bench run. Returns the process exit status: 0 done (whatever the solutions scored),
 * 1 a usage/setup error, 2 some tasks hit infra errors (the table is not clean), 3 interrupted. */
int bench_run(const bench_opts *o);
/* kgym-bench baselines: eager and compile times of every selected task, measured through the
 * server (POST /v1/tasks/{id}/baselines) and written to out_file ({device_name, torch_version,
 * tasks: {id: {...}}}), resuming from what it already holds. torch.compile warm-ups run first,
 * in parallel and untimed, outside the exclusive GPU lease (baselines.c). */
int bench_baselines(const bench_opts *o, const char *out_file);
/* kgym-bench report RESULTS_DIR: rewrites results.json, report.md and the summary from
 * results.jsonl (e.g. after an interrupted run). */
int bench_report(const char *out_dir);

#endif
