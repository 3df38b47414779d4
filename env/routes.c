/* Dispatch and the server-level routes: health, info, tools, tasks, metrics. */
#include "routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tool.h"

json_t *route_parse_body(const api_request *req, bool allow_empty, api_response *resp)
{
    if (req->body_len == 0 && allow_empty)
        return json_object();
    json_error_t jerr;
    json_t *body = json_loadb(req->body ? req->body : "", req->body_len,
                              JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &jerr);
    if (!body) {
        api_fail(resp, 400, "INVALID_JSON", false,
                 json_pack("{s:i, s:i}", "line", jerr.line, "column", jerr.column),
                 "the request body is not valid JSON: %s", jerr.text);
        return NULL;
    }
    return body;
}

const char *route_query(const api_request *req, const char *name)
{
    return req->query ? json_string_value(json_object_get(req->query, name)) : NULL;
}

/* [{index, node, busy}] of the GPU pool. */
static json_t *gpus_json(eval_server *es)
{
    json_t *a = json_array();
    pthread_mutex_lock(&es->gpus.lock);
    for (int i = 0; i < es->gpus.n; i++)
        json_array_append_new(a, json_pack("{s:i, s:s, s:b}", "index", es->gpus.index[i], "node",
                                           es->gpus.node[i], "busy", es->gpus.busy[i]));
    pthread_mutex_unlock(&es->gpus.lock);
    return a;
}

void route_health(server *srv, const api_request *req, api_response *resp)
{
    (void)req;
    bool draining = atomic_load(&srv->draining);
    json_t *sbx = sandbox_status_json(&srv->sandbox);
    json_object_set_new(sbx, "uids", ep_uids_json(srv->episodes));
    api_json(resp, draining ? 503 : 200,
             json_pack("{s:s, s:I, s:i, s:o, s:o, s:o}", "status", draining ? "draining" : "ok",
                       "active_episodes", (json_int_t)ep_open_count(srv->episodes), "max_episodes",
                       srv->cfg.max_episodes, "gpus", gpus_json(&srv->eval), "sandbox", sbx,
                       "evaluation", eval_server_json(&srv->eval)));
    if (draining)
        resp->retry_after_s = srv->cfg.retry_after_s;
}

void route_info(server *srv, const api_request *req, api_response *resp)
{
    (void)req;
    json_t *tools = json_array();
    for (size_t i = 0; i < tool_count(); i++)
        json_array_append_new(tools, json_string(tool_at(i)->name));
    const tool_limits *l = &srv->cfg.limits;
    api_json(resp, 200,
             json_pack("{s:s, s:s, s:o, s:I, s:{s:i, s:i, s:f, s:f, s:i, s:I, s:I, s:I, s:i, s:i, "
                       "s:i, s:I}, s:s, s:s, s:b, s:[], s:s}",
                       "name", "kgym-env", "version", KGYM_VERSION, "tools", tools, "task_count",
                       (json_int_t)task_store_count(srv->tasks), "limits", "max_episodes",
                       srv->cfg.max_episodes, "max_steps", srv->cfg.max_steps, "max_wall_s",
                       srv->cfg.max_wall_s, "idle_timeout_s", srv->cfg.idle_timeout_s,
                       "max_actions_per_turn", srv->cfg.max_actions_per_turn, "max_body_bytes",
                       (json_int_t)srv->cfg.max_body_bytes, "max_file_bytes",
                       (json_int_t)l->max_file_bytes, "disk_quota_bytes",
                       (json_int_t)l->disk_quota_bytes, "bash_timeout_ms", l->bash_timeout_ms,
                       "bash_timeout_max_ms", l->bash_timeout_max_ms, "client_read_timeout_s",
                       l->bash_timeout_max_ms / 1000 + 30, "max_output_chars",
                       (json_int_t)l->max_output_chars, "durability",
                       srv->cfg.durability == DURABILITY_FSYNC ? "fsync" : "none", "sandbox",
                       server_sandbox_desc(srv), "draining", atomic_load(&srv->draining), "devices",
                       "evaluation",
                       "not available in this build (Compile/Verify/Profile/Submit come with the "
                       "trusted harness)"));
}

void route_tools(server *srv, const api_request *req, api_response *resp)
{
    (void)srv;
    const char *format = route_query(req, "format");
    if (!format)
        format = "openai";
    bool openai = strcmp(format, "openai") == 0;
    if (!openai && strcmp(format, "anthropic") != 0) {
        api_fail(resp, 400, "BAD_REQUEST", false, NULL,
                 "format must be \"openai\" or \"anthropic\", not \"%s\"", format);
        return;
    }
    json_t *list = json_array();
    for (size_t i = 0; i < tool_count(); i++) {
        const tool_def *t = tool_at(i);
        json_t *schema = json_loads(t->schema, 0, NULL);
        if (openai)
            json_array_append_new(list, json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function",
                                                  "function", "name", t->name, "description",
                                                  t->description, "parameters", schema));
        else
            json_array_append_new(list, json_pack("{s:s, s:s, s:o}", "name", t->name, "description",
                                                  t->description, "input_schema", schema));
    }
    api_json(resp, 200, json_pack("{s:s, s:o}", "format", format, "tools", list));
}

static bool task_matches(const task *t, const char *suite, int level)
{
    return (!suite || strcmp(t->suite, suite) == 0) && (level <= 0 || t->level == level);
}

void route_tasks(server *srv, const api_request *req, api_response *resp)
{
    const char *suite = route_query(req, "suite");
    const char *level_s = route_query(req, "level");
    const char *limit_s = route_query(req, "limit");
    const char *offset_s = route_query(req, "offset");
    int level = level_s ? atoi(level_s) : 0;
    long limit = limit_s ? atol(limit_s) : 1000000;
    long offset = offset_s ? atol(offset_s) : 0;
    if ((level_s && level <= 0) || limit < 0 || offset < 0) {
        api_fail(resp, 400, "BAD_REQUEST", false, NULL,
                 "level must be a positive integer; limit and offset non-negative integers");
        return;
    }
    json_t *list = json_array();
    long matched = 0;
    for (size_t i = 0; i < task_store_count(srv->tasks); i++) {
        const task *t = task_store_at(srv->tasks, i);
        if (!task_matches(t, suite, level))
            continue;
        if (matched >= offset && matched - offset < limit)
            json_array_append_new(list, task_summary_json(t));
        matched++;
    }
    api_json(resp, 200, json_pack("{s:I, s:o}", "count", (json_int_t)matched, "tasks", list));
}

void route_task(server *srv, const api_request *req, const char *id, api_response *resp)
{
    (void)req;
    const task *t = task_store_find(srv->tasks, id);
    if (!t) {
        api_fail(resp, 404, "TASK_NOT_FOUND", false, NULL, "no task with id '%s'", id);
        return;
    }
    api_json(resp, 200, task_detail_json(t));
}

/* POST /v1/tasks/{id}/baselines {variant?: "gpu"|"cpu", phase?: "measure"|"warmup",
 * remeasure?: bool}: the task's eager and torch.compile times, measured once per (reference,
 * device, torch version) and cached (kgym-bench baselines); remeasure: measured again past the
 * cache, the new figures replacing the cached ones (an operator's call on a noisy measurement);
 * phase "warmup" only compiles, untimed, under a shared GPU lease, so a later measurement holds
 * the GPU for the timing alone. A failed measurement is 503 with the judge's reason: nothing the
 * caller sent was wrong. */
void route_task_baselines(server *srv, const api_request *req, const char *id, api_response *resp)
{
    const task *t = task_store_find(srv->tasks, id);
    if (!t) {
        api_fail(resp, 404, "TASK_NOT_FOUND", false, NULL, "no task with id '%s'", id);
        return;
    }
    json_t *body = route_parse_body(req, true, resp);
    if (!body)
        return;
    json_t *v = json_object_get(body, "variant");
    const char *variant = json_is_string(v) ? json_string_value(v) : NULL;
    if ((v && !variant) ||
        (variant && strcmp(variant, "cpu") != 0 && strcmp(variant, "gpu") != 0)) {
        json_decref(body);
        api_fail(resp, 400, "BAD_REQUEST", false, NULL, "variant must be \"gpu\" or \"cpu\"");
        return;
    }
    json_t *ph = json_object_get(body, "phase");
    const char *phase = json_is_string(ph) ? json_string_value(ph) : NULL;
    if ((ph && !phase) ||
        (phase && strcmp(phase, "measure") != 0 && strcmp(phase, "warmup") != 0)) {
        json_decref(body);
        api_fail(resp, 400, "BAD_REQUEST", false, NULL, "phase must be \"measure\" or \"warmup\"");
        return;
    }
    bool cpu = variant && strcmp(variant, "cpu") == 0;
    bool warmup = phase && strcmp(phase, "warmup") == 0;
    json_t *re = json_object_get(body, "remeasure");
    bool remeasure = json_is_true(re), bad_remeasure = re && !json_is_boolean(re);
    json_decref(body); /* re is not read after this: a string or number went with body */
    if (bad_remeasure || (remeasure && warmup)) {
        api_fail(resp, 400, "BAD_REQUEST", false, NULL,
                 "remeasure must be true or false, and applies to phase \"measure\" only");
        return;
    }
    json_t *out = eval_baselines(&srv->eval, t, cpu, warmup, remeasure);
    const char *status = json_string_value(json_object_get(out, "eval_status"));
    if (!status || strcmp(status, "ok") != 0) {
        const char *why = json_string_value(json_object_get(out, "error"));
        api_fail(resp, 503, "BASELINES_UNAVAILABLE", true, out, "%s",
                 why ? why : "the baselines could not be measured");
        return;
    }
    json_object_set_new(out, "task_id", json_string(t->id));
    json_object_set_new(out, "variant", json_string(cpu ? "cpu" : "gpu"));
    api_json(resp, 200, out);
}

void route_metrics(server *srv, const api_request *req, api_response *resp)
{
    (void)req;
    metrics_gauges g = {
        .active_episodes = ep_open_count(srv->episodes),
        .max_episodes = srv->cfg.max_episodes,
        .steps_in_flight = atomic_load(&srv->in_flight),
        .draining = atomic_load(&srv->draining),
        .uptime_s = ep_now() - srv->started_at,
    };
    resp->status = 200;
    resp->raw = metrics_render(srv->metrics, &g, &resp->raw_len);
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* ---- dispatch ---------------------------------------------------------------------------- */

static bool is(const api_request *req, const char *method)
{
    return strcmp(req->method, method) == 0;
}

static void method_not_allowed(const api_request *req, api_response *resp, const char *allowed)
{
    api_fail(resp, 405, "METHOD_NOT_ALLOWED", false, json_pack("{s:s}", "allowed", allowed),
             "%s is not allowed on %s (allowed: %s)", req->method, req->path, allowed);
}

/* Routes that take no id. Returns false when the path is not one of them. */
static bool dispatch_fixed(server *srv, const api_request *req, api_response *resp)
{
    static const struct {
        const char *path, *method;
        void (*fn)(server *, const api_request *, api_response *);
    } FIXED[] = {
        {"/v1/health", "GET", route_health},
        {"/v1/info", "GET", route_info},
        {"/v1/tools", "GET", route_tools},
        {"/v1/tasks", "GET", route_tasks},
        {"/metrics", "GET", route_metrics},
        {"/v1/metrics", "GET", route_metrics},
        {"/v1/batch", "POST", route_batch},
        {"/v1/episodes", "GET", route_episode_list},
        {"/v1/episodes", "POST", route_episode_create},
    };
    bool path_known = false;
    for (size_t i = 0; i < sizeof FIXED / sizeof FIXED[0]; i++) {
        if (strcmp(req->path, FIXED[i].path) != 0)
            continue;
        path_known = true;
        if (is(req, FIXED[i].method)) {
            FIXED[i].fn(srv, req, resp);
            return true;
        }
    }
    if (path_known)
        method_not_allowed(req, resp,
                           strcmp(req->path, "/v1/episodes") == 0 ? "GET, POST"
                           : strcmp(req->path, "/v1/batch") == 0  ? "POST"
                                                                  : "GET");
    return path_known;
}

void api_dispatch(server *srv, const api_request *req, api_response *resp)
{
    const char *p = req->path;
    if (dispatch_fixed(srv, req, resp))
        return;
    if (strncmp(p, "/v1/tasks/", 10) == 0 && p[10]) {
        size_t n = strlen(p + 10), suffix = strlen("/baselines");
        if (n > suffix && strcmp(p + 10 + n - suffix, "/baselines") == 0) {
            char id[256];
            if (n - suffix >= sizeof id) {
                api_fail(resp, 404, "TASK_NOT_FOUND", false, NULL, "no such task");
            } else if (!is(req, "POST")) {
                method_not_allowed(req, resp, "POST");
            } else {
                memcpy(id, p + 10, n - suffix);
                id[n - suffix] = '\0';
                route_task_baselines(srv, req, id, resp);
            }
            return;
        }
        if (is(req, "GET"))
            route_task(srv, req, p + 10, resp);
        else
            method_not_allowed(req, resp, "GET");
        return;
    }
    if (strncmp(p, "/v1/episodes/", 13) == 0 && p[13]) {
        char id[64];
        const char *slash = strchr(p + 13, '/');
        size_t n = slash ? (size_t)(slash - (p + 13)) : strlen(p + 13);
        if (n >= sizeof id) {
            api_fail(resp, 404, "EPISODE_NOT_FOUND", false, NULL, "no such episode");
            return;
        }
        memcpy(id, p + 13, n);
        id[n] = '\0';
        route_episode(srv, req, id, slash ? slash : "", resp);
        return;
    }
    api_fail(resp, 404, "NOT_FOUND", false, NULL, "no route %s %s; see README.md for the API",
             req->method, req->path);
}
