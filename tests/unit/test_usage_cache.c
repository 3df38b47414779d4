/* The per-episode disk-usage cache: Write and Edit trust it, anything else that may have
 * written the workspace (Bash, a background job) makes the next quota check walk the tree. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fs_fixture.h"
#include "tools/fs.h"

static int setup(void **state)
{
    if (fx_setup(state) != 0)
        return -1;
    fixture *fx = *state;
    static tool_usage_cache cache;
    cache = (tool_usage_cache){0};
    fx->env.usage = &cache;
    fx->limits.disk_quota_bytes = 10000;
    fx->limits.max_file_bytes = 8000;
    return 0;
}

static tool_result write_bytes(fixture *fx, const char *path, size_t n)
{
    char *content = malloc(n + 1);
    memset(content, 'x', n);
    content[n] = '\0';
    tool_result r = fx_call(fx, &tool_def_write,
                            json_pack("{s:s, s:s}", "file_path", path, "content", content));
    free(content);
    return r;
}

static void test_cache_follows_writes(void **state)
{
    fixture *fx = *state;
    tool_result r = write_bytes(fx, "a.txt", 4000);
    assert_false(r.is_error);
    tool_result_deinit(&r);
    assert_true(fx->env.usage->known);
    assert_int_equal(fx->env.usage->bytes, 4000);
    r = write_bytes(fx, "a.txt", 1000); /* replaces: 1000, not 5000 */
    assert_false(r.is_error);
    tool_result_deinit(&r);
    assert_int_equal(fx->env.usage->bytes, 1000);
    unsigned long long walked = 0;
    assert_int_equal(ws_disk_usage(fx->root_fd, &walked), WS_OK);
    assert_int_equal(walked, fx->env.usage->bytes);
}

static void test_outside_writes_are_seen_after_forget(void **state)
{
    fixture *fx = *state;
    tool_result r = write_bytes(fx, "a.txt", 1000);
    tool_result_deinit(&r);
    /* Something other than a file tool fills the workspace (as a Bash command would) ... */
    char *blob = calloc(1, 8500);
    memset(blob, 'y', 8500);
    fx_put(fx, "big.bin", blob, 8500);
    free(blob);
    /* ... and Bash forgets the cache when it returns: the next write must see the real usage. */
    fs_usage_forget(&fx->env);
    r = write_bytes(fx, "c.txt", 1000);
    assert_true(r.is_error);
    assert_string_equal(fx_code(&r), "DISK_QUOTA_EXCEEDED");
    tool_result_deinit(&r);
}

static void test_bash_forgets_the_cache(void **state)
{
    fixture *fx = *state;
    fx->limits.bash_timeout_ms = 5000;
    fx->limits.bash_timeout_max_ms = 5000;
    tool_result r = write_bytes(fx, "a.txt", 100);
    tool_result_deinit(&r);
    assert_true(fx->env.usage->known);
    r = fx_call(
        fx, &tool_def_bash,
        json_pack("{s:s}", "command", "head -c 4500 /dev/zero > y; head -c 4500 /dev/zero > z"));
    assert_false(r.is_error);
    tool_result_deinit(&r);
    r = write_bytes(fx, "c.txt", 1000);
    assert_true(r.is_error);
    assert_string_equal(fx_code(&r), "DISK_QUOTA_EXCEEDED");
    tool_result_deinit(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cache_follows_writes, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_outside_writes_are_seen_after_forget, setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_bash_forgets_the_cache, setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
