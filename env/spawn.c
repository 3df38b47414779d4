/* spawn: fork/exec with captured output, timeouts and process-group cleanup. See spawn.h. */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CAPTURE_CAP (1u << 20)
#define READ_CHUNK 65536
/* After the final SIGKILL, at most this many chunks are still read from a pipe (a process that
 * escaped the group could otherwise keep it busy forever). */
#define FINAL_DRAIN_CHUNKS 32

/* ---- small helpers --------------------------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Moves fd (O_CLOEXEC) above the standard streams, so dup2 into 0..2 never clobbers it. */
static int fd_high(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int n = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int saved = errno;
    close(fd);
    errno = saved;
    return n;
}

static int pidfd_open_compat(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Whether child pid has exited (without reaping it). 1 yes, 0 no, -1 error. */
static int exited_nowait(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    for (;;) {
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0)
            return si.si_pid != 0;
        if (errno != EINTR)
            return -1;
    }
}

static void status_decode(int status, int *exit_code, int *term_signal)
{
    if (WIFEXITED(status)) {
        *exit_code = WEXITSTATUS(status);
        *term_signal = 0;
    } else if (WIFSIGNALED(status)) {
        *term_signal = WTERMSIG(status);
        *exit_code = 128 + *term_signal;
    } else {
        *exit_code = -1;
        *term_signal = 0;
    }
}

static int reap(pid_t pid, int *status, struct rusage *ru)
{
    for (;;) {
        pid_t r = wait4(pid, status, 0, ru);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

const char *spawn_signal_name(int sig)
{
    switch (sig) {
    case SIGHUP:
        return "SIGHUP";
    case SIGINT:
        return "SIGINT";
    case SIGQUIT:
        return "SIGQUIT";
    case SIGILL:
        return "SIGILL";
    case SIGTRAP:
        return "SIGTRAP";
    case SIGABRT:
        return "SIGABRT";
    case SIGBUS:
        return "SIGBUS";
    case SIGFPE:
        return "SIGFPE";
    case SIGKILL:
        return "SIGKILL";
    case SIGUSR1:
        return "SIGUSR1";
    case SIGSEGV:
        return "SIGSEGV";
    case SIGUSR2:
        return "SIGUSR2";
    case SIGPIPE:
        return "SIGPIPE";
    case SIGALRM:
        return "SIGALRM";
    case SIGTERM:
        return "SIGTERM";
    case SIGCHLD:
        return "SIGCHLD";
    case SIGCONT:
        return "SIGCONT";
    case SIGSTOP:
        return "SIGSTOP";
    case SIGTSTP:
        return "SIGTSTP";
    case SIGXCPU:
        return "SIGXCPU";
    case SIGXFSZ:
        return "SIGXFSZ";
    case SIGSYS:
        return "SIGSYS";
    default:
        return "SIG?";
    }
}

/* ---- capture buffer -------------------------------------------------------------------------- */

void spawn_capture_init(spawn_capture *c, size_t cap)
{
    memset(c, 0, sizeof *c);
    c->cap = cap;
    c->ring_cap = cap - cap / 2;
}

void spawn_capture_deinit(spawn_capture *c)
{
    free(c->head);
    free(c->ring);
    size_t cap = c->cap;
    spawn_capture_init(c, cap);
}

int spawn_capture_add(spawn_capture *c, const void *bytes, size_t n)
{
    const char *p = bytes;
    c->total += n;
    size_t head_cap = c->cap / 2;
    if (c->head_len < head_cap) {
        if (!c->head) {
            c->head = malloc(head_cap);
            if (!c->head)
                return -1;
        }
        size_t k = head_cap - c->head_len < n ? head_cap - c->head_len : n;
        memcpy(c->head + c->head_len, p, k);
        c->head_len += k;
        p += k;
        n -= k;
    }
    if (n == 0 || c->ring_cap == 0)
        return 0;
    if (!c->ring) {
        c->ring = malloc(c->ring_cap);
        if (!c->ring)
            return -1;
    }
    if (n >= c->ring_cap) { /* only the last ring_cap bytes can survive */
        memcpy(c->ring, p + (n - c->ring_cap), c->ring_cap);
        c->ring_pos = 0;
        c->ring_len = c->ring_cap;
        return 0;
    }
    size_t first = c->ring_cap - c->ring_pos < n ? c->ring_cap - c->ring_pos : n;
    memcpy(c->ring + c->ring_pos, p, first);
    memcpy(c->ring, p + first, n - first);
    c->ring_pos = (c->ring_pos + n) % c->ring_cap;
    c->ring_len = c->ring_len + n > c->ring_cap ? c->ring_cap : c->ring_len + n;
    return 0;
}

int spawn_capture_finish(spawn_capture *c, spawn_stream *out)
{
    uint64_t kept = c->head_len + c->ring_len;
    uint64_t omitted = c->total > kept ? c->total - kept : 0;
    char marker[80];
    int m = 0;
    if (omitted)
        m = snprintf(marker, sizeof marker, "\n[... %llu bytes omitted ...]\n",
                     (unsigned long long)omitted);
    size_t len = c->head_len + (size_t)m + c->ring_len;
    char *buf = malloc(len + 1);
    if (!buf) {
        out->data = NULL;
        out->len = 0;
        out->total = c->total;
        out->truncated = true;
        spawn_capture_deinit(c);
        return -1;
    }
    size_t o = 0;
    if (c->head_len)
        memcpy(buf, c->head, c->head_len);
    o = c->head_len;
    memcpy(buf + o, marker, (size_t)m);
    o += (size_t)m;
    /* The ring's oldest byte is at ring_pos once it has wrapped, else at 0. */
    size_t start = c->ring_len == c->ring_cap ? c->ring_pos : 0;
    size_t first = c->ring_cap - start < c->ring_len ? c->ring_cap - start : c->ring_len;
    if (first)
        memcpy(buf + o, c->ring + start, first);
    if (c->ring_len > first)
        memcpy(buf + o + first, c->ring, c->ring_len - first);
    o += c->ring_len;
    buf[o] = '\0';
    out->data = buf;
    out->len = o;
    out->total = c->total;
    out->truncated = omitted != 0;
    spawn_capture_deinit(c);
    return 0;
}

/* ---- the child ------------------------------------------------------------------------------- */

enum child_stage {
    ST_SIGNALS,
    ST_SETSID,
    ST_STDIO,
    ST_CHDIR,
    ST_KEEPFDS,
    ST_CLOSEFDS,
    ST_RLIMIT,
    ST_PREEXEC,
    ST_EXECVE,
};
static const char *const STAGE_NAMES[] = {
    "signals",   "setsid",    "stdio",    "chdir",  "keep_fds",
    "close_fds", "setrlimit", "pre_exec", "execve",
};

struct child_report {
    int stage;
    int err;
};

/* Everything the child needs, prepared before fork. */
struct child_plan {
    const char *const *argv;
    const char *const *envp;
    const char *cwd;
    const spawn_rlimits *rl;
    int in_fd, out_fd, err_fd; /* in_fd >= 3; out/err may be anything (a caller's out_fd) */
    int report_fd;             /* >= 3, CLOEXEC: closed by a successful execve */
    int *keep;                 /* sorted, unique, >= 3; includes report_fd */
    size_t n_keep;
    const int *user_keep; /* CLOEXEC cleared on these */
    size_t n_user_keep;
    unsigned max_fd; /* fallback when close_range is missing */
    spawn_pre_exec_fn pre_exec;
    void *pre_exec_ctx;
};

static __attribute__((noreturn)) void child_fail(const struct child_plan *p, int stage, int err)
{
    struct child_report r = {stage, err};
    ssize_t w;
    do {
        w = write(p->report_fd, &r, sizeof r);
    } while (w < 0 && errno == EINTR);
    _exit(127);
}

static void close_span(unsigned lo, unsigned hi, unsigned max_fd)
{
    if (lo > hi)
        return;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, lo, hi, 0) == 0)
        return;
#endif
    if (hi > max_fd)
        hi = max_fd;
    for (unsigned fd = lo; fd <= hi && fd >= lo; fd++)
        close((int)fd);
}

static int set_limit(int resource, uint64_t soft, uint64_t hard)
{
    struct rlimit cur, want;
    if (getrlimit(resource, &cur) != 0)
        return -1;
    want.rlim_cur = (rlim_t)soft;
    want.rlim_max = (rlim_t)hard;
    if (cur.rlim_max != RLIM_INFINITY && want.rlim_max > cur.rlim_max)
        want.rlim_max = cur.rlim_max;
    if (want.rlim_cur > want.rlim_max)
        want.rlim_cur = want.rlim_max;
    return setrlimit(resource, &want);
}

/* Runs in the forked child: only async-signal-safe calls from here on. */
static __attribute__((noreturn)) void child_exec(const struct child_plan *p)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &sa, NULL); /* glibc-internal signals refuse: fine */
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0)
        child_fail(p, ST_SIGNALS, errno);

    if (setsid() < 0)
        child_fail(p, ST_SETSID, errno);

    int o = p->out_fd, e = p->err_fd;
    if (o >= 0 && o < 3) {
        int n = fcntl(o, F_DUPFD_CLOEXEC, 3);
        if (n < 0)
            child_fail(p, ST_STDIO, errno);
        if (e == o)
            e = n;
        o = n;
    }
    if (e >= 0 && e < 3) {
        e = fcntl(e, F_DUPFD_CLOEXEC, 3);
        if (e < 0)
            child_fail(p, ST_STDIO, errno);
    }
    if (dup2(p->in_fd, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
        child_fail(p, ST_STDIO, errno);

    if (p->cwd && chdir(p->cwd) != 0)
        child_fail(p, ST_CHDIR, errno);

    for (size_t i = 0; i < p->n_user_keep; i++) {
        int fd = p->user_keep[i];
        if (fd < 3)
            continue;
        int fl = fcntl(fd, F_GETFD);
        if (fl < 0 || fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) < 0)
            child_fail(p, ST_KEEPFDS, errno);
    }

    unsigned lo = 3;
    for (size_t i = 0; i < p->n_keep; i++) {
        unsigned k = (unsigned)p->keep[i];
        if (k > lo)
            close_span(lo, k - 1, p->max_fd);
        lo = k + 1;
    }
    close_span(lo, ~0U, p->max_fd);

    const spawn_rlimits *rl = p->rl;
    if ((rl->as_bytes && set_limit(RLIMIT_AS, rl->as_bytes, rl->as_bytes) != 0) ||
        (rl->cpu_s && set_limit(RLIMIT_CPU, rl->cpu_s, rl->cpu_s + 1) != 0) ||
        (rl->fsize_bytes && set_limit(RLIMIT_FSIZE, rl->fsize_bytes, rl->fsize_bytes) != 0) ||
        (rl->nproc && set_limit(RLIMIT_NPROC, rl->nproc, rl->nproc) != 0) ||
        (rl->nofile && set_limit(RLIMIT_NOFILE, rl->nofile, rl->nofile) != 0) ||
        (rl->no_core && set_limit(RLIMIT_CORE, 0, 0) != 0))
        child_fail(p, ST_RLIMIT, errno);

    if (p->pre_exec) {
        int err = p->pre_exec(p->pre_exec_ctx);
        if (err)
            child_fail(p, ST_PREEXEC, err);
    }

    static const char *const empty_env[] = {NULL};
    execve(p->argv[0], (char *const *)p->argv, (char *const *)(p->envp ? p->envp : empty_env));
    child_fail(p, ST_EXECVE, errno);
}

/* ---- the parent ------------------------------------------------------------------------------ */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Forks and execs with the given stdout/stderr fds; waits until the child has exec'd (or failed
 * to). Returns 0 and *pid, or -1 with errno, *stage set. */
static int do_spawn(const spawn_opts *o, int out_fd, int err_fd, pid_t *pid, const char **stage)
{
    *stage = NULL;
    if (!o || !o->argv || !o->argv[0]) {
        *stage = "argv";
        errno = EINVAL;
        return -1;
    }
    struct child_plan plan = {
        .argv = o->argv,
        .envp = o->envp,
        .cwd = o->cwd,
        .rl = &o->rl,
        .out_fd = out_fd,
        .err_fd = err_fd,
        .user_keep = o->keep_fds,
        .n_user_keep = o->keep_fds ? o->n_keep_fds : 0,
        .pre_exec = o->pre_exec,
        .pre_exec_ctx = o->pre_exec_ctx,
    };
    struct rlimit nf;
    plan.max_fd = (getrlimit(RLIMIT_NOFILE, &nf) == 0 && nf.rlim_cur != RLIM_INFINITY &&
                   nf.rlim_cur < 1u << 20)
                      ? (unsigned)nf.rlim_cur
                      : 1u << 16;

    int rep[2] = {-1, -1};
    int devnull = fd_high(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (devnull < 0) {
        *stage = "open /dev/null";
        return -1;
    }
    plan.in_fd = devnull;
    if (pipe2(rep, O_CLOEXEC) != 0) {
        int e = errno;
        close(devnull);
        *stage = "pipe";
        errno = e;
        return -1;
    }
    rep[0] = fd_high(rep[0]);
    rep[1] = fd_high(rep[1]);
    int *keep = malloc((plan.n_user_keep + 1) * sizeof *keep);
    if (rep[0] < 0 || rep[1] < 0 || !keep) {
        int e = rep[0] < 0 || rep[1] < 0 ? errno : ENOMEM;
        close_fd(&rep[0]);
        close_fd(&rep[1]);
        close(devnull);
        free(keep);
        *stage = keep ? "pipe" : "malloc";
        errno = e;
        return -1;
    }
    size_t nk = 0;
    for (size_t i = 0; i < plan.n_user_keep; i++)
        if (o->keep_fds[i] >= 3)
            keep[nk++] = o->keep_fds[i];
    keep[nk++] = rep[1];
    qsort(keep, nk, sizeof *keep, cmp_int);
    size_t u = 0;
    for (size_t i = 0; i < nk; i++)
        if (u == 0 || keep[u - 1] != keep[i])
            keep[u++] = keep[i];
    plan.keep = keep;
    plan.n_keep = u;
    plan.report_fd = rep[1];

    pid_t child = fork();
    if (child == 0)
        child_exec(&plan);
    int fork_errno = errno;
    close(rep[1]);
    close(devnull);
    free(keep);
    if (child < 0) {
        close(rep[0]);
        *stage = "fork";
        errno = fork_errno;
        return -1;
    }

    struct child_report r;
    ssize_t n;
    do {
        n = read(rep[0], &r, sizeof r);
    } while (n < 0 && errno == EINTR);
    close(rep[0]);
    if (n == (ssize_t)sizeof r) {
        int status;
        reap(child, &status, NULL);
        *stage = r.stage >= 0 && r.stage <= ST_EXECVE ? STAGE_NAMES[r.stage] : "child";
        errno = r.err ? r.err : EIO;
        return -1;
    }
    *pid = child;
    return 0;
}

int spawn_start(const spawn_opts *o, pid_t *pid, const char **fail)
{
    const char *stage = NULL;
    int out = -1, rc;
    if (o && o->out_fd >= 0) {
        rc = do_spawn(o, o->out_fd, o->out_fd, pid, &stage);
    } else {
        out = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (out < 0) {
            stage = "open /dev/null";
            rc = -1;
        } else {
            rc = do_spawn(o, out, out, pid, &stage);
        }
    }
    int e = errno;
    close_fd(&out);
    if (fail)
        *fail = stage;
    errno = e;
    return rc;
}

int spawn_reap(pid_t pid, bool block, spawn_status *st)
{
    if (pid <= 1) {
        errno = EINVAL;
        return -1;
    }
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int flags = WEXITED | WNOWAIT | (block ? 0 : WNOHANG);
    while (waitid(P_PID, (id_t)pid, &si, flags) != 0)
        if (errno != EINTR)
            return -1;
    if (si.si_pid == 0)
        return 0;
    kill(-pid, SIGKILL); /* the leader is a zombie still: its pgid cannot have been reused */
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (reap(pid, &status, &ru) != 0)
        return -1;
    if (st) {
        status_decode(status, &st->exit_code, &st->term_signal);
        st->rusage = ru;
    }
    return 1;
}

void spawn_kill_group(pid_t pgid, int grace_ms)
{
    if (pgid <= 1) /* kill(-1) or kill(0) would hit far too much */
        return;
    if (grace_ms > 0) {
        if (kill(-pgid, SIGTERM) != 0 && errno == ESRCH)
            return;
        int pidfd = pidfd_open_compat(pgid);
        int64_t deadline = now_ms() + grace_ms;
        for (;;) {
            int64_t left = deadline - now_ms();
            if (left <= 0)
                break;
            if (pidfd >= 0) {
                struct pollfd pf = {pidfd, POLLIN, 0};
                int r = poll(&pf, 1, (int)left);
                if (r > 0)
                    break; /* the leader has exited */
                if (r < 0 && errno != EINTR)
                    break;
                continue;
            }
            int ex = exited_nowait(pgid);
            if (ex == 1)
                break;
            if (ex < 0 && kill(-pgid, 0) != 0 && errno == ESRCH) {
                return; /* not our child, and nothing is left of the group */
            }
            struct timespec ts = {0, 5 * 1000000};
            nanosleep(&ts, NULL);
        }
        close_fd(&pidfd);
    }
    kill(-pgid, SIGKILL);
}

void spawn_result_deinit(spawn_result *res)
{
    if (!res)
        return;
    free(res->out.data);
    free(res->err.data);
    memset(res, 0, sizeof *res);
}

/* Reads one chunk from *fd into c; closes *fd at EOF or on a hard error. Returns bytes read. */
static ssize_t pump(int *fd, spawn_capture *c, char *buf, size_t bufcap)
{
    if (*fd < 0)
        return 0;
    ssize_t n = read(*fd, buf, bufcap);
    if (n > 0) {
        spawn_capture_add(c, buf, (size_t)n);
        return n;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        close_fd(fd);
    return 0;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int spawn_run(const spawn_opts *o, spawn_result *res)
{
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    size_t cap = o && o->capture_cap ? o->capture_cap : DEFAULT_CAPTURE_CAP;
    spawn_capture cap_out, cap_err;
    spawn_capture_init(&cap_out, cap);
    spawn_capture_init(&cap_err, cap);
    int64_t t0 = now_ms();

    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    const char *stage = NULL;
    int rc = 0;
    pid_t pid = -1;
    bool capture = !o || o->out_fd < 0;
    if (capture) {
        if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
            stage = "pipe";
            rc = -1;
        } else {
            for (int i = 0; i < 2; i++) {
                po[i] = fd_high(po[i]);
                pe[i] = fd_high(pe[i]);
            }
            if (po[0] < 0 || po[1] < 0 || pe[0] < 0 || pe[1] < 0 || set_nonblock(po[0]) ||
                set_nonblock(pe[0])) {
                stage = "pipe";
                rc = -1;
            }
        }
        if (rc == 0)
            rc = do_spawn(o, po[1], pe[1], &pid, &stage);
    } else {
        rc = do_spawn(o, o->out_fd, o->out_fd, &pid, &stage);
    }
    int spawn_errno = errno;
    close_fd(&po[1]);
    close_fd(&pe[1]);
    if (rc != 0) {
        close_fd(&po[0]);
        close_fd(&pe[0]);
        spawn_capture_finish(&cap_out, &res->out);
        spawn_capture_finish(&cap_err, &res->err);
        res->fail_stage = stage;
        res->fail_errno = spawn_errno;
        res->wall_ms = now_ms() - t0;
        errno = spawn_errno;
        return -1;
    }

    int pidfd = pidfd_open_compat(pid);
    int fd_out = po[0], fd_err = pe[0];
    char small[1024];
    char *buf = malloc(READ_CHUNK);
    size_t rcap = buf ? READ_CHUNK : sizeof small;
    char *rbuf = buf ? buf : small;
    int64_t deadline = o->timeout_ms > 0 ? t0 + o->timeout_ms : INT64_MAX;
    int64_t kill_at = INT64_MAX, drain_until = INT64_MAX;
    bool leader_done = false, term_sent = false, kill_sent = false;
    int grace = o->kill_grace_ms > 0 ? o->kill_grace_ms : 0;

    for (;;) {
        struct pollfd pf[3];
        int n = 0, i_out = -1, i_err = -1, i_pid = -1;
        if (fd_out >= 0) {
            i_out = n;
            pf[n++] = (struct pollfd){fd_out, POLLIN, 0};
        }
        if (fd_err >= 0) {
            i_err = n;
            pf[n++] = (struct pollfd){fd_err, POLLIN, 0};
        }
        if (!leader_done && pidfd >= 0) {
            i_pid = n;
            pf[n++] = (struct pollfd){pidfd, POLLIN, 0};
        }
        int64_t now = now_ms();
        int64_t next = drain_until;
        if (!term_sent && !leader_done && deadline < next)
            next = deadline;
        if (term_sent && !kill_sent && kill_at < next)
            next = kill_at;
        int wait = -1;
        if (next != INT64_MAX)
            wait = next - now <= 0 ? 0 : next - now > INT_MAX ? INT_MAX : (int)(next - now);
        if (!leader_done && pidfd < 0 && (wait < 0 || wait > 10))
            wait = 10; /* no pidfd: look at the leader every 10 ms */
        int pr = poll(pf, (nfds_t)n, wait);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr > 0) {
            if (i_out >= 0 && pf[i_out].revents)
                pump(&fd_out, &cap_out, rbuf, rcap);
            if (i_err >= 0 && pf[i_err].revents)
                pump(&fd_err, &cap_err, rbuf, rcap);
        }
        now = now_ms();
        if (!leader_done) {
            bool done =
                pidfd >= 0 ? (pr > 0 && i_pid >= 0 && pf[i_pid].revents) : exited_nowait(pid) != 0;
            if (done) {
                leader_done = true;
                drain_until = now + SPAWN_DRAIN_MS;
            }
        }
        if (!leader_done && !term_sent && now >= deadline) {
            res->timed_out = true;
            term_sent = true;
            kill(-pid, grace > 0 ? SIGTERM : SIGKILL);
            kill_sent = grace <= 0;
            kill_at = now + grace;
        }
        if (term_sent && !kill_sent && now >= kill_at) {
            kill(-pid, SIGKILL);
            kill_sent = true;
        }
        if (leader_done && ((fd_out < 0 && fd_err < 0) || now >= drain_until))
            break;
    }
    /* Whatever is left of the group goes now; the leader is an unreaped zombie, so the pgid is
     * still ours. Then read what the pipes still hold, without waiting. */
    kill(-pid, SIGKILL);
    for (int i = 0; i < FINAL_DRAIN_CHUNKS && fd_out >= 0; i++)
        if (pump(&fd_out, &cap_out, rbuf, rcap) <= 0)
            break;
    for (int i = 0; i < FINAL_DRAIN_CHUNKS && fd_err >= 0; i++)
        if (pump(&fd_err, &cap_err, rbuf, rcap) <= 0)
            break;
    close_fd(&fd_out);
    close_fd(&fd_err);
    close_fd(&pidfd);
    free(buf);

    int status = 0;
    reap(pid, &status, &res->rusage);
    status_decode(status, &res->exit_code, &res->term_signal);
    if (res->timed_out)
        res->exit_code = 124;
    spawn_capture_finish(&cap_out, &res->out);
    spawn_capture_finish(&cap_err, &res->err);
    res->wall_ms = now_ms() - t0;
    return 0;
}
