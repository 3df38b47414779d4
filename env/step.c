#include "step.h"
#include "util/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One action, normalised from whichever form it came in. */
typedef struct action {
    const tool_def *tool;
    char tool_name[64];
    char call_id[128];
    json_t *args;           /* owned; NULL when malformed */
    const char *error_code; /* set when the call cannot run: UNKNOWN_TOOL, INVALID_TOOL_CALL */
    char error[256];
} action;

static void copy_str(char *dst, size_t cap, const json_t *v)
{
    snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

static void action_invalid(action *a, const char *code, const char *fmt, const char *arg)
{
    a->error_code = code;
    snprintf(a->error, sizeof a->error, fmt, arg);
}

/* Arguments may arrive as an object or as a JSON text (OpenAI sends a string). */
static void take_args(action *a, const json_t *args)
{
    if (!args || json_is_null(args)) {
        a->args = json_object();
    } else if (json_is_string(args)) {
        json_error_t jerr;
        a->args =
            json_loadb(json_string_value(args), json_string_length(args), JSON_ALLOW_NUL, &jerr);
        if (!a->args)
            action_invalid(a, "INVALID_TOOL_CALL", "the arguments are not valid JSON: %s",
                           jerr.text);
    } else {
        a->args = json_incref((json_t *)args);
    }
}

static void parse_action(const json_t *raw, action *a)
{
    memset(a, 0, sizeof *a);
    if (!json_is_object(raw)) {
        action_invalid(a, "INVALID_TOOL_CALL", "%s", "an action must be a JSON object");
        return;
    }
    const json_t *fn = json_object_get(raw, "function");
    const json_t *name, *args;
    if (json_is_object(fn)) { /* OpenAI tool_call */
        name = json_object_get(fn, "name");
        args = json_object_get(fn, "arguments");
        copy_str(a->call_id, sizeof a->call_id, json_object_get(raw, "id"));
    } else if (json_object_get(raw, "input") || json_is_string(json_object_get(raw, "name"))) {
        name = json_object_get(raw, "name"); /* Anthropic tool_use */
        args = json_object_get(raw, "input");
        copy_str(a->call_id, sizeof a->call_id, json_object_get(raw, "id"));
    } else {
        name = json_object_get(raw, "tool");
        args = json_object_get(raw, "args");
        copy_str(a->call_id, sizeof a->call_id, json_object_get(raw, "call_id"));
    }
    if (!json_is_string(name)) {
        action_invalid(a, "INVALID_TOOL_CALL", "%s",
                       "the action names no tool (expected \"tool\", \"function.name\" or "
                       "\"name\")");
        return;
    }
    copy_str(a->tool_name, sizeof a->tool_name, name);
    a->tool = tool_find(a->tool_name);
    take_args(a, args);
    if (!a->tool && !a->error_code)
        action_invalid(a, "UNKNOWN_TOOL", "unknown tool '%s'; GET /v1/tools lists the tools",
                       a->tool_name);
}

/* In single-turn mode the only action is Submit carrying the files (DESIGN.md §3.4). */
static bool single_turn_refuses(const episode *ep, const action *a)
{
    const char *mode = json_string_value(json_object_get(ep->options, "mode"));
    return mode && strcmp(mode, "single_turn") == 0 && a->tool &&
           strcmp(a->tool->name, "Submit") != 0;
}

/* Runs one action and returns its observation. A Submit hands its final evaluation to *final
 * (the episode ends with this turn). */
static json_t *run_action(server *srv, episode *ep, action *a, json_t **final)
{
    tool_result res = {0};
    double t0 = text_mono_ms();
    if (!a->error_code && *final) {
        tool_fail(&res, "EPISODE_ENDED", NULL,
                  "not run: Submit ended the episode earlier in this turn");
    } else if (!a->error_code && single_turn_refuses(ep, a)) {
        tool_fail(&res, "SINGLE_TURN", NULL,
                  "this episode is single-turn: the only action is Submit with {\"files\": "
                  "{\"model_new.py\": ..., \"kernels/...\": ...}}");
    } else if (a->error_code) {
        json_t *data = strcmp(a->error_code, "UNKNOWN_TOOL") == 0
                           ? json_pack("{s:s}", "tool", a->tool_name)
                           : NULL;
        tool_fail(&res, a->error_code, data, "%s", a->error);
    } else {
        tool_env env;
        ep_tool_env(ep, &env);
        tool_invoke(a->tool, &env, a->args, &res);
        if (res.terminal) {
            *final = res.final_eval ? res.final_eval : json_object();
            res.final_eval = NULL;
        }
    }
    double ms = text_mono_ms() - t0;
    const char *code =
        res.is_error ? json_string_value(json_object_get(res.data, "error_code")) : NULL;
    metrics_tool(srv->metrics, a->tool ? a->tool->name : "unknown", code, ms / 1000.0);
    json_t *obs = json_pack("{s:s, s:s, s:b, s:s, s:o, s:f}", "tool",
                            a->tool ? a->tool->name : a->tool_name, "call_id", a->call_id,
                            "is_error", res.is_error, "content", res.content ? res.content : "",
                            "data", res.data ? res.data : json_object(), "duration_ms", ms);
    res.data = NULL;
    tool_result_deinit(&res);
    return obs;
}

static json_t *action_record(const action *a, const json_t *raw)
{
    if (a->error_code)
        return json_pack("{s:s, s:s, s:O}", "tool", a->tool_name, "call_id", a->call_id, "raw",
                         raw);
    return json_pack("{s:s, s:s, s:O}", "tool", a->tool ? a->tool->name : a->tool_name, "call_id",
                     a->call_id, "args", a->args);
}

/* Collects the turn's raw actions into an array; fills resp with a 400 if the body has none. */
static json_t *turn_actions(server *srv, const json_t *body, const char *shorthand_tool,
                            bool *single, api_response *resp)
{
    *single = true;
    if (shorthand_tool) {
        if (!json_is_object(body)) {
            api_fail(resp, 400, "BAD_REQUEST", false, NULL,
                     "the body of POST .../tools/{Tool} must be the tool's arguments object");
            return NULL;
        }
        return json_pack("[{s:s, s:O}]", "tool", shorthand_tool, "args", body);
    }
    const json_t *one = json_is_object(body) ? json_object_get(body, "action") : NULL;
    const json_t *many = json_is_object(body) ? json_object_get(body, "actions") : NULL;
    if (one && !many)
        return json_pack("[O]", one);
    if (many && !one && json_is_array(many) && json_array_size(many) > 0) {
        if (json_array_size(many) > (size_t)srv->cfg.max_actions_per_turn) {
            api_fail(resp, 400, "BAD_REQUEST", false,
                     json_pack("{s:i}", "max_actions_per_turn", srv->cfg.max_actions_per_turn),
                     "a turn may hold at most %d actions", srv->cfg.max_actions_per_turn);
            return NULL;
        }
        *single = false;
        return json_incref((json_t *)many);
    }
    api_fail(resp, 400, "BAD_REQUEST", false, NULL,
             "the step body must be {\"action\": {...}} or {\"actions\": [...]} "
             "(a non-empty array)");
    return NULL;
}

/* Truncation runs the final evaluation, as Submit would, when the server can evaluate. */
static json_t *final_on_truncation(episode *ep)
{
    if (!ep->eval || !ep->eval->configured)
        return NULL;
    tool_env env;
    ep_tool_env(ep, &env);
    tool_result res = {0};
    json_t *no_args = json_object();
    tool_invoke(&tool_def_submit, &env, no_args, &res);
    json_decref(no_args);
    json_t *final = res.final_eval;
    res.final_eval = NULL;
    tool_result_deinit(&res);
    return final;
}

static json_t *step_info(const episode *ep, double exec_ms, double record_ms)
{
    char expires[32];
    ep_iso_time(ep_now() + ep->idle_timeout_s, expires);
    int left = ep->max_steps - ep->step;
    return json_pack("{s:i, s:i, s:i, s:s, s:{s:f, s:f}}", "step", ep->step, "steps_left",
                     left > 0 ? left : 0, "max_steps", ep->max_steps, "expires_at", expires,
                     "timing", "exec_ms", exec_ms, "record_ms", record_ms);
}

void step_run(server *srv, episode *ep, const json_t *body, const char *shorthand_tool,
              api_response *resp)
{
    bool single;
    json_t *raws = turn_actions(srv, body, shorthand_tool, &single, resp);
    if (!raws)
        return;
    double t0 = text_mono_ms();
    json_t *observations = json_array(), *recorded = json_array();
    json_t *final = NULL; /* the final evaluation, once Submit ran */
    size_t i;
    json_t *raw;
    json_array_foreach(raws, i, raw)
    {
        action a;
        parse_action(raw, &a);
        json_array_append_new(observations, run_action(srv, ep, &a, &final));
        json_array_append_new(recorded, action_record(&a, raw));
        json_decref(a.args);
    }
    double exec_ms = text_mono_ms() - t0;
    ep->step++;
    bool terminated = final != NULL;
    bool truncated =
        !terminated && (ep->step >= ep->max_steps || ep_now() - ep->reset_at > ep->max_wall_s);
    if (truncated) /* the limit ends the episode: the workspace as it is gets the final eval */
        final = final_on_truncation(ep);
    /* Non-terminal turns pay nothing; an infra_error pays null (DESIGN.md §3.4). */
    json_t *reward = final ? json_incref(json_object_get(final, "reward")) : json_real(0.0);
    if (!reward)
        reward = json_null();

    double t1 = text_mono_ms();
    json_t *info = step_info(ep, exec_ms, 0);
    if (final) {
        json_object_set(info, "reward_components", final);
        json_object_set(info, "eval_status", json_object_get(final, "eval_status"));
    }
    json_t *rec = json_pack("{s:s, s:i, s:O, s:O, s:O, s:b, s:b, s:O}", "type", "step", "step",
                            ep->step, "actions", recorded, "observations", observations, "reward",
                            reward, "terminated", terminated, "truncated", truncated, "info", info);
    api_error e = {0};
    int rc = ep_record(ep, rec, &e);
    json_decref(rec);
    json_decref(recorded);
    json_decref(raws);
    json_decref(final);
    if (rc != 0) {
        /* Not recorded means not acknowledged: the client may retry the turn. */
        ep->step--;
        json_decref(observations);
        json_decref(info);
        json_decref(reward);
        api_fail_from(resp, &e);
        return;
    }
    if (terminated)
        ep_mark_done(srv->episodes, ep, EP_TERMINATED);
    else if (truncated)
        ep_mark_done(srv->episodes, ep, EP_TRUNCATED);
    if (json_is_number(reward))
        ep->total_reward += json_number_value(reward);
    json_object_set_new(json_object_get(info, "timing"), "record_ms",
                        json_real(text_mono_ms() - t1));
    json_t *out = json_object();
    if (single)
        json_object_set(out, "observation", json_array_get(observations, 0));
    else
        json_object_set(out, "observations", observations);
    json_decref(observations);
    json_object_set_new(out, "reward", reward);
    json_object_set_new(out, "terminated", json_boolean(terminated));
    json_object_set_new(out, "truncated", json_boolean(truncated));
    json_object_set_new(out, "info", info);
    snprintf(resp->tool, sizeof resp->tool, "%s",
             single
                 ? json_string_value(json_object_get(json_object_get(out, "observation"), "tool"))
                 : "multi");
    api_json(resp, 200, out);
}
