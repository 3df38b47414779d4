/* lease: exclusive GPU leases, first come first served (a ticket queue on one mutex), and shared
 * ones for work that times nothing. */
#include "harness/lease.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util/text.h"

static bool in_list(const char *only, int ordinal)
{
    for (const char *p = only; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            return false;
        if (v == ordinal)
            return true;
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

static bool list_valid(const char *only)
{
    for (const char *p = only; *p; p++)
        if (!(*p == ',' || (*p >= '0' && *p <= '9')))
            return false;
    return only[0] != '\0';
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int gpu_pool_init(gpu_pool *p, const char *dev_dir, const char *only)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->freed, NULL);
    if (only && !list_valid(only))
        return -1;
    int found[GPU_POOL_MAX], n = 0;
    DIR *d = opendir(dev_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < GPU_POOL_MAX) {
        char *end;
        if (strncmp(e->d_name, "nvidia", 6) != 0 || e->d_name[6] < '0' || e->d_name[6] > '9')
            continue;
        long v = strtol(e->d_name + 6, &end, 10);
        if (*end || v < 0 || v > 255 || (only && !in_list(only, (int)v)))
            continue;
        found[n++] = (int)v;
    }
    if (d)
        closedir(d);
    qsort(found, (size_t)n, sizeof found[0], cmp_int);
    for (int i = 0; i < n; i++) {
        /* The CUDA ordinal of the k-th node; with CUDA_VISIBLE_DEVICES it is what the driver
         * numbers, which follows the node number on these machines. */
        p->index[i] = found[i];
        snprintf(p->node[i], sizeof p->node[i], "%s/nvidia%d", dev_dir, found[i]);
    }
    p->n = n;
    return n;
}

void gpu_pool_deinit(gpu_pool *p)
{
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->freed);
}

/* Moves the queue on past the served ticket and any abandoned ones behind it. */
static void advance(gpu_pool *p)
{
    p->serving++;
    for (bool again = true; again;) {
        again = false;
        for (int i = 0; i < p->n_abandoned; i++) {
            if (p->abandoned[i] == p->serving) {
                p->abandoned[i] = p->abandoned[--p->n_abandoned];
                p->serving++;
                again = true;
            }
        }
    }
}

static void abandon(gpu_pool *p, unsigned long ticket)
{
    if (p->n_abandoned < GPU_POOL_MAX_WAITERS)
        p->abandoned[p->n_abandoned++] = ticket;
}

static int free_slot(const gpu_pool *p)
{
    for (int i = 0; i < p->n; i++)
        if (!p->busy[i] && p->shared[i] == 0)
            return i;
    return -1;
}

/* The least shared GPU that no one holds exclusively, that no other class shares and that has
 * room; -1 when none. */
static int shareable_slot(const gpu_pool *p, int cls, int max_per_gpu)
{
    int best = -1;
    for (int i = 0; i < p->n; i++)
        if (!p->busy[i] && p->shared[i] < max_per_gpu &&
            (p->shared[i] == 0 || p->shared_class[i] == cls) &&
            (best < 0 || p->shared[i] < p->shared[best]))
            best = i;
    return best;
}

static struct timespec deadline_in(int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    return deadline;
}

int gpu_lease_acquire(gpu_pool *p, int timeout_ms, double *waited_ms)
{
    double t0 = text_mono_ms();
    *waited_ms = 0;
    if (p->n == 0)
        return -1;
    struct timespec deadline = deadline_in(timeout_ms);
    pthread_mutex_lock(&p->lock);
    p->exclusive_waiting++;
    unsigned long ticket = p->next_ticket++;
    int slot = -1;
    for (;;) {
        /* Only the oldest waiter may take a GPU: no job waits behind later arrivals. */
        if (ticket == p->serving && (slot = free_slot(p)) >= 0)
            break;
        if (pthread_cond_timedwait(&p->freed, &p->lock, &deadline) == ETIMEDOUT) {
            if (ticket == p->serving && (slot = free_slot(p)) >= 0)
                break;
            slot = -1;
            break;
        }
    }
    if (slot >= 0)
        p->busy[slot] = true;
    p->exclusive_waiting--;
    if (ticket == p->serving)
        advance(p);
    else
        abandon(p, ticket); /* timed out in the queue: its turn is skipped when it comes */
    pthread_cond_broadcast(&p->freed);
    pthread_mutex_unlock(&p->lock);
    *waited_ms = text_mono_ms() - t0;
    return slot;
}

void gpu_lease_release(gpu_pool *p, int slot)
{
    if (slot < 0 || slot >= p->n)
        return;
    pthread_mutex_lock(&p->lock);
    p->busy[slot] = false;
    pthread_cond_broadcast(&p->freed);
    pthread_mutex_unlock(&p->lock);
}

int gpu_lease_acquire_shared(gpu_pool *p, enum gpu_share_class cls, int max_per_gpu, int timeout_ms,
                             double *waited_ms)
{
    double t0 = text_mono_ms();
    *waited_ms = 0;
    if (p->n == 0 || max_per_gpu < 1)
        return -1;
    struct timespec deadline = deadline_in(timeout_ms);
    pthread_mutex_lock(&p->lock);
    int slot = -1;
    for (;;) {
        /* timing first: no new shared holder while an exclusive request waits */
        if (p->exclusive_waiting == 0 && (slot = shareable_slot(p, (int)cls, max_per_gpu)) >= 0)
            break;
        if (pthread_cond_timedwait(&p->freed, &p->lock, &deadline) == ETIMEDOUT) {
            if (p->exclusive_waiting == 0)
                slot = shareable_slot(p, (int)cls, max_per_gpu);
            break;
        }
    }
    if (slot >= 0) {
        p->shared[slot]++;
        p->shared_class[slot] = (int)cls;
    }
    pthread_mutex_unlock(&p->lock);
    *waited_ms = text_mono_ms() - t0;
    return slot;
}

void gpu_lease_release_shared(gpu_pool *p, int slot)
{
    if (slot < 0 || slot >= p->n)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->shared[slot] > 0)
        p->shared[slot]--;
    pthread_cond_broadcast(&p->freed);
    pthread_mutex_unlock(&p->lock);
}
