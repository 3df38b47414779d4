/* jobs: one episode's background Bash jobs. See jobs.h.
 *
 * A job is a process group started by spawn_start whose stdout+stderr go to a log file in the
 * episode's private directory. The table is guarded by one mutex: BashOutput, KillBash, Bash and
 * a reaper may use it from different threads. Jobs are never removed before the table is freed
 * (ids stay valid for the whole episode); a finished job holds no fd and no process. */
#include "tools/jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* With a line filter, a line longer than this is matched (and returned) by its first bytes. */
#define LINE_KEEP_MAX 65536
#define READ_CHUNK 65536

typedef struct job {
    job_info info;
    int64_t start_ms;
    int grace_ms;
    char *log_path;
    uint64_t read_off; /* bytes of the log already returned by job_read_new */
    job_hook hook;
    bool log_dropped; /* finished long ago: its log was emptied to bound the episode's disk */
} job;

struct job_table {
    pthread_mutex_t lock;
    char *log_dir;
    int max_jobs;
    int next_id;
    job **jobs;
    size_t n, cap;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *job_status_name(job_status st)
{
    switch (st) {
    case JOB_RUNNING:
        return "running";
    case JOB_EXITED:
        return "exited";
    case JOB_KILLED:
        return "killed";
    case JOB_TIMED_OUT:
        return "timed_out";
    }
    return "unknown";
}

/* mkdir -p (mode 0700 for what it creates). */
static int mkdirs(const char *path)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -1;
        buf[i] = c;
    }
    return 0;
}

job_table *job_table_new(const char *log_dir, int max_jobs)
{
    if (!log_dir)
        return NULL;
    job_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->log_dir = strdup(log_dir);
    if (!t->log_dir) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->max_jobs = max_jobs;
    t->next_id = 1;
    (void)mkdirs(log_dir); /* again at each start, in case it is made later */
    return t;
}

static void job_finish(job *j, job_status st, const spawn_status *ss)
{
    j->info.status = st;
    j->info.exit_code = st == JOB_TIMED_OUT ? 124 : ss->exit_code;
    j->info.term_signal = ss->term_signal;
    j->info.runtime_ms = now_ms() - j->start_ms;
    if (j->hook.on_end) {
        j->hook.on_end(j->hook.ctx);
        j->hook.on_end = NULL;
    }
}

/* Kills j's group (grace as given) and reaps it. Lock held. */
static void job_kill_locked(job *j, job_status st, int grace_ms)
{
    spawn_kill_group(j->info.pid, grace_ms);
    spawn_status ss = {0};
    if (spawn_reap(j->info.pid, true, &ss) != 1) {
        ss.exit_code = -1;
        ss.term_signal = 0;
    }
    job_finish(j, st, &ss);
}

/* Reaps ended jobs, times out overdue ones. Lock held. */
static void reap_locked(job_table *t)
{
    int64_t now = now_ms();
    for (size_t i = 0; i < t->n; i++) {
        job *j = t->jobs[i];
        if (j->info.status != JOB_RUNNING)
            continue;
        spawn_status ss = {0};
        int r = spawn_reap(j->info.pid, false, &ss);
        if (r == 1) {
            job_finish(j, JOB_EXITED, &ss);
        } else if (r < 0) { /* lost (reaped elsewhere): nothing left to wait for */
            ss.exit_code = -1;
            job_finish(j, JOB_EXITED, &ss);
        } else if (j->info.timeout_ms > 0 && now - j->start_ms >= j->info.timeout_ms) {
            job_kill_locked(j, JOB_TIMED_OUT, j->grace_ms);
        } else {
            j->info.runtime_ms = now - j->start_ms;
        }
    }
}

void job_table_reap(job_table *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    reap_locked(t);
    pthread_mutex_unlock(&t->lock);
}

static size_t running_locked(const job_table *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += t->jobs[i]->info.status == JOB_RUNNING;
    return n;
}

size_t job_table_running(job_table *t)
{
    if (!t)
        return 0;
    pthread_mutex_lock(&t->lock);
    reap_locked(t);
    size_t n = running_locked(t);
    pthread_mutex_unlock(&t->lock);
    return n;
}

void job_table_free(job_table *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        job *j = t->jobs[i];
        if (j->info.status == JOB_RUNNING)
            job_kill_locked(j, JOB_KILLED, 0);
        free(j->log_path);
        free(j);
    }
    free(t->jobs);
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_destroy(&t->lock);
    free(t->log_dir);
    free(t);
}

/* Logs live outside the workspace's quota, so only the newest finished jobs keep theirs (as
 * many as may run at once): older ones are emptied. Lock held. */
static void drop_old_logs_locked(job_table *t)
{
    size_t keep = t->max_jobs > 0 ? (size_t)t->max_jobs : 4, finished = 0;
    for (size_t i = t->n; i-- > 0;) {
        job *j = t->jobs[i];
        if (j->info.status == JOB_RUNNING || j->log_dropped)
            continue;
        if (++finished > keep) {
            if (truncate(j->log_path, 0) == 0)
                j->log_dropped = true;
        }
    }
}

int job_start(job_table *t, const spawn_opts *opts, const job_hook *hook, job_info *info,
              const char **fail)
{
    if (fail)
        *fail = NULL;
    if (!t || !opts) {
        errno = EINVAL;
        return JOB_E_SPAWN;
    }
    pthread_mutex_lock(&t->lock);
    reap_locked(t);
    drop_old_logs_locked(t);
    int rc = JOB_OK;
    job *j = NULL;
    int log_fd = -1;
    if (t->max_jobs > 0 && running_locked(t) >= (size_t)t->max_jobs) {
        rc = JOB_E_TOO_MANY;
        goto out;
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 8;
        job **nj = realloc(t->jobs, nc * sizeof *nj);
        if (!nj) {
            rc = JOB_E_IO;
            goto out;
        }
        t->jobs = nj;
        t->cap = nc;
    }
    j = calloc(1, sizeof *j);
    if (!j || asprintf(&j->log_path, "%s/bash_%d.log", t->log_dir, t->next_id) < 0) {
        if (j)
            j->log_path = NULL;
        rc = JOB_E_IO;
        errno = ENOMEM;
        goto out;
    }
    if (mkdirs(t->log_dir) != 0 ||
        (log_fd = open(j->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600)) <
            0) {
        rc = JOB_E_IO;
        if (fail)
            *fail = "log file";
        goto out;
    }
    spawn_opts o = *opts;
    o.out_fd = log_fd;
    pid_t pid;
    int64_t start = now_ms();
    if (spawn_start(&o, &pid, fail) != 0) {
        rc = JOB_E_SPAWN;
        goto out;
    }
    j->info.id = t->next_id++;
    j->info.pid = pid;
    j->info.status = JOB_RUNNING;
    j->info.exit_code = -1;
    j->info.timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 0;
    j->start_ms = start;
    j->grace_ms = opts->kill_grace_ms;
    if (hook)
        j->hook = *hook;
    t->jobs[t->n++] = j;
    if (info)
        *info = j->info;
    j = NULL;
out:;
    int saved = errno;
    if (log_fd >= 0)
        close(log_fd);
    if (j) {
        if (j->log_path && rc == JOB_E_SPAWN)
            unlink(j->log_path);
        free(j->log_path);
        free(j);
    }
    pthread_mutex_unlock(&t->lock);
    errno = saved;
    return rc;
}

static job *find_locked(job_table *t, int id)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->jobs[i]->info.id == id)
            return t->jobs[i];
    return NULL;
}

/* Locks the table, reaps what ended and finds job id. Returns it with the lock held, or NULL
 * with the lock released. */
static job *lock_and_find(job_table *t, int id)
{
    pthread_mutex_lock(&t->lock);
    reap_locked(t);
    job *j = find_locked(t, id);
    if (!j)
        pthread_mutex_unlock(&t->lock);
    return j;
}

int job_kill(job_table *t, int id, job_info *info, bool *was_running)
{
    if (was_running)
        *was_running = false;
    if (!t)
        return JOB_E_NOT_FOUND;
    job *j = lock_and_find(t, id);
    if (!j)
        return JOB_E_NOT_FOUND;
    if (j->info.status == JOB_RUNNING) {
        job_kill_locked(j, JOB_KILLED, j->grace_ms);
        if (was_running)
            *was_running = true;
    }
    if (info)
        *info = j->info;
    pthread_mutex_unlock(&t->lock);
    return JOB_OK;
}

/* Line splitting for filtered reads. */
typedef struct line_state {
    char *buf;
    size_t len; /* bytes of the current line kept (at most LINE_KEEP_MAX) */
    job_line_filter filter;
    void *ctx;
    spawn_capture *cap;
} line_state;

static void line_emit(line_state *ls, bool newline)
{
    if (ls->filter(ls->buf, ls->len, ls->ctx)) {
        spawn_capture_add(ls->cap, ls->buf, ls->len);
        if (newline)
            spawn_capture_add(ls->cap, "\n", 1);
    }
    ls->len = 0;
}

static void line_feed(line_state *ls, const char *p, size_t n)
{
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t seg = nl ? (size_t)(nl - p) : n;
        size_t room = LINE_KEEP_MAX - ls->len;
        size_t k = seg < room ? seg : room;
        memcpy(ls->buf + ls->len, p, k);
        ls->len += k;
        if (!nl)
            return;
        line_emit(ls, true);
        p = nl + 1;
        n -= seg + 1;
    }
}

int job_read_new(job_table *t, int id, size_t cap, job_line_filter filter, void *ctx,
                 job_info *info, spawn_stream *out)
{
    memset(out, 0, sizeof *out);
    if (!t)
        return JOB_E_NOT_FOUND;
    job *j = lock_and_find(t, id);
    if (!j)
        return JOB_E_NOT_FOUND;
    if (info)
        *info = j->info;
    bool running = j->info.status == JOB_RUNNING;
    int rc = JOB_OK;
    spawn_capture c;
    spawn_capture_init(&c, cap);
    char *chunk = malloc(READ_CHUNK);
    line_state ls = {.filter = filter, .ctx = ctx, .cap = &c};
    if (filter)
        ls.buf = malloc(LINE_KEEP_MAX);
    int fd = open(j->log_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (!chunk || (filter && !ls.buf) || fd < 0 || fstat(fd, &st) != 0) {
        rc = JOB_E_IO;
        goto done;
    }
    uint64_t end = (uint64_t)st.st_size;
    uint64_t off = j->read_off > end ? 0 : j->read_off; /* log truncated: start over */
    uint64_t consumed_to;
    while (off < end) {
        size_t want = end - off < READ_CHUNK ? (size_t)(end - off) : READ_CHUNK;
        ssize_t n = pread(fd, chunk, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (filter)
            line_feed(&ls, chunk, (size_t)n);
        else
            spawn_capture_add(&c, chunk, (size_t)n);
        off += (uint64_t)n;
    }
    consumed_to = off;
    if (filter && ls.len) {
        if (running && ls.len < LINE_KEEP_MAX)
            consumed_to -= ls.len; /* an unfinished line: read it whole next time */
        else
            line_emit(&ls, false);
    }
    {
        uint64_t prev = j->read_off > end ? 0 : j->read_off;
        j->read_off = consumed_to;
        spawn_capture_finish(&c, out);
        out->total = consumed_to - prev; /* bytes consumed, matched or not */
        if (!out->data)
            rc = JOB_E_IO;
    }
done:
    if (fd >= 0)
        close(fd);
    free(chunk);
    free(ls.buf);
    if (rc != JOB_OK) {
        spawn_capture_deinit(&c);
        if (!out->data)
            out->data = strdup("");
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}
