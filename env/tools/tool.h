/* tool: the agent's tools (Read, Write, Edit, MultiEdit, Glob, Grep, Bash, BashOutput, KillBash).
 *
 * A tool receives the JSON arguments the agent sent, already checked against its JSON schema,
 * and fills a tool_result. A tool never fails at the HTTP level: whatever goes wrong (no match,
 * file missing, timeout, path outside the workspace) is an in-band error, is_error = true and
 * data.error_code set, so the trainer can learn from it. */
#ifndef KGYM_TOOL_H
#define KGYM_TOOL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct job_table;   /* background Bash jobs of one episode: env/tools/jobs.h */
struct eval_server; /* the server's evaluation setup: env/harness/eval.h */
struct ep_eval;     /* one episode's evaluation state */
struct task;

/* Per-episode limits, set from the server config and the episode's options. */
typedef struct tool_limits {
    uint64_t disk_quota_bytes; /* all files of the workspace together */
    uint64_t max_file_bytes;   /* one file (Write/Edit result, upload, Bash RLIMIT_FSIZE) */
    size_t max_output_chars;   /* cap on observation content; head and tail kept */
    int bash_timeout_ms;       /* default Bash timeout */
    int bash_timeout_max_ms;   /* largest timeout an agent may ask for */
    int bash_kill_grace_ms;    /* SIGTERM -> SIGKILL delay for the process group */
    uint64_t bash_mem_bytes;   /* RLIMIT_AS of Bash processes (0 = unlimited) */
    int bash_cpu_s;            /* RLIMIT_CPU (0 = unlimited) */
    int bash_nproc;            /* RLIMIT_NPROC (0 = unlimited) */
    int max_background_jobs;   /* per episode */
} tool_limits;

/* A workspace's disk usage remembered between tool calls, so a Write need not walk the tree.
 * Trusted only while nothing but the file tools wrote the workspace since it was measured. */
typedef struct tool_usage_cache {
    bool known;
    unsigned long long bytes;
} tool_usage_cache;

/* What a tool may touch: one episode's workspace, nothing else. */
typedef struct tool_env {
    int root_fd;             /* O_DIRECTORY|O_PATH fd of the workspace root */
    const char *root_path;   /* host path of the workspace root (cwd of Bash) */
    const char *episode_dir; /* host path of the episode's private dir (job logs), outside root */
    const tool_limits *limits;
    struct job_table *jobs;       /* this episode's background jobs */
    tool_usage_cache *usage;      /* this episode's usage cache, or NULL (always walk) */
    const struct ws_owner *owner; /* who owns files the tools create; NULL: the server */
    struct sandbox *sandbox;      /* runs Bash; NULL or inactive: unsandboxed (weak mode) */
    /* Compile, Verify, Profile, Submit */
    struct eval_server *eval; /* NULL: evaluation unavailable on this server */
    struct ep_eval *evs;      /* this episode's builds and snapshots */
    const struct task *task;  /* the episode's task (the reference comes from here) */
    bool cpu_variant;         /* the episode runs the task's CPU variant, evaluated on CPU */
    const char *episode_id;   /* names cgroups and logs */
    uint64_t eval_seed;       /* a fresh server-chosen seed for this call */
    const char *reward_mode;  /* "milestone" (default), "speedup", "log_speedup" */
    const char *reward_on;    /* "final" (default) or "best" */
} tool_env;

typedef struct tool_result {
    bool is_error;
    char *content;      /* malloc'd UTF-8 text the LLM sees (never NULL once run) */
    json_t *data;       /* owned JSON object; "error_code" set when is_error */
    bool terminal;      /* Submit: the episode ends with this call */
    json_t *final_eval; /* Submit: the final evaluation's components (owned), or NULL */
} tool_result;

typedef void (*tool_run_fn)(const tool_env *env, const json_t *args, tool_result *res);

typedef struct tool_def {
    const char *name;        /* canonical name, e.g. "Read" */
    const char *description; /* for the LLM's tool list */
    const char *schema;      /* JSON Schema (a JSON text) of the arguments object */
    tool_run_fn run;
} tool_def;

/* The tool registry, in the order the tools are listed to the LLM. */
size_t tool_count(void);
const tool_def *tool_at(size_t i);
/* Finds a tool by name, case-insensitively ("read", "READ" and "Read" are Read). */
const tool_def *tool_find(const char *name);

/* Runs one tool call: checks args against the tool's schema (a violation is an in-band
 * INVALID_TOOL_CALL error naming the offending field) then runs it. res must be zeroed. */
void tool_invoke(const tool_def *tool, const tool_env *env, const json_t *args, tool_result *res);

/* Result helpers. Each replaces what res held. content is printf-formatted; data may be NULL
 * (an empty object is made) and is stolen. */
void tool_ok(tool_result *res, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tool_fail(tool_result *res, const char *error_code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same, taking ownership of an already-built content string. */
void tool_ok_take(tool_result *res, json_t *data, char *content);
void tool_result_deinit(tool_result *res);

/* Checks value against a JSON schema (the subset our tool schemas use: type, properties,
 * required, additionalProperties, items, enum, minimum, maximum, minItems). On a violation
 * returns -1 and writes a message naming the field to err. */
int tool_schema_check(const json_t *schema, const json_t *value, char *err, size_t errcap);

/* The tools, one file each under env/tools/, listed by the registry in registry.c. */
extern const tool_def tool_def_read, tool_def_write, tool_def_edit, tool_def_multiedit;
extern const tool_def tool_def_glob, tool_def_grep;
extern const tool_def tool_def_bash, tool_def_bashoutput, tool_def_killbash;
extern const tool_def tool_def_compile, tool_def_verify, tool_def_profile, tool_def_submit;

#endif
