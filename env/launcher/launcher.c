#include "launcher/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/close_range.h>
#include <linux/mount.h>
#include <linux/securebits.h>

#include "sandbox/seccomp.h"

/* Where each launcher mounts its new root. Inside the launcher's own mount namespace, so
 * concurrent launchers never see each other's mounts; on the host it stays an empty dir. */
#define NEW_ROOT "/tmp/.kgym-sandbox-root"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* Linux 5.3; the same number on every architecture but alpha */
#endif

/* Without pidfd_open (Linux < 5.3), how often the outer launcher looks at getppid(). */
#define PARENT_POLL_MS 100

/* A setup step failed: say which and why, and end with the launcher's setup-failure status. */
/* The caller's channel for "the sandbox could not be set up" (--status-fd), or -1. The
 * command never inherits it, so it cannot fake a setup failure; exit status and stderr it can. */
static int setup_fd = -1;

static void report_setup_failure(void)
{
    if (setup_fd >= 0 && write(setup_fd, "setup\n", 6) < 0)
        _exit(125);
}

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "kgym-sandbox: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "",
            strerror(errno));
    report_setup_failure();
    _exit(125);
}

static void die_msg(const char *msg)
{
    fprintf(stderr, "kgym-sandbox: %s\n", msg);
    report_setup_failure();
    _exit(125);
}

/* ---- paths and variables ------------------------------------------------------------------ */

/* Expands ${NAME} in s with the workspace and --var values. Returns false when a variable has
 * no value (the caller skips an optional mount, and fails on a required one: a typo must not
 * silently bind the wrong thing). */
static bool expand(const launch_opts *o, const char *s, char *out, size_t cap)
{
    size_t n = 0;
    while (*s && n + 1 < cap) {
        if (s[0] == '$' && s[1] == '{') {
            const char *end = strchr(s, '}');
            if (!end)
                die_msg("unterminated ${ in a profile path");
            size_t len = (size_t)(end - s - 2);
            const char *value = NULL;
            if (len == 9 && strncmp(s + 2, "WORKSPACE", 9) == 0)
                value = o->workspace;
            for (int i = 0; !value && i < o->n_vars; i++)
                if (strncmp(o->vars[i], s + 2, len) == 0 && o->vars[i][len] == '=')
                    value = o->vars[i] + len + 1;
            if (!value)
                return false;
            n += (size_t)snprintf(out + n, cap - n, "%s", value);
            s = end + 1;
        } else {
            out[n++] = *s++;
        }
    }
    out[n < cap ? n : cap - 1] = '\0';
    return true;
}

static void mkdir_p(const char *path, mode_t mode)
{
    char buf[SBX_PATH_MAX * 2];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, mode) != 0 && errno != EEXIST)
                die("mkdir", buf);
            *p = '/';
        }
    }
    if (mkdir(buf, mode) != 0 && errno != EEXIST)
        die("mkdir", buf);
}

static void make_parent(const char *path)
{
    char buf[SBX_PATH_MAX * 2];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    if (slash && slash != buf) {
        *slash = '\0';
        mkdir_p(buf, 0755);
    }
}

/* An empty file to bind a file onto. */
static void touch(const char *path)
{
    make_parent(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST)
        die("create", path);
    if (fd >= 0)
        close(fd);
}

/* ---- the new root ------------------------------------------------------------------------- */

/* Binds src at dst (inside the new root), then remounts it with the flags we want: binds
 * inherit the source's flags until remounted. */
static void bind(const char *src, const char *dst, unsigned long flags)
{
    struct stat st;
    if (stat(src, &st) != 0)
        die("bind source", src);
    if (S_ISDIR(st.st_mode))
        mkdir_p(dst, 0755);
    else
        touch(dst);
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        die("bind", src);
    if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | flags, NULL) != 0)
        die("remount", dst);
    /* The remount changes the top mount only: mounts below it (/sys/fs/cgroup, /sys/kernel/...
     * under a read-only /sys) would stay writable. Apply the flags to the whole subtree. */
    if (flags & MS_RDONLY) {
        struct mount_attr attr = {.attr_set =
                                      MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
        if (syscall(SYS_mount_setattr, AT_FDCWD, dst, AT_RECURSIVE, &attr, sizeof attr) != 0)
            die("read-only subtree", dst);
    }
}

static void mount_tmpfs(const char *dst, uint64_t size, unsigned mode, unsigned long flags)
{
    char data[64];
    snprintf(data, sizeof data, "size=%llu,mode=%o", (unsigned long long)size, mode ? mode : 0755);
    mkdir_p(dst, 0755);
    if (mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV | flags, data) != 0)
        die("mount tmpfs", dst);
}

static void apply_mount(const launch_opts *o, const sbx_mount *m)
{
    char dst[SBX_PATH_MAX * 2], dest[SBX_PATH_MAX], src[SBX_PATH_MAX];
    bool known = expand(o, m->dest, dest, sizeof dest) &&
                 expand(o, m->src[0] ? m->src : m->dest, src, sizeof src);
    if (!known && m->optional)
        return; /* "?" with a variable this host has no value for (no CUDA toolkit, ...) */
    if (!known) {
        fprintf(stderr, "kgym-sandbox: a profile variable in %s has no value\n", m->dest);
        _exit(125);
    }
    snprintf(dst, sizeof dst, "%s%s", NEW_ROOT, dest);
    struct stat st;
    bool needs_src = m->kind == SBX_MOUNT_RO || m->kind == SBX_MOUNT_RW;
    if (needs_src && m->optional && stat(src, &st) != 0)
        return; /* "?": absent on this host */
    switch (m->kind) {
    case SBX_MOUNT_RO:
        bind(src, dst, MS_RDONLY | MS_NOSUID | MS_NODEV);
        break;
    case SBX_MOUNT_RW:
        bind(src, dst, MS_NOSUID | MS_NODEV);
        break;
    case SBX_MOUNT_TMPFS:
        mount_tmpfs(dst, m->size, m->mode, 0);
        break;
    case SBX_MOUNT_DIR:
        mkdir_p(dst, m->mode ? m->mode : 0755);
        break;
    case SBX_MOUNT_SYMLINK:
        make_parent(dst);
        if (symlink(src, dst) != 0 && errno != EEXIST)
            die("symlink", dst);
        break;
    case SBX_MOUNT_PROC:
        /* Our pid namespace's procfs: only the sandbox's processes are visible, and of those
         * only the command's own (hidepid): init's command line names host paths. */
        mkdir_p(dst, 0555);
        if (mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") !=
                0 &&
            mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0)
            die("mount proc", dst);
        break;
    }
}

/* Hides sensitive /proc entries (kcore, keys, ...) and makes kernel knobs read-only. */
static void harden_proc(const sbx_profile *p)
{
    char path[SBX_PATH_MAX * 2];
    for (int i = 0; i < p->n_proc_masked; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s%s", NEW_ROOT, p->proc_masked[i]);
        if (stat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            mount_tmpfs(path, 4096, 0, MS_RDONLY);
        else if (mount("/dev/null", path, NULL, MS_BIND, NULL) != 0)
            die("mask", path);
    }
    for (int i = 0; i < p->n_proc_readonly; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s%s", NEW_ROOT, p->proc_readonly[i]);
        if (stat(path, &st) != 0)
            continue;
        if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) != 0 ||
            mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                  NULL) != 0)
            die("read-only", path);
    }
}

/* /dev: a small tmpfs holding binds of the profile's device nodes only. Device binds keep
 * their device semantics (no MS_NODEV on them); nothing else can be created there. */
static void build_dev(const launch_opts *o, const sbx_profile *p)
{
    char dst[SBX_PATH_MAX * 2], src[64];
    snprintf(dst, sizeof dst, "%s/dev", NEW_ROOT);
    mount_tmpfs(dst, 65536, 0755, 0);
    for (int i = 0; i < p->n_devices; i++) {
        if (strcmp(p->devices[i], "gpu") == 0)
            continue;
        snprintf(src, sizeof src, "/dev/%s", p->devices[i]);
        snprintf(dst, sizeof dst, "%s/dev/%s", NEW_ROOT, p->devices[i]);
        bind(src, dst, MS_NOSUID);
    }
    for (int i = 0; p->gpu && i < o->n_gpu_devices; i++) {
        snprintf(dst, sizeof dst, "%s%s", NEW_ROOT, o->gpu_devices[i]);
        bind(o->gpu_devices[i], dst, MS_NOSUID);
    }
    /* A devpts of the sandbox's own (newinstance): ptys for tools that want one (script, expect,
     * python's pty), sharing nothing with the host's terminals. TIOCSTI stays refused by the
     * seccomp guard. */
    snprintf(dst, sizeof dst, "%s/dev/pts", NEW_ROOT);
    mkdir_p(dst, 0755);
    if (mount("devpts", dst, "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620,max=64") != 0)
        die("mount devpts", dst);
    static const char *const LINKS[][2] = {{"pts/ptmx", "ptmx"},
                                           {"/proc/self/fd", "fd"},
                                           {"/proc/self/fd/0", "stdin"},
                                           {"/proc/self/fd/1", "stdout"},
                                           {"/proc/self/fd/2", "stderr"}};
    for (size_t i = 0; i < sizeof LINKS / sizeof LINKS[0]; i++) {
        snprintf(dst, sizeof dst, "%s/dev/%s", NEW_ROOT, LINKS[i][1]);
        if (symlink(LINKS[i][0], dst) != 0)
            die("symlink", dst);
    }
}

static void write_file(const char *path, const char *text)
{
    make_parent(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        die("write", path);
    close(fd);
}

/* passwd and group naming the episode's uid, so tools that look the user up (bash's prompt,
 * python's getpass, ssh-less git) work; the host's accounts are not shown. */
static void write_accounts(const launch_opts *o)
{
    char path[SBX_PATH_MAX], text[512];
    snprintf(path, sizeof path, "%s/etc/passwd", NEW_ROOT);
    snprintf(text, sizeof text,
             "root:x:0:0:root:/root:/usr/sbin/nologin\n"
             "agent:x:%u:%u:kgym agent:/workspace:/bin/bash\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             (unsigned)o->uid, (unsigned)o->gid);
    write_file(path, text);
    snprintf(path, sizeof path, "%s/etc/group", NEW_ROOT);
    snprintf(text, sizeof text, "root:x:0:\nagent:x:%u:\nnogroup:x:65534:\n", (unsigned)o->gid);
    write_file(path, text);
}

static void build_root(const launch_opts *o, const sbx_profile *p)
{
    /* Nothing done from here on propagates back to the host's mounts. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        die("make mounts private", NULL);
    mkdir_p(NEW_ROOT, 0700);
    mount_tmpfs(NEW_ROOT, 16u << 20, 0755, 0);
    build_dev(o, p);
    for (int i = 0; i < p->n_mounts; i++)
        apply_mount(o, &p->mounts[i]);
    harden_proc(p);
    write_accounts(o);
    /* The root itself read-only: the only writable places are the profile's rw and tmpfs. */
    if (mount(NULL, NEW_ROOT, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0)
        die("remount root read-only", NULL);
    if (chdir(NEW_ROOT) != 0 || syscall(SYS_pivot_root, ".", ".") != 0)
        die("pivot_root", NULL);
    /* The old root is stacked under the new one: detach it, so no path leads back. */
    if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0)
        die("detach the old root", NULL);
}

/* ---- the command -------------------------------------------------------------------------- */

static void set_rlimit(int resource, uint64_t value)
{
    struct rlimit rl = {value, value};
    if (value && setrlimit(resource, &rl) != 0)
        die("setrlimit", NULL);
}

static void apply_rlimits(const launch_opts *o, const sbx_profile *p)
{
    uint64_t fsize = p->rl_fsize;
    if (o->fsize && (!fsize || o->fsize < fsize))
        fsize = o->fsize; /* the episode's file-size cap, when it is lower */
    set_rlimit(RLIMIT_CPU, p->rl_cpu_s);
    set_rlimit(RLIMIT_FSIZE, fsize);
    set_rlimit(RLIMIT_NOFILE, p->rl_nofile);
    set_rlimit(RLIMIT_NPROC, p->rl_nproc);
    set_rlimit(RLIMIT_STACK, p->rl_stack);
    set_rlimit(RLIMIT_AS, p->rl_as);
    struct rlimit core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &core) != 0)
        die("setrlimit core", NULL);
}

/* Every capability gone for good: the bounding set emptied, ambient cleared, and securebits
 * locked so that no setuid, exec or uid change can bring one back. Then the episode's uid. */
static void drop_privileges(const launch_opts *o)
{
    for (cap_value_t c = 0; c < (cap_value_t)cap_max_bits(); c++)
        if (cap_drop_bound(c) != 0 && errno != EINVAL)
            die("drop bounding capability", NULL);
    if (cap_reset_ambient() != 0)
        die("clear ambient capabilities", NULL);
    unsigned bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                    SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                    SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (cap_set_secbits(bits) != 0)
        die("lock securebits", NULL);
    if (setgroups(0, NULL) != 0 || setresgid(o->gid, o->gid, o->gid) != 0 ||
        setresuid(o->uid, o->uid, o->uid) != 0)
        die("switch to the episode's uid", NULL);
    cap_t now = cap_get_proc(), none = cap_init();
    if (!now || !none || cap_set_proc(none) != 0 || cap_compare(now, none) != 0)
        die_msg("capabilities survived the uid change");
    cap_free(now);
    cap_free(none);
    if (setuid(0) == 0 || setgid(0) == 0)
        die_msg("the sandbox could become root again");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        die("no_new_privs", NULL);
}

/* Every fd but stdio and the caller's chosen ones is closed at exec. */
static void close_inherited_fds(const launch_opts *o)
{
    if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        die("close_range", NULL);
    for (int i = 0; i < o->n_keep_fds; i++) {
        int fd = o->keep_fds[i];
        if (fcntl(fd, F_SETFD, 0) != 0)
            die("keep fd", NULL);
    }
}

/* The profile's environment, with the server's --env entries replacing same-named ones. */
static int build_env(const launch_opts *o, const sbx_profile *p, char **envp)
{
    int n = 0;
    for (int i = 0; i < p->n_env; i++) {
        size_t name = strcspn(p->env[i], "=");
        bool replaced = false;
        for (int k = 0; k < o->n_env && !replaced; k++)
            replaced = strncmp(o->env[k], p->env[i], name + 1) == 0;
        if (!replaced)
            envp[n++] = (char *)p->env[i];
    }
    for (int k = 0; k < o->n_env; k++)
        envp[n++] = (char *)o->env[k];
    return n;
}

static void run_command(const launch_opts *o, const sbx_profile *p)
{
    if (setsid() < 0)
        die("setsid", NULL);
    apply_rlimits(o, p);
    if (chdir(o->cwd ? o->cwd : "/workspace") != 0)
        die("chdir", o->cwd ? o->cwd : "/workspace");
    drop_privileges(o);
    close_inherited_fds(o);
    char *envp[SBX_MAX_ENV + LAUNCH_MAX_VARS + 1];
    int n = build_env(o, p, envp);
    envp[n] = NULL;
    char err[512];
    if (sbx_seccomp_install(p, err, sizeof err) != 0) {
        fprintf(stderr, "kgym-sandbox: seccomp: %s\n", err);
        report_setup_failure();
        _exit(125);
    }
    if (setup_fd >= 0)
        close(setup_fd); /* (also close-on-exec: belt and braces) */
    execve(o->argv[0], o->argv, envp);
    /* The filter is in place: only write and exit from here. */
    fprintf(stderr, "kgym-sandbox: cannot run %s: %s\n", o->argv[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

/* ---- init and outer ----------------------------------------------------------------------- */

/* pid 1 of the sandbox: sets up the root, runs the command, reaps every orphan, and reports the
 * command's wait status to the outer launcher. Its exit takes every leftover process with it. */
static void run_init(const launch_opts *o, const sbx_profile *p, int status_fd)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        die("pdeathsig", NULL);
    build_root(o, p);
    if (sethostname(o->hostname ? o->hostname : "kgym",
                    strlen(o->hostname ? o->hostname : "kgym")) != 0)
        die("sethostname", NULL);
    pid_t cmd = fork();
    if (cmd < 0)
        die("fork", NULL);
    if (cmd == 0) {
        close(status_fd);
        run_command(o, p);
    }
    int status = 0;
    for (;;) {
        int st;
        pid_t done = waitpid(-1, &st, 0);
        if (done == cmd) {
            status = st;
            break;
        }
        if (done < 0 && errno != EINTR)
            die("wait", NULL);
    }
    if (write(status_fd, &status, sizeof status) != (ssize_t)sizeof status)
        die("report status", NULL);
    _exit(0);
}

static void join_cgroups(const launch_opts *o)
{
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    for (int i = 0; i < o->n_cgroup_procs; i++) {
        int fd = open(o->cgroup_procs[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, pid, strlen(pid)) < 0)
            die("join cgroup", o->cgroup_procs[i]);
        close(fd);
    }
}

/* Ends the launcher the way the command ended: same exit code, or death by the same signal,
 * so the caller sees the command, not the launcher. */
static void mirror_status(int status)
{
    if (WIFEXITED(status))
        _exit(WEXITSTATUS(status));
    int sig = WTERMSIG(status);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    _exit(128 + sig);
}

/* ---- the watch: the sandbox never outlives its server ------------------------------------ */

/* A pidfd of the launcher's parent, readable once the parent has ended; -1 when there is none to
 * watch, or no pidfd (an old kernel: the wait then looks at getppid() instead). The parent was
 * read first thing in main: if it is not the parent any more, it has already died, and nothing
 * would ever stop the command. (The check comes after pidfd_open, so a pid reused meanwhile
 * cannot be watched in its place.) */
static int watch_parent(const launch_opts *o)
{
    if (o->parent_pid <= 0)
        return -1;
    int fd = (int)syscall(SYS_pidfd_open, o->parent_pid, 0); /* close-on-exec by default */
    bool gone = fd < 0 && errno == ESRCH;
    if (gone || getppid() != o->parent_pid)
        die_msg("the process that started the sandbox has ended");
    return fd;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Kills init, whose end takes every process of its pid namespace with it (the command, its
 * daemons, whatever escaped its session), then dies killed as well: nobody may take the
 * launcher's status for the command's. */
static void stop_sandbox(pid_t init, const char *why)
{
    kill(init, SIGKILL);
    int st;
    while (waitpid(init, &st, 0) < 0 && errno == EINTR)
        ;
    fprintf(stderr, "kgym-sandbox: %s: the sandbox was killed\n", why);
    raise(SIGKILL);
    _exit(128 + SIGKILL);
}

/* How long the next poll may sleep: until the wall deadline (0: none), and a short while when
 * the parent can only be watched by looking. */
static int poll_timeout(int64_t deadline, bool look_at_parent)
{
    int64_t t = look_at_parent ? PARENT_POLL_MS : -1;
    if (deadline) {
        int64_t left = deadline - now_ms();
        left = left < 0 ? 0 : left > INT_MAX ? INT_MAX : left;
        if (t < 0 || left < t)
            t = left;
    }
    return (int)t;
}

/* Waits until init has reported the command's status or ended (either makes the status pipe
 * readable: init holds its only write end), watching meanwhile the parent and the wall limit.
 * The parent dying first means a server that can no longer stop, time or reap this command.
 * Returns init's wait status. */
static int wait_init(const launch_opts *o, pid_t init, int status_rd, int parent_fd)
{
    int64_t wall = o->wall_ms > (uint64_t)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)o->wall_ms;
    int64_t deadline = wall ? now_ms() + wall : 0;
    bool look = parent_fd < 0 && o->parent_pid > 0;
    for (;;) {
        struct pollfd fds[2] = {{.fd = status_rd, .events = POLLIN},
                                {.fd = parent_fd, .events = POLLIN}}; /* -1: ignored */
        int n = poll(fds, 2, poll_timeout(deadline, look));
        if (n < 0 && errno != EINTR)
            die("poll", NULL);
        if (n > 0 && fds[0].revents)
            break;
        if ((n > 0 && fds[1].revents) || (look && getppid() != o->parent_pid))
            stop_sandbox(init, "the process that started it ended");
        if (deadline && now_ms() >= deadline)
            stop_sandbox(init, "its wall-clock limit passed");
    }
    int st;
    while (waitpid(init, &st, 0) < 0)
        if (errno != EINTR)
            die("wait", NULL);
    return st;
}

int launch_run(const launch_opts *o, const sbx_profile *p)
{
    setup_fd = o->status_fd;
    if (setup_fd >= 0 && fcntl(setup_fd, F_SETFD, FD_CLOEXEC) != 0)
        setup_fd = -1;
    if (o->uid == 0 || o->gid == 0)
        die_msg("refusing to run a sandbox as uid or gid 0");
    int parent_fd = watch_parent(o);
    join_cgroups(o);
    int flags = (p->ns_mount ? CLONE_NEWNS : 0) | (p->ns_pid ? CLONE_NEWPID : 0) |
                (p->ns_net ? CLONE_NEWNET : 0) | (p->ns_ipc ? CLONE_NEWIPC : 0) |
                (p->ns_uts ? CLONE_NEWUTS : 0) | (p->ns_cgroup ? CLONE_NEWCGROUP : 0);
    if (!p->ns_mount || !p->ns_pid)
        die_msg("profiles must ask for the mount and pid namespaces");
    if (unshare(flags) != 0)
        die("unshare", NULL);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        die("pipe", NULL);
    pid_t init = fork();
    if (init < 0)
        die("fork", NULL);
    if (init == 0) {
        close(fds[0]);
        if (parent_fd >= 0)
            close(parent_fd);
        run_init(o, p, fds[1]);
    }
    close(fds[1]);
    int st = wait_init(o, init, fds[0], parent_fd);
    int status;
    if (read(fds[0], &status, sizeof status) != (ssize_t)sizeof status)
        mirror_status(st); /* init failed before running the command: its message is out */
    mirror_status(status);
    return 125;
}
