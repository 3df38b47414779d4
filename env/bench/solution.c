/* solution: where a task's solution lies and what to upload (see solution.h).
 *
 * Solutions are agent-written folders, so nothing in them is trusted to stay inside them: every
 * path below the solutions folder is opened with openat2(RESOLVE_NO_SYMLINKS) (open_nofollow),
 * and a symlink met anywhere is refused rather than followed.
 * The solutions folder itself is resolved once with realpath(): its own path is the user's. */
#include "bench/solution.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/safeopen.h"
#include "util/strbuf.h"
#include "util/text.h"

#define SYMLINK_WHY                                                                                \
    "a symlink; kgym-bench follows none in a solution (it could upload files from outside the "    \
    "solutions folder): put the files themselves there"
#define NOT_UTF8_WHY "the name is not valid UTF-8 (shown with \\xNN for its bad bytes): rename it"

/* ---- messages ------------------------------------------------------------------------------ */

/* text_fail for messages that name files: their names may not be UTF-8, so they are escaped. */
static int refuse(char *err, size_t errcap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(char *err, size_t errcap, const char *fmt, ...)
{
    char raw[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    if (err)
        text_escape_utf8(raw, err, errcap);
    return -1;
}

/* The message for a path that could not be opened (errno set by open_nofollow): the failing
 * part is path's first len bytes, shown after dir ("" for none). */
static int open_failure(const char *dir, const char *path, size_t len, char *err, size_t errcap)
{
    int e = errno;
    return refuse(err, errcap, "%s%s%.*s: %s", dir, dir[0] ? "/" : "", (int)len, path,
                  e == ELOOP ? SYMLINK_WHY : strerror(e));
}

static bool is_utf8_name(const char *name)
{
    return text_is_utf8(name, strlen(name));
}

/* ---- opening without following symlinks ---------------------------------------------------- */

/* The length of path's prefix that ends with its component at p (p inside path). */
static size_t prefix_through(const char *path, const char *p)
{
    return (size_t)(p + strcspn(p, "/") - path);
}

/* Why open_nofollow failed, for the message: the length of path's shortest prefix that is a
 * symlink (errno ELOOP), not a folder though more follows (ENOTDIR) or cannot be looked at (its
 * errno), else all of path with errno kept. A second look after the failed open: only the
 * message depends on it. */
static size_t failing_prefix(int dirfd, const char *path)
{
    int e = errno;
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len >= sizeof buf) {
        errno = e;
        return len;
    }
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        size_t n = prefix_through(path, p);
        memcpy(buf, path, n);
        buf[n] = '\0';
        struct stat st;
        if (fstatat(dirfd, buf, &st, AT_SYMLINK_NOFOLLOW) != 0)
            return n; /* errno: why this component is not there */
        if (S_ISLNK(st.st_mode)) {
            errno = ELOOP;
            return n;
        }
        p = path + n;
        if (*p && !S_ISDIR(st.st_mode)) { /* a file where a folder was expected */
            errno = ENOTDIR;
            return n;
        }
    }
    errno = e;
    return len;
}

/* Opens path below the folder dirfd (an absolute path: from "/") with flags, never through a
 * symlink anywhere on it: the kernel resolves it with RESOLVE_NO_SYMLINKS (O_NOFOLLOW alone
 * guards only the last component). A ".." component is refused: nothing climbs above the folder
 * it starts from. Returns the fd, or -1 with errno (ELOOP: a symlink; EINVAL: a "..") and
 * *failed_len, the length of the prefix of path that ends with the component that failed. */
static int open_nofollow(int dirfd, const char *path, int flags, size_t *failed_len)
{
    for (const char *p = path; *p; p += strcspn(p, "/")) {
        while (*p == '/')
            p++;
        if (strncmp(p, "..", 2) == 0 && (p[2] == '/' || p[2] == '\0')) {
            *failed_len = prefix_through(path, p);
            errno = EINVAL;
            return -1;
        }
    }
    int fd = safeopen_at(dirfd, path[0] ? path : ".", flags, 0, RESOLVE_NO_SYMLINKS);
    if (fd >= 0)
        return fd;
    errno = -fd;
    *failed_len = failing_prefix(dirfd, path);
    return -1;
}

int solution_check_support(char *err, size_t errcap)
{
    int fd = safeopen_at(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0, RESOLVE_NO_SYMLINKS);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    return text_fail(err, errcap,
                     "this kernel refuses openat2 (%s), which kgym-bench needs to read solutions "
                     "without following symlinks: Linux 5.6 or later, and a container seccomp "
                     "profile that allows openat2",
                     strerror(-fd));
}

/* ---- the lookup ---------------------------------------------------------------------------- */

/* "kb/L2/17" -> level 2, problem 17; 0 when the id is not a KernelBench one. */
static int kb_id(const char *id, int *level, int *problem)
{
    char tail;
    return sscanf(id, "kb/L%d/%d%c", level, problem, &tail) == 2 ? 1 : 0;
}

/* What a lookup found, relative to the solutions folder: one is the solution, several are
 * refused as ambiguous (no order among them is meaningful). */
typedef struct candidate {
    char *rel;
    bool folder;
} candidate;

typedef struct candidates {
    candidate *v;
    int n;
} candidates;

static int add_candidate(candidates *c, const char *rel, bool folder, char *err, size_t errcap)
{
    candidate *v = realloc(c->v, (size_t)(c->n + 1) * sizeof *v);
    if (!v)
        return refuse(err, errcap, "out of memory");
    c->v = v;
    if (!(v[c->n].rel = strdup(rel)))
        return refuse(err, errcap, "out of memory");
    v[c->n++].folder = folder;
    return 0;
}

static void free_candidates(candidates *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->v[i].rel);
    free(c->v);
}

static int by_rel(const void *a, const void *b)
{
    return strcmp(((const candidate *)a)->rel, ((const candidate *)b)->rel);
}

static int by_number(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    long nx = strtol(x, NULL, 10), ny = strtol(y, NULL, 10);
    return nx != ny ? (nx < ny ? -1 : 1) : strcmp(x, y);
}

/* Appends a state: the workspace rel, or its snapshot (a name under rel/snapshots/). */
static int add_state(solution *out, const char *real_root, const char *rel, const char *snapshot,
                     char *err, size_t errcap)
{
    char *to = out->state[out->n_states];
    bool fits = snapshot ? text_fmt(to, PATH_MAX, "%s/%s/snapshots/%s", real_root, rel, snapshot)
                         : text_fmt(to, PATH_MAX, "%s/%s", real_root, rel);
    if (!fits)
        return refuse(err, errcap, "%s/%s%s%s: path too long", real_root, rel,
                      snapshot ? "/snapshots/" : "", snapshot ? snapshot : "");
    out->n_states++;
    return 0;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The sub-folders of the open folder d (snapshots/ of the workspace rel), all of them, sorted by
 * number. A symlink among them, or a name that is not UTF-8, is refused. */
static int read_snapshot_names(DIR *d, const char *rel, char ***names_out, int *n_out, char *err,
                               size_t errcap)
{
    char **names = NULL;
    int n = 0, rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            /* gone since readdir: fine; unreadable: a snapshot would silently go missing */
            if (errno != ENOENT)
                rc = refuse(err, errcap, "%s/snapshots/%s: %s", rel, e->d_name, strerror(errno));
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            rc = refuse(err, errcap, "%s/snapshots/%s: " SYMLINK_WHY, rel, e->d_name);
        } else if (S_ISDIR(st.st_mode) && !is_utf8_name(e->d_name)) {
            rc = refuse(err, errcap, "%s/snapshots/%s: " NOT_UTF8_WHY, rel, e->d_name);
        } else if (S_ISDIR(st.st_mode)) {
            char **more = realloc(names, (size_t)(n + 1) * sizeof *names);
            if (more)
                names = more;
            if (!more || !(names[n] = strdup(e->d_name)))
                rc = refuse(err, errcap, "out of memory");
            else
                n++;
        }
    }
    if (rc == 0)
        qsort(names, (size_t)n, sizeof *names, by_number);
    *names_out = names;
    *n_out = n;
    return rc;
}

/* The snapshots/<n>/ folders of the workspace ws (rel), every one, in numeric order. More than
 * SOLUTION_MAX_SNAPSHOTS are refused as a whole: evaluating a subset would pay the best of that
 * subset, not of the trajectory, and nothing in the table would show it. */
static int add_snapshots(int ws, const char *real_root, const char *rel, solution *out, char *err,
                         size_t errcap)
{
    size_t bad;
    int fd = open_nofollow(ws, "snapshots", O_RDONLY | O_DIRECTORY, &bad);
    if (fd < 0) /* no snapshots/ folder (or a file by that name): one workspace */
        return errno == ENOENT || errno == ENOTDIR
                   ? 0
                   : open_failure(rel, "snapshots", bad, err, errcap);
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno; /* close may change it */
        close(fd);
        return refuse(err, errcap, "%s/snapshots: %s", rel, strerror(e));
    }
    char **names;
    int n;
    int rc = read_snapshot_names(d, rel, &names, &n, err, errcap);
    closedir(d);
    if (rc == 0 && n > SOLUTION_MAX_SNAPSHOTS)
        rc = refuse(err, errcap,
                    "%s/snapshots: %d snapshots, more than the %d kgym-bench evaluates for one "
                    "task; it refuses the trajectory rather than judge part of it: keep at most "
                    "%d (a final model_new.py beside snapshots/ comes on top)",
                    rel, n, SOLUTION_MAX_SNAPSHOTS, SOLUTION_MAX_SNAPSHOTS);
    for (int i = 0; rc == 0 && i < n; i++)
        rc = add_state(out, real_root, rel, names[i], err, errcap);
    free_names(names, n);
    return rc;
}

/* The workspace rel: its snapshots, then itself when it holds a model_new.py (or when it has
 * no snapshot: solution_files then says what it lacks). */
static int collect_states(int rootfd, const char *real_root, const char *rel, solution *out,
                          char *err, size_t errcap)
{
    size_t bad;
    int ws = open_nofollow(rootfd, rel, O_PATH | O_DIRECTORY, &bad);
    if (ws < 0)
        return open_failure("", rel, bad, err, errcap);
    int rc = add_snapshots(ws, real_root, rel, out, err, errcap);
    struct stat st;
    bool has_model = fstatat(ws, "model_new.py", &st, AT_SYMLINK_NOFOLLOW) == 0;
    int stat_errno = errno;
    close(ws);
    if (rc == 0 && !has_model && stat_errno != ENOENT)
        rc = refuse(err, errcap, "%s/model_new.py: %s", rel, strerror(stat_errno));
    else if (rc == 0 && has_model && S_ISLNK(st.st_mode))
        rc = refuse(err, errcap, "%s/model_new.py: " SYMLINK_WHY, rel);
    else if (rc == 0 && ((has_model && S_ISREG(st.st_mode)) || out->n_states == 0))
        rc = add_state(out, real_root, rel, NULL, err, errcap);
    return rc;
}

/* The one candidate is the solution (1, or -1 when it is refused), none is "no solution" (0),
 * several are refused, naming them all. */
static int settle(int rootfd, const char *real_root, const char *task_id, candidates *c,
                  solution *out, char *err, size_t errcap)
{
    if (c->n == 0)
        return 0;
    if (c->n > 1) {
        qsort(c->v, (size_t)c->n, sizeof *c->v, by_rel);
        strbuf list = STRBUF_INIT;
        for (int i = 0; i < c->n; i++)
            sb_printf(&list, "%s%s%s", i ? ", " : "", c->v[i].rel, c->v[i].folder ? "/" : "");
        refuse(err, errcap,
               "ambiguous: %d solutions for %s (%s); keep one of them (kgym-bench does not pick "
               "one in directory order)",
               c->n, task_id, list.data ? list.data : "");
        sb_free(&list);
        return -1;
    }
    const candidate *one = &c->v[0];
    if (!text_fmt(out->rel, sizeof out->rel, "%s", one->rel))
        return refuse(err, errcap, "%s: path too long", one->rel);
    if (!one->folder) {
        out->kernelbench_file = 1;
        return add_state(out, real_root, one->rel, NULL, err, errcap) == 0 ? 1 : -1;
    }
    return collect_states(rootfd, real_root, one->rel, out, err, errcap) == 0 ? 1 : -1;
}

/* Whether the name in level<L>/ is the problem's: "<P>" or "<P>_<name>.py". */
static bool kb_name_matches(const char *name, int problem, bool *folder_name)
{
    char num[24];
    int n = snprintf(num, sizeof num, "%d", problem);
    size_t len = strlen(name);
    if (strncmp(name, num, (size_t)n) != 0)
        return false;
    *folder_name = name[n] == '\0';
    return *folder_name ||
           (name[n] == '_' && len >= (size_t)n + 4 && strcmp(name + len - 3, ".py") == 0);
}

/* An entry of level<L>/ named like the problem's: a symlink, or a name that is not UTF-8, is
 * refused; "<P>" counts only as a folder (a stray file "23" is no solution). */
static int add_kb_candidate(int dirfd, const char *dir, const char *name, bool folder_name,
                            candidates *c, char *err, size_t errcap)
{
    char rel[PATH_MAX];
    text_fmt(rel, sizeof rel, "%s/%s", dir, name); /* "level<L>/" + NAME_MAX fits */
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : refuse(err, errcap, "%s: %s", rel, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return refuse(err, errcap, "%s: " SYMLINK_WHY, rel);
    if (folder_name && !S_ISDIR(st.st_mode))
        return 0;
    if (!is_utf8_name(name))
        return refuse(err, errcap, "%s: " NOT_UTF8_WHY, rel);
    return add_candidate(c, rel, S_ISDIR(st.st_mode), err, errcap);
}

/* kb/L<L>/<P>: level<L>/<P>/ or level<L>/<P>_<name>.py, exactly one of them. */
static int find_kb(int rootfd, const char *real_root, const char *task_id, int level, int problem,
                   solution *out, char *err, size_t errcap)
{
    char dir[32];
    text_fmt(dir, sizeof dir, "level%d", level);
    size_t bad;
    int fd = open_nofollow(rootfd, dir, O_RDONLY | O_DIRECTORY, &bad);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : open_failure("", dir, bad, err, errcap);
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return refuse(err, errcap, "%s: %s", dir, strerror(e));
    }
    candidates c = {0};
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        bool folder_name;
        if (kb_name_matches(e->d_name, problem, &folder_name))
            rc = add_kb_candidate(dirfd(d), dir, e->d_name, folder_name, &c, err, errcap);
    }
    closedir(d);
    if (rc == 0)
        rc = settle(rootfd, real_root, task_id, &c, out, err, errcap);
    free_candidates(&c);
    return rc;
}

/* rel (below the solutions folder) when it exists as a folder (want_folder) or as anything
 * else (a .py file); a symlink on the way is refused. */
static int add_id_candidate(int rootfd, const char *rel, bool want_folder, candidates *c, char *err,
                            size_t errcap)
{
    size_t bad;
    int fd = open_nofollow(rootfd, rel, O_PATH, &bad);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : open_failure("", rel, bad, err, errcap);
    struct stat st;
    int rc = fstat(fd, &st);
    close(fd);
    if (rc != 0)
        return refuse(err, errcap, "%s: %s", rel, strerror(errno));
    if (S_ISDIR(st.st_mode) != want_folder)
        return 0;
    return add_candidate(c, rel, want_folder, err, errcap);
}

/* Any other task: <id>/ or <id>.py, exactly one of them; only when neither exists, the same
 * for the id's last part (the full id is the exact match and wins over the short one). */
static int find_by_id(int rootfd, const char *real_root, const char *task_id, solution *out,
                      char *err, size_t errcap)
{
    const char *last = strrchr(task_id, '/');
    const char *tries[2] = {task_id, last ? last + 1 : NULL};
    candidates c = {0};
    int rc = 0;
    for (int i = 0; i < 2 && tries[i] && rc == 0 && c.n == 0; i++) {
        if (strstr(tries[i], "..") || tries[i][0] == '/' || !tries[i][0])
            continue; /* an id never leads out of the solutions folder */
        for (int py = 0; py < 2 && rc == 0; py++) {
            char rel[PATH_MAX];
            if (text_fmt(rel, sizeof rel, "%s%s", tries[i], py ? ".py" : ""))
                rc = add_id_candidate(rootfd, rel, !py, &c, err, errcap);
        }
    }
    if (rc == 0)
        rc = settle(rootfd, real_root, task_id, &c, out, err, errcap);
    free_candidates(&c);
    return rc;
}

int solution_find(const char *root, const char *task_id, solution *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    /* resolved once, so that each state's path can later be opened again from "/" without
     * following any symlink: those in the folder's own path are the user's choice */
    char real_root[PATH_MAX];
    if (!realpath(root, real_root))
        return refuse(err, errcap, "%s: %s", root, strerror(errno));
    int rootfd = open(real_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return refuse(err, errcap, "%s: not a folder", root);
    int level, problem;
    int rc = kb_id(task_id, &level, &problem)
                 ? find_kb(rootfd, real_root, task_id, level, problem, out, err, errcap)
                 : find_by_id(rootfd, real_root, task_id, out, err, errcap);
    close(rootfd);
    if (rc != 1) {
        out->rel[0] = '\0';
        out->n_states = 0;
    }
    return rc;
}

/* ---- the files of one state ---------------------------------------------------------------- */

/* A state's files, planned from their sizes before any is read. */
typedef struct plan {
    solution_file *files;
    int n, max;
    unsigned long long bytes;
    const char *state; /* for messages */
} plan;

/* One file of the plan (rel: its path in the workspace; shown: in messages). */
static int plan_file(plan *p, const char *rel, const char *shown, const struct stat *st, char *err,
                     size_t errcap)
{
    if (p->n >= p->max)
        return refuse(err, errcap, "%s: more than %d files in the solution", p->state, p->max);
    solution_file *f = &p->files[p->n];
    if (!text_fmt(f->rel, sizeof f->rel, "%s", rel))
        return refuse(err, errcap, "%s: path too long", shown);
    if ((unsigned long long)st->st_size > SOLUTION_MAX_FILE_BYTES)
        return refuse(err, errcap,
                      "%s: %lld bytes, more than the %u MiB one workspace file may hold "
                      "(kgym-env's max_file_bytes)",
                      shown, (long long)st->st_size, SOLUTION_MAX_FILE_BYTES >> 20);
    p->bytes += (unsigned long long)st->st_size;
    if (p->bytes > SOLUTION_MAX_STATE_BYTES)
        return refuse(err, errcap,
                      "%s: its files hold more than %u MiB in all (kgym-env's workspace quota); "
                      "refused before reading them",
                      p->state, SOLUTION_MAX_STATE_BYTES >> 20);
    f->data = NULL;
    f->len = 0;
    p->n++;
    return 0;
}

static int plan_folder(plan *p, int fd, const char *rel_dir, int depth, char *err, size_t errcap);

/* One entry of a kernels folder: a file, or a sub-folder while depth < 2; a symlink or a name
 * that is not UTF-8 is refused; a FIFO or socket holds no source and is left out. */
static int plan_entry(plan *p, int dirfd, const char *name, const char *rel_dir, int depth,
                      char *err, size_t errcap)
{
    char rel[PATH_MAX], shown[2 * PATH_MAX];
    if (!text_fmt(rel, sizeof rel, "%s/%s", rel_dir, name))
        return refuse(err, errcap, "%s/%s/%s: path too long", p->state, rel_dir, name);
    text_fmt(shown, sizeof shown, "%s/%s", p->state, rel);
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : refuse(err, errcap, "%s: %s", shown, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return refuse(err, errcap, "%s: " SYMLINK_WHY, shown);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return 0;
    if (!is_utf8_name(name))
        return refuse(err, errcap, "%s: " NOT_UTF8_WHY, shown);
    if (S_ISREG(st.st_mode))
        return plan_file(p, rel, shown, &st, err, errcap);
    if (depth >= 2)
        return 0;
    size_t bad;
    int fd = open_nofollow(dirfd, name, O_RDONLY | O_DIRECTORY, &bad);
    if (fd < 0)
        return refuse(err, errcap, "%s: %s", shown, errno == ELOOP ? SYMLINK_WHY : strerror(errno));
    return plan_folder(p, fd, rel, depth + 1, err, errcap);
}

/* The kernels folder fd (rel_dir in the workspace), which it takes over. */
static int plan_folder(plan *p, int fd, const char *rel_dir, int depth, char *err, size_t errcap)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return refuse(err, errcap, "%s/%s: %s", p->state, rel_dir, strerror(e));
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)))
        if (e->d_name[0] != '.')
            rc = plan_entry(p, dirfd(d), e->d_name, rel_dir, depth, err, errcap);
    closedir(d);
    return rc;
}

/* The workspace ws: model_new.py, then kernels/ (none is a pure model_new.py, which fails the
 * server's checks on its own). */
static int plan_workspace(plan *p, int ws, char *err, size_t errcap)
{
    char shown[PATH_MAX + 32];
    text_fmt(shown, sizeof shown, "%s/model_new.py", p->state);
    struct stat st;
    if (fstatat(ws, "model_new.py", &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? refuse(err, errcap, "%s: no model_new.py", p->state)
                               : refuse(err, errcap, "%s: %s", shown, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return refuse(err, errcap, "%s: " SYMLINK_WHY, shown);
    if (!S_ISREG(st.st_mode))
        return refuse(err, errcap, "%s: not a regular file", shown);
    if (plan_file(p, "model_new.py", shown, &st, err, errcap) != 0)
        return -1;
    size_t bad;
    int fd = open_nofollow(ws, "kernels", O_RDONLY | O_DIRECTORY, &bad);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR
                   ? 0
                   : open_failure(p->state, "kernels", bad, err, errcap);
    return plan_folder(p, fd, "kernels", 0, err, errcap);
}

/* Reads the planned files, each at most what is left of the state's budget. dirfd/source: where
 * each is read from (source: the one file of a KernelBench state; NULL: the files' own paths
 * below the workspace dirfd). */
static int read_plan(plan *p, int dirfd, const char *source, char *err, size_t errcap)
{
    size_t left = SOLUTION_MAX_STATE_BYTES;
    for (int i = 0; i < p->n; i++) {
        solution_file *f = &p->files[i];
        const char *from = source ? source : f->rel;
        size_t bad;
        int fd = open_nofollow(dirfd, from, O_RDONLY | O_NONBLOCK, &bad);
        if (fd < 0)
            return open_failure(source ? "" : p->state, from, bad, err, errcap);
        size_t cap = left < SOLUTION_MAX_FILE_BYTES ? left : SOLUTION_MAX_FILE_BYTES;
        int rc = file_read_fd(fd, cap, &f->data, &f->len);
        close(fd);
        if (rc != 0)
            return refuse(err, errcap, "%s%s%s: %s", source ? "" : p->state, source ? "" : "/",
                          from,
                          rc == -EFBIG    ? "grew past the size limits while it was read"
                          : rc == -EINVAL ? "not a regular file"
                                          : strerror(-rc));
        left -= f->len;
    }
    return 0;
}

int solution_files(const char *state, solution_file *files, int max, char *err, size_t errcap)
{
    plan p = {.files = files, .max = max, .state = state};
    size_t bad;
    int fd = open_nofollow(AT_FDCWD, state, O_PATH, &bad);
    if (fd < 0)
        return open_failure("", state, bad, err, errcap);
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? 0 : refuse(err, errcap, "%s: %s", state, strerror(errno));
    if (rc == 0 && S_ISREG(st.st_mode)) /* a KernelBench .py, uploaded as model_new.py */
        rc = plan_file(&p, "model_new.py", state, &st, err, errcap) == 0
                 ? read_plan(&p, AT_FDCWD, state, err, errcap)
                 : -1;
    else if (rc == 0 && S_ISDIR(st.st_mode))
        rc = plan_workspace(&p, fd, err, errcap) == 0 ? read_plan(&p, fd, NULL, err, errcap) : -1;
    else if (rc == 0)
        rc = refuse(err, errcap, "%s: not a regular file or a folder", state);
    close(fd);
    if (rc != 0) {
        solution_files_free(files, p.n);
        return -1;
    }
    return p.n;
}

void solution_files_free(solution_file *files, int n)
{
    for (int i = 0; i < n; i++) {
        free(files[i].data);
        files[i].data = NULL;
    }
}
