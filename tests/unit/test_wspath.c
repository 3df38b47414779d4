/* wspath: lexical normalisation, confined opening (symlinks in and out), parent creation, the
 * fixed files and the disk usage walk. */
#include "fs_fixture.h"

#include "wspath.h"

/* ---- ws_normalize ---------------------------------------------------------------------------- */

static void expect_rel(const char *in, const char *want)
{
    char rel[WS_PATH_MAX];
    int rc = ws_normalize(in, strlen(in), rel);
    if (rc != WS_OK)
        fail_msg("ws_normalize(\"%s\") failed: %d", in, rc);
    assert_string_equal(rel, want);
}

static void expect_err(const char *in, size_t len, int want)
{
    char rel[WS_PATH_MAX];
    assert_int_equal(ws_normalize(in, len, rel), want);
}

static void test_normalize_accepts_workspace_paths(void **state)
{
    (void)state;
    expect_rel("/workspace", ".");
    expect_rel("/workspace/", ".");
    expect_rel("/workspace/x", "x");
    expect_rel("/workspace/a/b.py", "a/b.py");
    expect_rel("x", "x");
    expect_rel("./x", "x");
    expect_rel(".", ".");
    expect_rel("a/../b", "b");
    expect_rel("a/..", ".");
    expect_rel("a//b/./c/", "a/b/c");
}

static void test_normalize_refuses_escapes(void **state)
{
    (void)state;
    const char *outside[] = {"/etc/passwd", "/",          "/tmp",      "/workspacefoo/x",
                             "..",          "../x",       "a/../../x", "/workspace/../etc/passwd",
                             "./../x",      "//workspace"};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        char rel[WS_PATH_MAX];
        int rc = ws_normalize(outside[i], strlen(outside[i]), rel);
        if (rc != WS_E_OUTSIDE)
            fail_msg("\"%s\": expected WS_E_OUTSIDE, got %d (%s)", outside[i], rc, rel);
    }
}

static void test_normalize_refuses_invalid(void **state)
{
    (void)state;
    expect_err("", 0, WS_E_INVALID);
    expect_err("a\0b", 3, WS_E_INVALID);            /* embedded NUL */
    expect_err("/workspace/x\0", 13, WS_E_INVALID); /* trailing NUL counted in len */
    expect_err("caf\xc3", 4, WS_E_INVALID);         /* truncated UTF-8 */
    expect_err("\xff\xfe", 2, WS_E_INVALID);
    expect_err("\xc0\xaf", 2, WS_E_INVALID); /* overlong encoding of '/' */
    char rel[WS_PATH_MAX];
    assert_int_equal(ws_normalize(NULL, 3, rel), WS_E_INVALID);
    expect_rel("caf\xc3\xa9/\xe2\x82\xac", "caf\xc3\xa9/\xe2\x82\xac"); /* valid UTF-8 is fine */
}

static void test_normalize_length_limit(void **state)
{
    (void)state;
    char *p = malloc(WS_PATH_MAX + 64);
    char rel[WS_PATH_MAX];
    memset(p, 'a', WS_PATH_MAX + 63);
    assert_int_equal(ws_normalize(p, WS_PATH_MAX + 1, rel), WS_E_INVALID);
    assert_int_equal(ws_normalize(p, WS_PATH_MAX, rel), WS_E_INVALID); /* no room for NUL */
    assert_int_equal(ws_normalize(p, WS_PATH_MAX - 1, rel), WS_OK);
    assert_int_equal(strlen(rel), WS_PATH_MAX - 1);
    /* The virtual prefix does not count against the relative path. */
    memcpy(p, "/workspace/", 11);
    assert_int_equal(ws_normalize(p, WS_PATH_MAX, rel), WS_OK);
    assert_int_equal(strlen(rel), WS_PATH_MAX - 11);
    free(p);
}

static void test_display(void **state)
{
    (void)state;
    char out[WS_PATH_MAX + 16];
    ws_display(".", out, sizeof out);
    assert_string_equal(out, "/workspace");
    ws_display("a/b.py", out, sizeof out);
    assert_string_equal(out, "/workspace/a/b.py");
}

static void test_err_codes(void **state)
{
    (void)state;
    assert_string_equal(ws_err_code(WS_E_INVALID), "INVALID_PATH");
    assert_string_equal(ws_err_code(WS_E_OUTSIDE), "PATH_OUTSIDE_WORKSPACE");
    assert_string_equal(ws_err_code(WS_E_NOENT), "FILE_NOT_FOUND");
    assert_string_equal(ws_err_code(WS_E_ISDIR), "IS_DIRECTORY");
    assert_string_equal(ws_err_code(WS_E_NOTDIR), "NOT_A_DIRECTORY");
    assert_string_equal(ws_err_code(WS_E_READONLY), "READ_ONLY_FILE");
    assert_string_equal(ws_err_code(WS_E_IO), "IO_ERROR");
    assert_string_equal(ws_err_code(-42), "IO_ERROR");
}

/* ---- ws_open --------------------------------------------------------------------------------- */

static void expect_content(int fd, const char *want)
{
    assert_true(fd >= 0);
    char buf[256] = {0};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    assert_int_equal(n, (ssize_t)strlen(want));
    assert_string_equal(buf, want);
}

static void test_open_regular_and_errors(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "dir/file.txt", "hello\n");
    int fd = ws_open(fx->root_fd, "dir/file.txt", O_RDONLY, 0);
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC); /* always close-on-exec */
    expect_content(fd, "hello\n");
    assert_int_equal(ws_open(fx->root_fd, "missing.txt", O_RDONLY, 0), WS_E_NOENT);
    assert_int_equal(ws_open(fx->root_fd, "dir", O_WRONLY, 0), WS_E_ISDIR);
    assert_int_equal(ws_open(fx->root_fd, "dir/file.txt/x", O_RDONLY, 0), WS_E_NOTDIR);
    assert_int_equal(ws_open(fx->root_fd, "/etc/passwd", O_RDONLY, 0), WS_E_INVALID);
    assert_int_equal(ws_open(fx->root_fd, "", O_RDONLY, 0), WS_E_INVALID);
    /* ".." that survived normalisation is still refused by the kernel. */
    assert_int_equal(ws_open(fx->root_fd, "../etc/passwd", O_RDONLY, 0), WS_E_OUTSIDE);
    /* Creating a file works and mode is honoured through openat2. */
    fd = ws_open(fx->root_fd, "dir/new.txt", O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_true(fx_exists(fx, "dir/new.txt"));
}

static void test_open_symlink_out_refused(void **state)
{
    fixture *fx = *state;
    char target[128];
    snprintf(target, sizeof target, "%s/secret.txt", fx->outside);
    fx_link(fx, target, "abs_link");                      /* absolute, to a file outside */
    fx_link(fx, "../../../../../etc/passwd", "rel_link"); /* relative, climbing out */
    fx_link(fx, fx->outside, "out_dir");                  /* a directory outside */
    fx_link(fx, "/proc/self/root/etc/passwd", "magic");
    fx_link(fx, "/workspace/x", "virtual"); /* absolute links are host paths, never virtual */
    assert_int_equal(ws_open(fx->root_fd, "abs_link", O_RDONLY, 0), WS_E_OUTSIDE);
    assert_int_equal(ws_open(fx->root_fd, "rel_link", O_RDONLY, 0), WS_E_OUTSIDE);
    assert_int_equal(ws_open(fx->root_fd, "out_dir/secret.txt", O_RDONLY, 0), WS_E_OUTSIDE);
    assert_int_equal(ws_open(fx->root_fd, "out_dir", O_RDONLY | O_DIRECTORY, 0), WS_E_OUTSIDE);
    assert_int_equal(ws_open(fx->root_fd, "magic", O_RDONLY, 0), WS_E_OUTSIDE);
    assert_int_equal(ws_open(fx->root_fd, "virtual", O_RDONLY, 0), WS_E_OUTSIDE);
    /* Nor can a write create a file outside through the link. */
    assert_int_equal(ws_open(fx->root_fd, "out_dir/planted", O_WRONLY | O_CREAT, 0644),
                     WS_E_OUTSIDE);
    char planted[160];
    snprintf(planted, sizeof planted, "%s/planted", fx->outside);
    assert_int_equal(access(planted, F_OK), -1);
}

static void test_open_symlink_inside_allowed(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "real.txt", "real\n");
    fx_puts(fx, "sub/inner.txt", "inner\n");
    fx_link(fx, "real.txt", "link.txt");
    fx_link(fx, "../real.txt", "sub/up.txt"); /* climbs, but stays beneath the root */
    fx_link(fx, "sub", "subdir_link");
    expect_content(ws_open(fx->root_fd, "link.txt", O_RDONLY, 0), "real\n");
    expect_content(ws_open(fx->root_fd, "sub/up.txt", O_RDONLY, 0), "real\n");
    expect_content(ws_open(fx->root_fd, "subdir_link/inner.txt", O_RDONLY, 0), "inner\n");
}

/* ---- ws_mkdirs_for --------------------------------------------------------------------------- */

static void test_mkdirs_creates_parents(void **state)
{
    fixture *fx = *state;
    assert_int_equal(ws_mkdirs_for(fx->root_fd, "a/b/c/file.txt", NULL), WS_OK);
    char path[256];
    struct stat st;
    assert_int_equal(stat(fx_path(fx, "a/b/c", path, sizeof path), &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_false(fx_exists(fx, "a/b/c/file.txt")); /* only the parents */
    assert_int_equal(ws_mkdirs_for(fx->root_fd, "a/b/c/file.txt", NULL), WS_OK); /* idempotent */
    assert_int_equal(ws_mkdirs_for(fx->root_fd, "top.txt", NULL), WS_OK);
}

static void test_mkdirs_confined(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "plain", "x");
    fx_link(fx, fx->outside, "out");
    fx_link(fx, "/nonexistent-kgym-dir", "dangling_out");
    assert_int_equal(ws_mkdirs_for(fx->root_fd, "plain/x/y", NULL), WS_E_NOTDIR);
    assert_int_equal(ws_mkdirs_for(fx->root_fd, "out/newdir/file", NULL), WS_E_OUTSIDE);
    assert_int_equal(ws_mkdirs_for(fx->root_fd, "dangling_out/x/file", NULL), WS_E_OUTSIDE);
    char path[160];
    snprintf(path, sizeof path, "%s/newdir", fx->outside);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access("/nonexistent-kgym-dir", F_OK), -1);
}

/* ---- fixed files and disk usage -------------------------------------------------------------- */

static void test_is_fixed(void **state)
{
    (void)state;
    assert_true(ws_is_fixed("model.py"));
    assert_true(ws_is_fixed("binding.cpp"));
    assert_true(ws_is_fixed("binding_registry.h"));
    assert_false(ws_is_fixed("sub/model.py"));
    assert_false(ws_is_fixed("model.py.bak"));
    assert_false(ws_is_fixed("Model.py"));
    assert_false(ws_is_fixed("kernel.cu"));
    assert_false(ws_is_fixed(NULL));
}

static void test_disk_usage(void **state)
{
    fixture *fx = *state;
    unsigned long long bytes = 99;
    assert_int_equal(ws_disk_usage(fx->root_fd, &bytes), WS_OK);
    assert_int_equal(bytes, 0);
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    fx_put(fx, "a.txt", buf, 100);
    fx_put(fx, "d/e/f.bin", buf, 250);
    fx_put(fx, "d/g", buf, 0);
    /* A big file outside, reachable only through symlinks: never counted. */
    char big[160];
    snprintf(big, sizeof big, "%s/big", fx->outside);
    FILE *f = fopen(big, "w");
    for (int i = 0; i < 64; i++)
        fwrite(buf, 1, sizeof buf, f);
    fclose(f);
    fx_link(fx, big, "big_link");
    fx_link(fx, fx->outside, "out_dir");
    fx_link(fx, "a.txt", "a_link"); /* links are not files: a.txt is counted once */
    assert_int_equal(ws_disk_usage(fx->root_fd, &bytes), WS_OK);
    assert_int_equal(bytes, 350);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize_accepts_workspace_paths),
        cmocka_unit_test(test_normalize_refuses_escapes),
        cmocka_unit_test(test_normalize_refuses_invalid),
        cmocka_unit_test(test_normalize_length_limit),
        cmocka_unit_test(test_display),
        cmocka_unit_test(test_err_codes),
        cmocka_unit_test_setup_teardown(test_open_regular_and_errors, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_open_symlink_out_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_open_symlink_inside_allowed, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_mkdirs_creates_parents, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_mkdirs_confined, fx_setup, fx_teardown),
        cmocka_unit_test(test_is_fixed),
        cmocka_unit_test_setup_teardown(test_disk_usage, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests_name("wspath", tests, NULL, NULL);
}
