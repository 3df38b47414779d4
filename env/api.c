/* The response helpers of api.h: the one error envelope, JSON bodies. */
#include "api.h"

#include "util/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void api_response_deinit(api_response *resp)
{
    json_decref(resp->json);
    free(resp->raw);
    resp->json = NULL;
    resp->raw = NULL;
    if (resp->has_file)
        close(resp->file_fd);
    resp->has_file = false;
}

void api_json(api_response *resp, int status, json_t *body)
{
    json_decref(resp->json);
    resp->status = status;
    resp->json = body;
}

void api_file(api_response *resp, int status, int fd, uint64_t len, const char *content_type)
{
    api_response_deinit(resp);
    resp->status = status;
    resp->file_fd = fd;
    resp->file_len = len;
    resp->has_file = true;
    resp->content_type = content_type;
}

static void fill_error(api_response *resp, int status, const char *code, bool retryable,
                       json_t *details, const char *message)
{
    /* Messages quote what the client sent (a path, an id), which may not be UTF-8. */
    char *clean = text_sanitize_utf8(message, strlen(message));
    json_t *err =
        json_pack("{s:s, s:s, s:b, s:o}", "code", code, "message", clean ? clean : "(message lost)",
                  "retryable", retryable, "details", details ? details : json_object());
    free(clean);
    api_json(resp, status, json_pack("{s:o}", "error", err));
}

void api_fail(api_response *resp, int status, const char *code, bool retryable, json_t *details,
              const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fill_error(resp, status, code, retryable, details, message);
}

void api_error_set(api_error *e, int status, const char *code, bool retryable, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->code = code;
    e->retryable = retryable;
}

void api_fail_from(api_response *resp, api_error *e)
{
    fill_error(resp, e->status ? e->status : 500, e->code ? e->code : "INTERNAL", e->retryable,
               e->details, e->message);
    e->details = NULL;
    if (e->retry_after_s > 0)
        resp->retry_after_s = e->retry_after_s;
}
