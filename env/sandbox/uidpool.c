/* uidpool: the episodes' uids (see uidpool.h). */
#include "sandbox/uidpool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tries each block's lock in turn; returns the claimed block's index, or -1 (why says). */
static int claim_block(uid_t base, const char *lock_dir, int *fd_out, char *why, size_t cap)
{
    if (mkdir(lock_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, cap, "cannot create %s: %s", lock_dir, strerror(errno));
        return -1;
    }
    int last_errno = 0;
    for (unsigned b = 0; b < UIDPOOL_BLOCKS; b++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/uids-%u.lock", lock_dir,
                 (unsigned)base + b * UIDPOOL_BLOCK);
        /* CLOEXEC: a child that inherited it would hold the block after this server died */
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            *fd_out = fd;
            return (int)b;
        }
        last_errno = errno;
        close(fd);
    }
    if (last_errno == EWOULDBLOCK)
        snprintf(why, cap, "all %u uid blocks of %u.. are held by other servers", UIDPOOL_BLOCKS,
                 (unsigned)base);
    else
        snprintf(why, cap, "cannot lock a uid block under %s: %s", lock_dir, strerror(last_errno));
    return -1;
}

int uid_pool_init(uid_pool *p, uid_t base, const char *lock_dir, char *err, size_t errcap)
{
    memset(p, 0, sizeof *p);
    p->lock_fd = -1;
    int block = -1;
    if (lock_dir)
        block = claim_block(base, lock_dir, &p->lock_fd, p->why_shared, sizeof p->why_shared);
    else
        snprintf(p->why_shared, sizeof p->why_shared, "episodes run without uids of their own");
    if (block >= 0) {
        p->first = base + (uid_t)block * UIDPOOL_BLOCK;
        p->size = UIDPOOL_BLOCK;
    } else {
        /* the whole range from a random point: two such servers rarely meet */
        unsigned r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (unsigned)getpid();
        p->first = base;
        p->size = UIDPOOL_RANGE;
        p->next = r % UIDPOOL_RANGE;
    }
    p->used = calloc(p->size, 1);
    if (!p->used) {
        snprintf(err, errcap, "out of memory");
        if (p->lock_fd >= 0)
            close(p->lock_fd);
        return -1;
    }
    pthread_mutex_init(&p->lock, NULL);
    return 0;
}

void uid_pool_deinit(uid_pool *p)
{
    if (!p->used)
        return;
    if (p->lock_fd >= 0)
        close(p->lock_fd); /* releases the block */
    free(p->used);
    p->used = NULL;
    pthread_mutex_destroy(&p->lock);
}

int uid_pool_take(uid_pool *p, uid_t *uid)
{
    int rc = -1;
    pthread_mutex_lock(&p->lock);
    for (unsigned i = 0; i < p->size && rc != 0; i++) {
        unsigned k = (p->next + i) % p->size;
        if (p->used[k])
            continue;
        p->used[k] = 1;
        p->in_use++;
        p->next = (k + 1) % p->size;
        *uid = p->first + k;
        rc = 0;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

void uid_pool_give(uid_pool *p, uid_t uid)
{
    pthread_mutex_lock(&p->lock);
    if (uid >= p->first && uid - p->first < p->size && p->used[uid - p->first]) {
        p->used[uid - p->first] = 0;
        p->in_use--;
    }
    pthread_mutex_unlock(&p->lock);
}

json_t *uid_pool_json(uid_pool *p)
{
    pthread_mutex_lock(&p->lock);
    json_t *j = json_pack("{s:I, s:I, s:I, s:b}", "first", (json_int_t)p->first, "last",
                          (json_int_t)p->first + p->size - 1, "in_use", (json_int_t)p->in_use,
                          "claimed", p->lock_fd >= 0);
    if (p->lock_fd < 0)
        json_object_set_new(j, "why_shared", json_string(p->why_shared));
    pthread_mutex_unlock(&p->lock);
    return j;
}
