/* launcher: kgym-sandbox, the program that turns itself into a sandbox and runs one command in
 * it. The server starts it through spawn (the one process helper); it is a separate, single-
 * threaded program so that every setup step (libcap, libseccomp, mounts) runs where allocating
 * memory is safe, never in a forked child of the multi-threaded server.
 *
 * Order of setup, after nsjail and bubblewrap:
 *   outer:  open a pidfd on its parent (the server); join the command's cgroups; unshare
 *           mount, pid, net, ipc, uts (and cgroup) namespaces; fork the namespace's init; wait
 *           for it while watching the parent (and --wall-ms): if the parent dies first (a
 *           SIGKILLed server cannot stop its jobs, and PR_SET_PDEATHSIG would follow the
 *           server's short-lived request thread, not the server), or the wall limit passes, kill
 *           init, which takes the whole namespace with it, and die killed; otherwise report the
 *           command's status as its own.
 *   init:   (pid 1 of the new pid namespace) private mounts; build a minimal root on a tmpfs
 *           (read-only binds, the workspace read-write, sized tmpfs, a fresh /proc with masked
 *           entries, a /dev with only the profile's devices, a generated /etc/passwd); make the
 *           root read-only; pivot_root into it; set the hostname; fork the command; reap
 *           everything until the command ends; exit, which kills whatever the command left.
 *   command: new session; rlimits; drop every capability and lock the securebits (libcap); the
 *           episode's uid and gid, no supplementary groups; no_new_privs; close every fd but
 *           0-2 and those passed on purpose; a clean environment; the seccomp filters; execve. */
#ifndef KGYM_LAUNCHER_H
#define KGYM_LAUNCHER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/profile.h"

#define LAUNCH_MAX_CGROUP_FILES 4
#define LAUNCH_MAX_KEEP_FDS 8
#define LAUNCH_MAX_VARS 8

typedef struct launch_opts {
    const char *profiles_dir;
    const char *profile_name;
    const char *workspace; /* host path, bound at /workspace */
    uid_t uid;             /* the episode's uid (never 0) */
    gid_t gid;
    const char *cwd;      /* inside the sandbox; default /workspace */
    const char *hostname; /* default "kgym" */
    const char *cgroup_procs[LAUNCH_MAX_CGROUP_FILES];
    int n_cgroup_procs;
    int keep_fds[LAUNCH_MAX_KEEP_FDS];
    int n_keep_fds;
    const char *vars[LAUNCH_MAX_VARS]; /* NAME=VALUE substituted in the profile's mounts */
    int n_vars;
    const char *gpu_devices[4];       /* host device nodes of the leased GPU (candidate profile) */
    const char *env[LAUNCH_MAX_VARS]; /* NAME=VALUE replacing or adding to the profile's env */
    int n_env;
    int n_gpu_devices;
    uint64_t fsize;    /* lowers the profile's RLIMIT_FSIZE; 0 = the profile's */
    int status_fd;     /* written "setup" when the sandbox cannot be set up; -1 none */
    pid_t parent_pid;  /* the parent as main() found it first thing (the server): the sandbox
                        * is stopped when it ends; 0 = none to watch */
    uint64_t wall_ms;  /* the sandbox is stopped after this long; 0 = no limit of its own */
    char *const *argv; /* the command; argv[0] an absolute path inside the sandbox */
} launch_opts;

/* Runs the command in a sandbox. Returns only on failure to set it up (with a message on
 * stderr, exit status 125 by convention); otherwise the process exits with the command's status,
 * or dies of the signal that killed it. */
int launch_run(const launch_opts *o, const sbx_profile *p);

#endif
