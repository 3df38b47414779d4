/* probe: one raw system call (or a short sequence) per subcommand, with an exact verdict.
 *
 * Built on the host by the sandbox test suite, uploaded into an episode's workspace and run
 * there through Bash; the same binary also runs directly on the host as the unconfined control.
 * Every subcommand prints one line:
 *
 *     <name> OK [detail]        the call succeeded
 *     <name> <ERRNO> [detail]   it failed with that errno (EPERM, ENOSYS, ...)
 *
 * and exits 0, so the test reads the verdict and never guesses from an exit status.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/userfaultfd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static const char *ename(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

/* Prints the verdict of a call that returned rc (< 0: failed with errno e). */
static void verdict(const char *name, long rc, int e, const char *detail)
{
    printf("%s %s%s%s\n", name, rc >= 0 ? "OK" : ename(e), detail ? " " : "", detail ? detail : "");
    fflush(stdout);
}

#define CALL(name, expr)                                                                           \
    do {                                                                                           \
        errno = 0;                                                                                 \
        long rc_ = (long)(expr);                                                                   \
        verdict(name, rc_, errno, NULL);                                                           \
    } while (0)

/* A child that only sleeps, for the attach/read probes; killed by the caller. */
static pid_t sleeper(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;)
            pause();
    }
    usleep(20000);
    return pid;
}

static void reap(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int family(const char *s)
{
    if (!strcmp(s, "unix"))
        return AF_UNIX;
    if (!strcmp(s, "inet"))
        return AF_INET;
    if (!strcmp(s, "inet6"))
        return AF_INET6;
    if (!strcmp(s, "netlink"))
        return AF_NETLINK;
    if (!strcmp(s, "packet"))
        return AF_PACKET;
    if (!strcmp(s, "vsock"))
        return AF_VSOCK;
    if (!strcmp(s, "alg"))
        return AF_ALG;
    return -1;
}

static int socktype(const char *s)
{
    if (!strcmp(s, "stream"))
        return SOCK_STREAM;
    if (!strcmp(s, "dgram"))
        return SOCK_DGRAM;
    if (!strcmp(s, "raw"))
        return SOCK_RAW;
    return -1;
}

/* ---- network ------------------------------------------------------------------------------- */

static void p_socket(const char *fam, const char *type)
{
    char name[64];
    snprintf(name, sizeof name, "socket_%s_%s", fam, type);
    int proto = !strcmp(fam, "packet")                           ? htons(0x0003 /* ETH_P_ALL */)
                : (!strcmp(fam, "inet") && !strcmp(type, "raw")) ? IPPROTO_ICMP
                                                                 : 0;
    errno = 0;
    int fd = socket(family(fam), socktype(type), proto);
    verdict(name, fd, errno, NULL);
}

static void p_connect_tcp(const char *ip, int port)
{
    errno = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        verdict("connect_tcp", -1, errno, "(socket)");
        return;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    errno = 0;
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    verdict("connect_tcp", rc, errno, "(connect)");
}

/* connect to an abstract unix socket "\0name" */
static void p_connect_abstract(const char *name)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) {
        verdict("connect_abstract", -1, errno, "(socket)");
        return;
    }
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(a.sun_path + 1, name, n);
    errno = 0;
    int rc = connect(fd, (struct sockaddr *)&a,
                     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
    verdict("connect_abstract", rc, errno, "(connect)");
}

/* ---- other processes ------------------------------------------------------------------------ */

static void p_ptrace_pid(pid_t pid)
{
    errno = 0;
    long rc = ptrace(PTRACE_ATTACH, pid, 0, 0);
    verdict("ptrace_attach_pid", rc, errno, NULL);
    if (rc == 0) {
        waitpid(pid, NULL, __WALL);
        ptrace(PTRACE_DETACH, pid, 0, 0);
    }
}

static void p_ptrace_child(void)
{
    pid_t c = sleeper();
    errno = 0;
    long rc = ptrace(PTRACE_ATTACH, c, 0, 0);
    verdict("ptrace_attach_child", rc, errno, NULL);
    reap(c);
    /* and the traceme flavour: a child asking to be traced */
    pid_t t = fork();
    if (t == 0) {
        errno = 0;
        long r = ptrace(PTRACE_TRACEME, 0, 0, 0);
        _exit(r == 0 ? 0 : (errno & 0x7f) + 1);
    }
    int st = 0;
    waitpid(t, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    verdict("ptrace_traceme", code == 0 ? 0 : -1, code - 1, NULL);
}

/* process_vm_readv of a child's memory: a variable whose value we know */
static volatile uint64_t marker = 0x6b67796d70726f62ULL; /* "kgymprob" */

static void p_vmread_child(void)
{
    pid_t c = sleeper();
    uint64_t got = 0;
    struct iovec local = {&got, sizeof got}, remote = {(void *)&marker, sizeof marker};
    errno = 0;
    ssize_t n = process_vm_readv(c, &local, 1, &remote, 1, 0);
    verdict("process_vm_readv", n, errno,
            n == sizeof got && got == marker ? "(read the marker)" : NULL);
    reap(c);
}

static void p_vmread_pid(pid_t pid)
{
    char buf[16];
    struct iovec local = {buf, sizeof buf}, remote = {(void *)0x400000, sizeof buf};
    errno = 0;
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    /* EFAULT/EIO mean the kernel let us at the process (the address was just wrong) */
    verdict("process_vm_readv_pid", n, errno, NULL);
}

/* open + read /proc/PID/mem at the address of a mapping of that process */
static void p_procmem(const char *pidstr)
{
    pid_t child = 0;
    char path[64];
    if (!strcmp(pidstr, "child")) {
        child = sleeper();
        snprintf(path, sizeof path, "/proc/%d/mem", (int)child);
    } else {
        snprintf(path, sizeof path, "/proc/%s/mem", pidstr);
    }
    errno = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        verdict("proc_mem", -1, errno, "(open)");
    } else {
        /* the first mapping of the target, from its maps file */
        char maps[64], line[256];
        unsigned long lo = 0;
        snprintf(maps, sizeof maps, "/proc/%s/maps", child ? "self" : pidstr);
        if (child)
            snprintf(maps, sizeof maps, "/proc/%d/maps", (int)child);
        FILE *f = fopen(maps, "r");
        if (f && fgets(line, sizeof line, f))
            lo = strtoul(line, NULL, 16);
        if (f)
            fclose(f);
        char buf[16];
        errno = 0;
        ssize_t n = lo ? pread(fd, buf, sizeof buf, (off_t)lo) : -1;
        if (!lo && errno == 0)
            errno = EACCES; /* maps unreadable */
        verdict("proc_mem", n, errno, "(read)");
        close(fd);
    }
    if (child)
        reap(child);
}

static void p_kill(pid_t pid, int sig)
{
    CALL("kill", kill(pid, sig));
}

/* ---- namespaces, mounts, kernel objects ---------------------------------------------------- */

static void p_unshare(void)
{
    CALL("unshare_user", unshare(CLONE_NEWUSER));
    CALL("unshare_mount", unshare(CLONE_NEWNS));
    CALL("unshare_net", unshare(CLONE_NEWNET));
    CALL("unshare_pid", unshare(CLONE_NEWPID));
}

static void p_clone_newuser(void)
{
    errno = 0;
    long rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (rc == 0)
        _exit(0);
    if (rc > 0)
        waitpid((pid_t)rc, NULL, 0);
    verdict("clone_newuser", rc, errno, NULL);
}

static void p_clone3(void)
{
    struct {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    } args = {.exit_signal = SIGCHLD};
    errno = 0;
    long rc = syscall(435 /* clone3 */, &args, sizeof args);
    if (rc == 0)
        _exit(0);
    if (rc > 0)
        waitpid((pid_t)rc, NULL, 0);
    verdict("clone3", rc, errno, NULL);
}

static void p_setns(void)
{
    int fd = open("/proc/self/ns/net", O_RDONLY);
    CALL("setns", setns(fd, 0));
}

/* mount a tmpfs on dir; on the host the caller runs it in a private mount namespace */
static void p_mount(const char *dir)
{
    errno = 0;
    int rc = mount("none", dir, "tmpfs", 0, "size=1M");
    verdict("mount", rc, errno, NULL);
    if (rc == 0)
        umount2(dir, MNT_DETACH);
    CALL("fsopen", syscall(430 /* fsopen */, "tmpfs", 0));
    CALL("open_tree", syscall(428 /* open_tree */, AT_FDCWD, "/", 1 /* OPEN_TREE_CLONE */));
    CALL("chroot", chroot("/"));
    CALL("pivot_root", syscall(SYS_pivot_root, "/", "/"));
}

static void p_keyctl(void)
{
    CALL("keyctl", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1));
    CALL("add_key", syscall(SYS_add_key, "user", "kgym-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING));
    CALL("request_key", syscall(SYS_request_key, "user", "kgym-probe", NULL, 0));
}

static void p_bpf(void)
{
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.map_type = BPF_MAP_TYPE_ARRAY;
    a.key_size = 4;
    a.value_size = 4;
    a.max_entries = 1;
    CALL("bpf", syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a));
}

static void p_perf(void)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    CALL("perf_event_open", syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
}

static void p_io_uring(void)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    CALL("io_uring_setup", syscall(SYS_io_uring_setup, 8, &p));
}

static void p_userfaultfd(void)
{
    CALL("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
}

/* ---- terminals ---------------------------------------------------------------------------- */

/* TIOCSTI on an fd that is no terminal: the driver would say ENOTTY, the filter EPERM. */
static void p_tiocsti_fd(const char *path)
{
    int fd = open(path, O_RDWR | O_NOCTTY);
    char c = 'x';
    CALL("tiocsti", ioctl(fd, TIOCSTI, &c));
    CALL("tiocsti_hi", syscall(SYS_ioctl, fd, (0x123UL << 32) | TIOCSTI, &c));
    int sub = 0;
    CALL("tioclinux", ioctl(fd, TIOCLINUX, &sub));
    close(fd);
}

/* A pty opened here: inject a byte with TIOCSTI on the slave, read it back on the master. */
static void p_tiocsti_pty(void)
{
    errno = 0;
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0) {
        verdict("openpt", -1, errno, NULL);
        return;
    }
    verdict("openpt", 0, 0, NULL);
    grantpt(m);
    unlockpt(m);
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    if (s < 0) {
        verdict("tiocsti_pty", -1, errno, "(open slave)");
        return;
    }
    /* raw mode so the injected byte is readable at once */
    struct termios t;
    tcgetattr(s, &t);
    cfmakeraw(&t);
    tcsetattr(s, TCSANOW, &t);
    char c = 'Z';
    errno = 0;
    int rc = ioctl(s, TIOCSTI, &c);
    char got[8] = "";
    if (rc == 0) {
        /* TIOCSTI pushes the byte into the slave's input queue: the slave reads it */
        fcntl(s, F_SETFL, O_NONBLOCK);
        usleep(20000);
        ssize_t n = read(s, got, 1);
        got[n > 0 ? n : 0] = '\0';
    }
    char detail[32];
    snprintf(detail, sizeof detail, "(read back '%s')", got);
    verdict("tiocsti_pty", rc, errno, rc == 0 ? detail : NULL);
}

/* ---- identity ----------------------------------------------------------------------------- */

static void p_ids(void)
{
    uid_t r, e, s;
    getresuid(&r, &e, &s);
    printf("ids ruid=%u euid=%u suid=%u\n", (unsigned)r, (unsigned)e, (unsigned)s);
    CALL("setuid0", setuid(0));
    CALL("setgid0", setgid(0));
}

/* ---- files -------------------------------------------------------------------------------- */

/* Swaps a and b with renameat2(RENAME_EXCHANGE) as fast as it can until stop exists or
 * seconds pass; prints how many swaps it made. */
static void p_exchange(const char *a, const char *b, const char *stop, int seconds)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long swaps = 0, fails = 0;
    int last = 0;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0)
                swaps++;
            else {
                fails++;
                last = errno;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= seconds || access(stop, F_OK) == 0)
            break;
    }
    char detail[96];
    snprintf(detail, sizeof detail, "swaps=%ld fails=%ld last=%s", swaps, fails,
             last ? ename(last) : "-");
    verdict("exchange", swaps > 0 ? 0 : -1, last, detail);
}

/* Touches mb MiB of anonymous memory, page by page; prints how far it got. */
static void p_touch(long mb)
{
    long page = sysconf(_SC_PAGESIZE);
    for (long i = 0; i < mb; i++) {
        char *p = malloc(1 << 20);
        if (!p) {
            verdict("touch", -1, ENOMEM, NULL);
            return;
        }
        for (long o = 0; o < (1 << 20); o += page)
            p[o] = 1;
    }
    char d[32];
    snprintf(d, sizeof d, "(%ld MiB)", mb);
    verdict("touch", 0, 0, d);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: probe SUBCOMMAND [ARGS]\n");
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "socket") && argc == 4)
        p_socket(argv[2], argv[3]);
    else if (!strcmp(c, "connect_tcp") && argc == 4)
        p_connect_tcp(argv[2], atoi(argv[3]));
    else if (!strcmp(c, "connect_abstract") && argc == 3)
        p_connect_abstract(argv[2]);
    else if (!strcmp(c, "ptrace_pid") && argc == 3)
        p_ptrace_pid(atoi(argv[2]));
    else if (!strcmp(c, "ptrace_child"))
        p_ptrace_child();
    else if (!strcmp(c, "vmread_child"))
        p_vmread_child();
    else if (!strcmp(c, "vmread_pid") && argc == 3)
        p_vmread_pid(atoi(argv[2]));
    else if (!strcmp(c, "procmem") && argc == 3)
        p_procmem(argv[2]);
    else if (!strcmp(c, "kill") && argc == 4)
        p_kill(atoi(argv[2]), atoi(argv[3]));
    else if (!strcmp(c, "unshare"))
        p_unshare();
    else if (!strcmp(c, "clone_newuser"))
        p_clone_newuser();
    else if (!strcmp(c, "clone3"))
        p_clone3();
    else if (!strcmp(c, "setns"))
        p_setns();
    else if (!strcmp(c, "mount") && argc == 3)
        p_mount(argv[2]);
    else if (!strcmp(c, "keyctl"))
        p_keyctl();
    else if (!strcmp(c, "bpf"))
        p_bpf();
    else if (!strcmp(c, "perf"))
        p_perf();
    else if (!strcmp(c, "io_uring"))
        p_io_uring();
    else if (!strcmp(c, "userfaultfd"))
        p_userfaultfd();
    else if (!strcmp(c, "tiocsti_fd") && argc == 3)
        p_tiocsti_fd(argv[2]);
    else if (!strcmp(c, "tiocsti_pty"))
        p_tiocsti_pty();
    else if (!strcmp(c, "ids"))
        p_ids();
    else if (!strcmp(c, "exchange") && argc == 6)
        p_exchange(argv[2], argv[3], argv[4], atoi(argv[5]));
    else if (!strcmp(c, "touch") && argc == 3)
        p_touch(atol(argv[2]));
    else {
        fprintf(stderr, "probe: unknown subcommand or arguments: %s\n", c);
        return 2;
    }
    return 0;
}
