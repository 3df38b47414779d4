/* sandbox/hostcheck: the host's sandbox prerequisites, probed once at server start and reported
 * in /v1/health as a list of protections {name, ok, required, detail}.
 *
 * A `required` protection that is not ok makes the server refuse to start (unless it was told
 * --allow-weak-sandbox). Required, because the sandbox is unsafe or cannot run without it:
 *   privileges      root (a distinct uid per episode), or else unprivileged user namespaces
 *   ns_mount ns_pid ns_net ns_ipc ns_uts ns_cgroup   creatable (tried with unshare in a child)
 *   seccomp         a filter installs and is enforced (tried in a child, raw seccomp(2))
 *   cgroup          memory limits (v2 delegated, else v1): sbx_cg_host_probe
 *   cgroup_swap     swap cannot bypass the memory limit (swap off, memsw, or memory.swap.max)
 *   openat2         RESOLVE_BENEATH refuses ".." (server-side symlink-safe file handling)
 *   close_range     with CLOSE_RANGE_CLOEXEC (no inherited fds in the sandbox)
 *   pidfd_open      (race-free waits and kills)
 *   fs.protected_hardlinks = 1   (no hard link to a file the agent cannot write, e.g. one the
 *                   server later trusts)
 * Reported only (defence in depth; the sandbox does not depend on them):
 *   cgroup_pids     the pids controller; without it (the H200 machines delegate memory alone)
 *                   the launcher limits processes with RLIMIT_NPROC under the episode's own uid
 *   cgroup_kill     v2 cgroup.kill or v1 freezer (else kills loop over SIGKILL until empty)
 *   landlock        its ABI version
 *   fs.protected_symlinks = 1, fs.protected_regular = 2: they act only in sticky world-writable
 *                   directories; a sandbox's /tmp and /dev/shm are its own tmpfs that no other uid
 *                   shares, and the server opens workspace files with openat2 RESOLVE_NO_SYMLINKS /
 *                   O_NOFOLLOW, never through a shared sticky directory.
 *   kernel.yama.ptrace_scope >= 1, kernel.unprivileged_bpf_disabled >= 1,
 *   vm.unprivileged_userfaultfd = 0, kernel.perf_event_paranoid >= 2: the seccomp policy denies
 *                   ptrace, bpf, userfaultfd and perf_event_open, and the pid namespace hides
 *                   every other process.
 *
 * GPU profile discovery (used by the candidate profile): the device nodes of one GPU, and the
 * read-only binds it needs (driver dir, /proc/driver/nvidia, the Python prefix holding torch). */
#ifndef KGYM_SANDBOX_HOSTCHECK_H
#define KGYM_SANDBOX_HOSTCHECK_H

#include <jansson.h>
#include <stdbool.h>

#include "sandbox/cgroup.h"

#define SBX_HOST_MAX_ITEMS 32

typedef struct sbx_host_item {
    char name[40];
    bool ok;
    bool required;
    char detail[256];
} sbx_host_item;

typedef struct sbx_host_report {
    sbx_host_item items[SBX_HOST_MAX_ITEMS];
    int n;
    /* The cgroup probe's result. With a cg_name, kgym's parent cgroup stays created for the
     * server to use (cg_ok): it owns it and calls sbx_cg_host_cleanup(&r->cg) at exit. */
    sbx_cg_host cg;
    bool cg_ok;
} sbx_host_report;

/* Probes everything (a few forked children; ~10 ms). cg_name names kgym's parent cgroup
 * (e.g. "kgym-<pid>"); NULL probes with a temporary one and removes it again. Returns 0 when every
 * required protection is there, -1 otherwise (the report says which). */
int sbx_host_check(sbx_host_report *r, const char *cg_name);
/* {"protections":[{"name","ok","required","detail"}...], "all_required_ok": bool}; NULL on OOM. */
json_t *sbx_host_report_json(const sbx_host_report *r);
bool sbx_host_all_required(const sbx_host_report *r);
/* The entry called name, or NULL. */
const sbx_host_item *sbx_host_find(const sbx_host_report *r, const char *name);
/* Forgets the report (does not touch r->cg: cleaning that up is the owner's call). */
void sbx_host_report_free(sbx_host_report *r);

/* The device nodes a sandbox needs for GPU gpu_index that exist as character devices, in this
 * order: /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia<gpu_index>. Returns how many (<= max); a
 * GPU profile needs all three. */
int sbx_host_gpu_devices(int gpu_index, char paths[][64], int max);

/* Read-only binds a GPU profile needs; "" for each one not found on this host. */
typedef struct sbx_host_gpu_binds {
    char driver_dir[256];    /* /usr/local/nvidia (where the H200 machines keep driver libraries) */
    char proc_driver[256];   /* /proc/driver/nvidia */
    char python_prefix[256]; /* a prefix with lib/python3.* /site-packages/torch */
} sbx_host_gpu_binds;

/* Fills b; python_prefix NULL means $KGYM_PYTHON_PREFIX (runs nothing: the prefix is only checked
 * for a torch package directory). Returns how many were found. */
int sbx_host_gpu_binds_probe(const char *python_prefix, sbx_host_gpu_binds *b);

#endif
