#include "task.h"

#include "util/digest.h"
#include "util/strbuf.h"
#include "util/text.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_TOL 1e-2
#define MAX_LEVEL 100
#define MAX_NAME_BYTES 512
#define MAX_DESCRIPTION_BYTES (64u << 10)

/* The tasks in load order, and an open-addressing hash index over their ids. The array holds
 * pointers so a task's address never changes while the store grows. */
struct task_store {
    task **v;
    size_t n, cap;
    size_t *slots; /* 0 = empty, else index + 1 into v; power-of-two size */
    size_t nslots;
    size_t indexed; /* v[0..indexed) are in the index */
};

/* ---------------------------------------------------------------- errors, small helpers */

/* snprintf for strings that only name things in messages (paths, origins): cutting a very long
 * one short is acceptable, so the result is not checked. */
__attribute__((format(printf, 3, 4))) static void bfmt(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, cap, fmt, ap);
    va_end(ap);
}

static char *xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

static bool id_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == '+' || c == ':';
}

bool task_id_valid(const char *id)
{
    if (!id)
        return false;
    size_t len = strlen(id);
    if (len == 0 || len > TASK_MAX_ID_LEN)
        return false;
    /* Walk segment by segment: each non-empty, made of id_char_ok, not "." or "..". */
    const char *seg = id;
    for (const char *p = id;; p++) {
        if (*p == '/' || *p == '\0') {
            size_t sl = (size_t)(p - seg);
            if (sl == 0 || (sl == 1 && seg[0] == '.') ||
                (sl == 2 && seg[0] == '.' && seg[1] == '.'))
                return false;
            if (*p == '\0')
                return true;
            seg = p + 1;
        } else if (!id_char_ok(*p)) {
            return false;
        }
    }
}

/* A suite is one id segment: it prefixes default ids. */
static bool suite_valid(const char *s)
{
    return task_id_valid(s) && !strchr(s, '/');
}

static void task_free(task *t)
{
    if (!t)
        return;
    free(t->id);
    free(t->suite);
    free(t->name);
    free(t->description);
    free(t->code);
    free(t->code_cpu);
    free(t->origin);
    json_decref(t->meta);
    free(t);
}

/* Whether buf[0..len) is text we can serve: no NUL byte (it would cut C strings) and valid
 * UTF-8 (JSON strings must be). jansson's constructor does the UTF-8 check for us. */
static bool is_text(const char *buf, size_t len)
{
    if (memchr(buf, '\0', len))
        return false;
    json_t *s = json_stringn(buf, len);
    if (!s)
        return false;
    json_decref(s);
    return true;
}

/* Whether s holds anything but whitespace. */
static bool has_content(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return true;
    return false;
}

/* ---------------------------------------------------------------- the hash index */

static uint64_t hash_id(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a: short ids, no adversary at load time */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* The slot holding id, or the empty slot where it would go. */
static size_t index_probe(const task_store *ts, const char *id)
{
    size_t mask = ts->nslots - 1;
    size_t i = (size_t)hash_id(id) & mask;
    while (ts->slots[i] && strcmp(ts->v[ts->slots[i] - 1]->id, id) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Rebuilds the index over v[0..upto) into a table sized for at least want entries. */
static int index_rebuild(task_store *ts, size_t upto, size_t want)
{
    size_t nslots = 16;
    while (nslots < want * 2)
        nslots *= 2;
    size_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return -1;
    free(ts->slots);
    ts->slots = slots;
    ts->nslots = nslots;
    ts->indexed = 0;
    for (size_t k = 0; k < upto; k++) {
        size_t i = index_probe(ts, ts->v[k]->id);
        ts->slots[i] = k + 1;
        ts->indexed++;
    }
    return 0;
}

/* Drops v[mark..n): a failed load leaves the store as it found it. */
static void store_rollback(task_store *ts, size_t mark)
{
    for (size_t k = mark; k < ts->n; k++)
        task_free(ts->v[k]);
    ts->n = mark;
    if (ts->indexed > mark && index_rebuild(ts, mark, mark) != 0) {
        /* Out of memory: empty the index; find() scans until the next commit rebuilds it. */
        memset(ts->slots, 0, ts->nslots * sizeof *ts->slots);
        ts->indexed = 0;
    }
}

static int store_push(task_store *ts, task *t, char *err, size_t errcap)
{
    if (ts->n >= TASK_MAX_TASKS)
        return text_fail(err, errcap, "%s: more than %u tasks", t->origin,
                         (unsigned)TASK_MAX_TASKS);
    if (ts->n == ts->cap) {
        size_t cap = ts->cap ? ts->cap * 2 : 64;
        task **v = realloc(ts->v, cap * sizeof *v);
        if (!v)
            return text_fail(err, errcap, "out of memory");
        ts->v = v;
        ts->cap = cap;
    }
    ts->v[ts->n++] = t;
    return 0;
}

/* Indexes v[mark..n), refusing an id already present (in the store or earlier in the batch).
 * On failure the batch is rolled back. */
static int store_commit(task_store *ts, size_t mark, char *err, size_t errcap)
{
    if (index_rebuild(ts, ts->indexed, ts->n) != 0) {
        store_rollback(ts, mark);
        return text_fail(err, errcap, "out of memory");
    }
    for (size_t k = ts->indexed; k < ts->n; k++) {
        size_t i = index_probe(ts, ts->v[k]->id);
        if (ts->slots[i]) {
            const task *first = ts->v[ts->slots[i] - 1];
            text_fail(err, errcap, "duplicate task id '%s' (%s; first loaded from %s)",
                      ts->v[k]->id, ts->v[k]->origin, first->origin);
            store_rollback(ts, mark);
            return -1;
        }
        ts->slots[i] = k + 1;
        ts->indexed++;
    }
    return (int)(ts->n - mark);
}

/* ---------------------------------------------------------------- store API */

task_store *task_store_new(void)
{
    task_store *ts = calloc(1, sizeof *ts);
    if (ts && index_rebuild(ts, 0, 0) != 0) {
        free(ts);
        return NULL;
    }
    return ts;
}

void task_store_free(task_store *ts)
{
    if (!ts)
        return;
    for (size_t k = 0; k < ts->n; k++)
        task_free(ts->v[k]);
    free(ts->v);
    free(ts->slots);
    free(ts);
}

size_t task_store_count(const task_store *ts)
{
    return ts ? ts->n : 0;
}

const task *task_store_at(const task_store *ts, size_t i)
{
    return ts && i < ts->n ? ts->v[i] : NULL;
}

const task *task_store_find(const task_store *ts, const char *id)
{
    if (!ts || !id)
        return NULL;
    if (ts->indexed == ts->n && ts->nslots) {
        size_t i = index_probe(ts, id);
        return ts->slots[i] ? ts->v[ts->slots[i] - 1] : NULL;
    }
    for (size_t k = 0; k < ts->n; k++) /* only after an out-of-memory rollback */
        if (strcmp(ts->v[k]->id, id) == 0)
            return ts->v[k];
    return NULL;
}

/* ---------------------------------------------------------------- files */

/* Reads a whole regular file (at most max bytes) relative to dirfd. Returns 0, 1 when the file
 * does not exist and missing_ok, or -1 with a message. The text is NUL-terminated. */
static int read_capped(int dirfd, const char *rel, const char *shown, size_t max, bool missing_ok,
                       char **out, size_t *len_out, char *err, size_t errcap)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO planted in a dataset must not hang the server at start-up. */
    int fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT && missing_ok)
            return 1;
        return text_fail(err, errcap, "%s: %s", shown, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return text_fail(err, errcap, "%s: not a regular file", shown);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return text_fail(err, errcap, "%s: %lld bytes, over the limit of %zu", shown,
                         (long long)st.st_size, max);
    }
    char *buf = malloc(max + 2);
    if (!buf) {
        close(fd);
        return text_fail(err, errcap, "out of memory");
    }
    /* Read up to max + 1 bytes whatever fstat said: a file growing under us is still capped. */
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, max + 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return text_fail(err, errcap, "%s: %s", shown, strerror(e));
        }
        if (r == 0 || (len += (size_t)r) > max)
            break;
    }
    close(fd);
    if (len > max) {
        free(buf);
        return text_fail(err, errcap, "%s: over the limit of %zu bytes", shown, max);
    }
    buf[len] = '\0';
    *out = buf;
    if (len_out)
        *len_out = len;
    return 0;
}

/* Reads a Python source file: text, not empty. */
static int read_code(int dirfd, const char *rel, const char *shown, bool missing_ok, char **out,
                     char *err, size_t errcap)
{
    size_t len = 0;
    int rc =
        read_capped(dirfd, rel, shown, TASK_MAX_CODE_BYTES, missing_ok, out, &len, err, errcap);
    if (rc != 0)
        return rc;
    const char *why = !is_text(*out, len) ? "not UTF-8 text" : !has_content(*out) ? "empty" : NULL;
    if (why) {
        free(*out);
        *out = NULL;
        return text_fail(err, errcap, "%s: %s", shown, why);
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
    for (size_t k = 0; k < n; k++)
        free(names[k]);
    free(names);
}

typedef bool (*entry_filter)(int dirfd, const char *name);

/* Lists the entries of dirfd that pass keep, sorted by name (byte order, so the load order does
 * not depend on the file system or the locale). */
static int list_sorted(int dirfd, const char *shown, entry_filter keep, char ***names_out,
                       size_t *n_out, char *err, size_t errcap)
{
    int dup_fd = dup(dirfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        int e = errno;
        if (dup_fd >= 0)
            close(dup_fd);
        return text_fail(err, errcap, "%s: %s", shown, strerror(e));
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || !keep(dirfd, de->d_name))
            continue;
        if (n >= TASK_MAX_TASKS) {
            rc = text_fail(err, errcap, "%s: too many entries", shown);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nv = realloc(names, cap * sizeof *nv);
            if (!nv) {
                rc = text_fail(err, errcap, "out of memory");
                break;
            }
            names = nv;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = text_fail(err, errcap, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (rc != 0) {
        free_names(names, n);
        return -1;
    }
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    *names_out = names;
    *n_out = n;
    return 0;
}

static bool is_subdir(int dirfd, const char *name)
{
    struct stat st;
    return fstatat(dirfd, name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

/* ---------------------------------------------------------------- JSON fields */

/* The fields every source may carry, read from one JSON object. Pointers borrow from it. */
typedef struct common_fields {
    const char *id, *suite, *name, *description;
    int level;
    double atol, rtol;
} common_fields;

/* Keys consumed into struct fields (or, for "cpu_sizes", into code_cpu): everything else goes
 * to meta. */
static const char *const CORE_KEYS[] = {"id",   "suite", "name",     "description", "level", "atol",
                                        "rtol", "code",  "code_cpu", "cpu_sizes",   NULL};

static bool is_core_key(const char *k)
{
    for (size_t i = 0; CORE_KEYS[i]; i++)
        if (strcmp(CORE_KEYS[i], k) == 0)
            return true;
    return false;
}

static int opt_string(const json_t *obj, const char *key, size_t max, const char **out,
                      const char *where, char *err, size_t errcap)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return text_fail(err, errcap, "%s: \"%s\" must be a string", where, key);
    if (json_string_length(v) > max || strlen(json_string_value(v)) != json_string_length(v))
        return text_fail(err, errcap, "%s: \"%s\" is too long or holds a NUL byte", where, key);
    *out = json_string_value(v);
    return 0;
}

static int opt_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out,
                   const char *where, char *err, size_t errcap)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return text_fail(err, errcap, "%s: \"%s\" must be an integer in %lld..%lld", where, key, lo,
                         hi);
    *out = json_integer_value(v);
    return 0;
}

static int opt_tol(const json_t *obj, const char *key, double *out, const char *where, char *err,
                   size_t errcap)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    double d = json_is_number(v) ? json_number_value(v) : -1;
    if (!(d >= 0 && isfinite(d)))
        return text_fail(err, errcap, "%s: \"%s\" must be a finite number >= 0", where, key);
    *out = d;
    return 0;
}

static int read_common(const json_t *obj, common_fields *f, const char *where, char *err,
                       size_t errcap)
{
    memset(f, 0, sizeof *f);
    f->atol = f->rtol = DEFAULT_TOL;
    long long level = 0;
    if (opt_string(obj, "id", TASK_MAX_ID_LEN, &f->id, where, err, errcap) ||
        opt_string(obj, "suite", TASK_MAX_ID_LEN, &f->suite, where, err, errcap) ||
        opt_string(obj, "name", MAX_NAME_BYTES, &f->name, where, err, errcap) ||
        opt_string(obj, "description", MAX_DESCRIPTION_BYTES, &f->description, where, err,
                   errcap) ||
        opt_int(obj, "level", 0, MAX_LEVEL, &level, where, err, errcap) ||
        opt_tol(obj, "atol", &f->atol, where, err, errcap) ||
        opt_tol(obj, "rtol", &f->rtol, where, err, errcap))
        return -1;
    f->level = (int)level;
    if (f->id && !task_id_valid(f->id))
        return text_fail(err, errcap, "%s: invalid task id '%s'", where, f->id);
    if (f->suite && !suite_valid(f->suite))
        return text_fail(err, errcap, "%s: invalid suite '%s'", where, f->suite);
    return 0;
}

/* A new object holding obj's non-core fields (shared references: loaded JSON is never
 * mutated). NULL on no memory. */
static json_t *meta_from(const json_t *obj)
{
    json_t *meta = json_object();
    const char *k;
    json_t *v;
    if (!meta)
        return NULL;
    json_object_foreach((json_t *)obj, k, v)
    {
        if (!is_core_key(k) && json_object_set(meta, k, v) != 0) {
            json_decref(meta);
            return NULL;
        }
    }
    return meta;
}

/* Makes a task from its parts. code, code_cpu and meta are taken over (freed on failure);
 * strings are copied. NULL on no memory. */
static task *task_make(const char *id, const char *suite, const char *name, const char *desc,
                       int level, char *code, char *code_cpu, double atol, double rtol,
                       json_t *meta, const char *origin)
{
    task *t = calloc(1, sizeof *t);
    if (!t || !meta) {
        free(t);
        free(code);
        free(code_cpu);
        json_decref(meta);
        return NULL;
    }
    t->code = code;
    t->code_cpu = code_cpu;
    digest_sha256_hex(code, strlen(code), t->code_sha256);
    if (code_cpu)
        digest_sha256_hex(code_cpu, strlen(code_cpu), t->code_cpu_sha256);
    t->meta = meta;
    t->level = level;
    t->atol = atol;
    t->rtol = rtol;
    t->id = xstrdup(id);
    t->suite = xstrdup(suite);
    t->name = xstrdup(name);
    t->description = xstrdup(desc ? desc : "");
    t->origin = xstrdup(origin);
    if (!t->id || !t->suite || !t->name || !t->description || !t->origin) {
        task_free(t);
        return NULL;
    }
    return t;
}

/* Parses one JSON object from text (a JSONL line or a task.json). Duplicate keys are refused:
 * which of the two a reader would keep is ambiguous. */
static json_t *parse_object(const char *text, size_t len, const char *where, char *err,
                            size_t errcap)
{
    json_error_t je;
    json_t *obj = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!obj) {
        text_fail(err, errcap, "%s: invalid JSON: %s (column %d)", where, je.text, je.column);
        return NULL;
    }
    if (!json_is_object(obj)) {
        json_decref(obj);
        text_fail(err, errcap, "%s: not a JSON object", where);
        return NULL;
    }
    return obj;
}

/* Takes a "code"-like string field as a new malloc'd string. Returns 0 (absent: *out = NULL,
 * unless required), -1 on a bad value. */
static int take_code_field(const json_t *obj, const char *key, bool required, char **out,
                           const char *where, char *err, size_t errcap)
{
    *out = NULL;
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return required ? text_fail(err, errcap, "%s: missing \"%s\"", where, key) : 0;
    if (!json_is_string(v))
        return text_fail(err, errcap, "%s: \"%s\" must be a string", where, key);
    size_t len = json_string_length(v);
    const char *s = json_string_value(v);
    if (len > TASK_MAX_CODE_BYTES)
        return text_fail(err, errcap, "%s: \"%s\" is %zu bytes, over the limit of %u", where, key,
                         len, (unsigned)TASK_MAX_CODE_BYTES);
    if (strlen(s) != len || !has_content(s))
        return text_fail(err, errcap, "%s: \"%s\" is empty or holds a NUL byte", where, key);
    if (!(*out = strdup(s)))
        return text_fail(err, errcap, "out of memory");
    return 0;
}

/* ---------------------------------------------------------------- CPU variant from "cpu_sizes" */

/* A CPU variant is usually model.py with smaller size constants. A near-copy of model.py drifts
 * from it, so the metadata may give only the sizes, "cpu_sizes": {"BATCH": 8, ...}, and code_cpu
 * is the code with each top-level line "BATCH = <anything>" replaced by "BATCH = 8". The rule is
 * textual rather than a Python parse so that anyone can predict it: the line starts at column 0
 * (an indented one is a local of a function or class, another variable) and reads exactly
 * "NAME = ", and there must be exactly one such line (with two, which one sets the size is a
 * guess, and rewriting both could change what the model computes). */

static bool is_ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* Whether name is an ASCII Python identifier: it is spliced into code as an assignment target,
 * so anything else could change the code beyond the one line. */
static bool is_identifier(const char *name)
{
    if (!is_ident_start(*name))
        return false;
    for (const char *p = name + 1; *p; p++)
        if (!is_ident_start(*p) && !(*p >= '0' && *p <= '9'))
            return false;
    return true;
}

/* Length of the line starting at p, without its '\n'. */
static size_t line_len(const char *p)
{
    const char *nl = strchr(p, '\n');
    return nl ? (size_t)(nl - p) : strlen(p);
}

/* Whether line[0..len) is a top-level "NAME = ..." for name (nlen bytes). */
static bool assigns(const char *line, size_t len, const char *name, size_t nlen)
{
    return len >= nlen + 3 && memcmp(line, name, nlen) == 0 && memcmp(line + nlen, " = ", 3) == 0;
}

static size_t count_assignments(const char *code, const char *name)
{
    size_t n = 0, nlen = strlen(name);
    for (const char *p = code; *p;) {
        size_t len = line_len(p);
        n += assigns(p, len, name, nlen);
        p += len + (p[len] == '\n');
    }
    return n;
}

/* The size in sizes that line[0..len) assigns (its name in *name), or NULL. Names differ, and
 * "NAME = " ends at the '=', so at most one matches. */
static const json_t *size_of_line(const json_t *sizes, const char *line, size_t len,
                                  const char **name)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)sizes, k, v)
    {
        if (assigns(line, len, k, strlen(k))) {
            *name = k;
            return v;
        }
    }
    return NULL;
}

/* The Python literal for a size: integers as integers, reals with %.17g (which round-trips a
 * double), plus ".0" when that reads as an integer so that a real stays a float in Python. */
static void size_literal(const json_t *v, char *out, size_t cap)
{
    if (json_is_integer(v)) {
        bfmt(out, cap, "%lld", (long long)json_integer_value(v));
        return;
    }
    bfmt(out, cap, "%.17g", json_real_value(v));
    size_t len = strlen(out);
    if (!strpbrk(out, ".e") && len + 3 <= cap)
        memcpy(out + len, ".0", 3);
}

/* Checks "cpu_sizes" itself (where names the metadata): an object of identifier → number. */
static int check_cpu_sizes(const json_t *sizes, const char *where, char *err, size_t errcap)
{
    if (!json_is_object(sizes))
        return text_fail(err, errcap, "%s: \"cpu_sizes\" must be an object of NAME: number", where);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)sizes, k, v)
    {
        if (!is_identifier(k))
            return text_fail(err, errcap, "%s: \"cpu_sizes\": '%s' is not a Python identifier",
                             where, k);
        if (!json_is_number(v))
            return text_fail(err, errcap, "%s: \"cpu_sizes\": %s must be a number", where, k);
    }
    return 0;
}

/* Checks that code (code_where names it) assigns each size on exactly one top-level line. */
static int check_assignments(const json_t *sizes, const char *code, const char *code_where,
                             char *err, size_t errcap)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)sizes, k, v)
    {
        size_t n = count_assignments(code, k);
        if (n == 0)
            return text_fail(err, errcap,
                             "%s: \"cpu_sizes\" sets %s, but no top-level line reads \"%s = ...\"",
                             code_where, k, k);
        if (n > 1)
            return text_fail(
                err, errcap,
                "%s: \"cpu_sizes\" sets %s, but %zu top-level lines read \"%s = ...\" (one must)",
                code_where, k, n, k);
    }
    return 0;
}

/* code with each size's line rewritten, as a new string (NULL on no memory). The sizes are
 * checked already. A "\r" ending the old line is kept, so CRLF files stay CRLF. */
static char *rewrite_sizes(const json_t *sizes, const char *code)
{
    strbuf sb = STRBUF_INIT;
    int bad = 0;
    for (const char *p = code; *p && !bad;) {
        size_t len = line_len(p);
        const char *name = NULL;
        const json_t *v = size_of_line(sizes, p, len, &name);
        if (v) {
            char lit[40];
            size_literal(v, lit, sizeof lit);
            bad |= sb_printf(&sb, "%s = %s%s", name, lit, len && p[len - 1] == '\r' ? "\r" : "");
        } else {
            bad |= sb_append(&sb, p, len);
        }
        if (p[len] == '\n')
            bad |= sb_putc(&sb, '\n');
        p += len + (p[len] == '\n');
    }
    if (bad) {
        sb_free(&sb);
        return NULL;
    }
    return sb_steal(&sb);
}

/* Whether obj gives "cpu_sizes" (null counts as absent, as for the other optional fields). */
static bool has_cpu_sizes(const json_t *obj)
{
    const json_t *v = json_object_get(obj, "cpu_sizes");
    return v && !json_is_null(v);
}

/* Derives *out (NULL when obj has no "cpu_sizes") from code and obj's "cpu_sizes". where names
 * the metadata, code_where the code, for messages. */
static int derive_code_cpu(const json_t *obj, const char *code, const char *where,
                           const char *code_where, char **out, char *err, size_t errcap)
{
    *out = NULL;
    if (!has_cpu_sizes(obj))
        return 0;
    const json_t *sizes = json_object_get(obj, "cpu_sizes");
    if (check_cpu_sizes(sizes, where, err, errcap) != 0 ||
        check_assignments(sizes, code, code_where, err, errcap) != 0)
        return -1;
    if (!(*out = rewrite_sizes(sizes, code)))
        return text_fail(err, errcap, "out of memory");
    if (strlen(*out) > TASK_MAX_CODE_BYTES) { /* sizes can lengthen the lines they replace */
        free(*out);
        *out = NULL;
        return text_fail(err, errcap, "%s: the code at \"cpu_sizes\" is over the limit of %u bytes",
                         code_where, (unsigned)TASK_MAX_CODE_BYTES);
    }
    return 0;
}

/* ---------------------------------------------------------------- JSONL reading */

typedef int (*line_fn)(task_store *ts, const json_t *obj, long lineno, const char *where, void *ctx,
                       char *err, size_t errcap);

/* Calls fn for each non-blank line of a JSONL file, parsed as an object. Stops at the first
 * failure. */
static int for_each_jsonl(task_store *ts, const char *path, line_fn fn, void *ctx, char *err,
                          size_t errcap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        return text_fail(err, errcap, "%s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return text_fail(err, errcap, "%s: not a regular file", path);
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return text_fail(err, errcap, "%s: %s", path, strerror(errno));
    }
    char *line = NULL, where[512];
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        bfmt(where, sizeof where, "%s:%ld", path, lineno);
        if ((size_t)len > TASK_MAX_LINE_BYTES) {
            rc = text_fail(err, errcap, "%s: line of %zd bytes, over the limit of %u", where, len,
                           (unsigned)TASK_MAX_LINE_BYTES);
            break;
        }
        const char *text = line;
        if (lineno == 1 && len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
            text += 3, len -= 3; /* a UTF-8 byte-order mark some editors write */
        if (memchr(text, '\0', (size_t)len)) {
            rc = text_fail(err, errcap, "%s: NUL byte in line", where);
            break;
        }
        if (!has_content(text))
            continue;
        json_t *obj = parse_object(text, (size_t)len, where, err, errcap);
        if (!obj) {
            rc = -1;
            break;
        }
        rc = fn(ts, obj, lineno, where, ctx, err, errcap);
        json_decref(obj);
    }
    if (rc == 0 && ferror(f))
        rc = text_fail(err, errcap, "%s: read error", path);
    free(line);
    fclose(f);
    return rc;
}

/* ---------------------------------------------------------------- directory of task folders */

/* Loads one folder <dir>/<folder>: model.py, task.json, and the CPU variant from either
 * task.json's "cpu_sizes" or a model_cpu.py (for a variant that differs in more than sizes). */
static int load_task_folder(task_store *ts, int dirfd, const char *dir, const char *folder,
                            char *err, size_t errcap)
{
    char where[1024], shown[1100], model_shown[1100];
    bfmt(where, sizeof where, "%s/%s", dir, folder);
    int fd = openat(dirfd, folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return text_fail(err, errcap, "%s: %s", where, strerror(errno));
    char *code = NULL, *code_cpu = NULL, *meta_text = NULL;
    json_t *obj = NULL;
    size_t meta_len = 0;
    int rc = -1;

    bfmt(model_shown, sizeof model_shown, "%s/model.py", where);
    int r = read_code(fd, "model.py", model_shown, true, &code, err, errcap);
    if (r != 0) {
        if (r == 1)
            text_fail(err, errcap, "%s: task folder without model.py", where);
        goto out;
    }
    bfmt(shown, sizeof shown, "%s/model_cpu.py", where);
    if (read_code(fd, "model_cpu.py", shown, true, &code_cpu, err, errcap) < 0)
        goto out;
    bfmt(shown, sizeof shown, "%s/task.json", where);
    r = read_capped(fd, "task.json", shown, TASK_MAX_META_BYTES, true, &meta_text, &meta_len, err,
                    errcap);
    if (r != 0) {
        if (r == 1)
            text_fail(err, errcap, "%s: task folder without task.json", where);
        goto out;
    }
    if (!(obj = parse_object(meta_text, meta_len, shown, err, errcap)))
        goto out;
    if (json_object_get(obj, "code") || json_object_get(obj, "code_cpu")) {
        text_fail(err, errcap, "%s: \"code\" belongs in model.py, not task.json", shown);
        goto out;
    }
    common_fields f;
    if (read_common(obj, &f, shown, err, errcap) != 0)
        goto out;
    if (code_cpu && has_cpu_sizes(obj)) { /* two sources for one variant: neither may win */
        text_fail(err, errcap,
                  "%s: both model_cpu.py and task.json \"cpu_sizes\" give the CPU variant", where);
        goto out;
    }
    if (!code_cpu && derive_code_cpu(obj, code, shown, model_shown, &code_cpu, err, errcap) != 0)
        goto out;
    const char *suite = f.suite ? f.suite : "kgym";
    char id[TASK_MAX_ID_LEN + 64];
    if (f.id) {
        bfmt(id, sizeof id, "%s", f.id);
    } else if (snprintf(id, sizeof id, "%s/%s", suite, folder) >= (int)sizeof id ||
               !task_id_valid(id)) {
        text_fail(err, errcap, "%s: folder name '%s' cannot form a task id", where, folder);
        goto out;
    }
    task *t = task_make(id, suite, f.name ? f.name : folder, f.description, f.level, code, code_cpu,
                        f.atol, f.rtol, meta_from(obj), where);
    code = code_cpu = NULL; /* taken over by task_make, even when it fails */
    if (!t) {
        text_fail(err, errcap, "out of memory");
        goto out;
    }
    if (store_push(ts, t, err, errcap) != 0) {
        task_free(t);
        goto out;
    }
    rc = 0;
out:
    free(code);
    free(code_cpu);
    free(meta_text);
    json_decref(obj);
    close(fd);
    return rc;
}

int task_store_load_dir(task_store *ts, const char *dir, char *err, size_t errcap)
{
    if (!ts || !dir)
        return text_fail(err, errcap, "no store or directory given");
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return text_fail(err, errcap, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    if (list_sorted(dirfd, dir, is_subdir, &names, &n, err, errcap) != 0) {
        close(dirfd);
        return -1;
    }
    size_t mark = ts->n;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = load_task_folder(ts, dirfd, dir, names[k], err, errcap);
    free_names(names, n);
    close(dirfd);
    if (rc != 0) {
        store_rollback(ts, mark);
        return -1;
    }
    return store_commit(ts, mark, err, errcap);
}

/* ---------------------------------------------------------------- Ops-style JSONL */

/* A readable name for an Ops-6K line without one: its ops joined by '+', else the id. */
static void ops_name(const json_t *obj, const char *id, char *out, size_t cap)
{
    const json_t *ops = json_object_get(obj, "ops");
    strbuf sb = STRBUF_INIT;
    if (json_is_string(ops)) {
        sb_puts(&sb, json_string_value(ops));
    } else if (json_is_array(ops)) {
        size_t i;
        const json_t *op;
        json_array_foreach(ops, i, op)
        {
            if (!json_is_string(op))
                continue;
            if (sb.len)
                sb_putc(&sb, '+');
            sb_puts(&sb, json_string_value(op));
        }
    }
    bfmt(out, cap, "%s", sb.len ? sb.data : id);
    sb_free(&sb);
}

static int ops_line(task_store *ts, const json_t *obj, long lineno, const char *where, void *ctx,
                    char *err, size_t errcap)
{
    (void)ctx;
    common_fields f;
    char *code = NULL, *code_cpu = NULL;
    if (read_common(obj, &f, where, err, errcap) != 0 ||
        take_code_field(obj, "code", true, &code, where, err, errcap) != 0 ||
        take_code_field(obj, "code_cpu", false, &code_cpu, where, err, errcap) != 0) {
        free(code);
        return -1;
    }
    /* "cpu_sizes" works here as in task.json (it is a core key, so it would otherwise vanish
     * without a word). */
    char code_where[600];
    bfmt(code_where, sizeof code_where, "%s: \"code\"", where);
    if (code_cpu && has_cpu_sizes(obj)) {
        free(code);
        free(code_cpu);
        return text_fail(err, errcap,
                         "%s: both \"code_cpu\" and \"cpu_sizes\" give the CPU variant", where);
    }
    if (!code_cpu && derive_code_cpu(obj, code, where, code_where, &code_cpu, err, errcap) != 0) {
        free(code);
        return -1;
    }
    const char *suite = f.suite ? f.suite : "ops";
    char id[TASK_MAX_ID_LEN + 32], name[MAX_NAME_BYTES + 1];
    if (f.id)
        bfmt(id, sizeof id, "%s", f.id);
    else
        bfmt(id, sizeof id, "%s/%ld", suite, lineno);
    if (f.name)
        bfmt(name, sizeof name, "%s", f.name);
    else
        ops_name(obj, id, name, sizeof name);
    task *t = task_make(id, suite, name, f.description, f.level, code, code_cpu, f.atol, f.rtol,
                        meta_from(obj), where);
    if (!t)
        return text_fail(err, errcap, "out of memory");
    if (store_push(ts, t, err, errcap) != 0) {
        task_free(t);
        return -1;
    }
    return 0;
}

int task_store_load_jsonl(task_store *ts, const char *path, char *err, size_t errcap)
{
    if (!ts || !path)
        return text_fail(err, errcap, "no store or path given");
    size_t mark = ts->n;
    if (for_each_jsonl(ts, path, ops_line, NULL, err, errcap) != 0) {
        store_rollback(ts, mark);
        return -1;
    }
    return store_commit(ts, mark, err, errcap);
}

/* ---------------------------------------------------------------- KernelBench */

/* One KernelBench problem before it joins the store, kept to sort by (level, problem_id). */
typedef struct kb_entry {
    int level;
    long long pid;
    size_t seq; /* arrival order: ties (which are duplicates) stay in a stable order */
    task *t;
} kb_entry;

typedef struct kb_batch {
    kb_entry *v;
    size_t n, cap;
} kb_batch;

static void kb_batch_free(kb_batch *b)
{
    for (size_t k = 0; k < b->n; k++)
        task_free(b->v[k].t);
    free(b->v);
}

static int cmp_kb(const void *a, const void *b)
{
    const kb_entry *x = a, *y = b;
    if (x->level != y->level)
        return x->level < y->level ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Makes the KernelBench task for (level, pid) and adds it to the batch. code and meta are
 * taken over. */
static int kb_add(kb_batch *b, int level, long long pid, const char *name, char *code, json_t *meta,
                  const char *origin, char *err, size_t errcap)
{
    if (meta && json_object_set_new(meta, "problem_id", json_integer(pid)) != 0) {
        json_decref(meta);
        meta = NULL;
    }
    char id[64];
    bfmt(id, sizeof id, "kb/L%d/%lld", level, pid);
    task *t = task_make(id, "kernelbench", name, "", level, code, NULL, DEFAULT_TOL, DEFAULT_TOL,
                        meta, origin);
    if (!t)
        return text_fail(err, errcap, "out of memory");
    if (b->n >= TASK_MAX_TASKS) {
        task_free(t);
        return text_fail(err, errcap, "%s: too many tasks", origin);
    }
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        kb_entry *v = realloc(b->v, cap * sizeof *v);
        if (!v) {
            task_free(t);
            return text_fail(err, errcap, "out of memory");
        }
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n] = (kb_entry){level, pid, b->n, t};
    b->n++;
    return 0;
}

/* Sorts the batch and moves it into the store (all or nothing). */
static int kb_commit(task_store *ts, kb_batch *b, char *err, size_t errcap)
{
    if (b->n)
        qsort(b->v, b->n, sizeof *b->v, cmp_kb);
    size_t mark = ts->n;
    for (size_t k = 0; k < b->n; k++) {
        if (store_push(ts, b->v[k].t, err, errcap) != 0) {
            store_rollback(ts, mark); /* frees v[0..k) through the store */
            for (size_t j = 0; j < k; j++)
                b->v[j].t = NULL;
            return -1;
        }
        b->v[k].t = NULL;
    }
    return store_commit(ts, mark, err, errcap);
}

/* "<digits>_<rest>.py" → problem id; -1 when the name does not have that form. */
static long long kb_problem_id(const char *file)
{
    size_t len = strlen(file);
    if (len < 5 || strcmp(file + len - 3, ".py") != 0)
        return -1;
    long long pid = 0;
    size_t i = 0;
    for (; file[i] >= '0' && file[i] <= '9'; i++) {
        if (pid > 100000000)
            return -1;
        pid = pid * 10 + (file[i] - '0');
    }
    return (i > 0 && file[i] == '_' && i + 1 < len - 3) ? pid : -1;
}

static bool is_py_file(int dirfd, const char *name)
{
    size_t len = strlen(name);
    struct stat st;
    /* "_"-prefixed files (__init__.py) are package plumbing, not problems. */
    return name[0] != '_' && len > 3 && strcmp(name + len - 3, ".py") == 0 &&
           fstatat(dirfd, name, &st, 0) == 0 && !S_ISDIR(st.st_mode);
}

static int kb_load_level_dir(kb_batch *b, int basefd, const char *base, int level, char *err,
                             size_t errcap)
{
    char sub[16], shown[1024], file_shown[1400], rel[320];
    bfmt(sub, sizeof sub, "level%d", level);
    bfmt(shown, sizeof shown, "%s/%s", base, sub);
    int fd = openat(basefd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : text_fail(err, errcap, "%s: %s", shown, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    int rc = list_sorted(fd, shown, is_py_file, &names, &n, err, errcap);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        bfmt(file_shown, sizeof file_shown, "%s/%s", shown, names[k]);
        long long pid = kb_problem_id(names[k]);
        if (pid < 0) {
            rc = text_fail(err, errcap, "%s: not named <problem_id>_<Name>.py", file_shown);
            break;
        }
        char *code = NULL;
        if ((rc = read_code(fd, names[k], file_shown, false, &code, err, errcap)) != 0)
            break;
        names[k][strlen(names[k]) - 3] = '\0'; /* the name is the file name without .py */
        json_t *meta = json_object();
        bfmt(rel, sizeof rel, "%s/%s.py", sub, names[k]);
        if (meta)
            json_object_set_new(meta, "file", json_string(rel));
        rc = kb_add(b, level, pid, names[k], code, meta, file_shown, err, errcap);
    }
    if (names)
        free_names(names, n);
    close(fd);
    return rc;
}

static int kb_load_checkout(task_store *ts, const char *path, char *err, size_t errcap)
{
    /* Either the folder holding level1..3, or a repository root holding KernelBench/level*. */
    char base[1024];
    bfmt(base, sizeof base, "%s", path);
    int basefd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (basefd < 0)
        return text_fail(err, errcap, "%s: %s", path, strerror(errno));
    bool found = false;
    for (int lv = 1; lv <= 3 && !found; lv++) {
        char sub[16];
        bfmt(sub, sizeof sub, "level%d", lv);
        found = is_subdir(basefd, sub);
    }
    if (!found && is_subdir(basefd, "KernelBench")) {
        int inner = openat(basefd, "KernelBench", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(basefd);
        basefd = inner;
        bfmt(base, sizeof base, "%s/KernelBench", path);
        for (int lv = 1; lv <= 3 && !found && basefd >= 0; lv++) {
            char sub[16];
            bfmt(sub, sizeof sub, "level%d", lv);
            found = is_subdir(basefd, sub);
        }
    }
    if (!found) {
        if (basefd >= 0)
            close(basefd);
        return text_fail(err, errcap, "%s: no level1..level3 folder here or under KernelBench/",
                         path);
    }
    kb_batch b = {0};
    int rc = 0;
    for (int lv = 1; lv <= 3 && rc == 0; lv++)
        rc = kb_load_level_dir(&b, basefd, base, lv, err, errcap);
    close(basefd);
    if (rc == 0)
        rc = kb_commit(ts, &b, err, errcap);
    kb_batch_free(&b);
    return rc;
}

static int kb_line(task_store *ts, const json_t *obj, long lineno, const char *where, void *ctx,
                   char *err, size_t errcap)
{
    (void)ts;
    (void)lineno;
    kb_batch *b = ctx;
    long long level = -1, pid = -1;
    const char *name = NULL;
    char *code = NULL;
    if (opt_int(obj, "level", 1, MAX_LEVEL, &level, where, err, errcap) ||
        opt_int(obj, "problem_id", 0, 100000000, &pid, where, err, errcap) ||
        opt_string(obj, "name", MAX_NAME_BYTES, &name, where, err, errcap))
        return -1;
    if (level < 0 || pid < 0)
        return text_fail(err, errcap, "%s: missing \"%s\"", where,
                         level < 0 ? "level" : "problem_id");
    if (take_code_field(obj, "code", true, &code, where, err, errcap) != 0)
        return -1;
    char nm[MAX_NAME_BYTES + 1];
    if (name)
        bfmt(nm, sizeof nm, "%s", name);
    else
        bfmt(nm, sizeof nm, "%lld", pid);
    size_t nl = strlen(nm);
    if (nl > 3 && strcmp(nm + nl - 3, ".py") == 0)
        nm[nl - 3] = '\0';
    json_t *meta = meta_from(obj);
    if (meta) {
        json_object_del(meta, "level");
        json_object_del(meta, "problem_id");
    }
    return kb_add(b, (int)level, pid, nm, code, meta, where, err, errcap);
}

int task_store_load_kernelbench(task_store *ts, const char *path, char *err, size_t errcap)
{
    if (!ts || !path)
        return text_fail(err, errcap, "no store or path given");
    struct stat st;
    if (stat(path, &st) != 0)
        return text_fail(err, errcap, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return kb_load_checkout(ts, path, err, errcap);
    kb_batch b = {0};
    int rc = for_each_jsonl(ts, path, kb_line, &b, err, errcap);
    if (rc == 0)
        rc = kb_commit(ts, &b, err, errcap);
    kb_batch_free(&b);
    return rc;
}

/* ---------------------------------------------------------------- JSON views */

/* code_sha256 (and code_cpu_sha256, null without a CPU variant) name the reference a client's
 * stored figures were measured on: a task id reused for other code shows as a new digest. */
json_t *task_summary_json(const task *t)
{
    if (!t)
        return NULL;
    return json_pack("{s:s, s:s, s:o, s:s, s:s, s:b, s:s, s:o}", "id", t->id, "suite", t->suite,
                     "level", t->level ? json_integer(t->level) : json_null(), "name", t->name,
                     "description", t->description, "has_cpu_variant", t->code_cpu != NULL,
                     "code_sha256", t->code_sha256, "code_cpu_sha256",
                     t->code_cpu ? json_string(t->code_cpu_sha256) : json_null());
}

json_t *task_detail_json(const task *t)
{
    json_t *o = task_summary_json(t);
    if (!o)
        return NULL;
    if (json_object_set_new(o, "code", json_string(t->code)) != 0 ||
        json_object_set_new(o, "code_cpu", t->code_cpu ? json_string(t->code_cpu) : json_null()) ||
        json_object_set_new(o, "atol", json_real(t->atol)) != 0 ||
        json_object_set_new(o, "rtol", json_real(t->rtol)) != 0) {
        json_decref(o);
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(t->meta, k, v)
    {
        if (!json_object_get(o, k) && json_object_set(o, k, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}
