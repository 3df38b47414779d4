/* Compile: builds the episode's cuda_extension (harness/build.h) and says how it went.
 *
 * The agent gets the compiler's own words: errors verbatim, paths as it knows them
 * (kernels/foo.cu:12:3: error: ...). A failing build is an in-band COMPILE_ERROR; a build the
 * server could not run (sandbox, disk) is INFRA_ERROR, never the agent's fault. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/build.h"
#include "harness/eval.h"
#include "sandbox/sandbox.h"
#include "tools/tool.h"
#include "util/strbuf.h"
#include "spawn.h"
#include "tools/fs.h"
#include "workspace.h"
#include "wspath.h"

#define INLINE_TIMEOUT_MS 30000
#define INLINE_OUTPUT_CAP (8u << 20) /* the sources it returns, as JSON */

/* Writes data as dir/name, root's and read-only. Returns true when all of it was written. */
static bool stage_file(const char *dir, const char *name, const char *data, size_t len)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *out = fopen(path, "wx");
    bool written = out && fwrite(data, 1, len, out) == len;
    if (out && fclose(out) != 0)
        written = false;
    return written && chmod(path, 0444) == 0;
}

/* <episode>/inline/ with model_new.py (the agent's, as read through wspath) and inline.py (the
 * harness's): what the parse sees, at /workspace in the compile sandbox. */
static int stage_inline(const tool_env *env, const fs_file *model, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/inline", env->episode_dir);
    ws_remove_tree(dir); /* a crash's leftover */
    if (mkdir(dir, 0755) != 0)
        return -1;
    fs_file s = {0};
    int dir_fd = open(env->eval->harness_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = dir_fd >= 0 && fs_load(dir_fd, "inline.py", 1u << 20, &s) == 0 &&
              stage_file(dir, "inline.py", s.data, s.len) &&
              stage_file(dir, "model_new.py", model->data, model->len);
    if (dir_fd >= 0)
        close(dir_fd);
    fs_file_free(&s);
    return ok ? 0 : -1;
}

/* Runs inline.py over the staged model_new.py. The agent's text is parsed (never run), but
 * a parser is attack surface too: with a sandbox it runs in the compile profile as the
 * episode's uid, like the compilers; in weak mode as the server's user, with rlimits. */
static int run_inline(const tool_env *env, const char *dir, spawn_result *r)
{
    char script[PATH_MAX + 16], model[PATH_MAX + 16];
    bool sandboxed = env->sandbox && env->sandbox->active && env->owner;
    snprintf(script, sizeof script, "%s/inline.py", sandboxed ? "/workspace" : dir);
    snprintf(model, sizeof model, "%s/model_new.py", sandboxed ? "/workspace" : dir);
    const char *argv[] = {env->eval->tc.python, "-I", script, model, NULL};
    if (sandboxed) {
        sandbox_cmd cmd = {.profile = "compile",
                           .workspace = dir,
                           .uid = env->owner->uid,
                           .gid = env->owner->gid,
                           .argv = argv,
                           .timeout_ms = INLINE_TIMEOUT_MS,
                           .kill_grace_ms = 1000,
                           .capture_cap = INLINE_OUTPUT_CAP};
        sandbox_result sr;
        int rc = sandbox_run(env->sandbox, &cmd, &sr);
        *r = sr.run;
        return rc;
    }
    static const char *const ENV[] = {"PATH=/usr/bin:/bin", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = ENV;
    o.timeout_ms = INLINE_TIMEOUT_MS;
    o.capture_cap = INLINE_OUTPUT_CAP;
    o.rl.as_bytes = 4ull << 30;
    o.rl.cpu_s = 20;
    o.rl.fsize_bytes = 1u << 20;
    o.rl.nofile = 64;
    o.rl.no_core = true;
    return spawn_run(&o, r);
}

/* Runs harness/inline.py on model_new.py (an AST walk, nothing of it runs) and writes the
 * load_inline sources it finds as kernels/load_inline_<name>*.{cu,cpp} through Write. Returns 0
 * (nothing to do, or done) or -1 with a message for the agent. */
static int expand_load_inline(const tool_env *env, char *msg, size_t cap)
{
    fs_file f = {0};
    if (fs_load(env->root_fd, "model_new.py", 1u << 20, &f) != 0)
        return 0; /* no model_new.py: Verify says so */
    bool wanted = memmem(f.data, f.len, "load_inline", 11) != NULL;
    char dir[PATH_MAX];
    int staged = wanted ? stage_inline(env, &f, dir, sizeof dir) : 0;
    fs_file_free(&f);
    if (!wanted)
        return 0;
    if (staged != 0) {
        ws_remove_tree(dir);
        snprintf(msg, cap, "cannot stage model_new.py for load_inline");
        return -1;
    }
    spawn_result r;
    int rc = run_inline(env, dir, &r);
    json_t *doc =
        rc == 0 && r.exit_code == 0 && r.out.data ? json_loads(r.out.data, 0, NULL) : NULL;
    spawn_result_deinit(&r);
    ws_remove_tree(dir);
    const json_t *files = json_object_get(doc, "files");
    if (!json_is_object(files)) {
        const char *why = json_string_value(json_object_get(doc, "error"));
        snprintf(msg, cap, "load_inline: %s", why ? why : "its sources could not be read");
        json_decref(doc);
        return -1;
    }
    const char *rel;
    json_t *text;
    int status = 0;
    json_object_foreach((json_t *)files, rel, text)
    {
        json_t *wargs = json_pack("{s:s, s:O}", "file_path", rel, "content", text);
        tool_result w = {0};
        tool_invoke(&tool_def_write, env, wargs, &w);
        json_decref(wargs);
        if (w.is_error && status == 0) {
            snprintf(msg, cap, "load_inline: cannot write %s: %s", rel, w.content);
            status = -1;
        }
        tool_result_deinit(&w);
    }
    json_decref(doc);
    return status;
}

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
        .objects = &es->objects,
        /* no episode identity: the server's own, which the sandbox refuses to run as */
        .sbx = env->owner ? env->sandbox : NULL,
        .uid = env->owner ? env->owner->uid : 0,
        .gid = env->owner ? env->owner->gid : 0,
        .timeout_ms = es->compile_timeout_ms,
        .jobs = es->compile_jobs,
        .link_cuda = !env->cpu_variant && es->tc.nvcc[0] && es->tc.torch_cuda,
        .log_cap = env->limits ? env->limits->max_output_chars : 30000,
    };
    char msg[2048];
    if (expand_load_inline(env, msg, sizeof msg) != 0) {
        memset(res, 0, sizeof *res);
        res->error_code = "COMPILE_ERROR";
        res->sources = json_array();
        res->log = strdup(msg);
        return 0;
    }
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
