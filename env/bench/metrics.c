/* metrics: the paper's Table 1 from per-task results (see metrics.h). */
#include "bench/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "util/text.h"

const double BENCH_FAST_P[BENCH_FAST_P_N] = {0.0, 1.0, 1.5, 2.0};

/* The paper's 5% rule, as the header states it: a speed-up above 1.05 counts as faster. (The
 * milestone reward's b(t, t0) = (t0 - t) / t0 > 0.05 is the stricter speed-up > 1/0.95.) */
static const double FIVE_PCT_SPEEDUP = 1.05;

/* The task's id for an error message, or its position when it has none. */
static const char *task_name(const json_t *task, size_t index, char *buf, size_t cap)
{
    const char *id = json_string_value(json_object_get(task, "task_id"));
    if (id)
        return id;
    text_fmt(buf, cap, "#%zu", index);
    return buf;
}

static int check_task(const json_t *task, size_t index, char *err, size_t errcap)
{
    char name[32];
    if (!json_is_object(task)) {
        text_fmt(err, errcap, "task #%zu is not a JSON object", index);
        return -1;
    }
    const json_t *level = json_object_get(task, "level");
    if (!json_is_integer(level) || json_integer_value(level) < 0 ||
        json_integer_value(level) > BENCH_MAX_LEVEL) {
        text_fmt(err, errcap, "task %s: \"level\" is missing or not an integer 0..%d",
                 task_name(task, index, name, sizeof name), BENCH_MAX_LEVEL);
        return -1;
    }
    if (!json_is_string(json_object_get(task, "status"))) {
        text_fmt(err, errcap, "task %s: \"status\" is missing or not a string",
                 task_name(task, index, name, sizeof name));
        return -1;
    }
    return 0;
}

int bench_check_result(const json_t *task, char *err, size_t errcap)
{
    if (check_task(task, 0, err, errcap) < 0)
        return -1;
    if (!json_is_string(json_object_get(task, "task_id")))
        return text_fail(err, errcap, "\"task_id\" is missing or not a string");
    return 0;
}

static int task_level(const json_t *task)
{
    return (int)json_integer_value(json_object_get(task, "level"));
}

/* Inserts level into the ascending set rows[0..*n).level unless present. False when full. */
static bool add_level(bench_row *rows, int *n, int max, int level)
{
    int at = 0;
    while (at < *n && rows[at].level < level)
        at++;
    if (at < *n && rows[at].level == level)
        return true;
    if (*n == max)
        return false;
    memmove(rows + at + 1, rows + at, (size_t)(*n - at) * sizeof *rows);
    rows[at].level = level;
    (*n)++;
    return true;
}

/* Validates every task and collects the distinct levels, ascending, in rows[].level. Returns
 * their count or -1. */
static int collect_levels(const json_t *tasks, bench_row *rows, int max_levels, char *err,
                          size_t errcap)
{
    int n = 0;
    size_t i;
    const json_t *task;
    json_array_foreach(tasks, i, task)
    {
        if (check_task(task, i, err, errcap) < 0)
            return -1;
        int level = task_level(task);
        if (!add_level(rows, &n, max_levels, level)) {
            text_fmt(err, errcap, "more than %d levels: the table holds %d rows", max_levels,
                     max_levels + 1);
            return -1;
        }
    }
    return n;
}

static double positive_number(const json_t *v)
{
    double x = json_is_number(v) ? json_number_value(v) : 0.0;
    return isfinite(x) && x > 0 ? x : 0.0;
}

/* A correct task's speed-up over one baseline, as the runner wrote it; 0 when there is none
 * (e.g. t_compile_ms null: no compile baseline). */
static double task_speedup(const json_t *task, const char *key)
{
    return positive_number(json_object_get(task, key));
}

/* Sums of log speed-ups, turned into the row's geometric means once every task is counted. */
typedef struct log_sums {
    double eager, compile;
} log_sums;

static void count_correct(bench_row *row, const json_t *task, log_sums *logs)
{
    row->passed++;
    double eager = task_speedup(task, "speedup_eager");
    double compile = task_speedup(task, "speedup_compile");
    row->faster_eager += eager > 1.0;
    row->faster_eager_5pct += eager > FIVE_PCT_SPEEDUP;
    row->faster_compile += compile > 1.0;
    row->faster_compile_5pct += compile > FIVE_PCT_SPEEDUP;
    if (eager > 0) {
        row->n_geo_eager++;
        logs->eager += log(eager);
    }
    if (compile > 0) {
        row->n_geo_compile++;
        logs->compile += log(compile);
    }
    /* fast_0 is KernelBench's correctness rate: a correct but untimed task still counts */
    for (int p = 0; p < BENCH_FAST_P_N; p++)
        row->fast_p[p] += BENCH_FAST_P[p] == 0.0 || eager > BENCH_FAST_P[p];
}

static void count_task(bench_row *row, const json_t *task, log_sums *logs)
{
    const char *status = json_string_value(json_object_get(task, "status"));
    row->n++;
    if (strcmp(status, "correct") == 0)
        count_correct(row, task, logs);
    else if (strcmp(status, "infra_error") == 0)
        row->infra++;
}

/* One row over the tasks of one level, or over all of them when whole_run. */
static void fill_row(bench_row *row, const json_t *tasks, int level, bool whole_run)
{
    memset(row, 0, sizeof *row);
    row->level = whole_run ? 0 : level;
    if (whole_run)
        text_fmt(row->label, sizeof row->label, "all");
    else
        text_fmt(row->label, sizeof row->label, "L%d", level);
    log_sums logs = {0, 0};
    size_t i;
    const json_t *task;
    json_array_foreach(tasks, i, task)
    {
        if (whole_run || task_level(task) == level)
            count_task(row, task, &logs);
    }
    row->geomean_eager = row->n_geo_eager ? exp(logs.eager / row->n_geo_eager) : 0.0;
    row->geomean_compile = row->n_geo_compile ? exp(logs.compile / row->n_geo_compile) : 0.0;
}

int bench_table(const json_t *tasks, bench_row *rows, int max_rows, char *err, size_t errcap)
{
    if (!json_is_array(tasks)) {
        text_fmt(err, errcap, "the task list is not a JSON array");
        return -1;
    }
    if (max_rows < 2) {
        text_fmt(err, errcap, "max_rows is %d, at least 2 are needed", max_rows);
        return -1;
    }
    /* the rows first hold the sorted set of levels, then each is filled for its own level */
    int n_levels = collect_levels(tasks, rows, max_rows - 1, err, errcap);
    if (n_levels < 0)
        return -1;
    for (int r = 0; r < n_levels; r++)
        fill_row(&rows[r], tasks, rows[r].level, false);
    fill_row(&rows[n_levels], tasks, 0, true);
    return n_levels + 1;
}

static double rate(int count, int n)
{
    return n > 0 ? (double)count / n : 0.0;
}

/* "key": count and "key_rate": count / n. */
static void put_count(json_t *obj, const char *key, int count, int n)
{
    char rate_key[64];
    text_fmt(rate_key, sizeof rate_key, "%s_rate", key);
    json_object_set_new(obj, key, json_integer(count));
    json_object_set_new(obj, rate_key, json_real(rate(count, n)));
}

static json_t *geomean_json(double geomean, int n_geo)
{
    return n_geo > 0 ? json_real(geomean) : json_null();
}

static json_t *fast_p_json(const bench_row *row)
{
    json_t *list = json_array();
    for (int p = 0; p < BENCH_FAST_P_N; p++)
        json_array_append_new(list,
                              json_pack("{s:f, s:i, s:f}", "p", BENCH_FAST_P[p], "count",
                                        row->fast_p[p], "rate", rate(row->fast_p[p], row->n)));
    return list;
}

static json_t *row_json(const bench_row *row)
{
    json_t *obj =
        json_pack("{s:s, s:i, s:i}", "label", row->label, "level", row->level, "n", row->n);
    put_count(obj, "passed", row->passed, row->n);
    put_count(obj, "infra", row->infra, row->n);
    put_count(obj, "faster_eager", row->faster_eager, row->n);
    put_count(obj, "faster_eager_5pct", row->faster_eager_5pct, row->n);
    put_count(obj, "faster_compile", row->faster_compile, row->n);
    put_count(obj, "faster_compile_5pct", row->faster_compile_5pct, row->n);
    json_object_set_new(obj, "geomean_eager", geomean_json(row->geomean_eager, row->n_geo_eager));
    json_object_set_new(obj, "n_geo_eager", json_integer(row->n_geo_eager));
    json_object_set_new(obj, "geomean_compile",
                        geomean_json(row->geomean_compile, row->n_geo_compile));
    json_object_set_new(obj, "n_geo_compile", json_integer(row->n_geo_compile));
    json_object_set_new(obj, "fast_p", fast_p_json(row));
    return obj;
}

json_t *bench_table_json(const bench_row *rows, int n)
{
    json_t *list = json_array();
    for (int r = 0; r < n; r++)
        json_array_append_new(list, row_json(&rows[r]));
    return list;
}
