/* Bash, BashOutput, KillBash: shell commands in the episode's workspace.
 *
 * Every Bash call is a fresh `/bin/bash -c <command>` (no state carries over between calls but
 * the files), in its own process group, with the workspace as cwd, stdin closed, a clean
 * environment and resource limits. A command in the background (run_in_background) becomes a
 * job of the episode's job table (jobs.c), read with BashOutput and stopped with KillBash. */
#include <errno.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandbox.h"
#include "spawn.h"
#include "tools/agent_regex.h"
#include "tools/jobs.h"
#include "tools/tool.h"
#include "tools/fs.h"
#include "util/strbuf.h"
#include "util/text.h"
#include "wspath.h"

#define BASH_PATH "/bin/bash"
#define JOB_PREFIX "bash_"
/* BashOutput's filter runs on a server thread: its matches together get this long, after
 * which the remaining lines are dropped (and the output says so). */
#define FILTER_TIME_BUDGET_MS 3000

/* ---- shared helpers -------------------------------------------------------------------------- */

/* Room for text_cap_head_tail's marker line "\n[... N bytes omitted ...]\n", which it may put
 * on top of the head and tail it keeps. */
#define MARKER_RESERVE 48

/* text_cap_head_tail, but the result (marker included) is never longer than cap. */
static char *cap_text(const char *text, size_t len, size_t cap, bool *truncated)
{
    if (len > cap && cap > 2 * MARKER_RESERVE)
        cap -= MARKER_RESERVE;
    return text_cap_head_tail(text, len, cap, truncated);
}

/* Raw bytes -> valid UTF-8 capped to cap bytes (head + tail). Never NULL. */
static char *clean_capped(const char *bytes, size_t len, size_t cap, bool *truncated)
{
    bool t = false;
    char *clean = text_sanitize_utf8(bytes ? bytes : "", bytes ? len : 0);
    char *out = clean ? cap_text(clean, strlen(clean), cap, &t) : NULL;
    free(clean);
    if (truncated)
        *truncated = t;
    return out ? out : strdup("");
}

static void append_line(strbuf *sb, const char *line)
{
    if (sb->len && sb->data[sb->len - 1] != '\n')
        sb_putc(sb, '\n');
    sb_puts(sb, line);
}

/* A sandboxed workspace is a tmpfs of the quota's size: the kernel stopped the command's
 * writes (ENOSPC) at the quota, so "full" is the quota reached, even with file sizes a little
 * under it (the tmpfs counts pages and inodes). */
static bool workspace_fs_full(const tool_env *env)
{
    struct statfs sf;
    if (!env->root_path || statfs(env->root_path, &sf) != 0 || sf.f_type != TMPFS_MAGIC)
        return false;
    return (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize < 64 * 1024 || sf.f_ffree == 0;
}

/* Disk quota check after a command: over quota is an error (the output is still returned). */
static void check_quota(const tool_env *env, tool_result *res)
{
    const tool_limits *lim = env->limits;
    unsigned long long used = 0;
    fs_usage_forget(env); /* the command may have written anything */
    if (env->root_fd < 0 || !lim->disk_quota_bytes)
        return;
    if (fs_disk_usage(env, &used) != WS_OK ||
        (used <= lim->disk_quota_bytes && !workspace_fs_full(env)))
        return;
    strbuf sb = STRBUF_INIT;
    sb_puts(&sb, res->content ? res->content : "");
    char note[256];
    snprintf(note, sizeof note,
             "[Disk quota exceeded: the workspace holds %llu bytes, the quota is %llu bytes. "
             "Delete files to get back under it.]",
             used, (unsigned long long)lim->disk_quota_bytes);
    append_line(&sb, note);
    free(res->content);
    res->content = sb_steal(&sb);
    if (!res->data)
        res->data = json_object();
    json_object_set_new(res->data, "disk_usage_bytes", json_integer((json_int_t)used));
    json_object_set_new(res->data, "disk_quota_bytes",
                        json_integer((json_int_t)lim->disk_quota_bytes));
    if (!res->is_error) {
        res->is_error = true;
        json_object_set_new(res->data, "error_code", json_string("DISK_QUOTA_EXCEEDED"));
    }
}

/* "bash_3" (or "3") -> 3; -1 if it is not a job id. */
static int parse_job_id(const char *s)
{
    if (!s)
        return -1;
    if (strncmp(s, JOB_PREFIX, sizeof JOB_PREFIX - 1) == 0)
        s += sizeof JOB_PREFIX - 1;
    if (*s < '1' || *s > '9')
        return -1;
    long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 100000000)
            return -1;
        v = v * 10 + (*s - '0');
    }
    return (int)v;
}

/* ---- Bash ------------------------------------------------------------------------------------ */

/* A sandboxed job's on_freeze: its cgroup's freezer (while the judge evaluates the episode). */
static int freeze_job(void *ctx, bool on)
{
    return sandbox_job_freeze(ctx, on);
}

/* The command's environment, built before spawning (nothing of the server's leaks in). */
typedef struct bash_env {
    char *home, *pwd, *ws;
    const char *envp[8];
} bash_env;

static int bash_env_init(bash_env *be, const char *root)
{
    memset(be, 0, sizeof *be);
    if (asprintf(&be->home, "HOME=%s", root) < 0)
        be->home = NULL;
    if (asprintf(&be->pwd, "PWD=%s", root) < 0)
        be->pwd = NULL;
    if (asprintf(&be->ws, "KGYM_WORKSPACE=%s", root) < 0)
        be->ws = NULL;
    if (!be->home || !be->pwd || !be->ws)
        return -1;
    const char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                          be->home,
                          "LANG=C.UTF-8",
                          "LC_ALL=C.UTF-8",
                          "TERM=dumb",
                          be->pwd,
                          be->ws,
                          NULL};
    memcpy(be->envp, envp, sizeof envp);
    return 0;
}

static void bash_env_deinit(bash_env *be)
{
    free(be->home);
    free(be->pwd);
    free(be->ws);
}

static void bash_opts(const tool_env *env, const char *const *argv, const bash_env *be,
                      int timeout_ms, spawn_opts *o)
{
    const tool_limits *lim = env->limits;
    *o = (spawn_opts)SPAWN_OPTS_INIT;
    o->argv = argv;
    o->envp = be->envp;
    o->cwd = env->root_path;
    o->timeout_ms = timeout_ms;
    o->kill_grace_ms = lim->bash_kill_grace_ms;
    o->capture_cap = lim->max_output_chars ? lim->max_output_chars : 30000;
    o->rl.as_bytes = lim->bash_mem_bytes;
    o->rl.cpu_s = lim->bash_cpu_s > 0 ? (uint64_t)lim->bash_cpu_s : 0;
    o->rl.fsize_bytes = lim->max_file_bytes;
    o->rl.nproc = lim->bash_nproc > 0 ? (uint64_t)lim->bash_nproc : 0;
    o->rl.nofile = 1024;
    o->rl.no_core = true;
}

/* Which resource limit a status points at, or NULL. */
static const char *limit_note(const tool_limits *lim, int term_signal, int exit_code, char *buf,
                              size_t cap)
{
    int sig = term_signal;
    if (!sig && (exit_code == 128 + SIGXCPU || exit_code == 128 + SIGXFSZ))
        sig = exit_code - 128; /* bash reporting a child the limit killed */
    switch (sig) {
    case SIGXFSZ:
        snprintf(buf, cap,
                 "[Resource limit: a file exceeded the size limit of %llu bytes (SIGXFSZ)]",
                 (unsigned long long)lim->max_file_bytes);
        return buf;
    case SIGXCPU:
        snprintf(buf, cap, "[Resource limit: CPU time limit of %d s exceeded (SIGXCPU)]",
                 lim->bash_cpu_s);
        return buf;
    case SIGKILL:
        if (term_signal != SIGKILL)
            return NULL;
        snprintf(buf, cap,
                 "[Resource limit: the command was killed (SIGKILL), most likely by the CPU "
                 "time limit (%d s) or by running out of memory (limit %llu bytes)]",
                 lim->bash_cpu_s, (unsigned long long)lim->bash_mem_bytes);
        return buf;
    default:
        return NULL;
    }
}

static bool sandboxed(const tool_env *env)
{
    return env->sandbox && env->sandbox->active && env->owner;
}

/* Runs the command in the episode's sandbox when there is one, else as the server's child. */
static int run_foreground(const tool_env *env, const spawn_opts *o, spawn_result *r, sbx_end *end)
{
    *end = SBX_END_EXIT;
    if (!sandboxed(env))
        return spawn_run(o, r);
    sandbox_cmd cmd = {
        .profile = "bash",
        .workspace = env->root_path,
        .uid = env->owner->uid,
        .gid = env->owner->gid,
        .argv = o->argv,
        .timeout_ms = o->timeout_ms,
        .kill_grace_ms = o->kill_grace_ms,
        .capture_cap = o->capture_cap,
        .max_file_bytes = env->limits->max_file_bytes,
    };
    sandbox_result sr;
    int rc = sandbox_run(env->sandbox, &cmd, &sr);
    *r = sr.run;
    *end = sr.end;
    return rc;
}

/* The note and error code of a sandbox verdict that the status alone does not explain. */
static const char *sandbox_note(const tool_env *env, sbx_end end, char *buf, size_t cap)
{
    if (!env->sandbox)
        return NULL;
    const sbx_profile *p = &env->sandbox->bash;
    if (end == SBX_END_MEMORY) {
        snprintf(buf, cap,
                 "[Out of memory: the command exceeded its memory limit of %llu bytes "
                 "and was killed]",
                 (unsigned long long)p->cg_memory_bytes);
        return "OOM";
    }
    if (end == SBX_END_PIDS) {
        snprintf(buf, cap, "[Resource limit: the process limit (%llu) was reached; a fork failed]",
                 (unsigned long long)p->cg_pids);
        return "RESOURCE_LIMIT";
    }
    return NULL;
}

static void bash_sync(const tool_env *env, const spawn_opts *o, tool_result *res)
{
    const tool_limits *lim = env->limits;
    size_t cap = lim->max_output_chars ? lim->max_output_chars : 30000;
    spawn_result r;
    sbx_end end;
    if (run_foreground(env, o, &r, &end) != 0) {
        /* fail_errno is 0 when the sandbox refused before spawning (cgroup, arguments). */
        const char *why = r.fail_errno ? strerror(r.fail_errno) : "the sandbox could not start it";
        tool_fail(res, "SPAWN_FAILED",
                  json_pack("{s:s,s:s?}", "detail", why, "stage", r.fail_stage),
                  "Could not run the command: %s: %s", r.fail_stage ? r.fail_stage : "spawn", why);
        spawn_result_deinit(&r);
        return;
    }

    /* The trailer lines are always shown; the output gets what is left of the cap. */
    char note[320] = "", trailer[512];
    const char *limit = NULL, *sandbox_code = NULL;
    if (r.timed_out) {
        snprintf(note, sizeof note, "[Command timed out after %d ms; process group killed]",
                 o->timeout_ms);
    } else if (end == SBX_END_SETUP) {
        tool_fail(res, "SPAWN_FAILED", json_pack("{s:s}", "detail", r.err.data ? r.err.data : ""),
                  "Could not set up the sandbox for the command: %s",
                  r.err.data ? r.err.data : "(no detail)");
        spawn_result_deinit(&r);
        return;
    } else if ((sandbox_code = sandbox_note(env, end, note, sizeof note)) != NULL) {
        limit = note;
    } else {
        limit = limit_note(lim, r.term_signal, r.exit_code, note, sizeof note);
        if (!limit && r.term_signal)
            snprintf(note, sizeof note, "[Command killed by signal %d (%s)]", r.term_signal,
                     spawn_signal_name(r.term_signal));
    }
    snprintf(trailer, sizeof trailer, "%s%s[exit code: %d]", note, note[0] ? "\n" : "",
             r.exit_code);
    size_t tlen = strlen(trailer) + 1;
    size_t body_cap = cap > tlen + 64 ? cap - tlen : 64;

    bool t_out = false, t_err = false, t_body = false;
    char *out_s = clean_capped(r.out.data, r.out.len, cap, &t_out);
    char *err_s = clean_capped(r.err.data, r.err.len, cap, &t_err);
    strbuf body = STRBUF_INIT;
    char *o_full = text_sanitize_utf8(r.out.data, r.out.len);
    char *e_full = text_sanitize_utf8(r.err.data, r.err.len);
    sb_puts(&body, o_full ? o_full : "");
    if (e_full && e_full[0])
        append_line(&body, e_full);
    free(o_full);
    free(e_full);
    char *capped = cap_text(body.data ? body.data : "", body.len, body_cap, &t_body);
    sb_free(&body);
    strbuf content = STRBUF_INIT;
    sb_puts(&content, capped ? capped : "");
    free(capped);
    append_line(&content, trailer);

    bool truncated = r.out.truncated || r.err.truncated || t_out || t_err || t_body;
    json_t *data =
        json_pack("{s:i,s:s,s:s,s:b,s:b,s:I,s:I}", "exit_code", r.exit_code, "stdout", out_s,
                  "stderr", err_s, "timed_out", r.timed_out, "truncated", truncated, "output_bytes",
                  (json_int_t)(r.out.total + r.err.total), "duration_ms", (json_int_t)r.wall_ms);
    free(out_s);
    free(err_s);
    if (data && r.term_signal) {
        json_object_set_new(data, "signal", json_integer(r.term_signal));
        json_object_set_new(data, "signal_name", json_string(spawn_signal_name(r.term_signal)));
    }
    char *text = sb_steal(&content);
    if (data && sandboxed(env))
        json_object_set_new(data, "ended_by", json_string(sbx_end_name(end)));
    if (r.timed_out) {
        tool_fail(res, "TIMEOUT", data, "%s", text);
        free(text);
    } else if (limit) {
        tool_fail(res, sandbox_code ? sandbox_code : "RESOURCE_LIMIT", data, "%s", text);
        free(text);
    } else {
        tool_ok_take(res, data, text);
    }
    spawn_result_deinit(&r);
}

static void bash_background(const tool_env *env, const spawn_opts *o, const job_hook *hook,
                            tool_result *res)
{
    if (!env->jobs) {
        if (hook)
            hook->on_end(hook->ctx); /* the sandbox job's cgroup is not needed after all */
        tool_fail(res, "INTERNAL", NULL, "Background commands are not available here");
        return;
    }
    job_info info;
    const char *fail = NULL;
    int rc = job_start(env->jobs, o, hook, &info, &fail);
    if (rc != JOB_OK && hook)
        hook->on_end(hook->ctx); /* not kept by the table: clean up here */
    if (rc == JOB_E_TOO_MANY) {
        tool_fail(res, "TOO_MANY_JOBS",
                  json_pack("{s:i}", "max_background_jobs", env->limits->max_background_jobs),
                  "Too many background commands running (limit %d). Wait for one to finish "
                  "(BashOutput) or stop one (KillBash) first.",
                  env->limits->max_background_jobs);
        return;
    }
    if (rc != JOB_OK) {
        int e = errno;
        tool_fail(res, "SPAWN_FAILED", json_pack("{s:s}", "detail", strerror(e)),
                  "Could not start the command in the background: %s: %s",
                  fail ? fail : (rc == JOB_E_IO ? "job log" : "spawn"), strerror(e));
        return;
    }
    char id[32];
    snprintf(id, sizeof id, JOB_PREFIX "%d", info.id);
    tool_ok(res, json_pack("{s:s,s:i}", "bash_id", id, "pid", (int)info.pid),
            "Command running in background with ID: %s (pid %d; killed after %d ms).\n"
            "Read its output with BashOutput (bash_id \"%s\"); stop it with KillBash "
            "(shell_id \"%s\").",
            id, (int)info.pid, o->timeout_ms, id, id);
}

static void bash_run(const tool_env *env, const json_t *args, tool_result *res)
{
    const tool_limits *lim = env->limits;
    const json_t *jc = json_object_get(args, "command");
    const char *command = json_string_value(jc);
    if (!command) {
        tool_fail(res, "INVALID_TOOL_CALL", NULL, "Bash: 'command' must be a string");
        return;
    }
    if (strlen(command) != json_string_length(jc)) {
        tool_fail(res, "INVALID_TOOL_CALL", NULL, "Bash: 'command' contains a NUL byte");
        return;
    }
    bool background = json_is_true(json_object_get(args, "run_in_background"));
    int timeout = background ? lim->bash_timeout_max_ms : lim->bash_timeout_ms;
    const json_t *jt = json_object_get(args, "timeout");
    if (jt) {
        double v = json_number_value(jt);
        if (v < 1 || v > lim->bash_timeout_max_ms) {
            tool_fail(res, "INVALID_TOOL_CALL",
                      json_pack("{s:i}", "max_timeout_ms", lim->bash_timeout_max_ms),
                      "Bash: 'timeout' must be between 1 and %d ms", lim->bash_timeout_max_ms);
            return;
        }
        timeout = (int)v;
    }
    bash_env be;
    if (bash_env_init(&be, env->root_path) != 0) {
        bash_env_deinit(&be);
        tool_fail(res, "SPAWN_FAILED", NULL, "Could not run the command: out of memory");
        return;
    }
    const char *argv[] = {BASH_PATH, "-c", command, NULL};
    spawn_opts o;
    bash_opts(env, argv, &be, timeout, &o);
    job_hook hook = {.on_end = sandbox_job_free, .ctx = NULL, .on_freeze = freeze_job};
    if (background && sandboxed(env)) {
        /* A background job is the launcher, in a cgroup of its own; killing its process group
         * ends the sandbox's init and with it every process the job started, and the hook
         * removes the cgroup (killing anything left) once the job is reaped. */
        sandbox_cmd cmd = {.profile = "bash",
                           .workspace = env->root_path,
                           .uid = env->owner->uid,
                           .gid = env->owner->gid,
                           .argv = argv,
                           .max_file_bytes = lim->max_file_bytes};
        char err[256];
        hook.ctx = sandbox_job_new(env->sandbox, &cmd, err, sizeof err);
        if (!hook.ctx) {
            bash_env_deinit(&be);
            tool_fail(res, "SPAWN_FAILED", json_pack("{s:s}", "detail", err),
                      "Could not prepare the sandbox: %s", err);
            return;
        }
        o.argv = sandbox_job_argv(hook.ctx);
        o.cwd = "/";
        o.rl = (spawn_rlimits){0}; /* the launcher sets the profile's limits itself */
    }
    if (background)
        bash_background(env, &o, hook.ctx ? &hook : NULL, res);
    else
        bash_sync(env, &o, res);
    bash_env_deinit(&be);
    check_quota(env, res);
}

const tool_def tool_def_bash = {
    .name = "Bash",
    .description =
        "Runs a shell command with /bin/bash -c in the workspace directory and returns its "
        "stdout, then its stderr, then a final line [exit code: N]. Each call is a fresh shell "
        "(cd and variables do not carry over), stdin is closed, the environment is minimal "
        "(PATH=/usr/local/bin:/usr/bin:/bin, HOME and PWD = the workspace). Limits: timeout in "
        "ms (default and maximum are set by the episode), memory, CPU time, file size, disk "
        "quota. On timeout the whole process group is killed. Processes left running when the "
        "command exits are killed too: use run_in_background for long-running work, then "
        "BashOutput to read it and KillBash to stop it (background commands are paused while "
        "Verify, Profile or Submit evaluate). Long output keeps its head and tail.",
    .schema = "{\"type\":\"object\",\"properties\":{"
              "\"command\":{\"type\":\"string\",\"description\":\"The command to execute\"},"
              "\"timeout\":{\"type\":\"integer\",\"minimum\":1,"
              "\"description\":\"Optional timeout in milliseconds\"},"
              "\"description\":{\"type\":\"string\","
              "\"description\":\"Short description of what the command does (5-10 words)\"},"
              "\"run_in_background\":{\"type\":\"boolean\","
              "\"description\":\"Run the command in the background; read its output later "
              "with BashOutput. Its timeout (default: the maximum) is a wall-clock limit.\"}},"
              "\"required\":[\"command\"],\"additionalProperties\":false}",
    .run = bash_run,
};

/* ---- BashOutput ------------------------------------------------------------------------------ */

/* BashOutput's filter: an agent regex under agent_regex's limits and a time budget. */
typedef struct filter_ctx {
    agent_regex rx;
    size_t over_limit; /* lines a PCRE2 limit stopped (dropped) */
    int limit_err;     /* the first such error */
    size_t late;       /* lines left unmatched (dropped) once the budget ran out */
} filter_ctx;

static bool filter_keep(const char *line, size_t len, void *ctx)
{
    filter_ctx *fc = ctx;
    if (agent_regex_expired(&fc->rx)) {
        fc->late++;
        return false;
    }
    int rc = agent_regex_match(&fc->rx, line, len, 0, NULL, NULL);
    if (rc < 0) {
        if (!fc->over_limit++)
            fc->limit_err = rc;
        return false;
    }
    return rc == 1;
}

/* Says which lines the filter could not judge, after the output. */
static void filter_notes(strbuf *sb, json_t *data, const filter_ctx *fc)
{
    if (fc->over_limit) {
        char msg[256], line[512];
        agent_regex_error_text(fc->limit_err, msg, sizeof msg);
        snprintf(line, sizeof line,
                 "[filter: %zu line%s dropped: the pattern needs too much work to match them "
                 "(%s). Simplify it: avoid nested quantifiers such as (a+)+.]",
                 fc->over_limit, fc->over_limit == 1 ? "" : "s", msg);
        append_line(sb, line);
        json_object_set_new(data, "filter_limit_lines", json_integer((json_int_t)fc->over_limit));
    }
    if (fc->late) {
        char line[320];
        snprintf(line, sizeof line,
                 "[filter: ran out of time after %d ms; the remaining %zu line%s "
                 "were dropped unmatched and will not be shown again. Use a simpler pattern.]",
                 FILTER_TIME_BUDGET_MS, fc->late, fc->late == 1 ? "" : "s");
        append_line(sb, line);
        json_object_set_new(data, "filter_timed_out", json_true());
        json_object_set_new(data, "filter_dropped_lines", json_integer((json_int_t)fc->late));
    }
}

static void status_line(strbuf *sb, const job_info *info)
{
    char line[160];
    switch (info->status) {
    case JOB_RUNNING:
        snprintf(line, sizeof line, "[status: running for %lld ms]", (long long)info->runtime_ms);
        break;
    case JOB_EXITED:
        if (info->term_signal)
            snprintf(line, sizeof line, "[status: exited, killed by signal %d (%s), exit code: %d]",
                     info->term_signal, spawn_signal_name(info->term_signal), info->exit_code);
        else
            snprintf(line, sizeof line, "[status: exited, exit code: %d]", info->exit_code);
        break;
    case JOB_KILLED:
        snprintf(line, sizeof line, "[status: killed (KillBash)]");
        break;
    case JOB_TIMED_OUT:
        snprintf(line, sizeof line,
                 "[status: timed_out: killed after %lld ms, its wall-clock limit]",
                 (long long)info->timeout_ms);
        break;
    }
    append_line(sb, line);
}

static void bashoutput_run(const tool_env *env, const json_t *args, tool_result *res)
{
    const char *sid = json_string_value(json_object_get(args, "bash_id"));
    const char *filter = json_string_value(json_object_get(args, "filter"));
    int id = parse_job_id(sid);
    filter_ctx fc = {0};
    bool filtered = filter && filter[0];
    if (filtered) {
        char msg[256];
        size_t off;
        int crc = agent_regex_compile(&fc.rx, filter, strlen(filter), AGENT_RE_RAW_SUBJECT, msg,
                                      sizeof msg, &off);
        if (crc != AGENT_REGEX_OK) {
            agent_regex_free(&fc.rx);
            if (crc == AGENT_REGEX_INVALID)
                tool_fail(res, "INVALID_TOOL_CALL", json_pack("{s:s}", "detail", msg),
                          "BashOutput: invalid filter regex at offset %zu: %s", off, msg);
            else
                tool_fail(res, "INVALID_TOOL_CALL", json_pack("{s:s}", "detail", msg),
                          "BashOutput: unusable filter regex: %s", msg);
            return;
        }
        agent_regex_start_budget(&fc.rx, FILTER_TIME_BUDGET_MS);
    }
    job_info info;
    spawn_stream out = {0};
    size_t cap = env->limits->max_output_chars ? env->limits->max_output_chars : 30000;
    int rc = id > 0 && env->jobs
                 ? job_read_new(env->jobs, id, cap, filtered ? filter_keep : NULL, &fc, &info, &out)
                 : JOB_E_NOT_FOUND;
    agent_regex_free(&fc.rx);
    if (rc == JOB_E_NOT_FOUND) {
        free(out.data);
        tool_fail(res, "JOB_NOT_FOUND", json_pack("{s:s}", "bash_id", sid ? sid : ""),
                  "No background command with ID %s", sid ? sid : "");
        return;
    }
    if (rc != JOB_OK) {
        free(out.data);
        tool_fail(res, "IO_ERROR", json_pack("{s:s}", "bash_id", sid),
                  "Could not read the output of %s: %s", sid, strerror(errno));
        return;
    }
    char idbuf[32];
    snprintf(idbuf, sizeof idbuf, JOB_PREFIX "%d", info.id);
    bool trunc = false;
    char *text = clean_capped(out.data, out.len, cap, &trunc);
    strbuf sb = STRBUF_INIT;
    if (text[0])
        sb_puts(&sb, text);
    else
        sb_puts(&sb, out.total ? "(no new output matching the filter)" : "(no new output)");
    free(text);
    json_t *data =
        json_pack("{s:s,s:s,s:I,s:b}", "bash_id", idbuf, "status", job_status_name(info.status),
                  "new_bytes", (json_int_t)out.total, "truncated", trunc || out.truncated);
    filter_notes(&sb, data, &fc);
    status_line(&sb, &info);
    json_object_set_new(data, "exit_code",
                        info.status == JOB_RUNNING ? json_null() : json_integer(info.exit_code));
    if (info.status != JOB_RUNNING && info.term_signal)
        json_object_set_new(data, "signal", json_integer(info.term_signal));
    free(out.data);
    tool_ok_take(res, data, sb_steal(&sb));
    check_quota(env, res);
}

const tool_def tool_def_bashoutput = {
    .name = "BashOutput",
    .description =
        "Returns the output a background command (started with Bash run_in_background) wrote "
        "since the last BashOutput call for it (stdout and stderr merged, head and tail kept "
        "when long), followed by its status: running, exited (with exit code), killed or "
        "timed_out. filter: optional regular expression (PCRE); only matching lines are "
        "returned, the others are consumed and will not be shown again (a pattern too costly "
        "to match drops lines, and says so).",
    .schema = "{\"type\":\"object\",\"properties\":{"
              "\"bash_id\":{\"type\":\"string\","
              "\"description\":\"The ID of the background shell, e.g. bash_1\"},"
              "\"filter\":{\"type\":\"string\",\"description\":\"Optional regular expression: "
              "only output lines matching it are returned\"}},"
              "\"required\":[\"bash_id\"],\"additionalProperties\":false}",
    .run = bashoutput_run,
};

/* ---- KillBash -------------------------------------------------------------------------------- */

static void killbash_run(const tool_env *env, const json_t *args, tool_result *res)
{
    const char *sid = json_string_value(json_object_get(args, "shell_id"));
    int id = parse_job_id(sid);
    job_info info;
    bool was_running = false;
    int rc = id > 0 && env->jobs ? job_kill(env->jobs, id, &info, &was_running) : JOB_E_NOT_FOUND;
    if (rc != JOB_OK) {
        tool_fail(res, "JOB_NOT_FOUND", json_pack("{s:s}", "shell_id", sid ? sid : ""),
                  "No background command with ID %s", sid ? sid : "");
        return;
    }
    char idbuf[32];
    snprintf(idbuf, sizeof idbuf, JOB_PREFIX "%d", info.id);
    json_t *data = json_pack("{s:s,s:s,s:b}", "shell_id", idbuf, "status",
                             job_status_name(info.status), "was_running", was_running);
    if (was_running)
        tool_ok(res, data, "Killed background command %s (process group %d).", idbuf,
                (int)info.pid);
    else if (info.status == JOB_EXITED)
        tool_ok(res, data,
                "Background command %s had already finished (exit code %d); "
                "nothing to kill.",
                idbuf, info.exit_code);
    else
        tool_ok(res, data, "Background command %s had already finished (%s); nothing to kill.",
                idbuf, job_status_name(info.status));
}

const tool_def tool_def_killbash = {
    .name = "KillBash",
    .description = "Stops a background command started with Bash run_in_background: its whole "
                   "process group gets SIGTERM, then SIGKILL after a grace period. Its output "
                   "written so far can still be read with BashOutput.",
    .schema = "{\"type\":\"object\",\"properties\":{"
              "\"shell_id\":{\"type\":\"string\","
              "\"description\":\"The ID of the background shell to kill, e.g. bash_1\"}},"
              "\"required\":[\"shell_id\"],\"additionalProperties\":false}",
    .run = killbash_run,
};
