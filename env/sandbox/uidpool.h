/* uidpool: the uids a server gives its episodes, one per open episode, never shared.
 *
 * Within a server: a uid is taken when an episode opens and given back when its workspace
 * goes, so no two open episodes ever share one, however long one stays open while thousands
 * of others come and go (a counter modulo the range could not promise that).
 *
 * Across servers on one host (a user's server and kgym-bench's private one, or several env
 * servers feeding one trainer): the range sandbox_uid_base .. +59,999 is cut into 6 blocks of
 * 10,000, and each server claims a free block with an exclusive flock on
 * <lock_dir>/uids-<first uid>.lock, held for its life (the kernel drops it when the process
 * dies, however it dies). When no block is free, or the lock dir cannot be used (not root), the
 * server falls back to the whole range from a random point, and says so in /v1/health. */
#ifndef KGYM_UIDPOOL_H
#define KGYM_UIDPOOL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define UIDPOOL_RANGE 60000u /* sandbox_uid_base .. base + 59,999 */
#define UIDPOOL_BLOCKS 6u
#define UIDPOOL_BLOCK (UIDPOOL_RANGE / UIDPOOL_BLOCKS)

typedef struct uid_pool {
    pthread_mutex_t lock;
    uid_t first;   /* the pool's first uid */
    unsigned size; /* its uids */
    unsigned next; /* where the search for a free one starts: a uid is reused late */
    unsigned in_use;
    uint8_t *used;        /* one flag per uid */
    int lock_fd;          /* the block's flock, -1 when none was claimed */
    char why_shared[160]; /* why no block was claimed ("" when one was) */
} uid_pool;

/* Claims a block of base's range under lock_dir (created 0700 if missing; NULL: claim none,
 * e.g. when episodes do not get uids of their own). Never fails for want of a block: see the
 * header comment. Returns 0, or -1 (out of memory) with err filled. */
int uid_pool_init(uid_pool *p, uid_t base, const char *lock_dir, char *err, size_t errcap);
void uid_pool_deinit(uid_pool *p);

/* A uid no open episode holds. Returns 0, or -1 when every uid of the pool is held. */
int uid_pool_take(uid_pool *p, uid_t *uid);
/* Gives a taken uid back (anything else is ignored). */
void uid_pool_give(uid_pool *p, uid_t uid);

/* {first, last, in_use, claimed, why_shared?} for /v1/health. */
json_t *uid_pool_json(uid_pool *p);

#endif
