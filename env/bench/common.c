/* common: see common.h. */
#include "bench/common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/local_server.h"
#include "trajectory.h"
#include "util/fileio.h"
#include "util/text.h"

static atomic_int g_stop; /* SIGINT/SIGTERM: finish the tasks in flight, start no new one */
/* the private kgym-env this process started (0: none), for a second interrupt to stop */
static volatile sig_atomic_t g_own_server;

bool bench_stopping(void)
{
    return atomic_load(&g_stop) != 0;
}

/* Only async-signal-safe calls here. The first interrupt lets the tasks in flight finish (a
 * measurement may take tens of seconds); a second one stops at once: every finished result is
 * already on disk (each write is a whole line or an atomic rename), the running tasks are
 * evaluated again on resume, and the private server drains them and exits by itself. */
static void on_signal(int sig)
{
    (void)sig;
    static const char first[] = "\nkgym-bench: stopping after the tasks in flight (every "
                                "finished result is kept); interrupt again to stop now\n";
    static const char second[] = "\nkgym-bench: stopped; run the same command again to resume\n";
    if (atomic_exchange(&g_stop, 1) == 0) {
        ssize_t w = write(STDERR_FILENO, first, sizeof first - 1);
        (void)w;
        return;
    }
    ssize_t w = write(STDERR_FILENO, second, sizeof second - 1);
    (void)w;
    if (g_own_server > 0)
        kill((pid_t)g_own_server, SIGTERM);
    _exit(EXIT_INTERRUPTED);
}

void bench_install_signals(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* mkdir -p */
int bench_make_dirs(const char *path)
{
    char p[PATH_MAX];
    if (path[0] == '\0') { /* the loop below would start past the terminator */
        errno = EINVAL;
        return -1;
    }
    if (!text_fmt(p, sizeof p, "%s", path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    }
    if (mkdir(p, 0755) == 0)
        return 0;
    struct stat st;
    if (errno != EEXIST || stat(p, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) { /* a file of that name: said as such, not at the lock file */
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* ---- the server --------------------------------------------------------------------------- */

int bench_server_connect(const bench_opts *o, bench_server *sc)
{
    sc->own_pid = -1;
    if (o->server_url) {
        text_fmt(sc->url, sizeof sc->url, "%s", o->server_url);
        return 0;
    }
    char err[1024];
    fprintf(stderr, "kgym-bench: starting kgym-env (log: %s/server.log)\n", o->out_dir);
    sc->own_pid = local_server_start(o, sc->url, sizeof sc->url, err, sizeof err);
    if (sc->own_pid < 0) {
        fprintf(stderr, "kgym-bench: %s\n", err);
        return -1;
    }
    g_own_server = sc->own_pid;
    return 0;
}

void bench_server_disconnect(bench_server *sc)
{
    g_own_server = 0;
    if (sc->own_pid > 0)
        local_server_stop(sc->own_pid);
}

/* ---- task selection ----------------------------------------------------------------------- */

static bool selected(const bench_opts *o, const char *id, int level)
{
    if (o->levels_given && (level < 0 || level > BENCH_MAX_LEVEL || !o->level_on[level]))
        return false;
    if (o->n_only == 0)
        return true;
    for (int i = 0; i < o->n_only; i++)
        if (strcmp(o->only[i], id) == 0)
            return true;
    return false;
}

/* One selected task: {task_id, name, level, code_sha256?}. code_sha256 names the reference the
 * variant evaluates (the CPU variant's own code where the task has one); a server older than
 * the digests sends none. */
static json_t *task_entry(const bench_opts *o, const json_t *t, const char *id, int level)
{
    const char *name = json_string_value(json_object_get(t, "name"));
    json_t *e =
        json_pack("{s:s, s:s, s:i}", "task_id", id, "name", name ? name : "", "level", level);
    const json_t *sha = json_object_get(t, "code_sha256");
    const json_t *sha_cpu = json_object_get(t, "code_cpu_sha256");
    if (strcmp(o->variant, "cpu") == 0 && json_is_string(sha_cpu))
        sha = sha_cpu;
    if (json_is_string(sha))
        json_object_set(e, "code_sha256", (json_t *)sha);
    return e;
}

/* The server's catalogue, filtered: an array of task_entry's. NULL on error (printed). */
json_t *bench_fetch_tasks(bench_http *h, const bench_opts *o)
{
    char err[1024];
    json_t *reply = NULL;
    const char *path = o->kernelbench && !o->tasks ? "/v1/tasks?suite=kernelbench&limit=1000000"
                                                   : "/v1/tasks?limit=1000000";
    long st = bench_http_json(h, "GET", path, NULL, &reply, err, sizeof err);
    json_t *all = json_object_get(reply, "tasks");
    if (st != 200 || !json_is_array(all)) {
        fprintf(stderr, "kgym-bench: cannot list the server's tasks: %s\n",
                st < 0 ? err : bench_http_error_message(reply));
        json_decref(reply);
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(all, i, t)
    {
        const char *id = json_string_value(json_object_get(t, "id"));
        int level = (int)json_integer_value(json_object_get(t, "level"));
        const char *suite = json_string_value(json_object_get(t, "suite"));
        /* --tasks on a server that also serves KernelBench: the task store's tasks only */
        bool other_suite =
            o->tasks && !o->kernelbench && suite && strcmp(suite, "kernelbench") == 0;
        if (id && !other_suite && selected(o, id, level))
            json_array_append_new(out, task_entry(o, t, id, level));
    }
    json_decref(reply);
    for (int k = 0; k < o->n_only; k++) {
        bool found = false;
        json_array_foreach(out, i, t) found |=
            strcmp(json_string_value(json_object_get(t, "task_id")), o->only[k]) == 0;
        if (!found)
            fprintf(stderr, "kgym-bench: warning: --only %s: no such task (or not in --levels)\n",
                    o->only[k]);
    }
    return out;
}

bool bench_warmup_out_of_memory(const json_t *reply)
{
    const char *state = json_string_value(json_object_get(reply, "warmup"));
    const char *why = json_string_value(json_object_get(reply, "compile_unavailable"));
    return state && why && strcmp(state, "compile_failed") == 0 &&
           (strstr(why, "OutOfMemoryError") || strcasestr(why, "out of memory"));
}

double bench_num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Parallel evaluations: one per GPU the server has (its leases keep them exclusive), 1 on CPU. */
int bench_default_jobs(bench_http *h, const bench_opts *o)
{
    if (strcmp(o->variant, "cpu") == 0)
        return 1;
    char err[256];
    json_t *reply = NULL;
    long st = bench_http_json(h, "GET", "/v1/health", NULL, &reply, err, sizeof err);
    size_t n = st == 200 ? json_array_size(json_object_get(reply, "gpus")) : 0;
    json_decref(reply);
    return n > 0 ? (int)n : 1;
}

/* Through write_file_atomic (a per-thread temp file, fdatasync'ed before the rename, the folder
 * fsync'ed after it): a crash or power loss leaves the old file or the new one, never a
 * truncated one, which the next run would refuse to read. */
int bench_write_json(const char *path, const json_t *v)
{
    char *text = json_dumps(v, JSON_INDENT(1) | JSON_REAL_PRECISION(8));
    if (!text) {
        errno = ENOMEM;
        return -1;
    }
    int rc = write_file_atomic(path, text, strlen(text), DURABILITY_FSYNC);
    free(text);
    if (rc != 0) {
        errno = -rc;
        return -1;
    }
    return 0;
}

int bench_lock_exclusive(const char *lock_path, const char *what, char *err, size_t errcap)
{
    int fd = file_lock_exclusive(lock_path);
    if (fd >= 0)
        return fd;
    if (fd == -EWOULDBLOCK)
        return text_fail(err, errcap,
                         "%s is in use by another kgym-bench (lock %s held); wait for it to "
                         "finish or choose another one",
                         what, lock_path);
    return text_fail(err, errcap, "cannot lock %s: %s", lock_path, strerror(-fd));
}

int bench_lock_out_dir(const char *out_dir)
{
    char lock_path[PATH_MAX + 16], what[PATH_MAX + 32], err[PATH_MAX * 2 + 256];
    text_fmt(lock_path, sizeof lock_path, "%s/.lock", out_dir);
    text_fmt(what, sizeof what, "results folder %s", out_dir);
    int fd = bench_lock_exclusive(lock_path, what, err, sizeof err);
    if (fd < 0)
        fprintf(stderr, "kgym-bench: %s\n", err);
    return fd;
}
