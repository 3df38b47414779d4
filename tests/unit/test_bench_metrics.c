/* Unit tests of kgym-bench's metrics (env/bench/metrics.c, report.c, diff.c): the paper's
 * Table 1 counted by hand on small runs (failures of every kind in the denominator, geomeans,
 * the 5% rule's boundary, fast_p, a missing compile baseline), malformed input refused,
 * report.md and the summary as text, and the run-to-run diff with its noise band. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/common.h"
#include "bench/metrics.h"

#define NO_BASELINE (-1.0)

/* A correct task timed at cand_ms, with its speed-ups; compile NO_BASELINE: t_compile_ms null. */
static json_t *correct_task(const char *id, int level, double cand_ms, double eager, double compile)
{
    json_t *t = json_pack("{s:s, s:i, s:s, s:f, s:f, s:f}", "task_id", id, "level", level, "status",
                          "correct", "t_candidate_ms", cand_ms, "t_eager_ms", cand_ms * eager,
                          "speedup_eager", eager);
    if (compile == NO_BASELINE) {
        json_object_set_new(t, "t_compile_ms", json_null());
    } else {
        json_object_set_new(t, "t_compile_ms", json_real(cand_ms * compile));
        json_object_set_new(t, "speedup_compile", json_real(compile));
    }
    return t;
}

static json_t *failed_task(const char *id, int level, const char *status, const char *code)
{
    json_t *t = json_pack("{s:s, s:i, s:s, s:n}", "task_id", id, "level", level, "status", status,
                          "solution");
    if (code)
        json_object_set_new(t, "error_code", json_string(code));
    return t;
}

/* The brief's level: 2 correct (speed-ups vs eager 2.0 and 0.5, vs compile 1.06 and 1.04),
 * one incorrect, one missing, one infra_error. */
static json_t *five_task_level(int level)
{
    return json_pack("[o, o, o, o, o]", correct_task("kb/L1/1", level, 0.5, 2.0, 1.06),
                     correct_task("kb/L1/2", level, 2.0, 0.5, 1.04),
                     failed_task("kb/L1/3", level, "incorrect", "WRONG_OUTPUT"),
                     failed_task("kb/L1/4", level, "missing", NULL),
                     failed_task("kb/L1/5", level, "infra_error", "GPU_LOST"));
}

/* Level 1 as above plus level 3: a correct task without a compile baseline, and a compile
 * error whose message holds a '|'. */
static json_t *two_level_run(void)
{
    json_t *tasks = five_task_level(1);
    json_array_append_new(tasks, correct_task("kb/L3/1", 3, 1.0, 4.0, NO_BASELINE));
    json_t *broken = failed_task("kb/L3/2", 3, "compile_error", "COMPILE|FAILED");
    json_object_set_new(broken, "error", json_string("nvcc: a | b"));
    json_array_append_new(tasks, broken);
    return tasks;
}

static void assert_near(double got, double want)
{
    if (fabs(got - want) > 1e-12)
        fail_msg("got %.17g, want %.17g", got, want);
}

static void assert_five_task_row(const bench_row *r)
{
    assert_int_equal(r->n, 5);
    assert_int_equal(r->passed, 2);
    assert_int_equal(r->infra, 1);
    assert_int_equal(r->faster_eager, 1);        /* 2.0 only */
    assert_int_equal(r->faster_eager_5pct, 1);   /* 2.0 only */
    assert_int_equal(r->faster_compile, 2);      /* 1.06 and 1.04 */
    assert_int_equal(r->faster_compile_5pct, 1); /* 1.06 only: 1.04 is inside the 5% */
    assert_int_equal(r->n_geo_eager, 2);
    assert_true(r->geomean_eager == 1.0); /* sqrt(2.0 * 0.5), exactly */
    assert_int_equal(r->n_geo_compile, 2);
    assert_near(r->geomean_compile, sqrt(1.06 * 1.04));
    assert_int_equal(r->fast_p[0], 2); /* fast_0: every correct task */
    assert_int_equal(r->fast_p[1], 1); /* > 1 */
    assert_int_equal(r->fast_p[2], 1); /* > 1.5 */
    assert_int_equal(r->fast_p[3], 0); /* > 2: 2.0 is not */
}

static void test_fast_p_thresholds(void **state)
{
    (void)state;
    assert_int_equal(BENCH_FAST_P_N, 4);
    assert_true(BENCH_FAST_P[0] == 0.0 && BENCH_FAST_P[1] == 1.0);
    assert_true(BENCH_FAST_P[2] == 1.5 && BENCH_FAST_P[3] == 2.0);
}

static void test_one_level_counted_by_hand(void **state)
{
    (void)state;
    json_t *tasks = five_task_level(1);
    bench_row rows[4];
    char err[256] = "";
    assert_int_equal(bench_table(tasks, rows, 4, err, sizeof err), 2);
    assert_string_equal(rows[0].label, "L1");
    assert_int_equal(rows[0].level, 1);
    assert_five_task_row(&rows[0]);
    assert_string_equal(rows[1].label, "all");
    assert_int_equal(rows[1].level, 0);
    assert_five_task_row(&rows[1]);
    json_decref(tasks);
}

/* 1.04 and exactly 1.05 are not "more than 5% faster"; 1.06 is. Any speed-up > 1 is faster. */
static void test_five_percent_rule_boundaries(void **state)
{
    (void)state;
    json_t *tasks =
        json_pack("[o, o, o, o]", correct_task("a", 2, 1.0, 1.04, 1.04),
                  correct_task("b", 2, 1.0, 1.05, 1.05), correct_task("c", 2, 1.0, 1.06, 1.06),
                  correct_task("d", 2, 1.0, 1.0, 1.0));
    bench_row rows[2];
    char err[256];
    assert_int_equal(bench_table(tasks, rows, 2, err, sizeof err), 2);
    assert_int_equal(rows[0].faster_eager, 3); /* 1.0 is not faster */
    assert_int_equal(rows[0].faster_eager_5pct, 1);
    assert_int_equal(rows[0].faster_compile, 3);
    assert_int_equal(rows[0].faster_compile_5pct, 1);
    assert_int_equal(rows[0].fast_p[1], 3);
    json_decref(tasks);
}

/* t_compile_ms null: the task counts as passed and in the eager figures, nowhere in compile's.
 * A correct task with no time at all counts as passed and in fast_0 (KernelBench's
 * correctness rate), in no speed-up figure. */
static void test_missing_baselines(void **state)
{
    (void)state;
    json_t *tasks =
        json_pack("[o, o, {s:s, s:i, s:s}]", correct_task("a", 1, 1.0, 3.0, NO_BASELINE),
                  failed_task("b", 1, "timeout", "TIMEOUT"), "task_id", "untimed", "level", 1,
                  "status", "correct");
    bench_row rows[2];
    char err[256];
    assert_int_equal(bench_table(tasks, rows, 2, err, sizeof err), 2);
    assert_int_equal(rows[0].passed, 2);
    assert_int_equal(rows[0].faster_eager, 1);
    assert_int_equal(rows[0].faster_compile, 0);
    assert_int_equal(rows[0].faster_compile_5pct, 0);
    assert_int_equal(rows[0].n_geo_compile, 0);
    assert_true(rows[0].geomean_compile == 0.0);
    assert_int_equal(rows[0].n_geo_eager, 1);
    assert_near(rows[0].geomean_eager, 3.0);
    assert_int_equal(rows[0].fast_p[0], 2);
    assert_int_equal(rows[0].fast_p[1], 1);
    json_t *j = bench_table_json(rows, 2);
    assert_true(json_is_null(json_object_get(json_array_get(j, 0), "geomean_compile")));
    assert_near(json_number_value(json_object_get(json_array_get(j, 0), "geomean_eager")), 3.0);
    json_decref(j);
    json_decref(tasks);
}

/* Levels in any order come out ascending, each counted apart, then "all" over every task. */
static void test_two_levels_and_all(void **state)
{
    (void)state;
    json_t *tasks = json_pack("[o, o, o]", correct_task("kb/L3/1", 3, 1.0, 4.0, NO_BASELINE),
                              failed_task("kb/L3/2", 3, "compile_error", "COMPILE_FAILED"),
                              correct_task("kb/L2/1", 2, 1.0, 1.0 / 64, 0.5));
    json_t *level1 = five_task_level(1);
    json_array_extend(tasks, level1);
    json_decref(level1);
    bench_row rows[4];
    char err[256];
    assert_int_equal(bench_table(tasks, rows, 4, err, sizeof err), 4);
    assert_string_equal(rows[0].label, "L1");
    assert_five_task_row(&rows[0]);
    assert_string_equal(rows[1].label, "L2");
    assert_int_equal(rows[1].level, 2);
    assert_int_equal(rows[1].n, 1);
    assert_int_equal(rows[1].passed, 1);
    assert_int_equal(rows[1].faster_eager, 0);
    assert_near(rows[1].geomean_eager, 1.0 / 64);
    assert_string_equal(rows[2].label, "L3");
    assert_int_equal(rows[2].n, 2);
    assert_int_equal(rows[2].passed, 1);
    assert_int_equal(rows[2].n_geo_compile, 0);
    const bench_row *all = &rows[3];
    assert_string_equal(all->label, "all");
    assert_int_equal(all->n, 8);
    assert_int_equal(all->passed, 4);
    assert_int_equal(all->infra, 1);
    assert_int_equal(all->faster_eager, 2);   /* 2.0 and 4.0 */
    assert_int_equal(all->faster_compile, 2); /* 1.06 and 1.04; L3 has no baseline */
    assert_int_equal(all->n_geo_eager, 4);
    assert_near(all->geomean_eager, 0.5); /* (2 * 0.5 * 4 / 64)^(1/4) */
    assert_int_equal(all->n_geo_compile, 3);
    assert_near(all->geomean_compile, cbrt(1.06 * 1.04 * 0.5));
    assert_int_equal(all->fast_p[0], 4);
    assert_int_equal(all->fast_p[3], 1); /* 4.0 */
    /* too many levels for the rows given */
    assert_int_equal(bench_table(tasks, rows, 3, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than 2 levels"));
    json_decref(tasks);
}

static void test_empty_run(void **state)
{
    (void)state;
    json_t *tasks = json_array();
    bench_row rows[2];
    char err[256];
    assert_int_equal(bench_table(tasks, rows, 2, err, sizeof err), 1);
    assert_string_equal(rows[0].label, "all");
    assert_int_equal(rows[0].n, 0);
    assert_int_equal(rows[0].passed, 0);
    json_t *j = bench_table_json(rows, 1);
    assert_near(json_number_value(json_object_get(json_array_get(j, 0), "passed_rate")), 0.0);
    assert_true(json_is_null(json_object_get(json_array_get(j, 0), "geomean_eager")));
    json_decref(j);
    json_decref(tasks);
}

static void expect_refused(json_t *tasks, const char *want_in_err)
{
    bench_row rows[4];
    char err[256] = "";
    assert_int_equal(bench_table(tasks, rows, 4, err, sizeof err), -1);
    if (!strstr(err, want_in_err))
        fail_msg("err \"%s\" does not say \"%s\"", err, want_in_err);
    json_decref(tasks);
}

static void test_malformed_input(void **state)
{
    (void)state;
    json_t *no_level = five_task_level(1);
    json_object_del(json_array_get(no_level, 2), "level");
    expect_refused(no_level, "task kb/L1/3: \"level\" is missing or not an integer");
    expect_refused(
        json_pack("[{s:s, s:s, s:s}]", "task_id", "x", "level", "1", "status", "correct"),
        "task x: \"level\"");
    expect_refused(json_pack("[{s:s, s:i, s:i}]", "task_id", "x", "level", 1, "status", 3),
                   "task x: \"status\" is missing or not a string");
    expect_refused(json_pack("[{s:i, s:n}]", "level", 1, "status"), "task #0: \"status\"");
    /* a level out of 0..BENCH_MAX_LEVEL (an int cast made 4294967297 a level-1 row) */
    expect_refused(json_pack("[{s:s, s:I, s:s}]", "task_id", "x", "level", (json_int_t)4294967297LL,
                             "status", "correct"),
                   "task x: \"level\" is missing or not an integer 0..100");
    expect_refused(json_pack("[{s:s, s:i, s:s}]", "task_id", "x", "level", -7, "status", "correct"),
                   "task x: \"level\"");
    expect_refused(json_pack("[i]", 7), "task #0 is not a JSON object");
    expect_refused(json_object(), "not a JSON array");
    bench_row rows[1];
    char err[256] = "";
    json_t *tasks = json_array();
    assert_int_equal(bench_table(tasks, rows, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "max_rows"));
    json_decref(tasks);
}

static void test_check_result(void **state)
{
    (void)state;
    char err[256] = "";
    json_t *ok =
        json_pack("{s:s, s:i, s:s}", "task_id", "kb/L1/1", "level", 1, "status", "correct");
    assert_int_equal(bench_check_result(ok, err, sizeof err), 0);
    json_object_del(ok, "task_id");
    assert_int_equal(bench_check_result(ok, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"task_id\" is missing"));
    json_object_set_new(ok, "task_id", json_string("kb/L1/1"));
    json_object_set_new(ok, "level", json_integer(101));
    assert_int_equal(bench_check_result(ok, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"level\""));
    json_decref(ok);
}

static void test_table_json(void **state)
{
    (void)state;
    json_t *tasks = five_task_level(1);
    bench_row rows[2];
    char err[256];
    assert_int_equal(bench_table(tasks, rows, 2, err, sizeof err), 2);
    json_t *j = bench_table_json(rows, 2);
    assert_int_equal(json_array_size(j), 2);
    json_t *l1 = json_array_get(j, 0);
    assert_string_equal(json_string_value(json_object_get(l1, "label")), "L1");
    assert_int_equal(json_integer_value(json_object_get(l1, "level")), 1);
    assert_int_equal(json_integer_value(json_object_get(l1, "n")), 5);
    assert_int_equal(json_integer_value(json_object_get(l1, "passed")), 2);
    assert_near(json_number_value(json_object_get(l1, "passed_rate")), 0.4);
    assert_int_equal(json_integer_value(json_object_get(l1, "infra")), 1);
    assert_near(json_number_value(json_object_get(l1, "faster_eager_rate")), 0.2);
    assert_near(json_number_value(json_object_get(l1, "faster_compile_rate")), 0.4);
    assert_near(json_number_value(json_object_get(l1, "faster_compile_5pct_rate")), 0.2);
    assert_near(json_number_value(json_object_get(l1, "geomean_eager")), 1.0);
    assert_int_equal(json_integer_value(json_object_get(l1, "n_geo_eager")), 2);
    json_t *fast = json_object_get(l1, "fast_p");
    assert_int_equal(json_array_size(fast), BENCH_FAST_P_N);
    json_t *fast_1_5 = json_array_get(fast, 2);
    assert_near(json_number_value(json_object_get(fast_1_5, "p")), 1.5);
    assert_int_equal(json_integer_value(json_object_get(fast_1_5, "count")), 1);
    assert_near(json_number_value(json_object_get(fast_1_5, "rate")), 0.2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(j, 1), "label")), "all");
    json_decref(j);
    json_decref(tasks);
}

/* ---- report.md and the summary ---- */

/* What a writer produced, as one string (free it). */
typedef struct captured {
    char *text;
    size_t len;
    FILE *f;
} captured;

static FILE *capture_start(captured *c)
{
    c->text = NULL;
    c->len = 0;
    c->f = open_memstream(&c->text, &c->len);
    assert_non_null(c->f);
    return c->f;
}

static char *capture_end(captured *c)
{
    fclose(c->f);
    return c->text;
}

static void assert_contains(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("missing:\n%s\n--- in:\n%s", want, text);
}

static void test_report_md(void **state)
{
    (void)state;
    json_t *tasks = two_level_run();
    bench_row rows[4];
    char err[256];
    int n = bench_table(tasks, rows, 4, err, sizeof err);
    assert_int_equal(n, 3);
    json_t *meta = json_pack("{s:s, s:s, s:s, s:i}", "device", "NVIDIA H200", "torch_version",
                             "2.5.1", "solutions", "runs/a", "repeats", 3);
    captured c;
    assert_int_equal(bench_write_report_md(capture_start(&c), rows, n, tasks, meta), 0);
    char *md = capture_end(&c);
    assert_contains(md, "- **device**: NVIDIA H200\n- **torch_version**: 2.5.1\n"
                        "- **solutions**: runs/a\n- **repeats**: 3\n");
    assert_contains(md, "**1 infra error**");
    assert_contains(md, "| Metric | Level 1 | Level 3 | Overall |\n|---|---:|---:|---:|\n");
    assert_contains(md, "| Pass Rate (%) | 40.0 | 50.0 | 42.9 |\n");
    assert_contains(md, "| Faster Rate vs. Eager (%) | 20.0 | 50.0 | 28.6 |\n");
    assert_contains(md, "| Faster Rate vs. Eager, 5% rule (%) | 20.0 | 50.0 | 28.6 |\n");
    assert_contains(md, "| Faster Rate vs. Compile (%) | 40.0 | 0.0 | 28.6 |\n");
    assert_contains(md, "| Faster Rate vs. Compile, 5% rule (%) | 20.0 | 0.0 | 14.3 |\n");
    assert_contains(md, "| Geomean speed-up vs. Eager (x, over n correct) | 1.00 (2) | 4.00 (1) | "
                        "1.59 (3) |\n");
    assert_contains(md, "| Geomean speed-up vs. Compile (x, over n correct) | 1.05 (2) | - (0) | "
                        "1.05 (2) |\n");
    assert_contains(md, "| fast_0 (%) | 40.0 | 50.0 | 42.9 |\n");
    assert_contains(md, "| fast_1 (%) | 20.0 | 50.0 | 28.6 |\n");
    assert_contains(md, "| fast_1.5 (%) | 20.0 | 50.0 | 28.6 |\n");
    assert_contains(md, "| fast_2 (%) | 0.0 | 50.0 | 14.3 |\n");
    assert_contains(md, "| Tasks (n) | 5 | 2 | 7 |\n");
    assert_contains(md, "| Infra errors | 1 | 0 | 1 |\n");
    assert_contains(md, "| kb/L1/1 | correct | 0.5000 | 1.0000 | 0.5300 | 2.00 | 1.06 | - |\n");
    assert_contains(md, "| kb/L1/3 | incorrect | - | - | - | - | - | WRONG_OUTPUT |\n");
    assert_contains(md, "| kb/L3/1 | correct | 1.0000 | 4.0000 | - | 4.00 | - | - |\n");
    assert_contains(md, "| kb/L3/2 | compile_error | - | - | - | - | - | COMPILE\\|FAILED |\n");
    /* the metrics table comes before the task list */
    assert_true(strstr(md, "## Results") < strstr(md, "## Tasks"));
    free(md);
    json_decref(meta);
    json_decref(tasks);
}

static int count_lines_checking_width(const char *text, int max_width)
{
    int lines = 0;
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        assert_non_null(end);
        if (end - p >= max_width)
            fail_msg("line of %d columns: %.*s", (int)(end - p), (int)(end - p), p);
        lines++;
        p = end + 1;
    }
    return lines;
}

/* The summary of a run of at most 4 table rows, as printed (the caller frees it). */
static char *summary_of(const json_t *tasks)
{
    bench_row rows[4];
    char err[256];
    int n = bench_table(tasks, rows, 4, err, sizeof err);
    assert_true(n > 0);
    captured c;
    bench_print_summary(capture_start(&c), rows, n, tasks);
    return capture_end(&c);
}

static void test_summary(void **state)
{
    (void)state;
    json_t *tasks = two_level_run();
    char *text = summary_of(tasks);
    assert_true(count_lines_checking_width(text, 100) < 25);
    assert_contains(text, "kgym-bench: 7 tasks, 3 correct (42.9%), 1 infra error: not a clean "
                          "measurement\n");
    assert_contains(text, "                               L1         L3    Overall\n");
    assert_contains(text, "Pass rate %                  40.0       50.0       42.9\n");
    assert_contains(text, "Geomean vs compile x     1.05 (2)      - (0)   1.05 (2)\n");
    assert_contains(text, "fast_2 %                      0.0       50.0       14.3\n");
    assert_contains(text, "status: correct 3, incorrect 1, compile_error 1, missing 1, "
                          "infra_error 1\n");
    free(text);
    json_decref(tasks);
}

/* "measured on" names each distinct device and torch version of the results once, in order of
 * first appearance, escaped in report.md; a run with none says nothing. */
static void test_measured_on(void **state)
{
    (void)state;
    json_t *tasks = two_level_run();
    char *text = summary_of(tasks);
    assert_null(strstr(text, "measured on"));
    free(text);
    const char *setups[][2] = {{"NVIDIA H100", "2.11.0"},
                               {"NVIDIA H100", "2.11.0"},
                               {"GPU|x", "2.11.0"},
                               {"NVIDIA H100", NULL},
                               {"", "2.11.0"}}; /* an empty name names nothing */
    for (size_t i = 0; i < sizeof setups / sizeof setups[0]; i++) {
        json_t *t = json_array_get(tasks, i);
        json_object_set_new(t, "device_name", json_string(setups[i][0]));
        if (setups[i][1])
            json_object_set_new(t, "torch_version", json_string(setups[i][1]));
    }
    text = summary_of(tasks);
    assert_contains(text, "\nmeasured on: NVIDIA H100 (torch 2.11.0); GPU|x (torch 2.11.0); "
                          "NVIDIA H100\n");
    free(text);
    bench_row rows[4];
    char err[256];
    int n = bench_table(tasks, rows, 4, err, sizeof err);
    json_t *meta = json_pack("{s:s}", "solutions", "runs/a");
    captured c;
    assert_int_equal(bench_write_report_md(capture_start(&c), rows, n, tasks, meta), 0);
    char *md = capture_end(&c);
    assert_contains(md, "- **solutions**: runs/a\n- **measured on**: NVIDIA H100 (torch 2.11.0); "
                        "GPU\\|x (torch 2.11.0); NVIDIA H100\n");
    free(md);
    json_decref(meta);
    json_decref(tasks);
}

/* Ten levels and every status with large counts still fit one screen. */
static void test_summary_fits_a_screen(void **state)
{
    (void)state;
    static const char *const statuses[] = {"correct",       "incorrect",   "compile_error",
                                           "runtime_error", "timeout",     "forbidden",
                                           "missing",       "infra_error", "weird"};
    json_t *tasks = json_array();
    char id[32];
    for (int i = 0; i < 9 * 1200; i++) {
        snprintf(id, sizeof id, "t%d", i);
        json_array_append_new(tasks, failed_task(id, 1 + i % 10, statuses[i % 9], NULL));
    }
    bench_row rows[16];
    char err[256];
    int n = bench_table(tasks, rows, 16, err, sizeof err);
    assert_int_equal(n, 11);
    captured c;
    bench_print_summary(capture_start(&c), rows, n, tasks);
    char *text = capture_end(&c);
    assert_true(count_lines_checking_width(text, 100) < 25);
    assert_contains(text, "(4 more levels in report.md)\n");
    assert_contains(text, "runtime_error 1200");
    assert_contains(text, "other 1200\n");
    free(text);
    json_decref(tasks);
}

/* ---- diff ---- */

static json_t *timed(const char *id, double cand_ms, double spread)
{
    json_t *t = correct_task(id, 1, cand_ms, 1.0, 1.0);
    if (spread > 0)
        json_object_set_new(t, "spread_candidate", json_real(spread));
    return t;
}

static json_t *old_run(void)
{
    return json_pack("[o, o, o, o, o, o, o, o]", timed("fails", 1.0, 0.01),
                     failed_task("passes", 1, "incorrect", NULL), timed("slower", 1.0, 0.03),
                     timed("noisy", 1.0, 0.03), timed("faster", 2.0, 0), timed("same", 1.0, 0),
                     failed_task("removed", 1, "incorrect", NULL),
                     failed_task("still_bad", 1, "incorrect", NULL));
}

static json_t *new_run(void)
{
    return json_pack("[o, o, o, o, o, o, o, o]", timed("added", 1.0, 0),
                     failed_task("fails", 1, "incorrect", "WRONG_OUTPUT"), timed("passes", 1.0, 0),
                     timed("slower", 1.2, 0.04), timed("noisy", 1.08, 0.04),
                     timed("faster", 1.0, 0), timed("same", 1.04, 0),
                     failed_task("still_bad", 1, "compile_error", "COMPILE_FAILED"));
}

static const json_t *only_entry(const json_t *diff, const char *category, const char *id)
{
    const json_t *list = json_object_get(diff, category);
    if (json_array_size(list) != 1)
        fail_msg("%s holds %zu entries, want 1", category, json_array_size(list));
    const json_t *e = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(e, "task_id")), id);
    return e;
}

static void test_diff_categories(void **state)
{
    (void)state;
    json_t *old_tasks = old_run(), *new_tasks = new_run(), *diff = NULL;
    char err[256];
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), 2);
    const json_t *e = only_entry(diff, "newly_failing", "fails");
    assert_string_equal(json_string_value(json_object_get(e, "old_status")), "correct");
    assert_string_equal(json_string_value(json_object_get(e, "new_status")), "incorrect");
    assert_string_equal(json_string_value(json_object_get(e, "error_code")), "WRONG_OUTPUT");
    only_entry(diff, "newly_passing", "passes");
    /* noise = max(0.05, 2 * sqrt(0.03^2 + 0.04^2)) = 0.10; +20% is beyond it */
    e = only_entry(diff, "slower", "slower");
    assert_near(json_number_value(json_object_get(e, "change")), 0.2);
    assert_near(json_number_value(json_object_get(e, "noise")), 0.1);
    assert_near(json_number_value(json_object_get(e, "old_ms")), 1.0);
    assert_near(json_number_value(json_object_get(e, "new_ms")), 1.2);
    /* half the time, no spreads: the noise is min_change */
    e = only_entry(diff, "faster", "faster");
    assert_near(json_number_value(json_object_get(e, "change")), -0.5);
    assert_near(json_number_value(json_object_get(e, "noise")), 0.05);
    only_entry(diff, "added", "added");
    e = only_entry(diff, "removed", "removed"); /* failed in old: it cannot newly fail */
    assert_string_equal(json_string_value(json_object_get(e, "old_status")), "incorrect");
    /* +8% inside a 10% band, +4% under min_change, a failure that fails differently */
    const json_t *unchanged = json_object_get(diff, "unchanged");
    assert_int_equal(json_array_size(unchanged), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(unchanged, 0), "task_id")),
                        "noisy");
    assert_near(json_number_value(json_object_get(json_array_get(unchanged, 0), "change")), 0.08);
    assert_string_equal(json_string_value(json_object_get(json_array_get(unchanged, 1), "task_id")),
                        "same");
    assert_string_equal(json_string_value(json_object_get(json_array_get(unchanged, 2), "task_id")),
                        "still_bad");
    json_decref(diff);
    /* a tighter min_change does not shrink the spread's band, but does catch "same" (+4%) */
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.01, &diff, err, sizeof err), 3);
    assert_int_equal(json_array_size(json_object_get(diff, "slower")), 2);
    assert_int_equal(json_array_size(json_object_get(diff, "unchanged")), 2);
    json_decref(diff);
    json_decref(old_tasks);
    json_decref(new_tasks);
}

/* A task correct in both whose new result lost its time (null, negative) did not show that it is
 * not slower: a regression of its own kind. One without a time in old has nothing to compare. */
static void test_diff_untimed(void **state)
{
    (void)state;
    json_t *old_tasks = json_pack("[o, o, o]", timed("lost", 1.0, 0), timed("negative", 1.0, 0),
                                  timed("never", 1.0, 0));
    json_object_set_new(json_array_get(old_tasks, 2), "t_candidate_ms", json_null());
    json_t *new_tasks = json_pack("[o, o, o]", timed("lost", 1.0, 0), timed("negative", -5.0, 0),
                                  timed("never", 1.0, 0));
    json_object_set_new(json_array_get(new_tasks, 0), "t_candidate_ms", json_null());
    json_t *diff = NULL;
    char err[256];
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), 2);
    const json_t *untimed = json_object_get(diff, "untimed");
    assert_int_equal(json_array_size(untimed), 2);
    assert_near(json_number_value(json_object_get(json_array_get(untimed, 0), "old_ms")), 1.0);
    only_entry(diff, "unchanged", "never");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    bench_print_diff(f, diff);
    fclose(f);
    assert_non_null(strstr(text, "UNTIMED  lost: 1.0000 ms -> correct, but no time to compare"));
    assert_non_null(strstr(text, "2 regressions (0 newly failing, 0 slower, 2 untimed)"));
    free(text);
    json_decref(diff);
    json_decref(old_tasks);
    json_decref(new_tasks);
}

static void test_diff_identical_runs(void **state)
{
    (void)state;
    json_t *tasks = old_run(), *diff = NULL;
    char err[256];
    assert_int_equal(bench_diff(tasks, tasks, 0.05, &diff, err, sizeof err), 0);
    assert_int_equal(json_array_size(json_object_get(diff, "unchanged")), 8);
    json_decref(diff);
    json_decref(tasks);
}

/* A task correct in old that new lacks (a PARTIAL run, a lost result) is newly failing, with
 * the new status "absent": new did not show that it still passes. */
static void test_diff_correct_task_absent_from_new(void **state)
{
    (void)state;
    json_t *old_tasks = json_pack("[o, o]", timed("kept", 1.0, 0), timed("lost", 1.0, 0));
    json_t *new_tasks = json_pack("[o]", timed("kept", 1.0, 0)), *diff = NULL;
    char err[256];
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), 1);
    const json_t *e = only_entry(diff, "newly_failing", "lost");
    assert_string_equal(json_string_value(json_object_get(e, "old_status")), "correct");
    assert_string_equal(json_string_value(json_object_get(e, "new_status")), "absent");
    assert_int_equal(json_array_size(json_object_get(diff, "removed")), 0);
    captured c;
    bench_print_diff(capture_start(&c), diff);
    char *text = capture_end(&c);
    assert_string_equal(text,
                        "FAIL     lost: correct -> absent\n"
                        "1 regression (1 newly failing, 0 slower); 0 newly passing, 0 faster, "
                        "0 added, 0 removed, 1 unchanged\n");
    free(text);
    json_decref(diff);
    json_decref(old_tasks);
    json_decref(new_tasks);
}

static void expect_diff_refused(json_t *old_tasks, json_t *new_tasks, const char *want_in_err)
{
    json_t *diff = json_object();
    json_t *sentinel = diff;
    char err[256] = "";
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), -1);
    assert_null(diff);
    if (!strstr(err, want_in_err))
        fail_msg("err \"%s\" does not say \"%s\"", err, want_in_err);
    json_decref(sentinel);
    json_decref(old_tasks);
    json_decref(new_tasks);
}

static void test_diff_malformed(void **state)
{
    (void)state;
    expect_diff_refused(json_pack("[{s:s}]", "status", "correct"), json_array(),
                        "old run: task #0 (?) has no string \"task_id\"");
    expect_diff_refused(json_array(), json_pack("[{s:s, s:i}]", "task_id", "x", "status", 1),
                        "new run: task #0 (x) has no string \"status\"");
    expect_diff_refused(json_array(), json_pack("[o, o]", timed("x", 1, 0), timed("x", 2, 0)),
                        "new run: task #1 (x) repeats a task_id");
    expect_diff_refused(json_null(), json_array(), "old run: the task list is not a JSON array");
}

static void test_print_diff(void **state)
{
    (void)state;
    json_t *old_tasks = old_run(), *new_tasks = new_run(), *diff = NULL;
    char err[256];
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), 2);
    captured c;
    bench_print_diff(capture_start(&c), diff);
    char *text = capture_end(&c);
    assert_string_equal(text,
                        "FAIL     fails: correct -> incorrect (WRONG_OUTPUT)\n"
                        "SLOWER   slower: 1.0000 -> 1.2000 ms (+20.0%, noise 10.0%)\n"
                        "PASS     passes: incorrect -> correct\n"
                        "FASTER   faster: 2.0000 -> 1.0000 ms (-50.0%, noise 5.0%)\n"
                        "ADDED    added (correct)\n"
                        "REMOVED  removed (incorrect)\n"
                        "2 regressions (1 newly failing, 1 slower); 1 newly passing, 1 faster, "
                        "1 added, 1 removed, 3 unchanged\n");
    free(text);
    json_decref(diff);
    json_decref(old_tasks);
    json_decref(new_tasks);
}

/* Names every task of a run measured on device (with torch 2.11.0). */
static void set_device(json_t *tasks, const char *device)
{
    size_t i;
    json_t *task;
    json_array_foreach(tasks, i, task)
    {
        json_object_set_new(task, "device_name", json_string(device));
        json_object_set_new(task, "torch_version", json_string("2.11.0"));
    }
}

/* Runs measured on different GPUs get a warning ahead of the diff (and measured_on in its JSON);
 * the same GPU, or a run naming none (results from before they were named), get none. */
static void test_diff_warns_of_another_device(void **state)
{
    (void)state;
    json_t *old_tasks = old_run(), *new_tasks = new_run(), *diff = NULL;
    char err[256];
    captured c;
    set_device(new_tasks, "NVIDIA H100");
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), 2);
    assert_null(json_object_get(diff, "measured_on")); /* OLD names no device */
    json_decref(diff);
    set_device(old_tasks, "NVIDIA H100");
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), 2);
    assert_null(json_object_get(diff, "measured_on"));
    bench_print_diff(capture_start(&c), diff);
    char *text = capture_end(&c);
    assert_null(strstr(text, "warning"));
    free(text);
    json_decref(diff);
    /* a server of two GPUs: the same two setups, first met in another order */
    json_object_set_new(json_array_get(old_tasks, 0), "device_name", json_string("NVIDIA H200"));
    json_object_set_new(json_array_get(new_tasks, 1), "device_name", json_string("NVIDIA H200"));
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), 2);
    assert_null(json_object_get(diff, "measured_on"));
    json_decref(diff);
    set_device(old_tasks, "NVIDIA H200");
    set_device(new_tasks, "NVIDIA H100");
    assert_int_equal(bench_diff(old_tasks, new_tasks, 0.05, &diff, err, sizeof err), 2);
    json_t *want = json_pack("{s:[s], s:[s]}", "old", "NVIDIA H200 (torch 2.11.0)", "new",
                             "NVIDIA H100 (torch 2.11.0)");
    assert_true(json_equal(json_object_get(diff, "measured_on"), want));
    bench_print_diff(capture_start(&c), diff);
    text = capture_end(&c);
    const char *warning = "warning: the runs were measured on different setups (OLD: NVIDIA H200 "
                          "(torch 2.11.0); NEW: NVIDIA H100 (torch 2.11.0)): their time changes "
                          "compare machines as well as solutions\nFAIL     fails:";
    assert_true(strncmp(text, warning, strlen(warning)) == 0);
    free(text);
    json_decref(want);
    json_decref(diff);
    json_decref(old_tasks);
    json_decref(new_tasks);
}

/* The warm-up replies kgym-bench baselines counts as out of GPU memory (H200, 2026-12-04: four
 * concurrent torch.compile warm-ups of large-tensor tasks) and the ones it does not. */
static void test_warmup_out_of_memory(void **state)
{
    (void)state;
    static const char *const cases[][3] = {
        {"compile_failed", "OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB", "1"},
        {"compile_failed", "RuntimeError: CUDA error: Out Of Memory", "1"},
        {"compile_failed", "torch._dynamo.exc.Unsupported: generator", "0"},
        {"compiled", "OutOfMemoryError", "0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *r =
            json_pack("{s:s, s:s}", "warmup", cases[i][0], "compile_unavailable", cases[i][1]);
        assert_int_equal(bench_warmup_out_of_memory(r), cases[i][2][0] == '1');
        json_decref(r);
    }
    json_t *bare = json_pack("{s:s}", "warmup", "compile_failed");
    assert_false(bench_warmup_out_of_memory(bare));
    assert_false(bench_warmup_out_of_memory(NULL));
    json_decref(bare);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_p_thresholds),
        cmocka_unit_test(test_one_level_counted_by_hand),
        cmocka_unit_test(test_five_percent_rule_boundaries),
        cmocka_unit_test(test_missing_baselines),
        cmocka_unit_test(test_two_levels_and_all),
        cmocka_unit_test(test_empty_run),
        cmocka_unit_test(test_malformed_input),
        cmocka_unit_test(test_check_result),
        cmocka_unit_test(test_diff_untimed),
        cmocka_unit_test(test_table_json),
        cmocka_unit_test(test_report_md),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_measured_on),
        cmocka_unit_test(test_summary_fits_a_screen),
        cmocka_unit_test(test_diff_categories),
        cmocka_unit_test(test_diff_identical_runs),
        cmocka_unit_test(test_diff_correct_task_absent_from_new),
        cmocka_unit_test(test_diff_malformed),
        cmocka_unit_test(test_print_diff),
        cmocka_unit_test(test_diff_warns_of_another_device),
        cmocka_unit_test(test_warmup_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
