/* Unit tests of env/sandbox/cgroup.c against the real kernel: memory limit and OOM report, fork
 * bomb at pids.max, killing a tree with setsid'd and double-forked daemons, a forker racing the
 * kill, freezing and thawing (and killing while frozen), teardown, and name checks. Needs root
 * (creating cgroups): fails, never skips, without. The freezer tests skip where the host has no
 * freezer (v1 without its hierarchy, v2 before 5.2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_helpers.h"
#include "sandbox/cgroup.h"

#define MiB (1024ull * 1024ull)
#define MEM_LIMIT (64 * MiB)
#define PIDS_LIMIT 16

static sbx_cg_host H;

/* A pids limit where the host has the controller; none otherwise (sbx_cg_create refuses one). */
static uint64_t pids_or_none(uint64_t n)
{
    return H.has_pids ? n : 0;
}

/* ---- helpers --------------------------------------------------------------------------------- */

static bool dir_exists(const char *p)
{
    struct stat st;
    return p[0] && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static uint64_t read_num(const char *dir, const char *file)
{
    char p[SBX_CG_PATH_MAX + 64], buf[64] = "";
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "re");
    if (!f)
        fail_msg("cannot read %s", p);
    if (!fgets(buf, sizeof buf, f))
        buf[0] = '\0';
    fclose(f);
    if (strncmp(buf, "max", 3) == 0)
        return UINT64_MAX;
    return strtoull(buf, NULL, 10);
}

/* The number of processes the cgroup's procs files list (the largest over its hierarchies). */
static int procs_count(const sbx_cgroup *cg)
{
    char files[4][SBX_CG_PATH_MAX + 32];
    int n = sbx_cg_procs_files(cg, files, 4), most = 0;
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(files[i], "re");
        int k = 0;
        long v;
        while (f && fscanf(f, "%ld", &v) == 1)
            k++;
        if (f)
            fclose(f);
        most = k > most ? k : most;
    }
    return most;
}

/* Forks a child that runs fn only once it is in cg (the parent attaches it, then says go). */
static pid_t spawn_in(const sbx_cgroup *cg, void (*fn)(void *), void *arg)
{
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(99);
        close(go[0]);
        fn(arg);
        _exit(0);
    }
    close(go[0]);
    char err[256] = "";
    int rc = sbx_cg_attach(cg, pid, err, sizeof err);
    if (rc != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("attach: %s", err);
    }
    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    return pid;
}

static int wait_status(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

/* We are a subreaper (main): orphans of killed trees come back to us; reap them all. */
static void reap_all(void)
{
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

static void make_cg(const char *name, uint64_t mem, uint64_t pids, sbx_cgroup *cg)
{
    char err[512] = "";
    if (sbx_cg_create(&H, name, mem, pids, cg, err, sizeof err) != 0)
        fail_msg("sbx_cg_create(%s): %s", name, err);
}

static void destroy_and_check(sbx_cgroup *cg)
{
    char dirs[3][SBX_CG_PATH_MAX];
    snprintf(dirs[0], sizeof dirs[0], "%s", cg->v2[0] ? cg->v2 : cg->v1_memory);
    snprintf(dirs[1], sizeof dirs[1], "%s", cg->v1_pids);
    snprintf(dirs[2], sizeof dirs[2], "%s", cg->v1_freezer);
    sbx_cg_destroy(cg);
    for (int i = 0; i < 3; i++)
        if (dirs[i][0] && dir_exists(dirs[i]))
            fail_msg("%s still exists after destroy", dirs[i]);
    reap_all();
}

/* ---- children -------------------------------------------------------------------------------- */

/* Maps and touches *(size_t *)arg bytes, page by page (every page really charged). */
static void touch_memory(void *arg)
{
    size_t len = *(size_t *)arg;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        _exit(2);
    for (size_t off = 0; off < len; off += 4096)
        p[off] = 1;
    _exit(0);
}

struct bomb {
    int report; /* write end: successes, failures, then each forked pid */
};

/* Forks as fast as it can, children pausing; reports how many forks worked and failed. */
static void fork_bomb(void *arg)
{
    struct bomb *b = arg;
    pid_t kids[300];
    int ok = 0, failed = 0;
    for (int i = 0; i < 300; i++) {
        pid_t p = fork();
        if (p == 0)
            for (;;)
                pause();
        if (p < 0)
            failed++;
        else
            kids[ok++] = p;
    }
    int head[2] = {ok, failed};
    if (write(b->report, head, sizeof head) != sizeof head ||
        write(b->report, kids, sizeof(pid_t) * (size_t)ok) != (ssize_t)(sizeof(pid_t) * (size_t)ok))
        _exit(3);
    for (;;)
        pause();
}

/* Leaves 5 sleepers: 3 plain children, one in its own session, one double-forked daemon in
 * its own session (its parent exits, so it is nobody's child here). Each reports its pid. */
static void daemons(void *arg)
{
    int report = *(int *)arg;
    for (int i = 0; i < 5; i++) {
        pid_t p = fork();
        if (p < 0)
            _exit(4);
        if (p > 0)
            continue;
        if (i == 3)
            setsid();
        if (i == 4 && fork() != 0)
            _exit(0);
        if (i == 4)
            setsid();
        pid_t me = getpid();
        if (write(report, &me, sizeof me) != sizeof me)
            _exit(5);
        for (;;)
            pause();
    }
    for (;;)
        pause();
}

/* Forks without end: children either exit at once or pause (at most 100 of those, so a host
 * without a pids controller is not flooded), so the tree churns while it is being killed. */
static void busy_forker(void *arg)
{
    (void)arg;
    int paused = 0;
    for (unsigned i = 0;; i++) {
        bool stay = i % 2 == 0 && paused < 100;
        pid_t p = fork();
        if (p == 0) {
            if (!stay)
                _exit(0);
            for (;;)
                pause();
        }
        if (p < 0)
            usleep(100);
        else
            paused += stay;
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
    }
}

/* Two busy counters in shared memory: counts[0] by this process, counts[1] by a child in its
 * own session (the way an agent's setsid'd busy loop escapes its process group). */
static void counters(void *arg)
{
    volatile uint64_t *counts = arg;
    pid_t p = fork();
    if (p < 0)
        _exit(6);
    int me = p == 0;
    if (me)
        setsid();
    for (;;)
        counts[me]++;
}

static void sleeper(void *arg)
{
    (void)arg;
    for (;;)
        pause();
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_limits_written(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-limits", MEM_LIMIT, pids_or_none(PIDS_LIMIT), &cg);
    if (H.mode == SBX_CG_V2) {
        assert_int_equal(read_num(cg.v2, "memory.max"), MEM_LIMIT);
        if (H.has_pids)
            assert_int_equal(read_num(cg.v2, "pids.max"), PIDS_LIMIT);
        char p[SBX_CG_PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/memory.swap.max", cg.v2);
        if (access(p, F_OK) == 0)
            assert_int_equal(read_num(cg.v2, "memory.swap.max"), 0);
        snprintf(p, sizeof p, "%s/memory.oom.group", cg.v2);
        if (access(p, F_OK) == 0)
            assert_int_equal(read_num(cg.v2, "memory.oom.group"), 1);
    } else {
        assert_int_equal(H.mode, SBX_CG_V1);
        assert_int_equal(read_num(cg.v1_memory, "memory.limit_in_bytes"), MEM_LIMIT);
        if (H.memsw)
            assert_int_equal(read_num(cg.v1_memory, "memory.memsw.limit_in_bytes"), MEM_LIMIT);
        if (H.has_pids)
            assert_int_equal(read_num(cg.v1_pids, "pids.max"), PIDS_LIMIT);
    }
    destroy_and_check(&cg);
}

static void test_memory_hog_is_oom_killed(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-oom", MEM_LIMIT, pids_or_none(PIDS_LIMIT), &cg);
    size_t len = 200 * MiB;
    pid_t pid = spawn_in(&cg, touch_memory, &len);
    int st = wait_status(pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
    sbx_cg_stats s;
    assert_int_equal(sbx_cg_stats_read(&cg, &s), 0);
    assert_true(s.oom_killed);
    assert_false(s.pids_limited);
    assert_true(s.memory_peak_bytes >= 32 * MiB);
    assert_true(s.memory_peak_bytes <= MEM_LIMIT + MiB);
    destroy_and_check(&cg);
}

static void test_peak_without_oom(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-peak", MEM_LIMIT, pids_or_none(PIDS_LIMIT), &cg);
    size_t len = 16 * MiB;
    pid_t pid = spawn_in(&cg, touch_memory, &len);
    int st = wait_status(pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    sbx_cg_stats s;
    assert_int_equal(sbx_cg_stats_read(&cg, &s), 0);
    assert_false(s.oom_killed);
    assert_false(s.pids_limited);
    assert_true(s.memory_peak_bytes >= 16 * MiB);
    assert_true(s.memory_peak_bytes < MEM_LIMIT);
    destroy_and_check(&cg);
}

static void test_fork_bomb_stops_at_pids_max(void **state)
{
    (void)state;
    sbx_cgroup cg;
    if (!H.has_pids) {
        /* No pids controller (the H200 machines): a pids limit is refused, never dropped. */
        char err[256] = "";
        assert_int_equal(sbx_cg_create(&H, "t-bomb", MEM_LIMIT, PIDS_LIMIT, &cg, err, sizeof err),
                         -1);
        assert_int_equal(errno, EOPNOTSUPP);
        assert_non_null(strstr(err, "RLIMIT_NPROC"));
        return;
    }
    /* 16 forked copies of an ASan binary use ~72 MiB: the memory limit must not be what stops
     * them here. */
    make_cg("t-bomb", 4 * MEM_LIMIT, pids_or_none(PIDS_LIMIT), &cg);
    int rep[2];
    assert_int_equal(pipe(rep), 0);
    struct bomb b = {rep[1]};
    pid_t pid = spawn_in(&cg, fork_bomb, &b);
    close(rep[1]);
    int head[2] = {0, 0};
    pid_t kids[300];
    assert_int_equal(read(rep[0], head, sizeof head), (ssize_t)sizeof head);
    assert_true(head[0] <= PIDS_LIMIT - 1); /* the bomber itself is one of the 16 */
    assert_true(head[1] >= 300 - PIDS_LIMIT);
    size_t want = sizeof(pid_t) * (size_t)head[0];
    assert_int_equal(read(rep[0], kids, want), (ssize_t)want);
    close(rep[0]);
    assert_true(procs_count(&cg) <= PIDS_LIMIT);
    sbx_cg_stats s;
    assert_int_equal(sbx_cg_stats_read(&cg, &s), 0);
    assert_true(s.pids_limited);
    assert_false(s.oom_killed);
    assert_int_equal(sbx_cg_kill(&cg), 0);
    assert_int_equal(procs_count(&cg), 0);
    assert_int_equal(WTERMSIG(wait_status(pid)), SIGKILL);
    for (int i = 0; i < head[0]; i++)
        assert_true(pid_dead(kids[i], 1000));
    destroy_and_check(&cg);
}

/* The server-wide totals (sbx_cg_host_totals) bind every command together: a command whose own
 * limits are far above them still stops at them. Reset to "nearly unlimited" afterwards. */
static void test_host_totals_cap_every_command(void **state)
{
    (void)state;
    char err[256] = "";
    sbx_cgroup cg;
    assert_int_equal(sbx_cg_host_totals(&H, MEM_LIMIT, 0, err, sizeof err), 0);
    make_cg("t-total-mem", 16 * MEM_LIMIT, 0, &cg);
    size_t len = 200 * MiB;
    pid_t pid = spawn_in(&cg, touch_memory, &len);
    int st = wait_status(pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
    destroy_and_check(&cg);
    assert_int_equal(sbx_cg_host_totals(&H, 1ull << 50, 0, err, sizeof err), 0);
    if (!H.has_pids)
        return;
    assert_int_equal(sbx_cg_host_totals(&H, 0, PIDS_LIMIT, err, sizeof err), 0);
    make_cg("t-total-pids", 4 * MEM_LIMIT, 0, &cg);
    int rep[2];
    assert_int_equal(pipe(rep), 0);
    struct bomb b = {rep[1]};
    pid = spawn_in(&cg, fork_bomb, &b);
    close(rep[1]);
    int head[2] = {0, 0};
    assert_int_equal(read(rep[0], head, sizeof head), (ssize_t)sizeof head);
    close(rep[0]);
    assert_true(head[0] <= PIDS_LIMIT - 1); /* the bomber itself is one of them */
    assert_int_equal(sbx_cg_kill(&cg), 0);
    wait_status(pid);
    reap_all();
    destroy_and_check(&cg);
    assert_int_equal(sbx_cg_host_totals(&H, 0, 1u << 22, err, sizeof err), 0);
}

static void test_kill_takes_daemons(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-daemons", MEM_LIMIT, pids_or_none(PIDS_LIMIT), &cg);
    int rep[2];
    assert_int_equal(pipe(rep), 0);
    pid_t pid = spawn_in(&cg, daemons, &rep[1]);
    close(rep[1]);
    pid_t kids[5];
    for (int i = 0; i < 5; i++)
        assert_int_equal(read(rep[0], &kids[i], sizeof kids[i]), (ssize_t)sizeof kids[i]);
    close(rep[0]);
    int64_t until = mono_ms() + 1000; /* the double fork's middle process exits */
    while (procs_count(&cg) != 6 && mono_ms() < until)
        sleep_ms(5);
    assert_int_equal(procs_count(&cg), 6);
    assert_int_equal(sbx_cg_kill(&cg), 0);
    assert_int_equal(procs_count(&cg), 0);
    assert_int_equal(WTERMSIG(wait_status(pid)), SIGKILL);
    for (int i = 0; i < 5; i++)
        assert_true(pid_dead(kids[i], 1000));
    destroy_and_check(&cg);
}

static void test_kill_races_a_forker(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-forker", MEM_LIMIT, pids_or_none(64), &cg);
    pid_t pid = spawn_in(&cg, busy_forker, NULL);
    sleep_ms(150);
    assert_true(procs_count(&cg) > 1);
    int64_t t0 = mono_ms();
    assert_int_equal(sbx_cg_kill(&cg), 0);
    assert_true(mono_ms() - t0 < 2000);
    assert_int_equal(procs_count(&cg), 0);
    assert_int_equal(WTERMSIG(wait_status(pid)), SIGKILL);
    destroy_and_check(&cg);
}

/* The same race with the freezer out of the picture (v1 hosts without one, v2 kernels without
 * cgroup.kill take this path): the pidfd-checked SIGKILL loop alone must converge. */
static void test_kill_loop_without_freezer(void **state)
{
    (void)state;
    sbx_cg_host h2 = H;
    h2.v1_freezer[0] = '\0';
    sbx_cgroup cg;
    char err[512] = "";
    if (sbx_cg_create(&h2, "t-nofreeze", MEM_LIMIT, pids_or_none(64), &cg, err, sizeof err) != 0)
        fail_msg("create: %s", err);
    pid_t pid = spawn_in(&cg, busy_forker, NULL);
    sleep_ms(150);
    assert_true(procs_count(&cg) > 1);
    assert_int_equal(sbx_cg_kill(&cg), 0);
    assert_int_equal(procs_count(&cg), 0);
    assert_int_equal(WTERMSIG(wait_status(pid)), SIGKILL);
    destroy_and_check(&cg);
}

/* Whether this host can freeze a cgroup (tests skip without). */
static bool host_has_freezer(const sbx_cgroup *cg)
{
    if (H.mode == SBX_CG_V1)
        return cg->v1_freezer[0] != '\0';
    char p[SBX_CG_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/cgroup.freeze", cg->v2);
    return access(p, W_OK) == 0;
}

/* Waits until both counters move (both processes run and are in the cgroup). */
static void wait_counting(volatile uint64_t *counts)
{
    uint64_t a0 = counts[0], a1 = counts[1];
    int64_t until = mono_ms() + 2000;
    while ((counts[0] == a0 || counts[1] == a1) && mono_ms() < until)
        sleep_ms(5);
    assert_true(counts[0] != a0 && counts[1] != a1);
}

static void test_freeze_stops_and_thaw_resumes(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-freeze", MEM_LIMIT, pids_or_none(PIDS_LIMIT), &cg);
    if (!host_has_freezer(&cg)) {
        errno = 0;
        assert_int_equal(sbx_cg_freeze(&cg, true), -1);
        assert_int_equal(errno, ENOTSUP);
        destroy_and_check(&cg);
        skip();
    }
    volatile uint64_t *counts =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(counts != MAP_FAILED);
    pid_t pid = spawn_in(&cg, counters, (void *)counts);
    wait_counting(counts);
    for (int round = 0; round < 2; round++) { /* freezing twice in a row is fine too */
        assert_int_equal(sbx_cg_freeze(&cg, true), 0);
        uint64_t f0 = counts[0], f1 = counts[1];
        sleep_ms(300);
        if (counts[0] != f0 || counts[1] != f1)
            fail_msg("round %d: frozen processes counted on (%llu -> %llu, %llu -> %llu)", round,
                     (unsigned long long)f0, (unsigned long long)counts[0], (unsigned long long)f1,
                     (unsigned long long)counts[1]);
        assert_int_equal(sbx_cg_freeze(&cg, false), 0);
        wait_counting(counts); /* both resume, the setsid'd one too */
    }
    assert_int_equal(procs_count(&cg), 2);
    assert_int_equal(sbx_cg_kill(&cg), 0);
    assert_int_equal(WTERMSIG(wait_status(pid)), SIGKILL);
    munmap((void *)counts, 4096);
    destroy_and_check(&cg);
}

/* A frozen cgroup is killed whole (v1 frozen tasks die of SIGKILL only once thawed: sbx_cg_kill
 * must thaw) and every process is reaped; it is then left thawed and can be removed. */
static void test_frozen_cgroup_is_killed(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-frozen-kill", MEM_LIMIT, pids_or_none(PIDS_LIMIT), &cg);
    if (!host_has_freezer(&cg)) {
        destroy_and_check(&cg);
        skip();
    }
    volatile uint64_t *counts =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(counts != MAP_FAILED);
    pid_t pid = spawn_in(&cg, counters, (void *)counts);
    wait_counting(counts);
    assert_int_equal(procs_count(&cg), 2);
    assert_int_equal(sbx_cg_freeze(&cg, true), 0);
    int64_t t0 = mono_ms();
    assert_int_equal(sbx_cg_kill(&cg), 0);
    assert_true(mono_ms() - t0 < 2000);
    assert_int_equal(procs_count(&cg), 0);
    assert_int_equal(WTERMSIG(wait_status(pid)), SIGKILL); /* reaped, not stuck frozen */
    uint64_t c1 = counts[1];
    sleep_ms(50);
    assert_true(counts[1] == c1); /* the setsid'd one is gone too */
    munmap((void *)counts, 4096);
    destroy_and_check(&cg); /* reaps the orphan; the directories go */
}

/* Without a freezer, freezing says so (the caller reports the job as not frozen). */
static void test_freeze_without_freezer(void **state)
{
    (void)state;
    if (H.mode != SBX_CG_V1)
        skip(); /* v2 always has cgroup.freeze from 5.2 on */
    sbx_cg_host h2 = H;
    h2.v1_freezer[0] = '\0';
    sbx_cgroup cg;
    char err[512] = "";
    if (sbx_cg_create(&h2, "t-nofreezer", 0, 0, &cg, err, sizeof err) != 0)
        fail_msg("create: %s", err);
    errno = 0;
    assert_int_equal(sbx_cg_freeze(&cg, true), -1);
    assert_int_equal(errno, ENOTSUP);
    errno = 0;
    assert_int_equal(sbx_cg_freeze(&cg, false), -1);
    assert_int_equal(errno, ENOTSUP);
    destroy_and_check(&cg);
}

static void test_destroy_kills_and_removes(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-destroy", 0, 0, &cg);
    assert_true(dir_exists(cg.v2[0] ? cg.v2 : cg.v1_memory));
    if (!cg.v2[0])
        assert_true(dir_exists(cg.v1_pids));
    pid_t pid = spawn_in(&cg, sleeper, NULL);
    sbx_cgroup copy = cg;
    sbx_cg_destroy(&cg);
    assert_int_equal(WTERMSIG(wait_status(pid)), SIGKILL);
    assert_false(dir_exists(copy.v2[0] ? copy.v2 : copy.v1_memory));
    assert_false(dir_exists(copy.v1_pids));
    assert_false(dir_exists(copy.v1_freezer));
    sbx_cg_destroy(&cg); /* twice is harmless */
}

static void test_bad_names_refused(void **state)
{
    (void)state;
    const char *bad[] = {"", ".", "..", "a/b", "/abs", "../up", "x..y", "a\nb", NULL};
    for (int i = 0; i < 9; i++) {
        sbx_cgroup cg;
        char err[256] = "";
        if (sbx_cg_create(&H, bad[i], 0, 0, &cg, err, sizeof err) == 0) {
            sbx_cg_destroy(&cg);
            fail_msg("name '%s' accepted", bad[i] ? bad[i] : "(null)");
        }
        assert_true(err[0] != '\0');
    }
    sbx_cg_host h2;
    char err[256] = "";
    assert_int_equal(sbx_cg_host_probe(&h2, "kgym/x", err, sizeof err), -1);
    assert_int_equal(sbx_cg_host_probe(&h2, "..", err, sizeof err), -1);
    assert_int_equal(h2.mode, SBX_CG_NONE);
}

static void test_procs_files_and_dir_fd(void **state)
{
    (void)state;
    sbx_cgroup cg;
    make_cg("t-files", 0, 0, &cg);
    char files[4][SBX_CG_PATH_MAX + 32];
    int n = sbx_cg_procs_files(&cg, files, 4);
    assert_int_equal(n, H.mode == SBX_CG_V2 ? 1 : H.v1_freezer[0] ? 3 : 2);
    assert_string_equal(files[n], "");
    for (int i = 0; i < n; i++) {
        assert_non_null(strstr(files[i], "/t-files/cgroup.procs"));
        assert_int_equal(access(files[i], W_OK), 0);
    }
    int fd = sbx_cg_dir_fd(&cg);
    if (H.mode == SBX_CG_V2) {
        assert_true(fd >= 0);
        close(fd);
    } else {
        assert_int_equal(fd, -1);
    }
    destroy_and_check(&cg);
}

static void test_duplicate_name_refused(void **state)
{
    (void)state;
    sbx_cgroup a, b;
    char err[256] = "";
    make_cg("t-dup", 0, 0, &a);
    assert_int_equal(sbx_cg_create(&H, "t-dup", 0, 0, &b, err, sizeof err), -1);
    assert_non_null(strstr(err, "File exists"));
    destroy_and_check(&a);
}

/* ---- fixture --------------------------------------------------------------------------------- */

static char own_cgroups[4096]; /* /proc/self/cgroup before the probe */

static void read_own_cgroups(char *buf, size_t cap)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

static int setup(void **state)
{
    (void)state;
    char name[64], err[512] = "";
    read_own_cgroups(own_cgroups, sizeof own_cgroups);
    snprintf(name, sizeof name, "kgym-test-%d", (int)getpid());
    if (sbx_cg_host_probe(&H, name, err, sizeof err) != 0) {
        fprintf(stderr, "sbx_cg_host_probe: %s\n", err);
        return -1;
    }
    fprintf(stderr, "cgroup: %s%s%s\n", H.mode == SBX_CG_V2 ? H.v2_base : H.v1_memory,
            H.has_pids ? ", pids" : ", no pids controller",
            H.v2_server_leaf[0] ? ", server moved to a leaf" : "");
    return 0;
}

/* Everything the probe made is gone, and (v2) the server is back in its own cgroup. */
static int teardown(void **state)
{
    (void)state;
    sbx_cg_host_cleanup(&H);
    const char *dirs[] = {H.v2_base, H.v2_server_leaf, H.v1_memory, H.v1_pids, H.v1_freezer};
    for (int i = 0; i < 5; i++) {
        if (dir_exists(dirs[i])) {
            fprintf(stderr, "left behind: %s\n", dirs[i]);
            return -1;
        }
    }
    char now[4096];
    read_own_cgroups(now, sizeof now);
    if (strcmp(now, own_cgroups) != 0) {
        fprintf(stderr, "cgroups were:\n%snow:\n%s", own_cgroups, now);
        return -1;
    }
    return 0;
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_sbx_cgroup needs root (it creates cgroups): FAILED\n");
        return 1;
    }
    /* Orphaned daemons of the killed trees come back to us, not to init, so they are reaped. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    alarm(60); /* a hung child must fail the run, not stall it */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_written),
        cmocka_unit_test(test_memory_hog_is_oom_killed),
        cmocka_unit_test(test_peak_without_oom),
        cmocka_unit_test(test_fork_bomb_stops_at_pids_max),
        cmocka_unit_test(test_host_totals_cap_every_command),
        cmocka_unit_test(test_kill_takes_daemons),
        cmocka_unit_test(test_kill_races_a_forker),
        cmocka_unit_test(test_kill_loop_without_freezer),
        cmocka_unit_test(test_freeze_stops_and_thaw_resumes),
        cmocka_unit_test(test_frozen_cgroup_is_killed),
        cmocka_unit_test(test_freeze_without_freezer),
        cmocka_unit_test(test_destroy_kills_and_removes),
        cmocka_unit_test(test_bad_names_refused),
        cmocka_unit_test(test_procs_files_and_dir_fd),
        cmocka_unit_test(test_duplicate_name_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
