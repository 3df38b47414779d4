/* Read, Write, Glob and Grep on a real temp workspace, plus the argument schema checks every
 * tool call goes through. */
#include "fs_fixture.h"

#include <pthread.h>
#include <time.h>

#include "tools/fs.h"
#include "tools/globpat.h"

static tool_result read_file(const fixture *fx, const char *path)
{
    return fx_call(fx, &tool_def_read, json_pack("{s:s}", "file_path", path));
}

static tool_result write_file(const fixture *fx, const char *path, const char *content)
{
    return fx_call(fx, &tool_def_write,
                   json_pack("{s:s,s:s}", "file_path", path, "content", content));
}

/* A file of n lines "line1\n" ... "lineN\n". */
static void put_lines(const fixture *fx, const char *rel, int n)
{
    char *buf = malloc((size_t)n * 16 + 1);
    size_t len = 0;
    for (int i = 1; i <= n; i++)
        len += (size_t)sprintf(buf + len, "line%d\n", i);
    fx_put(fx, rel, buf, len);
    free(buf);
}

/* ---- path confinement through the tools ------------------------------------------------------ */

static void test_read_path_confinement(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "real.txt", "inside\n");
    fx_link(fx, "real.txt", "in_link");
    char target[128];
    snprintf(target, sizeof target, "%s/secret.txt", fx->outside);
    fx_link(fx, target, "out_file");
    fx_link(fx, fx->outside, "out_dir");
    static const struct {
        const char *path, *code;
    } cases[] = {
        {"/etc/passwd", "PATH_OUTSIDE_WORKSPACE"},
        {"../../etc/passwd", "PATH_OUTSIDE_WORKSPACE"},
        {"/workspace/../etc/passwd", "PATH_OUTSIDE_WORKSPACE"},
        {"/workspacex/real.txt", "PATH_OUTSIDE_WORKSPACE"},
        {"out_file", "PATH_OUTSIDE_WORKSPACE"},
        {"out_dir/secret.txt", "PATH_OUTSIDE_WORKSPACE"},
        {"", "INVALID_PATH"},
        {"missing.txt", "FILE_NOT_FOUND"},
        {"/workspace", "IS_DIRECTORY"},
        {"real.txt/x", "NOT_A_DIRECTORY"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tool_result r = read_file(fx, cases[i].path);
        if (!r.is_error || strcmp(fx_code(&r), cases[i].code) != 0)
            fail_msg("'%s': expected %s, got %s: %s", cases[i].path, cases[i].code, fx_code(&r),
                     r.content);
        assert_not_contains(r.content, "TOP SECRET");
        tool_result_deinit(&r);
    }
    const char *ok[] = {"real.txt", "/workspace/real.txt", "./real.txt", "x/../real.txt",
                        "in_link"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tool_result r = read_file(fx, ok[i]);
        assert_tool_ok(r);
        assert_string_equal(r.content, "     1\tinside\n");
        assert_string_equal(fx_str(&r, "file_path"), strcmp(ok[i], "in_link")
                                                         ? "/workspace/real.txt"
                                                         : "/workspace/in_link");
        tool_result_deinit(&r);
    }
}

static void test_read_bad_path_bytes(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "a", "x");
    /* JSON text cannot carry these, but a client library might build them: NUL, bad UTF-8. */
    tool_result r =
        fx_call(fx, &tool_def_read, json_pack("{s:o}", "file_path", json_stringn("a\0b", 3)));
    assert_tool_error(r, "INVALID_PATH");
    tool_result_deinit(&r);
    r = fx_call(fx, &tool_def_read,
                json_pack("{s:o}", "file_path", json_stringn_nocheck("a\xff", 2)));
    assert_tool_error(r, "INVALID_PATH");
    /* The echoed path was made valid UTF-8, or the result could not be serialised. */
    char *dumped = json_dumps(r.data, 0);
    assert_non_null(dumped);
    free(dumped);
    tool_result_deinit(&r);
    char *longp = malloc(3000);
    memset(longp, 'a', 2999);
    longp[2999] = '\0';
    r = read_file(fx, longp);
    assert_tool_error(r, "INVALID_PATH");
    assert_true(strlen(r.content) < 600); /* the echo of the path is cut */
    tool_result_deinit(&r);
    free(longp);
}

/* ---- Read ------------------------------------------------------------------------------------ */

static void test_read_basic(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "a.txt", "alpha\nbeta\n\tgamma");
    tool_result r = read_file(fx, "a.txt");
    assert_tool_ok(r);
    assert_string_equal(r.content, "     1\talpha\n     2\tbeta\n     3\t\tgamma\n");
    assert_string_equal(fx_str(&r, "file_path"), "/workspace/a.txt");
    assert_int_equal(fx_int(&r, "total_lines"), 3);
    assert_int_equal(fx_int(&r, "start_line"), 1);
    assert_int_equal(fx_int(&r, "lines_returned"), 3);
    assert_false(fx_bool(&r, "truncated"));
    tool_result_deinit(&r);
}

static void test_read_offset_limit(void **state)
{
    fixture *fx = *state;
    put_lines(fx, "ten.txt", 10);
    tool_result r =
        fx_call(fx, &tool_def_read,
                json_pack("{s:s,s:i,s:i}", "file_path", "ten.txt", "offset", 4, "limit", 3));
    assert_tool_ok(r);
    assert_contains(r.content, "     4\tline4\n     5\tline5\n     6\tline6\n");
    assert_not_contains(r.content, "line3\n");
    assert_not_contains(r.content, "line7\n");
    assert_contains(r.content, "offset=7");
    assert_int_equal(fx_int(&r, "total_lines"), 10);
    assert_int_equal(fx_int(&r, "start_line"), 4);
    assert_int_equal(fx_int(&r, "lines_returned"), 3);
    assert_true(fx_bool(&r, "truncated"));
    tool_result_deinit(&r);

    r = fx_call(fx, &tool_def_read, json_pack("{s:s,s:i}", "file_path", "ten.txt", "offset", 9));
    assert_tool_ok(r);
    assert_string_equal(r.content, "     9\tline9\n    10\tline10\n");
    assert_false(fx_bool(&r, "truncated"));
    tool_result_deinit(&r);

    r = fx_call(fx, &tool_def_read, json_pack("{s:s,s:i}", "file_path", "ten.txt", "offset", 50));
    assert_tool_ok(r);
    assert_contains(r.content, "past its end");
    assert_int_equal(fx_int(&r, "lines_returned"), 0);
    tool_result_deinit(&r);

    /* 2500 lines: the default limit shows 2000 of them. */
    put_lines(fx, "many.txt", 2500);
    r = read_file(fx, "many.txt");
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "lines_returned"), 2000);
    assert_contains(r.content, "  2000\tline2000\n");
    assert_not_contains(r.content, "line2001");
    assert_true(fx_bool(&r, "truncated"));
    tool_result_deinit(&r);
}

static void test_read_long_line_cut(void **state)
{
    fixture *fx = *state;
    char *line = malloc(5002);
    memset(line, 'x', 5000);
    strcpy(line + 5000, "\n");
    fx_puts(fx, "long.txt", line);
    tool_result r = read_file(fx, "long.txt");
    assert_tool_ok(r);
    assert_contains(r.content, "line cut: 3000 more characters");
    assert_true(strlen(r.content) < 2300);
    assert_true(fx_bool(&r, "truncated"));
    tool_result_deinit(&r);
    /* The cut counts characters and never splits one: 2500 two-byte characters. */
    for (int i = 0; i < 2500; i++)
        memcpy(line + 2 * i, "\xc3\xa9", 2);
    line[5000] = '\0';
    fx_puts(fx, "long2.txt", line);
    r = read_file(fx, "long2.txt");
    assert_tool_ok(r);
    assert_contains(r.content, "line cut: 500 more characters");
    tool_result_deinit(&r);
    free(line);
}

static void test_read_binary_non_utf8_empty(void **state)
{
    fixture *fx = *state;
    fx_put(fx, "k.so",
           "\x7f"
           "ELF\0\0\1",
           7);
    fx_puts(fx, "latin1.txt", "na\xefve\n");
    fx_puts(fx, "empty.txt", "");
    fx_puts(fx, "model.py", "import torch\n"); /* fixed files are readable */
    tool_result r = read_file(fx, "k.so");
    assert_tool_error(r, "BINARY_FILE");
    tool_result_deinit(&r);
    r = read_file(fx, "latin1.txt");
    assert_tool_error(r, "NOT_UTF8");
    tool_result_deinit(&r);
    r = read_file(fx, "empty.txt");
    assert_tool_ok(r);
    assert_contains(r.content, "empty");
    assert_int_equal(fx_int(&r, "total_lines"), 0);
    assert_int_equal(fx_int(&r, "lines_returned"), 0);
    tool_result_deinit(&r);
    r = read_file(fx, "model.py");
    assert_tool_ok(r);
    assert_string_equal(r.content, "     1\timport torch\n");
    tool_result_deinit(&r);
}

static void test_read_size_and_output_caps(void **state)
{
    fixture *fx = *state;
    fx->limits.max_file_bytes = 1000;
    put_lines(fx, "big.txt", 200); /* ~1400 bytes */
    tool_result r = read_file(fx, "big.txt");
    assert_tool_error(r, "FILE_TOO_LARGE");
    assert_int_equal(fx_int(&r, "max_bytes"), 1000);
    tool_result_deinit(&r);

    fx->limits.max_file_bytes = 1 << 20;
    fx->limits.max_output_chars = 300;
    r = read_file(fx, "big.txt");
    assert_tool_ok(r);
    assert_contains(r.content, "     1\tline1\n");   /* head kept */
    assert_contains(r.content, "   200\tline200\n"); /* tail kept */
    assert_contains(r.content, "bytes omitted");
    assert_true(fx_bool(&r, "truncated"));
    assert_true(strlen(r.content) < 600);
    tool_result_deinit(&r);
}

static void test_read_fifo_does_not_hang(void **state)
{
    fixture *fx = *state;
    char path[256];
    assert_int_equal(mkfifo(fx_path(fx, "pipe", path, sizeof path), 0644), 0);
    tool_result r = read_file(fx, "pipe");
    assert_tool_error(r, "IO_ERROR");
    tool_result_deinit(&r);
}

/* ---- Write ----------------------------------------------------------------------------------- */

static void test_write_creates_with_parents(void **state)
{
    fixture *fx = *state;
    tool_result r = write_file(fx, "/workspace/kernels/v1/k.cu", "__global__ void k() {}\n");
    assert_tool_ok(r);
    assert_true(fx_bool(&r, "created"));
    assert_int_equal(fx_int(&r, "bytes"), 23);
    assert_string_equal(fx_str(&r, "file_path"), "/workspace/kernels/v1/k.cu");
    assert_contains(r.content, "/workspace/kernels/v1/k.cu");
    tool_result_deinit(&r);
    fx_assert_file(fx, "kernels/v1/k.cu", "__global__ void k() {}\n");
    char path[256];
    struct stat st;
    assert_int_equal(stat(fx_path(fx, "kernels/v1/k.cu", path, sizeof path), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal(fx_count_prefix(fx, "kernels/v1", ".kgym-tmp"), 0);

    r = write_file(fx, "kernels/v1/k.cu", "replaced");
    assert_tool_ok(r);
    assert_false(fx_bool(&r, "created"));
    tool_result_deinit(&r);
    fx_assert_file(fx, "kernels/v1/k.cu", "replaced");

    r = write_file(fx, "empty.txt", "");
    assert_tool_ok(r);
    tool_result_deinit(&r);
    fx_assert_file(fx, "empty.txt", "");
}

static void test_write_fixed_files_refused(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "model.py", "orig\n");
    fx_link(fx, "model.py", "alias");
    fx_link(fx, ".", "root_link");
    const char *paths[] = {"model.py",          "/workspace/model.py", "./model.py",
                           "binding.cpp",       "binding_registry.h",  "alias",
                           "root_link/model.py"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        tool_result r = write_file(fx, paths[i], "hacked\n");
        if (!r.is_error || strcmp(fx_code(&r), "READ_ONLY_FILE") != 0)
            fail_msg("%s: expected READ_ONLY_FILE, got %s", paths[i], r.content);
        tool_result_deinit(&r);
    }
    fx_assert_file(fx, "model.py", "orig\n");
    assert_false(fx_exists(fx, "binding.cpp"));
    /* A model.py below the root is an ordinary file. */
    tool_result r = write_file(fx, "sub/model.py", "mine\n");
    assert_tool_ok(r);
    tool_result_deinit(&r);
}

static void test_write_size_cap_and_quota(void **state)
{
    fixture *fx = *state;
    fx->limits.max_file_bytes = 100;
    char big[150];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tool_result r = write_file(fx, "big.txt", big);
    assert_tool_error(r, "FILE_TOO_LARGE");
    tool_result_deinit(&r);
    assert_false(fx_exists(fx, "big.txt"));

    fx->limits.max_file_bytes = 1000;
    fx->limits.disk_quota_bytes = 200;
    char buf[200];
    memset(buf, 'q', sizeof buf);
    fx_put(fx, "old.bin", buf, 120);
    big[99] = '\0'; /* 120 + 99 > 200 */
    r = write_file(fx, "new.txt", big);
    assert_tool_error(r, "DISK_QUOTA_EXCEEDED");
    assert_int_equal(fx_int(&r, "usage_bytes"), 120);
    tool_result_deinit(&r);
    assert_false(fx_exists(fx, "new.txt"));
    /* Replacing old.bin frees its 120 bytes first: 150 fits. */
    big[99] = 'z';
    r = write_file(fx, "old.bin", big);
    assert_tool_ok(r);
    tool_result_deinit(&r);
    fx_assert_file(fx, "old.bin", big);
}

static void test_write_confinement(void **state)
{
    fixture *fx = *state;
    fx_link(fx, fx->outside, "out_dir");
    char target[128];
    snprintf(target, sizeof target, "%s/secret.txt", fx->outside);
    fx_link(fx, target, "out_file");
    fx_puts(fx, "afile", "x");
    static const struct {
        const char *path, *code;
    } cases[] = {
        {"/tmp/evil.txt", "PATH_OUTSIDE_WORKSPACE"},
        {"../evil.txt", "PATH_OUTSIDE_WORKSPACE"},
        {"out_dir/evil.txt", "PATH_OUTSIDE_WORKSPACE"},
        {"out_dir/deeper/evil.txt", "PATH_OUTSIDE_WORKSPACE"},
        {"out_file", "PATH_OUTSIDE_WORKSPACE"},
        {"/workspace", "IS_DIRECTORY"},
        {"afile/child", "NOT_A_DIRECTORY"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tool_result r = write_file(fx, cases[i].path, "evil\n");
        if (!r.is_error || strcmp(fx_code(&r), cases[i].code) != 0)
            fail_msg("'%s': expected %s, got %s: %s", cases[i].path, cases[i].code, fx_code(&r),
                     r.content);
        tool_result_deinit(&r);
    }
    char path[160];
    snprintf(path, sizeof path, "%s/evil.txt", fx->outside);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/deeper", fx->outside);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access("/tmp/evil.txt", F_OK), -1);
}

static void test_write_through_inside_symlink(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "src/real.py", "old\n");
    fx_link(fx, "src/real.py", "link.py");
    tool_result r = write_file(fx, "link.py", "new\n");
    assert_tool_ok(r);
    assert_false(fx_bool(&r, "created"));
    tool_result_deinit(&r);
    fx_assert_file(fx, "src/real.py", "new\n");
    char path[256];
    struct stat st;
    assert_int_equal(lstat(fx_path(fx, "link.py", path, sizeof path), &st), 0);
    assert_true(S_ISLNK(st.st_mode));
}

/* ---- Glob ------------------------------------------------------------------------------------ */

/* Sets rel's modification time to base + age_order seconds (bigger: newer). */
static void set_mtime(const fixture *fx, const char *rel, int order)
{
    char path[256];
    struct timespec ts[2] = {{1700000000 + order, 0}, {1700000000 + order, 0}};
    assert_int_equal(utimensat(AT_FDCWD, fx_path(fx, rel, path, sizeof path), ts, 0), 0);
}

static void make_tree(const fixture *fx)
{
    const char *files[] = {"a.py",      "src/b.py",  "src/deep/er/c.py", "src/d.cu",
                           "src/e.cuh", "README.md", "src/notes.txt"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        fx_puts(fx, files[i], "x\n");
        set_mtime(fx, files[i], (int)i);
    }
}

/* The "files" list of a Glob/Grep result, joined with spaces. */
static char *files_of(const tool_result *r)
{
    static __thread char buf[4096];
    buf[0] = '\0';
    const json_t *files = json_object_get(r->data, "files");
    assert_true(json_is_array(files));
    size_t i;
    const json_t *f;
    json_array_foreach(files, i, f)
    {
        if (i)
            strcat(buf, " ");
        strcat(buf, json_string_value(f));
    }
    return buf;
}

static tool_result glob_call(const fixture *fx, const char *pattern, const char *path)
{
    json_t *args = json_pack("{s:s}", "pattern", pattern);
    if (path)
        json_object_set_new(args, "path", json_string(path));
    return fx_call(fx, &tool_def_glob, args);
}

static void test_glob_patterns_and_order(void **state)
{
    fixture *fx = *state;
    make_tree(fx);
    tool_result r = glob_call(fx, "**/*.py", NULL);
    assert_tool_ok(r);
    /* Newest first: c.py (2), b.py (1), a.py (0). */
    assert_string_equal(files_of(&r),
                        "/workspace/src/deep/er/c.py /workspace/src/b.py /workspace/a.py");
    assert_int_equal(fx_int(&r, "count"), 3);
    assert_false(fx_bool(&r, "truncated"));
    assert_string_equal(r.content,
                        "/workspace/src/deep/er/c.py\n/workspace/src/b.py\n/workspace/a.py\n");
    tool_result_deinit(&r);

    r = glob_call(fx, "*.py", NULL); /* no '/': top level only */
    assert_string_equal(files_of(&r), "/workspace/a.py");
    tool_result_deinit(&r);

    r = glob_call(fx, "src/**/*.{cu,cuh}", NULL);
    assert_string_equal(files_of(&r), "/workspace/src/e.cuh /workspace/src/d.cu");
    tool_result_deinit(&r);

    r = glob_call(fx, "{README.md,src/[bd].*}", NULL);
    assert_string_equal(files_of(&r),
                        "/workspace/README.md /workspace/src/d.cu /workspace/src/b.py");
    tool_result_deinit(&r);

    r = glob_call(fx, "*.py", "/workspace/src"); /* relative to path */
    assert_string_equal(files_of(&r), "/workspace/src/b.py");
    tool_result_deinit(&r);

    r = glob_call(fx, "/workspace/src/**/c.py", "src"); /* an absolute pattern under path */
    assert_string_equal(files_of(&r), "/workspace/src/deep/er/c.py");
    tool_result_deinit(&r);

    r = glob_call(fx, "**/*.rs", NULL);
    assert_tool_ok(r);
    assert_string_equal(r.content, "No files found\n");
    assert_int_equal(fx_int(&r, "count"), 0);
    tool_result_deinit(&r);

    /* Touching a file moves it to the front. */
    set_mtime(fx, "a.py", 100);
    r = glob_call(fx, "**/*.py", NULL);
    assert_string_equal(files_of(&r),
                        "/workspace/a.py /workspace/src/deep/er/c.py /workspace/src/b.py");
    tool_result_deinit(&r);
}

static void test_glob_symlinks_and_errors(void **state)
{
    fixture *fx = *state;
    make_tree(fx);
    fx_link(fx, "src", "src_link");      /* a directory link: not entered */
    fx_link(fx, fx->outside, "out_dir"); /* nor this one */
    fx_link(fx, "a.py", "a_link.py");    /* a file link inside: listed */
    char target[128];
    snprintf(target, sizeof target, "%s/secret.txt", fx->outside);
    fx_link(fx, target, "secret.py"); /* a file link outside: not listed */
    tool_result r = glob_call(fx, "**/*", NULL);
    assert_tool_ok(r);
    assert_not_contains(r.content, "src_link");
    assert_not_contains(r.content, "out_dir");
    assert_not_contains(r.content, "secret");
    assert_contains(r.content, "/workspace/a_link.py\n");
    assert_int_equal(fx_int(&r, "count"), 8);
    tool_result_deinit(&r);

    r = glob_call(fx, "*", "a.py");
    assert_tool_error(r, "NOT_A_DIRECTORY");
    tool_result_deinit(&r);
    r = glob_call(fx, "*", "/etc");
    assert_tool_error(r, "PATH_OUTSIDE_WORKSPACE");
    tool_result_deinit(&r);
    r = glob_call(fx, "*", "out_dir");
    assert_tool_error(r, "PATH_OUTSIDE_WORKSPACE");
    tool_result_deinit(&r);
    r = glob_call(fx, "*", "nope");
    assert_tool_error(r, "FILE_NOT_FOUND");
    tool_result_deinit(&r);
    r = glob_call(fx, "/etc/*", NULL);
    assert_tool_error(r, "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    /* 2^10 alternatives is refused, not expanded. */
    r = glob_call(fx, "{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}", NULL);
    assert_tool_error(r, "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
}

static void test_glob_result_cap(void **state)
{
    fixture *fx = *state;
    char rel[64];
    for (int i = 0; i < 1005; i++) {
        snprintf(rel, sizeof rel, "many/f%04d.txt", i);
        fx_puts(fx, rel, "");
    }
    tool_result r = glob_call(fx, "many/*.txt", NULL);
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "count"), 1005);
    assert_true(fx_bool(&r, "truncated"));
    assert_int_equal(json_array_size(json_object_get(r.data, "files")), 1000);
    assert_contains(r.content, "1000 newest of 1005");
    tool_result_deinit(&r);
}

/* The Glob budget tests shrink fs_glob_budget; this teardown puts it back even when one fails. */
static int budget_teardown(void **state)
{
    fs_glob_budget = (fs_search_budget){FS_GLOB_TIME_BUDGET_MS, FS_GLOB_MAX_FILES};
    return fx_teardown(state);
}

/* Glob matches at most max_files files against its pattern: a tree of exactly that many is
 * listed whole; one more file and it stops, lists what it found and says the listing was cut (a
 * result, not an error). */
static void test_glob_file_budget(void **state)
{
    fixture *fx = *state;
    assert_int_equal(fs_glob_budget.max_files, FS_GLOB_MAX_FILES); /* the server's cap */
    assert_int_equal(fs_glob_budget.time_ms, FS_GLOB_TIME_BUDGET_MS);
    fs_glob_budget.max_files = 12;
    char rel[64];
    for (int i = 0; i < 12; i++) {
        snprintf(rel, sizeof rel, "d%d/f%02d.txt", i % 3, i);
        fx_puts(fx, rel, "");
    }
    tool_result r = glob_call(fx, "**/*.txt", NULL);
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "count"), 12);
    assert_false(fx_bool(&r, "truncated"));
    assert_not_contains(r.content, "incomplete");
    tool_result_deinit(&r);

    fx_puts(fx, "d0/one_more.txt", "");
    r = glob_call(fx, "**/*.txt", NULL);
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "count"), 12);
    assert_int_equal(json_array_size(json_object_get(r.data, "files")), 12);
    assert_true(fx_bool(&r, "truncated"));
    assert_contains(r.content, "/workspace/d");
    assert_contains(r.content, "(Stopped after examining 12 files; the listing is incomplete. "
                               "Narrow path or pattern.)\n");
    tool_result_deinit(&r);

    /* Files examined count, matched or not; the cap is per call and counts only under path. */
    r = glob_call(fx, "**/*.cu", NULL);
    assert_tool_ok(r);
    assert_contains(r.content, "No files found\n(Stopped after examining 12 files;");
    tool_result_deinit(&r);
    r = glob_call(fx, "*.txt", "d0");
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "count"), 5);
    assert_false(fx_bool(&r, "truncated"));
    tool_result_deinit(&r);
}

/* Out of time: Glob answers with what it has (here nothing) and says the listing was cut. */
static void test_glob_time_budget(void **state)
{
    fixture *fx = *state;
    make_tree(fx);
    fs_glob_budget.time_ms = 0; /* spent before the first file */
    tool_result r = glob_call(fx, "**/*.py", NULL);
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "count"), 0);
    assert_true(fx_bool(&r, "truncated"));
    assert_string_equal(r.content, "No files found\n(The search ran out of time; the listing is "
                                   "incomplete. Narrow path or pattern.)\n");
    tool_result_deinit(&r);

    fs_glob_budget.time_ms = FS_GLOB_TIME_BUDGET_MS;
    r = glob_call(fx, "**/*.py", NULL);
    assert_int_equal(fx_int(&r, "count"), 3);
    assert_false(fx_bool(&r, "truncated"));
    tool_result_deinit(&r);
}

/* The deadline Glob's time budget runs on. */
static void test_search_deadline(void **state)
{
    (void)state;
    struct timespec now = fs_deadline_in(0), later = fs_deadline_in(60000);
    assert_true(fs_deadline_passed(&now));
    assert_false(fs_deadline_passed(&later));
    struct timespec odd = fs_deadline_in(1999); /* the milliseconds carry into seconds */
    assert_true(odd.tv_nsec >= 0 && odd.tv_nsec < 1000000000L);
    assert_true(odd.tv_sec > now.tv_sec);
    struct timespec soon = fs_deadline_in(20);
    assert_false(fs_deadline_passed(&soon));
    struct timespec nap = {0, 40 * 1000000L};
    nanosleep(&nap, NULL);
    assert_true(fs_deadline_passed(&soon));
}

static void test_globpat_semantics(void **state)
{
    (void)state;
    static const struct {
        const char *pat, *path;
        bool match;
    } cases[] = {
        {"**", "a/b/c", true},
        {"**/*.c", "x.c", true},
        {"**/*.c", "a/b/x.c", true},
        {"a/**/b", "a/b", true},
        {"a/**/b", "a/x/y/b", true},
        {"a/**/b", "a/x/y/c", false},
        {"a/**", "a/x/y", true},
        {"*.c", "a/x.c", false},
        {"*", "a/b", false},
        {"?.c", "x.c", true},
        {"?.c", "xy.c", false},
        {"?.txt", "\xc3\xa9.txt", true}, /* ? is one character, not one byte */
        {"[a-c]x", "bx", true},
        {"[a-c]x", "dx", false},
        {"[!a-c]x", "dx", true},
        {"[^a-c]x", "ax", false},
        {"[]]", "]", true},
        {"\\*.c", "*.c", true},
        {"\\*.c", "x.c", false},
        {"{a,b{c,d}}.txt", "bd.txt", true},
        {"{a,b{c,d}}.txt", "b.txt", false},
        {"src/{x,y}/*.h", "src/y/k.h", true},
        {"*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
        {"{unclosed", "{unclosed", true},
        {"[unclosed", "[unclosed", true},
        {"./a/./b", "a/b", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        globpat g;
        assert_int_equal(globpat_compile(cases[i].pat, &g), 0);
        if (globpat_match(&g, cases[i].path) != cases[i].match)
            fail_msg("'%s' vs '%s': expected %s", cases[i].pat, cases[i].path,
                     cases[i].match ? "match" : "no match");
        globpat_free(&g);
    }
}

/* ---- Grep ------------------------------------------------------------------------------------ */

static tool_result grep(const fixture *fx, json_t *args)
{
    return fx_call(fx, &tool_def_grep, args);
}

static void make_grep_tree(const fixture *fx)
{
    fx_puts(fx, "a.py", "import torch\ndef forward(x):\n    return x\n");
    fx_puts(fx, "src/k.cu", "__global__ void k() {}\n// def not python\n");
    fx_puts(fx, "src/h.cuh", "#pragma once\n");
    fx_puts(fx, "docs/x.md", "Hello World\nhello again\n");
    fx_put(fx, "bin.so", "def\0binary", 10);
    fx_puts(fx, "latin.txt", "def caf\xe9\n");
    set_mtime(fx, "a.py", 1);
    set_mtime(fx, "src/k.cu", 2);
}

static void test_grep_files_with_matches(void **state)
{
    fixture *fx = *state;
    make_grep_tree(fx);
    tool_result r = grep(fx, json_pack("{s:s}", "pattern", "def"));
    assert_tool_ok(r);
    /* Default mode; newest first; binary and non-UTF-8 files skipped. */
    assert_string_equal(r.content, "Found 2 files\n/workspace/src/k.cu\n/workspace/a.py\n");
    assert_string_equal(files_of(&r), "/workspace/src/k.cu /workspace/a.py");
    assert_string_equal(fx_str(&r, "mode"), "files_with_matches");
    assert_int_equal(fx_int(&r, "count"), 2);
    tool_result_deinit(&r);

    r = grep(fx, json_pack("{s:s,s:s}", "pattern", "def", "glob", "*.py"));
    assert_string_equal(files_of(&r), "/workspace/a.py");
    tool_result_deinit(&r);
    r = grep(fx, json_pack("{s:s,s:s}", "pattern", "def|pragma", "type", "cuda"));
    assert_string_equal(files_of(&r),
                        "/workspace/src/h.cuh /workspace/src/k.cu"); /* h.cuh: newest */
    tool_result_deinit(&r);
    r = grep(fx, json_pack("{s:s,s:s}", "pattern", ".", "glob", "src/*.{cu,cuh}"));
    assert_int_equal(json_array_size(json_object_get(r.data, "files")), 2);
    tool_result_deinit(&r);
    r = grep(fx, json_pack("{s:s,s:s}", "pattern", "def", "path", "/workspace/src"));
    assert_string_equal(files_of(&r), "/workspace/src/k.cu");
    tool_result_deinit(&r);
    r = grep(fx, json_pack("{s:s}", "pattern", "no such text"));
    assert_tool_ok(r);
    assert_contains(r.content, "No matches found");
    assert_int_equal(fx_int(&r, "count"), 0);
    tool_result_deinit(&r);
}

static void test_grep_content_and_flags(void **state)
{
    fixture *fx = *state;
    make_grep_tree(fx);
    tool_result r =
        grep(fx, json_pack("{s:s,s:s}", "pattern", "^def \\w+", "output_mode", "content"));
    assert_tool_ok(r);
    assert_string_equal(r.content, "/workspace/a.py:2:def forward(x):\n");
    assert_string_equal(fx_str(&r, "mode"), "content");
    assert_int_equal(fx_int(&r, "count"), 1);
    tool_result_deinit(&r);

    r = grep(fx,
             json_pack("{s:s,s:s,s:b}", "pattern", "forward", "output_mode", "content", "-n", 0));
    assert_string_equal(r.content, "/workspace/a.py:def forward(x):\n");
    tool_result_deinit(&r);

    r = grep(fx, json_pack("{s:s,s:s,s:b,s:s}", "pattern", "HELLO", "output_mode", "content", "-i",
                           1, "path", "docs"));
    assert_string_equal(r.content,
                        "/workspace/docs/x.md:1:Hello World\n/workspace/docs/x.md:2:hello again\n");
    tool_result_deinit(&r);
    r = grep(fx, json_pack("{s:s,s:s,s:s}", "pattern", "HELLO", "output_mode", "content", "path",
                           "docs"));
    assert_contains(r.content, "No matches found");
    tool_result_deinit(&r);

    r = grep(fx, json_pack("{s:s,s:s}", "pattern", "o", "output_mode", "count"));
    assert_tool_ok(r);
    assert_contains(r.content, "/workspace/a.py:2\n");
    assert_contains(r.content, "/workspace/docs/x.md:2\n");
    assert_contains(r.content, "/workspace/src/k.cu:2\n");
    assert_contains(r.content, "/workspace/src/h.cuh:1\n");
    assert_int_equal(fx_int(&r, "count"), 7);
    tool_result_deinit(&r);

    /* A path naming a file searches just that file. */
    r = grep(fx, json_pack("{s:s,s:s,s:s}", "pattern", "k", "path", "src/k.cu", "output_mode",
                           "content"));
    assert_string_equal(r.content, "/workspace/src/k.cu:1:__global__ void k() {}\n");
    tool_result_deinit(&r);

    /* Unicode-aware case folding and classes. */
    fx_puts(fx, "u.txt", "\xc3\x89t\xc3\xa9 caf\xc3\xa9\n");
    r = grep(fx, json_pack("{s:s,s:s,s:b,s:s}", "pattern", "\xc3\xa9T\xc3\x89 \\w{4}$",
                           "output_mode", "content", "-i", 1, "path", "u.txt"));
    assert_string_equal(r.content, "/workspace/u.txt:1:\xc3\x89t\xc3\xa9 caf\xc3\xa9\n");
    tool_result_deinit(&r);
}

static void test_grep_context(void **state)
{
    fixture *fx = *state;
    put_lines(fx, "ten.txt", 10);
    tool_result r = grep(fx, json_pack("{s:s,s:s,s:i}", "pattern", "^line(2|8)$", "output_mode",
                                       "content", "-C", 1));
    assert_tool_ok(r);
    assert_string_equal(r.content, "/workspace/ten.txt-1-line1\n"
                                   "/workspace/ten.txt:2:line2\n"
                                   "/workspace/ten.txt-3-line3\n"
                                   "--\n"
                                   "/workspace/ten.txt-7-line7\n"
                                   "/workspace/ten.txt:8:line8\n"
                                   "/workspace/ten.txt-9-line9\n");
    assert_int_equal(fx_int(&r, "count"), 2);
    tool_result_deinit(&r);

    /* Overlapping context merges into one group; -A/-B override -C. */
    r = grep(fx, json_pack("{s:s,s:s,s:i,s:i,s:i}", "pattern", "^line(4|6)$", "output_mode",
                           "content", "-C", 5, "-B", 1, "-A", 0));
    assert_string_equal(r.content, "/workspace/ten.txt-3-line3\n"
                                   "/workspace/ten.txt:4:line4\n"
                                   "/workspace/ten.txt-5-line5\n"
                                   "/workspace/ten.txt:6:line6\n");
    tool_result_deinit(&r);

    r = grep(fx,
             json_pack("{s:s,s:s,s:i}", "pattern", "line10", "output_mode", "content", "-A", 3));
    assert_string_equal(r.content, "/workspace/ten.txt:10:line10\n");
    tool_result_deinit(&r);
}

static void test_grep_head_limit_and_multiline(void **state)
{
    fixture *fx = *state;
    put_lines(fx, "ten.txt", 10);
    tool_result r = grep(fx, json_pack("{s:s,s:s,s:i}", "pattern", "line", "output_mode", "content",
                                       "head_limit", 3));
    assert_tool_ok(r);
    assert_contains(r.content, "/workspace/ten.txt:3:line3\n");
    assert_not_contains(r.content, ":4:");
    assert_contains(r.content, "head_limit=3");
    assert_true(fx_bool(&r, "truncated"));
    assert_int_equal(fx_int(&r, "count"), 10); /* the total is still counted */
    tool_result_deinit(&r);

    fx_puts(fx, "m.c", "int f(void)\n{\n    return 0;\n}\nint g;\n");
    r = grep(fx, json_pack("{s:s,s:s,s:b,s:s}", "pattern", "f\\(void\\)\\s*\\{.*?\\}",
                           "output_mode", "content", "multiline", 1, "path", "m.c"));
    assert_tool_ok(r);
    assert_string_equal(r.content, "/workspace/m.c:1:int f(void)\n/workspace/m.c:2:{\n"
                                   "/workspace/m.c:3:    return 0;\n/workspace/m.c:4:}\n");
    tool_result_deinit(&r);
    /* Without multiline the same pattern cannot cross lines. */
    r = grep(fx, json_pack("{s:s,s:s}", "pattern", "f\\(void\\)\\s*\\{", "path", "m.c"));
    assert_contains(r.content, "No matches found");
    tool_result_deinit(&r);
    /* Empty matches in multiline mode terminate. */
    r = grep(fx, json_pack("{s:s,s:s,s:b,s:s}", "pattern", "^", "output_mode", "count", "multiline",
                           1, "path", "m.c"));
    assert_string_equal(r.content, "/workspace/m.c:5\n");
    tool_result_deinit(&r);
}

static void test_grep_invalid_regex(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "a.txt", "x\n");
    tool_result r = grep(fx, json_pack("{s:s}", "pattern", "foo(bar"));
    assert_tool_error(r, "INVALID_REGEX");
    assert_int_equal(fx_int(&r, "offset"), 7);
    assert_contains(r.content, "missing closing parenthesis");
    tool_result_deinit(&r);
    r = grep(fx, json_pack("{s:s}", "pattern", "[z-a]"));
    assert_tool_error(r, "INVALID_REGEX");
    tool_result_deinit(&r);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void test_grep_catastrophic_pattern(void **state)
{
    fixture *fx = *state;
    char line[4002];
    memset(line, 'a', 4000);
    line[4000] = 'b';
    line[4001] = '\0';
    fx_puts(fx, "evil.txt", line);
    const char *patterns[] = {"(a+)+$", "(a|aa)+$", "^(a|a)*$"};
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        double t0 = now_s();
        tool_result r =
            grep(fx, json_pack("{s:s,s:s}", "pattern", patterns[i], "output_mode", "content"));
        double took = now_s() - t0;
        if (took > 5.0)
            fail_msg("%s took %.1f s", patterns[i], took);
        if (!r.is_error || strcmp(fx_code(&r), "REGEX_LIMIT") != 0)
            fail_msg("%s: expected REGEX_LIMIT, got %s", patterns[i], r.content);
        assert_contains(r.content, "/workspace/evil.txt line 1");
        tool_result_deinit(&r);
    }
}

static void test_grep_path_errors(void **state)
{
    fixture *fx = *state;
    tool_result r = grep(fx, json_pack("{s:s,s:s}", "pattern", "x", "path", "/etc"));
    assert_tool_error(r, "PATH_OUTSIDE_WORKSPACE");
    tool_result_deinit(&r);
    r = grep(fx, json_pack("{s:s,s:s}", "pattern", "x", "path", "missing"));
    assert_tool_error(r, "FILE_NOT_FOUND");
    tool_result_deinit(&r);
    fx_link(fx, fx->outside, "out_dir");
    r = grep(fx, json_pack("{s:s,s:s}", "pattern", "SECRET", "path", "out_dir"));
    assert_tool_error(r, "PATH_OUTSIDE_WORKSPACE");
    tool_result_deinit(&r);
    r = grep(fx, json_pack("{s:s}", "pattern", "SECRET")); /* the link is not followed */
    assert_contains(r.content, "No matches found");
    tool_result_deinit(&r);
}

/* ---- schema ---------------------------------------------------------------------------------- */

static void test_schema_violations(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "a.txt", "x\n");
    static const struct {
        const tool_def *tool;
        const char *args, *mention;
    } cases[] = {
        {&tool_def_read, "{\"file_path\": 5}", "file_path"},
        {&tool_def_read, "{}", "file_path"},
        {&tool_def_read, "{\"file_path\": \"a.txt\", \"bogus\": 1}", "bogus"},
        {&tool_def_read, "{\"file_path\": \"a.txt\", \"offset\": 0}", "offset"},
        {&tool_def_read, "{\"file_path\": \"a.txt\", \"limit\": \"10\"}", "limit"},
        {&tool_def_read, "{\"file_path\": \"a.txt\", \"offset\": 1.5}", "offset"},
        {&tool_def_write, "{\"file_path\": \"b.txt\"}", "content"},
        {&tool_def_write, "{\"file_path\": \"b.txt\", \"content\": null}", "content"},
        {&tool_def_glob, "{\"pattern\": [\"*\"]}", "pattern"},
        {&tool_def_glob, "{\"path\": \".\"}", "pattern"},
        {&tool_def_grep, "{\"pattern\": \"x\", \"output_mode\": \"lines\"}", "output_mode"},
        {&tool_def_grep, "{\"pattern\": \"x\", \"-A\": -1}", "-A"},
        {&tool_def_grep, "{\"pattern\": \"x\", \"-i\": \"yes\"}", "-i"},
        {&tool_def_grep, "{\"pattern\": \"x\", \"type\": \"rust\"}", "type"},
        {&tool_def_grep, "{\"pattern\": \"x\", \"head_limit\": -3}", "head_limit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *args = json_loads(cases[i].args, 0, NULL);
        assert_non_null(args);
        tool_result r = fx_call(fx, cases[i].tool, args);
        if (!r.is_error || strcmp(fx_code(&r), "INVALID_TOOL_CALL") != 0)
            fail_msg("%s %s: expected INVALID_TOOL_CALL, got %s", cases[i].tool->name,
                     cases[i].args, r.content);
        assert_contains(r.content, cases[i].mention);
        tool_result_deinit(&r);
    }
    /* Non-object arguments. */
    tool_result r = fx_call(fx, &tool_def_read, json_array());
    assert_tool_error(r, "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    assert_false(fx_exists(fx, "b.txt"));
    /* Each tool's schema is valid JSON of the allowed subset, and the description is set. */
    const tool_def *tools[] = {&tool_def_read,      &tool_def_write, &tool_def_edit,
                               &tool_def_multiedit, &tool_def_glob,  &tool_def_grep};
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        json_t *s = json_loads(tools[i]->schema, 0, NULL);
        if (!s)
            fail_msg("%s: schema is not JSON", tools[i]->name);
        assert_true(json_is_false(json_object_get(s, "additionalProperties")));
        assert_true(strlen(tools[i]->description) > 20);
        json_decref(s);
    }
}

/* ---- concurrency ----------------------------------------------------------------------------- */

/* Several episodes at once, each on its own workspace: the tools share no mutable state. */
static void *episode_thread(void *arg)
{
    fixture *fx = NULL;
    if (fx_setup((void **)&fx) != 0)
        return (void *)1;
    long bad = 0;
    for (int i = 0; i < 50; i++) {
        char content[64];
        snprintf(content, sizeof content, "value %d %p\n", i, arg);
        tool_result r = write_file(fx, "d/f.txt", content);
        bad += r.is_error;
        tool_result_deinit(&r);
        r = fx_call(fx, &tool_def_edit,
                    json_pack("{s:s,s:s,s:s}", "file_path", "d/f.txt", "old_string", "value",
                              "new_string", "v"));
        bad += r.is_error;
        tool_result_deinit(&r);
        r = grep(fx, json_pack("{s:s,s:s}", "pattern", "^v \\d+", "output_mode", "count"));
        bad += r.is_error || fx_int(&r, "count") != 1;
        tool_result_deinit(&r);
        r = read_file(fx, "d/f.txt");
        bad += r.is_error || !strstr(r.content, "\tv ");
        tool_result_deinit(&r);
    }
    fx_teardown((void **)&fx);
    return (void *)bad;
}

static void test_concurrent_episodes(void **state)
{
    (void)state;
    pthread_t t[8];
    int ids[8];
    for (int i = 0; i < 8; i++) {
        ids[i] = i;
        assert_int_equal(pthread_create(&t[i], NULL, episode_thread, &ids[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        assert_null(bad);
    }
}

int main(void)
{
#define WS(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        WS(test_read_path_confinement),
        WS(test_read_bad_path_bytes),
        WS(test_read_basic),
        WS(test_read_offset_limit),
        WS(test_read_long_line_cut),
        WS(test_read_binary_non_utf8_empty),
        WS(test_read_size_and_output_caps),
        WS(test_read_fifo_does_not_hang),
        WS(test_write_creates_with_parents),
        WS(test_write_fixed_files_refused),
        WS(test_write_size_cap_and_quota),
        WS(test_write_confinement),
        WS(test_write_through_inside_symlink),
        WS(test_glob_patterns_and_order),
        WS(test_glob_symlinks_and_errors),
        WS(test_glob_result_cap),
        cmocka_unit_test_setup_teardown(test_glob_file_budget, fx_setup, budget_teardown),
        cmocka_unit_test_setup_teardown(test_glob_time_budget, fx_setup, budget_teardown),
        cmocka_unit_test(test_search_deadline),
        cmocka_unit_test(test_globpat_semantics),
        WS(test_grep_files_with_matches),
        WS(test_grep_content_and_flags),
        WS(test_grep_context),
        WS(test_grep_head_limit_and_multiline),
        WS(test_grep_invalid_regex),
        WS(test_grep_catastrophic_pattern),
        WS(test_grep_path_errors),
        WS(test_schema_violations),
        cmocka_unit_test(test_concurrent_episodes),
    };
    return cmocka_run_group_tests_name("fs_tools", tests, NULL, NULL);
}
