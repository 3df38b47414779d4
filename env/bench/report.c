/* report: report.md (the paper's Table 1, then every task) and the one-screen summary (see
 * metrics.h). */
#include "bench/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

/* How a metric's cell is computed from its row. */
typedef enum cell_kind {
    CELL_PERCENT, /* an int count, as a percentage of the row's n */
    CELL_GEOMEAN, /* a double geomean with its int count of speed-ups */
    CELL_COUNT,   /* an int count as is */
} cell_kind;

/* One line of the table: its names in report.md and in the summary, where some are left out. */
typedef struct metric {
    char md_name[64];
    char short_name[24];
    bool in_summary;
    cell_kind kind;
    size_t field;   /* offsetof the value in bench_row */
    size_t n_field; /* CELL_GEOMEAN: offsetof its count */
} metric;

#define MAX_METRICS (9 + BENCH_FAST_P_N) /* what table_metrics adds */

/* Sets m[at] and returns the next index; short_name NULL leaves the line out of the summary. */
static int add_metric(metric *m, int at, const char *md_name, const char *short_name,
                      cell_kind kind, size_t field, size_t n_field)
{
    text_fmt(m[at].md_name, sizeof m[at].md_name, "%s", md_name);
    text_fmt(m[at].short_name, sizeof m[at].short_name, "%s", short_name ? short_name : "");
    m[at].in_summary = short_name != NULL;
    m[at].kind = kind;
    m[at].field = field;
    m[at].n_field = n_field;
    return at + 1;
}

/* The table's lines in the paper's order, then KernelBench's fast_p, then the counts. */
static int table_metrics(metric *m)
{
    int k = 0;
    k = add_metric(m, k, "Pass Rate (%)", "Pass rate %", CELL_PERCENT, offsetof(bench_row, passed),
                   0);
    k = add_metric(m, k, "Faster Rate vs. Eager (%)", "Faster vs eager %", CELL_PERCENT,
                   offsetof(bench_row, faster_eager), 0);
    k = add_metric(m, k, "Faster Rate vs. Eager, 5% rule (%)", "  5% rule %", CELL_PERCENT,
                   offsetof(bench_row, faster_eager_5pct), 0);
    k = add_metric(m, k, "Faster Rate vs. Compile (%)", "Faster vs compile %", CELL_PERCENT,
                   offsetof(bench_row, faster_compile), 0);
    k = add_metric(m, k, "Faster Rate vs. Compile, 5% rule (%)", "  5% rule %", CELL_PERCENT,
                   offsetof(bench_row, faster_compile_5pct), 0);
    k = add_metric(m, k, "Geomean speed-up vs. Eager (x, over n correct)", "Geomean vs eager x",
                   CELL_GEOMEAN, offsetof(bench_row, geomean_eager),
                   offsetof(bench_row, n_geo_eager));
    k = add_metric(m, k, "Geomean speed-up vs. Compile (x, over n correct)", "Geomean vs compile x",
                   CELL_GEOMEAN, offsetof(bench_row, geomean_compile),
                   offsetof(bench_row, n_geo_compile));
    for (int p = 0; p < BENCH_FAST_P_N; p++) {
        char md_name[64], short_name[24];
        text_fmt(md_name, sizeof md_name, "fast_%g (%%)", BENCH_FAST_P[p]);
        text_fmt(short_name, sizeof short_name, "fast_%g %%", BENCH_FAST_P[p]);
        /* fast_0 is the pass rate again: the summary has no line to spare for it */
        k = add_metric(m, k, md_name, BENCH_FAST_P[p] == 0.0 ? NULL : short_name, CELL_PERCENT,
                       offsetof(bench_row, fast_p) + (size_t)p * sizeof(int), 0);
    }
    k = add_metric(m, k, "Tasks (n)", "Tasks", CELL_COUNT, offsetof(bench_row, n), 0);
    k = add_metric(m, k, "Infra errors", "Infra errors", CELL_COUNT, offsetof(bench_row, infra), 0);
    return k;
}

static int int_field(const bench_row *row, size_t field)
{
    int v;
    memcpy(&v, (const char *)row + field, sizeof v);
    return v;
}

static double double_field(const bench_row *row, size_t field)
{
    double v;
    memcpy(&v, (const char *)row + field, sizeof v);
    return v;
}

static void format_cell(char *buf, size_t cap, const metric *m, const bench_row *row)
{
    int count = int_field(row, m->field);
    switch (m->kind) {
    case CELL_PERCENT:
        text_fmt(buf, cap, "%.1f", row->n > 0 ? 100.0 * count / row->n : 0.0);
        break;
    case CELL_GEOMEAN: {
        int n_geo = int_field(row, m->n_field);
        if (n_geo > 0)
            text_fmt(buf, cap, "%.2f (%d)", double_field(row, m->field), n_geo);
        else
            text_fmt(buf, cap, "- (0)");
        break;
    }
    case CELL_COUNT:
        text_fmt(buf, cap, "%d", count);
        break;
    }
}

static bool is_overall(const bench_row *row)
{
    return strcmp(row->label, "all") == 0;
}

static const char *column_name(const bench_row *row, char *buf, size_t cap)
{
    if (is_overall(row))
        return "Overall";
    text_fmt(buf, cap, "Level %d", row->level);
    return buf;
}

/* ---- report.md ---- */

/* Text inside a markdown table cell: a '|' would end the cell, a newline the row. */
static void md_text(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", out);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', out);
        else
            fputc(*s, out);
    }
}

static void md_value(FILE *out, const json_t *v)
{
    if (json_is_string(v)) {
        md_text(out, json_string_value(v));
        return;
    }
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    md_text(out, text ? text : "?");
    free(text);
}

/* What was run: one line per field of meta, in its order. */
static void md_header(FILE *out, const json_t *meta)
{
    fputs("# kgym-bench report\n\n", out);
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)meta, key, value)
    {
        fprintf(out, "- **%s**: ", key);
        md_value(out, value);
        fputc('\n', out);
    }
}

json_t *bench_measured_on(const json_t *tasks)
{
    json_t *setups = json_array();
    size_t i, j;
    const json_t *task, *seen;
    json_array_foreach(tasks, i, task)
    {
        const char *dev = json_string_value(json_object_get(task, "device_name"));
        const char *torch = json_string_value(json_object_get(task, "torch_version"));
        if (!dev || !*dev)
            continue;
        json_t *setup = torch ? json_sprintf("%s (torch %s)", dev, torch) : json_string(dev);
        bool known = false;
        json_array_foreach(setups, j, seen)
        {
            known = known || json_equal(seen, setup);
        }
        if (!known && setup)
            json_array_append(setups, setup);
        json_decref(setup);
    }
    return setups;
}

void bench_print_setups(FILE *out, const json_t *setups, bool markdown)
{
    size_t i;
    const json_t *setup;
    json_array_foreach(setups, i, setup)
    {
        if (i > 0)
            fputs("; ", out);
        if (markdown)
            md_text(out, json_string_value(setup));
        else
            fputs(json_string_value(setup), out);
    }
}

/* "label: A; B\n" over bench_measured_on's list; nothing when no result names a device. */
static void print_measured_on(FILE *out, const char *label, const json_t *tasks, bool markdown)
{
    json_t *setups = bench_measured_on(tasks);
    if (json_array_size(setups) > 0) {
        fputs(label, out);
        bench_print_setups(out, setups, markdown);
        fputc('\n', out);
    }
    json_decref(setups);
}

static void md_infra_warning(FILE *out, const bench_row *overall)
{
    if (overall->infra == 0)
        return;
    fprintf(out,
            "\n> **%d infra error%s**: not measured, through no fault of the solution; this "
            "table is not a clean measurement.\n",
            overall->infra, overall->infra == 1 ? "" : "s");
}

static void md_table(FILE *out, const bench_row *rows, int n)
{
    char name[32], cell[48];
    fputs("\n## Results\n\n| Metric |", out);
    for (int c = 0; c < n; c++)
        fprintf(out, " %s |", column_name(&rows[c], name, sizeof name));
    fputs("\n|---|", out);
    for (int c = 0; c < n; c++)
        fputs("---:|", out);
    fputc('\n', out);
    metric m[MAX_METRICS];
    int n_metrics = table_metrics(m);
    for (int k = 0; k < n_metrics; k++) {
        fprintf(out, "| %s |", m[k].md_name);
        for (int c = 0; c < n; c++) {
            format_cell(cell, sizeof cell, &m[k], &rows[c]);
            fprintf(out, " %s |", cell);
        }
        fputc('\n', out);
    }
    fputs("\nRates are over every task of the column: failures, missing solutions and infra "
          "errors count\nagainst it, as in the paper. Faster: speed-up > 1; the 5% rule: "
          "> 1.05. Geomeans are over\nthe correct tasks timed against that baseline (their "
          "count in brackets). fast_p (KernelBench):\ncorrect and speed-up vs. eager > p.\n",
          out);
}

/* A number field as a cell, "-" when absent or null. */
static void md_number(FILE *out, const json_t *task, const char *key, const char *fmt)
{
    const json_t *v = json_object_get(task, key);
    if (json_is_number(v))
        fprintf(out, fmt, json_number_value(v));
    else
        fputs("-", out);
}

static void md_string(FILE *out, const json_t *task, const char *key)
{
    const char *s = json_string_value(json_object_get(task, key));
    md_text(out, s && *s ? s : "-");
}

static void md_task_row(FILE *out, const json_t *task)
{
    fputs("| ", out);
    md_string(out, task, "task_id");
    fputs(" | ", out);
    md_string(out, task, "status");
    fputs(" | ", out);
    md_number(out, task, "t_candidate_ms", "%.4f");
    fputs(" | ", out);
    md_number(out, task, "t_eager_ms", "%.4f");
    fputs(" | ", out);
    md_number(out, task, "t_compile_ms", "%.4f");
    fputs(" | ", out);
    md_number(out, task, "speedup_eager", "%.2f");
    fputs(" | ", out);
    md_number(out, task, "speedup_compile", "%.2f");
    fputs(" | ", out);
    md_string(out, task, "error_code");
    fputs(" |\n", out);
}

static void md_tasks(FILE *out, const json_t *tasks)
{
    fputs("\n## Tasks\n\n| Task | Status | Candidate ms | Eager ms | Compile ms | "
          "Speed-up vs. Eager | Speed-up vs. Compile | Error code |\n"
          "|---|---|---:|---:|---:|---:|---:|---|\n",
          out);
    size_t i;
    const json_t *task;
    json_array_foreach(tasks, i, task)
    {
        md_task_row(out, task);
    }
}

int bench_write_report_md(FILE *out, const bench_row *rows, int n, const json_t *tasks,
                          const json_t *meta)
{
    md_header(out, meta);
    print_measured_on(out, "- **measured on**: ", tasks, true);
    if (n > 0)
        md_infra_warning(out, &rows[n - 1]);
    md_table(out, rows, n);
    md_tasks(out, tasks);
    return fflush(out) == 0 && !ferror(out) ? 0 : -1;
}

/* ---- the summary ---- */

enum {
    SUMMARY_WIDTH = 99,   /* one terminal line, under 100 columns */
    SUMMARY_LABEL = 22,   /* the metric's name */
    SUMMARY_CELL = 11,    /* "12.34 (250)" */
    SUMMARY_MAX_COLS = 7, /* (99 - 22) / 11 */
};

/* The statuses of metrics.h, in the order a reader looks for them. */
static const char *const STATUSES[] = {"correct", "incorrect", "compile_error", "runtime_error",
                                       "timeout", "forbidden", "missing",       "infra_error"};
#define N_STATUSES (sizeof STATUSES / sizeof STATUSES[0])

/* Which rows fit as columns: all of them, or the first levels and Overall (the last row). */
static int summary_columns(int n, int *cols)
{
    int shown = n <= SUMMARY_MAX_COLS ? n : SUMMARY_MAX_COLS;
    for (int c = 0; c < shown - 1; c++)
        cols[c] = c;
    cols[shown - 1] = n - 1;
    return shown;
}

static void summary_table(FILE *out, const bench_row *rows, int n)
{
    int cols[SUMMARY_MAX_COLS];
    int shown = summary_columns(n, cols);
    char cell[48];
    fprintf(out, "%-*s", SUMMARY_LABEL, "");
    for (int c = 0; c < shown; c++) {
        const bench_row *row = &rows[cols[c]];
        fprintf(out, "%*s", SUMMARY_CELL, is_overall(row) ? "Overall" : row->label);
    }
    fputc('\n', out);
    metric m[MAX_METRICS];
    int n_metrics = table_metrics(m);
    for (int k = 0; k < n_metrics; k++) {
        if (!m[k].in_summary)
            continue;
        fprintf(out, "%-*s", SUMMARY_LABEL, m[k].short_name);
        for (int c = 0; c < shown; c++) {
            format_cell(cell, sizeof cell, &m[k], &rows[cols[c]]);
            fprintf(out, "%*s", SUMMARY_CELL, cell);
        }
        fputc('\n', out);
    }
    if (shown < n)
        fprintf(out, "(%d more levels in report.md)\n", n - shown);
}

static int status_index(const char *status)
{
    for (size_t s = 0; s < N_STATUSES; s++)
        if (strcmp(status, STATUSES[s]) == 0)
            return (int)s;
    return (int)N_STATUSES; /* any other: counted as "other" */
}

/* "status: correct 245, incorrect 2, ...", the statuses present only, wrapped to the width. */
static void summary_statuses(FILE *out, const json_t *tasks)
{
    int counts[N_STATUSES + 1] = {0};
    size_t i;
    const json_t *task;
    json_array_foreach(tasks, i, task)
    {
        const char *status = json_string_value(json_object_get(task, "status"));
        counts[status ? status_index(status) : (int)N_STATUSES]++;
    }
    int column = fprintf(out, "status:");
    bool first = true;
    for (size_t s = 0; s <= N_STATUSES; s++) {
        if (counts[s] == 0)
            continue;
        char item[48];
        text_fmt(item, sizeof item, "%s %d", s < N_STATUSES ? STATUSES[s] : "other", counts[s]);
        if (first) {
            column += fprintf(out, " %s", item);
        } else if (column + 2 + (int)strlen(item) > SUMMARY_WIDTH) {
            fputs(",\n", out);
            column = fprintf(out, "        %s", item);
        } else {
            column += fprintf(out, ", %s", item);
        }
        first = false;
    }
    fputc('\n', out);
}

void bench_print_summary(FILE *out, const bench_row *rows, int n, const json_t *tasks)
{
    if (n <= 0)
        return;
    const bench_row *overall = &rows[n - 1];
    fprintf(out, "kgym-bench: %d tasks, %d correct (%.1f%%)", overall->n, overall->passed,
            overall->n > 0 ? 100.0 * overall->passed / overall->n : 0.0);
    if (overall->infra > 0)
        fprintf(out, ", %d infra error%s: not a clean measurement", overall->infra,
                overall->infra == 1 ? "" : "s");
    fputc('\n', out);
    print_measured_on(out, "measured on: ", tasks, false);
    summary_table(out, rows, n);
    summary_statuses(out, tasks);
}
