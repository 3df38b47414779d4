/* step: one agent turn. The body is {action} or {actions:[...]} (or, for the curl shorthand,
 * the arguments of one named tool); each action is {tool, args, call_id}, an OpenAI tool_call
 * {id, type:"function", function:{name, arguments:"<json>"}} or an Anthropic tool_use
 * {type:"tool_use", id, name, input}. Actions run in order; the turn is recorded durably before
 * the response is built. Malformed calls are in-band tool errors, not HTTP errors. */
#ifndef KGYM_STEP_H
#define KGYM_STEP_H

#include "api.h"
#include "server.h"

/* Runs a turn on ep, which the caller has made busy (ep_begin_step). shorthand_tool: the tool
 * of POST .../tools/{Tool} (body = its args), else NULL. */
void step_run(server *srv, episode *ep, const json_t *body, const char *shorthand_tool,
              api_response *resp);

#endif
