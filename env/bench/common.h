/* common: what kgym-bench's commands (run, baselines) share: signals, the server they talk to
 * (the caller's or a private one), the selected tasks, the default parallelism, atomic JSON
 * files. */
#ifndef KGYM_BENCH_COMMON_H
#define KGYM_BENCH_COMMON_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "bench/http.h"
#include "bench/run.h"

#define EXIT_OK 0
#define EXIT_SETUP 1
#define EXIT_INFRA 2
#define EXIT_INTERRUPTED 3

/* SIGINT/SIGTERM set a flag (bench_stopping): tasks in flight finish, no new one starts. A
 * second one exits at once (EXIT_INTERRUPTED), telling a private server to stop. */
void bench_install_signals(void);
bool bench_stopping(void);

/* mkdir -p. Returns 0 or -1 (errno set; EINVAL for an empty path). */
int bench_make_dirs(const char *path);

typedef struct bench_server {
    char url[256];
    pid_t own_pid; /* > 0: ours, stopped at the end */
} bench_server;

/* The caller's server (--server) or a private one started for this run. 0, or -1 (printed). */
int bench_server_connect(const bench_opts *o, bench_server *sc);
void bench_server_disconnect(bench_server *sc);

/* The server's catalogue, filtered by --levels/--only: an array of {task_id, name, level}.
 * NULL on error (printed). */
json_t *bench_fetch_tasks(bench_http *h, const bench_opts *o);

/* Parallel evaluations: one per GPU the server has (its leases keep them exclusive), 1 on CPU. */
int bench_default_jobs(bench_http *h, const bench_opts *o);

/* Whether a warm-up's reply says its compile ran out of GPU memory (beside the other warm-ups:
 * the torch.compile message names CUDA's OutOfMemoryError). */
bool bench_warmup_out_of_memory(const json_t *reply);

/* A number field, or NaN when absent or not a number. */
double bench_num(const json_t *o, const char *k);

/* Writes v to path atomically and durably (a temp file beside it, fsync'ed, renamed over path,
 * the folder fsync'ed). 0, or -1 with errno set. */
int bench_write_json(const char *path, const json_t *v);

/* Takes an exclusive lock on lock_path (created if missing; flock, so it goes with the process,
 * a crash included) for one results folder or baselines file that two kgym-bench processes must
 * not write at once. Returns the lock's fd (keep it open while writing), or -1 with a message in
 * err naming what (`what`, e.g. "results folder X") is in use. */
int bench_lock_exclusive(const char *lock_path, const char *what, char *err, size_t errcap);
/* --out's lock (bench_lock_exclusive on OUT/.lock), held by run and baselines for the whole
 * command: the folder holds their private server's state and log (and run's results). Returns
 * the fd, or -1 (printed). */
int bench_lock_out_dir(const char *out_dir);

#endif
