/* sandbox/profile: the sandbox profiles of sandbox_profiles/NAME.sbx, parsed strictly.
 *
 * A profile states what a sandboxed process gets: namespaces, the mounts of its minimal root,
 * its /dev, rlimits, cgroup limits, environment, wall-clock and output caps, and the syscall
 * policy. Profiles are plain text written by us (format: sandbox_profiles/README.md); `include`
 * pulls in another (bash, compile and candidate include base). Parsing fails closed: an unknown
 * section, key, syscall name, constant or errno is an error naming file and line, and the server
 * refuses to start. The parsed profile is plain data: it is parsed once by the server (to fail
 * early) and again by the launcher (kgym-sandbox), which applies it. */
#ifndef KGYM_SANDBOX_PROFILE_H
#define KGYM_SANDBOX_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_NAME_MAX 32
#define SBX_PATH_MAX 512
#define SBX_MAX_MOUNTS 64
#define SBX_MAX_DEVICES 16
#define SBX_MAX_ENV 32
#define SBX_MAX_SYSCALLS 512
#define SBX_MAX_GUARDS 64
#define SBX_MAX_ARG_VALUES 8 /* values of one "allow NAME if aN in {...}" rule */

/* One entry of the sandbox's root, applied in file order. Paths inside the sandbox are
 * absolute; sources may use the variables ${WORKSPACE} (the episode's workspace on the host)
 * and ${PYTHON_PREFIX}, ${PYTHON_BASE_PREFIX}, ${CUDA_HOME} (found by probing the host). */
typedef enum sbx_mount_kind {
    SBX_MOUNT_RO,      /* read-only bind, nosuid, nodev:  ro DEST [SRC] */
    SBX_MOUNT_RW,      /* read-write bind, nosuid, nodev: rw DEST [SRC] */
    SBX_MOUNT_TMPFS,   /* tmpfs DEST size=BYTES [mode=OCTAL] */
    SBX_MOUNT_SYMLINK, /* symlink DEST TARGET (e.g. /bin -> usr/bin on merged-/usr hosts) */
    SBX_MOUNT_DIR,     /* dir DEST (an empty directory in the root) */
    SBX_MOUNT_PROC,    /* proc DEST: a fresh procfs of the sandbox's pid namespace */
} sbx_mount_kind;

typedef struct sbx_mount {
    sbx_mount_kind kind;
    char dest[SBX_PATH_MAX];
    char src[SBX_PATH_MAX]; /* bind source or symlink target; "" = same as dest */
    uint64_t size;          /* tmpfs */
    unsigned mode;          /* tmpfs, dir */
    bool optional;          /* "?" prefix: skipped when the source does not exist */
} sbx_mount;

typedef enum sbx_action {
    SBX_ALLOW,
    SBX_ERRNO, /* with errno_value */
    SBX_KILL,
} sbx_action;

/* An argument guard: "name aN [& MASK] OP VALUE -> ERRNO". */
typedef enum sbx_cmp { SBX_CMP_EQ, SBX_CMP_NE, SBX_CMP_MASKED_EQ, SBX_CMP_ANY_BIT } sbx_cmp;
typedef struct sbx_guard {
    int syscall_nr;
    char syscall[32];
    unsigned arg; /* 0..5 */
    sbx_cmp cmp;
    uint64_t mask, value;
    int errno_value;
} sbx_guard;

typedef struct sbx_syscall_rule {
    int nr; /* native number (libseccomp's resolution) */
    char name[32];
    sbx_action action;
    int errno_value;
    /* "allow NAME if aN in {V,...}": allowed only when argument arg equals one of values (one
     * EQ rule each, compared on all 64 bits); other values get the filter's default.
     * n_values == 0: the rule has no condition. Only SBX_ALLOW rules carry one. */
    unsigned arg;
    int n_values;
    uint64_t values[SBX_MAX_ARG_VALUES];
} sbx_syscall_rule;

typedef struct sbx_profile {
    char name[SBX_NAME_MAX];
    /* [namespaces] */
    bool ns_user, ns_mount, ns_pid, ns_net, ns_ipc, ns_uts, ns_cgroup;
    /* [mount] */
    sbx_mount mounts[SBX_MAX_MOUNTS];
    int n_mounts;
    char proc_masked[16][SBX_PATH_MAX]; /* [proc] mask= : bind /dev/null (files) or empty tmpfs
                                           (dirs) */
    int n_proc_masked;
    char proc_readonly[16][SBX_PATH_MAX]; /* [proc] ro= */
    int n_proc_readonly;
    /* [dev]: names under /dev; "gpu" stands for the leased GPU's nvidiactl, nvidia-uvm, nvidiaN
     * (it sets gpu and is not itself stored in devices) */
    char devices[SBX_MAX_DEVICES][32];
    int n_devices;
    bool gpu;
    /* [rlimit]: 0 = not set; as_bytes must stay 0 in GPU profiles */
    uint64_t rl_cpu_s, rl_fsize, rl_nofile, rl_nproc, rl_stack, rl_as, rl_core;
    bool rl_core_set;
    /* [cgroup] */
    uint64_t cg_memory_bytes, cg_pids;
    /* [limits] */
    int wall_ms;
    uint64_t output_bytes;
    /* [env]: NAME=VALUE, the sandboxed process's whole environment */
    char env[SBX_MAX_ENV][256];
    int n_env;
    /* [seccomp] */
    int default_errno; /* for syscalls not listed (ENOSYS) */
    sbx_syscall_rule rules[SBX_MAX_SYSCALLS];
    int n_rules;
    sbx_guard guards[SBX_MAX_GUARDS];
    int n_guards;
    int socket_families[16]; /* allowed socket()/socketpair() families; others (every family,
                              * when the list is empty) get EAFNOSUPPORT */
    int n_socket_families;
} sbx_profile;

/* Loads sandbox_profiles/<name>.sbx (and what it includes) from dir. Later sections override or
 * extend earlier ones as the format says. Returns 0, or -1 with "file:line: message" in err. */
int sbx_profile_load(const char *dir, const char *name, sbx_profile *out, char *err, size_t errcap);

#endif
