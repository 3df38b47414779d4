/* sandbox: the one way the server runs a process the agent causes (Bash now; the compiler and
 * the candidate runner later). It starts the launcher (kgym-sandbox, env/launcher/) through
 * spawn, in a fresh cgroup, under a profile of sandbox_profiles/, as the episode's uid, and
 * says how the command ended: exit, signal, timeout, memory, pids or file size.
 *
 * At start the server checks the host (sandbox/hostcheck.h) and parses every profile: a bad
 * profile, or a missing required protection, stops it, unless it was started with
 * --allow-weak-sandbox, in which case commands run unsandboxed and every health call and every
 * episode says so. */
#ifndef KGYM_SANDBOX_H
#define KGYM_SANDBOX_H

#include <jansson.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "sandbox/cgroup.h"
#include "sandbox/hostcheck.h"
#include "sandbox/profile.h"
#include "spawn.h"

typedef struct sandbox {
    bool active;        /* false: weak mode, commands run unsandboxed */
    char launcher[512]; /* path of kgym-sandbox */
    char profiles_dir[PATH_MAX];
    /* parsed at start: a broken profile stops the server */
    sbx_profile bash;      /* the agent's shell commands */
    sbx_profile compile;   /* the compilers of the Compile tool */
    sbx_profile candidate; /* the candidate runner of Verify/Profile (may see one GPU) */
    sbx_cg_host cg;
    sbx_host_report report;
    atomic_ulong seq;                        /* names command cgroups */
    char weak_reason[512];                   /* why the sandbox is off, in weak mode */
    char cuda_home[SBX_PATH_MAX];            /* ${CUDA_HOME} of the profiles, "" when absent */
    char python_prefix[SBX_PATH_MAX];        /* the Python environment shown to commands, or "" */
    char python_base_prefix[SBX_PATH_MAX];   /* its interpreter's installation */
    uint64_t total_memory_bytes, total_pids; /* all commands together (0: not capped) */
} sandbox;

/* Probes the host, parses the profiles. allow_weak: run unsandboxed (and say so) instead of
 * failing when a required protection is missing. Returns 0 or -1 with err filled. */
int sandbox_init(sandbox *s, const char *launcher, const char *profiles_dir, bool allow_weak,
                 char *err, size_t errcap);
/* Shows a Python environment (e.g. the project's venv, with torch) to sandboxed commands: its
 * prefix and its interpreter's are bound read-only and its bin/ leads PATH. Returns 0 or -1. */
int sandbox_set_python(sandbox *s, const char *python, char *err, size_t errcap);
void sandbox_deinit(sandbox *s);
/* Caps all sandboxed commands together: memory_bytes (0: 75% of the host's RAM) and pids (0:
 * half of kernel.pid_max), so that the per-command limits, each meant for one command, cannot
 * add up past the host (red team: five 16 GiB jobs of one episode on a 23 GiB host; 4,090
 * threads of one episode). Nothing to do in weak mode. Returns 0 or -1 (err filled). */
int sandbox_set_totals(sandbox *s, uint64_t memory_bytes, uint64_t pids, char *err, size_t errcap);
/* {"active", "weak_reason"?, "protections": [...], "all_required_ok"} for /v1/health. */
json_t *sandbox_status_json(const sandbox *s);

/* Why a sandboxed command ended. */
typedef enum sbx_end {
    SBX_END_EXIT,      /* exited by itself (any code) */
    SBX_END_SIGNAL,    /* killed by a signal it caused or received */
    SBX_END_TIMEOUT,   /* wall-clock limit: the whole tree was killed */
    SBX_END_MEMORY,    /* the cgroup memory limit killed it */
    SBX_END_PIDS,      /* a fork failed at the cgroup's pids limit */
    SBX_END_FILE_SIZE, /* RLIMIT_FSIZE (SIGXFSZ) */
    SBX_END_CPU,       /* RLIMIT_CPU (SIGXCPU) */
    SBX_END_SETUP,     /* the sandbox could not be set up (launcher status 125) */
} sbx_end;

const char *sbx_end_name(sbx_end e);

typedef struct sandbox_cmd {
    const char *profile;   /* "bash" */
    const char *workspace; /* host path bound at /workspace */
    uid_t uid;
    gid_t gid;
    const char *const *argv; /* inside the sandbox, argv[0] absolute */
    int timeout_ms;          /* capped by the profile's wall limit */
    int kill_grace_ms;
    size_t capture_cap;             /* per stream; 0 = the profile's output cap */
    uint64_t max_file_bytes;        /* lowers the profile's RLIMIT_FSIZE (0 = the profile's) */
    const char *const *gpu_devices; /* NULL-terminated device nodes (candidate profile), or NULL */
    const char *const *env;         /* NULL-terminated NAME=VALUE entries added, or NULL */
} sandbox_cmd;

/* The profile named name ("bash", "compile", "candidate"), or NULL. */
const sbx_profile *sandbox_profile(const sandbox *s, const char *name);

/* The launcher's command line for cmd (cg may be NULL: no cgroup), e.g. for a background job
 * started with spawn_start. Storage lives in the struct. */
typedef struct sandbox_argv {
    const char *argv[160];
    char ids[2][16];
    char procs[4][SBX_CG_PATH_MAX + 32];
    char vars[4][SBX_PATH_MAX + 32];
    char path_env[SBX_PATH_MAX + 128];
    char fsize[24];
    char wall[24];
} sandbox_argv;
int sandbox_build_argv(const sandbox *s, const sandbox_cmd *cmd, const sbx_cgroup *cg,
                       sandbox_argv *out);

/* A background command: its cgroup and the launcher's command line, kept until it ends. */
typedef struct sandbox_job sandbox_job;
sandbox_job *sandbox_job_new(sandbox *s, const sandbox_cmd *cmd, char *err, size_t errcap);
const char *const *sandbox_job_argv(const sandbox_job *j);
/* Kills whatever is left in the job's cgroup, removes it, frees j (a job_hook callback). */
void sandbox_job_free(void *j);
/* Freezes (on) or thaws every process of the job through its cgroup's freezer (sbx_cg_freeze),
 * e.g. while the trusted judge measures the same episode. 0, or -1 with errno (ENOTSUP: this
 * host has no freezer). A frozen job can still be killed and freed. */
int sandbox_job_freeze(sandbox_job *j, bool on);

typedef struct sandbox_result {
    spawn_result run; /* exit code, signal, output, wall time, rusage */
    sbx_end end;
    sbx_cg_stats cg; /* memory peak, OOM, pids */
} sandbox_result;

/* Runs cmd to completion in a sandbox. Returns 0 when it ran (whatever its status), -1 when it
 * could not be started (res->run.fail_stage tells). */
int sandbox_run(sandbox *s, const sandbox_cmd *cmd, sandbox_result *res);
void sandbox_result_deinit(sandbox_result *res);

#endif
