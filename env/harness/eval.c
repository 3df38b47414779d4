/* eval: one trusted evaluation of a workspace (see eval.h for the order of things). */
#include "harness/eval.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "spawn.h"
#include "task.h"
#include "tools/fs.h"
#include "tools/tool.h"
#include "util/fileio.h"
#include "util/text.h"

/* build.h's entry point for an episode (defined with the Compile tool). */
int build_for_episode(const struct tool_env *env, build_result *res);

#define EVAL_MAX_FILE (64u << 20) /* a source, model_new.py or the built module */

/* snprintf for messages and paths whose truncation is checked (or harmless): a va_list keeps
 * the compiler's truncation analysis out, the return value says whether it all fitted. */
/* ---- server setup ------------------------------------------------------------------------ */

/* "sm_90a" for compute capability 9.0 (wgmma needs the a-suffixed target), "sm_XY" otherwise. */
static void arch_of_capability(int major, int minor, char *out, size_t cap)
{
    text_fmt(out, cap, "sm_%d%d%s", major, minor, major == 9 && minor == 0 ? "a" : "");
}

static void probe_cuda_arch(const char *python, char *arch, size_t cap)
{
    const char *argv[] = {python, "-I", "-c",
                          "import torch; print(*torch.cuda.get_device_capability(0))", NULL};
    static const char *const ENV[] = {"PATH=/usr/bin:/bin", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = ENV;
    o.timeout_ms = 120000;
    spawn_result r;
    int major = 0, minor = 0;
    if (spawn_run(&o, &r) == 0 && r.exit_code == 0 && r.out.data &&
        sscanf(r.out.data, "%d %d", &major, &minor) == 2 && major > 0)
        arch_of_capability(major, minor, arch, cap);
    spawn_result_deinit(&r);
}

int eval_server_init(eval_server *es, const eval_config *cfg, struct sandbox *sbx, char *err,
                     size_t errcap)
{
    memset(es, 0, sizeof *es);
    pthread_mutex_init(&es->baseline_lock, NULL);
    pthread_mutex_init(&es->probe_lock, NULL);
    es->sbx = sbx;
    es->compile_jobs = cfg->compile_jobs > 0 ? cfg->compile_jobs : 2;
    es->compile_timeout_ms = cfg->compile_timeout_ms > 0 ? cfg->compile_timeout_ms : 600000;
    es->eval_timeout_ms = cfg->eval_timeout_ms > 0 ? cfg->eval_timeout_ms : 900000;
    es->lease_timeout_ms = cfg->lease_timeout_ms > 0 ? cfg->lease_timeout_ms : 600000;
    text_fmt(es->template_dir, sizeof es->template_dir, "%s", cfg->template_dir);
    text_fmt(es->harness_dir, sizeof es->harness_dir, "%s", cfg->harness_dir);
    text_fmt(es->cache_dir, sizeof es->cache_dir, "%s", cfg->cache_dir);
    if (objcache_init(&es->objects, es->cache_dir, cfg->cache_max_bytes) != 0) {
        text_fmt(err, errcap, "the build cache's path is too long: %s", es->cache_dir);
        return -1;
    }
    bool none = strcmp(cfg->gpus, "none") == 0, all = !cfg->gpus[0] || !strcmp(cfg->gpus, "all");
    if (gpu_pool_init(&es->gpus, cfg->dev_dir[0] ? cfg->dev_dir : "/dev",
                      none || all ? NULL : cfg->gpus) < 0) {
        text_fmt(err, errcap, "--gpus: expected 'all', 'none' or a list like 0,2");
        return -1;
    }
    if (none)
        es->gpus.n = 0;
    if (!cfg->python[0]) {
        text_fmt(es->unavailable, sizeof es->unavailable,
                 "evaluation needs a Python with torch: start the server with --sandbox-python");
        return 0;
    }
    char judge[PATH_MAX + 16];
    text_fmt(judge, sizeof judge, "%s/judge.py", es->harness_dir);
    if (access(judge, R_OK) != 0) {
        text_fmt(err, errcap, "the harness is missing: %s (see --harness)", judge);
        return -1;
    }
    if (mkdir(es->cache_dir, 0700) != 0 && errno != EEXIST) {
        text_fmt(err, errcap, "cannot create the build cache %s: %s", es->cache_dir,
                 strerror(errno));
        return -1;
    }
    text_fmt(es->probe_python, sizeof es->probe_python, "%s", cfg->python);
    text_fmt(es->probe_cuda_home, sizeof es->probe_cuda_home, "%s", cfg->cuda_home);
    text_fmt(es->probe_arch, sizeof es->probe_arch, "%s", cfg->cuda_arch);
    text_fmt(es->unavailable, sizeof es->unavailable, "%s",
             "the toolchain has not been probed yet");
    es->configured = true;
    return 0;
}

bool eval_prepare(eval_server *es)
{
    if (!es)
        return false;
    pthread_mutex_lock(&es->probe_lock);
    if (es->configured && !es->probed) {
        char arch[32], perr[512];
        text_fmt(arch, sizeof arch, "%s", es->probe_arch);
        if (!arch[0] && es->gpus.n > 0)
            probe_cuda_arch(es->probe_python, arch, sizeof arch);
        if (build_toolchain_probe(&es->tc, es->probe_python, es->probe_cuda_home, arch, perr,
                                  sizeof perr) != 0)
            text_fmt(es->unavailable, sizeof es->unavailable, "the toolchain probe failed: %s",
                     perr);
        else
            es->ready = true;
        es->probed = true;
    }
    bool ready = es->ready;
    pthread_mutex_unlock(&es->probe_lock);
    return ready;
}

void eval_server_deinit(eval_server *es)
{
    gpu_pool_deinit(&es->gpus);
    objcache_deinit(&es->objects);
    pthread_mutex_destroy(&es->baseline_lock);
    pthread_mutex_destroy(&es->probe_lock);
}

json_t *eval_server_json(eval_server *es)
{
    pthread_mutex_lock(&es->probe_lock);
    json_t *j =
        json_pack("{s:b, s:b, s:i}", "ready", es->ready, "probed", es->probed, "gpus", es->gpus.n);
    if (!es->ready)
        json_object_set_new(j, "unavailable", json_string(es->unavailable));
    else
        json_object_set_new(j, "toolchain", build_toolchain_json(&es->tc));
    json_object_set_new(j, "object_cache", objcache_json(&es->objects));
    json_object_set_new(
        j, "devices", es->gpus.n > 0 ? json_pack("[s,s]", "cuda", "cpu") : json_pack("[s]", "cpu"));
    pthread_mutex_unlock(&es->probe_lock);
    return j;
}

void ep_eval_init(ep_eval *ev, const char *episode_dir)
{
    memset(ev, 0, sizeof *ev);
    text_fmt(ev->build_dir, sizeof ev->build_dir, "%s/build", episode_dir);
    text_fmt(ev->eval_dir, sizeof ev->eval_dir, "%s/eval", episode_dir);
}

void ep_eval_reset(ep_eval *ev)
{
    json_decref(ev->best);
    ev->best = NULL;
    ev->so_path[0] = ev->build_key[0] = '\0';
}

void ep_eval_deinit(ep_eval *ev)
{
    ep_eval_reset(ev);
}

/* ---- snapshot ---------------------------------------------------------------------------- */

/* Writes data to dir/name as a root-owned read-only file (the candidate cannot change it). */
static int put_file(const char *dir, const char *name, const char *data, size_t len)
{
    char path[PATH_MAX * 2];
    text_fmt(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    return close(fd);
}

/* Copies a regular file (never through a symlink) into dir/name. */
static int copy_in(const char *src, const char *dir, const char *name)
{
    int fd = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > EVAL_MAX_FILE) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    ssize_t got = buf ? read(fd, buf, (size_t)st.st_size) : -1;
    close(fd);
    int rc = got == st.st_size ? put_file(dir, name, buf, (size_t)got) : -1;
    free(buf);
    return rc;
}

static int rm_tree(const char *path)
{
    char cmd_path[PATH_MAX + 8];
    text_fmt(cmd_path, sizeof cmd_path, "%s", path);
    DIR *d = opendir(path);
    if (!d)
        return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[PATH_MAX * 2];
        text_fmt(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(sub);
        else
            unlink(sub);
    }
    closedir(d);
    return rmdir(cmd_path);
}

/* The candidate's view: model_new.py from the workspace, the kernels exactly as compiled, the
 * built module and the runner (with gpushare.py, its GPU memory sharing), all root-owned and
 * read-only. */
static int take_snapshot(const eval_server *es, const tool_env *env, const char *cand,
                         const char *so_path, char *why, size_t cap)
{
    char sub[PATH_MAX * 2];
    if (mkdir(cand, 0755) != 0) {
        text_fmt(why, cap, "cannot create %s: %s", cand, strerror(errno));
        return -1;
    }
    fs_file f = {0};
    int rc = fs_load(env->root_fd, "model_new.py", 1u << 20, &f);
    if (rc != 0) {
        text_fmt(why, cap, "model_new.py: %s", ws_err_code(rc));
        return 1; /* the candidate's fault */
    }
    rc = put_file(cand, "model_new.py", f.data, f.len);
    fs_file_free(&f);
    text_fmt(sub, sizeof sub, "%s/kernels", cand);
    if (rc != 0 || mkdir(sub, 0755) != 0)
        goto infra;
    char src_dir[PATH_MAX + 32];
    text_fmt(src_dir, sizeof src_dir, "%s/src/kernels", env->evs->build_dir);
    DIR *d = opendir(src_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char from[PATH_MAX * 2];
        text_fmt(from, sizeof from, "%s/%s", src_dir, e->d_name);
        if (copy_in(from, sub, e->d_name) != 0) {
            closedir(d);
            goto infra;
        }
    }
    if (d)
        closedir(d);
    text_fmt(sub, sizeof sub, "%s/ext", cand);
    char runner[PATH_MAX + 16], share[PATH_MAX + 16];
    text_fmt(runner, sizeof runner, "%s/runner.py", es->harness_dir);
    text_fmt(share, sizeof share, "%s/gpushare.py", es->harness_dir);
    if (mkdir(sub, 0755) != 0 || copy_in(so_path, sub, "cuda_extension.so") != 0 ||
        copy_in(runner, cand, "runner.py") != 0 || copy_in(share, cand, "gpushare.py") != 0)
        goto infra;
    return 0;
infra:
    text_fmt(why, cap, "cannot snapshot the workspace into %s: %s", cand, strerror(errno));
    return -1;
}

/* ---- the judge --------------------------------------------------------------------------- */

/* The candidate runner's command line: the launcher's (candidate profile, the episode's uid,
 * the leased GPU's node only) or, in weak mode, the runner itself. "@FD@" is the channel fd,
 * filled in by the judge. */
static json_t *candidate_argv(eval_server *es, const tool_env *env, const char *cand,
                              const char *gpu_node, const char *visible, sandbox_job **job,
                              char *why, size_t cap)
{
    const char *py = es->tc.python;
    bool boxed = env->sandbox && env->sandbox->active && env->owner;
    char module[PATH_MAX * 2], ext[PATH_MAX * 2], runner[PATH_MAX * 2];
    const char *root = boxed ? "/workspace" : cand;
    text_fmt(module, sizeof module, "%s/model_new.py", root);
    text_fmt(ext, sizeof ext, "%s/ext", root);
    text_fmt(runner, sizeof runner, "%s/runner.py", root);
    const char *inner[] = {py,          "-I",       runner, "--fd",      "@FD@", "--kind",
                           "candidate", "--module", module, "--ext-dir", ext,    NULL};
    json_t *argv = json_array();
    if (!boxed) {
        for (int i = 0; inner[i]; i++)
            json_array_append_new(argv, json_string(inner[i]));
        return argv;
    }
    /* The driver's control nodes beside the leased GPU's own node, from the same directory. */
    char ctl[PATH_MAX], uvm[PATH_MAX];
    const char *slash = gpu_node ? strrchr(gpu_node, '/') : NULL;
    int dir_len = slash ? (int)(slash - gpu_node) : 0;
    text_fmt(ctl, sizeof ctl, "%.*s/nvidiactl", dir_len, gpu_node ? gpu_node : "");
    text_fmt(uvm, sizeof uvm, "%.*s/nvidia-uvm", dir_len, gpu_node ? gpu_node : "");
    const char *gpus[] = {ctl, uvm, gpu_node, NULL};
    char vis[64];
    text_fmt(vis, sizeof vis, "CUDA_VISIBLE_DEVICES=%s", visible ? visible : "");
    /* OpenMP threads that spin after a parallel region would steal the cores the other
     * process is being timed on: every process of an evaluation waits passively. */
    const char *envs[] = {"OMP_WAIT_POLICY=PASSIVE", vis, NULL};
    if (!visible)
        envs[1] = NULL;
    sandbox_cmd cmd = {.profile = "candidate",
                       .workspace = cand,
                       .uid = env->owner->uid,
                       .gid = env->owner->gid,
                       .argv = inner,
                       .gpu_devices = gpu_node ? gpus : NULL,
                       .env = envs};
    *job = sandbox_job_new(env->sandbox, &cmd, why, cap);
    if (!*job) {
        json_decref(argv);
        return NULL;
    }
    const char *const *a = sandbox_job_argv(*job);
    for (int i = 0; a[i]; i++) {
        if (strcmp(a[i], "--") == 0) { /* the channel survives the launcher's fd sweep */
            json_array_append_new(argv, json_string("--keep-fd"));
            json_array_append_new(argv, json_string("@FD@"));
        }
        json_array_append_new(argv, json_string(a[i]));
    }
    return argv;
}

static json_t *infra(const char *why, const char *detail)
{
    char msg[1024];
    text_fmt(msg, sizeof msg, why, detail);
    return json_pack("{s:s, s:s}", "eval_status", "infra_error", "error", msg);
}

/* In the judge, before execve: it dies with the server. A server killed outright (SIGKILL, the
 * OOM killer) must leave no judge timing on a GPU that its next run leases again, or holding a
 * measurement's timing lock. PDEATHSIG follows the spawning thread, which waits for the judge
 * (spawn_run), so it fires only when the server dies. */
static int die_with_server(void *ctx)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        return errno;
    return getppid() == *(const pid_t *)ctx ? 0 : ESRCH; /* it died before the prctl */
}

/* Runs judge.py on job (written to dir/job.json); returns its verdict or an infra error. */
static json_t *run_judge(eval_server *es, const char *dir, json_t *job, const char *visible)
{
    char job_path[PATH_MAX + 16], result_path[PATH_MAX + 16], judge[PATH_MAX + 16];
    text_fmt(job_path, sizeof job_path, "%s/job.json", dir);
    text_fmt(result_path, sizeof result_path, "%s/result.json", dir);
    text_fmt(judge, sizeof judge, "%s/judge.py", es->harness_dir);
    json_object_set_new(job, "result_path", json_string(result_path));
    if (json_dump_file(job, job_path, JSON_COMPACT) != 0)
        return infra("cannot write %s", job_path);
    char vis[64], inductor[PATH_MAX + 48], home[PATH_MAX + 16];
    text_fmt(vis, sizeof vis, "CUDA_VISIBLE_DEVICES=%s", visible ? visible : "");
    text_fmt(inductor, sizeof inductor, "TORCHINDUCTOR_CACHE_DIR=%s/inductor", es->cache_dir);
    text_fmt(home, sizeof home, "HOME=%s", es->cache_dir);
    const char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", vis, inductor, home, "LANG=C.UTF-8",
                          "OMP_WAIT_POLICY=PASSIVE",           NULL};
    const char *argv[] = {es->tc.python, "-I", judge, job_path, NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = envp;
    o.cwd = dir;
    o.timeout_ms = es->eval_timeout_ms;
    o.kill_grace_ms = 2000;
    o.capture_cap = 64 << 10;
    pid_t server = getpid();
    o.pre_exec = die_with_server;
    o.pre_exec_ctx = &server;
    spawn_result r;
    int rc = spawn_run(&o, &r);
    json_error_t jerr;
    json_t *verdict = rc == 0 ? json_load_file(result_path, 0, &jerr) : NULL;
    if (!verdict || !json_is_object(verdict)) {
        json_decref(verdict);
        char detail[900];
        text_fmt(detail, sizeof detail, "%s; stderr: %.600s",
                 rc != 0       ? "the judge could not start"
                 : r.timed_out ? "the evaluation timed out"
                               : "the judge left no verdict",
                 r.err.data ? r.err.data : "");
        verdict = infra("the judge failed: %s", detail);
        if (rc == 0 && r.timed_out)
            json_object_set_new(verdict, "eval_timeout_ms", json_integer(es->eval_timeout_ms));
    }
    spawn_result_deinit(&r);
    return verdict;
}

/* The judge's job. cand and cand_argv are NULL for a baselines-only job. */
static json_t *judge_job(eval_server *es, const struct task *tk, bool cpu, uint64_t seed,
                         const char *mode, const char *cand, const char *ref_path,
                         json_t *cand_argv)
{
    char runner[PATH_MAX + 16];
    text_fmt(runner, sizeof runner, "%s/runner.py", es->harness_dir);
    /* the judge's own limit for the candidate's part, inside the server's: a slow candidate
     * then gets a verdict (TIMEOUT) instead of the infra_error of a killed judge */
    double deadline_s = es->eval_timeout_ms / 1000.0 * 0.9 - 5;
    json_t *job = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:f, s:f, s:i, s:s, s:b, s:f, "
                            "s:{s:i, s:i, s:i, s:f}}",
                            "mode", mode, "device", cpu ? "cpu" : "cuda", "reference", ref_path,
                            "baseline_python", es->tc.python, "runner_path", runner, "seed",
                            (json_int_t)(seed >> 1), "atol", tk->atol, "rtol", tk->rtol, "checks",
                            5, "cache_dir", es->cache_dir, "probe", 1, "deadline_s",
                            deadline_s > 1 ? deadline_s : 1.0, "timing", "warmup", 2, "min_reps",
                            10, "max_reps", 100, "budget_s", cpu ? 1.5 : 1.0);
    if (cand)
        json_object_set_new(job, "candidate_dir", json_string(cand));
    if (cand_argv) /* stolen, as json_pack's "o" would */
        json_object_set_new(job, "candidate_argv", cand_argv);
    return job;
}

/* The reference the judge runs: the task's code, or its CPU variant's. */
static const char *reference_code(const struct task *tk, bool cpu)
{
    return cpu && tk->code_cpu ? tk->code_cpu : tk->code;
}

/* torch.compile warm-ups sharing one GPU at most: each is mostly CPU work (Dynamo, Inductor,
 * Triton's compiler) with one untimed forward, so a few overlap well; more would only queue on
 * the host's cores and stack their GPU memory. */
#define WARMUPS_PER_GPU 4
/* Baseline measurements sharing one GPU: one times (under the GPU's timing lock, below) while
 * the others start their interpreters and runners, so the GPU's turn goes to timing. */
#define MEASUREMENTS_PER_GPU 3

/* How a job holds its GPU: alone for anything that times an agent's code, shared among trusted
 * jobs of one class otherwise. */
enum lease_kind { LEASE_EXCLUSIVE, LEASE_WARMUP, LEASE_MEASURE };

/* Leases a GPU for a CUDA evaluation (none for the CPU). Returns the slot, -1 for none needed,
 * or -2 with *fail set when no lease came in time. */
static int lease_for(eval_server *es, bool cpu, enum lease_kind kind, double *waited, char *visible,
                     size_t cap, json_t **fail)
{
    *waited = 0;
    if (cpu)
        return -1;
    int slot = kind == LEASE_EXCLUSIVE ? gpu_lease_acquire(&es->gpus, es->lease_timeout_ms, waited)
               : kind == LEASE_WARMUP
                   ? gpu_lease_acquire_shared(&es->gpus, GPU_SHARE_WARMUP, WARMUPS_PER_GPU,
                                              es->lease_timeout_ms, waited)
                   : gpu_lease_acquire_shared(&es->gpus, GPU_SHARE_MEASURE, MEASUREMENTS_PER_GPU,
                                              es->lease_timeout_ms, waited);
    if (slot < 0) {
        *fail = infra("%s", "no GPU lease within the lease timeout");
        json_object_set_new(*fail, "lease_wait_ms", json_real(*waited));
        return -2;
    }
    text_fmt(visible, cap, "%d", es->gpus.index[slot]);
    return slot;
}

static void lease_release(eval_server *es, enum lease_kind kind, int slot)
{
    if (slot < 0)
        return;
    if (kind == LEASE_EXCLUSIVE)
        gpu_lease_release(&es->gpus, slot);
    else
        gpu_lease_release_shared(&es->gpus, slot);
}

json_t *eval_baselines(eval_server *es, const struct task *tk, bool cpu, bool warmup,
                       bool remeasure)
{
    double t0 = text_mono_ms();
    if (!eval_prepare(es))
        return infra("evaluation is unavailable on this server: %s",
                     es ? es->unavailable : "no harness");
    if (!cpu && es->gpus.n == 0)
        return infra("%s", "this server has no GPU: ask for the \"cpu\" variant");
    /* a private directory per call under the cache (root only), removed afterwards */
    char dir[PATH_MAX], ref_path[PATH_MAX + 32];
    char base[PATH_MAX + 16];
    text_fmt(base, sizeof base, "%s/baseline-jobs", es->cache_dir);
    mkdir(base, 0700);
    text_fmt(dir, sizeof dir, "%s/job-XXXXXX", base);
    if (!mkdtemp(dir))
        return infra("cannot create a directory under %s", base);
    const char *code = reference_code(tk, cpu);
    json_t *verdict;
    text_fmt(ref_path, sizeof ref_path, "%s/reference.py", dir);
    if (put_file(dir, "reference.py", code, strlen(code)) != 0) {
        verdict = infra("cannot write the reference into %s", dir);
    } else {
        double waited;
        char visible[16] = "";
        json_t *fail = NULL;
        enum lease_kind kind = warmup ? LEASE_WARMUP : LEASE_MEASURE;
        int slot = lease_for(es, cpu, kind, &waited, visible, sizeof visible, &fail);
        if (slot == -2) {
            verdict = fail;
        } else {
            uint64_t seed = 0;
            if (getrandom(&seed, sizeof seed, 0) != sizeof seed)
                seed = (uint64_t)(t0 * 1e3); /* baselines only: the seed picks the inputs */
            json_t *jb =
                judge_job(es, tk, cpu, seed, warmup ? "warmup" : "baselines", NULL, ref_path, NULL);
            if (slot >= 0 && !warmup) {
                /* measurements share the GPU: the judges take turns at their GPU work under
                 * this lock, held from the reference's first forward to the last timed call */
                char lock[PATH_MAX + 32];
                text_fmt(lock, sizeof lock, "%s/gpu%d.timing.lock", es->cache_dir,
                         es->gpus.index[slot]);
                json_object_set_new(jb, "gpu_timing_lock", json_string(lock));
            }
            if (remeasure && !warmup)
                json_object_set_new(jb, "remeasure", json_true());
            verdict = run_judge(es, dir, jb, slot >= 0 ? visible : NULL);
            json_decref(jb);
            lease_release(es, kind, slot);
            if (slot >= 0)
                json_object_set_new(verdict, "gpu", json_integer(es->gpus.index[slot]));
            json_object_set_new(verdict, "lease_wait_ms", json_real(waited));
        }
    }
    rm_tree(dir);
    json_object_set_new(verdict, "eval_ms", json_real(text_mono_ms() - t0));
    json_object_set_new(verdict, "mode", json_string(warmup ? "warmup" : "baselines"));
    return verdict;
}

/* One evaluation: build, snapshot, lease, judge. Never NULL: {eval_status, compiled, correct,
 * ...}; eval_status "infra_error" means no verdict could be reached (not the agent's fault). */
json_t *eval_run(eval_server *es, const tool_env *env, const char *mode)
{
    double t0 = text_mono_ms();
    if (!eval_prepare(es))
        return infra("evaluation is unavailable on this server: %s",
                     es ? es->unavailable : "no harness");
    if (!env->cpu_variant && es->gpus.n == 0)
        return infra("%s", "this server has no GPU: create the episode with "
                           "options.variant = \"cpu\" to evaluate on the CPU");
    build_result br;
    int brc = build_for_episode(env, &br);
    if (brc != 0 || !br.ok) {
        json_t *out =
            brc != 0 ? infra("the build failed: %s", br.log ? br.log : "")
                     : json_pack("{s:s, s:b, s:b, s:s, s:s, s:[s]}", "eval_status", "ok",
                                 "compiled", 0, "correct", 0, "error_code",
                                 br.error_code ? br.error_code : "COMPILE_ERROR", "compile_log",
                                 br.log ? br.log : "", "checks_failed", "compile");
        build_result_deinit(&br);
        return out;
    }
    /* Each evaluation gets its own numbered directory: judge/ (root only) and cand/. */
    char dir[PATH_MAX], cand[PATH_MAX + 8], jdir[PATH_MAX + 8], why[1024] = "";
    mkdir(env->evs->eval_dir, 0711);
    text_fmt(dir, sizeof dir, "%s/%d", env->evs->eval_dir, ++env->evs->n_evals);
    rm_tree(dir);
    text_fmt(cand, sizeof cand, "%s/cand", dir);
    text_fmt(jdir, sizeof jdir, "%s/judge", dir);
    if (mkdir(dir, 0711) != 0 || mkdir(jdir, 0700) != 0) {
        build_result_deinit(&br);
        return infra("cannot create %s", dir);
    }
    int snap = take_snapshot(es, env, cand, br.so_path, why, sizeof why);
    json_t *build_info = json_pack("{s:f, s:i, s:i, s:s}", "ms", br.ms, "compiled", br.compiled,
                                   "cached", br.cached, "key", br.key);
    build_result_deinit(&br);
    if (snap != 0) {
        json_decref(build_info);
        return snap > 0 ? json_pack("{s:s, s:b, s:b, s:s, s:s, s:[s]}", "eval_status", "ok",
                                    "compiled", 1, "correct", 0, "error_code", "INCORRECT", "error",
                                    why, "checks_failed", "model_new.py missing")
                        : infra("%s", why);
    }
    const char *code = reference_code(env->task, env->cpu_variant);
    if (put_file(jdir, "reference.py", code, strlen(code)) != 0) {
        json_decref(build_info);
        return infra("cannot write the reference into %s", jdir);
    }
    char ref_path[PATH_MAX + 32];
    text_fmt(ref_path, sizeof ref_path, "%s/reference.py", jdir);

    double waited;
    char visible[16] = "";
    json_t *fail = NULL;
    int slot =
        lease_for(es, env->cpu_variant, LEASE_EXCLUSIVE, &waited, visible, sizeof visible, &fail);
    if (slot == -2) {
        json_decref(build_info);
        return fail;
    }
    sandbox_job *job = NULL;
    json_t *argv = candidate_argv(es, env, cand, slot >= 0 ? es->gpus.node[slot] : NULL,
                                  slot >= 0 ? visible : NULL, &job, why, sizeof why);
    json_t *verdict;
    if (!argv) {
        verdict = infra("cannot set up the candidate sandbox: %s", why);
    } else {
        json_t *jb =
            judge_job(es, env->task, env->cpu_variant, env->eval_seed, mode, cand, ref_path, argv);
        verdict = run_judge(es, jdir, jb, slot >= 0 ? visible : NULL);
        json_decref(jb);
    }
    sandbox_job_free(job); /* whatever the candidate left running dies with its cgroup */
    lease_release(es, LEASE_EXCLUSIVE, slot);
    json_object_set_new(verdict, "build", build_info);
    json_object_set_new(verdict, "lease_wait_ms", json_real(waited));
    if (slot >= 0)
        json_object_set_new(verdict, "gpu", json_integer(es->gpus.index[slot]));
    json_object_set_new(verdict, "snapshot", json_integer(env->evs->n_evals));
    json_object_set_new(verdict, "seed", json_integer((json_int_t)(env->eval_seed >> 1)));
    json_object_set_new(verdict, "eval_ms", json_real(text_mono_ms() - t0));
    json_object_set_new(verdict, "mode", json_string(mode));
    return verdict;
}
