/* kgym-bench: KernelBench-style regression runs over a kgym-env server (see README.md). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/http.h"
#include "bench/metrics.h"
#include "bench/run.h"
#include "util/text.h"

static void usage(FILE *out)
{
    fputs(
        "usage: kgym-bench <command> [options]\n"
        "\n"
        "commands:\n"
        "  run        evaluate a folder of solutions; writes RESULTS_DIR/{results.jsonl,\n"
        "             results.json, report.md, meta.json} and prints the summary\n"
        "  baselines  measure (or reuse) eager and torch.compile times of the selected tasks\n"
        "  report     rewrite results.json/report.md of RESULTS_DIR from its results.jsonl\n"
        "  diff OLD NEW  compare two results folders (or results.json files); exit 0 no\n"
        "             regression, 1 a regression (a task newly failing or slower beyond the\n"
        "             noise; a task correct in OLD that NEW lacks; one correct in both that\n"
        "             NEW holds no time for; NEW a PARTIAL run), 2 nothing compared (an input\n"
        "             unreadable or malformed, runs of two variants, bad arguments, or the\n"
        "             output could not be written)\n"
        "\n"
        "run / baselines options:\n"
        "  --kernelbench PATH   KernelBench checkout folder or {level,problem_id,name,code} JSONL\n"
        "  --tasks PATH         a kgym task store instead (solutions laid out as <task_id>/)\n"
        "                       (with --server, PATH is not read: --kernelbench takes the\n"
        "                       server's KernelBench tasks, --tasks its others, both all)\n"
        "  --solutions DIR      level<L>/<P>/ workspaces or level<L>/<P>_<name>.py files (run)\n"
        "  --out DIR            results folder (run; default results/run); a run there resumes\n"
        "  --levels 1,2,3       levels to evaluate, 1-100 (default all)\n"
        "  --only ID[,ID...]    only these task ids (repeatable), e.g. kb/L1/19\n"
        "  --server URL         a running kgym-env (default: start one on a free port)\n"
        "  --server-bin PATH    kgym-env to start (default: beside kgym-bench; not with --server)\n"
        "  --server-arg ARG     pass ARG to the started server (repeatable; not with --server)\n"
        "  --python PATH        Python with torch for the started server (--sandbox-python;\n"
        "                       not with --server)\n"
        "  --variant gpu|cpu    evaluate on the GPU (default) or on the CPU\n"
        "  --jobs N             parallel evaluations (default: one per GPU; 1 on the CPU;\n"
        "                       baselines: 3 per GPU, which the server overlaps, one timing\n"
        "                       at a time while the others start)\n"
        "  --task-timeout S     one task's whole evaluation (default 1800; 1 to 604800, a week)\n"
        "  --restart            discard an earlier run in --out instead of resuming it\n"
        "  --quiet              no progress lines\n"
        "  --file PATH          baselines: the output file (default results/baselines.json),\n"
        "                       locked while it runs (PATH.lock); it holds one variant, device\n"
        "                       and torch version: a file measured elsewhere is refused\n"
        "  --warmup-jobs N      baselines: torch.compile warm-ups run first, untimed, N at a\n"
        "                       time under shared GPU leases (default 2 per GPU; 0: none)\n"
        "  --remeasure-above CV baselines: also measure again the stored tasks whose eager or\n"
        "                       compile spread (coefficient of variation) is above CV, past\n"
        "                       the server's cache; the new figures replace the old\n"
        "                       (once per record: it is marked \"remeasured\")\n"
        "diff options:\n"
        "  --min-change F       smallest relative time change reported (default 0.10)\n"
        "\n"
        "An option that does not apply to the command is refused.\n"
        "Exit status: 0 done, 1 usage or setup error, 2 infra errors (the table is not clean),\n"
        "3 interrupted (run again to resume; report: the folder is PARTIAL); diff: 0, 1 or 2\n"
        "as above.\n",
        out);
}

enum {
    OPT_KB = 1000,
    OPT_TASKS,
    OPT_SOLUTIONS,
    OPT_OUT,
    OPT_LEVELS,
    OPT_ONLY,
    OPT_SERVER,
    OPT_SERVER_BIN,
    OPT_SERVER_ARG,
    OPT_PYTHON,
    OPT_VARIANT,
    OPT_JOBS,
    OPT_WARMUP_JOBS,
    OPT_REMEASURE,
    OPT_TIMEOUT,
    OPT_RESTART,
    OPT_QUIET,
    OPT_FILE,
    OPT_MIN_CHANGE,
    OPT_HELP,
};

static const struct option LONG_OPTS[] = {
    {"kernelbench", required_argument, NULL, OPT_KB},
    {"tasks", required_argument, NULL, OPT_TASKS},
    {"solutions", required_argument, NULL, OPT_SOLUTIONS},
    {"out", required_argument, NULL, OPT_OUT},
    {"levels", required_argument, NULL, OPT_LEVELS},
    {"only", required_argument, NULL, OPT_ONLY},
    {"server", required_argument, NULL, OPT_SERVER},
    {"server-bin", required_argument, NULL, OPT_SERVER_BIN},
    {"server-arg", required_argument, NULL, OPT_SERVER_ARG},
    {"python", required_argument, NULL, OPT_PYTHON},
    {"variant", required_argument, NULL, OPT_VARIANT},
    {"jobs", required_argument, NULL, OPT_JOBS},
    {"warmup-jobs", required_argument, NULL, OPT_WARMUP_JOBS},
    {"remeasure-above", required_argument, NULL, OPT_REMEASURE},
    {"task-timeout", required_argument, NULL, OPT_TIMEOUT},
    {"restart", no_argument, NULL, OPT_RESTART},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"file", required_argument, NULL, OPT_FILE},
    {"min-change", required_argument, NULL, OPT_MIN_CHANGE},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* The longest --task-timeout: a week. Beyond it the value is a typo (or inf), and its
 * milliseconds would overflow the HTTP client's long. */
#define MAX_TASK_TIMEOUT_S (7 * 24 * 3600.0)

/* --levels 1,2,3: marks each in o->level_on. -1 on an empty list or a level outside 1-100. */
static int parse_levels(const char *s, bench_opts *o)
{
    memset(o->level_on, 0, sizeof o->level_on);
    o->levels_given = false;
    char *copy = strdup(s), *save = NULL;
    int rc = copy ? 0 : -1;
    for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 1 || v > BENCH_MAX_LEVEL) {
            rc = -1;
            break;
        }
        o->level_on[v] = o->levels_given = true;
    }
    free(copy);
    return rc == 0 && o->levels_given ? 0 : -1;
}

/* --only takes a comma list too; the strings live as long as the process (argv's copies).
 * -1 when it holds no id (--only "" would otherwise select every task) or too many. */
static int add_only(bench_opts *o, char *arg)
{
    char *save = NULL;
    int added = 0;
    for (char *tok = strtok_r(arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_only >= BENCH_MAX_ONLY)
            return -1;
        o->only[o->n_only++] = tok;
        added++;
    }
    return added > 0 ? 0 : -1;
}

/* Whether path is a directory; errno says why not (0: it exists but is something else). */
static bool is_directory(const char *path)
{
    struct stat st;
    errno = 0;
    if (stat(path, &st) != 0)
        return false;
    errno = 0;
    return S_ISDIR(st.st_mode);
}

static int bad(const char *what, const char *arg)
{
    fprintf(stderr, "kgym-bench: bad %s '%s' (see kgym-bench --help)\n", what, arg);
    return 1;
}

/* An integer option in [lo, hi]. Parsed as a long first: an int cast of 4294967297 would pass
 * as 1. 0 or -1. */
static int int_in_range(const char *arg, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end || errno != 0 || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* A number option in [lo, hi] (NaN and inf fail the comparison). 0 or -1. */
static int number_in_range(const char *arg, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(arg, &end);
    if (end == arg || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

/* A path or URL option (what: "a path", "a URL"): an empty one (an unset shell variable, most
 * likely) is refused rather than taken as the current folder or the root. */
static int nonempty_option(const char *option, const char *what, const char *arg, const char **dst)
{
    if (arg[0] == '\0') {
        fprintf(stderr, "kgym-bench: %s needs %s, not an empty string\n", option, what);
        return 1;
    }
    *dst = arg;
    return 0;
}

/* Whether option c means anything to cmd: one that does not is refused, never dropped unsaid
 * (`run --file B` would read as "use these baselines", `run --min-change` as a diff setting).
 * An unknown command is left to main's own message. */
static bool option_applies(const char *cmd, int c)
{
    if (c == OPT_HELP || c == 'h')
        return true;
    if (strcmp(cmd, "run") == 0)
        return c != OPT_FILE && c != OPT_WARMUP_JOBS && c != OPT_REMEASURE && c != OPT_MIN_CHANGE;
    if (strcmp(cmd, "baselines") == 0)
        return c != OPT_SOLUTIONS && c != OPT_RESTART && c != OPT_MIN_CHANGE;
    if (strcmp(cmd, "report") == 0)
        return c == OPT_OUT;
    if (strcmp(cmd, "diff") == 0)
        return c == OPT_MIN_CHANGE;
    return true;
}

static const char *long_name(int c)
{
    for (const struct option *opt = LONG_OPTS; opt->name; opt++)
        if (opt->val == c)
            return opt->name;
    return "?";
}

static int parse(int argc, char **argv, bench_opts *o, const char **file, double *min_change)
{
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "h", LONG_OPTS, NULL)) != -1) {
        if (c != '?' && !option_applies(argv[1], c)) {
            fprintf(stderr, "kgym-bench: --%s does not apply to %s (see kgym-bench --help)\n",
                    long_name(c), argv[1]);
            return 1;
        }
        switch (c) {
        case OPT_KB:
            if (nonempty_option("--kernelbench", "a path", optarg, &o->kernelbench) != 0)
                return 1;
            break;
        case OPT_TASKS:
            if (nonempty_option("--tasks", "a path", optarg, &o->tasks) != 0)
                return 1;
            break;
        case OPT_SOLUTIONS:
            if (nonempty_option("--solutions", "a path", optarg, &o->solutions) != 0)
                return 1;
            break;
        case OPT_OUT:
            if (nonempty_option("--out", "a path", optarg, &o->out_dir) != 0)
                return 1;
            break;
        case OPT_LEVELS:
            if (parse_levels(optarg, o) != 0)
                return bad("--levels", optarg);
            break;
        case OPT_ONLY:
            if (add_only(o, optarg) != 0)
                return bad("--only (no task id, or too many ids)", optarg);
            break;
        case OPT_SERVER:
            if (nonempty_option("--server", "a URL", optarg, &o->server_url) != 0)
                return 1;
            break;
        case OPT_SERVER_BIN:
            if (nonempty_option("--server-bin", "a path", optarg, &o->server_bin) != 0)
                return 1;
            break;
        case OPT_SERVER_ARG:
            if (o->n_server_args >= BENCH_MAX_SERVER_ARGS)
                return bad("--server-arg (too many)", optarg);
            o->server_args[o->n_server_args++] = optarg;
            break;
        case OPT_PYTHON:
            if (nonempty_option("--python", "a path", optarg, &o->python) != 0)
                return 1;
            break;
        case OPT_VARIANT:
            if (strcmp(optarg, "gpu") != 0 && strcmp(optarg, "cpu") != 0)
                return bad("--variant", optarg);
            o->variant = optarg;
            break;
        case OPT_JOBS:
            if (int_in_range(optarg, 1, 64, &o->jobs) != 0)
                return bad("--jobs (1..64)", optarg);
            break;
        case OPT_WARMUP_JOBS:
            if (int_in_range(optarg, 0, 64, &o->warmup_jobs) != 0)
                return bad("--warmup-jobs (0..64)", optarg);
            break;
        case OPT_REMEASURE:
            if (number_in_range(optarg, 0, 100, &o->remeasure_above) != 0 ||
                o->remeasure_above <= 0)
                return bad("--remeasure-above (a spread above 0, e.g. 0.1)", optarg);
            break;
        case OPT_TIMEOUT:
            if (number_in_range(optarg, 1, MAX_TASK_TIMEOUT_S, &o->task_timeout_s) != 0)
                return bad("--task-timeout (1 to 604800 seconds, a week)", optarg);
            break;
        case OPT_RESTART:
            o->restart = true;
            break;
        case OPT_QUIET:
            o->quiet = true;
            break;
        case OPT_FILE:
            if (nonempty_option("--file", "a path", optarg, file) != 0)
                return 1;
            break;
        case OPT_MIN_CHANGE:
            if (number_in_range(optarg, 0, 10, min_change) != 0 || *min_change >= 10)
                return bad("--min-change", optarg);
            break;
        case OPT_HELP:
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return bad("option", argv[optind - 1]);
        }
    }
    return 0;
}

/* meta.selection, when there is one (a hand-made results.json may have none), is what PARTIAL
 * is judged by: an array of objects with a string task_id. */
static bool selection_is_valid(const json_t *root)
{
    const json_t *selection = json_object_get(json_object_get(root, "meta"), "selection");
    if (!selection)
        return true;
    if (!json_is_array(selection))
        return false;
    size_t i;
    const json_t *t;
    json_array_foreach(selection, i, t)
    {
        if (!json_is_string(json_object_get(t, "task_id")))
            return false;
    }
    return true;
}

/* One side of a diff: a results folder or a results.json file, as read. */
typedef struct diff_run {
    const char *which; /* "OLD" or "NEW" */
    char path[PATH_MAX];
    json_t *root;
    const json_t *tasks;
} diff_run;

/* Reads a run's results.json. 0, or -1 with the reason printed: a file that cannot be read, or
 * one that is not a results document ("malformed input", never a regression). */
static int load_run(const char *arg, diff_run *r)
{
    size_t n = strlen(arg);
    bool is_file = n >= 5 && strcmp(arg + n - 5, ".json") == 0;
    if (!text_fmt(r->path, sizeof r->path, is_file ? "%s" : "%s/results.json", arg)) {
        fprintf(stderr, "kgym-bench: diff: %s %s: the path is too long\n", r->which, arg);
        return -1;
    }
    json_error_t e;
    r->root = json_load_file(r->path, JSON_REJECT_DUPLICATES, &e); /* which "tasks" would win? */
    if (!r->root && json_error_code(&e) == json_error_cannot_open_file) {
        fprintf(stderr, "kgym-bench: diff: cannot read %s %s, nothing compared: %s\n", r->which,
                r->path, e.text);
        return -1;
    }
    if (!r->root) {
        fprintf(stderr,
                "kgym-bench: diff: malformed input, nothing compared: %s %s: %s (line %d)\n",
                r->which, r->path, e.text, e.line);
        return -1;
    }
    r->tasks = json_object_get(r->root, "tasks");
    const char *bad = !json_is_array(r->tasks)       ? "has no \"tasks\" array"
                      : !selection_is_valid(r->root) ? "has a meta.selection that is not an array "
                                                       "of {task_id} objects"
                                                     : NULL;
    if (bad) {
        fprintf(stderr, "kgym-bench: diff: malformed input, nothing compared: %s %s %s\n", r->which,
                r->path, bad);
        return -1;
    }
    return 0;
}

/* The variant a run was evaluated in (meta.variant, written by run), NULL when it names none. */
static const char *run_variant(const diff_run *r)
{
    return json_string_value(json_object_get(json_object_get(r->root, "meta"), "variant"));
}

static bool holds_task(const json_t *tasks, const char *id)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tasks, i, t)
    {
        const char *tid = json_string_value(json_object_get(t, "task_id"));
        if (tid && strcmp(tid, id) == 0)
            return true;
    }
    return false;
}

/* Whether the run is PARTIAL, and why, in why: some tasks of its selection (meta.selection,
 * written by `run`) have no result. A results.json without a selection (hand-made) counts as
 * whole. */
static bool is_partial(const diff_run *r, char *why, size_t whycap)
{
    const json_t *meta = json_object_get(r->root, "meta");
    const json_t *selection = json_object_get(meta, "selection");
    size_t missing = 0, i;
    const json_t *t;
    json_array_foreach(selection, i, t)
    {
        const char *id = json_string_value(json_object_get(t, "task_id"));
        if (id && !holds_task(r->tasks, id))
            missing++;
    }
    if (missing)
        text_fmt(why, whycap, "%zu of %zu selected tasks without a result", missing,
                 json_array_size(selection));
    return missing > 0;
}

/* A PARTIAL NEW fails the check whatever its tasks say: what it did not evaluate may have
 * regressed (its tasks correct in OLD are listed as newly failing already). Returns whether
 * NEW is partial. A PARTIAL OLD is only noted: its missing tasks show as added. */
static bool report_partial(const diff_run *old_run, const diff_run *new_run)
{
    char why[128];
    if (is_partial(old_run, why, sizeof why))
        printf("note: OLD %s is PARTIAL (%s)\n", old_run->path, why);
    if (!is_partial(new_run, why, sizeof why))
        return false;
    printf("NEW %s is PARTIAL (%s): a partial run does not pass the regression check; resume "
           "it, then diff again\n",
           new_run->path, why);
    return true;
}

/* A CPU run's times against a GPU run's would read as a thousandfold regression or gain: such
 * runs are not compared (a run that names no variant, hand-made, is taken to match). */
static bool same_variant(const diff_run *old_run, const diff_run *new_run)
{
    const char *old_v = run_variant(old_run), *new_v = run_variant(new_run);
    if (!old_v || !new_v || strcmp(old_v, new_v) == 0)
        return true;
    fprintf(stderr,
            "kgym-bench: diff: not comparable, nothing compared: OLD %s was evaluated on the %s "
            "variant, NEW %s on the %s variant\n",
            old_run->path, old_v, new_run->path, new_v);
    return false;
}

enum { DIFF_SAME = 0, DIFF_REGRESSION = 1, DIFF_NOT_COMPARED = 2 };

/* Exit status as diff(1)'s: DIFF_SAME, DIFF_REGRESSION (the diff and its summary on stdout), or
 * DIFF_NOT_COMPARED (bad arguments, an input unreadable or malformed; why on stderr), so that a
 * CI job never takes a broken results file for a regression or the other way round. */
static int cmd_diff(int argc, char **argv, double min_change)
{
    if (argc - optind != 2 || !argv[optind][0] || !argv[optind + 1][0]) {
        fprintf(stderr, "kgym-bench: diff needs OLD and NEW (results folders or results.json)\n");
        return DIFF_NOT_COMPARED;
    }
    diff_run old_run = {.which = "OLD"}, new_run = {.which = "NEW"};
    int rc = DIFF_NOT_COMPARED;
    if (load_run(argv[optind], &old_run) == 0 && load_run(argv[optind + 1], &new_run) == 0 &&
        same_variant(&old_run, &new_run)) {
        json_t *d = NULL;
        char err[512];
        int reg = bench_diff(old_run.tasks, new_run.tasks, min_change, &d, err, sizeof err);
        if (reg < 0) {
            fprintf(stderr,
                    "kgym-bench: diff: malformed input, nothing compared: %s (OLD %s, NEW %s)\n",
                    err, old_run.path, new_run.path);
        } else {
            bench_print_diff(stdout, d);
            bool partial = report_partial(&old_run, &new_run);
            rc = reg > 0 || partial ? DIFF_REGRESSION : DIFF_SAME;
        }
        json_decref(d);
    }
    json_decref(old_run.root);
    json_decref(new_run.root);
    return rc;
}

static int run_command(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    bench_opts o = {
        .variant = "gpu", .task_timeout_s = 1800, .warmup_jobs = -1, .out_dir = "results/run"};
    const char *file = "results/baselines.json";
    double min_change = 0.10;
    const char *cmd = argv[1];
    if (parse(argc, argv, &o, &file, &min_change) != 0)
        return strcmp(cmd, "diff") == 0 ? DIFF_NOT_COMPARED : 1;
    if (strcmp(cmd, "diff") == 0)
        return cmd_diff(argc, argv, min_change);
    if (optind != argc && strcmp(cmd, "report") != 0) {
        fprintf(stderr, "kgym-bench: unexpected argument '%s'\n", argv[optind]);
        return 1;
    }
    if (strcmp(cmd, "report") == 0) {
        if (argc - optind > 1)
            return bad("argument", argv[optind + 1]);
        if (argc - optind == 1 && !argv[optind][0]) {
            fprintf(stderr, "kgym-bench: report needs a results folder, not an empty string\n");
            return 1;
        }
        return bench_report(argc - optind == 1 ? argv[optind] : o.out_dir);
    }
    if (strcmp(cmd, "run") != 0 && strcmp(cmd, "baselines") != 0) {
        fprintf(stderr, "kgym-bench: unknown command '%s' (see kgym-bench --help)\n", cmd);
        return 1;
    }
    if (!o.kernelbench && !o.tasks && !o.server_url) {
        fprintf(stderr, "kgym-bench: give --kernelbench PATH or --tasks PATH (or --server URL)\n");
        return 1;
    }
    if (o.server_url && (o.python || o.server_bin || o.n_server_args > 0)) {
        fprintf(stderr,
                "kgym-bench: %s sets up the private server kgym-bench starts; with --server "
                "URL that server's own settings apply: leave it out\n",
                o.python       ? "--python"
                : o.server_bin ? "--server-bin"
                               : "--server-arg");
        return 1;
    }
    if (strcmp(cmd, "run") == 0 && !o.solutions) {
        fprintf(stderr, "kgym-bench: run needs --solutions DIR\n");
        return 1;
    }
    if (strcmp(cmd, "run") == 0 && !is_directory(o.solutions)) {
        /* said now: a mistyped folder would otherwise score every task as having no solution */
        fprintf(stderr, "kgym-bench: --solutions %s: %s\n", o.solutions,
                errno ? strerror(errno) : "not a directory");
        return 1;
    }
    if (bench_http_global_init() != 0) {
        fprintf(stderr, "kgym-bench: libcurl failed to initialise\n");
        return 1;
    }
    int rc;
    if (strcmp(cmd, "run") == 0) {
        rc = bench_run(&o);
    } else {
        rc = bench_baselines(&o, file);
    }
    bench_http_global_deinit();
    return rc;
}

int main(int argc, char **argv)
{
    /* a closed pipe on stdout is an error to report (below), not a silent death by SIGPIPE */
    signal(SIGPIPE, SIG_IGN);
    int rc = run_command(argc, argv);
    /* the table, the summary or the diff on stdout: a full disk or a closed pipe there is a
     * failure, never an exit 0 with the output lost */
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kgym-bench: cannot write to stdout%s%s\n", errno ? ": " : "",
                errno ? strerror(errno) : "");
        bool diff = argc > 1 && strcmp(argv[1], "diff") == 0; /* 1 would read "regression" */
        return rc != 0 && !diff ? rc : diff ? DIFF_NOT_COMPARED : 1;
    }
    return rc;
}
