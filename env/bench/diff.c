/* diff: two runs compared task by task, regressions apart (see metrics.h).
 *
 * A task correct in OLD and absent from NEW is a regression ("newly_failing", new status
 * "absent"), not merely "removed": NEW did not show that it still passes (a PARTIAL run, a lost
 * result, or a narrower selection), and a regression gate must not pass on what it did not
 * measure. Compare runs over the same selection. A task absent from NEW that was not correct in
 * OLD cannot newly fail: it is listed as "removed". For the same reason a task correct in both
 * whose NEW result has no time while OLD's had one is a regression too ("untimed"): NEW did not
 * show that it is not slower. */
#include "bench/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "util/text.h"

/* The categories of the diff object; the first three are the regressions. */
static const char *const CATEGORIES[] = {"newly_failing", "slower", "untimed", "newly_passing",
                                         "faster",        "added",  "removed", "unchanged"};
#define N_CATEGORIES (sizeof CATEGORIES / sizeof CATEGORIES[0])

/* The new status of a task that NEW does not hold at all. */
static const char ABSENT[] = "absent";

/* Maps task_id -> task for one run; checks every task has a string task_id (once) and status. */
static json_t *index_tasks(const json_t *tasks, const char *run, char *err, size_t errcap)
{
    if (!json_is_array(tasks)) {
        text_fmt(err, errcap, "%s run: the task list is not a JSON array", run);
        return NULL;
    }
    json_t *by_id = json_object();
    size_t i;
    const json_t *task;
    json_array_foreach(tasks, i, task)
    {
        const char *id = json_string_value(json_object_get(task, "task_id"));
        const char *problem = NULL;
        if (!id)
            problem = "has no string \"task_id\"";
        else if (!json_is_string(json_object_get(task, "status")))
            problem = "has no string \"status\"";
        else if (json_object_get(by_id, id))
            problem = "repeats a task_id";
        if (problem) {
            text_fmt(err, errcap, "%s run: task #%zu (%s) %s", run, i, id ? id : "?", problem);
            json_decref(by_id);
            return NULL;
        }
        json_object_set(by_id, id, (json_t *)task);
    }
    return by_id;
}

static const char *status_of(const json_t *task)
{
    return json_string_value(json_object_get(task, "status"));
}

static bool is_correct(const json_t *task)
{
    return strcmp(status_of(task), "correct") == 0;
}

/* A non-negative finite number, 0 when absent or anything else. */
static double number_or_zero(const json_t *task, const char *key)
{
    const json_t *v = json_object_get(task, key);
    double x = json_is_number(v) ? json_number_value(v) : 0.0;
    return isfinite(x) && x > 0 ? x : 0.0;
}

static json_t *status_entry(const char *id, const json_t *old_task, const json_t *new_task)
{
    json_t *e = json_pack("{s:s}", "task_id", id);
    if (old_task)
        json_object_set_new(e, "old_status", json_string(status_of(old_task)));
    if (new_task) {
        json_object_set_new(e, "new_status", json_string(status_of(new_task)));
        const json_t *code = json_object_get(new_task, "error_code");
        if (json_is_string(code))
            json_object_set(e, "error_code", (json_t *)code);
    }
    return e;
}

/* Two correct runs of a task: the relative change of the candidate's time against the noise
 * of both measurements. Adds old_ms, new_ms, change and noise to entry and returns its
 * category: "untimed" when NEW has no time (a positive number) and OLD had one, "unchanged"
 * when OLD has none (nothing to compare with). */
static const char *compare_times(const json_t *old_task, const json_t *new_task, double min_change,
                                 json_t *entry)
{
    double old_ms = number_or_zero(old_task, "t_candidate_ms");
    double new_ms = number_or_zero(new_task, "t_candidate_ms");
    if (old_ms > 0 && new_ms <= 0) {
        json_object_set_new(entry, "old_ms", json_real(old_ms));
        return "untimed";
    }
    if (old_ms <= 0)
        return "unchanged";
    double spread_old = number_or_zero(old_task, "spread_candidate");
    double spread_new = number_or_zero(new_task, "spread_candidate");
    double noise = fmax(min_change, 2.0 * sqrt(spread_old * spread_old + spread_new * spread_new));
    double change = (new_ms - old_ms) / old_ms;
    json_object_set_new(entry, "old_ms", json_real(old_ms));
    json_object_set_new(entry, "new_ms", json_real(new_ms));
    json_object_set_new(entry, "change", json_real(change));
    json_object_set_new(entry, "noise", json_real(noise));
    if (change > noise)
        return "slower";
    if (change < -noise)
        return "faster";
    return "unchanged";
}

/* Files one task present in both runs under its category. */
static void compare_task(const char *id, const json_t *old_task, const json_t *new_task,
                         double min_change, json_t *diff)
{
    json_t *entry = status_entry(id, old_task, new_task);
    const char *category = "unchanged";
    if (is_correct(old_task) && !is_correct(new_task))
        category = "newly_failing";
    else if (!is_correct(old_task) && is_correct(new_task))
        category = "newly_passing";
    else if (is_correct(old_task) && is_correct(new_task))
        category = compare_times(old_task, new_task, min_change, entry);
    json_array_append_new(json_object_get(diff, category), entry);
}

/* Files a task of OLD that NEW lacks: newly failing when it was correct (see the top). */
static void file_absent_task(const char *id, const json_t *old_task, json_t *diff)
{
    json_t *entry = status_entry(id, old_task, NULL);
    const char *category = "removed";
    if (is_correct(old_task)) {
        json_object_set_new(entry, "new_status", json_string(ABSENT));
        category = "newly_failing";
    }
    json_array_append_new(json_object_get(diff, category), entry);
}

static json_t *empty_diff(void)
{
    json_t *diff = json_object();
    for (size_t c = 0; c < N_CATEGORIES; c++)
        json_object_set_new(diff, CATEGORIES[c], json_array());
    return diff;
}

static void compare_runs(const json_t *old_tasks, const json_t *new_tasks, const json_t *old_by_id,
                         const json_t *new_by_id, double min_change, json_t *diff)
{
    size_t i;
    const json_t *task;
    json_array_foreach(new_tasks, i, task)
    {
        const char *id = json_string_value(json_object_get(task, "task_id"));
        const json_t *old_task = json_object_get(old_by_id, id);
        if (old_task)
            compare_task(id, old_task, task, min_change, diff);
        else
            json_array_append_new(json_object_get(diff, "added"), status_entry(id, NULL, task));
    }
    json_array_foreach(old_tasks, i, task)
    {
        const char *id = json_string_value(json_object_get(task, "task_id"));
        if (!json_object_get(new_by_id, id))
            file_absent_task(id, task, diff);
    }
}

static bool holds_string(const json_t *array, const json_t *s)
{
    size_t i;
    const json_t *item;
    json_array_foreach(array, i, item)
    {
        if (json_equal(item, s))
            return true;
    }
    return false;
}

/* The same setups in any order (a server of mixed GPUs lists them as its tasks landed). Each
 * list holds distinct items (bench_measured_on). */
static bool same_setups(const json_t *a, const json_t *b)
{
    if (json_array_size(a) != json_array_size(b))
        return false;
    size_t i;
    const json_t *item;
    json_array_foreach(a, i, item)
    {
        if (!holds_string(b, item))
            return false;
    }
    return true;
}

/* diff.measured_on = {old, new} when the runs name different devices or torch versions (a run
 * that names none, from before results named them, is taken to match). */
static void note_setups(const json_t *old_tasks, const json_t *new_tasks, json_t *diff)
{
    json_t *old_setups = bench_measured_on(old_tasks), *new_setups = bench_measured_on(new_tasks);
    if (json_array_size(old_setups) == 0 || json_array_size(new_setups) == 0 ||
        same_setups(old_setups, new_setups)) {
        json_decref(old_setups);
        json_decref(new_setups);
        return;
    }
    json_object_set_new(diff, "measured_on",
                        json_pack("{s:o, s:o}", "old", old_setups, "new", new_setups));
}

int bench_diff(const json_t *old_tasks, const json_t *new_tasks, double min_change, json_t **out,
               char *err, size_t errcap)
{
    *out = NULL;
    json_t *old_by_id = index_tasks(old_tasks, "old", err, errcap);
    if (!old_by_id)
        return -1;
    json_t *new_by_id = index_tasks(new_tasks, "new", err, errcap);
    if (!new_by_id) {
        json_decref(old_by_id);
        return -1;
    }
    json_t *diff = empty_diff();
    compare_runs(old_tasks, new_tasks, old_by_id, new_by_id, min_change, diff);
    note_setups(old_tasks, new_tasks, diff);
    json_decref(old_by_id);
    json_decref(new_by_id);
    *out = diff;
    return (int)(json_array_size(json_object_get(diff, "newly_failing")) +
                 json_array_size(json_object_get(diff, "slower")) +
                 json_array_size(json_object_get(diff, "untimed")));
}

/* ---- as text ---- */

static const char *entry_string(const json_t *entry, const char *key)
{
    const char *s = json_string_value(json_object_get(entry, key));
    return s ? s : "?";
}

static double entry_number(const json_t *entry, const char *key)
{
    return json_number_value(json_object_get(entry, key));
}

static void print_status_change(FILE *out, const char *tag, const json_t *entry)
{
    fprintf(out, "%-8s %s: %s -> %s", tag, entry_string(entry, "task_id"),
            entry_string(entry, "old_status"), entry_string(entry, "new_status"));
    const char *code = json_string_value(json_object_get(entry, "error_code"));
    if (code)
        fprintf(out, " (%s)", code);
    fputc('\n', out);
}

static void print_time_change(FILE *out, const char *tag, const json_t *entry)
{
    fprintf(out, "%-8s %s: %.4f -> %.4f ms (%+.1f%%, noise %.1f%%)\n", tag,
            entry_string(entry, "task_id"), entry_number(entry, "old_ms"),
            entry_number(entry, "new_ms"), 100.0 * entry_number(entry, "change"),
            100.0 * entry_number(entry, "noise"));
}

static void print_untimed(FILE *out, const char *tag, const json_t *entry)
{
    fprintf(out, "%-8s %s: %.4f ms -> correct, but no time to compare\n", tag,
            entry_string(entry, "task_id"), entry_number(entry, "old_ms"));
}

/* A task in one run only, with its status there. */
static void print_presence(FILE *out, const char *tag, const json_t *entry)
{
    const char *key = json_object_get(entry, "new_status") ? "new_status" : "old_status";
    fprintf(out, "%-8s %s (%s)\n", tag, entry_string(entry, "task_id"), entry_string(entry, key));
}

/* The printed categories, regressions first, each with its tag and its line's form. */
static const struct {
    const char *category, *tag;
    void (*print)(FILE *out, const char *tag, const json_t *entry);
} PRINTED[] = {
    {"newly_failing", "FAIL", print_status_change}, {"slower", "SLOWER", print_time_change},
    {"untimed", "UNTIMED", print_untimed},          {"newly_passing", "PASS", print_status_change},
    {"faster", "FASTER", print_time_change},        {"added", "ADDED", print_presence},
    {"removed", "REMOVED", print_presence},
};

static size_t category_size(const json_t *diff, const char *category)
{
    return json_array_size(json_object_get(diff, category));
}

static void print_setup_warning(FILE *out, const json_t *diff)
{
    const json_t *setups = json_object_get(diff, "measured_on");
    if (!setups)
        return;
    fputs("warning: the runs were measured on different setups (OLD: ", out);
    bench_print_setups(out, json_object_get(setups, "old"), false);
    fputs("; NEW: ", out);
    bench_print_setups(out, json_object_get(setups, "new"), false);
    fputs("): their time changes compare machines as well as solutions\n", out);
}

void bench_print_diff(FILE *out, const json_t *diff)
{
    print_setup_warning(out, diff);
    for (size_t c = 0; c < sizeof PRINTED / sizeof PRINTED[0]; c++) {
        size_t i;
        const json_t *entry;
        json_array_foreach(json_object_get(diff, PRINTED[c].category), i, entry)
        {
            PRINTED[c].print(out, PRINTED[c].tag, entry);
        }
    }
    size_t failing = category_size(diff, "newly_failing"), slower = category_size(diff, "slower");
    size_t untimed = category_size(diff, "untimed"), regressions = failing + slower + untimed;
    fprintf(out, "%zu regression%s (%zu newly failing, %zu slower", regressions,
            regressions == 1 ? "" : "s", failing, slower);
    if (untimed)
        fprintf(out, ", %zu untimed", untimed);
    fprintf(out,
            "); %zu newly passing, %zu faster, "
            "%zu added, %zu removed, %zu unchanged\n",
            category_size(diff, "newly_passing"), category_size(diff, "faster"),
            category_size(diff, "added"), category_size(diff, "removed"),
            category_size(diff, "unchanged"));
}
