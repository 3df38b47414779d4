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
/* A filtered read consumes at most this much of a log per call (it holds it in memory while it
 * filters); a log is normally bounded far below by the file size limit. */
#define FILTER_READ_MAX (64u << 20)

typedef struct job {
    job_info info;
    int64_t start_ms;
    int grace_ms;
    char *log_path;
    uint64_t read_off; /* bytes of the log already returned by job_read_new */
    job_hook hook;
    bool log_dropped; /* finished long ago: its log was emptied to bound the episode's disk */
    bool frozen;      /* a freeze was asked of hook.on_freeze and not undone yet */
} job;

struct job_table {
    pthread_mutex_t lock;
    char *log_dir;
    int max_jobs;
    int next_id;
    job **jobs;
    size_t n, cap;
    int freeze_depth; /* job_table_freeze(on) calls not yet matched by an off */
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

/* Undoes a freeze of j, if one is pending. Lock held. */
static void thaw_locked(job *j)
{
    if (!j->frozen)
        return;
    j->frozen = false;
    if (j->hook.on_freeze)
        (void)j->hook.on_freeze(j->hook.ctx, false);
}

static void job_finish(job *j, job_status st, const spawn_status *ss)
{
    thaw_locked(j);           /* a partly frozen job that ended anyway: leave nothing frozen */
    j->hook.on_freeze = NULL; /* on_end frees ctx */
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
    if (j->frozen) {
        /* A frozen job cannot act on SIGTERM, and under the v1 freezer cannot even die of
         * SIGKILL until thawed (the reap below would wait forever): SIGKILL the group while it
         * is frozen, then thaw, so it dies without running again. What left the group dies
         * with the job's cgroup (on_end). */
        spawn_kill_group(j->info.pid, 0);
        thaw_locked(j);
        grace_ms = 0;
    }
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

job_freeze_count job_table_freeze(job_table *t, bool on)
{
    job_freeze_count c = {0, 0};
    if (!t)
        return c;
    pthread_mutex_lock(&t->lock);
    if (on) {
        t->freeze_depth++;
        reap_locked(t); /* what ended or is overdue is not frozen but reaped */
    } else {
        if (t->freeze_depth > 0 && --t->freeze_depth > 0) {
            pthread_mutex_unlock(&t->lock); /* an outer freeze still holds */
            return c;
        }
        reap_locked(t); /* what passed its limit while frozen dies without running again */
    }
    for (size_t i = 0; i < t->n; i++) {
        job *j = t->jobs[i];
        if (!on) {
            c.frozen += j->frozen;
            thaw_locked(j);
            continue;
        }
        if (j->info.status != JOB_RUNNING)
            continue;
        if (j->frozen) { /* frozen by an outer call already */
            c.frozen++;
            continue;
        }
        if (!j->hook.on_freeze) {
            c.unfrozen++;
            continue;
        }
        j->frozen = true; /* even if it fails: it may have frozen part of the job */
        if (j->hook.on_freeze(j->hook.ctx, true) == 0)
            c.frozen++;
        else
            c.unfrozen++;
    }
    pthread_mutex_unlock(&t->lock);
    return c;
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

/* Where a filtered read of len new bytes stops: at their end, but while more may follow, before
 * an unfinished last line (read whole next time) unless that line already reached LINE_KEEP_MAX
 * (it is matched by its first bytes). */
static size_t filtered_take(const char *buf, size_t len, bool more_may_follow)
{
    if (!more_may_follow || len == 0 || buf[len - 1] == '\n')
        return len;
    const char *nl = memrchr(buf, '\n', len);
    size_t tail = nl ? len - (size_t)(nl - buf) - 1 : len;
    return tail < LINE_KEEP_MAX ? len - tail : len;
}

/* A filtered read's first half: copies j's new bytes (at most FILTER_READ_MAX) into *data and
 * marks what *len of them says as consumed. Lock held. JOB_OK or JOB_E_IO. */
static int take_new_locked(job *j, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd = open(j->log_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return JOB_E_IO;
    }
    uint64_t end = (uint64_t)st.st_size;
    uint64_t prev = j->read_off > end ? 0 : j->read_off; /* log truncated: start over */
    size_t want = end - prev < FILTER_READ_MAX ? (size_t)(end - prev) : FILTER_READ_MAX;
    char *buf = malloc(want ? want : 1);
    size_t got = 0;
    while (buf && got < want) {
        ssize_t n = pread(fd, buf + got, want - got, (off_t)(prev + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (!buf)
        return JOB_E_IO;
    bool more = j->info.status == JOB_RUNNING || prev + got < end;
    *len = filtered_take(buf, got, more);
    j->read_off = prev + *len;
    *data = buf;
    return JOB_OK;
}

/* A filtered read's second half, without the lock: the lines of data the filter keeps go to c
 * (a line longer than LINE_KEEP_MAX by its first bytes). */
static void filter_lines(const char *data, size_t len, job_line_filter filter, void *ctx,
                         spawn_capture *c)
{
    for (size_t off = 0; off < len;) {
        const char *nl = memchr(data + off, '\n', len - off);
        size_t seg = nl ? (size_t)(nl - (data + off)) : len - off;
        size_t keep = seg < LINE_KEEP_MAX ? seg : LINE_KEEP_MAX;
        if (filter(data + off, keep, ctx)) {
            spawn_capture_add(c, data + off, keep);
            if (nl)
                spawn_capture_add(c, "\n", 1);
        }
        off += seg + (nl ? 1 : 0);
    }
}

/* An unfiltered read: j's new bytes stream into c (which keeps head and tail). Lock held. Sets
 * *consumed; JOB_OK or JOB_E_IO. */
static int read_plain_locked(job *j, spawn_capture *c, uint64_t *consumed)
{
    *consumed = 0;
    char *chunk = malloc(READ_CHUNK);
    int fd = open(j->log_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (!chunk || fd < 0 || fstat(fd, &st) != 0) {
        free(chunk);
        if (fd >= 0)
            close(fd);
        return JOB_E_IO;
    }
    uint64_t end = (uint64_t)st.st_size;
    uint64_t prev = j->read_off > end ? 0 : j->read_off; /* log truncated: start over */
    uint64_t off = prev;
    while (off < end) {
        size_t want = end - off < READ_CHUNK ? (size_t)(end - off) : READ_CHUNK;
        ssize_t n = pread(fd, chunk, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        spawn_capture_add(c, chunk, (size_t)n);
        off += (uint64_t)n;
    }
    close(fd);
    free(chunk);
    j->read_off = off;
    *consumed = off - prev;
    return JOB_OK;
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
    spawn_capture c;
    spawn_capture_init(&c, cap);
    uint64_t consumed = 0;
    char *data = NULL;
    size_t len = 0;
    int rc = filter ? take_new_locked(j, &data, &len) : read_plain_locked(j, &c, &consumed);
    pthread_mutex_unlock(&t->lock);
    if (filter && rc == JOB_OK) {
        /* The filter may run an agent's pattern for seconds: never under the table's lock,
         * which every call on the episode's jobs (and the reaper) needs. */
        filter_lines(data, len, filter, ctx, &c);
        consumed = len;
    }
    free(data);
    if (rc == JOB_OK) {
        spawn_capture_finish(&c, out);
        out->total = consumed; /* bytes consumed, matched or not */
        if (!out->data)
            rc = JOB_E_IO;
    }
    if (rc != JOB_OK) {
        spawn_capture_deinit(&c);
        if (!out->data)
            out->data = strdup("");
    }
    return rc;
}
