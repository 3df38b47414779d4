/* The object cache's size cap (env/harness/objcache.c): which objects a trim removes (the
 * least recently used, by mtime), what it leaves alone (other names, symlinks, fresh
 * temporaries), the count kept across stores, and when a store triggers a trim. Files are
 * written by the test with chosen sizes and times, so every expected figure is exact. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness/objcache.h"

typedef struct ofx {
    char root[64]; /* the build cache */
    char obj[96];  /* its obj/ */
    objcache cache;
} ofx;

static int setup(void **state)
{
    ofx *f = calloc(1, sizeof *f);
    snprintf(f->root, sizeof f->root, "/tmp/kgym-objcache-XXXXXX");
    if (!f || !mkdtemp(f->root))
        return -1;
    snprintf(f->obj, sizeof f->obj, "%s/obj", f->root);
    mkdir(f->obj, 0755);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    ofx *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->root);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

/* A 64-hex-digit key whose last digits are n. */
static void key_name(int n, char *out, size_t cap)
{
    snprintf(out, cap, "%064x.o", n);
}

/* Writes obj/<name> of size bytes, last used at the epoch second `when`. */
static void put_named(ofx *f, const char *name, size_t size, time_t when)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->obj, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    close(fd);
    struct timespec ts[2] = {{.tv_sec = when}, {.tv_sec = when}};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void put_object(ofx *f, int n, size_t size, time_t when)
{
    char name[80];
    key_name(n, name, sizeof name);
    put_named(f, name, size, when);
}

static bool exists(ofx *f, const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", f->obj, name);
    return lstat(path, &st) == 0;
}

static bool object_exists(ofx *f, int n)
{
    char name[80];
    key_name(n, name, sizeof name);
    return exists(f, name);
}

static json_int_t stat_of(ofx *f, const char *key)
{
    json_t *j = objcache_json(&f->cache);
    json_int_t v = json_integer_value(json_object_get(j, key));
    json_decref(j);
    return v;
}

static void test_trim_removes_least_recently_used(void **state)
{
    ofx *f = *state;
    assert_int_equal(objcache_init(&f->cache, f->root, 0), 0);
    time_t now = time(NULL);
    for (int i = 1; i <= 5; i++) /* object 1 is the oldest */
        put_object(f, i, 1000, now - 600 + i);
    assert_int_equal(objcache_trim_to(&f->cache, 2500), 2000);
    for (int i = 1; i <= 3; i++)
        assert_false(object_exists(f, i));
    assert_true(object_exists(f, 4));
    assert_true(object_exists(f, 5));
    assert_int_equal(stat_of(f, "evicted_files"), 3);
    assert_int_equal(stat_of(f, "evicted_bytes"), 3000);
    assert_int_equal(stat_of(f, "trims"), 1);
    /* under the level: nothing goes, and it is no trim */
    assert_int_equal(objcache_trim_to(&f->cache, 2000), 2000);
    assert_int_equal(stat_of(f, "trims"), 1);
    objcache_deinit(&f->cache);
}

static void test_a_hit_keeps_an_old_object(void **state)
{
    ofx *f = *state;
    assert_int_equal(objcache_init(&f->cache, f->root, 0), 0);
    time_t now = time(NULL);
    for (int i = 1; i <= 3; i++)
        put_object(f, i, 1000, now - 600 + i);
    char name[80], path[256];
    key_name(1, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", f->obj, name);
    objcache_touch(path); /* object 1 is now the most recently used */
    assert_int_equal(objcache_trim_to(&f->cache, 1000), 1000);
    assert_true(object_exists(f, 1));
    assert_false(object_exists(f, 2));
    assert_false(object_exists(f, 3));
    objcache_deinit(&f->cache);
}

static void test_trim_leaves_other_files(void **state)
{
    ofx *f = *state;
    assert_int_equal(objcache_init(&f->cache, f->root, 0), 0);
    time_t now = time(NULL);
    char key[80], name[128];
    key_name(9, key, sizeof key);
    put_named(f, "notes.txt", 5000, now - 99999);
    put_named(f, "0123.o", 5000, now - 99999); /* not a key */
    snprintf(name, sizeof name, "%s.tmp-12-0", key);
    put_named(f, name, 5000, now - 7200); /* a crash's leftover: goes */
    char fresh[128];
    snprintf(fresh, sizeof fresh, "%s.tmp-12-1", key);
    put_named(f, fresh, 5000, now); /* a store in progress: stays */
    char link_path[256];
    key_name(10, key, sizeof key);
    snprintf(link_path, sizeof link_path, "%s/%s", f->obj, key);
    assert_int_equal(symlink("/etc/passwd", link_path), 0); /* never followed nor counted */
    assert_int_equal(objcache_trim_to(&f->cache, 0), 0);
    assert_true(exists(f, "notes.txt"));
    assert_true(exists(f, "0123.o"));
    assert_false(exists(f, name));
    assert_true(exists(f, fresh));
    assert_true(exists(f, key));
    assert_int_equal(stat_of(f, "evicted_files"), 0);
    objcache_deinit(&f->cache);
}

static void test_stores_trigger_a_trim_past_the_cap(void **state)
{
    ofx *f = *state;
    assert_int_equal(objcache_init(&f->cache, f->root, 4000), 0);
    json_t *j = objcache_json(&f->cache);
    assert_true(json_is_null(json_object_get(j, "bytes"))); /* not counted before a store */
    assert_int_equal(json_integer_value(json_object_get(j, "max_bytes")), 4000);
    json_decref(j);
    time_t now = time(NULL);
    for (int i = 1; i <= 3; i++)
        put_object(f, i, 1000, now - 600 + i);
    objcache_added(&f->cache, 1000); /* object 3's store: the first one counts the directory */
    assert_int_equal(stat_of(f, "bytes"), 3000);
    put_object(f, 4, 1000, now - 500);
    objcache_added(&f->cache, 1000);
    assert_int_equal(stat_of(f, "bytes"), 4000); /* at the cap, not past it */
    assert_int_equal(stat_of(f, "trims"), 0);
    put_object(f, 5, 1000, now - 400);
    objcache_added(&f->cache, 1000); /* 5000 > 4000: down to 80% of the cap, 3200 */
    assert_int_equal(stat_of(f, "bytes"), 3000);
    assert_int_equal(stat_of(f, "trims"), 1);
    assert_int_equal(stat_of(f, "evicted_files"), 2);
    assert_false(object_exists(f, 1));
    assert_false(object_exists(f, 2));
    for (int i = 3; i <= 5; i++)
        assert_true(object_exists(f, i));
    objcache_deinit(&f->cache);
}

static void test_first_count_past_the_cap_trims(void **state)
{
    ofx *f = *state;
    /* a cache filled by an earlier server with a larger cap (or none) */
    assert_int_equal(objcache_init(&f->cache, f->root, 2000), 0);
    time_t now = time(NULL);
    for (int i = 1; i <= 4; i++)
        put_object(f, i, 1000, now - 600 + i);
    objcache_added(&f->cache, 1000);
    assert_int_equal(stat_of(f, "bytes"), 1000); /* 4000 > 2000: down to 1600 */
    assert_true(object_exists(f, 4));
    assert_false(object_exists(f, 3));
    objcache_deinit(&f->cache);
}

static void test_no_cap_removes_nothing(void **state)
{
    ofx *f = *state;
    assert_int_equal(objcache_init(&f->cache, f->root, 0), 0);
    put_object(f, 1, 1 << 20, time(NULL) - 99999);
    objcache_added(&f->cache, 1 << 20);
    objcache_added(NULL, 1 << 20); /* a build without a cap */
    assert_true(object_exists(f, 1));
    json_t *j = objcache_json(&f->cache);
    assert_true(json_is_null(json_object_get(j, "bytes")));
    assert_true(json_is_null(json_object_get(j, "max_bytes")));
    json_decref(j);
    objcache_deinit(&f->cache);
}

static void test_missing_directory_is_empty(void **state)
{
    ofx *f = *state;
    rmdir(f->obj);
    assert_int_equal(objcache_init(&f->cache, f->root, 100), 0);
    assert_int_equal(objcache_trim_to(&f->cache, 0), 0);
    objcache_added(&f->cache, 10); /* the count is what the disk holds: nothing */
    assert_int_equal(stat_of(f, "bytes"), 0);
    objcache_deinit(&f->cache);
    char longer[PATH_MAX + 8];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    assert_int_equal(objcache_init(&f->cache, longer, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_trim_removes_least_recently_used, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_hit_keeps_an_old_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_leaves_other_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stores_trigger_a_trim_past_the_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_count_past_the_cap_trims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_cap_removes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_directory_is_empty, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
