/* Unit tests of the Bash, BashOutput and KillBash tools (env/tools/bash.c, env/tools/jobs.c):
 * commands, limits, background jobs, BashOutput's filter (and its limits against catastrophic
 * patterns), and freezing the jobs of an episode while it is evaluated (job_table_freeze; with a
 * real cgroup freezer when run as root). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/jobs.h"
#include "proc_helpers.h"
#include "sandbox/cgroup.h"
#include "tools/tool.h"

typedef struct fixture {
    char root[64];
    char episode[64];
    char log_dir[96];
    tool_limits limits;
    tool_env env;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->root, "/tmp/kgym-bash-ws-XXXXXX");
    strcpy(f->episode, "/tmp/kgym-bash-ep-XXXXXX");
    if (!mkdtemp(f->root) || !mkdtemp(f->episode))
        return -1;
    snprintf(f->log_dir, sizeof f->log_dir, "%s/jobs", f->episode);
    f->limits = (tool_limits){
        .disk_quota_bytes = 4u << 20,
        .max_file_bytes = 1u << 20,
        .max_output_chars = 2000,
        .bash_timeout_ms = 10000,
        .bash_timeout_max_ms = 20000,
        .bash_kill_grace_ms = 200,
        .bash_mem_bytes = 2ull << 30,
        .bash_cpu_s = 20,
        .bash_nproc = 0,
        .max_background_jobs = 2,
    };
    f->env.root_fd = open(f->root, O_DIRECTORY | O_PATH | O_CLOEXEC);
    f->env.root_path = f->root;
    f->env.episode_dir = f->episode;
    f->env.limits = &f->limits;
    f->env.jobs = job_table_new(f->log_dir, f->limits.max_background_jobs);
    if (f->env.root_fd < 0 || !f->env.jobs)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    job_table_free(f->env.jobs);
    close(f->env.root_fd);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", f->root, f->episode);
    int rc = system(cmd);
    free(f);
    /* nothing left unreaped */
    int st;
    if (waitpid(-1, &st, WNOHANG) != -1 || errno != ECHILD)
        return -1;
    return rc == 0 ? 0 : -1;
}

/* Runs tool with args (a JSON text). */
static void call(fixture *f, const tool_def *tool, const char *json, tool_result *res)
{
    json_error_t jerr;
    json_t *args = json_loads(json, JSON_ALLOW_NUL, &jerr);
    assert_non_null(args);
    memset(res, 0, sizeof *res);
    tool_invoke(tool, &f->env, args, res);
    json_decref(args);
    assert_non_null(res->content);
    assert_non_null(res->data);
}

static void bash(fixture *f, const char *command, tool_result *res)
{
    json_t *args = json_pack("{s:s}", "command", command);
    memset(res, 0, sizeof *res);
    tool_invoke(&tool_def_bash, &f->env, args, res);
    json_decref(args);
    assert_non_null(res->content);
    assert_non_null(res->data);
}

static const char *err_code(const tool_result *res)
{
    const char *c = json_string_value(json_object_get(res->data, "error_code"));
    return c ? c : "";
}

static json_int_t data_int(const tool_result *res, const char *key)
{
    json_t *v = json_object_get(res->data, key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static const char *data_str(const tool_result *res, const char *key)
{
    const char *s = json_string_value(json_object_get(res->data, key));
    assert_non_null(s);
    return s;
}

static void test_basic(void **state)
{
    fixture *f = *state;
    tool_result r;
    bash(f, "echo hi; echo oops >&2; exit 3", &r);
    assert_false(r.is_error); /* a non-zero exit is not a tool error */
    assert_string_equal(r.content, "hi\noops\n[exit code: 3]");
    assert_int_equal(data_int(&r, "exit_code"), 3);
    assert_string_equal(data_str(&r, "stdout"), "hi\n");
    assert_string_equal(data_str(&r, "stderr"), "oops\n");
    assert_true(json_is_false(json_object_get(r.data, "timed_out")));
    assert_true(json_is_false(json_object_get(r.data, "truncated")));
    assert_int_equal(data_int(&r, "output_bytes"), 8);
    assert_true(data_int(&r, "duration_ms") < 2000);
    assert_null(json_object_get(r.data, "signal"));
    tool_result_deinit(&r);

    bash(f, "printf 'no newline'", &r);
    assert_false(r.is_error);
    assert_string_equal(r.content, "no newline\n[exit code: 0]");
    tool_result_deinit(&r);

    /* invalid UTF-8 is replaced */
    bash(f, "printf 'a\\377b'", &r);
    assert_string_equal(r.content, "a\xEF\xBF\xBD"
                                   "b\n[exit code: 0]");
    assert_string_equal(data_str(&r, "stdout"), "a\xEF\xBF\xBD"
                                                "b");
    tool_result_deinit(&r);

    /* files stay between calls, nothing else does */
    bash(f, "echo data > kept.txt; cd /; X=1", &r);
    tool_result_deinit(&r);
    bash(f, "cat kept.txt; echo \"${X:-unset}\"", &r);
    assert_string_equal(r.content, "data\nunset\n[exit code: 0]");
    tool_result_deinit(&r);

    /* a signal is reported, not a tool error unless it is a resource limit */
    bash(f, "kill -SEGV $$", &r);
    assert_false(r.is_error);
    assert_int_equal(data_int(&r, "exit_code"), 139);
    assert_int_equal(data_int(&r, "signal"), SIGSEGV);
    assert_non_null(strstr(r.content, "[exit code: 139]"));
    tool_result_deinit(&r);
}

static void test_env_cwd_stdin(void **state)
{
    fixture *f = *state;
    setenv("KGYM_LEAK_CHECK", "secret", 1);
    tool_result r;
    bash(f,
         "pwd; echo \"$HOME|$PWD|$KGYM_WORKSPACE|$PATH|$LANG|$LC_ALL|$TERM\"; "
         "echo \"${KGYM_LEAK_CHECK:-absent}\"; env | grep -c LEAK",
         &r);
    char want[1024];
    snprintf(want, sizeof want,
             "%s\n%s|%s|%s|/usr/local/bin:/usr/bin:/bin|C.UTF-8|C.UTF-8|dumb\nabsent\n0\n"
             "[exit code: 1]",
             f->root, f->root, f->root, f->root);
    assert_string_equal(r.content, want);
    tool_result_deinit(&r);
    unsetenv("KGYM_LEAK_CHECK");

    int64_t t0 = mono_ms();
    bash(f, "cat; echo after", &r); /* stdin is closed: cat returns at once */
    assert_true(mono_ms() - t0 < 2000);
    assert_string_equal(r.content, "after\n[exit code: 0]");
    tool_result_deinit(&r);

    /* limits are applied */
    bash(f, "ulimit -n; ulimit -c; ulimit -f; ulimit -t; ulimit -v", &r);
    assert_string_equal(r.content, "1024\n0\n1024\n20\n2097152\n[exit code: 0]");
    tool_result_deinit(&r);
}

static void test_fds_not_leaked(void **state)
{
    fixture *f = *state;
    int fd = open("/dev/null", O_RDONLY); /* not CLOEXEC */
    assert_true(fd >= 3);
    tool_result r;
    bash(f, "ls /proc/$$/fd; true", &r);
    assert_string_equal(r.content, "0\n1\n2\n[exit code: 0]");
    tool_result_deinit(&r);
    close(fd);
}

static void test_timeout(void **state)
{
    fixture *f = *state;
    tool_result r;
    int64_t t0 = mono_ms();
    call(f, &tool_def_bash,
         "{\"command\": \"sleep 100 & echo $!; echo partial; sleep 100\", \"timeout\": 300, "
         "\"description\": \"sleeps\"}",
         &r);
    int64_t took = mono_ms() - t0;
    assert_true(r.is_error);
    assert_string_equal(err_code(&r), "TIMEOUT");
    assert_int_equal(data_int(&r, "exit_code"), 124);
    assert_true(json_is_true(json_object_get(r.data, "timed_out")));
    assert_true(took >= 290 && took < 3000);
    assert_non_null(strstr(r.content, "partial\n"));
    assert_non_null(strstr(r.content, "[Command timed out after 300 ms; process group killed]"));
    assert_non_null(strstr(r.content, "[exit code: 124]"));
    pid_t gc = (pid_t)atoi(r.content);
    assert_true(gc > 1);
    assert_true(pid_dead(gc, 3000));
    tool_result_deinit(&r);
}

static void test_invalid_calls(void **state)
{
    fixture *f = *state;
    tool_result r;
    call(f, &tool_def_bash, "{\"command\": \"true\", \"timeout\": 20001}", &r);
    assert_true(r.is_error);
    assert_string_equal(err_code(&r), "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    call(f, &tool_def_bash, "{\"command\": \"true\", \"timeout\": 0}", &r);
    assert_string_equal(err_code(&r), "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    call(f, &tool_def_bash, "{\"command\": \"true\", \"bogus\": 1}", &r);
    assert_string_equal(err_code(&r), "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    call(f, &tool_def_bash, "{\"timeout\": 10}", &r);
    assert_string_equal(err_code(&r), "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    call(f, &tool_def_bash, "{\"command\": \"echo a\\u0000b\"}", &r);
    assert_string_equal(err_code(&r), "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
    call(f, &tool_def_bash, "{\"command\": \"echo ok\", \"timeout\": 20000}", &r);
    assert_false(r.is_error);
    assert_string_equal(r.content, "ok\n[exit code: 0]");
    tool_result_deinit(&r);
}

static void test_output_cap(void **state)
{
    fixture *f = *state;
    tool_result r;
    bash(f, "seq 1 100000", &r);
    assert_false(r.is_error);
    assert_true(strlen(r.content) <= 2000);
    assert_true(strncmp(r.content, "1\n2\n3\n", 6) == 0);
    assert_non_null(strstr(r.content, "bytes omitted ...]"));
    assert_non_null(strstr(r.content, "99999\n100000\n[exit code: 0]"));
    assert_true(json_is_true(json_object_get(r.data, "truncated")));
    assert_int_equal(data_int(&r, "output_bytes"), 588895);
    const char *out = data_str(&r, "stdout");
    assert_true(strlen(out) <= 2000);
    assert_true(strncmp(out, "1\n2\n", 4) == 0);
    tool_result_deinit(&r);

    /* both streams long: head of stdout and tail of stderr survive */
    bash(f, "seq 1 5000; seq 1 5000 | sed s/^/e/ >&2", &r);
    assert_true(strlen(r.content) <= 2000);
    assert_true(strncmp(r.content, "1\n2\n", 4) == 0);
    assert_non_null(strstr(r.content, "e5000\n[exit code: 0]"));
    tool_result_deinit(&r);
}

static void test_leftover_child(void **state)
{
    fixture *f = *state;
    tool_result r;
    int64_t t0 = mono_ms();
    bash(f, "sleep 100 & echo $!", &r);
    assert_true(mono_ms() - t0 < 1500);
    assert_false(r.is_error);
    pid_t pid = (pid_t)atoi(r.content);
    assert_true(pid > 1);
    assert_true(pid_dead(pid, 3000));
    tool_result_deinit(&r);
}

static void test_resource_limits(void **state)
{
    fixture *f = *state;
    tool_result r;
    /* head dies of SIGXFSZ; the shell goes on: only its message tells */
    bash(f, "head -c 10M /dev/zero > f; echo done", &r);
    assert_false(r.is_error);
    assert_int_equal(data_int(&r, "exit_code"), 0);
    assert_non_null(strstr(data_str(&r, "stderr"), "File size limit exceeded"));
    tool_result_deinit(&r);

    bash(f, "head -c 10M /dev/zero > f", &r);
    assert_true(r.is_error);
    assert_string_equal(err_code(&r), "RESOURCE_LIMIT");
    assert_int_equal(data_int(&r, "exit_code"), 153);
    assert_non_null(strstr(r.content, "size limit of 1048576 bytes"));
    assert_non_null(strstr(r.content, "[exit code: 153]"));
    tool_result_deinit(&r);

    struct stat st;
    char path[128];
    snprintf(path, sizeof path, "%s/f", f->root);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 1 << 20);

    bash(f, "exec head -c 10M /dev/zero > f", &r);
    assert_string_equal(err_code(&r), "RESOURCE_LIMIT");
    assert_int_equal(data_int(&r, "signal"), SIGXFSZ);
    tool_result_deinit(&r);
    bash(f, "rm f", &r);
    tool_result_deinit(&r);

    /* CPU time: SIGXCPU at the soft limit */
    f->limits.bash_cpu_s = 1;
    int64_t t0 = mono_ms();
    bash(f, "echo spinning; while :; do :; done", &r);
    assert_true(mono_ms() - t0 < 5000);
    assert_true(r.is_error);
    assert_string_equal(err_code(&r), "RESOURCE_LIMIT");
    assert_int_equal(data_int(&r, "signal"), SIGXCPU);
    assert_int_equal(data_int(&r, "exit_code"), 128 + SIGXCPU);
    assert_true(strncmp(r.content, "spinning\n[Resource limit: CPU time limit of 1 s", 47) == 0);
    tool_result_deinit(&r);
}

static void test_disk_quota(void **state)
{
    fixture *f = *state;
    tool_result r;
    bash(f, "for i in 1 2 3 4 5; do head -c 1000000 /dev/zero > q$i; done; echo wrote", &r);
    assert_true(r.is_error);
    assert_string_equal(err_code(&r), "DISK_QUOTA_EXCEEDED");
    assert_true(strncmp(r.content, "wrote\n[exit code: 0]\n[Disk quota exceeded", 40) == 0);
    assert_int_equal(data_int(&r, "exit_code"), 0);
    assert_int_equal(data_int(&r, "disk_usage_bytes"), 5000000);
    tool_result_deinit(&r);
    bash(f, "rm q*; echo clean", &r);
    assert_false(r.is_error);
    assert_string_equal(r.content, "clean\n[exit code: 0]");
    tool_result_deinit(&r);
}

static void test_spawn_failed(void **state)
{
    fixture *f = *state;
    tool_env env = f->env;
    env.root_path = "/nonexistent/kgym-workspace";
    json_t *args = json_pack("{s:s}", "command", "true");
    tool_result r = {0};
    tool_invoke(&tool_def_bash, &env, args, &r);
    json_decref(args);
    assert_true(r.is_error);
    assert_string_equal(err_code(&r), "SPAWN_FAILED");
    assert_non_null(strstr(r.content, "chdir"));
    tool_result_deinit(&r);
}

/* Polls BashOutput for bash_id until the job is no longer running; appends all output to acc. */
static const char *wait_job(fixture *f, const char *id, char *acc, size_t cap, tool_result *last)
{
    char json[128];
    snprintf(json, sizeof json, "{\"bash_id\": \"%s\"}", id);
    for (int i = 0; i < 300; i++) {
        call(f, &tool_def_bashoutput, json, last);
        assert_false(last->is_error);
        const char *status = data_str(last, "status");
        if (json_integer_value(json_object_get(last->data, "new_bytes")) > 0) {
            const char *c = last->content;
            const char *end = strstr(c, "\n[status:");
            size_t n = end ? (size_t)(end - c) + 1 : strlen(c);
            strncat(acc, c, n < cap - strlen(acc) - 1 ? n : cap - strlen(acc) - 1);
        }
        if (strcmp(status, "running") != 0)
            return status;
        tool_result_deinit(last);
        sleep_ms(20);
    }
    return "still running";
}

static void test_background_job(void **state)
{
    fixture *f = *state;
    tool_result r;
    int64_t t0 = mono_ms();
    call(f, &tool_def_bash,
         "{\"command\": \"for i in 1 2 3; do echo line$i; sleep 0.15; done; echo err >&2; "
         "exit 5\", \"run_in_background\": true}",
         &r);
    assert_true(mono_ms() - t0 < 1000); /* returns at once */
    assert_false(r.is_error);
    assert_string_equal(data_str(&r, "bash_id"), "bash_1");
    assert_true(data_int(&r, "pid") > 1);
    assert_non_null(strstr(r.content, "bash_1"));
    assert_non_null(strstr(r.content, "BashOutput"));
    tool_result_deinit(&r);

    /* the log lives outside the workspace */
    char path[160];
    snprintf(path, sizeof path, "%s/bash_1.log", f->log_dir);
    assert_int_equal(access(path, R_OK), 0);

    sleep_ms(80);
    call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_1\"}", &r);
    assert_false(r.is_error);
    assert_string_equal(data_str(&r, "status"), "running");
    assert_true(json_is_null(json_object_get(r.data, "exit_code")));
    assert_true(strncmp(r.content, "line1\n", 6) == 0);
    assert_null(strstr(r.content, "line3"));
    assert_non_null(strstr(r.content, "[status: running"));
    char acc[256];
    snprintf(acc, sizeof acc, "%.*s", (int)data_int(&r, "new_bytes"), r.content);
    tool_result_deinit(&r);

    const char *status = wait_job(f, "bash_1", acc, sizeof acc, &r);
    assert_string_equal(status, "exited");
    assert_int_equal(data_int(&r, "exit_code"), 5);
    assert_non_null(strstr(r.content, "[status: exited, exit code: 5]"));
    tool_result_deinit(&r);
    assert_string_equal(acc, "line1\nline2\nline3\nerr\n"); /* incremental, nothing twice */

    call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_1\"}", &r);
    assert_int_equal(data_int(&r, "new_bytes"), 0);
    assert_true(strncmp(r.content, "(no new output)", 15) == 0);
    tool_result_deinit(&r);

    /* KillBash on a finished job: fine, says so */
    call(f, &tool_def_killbash, "{\"shell_id\": \"bash_1\"}", &r);
    assert_false(r.is_error);
    assert_string_equal(data_str(&r, "status"), "exited");
    assert_non_null(strstr(r.content, "already finished"));
    tool_result_deinit(&r);

    /* unknown ids */
    call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_99\"}", &r);
    assert_true(r.is_error);
    assert_string_equal(err_code(&r), "JOB_NOT_FOUND");
    tool_result_deinit(&r);
    call(f, &tool_def_killbash, "{\"shell_id\": \"nope\"}", &r);
    assert_string_equal(err_code(&r), "JOB_NOT_FOUND");
    tool_result_deinit(&r);
    call(f, &tool_def_bashoutput, "{}", &r);
    assert_string_equal(err_code(&r), "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
}

static void test_background_filter(void **state)
{
    fixture *f = *state;
    tool_result r;
    char id[32];
    call(f, &tool_def_bash,
         "{\"command\": \"printf 'apple 1\\\\nbanana 2\\\\napricot 3\\\\n'; sleep 0.1\", "
         "\"run_in_background\": true}",
         &r);
    snprintf(id, sizeof id, "%s", data_str(&r, "bash_id"));
    tool_result_deinit(&r);
    sleep_ms(300);
    char json[128];
    snprintf(json, sizeof json, "{\"bash_id\": \"%s\", \"filter\": \"^ap\"}", id);
    call(f, &tool_def_bashoutput, json, &r);
    assert_false(r.is_error);
    assert_string_equal(data_str(&r, "status"), "exited");
    assert_true(strncmp(r.content, "apple 1\napricot 3\n[status: exited, exit code: 0]", 48) == 0);
    assert_int_equal(data_int(&r, "new_bytes"), 27);          /* all consumed */
    assert_null(json_object_get(r.data, "filter_timed_out")); /* no notes on a plain filter */
    assert_null(json_object_get(r.data, "filter_limit_lines"));
    tool_result_deinit(&r);
    call(f, &tool_def_bashoutput, json, &r);
    assert_int_equal(data_int(&r, "new_bytes"), 0);
    tool_result_deinit(&r);

    /* an unfinished line is not split by a filtered read while the job runs */
    call(f, &tool_def_bash,
         "{\"command\": \"printf 'x1\\\\nab'; sleep 0.4; printf 'c\\\\ny\\\\n'\", "
         "\"run_in_background\": true}",
         &r);
    snprintf(id, sizeof id, "%s", data_str(&r, "bash_id"));
    tool_result_deinit(&r);
    sleep_ms(150);
    snprintf(json, sizeof json, "{\"bash_id\": \"%s\", \"filter\": \"^abc$|x\"}", id);
    call(f, &tool_def_bashoutput, json, &r);
    assert_string_equal(data_str(&r, "status"), "running");
    assert_true(strncmp(r.content, "x1\n[status: running", 19) == 0);
    assert_int_equal(data_int(&r, "new_bytes"), 3);
    tool_result_deinit(&r);
    sleep_ms(450);
    call(f, &tool_def_bashoutput, json, &r);
    assert_string_equal(data_str(&r, "status"), "exited");
    assert_true(strncmp(r.content, "abc\n[status: exited", 19) == 0);
    assert_int_equal(data_int(&r, "new_bytes"), 6);
    tool_result_deinit(&r);
    snprintf(json, sizeof json, "{\"bash_id\": \"%s\", \"filter\": \"(\"}", id);
    call(f, &tool_def_bashoutput, json, &r);
    assert_string_equal(err_code(&r), "INVALID_TOOL_CALL");
    tool_result_deinit(&r);
}

static void test_killbash_and_limits(void **state)
{
    fixture *f = *state;
    tool_result r;
    const char *start = "{\"command\": \"sleep 100 & echo $!; echo $$; sleep 100\", "
                        "\"run_in_background\": true}";
    call(f, &tool_def_bash, start, &r);
    assert_false(r.is_error);
    assert_string_equal(data_str(&r, "bash_id"), "bash_1");
    pid_t leader = (pid_t)data_int(&r, "pid");
    tool_result_deinit(&r);
    call(f, &tool_def_bash, start, &r);
    assert_string_equal(data_str(&r, "bash_id"), "bash_2");
    tool_result_deinit(&r);
    assert_int_equal(job_table_running(f->env.jobs), 2);

    call(f, &tool_def_bash, start, &r); /* limit is 2 */
    assert_true(r.is_error);
    assert_string_equal(err_code(&r), "TOO_MANY_JOBS");
    tool_result_deinit(&r);

    /* find bash_1's pids */
    /* The two echo lines may arrive in separate reads: accumulate until both are in. */
    pid_t pids[2] = {0, 0};
    char seen[256] = "";
    for (int i = 0; i < 200 && !pids[1]; i++) {
        call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_1\"}", &r);
        if (data_int(&r, "new_bytes") > 0) {
            size_t n = strcspn(r.content, "["); /* output before the status line */
            strncat(seen, r.content,
                    n < sizeof seen - strlen(seen) - 1 ? n : sizeof seen - strlen(seen) - 1);
            char *end;
            long a = strtol(seen, &end, 10);
            long b = strtol(end, &end, 10);
            if (b > 0 && *end == '\n') {
                pids[0] = (pid_t)a;
                pids[1] = (pid_t)b;
            }
        }
        tool_result_deinit(&r);
        if (!pids[1])
            sleep_ms(10);
    }
    assert_int_equal(pids[1], leader);
    assert_true(pids[0] > 1);

    int64_t t0 = mono_ms();
    call(f, &tool_def_killbash, "{\"shell_id\": \"bash_1\"}", &r);
    assert_false(r.is_error);
    assert_string_equal(data_str(&r, "shell_id"), "bash_1");
    assert_string_equal(data_str(&r, "status"), "killed");
    assert_true(json_is_true(json_object_get(r.data, "was_running")));
    assert_true(mono_ms() - t0 < 1000); /* sleep dies on SIGTERM */
    tool_result_deinit(&r);
    assert_true(pid_dead(pids[0], 3000));
    assert_true(pid_dead(pids[1], 3000));

    call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_1\"}", &r);
    assert_string_equal(data_str(&r, "status"), "killed");
    tool_result_deinit(&r);
    call(f, &tool_def_killbash, "{\"shell_id\": \"bash_1\"}", &r);
    assert_false(r.is_error);
    assert_true(json_is_false(json_object_get(r.data, "was_running")));
    assert_non_null(strstr(r.content, "already finished"));
    tool_result_deinit(&r);

    /* room again: a job with a short wall-clock limit times out */
    call(f, &tool_def_bash,
         "{\"command\": \"echo begun; sleep 100\", \"run_in_background\": true, "
         "\"timeout\": 200}",
         &r);
    assert_false(r.is_error);
    assert_string_equal(data_str(&r, "bash_id"), "bash_3");
    tool_result_deinit(&r);
    sleep_ms(350);
    call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_3\"}", &r);
    assert_string_equal(data_str(&r, "status"), "timed_out");
    assert_int_equal(data_int(&r, "exit_code"), 124);
    assert_true(strncmp(r.content, "begun\n", 6) == 0);
    tool_result_deinit(&r);

    /* a job whose shell exited has its leftovers killed */
    call(f, &tool_def_bash, "{\"command\": \"sleep 100 & echo $!\", \"run_in_background\": true}",
         &r);
    assert_string_equal(data_str(&r, "bash_id"), "bash_4");
    tool_result_deinit(&r);
    char acc[64] = "";
    assert_string_equal(wait_job(f, "bash_4", acc, sizeof acc, &r), "exited");
    tool_result_deinit(&r);
    pid_t left = (pid_t)atoi(acc);
    assert_true(left > 1);
    assert_true(pid_dead(left, 3000));
}

static void test_job_table_free_kills(void **state)
{
    fixture *f = *state;
    tool_result r;
    pid_t leaders[2], children[2];
    for (int i = 0; i < 2; i++) {
        call(f, &tool_def_bash,
             "{\"command\": \"trap '' TERM; sleep 100 & echo $!; sleep 100\", "
             "\"run_in_background\": true}",
             &r);
        assert_false(r.is_error);
        leaders[i] = (pid_t)data_int(&r, "pid");
        tool_result_deinit(&r);
    }
    for (int i = 0; i < 2; i++) {
        char path[160];
        snprintf(path, sizeof path, "%s/bash_%d.log", f->log_dir, i + 1);
        children[i] = 0;
        for (int k = 0; k < 300 && !children[i]; k++) {
            FILE *fp = fopen(path, "r");
            long v = 0;
            if (fp && fscanf(fp, "%ld", &v) == 1)
                children[i] = (pid_t)v;
            if (fp)
                fclose(fp);
            if (!children[i])
                sleep_ms(10);
        }
        assert_true(children[i] > 1);
    }
    int64_t t0 = mono_ms();
    job_table_free(f->env.jobs); /* SIGKILL: no grace, even though they ignore SIGTERM */
    f->env.jobs = NULL;
    assert_true(mono_ms() - t0 < 1000);
    for (int i = 0; i < 2; i++) {
        assert_true(pid_dead(leaders[i], 3000));
        assert_true(pid_dead(children[i], 3000));
    }
    call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_1\"}", &r);
    assert_string_equal(err_code(&r), "JOB_NOT_FOUND");
    tool_result_deinit(&r);
}

/* ---- BashOutput's filter under limits ----------------------------------------------------------
 */

/* Waits until no job of the table runs (at most 20 s). */
static void wait_jobs_done(fixture *f)
{
    for (int i = 0; i < 2000 && job_table_running(f->env.jobs) > 0; i++)
        sleep_ms(10);
    assert_int_equal(job_table_running(f->env.jobs), 0);
}

typedef struct filter_call {
    fixture *f;
    const char *json;
    tool_result r;
    int64_t took_ms;
} filter_call;

static void *run_filter_call(void *p)
{
    filter_call *c = p;
    int64_t t0 = mono_ms();
    memset(&c->r, 0, sizeof c->r);
    json_t *args = json_loads(c->json, 0, NULL);
    tool_invoke(&tool_def_bashoutput, &c->f->env, args, &c->r);
    json_decref(args);
    c->took_ms = mono_ms() - t0;
    return NULL;
}

/* A catastrophic pattern ((a+)+ against lines of a's ending in '!', the red team's reproducer)
 * over many lines: every match stops at PCRE2's limit, the whole filter at its time budget, and
 * the call returns within seconds saying which lines it dropped, all consumed. Meanwhile the
 * job table stays usable: the filter runs outside its lock. */
static void test_filter_catastrophic_pattern(void **state)
{
    fixture *f = *state;
    tool_result r;
    call(f, &tool_def_bash,
         "{\"command\": \"echo aaaa; for i in $(seq 3000); do echo aaaaaaaaaaaaaaaaaaaaaaaaaaaa!; "
         "done; echo aaa\", \"run_in_background\": true}",
         &r);
    assert_false(r.is_error);
    tool_result_deinit(&r);
    wait_jobs_done(f);
    const size_t total = 5 + 3000 * 30 + 4;

    filter_call c = {f, "{\"bash_id\": \"bash_1\", \"filter\": \"^(a+)+$\"}", {0}, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_filter_call, &c), 0);
    sleep_ms(300);
    int64_t t0 = mono_ms();
    (void)job_table_running(f->env.jobs); /* needs the table's lock */
    int64_t lock_wait = mono_ms() - t0;
    pthread_join(th, NULL);
    if (lock_wait > 200)
        fail_msg("the job table was locked for %lld ms while the filter ran", (long long)lock_wait);
    if (c.took_ms > 6000)
        fail_msg("the filter took %lld ms", (long long)c.took_ms);
    assert_false(c.r.is_error);
    assert_true(strncmp(c.r.content, "aaaa\n", 5) == 0); /* matched before the budget ran out */
    assert_non_null(strstr(c.r.content, "[filter: ran out of time after"));
    assert_non_null(strstr(c.r.content, "were dropped unmatched"));
    assert_non_null(strstr(c.r.content, "needs too much work"));
    assert_null(strstr(c.r.content, "\naaa\n")); /* the last line came after the budget */
    assert_non_null(strstr(c.r.content, "[status: exited, exit code: 0]"));
    assert_true(json_is_true(json_object_get(c.r.data, "filter_timed_out")));
    json_int_t late = data_int(&c.r, "filter_dropped_lines");
    json_int_t limited = data_int(&c.r, "filter_limit_lines");
    assert_true(late > 0 && limited > 0);
    assert_int_equal(late + limited, 3001); /* each evil line, and the good one at the end */
    assert_int_equal(data_int(&c.r, "new_bytes"), (json_int_t)total); /* all consumed */
    tool_result_deinit(&c.r);

    call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_1\", \"filter\": \"^(a+)+$\"}", &r);
    assert_int_equal(data_int(&r, "new_bytes"), 0);
    tool_result_deinit(&r);
}

/* A normal filter over the same many lines is unchanged: every matching line, quickly. */
static void test_filter_many_lines(void **state)
{
    fixture *f = *state;
    tool_result r;
    call(f, &tool_def_bash,
         "{\"command\": \"for i in $(seq 3000); do echo \\\"line $i\\\"; done\", "
         "\"run_in_background\": true}",
         &r);
    tool_result_deinit(&r);
    wait_jobs_done(f);
    int64_t t0 = mono_ms();
    call(f, &tool_def_bashoutput,
         "{\"bash_id\": \"bash_1\", \"filter\": \"^line (7|29\\\\d\\\\d)$\"}", &r);
    assert_true(mono_ms() - t0 < 2000);
    assert_false(r.is_error);
    char want[2048] = "line 7\n";
    for (int i = 2900; i <= 2999; i++) {
        char l[32];
        snprintf(l, sizeof l, "line %d\n", i);
        strcat(want, l);
    }
    assert_true(strncmp(r.content, want, strlen(want)) == 0);
    assert_true(strncmp(r.content + strlen(want), "[status: exited", 15) == 0);
    assert_null(json_object_get(r.data, "filter_timed_out"));
    tool_result_deinit(&r);
}

/* ---- freezing an episode's jobs (job_table_freeze) ----------------------------------------------
 */

/* The number of lines of a file (0 when it does not exist). */
static int count_lines(const char *path)
{
    FILE *fp = fopen(path, "r");
    int n = 0, ch;
    while (fp && (ch = fgetc(fp)) != EOF)
        n += ch == '\n';
    if (fp)
        fclose(fp);
    return n;
}

static int wait_lines(const char *path, int at_least)
{
    for (int i = 0; i < 300 && count_lines(path) < at_least; i++)
        sleep_ms(10);
    return count_lines(path);
}

/* A job in a cgroup of its own, as the sandbox makes (sandbox_job), with a hook that records
 * what the table asked of it. */
typedef struct cg_job {
    sbx_cgroup cg;
    int freezes, thaws, ends;
    bool frozen_at_end; /* on_end came while a freeze was not undone */
} cg_job;

static int cg_job_freeze(void *ctx, bool on)
{
    cg_job *j = ctx;
    *(on ? &j->freezes : &j->thaws) += 1;
    return sbx_cg_freeze(&j->cg, on);
}

static void cg_job_end(void *ctx)
{
    cg_job *j = ctx;
    j->ends++;
    j->frozen_at_end = j->freezes > j->thaws;
    sbx_cg_destroy(&j->cg);
}

/* The cgroup host of the freeze tests; false (the test skips) without root or a freezer. */
static bool freezer_host(sbx_cg_host *h, cg_job *j, const char *name)
{
    char err[512] = "", hname[64];
    if (geteuid() != 0)
        return false;
    snprintf(hname, sizeof hname, "kgym-testbash-%d", (int)getpid());
    if (sbx_cg_host_probe(h, hname, err, sizeof err) != 0) {
        fprintf(stderr, "no cgroups: %s\n", err);
        return false;
    }
    memset(j, 0, sizeof *j);
    if (sbx_cg_create(h, name, 0, 0, &j->cg, err, sizeof err) != 0)
        fail_msg("sbx_cg_create: %s", err);
    bool ok = h->mode == SBX_CG_V1 ? j->cg.v1_freezer[0] != '\0' : true;
    if (h->mode == SBX_CG_V2) {
        char p[SBX_CG_PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/cgroup.freeze", j->cg.v2);
        ok = access(p, W_OK) == 0;
    }
    if (!ok) {
        sbx_cg_destroy(&j->cg);
        sbx_cg_host_cleanup(h);
    }
    return ok;
}

/* Starts a job that waits for the file "go" (so it is in the cgroup before it forks anything
 * that matters), then appends a timestamp to stamps_<tag> every 20 ms. */
static job_info start_stamper(fixture *f, cg_job *j, const char *tag, int timeout_ms)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "while [ ! -e go_%s ]; do sleep 0.01; done; "
             "while :; do date +%%s%%N >> stamps_%s; sleep 0.02; done",
             tag, tag);
    const char *argv[] = {"/bin/bash", "-c", cmd, NULL};
    static const char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = envp;
    o.cwd = f->root;
    o.timeout_ms = timeout_ms;
    o.kill_grace_ms = 200;
    job_hook hook = {.on_end = cg_job_end, .ctx = j, .on_freeze = cg_job_freeze};
    job_info info;
    const char *fail = NULL;
    assert_int_equal(job_start(f->env.jobs, &o, &hook, &info, &fail), JOB_OK);
    char err[256] = "";
    if (sbx_cg_attach(&j->cg, info.pid, err, sizeof err) != 0)
        fail_msg("attach: %s", err);
    char go[160];
    snprintf(go, sizeof go, "%s/go_%s", f->root, tag);
    FILE *fp = fopen(go, "w");
    assert_non_null(fp);
    fclose(fp);
    return info;
}

/* Jobs stop making progress for as long as the table is frozen and go on after the thaw; a job
 * without on_freeze (an unsandboxed one) is counted as not frozen and keeps running. */
static void test_freeze_jobs(void **state)
{
    fixture *f = *state;
    sbx_cg_host h;
    cg_job j;
    if (!freezer_host(&h, &j, "t-bash-freeze"))
        skip();
    char stamps[160], plain[160];
    snprintf(stamps, sizeof stamps, "%s/stamps_a", f->root);
    snprintf(plain, sizeof plain, "%s/plain", f->root);
    job_info info = start_stamper(f, &j, "a", 20000);
    tool_result r;
    call(f, &tool_def_bash,
         "{\"command\": \"while :; do echo x >> plain; sleep 0.02; done\", "
         "\"run_in_background\": true}",
         &r);
    assert_false(r.is_error);
    tool_result_deinit(&r);
    assert_true(wait_lines(stamps, 3) >= 3);
    assert_true(wait_lines(plain, 3) >= 3);

    job_freeze_count c = job_table_freeze(f->env.jobs, true);
    assert_int_equal(c.frozen, 1);
    assert_int_equal(c.unfrozen, 1); /* the unsandboxed job: nothing can freeze it */
    assert_int_equal(j.freezes, 1);
    int n0 = count_lines(stamps), p0 = count_lines(plain);
    sleep_ms(400);
    assert_int_equal(count_lines(stamps), n0);           /* frozen: not one more line */
    assert_true(count_lines(plain) >= p0 + 5);           /* not frozen: goes on */
    assert_int_equal(job_table_running(f->env.jobs), 2); /* frozen is still running */

    c = job_table_freeze(f->env.jobs, false);
    assert_int_equal(c.frozen, 1); /* thawed */
    assert_int_equal(j.thaws, 1);
    assert_true(wait_lines(stamps, n0 + 5) >= n0 + 5); /* it goes on */

    /* nested: only the outer thaw thaws */
    assert_int_equal(job_table_freeze(f->env.jobs, true).frozen, 1);
    assert_int_equal(job_table_freeze(f->env.jobs, true).frozen, 1);
    assert_int_equal(j.freezes, 2);
    assert_int_equal(job_table_freeze(f->env.jobs, false).frozen, 0);
    assert_int_equal(j.thaws, 1);
    assert_int_equal(job_table_freeze(f->env.jobs, false).frozen, 1);
    assert_int_equal(j.thaws, 2);

    char json[64];
    snprintf(json, sizeof json, "{\"shell_id\": \"bash_%d\"}", info.id);
    call(f, &tool_def_killbash, json, &r);
    assert_true(json_is_true(json_object_get(r.data, "was_running")));
    tool_result_deinit(&r);
    assert_int_equal(j.ends, 1);
    assert_false(j.frozen_at_end);
    assert_true(pid_dead(info.pid, 3000));
    call(f, &tool_def_killbash, "{\"shell_id\": \"bash_2\"}", &r);
    tool_result_deinit(&r);
    sbx_cg_host_cleanup(&h);
}

/* A job whose wall-clock limit passes while it is frozen is killed by the next reap: outright
 * (a frozen job cannot act on SIGTERM, and v1 frozen tasks die of SIGKILL only once thawed, so
 * a kill that did not thaw would wait for it forever), thawed before its cgroup is removed, and
 * reaped. A KillBash of a frozen job, and freeing the table with one frozen, do the same. */
static void test_frozen_job_is_killed(void **state)
{
    fixture *f = *state;
    sbx_cg_host h;
    cg_job j;
    if (!freezer_host(&h, &j, "t-bash-frozen-kill"))
        skip();
    alarm(30); /* a kill waiting on a frozen job must fail the test, not hang it */
    char stamps[160];
    snprintf(stamps, sizeof stamps, "%s/stamps_b", f->root);
    job_info info = start_stamper(f, &j, "b", 600);
    assert_true(wait_lines(stamps, 2) >= 2);
    assert_int_equal(job_table_freeze(f->env.jobs, true).frozen, 1);
    sleep_ms(800); /* past its limit, frozen */
    int64_t t0 = mono_ms();
    job_table_reap(f->env.jobs);
    assert_true(mono_ms() - t0 < 1000); /* no SIGTERM grace for a job that cannot run */
    tool_result r;
    call(f, &tool_def_bashoutput, "{\"bash_id\": \"bash_1\"}", &r);
    assert_string_equal(data_str(&r, "status"), "timed_out");
    tool_result_deinit(&r);
    assert_int_equal(j.ends, 1);
    assert_int_equal(j.thaws, 1);
    assert_false(j.frozen_at_end);
    assert_true(pid_dead(info.pid, 1000));
    assert_int_equal(job_table_freeze(f->env.jobs, false).frozen, 0); /* nothing left frozen */

    /* KillBash of a frozen job */
    cg_job j2;
    memset(&j2, 0, sizeof j2);
    char err[256] = "";
    if (sbx_cg_create(&h, "t-bash-frozen-kill2", 0, 0, &j2.cg, err, sizeof err) != 0)
        fail_msg("create: %s", err);
    snprintf(stamps, sizeof stamps, "%s/stamps_c", f->root);
    info = start_stamper(f, &j2, "c", 20000);
    assert_true(wait_lines(stamps, 2) >= 2);
    assert_int_equal(job_table_freeze(f->env.jobs, true).frozen, 1);
    t0 = mono_ms();
    char json[64];
    snprintf(json, sizeof json, "{\"shell_id\": \"bash_%d\"}", info.id);
    call(f, &tool_def_killbash, json, &r);
    assert_true(mono_ms() - t0 < 1000);
    assert_string_equal(data_str(&r, "status"), "killed");
    tool_result_deinit(&r);
    assert_int_equal(j2.ends, 1);
    assert_false(j2.frozen_at_end);
    assert_true(pid_dead(info.pid, 1000));
    assert_int_equal(job_table_freeze(f->env.jobs, false).frozen, 0);

    /* a job past its limit when the table is thawed is killed, not thawed to run on */
    cg_job j4;
    memset(&j4, 0, sizeof j4);
    if (sbx_cg_create(&h, "t-bash-frozen-kill4", 0, 0, &j4.cg, err, sizeof err) != 0)
        fail_msg("create: %s", err);
    snprintf(stamps, sizeof stamps, "%s/stamps_e", f->root);
    info = start_stamper(f, &j4, "e", 600);
    assert_true(wait_lines(stamps, 2) >= 2);
    assert_int_equal(job_table_freeze(f->env.jobs, true).frozen, 1);
    sleep_ms(800);
    int frozen_lines = count_lines(stamps);
    assert_int_equal(job_table_freeze(f->env.jobs, false).frozen, 0); /* killed, not thawed */
    assert_int_equal(j4.ends, 1);
    assert_false(j4.frozen_at_end);
    assert_true(pid_dead(info.pid, 1000));
    assert_int_equal(count_lines(stamps), frozen_lines);
    snprintf(json, sizeof json, "{\"bash_id\": \"bash_%d\"}", info.id);
    call(f, &tool_def_bashoutput, json, &r);
    assert_string_equal(data_str(&r, "status"), "timed_out");
    tool_result_deinit(&r);

    /* the table freed with a job frozen */
    cg_job j3;
    memset(&j3, 0, sizeof j3);
    if (sbx_cg_create(&h, "t-bash-frozen-kill3", 0, 0, &j3.cg, err, sizeof err) != 0)
        fail_msg("create: %s", err);
    snprintf(stamps, sizeof stamps, "%s/stamps_d", f->root);
    info = start_stamper(f, &j3, "d", 20000);
    assert_true(wait_lines(stamps, 2) >= 2);
    assert_int_equal(job_table_freeze(f->env.jobs, true).frozen, 1);
    job_table_free(f->env.jobs);
    f->env.jobs = NULL;
    assert_int_equal(j3.ends, 1);
    assert_false(j3.frozen_at_end);
    assert_true(pid_dead(info.pid, 1000));
    alarm(0);
    sbx_cg_host_cleanup(&h);
}

#define N_THREADS 8
#define N_CALLS 6

typedef struct worker_arg {
    fixture *f;
    int t;
    int failures;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    for (int i = 0; i < N_CALLS; i++) {
        char cmd[128], want[128];
        snprintf(cmd, sizeof cmd, "echo T%d-%d; sleep 0.0%d; echo E%d-%d >&2; exit %d", a->t, i, i,
                 a->t, i, a->t);
        snprintf(want, sizeof want, "T%d-%d\nE%d-%d\n[exit code: %d]", a->t, i, a->t, i, a->t);
        json_t *args = json_pack("{s:s}", "command", cmd);
        tool_result r = {0};
        tool_invoke(&tool_def_bash, &a->f->env, args, &r);
        json_decref(args);
        if (r.is_error || strcmp(r.content, want) != 0)
            a->failures++;
        tool_result_deinit(&r);
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    fixture *f = *state;
    pthread_t th[N_THREADS];
    worker_arg args[N_THREADS];
    int64_t t0 = mono_ms();
    for (int t = 0; t < N_THREADS; t++) {
        args[t] = (worker_arg){f, t, 0};
        assert_int_equal(pthread_create(&th[t], NULL, worker, &args[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(args[t].failures, 0);
    }
    assert_true(mono_ms() - t0 < 10000);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the server does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_cwd_stdin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fds_not_leaked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leftover_child, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resource_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_quota, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_failed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killbash_and_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_table_free_kills, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filter_catastrophic_pattern, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filter_many_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_freeze_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frozen_job_is_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
