/* The HTTP front end over libmicrohttpd, the server's lifecycle (start, reaper, drain) and
 * the request log. Routes know nothing of HTTP: they take an api_request and fill an
 * api_response (api.h). */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "util/fileio.h"
#include "util/strbuf.h"
#include "util/text.h"

/* ---- logging ----------------------------------------------------------------------------- */

void server_log(const char *level, const char *event, json_t *fields)
{
    char ts[32];
    ep_iso_time(ep_now(), ts);
    json_t *line = json_pack("{s:s, s:s, s:s}", "ts", ts, "level", level, "event", event);
    if (fields)
        json_object_update(line, fields);
    json_decref(fields);
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(line);
    if (!text)
        return;
    size_t n = strlen(text);
    text[n] = '\n'; /* one write per line: lines from different threads never interleave */
    ssize_t w = write(STDERR_FILENO, text, n + 1);
    (void)w;
    free(text);
}

/* ---- one HTTP request -------------------------------------------------------------------- */

typedef struct request_ctx {
    strbuf body;
    bool too_large;
    bool counted; /* in srv->replies_pending until on_completed */
    size_t limit;
    struct timespec start;
} request_ctx;

static double elapsed_ms(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - start->tv_sec) * 1e3 + (now.tv_nsec - start->tv_nsec) / 1e6;
}

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    if (key && json_is_object((json_t *)cls))
        json_object_set_new((json_t *)cls, key, json_string(value ? value : ""));
    return MHD_YES;
}

/* The route pattern for metrics: ids replaced so label cardinality stays small. */
static void route_pattern(const char *path, char *out, size_t cap)
{
    if (strncmp(path, "/v1/episodes/", 13) == 0 && path[13]) {
        const char *rest = strchr(path + 13, '/');
        if (!rest)
            snprintf(out, cap, "/v1/episodes/{id}");
        else if (strncmp(rest, "/tools/", 7) == 0)
            snprintf(out, cap, "/v1/episodes/{id}/tools/{tool}");
        else if (strncmp(rest, "/files", 6) == 0)
            snprintf(out, cap, "/v1/episodes/{id}/files/{path}");
        else
            snprintf(out, cap, "/v1/episodes/{id}%.40s", rest);
    } else if (strncmp(path, "/v1/tasks/", 10) == 0) {
        snprintf(out, cap, "/v1/tasks/{id}");
    } else if (strcmp(path, "/v1/health") == 0 || strcmp(path, "/v1/info") == 0 ||
               strcmp(path, "/v1/tools") == 0 || strcmp(path, "/v1/tasks") == 0 ||
               strcmp(path, "/v1/episodes") == 0 || strcmp(path, "/v1/batch") == 0 ||
               strcmp(path, "/metrics") == 0 || strcmp(path, "/v1/metrics") == 0) {
        snprintf(out, cap, "%s", path);
    } else {
        snprintf(out, cap, "other");
    }
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes %XX escapes of the URL in place. A %00 would cut every C string the routes handle,
 * so it decodes to 0xFF, a byte that is never valid UTF-8: routes then refuse the path as they
 * refuse any invalid UTF-8, instead of acting on a shortened one. */
static size_t unescape_url(void *cls, struct MHD_Connection *conn, char *uri)
{
    (void)cls;
    (void)conn;
    char *out = uri;
    for (const char *in = uri; *in; in++) {
        int hi, lo;
        if (in[0] == '%' && (hi = hex_value(in[1])) >= 0 && (lo = hex_value(in[2])) >= 0) {
            int byte = hi * 16 + lo;
            *out++ = (char)(byte ? byte : 0xFF);
            in += 2;
        } else {
            *out++ = *in;
        }
    }
    *out = '\0';
    return (size_t)(out - uri);
}

/* A file body: libmicrohttpd sends it from the fd (sendfile where it can), so a response of
 * any size costs no memory, and closes the fd when done with the response. */
static struct MHD_Response *file_response(api_response *resp)
{
    struct MHD_Response *r =
        resp->file_len > 0
            ? MHD_create_response_from_fd_at_offset64(resp->file_len, resp->file_fd, 0)
            : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (r && resp->file_len > 0)
        resp->has_file = false; /* the response owns the fd now */
    return r;
}

static struct MHD_Response *build_response(api_response *resp, const char *request_id)
{
    struct MHD_Response *r;
    if (resp->has_file || resp->raw) {
        r = resp->has_file
                ? file_response(resp)
                : MHD_create_response_from_buffer(resp->raw_len, resp->raw, MHD_RESPMEM_MUST_COPY);
        if (r)
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                    resp->content_type ? resp->content_type
                                                       : "application/octet-stream");
    } else {
        char *text = resp->json ? json_dumps(resp->json, JSON_COMPACT) : strdup("{}");
        if (!text)
            return NULL;
        size_t n = strlen(text);
        text[n] = '\n';
        r = MHD_create_response_from_buffer(n + 1, text, MHD_RESPMEM_MUST_FREE);
        if (!r)
            free(text);
        else
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    }
    if (!r)
        return NULL;
    char num[32];
    if (resp->retry_after_s > 0) {
        snprintf(num, sizeof num, "%d", resp->retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, num);
    }
    if (resp->location[0])
        MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, resp->location);
    MHD_add_response_header(r, "X-Request-Id", request_id);
    return r;
}

static void log_request(server *srv, const char *method, const char *path, const api_response *resp,
                        const char *request_id, double ms)
{
    if (!srv->cfg.log_requests)
        return;
    char *clean_path = text_sanitize_utf8(path, strlen(path)); /* paths need not be UTF-8 */
    json_t *f = json_pack("{s:s, s:s, s:s, s:i, s:f}", "request_id", request_id, "method", method,
                          "path", clean_path ? clean_path : "", "status", resp->status, "ms", ms);
    free(clean_path);
    if (resp->episode_id[0])
        json_object_set_new(f, "episode_id", json_string(resp->episode_id));
    if (resp->tool[0])
        json_object_set_new(f, "tool", json_string(resp->tool));
    if (resp->status >= 400 && resp->json) {
        const char *code =
            json_string_value(json_object_get(json_object_get(resp->json, "error"), "code"));
        if (code)
            json_object_set_new(f, "error", json_string(code));
    }
    server_log(resp->status >= 500 ? "error" : "info", "request", f);
}

static enum MHD_Result handle(server *srv, struct MHD_Connection *conn, const char *url,
                              const char *method, request_ctx *ctx)
{
    /* counted before the route runs and until the reply is sent (on_completed): a step's
     * in_flight ends before its reply is queued, and a drain that stopped the daemon in
     * between would cut the connection with the finished step's reply unsent */
    if (!ctx->counted) {
        ctx->counted = true;
        atomic_fetch_add(&srv->replies_pending, 1);
    }
    char request_id[32];
    snprintf(request_id, sizeof request_id, "req_%lx",
             (unsigned long)atomic_fetch_add(&srv->request_seq, 1));
    api_response resp = {0};
    if (ctx->too_large) {
        api_fail(&resp, 413, "PAYLOAD_TOO_LARGE", false,
                 json_pack("{s:I}", "max_body_bytes", (json_int_t)ctx->limit),
                 "the request body exceeds %zu bytes", ctx->limit);
    } else {
        json_t *query = json_object();
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_query, query);
        api_request req = {
            .method = method,
            .path = url,
            .query = query,
            .body = ctx->body.data,
            .body_len = ctx->body.len,
            .idempotency_key =
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key"),
            .request_id = request_id,
        };
        api_dispatch(srv, &req, &resp);
        json_decref(query);
    }
    double ms = elapsed_ms(&ctx->start);
    char pattern[96];
    route_pattern(url, pattern, sizeof pattern);
    metrics_http(srv->metrics, pattern, resp.status, ms / 1000.0);
    log_request(srv, method, url, &resp, request_id, ms);
    struct MHD_Response *r = build_response(&resp, request_id);
    enum MHD_Result ok = r ? MHD_queue_response(conn, (unsigned)resp.status, r) : MHD_NO;
    if (r)
        MHD_destroy_response(r);
    api_response_deinit(&resp);
    return ok;
}

/* libmicrohttpd calls this first with the headers, then with body chunks, then with none. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    server *srv = cls;
    request_ctx *ctx = *con_cls;
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx)
            return MHD_NO;
        clock_gettime(CLOCK_MONOTONIC, &ctx->start);
        bool put = strcmp(method, "PUT") == 0;
        ctx->limit = srv->cfg.max_body_bytes;
        if (put && srv->cfg.limits.max_file_bytes > ctx->limit)
            ctx->limit = srv->cfg.limits.max_file_bytes;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > ctx->limit)
            ctx->too_large = true;
        *con_cls = ctx;
        return MHD_YES;
    }
    if (*upload_data_size) {
        /* An oversized body is read and dropped, so the 413 reaches a client still sending. */
        if (!ctx->too_large && ctx->body.len + *upload_data_size > ctx->limit)
            ctx->too_large = true;
        if (!ctx->too_large && sb_append(&ctx->body, upload_data, *upload_data_size) != 0)
            ctx->too_large = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    return handle(srv, conn, url, method, ctx);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    server *srv = cls;
    (void)conn;
    (void)code;
    request_ctx *ctx = *con_cls;
    if (ctx) {
        if (ctx->counted)
            atomic_fetch_sub(&srv->replies_pending, 1);
        sb_free(&ctx->body);
        free(ctx);
        *con_cls = NULL;
    }
}

/* ---- lifecycle --------------------------------------------------------------------------- */

/* Each source must hold tasks: one that holds none is a mistake (a task's own folder given for
 * the store that holds it, an empty file), which loading the other sources would hide. */
static int load_source(server *srv, const char *path, bool kernelbench, char *err, size_t errcap)
{
    size_t n = strlen(path);
    bool jsonl = n > 6 && strcmp(path + n - 6, ".jsonl") == 0;
    int rc = kernelbench ? task_store_load_kernelbench(srv->tasks, path, err, errcap)
             : jsonl     ? task_store_load_jsonl(srv->tasks, path, err, errcap)
                         : task_store_load_dir(srv->tasks, path, err, errcap);
    if (rc == 0)
        return text_fail(err, errcap, "%s %s: no tasks in it (%s)",
                         kernelbench ? "--kernelbench" : "--tasks", path,
                         kernelbench ? "a KernelBench checkout's level folders, or a JSONL file"
                                     : "a task store is a folder of task folders, each with its "
                                       "task.json and model.py; or a .jsonl file");
    return rc < 0 ? -1 : 0;
}

static int load_tasks(server *srv, char *err, size_t errcap)
{
    srv->tasks = task_store_new();
    if (!srv->tasks) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    for (int i = 0; i < srv->cfg.n_tasks; i++)
        if (load_source(srv, srv->cfg.tasks[i], false, err, errcap) != 0)
            return -1;
    for (int i = 0; i < srv->cfg.n_kernelbench; i++)
        if (load_source(srv, srv->cfg.kernelbench[i], true, err, errcap) != 0)
            return -1;
    if (task_store_count(srv->tasks) == 0) {
        snprintf(err, errcap, "no tasks loaded: give --tasks or --kernelbench");
        return -1;
    }
    return 0;
}

const char *server_sandbox_desc(const server *srv)
{
    return srv->sandbox.active ? KGYM_SANDBOX_ON : KGYM_SANDBOX_WEAK;
}

/* kgym-sandbox sits beside kgym-env (both are built into the same directory). */
static void launcher_path(char *out, size_t cap)
{
    char self[480];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(out, cap, "%s/kgym-sandbox", slash ? self : ".");
}

static int init_sandbox(server *srv, char *err, size_t errcap)
{
    char launcher[512];
    launcher_path(launcher, sizeof launcher);
    if (sandbox_init(&srv->sandbox, launcher, srv->cfg.sandbox_profiles,
                     srv->cfg.allow_weak_sandbox, err, errcap) != 0)
        return -1;
    if (srv->cfg.sandbox_python[0] &&
        sandbox_set_python(&srv->sandbox, srv->cfg.sandbox_python, err, errcap) != 0)
        return -1;
    if (sandbox_set_totals(&srv->sandbox, srv->cfg.sandbox_total_memory_bytes,
                           srv->cfg.sandbox_total_pids, err, errcap) != 0)
        return -1;
    json_t *status = sandbox_status_json(&srv->sandbox);
    server_log(srv->sandbox.active ? "info" : "warn", "sandbox", status);
    ep_table_set_sandbox(srv->episodes, &srv->sandbox);
    return 0;
}

/* The harness lives in the source tree: <binary dir>/../env/harness unless --harness says. */
static void default_harness_dir(char *out, size_t cap)
{
    char self[480];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(out, cap, "%s/../env/harness", slash ? self : ".");
}

/* Absolute: the judge and the compilers run from other directories. */
static void absolute(char *out, size_t cap, const char *path)
{
    char abs[PATH_MAX];
    snprintf(out, cap, "%s", realpath(path, abs) ? abs : path);
}

static int init_eval(server *srv, char *err, size_t errcap)
{
    eval_config *ec = calloc(1, sizeof *ec);
    if (!ec) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    const server_config *c = &srv->cfg;
    char harness[PATH_MAX], cache[PATH_MAX];
    if (c->harness_dir[0])
        snprintf(harness, sizeof harness, "%s", c->harness_dir);
    else
        default_harness_dir(harness, sizeof harness);
    if (c->build_cache[0])
        snprintf(cache, sizeof cache, "%s", c->build_cache);
    else
        snprintf(cache, sizeof cache, "%s/cache", c->state_dir);
    mkdir(cache, 0700);
    absolute(ec->harness_dir, sizeof ec->harness_dir, harness);
    absolute(ec->cache_dir, sizeof ec->cache_dir, cache);
    absolute(ec->template_dir, sizeof ec->template_dir, c->template_dir);
    snprintf(ec->python, sizeof ec->python, "%s", c->sandbox_python);
    snprintf(ec->cuda_home, sizeof ec->cuda_home, "%s", srv->sandbox.cuda_home);
    snprintf(ec->cuda_arch, sizeof ec->cuda_arch, "%s", c->cuda_arch);
    snprintf(ec->gpus, sizeof ec->gpus, "%s", c->gpus);
    ec->eval_timeout_ms = c->eval_timeout_s * 1000;
    ec->cache_max_bytes = c->build_cache_max_bytes;
    int rc = eval_server_init(&srv->eval, ec, &srv->sandbox, err, errcap);
    free(ec);
    if (rc != 0)
        return -1;
    server_log(srv->eval.ready ? "info" : "warn", "evaluation", eval_server_json(&srv->eval));
    ep_table_set_eval(srv->episodes, &srv->eval);
    return 0;
}

/* Recovery rebuilds every episode folder it finds: a second server on a live one's state dir
 * would delete that server's workspaces under it. Taken once the dir exists, before anything
 * in it is touched. */
static int lock_state_dir(server *srv, char *err, size_t errcap)
{
    char path[PATH_MAX];
    if (!text_fmt(path, sizeof path, "%s/.lock", srv->cfg.state_dir))
        return text_fail(err, errcap, "--state-dir %s: the path is too long", srv->cfg.state_dir);
    srv->state_lock_fd = file_lock_exclusive(path);
    if (srv->state_lock_fd == -EWOULDBLOCK)
        return text_fail(err, errcap,
                         "state dir %s is in use by another kgym-env (lock %s held): give each "
                         "server its own --state-dir",
                         srv->cfg.state_dir, path);
    if (srv->state_lock_fd < 0)
        return text_fail(err, errcap, "cannot lock %s: %s", path, strerror(-srv->state_lock_fd));
    return 0;
}

int server_init(server *srv, char *err, size_t errcap)
{
    srv->state_lock_fd = -1;
    srv->started_at = ep_now();
    pthread_mutex_init(&srv->global_idem_lock, NULL);
    if (idem_init(&srv->global_idem, 1024) != 0 || !(srv->metrics = metrics_new())) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    if (load_tasks(srv, err, errcap) != 0)
        return -1;
    srv->tpl = ws_template_load(srv->cfg.template_dir, err, errcap);
    if (!srv->tpl)
        return -1;
    srv->episodes = ep_table_new(&srv->cfg, srv->tasks, srv->tpl, err, errcap);
    if (!srv->episodes || lock_state_dir(srv, err, errcap) != 0)
        return -1;
    ep_table_set_metrics(srv->episodes, srv->metrics);
    if (init_sandbox(srv, err, errcap) != 0 || init_eval(srv, err, errcap) != 0)
        return -1;
    int found = ep_table_recover(srv->episodes, err, errcap);
    if (found < 0)
        return -1;
    server_log("info", "recovered",
               json_pack("{s:i, s:s}", "episodes", found, "state_dir", srv->cfg.state_dir));
    return 0;
}

void server_deinit(server *srv)
{
    ep_table_free(srv->episodes);
    sandbox_deinit(&srv->sandbox);
    eval_server_deinit(&srv->eval);
    ws_template_free(srv->tpl);
    task_store_free(srv->tasks);
    metrics_free(srv->metrics);
    idem_deinit(&srv->global_idem);
    pthread_mutex_destroy(&srv->global_idem_lock);
    if (srv->state_lock_fd >= 0)
        close(srv->state_lock_fd); /* last: the state dir is the next server's from here */
}

static int start_daemon(server *srv, char *err, size_t errcap)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv->cfg.port)};
    if (inet_pton(AF_INET, srv->cfg.host, &addr.sin_addr) != 1) {
        snprintf(err, errcap, "--host %s is not an IPv4 address", srv->cfg.host);
        return -1;
    }
    srv->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ERROR_LOG,
        (uint16_t)srv->cfg.port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)srv->cfg.connection_limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)900,
        /* no LISTENING_ADDRESS_REUSE: on Linux it adds SO_REUSEPORT, and a second server on the
         * same port would then start and share our connections instead of failing; without it
         * MHD still sets SO_REUSEADDR, so a restart does not wait out TIME_WAIT */
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL, MHD_OPTION_END);
    if (!srv->daemon) {
        snprintf(err, errcap, "cannot listen on %s:%d (in use, or not permitted)", srv->cfg.host,
                 srv->cfg.port);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->bound_port = info ? info->port : srv->cfg.port;
    return 0;
}

/* Waits up to drain_timeout_s until every request being handled has its reply sent: in-flight
 * steps (each one a request) and the 503s of requests that come meanwhile. */
static void drain(server *srv)
{
    double deadline = ep_now() + srv->cfg.drain_timeout_s;
    /* both counts: a long request that is not a step (a baselines measurement, a batch) is
     * waited for as well, and an operator reading "in_flight": 0 should not think it was not */
    server_log("info", "draining",
               json_pack("{s:I, s:I}", "in_flight", (json_int_t)atomic_load(&srv->in_flight),
                         "requests_pending", (json_int_t)atomic_load(&srv->replies_pending)));
    while (atomic_load(&srv->replies_pending) > 0 && ep_now() < deadline) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int server_run(server *srv, char *err, size_t errcap)
{
    /* Signals go to this thread only (sigwait below); the threads libmicrohttpd and spawn
     * create inherit the blocked mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (start_daemon(srv, err, errcap) != 0)
        return -1;
    server_log("info", "listening",
               json_pack("{s:s, s:i, s:I, s:s, s:s, s:s}", "host", srv->cfg.host, "port",
                         srv->bound_port, "tasks", (json_int_t)task_store_count(srv->tasks),
                         "state_dir", srv->cfg.state_dir, "durability",
                         srv->cfg.durability == DURABILITY_FSYNC ? "fsync" : "none", "sandbox",
                         server_sandbox_desc(srv)));
    double interval = srv->cfg.reaper_interval_s;
    for (;;) {
        struct timespec ts = {(time_t)interval,
                              (long)((interval - (double)(time_t)interval) * 1e9)};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
            atomic_store(&srv->draining, true);
            server_log("info", "signal",
                       json_pack("{s:s}", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"));
            break;
        }
        int reaped = ep_reap_idle(srv->episodes, ep_now());
        if (reaped > 0)
            server_log("info", "reaped", json_pack("{s:i}", "episodes", reaped));
    }
    drain(srv);
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    server_log("info", "stopped", NULL);
    return 0;
}
