/* config: the server's settings, from built-in defaults, then a JSON file, then the CLI. */
#ifndef KGYM_CONFIG_H
#define KGYM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/tool.h"

#define CONFIG_MAX_SOURCES 16

typedef enum { DURABILITY_FSYNC, DURABILITY_NONE } durability_mode;

typedef struct server_config {
    char host[64];
    int port;
    char state_dir[512];
    char template_dir[512];
    /* Task stores, loaded in order: folders or JSONL files, and KernelBench checkouts/JSONL. */
    char *tasks[CONFIG_MAX_SOURCES];
    int n_tasks;
    char *kernelbench[CONFIG_MAX_SOURCES];
    int n_kernelbench;
    int max_episodes;
    int max_actions_per_turn;
    int max_steps;         /* default per episode (turns) */
    double max_wall_s;     /* default per episode */
    double idle_timeout_s; /* reaper: an episode idle this long expires (0 = never) */
    double reaper_interval_s;
    size_t max_body_bytes;  /* requests with a larger body get 413 */
    int retry_after_s;      /* advertised with 429 and 503 */
    double drain_timeout_s; /* SIGTERM: how long in-flight steps may take to finish */
    int connection_limit;
    durability_mode durability;
    bool log_requests;
    char sandbox_profiles[512];     /* sandbox profile directory */
    bool allow_weak_sandbox;        /* run tools unsandboxed when the host lacks a protection */
    int sandbox_uid_base;           /* episodes get uids base .. base + 59,999 */
    char sandbox_uid_lock_dir[256]; /* where servers claim blocks of that range ("" = none) */
    uint64_t sandbox_total_memory_bytes; /* all sandboxed commands together (0 = 75% of RAM) */
    uint64_t sandbox_total_pids;         /* all sandboxed commands together (0 = pid_max / 2) */
    char sandbox_python[512];            /* a Python shown to sandboxed commands ("" = none) */
    bool workspace_tmpfs;                /* sandboxed workspaces on a tmpfs of disk_quota_bytes */
    int workspace_max_inodes;            /* files + directories per tmpfs workspace */
    /* evaluation (Compile, Verify, Profile, Submit): the Python is sandbox_python */
    char harness_dir[512];          /* judge.py, runner.py, scan.py ("" = beside the binary) */
    char build_cache[512];          /* objects, PCH, baselines ("" = <state_dir>/cache) */
    uint64_t build_cache_max_bytes; /* the objects' cap, least recently used go (0 = none) */
    char gpus[128];                 /* "all", "none" or ordinals "0,2" */
    char cuda_arch[32];             /* "" = probed (sm_90a on Hopper) */
    int eval_timeout_s;
    tool_limits limits;
} server_config;

/* Fills cfg with the defaults (those of configs/server.json). */
void config_defaults(server_config *cfg);
/* Applies a JSON config file over cfg. Strict: an unknown key, a wrong type or an out-of-range
 * value is an error naming the key. Returns 0 or -1 with err filled. */
int config_load_file(server_config *cfg, const char *path, char *err, size_t errcap);
/* Adds a task source (kernelbench = false) or a KernelBench source. */
int config_add_source(server_config *cfg, bool kernelbench, const char *path, char *err,
                      size_t errcap);
void config_deinit(server_config *cfg);

#endif
