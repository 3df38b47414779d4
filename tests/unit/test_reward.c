/* Unit tests of the reward (env/harness/reward.c) and the GPU leases (env/harness/lease.c):
 * the milestone rule with its 5% margin, the ablation modes, infra errors paying nothing, the
 * reward_on=best order; leases exclusive, first come first served, timing out, and GPU nodes
 * found (or filtered) in a fake /dev. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/lease.h"
#include "harness/reward.h"

/* An evaluation's components: correct or not, and its three times (<= 0: absent). */
static json_t *comp(bool correct, double tc, double te, double tk)
{
    json_t *c =
        json_pack("{s:s, s:b, s:b}", "eval_status", "ok", "compiled", 1, "correct", correct);
    if (tc > 0)
        json_object_set_new(c, "t_candidate_ms", json_real(tc));
    if (te > 0)
        json_object_set_new(c, "t_eager_ms", json_real(te));
    if (tk > 0)
        json_object_set_new(c, "t_compile_ms", json_real(tk));
    return c;
}

static double milestone(bool correct, double tc, double te, double tk)
{
    json_t *c = comp(correct, tc, te, tk);
    double r = reward_apply(c, REWARD_MILESTONE);
    assert_true(isnan(r) || fabs(json_number_value(json_object_get(c, "reward")) - r) < 1e-12);
    json_decref(c);
    return r;
}

static void test_milestone_levels(void **state)
{
    (void)state;
    assert_true(milestone(false, 1, 10, 10) == -1); /* wrong: -1 however fast */
    assert_true(milestone(true, 10, 10, 10) == 1);  /* correct, no faster */
    assert_true(milestone(true, 9.6, 10, 10) == 1); /* 4% faster is not "faster" (5% rule) */
    assert_true(milestone(true, 9.4, 10, 5) == 2);  /* beats eager only */
    assert_true(milestone(true, 4.0, 10, 5) == 3);  /* beats both */
    assert_true(milestone(true, 4.0, 10, 0) == 2);  /* no compile baseline: at most 2 */
    assert_true(milestone(true, 0, 0, 0) == 1);     /* Verify: correct, untimed */
}

static void test_beats_margin(void **state)
{
    (void)state;
    assert_true(reward_beats(9.4, 10));
    assert_false(reward_beats(9.5, 10)); /* exactly 5% is not more than 5% */
    assert_false(reward_beats(0, 10));
    assert_false(reward_beats(5, 0));
}

static void test_modes_and_components(void **state)
{
    (void)state;
    json_t *c = comp(true, 2, 8, 4);
    assert_true(fabs(reward_apply(c, REWARD_SPEEDUP) - 4.0) < 1e-12);
    assert_true(fabs(json_number_value(json_object_get(c, "speedup_compile")) - 2.0) < 1e-12);
    assert_string_equal(json_string_value(json_object_get(c, "reward_mode")), "speedup");
    assert_int_equal(json_array_size(json_object_get(c, "baselines_used")), 2);
    assert_true(fabs(reward_apply(c, REWARD_LOG_SPEEDUP) - log(4.0)) < 1e-12);
    json_decref(c);
    c = comp(false, 2, 8, 4);
    assert_true(reward_apply(c, REWARD_SPEEDUP) == 0.0);
    assert_true(reward_apply(c, REWARD_LOG_SPEEDUP) == -1.0);
    json_decref(c);
    reward_mode m;
    assert_int_equal(reward_mode_parse("log_speedup", &m), 0);
    assert_int_equal(m, REWARD_LOG_SPEEDUP);
    assert_int_equal(reward_mode_parse("bogus", &m), -1);
}

/* A time at the timing floor must not pay an unbounded reward. */
static void test_speedup_capped(void **state)
{
    (void)state;
    json_t *c = comp(true, 0.001, 10, 5);
    assert_true(fabs(reward_apply(c, REWARD_SPEEDUP) - REWARD_SPEEDUP_CAP) < 1e-12);
    assert_true(json_is_true(json_object_get(c, "speedup_capped")));
    assert_true(fabs(json_number_value(json_object_get(c, "speedup_eager")) - 10000.0) < 1e-6);
    assert_true(fabs(reward_apply(c, REWARD_LOG_SPEEDUP) - log(REWARD_SPEEDUP_CAP)) < 1e-12);
    assert_true(reward_rank(c) == REWARD_SPEEDUP_CAP);
    assert_true(reward_apply(c, REWARD_MILESTONE) == 3.0);
    json_decref(c);
    c = comp(true, 2, 8, 4);
    reward_apply(c, REWARD_SPEEDUP);
    assert_true(json_is_false(json_object_get(c, "speedup_capped")));
    json_decref(c);
}

static void test_infra_error_pays_nothing(void **state)
{
    (void)state;
    json_t *c = json_pack("{s:s}", "eval_status", "infra_error");
    assert_true(isnan(reward_apply(c, REWARD_MILESTONE)));
    assert_true(json_is_null(json_object_get(c, "reward")));
    assert_true(reward_rank(c) == -INFINITY);
    json_decref(c);
}

static void test_rank_prefers_compile_speedup(void **state)
{
    (void)state;
    json_t *a = comp(true, 2, 8, 4), *b = comp(true, 1, 8, 1.5), *w = comp(false, 0.1, 8, 4);
    assert_true(reward_rank(b) < reward_rank(a)); /* 1.5x over compile < 2x */
    assert_true(reward_rank(w) == -INFINITY);
    json_t *e = comp(true, 2, 8, 0); /* compile unavailable: eager speed-up */
    assert_true(fabs(reward_rank(e) - 4.0) < 1e-12);
    json_decref(a), json_decref(b), json_decref(w), json_decref(e);
}

/* ---- leases on a fake /dev ---- */

static char g_dev[64];

static void make_dev(const char *const *names)
{
    snprintf(g_dev, sizeof g_dev, "/tmp/kgym-lease-XXXXXX");
    assert_non_null(mkdtemp(g_dev));
    for (int i = 0; names[i]; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s", g_dev, names[i]);
        int fd = open(p, O_CREAT | O_WRONLY, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
}

static void drop_dev(const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s", g_dev, names[i]);
        unlink(p);
    }
    rmdir(g_dev);
}

static const char *const NODES[] = {"nvidia2",    "nvidia0",  "nvidiactl",
                                    "nvidia-uvm", "nvidia10", NULL};

static void test_pool_finds_gpu_nodes(void **state)
{
    (void)state;
    make_dev(NODES);
    gpu_pool p;
    assert_int_equal(gpu_pool_init(&p, g_dev, NULL), 3); /* not ctl, not uvm */
    assert_int_equal(p.index[0], 0);
    assert_int_equal(p.index[1], 2);
    assert_int_equal(p.index[2], 10);
    gpu_pool_deinit(&p);
    assert_int_equal(gpu_pool_init(&p, g_dev, "2,10"), 2);
    assert_int_equal(p.index[0], 2);
    gpu_pool_deinit(&p);
    assert_int_equal(gpu_pool_init(&p, g_dev, "2;rm"), -1); /* a bad list is refused */
    gpu_pool_deinit(&p);
    drop_dev(NODES);
}

static void test_lease_exclusive_and_timeout(void **state)
{
    (void)state;
    make_dev(NODES);
    gpu_pool p;
    assert_int_equal(gpu_pool_init(&p, g_dev, "0,2"), 2);
    double waited;
    int a = gpu_lease_acquire(&p, 1000, &waited), b = gpu_lease_acquire(&p, 1000, &waited);
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(gpu_lease_acquire(&p, 50, &waited), -1); /* both busy: times out */
    assert_true(waited >= 40);
    gpu_lease_release(&p, a);
    assert_int_equal(gpu_lease_acquire(&p, 1000, &waited), a); /* the freed one, at once */
    gpu_lease_release(&p, a);
    gpu_lease_release(&p, b);
    gpu_pool_deinit(&p);
    gpu_pool empty;
    gpu_pool_init(&empty, "/nonexistent", NULL);
    assert_int_equal(gpu_lease_acquire(&empty, 10, &waited), -1);
    gpu_pool_deinit(&empty);
    drop_dev(NODES);
}

typedef struct waiter {
    gpu_pool *p;
    int slot;
    double waited;
} waiter;

static void *wait_for_gpu(void *arg)
{
    waiter *w = arg;
    w->slot = gpu_lease_acquire(w->p, 5000, &w->waited);
    return NULL;
}

static void test_lease_waiter_gets_freed_gpu(void **state)
{
    (void)state;
    make_dev(NODES);
    gpu_pool p;
    assert_int_equal(gpu_pool_init(&p, g_dev, "0"), 1);
    double waited;
    int held = gpu_lease_acquire(&p, 1000, &waited);
    /* a waiter that gave up must not block the queue for later ones */
    assert_int_equal(gpu_lease_acquire(&p, 20, &waited), -1);
    waiter w = {.p = &p, .slot = -2};
    pthread_t th;
    pthread_create(&th, NULL, wait_for_gpu, &w);
    usleep(100000);
    gpu_lease_release(&p, held);
    pthread_join(th, NULL);
    assert_int_equal(w.slot, held);
    assert_true(w.waited >= 80);
    gpu_lease_release(&p, w.slot);
    gpu_pool_deinit(&p);
    drop_dev(NODES);
}

/* Shared leases: several warm-ups per GPU up to the limit, never beside an exclusive holder,
 * and none granted while an exclusive request waits (timing goes first). */
static void test_lease_shared_limits_and_exclusion(void **state)
{
    (void)state;
    make_dev(NODES);
    gpu_pool p;
    assert_int_equal(gpu_pool_init(&p, g_dev, "0,2"), 2);
    double waited;
    int s1 = gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 2, 1000, &waited);
    int s2 = gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 2, 1000, &waited);
    assert_true(s1 >= 0 && s2 >= 0 && s1 != s2); /* spread: the least shared GPU first */
    int s3 = gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 2, 1000, &waited);
    int s4 = gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 2, 1000, &waited);
    assert_true(s3 >= 0 && s4 >= 0 && s3 != s4);
    assert_int_equal(gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 2, 30, &waited),
                     -1); /* both at the limit */
    /* an exclusive lease needs a GPU with no shared holder */
    assert_int_equal(gpu_lease_acquire(&p, 30, &waited), -1);
    gpu_lease_release_shared(&p, s1);
    gpu_lease_release_shared(&p, s3);
    int ex = gpu_lease_acquire(&p, 1000, &waited);
    assert_int_equal(ex, s1); /* the GPU whose shared holders left */
    /* no shared lease beside the exclusive holder: the other GPU is at its limit */
    assert_int_equal(gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 2, 30, &waited), -1);
    gpu_lease_release(&p, ex);
    gpu_lease_release_shared(&p, s2);
    gpu_lease_release_shared(&p, s4);
    gpu_pool_deinit(&p);
    drop_dev(NODES);
}

/* Shared classes: warm-ups and measurements never share a GPU (a warm-up's untimed forward
 * would land in a measurement's timing); a class takes the GPU the other class left. */
static void test_lease_shared_classes_never_mix(void **state)
{
    (void)state;
    make_dev(NODES);
    gpu_pool p;
    assert_int_equal(gpu_pool_init(&p, g_dev, "0"), 1);
    double waited;
    int w1 = gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 4, 1000, &waited);
    assert_int_equal(w1, 0);
    assert_int_equal(gpu_lease_acquire_shared(&p, GPU_SHARE_MEASURE, 4, 30, &waited), -1);
    int w2 = gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 4, 30, &waited);
    assert_int_equal(w2, 0); /* its own class still shares */
    gpu_lease_release_shared(&p, w1);
    assert_int_equal(gpu_lease_acquire_shared(&p, GPU_SHARE_MEASURE, 4, 30, &waited), -1);
    gpu_lease_release_shared(&p, w2);
    int m1 = gpu_lease_acquire_shared(&p, GPU_SHARE_MEASURE, 2, 1000, &waited);
    int m2 = gpu_lease_acquire_shared(&p, GPU_SHARE_MEASURE, 2, 1000, &waited);
    assert_true(m1 == 0 && m2 == 0);
    assert_int_equal(gpu_lease_acquire_shared(&p, GPU_SHARE_MEASURE, 2, 30, &waited), -1);
    assert_int_equal(gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 4, 30, &waited), -1);
    gpu_lease_release_shared(&p, m1);
    gpu_lease_release_shared(&p, m2);
    int w3 = gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 4, 1000, &waited);
    assert_int_equal(w3, 0);
    gpu_lease_release_shared(&p, w3);
    gpu_pool_deinit(&p);
    drop_dev(NODES);
}

static void *wait_shared(void *arg)
{
    waiter *w = arg;
    w->slot = gpu_lease_acquire_shared(w->p, GPU_SHARE_WARMUP, 4, 5000, &w->waited);
    return NULL;
}

static void test_lease_shared_waits_behind_exclusive(void **state)
{
    (void)state;
    make_dev(NODES);
    gpu_pool p;
    assert_int_equal(gpu_pool_init(&p, g_dev, "0"), 1);
    double waited;
    int sh = gpu_lease_acquire_shared(&p, GPU_SHARE_WARMUP, 4, 1000, &waited);
    assert_int_equal(sh, 0);
    waiter ex = {.p = &p, .slot = -2}, late = {.p = &p, .slot = -2};
    pthread_t t_ex, t_late;
    pthread_create(&t_ex, NULL, wait_for_gpu, &ex); /* queued behind the shared holder */
    usleep(50000);
    pthread_create(&t_late, NULL, wait_shared, &late); /* must wait behind the exclusive one */
    usleep(50000);
    assert_int_equal(late.slot, -2);
    gpu_lease_release_shared(&p, sh);
    pthread_join(t_ex, NULL);
    assert_int_equal(ex.slot, 0);
    usleep(50000);
    assert_int_equal(late.slot, -2); /* still out while the exclusive lease is held */
    gpu_lease_release(&p, ex.slot);
    pthread_join(t_late, NULL);
    assert_int_equal(late.slot, 0);
    assert_true(late.waited >= 80);
    gpu_lease_release_shared(&p, late.slot);
    gpu_pool_deinit(&p);
    drop_dev(NODES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_milestone_levels),
        cmocka_unit_test(test_beats_margin),
        cmocka_unit_test(test_modes_and_components),
        cmocka_unit_test(test_speedup_capped),
        cmocka_unit_test(test_infra_error_pays_nothing),
        cmocka_unit_test(test_rank_prefers_compile_speedup),
        cmocka_unit_test(test_pool_finds_gpu_nodes),
        cmocka_unit_test(test_lease_exclusive_and_timeout),
        cmocka_unit_test(test_lease_waiter_gets_freed_gpu),
        cmocka_unit_test(test_lease_shared_limits_and_exclusion),
        cmocka_unit_test(test_lease_shared_waits_behind_exclusive),
        cmocka_unit_test(test_lease_shared_classes_never_mix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
