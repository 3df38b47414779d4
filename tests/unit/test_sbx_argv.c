/* The launcher's command line (sandbox_build_argv): what the server states there for each
 * command, here the launcher's own wall limit (--wall-ms), which stops a sandbox whose server
 * is gone. Needs no cgroup and no root: the line is only built, never run. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "sandbox/sandbox.h"

/* The value after flag in the built line, or NULL. */
static const char *value_of(const sandbox_argv *a, const char *flag)
{
    for (int i = 0; a->argv[i] && a->argv[i + 1]; i++)
        if (strcmp(a->argv[i], "--") == 0)
            return NULL;
        else if (strcmp(a->argv[i], flag) == 0)
            return a->argv[i + 1];
    return NULL;
}

static void build(const sandbox *s, int timeout_ms, int grace_ms, sandbox_argv *out)
{
    static const char *const CMD[] = {"/bin/true", NULL};
    sandbox_cmd cmd = {.profile = "bash",
                       .workspace = "/tmp/ws",
                       .uid = 200001,
                       .gid = 200001,
                       .argv = CMD,
                       .timeout_ms = timeout_ms,
                       .kill_grace_ms = grace_ms};
    memset(out, 0, sizeof *out);
    assert_int_equal(sandbox_build_argv(s, &cmd, NULL, out), 0);
}

static void test_wall_limit_follows_the_timeout(void **state)
{
    (void)state;
    static sandbox s; /* large: not on the stack */
    snprintf(s.launcher, sizeof s.launcher, "/usr/bin/kgym-sandbox");
    snprintf(s.profiles_dir, sizeof s.profiles_dir, "/etc/kgym");
    sandbox_argv a;
    build(&s, 120000, 2000, &a);
    /* later than the server's own timeout and kill grace: a live server reports TIMEOUT */
    assert_string_equal(value_of(&a, "--wall-ms"), "132000");
    assert_string_equal(value_of(&a, "--uid"), "200001");
    build(&s, 0, 2000, &a); /* no timeout: no wall limit either */
    assert_null(value_of(&a, "--wall-ms"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wall_limit_follows_the_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
