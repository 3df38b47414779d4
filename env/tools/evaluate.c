/* Verify, Profile and Submit: the agent's view of the trusted evaluation (harness/eval.h).
 *
 * Each call evaluates the workspace as it is now (rebuilding what changed), with fresh seeds.
 * An incorrect or failing candidate is an in-band error whose data carries every figure; an
 * infrastructure failure says so (INFRA_ERROR) and is never counted against the agent. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/eval.h"
#include "harness/reward.h"
#include "tools/jobs.h"
#include "tools/tool.h"
#include "util/strbuf.h"

static const char *str_of(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static double num_of(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static bool is_ok(const json_t *c)
{
    return strcmp(str_of(c, "eval_status"), "ok") == 0;
}

static bool is_correct(const json_t *c)
{
    return is_ok(c) && json_is_true(json_object_get(c, "compiled")) &&
           json_is_true(json_object_get(c, "correct"));
}

/* One line per figure the agent needs; the full record is in data. */
static void describe(strbuf *sb, const json_t *c)
{
    if (!is_ok(c)) {
        sb_printf(sb, "Evaluation could not run (infrastructure, not your code): %s\n",
                  str_of(c, "error"));
        return;
    }
    if (!json_is_true(json_object_get(c, "compiled"))) {
        sb_printf(sb, "Compile failed:\n%s\n", str_of(c, "compile_log"));
        return;
    }
    if (!json_is_true(json_object_get(c, "correct"))) {
        sb_printf(sb, "INCORRECT (%s): %s\n", str_of(c, "error_code"), str_of(c, "error"));
        const char *out = str_of(c, "candidate_output");
        if (out[0])
            sb_printf(sb, "Output of your process (tail):\n%s\n", out);
        return;
    }
    size_t n = json_array_size(json_object_get(c, "checks"));
    sb_printf(sb,
              "Correct: %zu checks passed on fresh inputs (max abs err %.3g, max rel err %.3g)\n",
              n, num_of(c, "max_abs_err_all"), num_of(c, "max_rel_err_all"));
    double tc = num_of(c, "t_candidate_ms");
    if (isnan(tc))
        return;
    sb_printf(sb, "Your ModelNew: %.4g ms (spread %.2g%%, %d calls)\n", tc,
              100 * num_of(c, "spread_candidate"), (int)num_of(c, "reps_candidate"));
    sb_printf(sb, "PyTorch eager: %.4g ms -> speed-up %.3gx\n", num_of(c, "t_eager_ms"),
              num_of(c, "speedup_eager"));
    if (!isnan(num_of(c, "t_compile_ms")))
        sb_printf(sb, "torch.compile: %.4g ms -> speed-up %.3gx\n", num_of(c, "t_compile_ms"),
                  num_of(c, "speedup_compile"));
    else
        sb_printf(sb, "torch.compile: unavailable (%.200s)\n", str_of(c, "compile_unavailable"));
}

/* Summaries of the per-check errors, for the text and for reward_components. */
static void add_error_totals(json_t *c)
{
    double a = 0, r = 0;
    size_t i;
    json_t *chk;
    json_array_foreach(json_object_get(c, "checks"), i, chk)
    {
        double ca = num_of(chk, "max_abs_err"), cr = num_of(chk, "max_rel_err");
        a = !isnan(ca) && ca > a ? ca : a;
        r = !isnan(cr) && cr > r ? cr : r;
    }
    json_object_set_new(c, "max_abs_err_all", json_real(a));
    json_object_set_new(c, "max_rel_err_all", json_real(r));
}

static reward_mode mode_of(const tool_env *env)
{
    reward_mode m = REWARD_MILESTONE;
    reward_mode_parse(env->reward_mode, &m);
    return m;
}

/* The episode's background jobs are frozen for the whole evaluation (the rebuild, the wait for
 * the device, the judge, a retry) and thawed after it, whatever its outcome: left running, a busy
 * loop would share the CPUs with the judge, inflating the eager and torch.compile baselines it
 * measures (and caches for every later evaluation of the task) or starving it into a timeout.
 * The result says how many were frozen, and how many kept running (no freezer on this host,
 * e.g. weak mode). eval_run always returns, so the thaw always runs. */
static json_t *evaluate(const tool_env *env, const char *mode)
{
    job_freeze_count frozen = job_table_freeze(env->jobs, true);
    json_t *c = eval_run(env->eval, env, mode);
    if (!is_ok(c) && strcmp(mode, "final") == 0) { /* infra: try once more before giving up */
        json_decref(c);
        c = eval_run(env->eval, env, mode);
        json_object_set_new(c, "retried", json_true());
    }
    (void)job_table_freeze(env->jobs, false);
    json_object_set_new(c, "jobs_frozen", json_integer((json_int_t)frozen.frozen));
    json_object_set_new(c, "jobs_not_frozen", json_integer((json_int_t)frozen.unfrozen));
    add_error_totals(c);
    reward_apply(c, mode_of(env));
    return c;
}

/* What happened to the agent's background commands meanwhile. */
static void describe_jobs(strbuf *sb, const json_t *c)
{
    json_int_t frozen = json_integer_value(json_object_get(c, "jobs_frozen"));
    json_int_t running = json_integer_value(json_object_get(c, "jobs_not_frozen"));
    if (frozen > 0)
        sb_printf(sb, "(%lld background command%s paused during the evaluation, resumed after.)\n",
                  (long long)frozen, frozen == 1 ? " was" : "s were");
    if (running > 0)
        sb_printf(sb,
                  "(%lld background command%s kept running during the evaluation: this server "
                  "cannot pause them.)\n",
                  (long long)running, running == 1 ? "" : "s");
}

/* Finishes res from an evaluation: an error unless correct. c is stolen. */
static void report(tool_result *res, json_t *c, const char *title)
{
    strbuf sb = {0};
    sb_printf(&sb, "%s\n", title);
    describe(&sb, c);
    describe_jobs(&sb, c);
    const char *code = !is_ok(c) ? "INFRA_ERROR"
                       : !is_correct(c)
                           ? (str_of(c, "error_code")[0] ? str_of(c, "error_code") : "INCORRECT")
                           : NULL;
    char *text = sb_steal(&sb);
    if (code)
        tool_fail(res, code, c, "%s", text);
    else
        tool_ok(res, c, "%s", text);
    free(text);
}

/* Remembers the best correct profiled snapshot for reward_on = "best". */
static void keep_if_best(const tool_env *env, const json_t *c)
{
    double r = reward_rank(c);
    if (r == -INFINITY)
        return;
    if (!env->evs->best || r > reward_rank(env->evs->best)) {
        json_decref(env->evs->best);
        env->evs->best = json_deep_copy(c);
    }
}

static bool unavailable(const tool_env *env, tool_result *res)
{
    if (env->task && eval_prepare(env->eval))
        return false;
    tool_fail(res, "EVAL_UNAVAILABLE", NULL, "Evaluation is unavailable on this server: %s",
              env->eval ? env->eval->unavailable : "not configured");
    return true;
}

static void run_verify(const tool_env *env, const json_t *args, tool_result *res)
{
    (void)args;
    if (unavailable(env, res))
        return;
    report(res, evaluate(env, "verify"), "Verify:");
}

static void run_profile(const tool_env *env, const json_t *args, tool_result *res)
{
    (void)args;
    if (unavailable(env, res))
        return;
    json_t *c = evaluate(env, "profile");
    keep_if_best(env, c);
    report(res, c, "Profile:");
}

/* Single-turn mode: Submit carries the files. Each goes through Write, with its checks. */
static int write_files(const tool_env *env, const json_t *files, tool_result *res)
{
    const char *path;
    json_t *content;
    json_object_foreach((json_t *)files, path, content)
    {
        if (!json_is_string(content)) {
            tool_fail(res, "INVALID_TOOL_CALL", NULL, "files.%s: the content must be a string",
                      path);
            return -1;
        }
        json_t *wargs = json_pack("{s:s, s:O}", "file_path", path, "content", content);
        tool_result w = {0};
        tool_invoke(&tool_def_write, env, wargs, &w);
        json_decref(wargs);
        if (w.is_error) {
            tool_fail(res, "INVALID_TOOL_CALL", NULL, "files.%s: %s", path, w.content);
            tool_result_deinit(&w);
            return -1;
        }
        tool_result_deinit(&w);
    }
    return 0;
}

static void run_submit(const tool_env *env, const json_t *args, tool_result *res)
{
    if (unavailable(env, res))
        return;
    const json_t *files = json_object_get(args, "files");
    if (files && write_files(env, files, res) != 0)
        return;
    json_t *c = evaluate(env, "final");
    json_t *paid = c;
    if (env->reward_on && strcmp(env->reward_on, "best") == 0 && env->evs->best &&
        reward_rank(env->evs->best) > reward_rank(c)) {
        paid = json_deep_copy(env->evs->best); /* the paper's rule: the trajectory's best */
        json_object_set_new(paid, "paid_on", json_string("best_snapshot"));
        json_object_set(paid, "final_evaluation", c);
        json_decref(c);
    } else {
        json_object_set_new(paid, "paid_on", json_string("final"));
    }
    json_t *record = json_deep_copy(paid);
    strbuf sb = {0};
    double r = num_of(paid, "reward");
    if (isnan(r))
        sb_printf(&sb, "Submitted. No reward: the final evaluation failed for a reason that is not "
                       "your code.");
    else
        sb_printf(&sb, "Submitted. Reward: %g (%s).", r, str_of(paid, "paid_on"));
    char *title = sb_steal(&sb);
    report(res, paid, title);
    free(title);
    res->terminal = true;
    res->final_eval = record;
}

const tool_def tool_def_verify = {
    .name = "Verify",
    .description =
        "Checks ModelNew (model_new.py + your kernels, rebuilt if changed) against the "
        "reference Model on 5 fresh random input sets and weights plus a mixed-sign probe, "
        "in a separate trusted process. Reports correct or the first failing check.",
    .schema = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
    .run = run_verify,
};

const tool_def tool_def_profile = {
    .name = "Profile",
    .description =
        "Verifies ModelNew, then times it against PyTorch eager and torch.compile of the "
        "reference on fresh inputs (every timed output is checked). Reports the median "
        "times, their spread and the speed-ups.",
    .schema = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
    .run = run_profile,
};

const tool_def tool_def_submit = {
    .name = "Submit",
    .description = "Ends the episode: a fresh final evaluation of the workspace and the reward "
                   "(-1 wrong, 1 correct, 2 more than 5% faster than eager, 3 faster than eager "
                   "and torch.compile). In single-turn mode, pass the files to write first.",
    .schema = "{\"type\":\"object\",\"properties\":{\"files\":{\"type\":\"object\"}},"
              "\"additionalProperties\":false}",
    .run = run_submit,
};
