/* jobs: the background Bash jobs of one episode (Bash run_in_background, BashOutput, KillBash).
 * Each job runs in its own process group; its output goes to a file in the episode's private
 * directory. Jobs die with their episode. */
#ifndef KGYM_JOBS_H
#define KGYM_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "spawn.h"

typedef struct job_table job_table;

/* log_dir: where job output files are written (created if missing); max_jobs: running jobs cap. */
job_table *job_table_new(const char *log_dir, int max_jobs);
/* Kills every job's process group (SIGKILL), reaps them, frees the table. NULL is fine. */
void job_table_free(job_table *jobs);
/* Number of jobs still running (reaps those that ended). */
size_t job_table_running(job_table *jobs);

/* ---- added for the Bash tools (env/tools/bash.c) ---- */

typedef enum job_status {
    JOB_RUNNING,
    JOB_EXITED,    /* the command ended by itself (exit_code; term_signal if a signal ended it) */
    JOB_KILLED,    /* job_kill (KillBash) */
    JOB_TIMED_OUT, /* ran past its wall-clock limit and was killed */
} job_status;

/* "running", "exited", "killed", "timed_out". */
const char *job_status_name(job_status st);

/* Return codes of the job_* calls. */
enum {
    JOB_OK = 0,
    JOB_E_SPAWN = -1,     /* could not start (errno, *fail say why) */
    JOB_E_TOO_MANY = -2,  /* max_jobs already running */
    JOB_E_NOT_FOUND = -3, /* no job with that id */
    JOB_E_IO = -4,        /* log directory/file could not be made or read (errno) */
};

typedef struct job_info {
    int id;    /* 1, 2, ... in the order jobs were started ("bash_<id>" to the agent) */
    pid_t pid; /* also the job's process group */
    job_status status;
    int exit_code; /* once not running: as spawn_status (124 when timed out) */
    int term_signal;
    int64_t runtime_ms;
    int64_t timeout_ms;
} job_info;

/* Starts opts as a background job: stdout and stderr both go (appended) to the job's log file
 * <log_dir>/bash_<id>.log; opts->out_fd is ignored. opts->timeout_ms (> 0) is the job's
 * wall-clock limit, checked whenever the table is touched; opts->kill_grace_ms is its SIGTERM ->
 * SIGKILL delay when killed. Note opts->rl.fsize_bytes bounds the log file too. Returns JOB_OK
 * and fills info (may be NULL), JOB_E_TOO_MANY, JOB_E_IO or JOB_E_SPAWN (fail: stage name). */
/* on_end: called once when a job has ended and been reaped (exit, kill, timeout, table freed),
 * with the table's lock held: it must not call back into the table. Used to remove a job's
 * cgroup. on_freeze (NULL: the job cannot be frozen): freezes (on) or thaws every process of the
 * job, e.g. through its cgroup's freezer; returns 0 when the job is frozen (or thawed), -1 when
 * it could not be (it may be partly frozen: a thaw still follows). Also called with the lock
 * held. */
typedef struct job_hook {
    void (*on_end)(void *ctx);
    void *ctx;
    int (*on_freeze)(void *ctx, bool on);
} job_hook;

/* hook may be NULL. When the start fails the hook is not kept: the caller cleans up. */
int job_start(job_table *jobs, const spawn_opts *opts, const job_hook *hook, job_info *info,
              const char **fail);

/* Decides whether one line of output (without its '\n') is kept. */
typedef bool (*job_line_filter)(const char *line, size_t len, void *ctx);

/* Consumes the output the job wrote since the previous job_read_new (or its start) and returns
 * at most cap bytes of it in out (head + marker + tail, as spawn_stream; out->total = bytes
 * consumed). With a filter, only the lines it accepts are returned (the others are consumed all
 * the same), and while the job runs an unfinished last line is left for the next read. info
 * gets the job's state after reaping. out->data is malloc'd (release with free). Returns JOB_OK,
 * JOB_E_NOT_FOUND or JOB_E_IO. */
int job_read_new(job_table *jobs, int id, size_t cap, job_line_filter filter, void *ctx,
                 job_info *info, spawn_stream *out);

/* Kills a running job's process group (SIGTERM, SIGKILL after its grace) and reaps it.
 * *was_running tells whether there was anything to kill; info gets the final state. Returns
 * JOB_OK or JOB_E_NOT_FOUND. */
int job_kill(job_table *jobs, int id, job_info *info, bool *was_running);

/* Reaps jobs that ended and kills those past their wall-clock limit. Every other call does this
 * too; a server may also call it periodically. */
void job_table_reap(job_table *jobs);

/* What job_table_freeze did. */
typedef struct job_freeze_count {
    size_t frozen;   /* running jobs now frozen (on) / jobs thawed (off) */
    size_t unfrozen; /* on: running jobs that keep running (no on_freeze, or it failed) */
} job_freeze_count;

/* on: freezes every running job through its hook's on_freeze, so that none takes CPU while the
 * trusted judge evaluates the episode; off: thaws every job frozen before. Freezing does not stop
 * the clock: a job whose wall-clock limit passes while frozen is killed (outright, no SIGTERM
 * grace) by the thaw or the next reap, or at once by job_kill or job_table_free. Calls nest: only
 * the off matching the outermost on thaws. A job started while the table is frozen is not frozen
 * (the server starts none then: the episode is busy evaluating). A NULL table is fine. */
job_freeze_count job_table_freeze(job_table *jobs, bool on);

#endif
