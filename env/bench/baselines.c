/* baselines: kgym-bench baselines (see run.h). Two phases over each batch of the selected tasks
 * the output file does not hold yet (batches, so that an interrupted run keeps the measurements
 * of the batches it finished, and a warm-up's cache is used while it is fresh):
 *   1. warm-ups, --warmup-jobs at a time: torch.compile compiles each reference once, untimed;
 *      the server runs them under shared GPU leases, so they overlap each other but never a
 *      timing, and fill Inductor's on-disk caches; those that ran out of GPU memory beside the
 *      others (large-tensor references) are compiled again, one at a time;
 *   2. measurements, --jobs at a time (default 3 per GPU), now that compilation is a cache
 *      hit: the server runs up to 3 per GPU under shared leases of their own class, whose
 *      judges start side by side and take turns at the GPU (a per-GPU timing lock), so the
 *      GPU's time goes to timing and not to interpreters starting. Each result is written to
 *      the file as it comes: a killed run resumes.
 * The file is this command's alone while it runs (an flock on FILE.lock), and holds the figures
 * of one variant, device and torch version: a file that does not parse, or was measured
 * elsewhere, is refused and never rewritten. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/common.h"
#include "bench/http.h"
#include "util/text.h"

typedef struct phase {
    const bench_opts *o;
    const char *url;
    bool warmup;
    const char *label;    /* of its progress lines */
    json_t *todo;         /* array of {task_id, name, level} */
    size_t next, end;     /* this batch: todo[next..end) */
    size_t done, failed;  /* over the whole command */
    size_t out_of_memory; /* warm-ups whose compile ran out of GPU memory */
    json_t *oom_tasks;    /* warm-ups: this batch's tasks that ran out of GPU memory */
    json_t *file;         /* the output document: measurements update it as results come,
                           * warm-ups only read its device and torch version */
    const char *out_file;
    atomic_int *stop_rc; /* set (an exit status) when the whole command must stop at once */
    double t0_ms;
    pthread_mutex_t lock;
} phase;

/* The file-level fields that say where the figures were measured; a file holds one of each. */
static const char *const SETUP_KEYS[] = {"device_name", "torch_version"};

/* The record kept per task in the output file. */
static json_t *measurement_record(const json_t *task, const json_t *reply)
{
    static const char *const KEYS[] = {"t_eager_ms",     "t_compile_ms", "spread_eager",
                                       "spread_compile", "eval_ms",      "lease_wait_ms"};
    json_t *rec = json_object();
    for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++) {
        json_t *v = json_object_get(reply, KEYS[k]);
        json_object_set(rec, KEYS[k], v ? v : json_null());
    }
    json_object_set(rec, "cached", json_object_get(reply, "baseline_cached") ?: json_false());
    /* where the leased time went: the judge's phases, and its timing loops' steps */
    const char *why_keys[] = {"phases_ms", "timing_loop_ms"};
    for (size_t k = 0; k < 2; k++)
        if (json_object_get(reply, why_keys[k]))
            json_object_set(rec, why_keys[k], json_object_get(reply, why_keys[k]));
    if (json_object_get(reply, "compile_unavailable"))
        json_object_set(rec, "compile_unavailable", json_object_get(reply, "compile_unavailable"));
    json_object_set(rec, "level", json_object_get(task, "level"));
    if (json_object_get(task, "code_sha256"))
        json_object_set(rec, "code_sha256", json_object_get(task, "code_sha256"));
    return rec;
}

static const char *string_or(const json_t *v, const char *fallback)
{
    return json_is_string(v) ? json_string_value(v) : fallback;
}

/* Under the lock: whether the reply was measured on the device and torch version of the
 * figures the file holds already (a file whose fields are not set yet takes any). Figures of
 * two devices in one file would pass for each other: it is refused, with the reason printed. */
static bool same_setup_as_file(const phase *p, const json_t *reply)
{
    for (size_t k = 0; k < sizeof SETUP_KEYS / sizeof SETUP_KEYS[0]; k++) {
        const json_t *have = json_object_get(p->file, SETUP_KEYS[k]);
        const json_t *got = json_object_get(reply, SETUP_KEYS[k]);
        if (have && !json_equal(have, got)) {
            if (atomic_load(p->stop_rc) != 0)
                return false; /* a measurement in flight beside the first: said already */
            fprintf(stderr,
                    "kgym-bench: %s holds baselines with %s \"%s\", but this server measures "
                    "with \"%s\": not mixed into it (use another --file)\n",
                    p->out_file, SETUP_KEYS[k], string_or(have, "?"), string_or(got, "unknown"));
            return false;
        }
    }
    return true;
}

/* Under the lock: a measurement joins the file, which is rewritten at once. false when it was
 * not kept (*p->stop_rc is set then: the command stops). */
static bool keep_measurement(phase *p, const json_t *task, const json_t *reply)
{
    if (!same_setup_as_file(p, reply)) {
        atomic_store(p->stop_rc, EXIT_SETUP);
        return false;
    }
    json_t *have = json_object_get(p->file, "tasks");
    json_t *rec = measurement_record(task, reply);
    if (json_is_true(json_object_get(task, "remeasure")))
        json_object_set_new(rec, "remeasured", json_true()); /* once: see tasks_to_measure */
    json_object_set_new(have, json_string_value(json_object_get(task, "task_id")), rec);
    for (size_t k = 0; k < sizeof SETUP_KEYS / sizeof SETUP_KEYS[0]; k++)
        if (json_object_get(reply, SETUP_KEYS[k]))
            json_object_set(p->file, SETUP_KEYS[k], json_object_get(reply, SETUP_KEYS[k]));
    json_object_set_new(p->file, "variant", json_string(p->o->variant));
    if (bench_write_json(p->out_file, p->file) != 0) {
        /* every later measurement would be lost the same way (a full disk, a removed folder) */
        fprintf(stderr, "kgym-bench: cannot write %s: %s; stopping\n", p->out_file,
                strerror(errno));
        json_object_del(have, json_string_value(json_object_get(task, "task_id")));
        atomic_store(p->stop_rc, EXIT_INFRA);
        return false;
    }
    return true;
}

/* Under the lock: whether a measurement taken again (--remeasure-above) lacks the compile figure
 * the stored record has (torch.compile timed out or failed this time; the server keeps its
 * cached figures then): the stored record is kept, whole, rather than half replaced. Says so. */
static bool lost_compile_figure(const phase *p, const json_t *task, const json_t *reply)
{
    const char *id = json_string_value(json_object_get(task, "task_id"));
    const json_t *stored = json_object_get(json_object_get(p->file, "tasks"), id);
    if (!json_is_true(json_object_get(task, "remeasure")) ||
        !isfinite(bench_num(stored, "t_compile_ms")) || isfinite(bench_num(reply, "t_compile_ms")))
        return false;
    fprintf(stderr,
            "kgym-bench: %s: measured again, but torch.compile gave no figure this time (%.300s); "
            "the stored figures are kept\n",
            id, string_or(json_object_get(reply, "compile_unavailable"), "no reason given"));
    return true;
}

/* Whether no new task may start: an interrupt, or a measurement the file could not keep. */
static bool must_stop(const phase *p)
{
    return bench_stopping() || atomic_load(p->stop_rc) != 0;
}

/* Under the lock: one progress line. */
static void progress(phase *p, const char *id, const json_t *reply, bool ok)
{
    if (p->o->quiet)
        return;
    size_t n = json_array_size(p->todo), finished = p->done + p->failed;
    double el = (text_mono_ms() - p->t0_ms) / 1000;
    double eta = finished ? el / (double)finished * (double)(n - finished) : 0;
    char what[96];
    if (!ok)
        text_fmt(what, sizeof what, "failed");
    else if (p->warmup)
        text_fmt(what, sizeof what, "%s %.1fs",
                 json_string_value(json_object_get(reply, "warmup")) ?: "?",
                 bench_num(reply, "warmup_ms") / 1000);
    else
        text_fmt(what, sizeof what, "eager %.4g ms, compile %.4g ms",
                 bench_num(reply, "t_eager_ms"), bench_num(reply, "t_compile_ms"));
    fprintf(stderr, "[%s %zu/%zu] %-16s %s | elapsed %dm%02ds, ETA %dm%02ds\n", p->label, finished,
            n, id, what, (int)el / 60, (int)el % 60, (int)eta / 60, (int)eta % 60);
    /* why a warm-up's compile failed (the measurement retries it and records its own reason) */
    const char *why = ok ? json_string_value(json_object_get(reply, "compile_unavailable")) : NULL;
    if (why)
        fprintf(stderr, "    %.300s\n", why);
}

/* One task of the phase: POST /v1/tasks/{id}/baselines. */
static void one_task(phase *p, bench_http *h, const json_t *task, const json_t *body)
{
    const char *id = json_string_value(json_object_get(task, "task_id"));
    char path[512], esc[400], err[1024];
    bench_http_escape_path(id, esc, sizeof esc);
    text_fmt(path, sizeof path, "/v1/tasks/%s/baselines", esc);
    json_t *reply = NULL;
    long st = bench_http_json(h, "POST", path, body, &reply, err, sizeof err);
    bool ok = st == 200 && reply;
    pthread_mutex_lock(&p->lock);
    if (ok && p->warmup && json_object_get(reply, "device_name") && !same_setup_as_file(p, reply)) {
        /* known from the first warm-up: no further warm-up and no measurement starts */
        atomic_store(p->stop_rc, EXIT_SETUP);
        pthread_mutex_unlock(&p->lock);
        json_decref(reply);
        return;
    }
    bool kept_old = ok && !p->warmup && lost_compile_figure(p, task, reply);
    if (ok && !p->warmup && !kept_old && !keep_measurement(p, task, reply)) {
        pthread_mutex_unlock(&p->lock); /* not kept: said why, and the command stops */
        json_decref(reply);
        return;
    }
    if (kept_old) {
        p->failed++;
        ok = false;
    } else if (ok) {
        p->done++;
        if (p->warmup && bench_warmup_out_of_memory(reply)) {
            p->out_of_memory++;
            if (p->oom_tasks)
                json_array_append(p->oom_tasks, (json_t *)task);
        }
    } else {
        p->failed++;
        /* a failed warm-up costs only time: the measurement compiles by itself */
        fprintf(stderr, "kgym-bench: %s: %s failed: %s\n", id, p->warmup ? "warm-up" : "baselines",
                st < 0 ? err : bench_http_error_message(reply));
    }
    progress(p, id, reply, ok);
    pthread_mutex_unlock(&p->lock);
    json_decref(reply);
}

static void *phase_worker(void *arg)
{
    phase *p = arg;
    bench_http *h = bench_http_new(p->url, p->o->task_timeout_s);
    json_t *body = json_pack("{s:s, s:s}", "variant", p->o->variant, "phase",
                             p->warmup ? "warmup" : "measure");
    /* a noisy stored task's measurement: past the server's cache, which holds the same figures */
    json_t *again =
        json_pack("{s:s, s:s, s:b}", "variant", p->o->variant, "phase", "measure", "remeasure", 1);
    for (; h && body && again;) {
        pthread_mutex_lock(&p->lock);
        size_t i = p->next;
        bool go = i < p->end && !must_stop(p);
        if (go)
            p->next++;
        pthread_mutex_unlock(&p->lock);
        if (!go)
            break;
        const json_t *task = json_array_get(p->todo, i);
        bool remeasure = !p->warmup && json_is_true(json_object_get(task, "remeasure"));
        one_task(p, h, task, remeasure ? again : body);
    }
    json_decref(again);
    json_decref(body);
    bench_http_free(h);
    return NULL;
}

/* Runs the phase over todo[begin..end), jobs at a time. */
static void run_phase(phase *p, size_t begin, size_t end, int jobs)
{
    p->next = begin;
    p->end = end;
    pthread_t th[64];
    int n = jobs < 1 ? 1 : jobs > 64 ? 64 : jobs;
    for (int k = 0; k < n; k++)
        pthread_create(&th[k], NULL, phase_worker, p);
    for (int k = 0; k < n; k++)
        pthread_join(th[k], NULL);
}

/* The structural fix for warm-ups that run out of GPU memory beside each other (large-tensor
 * references, 4 at a time on an H200): this batch's are compiled again, one at a time, so that
 * their measurements still find Inductor's caches warm instead of compiling under the timing
 * lock. Counts those that ran out even alone into *still_oom. */
static void retry_alone(phase *warm, size_t *retried, size_t *still_oom)
{
    size_t n = json_array_size(warm->oom_tasks);
    if (n == 0 || must_stop(warm))
        return;
    if (!warm->o->quiet)
        fprintf(stderr,
                "kgym-bench: %zu warm-up%s ran out of GPU memory beside the others: again, one at "
                "a time\n",
                n, n == 1 ? "" : "s");
    phase solo = {.o = warm->o,
                  .url = warm->url,
                  .warmup = true,
                  .label = "warm-up alone",
                  .todo = warm->oom_tasks,
                  .file = warm->file,
                  .out_file = warm->out_file,
                  .stop_rc = warm->stop_rc,
                  .t0_ms = text_mono_ms()};
    pthread_mutex_init(&solo.lock, NULL);
    run_phase(&solo, 0, n, 1);
    pthread_mutex_destroy(&solo.lock);
    *retried += solo.done + solo.failed;
    *still_oom += solo.out_of_memory;
    json_array_clear(warm->oom_tasks);
}

/* The output file as it stands (to resume from), or a new document when there is none yet.
 * -1 when it exists but is not a baselines document: it is never overwritten then, since one
 * stray comma from a hand edit would otherwise cost every figure it holds. */
static int load_file(const char *path, json_t **out, char *err, size_t errcap)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) {
        *out = json_pack("{s:{}}", "tasks");
        return 0;
    }
    json_error_t e;
    json_t *file = json_load_file(path, 0, &e);
    if (!file)
        return text_fail(err, errcap,
                         "%s: cannot read it as JSON (%s, line %d); it is left as it is: repair "
                         "or restore it, or use another --file",
                         path, e.text, e.line);
    if (!json_is_object(file) || !json_is_object(json_object_get(file, "tasks"))) {
        json_decref(file);
        return text_fail(err, errcap,
                         "%s is not a baselines file (no \"tasks\" object); it is left as it "
                         "is: use another --file",
                         path);
    }
    *out = file;
    return 0;
}

/* A file holds the figures of one variant: CPU figures in a GPU file would pass for GPU ones
 * (and a CPU run would skip every task the GPU file holds). */
static int check_variant(const json_t *file, const char *path, const char *variant, char *err,
                         size_t errcap)
{
    const json_t *have = json_object_get(file, "variant");
    if (have && !(json_is_string(have) && strcmp(json_string_value(have), variant) == 0))
        return text_fail(err, errcap,
                         "%s holds baselines of variant \"%s\", not of this run's --variant %s: "
                         "use another --file",
                         path, string_or(have, "?"), variant);
    return 0;
}

/* Takes FILE.lock for the whole command (two runs on one file would each rewrite it from their
 * own copy, and the last writer's would drop the other's figures), then reads the file. Returns
 * the lock's fd, or -1 (printed). */
static int open_output_file(const bench_opts *o, const char *out_file, json_t **file)
{
    char lock_path[PATH_MAX], what[PATH_MAX + 32], err[PATH_MAX + 256];
    if (!text_fmt(lock_path, sizeof lock_path, "%s.lock", out_file)) {
        fprintf(stderr, "kgym-bench: --file %s: the path is too long\n", out_file);
        return -1;
    }
    text_fmt(what, sizeof what, "the baselines file %s", out_file);
    int lock_fd = bench_lock_exclusive(lock_path, what, err, sizeof err);
    if (lock_fd >= 0 && (load_file(out_file, file, err, sizeof err) != 0 ||
                         check_variant(*file, out_file, o->variant, err, sizeof err) != 0)) {
        close(lock_fd);
        lock_fd = -1;
    }
    if (lock_fd < 0) {
        fprintf(stderr, "kgym-bench: %s\n", err);
        json_decref(*file);
        *file = NULL;
    }
    return lock_fd;
}

/* Whether a stored record was measured on another reference than the server's task of that id
 * (a KernelBench file that reuses ids for other code). A record or a server without a digest
 * (from before digests) matches by id alone. */
static bool other_reference(const json_t *stored, const json_t *task)
{
    const char *had = json_string_value(json_object_get(stored, "code_sha256"));
    const char *now = json_string_value(json_object_get(task, "code_sha256"));
    return had && now && strcmp(had, now) != 0;
}

/* A stored record's larger spread (eager or compile; a missing one is ignored, NaN if both). */
static double stored_spread(const json_t *stored)
{
    return fmax(bench_num(stored, "spread_eager"), bench_num(stored, "spread_compile"));
}

/* Whether a stored record is noisier than limit and was not measured again already: a task
 * whose noise is its own would otherwise be measured on every run, resumes included. */
static bool noisy_record(const json_t *stored, double limit)
{
    return stored && stored_spread(stored) > limit &&
           !json_is_true(json_object_get(stored, "remeasured"));
}

/* The selected tasks the file does not hold yet, holds for another reference, or (with
 * --remeasure-above) holds with a spread above it, once: those two are measured again, the new
 * figures replacing the old ones. A noisy one is marked "remeasure" (its measurement must not
 * be answered from the server's cache); *again counts them. */
static json_t *tasks_to_measure(const bench_opts *o, const json_t *sel, const json_t *have,
                                size_t *again)
{
    json_t *todo = json_array();
    size_t i;
    json_t *t;
    *again = 0;
    json_array_foreach(sel, i, t)
    {
        const char *id = json_string_value(json_object_get(t, "task_id"));
        const json_t *stored = json_object_get(have, id);
        bool stale = stored && other_reference(stored, t);
        bool noisy = !stale && o->remeasure_above > 0 && noisy_record(stored, o->remeasure_above);
        if (stale)
            fprintf(stderr,
                    "kgym-bench: %s: the stored figures were measured on another reference "
                    "(code_sha256 differs); measuring again\n",
                    id);
        if (noisy) {
            json_object_set_new(t, "remeasure", json_true());
            (*again)++;
        }
        if (!stored || stale || noisy)
            json_array_append(todo, t);
    }
    return todo;
}

/* Says how many of the selected tasks' stored figures are noisier than NOISY_SPREAD and were not
 * measured again yet, naming the noisiest, and how to measure them again (a baseline's median
 * holds up against a few slow calls, but a user comparing speed-ups should know). */
#define NOISY_SPREAD 0.1
static void note_noisy(const json_t *sel, const json_t *have)
{
    size_t i, n = 0;
    const json_t *t;
    const char *worst = NULL;
    double worst_spread = 0;
    json_array_foreach(sel, i, t)
    {
        const char *id = json_string_value(json_object_get(t, "task_id"));
        const json_t *stored = json_object_get(have, id);
        if (!noisy_record(stored, NOISY_SPREAD))
            continue;
        double sp = stored_spread(stored);
        n++;
        if (sp > worst_spread) {
            worst_spread = sp;
            worst = id;
        }
    }
    if (n > 0)
        fprintf(stderr,
                "kgym-bench: %zu of the selected tasks hold a spread above %.2g (the largest: "
                "%s, %.2f); --remeasure-above %.2g measures them again\n",
                n, NOISY_SPREAD, worst, worst_spread, NOISY_SPREAD);
}

/* Warm-ups then measurements over todo, batch by batch, and the closing lines. Returns the
 * exit status. */
static int measure(const bench_opts *o, const char *url, bench_http *h, json_t *todo, json_t *file,
                   const char *out_file)
{
    /* by default per GPU: 3 measurements (as many as the server overlaps: one timing while
     * the next ones start) and 2 warm-ups */
    int gpus = bench_default_jobs(h, o);
    bool cpu = strcmp(o->variant, "cpu") == 0;
    int jobs = o->jobs > 0 ? o->jobs : cpu ? 1 : 3 * gpus;
    /* 2 per GPU: 4 large-tensor warm-ups at once ran an H200 out of memory (README), 2 never
     * did in ~90 tasks since (the server admits up to 4 for other clients) */
    int warm_jobs = o->warmup_jobs >= 0 ? o->warmup_jobs : 2 * gpus;
    size_t n = json_array_size(todo), batch = (size_t)(warm_jobs > jobs ? 2 * warm_jobs : 2 * jobs);
    atomic_int stop_rc = 0;
    phase warm = {.o = o,
                  .url = url,
                  .warmup = true,
                  .label = "warm-up",
                  .todo = todo,
                  .file = file, /* read only: its device and torch version */
                  .out_file = out_file,
                  .oom_tasks = json_array(),
                  .stop_rc = &stop_rc,
                  .t0_ms = text_mono_ms()};
    phase meas = {.o = o,
                  .url = url,
                  .label = "measure",
                  .todo = todo,
                  .file = file,
                  .out_file = out_file,
                  .stop_rc = &stop_rc,
                  .t0_ms = text_mono_ms()};
    pthread_mutex_init(&warm.lock, NULL);
    pthread_mutex_init(&meas.lock, NULL);
    if (n > 0)
        fprintf(stderr,
                "kgym-bench: in batches of %zu: torch.compile warm-ups (untimed, %d at a time), "
                "then measurements (%d at a time)\n",
                batch, warm_jobs, jobs);
    size_t retried = 0, still_oom = 0;
    for (size_t b = 0; b < n && !must_stop(&meas); b += batch) {
        size_t e = b + batch < n ? b + batch : n;
        if (warm_jobs > 0)
            run_phase(&warm, b, e, warm_jobs);
        if (warm_jobs > 1)
            retry_alone(&warm, &retried, &still_oom);
        if (!must_stop(&meas))
            run_phase(&meas, b, e, jobs);
    }
    pthread_mutex_destroy(&warm.lock);
    pthread_mutex_destroy(&meas.lock);
    json_decref(warm.oom_tasks);
    fprintf(stderr, "kgym-bench: %zu measured, %zu failed (%zu warm-ups failed), %zu in %s\n",
            meas.done, meas.failed, warm.failed, json_object_size(json_object_get(file, "tasks")),
            out_file);
    if (warm.out_of_memory)
        fprintf(stderr,
                "kgym-bench: %zu warm-ups ran out of GPU memory beside the others; %zu retried "
                "alone, of which %zu ran out again (their measurements compiled by themselves)\n",
                warm.out_of_memory, retried, still_oom);
    if (atomic_load(&stop_rc) != 0)
        return atomic_load(&stop_rc);
    if (bench_stopping()) {
        fprintf(stderr, "kgym-bench: interrupted; run the same command again to resume\n");
        return EXIT_INTERRUPTED;
    }
    return meas.failed ? EXIT_INFRA : EXIT_OK;
}

int bench_baselines(const bench_opts *o, const char *out_file)
{
    bench_install_signals();
    if (bench_make_dirs(o->out_dir) != 0) {
        fprintf(stderr, "kgym-bench: cannot create %s: %s\n", o->out_dir, strerror(errno));
        return EXIT_SETUP;
    }
    /* --out holds the private server's state dir and log; with --server nothing goes there */
    int out_fd = o->server_url ? -1 : bench_lock_out_dir(o->out_dir);
    if (out_fd < 0 && !o->server_url)
        return EXIT_SETUP;
    json_t *file = NULL;
    int lock_fd = open_output_file(o, out_file, &file);
    if (lock_fd < 0) {
        if (out_fd >= 0)
            close(out_fd);
        return EXIT_SETUP;
    }
    bench_server sc;
    if (bench_server_connect(o, &sc) != 0) {
        json_decref(file);
        close(lock_fd);
        if (out_fd >= 0)
            close(out_fd);
        return EXIT_SETUP;
    }
    int rc = EXIT_SETUP;
    bench_http *h = bench_http_new(sc.url, o->task_timeout_s);
    json_t *sel = h ? bench_fetch_tasks(h, o) : NULL;
    if (sel && json_array_size(sel) == 0)
        fprintf(stderr, "kgym-bench: no task selected (check --levels / --only)\n");
    if (json_array_size(sel) > 0) {
        size_t again;
        json_t *todo = tasks_to_measure(o, sel, json_object_get(file, "tasks"), &again);
        fprintf(stderr, "kgym-bench: %zu tasks selected, %zu in %s already, %zu to measure",
                json_array_size(sel), json_array_size(sel) - json_array_size(todo), out_file,
                json_array_size(todo));
        if (again)
            fprintf(stderr, " (%zu of them again: a spread above %g)", again, o->remeasure_above);
        fputc('\n', stderr);
        rc = measure(o, sc.url, h, todo, file, out_file);
        note_noisy(sel, json_object_get(file, "tasks"));
        json_decref(todo);
    }
    json_decref(sel);
    json_decref(file);
    bench_http_free(h);
    bench_server_disconnect(&sc);
    close(lock_fd); /* last: the file is written for good by now */
    if (out_fd >= 0)
        close(out_fd);
    return rc;
}
