/* Unit tests of env/sandbox/hostcheck.c: the report's entries and JSON, that every required
 * protection is present on this (root, CI-class) machine, cgroup probe cleanup, and GPU
 * discovery. Needs root: fails, never skips, without. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/hostcheck.h"

static const char *const NAMES[] = {
    "privileges",
    "ns_mount",
    "ns_pid",
    "ns_net",
    "ns_ipc",
    "ns_uts",
    "ns_cgroup",
    "seccomp",
    "cgroup",
    "cgroup_pids",
    "cgroup_kill",
    "cgroup_swap",
    "openat2",
    "close_range",
    "pidfd_open",
    "landlock",
    "fs.protected_hardlinks",
    "fs.protected_symlinks",
    "fs.protected_regular",
    "kernel.yama.ptrace_scope",
    "kernel.unprivileged_bpf_disabled",
    "vm.unprivileged_userfaultfd",
    "kernel.perf_event_paranoid",
};
#define N_NAMES (int)(sizeof NAMES / sizeof NAMES[0])

static bool dir_exists(const char *p)
{
    struct stat st;
    return p[0] && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void test_every_entry_named_and_detailed(void **state)
{
    (void)state;
    sbx_host_report r;
    sbx_host_check(&r, NULL);
    assert_int_equal(r.n, N_NAMES);
    for (int i = 0; i < N_NAMES; i++) {
        assert_string_equal(r.items[i].name, NAMES[i]);
        if (r.items[i].detail[0] == '\0')
            fail_msg("%s has no detail", NAMES[i]);
    }
    sbx_host_report_free(&r);
}

static void test_all_required_here(void **state)
{
    (void)state;
    sbx_host_report r;
    int rc = sbx_host_check(&r, NULL);
    for (int i = 0; i < r.n; i++) {
        const sbx_host_item *it = &r.items[i];
        fprintf(stderr, "  %-34s %-3s %s  %s\n", it->name, it->ok ? "ok" : "NO",
                it->required ? "required" : "        ", it->detail);
        if (it->required && !it->ok)
            fail_msg("required protection %s missing: %s", it->name, it->detail);
    }
    assert_int_equal(rc, 0);
    assert_true(sbx_host_all_required(&r));
    sbx_host_report_free(&r);
}

/* The documented split between required and reported-only protections. */
static void test_required_flags(void **state)
{
    (void)state;
    sbx_host_report r;
    sbx_host_check(&r, NULL);
    const char *req[] = {"privileges",
                         "ns_mount",
                         "ns_pid",
                         "ns_net",
                         "seccomp",
                         "cgroup",
                         "cgroup_swap",
                         "openat2",
                         "close_range",
                         "pidfd_open",
                         "fs.protected_hardlinks"};
    const char *opt[] = {"cgroup_pids",
                         "cgroup_kill",
                         "landlock",
                         "fs.protected_symlinks",
                         "kernel.yama.ptrace_scope",
                         "kernel.perf_event_paranoid"};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        assert_true(sbx_host_find(&r, req[i])->required);
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        assert_false(sbx_host_find(&r, opt[i])->required);
    assert_null(sbx_host_find(&r, "no-such"));
    sbx_host_report_free(&r);
}

static void test_json_shape(void **state)
{
    (void)state;
    sbx_host_report r;
    sbx_host_check(&r, NULL);
    json_t *j = sbx_host_report_json(&r);
    assert_non_null(j);
    assert_true(json_is_true(json_object_get(j, "all_required_ok")));
    json_t *list = json_object_get(j, "protections");
    assert_true(json_is_array(list));
    assert_int_equal(json_array_size(list), (size_t)r.n);
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *o = json_array_get(list, i);
        assert_string_equal(json_string_value(json_object_get(o, "name")), NAMES[i]);
        assert_true(json_is_boolean(json_object_get(o, "ok")));
        assert_true(json_is_boolean(json_object_get(o, "required")));
        assert_true(strlen(json_string_value(json_object_get(o, "detail"))) > 0);
    }
    json_decref(j);
    /* A required protection missing turns the summary false. */
    for (int i = 0; i < r.n; i++)
        if (strcmp(r.items[i].name, "seccomp") == 0)
            r.items[i].ok = false;
    assert_false(sbx_host_all_required(&r));
    j = sbx_host_report_json(&r);
    assert_true(json_is_false(json_object_get(j, "all_required_ok")));
    json_decref(j);
    sbx_host_report_free(&r);
}

/* Without a name the cgroup probe cleans up after itself; with one it leaves kgym's parent
 * cgroup for the server, which removes it at exit. */
static void test_cgroup_probe_cleanup(void **state)
{
    (void)state;
    sbx_host_report r;
    sbx_host_check(&r, NULL);
    assert_false(r.cg_ok);
    assert_false(dir_exists(r.cg.v2_base));
    assert_false(dir_exists(r.cg.v2_server_leaf));
    assert_false(dir_exists(r.cg.v1_memory));
    assert_false(dir_exists(r.cg.v1_pids));
    assert_false(dir_exists(r.cg.v1_freezer));

    char name[64];
    snprintf(name, sizeof name, "kgym-hc-%d", (int)getpid());
    assert_int_equal(sbx_host_check(&r, name), 0);
    assert_true(r.cg_ok);
    const char *kept = r.cg.mode == SBX_CG_V2 ? r.cg.v2_base : r.cg.v1_memory;
    assert_true(dir_exists(kept));
    assert_non_null(strstr(kept, name));
    sbx_cg_host_cleanup(&r.cg);
    assert_false(dir_exists(kept));
    assert_false(dir_exists(r.cg.v2_server_leaf));
    assert_false(dir_exists(r.cg.v1_pids));
    assert_false(dir_exists(r.cg.v1_freezer));
    sbx_host_report_free(&r);
}

static void test_gpu_devices(void **state)
{
    (void)state;
    char paths[4][64];
    const char *want[] = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"};
    int expect = 0;
    for (int i = 0; i < 3; i++) {
        struct stat st;
        expect += stat(want[i], &st) == 0 && S_ISCHR(st.st_mode);
    }
    int n = sbx_host_gpu_devices(0, paths, 4);
    assert_int_equal(n, expect);
    for (int i = 0; i < n; i++) {
        fprintf(stderr, "  gpu device: %s\n", paths[i]);
        assert_int_equal(strncmp(paths[i], "/dev/nvidia", 11), 0);
    }
    assert_true(sbx_host_gpu_devices(0, paths, 0) == 0);
}

static void test_gpu_binds(void **state)
{
    (void)state;
    char prefix[] = "/tmp/kgym-hc-py-XXXXXX";
    assert_non_null(mkdtemp(prefix));
    char p[256];
    const char *parts[] = {"/lib", "/lib/python3.11", "/lib/python3.11/site-packages",
                           "/lib/python3.11/site-packages/torch"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", prefix, parts[i]);
        assert_int_equal(mkdir(p, 0755), 0);
    }
    sbx_host_gpu_binds b;
    sbx_host_gpu_binds_probe(NULL, &b); /* this host, as $KGYM_PYTHON_PREFIX says */
    fprintf(stderr, "  gpu binds: driver '%s', proc '%s', python '%s'\n", b.driver_dir,
            b.proc_driver, b.python_prefix);
    sbx_host_gpu_binds_probe(prefix, &b);
    assert_string_equal(b.python_prefix, prefix);
    assert_int_equal(b.driver_dir[0] != '\0', dir_exists("/usr/local/nvidia"));
    assert_int_equal(b.proc_driver[0] != '\0', dir_exists("/proc/driver/nvidia"));

    setenv("KGYM_PYTHON_PREFIX", prefix, 1);
    sbx_host_gpu_binds_probe(NULL, &b);
    assert_string_equal(b.python_prefix, prefix);
    unsetenv("KGYM_PYTHON_PREFIX");
    sbx_host_gpu_binds_probe("/usr/share", &b); /* no torch there */
    assert_string_equal(b.python_prefix, "");
    sbx_host_gpu_binds_probe("relative/prefix", &b);
    assert_string_equal(b.python_prefix, "");

    for (int i = 3; i >= 0; i--) {
        snprintf(p, sizeof p, "%s%s", prefix, parts[i]);
        rmdir(p);
    }
    rmdir(prefix);
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_sbx_hostcheck needs root (cgroups, per-episode uids): FAILED\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_entry_named_and_detailed),
        cmocka_unit_test(test_all_required_here),
        cmocka_unit_test(test_required_flags),
        cmocka_unit_test(test_json_shape),
        cmocka_unit_test(test_cgroup_probe_cleanup),
        cmocka_unit_test(test_gpu_devices),
        cmocka_unit_test(test_gpu_binds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
