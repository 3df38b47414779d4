/* Edit and MultiEdit: the pure replacement semantics (edit_apply), then the tools on a real
 * workspace: file bytes after success and after every kind of refusal. */
#include "fs_fixture.h"

#include <sys/resource.h>
#include <time.h>

#include "tools/edit.h"

/* ---- edit_apply ------------------------------------------------------------------------------ */

static void expect_apply(const char *text, const char *old_s, const char *new_s, bool all,
                         const char *want, size_t want_count)
{
    char *out;
    size_t out_len, count;
    int rc = edit_apply(text, strlen(text), old_s, new_s, all, &out, &out_len, &count);
    assert_int_equal(rc, EDIT_OK);
    assert_int_equal(count, want_count);
    assert_int_equal(out_len, strlen(want));
    assert_string_equal(out, want);
    free(out);
}

static void expect_apply_err(const char *text, const char *old_s, const char *new_s, bool all,
                             int want_rc, size_t want_count)
{
    char *out = (char *)"sentinel";
    size_t out_len = 7, count = 99;
    int rc = edit_apply(text, strlen(text), old_s, new_s, all, &out, &out_len, &count);
    assert_int_equal(rc, want_rc);
    assert_int_equal(count, want_count);
    assert_null(out);
}

static void test_apply_single(void **state)
{
    (void)state;
    expect_apply("int x = 1;\nint y = 2;\n", "y = 2", "y = 3", false, "int x = 1;\nint y = 3;\n",
                 1);
    expect_apply("abc", "abc", "", false, "", 1);                     /* delete everything */
    expect_apply("abc", "a", "XYZ", false, "XYZbc", 1);               /* at the start, longer */
    expect_apply("abc", "bc", "d", false, "ad", 1);                   /* at the end, shorter */
    expect_apply("caf\xc3\xa9!", "\xc3\xa9", "e", false, "cafe!", 1); /* UTF-8 */
}

static void test_apply_all(void **state)
{
    (void)state;
    expect_apply("a.b.c.d", ".", "::", true, "a::b::c::d", 3);
    /* Occurrences do not overlap and replacements are not rescanned. */
    expect_apply("aaaa", "aa", "b", true, "bb", 2);
    expect_apply("aaa", "aa", "b", true, "ba", 1);
    expect_apply("aXa", "a", "aa", true, "aaXaa", 2);
    /* replace_all with a single occurrence is fine. */
    expect_apply("one two", "two", "2", true, "one 2", 1);
}

static void test_apply_errors(void **state)
{
    (void)state;
    expect_apply_err("abc", "", "x", false, EDIT_E_EMPTY, 0);
    expect_apply_err("abc", "b", "b", false, EDIT_E_NOOP, 0);
    expect_apply_err("abc", "zz", "y", false, EDIT_E_NO_MATCH, 0);
    expect_apply_err("x=1; x=1; x=1;", "x=1", "x=2", false, EDIT_E_NOT_UNIQUE, 3);
    expect_apply_err("", "a", "b", true, EDIT_E_NO_MATCH, 0);
    assert_string_equal(edit_err_code(EDIT_E_EMPTY), "INVALID_TOOL_CALL");
    assert_string_equal(edit_err_code(EDIT_E_NOOP), "EDIT_NOOP");
    assert_string_equal(edit_err_code(EDIT_E_NO_MATCH), "EDIT_NO_MATCH");
    assert_string_equal(edit_err_code(EDIT_E_NOT_UNIQUE), "EDIT_NOT_UNIQUE");
}

/* ---- Edit ------------------------------------------------------------------------------------ */

#define SRC "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n\nprint(f(1))\n"

static tool_result edit(const fixture *fx, const char *path, const char *old_s, const char *new_s,
                        bool all)
{
    return fx_call(fx, &tool_def_edit,
                   json_pack("{s:s,s:s,s:s,s:b}", "file_path", path, "old_string", old_s,
                             "new_string", new_s, "replace_all", all));
}

static void test_edit_success(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "m.py", SRC);
    tool_result r = edit(fx, "/workspace/m.py", "print(f(1))", "print(g(2))", false);
    assert_tool_ok(r);
    assert_contains(r.content, "Edited /workspace/m.py: 1 replacement");
    assert_contains(r.content, "     7\tprint(g(2))\n"); /* the snippet, cat -n style */
    assert_contains(r.content, "     4\tdef g(x):\n");   /* with context before */
    assert_not_contains(r.content, "     1\t");
    assert_string_equal(fx_str(&r, "file_path"), "/workspace/m.py");
    assert_int_equal(fx_int(&r, "replacements"), 1);
    fx_assert_file(fx, "m.py",
                   "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n\nprint(g(2))\n");
    assert_int_equal(fx_count_prefix(fx, ".", ".kgym-tmp"), 0); /* no temp file left */
    tool_result_deinit(&r);
}

static void test_edit_refusals_leave_file_untouched(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "m.py", SRC);
    tool_result r = edit(fx, "m.py", "return x + 2", "return 0", false);
    assert_tool_error(r, "EDIT_NO_MATCH");
    assert_contains(r.content, "not found in /workspace/m.py");
    tool_result_deinit(&r);

    r = edit(fx, "m.py", "return x + 1", "return 0", false);
    assert_tool_error(r, "EDIT_NOT_UNIQUE");
    assert_int_equal(fx_int(&r, "matches"), 2);
    assert_contains(r.content, "2 times");
    assert_contains(r.content, "replace_all");
    tool_result_deinit(&r);

    r = edit(fx, "m.py", "def f", "def f", false);
    assert_tool_error(r, "EDIT_NOOP");
    tool_result_deinit(&r);

    r = edit(fx, "m.py", "", "x", false);
    assert_tool_error(r, "INVALID_TOOL_CALL");
    tool_result_deinit(&r);

    r = edit(fx, "nope.py", "a", "b", false);
    assert_tool_error(r, "FILE_NOT_FOUND");
    assert_contains(r.content, "/workspace/nope.py");
    tool_result_deinit(&r);

    r = edit(fx, "../m.py", "a", "b", false);
    assert_tool_error(r, "PATH_OUTSIDE_WORKSPACE");
    tool_result_deinit(&r);

    r = edit(fx, "/workspace", "a", "b", false);
    assert_tool_error(r, "IS_DIRECTORY");
    tool_result_deinit(&r);
    fx_assert_file(fx, "m.py", SRC);
}

static void test_edit_replace_all(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "m.py", SRC);
    tool_result r = edit(fx, "m.py", "x + 1", "x + 10", true);
    assert_tool_ok(r);
    assert_contains(r.content, "2 replacements");
    assert_int_equal(fx_int(&r, "replacements"), 2);
    fx_assert_file(fx, "m.py",
                   "def f(x):\n    return x + 10\n\ndef g(x):\n    return x + 10\n\nprint(f(1))\n");
    tool_result_deinit(&r);
}

static void test_edit_fixed_files(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "model.py", "class Model: pass\n");
    fx_puts(fx, "binding.cpp", "// binding\n");
    fx_link(fx, "model.py", "alias.py");
    fx_link(fx, ".", "self"); /* a directory link back to the root */
    const char *paths[] = {"model.py", "/workspace/binding.cpp", "./model.py",
                           "alias.py", "self/model.py",          "sub/../model.py"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        tool_result r = edit(fx, paths[i], "class", "klass", false);
        if (!r.is_error || strcmp(fx_code(&r), "READ_ONLY_FILE") != 0)
            fail_msg("%s: expected READ_ONLY_FILE, got %s", paths[i], r.content);
        tool_result_deinit(&r);
    }
    fx_assert_file(fx, "model.py", "class Model: pass\n");
    fx_assert_file(fx, "binding.cpp", "// binding\n");
}

static void test_edit_binary_and_non_utf8(void **state)
{
    fixture *fx = *state;
    fx_put(fx, "k.bin", "ab\0cd", 5);
    fx_puts(fx, "latin1.txt", "caf\xe9\n");
    tool_result r = edit(fx, "k.bin", "ab", "xy", false);
    assert_tool_error(r, "BINARY_FILE");
    tool_result_deinit(&r);
    r = edit(fx, "latin1.txt", "caf", "tea", false);
    assert_tool_error(r, "NOT_UTF8");
    tool_result_deinit(&r);
    size_t len;
    char *got = fx_get(fx, "k.bin", &len);
    assert_int_equal(len, 5);
    assert_memory_equal(got, "ab\0cd", 5);
    free(got);
    fx_assert_file(fx, "latin1.txt", "caf\xe9\n");
}

static void test_edit_size_cap_and_quota(void **state)
{
    fixture *fx = *state;
    fx->limits.max_file_bytes = 100;
    fx_puts(fx, "s.txt", "small\n");
    char big[200];
    memset(big, 'b', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tool_result r = edit(fx, "s.txt", "small", big, false);
    assert_tool_error(r, "FILE_TOO_LARGE");
    tool_result_deinit(&r);
    fx_assert_file(fx, "s.txt", "small\n");

    fx->limits.max_file_bytes = 64 << 10;
    fx->limits.disk_quota_bytes = 150;
    r = edit(fx, "s.txt", "small", big, false); /* 199 + 1 bytes > 150 */
    assert_tool_error(r, "DISK_QUOTA_EXCEEDED");
    assert_int_equal(fx_int(&r, "quota_bytes"), 150);
    tool_result_deinit(&r);
    fx_assert_file(fx, "s.txt", "small\n");

    /* The old size is not counted twice: 6 -> 140 bytes fits a 150-byte quota. */
    big[139] = '\0';
    r = edit(fx, "s.txt", "small\n", big, false);
    assert_tool_ok(r);
    tool_result_deinit(&r);
    fx_assert_file(fx, "s.txt", big);
}

static void test_edit_through_symlink_and_mode(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "dir/run.sh", "echo one\n");
    char path[256];
    chmod(fx_path(fx, "dir/run.sh", path, sizeof path), 0755);
    fx_link(fx, "dir/run.sh", "run_link");
    tool_result r = edit(fx, "run_link", "one", "two", false);
    assert_tool_ok(r);
    tool_result_deinit(&r);
    fx_assert_file(fx, "dir/run.sh", "echo two\n");
    struct stat st;
    assert_int_equal(lstat(fx_path(fx, "run_link", path, sizeof path), &st), 0);
    assert_true(S_ISLNK(st.st_mode)); /* the link itself stays a link */
    assert_int_equal(stat(fx_path(fx, "dir/run.sh", path, sizeof path), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755); /* and the script stays executable */

    char target[128];
    snprintf(target, sizeof target, "%s/secret.txt", fx->outside);
    fx_link(fx, target, "secret_link");
    r = edit(fx, "secret_link", "TOP", "NO", false);
    assert_tool_error(r, "PATH_OUTSIDE_WORKSPACE");
    tool_result_deinit(&r);
    char secret[160];
    snprintf(secret, sizeof secret, "%s/secret.txt", fx->outside);
    FILE *f = fopen(secret, "r");
    char buf[64] = {0};
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "TOP SECRET\n");
}

static void test_edit_refuses_nul_and_schema(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "a.txt", "abc\n");
    json_t *args = json_pack("{s:s,s:o,s:s}", "file_path", "a.txt", "old_string",
                             json_stringn("a\0b", 3), "new_string", "x");
    tool_result r = fx_call(fx, &tool_def_edit, args);
    assert_tool_error(r, "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    r = fx_call(fx, &tool_def_edit,
                json_pack("{s:s,s:s}", "file_path", "a.txt", "old_string", "a"));
    assert_tool_error(r, "INVALID_TOOL_CALL"); /* new_string missing */
    assert_contains(r.content, "new_string");
    tool_result_deinit(&r);
    r = fx_call(fx, &tool_def_edit,
                json_pack("{s:s,s:s,s:s,s:s}", "file_path", "a.txt", "old_string", "a",
                          "new_string", "b", "replace_all", "yes"));
    assert_tool_error(r, "INVALID_TOOL_CALL"); /* wrong type */
    assert_contains(r.content, "replace_all");
    tool_result_deinit(&r);
    fx_assert_file(fx, "a.txt", "abc\n");
}

/* ---- MultiEdit ------------------------------------------------------------------------------- */

static tool_result multiedit(const fixture *fx, const char *path, json_t *edits)
{
    return fx_call(fx, &tool_def_multiedit,
                   json_pack("{s:s,s:o}", "file_path", path, "edits", edits));
}

static json_t *one(const char *old_s, const char *new_s, bool all)
{
    return json_pack("{s:s,s:s,s:b}", "old_string", old_s, "new_string", new_s, "replace_all", all);
}

static void test_multiedit_applies_in_order(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "m.py", SRC);
    /* The second edit only matches once the first has run; the third touches both copies. */
    json_t *edits =
        json_pack("[o,o,o]", one("def f(x):", "def h(x):", false),
                  one("def h(x):\n    return x + 1", "def h(x):\n    return x * 2", false),
                  one("x + 1", "x - 1", true));
    tool_result r = multiedit(fx, "m.py", edits);
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "replacements"), 3);
    assert_contains(r.content, "Edited /workspace/m.py: 3 replacements from 3 edits");
    fx_assert_file(fx, "m.py",
                   "def h(x):\n    return x * 2\n\ndef g(x):\n    return x - 1\n\nprint(f(1))\n");
    tool_result_deinit(&r);
}

static void test_multiedit_all_or_nothing(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "m.py", SRC);
    json_t *edits = json_pack("[o,o]", one("def f", "def ff", false), one("no such", "x", false));
    tool_result r = multiedit(fx, "m.py", edits);
    assert_tool_error(r, "EDIT_NO_MATCH");
    assert_int_equal(fx_int(&r, "edit_index"), 1);
    assert_contains(r.content, "edits[1]");
    tool_result_deinit(&r);
    fx_assert_file(fx, "m.py", SRC);

    edits = json_pack("[o,o,o]", one("def f", "def ff", false), one("print", "echo", false),
                      one("return x + 1", "pass", false));
    r = multiedit(fx, "m.py", edits);
    assert_tool_error(r, "EDIT_NOT_UNIQUE");
    assert_int_equal(fx_int(&r, "edit_index"), 2);
    assert_int_equal(fx_int(&r, "matches"), 2);
    tool_result_deinit(&r);
    fx_assert_file(fx, "m.py", SRC);

    edits = json_pack("[o,o]", one("def f", "def ff", false), one("same", "same", false));
    r = multiedit(fx, "m.py", edits);
    assert_tool_error(r, "EDIT_NOOP");
    assert_int_equal(fx_int(&r, "edit_index"), 1);
    tool_result_deinit(&r);

    edits = json_pack("[o,o]", one("def f", "def ff", false), one("", "x", false));
    r = multiedit(fx, "m.py", edits);
    assert_tool_error(r, "INVALID_TOOL_CALL");
    assert_int_equal(fx_int(&r, "edit_index"), 1);
    tool_result_deinit(&r);
    fx_assert_file(fx, "m.py", SRC);
}

static void test_multiedit_schema(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "m.py", SRC);
    tool_result r = multiedit(fx, "m.py", json_array());
    assert_tool_error(r, "INVALID_TOOL_CALL"); /* minItems 1 */
    tool_result_deinit(&r);
    r = multiedit(fx, "m.py", json_pack("[{s:s}]", "old_string", "def"));
    assert_tool_error(r, "INVALID_TOOL_CALL"); /* new_string missing */
    assert_contains(r.content, "new_string");
    tool_result_deinit(&r);
    r = multiedit(fx, "m.py",
                  json_pack("[{s:s,s:s,s:i}]", "old_string", "a", "new_string", "b", "extra", 1));
    assert_tool_error(r, "INVALID_TOOL_CALL"); /* unknown field in an edit */
    assert_contains(r.content, "extra");
    tool_result_deinit(&r);
    r = fx_call(fx, &tool_def_multiedit,
                json_pack("{s:s,s:s}", "file_path", "m.py", "edits", "not a list"));
    assert_tool_error(r, "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    fx_assert_file(fx, "m.py", SRC);
}

static void test_multiedit_fixed_file(void **state)
{
    fixture *fx = *state;
    fx_puts(fx, "binding_registry.h", "#pragma once\n");
    tool_result r =
        multiedit(fx, "binding_registry.h", json_pack("[o]", one("once", "twice", false)));
    assert_tool_error(r, "READ_ONLY_FILE");
    tool_result_deinit(&r);
    fx_assert_file(fx, "binding_registry.h", "#pragma once\n");
}

/* ---- the file cap holds for every intermediate text ---------------------------------------- */

/* The most memory this process has had resident so far, in KiB (Linux's unit for ru_maxrss). */
static long peak_rss_kib(void)
{
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_maxrss;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The red team's bomb: 40 x ("a" -> "aa", replace_all) would double a 1-byte file to 1 TiB. Each
 * edit's result is sized before it is built, so the first one over the cap ends the call at once,
 * in little time and memory. */
static void test_multiedit_doubling_bomb_refused_early(void **state)
{
    fixture *fx = *state;
    fx->limits.max_file_bytes = 64 << 10;
    fx_puts(fx, "bomb.txt", "a");
    json_t *edits = json_array();
    for (int i = 0; i < 40; i++)
        json_array_append_new(edits, one("a", "aa", true));
    long rss_before = peak_rss_kib();
    double t0 = seconds_now();
    tool_result r = multiedit(fx, "bomb.txt", edits);
    double took = seconds_now() - t0;
    long rss_growth_kib = peak_rss_kib() - rss_before;
    assert_tool_error(r, "FILE_TOO_LARGE");
    /* 2^16 bytes fill the 64 KiB cap exactly; edits[16] would make 2^17. */
    assert_int_equal(fx_int(&r, "edit_index"), 16);
    assert_int_equal(fx_int(&r, "max_bytes"), 64 << 10);
    assert_true(fx_int(&r, "size") > 64 << 10);
    assert_contains(r.content, "edits[16]: ");
    assert_contains(r.content, "over the 65536-byte file limit");
    tool_result_deinit(&r);
    if (took > 0.5)
        fail_msg("the refused MultiEdit took %.3f s", took);
    if (rss_growth_kib > 64 << 10)
        fail_msg("the refused MultiEdit grew the peak RSS by %ld KiB", rss_growth_kib);
    fx_assert_file(fx, "bomb.txt", "a");
}

/* A long new_string on every match of a full-size file: refused before the result is built. */
static void test_edit_replace_all_blowup_refused(void **state)
{
    fixture *fx = *state;
    fx->limits.max_file_bytes = 64 << 10;
    char *text = malloc(64 << 10), *repl = malloc(1001);
    memset(text, 'a', 64 << 10);
    memset(repl, 'b', 1000);
    repl[1000] = '\0';
    fx_put(fx, "big.txt", text, 64 << 10);
    long rss_before = peak_rss_kib();
    tool_result r = edit(fx, "big.txt", "a", repl, true); /* would be 64 MB */
    long rss_growth_kib = peak_rss_kib() - rss_before;
    assert_tool_error(r, "FILE_TOO_LARGE");
    assert_contains(r.content, "over the 65536-byte file limit");
    tool_result_deinit(&r);
    if (rss_growth_kib > 16 << 10)
        fail_msg("the refused Edit grew the peak RSS by %ld KiB", rss_growth_kib);
    size_t len;
    char *got = fx_get(fx, "big.txt", &len);
    assert_int_equal(len, 64 << 10);
    assert_memory_equal(got, text, len);
    free(got);
    free(text);
    free(repl);
}

/* The boundary: a result of exactly max_file_bytes is written, one byte more is refused. */
static void test_edit_result_exactly_at_cap(void **state)
{
    fixture *fx = *state;
    fx->limits.max_file_bytes = 100;
    fx_puts(fx, "at.txt", "aaaaaaaaaa");    /* 10 x "a" -> 10 x 10 bytes = 100 */
    fx_puts(fx, "over.txt", "aaaaaaaaaa!"); /* the same plus one byte = 101 */
    tool_result r = edit(fx, "at.txt", "a", "bbbbbbbbbb", true);
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "replacements"), 10);
    tool_result_deinit(&r);
    char want[101];
    memset(want, 'b', 100);
    want[100] = '\0';
    fx_assert_file(fx, "at.txt", want);

    r = edit(fx, "over.txt", "a", "bbbbbbbbbb", true);
    assert_tool_error(r, "FILE_TOO_LARGE");
    assert_int_equal(fx_int(&r, "size"), 101);
    assert_int_equal(fx_int(&r, "max_bytes"), 100);
    assert_contains(r.content, "The edited /workspace/over.txt would be ");
    assert_contains(r.content, "101 bytes, over the 100-byte file limit.");
    tool_result_deinit(&r);
    fx_assert_file(fx, "over.txt", "aaaaaaaaaa!");

    /* A single (not replace_all) edit, too: 11 - 1 + 90 = 100 passes, 101 does not. */
    fx_puts(fx, "one.txt", "0123456789\n");
    r = edit(fx, "one.txt", "\n", want + 10, false);
    assert_tool_ok(r);
    tool_result_deinit(&r);
    r = edit(fx, "one.txt", "0", "01", false);
    assert_tool_error(r, "FILE_TOO_LARGE");
    assert_int_equal(fx_int(&r, "size"), 101);
    tool_result_deinit(&r);
}

/* MultiEdit: the cap holds after every edit, not only for the final text (all or nothing, so
 * nothing is written); a list that stays within it all along, ending exactly at it, is applied. */
static void test_multiedit_cap_on_each_step(void **state)
{
    fixture *fx = *state;
    fx->limits.max_file_bytes = 64;
    fx_puts(fx, "m.txt", "abcd");
    char x80[81], y16[17];
    memset(x80, 'x', 80);
    x80[80] = '\0';
    memset(y16, 'y', 16);
    y16[16] = '\0';
    /* 4 -> 4 -> 80 (over) -> 2 bytes: refused at edits[1] though the end result would fit. */
    json_t *edits =
        json_pack("[o,o,o]", one("a", "A", false), one("Abcd", x80, false), one(x80, "ok", false));
    tool_result r = multiedit(fx, "m.txt", edits);
    assert_tool_error(r, "FILE_TOO_LARGE");
    assert_int_equal(fx_int(&r, "edit_index"), 1);
    assert_int_equal(fx_int(&r, "size"), 80);
    assert_contains(r.content, "edits[1]: The edited /workspace/m.txt would be 80 bytes, over the "
                               "64-byte file limit.");
    tool_result_deinit(&r);
    fx_assert_file(fx, "m.txt", "abcd");

    /* 4 -> 16 -> 64 bytes. */
    edits = json_pack("[o,o]", one("abcd", y16, false), one("y", "yyyy", true));
    r = multiedit(fx, "m.txt", edits);
    assert_tool_ok(r);
    assert_int_equal(fx_int(&r, "replacements"), 17);
    tool_result_deinit(&r);
    char y64[65];
    memset(y64, 'y', 64);
    y64[64] = '\0';
    fx_assert_file(fx, "m.txt", y64);
}

int main(void)
{
#define WS(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apply_single),
        cmocka_unit_test(test_apply_all),
        cmocka_unit_test(test_apply_errors),
        WS(test_edit_success),
        WS(test_edit_refusals_leave_file_untouched),
        WS(test_edit_replace_all),
        WS(test_edit_fixed_files),
        WS(test_edit_binary_and_non_utf8),
        WS(test_edit_size_cap_and_quota),
        WS(test_edit_through_symlink_and_mode),
        WS(test_edit_refuses_nul_and_schema),
        WS(test_multiedit_applies_in_order),
        WS(test_multiedit_all_or_nothing),
        WS(test_multiedit_schema),
        WS(test_multiedit_fixed_file),
        /* Before the bomb: peak RSS only shows growth past the largest peak so far. */
        WS(test_edit_replace_all_blowup_refused),
        WS(test_multiedit_doubling_bomb_refused_early),
        WS(test_edit_result_exactly_at_cap),
        WS(test_multiedit_cap_on_each_step),
    };
    return cmocka_run_group_tests_name("edit", tests, NULL, NULL);
}
