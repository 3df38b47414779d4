/* local_server: start, find the port of, and stop a private kgym-env (see local_server.h). */
#include "bench/local_server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/common.h"
#include "spawn.h"
#include "util/fileio.h"
#include "util/text.h"

#define START_TIMEOUT_MS 180000
/* how long a killed run's private server may take to drain: kgym-env's drain limit (660 s)
 * plus room */
#define DRAIN_WAIT_MS 900000
#define MAX_ARGS (BENCH_MAX_SERVER_ARGS + 32)

/* <dir of this binary>/<name> */
static void beside_self(const char *name, char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    text_fmt(out, cap, "%s/%s", slash ? self : ".", name);
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* The server's own reason when it exits at once: the log's trailing lines that are not JSON
 * records (its error, then perhaps a hint such as "see kgym-env serve --help"; blank lines
 * skipped), at most 3, joined by "; " into at most cap-1 bytes; "" when the log cannot be read. */
static void exit_reason(const char *log_path, char *out, size_t cap)
{
    char *text = NULL;
    size_t len = 0;
    out[0] = '\0';
    if (file_read_all(log_path, 1 << 20, &text, &len) != 0)
        return;
    const char *lines[3];
    int n = 0;
    for (char *end = text + len; n < 3 && end > text;) {
        while (end > text && (end[-1] == '\n' || end[-1] == '\r'))
            *--end = '\0';
        char *start = end;
        while (start > text && start[-1] != '\n')
            start--;
        if (start == end || *start == '{' || *start == '\0')
            break; /* the buffer's start, a JSON record, or bytes that are no message */
        lines[n++] = start;
        end = start;
    }
    size_t used = 0;
    for (int i = n - 1; i >= 0 && used + 1 < cap; i--)
        used += (size_t)snprintf(out + used, cap - used, "%s%s", lines[i], i ? "; " : "");
    free(text);
}

/* The port in the server's {"event":"listening", ..., "port":N} log line, 0 while not there. */
static int port_from_log(const char *log_path)
{
    FILE *f = fopen(log_path, "re");
    if (!f)
        return 0;
    char line[4096];
    int port = 0;
    while (!port && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"event\":\"listening\"");
        const char *q = p ? strstr(p, "\"port\":") : NULL;
        if (q)
            port = atoi(q + 7);
    }
    fclose(f);
    return port;
}

static int build_argv(const bench_opts *o, const char *bin, const char *state, const char **argv,
                      char paths[][PATH_MAX])
{
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--state-dir";
    argv[n++] = state;
    argv[n++] = "--quiet";
    argv[n++] = "--idle-timeout";
    argv[n++] = "0";
    /* the repository layout: build/kgym-env beside env/template and sandbox_profiles */
    beside_self("../env/template", paths[0], PATH_MAX);
    if (exists(paths[0])) {
        argv[n++] = "--template";
        argv[n++] = paths[0];
    }
    beside_self("../sandbox_profiles", paths[1], PATH_MAX);
    if (exists(paths[1])) {
        argv[n++] = "--sandbox-profiles";
        argv[n++] = paths[1];
    }
    if (o->kernelbench) {
        argv[n++] = "--kernelbench";
        argv[n++] = o->kernelbench;
    }
    if (o->tasks) {
        argv[n++] = "--tasks";
        argv[n++] = o->tasks;
    }
    if (o->python) {
        argv[n++] = "--sandbox-python";
        argv[n++] = o->python;
    }
    for (int i = 0; i < o->n_server_args; i++)
        argv[n++] = o->server_args[i];
    argv[n] = NULL;
    return n;
}

/* In the server's child before execve: SIGTERM it (a drain: its tasks in flight finish, then it
 * exits) when kgym-bench dies, even by SIGKILL, so that a killed run never leaves its private
 * server serving forever. The parent may have died before this line: then it exits at once. */
static int die_with_parent(void *ctx)
{
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0)
        return errno;
    if (getppid() != *(const pid_t *)ctx)
        _exit(1);
    return 0;
}

/* A killed kgym-bench's private server outlives it while it drains (its SIGTERM lets the
 * evaluations in flight finish) and holds the state dir's lock until it exits: a resumed run
 * waits for it, rather than failing to start its own server there. The caller holds --out's
 * lock, so no one else can take the state dir between this check and the new server. */
static int wait_for_state_dir(const char *state, char *err, size_t errcap)
{
    char lock[PATH_MAX + 8];
    if (!text_fmt(lock, sizeof lock, "%s/.lock", state))
        return 0; /* the server will say the path is too long */
    for (int waited = 0;; waited += 100) {
        int fd = file_lock_exclusive(lock);
        if (fd >= 0)
            close(fd);
        if (fd != -EWOULDBLOCK)
            return 0; /* free, or a problem the server will report itself */
        if (waited == 0)
            fprintf(stderr,
                    "kgym-bench: waiting for the previous private server on %s to exit (a killed "
                    "run's server finishes its tasks in flight first)\n",
                    state);
        if (bench_stopping())
            return text_fail(err, errcap, "interrupted while waiting for %s", lock);
        if (waited >= DRAIN_WAIT_MS)
            return text_fail(err, errcap, "%s is still held after %d s: is a kgym-env serving %s?",
                             lock, DRAIN_WAIT_MS / 1000, state);
        usleep(100000);
    }
}

pid_t local_server_start(const bench_opts *o, char *url, size_t urlcap, char *err, size_t errcap)
{
    char bin[PATH_MAX], state[PATH_MAX], log_path[PATH_MAX];
    if (o->server_bin)
        text_fmt(bin, sizeof bin, "%s", o->server_bin);
    else
        beside_self("kgym-env", bin, sizeof bin);
    text_fmt(state, sizeof state, "%s/server", o->out_dir);
    text_fmt(log_path, sizeof log_path, "%s/server.log", o->out_dir);
    mkdir(state, 0755);
    if (wait_for_state_dir(state, err, errcap) != 0)
        return -1;
    /* truncated only now: a draining server wrote to it until it exited */
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        text_fmt(err, errcap, "%s: %s", log_path, strerror(errno));
        return -1;
    }
    const char *argv[MAX_ARGS];
    static char paths[2][PATH_MAX];
    build_argv(o, bin, state, argv, paths);
    extern char **environ;
    pid_t parent = getpid(); /* read by the child, in its copy of this frame */
    spawn_opts so = SPAWN_OPTS_INIT;
    so.pre_exec = die_with_parent;
    so.pre_exec_ctx = &parent;
    so.argv = argv;
    so.envp = (const char *const *)environ;
    so.out_fd = fd;
    so.kill_grace_ms = 10000;
    pid_t pid;
    const char *fail = NULL;
    int rc = spawn_start(&so, &pid, &fail);
    int start_errno = errno; /* before close() */
    close(fd);
    if (rc != 0) {
        text_fmt(err, errcap, "cannot start %s: %s%s%s", bin, fail ? fail : "", fail ? ": " : "",
                 strerror(start_errno));
        return -1;
    }
    for (int waited = 0; waited < START_TIMEOUT_MS; waited += 100) {
        int port = port_from_log(log_path);
        if (port > 0) {
            text_fmt(url, urlcap, "http://127.0.0.1:%d", port);
            return pid;
        }
        spawn_status st;
        if (spawn_reap(pid, false, &st) == 1) {
            char why[512];
            exit_reason(log_path, why, sizeof why);
            text_fmt(err, errcap, "%s exited before listening%s%s (log: %s)", bin,
                     why[0] ? ": " : "", why, log_path);
            return -1;
        }
        usleep(100000);
    }
    local_server_stop(pid);
    text_fmt(err, errcap, "%s did not start listening within %d s; see %s", bin,
             START_TIMEOUT_MS / 1000, log_path);
    return -1;
}

void local_server_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    spawn_status st;
    for (int i = 0; i < 300; i++) { /* a draining server finishes its in-flight steps */
        if (spawn_reap(pid, false, &st) == 1)
            return;
        usleep(100000);
    }
    spawn_kill_group(pid, 0);
    spawn_reap(pid, true, &st);
}
