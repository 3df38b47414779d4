#include "sandbox/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *sbx_end_name(sbx_end e)
{
    static const char *const names[] = {"exit", "signal",    "timeout", "memory",
                                        "pids", "file_size", "cpu",     "setup"};
    return names[e];
}

/* SIGKILLs every process listed in a cgroup's cgroup.procs; returns how many were listed. */
static int kill_listed(const char *dir)
{
    char path[SBX_CG_PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    int n = 0, pid;
    while (f && fscanf(f, "%d", &pid) == 1) {
        kill((pid_t)pid, SIGKILL);
        n++;
    }
    if (f)
        fclose(f);
    return n;
}

/* Undoes a freeze of a cgroup (v1 freezer.state, v2 cgroup.freeze) where its hierarchy has
 * one: a server killed while it evaluated leaves its episodes' background jobs frozen, and a
 * frozen task (v1) does not die of SIGKILL until thawed. */
static void thaw_cgroup(const char *dir)
{
    static const char *const files[][2] = {{"freezer.state", "THAWED"}, {"cgroup.freeze", "0"}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[SBX_CG_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, files[i][0]);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t w = write(fd, files[i][1], strlen(files[i][1])); /* best effort: kills retry */
        (void)w;
        close(fd);
    }
}

/* rmdir of a cgroup tree, children first (an empty cgroup's files go with its directory). What
 * still runs in it belonged to a server that is gone (background jobs outlive a SIGKILLed
 * server): it is killed first, and thawed so that it can die. */
static void remove_cgroup_tree(const char *dir)
{
    for (int round = 0; round < 50 && kill_listed(dir) > 0; round++) {
        thaw_cgroup(dir);
        usleep(10000);
    }
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char sub[SBX_CG_PATH_MAX + 256];
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        remove_cgroup_tree(sub);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* A server killed with SIGKILL leaves its kgym-<pid> cgroup parent behind: remove those whose
 * server is gone, next to ours, so they do not pile up. */
static void remove_stale_cgroups(const char *ours)
{
    char parent[SBX_CG_PATH_MAX];
    snprintf(parent, sizeof parent, "%s", ours);
    char *slash = strrchr(parent, '/');
    if (!ours[0] || !slash)
        return;
    *slash = '\0';
    DIR *d = opendir(parent);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end;
        long pid = strncmp(e->d_name, "kgym-", 5) == 0 ? strtol(e->d_name + 5, &end, 10) : 0;
        if (pid <= 0 || *end || pid == (long)getpid() || kill((pid_t)pid, 0) == 0)
            continue;
        char dir[SBX_CG_PATH_MAX + 256];
        snprintf(dir, sizeof dir, "%s/%s", parent, e->d_name);
        remove_cgroup_tree(dir);
    }
    if (d)
        closedir(d);
}

int sandbox_init(sandbox *s, const char *launcher, const char *profiles_dir, bool allow_weak,
                 char *err, size_t errcap)
{
    memset(s, 0, sizeof *s);
    snprintf(s->launcher, sizeof s->launcher, "%s", launcher);
    /* Absolute: the launcher runs from "/". */
    char abs[PATH_MAX];
    snprintf(s->profiles_dir, sizeof s->profiles_dir, "%s",
             realpath(profiles_dir, abs) ? abs : profiles_dir);
    /* Profiles are checked even in weak mode: a broken one is a configuration error. */
    if (sbx_profile_load(profiles_dir, "bash", &s->bash, err, errcap) != 0 ||
        sbx_profile_load(profiles_dir, "compile", &s->compile, err, errcap) != 0 ||
        sbx_profile_load(profiles_dir, "candidate", &s->candidate, err, errcap) != 0)
        return -1;
    char cg_name[64];
    snprintf(cg_name, sizeof cg_name, "kgym-%d", (int)getpid());
    /* The host check sets up kgym's cgroup parent as part of probing it: keep that one. */
    sbx_host_check(&s->report, cg_name);
    bool cg_ok = s->report.cg_ok;
    if (cg_ok) {
        s->cg = s->report.cg;
        /* The freezer's first: its stale tasks can only die once thawed there, and until they
         * die the other hierarchies' directories cannot go. */
        const char *mine[] = {s->cg.v1_freezer, s->cg.v2_base, s->cg.v1_memory, s->cg.v1_pids};
        for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
            remove_stale_cgroups(mine[i]);
    }
    const sbx_host_item *cg_item = sbx_host_find(&s->report, "cgroup");
    char cg_err[300];
    snprintf(cg_err, sizeof cg_err, "cgroups: %s", cg_item ? cg_item->detail : "not usable");
    bool launcher_ok = access(launcher, X_OK) == 0;
    bool ready = sbx_host_all_required(&s->report) && cg_ok && launcher_ok;
    struct stat st;
    if (stat("/usr/local/cuda", &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(s->cuda_home, sizeof s->cuda_home, "/usr/local/cuda");
    if (ready) {
        s->active = true;
        return 0;
    }
    snprintf(s->weak_reason, sizeof s->weak_reason, "%s",
             !launcher_ok ? "the launcher (kgym-sandbox) is missing: run make"
             : !cg_ok     ? cg_err
                          : "a required host protection is missing (see protections)");
    if (!allow_weak) {
        snprintf(err, errcap,
                 "the sandbox cannot run here: %s; fix the host or start with "
                 "--allow-weak-sandbox (tools then run unsandboxed)",
                 s->weak_reason);
        return -1;
    }
    s->cg.mode = cg_ok ? s->cg.mode : SBX_CG_NONE;
    return 0;
}

int sandbox_set_python(sandbox *s, const char *python, char *err, size_t errcap)
{
    const char *argv[] = {python, "-I", "-c",
                          "import sys; print(sys.prefix); print(sys.base_prefix)", NULL};
    static const char *const ENV[] = {"PATH=/usr/bin:/bin", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = ENV;
    o.timeout_ms = 30000;
    spawn_result r;
    int rc = spawn_run(&o, &r);
    char a[SBX_PATH_MAX] = "", b[SBX_PATH_MAX] = "";
    bool ok = rc == 0 && r.exit_code == 0 && r.out.data &&
              sscanf(r.out.data, "%511s %511s", a, b) == 2 && a[0] == '/' && b[0] == '/';
    spawn_result_deinit(&r);
    if (!ok) {
        snprintf(err, errcap, "cannot ask %s for its prefix (is it a Python interpreter?)", python);
        return -1;
    }
    snprintf(s->python_prefix, sizeof s->python_prefix, "%s", a);
    snprintf(s->python_base_prefix, sizeof s->python_base_prefix, "%s", b);
    return 0;
}

void sandbox_deinit(sandbox *s)
{
    if (s->report.cg_ok)
        sbx_cg_host_cleanup(&s->cg); /* kgym's cgroup parent, made by the host check */
    sbx_host_report_free(&s->report);
}

/* The kernel's pid_max, or the usual default when it cannot be read. */
static uint64_t host_pid_max(void)
{
    FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v ? v : 32768;
}

int sandbox_set_totals(sandbox *s, uint64_t memory_bytes, uint64_t pids, char *err, size_t errcap)
{
    if (!s->active)
        return 0;
    if (!memory_bytes) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 4 * 3 : 0;
    }
    if (!pids)
        pids = host_pid_max() / 2;
    if (!s->cg.has_pids)
        pids = 0; /* the GPU machines: RLIMIT_NPROC per uid is all there is */
    if (sbx_cg_host_totals(&s->cg, memory_bytes, pids, err, errcap) != 0)
        return -1;
    s->total_memory_bytes = memory_bytes;
    s->total_pids = pids;
    return 0;
}

json_t *sandbox_status_json(const sandbox *s)
{
    json_t *j = sbx_host_report_json(&s->report);
    json_object_set_new(j, "active", json_boolean(s->active));
    if (s->active)
        json_object_set_new(
            j, "totals",
            json_pack("{s:o, s:o}", "memory_bytes",
                      s->total_memory_bytes ? json_integer((json_int_t)s->total_memory_bytes)
                                            : json_null(),
                      "pids",
                      s->total_pids ? json_integer((json_int_t)s->total_pids) : json_null()));
    if (!s->active)
        json_object_set_new(j, "weak_reason", json_string(s->weak_reason));
    return j;
}

const sbx_profile *sandbox_profile(const sandbox *s, const char *name)
{
    if (!name)
        return NULL;
    return strcmp(name, "bash") == 0        ? &s->bash
           : strcmp(name, "compile") == 0   ? &s->compile
           : strcmp(name, "candidate") == 0 ? &s->candidate
                                            : NULL;
}

/* The launcher's command line: everything it needs is stated there, nothing inherited. */
int sandbox_build_argv(const sandbox *s, const sandbox_cmd *cmd, const sbx_cgroup *cg,
                       sandbox_argv *out)
{
    int n = 0, cap = (int)(sizeof out->argv / sizeof out->argv[0]);
    snprintf(out->ids[0], sizeof out->ids[0], "%u", (unsigned)cmd->uid);
    snprintf(out->ids[1], sizeof out->ids[1], "%u", (unsigned)cmd->gid);
    const char *fixed[] = {s->launcher,  "--profiles",  s->profiles_dir, "--profile",
                           cmd->profile, "--workspace", cmd->workspace,  "--uid",
                           out->ids[0],  "--gid",       out->ids[1]};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        out->argv[n++] = fixed[i];
    int files = cg ? sbx_cg_procs_files(cg, out->procs, 4) : 0;
    for (int i = 0; i < files; i++) {
        out->argv[n++] = "--cgroup-procs";
        out->argv[n++] = out->procs[i];
    }
    if (cmd->timeout_ms > 0) {
        /* the launcher's own limit, for when the server is not there to enforce it: later
         * than the server's, so that a live server's timeout is the one reported */
        long long wall = (long long)cmd->timeout_ms + cmd->kill_grace_ms + 10000;
        snprintf(out->wall, sizeof out->wall, "%lld", wall);
        out->argv[n++] = "--wall-ms";
        out->argv[n++] = out->wall;
    }
    if (cmd->max_file_bytes) {
        snprintf(out->fsize, sizeof out->fsize, "%llu", (unsigned long long)cmd->max_file_bytes);
        out->argv[n++] = "--fsize";
        out->argv[n++] = out->fsize;
    }
    if (s->cuda_home[0]) {
        snprintf(out->vars[0], sizeof out->vars[0], "CUDA_HOME=%s", s->cuda_home);
        out->argv[n++] = "--var";
        out->argv[n++] = out->vars[0];
    }
    if (s->python_prefix[0]) {
        snprintf(out->vars[1], sizeof out->vars[1], "PYTHON_PREFIX=%s", s->python_prefix);
        snprintf(out->vars[2], sizeof out->vars[2], "PYTHON_BASE_PREFIX=%s", s->python_base_prefix);
        snprintf(out->path_env, sizeof out->path_env,
                 "PATH=%s/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                 s->python_prefix);
        const char *extra[] = {"--var",      out->vars[1], "--var",
                               out->vars[2], "--env",      out->path_env};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
            out->argv[n++] = extra[i];
    }
    for (int i = 0; cmd->gpu_devices && cmd->gpu_devices[i]; i++) {
        if (n >= cap - 8)
            return -1;
        out->argv[n++] = "--gpu-device";
        out->argv[n++] = cmd->gpu_devices[i];
    }
    for (int i = 0; cmd->env && cmd->env[i]; i++) {
        if (n >= cap - 8)
            return -1;
        out->argv[n++] = "--env";
        out->argv[n++] = cmd->env[i];
    }
    out->argv[n++] = "--";
    for (int i = 0; cmd->argv[i]; i++) {
        if (n >= cap - 1)
            return -1;
        out->argv[n++] = cmd->argv[i];
    }
    out->argv[n] = NULL;
    return 0;
}

/* Why it ended, from the strongest evidence: the launcher's own report of a setup failure
 * (over a pipe the command never holds), the clock, the cgroup, then the signal. */
static sbx_end classify(const sandbox_result *res, bool setup_failed)
{
    const spawn_result *r = &res->run;
    if (setup_failed)
        return SBX_END_SETUP;
    if (r->timed_out)
        return SBX_END_TIMEOUT;
    if (res->cg.oom_killed)
        return SBX_END_MEMORY;
    if (res->cg.pids_limited)
        return SBX_END_PIDS;
    if (r->term_signal == SIGXFSZ)
        return SBX_END_FILE_SIZE;
    if (r->term_signal == SIGXCPU)
        return SBX_END_CPU;
    return r->term_signal ? SBX_END_SIGNAL : SBX_END_EXIT;
}

/* A command's cgroup name: the episode's uid and a sequence number. Never the episode id: the
 * names are visible host-wide (/proc/<pid>/cgroup, cgroupfs), and the id is the API's only
 * credential (red team: read through the candidate's /sys). */
static void cgroup_name(sandbox *s, const sandbox_cmd *cmd, const char *kind, char *out, size_t cap)
{
    snprintf(out, cap, "u%u-%s%lu", (unsigned)cmd->uid, kind,
             (unsigned long)atomic_fetch_add(&s->seq, 1));
}

int sandbox_run(sandbox *s, const sandbox_cmd *cmd, sandbox_result *res)
{
    memset(res, 0, sizeof *res);
    const sbx_profile *p = sandbox_profile(s, cmd->profile);
    if (!p || !s->active || cmd->uid == 0 || cmd->gid == 0) {
        res->run.fail_stage = !p ? "profile" : !s->active ? "sandbox inactive" : "uid";
        return -1;
    }
    char name[128], err[256];
    cgroup_name(s, cmd, "", name, sizeof name);
    sbx_cgroup cg;
    /* Hosts without a pids controller (the GPU machines) rely on RLIMIT_NPROC of the
     * episode's own uid, which the profile sets. */
    uint64_t pids = s->cg.has_pids ? p->cg_pids : 0;
    if (sbx_cg_create(&s->cg, name, p->cg_memory_bytes, pids, &cg, err, sizeof err) != 0) {
        res->run.fail_stage = "cgroup";
        return -1;
    }
    sandbox_argv *a = malloc(sizeof *a); /* large: not on a connection thread's stack */
    if (!a || sandbox_build_argv(s, cmd, &cg, a) != 0) {
        free(a);
        sbx_cg_destroy(&cg);
        res->run.fail_stage = "arguments";
        return -1;
    }
    /* The launcher writes "setup" here if it cannot build the sandbox. */
    int status[2];
    char status_arg[16];
    if (pipe2(status, O_CLOEXEC | O_NONBLOCK) != 0) {
        free(a);
        sbx_cg_destroy(&cg);
        res->run.fail_stage = "pipe";
        return -1;
    }
    snprintf(status_arg, sizeof status_arg, "%d", status[1]);
    int n = 0;
    while (a->argv[n] && strcmp(a->argv[n], "--") != 0)
        n++;
    /* insert "--status-fd N" before "--" (sandbox_build_argv leaves room: cap is 128) */
    int last = n;
    while (a->argv[last])
        last++;
    if (last + 2 >= (int)(sizeof a->argv / sizeof a->argv[0])) {
        close(status[0]);
        close(status[1]);
        free(a);
        sbx_cg_destroy(&cg);
        res->run.fail_stage = "arguments";
        return -1;
    }
    for (int k = last; k >= n; k--)
        a->argv[k + 2] = a->argv[k];
    a->argv[n] = "--status-fd";
    a->argv[n + 1] = status_arg;
    static const char *const ENV[] = {"PATH=/usr/bin:/bin", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = a->argv;
    o.keep_fds = &status[1];
    o.n_keep_fds = 1;
    o.envp = ENV;
    o.cwd = "/";
    o.timeout_ms =
        cmd->timeout_ms > 0 && cmd->timeout_ms < p->wall_ms ? cmd->timeout_ms : p->wall_ms;
    o.kill_grace_ms = cmd->kill_grace_ms;
    o.capture_cap = cmd->capture_cap ? cmd->capture_cap : (size_t)p->output_bytes;
    int rc = spawn_run(&o, &res->run);
    free(a);
    close(status[1]);
    char buf[8];
    bool setup_failed = read(status[0], buf, sizeof buf) > 0;
    close(status[0]);
    /* Whatever the command left behind dies with its cgroup, before we read why it ended. */
    sbx_cg_kill(&cg);
    sbx_cg_stats_read(&cg, &res->cg);
    sbx_cg_destroy(&cg);
    if (rc != 0)
        return -1;
    res->end = classify(res, setup_failed);
    return 0;
}

struct sandbox_job {
    sbx_cgroup cg;
    sandbox_argv args;
};

sandbox_job *sandbox_job_new(sandbox *s, const sandbox_cmd *cmd, char *err, size_t errcap)
{
    const sbx_profile *p = sandbox_profile(s, cmd->profile);
    sandbox_job *j = p && s->active ? calloc(1, sizeof *j) : NULL;
    if (!j) {
        snprintf(err, errcap, "%s", !p ? "unknown profile" : "the sandbox is not active");
        return NULL;
    }
    char name[128];
    cgroup_name(s, cmd, "job", name, sizeof name);
    uint64_t pids = s->cg.has_pids ? p->cg_pids : 0;
    if (sbx_cg_create(&s->cg, name, p->cg_memory_bytes, pids, &j->cg, err, errcap) != 0) {
        free(j);
        return NULL;
    }
    if (sandbox_build_argv(s, cmd, &j->cg, &j->args) != 0) {
        snprintf(err, errcap, "the command line is too long");
        sbx_cg_destroy(&j->cg);
        free(j);
        return NULL;
    }
    return j;
}

const char *const *sandbox_job_argv(const sandbox_job *j)
{
    return j->args.argv;
}

void sandbox_job_free(void *ptr)
{
    sandbox_job *j = ptr;
    if (!j)
        return;
    sbx_cg_kill(&j->cg);
    sbx_cg_destroy(&j->cg);
    free(j);
}

int sandbox_job_freeze(sandbox_job *j, bool on)
{
    if (!j) {
        errno = EINVAL;
        return -1;
    }
    return sbx_cg_freeze(&j->cg, on);
}

void sandbox_result_deinit(sandbox_result *res)
{
    spawn_result_deinit(&res->run);
}
