/* chat_internal: what the chat modules share (chat_json.c, chat_render.c, chat_tools.c); not
 * part of the policy's API (that is chat.h). */
#ifndef KGYM_POLICY_CHAT_INTERNAL_H
#define KGYM_POLICY_CHAT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "policy/chat.h"
#include "util/strbuf.h"

/* ---- JSON exactly as Python's json.dumps(x, ensure_ascii=False) writes it ------------------- */

/* Appends v the way transformers' `tojson` filter (json.dumps) serialises it: keys in their
 * order, non-ASCII kept as UTF-8, floats as Python's repr. indent < 0: one line with the
 * separators ", " and ": "; indent >= 0: one item per line indented by that many spaces, with
 * "," and ": ". Returns 0, or -1 when memory ran out or v holds a value JSON cannot carry. */
int chat_json_dump(strbuf *sb, const json_t *v, int indent);

/* Appends len bytes of UTF-8 as a JSON string literal, escaped as json.dumps does. */
int chat_json_dump_string(strbuf *sb, const char *s, size_t len);

/* Writes d as Python's repr(float) does ("1.0", "1e-05", "1.2345678901234568e+17"). Returns 0,
 * or -1 for NaN and infinities (which JSON cannot carry) or a too small buffer. */
int chat_py_float_repr(double d, char *out, size_t cap);

/* ---- Python string methods the templates call ----------------------------------------------- */

/* Python's str.strip() (Jinja's `trim`): the bounds of s without leading and trailing Unicode
 * whitespace (str.isspace). Bytes that are not valid UTF-8 are never whitespace. */
void chat_py_strip(const char *s, size_t len, size_t *begin, size_t *end);

/* Whether s (len bytes) contains, starts with or ends with the NUL-terminated needle. */
bool chat_str_contains(const char *s, size_t len, const char *needle);
bool chat_str_starts(const char *s, size_t len, const char *prefix);
bool chat_str_ends(const char *s, size_t len, const char *suffix);

/* ---- a conversation, checked once and rendered by each template ---------------------------- */

typedef enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL, CHAT_IPYTHON } chat_role;

typedef struct {
    const char *s; /* not NUL-terminated in general: use len */
    size_t len;
} chat_str;

typedef struct {
    chat_str name;
    const json_t *args; /* an object, or a string the caller JSON-encoded */
} chat_call;

typedef struct {
    chat_role role;
    const char *role_name;
    bool has_content;           /* content present and not null */
    chat_str content;           /* when the content is a string ("" otherwise) */
    const json_t *content_json; /* the content as given (Llama 3 tool results may be JSON) */
    bool has_reasoning;         /* reasoning_content (or its aliases thinking, reasoning) */
    chat_str reasoning;
    bool has_tool_calls; /* the key is present and not null, even when the list is empty */
    size_t n_calls;
    chat_call *calls;
} chat_msg;

typedef struct {
    chat_msg *msgs;
    size_t n;
    const json_t *tools; /* NULL (none given) or an array of objects, maybe empty */
} chat_conv;

/* The renderers: append the conversation's text; -1 only when memory ran out (the conversation
 * was checked against the template's rules before). */
int chat_render_qwen25(const chat_conv *c, const pol_chat_opts *o, strbuf *sb);
int chat_render_qwen3(const chat_conv *c, const pol_chat_opts *o, strbuf *sb);
int chat_render_llama3(const chat_conv *c, const pol_chat_opts *o, strbuf *sb);

/* Appends a chat_str. */
int chat_put(strbuf *sb, chat_str s);

#endif
