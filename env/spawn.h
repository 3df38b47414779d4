/* spawn: the one place where kgym starts processes (Bash, the compiler driver, the sandboxed
 * candidate runner).
 *
 * Safe in a multi-threaded server: everything is prepared before fork(); the child makes only
 * async-signal-safe calls; every fd the parent creates is O_CLOEXEC and the child closes every fd
 * above 2 but those it is told to keep, so a spawn on one thread never leaks into another's.
 *
 * Each child leads its own session and process group (setsid), so the group can be killed as a
 * whole: its pgid is its pid. stdin is /dev/null. Signal dispositions and the signal mask are
 * reset to the defaults in the child (a server's ignored SIGPIPE is not inherited).
 *
 * spawn installs no signal handler and never calls wait on a pid it did not start; every pid it
 * starts is reaped by spawn_run, or by the caller through spawn_reap for spawn_start. */
#ifndef KGYM_SPAWN_H
#define KGYM_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* Resource limits set in the child (soft = hard); 0 leaves a limit as inherited. */
typedef struct spawn_rlimits {
    uint64_t as_bytes;    /* RLIMIT_AS */
    uint64_t cpu_s;       /* RLIMIT_CPU: SIGXCPU at cpu_s, SIGKILL one second later */
    uint64_t fsize_bytes; /* RLIMIT_FSIZE: a write past it gets SIGXFSZ (also the out_fd file) */
    uint64_t nproc;       /* RLIMIT_NPROC (per real uid; root ignores it) */
    uint64_t nofile;      /* RLIMIT_NOFILE */
    bool no_core;         /* RLIMIT_CORE = 0 */
} spawn_rlimits;

/* Called in the child just before execve (after setsid, stdio, chdir, fd closing, rlimits).
 * Must be async-signal-safe. Returns 0, or an errno value to make the spawn fail with it. */
typedef int (*spawn_pre_exec_fn)(void *ctx);

typedef struct spawn_opts {
    const char *const *argv; /* argv[0] is the program's path: no PATH search */
    const char *const *envp; /* the child's whole environment; NULL = an empty one */
    const char *cwd;         /* NULL = the server's cwd */
    int timeout_ms;          /* spawn_run: wall-clock limit, <= 0 = none; see spawn_run */
    int kill_grace_ms;       /* SIGTERM -> SIGKILL delay on timeout (and for job_* callers) */
    size_t capture_cap;      /* bytes kept per captured stream (head + tail); 0 = 1 MiB */
    spawn_rlimits rl;
    int out_fd;          /* >= 0: stdout and stderr go to this fd, nothing is captured;
                          * < 0: captured (spawn_run) or /dev/null (spawn_start).
                          * SPAWN_OPTS_INIT sets -1: fd 0 is never a sensible target. */
    const int *keep_fds; /* fds (>= 3) the child keeps open (CLOEXEC cleared in the child) */
    size_t n_keep_fds;
    spawn_pre_exec_fn pre_exec; /* optional */
    void *pre_exec_ctx;
} spawn_opts;

#define SPAWN_OPTS_INIT                                                                            \
    {                                                                                              \
        .out_fd = -1                                                                               \
    }

/* One captured stream. When more than the cap was written, data holds the head, a marker line
 * "\n[... N bytes omitted ...]\n" and the tail; truncated is set and total counts every byte. */
typedef struct spawn_stream {
    char *data; /* NUL-terminated (binary-safe through len); never NULL after spawn_run */
    size_t len;
    uint64_t total; /* bytes the process wrote to the stream */
    bool truncated;
} spawn_stream;

typedef struct spawn_result {
    int exit_code;   /* exit status; 128 + signal when killed by one; 124 when timed out */
    int term_signal; /* the signal that ended the leader, 0 if it exited */
    bool timed_out;
    spawn_stream out; /* stdout (empty when out_fd was given) */
    spawn_stream err; /* stderr */
    int64_t wall_ms;
    struct rusage rusage; /* of the leader and the descendants it waited for */
    /* When spawning failed (spawn_run/spawn_start returned -1): */
    const char *fail_stage; /* "pipe", "fork", "chdir", "execve", ... (static string) */
    int fail_errno;
} spawn_result;

/* Runs a command to completion. Reads stdout/stderr (poll) until the leader exits, keeping at
 * most capture_cap bytes of each (head + tail). When the leader exits, the rest of its process
 * group gets a short drain window (SPAWN_DRAIN_MS) to flush, then is SIGKILLed: nothing started
 * by the command outlives the call, and a leftover background child cannot hang it.
 * On timeout the group gets SIGTERM, then SIGKILL after kill_grace_ms (or as soon as the leader
 * has gone); the partial output is kept, timed_out is set and exit_code is 124.
 * Returns 0 when the command ran (whatever its exit status), -1 when it could not be started:
 * errno, fail_stage and fail_errno tell why (a missing binary is execve/ENOENT). res is always
 * initialised and must be released with spawn_result_deinit. */
int spawn_run(const spawn_opts *opts, spawn_result *res);
#define SPAWN_DRAIN_MS 75

/* Starts a command in the background and returns once it has exec'd (so a missing binary is an
 * error here, with errno set; fail, if non-NULL, gets the stage name). *pid is the child's pid,
 * also its process group. timeout_ms and capture_cap are ignored. The caller must reap the child
 * with spawn_reap. */
int spawn_start(const spawn_opts *opts, pid_t *pid, const char **fail);

typedef struct spawn_status {
    int exit_code; /* as in spawn_result */
    int term_signal;
    struct rusage rusage;
} spawn_status;

/* Checks whether pid (a child started by spawn_start) has exited; if it has, SIGKILLs whatever is
 * left of its process group (before reaping, so the pgid cannot have been reused), reaps it and
 * fills st (may be NULL). block: wait for the exit. Returns 1 when reaped, 0 when still running
 * (only when !block), -1 on error (errno; ECHILD: not our child or already reaped). */
int spawn_reap(pid_t pid, bool block, spawn_status *st);

/* Kills process group pgid: SIGTERM, then SIGKILL once the leader has exited (if it is our
 * unreaped child) or grace_ms has passed, whichever comes first; grace_ms <= 0 is SIGKILL at
 * once. Does not reap. Never call it for a group whose leader you already reaped. */
void spawn_kill_group(pid_t pgid, int grace_ms);

void spawn_result_deinit(spawn_result *res);

/* Short name of a signal ("SIGKILL"), "SIG?" when unknown. */
const char *spawn_signal_name(int sig);

/* A bounded capture buffer (what spawn_run uses per stream; also usable on its own): keeps the
 * first cap/2 bytes and a ring buffer of the last cap - cap/2, and counts everything. */
typedef struct spawn_capture {
    size_t cap;
    char *head;
    size_t head_len;
    char *ring;
    size_t ring_cap, ring_pos, ring_len;
    uint64_t total;
} spawn_capture;

void spawn_capture_init(spawn_capture *c, size_t cap);
/* Returns 0, or -1 when memory ran out (the bytes are still counted). */
int spawn_capture_add(spawn_capture *c, const void *bytes, size_t n);
/* Moves what was kept into out (head, marker, tail when truncated) and resets c. 0 or -1. */
int spawn_capture_finish(spawn_capture *c, spawn_stream *out);
void spawn_capture_deinit(spawn_capture *c);

#endif
