/* kgym-bench: KernelBench-style regression runs over a kgym-env server (see README.md). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/http.h"
#include "bench/metrics.h"
#include "bench/run.h"

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
        "  diff OLD NEW  compare two results folders (or results.json files); exit 1 on a\n"
        "             regression (a task newly failing or slower beyond the noise)\n"
        "\n"
        "run / baselines options:\n"
        "  --kernelbench PATH   KernelBench checkout folder or {level,problem_id,name,code} JSONL\n"
        "  --tasks PATH         a kgym task store instead (solutions laid out as <task_id>/)\n"
        "  --solutions DIR      level<L>/<P>/ workspaces or level<L>/<P>_<name>.py files (run)\n"
        "  --out DIR            results folder (run; default results/run); a run there resumes\n"
        "  --levels 1,2,3       levels to evaluate (default all)\n"
        "  --only ID[,ID...]    only these task ids (repeatable), e.g. kb/L1/19\n"
        "  --server URL         a running kgym-env (default: start one on a free port)\n"
        "  --server-bin PATH    kgym-env to start (default: beside kgym-bench)\n"
        "  --server-arg ARG     pass ARG to the started server (repeatable)\n"
        "  --python PATH        Python with torch for the started server (--sandbox-python)\n"
        "  --variant gpu|cpu    evaluate on the GPU (default) or on the CPU\n"
        "  --jobs N             parallel evaluations (default: one per GPU; 1 on the CPU;\n"
        "                       baselines: 3 per GPU, which the server overlaps, one timing\n"
        "                       at a time while the others start)\n"
        "  --task-timeout S     one task's whole evaluation (default 1800)\n"
        "  --restart            discard an earlier run in --out instead of resuming it\n"
        "  --quiet              no progress lines\n"
        "  --file PATH          baselines: the output file (default results/baselines.json)\n"
        "  --warmup-jobs N      baselines: torch.compile warm-ups run first, untimed, N at a\n"
        "                       time under shared GPU leases (default 2 per GPU; 0: none)\n"
        "diff options:\n"
        "  --min-change F       smallest relative time change reported (default 0.10)\n"
        "\n"
        "Exit status: 0 done, 1 usage or setup error (or a diff regression), 2 infra errors\n"
        "(the table is not clean), 3 interrupted (run again to resume).\n",
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
    {"task-timeout", required_argument, NULL, OPT_TIMEOUT},
    {"restart", no_argument, NULL, OPT_RESTART},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"file", required_argument, NULL, OPT_FILE},
    {"min-change", required_argument, NULL, OPT_MIN_CHANGE},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int parse_levels(const char *s, unsigned *mask)
{
    *mask = 0;
    char *copy = strdup(s), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 1 || v > 30) {
            rc = -1;
            break;
        }
        *mask |= 1u << v;
    }
    free(copy);
    return rc == 0 && *mask ? 0 : -1;
}

/* --only takes a comma list too; the strings live as long as the process (argv's copies). */
static int add_only(bench_opts *o, char *arg)
{
    char *save = NULL;
    for (char *tok = strtok_r(arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_only >= BENCH_MAX_ONLY)
            return -1;
        o->only[o->n_only++] = tok;
    }
    return 0;
}

static int bad(const char *what, const char *arg)
{
    fprintf(stderr, "kgym-bench: bad %s '%s' (see kgym-bench --help)\n", what, arg);
    return 1;
}

static int parse(int argc, char **argv, bench_opts *o, const char **file, double *min_change)
{
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "h", LONG_OPTS, NULL)) != -1) {
        char *end;
        switch (c) {
        case OPT_KB:
            o->kernelbench = optarg;
            break;
        case OPT_TASKS:
            o->tasks = optarg;
            break;
        case OPT_SOLUTIONS:
            o->solutions = optarg;
            break;
        case OPT_OUT:
            o->out_dir = optarg;
            break;
        case OPT_LEVELS:
            if (parse_levels(optarg, &o->levels) != 0)
                return bad("--levels", optarg);
            break;
        case OPT_ONLY:
            if (add_only(o, optarg) != 0)
                return bad("--only (too many ids)", optarg);
            break;
        case OPT_SERVER:
            o->server_url = optarg;
            break;
        case OPT_SERVER_BIN:
            o->server_bin = optarg;
            break;
        case OPT_SERVER_ARG:
            if (o->n_server_args >= BENCH_MAX_SERVER_ARGS)
                return bad("--server-arg (too many)", optarg);
            o->server_args[o->n_server_args++] = optarg;
            break;
        case OPT_PYTHON:
            o->python = optarg;
            break;
        case OPT_VARIANT:
            if (strcmp(optarg, "gpu") != 0 && strcmp(optarg, "cpu") != 0)
                return bad("--variant", optarg);
            o->variant = optarg;
            break;
        case OPT_JOBS:
            o->jobs = (int)strtol(optarg, &end, 10);
            if (*end || o->jobs < 1 || o->jobs > 64)
                return bad("--jobs (1..64)", optarg);
            break;
        case OPT_WARMUP_JOBS:
            o->warmup_jobs = (int)strtol(optarg, &end, 10);
            if (*end || o->warmup_jobs < 0 || o->warmup_jobs > 64)
                return bad("--warmup-jobs (0..64)", optarg);
            break;
        case OPT_TIMEOUT:
            o->task_timeout_s = strtod(optarg, &end);
            if (*end || !(o->task_timeout_s >= 1))
                return bad("--task-timeout", optarg);
            break;
        case OPT_RESTART:
            o->restart = true;
            break;
        case OPT_QUIET:
            o->quiet = true;
            break;
        case OPT_FILE:
            *file = optarg;
            break;
        case OPT_MIN_CHANGE:
            *min_change = strtod(optarg, &end);
            if (*end || !(*min_change >= 0 && *min_change < 10))
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

/* A results folder or a results.json file -> its "tasks" array (a new reference). */
static json_t *load_tasks_of(const char *path)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    size_t n = strlen(p);
    if (n < 5 || strcmp(p + n - 5, ".json") != 0)
        snprintf(p, sizeof p, "%s/results.json", path);
    json_error_t e;
    json_t *root = json_load_file(p, 0, &e);
    json_t *tasks = json_object_get(root, "tasks");
    if (!json_is_array(tasks)) {
        fprintf(stderr, "kgym-bench: %s: %s\n", p, root ? "no \"tasks\" array" : e.text);
        json_decref(root);
        return NULL;
    }
    json_incref(tasks);
    json_decref(root);
    return tasks;
}

static int cmd_diff(int argc, char **argv, double min_change)
{
    if (argc - optind != 2) {
        fprintf(stderr, "kgym-bench: diff needs OLD and NEW (results folders or results.json)\n");
        return 1;
    }
    json_t *old = load_tasks_of(argv[optind]), *new = load_tasks_of(argv[optind + 1]);
    int rc = 1;
    if (old && new) {
        json_t *d = NULL;
        char err[512];
        int reg = bench_diff(old, new, min_change, &d, err, sizeof err);
        if (reg < 0) {
            fprintf(stderr, "kgym-bench: diff: %s\n", err);
        } else {
            bench_print_diff(stdout, d);
            rc = reg > 0 ? 1 : 0;
        }
        json_decref(d);
    }
    json_decref(old);
    json_decref(new);
    return rc;
}

int main(int argc, char **argv)
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
        return 1;
    if (strcmp(cmd, "diff") == 0)
        return cmd_diff(argc, argv, min_change);
    if (optind != argc && strcmp(cmd, "report") != 0) {
        fprintf(stderr, "kgym-bench: unexpected argument '%s'\n", argv[optind]);
        return 1;
    }
    if (strcmp(cmd, "report") == 0) {
        if (argc - optind > 1)
            return bad("argument", argv[optind + 1]);
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
    if (strcmp(cmd, "run") == 0 && !o.solutions) {
        fprintf(stderr, "kgym-bench: run needs --solutions DIR\n");
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
