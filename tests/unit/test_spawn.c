/* Unit tests of env/spawn.c: exit codes, capture, timeouts, process-group cleanup, fds, limits. */
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

#include "proc_helpers.h"
#include "spawn.h"

static const char *const ENVP[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", NULL};

/* No child of ours is left unreaped (spawn reaped everything it started). */
static void assert_no_children(void)
{
    int st;
    errno = 0;
    assert_int_equal(waitpid(-1, &st, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

static int run_sh(const char *cmd, int timeout_ms, int grace_ms, size_t cap, spawn_result *r)
{
    const char *argv[] = {"/bin/bash", "-c", cmd, NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = ENVP;
    o.timeout_ms = timeout_ms;
    o.kill_grace_ms = grace_ms;
    o.capture_cap = cap;
    return spawn_run(&o, r);
}

/* Parses the decimal numbers of s, one per line, into pids (at most n). */
static int parse_pids(const char *s, pid_t *pids, int n)
{
    int k = 0;
    while (*s && k < n) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) {
            s++;
            continue;
        }
        pids[k++] = (pid_t)v;
        s = end;
    }
    return k;
}

static void test_exit_code_and_streams(void **state)
{
    (void)state;
    spawn_result r;
    assert_int_equal(run_sh("echo out; echo err >&2; echo out2; exit 3", 5000, 100, 0, &r), 0);
    assert_int_equal(r.exit_code, 3);
    assert_int_equal(r.term_signal, 0);
    assert_false(r.timed_out);
    assert_string_equal(r.out.data, "out\nout2\n");
    assert_int_equal(r.out.len, 9);
    assert_int_equal(r.out.total, 9);
    assert_false(r.out.truncated);
    assert_string_equal(r.err.data, "err\n");
    assert_true(r.wall_ms >= 0 && r.wall_ms < 2000);
    spawn_result_deinit(&r);

    assert_int_equal(run_sh("true", 5000, 100, 0, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.out.data, "");
    assert_string_equal(r.err.data, "");
    spawn_result_deinit(&r);

    /* binary output is kept byte for byte */
    assert_int_equal(run_sh("printf 'a\\000b\\377'", 5000, 100, 0, &r), 0);
    assert_int_equal(r.out.len, 4);
    assert_memory_equal(r.out.data, "a\0b\xff", 4);
    spawn_result_deinit(&r);

    /* a signal ends the leader: 128 + sig */
    assert_int_equal(run_sh("kill -SEGV $$", 5000, 100, 0, &r), 0);
    assert_int_equal(r.term_signal, SIGSEGV);
    assert_int_equal(r.exit_code, 128 + SIGSEGV);
    assert_false(r.timed_out);
    spawn_result_deinit(&r);
    assert_no_children();
}

static void test_stdin_closed(void **state)
{
    (void)state;
    spawn_result r;
    int64_t t0 = mono_ms();
    assert_int_equal(run_sh("cat; read x; echo \"rc=$?\"", 5000, 100, 0, &r), 0);
    assert_true(mono_ms() - t0 < 2000);
    assert_string_equal(r.out.data, "rc=1\n");
    assert_int_equal(r.exit_code, 0);
    spawn_result_deinit(&r);
}

static void test_env_and_cwd(void **state)
{
    (void)state;
    setenv("KGYM_TEST_SECRET", "leak", 1);
    const char *argv[] = {"/usr/bin/env", NULL};
    const char *envp[] = {"FOO=bar", "X=1", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = envp;
    spawn_result r;
    assert_int_equal(spawn_run(&o, &r), 0);
    assert_string_equal(r.out.data, "FOO=bar\nX=1\n"); /* exactly, nothing inherited */
    spawn_result_deinit(&r);

    o.envp = NULL; /* an empty environment */
    assert_int_equal(spawn_run(&o, &r), 0);
    assert_string_equal(r.out.data, "");
    assert_int_equal(r.exit_code, 0);
    spawn_result_deinit(&r);

    const char *argv2[] = {"/bin/pwd", NULL};
    o.argv = argv2;
    o.cwd = "/proc";
    assert_int_equal(spawn_run(&o, &r), 0);
    assert_string_equal(r.out.data, "/proc\n");
    spawn_result_deinit(&r);
    unsetenv("KGYM_TEST_SECRET");
}

static void test_timeout_kills_group(void **state)
{
    (void)state;
    spawn_result r;
    int64_t t0 = mono_ms();
    assert_int_equal(
        run_sh("sleep 100 & echo $!; echo $$; echo partial >&2; sleep 100", 300, 300, 0, &r), 0);
    int64_t took = mono_ms() - t0;
    assert_true(r.timed_out);
    assert_int_equal(r.exit_code, 124);
    assert_true(r.term_signal == SIGTERM || r.term_signal == SIGKILL);
    assert_true(took >= 290 && took < 3000);
    assert_string_equal(r.err.data, "partial\n"); /* partial output kept */
    pid_t pids[2];
    assert_int_equal(parse_pids(r.out.data, pids, 2), 2);
    assert_true(pid_dead(pids[0], 3000)); /* the grandchild */
    assert_true(pid_dead(pids[1], 3000)); /* the shell */
    spawn_result_deinit(&r);

    /* A group that ignores SIGTERM gets SIGKILL after the grace period. */
    t0 = mono_ms();
    assert_int_equal(run_sh("trap '' TERM; echo $$; sleep 100 & echo $!; "
                            "while :; do sleep 0.05; done",
                            200, 400, 0, &r),
                     0);
    took = mono_ms() - t0;
    assert_true(r.timed_out);
    assert_int_equal(r.exit_code, 124);
    assert_int_equal(r.term_signal, SIGKILL);
    assert_true(took >= 590 && took < 3000);
    assert_int_equal(parse_pids(r.out.data, pids, 2), 2);
    assert_true(pid_dead(pids[0], 3000));
    assert_true(pid_dead(pids[1], 3000));
    spawn_result_deinit(&r);

    /* grace 0: SIGKILL at once */
    t0 = mono_ms();
    assert_int_equal(run_sh("trap '' TERM; sleep 100", 100, 0, 0, &r), 0);
    assert_true(r.timed_out);
    assert_true(mono_ms() - t0 < 1500);
    spawn_result_deinit(&r);
    assert_no_children();
}

static void test_leftover_child_does_not_hang(void **state)
{
    (void)state;
    spawn_result r;
    int64_t t0 = mono_ms();
    assert_int_equal(run_sh("sleep 100 & echo $!", 10000, 100, 0, &r), 0);
    int64_t took = mono_ms() - t0;
    assert_true(took < 1500);
    assert_false(r.timed_out);
    assert_int_equal(r.exit_code, 0);
    pid_t pid = -1;
    assert_int_equal(parse_pids(r.out.data, &pid, 1), 1);
    assert_true(pid_dead(pid, 3000));
    spawn_result_deinit(&r);

    /* one that closed its output is killed too */
    assert_int_equal(run_sh("sleep 100 >/dev/null 2>&1 & echo $!", 10000, 100, 0, &r), 0);
    assert_int_equal(parse_pids(r.out.data, &pid, 1), 1);
    assert_true(pid_dead(pid, 3000));
    spawn_result_deinit(&r);

    /* output written by a child before the leader exits is not lost */
    assert_int_equal(run_sh("(echo child; sleep 100) & sleep 0.2; echo leader", 10000, 100, 0, &r),
                     0);
    assert_string_equal(r.out.data, "child\nleader\n");
    spawn_result_deinit(&r);
    assert_no_children();
}

static void test_capture_cap(void **state)
{
    (void)state;
    spawn_result r;
    assert_int_equal(run_sh("printf START; head -c 200000 /dev/zero | tr '\\000' x; printf END; "
                            "echo small >&2",
                            10000, 100, 1000, &r),
                     0);
    assert_int_equal(r.exit_code, 0);
    assert_true(r.out.truncated);
    assert_int_equal(r.out.total, 200008);
    assert_true(r.out.len <= 1000 + 64);
    assert_memory_equal(r.out.data, "STARTxxx", 8);
    assert_memory_equal(r.out.data + r.out.len - 6, "xxxEND", 6);
    assert_non_null(strstr(r.out.data, "[... 199008 bytes omitted ...]"));
    assert_false(r.err.truncated);
    assert_string_equal(r.err.data, "small\n");
    spawn_result_deinit(&r);
}

static void test_capture_buffer(void **state)
{
    (void)state;
    spawn_capture c;
    spawn_stream s;
    spawn_capture_init(&c, 10);
    const char *text = "0123456789abcdefghij";
    for (size_t i = 0; i < 20; i += 3)
        assert_int_equal(spawn_capture_add(&c, text + i, i + 3 <= 20 ? 3 : 20 - i), 0);
    assert_int_equal(spawn_capture_finish(&c, &s), 0);
    assert_true(s.truncated);
    assert_int_equal(s.total, 20);
    assert_string_equal(s.data, "01234\n[... 10 bytes omitted ...]\nfghij");
    free(s.data);

    spawn_capture_init(&c, 10); /* exactly the cap: nothing dropped */
    spawn_capture_add(&c, "0123456", 7);
    spawn_capture_add(&c, "789", 3);
    assert_int_equal(spawn_capture_finish(&c, &s), 0);
    assert_false(s.truncated);
    assert_string_equal(s.data, "0123456789");
    free(s.data);

    spawn_capture_init(&c, 10); /* one big write */
    spawn_capture_add(&c, text, 20);
    assert_int_equal(spawn_capture_finish(&c, &s), 0);
    assert_string_equal(s.data, "01234\n[... 10 bytes omitted ...]\nfghij");
    free(s.data);

    spawn_capture_init(&c, 10); /* empty */
    assert_int_equal(spawn_capture_finish(&c, &s), 0);
    assert_string_equal(s.data, "");
    assert_int_equal(s.len, 0);
    free(s.data);
}

static int pre_exec_fail(void *ctx)
{
    (void)ctx;
    return EPERM;
}

static void test_spawn_failures(void **state)
{
    (void)state;
    spawn_opts o = SPAWN_OPTS_INIT;
    const char *argv[] = {"/nonexistent/kgym-binary", NULL};
    o.argv = argv;
    spawn_result r;
    errno = 0;
    assert_int_equal(spawn_run(&o, &r), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(r.fail_errno, ENOENT);
    assert_string_equal(r.fail_stage, "execve");
    assert_non_null(r.out.data);
    spawn_result_deinit(&r);

    const char *argv2[] = {"/bin/true", NULL};
    o.argv = argv2;
    o.cwd = "/nonexistent/dir";
    assert_int_equal(spawn_run(&o, &r), -1);
    assert_int_equal(r.fail_errno, ENOENT);
    assert_string_equal(r.fail_stage, "chdir");
    spawn_result_deinit(&r);

    o.cwd = NULL;
    o.pre_exec = pre_exec_fail;
    assert_int_equal(spawn_run(&o, &r), -1);
    assert_int_equal(r.fail_errno, EPERM);
    assert_string_equal(r.fail_stage, "pre_exec");
    spawn_result_deinit(&r);

    pid_t pid = 0;
    const char *stage = NULL;
    o.pre_exec = NULL;
    o.argv = argv;
    assert_int_equal(spawn_start(&o, &pid, &stage), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(stage, "execve");
    assert_no_children();
}

static void test_fds_not_leaked(void **state)
{
    (void)state;
    int fd = open("/dev/null", O_RDONLY); /* deliberately not O_CLOEXEC */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_true(fd >= 3);
    spawn_result r;
    /* "; true" keeps bash from exec'ing ls, so /proc/$$ is the shell */
    assert_int_equal(run_sh("ls /proc/$$/fd; true", 5000, 100, 0, &r), 0);
    assert_string_equal(r.out.data, "0\n1\n2\n");
    spawn_result_deinit(&r);

    /* keep_fds are kept (and made inheritable) */
    const char *argv[] = {"/bin/bash", "-c", "ls /proc/$$/fd; true", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    int keep[] = {p[1]};
    o.keep_fds = keep;
    o.n_keep_fds = 1;
    assert_int_equal(spawn_run(&o, &r), 0);
    char want[64];
    snprintf(want, sizeof want, "0\n1\n2\n%d\n", p[1]);
    assert_string_equal(r.out.data, want);
    spawn_result_deinit(&r);

    /* stdin is /dev/null */
    assert_int_equal(run_sh("readlink /proc/$$/fd/0; true", 5000, 100, 0, &r), 0);
    assert_string_equal(r.out.data, "/dev/null\n");
    spawn_result_deinit(&r);
    close(fd);
    close(p[0]);
    close(p[1]);
}

static void test_rlimits_and_signals(void **state)
{
    (void)state;
    char dir[] = "/tmp/kgym-spawn-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *argv[] = {"/bin/bash", "-c",
                          "ulimit -n; ulimit -v; ulimit -t; ulimit -c; ulimit -f; "
                          "head -c 2000000 /dev/zero > big; echo \"rc=$?\"; stat -c %s big",
                          NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = ENVP;
    o.cwd = dir;
    o.rl.nofile = 64;
    o.rl.as_bytes = 1ull << 30;
    o.rl.cpu_s = 30;
    o.rl.fsize_bytes = 1 << 20;
    o.rl.no_core = true;
    spawn_result r;
    assert_int_equal(spawn_run(&o, &r), 0);
    /* ulimit -v and -f report KiB (-f in 1024-byte blocks under bash) */
    assert_string_equal(r.out.data, "64\n1048576\n30\n0\n1024\nrc=153\n1048576\n");
    spawn_result_deinit(&r);

    /* the leader itself dies of SIGXFSZ */
    const char *argv2[] = {"/bin/bash", "-c", "exec head -c 2000000 /dev/zero > big2", NULL};
    o.argv = argv2;
    assert_int_equal(spawn_run(&o, &r), 0);
    assert_int_equal(r.term_signal, SIGXFSZ);
    assert_int_equal(r.exit_code, 128 + SIGXFSZ);
    spawn_result_deinit(&r);

    /* the server ignores SIGPIPE; the child must not inherit that */
    signal(SIGPIPE, SIG_IGN);
    const char *argv3[] = {"/bin/bash", "-c", "yes | head -c 10 >/dev/null; echo ${PIPESTATUS[0]}",
                           NULL};
    o.argv = argv3;
    assert_int_equal(spawn_run(&o, &r), 0);
    assert_string_equal(r.out.data, "141\n");
    assert_string_equal(r.err.data, "");
    spawn_result_deinit(&r);

    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_out_fd(void **state)
{
    (void)state;
    char path[] = "/tmp/kgym-spawn-out-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *argv[] = {"/bin/bash", "-c", "echo one; echo two >&2", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.out_fd = fd;
    spawn_result r;
    assert_int_equal(spawn_run(&o, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_int_equal(r.out.len, 0);
    assert_int_equal(r.err.len, 0);
    spawn_result_deinit(&r);
    char buf[64] = {0};
    assert_int_equal(pread(fd, buf, sizeof buf - 1, 0), 8);
    assert_string_equal(buf, "one\ntwo\n");
    close(fd);
    unlink(path);
}

/* Waits until the file at path holds a line, returns the number on its first line. */
static pid_t read_pid_file(const char *path)
{
    for (int i = 0; i < 300; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            long v = 0;
            int n = fscanf(f, "%ld", &v);
            fclose(f);
            if (n == 1)
                return (pid_t)v;
        }
        sleep_ms(10);
    }
    return -1;
}

static void test_start_reap_kill(void **state)
{
    (void)state;
    char path[] = "/tmp/kgym-spawn-bg-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *argv[] = {"/bin/bash", "-c", "sleep 100 & echo $!; sleep 100", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.out_fd = fd;
    pid_t pid = -1;
    int64_t t0 = mono_ms();
    assert_int_equal(spawn_start(&o, &pid, NULL), 0);
    assert_true(mono_ms() - t0 < 1000);  /* returns at once */
    assert_int_equal(getpgid(pid), pid); /* leads its own group */
    assert_int_equal(getsid(pid), pid);  /* and session */
    spawn_status st;
    assert_int_equal(spawn_reap(pid, false, &st), 0);
    pid_t grandchild = read_pid_file(path);
    assert_true(grandchild > 0);
    assert_int_equal(getpgid(grandchild), pid);
    spawn_kill_group(pid, 1000);
    assert_int_equal(spawn_reap(pid, true, &st), 1);
    assert_int_equal(st.term_signal, SIGTERM);
    assert_int_equal(st.exit_code, 128 + SIGTERM);
    assert_true(mono_ms() - t0 < 1500); /* sleep dies on SIGTERM: no wait for the grace */
    assert_true(pid_dead(grandchild, 3000));
    errno = 0;
    assert_int_equal(spawn_reap(pid, false, &st), -1);
    assert_int_equal(errno, ECHILD);

    /* leader exits by itself: reaping kills what it left behind */
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    const char *argv2[] = {"/bin/bash", "-c", "sleep 100 & echo $!; exit 7", NULL};
    o.argv = argv2;
    assert_int_equal(spawn_start(&o, &pid, NULL), 0);
    grandchild = read_pid_file(path);
    assert_true(grandchild > 0);
    assert_int_equal(spawn_reap(pid, true, &st), 1);
    assert_int_equal(st.exit_code, 7);
    assert_int_equal(st.term_signal, 0);
    assert_true(pid_dead(grandchild, 3000));

    /* without out_fd the output goes to /dev/null */
    const char *argv3[] = {"/bin/bash", "-c", "readlink /proc/$$/fd/1; true", NULL};
    o.argv = argv3;
    o.out_fd = -1;
    assert_int_equal(spawn_start(&o, &pid, NULL), 0);
    assert_int_equal(spawn_reap(pid, true, &st), 1);
    assert_int_equal(st.exit_code, 0);
    close(fd);
    unlink(path);
    assert_no_children();
}

#define N_THREADS 8
#define N_RUNS 12

static void *concurrent_worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < N_RUNS; i++) {
        char cmd[128], want_out[64], want_err[64];
        snprintf(cmd, sizeof cmd, "echo out-%d-%d; echo err-%d-%d >&2; exit %d", t, i, t, i,
                 (t + i) % 7);
        snprintf(want_out, sizeof want_out, "out-%d-%d\n", t, i);
        snprintf(want_err, sizeof want_err, "err-%d-%d\n", t, i);
        spawn_result r;
        if (run_sh(cmd, 10000, 100, 0, &r) != 0 || strcmp(r.out.data, want_out) != 0 ||
            strcmp(r.err.data, want_err) != 0 || r.exit_code != (t + i) % 7) {
            spawn_result_deinit(&r);
            return (void *)1;
        }
        spawn_result_deinit(&r);
    }
    return NULL;
}

static int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        n += fcntl(fd, F_GETFD) != -1;
    return n;
}

static void test_concurrent(void **state)
{
    (void)state;
    int fds_before = count_fds();
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, concurrent_worker, (void *)(intptr_t)t), 0);
    for (int t = 0; t < N_THREADS; t++) {
        void *ret;
        pthread_join(th[t], &ret);
        assert_null(ret);
    }
    assert_int_equal(count_fds(), fds_before);
    assert_no_children();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_code_and_streams),
        cmocka_unit_test(test_stdin_closed),
        cmocka_unit_test(test_env_and_cwd),
        cmocka_unit_test(test_timeout_kills_group),
        cmocka_unit_test(test_leftover_child_does_not_hang),
        cmocka_unit_test(test_capture_cap),
        cmocka_unit_test(test_capture_buffer),
        cmocka_unit_test(test_spawn_failures),
        cmocka_unit_test(test_fds_not_leaked),
        cmocka_unit_test(test_rlimits_and_signals),
        cmocka_unit_test(test_out_fd),
        cmocka_unit_test(test_start_reap_kill),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
