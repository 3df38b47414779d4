/* metrics: the paper's Table 1 from per-task results, the report files and the run-to-run diff.
 *
 * A task result is one JSON object (one line of results.jsonl, one element of results.json's
 * "tasks"):
 *   {task_id, level (int), name, solution (path or null),
 *    status: "correct" | "incorrect" | "compile_error" | "runtime_error" | "timeout" |
 *            "forbidden" | "missing" | "infra_error",
 *    error_code?, error?, reward?, t_candidate_ms?, t_eager_ms?, t_compile_ms? (null: compile
 *    unavailable), spread_candidate?, spread_eager?, spread_compile?,
 *    speedup_eager? (t_eager / t_candidate, correct only), speedup_compile? (likewise),
 *    snapshots?, best_snapshot?, eval_s?}
 * Every status but "correct" counts as a failure over the level's tasks, as in the paper
 * (a missing solution included); infra_error is also counted apart, since it is not the
 * solution's fault and a table with any is not a clean measurement. */
#ifndef KGYM_BENCH_METRICS_H
#define KGYM_BENCH_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* the highest level a task may have (kgym-env's task store takes 0-100; --levels takes 1-100) */
#define BENCH_MAX_LEVEL 100
#define BENCH_FAST_P_N 4
extern const double BENCH_FAST_P[BENCH_FAST_P_N]; /* KernelBench's fast_p: p = 0, 1, 1.5, 2 */

/* One row of the table: one level, or all levels ("all"). Rates are fractions in [0, 1] of n;
 * a geometric mean over no task is 0 with its count 0. */
typedef struct bench_row {
    char label[16];        /* "L1", "L2", "L3", ... or "all" */
    int level;             /* 0 for "all" */
    int n;                 /* tasks of the level (the denominator of every rate) */
    int passed;            /* compiled and correct */
    int infra;             /* infra_error: not measured */
    int faster_eager;      /* correct and speed-up vs eager > 1.0 */
    int faster_eager_5pct; /* ... > 1.05 (the paper's 5% rule) */
    int faster_compile;    /* correct, a compile baseline, speed-up vs compile > 1.0 */
    int faster_compile_5pct;
    int n_geo_eager, n_geo_compile; /* correct solutions with that speed-up */
    double geomean_eager, geomean_compile;
    int fast_p[BENCH_FAST_P_N]; /* correct and speed-up vs eager > p (fast_0 = passed) */
} bench_row;

/* Whether one result object is one the table can count: an object with a string task_id, an
 * integer level in 0..BENCH_MAX_LEVEL and a string status. 0, or -1 with err saying why. */
int bench_check_result(const json_t *task, char *err, size_t errcap);
/* Fills rows: one per level present (ascending), then "all". Returns the count, or -1 when a
 * task object lacks an integer level or a string status (err says which). max_rows >= 2. */
int bench_table(const json_t *tasks, bench_row *rows, int max_rows, char *err, size_t errcap);
/* The rows as JSON (rates as fractions, counts, geomeans; null for an empty geomean). */
json_t *bench_table_json(const bench_row *rows, int n);

/* report.md: the paper's Table 1 layout (rows: Pass Rate, Faster Rate vs eager / compile, with
 * the 5% rule, Geomean speed-up vs eager / compile, fast_p; columns: the levels and Overall),
 * then the per-task list. meta: {device, torch_version, solutions, started, ...} for the header. */
int bench_write_report_md(FILE *out, const bench_row *rows, int n, const json_t *tasks,
                          const json_t *meta);
/* Where the tasks' baselines were measured: each distinct "device (torch version)" of the
 * results (their device_name, torch_version), in order of first appearance: a run whose server
 * changed GPU midway shows both. A new array (empty when no result names a device). */
json_t *bench_measured_on(const json_t *tasks);
/* Such a list as "A; B" (escaped for a markdown table when markdown). */
void bench_print_setups(FILE *out, const json_t *setups, bool markdown);
/* The one-screen summary printed at the end of a run (the table, plus counts by status). */
void bench_print_summary(FILE *out, const bench_row *rows, int n, const json_t *tasks);

/* kgym-bench diff: compares two runs' task lists (by task_id). A task "newly fails" when it was
 * correct in old and is not in new; "newly passes" the other way; "slower"/"faster" when correct
 * in both and its candidate time changed by more than the noise: a relative change above
 * max(min_change, 2 * sqrt(spread_old^2 + spread_new^2)) (spreads: the candidate's CV; missing
 * = 0); "untimed" when correct in both but new has no candidate time where old had one. A task
 * correct in old and absent from new is newly failing (new_status "absent"); other tasks in only
 * one run are listed as added/removed. Fills *out with {newly_failing, slower, untimed,
 * newly_passing, faster, added, removed, unchanged} (arrays of {task_id, ...}), and
 * {measured_on: {old, new}} (bench_measured_on of each) when both name setups and they differ,
 * and returns the number of regressions (newly failing + slower + untimed), or -1 on malformed
 * input. */
int bench_diff(const json_t *old_tasks, const json_t *new_tasks, double min_change, json_t **out,
               char *err, size_t errcap);
/* The diff as text, one line per changed task, regressions first; a warning first when the
 * runs were measured on different devices or torch versions (their times then compare
 * machines, not solutions). */
void bench_print_diff(FILE *out, const json_t *diff);

#endif
