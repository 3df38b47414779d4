/* POST /v1/batch: several create/step/reset/delete/get operations in one request (a GRPO
 * group). Items run in order, each on its own (not atomically); each gets its own status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes.h"

#define BATCH_MAX_ITEMS 256

/* Builds the sub-request of one item: method and path from op and episode_id. */
static int item_route(const json_t *item, char *method, char *path, size_t cap, api_response *resp)
{
    const char *op = json_string_value(json_object_get(item, "op"));
    const char *id = json_string_value(json_object_get(item, "episode_id"));
    const json_t *purge = json_object_get(item, "purge");
    if (!op) {
        api_fail(resp, 400, "BAD_REQUEST", false, NULL, "a batch item needs \"op\"");
        return -1;
    }
    if (strcmp(op, "create") == 0) {
        strcpy(method, "POST");
        snprintf(path, cap, "/v1/episodes");
        return 0;
    }
    if (!id || strchr(id, '/') || !id[0]) {
        api_fail(resp, 400, "BAD_REQUEST", false, NULL, "op \"%s\" needs \"episode_id\"", op);
        return -1;
    }
    if (strcmp(op, "step") == 0 || strcmp(op, "reset") == 0) {
        strcpy(method, "POST");
        snprintf(path, cap, "/v1/episodes/%s/%s", id, op);
    } else if (strcmp(op, "delete") == 0) {
        strcpy(method, "DELETE");
        snprintf(path, cap, "/v1/episodes/%s", id);
        (void)purge;
    } else if (strcmp(op, "get") == 0) {
        strcpy(method, "GET");
        snprintf(path, cap, "/v1/episodes/%s", id);
    } else {
        api_fail(resp, 400, "BAD_REQUEST", false, NULL,
                 "unknown op \"%s\" (create, step, reset, delete, get)", op);
        return -1;
    }
    return 0;
}

/* The item's body: its "body" object, or the item itself minus the batch fields (so
 * {"op":"step","episode_id":..,"action":{..}} works as well as {"op":"step","body":{..}}). */
static json_t *item_body(const json_t *item)
{
    const json_t *body = json_object_get(item, "body");
    if (body)
        return json_incref((json_t *)body);
    json_t *copy = json_deep_copy(item);
    json_object_del(copy, "op");
    json_object_del(copy, "episode_id");
    json_object_del(copy, "idempotency_key");
    json_object_del(copy, "purge");
    return copy;
}

static json_t *run_item(server *srv, const api_request *outer, const json_t *item, size_t index)
{
    api_response sub = {0};
    char method[8], path[160], rid[64];
    if (!json_is_object(item)) {
        api_fail(&sub, 400, "BAD_REQUEST", false, NULL, "batch item %zu is not an object", index);
    } else if (item_route(item, method, path, sizeof path, &sub) == 0) {
        json_t *body = item_body(item);
        char *text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        json_t *query = json_object();
        if (json_is_true(json_object_get(item, "purge")))
            json_object_set_new(query, "purge", json_string("true"));
        snprintf(rid, sizeof rid, "%s.%zu", outer->request_id ? outer->request_id : "batch", index);
        api_request req = {
            .method = method,
            .path = path,
            .query = query,
            .body = strcmp(method, "POST") == 0 ? text : NULL,
            .body_len = strcmp(method, "POST") == 0 && text ? strlen(text) : 0,
            .idempotency_key = json_string_value(json_object_get(item, "idempotency_key")),
            .request_id = rid,
            .in_batch = true,
        };
        api_dispatch(srv, &req, &sub);
        json_decref(query);
        free(text);
    }
    json_t *out = json_pack("{s:i, s:O?}", "status", sub.status, "body", sub.json);
    if (sub.retry_after_s > 0)
        json_object_set_new(out, "retry_after_s", json_integer(sub.retry_after_s));
    api_response_deinit(&sub);
    return out;
}

void route_batch(server *srv, const api_request *req, api_response *resp)
{
    if (req->in_batch) {
        api_fail(resp, 400, "BAD_REQUEST", false, NULL, "batches do not nest");
        return;
    }
    json_t *body = route_parse_body(req, false, resp);
    if (!body)
        return;
    const json_t *items = json_object_get(body, "requests");
    if (!json_is_array(items) || json_array_size(items) == 0 ||
        json_array_size(items) > BATCH_MAX_ITEMS) {
        api_fail(resp, 400, "BAD_REQUEST", false, NULL,
                 "the batch body must be {\"requests\": [...]} with 1 to %d items",
                 BATCH_MAX_ITEMS);
        json_decref(body);
        return;
    }
    json_t *out = json_array();
    size_t i;
    const json_t *item;
    json_array_foreach(items, i, item) json_array_append_new(out, run_item(srv, req, item, i));
    api_json(resp, 200, json_pack("{s:o}", "responses", out));
    json_decref(body);
}
