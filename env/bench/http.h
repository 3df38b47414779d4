/* http: kgym-bench's client of a kgym-env server (libcurl easy interface, one handle per worker
 * thread, HTTP/1.1 keep-alive). Every call returns the HTTP status and the parsed JSON body;
 * 429 and 503 answers marked retryable are retried with backoff, honouring Retry-After. */
#ifndef KGYM_BENCH_HTTP_H
#define KGYM_BENCH_HTTP_H

#include <jansson.h>
#include <stddef.h>

typedef struct bench_http bench_http;

/* Once per process, before any thread starts (curl_global_init is not thread-safe). */
int bench_http_global_init(void);
void bench_http_global_deinit(void);

/* base: "http://127.0.0.1:8080" (no trailing slash needed). timeout_s bounds each request. */
bench_http *bench_http_new(const char *base, double timeout_s);
void bench_http_free(bench_http *h);
void bench_http_set_timeout(bench_http *h, double timeout_s);

/* method path [body]: returns the HTTP status (> 0) with *reply set to the parsed body (NULL when
 * it was not JSON), or -1 with err set on a transport failure (refused, timed out, ...). */
long bench_http_json(bench_http *h, const char *method, const char *path, const json_t *body,
                     json_t **reply, char *err, size_t errcap);
/* PUT of raw bytes (a workspace file upload). Same return convention. */
long bench_http_put(bench_http *h, const char *path, const void *data, size_t len, json_t **reply,
                    char *err, size_t errcap);

/* The error envelope's message of a reply ({"error": {"message"}}), or "" when there is none. */
const char *bench_http_error_message(const json_t *reply);

/* path-segment escaping of a task id such as "kb/L1/19": the slashes stay (the server's routes
 * take the id's slashes as written), anything outside [A-Za-z0-9._~/-] is %-escaped. */
void bench_http_escape_path(const char *in, char *out, size_t cap);

#endif
