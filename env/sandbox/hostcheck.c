/* sandbox/hostcheck: probes of the host's sandbox prerequisites. See hostcheck.h for what is
 * probed and why each protection is required or only reported.
 *
 * Whatever could change the server itself (namespaces, seccomp, no_new_privs) is tried in a
 * forked child that reports errnos over a pipe and exits; the child calls only async-signal-safe
 * functions, so the probe is safe even once the server has threads. */
#include "sandbox/hostcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <linux/close_range.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the report ------------------------------------------------------------------------------ */

static void add(sbx_host_report *r, const char *name, bool ok, bool required, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add(sbx_host_report *r, const char *name, bool ok, bool required, const char *fmt, ...)
{
    if (r->n >= SBX_HOST_MAX_ITEMS)
        return;
    sbx_host_item *it = &r->items[r->n++];
    snprintf(it->name, sizeof it->name, "%s", name);
    it->ok = ok;
    it->required = required;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->detail, sizeof it->detail, fmt, ap);
    va_end(ap);
}

bool sbx_host_all_required(const sbx_host_report *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->items[i].required && !r->items[i].ok)
            return false;
    return true;
}

const sbx_host_item *sbx_host_find(const sbx_host_report *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->items[i].name, name) == 0)
            return &r->items[i];
    return NULL;
}

json_t *sbx_host_report_json(const sbx_host_report *r)
{
    json_t *list = json_array();
    for (int i = 0; list && i < r->n; i++) {
        const sbx_host_item *it = &r->items[i];
        json_t *o = json_pack("{s:s, s:b, s:b, s:s}", "name", it->name, "ok", (int)it->ok,
                              "required", (int)it->required, "detail", it->detail);
        if (!o || json_array_append_new(list, o) < 0) {
            json_decref(list);
            return NULL;
        }
    }
    if (!list)
        return NULL;
    return json_pack("{s:o, s:b}", "protections", list, "all_required_ok",
                     (int)sbx_host_all_required(r));
}

void sbx_host_report_free(sbx_host_report *r)
{
    r->n = 0;
}

/* ---- probes in a child ----------------------------------------------------------------------- */

#define MAX_ERRS 8
typedef void (*child_probe)(int errs[MAX_ERRS]);

/* Runs fn in a forked child, which fills errs (0 = worked, else an errno). -1 if the child could
 * not run or report (errs then all EIO). */
static int in_child(child_probe fn, int errs[MAX_ERRS])
{
    for (int i = 0; i < MAX_ERRS; i++)
        errs[i] = EIO;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int mine[MAX_ERRS] = {0};
        fn(mine);
        ssize_t w = write(p[1], mine, sizeof mine);
        _exit(w == (ssize_t)sizeof mine ? 0 : 1);
    }
    close(p[1]);
    ssize_t got = pid > 0 ? read(p[0], errs, sizeof(int) * MAX_ERRS) : -1;
    close(p[0]);
    int st = 0;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (got != (ssize_t)(sizeof(int) * MAX_ERRS) || pid < 0 || !WIFEXITED(st) ||
        WEXITSTATUS(st) != 0) {
        for (int i = 0; i < MAX_ERRS; i++)
            errs[i] = EIO;
        return -1;
    }
    return 0;
}

static const struct {
    const char *name;
    int flag;
} NAMESPACES[] = {
    {"ns_mount", CLONE_NEWNS}, {"ns_pid", CLONE_NEWPID}, {"ns_net", CLONE_NEWNET},
    {"ns_ipc", CLONE_NEWIPC},  {"ns_uts", CLONE_NEWUTS}, {"ns_cgroup", CLONE_NEWCGROUP},
};
#define N_NAMESPACES (int)(sizeof NAMESPACES / sizeof NAMESPACES[0])

static void userns_child(int errs[MAX_ERRS])
{
    errs[0] = unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
}

/* Each namespace on its own, so the report names the one that is missing. Without root they are
 * tried inside a new user namespace, as the launcher would. */
static void ns_child(int errs[MAX_ERRS])
{
    if (geteuid() != 0 && unshare(CLONE_NEWUSER) < 0) {
        int e = errno;
        for (int i = 0; i < N_NAMESPACES; i++)
            errs[i] = e;
        return;
    }
    for (int i = 0; i < N_NAMESPACES; i++)
        errs[i] = unshare(NAMESPACES[i].flag) == 0 ? 0 : errno;
}

/* Installs a filter that makes getppid fail with ENOTBLK (an errno getppid never gives), and
 * checks that it does: proves filters load and are enforced, not just that the syscall exists.
 * (No architecture check: the child runs nothing but getppid afterwards.) */
static void seccomp_child(int errs[MAX_ERRS])
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOTBLK),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    errs[0] = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : errno;
    errs[1] = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0 ? 0 : errno;
    errno = 0;
    long rc = syscall(SYS_getppid);
    errs[2] = rc == -1 && errno == ENOTBLK ? 0 : EPROTO;
}

/* ---- the probes ------------------------------------------------------------------------------ */

static void check_privileges(sbx_host_report *r)
{
    if (geteuid() == 0) {
        add(r, "privileges", true, true, "root (euid 0): a distinct uid per episode");
        return;
    }
    int e[MAX_ERRS];
    in_child(userns_child, e);
    add(r, "privileges", e[0] == 0, true, "not root; unprivileged user namespaces: %s",
        e[0] == 0 ? "available" : strerror(e[0]));
}

static void check_namespaces(sbx_host_report *r)
{
    int e[MAX_ERRS];
    in_child(ns_child, e);
    for (int i = 0; i < N_NAMESPACES; i++)
        add(r, NAMESPACES[i].name, e[i] == 0, true, "unshare in a child: %s",
            e[i] == 0 ? "ok" : strerror(e[i]));
}

/* The Seccomp: line of /proc/self/status (absent without CONFIG_SECCOMP). */
static bool status_has_seccomp(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strncmp(line, "Seccomp:", 8) == 0;
    if (f)
        fclose(f);
    return found;
}

static void check_seccomp(sbx_host_report *r)
{
    int e[MAX_ERRS];
    in_child(seccomp_child, e);
    bool ok = e[0] == 0 && e[1] == 0 && e[2] == 0;
    add(r, "seccomp", ok, true, "%s; no_new_privs: %s; filter install: %s; enforced: %s",
        status_has_seccomp() ? "Seccomp field in /proc/self/status"
                             : "no Seccomp field in /proc/self/status",
        e[0] ? strerror(e[0]) : "ok", e[1] ? strerror(e[1]) : "ok", e[2] ? "no" : "yes");
}

/* Whether any swap area is active (/proc/swaps has more than its header line). */
static bool swap_active(void)
{
    FILE *f = fopen("/proc/swaps", "re");
    char line[512];
    int lines = 0;
    while (f && fgets(line, sizeof line, f))
        lines++;
    if (f)
        fclose(f);
    return lines > 1;
}

static bool file_in(const char *dir, const char *file)
{
    char p[SBX_CG_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return access(p, F_OK) == 0;
}

static void report_cgroup(sbx_host_report *r, const sbx_cg_host *h, const char *err)
{
    if (h->mode == SBX_CG_V2)
        add(r, "cgroup", true, true, "v2 %s under %s", h->has_pids ? "memory+pids" : "memory",
            h->v2_base);
    else if (h->mode == SBX_CG_V1)
        add(r, "cgroup", true, true, "v1 memory %s%s%s%s", h->v1_memory,
            h->v1_pids[0] ? ", pids " : "", h->v1_pids, h->v1_freezer[0] ? ", freezer" : "");
    else
        add(r, "cgroup", false, true, "%s", err);
    add(r, "cgroup_pids", h->has_pids, false, "%s",
        h->has_pids ? "pids controller: pids.max per command"
        : h->mode == SBX_CG_NONE
            ? "no usable cgroup hierarchy"
            : "no pids controller: RLIMIT_NPROC under the episode's uid instead");
    bool v2kill = h->mode == SBX_CG_V2 && file_in(h->v2_base, "cgroup.kill");
    bool v1freeze = h->mode == SBX_CG_V1 && h->v1_freezer[0];
    add(r, "cgroup_kill", v2kill || v1freeze, false, "%s",
        v2kill     ? "v2 cgroup.kill"
        : v1freeze ? "v1 freezer: freeze, SIGKILL, thaw"
                   : "SIGKILL loop only");
    bool swap = swap_active();
    bool v2swap = h->mode == SBX_CG_V2 && file_in(h->v2_base, "memory.swap.max");
    bool v1swap = h->mode == SBX_CG_V1 && h->memsw;
    add(r, "cgroup_swap", !swap || v2swap || v1swap, true, "swap %s; %s", swap ? "on" : "off",
        v2swap   ? "memory.swap.max=0 per command"
        : v1swap ? "memsw limit = memory limit"
                 : "swap not limited");
}

static void check_cgroup(sbx_host_report *r, const char *cg_name)
{
    char tmp[64], err[512] = "";
    snprintf(tmp, sizeof tmp, "kgym-hostcheck-%d", (int)getpid());
    r->cg_ok = sbx_cg_host_probe(&r->cg, cg_name ? cg_name : tmp, err, sizeof err) == 0;
    report_cgroup(r, &r->cg, err);
    if (!cg_name && r->cg_ok) {
        sbx_cg_host_cleanup(&r->cg);
        r->cg_ok = false;
    }
}

/* Opens "sys" beneath /proc (allowed), then ".." beneath it (must be EXDEV) and the symlink
 * "self" with RESOLVE_NO_SYMLINKS (must be ELOOP). */
static void check_openat2(sbx_host_report *r)
{
    int dfd = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
    int fd = (int)syscall(SYS_openat2, dfd, "sys", &how, sizeof how);
    int e_ok = fd >= 0 ? 0 : errno;
    if (fd >= 0)
        close(fd);
    int up = (int)syscall(SYS_openat2, dfd, "..", &how, sizeof how);
    int e_up = up >= 0 ? 0 : errno;
    if (up >= 0)
        close(up);
    int ln = (int)syscall(SYS_openat2, dfd, "self", &how, sizeof how);
    int e_ln = ln >= 0 ? 0 : errno;
    if (ln >= 0)
        close(ln);
    if (dfd >= 0)
        close(dfd);
    bool ok = e_ok == 0 && e_up == EXDEV && e_ln == ELOOP;
    add(r, "openat2", ok, true, "RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS: open %s, '..' %s, symlink %s",
        e_ok ? strerror(e_ok) : "ok", e_up == EXDEV ? "refused" : "NOT refused",
        e_ln == ELOOP ? "refused" : "NOT refused");
}

static void check_close_range(sbx_host_report *r)
{
    int fd = open("/dev/null", O_RDONLY);
    int e = fd < 0 ? errno : 0;
    if (!e && syscall(SYS_close_range, fd, fd, CLOSE_RANGE_CLOEXEC) < 0)
        e = errno;
    bool cloexec = !e && (fcntl(fd, F_GETFD) & FD_CLOEXEC);
    if (!e && syscall(SYS_close_range, fd, fd, 0) < 0)
        e = errno;
    bool closed = !e && fcntl(fd, F_GETFD) < 0 && errno == EBADF;
    if (fd >= 0 && !closed)
        close(fd);
    add(r, "close_range", cloexec && closed, true, "close_range(CLOSE_RANGE_CLOEXEC): %s",
        e                   ? strerror(e)
        : cloexec && closed ? "ok"
                            : "no effect");
}

static void check_pidfd(sbx_host_report *r)
{
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    int e = fd < 0 ? errno : 0;
    if (fd >= 0)
        close(fd);
    add(r, "pidfd_open", fd >= 0, true, "pidfd_open(self): %s", e ? strerror(e) : "ok");
}

static void check_landlock(sbx_host_report *r)
{
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi > 0)
        add(r, "landlock", true, false, "ABI %ld", abi);
    else
        add(r, "landlock", false, false, "unavailable: %s", strerror(errno));
}

/* sysctls: value must lie in [lo, hi]. */
static const struct {
    const char *name;
    long lo, hi;
    bool required;
} SYSCTLS[] = {
    {"fs.protected_hardlinks", 1, 1, true},
    {"fs.protected_symlinks", 1, 1, false},
    {"fs.protected_regular", 2, 2, false},
    {"kernel.yama.ptrace_scope", 1, 3, false},
    {"kernel.unprivileged_bpf_disabled", 1, 2, false},
    {"vm.unprivileged_userfaultfd", 0, 0, false},
    {"kernel.perf_event_paranoid", 2, 4, false},
};

static void check_sysctl(sbx_host_report *r, const char *name, long lo, long hi, bool required)
{
    char path[128], buf[32];
    int n = snprintf(path, sizeof path, "/proc/sys/%s", name);
    for (int i = 10; i < n; i++)
        if (path[i] == '.')
            path[i] = '/';
    FILE *f = fopen(path, "re");
    bool got = f && fgets(buf, sizeof buf, f);
    if (f)
        fclose(f);
    if (!got) {
        add(r, name, false, required, "absent: no %s", path);
        return;
    }
    long v = strtol(buf, NULL, 10);
    if (lo == hi)
        add(r, name, v == lo, required, "%ld (want %ld)", v, lo);
    else
        add(r, name, v >= lo && v <= hi, required, "%ld (want %ld..%ld)", v, lo, hi);
}

int sbx_host_check(sbx_host_report *r, const char *cg_name)
{
    memset(r, 0, sizeof *r);
    check_privileges(r);
    check_namespaces(r);
    check_seccomp(r);
    check_cgroup(r, cg_name);
    check_openat2(r);
    check_close_range(r);
    check_pidfd(r);
    check_landlock(r);
    for (size_t i = 0; i < sizeof SYSCTLS / sizeof SYSCTLS[0]; i++)
        check_sysctl(r, SYSCTLS[i].name, SYSCTLS[i].lo, SYSCTLS[i].hi, SYSCTLS[i].required);
    return sbx_host_all_required(r) ? 0 : -1;
}

/* ---- GPU discovery --------------------------------------------------------------------------- */

static bool is_chardev(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

int sbx_host_gpu_devices(int gpu_index, char paths[][64], int max)
{
    char gpu[64];
    snprintf(gpu, sizeof gpu, "/dev/nvidia%d", gpu_index);
    const char *want[] = {"/dev/nvidiactl", "/dev/nvidia-uvm", gpu};
    int n = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0] && n < max; i++)
        if ((i < 2 || gpu_index >= 0) && is_chardev(want[i]))
            snprintf(paths[n++], 64, "%s", want[i]);
    return n;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether prefix holds a torch package (lib/python3.X/site-packages/torch). */
static bool has_torch(const char *prefix)
{
    char pat[320];
    if (snprintf(pat, sizeof pat, "%s/lib/python3*/site-packages/torch", prefix) >= (int)sizeof pat)
        return false;
    glob_t g;
    bool found = false;
    if (glob(pat, GLOB_ONLYDIR | GLOB_NOSORT, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !found; i++)
            found = is_dir(g.gl_pathv[i]);
        globfree(&g);
    }
    return found;
}

static int keep_if(char out[256], const char *path, bool ok)
{
    out[0] = '\0';
    if (!path || !ok || strlen(path) >= 256)
        return 0;
    snprintf(out, 256, "%s", path);
    return 1;
}

int sbx_host_gpu_binds_probe(const char *python_prefix, sbx_host_gpu_binds *b)
{
    const char *py = python_prefix ? python_prefix : getenv("KGYM_PYTHON_PREFIX");
    int n = keep_if(b->driver_dir, "/usr/local/nvidia", is_dir("/usr/local/nvidia"));
    n += keep_if(b->proc_driver, "/proc/driver/nvidia", is_dir("/proc/driver/nvidia"));
    n += keep_if(b->python_prefix, py, py && py[0] == '/' && has_torch(py));
    return n;
}
