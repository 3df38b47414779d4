#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void config_defaults(server_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->host, sizeof cfg->host, "127.0.0.1");
    cfg->port = 8080;
    snprintf(cfg->state_dir, sizeof cfg->state_dir, "state");
    snprintf(cfg->template_dir, sizeof cfg->template_dir, "env/template");
    cfg->max_episodes = 1024;
    cfg->max_actions_per_turn = 16;
    cfg->max_steps = 200;
    cfg->max_wall_s = 4 * 3600;
    cfg->idle_timeout_s = 1800;
    cfg->reaper_interval_s = 1.0;
    cfg->max_body_bytes = 8u << 20;
    cfg->retry_after_s = 5;
    cfg->drain_timeout_s = 660;
    cfg->connection_limit = 4096;
    cfg->durability = DURABILITY_FSYNC;
    cfg->log_requests = true;
    snprintf(cfg->sandbox_profiles, sizeof cfg->sandbox_profiles, "sandbox_profiles");
    cfg->sandbox_uid_base = 200000;
    snprintf(cfg->sandbox_uid_lock_dir, sizeof cfg->sandbox_uid_lock_dir, "/run/kgym");
    cfg->workspace_tmpfs = true;
    cfg->workspace_max_inodes = 65536;
    snprintf(cfg->gpus, sizeof cfg->gpus, "all");
    cfg->eval_timeout_s = 900;
    cfg->build_cache_max_bytes = 20ull << 30;
    cfg->limits = (tool_limits){
        .disk_quota_bytes = 256ull << 20,
        .max_file_bytes = 8ull << 20,
        .max_output_chars = 30000,
        .bash_timeout_ms = 120000,
        .bash_timeout_max_ms = 600000,
        .bash_kill_grace_ms = 2000,
        .bash_mem_bytes = 8ull << 30,
        .bash_cpu_s = 1200,
        .bash_nproc = 0,
        .max_background_jobs = 4,
    };
}

int config_add_source(server_config *cfg, bool kernelbench, const char *path, char *err,
                      size_t errcap)
{
    char **list = kernelbench ? cfg->kernelbench : cfg->tasks;
    int *n = kernelbench ? &cfg->n_kernelbench : &cfg->n_tasks;
    if (*n >= CONFIG_MAX_SOURCES) {
        snprintf(err, errcap, "at most %d %s sources", CONFIG_MAX_SOURCES,
                 kernelbench ? "KernelBench" : "task");
        return -1;
    }
    list[(*n)++] = strdup(path);
    return 0;
}

void config_deinit(server_config *cfg)
{
    for (int i = 0; i < cfg->n_tasks; i++)
        free(cfg->tasks[i]);
    for (int i = 0; i < cfg->n_kernelbench; i++)
        free(cfg->kernelbench[i]);
    cfg->n_tasks = cfg->n_kernelbench = 0;
}

/* One config key: where it goes and which values it may take. */
typedef enum { K_INT, K_DOUBLE, K_BOOL, K_STR, K_U64, K_SIZE, K_SOURCES } key_kind;
typedef struct config_key {
    const char *name;
    key_kind kind;
    size_t offset;
    double min, max;
    size_t str_cap;
    bool kernelbench;
} config_key;

#define OFF(f) offsetof(server_config, f)
#define LIM(f) (offsetof(server_config, limits) + offsetof(tool_limits, f))
static const config_key KEYS[] = {
    {"host", K_STR, OFF(host), 0, 0, sizeof(((server_config *)0)->host), false},
    {"port", K_INT, OFF(port), 0, 65535, 0, false},
    {"state_dir", K_STR, OFF(state_dir), 0, 0, sizeof(((server_config *)0)->state_dir), false},
    {"template_dir", K_STR, OFF(template_dir), 0, 0, sizeof(((server_config *)0)->template_dir),
     false},
    {"tasks", K_SOURCES, 0, 0, 0, 0, false},
    {"kernelbench", K_SOURCES, 0, 0, 0, 0, true},
    {"max_episodes", K_INT, OFF(max_episodes), 1, 1000000, 0, false},
    {"max_actions_per_turn", K_INT, OFF(max_actions_per_turn), 1, 256, 0, false},
    {"max_steps", K_INT, OFF(max_steps), 1, 100000, 0, false},
    {"max_wall_s", K_DOUBLE, OFF(max_wall_s), 1, 30 * 86400, 0, false},
    {"idle_timeout_s", K_DOUBLE, OFF(idle_timeout_s), 0, 30 * 86400, 0, false},
    {"reaper_interval_s", K_DOUBLE, OFF(reaper_interval_s), 0.05, 3600, 0, false},
    {"max_body_bytes", K_SIZE, OFF(max_body_bytes), 1024, 1 << 30, 0, false},
    {"retry_after_s", K_INT, OFF(retry_after_s), 1, 3600, 0, false},
    {"drain_timeout_s", K_DOUBLE, OFF(drain_timeout_s), 0, 86400, 0, false},
    {"connection_limit", K_INT, OFF(connection_limit), 16, 1000000, 0, false},
    {"log_requests", K_BOOL, OFF(log_requests), 0, 0, 0, false},
    {"sandbox_profiles", K_STR, OFF(sandbox_profiles), 0, 0,
     sizeof(((server_config *)0)->sandbox_profiles), false},
    {"allow_weak_sandbox", K_BOOL, OFF(allow_weak_sandbox), 0, 0, 0, false},
    {"sandbox_uid_base", K_INT, OFF(sandbox_uid_base), 1000, 2000000000, 0, false},
    {"sandbox_total_memory_bytes", K_U64, OFF(sandbox_total_memory_bytes), 0, 1e15, 0, false},
    {"sandbox_total_pids", K_U64, OFF(sandbox_total_pids), 0, 4194304, 0, false},
    {"sandbox_uid_lock_dir", K_STR, OFF(sandbox_uid_lock_dir), 0, 0,
     sizeof(((server_config *)0)->sandbox_uid_lock_dir), false},
    {"workspace_tmpfs", K_BOOL, OFF(workspace_tmpfs), 0, 0, 0, false},
    {"sandbox_python", K_STR, OFF(sandbox_python), 0, 0,
     sizeof(((server_config *)0)->sandbox_python), false},
    {"workspace_max_inodes", K_INT, OFF(workspace_max_inodes), 64, 100000000, 0, false},
    {"build_cache_max_bytes", K_U64, OFF(build_cache_max_bytes), 0, 1e15, 0, false},
    {"disk_quota_bytes", K_U64, LIM(disk_quota_bytes), 4096, 1e15, 0, false},
    {"max_file_bytes", K_U64, LIM(max_file_bytes), 1024, 1e12, 0, false},
    {"max_output_chars", K_SIZE, LIM(max_output_chars), 256, 1 << 30, 0, false},
    {"bash_timeout_ms", K_INT, LIM(bash_timeout_ms), 1, 86400000, 0, false},
    {"bash_timeout_max_ms", K_INT, LIM(bash_timeout_max_ms), 1, 86400000, 0, false},
    {"bash_kill_grace_ms", K_INT, LIM(bash_kill_grace_ms), 0, 600000, 0, false},
    {"bash_mem_bytes", K_U64, LIM(bash_mem_bytes), 0, 1e15, 0, false},
    {"bash_cpu_s", K_INT, LIM(bash_cpu_s), 0, 86400 * 30, 0, false},
    {"bash_nproc", K_INT, LIM(bash_nproc), 0, 1000000, 0, false},
    {"max_background_jobs", K_INT, LIM(max_background_jobs), 0, 1024, 0, false},
};

static const config_key *find_key(const char *name)
{
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++)
        if (strcmp(KEYS[i].name, name) == 0)
            return &KEYS[i];
    return NULL;
}

static int set_sources(server_config *cfg, const config_key *k, json_t *v, char *err, size_t errcap)
{
    if (!json_is_array(v)) {
        snprintf(err, errcap, "config key '%s' must be an array of paths", k->name);
        return -1;
    }
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p)
    {
        if (!json_is_string(p)) {
            snprintf(err, errcap, "config key '%s'[%zu] must be a string", k->name, i);
            return -1;
        }
        if (config_add_source(cfg, k->kernelbench, json_string_value(p), err, errcap) != 0)
            return -1;
    }
    return 0;
}

static int set_key(server_config *cfg, const config_key *k, json_t *v, char *err, size_t errcap)
{
    char *base = (char *)cfg + k->offset;
    if (k->kind == K_SOURCES)
        return set_sources(cfg, k, v, err, errcap);
    if (k->kind == K_BOOL) {
        if (!json_is_boolean(v))
            goto wrong_type;
        *(bool *)base = json_is_true(v);
        return 0;
    }
    if (k->kind == K_STR) {
        if (!json_is_string(v))
            goto wrong_type;
        if (json_string_length(v) >= k->str_cap) {
            snprintf(err, errcap, "config key '%s' is too long (at most %zu bytes)", k->name,
                     k->str_cap - 1);
            return -1;
        }
        memcpy(base, json_string_value(v), json_string_length(v) + 1);
        return 0;
    }
    if (!json_is_number(v) || (k->kind != K_DOUBLE && !json_is_integer(v)))
        goto wrong_type;
    double d = json_number_value(v);
    if (d < k->min || d > k->max) {
        snprintf(err, errcap, "config key '%s' = %g is out of range [%g, %g]", k->name, d, k->min,
                 k->max);
        return -1;
    }
    switch (k->kind) {
    case K_INT:
        *(int *)base = (int)json_integer_value(v);
        break;
    case K_DOUBLE:
        *(double *)base = d;
        break;
    case K_U64:
        *(unsigned long long *)base = (unsigned long long)json_integer_value(v);
        break;
    case K_SIZE:
        *(size_t *)base = (size_t)json_integer_value(v);
        break;
    default:
        break;
    }
    return 0;
wrong_type:
    snprintf(err, errcap, "config key '%s' has the wrong type", k->name);
    return -1;
}

int config_load_file(server_config *cfg, const char *path, char *err, size_t errcap)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, errcap, "%s:%d: %s", path, jerr.line, jerr.text);
        return -1;
    }
    int rc = 0;
    const char *name;
    json_t *v;
    if (!json_is_object(root)) {
        snprintf(err, errcap, "%s: the config must be a JSON object", path);
        rc = -1;
    }
    json_object_foreach(root, name, v)
    {
        if (rc)
            break;
        if (name[0] == '_' || strcmp(name, "durability") == 0) /* "_comment" documents */
            continue;
        const config_key *k = find_key(name);
        if (!k) {
            snprintf(err, errcap, "%s: unknown config key '%s'", path, name);
            rc = -1;
        } else {
            rc = set_key(cfg, k, v, err, errcap);
        }
    }
    json_t *dur = json_object_get(root, "durability");
    if (!rc && dur) {
        const char *d = json_string_value(dur);
        if (d && strcmp(d, "fsync") == 0)
            cfg->durability = DURABILITY_FSYNC;
        else if (d && strcmp(d, "none") == 0)
            cfg->durability = DURABILITY_NONE;
        else {
            snprintf(err, errcap, "%s: durability must be \"fsync\" or \"none\"", path);
            rc = -1;
        }
    }
    if (!rc && cfg->limits.bash_timeout_ms > cfg->limits.bash_timeout_max_ms) {
        snprintf(err, errcap, "%s: bash_timeout_ms exceeds bash_timeout_max_ms", path);
        rc = -1;
    }
    json_decref(root);
    return rc;
}
