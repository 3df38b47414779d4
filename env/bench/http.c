/* http: libcurl behind kgym-bench's few JSON calls (see http.h). */
#include "bench/http.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/strbuf.h"

#define HTTP_MAX_BODY (256u << 20) /* a reply larger than this is a broken server */
#define HTTP_RETRIES 8

struct bench_http {
    CURL *curl;
    char base[512];
    double timeout_s;
};

int bench_http_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void bench_http_global_deinit(void)
{
    curl_global_cleanup();
}

bench_http *bench_http_new(const char *base, double timeout_s)
{
    bench_http *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->curl = curl_easy_init();
    if (!h->curl || strlen(base) >= sizeof h->base) {
        bench_http_free(h);
        return NULL;
    }
    strcpy(h->base, base);
    size_t n = strlen(h->base);
    while (n > 0 && h->base[n - 1] == '/')
        h->base[--n] = '\0';
    h->timeout_s = timeout_s;
    return h;
}

void bench_http_free(bench_http *h)
{
    if (!h)
        return;
    if (h->curl)
        curl_easy_cleanup(h->curl);
    free(h);
}

void bench_http_set_timeout(bench_http *h, double timeout_s)
{
    h->timeout_s = timeout_s;
}

static size_t collect(char *data, size_t size, size_t nmemb, void *ctx)
{
    strbuf *sb = ctx;
    size_t n = size * nmemb;
    if (sb->len + n > HTTP_MAX_BODY || sb_append(sb, data, n) != 0)
        return 0; /* makes curl fail the transfer */
    return n;
}

/* Retry-After in seconds from the last response, or 0. */
static long retry_after_s(CURL *c)
{
    curl_off_t v = 0;
    if (curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &v) != CURLE_OK || v < 0)
        return 0;
    return v > 60 ? 60 : (long)v;
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* One request; the body (if any) is raw bytes of the given content type. */
static long request_once(bench_http *h, const char *method, const char *path, const void *data,
                         size_t len, const char *ctype, json_t **reply, long *retry_after,
                         char *err, size_t errcap)
{
    char url[2048];
    if ((size_t)snprintf(url, sizeof url, "%s%s", h->base, path) >= sizeof url) {
        snprintf(err, errcap, "URL too long: %s", path);
        return -1;
    }
    strbuf body = {0};
    CURL *c = h->curl;
    curl_easy_reset(c);
    struct curl_slist *hdrs = NULL;
    char ct[128];
    snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
    hdrs = curl_slist_append(hdrs, ct);
    hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue round trip on uploads */
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM-based timeouts */
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(h->timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    if (data) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, data);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    long status = -1;
    *reply = NULL;
    if (rc != CURLE_OK) {
        snprintf(err, errcap, "%s %s: %s", method, url, curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        *retry_after = retry_after_s(c);
        if (body.len > 0)
            *reply = json_loadb(body.data, body.len, 0, NULL);
    }
    sb_free(&body);
    return status;
}

/* A request, retried while the server says "busy, try again" (429, or 503 marked retryable). */
static long request(bench_http *h, const char *method, const char *path, const void *data,
                    size_t len, const char *ctype, json_t **reply, char *err, size_t errcap)
{
    double backoff = 0.5;
    for (int attempt = 0;; attempt++) {
        long wait = 0;
        long status = request_once(h, method, path, data, len, ctype, reply, &wait, err, errcap);
        json_t *e = *reply ? json_object_get(*reply, "error") : NULL;
        bool retryable =
            (status == 429 || status == 503) && e && json_is_true(json_object_get(e, "retryable"));
        if (!retryable || attempt >= HTTP_RETRIES)
            return status;
        json_decref(*reply);
        *reply = NULL;
        sleep_s(wait > 0 ? (double)wait : backoff);
        backoff = backoff * 2 > 30 ? 30 : backoff * 2;
    }
}

long bench_http_json(bench_http *h, const char *method, const char *path, const json_t *body,
                     json_t **reply, char *err, size_t errcap)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text) {
        snprintf(err, errcap, "cannot encode the request body");
        *reply = NULL;
        return -1;
    }
    long status = request(h, method, path, text, text ? strlen(text) : 0, "application/json", reply,
                          err, errcap);
    free(text);
    return status;
}

long bench_http_put(bench_http *h, const char *path, const void *data, size_t len, json_t **reply,
                    char *err, size_t errcap)
{
    /* an empty file is a valid upload: curl needs a non-NULL pointer to send a body at all */
    return request(h, "PUT", path, len ? data : "", len, "application/octet-stream", reply, err,
                   errcap);
}

const char *bench_http_error_message(const json_t *reply)
{
    const char *m = json_string_value(json_object_get(json_object_get(reply, "error"), "message"));
    return m ? m : "";
}

void bench_http_escape_path(const char *in, char *out, size_t cap)
{
    static const char HEX[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < cap; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("._~/-", *p)) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = HEX[*p >> 4];
            out[o++] = HEX[*p & 15];
        }
    }
    out[o] = '\0';
}
