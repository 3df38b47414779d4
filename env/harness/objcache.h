/* objcache: keeps the object cache (<build cache>/obj/<sha256>.o, written by build.c) under a
 * size cap, least recently used first. Without it a long RL run grows the cache by every
 * distinct source any agent ever compiled, until the disk is full.
 *
 * Recency is the file's mtime: a store sets it, and build.c touches it on every cache hit. When
 * the objects stored since the last count push the total past max_bytes, the oldest are removed
 * until the total is at most 80% of the cap (so a trim, a directory scan, happens once per fifth
 * of the cap written, not on every store). Removing an object never breaks a build: a build
 * holds its objects through hard links of its own, and a hit that loses the race to a removal
 * finds no file and compiles the source again. Several servers may share one cache: each trims
 * what it finds on disk, so their counts converge at each trim. Compiler temporaries a crash
 * left behind (*.tmp-*, older than an hour) go at each trim too. */
#ifndef KGYM_OBJCACHE_H
#define KGYM_OBJCACHE_H

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct objcache {
    pthread_mutex_t lock;
    char obj_dir[PATH_MAX]; /* <cache_dir>/obj */
    uint64_t max_bytes;     /* 0: no cap (nothing is ever removed) */
    uint64_t bytes;         /* the objects' total as last counted, plus stores since */
    bool counted;           /* bytes holds a count (the first store counts the directory) */
    bool trimming;          /* a trim is running (others only add to bytes meanwhile) */
    uint64_t trims, evicted_files, evicted_bytes;
} objcache;

/* Sets up the cap for <cache_dir>/obj; nothing is read until the first store. Returns 0, or -1
 * when cache_dir is too long. */
int objcache_init(objcache *c, const char *cache_dir, uint64_t max_bytes);
void objcache_deinit(objcache *c);

/* A hit: the object at path was just used, so it is the last to go. */
void objcache_touch(const char *path);

/* A store of bytes: counted, and the cache trimmed when it went past the cap. c may be NULL
 * (no cap). */
void objcache_added(objcache *c, uint64_t bytes);

/* Counts the objects and removes the least recently used until they total at most
 * low_bytes; stale temporaries go too. Returns the total left, or UINT64_MAX when the
 * directory cannot be read. Used by objcache_added; exposed for tests. */
uint64_t objcache_trim_to(objcache *c, uint64_t low_bytes);

/* {bytes (null until counted), max_bytes (null: no cap), trims, evicted_files, evicted_bytes}
 * for /v1/health. */
json_t *objcache_json(objcache *c);

#endif
