/* api: the HTTP API as plain function calls. A request and a response are transport-free
 * structs, so /v1/batch and the tests can call routes without libmicrohttpd. server.c adapts
 * them to HTTP. Every protocol error goes through api_fail(): one envelope,
 * {"error": {"code", "message", "retryable", "details"}}. */
#ifndef KGYM_API_H
#define KGYM_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;

typedef struct api_request {
    const char *method; /* "GET", "POST", "PUT", "DELETE" */
    const char *path;   /* decoded path, e.g. "/v1/episodes/ep_1/step" */
    json_t *query;      /* object of query arguments (strings); may be NULL */
    const char *body;   /* raw body bytes (not NUL-terminated for PUT) */
    size_t body_len;
    const char *idempotency_key; /* Idempotency-Key header, or NULL */
    const char *request_id;      /* for logs and 500s */
    bool in_batch;               /* a sub-request of /v1/batch */
} api_request;

typedef struct api_response {
    int status;
    json_t *json; /* the body, when JSON */
    char *raw;    /* or a raw body (files, metrics), malloc'd */
    size_t raw_len;
    int file_fd;              /* or a file sent from offset 0 without being read into
                               * memory (large trajectories); owned; see api_file() */
    uint64_t file_len;        /* the bytes of file_fd sent, whatever the file grows to */
    bool has_file;            /* file_fd is set (0 is a valid fd: this says so) */
    const char *content_type; /* for raw and file bodies */
    int retry_after_s;        /* > 0: send Retry-After */
    char location[128];       /* Location header for 201s */
    char episode_id[32];      /* for the request log line */
    char tool[32];            /* for the request log line and metrics */
} api_response;

/* Routes one request. Always fills resp (status and a body). */
void api_dispatch(struct server *srv, const api_request *req, api_response *resp);

/* The one error helper: fills resp with the envelope. details may be NULL (stolen). */
void api_fail(api_response *resp, int status, const char *code, bool retryable, json_t *details,
              const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A JSON success body (stolen). */
void api_json(api_response *resp, int status, json_t *body);
/* A body streamed from fd (taken: closed by whoever sends the response, or by deinit): its
 * first len bytes, so a file still being appended to is sent as it was when measured. */
void api_file(api_response *resp, int status, int fd, uint64_t len, const char *content_type);
void api_response_deinit(api_response *resp);

/* An error description passed up from the episode layer, turned into a response by the route. */
typedef struct api_error {
    int status; /* 0 = no error */
    const char *code;
    char message[512];
    bool retryable;
    int retry_after_s;
    json_t *details;
} api_error;

void api_error_set(api_error *e, int status, const char *code, bool retryable, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Moves e into resp (details are stolen). */
void api_fail_from(api_response *resp, api_error *e);

#endif
