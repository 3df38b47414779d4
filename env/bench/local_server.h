/* local_server: the private kgym-env that kgym-bench starts when no --server is given: on a free
 * port of 127.0.0.1, its state under RESULTS_DIR/server/, its log in RESULTS_DIR/server.log. */
#ifndef KGYM_BENCH_LOCAL_SERVER_H
#define KGYM_BENCH_LOCAL_SERVER_H

#include <stddef.h>
#include <sys/types.h>

#include "bench/run.h"

/* Starts it and waits (up to 180 s) for its "listening" log line. Returns its pid, url set
 * ("http://127.0.0.1:PORT"), or -1 with err. */
pid_t local_server_start(const bench_opts *o, char *url, size_t urlcap, char *err, size_t errcap);
/* SIGTERM (the server drains), SIGKILL after a grace period; reaps it. */
void local_server_stop(pid_t pid);

#endif
