/* Routes on episodes: create, list, state, reset, step, tool shorthand, delete, trajectory,
 * files. Mutating POSTs honour Idempotency-Key (episode-scoped; creates server-scoped). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "routes.h"
#include "step.h"
#include "tools/fs.h"
#include "util/text.h"
#include "wspath.h"

/* ---- idempotency ------------------------------------------------------------------------- */

/* Replays a stored response for the request's key, or fills resp with a 409 when the key was
 * used for another request. Returns true when resp is final. cache is protected by lock. */
static bool idem_replay(idem_cache *cache, pthread_mutex_t *lock, const api_request *req,
                        api_response *resp)
{
    if (!req->idempotency_key)
        return false;
    uint64_t h = idem_hash(req->method, req->path, req->body, req->body_len);
    pthread_mutex_lock(lock);
    idem_lookup_result r = idem_lookup(cache, req->idempotency_key, h, resp);
    pthread_mutex_unlock(lock);
    if (r == IDEM_MISMATCH)
        api_fail(resp, 409, "IDEMPOTENCY_KEY_REUSED", false,
                 json_pack("{s:s}", "key", req->idempotency_key),
                 "Idempotency-Key '%s' was already used for a different request",
                 req->idempotency_key);
    return r != IDEM_MISS;
}

/* Remembers a successful response under the request's key. Errors are not stored: a retry
 * after a 409 busy or a 503 must run for real. */
static void idem_remember(idem_cache *cache, pthread_mutex_t *lock, const api_request *req,
                          const api_response *resp)
{
    if (!req->idempotency_key || resp->status >= 300)
        return;
    uint64_t h = idem_hash(req->method, req->path, req->body, req->body_len);
    pthread_mutex_lock(lock);
    idem_store(cache, req->idempotency_key, h, resp);
    pthread_mutex_unlock(lock);
}

static bool refuse_if_draining(server *srv, api_response *resp)
{
    if (!atomic_load(&srv->draining))
        return false;
    api_fail(resp, 503, "DRAINING", true, NULL,
             "the server is shutting down; retry against another server");
    resp->retry_after_s = srv->cfg.retry_after_s;
    return true;
}

/* ---- create and list --------------------------------------------------------------------- */

void route_episode_create(server *srv, const api_request *req, api_response *resp)
{
    if (refuse_if_draining(srv, resp) ||
        idem_replay(&srv->global_idem, &srv->global_idem_lock, req, resp))
        return;
    json_t *body = route_parse_body(req, true, resp);
    if (!body)
        return;
    ep_params p;
    api_error e = {0};
    episode *ep = NULL;
    json_t *out = NULL;
    if (ep_parse_params(body, &p, &e) != 0 || ep_create(srv->episodes, &p, &ep, &out, &e) != 0) {
        api_fail_from(resp, &e);
    } else {
        snprintf(resp->location, sizeof resp->location, "/v1/episodes/%s", ep->id);
        snprintf(resp->episode_id, sizeof resp->episode_id, "%s", ep->id);
        api_json(resp, 201, out);
        idem_remember(&srv->global_idem, &srv->global_idem_lock, req, resp);
        ep_put(srv->episodes, ep);
    }
    json_decref(body);
}

void route_episode_list(server *srv, const api_request *req, api_response *resp)
{
    json_t *list = ep_list_json(srv->episodes, route_query(req, "status"));
    api_json(resp, 200,
             json_pack("{s:I, s:o}", "count", (json_int_t)json_array_size(list), "episodes", list));
}

/* ---- one episode ------------------------------------------------------------------------- */

static void route_state(server *srv, episode *ep, api_response *resp)
{
    (void)srv;
    api_json(resp, 200, ep_state_json(ep));
}

static void route_delete(server *srv, const api_request *req, episode *ep, api_response *resp)
{
    const char *purge_s = route_query(req, "purge");
    bool purge = purge_s && (strcmp(purge_s, "true") == 0 || strcmp(purge_s, "1") == 0);
    api_error e = {0};
    atomic_fetch_add(&srv->in_flight, 1);
    int rc = ep_close(srv->episodes, ep, purge, &e);
    atomic_fetch_sub(&srv->in_flight, 1);
    if (rc != 0) {
        api_fail_from(resp, &e);
        return;
    }
    json_t *state = ep_state_json(ep);
    json_object_set_new(state, "purged", json_boolean(purge));
    api_json(resp, 200, state);
}

static void route_reset(server *srv, const api_request *req, episode *ep, api_response *resp)
{
    if (refuse_if_draining(srv, resp) || idem_replay(&ep->idem, &ep->lock, req, resp))
        return;
    json_t *body = route_parse_body(req, true, resp);
    if (!body)
        return;
    ep_params p;
    api_error e = {0};
    json_t *out = NULL;
    atomic_fetch_add(&srv->in_flight, 1);
    if (ep_parse_params(body, &p, &e) != 0 || ep_reset(srv->episodes, ep, &p, &out, &e) != 0)
        api_fail_from(resp, &e);
    else
        api_json(resp, 200, out);
    atomic_fetch_sub(&srv->in_flight, 1);
    idem_remember(&ep->idem, &ep->lock, req, resp);
    json_decref(body);
}

/* step and the tool shorthand: one turn. */
static void route_step(server *srv, const api_request *req, episode *ep, const char *tool,
                       api_response *resp)
{
    if (refuse_if_draining(srv, resp) || idem_replay(&ep->idem, &ep->lock, req, resp))
        return;
    json_t *body = route_parse_body(req, tool != NULL, resp);
    if (!body)
        return;
    api_error e = {0};
    atomic_fetch_add(&srv->in_flight, 1);
    if (ep_begin_step(ep, &e) != 0) {
        api_fail_from(resp, &e);
    } else {
        step_run(srv, ep, body, tool, resp);
        ep_end_step(ep);
        idem_remember(&ep->idem, &ep->lock, req, resp);
    }
    atomic_fetch_sub(&srv->in_flight, 1);
    json_decref(body);
}

/* The length of the whole lines among the first size bytes of fd: an append in progress (a
 * trajectory line can be megabytes, written in one write() that other readers may see
 * halfway) is left out. Reads backwards from size in small blocks; -1 on a read error. */
static off_t whole_lines_length(int fd, off_t size)
{
    char block[4096];
    off_t end = size;
    while (end > 0) {
        size_t n = end < (off_t)sizeof block ? (size_t)end : sizeof block;
        ssize_t got = pread(fd, block, n, end - (off_t)n);
        if (got != (ssize_t)n)
            return -1;
        for (size_t i = n; i > 0; i--)
            if (block[i - 1] == '\n')
                return end - (off_t)n + (off_t)i;
        end -= (off_t)n;
    }
    return 0;
}

/* Streams the trajectory from the file instead of loading it: trajectories grow to gigabytes
 * (every action's content is recorded) and concurrent downloads must not cost their size in
 * memory each. The body is the file as it was when opened, whole lines only, however much a
 * running episode appends meanwhile. */
static void route_trajectory(server *srv, episode *ep, api_response *resp)
{
    (void)srv;
    char path[700];
    ep_trajectory_path(ep, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    off_t len = -1;
    errno = 0;
    if (fd >= 0 && fstat(fd, &st) == 0)
        len = whole_lines_length(fd, st.st_size);
    if (len < 0) {
        int err = errno ? errno : EIO; /* (a short read sets none) */
        if (fd >= 0)
            close(fd);
        api_fail(resp, err == ENOENT ? 404 : 500, err == ENOENT ? "NOT_FOUND" : "INTERNAL", false,
                 NULL, "cannot read the trajectory: %s", strerror(err));
        return;
    }
    api_file(resp, 200, fd, (uint64_t)len, "application/x-ndjson");
}

/* ---- files ------------------------------------------------------------------------------- */

static int ws_status_http(int err)
{
    switch (err) {
    case WS_E_NOENT:
        return 404;
    case WS_E_OUTSIDE:
    case WS_E_READONLY:
        return 403;
    case WS_E_INVALID:
    case WS_E_ISDIR:
    case WS_E_NOTDIR:
        return 400;
    case WS_E_NOSPACE:
        return 413;
    default:
        return 500;
    }
}

static void fail_path(api_response *resp, int err, const char *shown)
{
    api_fail(resp, ws_status_http(err), ws_err_code(err), false, json_pack("{s:s}", "path", shown),
             "%s: %s", shown, ws_err_code(err));
}

/* The workspace is open only while the episode is; files of a closed one are gone. */
static bool workspace_available(episode *ep, api_response *resp)
{
    if (ep->root_fd >= 0)
        return true;
    api_fail(resp, 410, "EPISODE_CLOSED", false, NULL, "episode %s has no workspace any more (%s)",
             ep->id, ep_status_name(ep->status));
    return false;
}

static void list_directory(int dirfd, const char *shown, api_response *resp)
{
    DIR *d = fdopendir(dirfd);
    if (!d) {
        close(dirfd);
        api_fail(resp, 500, "IO_ERROR", false, NULL, "cannot list %s", shown);
        return;
    }
    json_t *entries = json_array();
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        const char *type = S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "symlink" : "file";
        char *name = text_sanitize_utf8(de->d_name, strlen(de->d_name));
        json_array_append_new(entries, json_pack("{s:s, s:s, s:I}", "name", name, "type", type,
                                                 "size", (json_int_t)st.st_size));
        free(name);
    }
    closedir(d);
    api_json(resp, 200, json_pack("{s:s, s:o}", "path", shown, "entries", entries));
}

static void route_file_get(episode *ep, const char *user_path, api_response *resp)
{
    char rel[WS_PATH_MAX], shown[WS_PATH_MAX + 16];
    /* files/ and files name the workspace root: a listing. */
    int rc = user_path[0] ? ws_normalize(user_path, strlen(user_path), rel) : WS_OK;
    if (!user_path[0])
        strcpy(rel, ".");
    if (rc != WS_OK) {
        fail_path(resp, rc, user_path);
        return;
    }
    ws_display(rel, shown, sizeof shown);
    /* O_NONBLOCK: a FIFO the agent planted must not hang the server (and the episode lock). */
    int fd = ws_open(ep->root_fd, rel, O_RDONLY | O_NONBLOCK, 0);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        list_directory(fd, shown, resp); /* takes the fd */
        return;
    }
    if (fd < 0) {
        fail_path(resp, fd, shown);
        return;
    }
    bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    if (!regular) {
        api_fail(resp, 400, "NOT_A_REGULAR_FILE", false, json_pack("{s:s}", "path", shown),
                 "%s is not a regular file (a FIFO, socket or device)", shown);
        return;
    }
    fs_file f;
    rc = fs_load(ep->root_fd, rel, ep->limits.max_file_bytes, &f);
    if (rc == FS_E_TOO_LARGE) {
        api_fail(resp, 413, "FILE_TOO_LARGE", false, json_pack("{s:s}", "path", shown),
                 "%s is larger than the %llu-byte file cap", shown,
                 (unsigned long long)ep->limits.max_file_bytes);
        return;
    }
    if (rc != 0) {
        fail_path(resp, rc == FS_E_NOT_REGULAR ? WS_E_IO : rc, shown);
        return;
    }
    resp->status = 200;
    resp->raw = f.data;
    resp->raw_len = f.len;
    resp->content_type = "application/octet-stream";
}

/* PUT: the body's bytes replace the file (atomically), within the same limits as Write. */
static void route_file_put(server *srv, const api_request *req, episode *ep, const char *user_path,
                           api_response *resp)
{
    char rel[WS_PATH_MAX], target[WS_PATH_MAX], shown[WS_PATH_MAX + 16];
    int rc = ws_normalize(user_path, strlen(user_path), rel);
    if (rc != WS_OK) {
        fail_path(resp, rc, user_path);
        return;
    }
    ws_display(rel, shown, sizeof shown);
    struct stat st;
    bool exists = false;
    rc = fs_resolve_target(ep->root_fd, rel, target, &st, &exists);
    if (rc == 0 && ws_is_fixed(target))
        rc = WS_E_READONLY;
    if (rc != 0) {
        fail_path(resp, rc, shown);
        return;
    }
    if (req->body_len > ep->limits.max_file_bytes) {
        api_fail(resp, 413, "PAYLOAD_TOO_LARGE", false, NULL,
                 "%s: %zu bytes exceed the %llu-byte file cap", shown, req->body_len,
                 (unsigned long long)ep->limits.max_file_bytes);
        return;
    }
    tool_env env;
    ep_tool_env(ep, &env);
    tool_result tr = {0};
    if (fs_check_quota(&env, exists ? (uint64_t)st.st_size : 0, req->body_len, shown, &tr) != 0) {
        api_fail(resp, 413, "DISK_QUOTA_EXCEEDED", false, NULL, "%s", tr.content);
        tool_result_deinit(&tr);
        return;
    }
    rc = fs_write_atomic(ep->root_fd, target, req->body ? req->body : "", req->body_len, 0644,
                         env.owner);
    if (rc != 0) {
        fail_path(resp, rc, shown);
        return;
    }
    fs_usage_changed(&env, exists ? (uint64_t)st.st_size : 0, req->body_len);
    /* Uploads change the workspace: the trajectory must show them (content when it is text). */
    bool text = req->body_len <= 65536 && text_is_utf8(req->body ? req->body : "", req->body_len);
    json_t *rec = json_pack("{s:s, s:s, s:I, s:b}", "type", "upload", "path", shown, "bytes",
                            (json_int_t)req->body_len, "created", !exists);
    if (text)
        json_object_set_new(rec, "content",
                            json_stringn(req->body ? req->body : "", req->body_len));
    api_error e = {0};
    rc = ep_record(ep, rec, &e);
    json_decref(rec);
    (void)srv;
    if (rc != 0) {
        api_fail_from(resp, &e);
        return;
    }
    api_json(resp, exists ? 200 : 201,
             json_pack("{s:s, s:I, s:b}", "path", shown, "bytes", (json_int_t)req->body_len,
                       "created", !exists));
}

static void route_files(server *srv, const api_request *req, episode *ep, const char *path,
                        api_response *resp)
{
    if (strcmp(req->method, "GET") == 0) {
        /* Downloads hold the episode lock, which guards root_fd, so a concurrent close cannot
         * free the workspace mid-read; they do not wait for a running step. */
        pthread_mutex_lock(&ep->lock);
        if (workspace_available(ep, resp))
            route_file_get(ep, path, resp);
        pthread_mutex_unlock(&ep->lock);
        return;
    }
    if (strcmp(req->method, "PUT") != 0) {
        api_fail(resp, 405, "METHOD_NOT_ALLOWED", false, NULL, "files allow GET and PUT");
        return;
    }
    if (refuse_if_draining(srv, resp) || idem_replay(&ep->idem, &ep->lock, req, resp))
        return;
    /* Uploads count as a step's exclusive use of the workspace: never during a running step. */
    api_error e = {0};
    if (ep_begin_step(ep, &e) != 0) {
        api_fail_from(resp, &e);
        return;
    }
    route_file_put(srv, req, ep, path, resp);
    ep_end_step(ep);
    idem_remember(&ep->idem, &ep->lock, req, resp);
}

/* ---- dispatch under /v1/episodes/{id} ---------------------------------------------------- */

void route_episode(server *srv, const api_request *req, const char *id, const char *rest,
                   api_response *resp)
{
    snprintf(resp->episode_id, sizeof resp->episode_id, "%s", id);
    episode *ep = ep_get(srv->episodes, id);
    if (!ep) {
        api_fail(resp, 404, "EPISODE_NOT_FOUND", false, NULL, "no episode '%s'", id);
        return;
    }
    bool get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
    if (rest[0] == '\0' && get)
        route_state(srv, ep, resp);
    else if (rest[0] == '\0' && strcmp(req->method, "DELETE") == 0)
        route_delete(srv, req, ep, resp);
    else if (rest[0] == '\0')
        api_fail(resp, 405, "METHOD_NOT_ALLOWED", false, NULL, "allowed: GET, DELETE");
    else if (strcmp(rest, "/step") == 0 && post)
        route_step(srv, req, ep, NULL, resp);
    else if (strcmp(rest, "/reset") == 0 && post)
        route_reset(srv, req, ep, resp);
    else if (strncmp(rest, "/tools/", 7) == 0 && rest[7] && post)
        route_step(srv, req, ep, rest + 7, resp);
    else if (strcmp(rest, "/trajectory") == 0 && get)
        route_trajectory(srv, ep, resp);
    else if (strncmp(rest, "/files/", 7) == 0 || strcmp(rest, "/files") == 0)
        route_files(srv, req, ep, rest[6] ? rest + 7 : "", resp);
    else if (strcmp(rest, "/step") == 0 || strcmp(rest, "/reset") == 0 ||
             strncmp(rest, "/tools/", 7) == 0)
        api_fail(resp, 405, "METHOD_NOT_ALLOWED", false, NULL, "allowed: POST");
    else if (strcmp(rest, "/trajectory") == 0)
        api_fail(resp, 405, "METHOD_NOT_ALLOWED", false, NULL, "allowed: GET");
    else
        api_fail(resp, 404, "NOT_FOUND", false, NULL, "no route %s %s", req->method, req->path);
    ep_put(srv->episodes, ep);
}
