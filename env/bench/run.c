/* run: kgym-bench run and report (see run.h). */
#include "bench/run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/common.h"
#include "bench/http.h"
#include "bench/local_server.h"
#include "bench/metrics.h"
#include "bench/solution.h"
#include "trajectory.h"
#include "util/strbuf.h"
#include "util/text.h"

/* Table rows: one per level a task may have (0 to BENCH_MAX_LEVEL) plus the overall row, so
 * any selection fits: a run never evaluates everything and then fails to tabulate it. */
#define MAX_LEVEL_ROWS (BENCH_MAX_LEVEL + 2)
/* ---- results.jsonl: the durable log ------------------------------------------------------- */

/* What results.jsonl holds, by task id (the last valid line for an id wins): done, the results
 * that stand; infra, the ids whose last result is an infra_error (retried by a run, still
 * shown by the table). A line that is not JSON, or not a result the table can count, is passed
 * over, its task evaluated again; with warn, said with its line number (a torn last line, a
 * crash mid-write, is cut by cut_torn_tail before a run and not worth a word). */
typedef struct results_log {
    json_t *done, *infra;
} results_log;

static results_log read_results_log(const char *path, bool warn)
{
    results_log log = {json_object(), json_object()};
    FILE *f = fopen(path, "re");
    if (!f)
        return log;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (long no = 1; (len = getline(&line, &cap, f)) > 0; no++) {
        bool last = line[len - 1] != '\n';
        if (strspn(line, " \t\r\n") == (size_t)len)
            continue; /* a blank line: no result, nothing to say */
        json_error_t jerr;
        char why[200];
        json_t *r = json_loadb(line, (size_t)len, 0, &jerr);
        if (!r || bench_check_result(r, why, sizeof why) != 0) {
            if (warn && !(last && !r))
                fprintf(stderr,
                        "kgym-bench: %s line %ld: %s: passed over (its task counts as "
                        "not evaluated)\n",
                        path, no, r ? why : "not JSON");
            /* as said: an earlier result of that task no longer stands either */
            const char *bad_id = json_string_value(json_object_get(r, "task_id"));
            if (bad_id) {
                json_object_del(log.done, bad_id);
                json_object_del(log.infra, bad_id);
            }
            json_decref(r);
            continue;
        }
        const char *id = json_string_value(json_object_get(r, "task_id"));
        bool infra = strcmp(json_string_value(json_object_get(r, "status")), "infra_error") == 0;
        json_object_set(infra ? log.infra : log.done, id, r);
        json_object_del(infra ? log.done : log.infra, id);
        json_decref(r);
    }
    free(line);
    fclose(f);
    return log;
}

static void results_log_free(results_log *log)
{
    json_decref(log->done);
    json_decref(log->infra);
}

static int append_line(int fd, const json_t *r)
{
    char *s = json_dumps(r, JSON_COMPACT);
    if (!s)
        return -1;
    size_t n = strlen(s);
    s[n] = '\n';
    ssize_t w = write(fd, s, n + 1); /* one write: O_APPEND keeps lines whole between threads */
    free(s);
    return w == (ssize_t)(n + 1) && fdatasync(fd) == 0 ? 0 : -1;
}

/* ---- one task ------------------------------------------------------------------------------ */

static void set_num(json_t *r, const char *k, double v)
{
    json_object_set_new(r, k, isfinite(v) ? json_real(v) : json_null());
}

/* r[k] = text, made valid UTF-8 first: a message cut to its buffer's size may end inside a
 * character, which jansson would refuse, silently dropping the field. */
static void set_text(json_t *r, const char *k, const char *text)
{
    char *clean = text_sanitize_utf8(text, strlen(text));
    if (clean)
        json_object_set_new(r, k, json_string(clean));
    free(clean);
}

/* r[k] = text (valid UTF-8: it came out of a JSON string) capped to cap bytes, head and tail
 * kept, cut on character boundaries; nothing when text is NULL. */
static void set_capped(json_t *r, const char *k, const char *text, size_t cap)
{
    if (!text)
        return;
    bool cut;
    char *capped = text_cap_head_tail(text, strlen(text), cap, &cut);
    if (capped)
        json_object_set_new(r, k, json_string(capped));
    free(capped);
}

/* The verdict's components -> the result's status and figures. */
static void fill_from_components(json_t *r, const json_t *c)
{
    const char *eval = json_string_value(json_object_get(c, "eval_status"));
    const char *code = json_string_value(json_object_get(c, "error_code"));
    const char *status = "incorrect";
    if (!eval || strcmp(eval, "ok") != 0)
        status = "infra_error";
    else if (json_is_false(json_object_get(c, "compiled")))
        status = "compile_error";
    else if (json_is_true(json_object_get(c, "correct")))
        status = "correct";
    else if (code && strcmp(code, "TIMEOUT") == 0)
        status = "timeout";
    else if (code && strcmp(code, "FORBIDDEN_CODE") == 0)
        status = "forbidden";
    else if (code && strcmp(code, "RUNTIME_ERROR") == 0)
        status = "runtime_error";
    json_object_set_new(r, "status", json_string(status));
    if (code)
        json_object_set_new(r, "error_code", json_string(code));
    set_capped(r, "error", json_string_value(json_object_get(c, "error")), 600);
    /* a compile error's reason is the compiler's output */
    if (strcmp(status, "compile_error") == 0)
        set_capped(r, "compile_log", json_string_value(json_object_get(c, "compile_log")), 4000);
    double tc = bench_num(c, "t_candidate_ms"), te = bench_num(c, "t_eager_ms"),
           tk = bench_num(c, "t_compile_ms");
    set_num(r, "reward", bench_num(c, "reward"));
    set_num(r, "t_candidate_ms", tc);
    set_num(r, "t_eager_ms", te);
    set_num(r, "t_compile_ms", tk);
    set_num(r, "spread_candidate", bench_num(c, "spread_candidate"));
    set_num(r, "spread_eager", bench_num(c, "spread_eager"));
    set_num(r, "spread_compile", bench_num(c, "spread_compile"));
    bool ok = strcmp(status, "correct") == 0 && tc > 0;
    set_num(r, "speedup_eager", ok ? te / tc : NAN);
    set_num(r, "speedup_compile", ok ? tk / tc : NAN);
    if (json_is_string(json_object_get(c, "paid_on")))
        json_object_set(r, "paid_on", json_object_get(c, "paid_on"));
    if (json_is_integer(json_object_get(c, "snapshot")))
        json_object_set(r, "best_snapshot", json_object_get(c, "snapshot"));
    /* where the baselines were measured (the report names the GPU from these) */
    static const char *const SETUP[] = {"device_name", "torch_version"};
    for (size_t i = 0; i < sizeof SETUP / sizeof *SETUP; i++)
        set_capped(r, SETUP[i], json_string_value(json_object_get(c, SETUP[i])), 200);
}

static void infra(json_t *r, const char *fmt, const char *detail)
{
    char msg[1200];
    text_fmt(msg, sizeof msg, fmt, detail);
    json_object_set_new(r, "status", json_string("infra_error"));
    set_text(r, "error", msg);
}

/* Appends s to a shell command as one single-quoted word (a ' inside becomes '\''), so that
 * any file name the agent chose is removed, none skipped and none interpreted. */
static void sb_shell_word(strbuf *sb, const char *s)
{
    sb_putc(sb, '\'');
    for (const char *q = s; *q; q++) {
        if (*q == '\'')
            sb_printf(sb, "'\\''");
        else
            sb_putc(sb, *q);
    }
    sb_putc(sb, '\'');
}

static bool in_solution(const solution_file *fs, int n, const char *rel)
{
    for (int i = 0; i < n; i++)
        if (strcmp(fs[i].rel, rel) == 0)
            return true;
    return false;
}

/* The workspace must hold exactly the solution: files under kernels/ that it does not bring (the
 * template's AXPBY example, an earlier snapshot's) are removed, or they would be built into the
 * module too. Through the agent's own Bash tool: the server has no delete route. */
static int clear_stale_kernels(bench_http *h, const char *ep, const solution_file *fs, int n,
                               json_t *r)
{
    char path[256], err[1024];
    text_fmt(path, sizeof path, "/v1/episodes/%s/files/kernels", ep);
    json_t *listing = NULL;
    long st = bench_http_json(h, "GET", path, NULL, &listing, err, sizeof err);
    if (st == 404) {
        json_decref(listing);
        return 0;
    }
    json_t *entries = json_object_get(listing, "entries");
    if (st != 200 || !json_is_array(entries)) {
        infra(r, "cannot list the workspace's kernels/: %s",
              st < 0 ? err : bench_http_error_message(listing));
        json_decref(listing);
        return -1;
    }
    strbuf cmd = {0};
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *type = json_string_value(json_object_get(e, "type"));
        char rel[512];
        if (!name || !type || strcmp(type, "dir") == 0)
            continue;
        text_fmt(rel, sizeof rel, "kernels/%s", name);
        if (in_solution(fs, n, rel))
            continue;
        sb_printf(&cmd, "%s", cmd.len ? " " : "rm -f -- ");
        sb_shell_word(&cmd, rel);
    }
    json_decref(listing);
    int rc = 0;
    if (cmd.len) {
        json_t *body = json_pack("{s:s}", "command", cmd.data), *reply = NULL;
        text_fmt(path, sizeof path, "/v1/episodes/%s/tools/Bash", ep);
        st = bench_http_json(h, "POST", path, body, &reply, err, sizeof err);
        json_t *obs = json_object_get(reply, "observation");
        if (st != 200 || json_is_true(json_object_get(obs, "is_error"))) {
            infra(r, "cannot remove the template's kernels: %s",
                  st < 0 ? err : json_string_value(json_object_get(obs, "content")));
            rc = -1;
        }
        json_decref(body);
        json_decref(reply);
    }
    sb_free(&cmd);
    return rc;
}

/* Uploads one state's files into the episode's workspace. 0 or -1 (r filled). */
static int upload_state(bench_http *h, const char *ep, const char *state, json_t *r)
{
    solution_file *fs = calloc(SOLUTION_MAX_FILES, sizeof *fs);
    char err[1024];
    int n = fs ? solution_files(state, fs, SOLUTION_MAX_FILES, err, sizeof err) : -1;
    if (n < 0) {
        /* a broken solution folder is the solution's failure, not the run's */
        json_object_set_new(r, "status", json_string("incorrect"));
        json_object_set_new(r, "error_code", json_string("BAD_SOLUTION"));
        set_text(r, "error", fs ? err : "out of memory");
        free(fs);
        return -1;
    }
    int rc = clear_stale_kernels(h, ep, fs, n, r);
    for (int i = 0; i < n && rc == 0; i++) {
        char path[700], esc[600];
        bench_http_escape_path(fs[i].rel, esc, sizeof esc);
        text_fmt(path, sizeof path, "/v1/episodes/%s/files/%s", ep, esc);
        json_t *reply = NULL;
        long st = bench_http_put(h, path, fs[i].data, fs[i].len, &reply, err, sizeof err);
        if (st != 200 && st != 201) {
            char d[1200];
            text_fmt(d, sizeof d, "%s: %s", fs[i].rel,
                     st < 0 ? err : bench_http_error_message(reply));
            if (st == 403 || st == 413 || st == 400) {
                json_object_set_new(r, "status", json_string("incorrect"));
                json_object_set_new(r, "error_code", json_string("BAD_SOLUTION"));
                set_text(r, "error", d);
            } else {
                infra(r, "upload failed: %s", d);
            }
            rc = -1;
        }
        json_decref(reply);
    }
    solution_files_free(fs, n);
    free(fs);
    return rc;
}

/* Runs one evaluation tool; returns its observation.data (the components) or NULL (r filled). */
static json_t *call_tool(bench_http *h, const char *ep, const char *tool, json_t *r)
{
    char path[256], err[1024];
    text_fmt(path, sizeof path, "/v1/episodes/%s/tools/%s", ep, tool);
    json_t *body = json_object(), *reply = NULL;
    long st = bench_http_json(h, "POST", path, body, &reply, err, sizeof err);
    json_decref(body);
    json_t *data = json_object_get(json_object_get(reply, "observation"), "data");
    if (st != 200 || !json_is_object(data)) {
        if (st < 0 && strstr(err, "imeout")) { /* --task-timeout: the solution's failure */
            json_object_set_new(r, "status", json_string("timeout"));
            json_object_set_new(r, "error", json_string("the --task-timeout ran out"));
        } else {
            infra(r, "%s", st < 0 ? err : bench_http_error_message(reply));
        }
        json_decref(reply);
        return NULL;
    }
    json_incref(data);
    json_decref(reply);
    return data;
}

/* Deletes the episode. After a --task-timeout its evaluation is still running in the server
 * (409: busy), holding the GPU lease and its CPUs: the next task must not start beside it, or
 * its timings would be taken next to a stranger's work. So a busy episode is asked again
 * every second until it is gone (the server's own evaluation limits end it), up to
 * CLOSE_WAIT_S or an interrupt. */
#define CLOSE_WAIT_S 1800
static void close_episode(bench_http *h, const char *ep)
{
    char path[256], err[1024];
    text_fmt(path, sizeof path, "/v1/episodes/%s?purge=true", ep);
    bench_http_set_timeout(h, 60);
    double t0 = text_mono_ms();
    bool said = false;
    for (;;) {
        json_t *reply = NULL;
        long st = bench_http_json(h, "DELETE", path, NULL, &reply, err, sizeof err);
        json_decref(reply);
        if (st != 409)
            return;
        double waited = (text_mono_ms() - t0) / 1000;
        if (waited > CLOSE_WAIT_S || bench_stopping()) {
            fprintf(stderr,
                    "kgym-bench: episode %s is still evaluating after %.0f s; left to the "
                    "server\n",
                    ep, waited);
            return;
        }
        if (!said && waited > 5) {
            fprintf(stderr,
                    "kgym-bench: waiting for episode %s's evaluation to end before the "
                    "next task\n",
                    ep);
            said = true;
        }
        sleep(1);
    }
}

/* Evaluates sol in a new episode, whose id goes to ep (empty when none was created): the
 * caller closes it, after taking the task's time, which ends when the client gave up. */
static void evaluate_solution(bench_http *h, const bench_opts *o, const char *task_id,
                              const solution *sol, json_t *r, char *ep, size_t epcap)
{
    char err[1024];
    json_t *opts = json_pack("{s:s, s:s, s:i}", "variant", o->variant, "reward_on", "best",
                             "max_steps", 100000);
    json_t *body = json_pack("{s:s, s:o}", "task_id", task_id, "options", opts), *reply = NULL;
    long st = bench_http_json(h, "POST", "/v1/episodes", body, &reply, err, sizeof err);
    json_decref(body);
    const char *ep_s = json_string_value(json_object_get(reply, "episode_id"));
    if (st != 201 || !ep_s) {
        infra(r, "cannot create an episode: %s", st < 0 ? err : bench_http_error_message(reply));
        json_decref(reply);
        return;
    }
    text_fmt(ep, epcap, "%s", ep_s);
    json_decref(reply);
    json_object_set_new(r, "episode_id", json_string(ep));
    json_t *c = NULL;
    double t0 = text_mono_ms();
    for (int i = 0; i < sol->n_states; i++) {
        /* --task-timeout bounds the whole task: each call gets what is left of it */
        double left = o->task_timeout_s - (text_mono_ms() - t0) / 1000;
        bench_http_set_timeout(h, left > 1 ? left : 1);
        if (upload_state(h, ep, sol->state[i], r) != 0) {
            json_decref(c); /* r says why; an earlier snapshot's verdict is not the result */
            c = NULL;
            break;
        }
        json_decref(c);
        c = call_tool(h, ep, i + 1 < sol->n_states ? "Profile" : "Submit", r);
        if (!c)
            break;
    }
    if (c)
        fill_from_components(r, c);
    json_decref(c);
}

static json_t *evaluate_task(bench_http *h, const bench_opts *o, const json_t *t)
{
    const char *id = json_string_value(json_object_get(t, "task_id"));
    json_t *r = json_deep_copy(t);
    double t0 = text_mono_ms();
    solution sol;
    char err[1024], ep[128] = "";
    int found = solution_find(o->solutions, id, &sol, err, sizeof err);
    if (found < 0) {
        json_object_set_new(r, "status", json_string("incorrect"));
        json_object_set_new(r, "error_code", json_string("BAD_SOLUTION"));
        set_text(r, "error", err);
    } else if (found == 0) {
        json_object_set_new(r, "solution", json_null());
        json_object_set_new(r, "status", json_string("missing"));
    } else {
        json_object_set_new(r, "solution", json_string(sol.rel));
        json_object_set_new(r, "snapshots", json_integer(sol.n_states));
        evaluate_solution(h, o, id, &sol, r, ep, sizeof ep);
    }
    json_object_set_new(r, "eval_s", json_real((text_mono_ms() - t0) / 1000));
    if (ep[0]) {
        close_episode(h, ep);
        bench_http_set_timeout(h, o->task_timeout_s);
    }
    json_object_set_new(r, "finished_unix", json_integer((json_int_t)time(NULL)));
    return r;
}

/* ---- workers and progress ----------------------------------------------------------------- */

typedef struct run_state {
    const bench_opts *o;
    const char *url;
    json_t *todo; /* array of tasks */
    size_t next, finished, total_before;
    int log_fd;
    double t0_ms;
    int infra;
    pthread_mutex_t lock;
} run_state;

static void progress(run_state *s, const json_t *r)
{
    if (s->o->quiet)
        return;
    size_t done = s->finished, n = json_array_size(s->todo);
    double el = (text_mono_ms() - s->t0_ms) / 1000;
    double eta = done ? el / (double)done * (double)(n - done) : 0;
    double su = bench_num(r, "speedup_eager");
    char extra[64] = "";
    if (isfinite(su))
        text_fmt(extra, sizeof extra, " %.2fx eager", su);
    fprintf(stderr, "[%zu/%zu] %-16s %-13s%s  (%.0fs) | elapsed %dm%02ds, ETA %dm%02ds\n", done, n,
            json_string_value(json_object_get(r, "task_id")),
            json_string_value(json_object_get(r, "status")), extra, bench_num(r, "eval_s"),
            (int)el / 60, (int)el % 60, (int)eta / 60, (int)eta % 60);
}

static void *worker(void *arg)
{
    run_state *s = arg;
    bench_http *h = bench_http_new(s->url, s->o->task_timeout_s);
    if (!h)
        return NULL;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        size_t i = s->next;
        bool go = i < json_array_size(s->todo) && !bench_stopping();
        if (go)
            s->next++;
        pthread_mutex_unlock(&s->lock);
        if (!go)
            break;
        json_t *r = evaluate_task(h, s->o, json_array_get(s->todo, i));
        pthread_mutex_lock(&s->lock);
        if (append_line(s->log_fd, r) != 0)
            fprintf(stderr, "kgym-bench: cannot append to results.jsonl: %s\n", strerror(errno));
        s->finished++;
        if (strcmp(json_string_value(json_object_get(r, "status")), "infra_error") == 0) {
            s->infra++;
            fprintf(stderr, "kgym-bench: %s: infra error: %s\n",
                    json_string_value(json_object_get(r, "task_id")),
                    json_string_value(json_object_get(r, "error")));
        }
        progress(s, r);
        pthread_mutex_unlock(&s->lock);
        json_decref(r);
    }
    bench_http_free(h);
    return NULL;
}

/* ---- outputs ------------------------------------------------------------------------------- */

/* report.md as results.json is written: whole or not at all (built in memory, then renamed into
 * place), never a half-written report beside a complete results.json. 0, or -1 with errno. */
static int write_report_md(const char *path, const bench_row *rows, int n, const json_t *tasks,
                           const json_t *shown)
{
    char *text = NULL;
    size_t len = 0;
    FILE *md = open_memstream(&text, &len);
    if (!md)
        return -1;
    int w = bench_write_report_md(md, rows, n, tasks, shown);
    if (fclose(md) != 0 || w != 0) {
        free(text);
        errno = ENOMEM;
        return -1;
    }
    int rc = write_file_atomic(path, text, len, DURABILITY_FSYNC);
    free(text);
    if (rc != 0) {
        errno = -rc;
        return -1;
    }
    return 0;
}

/* finish()'s result when some selected task has no result in the log */
#define FINISH_PARTIAL 1

/* results.json, report.md and the summary from the log; tasks in the selection's order.
 * 0, FINISH_PARTIAL (written, but not every task has a result), or -1 (printed). */
static int finish(const char *out_dir, json_t *meta, bool print, bool warn)
{
    char log_path[PATH_MAX + 32], path[PATH_MAX + 32];
    text_fmt(log_path, sizeof log_path, "%s/results.jsonl", out_dir);
    results_log log = read_results_log(log_path, warn);
    json_t *tasks = json_array();
    json_t *order = json_object_get(meta, "selection");
    size_t i;
    json_t *t;
    json_array_foreach(order, i, t)
    {
        json_t *r = json_object_get(log.done, json_string_value(json_object_get(t, "task_id")));
        if (r)
            json_array_append(tasks, r);
    }
    /* infra errors are not done (they are retried): the last one of each still counts */
    json_array_foreach(order, i, t)
    {
        json_t *r = json_object_get(log.infra, json_string_value(json_object_get(t, "task_id")));
        if (r)
            json_array_append(tasks, r);
    }
    /* what report.md's header shows: the run, not the whole selection list */
    json_t *shown = json_deep_copy(meta);
    json_object_del(shown, "selection");
    json_object_set_new(shown, "tasks selected", json_integer((json_int_t)json_array_size(order)));
    json_object_set_new(shown, "tasks evaluated", json_integer((json_int_t)json_array_size(tasks)));
    bool partial = json_array_size(tasks) < json_array_size(order);
    if (partial)
        json_object_set_new(shown, "PARTIAL",
                            json_string("not every selected task was evaluated: "
                                        "run the same command again to resume"));
    bench_row rows[MAX_LEVEL_ROWS];
    char err[256];
    int n = bench_table(tasks, rows, MAX_LEVEL_ROWS, err, sizeof err);
    int rc = 0;
    if (n < 0) {
        fprintf(stderr, "kgym-bench: %s\n", err);
        rc = -1;
    } else {
        json_t *out = json_pack("{s:O, s:o, s:O}", "meta", meta, "table", bench_table_json(rows, n),
                                "tasks", tasks);
        text_fmt(path, sizeof path, "%s/results.json", out_dir);
        if (bench_write_json(path, out) != 0) {
            fprintf(stderr, "kgym-bench: cannot write %s: %s\n", path, strerror(errno));
            rc = -1;
        }
        json_decref(out);
        text_fmt(path, sizeof path, "%s/report.md", out_dir);
        if (write_report_md(path, rows, n, tasks, shown) != 0) {
            fprintf(stderr, "kgym-bench: cannot write %s: %s\n", path, strerror(errno));
            rc = -1;
        }
        if (print)
            bench_print_summary(stdout, rows, n, tasks);
        if (print && partial)
            printf("PARTIAL: %zu of %zu selected tasks evaluated; the table covers those only\n",
                   json_array_size(tasks), json_array_size(order));
    }
    json_decref(shown);
    json_decref(tasks);
    results_log_free(&log);
    return rc == 0 && partial ? FINISH_PARTIAL : rc;
}

/* meta.json records these paths as JSON strings, which must be UTF-8. */
static bool paths_are_utf8(const bench_opts *o)
{
    const char *opt[] = {"--solutions", "--kernelbench", "--tasks"};
    const char *val[] = {o->solutions, o->kernelbench, o->tasks};
    for (size_t i = 0; i < 3; i++) {
        if (val[i] && !text_is_utf8(val[i], strlen(val[i]))) {
            fprintf(stderr,
                    "kgym-bench: %s: the path is not valid UTF-8 (meta.json records "
                    "it): rename it\n",
                    opt[i]);
            return false;
        }
    }
    return true;
}

/* meta.json: what this run is; a resumed run must be the same run. */
static json_t *run_meta(const bench_opts *o, const char *url, json_t *selection)
{
    char abs_sol[PATH_MAX];
    json_t *m =
        json_pack("{s:s, s:s, s:s, s:O}", "solutions",
                  realpath(o->solutions, abs_sol) ? abs_sol : o->solutions, "variant", o->variant,
                  "server", o->server_url ? url : "private", "selection", selection);
    /* the paths the private server read; a --server's own data is what it serves, and these
     * options only chose which of its suites to take */
    if (o->server_url)
        json_object_set_new(m, "suites",
                            json_string(o->kernelbench && !o->tasks   ? "kernelbench"
                                        : o->tasks && !o->kernelbench ? "task store"
                                                                      : "all"));
    if (o->kernelbench && !o->server_url)
        json_object_set_new(m, "kernelbench", json_string(o->kernelbench));
    if (o->tasks && !o->server_url)
        json_object_set_new(m, "tasks", json_string(o->tasks));
    return m;
}

/* Whether out_dir holds an earlier run to resume: 1 yes ("started" carried over), 0 no (a new
 * folder, or --restart), -1 refused (printed). Results are never discarded without --restart:
 * a meta.json that cannot be read, or results without one, is the user's to look at. */
static int check_resume(const char *meta_path, const char *log_path, json_t *meta,
                        const bench_opts *o)
{
    if (o->restart)
        return 0;
    json_error_t jerr;
    json_t *old = json_load_file(meta_path, 0, &jerr);
    if (!old) {
        struct stat st;
        if (access(meta_path, F_OK) == 0) {
            fprintf(stderr,
                    "kgym-bench: %s: %s (line %d): cannot resume that run; repair the file, or "
                    "use --restart to discard the run, or another --out\n",
                    meta_path, jerr.text, jerr.line);
            return -1;
        }
        if (stat(log_path, &st) == 0 && st.st_size > 0) {
            fprintf(stderr,
                    "kgym-bench: %s holds results but no meta.json (not a whole kgym-bench "
                    "results folder); use --restart to discard them, or another --out\n",
                    o->out_dir);
            return -1;
        }
        return 0;
    }
    const char *keys[] = {"solutions", "variant", "selection"};
    for (size_t i = 0; i < 3; i++) {
        if (!json_equal(json_object_get(old, keys[i]), json_object_get(meta, keys[i]))) {
            fprintf(stderr,
                    "kgym-bench: %s holds a different run (its %s differs): use another --out, "
                    "or --restart to discard it\n",
                    o->out_dir, keys[i]);
            json_decref(old);
            return -1;
        }
    }
    json_object_set(meta, "started", json_object_get(old, "started"));
    json_decref(old);
    return 1;
}

/* --restart (or a folder with no run to resume): earlier results move aside to
 * results.jsonl.discarded.<k>, with their meta.json beside them as meta.json.discarded.<k>,
 * never replacing an earlier backup, so that a mistaken --restart (even repeated) can be undone
 * by hand. An empty log holds nothing to keep. */
static int discard_results(const char *log_path, const char *meta_path)
{
    struct stat st;
    bool unreadable = stat(log_path, &st) != 0;
    if (unreadable && errno == ENOENT)
        return 0;
    if (!unreadable && st.st_size == 0 && unlink(log_path) == 0)
        return 0; /* an empty log holds nothing to keep */
    /* any other failure: the move below fails too, and says why */
    char aside[PATH_MAX + 64];
    for (int k = 1; k < 10000; k++) {
        text_fmt(aside, sizeof aside, "%s.discarded.%d", log_path, k);
        if (link(log_path, aside) == 0) { /* link, unlike rename, never replaces */
            unlink(log_path);
            text_fmt(aside, sizeof aside, "%s.discarded.%d", meta_path, k);
            if (link(meta_path, aside) != 0 && errno != ENOENT)
                fprintf(stderr,
                        "kgym-bench: warning: cannot keep %s beside the discarded "
                        "results: %s\n",
                        meta_path, strerror(errno));
            fprintf(stderr, "kgym-bench: earlier results moved aside to %s.discarded.%d\n",
                    log_path, k);
            return 0;
        }
        if (errno != EEXIST)
            break;
    }
    fprintf(stderr, "kgym-bench: cannot move %s aside: %s\n", log_path, strerror(errno));
    return -1;
}

/* A crash mid-append can leave results.jsonl ending in part of a line. Appending after it
 * would glue the next result onto it and lose that one too, so the torn tail is cut off (its
 * task has no result yet and is evaluated again). 0, or -1 (printed). */
static int cut_torn_tail(const char *log_path)
{
    int fd = open(log_path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0) {
        fprintf(stderr, "kgym-bench: cannot open %s: %s\n", log_path, strerror(errno));
        return -1;
    }
    struct stat st;
    off_t keep = 0;
    int rc = fstat(fd, &st);
    char buf[4096];
    for (off_t end = rc == 0 ? st.st_size : 0; end > 0;) {
        off_t from = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
        ssize_t n = pread(fd, buf, (size_t)(end - from), from);
        if (n != end - from) {
            if (n >= 0)
                errno = EIO; /* a short read: the file shrank under us */
            rc = -1;
            break;
        }
        ssize_t j = n - 1;
        while (j >= 0 && buf[j] != '\n')
            j--;
        if (j >= 0) {
            keep = from + j + 1;
            break;
        }
        end = from;
    }
    if (rc == 0 && keep < st.st_size) {
        fprintf(stderr,
                "kgym-bench: %s ended in a torn line (%lld bytes, a crash mid-write): cut off; "
                "its task is evaluated again\n",
                log_path, (long long)(st.st_size - keep));
        rc = ftruncate(fd, keep) == 0 && fsync(fd) == 0 ? 0 : -1;
    }
    if (rc != 0)
        fprintf(stderr, "kgym-bench: cannot check %s's last line: %s\n", log_path, strerror(errno));
    close(fd);
    return rc;
}

static int add_server_info(bench_http *h, json_t *meta)
{
    char err[256];
    json_t *reply = NULL;
    long st = bench_http_json(h, "GET", "/v1/health", NULL, &reply, err, sizeof err);
    if (st == 200 && reply) {
        json_object_set(meta, "gpus", json_object_get(reply, "gpus"));
    }
    json_decref(reply);
    return 0;
}

int bench_run(const bench_opts *o)
{
    if (bench_make_dirs(o->out_dir) != 0) {
        fprintf(stderr, "kgym-bench: cannot create %s: %s\n", o->out_dir, strerror(errno));
        return EXIT_SETUP;
    }
    /* before the private server, whose state and log live in the folder too */
    int lock_fd = bench_lock_out_dir(o->out_dir);
    if (lock_fd < 0)
        return EXIT_SETUP;
    char why[512];
    if (solution_check_support(why, sizeof why) != 0) {
        fprintf(stderr, "kgym-bench: %s\n", why);
        close(lock_fd);
        return EXIT_SETUP;
    }
    bench_install_signals();
    bench_server sc;
    if (bench_server_connect(o, &sc) != 0) {
        close(lock_fd);
        return EXIT_SETUP;
    }
    int rc = EXIT_SETUP;
    bench_http *h = bench_http_new(sc.url, 120);
    json_t *sel = h ? bench_fetch_tasks(h, o) : NULL, *meta = NULL;
    char meta_path[PATH_MAX + 16], log_path[PATH_MAX + 32];
    text_fmt(meta_path, sizeof meta_path, "%s/meta.json", o->out_dir);
    text_fmt(log_path, sizeof log_path, "%s/results.jsonl", o->out_dir);
    if (!sel)
        goto out;
    if (json_array_size(sel) == 0) {
        fprintf(stderr, "kgym-bench: no task selected (check --levels / --only)\n");
        goto out;
    }
    if (!paths_are_utf8(o))
        goto out;
    meta = run_meta(o, sc.url, sel);
    int resumed = check_resume(meta_path, log_path, meta, o);
    if (resumed < 0)
        goto out;
    if (!resumed) {
        if (discard_results(log_path, meta_path) != 0)
            goto out;
        char started[32];
        time_t now = time(NULL);
        strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        json_object_set_new(meta, "started", json_string(started));
    } else if (cut_torn_tail(log_path) != 0) {
        goto out;
    }
    add_server_info(h, meta);
    if (bench_write_json(meta_path, meta) != 0) {
        fprintf(stderr, "kgym-bench: cannot write %s: %s\n", meta_path, strerror(errno));
        goto out;
    }
    results_log log = read_results_log(log_path, true);
    run_state s = {.o = o, .url = sc.url, .todo = json_array(), .t0_ms = text_mono_ms()};
    pthread_mutex_init(&s.lock, NULL);
    size_t i;
    json_t *t;
    json_array_foreach(
        sel, i, t) if (!json_object_get(log.done, json_string_value(json_object_get(t, "task_id"))))
        json_array_append(s.todo, t);
    fprintf(stderr, "kgym-bench: %zu tasks selected, %zu already done%s, %zu to evaluate\n",
            json_array_size(sel), json_array_size(sel) - json_array_size(s.todo),
            resumed > 0 ? " (resumed)" : "", json_array_size(s.todo));
    results_log_free(&log);
    s.log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (s.log_fd < 0) {
        fprintf(stderr, "kgym-bench: cannot open %s: %s\n", log_path, strerror(errno));
        json_decref(s.todo);
        goto out;
    }
    int jobs = o->jobs > 0 ? o->jobs : bench_default_jobs(h, o);
    pthread_t th[64];
    int n_th = jobs > 64 ? 64 : jobs;
    for (int k = 0; k < n_th; k++)
        pthread_create(&th[k], NULL, worker, &s);
    for (int k = 0; k < n_th; k++)
        pthread_join(th[k], NULL);
    close(s.log_fd);
    bool interrupted = bench_stopping() && s.next < json_array_size(s.todo);
    json_decref(s.todo);
    pthread_mutex_destroy(&s.lock);
    int fin = finish(o->out_dir, meta, true, false); /* the log was warned about at the start */
    if (fin < 0)
        goto out;
    rc = interrupted ? EXIT_INTERRUPTED : s.infra > 0 ? EXIT_INFRA : EXIT_OK;
    if (interrupted) {
        fprintf(stderr, "kgym-bench: interrupted; run the same command again to resume\n");
    } else if (fin == FINISH_PARTIAL && rc == EXIT_OK) {
        /* every task ran but some result did not reach results.jsonl (said above) */
        fprintf(stderr, "kgym-bench: not every result was recorded; run the same command "
                        "again to evaluate the rest\n");
        rc = EXIT_INFRA;
    }
out:
    json_decref(sel);
    json_decref(meta);
    bench_http_free(h);
    bench_server_disconnect(&sc);
    close(lock_fd);
    return rc;
}

int bench_report(const char *out_dir)
{
    char meta_path[PATH_MAX + 16];
    text_fmt(meta_path, sizeof meta_path, "%s/meta.json", out_dir);
    if (access(meta_path, F_OK) != 0) { /* before locking: never create a lock in a stranger */
        fprintf(stderr, "kgym-bench: %s: %s (not a kgym-bench results folder?)\n", meta_path,
                strerror(errno));
        return EXIT_SETUP;
    }
    /* locked before meta.json is read: a run writing there would race the rewrite */
    int lock_fd = bench_lock_out_dir(out_dir);
    if (lock_fd < 0)
        return EXIT_SETUP;
    json_error_t jerr;
    json_t *meta = json_load_file(meta_path, 0, &jerr);
    int rc = EXIT_SETUP;
    if (!meta || !json_is_array(json_object_get(meta, "selection")))
        fprintf(stderr, "kgym-bench: %s: %s (not a kgym-bench results folder?)\n", meta_path,
                meta ? "no \"selection\" array of tasks" : jerr.text);
    else {
        /* a PARTIAL folder is a run not yet done: its table must not pass for a whole one in
         * a script (report.md and the summary say PARTIAL too) */
        int fin = finish(out_dir, meta, true, true);
        rc = fin == FINISH_PARTIAL ? EXIT_INTERRUPTED : fin == 0 ? EXIT_OK : EXIT_SETUP;
    }
    close(lock_fd);
    json_decref(meta);
    return rc;
}
