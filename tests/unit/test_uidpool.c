/* The episodes' uids (env/sandbox/uidpool.c): servers sharing a host claim disjoint blocks
 * through flocks (each pool here is one server: flock conflicts between open file
 * descriptions, even in one process), fall back to the whole range when none is free, get a
 * block back when its holder goes; within a pool no uid is handed out twice while held. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/uidpool.h"

#define BASE 200000u

typedef struct ufx {
    char dir[64];
    uid_pool pools[UIDPOOL_BLOCKS + 1];
} ufx;

static int setup(void **state)
{
    ufx *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kgym-uidpool-XXXXXX");
    if (!f || !mkdtemp(f->dir))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    ufx *f = *state;
    for (size_t i = 0; i < UIDPOOL_BLOCKS + 1; i++)
        uid_pool_deinit(&f->pools[i]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

static json_t *describe(uid_pool *p)
{
    return uid_pool_json(p);
}

static void test_servers_claim_disjoint_blocks(void **state)
{
    ufx *f = *state;
    char err[128];
    for (unsigned i = 0; i < UIDPOOL_BLOCKS; i++) {
        assert_int_equal(uid_pool_init(&f->pools[i], BASE, f->dir, err, sizeof err), 0);
        json_t *j = describe(&f->pools[i]);
        assert_true(json_is_true(json_object_get(j, "claimed")));
        assert_int_equal(json_integer_value(json_object_get(j, "first")), BASE + i * UIDPOOL_BLOCK);
        assert_int_equal(json_integer_value(json_object_get(j, "last")),
                         BASE + (i + 1) * UIDPOOL_BLOCK - 1);
        json_decref(j);
        uid_t uid;
        assert_int_equal(uid_pool_take(&f->pools[i], &uid), 0);
        assert_true(uid >= BASE + i * UIDPOOL_BLOCK && uid < BASE + (i + 1) * UIDPOOL_BLOCK);
    }
    /* a seventh server finds every block held: the whole range, and it says why */
    uid_pool *extra = &f->pools[UIDPOOL_BLOCKS];
    assert_int_equal(uid_pool_init(extra, BASE, f->dir, err, sizeof err), 0);
    json_t *j = describe(extra);
    assert_true(json_is_false(json_object_get(j, "claimed")));
    assert_non_null(strstr(json_string_value(json_object_get(j, "why_shared")), "held"));
    assert_int_equal(json_integer_value(json_object_get(j, "last")), BASE + UIDPOOL_RANGE - 1);
    json_decref(j);
    /* the third server stops: the next one to start gets its block */
    uid_pool_deinit(extra);
    uid_pool_deinit(&f->pools[2]);
    assert_int_equal(uid_pool_init(extra, BASE, f->dir, err, sizeof err), 0);
    j = describe(extra);
    assert_true(json_is_true(json_object_get(j, "claimed")));
    assert_int_equal(json_integer_value(json_object_get(j, "first")), BASE + 2 * UIDPOOL_BLOCK);
    json_decref(j);
}

static void test_no_uid_twice_while_held(void **state)
{
    ufx *f = *state;
    char err[128];
    uid_pool *p = &f->pools[0];
    assert_int_equal(uid_pool_init(p, BASE, f->dir, err, sizeof err), 0);
    uid_t first;
    assert_int_equal(uid_pool_take(p, &first), 0);
    /* every other uid of the block comes and goes many times over: first is never handed out */
    for (unsigned round = 0; round < 3; round++)
        for (unsigned i = 0; i < UIDPOOL_BLOCK - 1; i++) {
            uid_t u;
            assert_int_equal(uid_pool_take(p, &u), 0);
            assert_true(u != first);
            uid_pool_give(p, u);
        }
    /* hold all of them: the pool is exhausted, and a give makes exactly that uid free */
    uid_t held[UIDPOOL_BLOCK];
    held[0] = first;
    for (unsigned i = 1; i < UIDPOOL_BLOCK; i++)
        assert_int_equal(uid_pool_take(p, &held[i]), 0);
    uid_t none;
    assert_int_equal(uid_pool_take(p, &none), -1);
    json_t *j = describe(p);
    assert_int_equal(json_integer_value(json_object_get(j, "in_use")), UIDPOOL_BLOCK);
    json_decref(j);
    uid_pool_give(p, held[17]);
    uid_pool_give(p, held[17]); /* twice: ignored */
    uid_pool_give(p, 5);        /* not the pool's: ignored */
    uid_t again;
    assert_int_equal(uid_pool_take(p, &again), 0);
    assert_int_equal(again, held[17]);
    assert_int_equal(uid_pool_take(p, &none), -1);
}

static void test_without_a_lock_dir(void **state)
{
    ufx *f = *state;
    char err[128], bad[96];
    /* no claim wanted (weak mode) */
    assert_int_equal(uid_pool_init(&f->pools[0], BASE, NULL, err, sizeof err), 0);
    json_t *j = describe(&f->pools[0]);
    assert_true(json_is_false(json_object_get(j, "claimed")));
    json_decref(j);
    uid_t u;
    assert_int_equal(uid_pool_take(&f->pools[0], &u), 0);
    assert_true(u >= BASE && u < BASE + UIDPOOL_RANGE);
    /* a lock dir that cannot be made: the same fallback, with the reason */
    snprintf(bad, sizeof bad, "%s/file", f->dir);
    FILE *fp = fopen(bad, "w");
    fclose(fp);
    snprintf(bad, sizeof bad, "%s/file/locks", f->dir);
    assert_int_equal(uid_pool_init(&f->pools[1], BASE, bad, err, sizeof err), 0);
    j = describe(&f->pools[1]);
    assert_true(json_is_false(json_object_get(j, "claimed")));
    assert_non_null(strstr(json_string_value(json_object_get(j, "why_shared")), "cannot create"));
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_servers_claim_disjoint_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_uid_twice_while_held, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_a_lock_dir, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
