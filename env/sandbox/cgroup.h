/* sandbox/cgroup: one control group per sandboxed command, for memory and process limits, for
 * killing the whole tree at once, and for reporting why it ended (OOM, pids limit).
 *
 * Works with cgroup v2 where the server can create children of its own cgroup (memory.max,
 * pids.max, memory.events, cgroup.kill), and with v1 otherwise (the memory and pids controllers'
 * own hierarchies: memory.limit_in_bytes, memory.memsw.limit_in_bytes where present,
 * memory.oom_control, memory.max_usage_in_bytes, pids.max, pids.events; killing by freezing or by
 * SIGKILLing cgroup.procs until it is empty). The CI machines here have v1 (memory, pids,
 * freezer); the H200 machines have v2 with only memory delegated to the server's cgroup. */
#ifndef KGYM_SANDBOX_CGROUP_H
#define KGYM_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SBX_CG_PATH_MAX 512

typedef enum { SBX_CG_NONE, SBX_CG_V1, SBX_CG_V2 } sbx_cg_mode;

/* What the host offers, probed once at start. The memory controller is required; pids is used
 * when the host has it (has_pids): a v2 host may delegate memory alone (the H200 machines here
 * do), and then the launcher limits processes with RLIMIT_NPROC under the episode's own uid. */
typedef struct sbx_cg_host {
    sbx_cg_mode mode;
    bool has_pids;                 /* the pids controller is there (pids.max, pids.events) */
    char v2_base[SBX_CG_PATH_MAX]; /* v2: the directory under which command cgroups go */
    /* v2: the leaf that the processes of the server's cgroup were moved into ("no internal
     * processes"), "" if none; and what turns off the controllers the probe turned on in the
     * server's cgroup ("-memory -pids"), "" if none. Cleanup undoes both. */
    char v2_server_leaf[SBX_CG_PATH_MAX];
    char v2_undo[32];
    char v1_memory[SBX_CG_PATH_MAX];  /* v1: .../memory/<our dir> */
    char v1_pids[SBX_CG_PATH_MAX];    /* v1: .../pids/<our dir>, "" if absent */
    char v1_freezer[SBX_CG_PATH_MAX]; /* v1: .../freezer/<our dir>, "" if absent */
    bool memsw;                       /* v1: memory.memsw.* present (swap accounted) */
} sbx_cg_host;

/* Finds a usable hierarchy (v2 first, then v1) and creates kgym's parent directory (name, e.g.
 * "kgym-<pid>": one path component, no "..") in it. On v2 this may move the processes of the
 * server's cgroup into the leaf <name>-server to enable controllers there. Returns 0, or -1 with
 * err saying what is missing (the caller decides whether that is fatal). */
int sbx_cg_host_probe(sbx_cg_host *h, const char *name, char *err, size_t errcap);
/* Removes kgym's parent directories, killing and removing any command cgroup still in them; on
 * v2 moves the server's processes back and turns off the controllers the probe turned on. */
void sbx_cg_host_cleanup(const sbx_cg_host *h);

/* One command's cgroup. */
typedef struct sbx_cgroup {
    const sbx_cg_host *host;
    char v2[SBX_CG_PATH_MAX];
    char v1_memory[SBX_CG_PATH_MAX], v1_pids[SBX_CG_PATH_MAX], v1_freezer[SBX_CG_PATH_MAX];
} sbx_cgroup;

/* Why a command's cgroup says it ended badly. */
typedef struct sbx_cg_stats {
    uint64_t memory_peak_bytes;
    bool oom_killed;   /* the memory limit killed something */
    bool pids_limited; /* a fork failed at pids.max */
} sbx_cg_stats;

/* Creates the cgroup name (unique per command; one path component, no "..", not existing yet)
 * with the limits (0 = no limit). A pids limit without h->has_pids fails (EOPNOTSUPP). On v2 it
 * also sets memory.swap.max=0 and memory.oom.group=1, on v1 memsw = memory, where present. */
/* Caps all the command cgroups of the host's directory together (0: leave that one as it is):
 * per-command limits alone let a few commands of one episode hold more memory or pids than the
 * host has. v1 memory (+memsw), pids; v2 memory.max, pids.max. Returns 0 or -1 (err filled). */
int sbx_cg_host_totals(const sbx_cg_host *h, uint64_t memory_bytes, uint64_t pids, char *err,
                       size_t errcap);

int sbx_cg_create(const sbx_cg_host *h, const char *name, uint64_t memory_bytes, uint64_t pids,
                  sbx_cgroup *cg, char *err, size_t errcap);
/* Moves pid into the cgroup (every hierarchy of it). */
int sbx_cg_attach(const sbx_cgroup *cg, pid_t pid, char *err, size_t errcap);
/* The files a launcher writes its own pid into (v1: one per hierarchy), into out (at most max
 * entries, an "" entry after the last when room is left). Returns how many. */
int sbx_cg_procs_files(const sbx_cgroup *cg, char out[][SBX_CG_PATH_MAX + 32], int max);
/* v2 only: an O_DIRECTORY fd of the cgroup, for clone3(CLONE_INTO_CGROUP); -1 (ENOTSUP) on v1. */
int sbx_cg_dir_fd(const sbx_cgroup *cg);
/* Kills every process in the cgroup and waits (bounded, 2 s) until it is empty. 0 or -1. v2:
 * cgroup.kill. v1: freeze, SIGKILL each listed pid (pinned by a pidfd, re-checked as still
 * listed), thaw, repeat until every hierarchy's cgroup.procs is empty. */
int sbx_cg_kill(const sbx_cgroup *cg);
/* Freezes (on) or thaws (!on) every process in the cgroup: a frozen process gets no CPU at all
 * until thawed, so it cannot compete with anything the server runs meanwhile. v1: freezer.state
 * FROZEN/THAWED; v2: cgroup.freeze 1/0. Freezing waits (bounded, 1 s) until the kernel says the
 * whole cgroup is frozen. Returns 0, or -1 with errno: ENOTSUP (no freezer: v1 without the freezer
 * hierarchy, a v2 kernel before 5.2), ETIMEDOUT (a task would not freeze in time, e.g. one in
 * uninterruptible sleep; the freeze stays requested), or the write's error. Whatever it returns, a
 * later thaw undoes a freeze. A frozen cgroup can still be killed: sbx_cg_kill works on it. */
int sbx_cg_freeze(const sbx_cgroup *cg, bool on);
int sbx_cg_stats_read(const sbx_cgroup *cg, sbx_cg_stats *st);
/* Removes the cgroup (kills first if anything is left). */
void sbx_cg_destroy(sbx_cgroup *cg);

#endif
