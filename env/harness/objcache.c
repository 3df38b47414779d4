/* objcache: the object cache's size cap (see objcache.h). */
#include "harness/objcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/text.h"

#define TEMP_MAX_AGE_S                                                                             \
    3600 /* a store in progress takes seconds; older ones were left by a crash                     \
          */

int objcache_init(objcache *c, const char *cache_dir, uint64_t max_bytes)
{
    memset(c, 0, sizeof *c);
    if (!text_fmt(c->obj_dir, sizeof c->obj_dir, "%s/obj", cache_dir))
        return errno = ENAMETOOLONG, -1;
    c->max_bytes = max_bytes;
    pthread_mutex_init(&c->lock, NULL);
    return 0;
}

void objcache_deinit(objcache *c)
{
    pthread_mutex_destroy(&c->lock);
}

void objcache_touch(const char *path)
{
    /* best effort: a missing object only means it goes earlier than it might have */
    (void)utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW);
}

/* ---- the trim ----------------------------------------------------------------------------- */

typedef struct cached_object {
    struct timespec used; /* mtime: stored or last hit */
    uint64_t size;
    char name[72]; /* <64 hex>.o */
} cached_object;

typedef struct object_list {
    cached_object *v;
    size_t n, cap;
    uint64_t total;
} object_list;

static bool is_object_name(const char *name)
{
    size_t n = strlen(name);
    if (n != 66 || strcmp(name + 64, ".o") != 0)
        return false;
    return strspn(name, "0123456789abcdef") == 64;
}

static int list_push(object_list *l, const char *name, const struct stat *st)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        cached_object *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v, l->cap = cap;
    }
    cached_object *o = &l->v[l->n++];
    o->used = st->st_mtim;
    o->size = (uint64_t)st->st_size;
    text_fmt(o->name, sizeof o->name, "%s", name);
    l->total += o->size;
    return 0;
}

/* A temporary of build.c's store_file ("<key>.o.tmp-<pid>-<n>") old enough to be a leftover. */
static bool is_stale_temporary(const char *name, const struct stat *st, time_t now)
{
    return strstr(name, ".tmp-") && now - st->st_mtim.tv_sec > TEMP_MAX_AGE_S;
}

/* Lists the objects of the directory; removes stale temporaries on the way. */
static int list_objects(int dir_fd, object_list *l)
{
    DIR *d = fdopendir(dir_fd);
    if (!d)
        return -1;
    time_t now = time(NULL);
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        struct stat st;
        if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (is_object_name(e->d_name))
            rc = list_push(l, e->d_name, &st);
        else if (is_stale_temporary(e->d_name, &st, now))
            (void)unlinkat(dir_fd, e->d_name, 0);
    }
    closedir(d); /* closes dir_fd */
    return rc;
}

static int older_first(const void *a, const void *b)
{
    const cached_object *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec)
        return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Counts the objects; when they total more than trigger, removes the least recently used
 * until they total at most low. Returns the total left (UINT64_MAX: unreadable). */
static uint64_t scan_and_evict(objcache *c, uint64_t trigger, uint64_t low)
{
    int dir_fd = open(c->obj_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir_fd < 0)
        return errno == ENOENT ? 0 : UINT64_MAX; /* no object stored yet */
    /* the unlinks below need a directory fd of their own: list_objects closes dir_fd */
    int rm_fd = dup(dir_fd);
    object_list l = {0};
    uint64_t files = 0, freed = 0;
    if (rm_fd < 0 || list_objects(dir_fd, &l) != 0) {
        if (rm_fd >= 0)
            close(rm_fd);
        free(l.v);
        return UINT64_MAX;
    }
    if (l.total > trigger) {
        qsort(l.v, l.n, sizeof *l.v, older_first);
        for (size_t i = 0; i < l.n && l.total - freed > low; i++) {
            if (unlinkat(rm_fd, l.v[i].name, 0) != 0)
                continue; /* another server sharing the cache removed it first */
            files++;
            freed += l.v[i].size;
        }
    }
    close(rm_fd);
    uint64_t left = l.total - freed;
    free(l.v);
    pthread_mutex_lock(&c->lock);
    c->trims += l.total > trigger;
    c->evicted_files += files;
    c->evicted_bytes += freed;
    pthread_mutex_unlock(&c->lock);
    return left;
}

uint64_t objcache_trim_to(objcache *c, uint64_t low_bytes)
{
    return scan_and_evict(c, low_bytes, low_bytes);
}

/* The level a trim brings the cache down to: far enough below the cap that the next trim is
 * a fifth of the cap's worth of stores away. */
static uint64_t low_water(uint64_t max_bytes)
{
    return max_bytes / 5 * 4;
}

void objcache_added(objcache *c, uint64_t bytes)
{
    if (!c || !c->max_bytes)
        return;
    pthread_mutex_lock(&c->lock);
    c->bytes += bytes;
    bool over = c->bytes > c->max_bytes;
    bool scan = !c->trimming && (!c->counted || over);
    if (scan)
        c->trimming = true;
    uint64_t at_start = c->bytes;
    pthread_mutex_unlock(&c->lock);
    if (!scan)
        return;
    /* the first count trims only past the cap; later ones were called because it was passed */
    uint64_t left = scan_and_evict(c, c->max_bytes, low_water(c->max_bytes));
    pthread_mutex_lock(&c->lock);
    if (left != UINT64_MAX) {
        /* stores during the scan count on top (one the scan saw counts twice until the next) */
        c->bytes = left + (c->bytes - at_start);
        c->counted = true;
    }
    c->trimming = false;
    pthread_mutex_unlock(&c->lock);
}

json_t *objcache_json(objcache *c)
{
    pthread_mutex_lock(&c->lock);
    json_t *j =
        json_pack("{s:o, s:o, s:I, s:I, s:I}", "bytes",
                  c->counted ? json_integer((json_int_t)c->bytes) : json_null(), "max_bytes",
                  c->max_bytes ? json_integer((json_int_t)c->max_bytes) : json_null(), "trims",
                  (json_int_t)c->trims, "evicted_files", (json_int_t)c->evicted_files,
                  "evicted_bytes", (json_int_t)c->evicted_bytes);
    pthread_mutex_unlock(&c->lock);
    return j;
}
