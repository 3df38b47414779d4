/* episode: the table of episodes and their lifecycle (create = Gym reset, reset in place,
 * close, purge, idle reaping, recovery after a restart).
 *
 * Locking: the table lock is held only to find, insert or remove an entry (never across I/O);
 * each episode has its own lock, held briefly to read or change its state. A step marks the
 * episode busy under its lock, then runs without it, so state reads never wait on a long tool
 * call and a second step gets 409 EPISODE_BUSY. Entries are reference-counted: ep_get() hands
 * out a reference that ep_put() returns, so a purge never frees an episode another thread holds. */
#ifndef KGYM_EPISODE_H
#define KGYM_EPISODE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "api.h"
#include "harness/eval.h"
#include "config.h"
#include "idem.h"
#include "task.h"
#include "tools/jobs.h"
#include "tools/tool.h"
#include "trajectory.h"
#include "workspace.h"
#include "wspath.h"

struct metrics;

#define EP_ID_LEN 19 /* "ep_" + 16 hex digits */

typedef enum ep_status {
    EP_ACTIVE,     /* steps accepted */
    EP_TERMINATED, /* the agent ended it (Submit): reset or delete */
    EP_TRUNCATED,  /* step or time limit reached: reset or delete */
    EP_CLOSED,     /* DELETEd: workspace freed, trajectory kept */
    EP_EXPIRED,    /* reaped after idle_timeout_s: workspace freed, trajectory kept */
    EP_ENDED,      /* found after a server restart: trajectory kept */
} ep_status;

const char *ep_status_name(ep_status s);

typedef struct episode {
    char id[EP_ID_LEN + 1];
    char dir[600];        /* <state>/episodes/<id> */
    char work_dir[640];   /* <dir>/work */
    pthread_mutex_t lock; /* guards every field below */
    int refs;             /* guarded by the table lock */
    bool in_table;        /* guarded by the table lock */
    ep_status status;
    bool busy;        /* a step, reset or close is running */
    const task *task; /* NULL for an episode recovered after a restart */
    char task_id[256];
    uint64_t seed;
    int step; /* turns since the last reset */
    int max_steps;
    double max_wall_s, idle_timeout_s;
    double created_at, reset_at, last_active; /* unix seconds */
    char variant[8];                          /* "gpu" or "cpu": which model.py the task gave */
    json_t *options;                          /* as given at create/reset */
    json_t *tags;
    int root_fd; /* workspace root (O_PATH), -1 when freed */
    tool_limits limits;
    job_table *jobs;
    tool_usage_cache usage;   /* the workspace's disk usage, between tool calls */
    ws_owner owner;           /* the episode's own uid and gid, used when sandboxed */
    struct sandbox *sandbox;  /* where its Bash runs; NULL: unsandboxed (weak mode) */
    ep_eval evs;              /* builds and evaluation snapshots (Compile, Verify, Profile) */
    struct eval_server *eval; /* where it evaluates; NULL: evaluation unavailable */
    trajectory *traj;
    idem_cache idem;
    double total_reward;
} episode;

typedef struct ep_table ep_table;

ep_table *ep_table_new(const server_config *cfg, const task_store *tasks, const ws_template *tpl,
                       char *err, size_t errcap);
/* Kills every job, frees every workspace's memory (files stay on disk), frees the table. */
void ep_table_free(ep_table *t);
/* Lists the episodes a previous run left in the state dir as ended (workspaces removed,
 * trajectories kept). Returns how many were found, or -1 with err filled. */
int ep_table_recover(ep_table *t, char *err, size_t errcap);

/* Parameters of a create or a reset, parsed from the request body. */
typedef struct ep_params {
    const char *task_id; /* NULL: the first task (create) or the same task (reset) */
    bool has_seed;
    uint64_t seed;
    json_t *options; /* borrowed; validated by ep_parse_params */
    json_t *tags;    /* borrowed */
} ep_params;

/* Parses {task_id?, seed?, options?, tags?} strictly (unknown keys and options are a 422). */
int ep_parse_params(const json_t *body, ep_params *p, api_error *e);

/* Creates an episode (fresh workspace, trajectory with its reset record). On success *out holds
 * a reference and *reset_info the reset's {observation, info}. */
int ep_create(ep_table *t, const ep_params *p, episode **out, json_t **reset_out, api_error *e);
/* Resets in place: a fresh workspace and counters under the same id. */
int ep_reset(ep_table *t, episode *ep, const ep_params *p, json_t **reset_out, api_error *e);
/* Closes (idempotent); purge also removes the trajectory and forgets the id. */
int ep_close(ep_table *t, episode *ep, bool purge, api_error *e);

/* Finds an episode and takes a reference; NULL if unknown (or purged). */
episode *ep_get(ep_table *t, const char *id);
void ep_put(ep_table *t, episode *ep);

/* Starts a step: checks the episode can take one (410 closed/expired/ended, 409 terminated or
 * busy) and marks it busy. */
int ep_begin_step(episode *ep, api_error *e);
/* Ends it: clears busy, refreshes the idle clock. */
void ep_end_step(episode *ep);
/* The tool environment of an episode (valid while it is busy). */
void ep_tool_env(episode *ep, tool_env *env);
/* Sets status to terminated/truncated and persists it. */
void ep_mark_done(ep_table *t, episode *ep, ep_status status);

/* Appends a trajectory record (durable before return). Caller holds the episode busy. */
int ep_record(episode *ep, json_t *record, api_error *e);

/* JSON views. */
json_t *ep_state_json(episode *ep);
json_t *ep_list_json(ep_table *t, const char *status_filter);
/* "2026-12-02T17:00:00Z" of a unix time, into buf (32 bytes). */
void ep_iso_time(double t, char *buf);
double ep_now(void);

/* Counts episodes holding a workspace (for capacity and health). */
long ep_open_count(ep_table *t);
/* The episodes' uids: {first, last, in_use, claimed, why_shared?} (sandbox/uidpool.h). */
json_t *ep_uids_json(ep_table *t);
/* Expires episodes idle longer than their idle_timeout_s; returns how many. */
int ep_reap_idle(ep_table *t, double now);
/* The trajectory file of an episode. */
void ep_trajectory_path(const episode *ep, char *buf, size_t cap);

/* Set by the server so lifecycle events reach /metrics. */
void ep_table_set_metrics(ep_table *t, struct metrics *m);
/* Set by the server: Compile, Verify, Profile and Submit evaluate here. */
void ep_table_set_eval(ep_table *t, struct eval_server *es);
/* Set by the server: Bash runs in this sandbox (when active) as each episode's own uid. */
struct sandbox;
void ep_table_set_sandbox(ep_table *t, struct sandbox *s);

#endif
