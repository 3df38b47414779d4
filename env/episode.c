#include "episode.h"
#include "harness/reward.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "sandbox/sandbox.h"
#include "sandbox/uidpool.h"

#define EP_BUCKETS 65536

struct ep_table {
    const server_config *cfg;
    const task_store *tasks;
    const ws_template *tpl;
    struct metrics *metrics;
    char episodes_dir[560];
    pthread_mutex_t lock;         /* guards buckets, refs, in_table, count */
    struct bucket_node **buckets; /* EP_BUCKETS chains: id -> episode */
    episode **all;                /* every episode, in creation order (closed ones too) */
    size_t n_all, cap_all;
    atomic_long open; /* episodes holding a workspace */
    struct sandbox *sandbox;
    struct eval_server *eval;
    uid_pool uids; /* hands out the episodes' uids */
};

const char *ep_status_name(ep_status s)
{
    static const char *const names[] = {"active", "terminated", "truncated",
                                        "closed", "expired",    "ended"};
    return names[s];
}

double ep_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void ep_iso_time(double t, char *buf)
{
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void ep_table_set_metrics(ep_table *t, struct metrics *m)
{
    t->metrics = m;
}

void ep_table_set_eval(ep_table *t, struct eval_server *es)
{
    t->eval = es;
}

void ep_table_set_sandbox(ep_table *t, struct sandbox *s)
{
    t->sandbox = s;
}

static bool sandbox_active(const ep_table *t)
{
    return t->sandbox && t->sandbox->active;
}

static bool has_workspace(ep_status s)
{
    return s == EP_ACTIVE || s == EP_TERMINATED || s == EP_TRUNCATED;
}

/* ---- table ----------------------------------------------------------------------------------
 * A hash of chains finds an id in O(1); the creation-ordered array serves listings and the
 * reaper. */

static size_t id_hash(const char *id)
{
    size_t h = 5381;
    for (const char *p = id; *p; p++)
        h = h * 33 + (unsigned char)*p;
    return h;
}

typedef struct bucket_node {
    episode *ep;
    struct bucket_node *next;
} bucket_node;

static void table_insert_locked(ep_table *t, episode *ep)
{
    bucket_node *n = malloc(sizeof *n);
    if (!n)
        return;
    size_t b = id_hash(ep->id) % EP_BUCKETS;
    n->ep = ep;
    n->next = t->buckets[b];
    t->buckets[b] = n;
    if (t->n_all == t->cap_all) {
        size_t cap = t->cap_all ? t->cap_all * 2 : 256;
        episode **p = realloc(t->all, cap * sizeof *p);
        if (!p)
            return;
        t->all = p;
        t->cap_all = cap;
    }
    t->all[t->n_all++] = ep;
    ep->in_table = true;
}

static void table_remove_locked(ep_table *t, episode *ep)
{
    size_t b = id_hash(ep->id) % EP_BUCKETS;
    for (bucket_node **pp = &t->buckets[b]; *pp; pp = &(*pp)->next) {
        if ((*pp)->ep == ep) {
            bucket_node *dead = *pp;
            *pp = dead->next;
            free(dead);
            break;
        }
    }
    for (size_t i = 0; i < t->n_all; i++) {
        if (t->all[i] == ep) {
            memmove(&t->all[i], &t->all[i + 1], (t->n_all - i - 1) * sizeof *t->all);
            t->n_all--;
            break;
        }
    }
    ep->in_table = false;
}

static void episode_free(episode *ep)
{
    if (ep->root_fd >= 0) {
        close(ep->root_fd);
        umount2(ep->work_dir, MNT_DETACH); /* no mount outlives the server */
    }
    job_table_free(ep->jobs);
    ep_eval_deinit(&ep->evs);
    traj_close(ep->traj);
    idem_deinit(&ep->idem);
    json_decref(ep->options);
    json_decref(ep->tags);
    pthread_mutex_destroy(&ep->lock);
    free(ep);
}

episode *ep_get(ep_table *t, const char *id)
{
    pthread_mutex_lock(&t->lock);
    episode *found = NULL;
    for (bucket_node *n = t->buckets[id_hash(id) % EP_BUCKETS]; n && !found; n = n->next)
        if (strcmp(n->ep->id, id) == 0)
            found = n->ep;
    if (found)
        found->refs++;
    pthread_mutex_unlock(&t->lock);
    return found;
}

void ep_put(ep_table *t, episode *ep)
{
    if (!ep)
        return;
    pthread_mutex_lock(&t->lock);
    bool last = --ep->refs == 0 && !ep->in_table;
    pthread_mutex_unlock(&t->lock);
    if (last)
        episode_free(ep);
}

long ep_open_count(ep_table *t)
{
    return atomic_load(&t->open);
}

json_t *ep_uids_json(ep_table *t)
{
    return uid_pool_json(&t->uids);
}

/* mkdir -p: the state dir may be a fresh path several levels deep. */
static int make_dirs(const char *path)
{
    char buf[600];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static uint64_t random_u64(void);

ep_table *ep_table_new(const server_config *cfg, const task_store *tasks, const ws_template *tpl,
                       char *err, size_t errcap)
{
    ep_table *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    t->buckets = calloc(EP_BUCKETS, sizeof *t->buckets);
    if (!t->buckets) {
        snprintf(err, errcap, "out of memory");
        free(t);
        return NULL;
    }
    t->cfg = cfg;
    t->tasks = tasks;
    t->tpl = tpl;
    /* Its own block of the uid range, so that two servers on one host (a user's and
     * kgym-bench's private one) never give two episodes one uid. */
    if (uid_pool_init(&t->uids, (uid_t)cfg->sandbox_uid_base,
                      cfg->sandbox_uid_lock_dir[0] ? cfg->sandbox_uid_lock_dir : NULL, err,
                      errcap) != 0) {
        free(t->buckets);
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    snprintf(t->episodes_dir, sizeof t->episodes_dir, "%s/episodes", cfg->state_dir);
    char abs[PATH_MAX];
    if (make_dirs(t->episodes_dir) != 0 || !realpath(t->episodes_dir, abs) ||
        strlen(abs) >= sizeof t->episodes_dir) {
        snprintf(err, errcap, "cannot create state dir %s: %s", t->episodes_dir, strerror(errno));
        pthread_mutex_destroy(&t->lock);
        uid_pool_deinit(&t->uids);
        free(t->buckets);
        free(t);
        return NULL;
    }
    /* Absolute: the sandbox launcher binds the workspace by this path and runs from "/". */
    memcpy(t->episodes_dir, abs, strlen(abs) + 1); /* fits: checked above */
    return t;
}

void ep_table_free(ep_table *t)
{
    if (!t)
        return;
    for (size_t b = 0; b < EP_BUCKETS; b++) {
        while (t->buckets[b]) {
            bucket_node *n = t->buckets[b];
            t->buckets[b] = n->next;
            free(n);
        }
    }
    for (size_t i = 0; i < t->n_all; i++)
        episode_free(t->all[i]);
    free(t->all);
    free(t->buckets);
    uid_pool_deinit(&t->uids);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* ---- persistence ------------------------------------------------------------------------- */

void ep_trajectory_path(const episode *ep, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/trajectory.jsonl", ep->dir);
}

int ep_record(episode *ep, json_t *record, api_error *e)
{
    char err[256];
    json_object_set_new(record, "ts", json_real(ep_now()));
    if (!ep->traj || traj_append(ep->traj, record, err, sizeof err) != 0) {
        api_error_set(e, 500, "TRAJECTORY_WRITE_FAILED", true, "%s",
                      ep->traj ? err : "trajectory not open");
        return -1;
    }
    return 0;
}

/* ---- parameters -------------------------------------------------------------------------- */

static const char *const OPTION_KEYS[] = {"max_steps", "max_wall_s", "idle_timeout_s", "variant",
                                          "reward_on", "mode",       "reward"};

static int check_option(const char *key, const json_t *v, api_error *e)
{
    if (strcmp(key, "max_steps") == 0 &&
        !(json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 100000))
        goto bad;
    if ((strcmp(key, "max_wall_s") == 0 || strcmp(key, "idle_timeout_s") == 0) &&
        !(json_is_number(v) && json_number_value(v) > 0 && json_number_value(v) <= 30 * 86400))
        goto bad;
    if (strcmp(key, "variant") == 0 &&
        !(json_is_string(v) &&
          (strcmp(json_string_value(v), "gpu") == 0 || strcmp(json_string_value(v), "cpu") == 0)))
        goto bad;
    if (strcmp(key, "reward_on") == 0 &&
        !(json_is_string(v) && (strcmp(json_string_value(v), "best") == 0 ||
                                strcmp(json_string_value(v), "final") == 0)))
        goto bad;
    reward_mode rm;
    if (strcmp(key, "reward") == 0 &&
        !(json_is_string(v) && reward_mode_parse(json_string_value(v), &rm) == 0))
        goto bad;
    if (strcmp(key, "mode") == 0 &&
        !(json_is_string(v) && (strcmp(json_string_value(v), "agentic") == 0 ||
                                strcmp(json_string_value(v), "single_turn") == 0)))
        goto bad;
    return 0;
bad:
    api_error_set(e, 422, "VALIDATION_ERROR", false, "option '%s' has an invalid value", key);
    e->details = json_pack("{s:s}", "option", key);
    return -1;
}

static int check_options(const json_t *options, api_error *e)
{
    if (!options || json_is_null(options))
        return 0;
    if (!json_is_object(options)) {
        api_error_set(e, 422, "VALIDATION_ERROR", false, "options must be an object");
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)options, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof OPTION_KEYS / sizeof OPTION_KEYS[0]; i++)
            known = known || strcmp(OPTION_KEYS[i], key) == 0;
        if (!known) {
            api_error_set(e, 422, "VALIDATION_ERROR", false,
                          "unknown option '%s' (known: max_steps, max_wall_s, idle_timeout_s, "
                          "variant, reward_on, mode, reward)",
                          key);
            return -1;
        }
        if (check_option(key, v, e) != 0)
            return -1;
    }
    return 0;
}

int ep_parse_params(const json_t *body, ep_params *p, api_error *e)
{
    memset(p, 0, sizeof *p);
    if (!body || json_is_null(body))
        return 0;
    if (!json_is_object(body)) {
        api_error_set(e, 400, "BAD_REQUEST", false, "the request body must be a JSON object");
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v)
    {
        if (strcmp(key, "task_id") == 0 && (json_is_string(v) || json_is_null(v))) {
            p->task_id = json_string_value(v);
        } else if (strcmp(key, "seed") == 0 && json_is_integer(v) && json_integer_value(v) >= 0) {
            p->has_seed = true;
            p->seed = (uint64_t)json_integer_value(v);
        } else if (strcmp(key, "seed") == 0 && json_is_null(v)) {
            p->has_seed = false;
        } else if (strcmp(key, "options") == 0) {
            if (check_options(v, e) != 0)
                return -1;
            p->options = json_is_object(v) ? v : NULL;
        } else if (strcmp(key, "tags") == 0 && (json_is_object(v) || json_is_null(v))) {
            p->tags = json_is_object(v) ? v : NULL;
        } else {
            api_error_set(e, 422, "VALIDATION_ERROR", false,
                          "field '%s' is unknown or has the wrong type (expected task_id: "
                          "string, seed: integer >= 0, options: object, tags: object)",
                          key);
            return -1;
        }
    }
    return 0;
}

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = (uint64_t)ts.tv_nsec * 6364136223846793005ull ^ (uint64_t)getpid();
    }
    return v;
}

/* ---- workspace set-up -------------------------------------------------------------------- */

static double opt_number(const json_t *options, const char *key, double dflt)
{
    const json_t *v = options ? json_object_get(options, key) : NULL;
    return v ? json_number_value(v) : dflt;
}

/* The first observation: what the agent is asked to do, in the text it reads first. */
static json_t *reset_observation(const ep_table *t, const episode *ep, const char *code)
{
    const task *tk = ep->task;
    char *content = NULL;
    if (asprintf(&content,
                 "Task %s: %s\n\n"
                 "Your workspace is /workspace. Read /workspace/SKILL.md first: it explains the "
                 "workflow, the tools and the rules.\nMake ModelNew in /workspace/model_new.py "
                 "compute what Model in /workspace/model.py computes, faster, using your own "
                 "CUDA kernels in /workspace/kernels/.\n\nThe reference, /workspace/model.py:\n"
                 "```python\n%s\n```\n",
                 tk->id, tk->description[0] ? tk->description : tk->name, code) < 0)
        content = NULL;
    json_t *obs = json_pack("{s:s, s:b, s:{s:s, s:s, s:s, s:o}}", "content", content ? content : "",
                            "is_error", 0, "data", "task_id", tk->id, "workdir", WS_VIRTUAL_ROOT,
                            "variant", ep->variant, "files", ws_template_file_list(t->tpl));
    free(content);
    return obs;
}

static json_t *reset_info(const episode *ep, double reset_ms)
{
    char expires[32];
    ep_iso_time(ep->last_active + ep->idle_timeout_s, expires);
    return json_pack("{s:s, s:I, s:i, s:i, s:s, s:{s:f}}", "task_id", ep->task_id, "seed",
                     (json_int_t)ep->seed, "step", 0, "max_steps", ep->max_steps, "expires_at",
                     expires, "timing", "reset_ms", reset_ms);
}

/* Removes a workspace, the tmpfs it may be mounted on first. */
static void remove_workspace_dir(const episode *ep)
{
    umount2(ep->work_dir, MNT_DETACH); /* EINVAL when it is a plain directory: fine */
    ws_remove_tree(ep->work_dir);
}

/* A sandboxed episode's workspace is a tmpfs of exactly its quota: the kernel then stops a
 * command that fills it (ENOSPC), counting every block (fallocate too) and inode, instead of the
 * server noticing after the fact. Its pages are charged to the memory cgroup of whoever writes
 * them. Unsandboxed episodes use a plain directory. */
static int make_workspace_dir(const ep_table *t, const episode *ep, char *err, size_t errcap)
{
    remove_workspace_dir(ep);
    if (!ep->sandbox || !t->cfg->workspace_tmpfs)
        return 0; /* ws_create makes the directory */
    char data[96];
    snprintf(data, sizeof data, "size=%llu,nr_inodes=%d,mode=1777",
             (unsigned long long)ep->limits.disk_quota_bytes, t->cfg->workspace_max_inodes);
    if (mkdir(ep->work_dir, 01777) != 0 ||
        mount("tmpfs", ep->work_dir, "tmpfs", MS_NOSUID | MS_NODEV, data) != 0) {
        snprintf(err, errcap, "cannot mount the workspace tmpfs: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Creates the workspace and resets counters; the episode lock is held or the episode is new. */
static int setup_workspace(ep_table *t, episode *ep, const task *tk, const ep_params *p,
                           api_error *e)
{
    char err[512];
    const char *variant = "gpu";
    const json_t *opts = p->options ? p->options : ep->options;
    if (opts && json_object_get(opts, "variant"))
        variant = json_string_value(json_object_get(opts, "variant"));
    const char *code = tk->code;
    /* KernelBench defines no CPU sizes: its tasks run on the CPU as written (few are small
     * enough; tests/kgym_bench/find_cpu_tasks.py lists them). Other tasks without a CPU-sized
     * variant are refused, so a GPU-sized task never lands on a CPU by accident. */
    bool as_written = tk->suite && strcmp(tk->suite, "kernelbench") == 0;
    if (strcmp(variant, "cpu") == 0 && !(as_written && !tk->code_cpu)) {
        if (!tk->code_cpu) {
            api_error_set(e, 422, "VALIDATION_ERROR", false, "task %s has no CPU-sized variant",
                          tk->id);
            return -1;
        }
        code = tk->code_cpu;
    }
    if (make_workspace_dir(t, ep, err, sizeof err) != 0 ||
        ws_create(t->tpl, ep->work_dir, code, strlen(code), ep->sandbox ? &ep->owner : NULL, err,
                  sizeof err) != 0) {
        api_error_set(e, 500, "WORKSPACE_FAILED", true, "%s", err);
        return -1;
    }
    int fd = open(ep->work_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        api_error_set(e, 500, "WORKSPACE_FAILED", true, "cannot open workspace: %s",
                      strerror(errno));
        return -1;
    }
    pthread_mutex_lock(&ep->lock); /* root_fd is read under the lock by file downloads */
    if (ep->root_fd >= 0)
        close(ep->root_fd);
    ep->root_fd = fd;
    pthread_mutex_unlock(&ep->lock);
    ep->task = tk;
    snprintf(ep->task_id, sizeof ep->task_id, "%s", tk->id);
    snprintf(ep->variant, sizeof ep->variant, "%s", variant);
    ep->seed = p->has_seed ? p->seed : random_u64() >> 1;
    ep->step = 0;
    ep->total_reward = 0;
    ep->usage.known = false; /* a fresh workspace: measured on the first write */
    ep->max_steps = (int)opt_number(opts, "max_steps", t->cfg->max_steps);
    ep->max_wall_s = opt_number(opts, "max_wall_s", t->cfg->max_wall_s);
    ep->idle_timeout_s = opt_number(opts, "idle_timeout_s", t->cfg->idle_timeout_s);
    ep->reset_at = ep->last_active = ep_now();
    return 0;
}

static const task *pick_task(const ep_table *t, const char *task_id, const task *current,
                             api_error *e)
{
    const task *tk = task_id ? task_store_find(t->tasks, task_id)
                             : (current ? current : task_store_at(t->tasks, 0));
    if (!tk) {
        if (task_id)
            api_error_set(e, 404, "TASK_NOT_FOUND", false, "no task with id '%s'", task_id);
        else
            api_error_set(e, 404, "TASK_NOT_FOUND", false, "the server has no tasks loaded");
    }
    return tk;
}

/* Writes the reset record (durable before the reply) and builds the reset response. The
 * trajectory is the episode's only persistent state: recovery reads it back. */
static int finish_reset(ep_table *t, episode *ep, double t0, bool created, json_t **reset_out,
                        api_error *e)
{
    const char *code = strcmp(ep->variant, "cpu") == 0 ? ep->task->code_cpu : ep->task->code;
    double setup_ms = (ep_now() - t0) * 1000.0;
    json_t *obs = reset_observation(t, ep, code);
    json_t *info = reset_info(ep, setup_ms);
    json_t *rec =
        json_pack("{s:s, s:s, s:s, s:I, s:s, s:f, s:O?, s:O?, s:O, s:O}", "type", "reset",
                  "episode_id", ep->id, "task_id", ep->task_id, "seed", (json_int_t)ep->seed,
                  "variant", ep->variant, "created_unix", ep->created_at, "options", ep->options,
                  "tags", ep->tags, "observation", obs, "info", info);
    int rc = ep_record(ep, rec, e);
    json_decref(rec);
    /* A new trajectory file is durable only once the directories naming it are. */
    if (rc == 0 && created && t->cfg->durability == DURABILITY_FSYNC &&
        (fsync_dir(ep->dir) != 0 || fsync_dir(t->episodes_dir) != 0)) {
        api_error_set(e, 500, "STATE_WRITE_FAILED", true, "cannot sync the state directory");
        rc = -1;
    }
    if (rc != 0) {
        json_decref(obs);
        json_decref(info);
        return -1;
    }
    double reset_ms = (ep_now() - t0) * 1000.0;
    json_object_set_new(json_object_get(info, "timing"), "reset_ms", json_real(reset_ms));
    json_object_set_new(json_object_get(info, "timing"), "setup_ms", json_real(setup_ms));
    *reset_out =
        json_pack("{s:s, s:o, s:o}", "episode_id", ep->id, "observation", obs, "info", info);
    if (t->metrics)
        metrics_reset(t->metrics, reset_ms / 1000.0);
    return 0;
}

static episode *episode_alloc(ep_table *t)
{
    episode *ep = calloc(1, sizeof *ep);
    if (!ep)
        return NULL;
    uint64_t r = random_u64();
    snprintf(ep->id, sizeof ep->id, "ep_%016" PRIx64, r);
    snprintf(ep->dir, sizeof ep->dir, "%s/%s", t->episodes_dir, ep->id);
    snprintf(ep->work_dir, sizeof ep->work_dir, "%s/work", ep->dir);
    pthread_mutex_init(&ep->lock, NULL);
    ep->root_fd = -1;
    ep->limits = t->cfg->limits;
    ep->sandbox = sandbox_active(t) ? t->sandbox : NULL;
    ep_eval_init(&ep->evs, ep->dir);
    ep->eval = t->eval;
    idem_init(&ep->idem, IDEM_DEFAULT_SLOTS);
    return ep;
}

/* Its own uid, so no episode can read another's files even if a path leaked; 503 when every uid
 * of the server's block is held (only when max_episodes exceeds the block). */
static int take_uid(ep_table *t, episode *ep, api_error *e)
{
    uid_t uid;
    if (uid_pool_take(&t->uids, &uid) != 0) {
        api_error_set(e, 503, "CAPACITY_REACHED", true,
                      "every sandbox uid of this server is held by an open episode");
        e->retry_after_s = t->cfg->retry_after_s;
        return -1;
    }
    ep->owner.uid = uid;
    ep->owner.gid = (gid_t)uid;
    return 0;
}

/* Gives the uid back once nothing of the episode runs. Its owner becomes root, which no
 * sandbox runs as: a late use fails instead of acting as the uid's next holder. */
static void give_uid(ep_table *t, episode *ep)
{
    uid_pool_give(&t->uids, ep->owner.uid);
    ep->owner.uid = 0;
    ep->owner.gid = 0;
}

/* Takes a capacity slot, or fails with 429. */
static int take_slot(ep_table *t, api_error *e)
{
    long open = atomic_fetch_add(&t->open, 1);
    if (open >= t->cfg->max_episodes) {
        atomic_fetch_sub(&t->open, 1);
        api_error_set(e, 429, "CAPACITY_REACHED", true,
                      "the server has %ld open episodes, its maximum; close one or retry later",
                      open);
        e->retry_after_s = t->cfg->retry_after_s;
        e->details =
            json_pack("{s:I, s:i}", "active", (json_int_t)open, "max", t->cfg->max_episodes);
        return -1;
    }
    return 0;
}

static int open_episode_files(ep_table *t, episode *ep, api_error *e)
{
    char err[512], path[700], jobs_dir[700];
    if (mkdir(ep->dir, 0700) != 0) {
        api_error_set(e, 500, "STATE_WRITE_FAILED", true, "cannot create %s: %s", ep->dir,
                      strerror(errno));
        return -1;
    }
    ep_trajectory_path(ep, path, sizeof path);
    ep->traj = traj_open(path, t->cfg->durability, err, sizeof err);
    snprintf(jobs_dir, sizeof jobs_dir, "%s/jobs", ep->dir);
    ep->jobs = job_table_new(jobs_dir, ep->limits.max_background_jobs);
    if (!ep->traj || !ep->jobs) {
        api_error_set(e, 500, "STATE_WRITE_FAILED", true, "%s",
                      ep->traj ? "cannot create the job table" : err);
        return -1;
    }
    return 0;
}

int ep_create(ep_table *t, const ep_params *p, episode **out, json_t **reset_out, api_error *e)
{
    double t0 = ep_now();
    const task *tk = pick_task(t, p->task_id, NULL, e);
    if (!tk || take_slot(t, e) != 0)
        return -1;
    episode *ep = episode_alloc(t);
    if (!ep) {
        atomic_fetch_sub(&t->open, 1);
        api_error_set(e, 500, "INTERNAL", true, "out of memory");
        return -1;
    }
    if (take_uid(t, ep, e) != 0) {
        episode_free(ep);
        atomic_fetch_sub(&t->open, 1);
        return -1;
    }
    ep->options = p->options ? json_incref(p->options) : NULL;
    ep->tags = p->tags ? json_incref(p->tags) : NULL;
    ep->created_at = t0;
    ep->status = EP_ACTIVE;
    if (open_episode_files(t, ep, e) != 0 || setup_workspace(t, ep, tk, p, e) != 0 ||
        finish_reset(t, ep, t0, true, reset_out, e) != 0) {
        remove_workspace_dir(ep); /* its tmpfs first, or the tree cannot go */
        ws_remove_tree(ep->dir);
        give_uid(t, ep);
        episode_free(ep);
        atomic_fetch_sub(&t->open, 1);
        return -1;
    }
    pthread_mutex_lock(&t->lock);
    table_insert_locked(t, ep);
    ep->refs = 1;
    pthread_mutex_unlock(&t->lock);
    *out = ep;
    return 0;
}

/* Status checks shared by step and reset: a closed/expired/ended episode is gone (410). */
static int check_not_gone(const episode *ep, api_error *e)
{
    if (ep->status == EP_CLOSED) {
        api_error_set(e, 410, "EPISODE_CLOSED", false, "episode %s was closed", ep->id);
        return -1;
    }
    if (ep->status == EP_EXPIRED) {
        api_error_set(e, 410, "EPISODE_EXPIRED", false,
                      "episode %s expired after %.0f s idle; create a new one", ep->id,
                      ep->idle_timeout_s);
        return -1;
    }
    if (ep->status == EP_ENDED) {
        api_error_set(e, 410, "EPISODE_ENDED", false,
                      "episode %s ended when the server restarted; its trajectory is kept", ep->id);
        return -1;
    }
    return 0;
}

static int check_not_busy(const episode *ep, api_error *e)
{
    if (ep->busy) {
        api_error_set(e, 409, "EPISODE_BUSY", true,
                      "episode %s has a request in flight; one at a time", ep->id);
        return -1;
    }
    return 0;
}

int ep_reset(ep_table *t, episode *ep, const ep_params *p, json_t **reset_out, api_error *e)
{
    double t0 = ep_now();
    pthread_mutex_lock(&ep->lock);
    int rc = check_not_gone(ep, e) ? -1 : check_not_busy(ep, e);
    const task *tk = rc ? NULL : pick_task(t, p->task_id, ep->task, e);
    if (!tk) {
        pthread_mutex_unlock(&ep->lock);
        return -1;
    }
    ep->busy = true;
    pthread_mutex_unlock(&ep->lock);

    /* The old jobs die with the old workspace, its builds and snapshots are forgotten. */
    job_table_free(ep->jobs);
    ep_eval_reset(&ep->evs);
    char jobs_dir[700];
    snprintf(jobs_dir, sizeof jobs_dir, "%s/jobs", ep->dir);
    ep->jobs = job_table_new(jobs_dir, ep->limits.max_background_jobs);
    /* State readers take these under the lock (and incref them): swap them under it too. */
    json_t *old_options = NULL, *old_tags = NULL;
    pthread_mutex_lock(&ep->lock);
    if (p->options) {
        old_options = ep->options;
        ep->options = json_incref(p->options);
    }
    if (p->tags) {
        old_tags = ep->tags;
        ep->tags = json_incref(p->tags);
    }
    pthread_mutex_unlock(&ep->lock);
    json_decref(old_options);
    json_decref(old_tags);
    rc = setup_workspace(t, ep, tk, p, e);
    if (rc == 0) {
        ep->status = EP_ACTIVE;
        rc = finish_reset(t, ep, t0, false, reset_out, e);
    }
    pthread_mutex_lock(&ep->lock);
    ep->busy = false;
    ep->last_active = ep_now();
    pthread_mutex_unlock(&ep->lock);
    return rc;
}

/* Frees what an open episode holds: jobs, the workspace fd and files. Lock not held. */
static void release_workspace(ep_table *t, episode *ep)
{
    job_table_free(ep->jobs);
    ep->jobs = NULL;
    pthread_mutex_lock(&ep->lock);
    if (ep->root_fd >= 0)
        close(ep->root_fd);
    ep->root_fd = -1;
    pthread_mutex_unlock(&ep->lock);
    remove_workspace_dir(ep);
    char jobs_dir[700];
    snprintf(jobs_dir, sizeof jobs_dir, "%s/jobs", ep->dir);
    ws_remove_tree(jobs_dir);
    give_uid(t, ep);
    atomic_fetch_sub(&t->open, 1);
}

/* Moves an open episode to a final status (closed/expired), durably. Caller made it busy. */
static void finish_episode(ep_table *t, episode *ep, ep_status status, const char *reason)
{
    api_error ignored = {0};
    release_workspace(t, ep);
    ep->status = status;
    json_t *rec = json_pack("{s:s, s:s}", "type", "close", "reason", reason);
    ep_record(ep, rec, &ignored);
    json_decref(rec);
    json_decref(ignored.details);
    /* Nothing more is written to a closed trajectory: give its fd back (thousands of closed
     * episodes must not exhaust the server's descriptors). */
    traj_close(ep->traj);
    ep->traj = NULL;
    if (t->metrics)
        metrics_episode_end(t->metrics, reason);
}

int ep_close(ep_table *t, episode *ep, bool purge, api_error *e)
{
    pthread_mutex_lock(&ep->lock);
    if (check_not_busy(ep, e) != 0) {
        pthread_mutex_unlock(&ep->lock);
        return -1;
    }
    bool open = has_workspace(ep->status);
    ep->busy = true;
    pthread_mutex_unlock(&ep->lock);

    if (open)
        finish_episode(t, ep, EP_CLOSED, "closed");
    if (purge) {
        traj_close(ep->traj);
        ep->traj = NULL;
        ws_remove_tree(ep->dir);
        if (t->metrics)
            metrics_episode_end(t->metrics, "purged");
        pthread_mutex_lock(&t->lock);
        if (ep->in_table)
            table_remove_locked(t, ep);
        pthread_mutex_unlock(&t->lock);
    }
    pthread_mutex_lock(&ep->lock);
    ep->busy = false;
    pthread_mutex_unlock(&ep->lock);
    return 0;
}

int ep_begin_step(episode *ep, api_error *e)
{
    pthread_mutex_lock(&ep->lock);
    int rc = check_not_gone(ep, e);
    if (rc == 0 && (ep->status == EP_TERMINATED || ep->status == EP_TRUNCATED)) {
        api_error_set(e, 409, "EPISODE_TERMINATED", false,
                      "episode %s is %s; reset it or delete it", ep->id,
                      ep_status_name(ep->status));
        rc = -1;
    }
    if (rc == 0)
        rc = check_not_busy(ep, e);
    if (rc == 0)
        ep->busy = true;
    pthread_mutex_unlock(&ep->lock);
    return rc;
}

void ep_end_step(episode *ep)
{
    pthread_mutex_lock(&ep->lock);
    ep->busy = false;
    ep->last_active = ep_now();
    pthread_mutex_unlock(&ep->lock);
}

void ep_tool_env(episode *ep, tool_env *env)
{
    env->root_fd = ep->root_fd;
    env->root_path = ep->work_dir;
    env->episode_dir = ep->dir;
    env->limits = &ep->limits;
    env->jobs = ep->jobs;
    env->usage = &ep->usage;
    env->owner = ep->sandbox ? &ep->owner : NULL;
    env->sandbox = ep->sandbox;
    env->eval = ep->task ? ep->eval : NULL;
    env->evs = &ep->evs;
    env->task = ep->task;
    env->cpu_variant = strcmp(ep->variant, "cpu") == 0;
    env->episode_id = ep->id;
    env->eval_seed = random_u64();
    env->reward_mode = json_string_value(json_object_get(ep->options, "reward"));
    env->reward_on = json_string_value(json_object_get(ep->options, "reward_on"));
}

void ep_mark_done(ep_table *t, episode *ep, ep_status status)
{
    pthread_mutex_lock(&ep->lock);
    ep->status = status; /* the step record that ended it says so durably */
    pthread_mutex_unlock(&ep->lock);
    if (t->metrics)
        metrics_episode_end(t->metrics, ep_status_name(status));
}

/* ---- views ------------------------------------------------------------------------------- */

json_t *ep_state_json(episode *ep)
{
    pthread_mutex_lock(&ep->lock);
    char created[32], reset[32], expires[32], active[32];
    ep_iso_time(ep->created_at, created);
    ep_iso_time(ep->reset_at, reset);
    ep_iso_time(ep->last_active, active);
    ep_iso_time(ep->last_active + ep->idle_timeout_s, expires);
    bool open = has_workspace(ep->status);
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:I, s:i, s:i, s:b, s:b, s:b, s:s, s:s, s:s, s:s?, s:f, s:O?, s:O?}",
        "episode_id", ep->id, "status", ep_status_name(ep->status), "task_id", ep->task_id, "seed",
        (json_int_t)ep->seed, "step", ep->step, "max_steps", ep->max_steps, "terminated",
        ep->status == EP_TERMINATED, "truncated", ep->status == EP_TRUNCATED, "busy", ep->busy,
        "created_at", created, "reset_at", reset, "last_active_at", active, "expires_at",
        open ? expires : NULL, "total_reward", ep->total_reward, "options", ep->options, "tags",
        ep->tags);
    pthread_mutex_unlock(&ep->lock);
    return j;
}

json_t *ep_list_json(ep_table *t, const char *status_filter)
{
    /* Take references under the table lock, build JSON outside it. */
    pthread_mutex_lock(&t->lock);
    size_t n = t->n_all;
    episode **snap = malloc((n ? n : 1) * sizeof *snap);
    for (size_t i = 0; snap && i < n; i++) {
        snap[i] = t->all[i];
        snap[i]->refs++;
    }
    pthread_mutex_unlock(&t->lock);
    json_t *list = json_array();
    for (size_t i = 0; snap && i < n; i++) {
        json_t *s = ep_state_json(snap[i]);
        const char *st = json_string_value(json_object_get(s, "status"));
        if (!status_filter || strcmp(status_filter, st) == 0)
            json_array_append(list, s);
        json_decref(s);
        ep_put(t, snap[i]);
    }
    free(snap);
    return list;
}

/* ---- reaper and recovery ----------------------------------------------------------------- */

int ep_reap_idle(ep_table *t, double now)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->n_all;
    episode **snap = malloc((n ? n : 1) * sizeof *snap);
    for (size_t i = 0; snap && i < n; i++) {
        snap[i] = t->all[i];
        snap[i]->refs++;
    }
    pthread_mutex_unlock(&t->lock);
    int reaped = 0;
    for (size_t i = 0; snap && i < n; i++) {
        episode *ep = snap[i];
        pthread_mutex_lock(&ep->lock);
        bool due = has_workspace(ep->status) && !ep->busy && ep->idle_timeout_s > 0 &&
                   now - ep->last_active > ep->idle_timeout_s;
        if (due)
            ep->busy = true;
        else if (has_workspace(ep->status) && !ep->busy && ep->jobs)
            job_table_reap(ep->jobs); /* ended jobs reaped, overdue ones killed, promptly */
        pthread_mutex_unlock(&ep->lock);
        if (due) {
            finish_episode(t, ep, EP_EXPIRED, "reaped");
            pthread_mutex_lock(&ep->lock);
            ep->busy = false;
            pthread_mutex_unlock(&ep->lock);
            reaped++;
        }
        ep_put(t, ep);
    }
    free(snap);
    return reaped;
}

/* What a trajectory says about its episode: the last reset, the steps since, how it ended. */
typedef struct traj_summary {
    json_t *reset;     /* the last reset record (owned) */
    int steps;         /* step records since it */
    const char *ended; /* "closed", "expired" or NULL (still open when the server stopped) */
} traj_summary;

static void summarize_line(traj_summary *s, const char *line, size_t len)
{
    json_t *rec = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(rec, "type"));
    if (type && strcmp(type, "reset") == 0) {
        json_decref(s->reset);
        s->reset = json_incref(rec);
        s->steps = 0;
        s->ended = NULL;
    } else if (type && strcmp(type, "step") == 0) {
        s->steps++;
    } else if (type && strcmp(type, "close") == 0) {
        const char *reason = json_string_value(json_object_get(rec, "reason"));
        s->ended = reason && strcmp(reason, "reaped") == 0 ? "expired" : "closed";
    }
    json_decref(rec);
}

static int summarize_trajectory(const char *path, traj_summary *s)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0)
        if (line[n - 1] == '\n') /* a torn last line was never acknowledged */
            summarize_line(s, line, (size_t)n);
    free(line);
    fclose(f);
    return s->reset ? 0 : -1;
}

/* Lists one episode a previous run left behind: closed and expired ones as they were, open
 * ones as ended. Its workspace and jobs are gone; its trajectory stays readable. */
static int recover_one(ep_table *t, const char *id)
{
    char path[700], err[256];
    snprintf(path, sizeof path, "%s/%s/trajectory.jsonl", t->episodes_dir, id);
    /* Opening cuts a torn last line; nothing more is written to this file. */
    traj_close(traj_open(path, DURABILITY_NONE, err, sizeof err));
    traj_summary sum = {0};
    episode *ep = summarize_trajectory(path, &sum) == 0 ? episode_alloc(t) : NULL;
    if (!ep) {
        json_decref(sum.reset);
        return -1;
    }
    const json_t *r = sum.reset;
    snprintf(ep->id, sizeof ep->id, "%s", id);
    snprintf(ep->dir, sizeof ep->dir, "%s/%s", t->episodes_dir, id);
    snprintf(ep->work_dir, sizeof ep->work_dir, "%s/work", ep->dir);
    const char *task_id = json_string_value(json_object_get(r, "task_id"));
    const char *variant = json_string_value(json_object_get(r, "variant"));
    snprintf(ep->task_id, sizeof ep->task_id, "%s", task_id ? task_id : "");
    snprintf(ep->variant, sizeof ep->variant, "%s", variant ? variant : "gpu");
    ep->seed = (uint64_t)json_integer_value(json_object_get(r, "seed"));
    ep->created_at = json_number_value(json_object_get(r, "created_unix"));
    ep->reset_at = ep->last_active = json_number_value(json_object_get(r, "ts"));
    ep->options = json_incref(json_object_get(r, "options"));
    ep->tags = json_incref(json_object_get(r, "tags"));
    ep->max_steps =
        (int)json_integer_value(json_object_get(json_object_get(r, "info"), "max_steps"));
    ep->step = sum.steps;
    ep->task = task_store_find(t->tasks, ep->task_id);
    ep->status = !sum.ended ? EP_ENDED : strcmp(sum.ended, "expired") == 0 ? EP_EXPIRED : EP_CLOSED;
    json_decref(sum.reset);
    remove_workspace_dir(ep); /* a tmpfs left mounted by a killed server too */
    snprintf(path, sizeof path, "%s/jobs", ep->dir);
    ws_remove_tree(path);
    pthread_mutex_lock(&t->lock);
    table_insert_locked(t, ep);
    pthread_mutex_unlock(&t->lock);
    return 0;
}

int ep_table_recover(ep_table *t, char *err, size_t errcap)
{
    DIR *d = opendir(t->episodes_dir);
    if (!d) {
        snprintf(err, errcap, "cannot read %s: %s", t->episodes_dir, strerror(errno));
        return -1;
    }
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "ep_", 3) != 0 || strlen(de->d_name) != EP_ID_LEN)
            continue;
        if (recover_one(t, de->d_name) == 0)
            found++;
    }
    closedir(d);
    return found;
}
