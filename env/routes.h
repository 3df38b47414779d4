/* routes: the handlers behind api_dispatch (internal to the server). */
#ifndef KGYM_ROUTES_H
#define KGYM_ROUTES_H

#include "api.h"
#include "server.h"

/* Parses a JSON request body; an empty body is {} when allow_empty. On failure fills resp with
 * 400 INVALID_JSON / BAD_REQUEST and returns NULL. */
json_t *route_parse_body(const api_request *req, bool allow_empty, api_response *resp);
/* A query argument, or NULL. */
const char *route_query(const api_request *req, const char *name);

void route_health(server *srv, const api_request *req, api_response *resp);
void route_info(server *srv, const api_request *req, api_response *resp);
void route_tools(server *srv, const api_request *req, api_response *resp);
void route_tasks(server *srv, const api_request *req, api_response *resp);
void route_task(server *srv, const api_request *req, const char *id, api_response *resp);
void route_task_baselines(server *srv, const api_request *req, const char *id, api_response *resp);
void route_metrics(server *srv, const api_request *req, api_response *resp);

void route_episode_create(server *srv, const api_request *req, api_response *resp);
void route_episode_list(server *srv, const api_request *req, api_response *resp);
/* Routes under /v1/episodes/{id}: rest is what follows the id ("", "/step", "/files/x", ...). */
void route_episode(server *srv, const api_request *req, const char *id, const char *rest,
                   api_response *resp);

void route_batch(server *srv, const api_request *req, api_response *resp);

#endif
