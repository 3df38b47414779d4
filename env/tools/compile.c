/* Compile: builds the episode's cuda_extension (harness/build.h) and says how it went.
 *
 * The agent gets the compiler's own words: errors verbatim, paths as it knows them
 * (kernels/foo.cu:12:3: error: ...). A failing build is an in-band COMPILE_ERROR; a build the
 * server could not run (sandbox, disk) is INFRA_ERROR, never the agent's fault. */
#include <stdio.h>
#include <string.h>

#include "harness/build.h"
#include "harness/eval.h"
#include "tools/tool.h"
#include "util/strbuf.h"
#include "wspath.h"

int build_for_episode(const tool_env *env, build_result *res)
{
    eval_server *es = env->eval;
    if (!es || !es->ready || !env->evs) {
        memset(res, 0, sizeof *res);
        res->error_code = "INFRA_ERROR";
        res->sources = json_array();
        const char *why = es ? es->unavailable : "this server cannot evaluate";
        res->log = strdup(why[0] ? why : "evaluation is unavailable");
        return -1;
    }
    build_request req = {
        .ws_root_fd = env->root_fd,
        .template_dir = es->template_dir,
        .build_dir = env->evs->build_dir,
        .cache_dir = es->cache_dir,
        /* no episode identity: the server's own, which the sandbox refuses to run as */
        .sbx = env->owner ? env->sandbox : NULL,
        .uid = env->owner ? env->owner->uid : 0,
        .gid = env->owner ? env->owner->gid : 0,
        .tag = env->episode_id,
        .timeout_ms = es->compile_timeout_ms,
        .jobs = es->compile_jobs,
        .link_cuda = !env->cpu_variant && es->tc.nvcc[0] && es->tc.torch_cuda,
        .log_cap = env->limits ? env->limits->max_output_chars : 30000,
    };
    return build_extension(&es->tc, &req, res);
}

static json_t *result_data(const build_result *br)
{
    json_t *d = json_pack("{s:b, s:O, s:i, s:i, s:f}", "ok", br->ok, "sources", br->sources,
                          "compiled", br->compiled, "cached", br->cached, "ms", br->ms);
    if (d && br->ok)
        json_object_set_new(d, "key", json_string(br->key));
    return d;
}

static void compile_run(const tool_env *env, const json_t *args, tool_result *res)
{
    (void)args;
    if (!env->eval || !eval_prepare(env->eval)) {
        tool_fail(res, "EVAL_UNAVAILABLE", NULL, "Compile is unavailable on this server: %s",
                  env->eval ? env->eval->unavailable : "it has no evaluation set up");
        return;
    }
    build_result br;
    int rc = build_for_episode(env, &br);
    json_t *data = result_data(&br);
    size_t n = json_array_size(br.sources);
    if (rc != 0) {
        tool_fail(res, "INFRA_ERROR", data,
                  "Compile could not run (a problem of the server, not of your code): %s", br.log);
    } else if (!br.ok) {
        env->evs->so_path[0] = '\0';
        env->evs->build_key[0] = '\0';
        const char *code = br.error_code ? br.error_code : "COMPILE_ERROR";
        if (strcmp(code, "COMPILE_ERROR") == 0)
            tool_fail(res, code, data, "Compile failed:\n%s", br.log);
        else if (strcmp(code, "TIMEOUT") == 0)
            tool_fail(res, code, data, "Compile timed out:\n%s", br.log);
        else
            tool_fail(res, code, data, "%s", br.log);
    } else {
        snprintf(env->evs->so_path, sizeof env->evs->so_path, "%s", br.so_path);
        snprintf(env->evs->build_key, sizeof env->evs->build_key, "%s", br.key);
        strbuf sb = STRBUF_INIT;
        sb_printf(&sb, "Compiled cuda_extension: %zu source%s (%d compiled, %d cached) in %.1f s",
                  n, n == 1 ? "" : "s", br.compiled, br.cached, br.ms / 1e3);
        if (br.log[0])
            sb_printf(&sb, "\nCompiler output:\n%s", br.log);
        tool_ok_take(res, data, sb_steal(&sb));
    }
    build_result_deinit(&br);
}

const tool_def tool_def_compile = {
    .name = "Compile",
    .description =
        "Builds the Python module cuda_extension from binding.cpp and every .cu and .cpp file "
        "directly inside kernels/ (headers .h/.cuh/.hpp in kernels/ may be included), with nvcc "
        "for this GPU's architecture and g++ for the bindings. Incremental: each file is its own "
        "object and unchanged files are not recompiled (editing a header recompiles all). "
        "Compiler errors and warnings come back verbatim. Takes no arguments.",
    .schema = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
    .run = compile_run,
};
