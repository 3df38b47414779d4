/* Helpers shared by the file tools; see fs.h. */
#include "tools/fs.h"
#include "tools/jobs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "util/text.h"

/* Used when a tool_env carries no limits (tests, tools called outside an episode). */
static const tool_limits DEFAULT_LIMITS = {
    .disk_quota_bytes = 1ull << 30,
    .max_file_bytes = 10ull << 20,
    .max_output_chars = 30000,
};

/* How much of a refused path is echoed back in an error message. */
#define SHOWN_PATH_MAX 200

const tool_limits *fs_limits(const tool_env *env)
{
    return env && env->limits ? env->limits : &DEFAULT_LIMITS;
}

/* ---- path arguments and their errors --------------------------------------------------------- */

void fs_fail_path(tool_result *res, int err, const char *shown)
{
    json_t *data = json_pack("{s:s}", "file_path", shown);
    switch (err) {
    case WS_E_INVALID:
        tool_fail(res, ws_err_code(err), data,
                  "Invalid path '%s': a path must be non-empty UTF-8 without NUL bytes and at most "
                  "%d bytes long.",
                  shown, WS_PATH_MAX);
        break;
    case WS_E_OUTSIDE:
        tool_fail(res, ws_err_code(err), data,
                  "'%s' is outside the workspace. Use paths under %s (or relative to it); symlinks "
                  "leading out of the workspace are not followed.",
                  shown, WS_VIRTUAL_ROOT);
        break;
    case WS_E_NOENT:
        tool_fail(res, ws_err_code(err), data, "File not found: %s", shown);
        break;
    case WS_E_ISDIR:
        tool_fail(res, ws_err_code(err), data, "%s is a directory, not a file.", shown);
        break;
    case WS_E_NOTDIR:
        tool_fail(res, ws_err_code(err), data, "A component of %s is not a directory.", shown);
        break;
    case WS_E_READONLY:
        tool_fail(res, ws_err_code(err), data,
                  "%s is a fixed file of the task: it can be read but not modified.", shown);
        break;
    case FS_E_TOO_LARGE:
        tool_fail(res, "FILE_TOO_LARGE", data, "%s is too large.", shown);
        break;
    case FS_E_NOT_REGULAR:
        tool_fail(res, "IO_ERROR", data, "%s is not a regular file.", shown);
        break;
    default:
        tool_fail(res, "IO_ERROR", data, "I/O error on %s.", shown);
        break;
    }
}

/* The user's own spelling of a refused path, made printable: valid UTF-8 and not too long. */
static void shown_user_path(const char *s, size_t len, char *out, size_t cap)
{
    char *clean = text_sanitize_utf8(s, len < SHOWN_PATH_MAX ? len : SHOWN_PATH_MAX);
    if (!clean) {
        snprintf(out, cap, "?");
        return;
    }
    for (char *c = clean; *c; c++) /* NULs became nothing; control bytes would be confusing */
        if ((unsigned char)*c < 0x20)
            *c = '?';
    /* Cutting at SHOWN_PATH_MAX may have split a character: the sanitiser made it U+FFFD. */
    snprintf(out, cap, "%s%s", clean, len > SHOWN_PATH_MAX ? "..." : "");
    free(clean);
}

int fs_path_arg(const json_t *args, const char *key, const char *dflt, fs_path *p, tool_result *res)
{
    const json_t *v = json_object_get(args, key);
    const char *s = dflt;
    size_t len = dflt ? strlen(dflt) : 0;
    if (v) {
        if (!json_is_string(v)) {
            tool_fail(res, "INVALID_TOOL_CALL", NULL, "argument '%s' must be a string", key);
            return -1;
        }
        s = json_string_value(v);
        len = json_string_length(v);
    } else if (!dflt) {
        tool_fail(res, "INVALID_TOOL_CALL", NULL, "missing required argument '%s'", key);
        return -1;
    }
    int rc = ws_normalize(s, len, p->rel);
    if (rc != WS_OK) {
        shown_user_path(s, len, p->shown, sizeof p->shown);
        fs_fail_path(res, rc, p->shown);
        return -1;
    }
    ws_display(p->rel, p->shown, sizeof p->shown);
    return 0;
}

/* ---- loading --------------------------------------------------------------------------------- */

void fs_file_free(fs_file *f)
{
    free(f->data);
    f->data = NULL;
    f->len = 0;
}

/* Reads up to cap bytes from fd into buf; returns the count or -1. */
static ssize_t read_full(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

int fs_load(int root_fd, const char *rel, uint64_t max_bytes, fs_file *f)
{
    memset(f, 0, sizeof *f);
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. */
    int fd = ws_open(root_fd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
    if (fd < 0)
        return fd;
    int rc = WS_OK;
    if (fstat(fd, &f->st) != 0)
        rc = WS_E_IO;
    else if (S_ISDIR(f->st.st_mode))
        rc = WS_E_ISDIR;
    else if (!S_ISREG(f->st.st_mode))
        rc = FS_E_NOT_REGULAR;
    else if (max_bytes && (uint64_t)f->st.st_size > max_bytes)
        rc = FS_E_TOO_LARGE;
    if (rc == WS_OK) {
        size_t size = (size_t)f->st.st_size;
        f->data = malloc(size + 1);
        ssize_t got = f->data ? read_full(fd, f->data, size) : -1;
        if (got < 0) {
            rc = WS_E_IO;
            fs_file_free(f);
        } else {
            f->len = (size_t)got; /* a file that shrank meanwhile is read as it is now */
            f->data[f->len] = '\0';
        }
    }
    close(fd);
    return rc;
}

int fs_load_text(const tool_env *env, const fs_path *p, fs_file *f, tool_result *res)
{
    uint64_t cap = fs_limits(env)->max_file_bytes;
    int rc = fs_load(env->root_fd, p->rel, cap, f);
    if (rc == FS_E_TOO_LARGE) {
        tool_fail(res, "FILE_TOO_LARGE",
                  json_pack("{s:s,s:I,s:I}", "file_path", p->shown, "size",
                            (json_int_t)f->st.st_size, "max_bytes", (json_int_t)cap),
                  "%s is %lld bytes, over the %" PRIu64 "-byte limit for files; use Grep or Bash "
                  "(head, sed -n) to look at parts of it.",
                  p->shown, (long long)f->st.st_size, cap);
        return -1;
    }
    if (rc != WS_OK) {
        fs_fail_path(res, rc, p->shown);
        return -1;
    }
    if (text_looks_binary(f->data, f->len)) {
        tool_fail(res, "BINARY_FILE", json_pack("{s:s}", "file_path", p->shown),
                  "%s looks like a binary file (it contains NUL bytes) and cannot be handled as "
                  "text.",
                  p->shown);
        fs_file_free(f);
        return -1;
    }
    if (!text_is_utf8(f->data, f->len)) {
        tool_fail(res, "NOT_UTF8", json_pack("{s:s}", "file_path", p->shown),
                  "%s is not valid UTF-8 text and cannot be handled as text.", p->shown);
        fs_file_free(f);
        return -1;
    }
    return 0;
}

/* ---- writing --------------------------------------------------------------------------------- */

/* Splits rel into its parent ("." for the root) and its last component. */
static int split_parent(const char *rel, char *parent, const char **name)
{
    const char *slash = strrchr(rel, '/');
    if (!slash) {
        strcpy(parent, ".");
        *name = rel;
        return WS_OK;
    }
    size_t n = (size_t)(slash - rel);
    if (n == 0 || n >= WS_PATH_MAX)
        return WS_E_INVALID;
    memcpy(parent, rel, n);
    parent[n] = '\0';
    *name = slash + 1;
    return WS_OK;
}

/* The host path an fd refers to, from /proc (the kernel's own resolution, no guessing). */
static int fd_host_path(int fd, char *out, size_t cap)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, cap - 1);
    if (n < 0 || (size_t)n >= cap - 1)
        return -1;
    out[n] = '\0';
    return 0;
}

/* The path (relative to the root) of the file a confined fd refers to. */
static int rel_of_fd(int root_fd, int fd, char *rel)
{
    char root[PATH_MAX], file[PATH_MAX];
    if (fd_host_path(root_fd, root, sizeof root) != 0 || fd_host_path(fd, file, sizeof file) != 0)
        return WS_E_IO;
    if (strcmp(file, root) == 0) {
        strcpy(rel, ".");
        return WS_OK;
    }
    size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
    if (strncmp(file, root, rl) != 0 || file[rl] != '/')
        return WS_E_OUTSIDE; /* cannot happen for an fd opened beneath the root */
    return ws_normalize(file + rl + 1, strlen(file + rl + 1), rel);
}

/* The canonical relative path of the entry name of the confined directory dir, into out. */
static int canonical_child(int root_fd, int dir, const char *name, char *out)
{
    char parent[WS_PATH_MAX];
    int rc = rel_of_fd(root_fd, dir, parent);
    if (rc != WS_OK)
        return rc;
    int n = strcmp(parent, ".") == 0 ? snprintf(out, WS_PATH_MAX, "%s", name)
                                     : snprintf(out, WS_PATH_MAX, "%s/%s", parent, name);
    return n >= 0 && n < WS_PATH_MAX ? WS_OK : WS_E_INVALID;
}

/* Follows a symlink at rel to the file it leads to (confined); see fs_resolve_target. */
static int resolve_symlink(int root_fd, const char *rel, char *target, struct stat *st,
                           bool *exists)
{
    int fd = ws_open(root_fd, rel, O_PATH, 0);
    if (fd == WS_E_NOENT) {
        /* A dangling link inside the workspace: the write replaces the link itself. */
        snprintf(target, WS_PATH_MAX, "%s", rel);
        return WS_OK;
    }
    if (fd < 0)
        return fd;
    int rc = fstat(fd, st) == 0 ? WS_OK : WS_E_IO;
    if (rc == WS_OK && S_ISDIR(st->st_mode))
        rc = WS_E_ISDIR;
    if (rc == WS_OK)
        rc = rel_of_fd(root_fd, fd, target);
    close(fd);
    *exists = rc == WS_OK;
    return rc;
}

int fs_resolve_target(int root_fd, const char *rel, char *target, struct stat *st, bool *exists)
{
    *exists = false;
    memset(st, 0, sizeof *st);
    if (strcmp(rel, ".") == 0)
        return WS_E_ISDIR;
    char parent[WS_PATH_MAX];
    const char *name;
    int rc = split_parent(rel, parent, &name);
    if (rc != WS_OK)
        return rc;
    snprintf(target, WS_PATH_MAX, "%s", rel);
    int dir = ws_open(root_fd, parent, O_PATH | O_DIRECTORY, 0);
    if (dir == WS_E_NOENT)
        return WS_OK; /* the parent will be created: a new file */
    if (dir < 0)
        return dir;
    /* The directory's real path, not its spelling: "link/model.py" with link -> . is model.py. */
    rc = canonical_child(root_fd, dir, name, target);
    struct stat lst;
    if (rc != WS_OK) {
        /* reported below */
    } else if (fstatat(dir, name, &lst, AT_SYMLINK_NOFOLLOW) != 0) {
        rc = errno == ENOENT ? WS_OK : WS_E_IO;
    } else if (S_ISLNK(lst.st_mode)) {
        rc = resolve_symlink(root_fd, rel, target, st, exists);
    } else if (S_ISDIR(lst.st_mode)) {
        rc = WS_E_ISDIR;
    } else {
        *st = lst;
        *exists = true;
    }
    close(dir);
    return rc;
}

int fs_disk_usage(const tool_env *env, unsigned long long *bytes)
{
    tool_usage_cache *c = env->usage;
    if (c && c->known && (!env->jobs || job_table_running(env->jobs) == 0)) {
        *bytes = c->bytes;
        return WS_OK;
    }
    int rc = ws_disk_usage(env->root_fd, bytes);
    if (c) {
        c->known = rc == WS_OK;
        c->bytes = *bytes;
    }
    return rc;
}

void fs_usage_changed(const tool_env *env, uint64_t old_size, uint64_t new_size)
{
    tool_usage_cache *c = env->usage;
    if (c && c->known)
        c->bytes = (c->bytes > old_size ? c->bytes - old_size : 0) + new_size;
}

void fs_usage_forget(const tool_env *env)
{
    if (env->usage)
        env->usage->known = false;
}

int fs_check_quota(const tool_env *env, uint64_t old_size, uint64_t new_size, const char *shown,
                   tool_result *res)
{
    uint64_t quota = fs_limits(env)->disk_quota_bytes;
    if (quota == 0)
        return 0;
    unsigned long long usage;
    if (fs_disk_usage(env, &usage) != WS_OK) {
        tool_fail(res, "IO_ERROR", json_pack("{s:s}", "file_path", shown),
                  "Could not measure the workspace's disk usage.");
        return -1;
    }
    uint64_t after = (usage > old_size ? usage - old_size : 0) + new_size;
    if (after <= quota)
        return 0;
    tool_fail(res, "DISK_QUOTA_EXCEEDED",
              json_pack("{s:s,s:I,s:I,s:I}", "file_path", shown, "usage_bytes", (json_int_t)usage,
                        "new_bytes", (json_int_t)new_size, "quota_bytes", (json_int_t)quota),
              "Writing %s would bring the workspace to %" PRIu64 " bytes, over its quota of "
              "%" PRIu64 " bytes (now %llu bytes used). Delete files you no longer need.",
              shown, after, quota, usage);
    return -1;
}

static int write_all(int fd, const char *data, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

/* Creates a uniquely named temporary file in dir; its name goes to name (32 bytes). */
static int create_temp(int dir, char *name, size_t cap)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            return -1;
        snprintf(name, cap, ".kgym-tmp-%016" PRIx64, r);
        /* One name, O_CREAT|O_EXCL: never follows a symlink, cannot leave dir. */
        int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

int fs_write_atomic(int root_fd, const char *target, const char *data, size_t len, mode_t mode,
                    const ws_owner *owner)
{
    char parent[WS_PATH_MAX];
    const char *name;
    int rc = split_parent(target, parent, &name);
    if (rc == WS_OK)
        rc = ws_mkdirs_for(root_fd, target, owner);
    if (rc != WS_OK)
        return rc;
    int dir = ws_open(root_fd, parent, O_PATH | O_DIRECTORY, 0);
    if (dir < 0)
        return dir;
    /* Checked again here, on the directory actually written to, so that no symlink games
     * between the caller's check and now can replace a fixed file. */
    char canonical[WS_PATH_MAX];
    rc = canonical_child(root_fd, dir, name, canonical);
    if (rc == WS_OK && ws_is_fixed(canonical))
        rc = WS_E_READONLY;
    if (rc != WS_OK) {
        close(dir);
        return rc;
    }
    char tmp[32];
    int fd = create_temp(dir, tmp, sizeof tmp);
    if (fd < 0) {
        int e = errno;
        close(dir);
        errno = e;
        return e == ENOSPC || e == EDQUOT ? WS_E_NOSPACE : WS_E_IO; /* no inode left */
    }
    /* fchmod, not the open mode: the process umask must not decide the file's permissions. */
    bool ok = write_all(fd, data, len) == 0 && fchmod(fd, mode & 07777) == 0 &&
              (!owner || fchown(fd, owner->uid, owner->gid) == 0);
    ok = (close(fd) == 0) && ok;
    ok = ok && renameat(dir, tmp, dir, name) == 0;
    if (!ok) {
        int e = errno;
        unlinkat(dir, tmp, 0);
        close(dir);
        errno = e;
        return e == EISDIR ? WS_E_ISDIR : e == ENOSPC || e == EDQUOT ? WS_E_NOSPACE : WS_E_IO;
    }
    close(dir);
    return WS_OK;
}

/* ---- formatting ------------------------------------------------------------------------------ */

size_t fs_count_lines(const char *text, size_t len)
{
    size_t n = 0;
    for (const char *p = text; (p = memchr(p, '\n', len - (size_t)(p - text))) != NULL; p++)
        n++;
    if (len > 0 && text[len - 1] != '\n')
        n++;
    return n;
}

size_t fs_line_offset(const char *text, size_t len, size_t line)
{
    size_t off = 0;
    for (size_t l = 1; l < line && off < len; l++) {
        const char *nl = memchr(text + off, '\n', len - off);
        off = nl ? (size_t)(nl - text) + 1 : len;
    }
    return off;
}

bool fs_put_line(strbuf *sb, const char *line, size_t len)
{
    size_t chars = 0, cut_at = len;
    for (size_t i = 0; i < len; i++) {
        if (((unsigned char)line[i] & 0xC0) == 0x80)
            continue; /* continuation byte: not a new character */
        if (chars == FS_LINE_MAX_CHARS)
            cut_at = i;
        chars++;
    }
    sb_append(sb, line, cut_at);
    if (cut_at == len)
        return false;
    sb_printf(sb, " [... line cut: %zu more characters]", chars - FS_LINE_MAX_CHARS);
    return true;
}

size_t fs_cat_n(strbuf *sb, const char *text, size_t len, size_t first, size_t max_lines,
                bool *cut_any)
{
    size_t off = fs_line_offset(text, len, first);
    size_t n = 0;
    while (off < len && n < max_lines) {
        const char *nl = memchr(text + off, '\n', len - off);
        size_t end = nl ? (size_t)(nl - text) : len;
        sb_printf(sb, "%6zu\t", first + n);
        if (fs_put_line(sb, text + off, end - off) && cut_any)
            *cut_any = true;
        sb_putc(sb, '\n');
        off = nl ? end + 1 : len;
        n++;
    }
    return n;
}

char *fs_cap_output(const tool_env *env, char *content, bool *truncated)
{
    size_t cap = fs_limits(env)->max_output_chars;
    size_t len = strlen(content);
    *truncated = false;
    if (cap == 0 || len <= cap)
        return content;
    char *capped = text_cap_head_tail(content, len, cap, truncated);
    if (!capped)
        return content;
    free(content);
    return capped;
}

/* ---- walking --------------------------------------------------------------------------------- */

typedef struct walk_state {
    int root_fd;
    fs_walk_fn fn;
    void *ctx;
    char path[WS_PATH_MAX]; /* relative path of the entry being visited */
    size_t sub_off;         /* where the part relative to the walk's base starts in path */
    size_t entries;
    bool incomplete;
    bool stopped;
} walk_state;

/* Puts dir/name into w->path (dir being its first dir_len bytes); false when too long. */
static bool walk_set_path(walk_state *w, size_t dir_len, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    size_t need = dir_len + (dir_len ? 1 : 0) + nl;
    if (need >= sizeof w->path)
        return false;
    if (dir_len)
        w->path[dir_len] = '/';
    memcpy(w->path + dir_len + (dir_len ? 1 : 0), name, nl + 1);
    *len = need;
    return true;
}

static void walk_visit(walk_state *w, const struct stat *st)
{
    if (w->fn(w->ctx, w->path, w->path + w->sub_off, st) != 0)
        w->stopped = true;
}

/* Visits a symlink at w->path if it leads (beneath the root) to a regular file. */
static void walk_symlink(walk_state *w)
{
    int fd = ws_open(w->root_fd, w->path, O_PATH, 0);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        walk_visit(w, &st);
    close(fd);
}

/* Walks the directory dir_fd (closed here), whose relative path is w->path[0..dir_len). */
static void walk_dir(walk_state *w, int dir_fd, size_t dir_len, int depth)
{
    DIR *d = fdopendir(dir_fd);
    if (!d) {
        close(dir_fd);
        w->incomplete = true;
        return;
    }
    struct dirent *e;
    while (!w->stopped && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (++w->entries > FS_WALK_MAX_ENTRIES) {
            w->incomplete = true;
            w->stopped = true;
            break;
        }
        size_t len;
        struct stat st;
        if (!walk_set_path(w, dir_len, e->d_name, &len) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            walk_visit(w, &st);
        } else if (S_ISLNK(st.st_mode)) {
            walk_symlink(w);
        } else if (S_ISDIR(st.st_mode)) {
            if (depth >= FS_WALK_MAX_DEPTH) {
                w->incomplete = true;
                continue;
            }
            /* One name with O_NOFOLLOW: a directory swapped for a symlink is not entered. */
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                walk_dir(w, sub, len, depth + 1);
        }
    }
    w->path[dir_len] = '\0';
    closedir(d);
}

int fs_walk(int root_fd, const char *base_rel, fs_walk_fn fn, void *ctx, bool *incomplete)
{
    walk_state *w = calloc(1, sizeof *w);
    if (!w)
        return WS_E_IO;
    w->root_fd = root_fd;
    w->fn = fn;
    w->ctx = ctx;
    int fd = ws_open(root_fd, base_rel, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) {
        free(w);
        return fd;
    }
    size_t base_len = 0;
    if (strcmp(base_rel, ".") != 0) {
        base_len = strlen(base_rel);
        memcpy(w->path, base_rel, base_len + 1);
        w->sub_off = base_len + 1;
    }
    walk_dir(w, fd, base_len, 0);
    if (incomplete)
        *incomplete = w->incomplete;
    free(w);
    return WS_OK;
}

/* ---- search budgets -------------------------------------------------------------------------- */

fs_search_budget fs_glob_budget = {FS_GLOB_TIME_BUDGET_MS, FS_GLOB_MAX_FILES};

struct timespec fs_deadline_in(long ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

bool fs_deadline_passed(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec ||
           (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}
