/* lease: leases on the machine's GPUs. A Verify or Profile job holds one GPU exclusively for its
 * whole run, so no two timings share a device; jobs queue in arrival order and the wait is
 * reported. Trusted work takes a shared lease instead: torch.compile warm-ups, and baseline
 * measurements, whose judges start up side by side and take turns at the timing itself under a
 * per-GPU lock of their own. Shared holders are of one class per GPU at a time (a warm-up's
 * untimed forward never runs beside a measurement), up to a limit per GPU, never beside an
 * exclusive holder, and exclusive waiters go first (a shared request waits while one is
 * queued). Written for any number of GPUs; tests use fake device nodes. */
#ifndef KGYM_LEASE_H
#define KGYM_LEASE_H

#include <pthread.h>
#include <stdbool.h>

#define GPU_POOL_MAX 16
#define GPU_POOL_MAX_WAITERS 4096 /* queued jobs that gave up, remembered until their turn */

typedef struct gpu_pool {
    int n;                          /* GPUs in the pool (0: none) */
    int index[GPU_POOL_MAX];        /* CUDA ordinal of each */
    char node[GPU_POOL_MAX][64];    /* its device node, e.g. /dev/nvidia3 */
    bool busy[GPU_POOL_MAX];        /* held exclusively */
    int shared[GPU_POOL_MAX];       /* shared holders */
    int shared_class[GPU_POOL_MAX]; /* their class, while shared[i] > 0 */
    int exclusive_waiting;          /* exclusive requests queued: shared ones wait behind them */
    unsigned long next_ticket, serving; /* FIFO order of waiters */
    unsigned long abandoned[GPU_POOL_MAX_WAITERS];
    int n_abandoned;
    pthread_mutex_t lock;
    pthread_cond_t freed;
} gpu_pool;

/* Finds /dev/nvidia<N> nodes under dev_dir ("/dev"), at most max (0: all). With a non-NULL
 * only list ("0,2"), takes those ordinals only. Returns the count (>= 0) or -1 on a bad list. */
int gpu_pool_init(gpu_pool *p, const char *dev_dir, const char *only);
void gpu_pool_deinit(gpu_pool *p);

/* Waits up to timeout_ms for a GPU, first come first served. Returns the slot (>= 0), or -1 on
 * timeout or an empty pool; *waited_ms says how long it waited. */
int gpu_lease_acquire(gpu_pool *p, int timeout_ms, double *waited_ms);
void gpu_lease_release(gpu_pool *p, int slot);

/* Classes of shared holders: those of one class never share a GPU with another's. */
enum gpu_share_class { GPU_SHARE_WARMUP, GPU_SHARE_MEASURE };

/* A shared lease: a GPU that no one holds exclusively, whose shared holders (if any) are of
 * class cls, and that has fewer than max_per_gpu of them (the least shared one), once no
 * exclusive request is queued. Returns the slot, or -1 on timeout or an empty pool. */
int gpu_lease_acquire_shared(gpu_pool *p, enum gpu_share_class cls, int max_per_gpu, int timeout_ms,
                             double *waited_ms);
void gpu_lease_release_shared(gpu_pool *p, int slot);

#endif
