/* server: the process's one context (config, tasks, episodes, metrics) and the HTTP front end
 * (libmicrohttpd, one thread per connection so a long tool call blocks only its own client). */
#ifndef KGYM_SERVER_H
#define KGYM_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "episode.h"
#include "idem.h"
#include "metrics.h"
#include "harness/eval.h"
#include "sandbox/sandbox.h"
#include "task.h"
#include "workspace.h"

#define KGYM_VERSION "0.1.0"
/* What isolates tool processes (reported by /v1/info and the start-up log). */
#define KGYM_SANDBOX_ON                                                                            \
    "on: Bash runs in kgym-sandbox (namespaces, a minimal read-only root, the episode's own uid, " \
    "no capabilities, seccomp, cgroup limits)"
#define KGYM_SANDBOX_WEAK                                                                          \
    "WEAK (--allow-weak-sandbox): tools run as the server's user, each Bash call in its own "      \
    "process group with rlimits"

typedef struct server {
    server_config cfg;
    task_store *tasks;
    ws_template *tpl;
    ep_table *episodes;
    metrics *metrics;
    idem_cache global_idem; /* creates and batches: no episode to scope them to */
    pthread_mutex_t global_idem_lock;
    atomic_bool draining;
    atomic_long in_flight;       /* steps, resets and closes running now */
    atomic_long replies_pending; /* requests handled or being handled whose reply is not sent */
    atomic_ulong request_seq;
    double started_at;
    int bound_port;
    int state_lock_fd; /* flock on <state_dir>/.lock: one server per state dir */
    struct MHD_Daemon *daemon;
    sandbox sandbox;
    eval_server eval;
} server;

/* Loads tasks and the template, claims the state dir (a second server on it is refused),
 * recovers it. Returns 0 or -1 with err filled. */
int server_init(server *srv, char *err, size_t errcap);
/* Serves until SIGTERM/SIGINT, then drains (in-flight steps finish, new episodes get 503) and
 * returns. Returns 0, or -1 with err filled when the port cannot be bound. */
int server_run(server *srv, char *err, size_t errcap);
void server_deinit(server *srv);

/* How tools are isolated, in words (for /v1/info and the logs). */
const char *server_sandbox_desc(const server *srv);

/* One JSON log line on stderr. level: "info", "warn", "error". */
void server_log(const char *level, const char *event, json_t *fields);

#endif
