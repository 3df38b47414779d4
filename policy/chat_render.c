/* chat_render: pol_chat_render's front half. The messages are checked once, into chat_msg views,
 * against what the chosen template can render (HF's Jinja rendering raises, or prints nonsense,
 * on the same inputs), then handed to the template's renderer (chat_qwen.c, chat_llama.c).
 *
 * As HF's apply_chat_template does, a key whose value is null counts as absent, and
 * `thinking` / `reasoning` stand in for a missing `reasoning_content`. */
#include "chat_internal.h"
#include "util/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pol_chat_kind_parse(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "qwen2.5") || !strcmp(name, "qwen2"))
        return POL_CHAT_QWEN25;
    if (!strcmp(name, "qwen3"))
        return POL_CHAT_QWEN3;
    if (!strcmp(name, "llama3") || !strcmp(name, "llama3.1"))
        return POL_CHAT_LLAMA3;
    return -1;
}

static const char *kind_name(pol_chat_kind kind)
{
    return kind == POL_CHAT_QWEN25 ? "Qwen2.5" : kind == POL_CHAT_QWEN3 ? "Qwen3" : "Llama 3";
}

int chat_put(strbuf *sb, chat_str s)
{
    return sb_append(sb, s.s, s.len);
}

/* obj[key], with null read as absent (HF drops None-valued keys before rendering). */
static const json_t *field(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static chat_str str_of(const json_t *v)
{
    chat_str s = {json_string_value(v), json_string_length(v)};
    return s;
}

static int parse_role(pol_chat_kind kind, const json_t *m, size_t i, chat_msg *out, char *err,
                      size_t errcap)
{
    static const struct {
        const char *name;
        chat_role role;
    } roles[] = {{"system", CHAT_SYSTEM},
                 {"user", CHAT_USER},
                 {"assistant", CHAT_ASSISTANT},
                 {"tool", CHAT_TOOL},
                 {"ipython", CHAT_IPYTHON}};
    const json_t *role = field(m, "role");
    if (!json_is_string(role))
        return text_fail(err, errcap, "message %zu: %s", i,
                         role ? "\"role\" is not a string" : "no \"role\"");
    /* ipython is Llama 3's own name for the tool role; the Qwen templates have no such role */
    size_t n_roles = kind == POL_CHAT_LLAMA3 ? 5 : 4;
    for (size_t r = 0; r < n_roles; r++)
        if (!strcmp(json_string_value(role), roles[r].name)) {
            out->role = roles[r].role;
            out->role_name = roles[r].name;
            return 0;
        }
    return text_fail(err, errcap, "message %zu: unknown role \"%.40s\" for the %s template", i,
                     json_string_value(role), kind_name(kind));
}

/* One entry of tool_calls: OpenAI's {"type", "function": {"name", "arguments"}} or, for the
 * Qwen templates (which accept both), the bare {"name", "arguments"}. */
static int parse_call(pol_chat_kind kind, const json_t *tc, size_t i, size_t j, chat_call *out,
                      char *err, size_t errcap)
{
    if (!json_is_object(tc))
        return text_fail(err, errcap, "message %zu: tool_calls[%zu] is not an object", i, j);
    const json_t *fn = field(tc, "function");
    if (fn && !json_is_object(fn))
        return text_fail(err, errcap, "message %zu: tool_calls[%zu].function is not an object", i,
                         j);
    if (!fn && kind == POL_CHAT_LLAMA3)
        return text_fail(err, errcap, "message %zu: tool_calls[%zu] has no \"function\"", i, j);
    /* the Qwen templates test `if tool_call.function`: an empty object counts as absent */
    const json_t *call = fn && json_object_size(fn) ? fn : tc;
    const json_t *name = field(call, "name");
    if (!json_is_string(name) || json_string_length(name) == 0)
        return text_fail(err, errcap, "message %zu: tool_calls[%zu]: %s", i, j,
                         !name ? "no function name"
                               : "the function name is not a non-empty string");
    const json_t *args = field(call, "arguments");
    if (!json_is_object(args) && !json_is_string(args))
        return text_fail(err, errcap, "message %zu: tool_calls[%zu] (%.40s): %s", i, j,
                         json_string_value(name),
                         !args ? "no \"arguments\""
                               : "\"arguments\" is neither an object nor a JSON-encoded string");
    out->name = str_of(name);
    out->args = args;
    return 0;
}

static int parse_calls(pol_chat_kind kind, const json_t *m, size_t i, chat_msg *out, char *err,
                       size_t errcap)
{
    const json_t *tcs = field(m, "tool_calls");
    if (!tcs)
        return 0;
    if (out->role != CHAT_ASSISTANT)
        return text_fail(err, errcap,
                         "message %zu: tool_calls on a \"%s\" message (only the "
                         "assistant calls tools)",
                         i, out->role_name);
    if (!json_is_array(tcs))
        return text_fail(err, errcap, "message %zu: \"tool_calls\" is not an array", i);
    size_t n = json_array_size(tcs);
    if (kind == POL_CHAT_LLAMA3 && n != 1)
        return text_fail(err, errcap,
                         "message %zu: the Llama 3 template takes exactly one tool call "
                         "per message, not %zu",
                         i, n);
    out->has_tool_calls = true;
    out->calls = calloc(n ? n : 1, sizeof *out->calls);
    if (!out->calls)
        return text_fail(err, errcap, "out of memory");
    out->n_calls = n;
    for (size_t j = 0; j < n; j++)
        if (parse_call(kind, json_array_get(tcs, j), i, j, &out->calls[j], err, errcap) != 0)
            return -1;
    return 0;
}

/* Content must be a string, with two exceptions the templates allow: an assistant message that
 * calls tools may have none (Qwen2.5, Llama 3: the template never reads it), and a Llama 3 tool
 * result may be a JSON object or array (the template writes it as JSON). */
static int parse_content(pol_chat_kind kind, const json_t *m, size_t i, chat_msg *out, char *err,
                         size_t errcap)
{
    const json_t *c = field(m, "content");
    out->content_json = c;
    out->has_content = c != NULL;
    out->content.s = "";
    if (json_is_string(c)) {
        out->content = str_of(c);
        return 0;
    }
    bool llama_tool =
        kind == POL_CHAT_LLAMA3 && (out->role == CHAT_TOOL || out->role == CHAT_IPYTHON);
    if (c && llama_tool && (json_is_object(c) || json_is_array(c)))
        return 0;
    if (c)
        return text_fail(err, errcap, "message %zu (%s): \"content\" is not a string", i,
                         out->role_name);
    bool calls_only = out->n_calls > 0 && kind != POL_CHAT_QWEN3;
    if (calls_only || (kind == POL_CHAT_LLAMA3 && out->has_tool_calls))
        return 0;
    return text_fail(err, errcap, "message %zu (%s): no \"content\"", i, out->role_name);
}

static int parse_reasoning(const json_t *m, size_t i, chat_msg *out, char *err, size_t errcap)
{
    static const char *names[] = {"reasoning_content", "thinking", "reasoning"};
    for (size_t k = 0; k < 3; k++) {
        const json_t *r = field(m, names[k]);
        if (!r)
            continue;
        if (!json_is_string(r))
            return text_fail(err, errcap, "message %zu: \"%s\" is not a string", i, names[k]);
        out->has_reasoning = true;
        out->reasoning = str_of(r);
        return 0;
    }
    return 0;
}

static int parse_message(pol_chat_kind kind, const json_t *m, size_t i, chat_msg *out, char *err,
                         size_t errcap)
{
    if (!json_is_object(m))
        return text_fail(err, errcap, "message %zu is not a JSON object", i);
    if (parse_role(kind, m, i, out, err, errcap) != 0 ||
        parse_calls(kind, m, i, out, err, errcap) != 0 ||
        parse_content(kind, m, i, out, err, errcap) != 0)
        return -1;
    if (kind == POL_CHAT_QWEN3 && out->role == CHAT_ASSISTANT)
        return parse_reasoning(m, i, out, err, errcap);
    return 0;
}

static int check_tools(const json_t *tools, char *err, size_t errcap)
{
    if (!tools)
        return 0;
    if (!json_is_array(tools))
        return text_fail(err, errcap, "tools: not an array");
    for (size_t i = 0; i < json_array_size(tools); i++)
        if (!json_is_object(json_array_get(tools, i)))
            return text_fail(err, errcap, "tools[%zu]: not a JSON object", i);
    return 0;
}

/* Llama 3 puts the tools into the first user message, which must exist (after the system one). */
static int check_llama3(const chat_conv *c, char *err, size_t errcap)
{
    if (!c->tools)
        return 0;
    size_t first = c->msgs[0].role == CHAT_SYSTEM ? 1 : 0;
    if (first >= c->n)
        return text_fail(err, errcap,
                         "the Llama 3 template puts the tools in the first user message, "
                         "and there is none");
    const chat_msg *m = &c->msgs[first];
    if (m->role != CHAT_USER || !json_is_string(m->content_json))
        return text_fail(err, errcap,
                         "message %zu (%s): the Llama 3 template puts the tools in the "
                         "first user message, so this one must be a user message",
                         first, m->role_name);
    return 0;
}

static void conv_free(chat_conv *c)
{
    for (size_t i = 0; c->msgs && i < c->n; i++)
        free(c->msgs[i].calls);
    free(c->msgs);
}

static int conv_parse(pol_chat_kind kind, const json_t *messages, const json_t *tools, chat_conv *c,
                      char *err, size_t errcap)
{
    if (!json_is_array(messages))
        return text_fail(err, errcap, "messages: not an array");
    if (json_array_size(messages) == 0)
        return text_fail(err, errcap, "messages: the conversation is empty");
    if (check_tools(tools, err, errcap) != 0)
        return -1;
    c->n = json_array_size(messages);
    c->tools = tools;
    c->msgs = calloc(c->n, sizeof *c->msgs);
    if (!c->msgs)
        return text_fail(err, errcap, "out of memory");
    for (size_t i = 0; i < c->n; i++)
        if (parse_message(kind, json_array_get(messages, i), i, &c->msgs[i], err, errcap) != 0)
            return -1;
    return kind == POL_CHAT_LLAMA3 ? check_llama3(c, err, errcap) : 0;
}

int pol_chat_render(pol_chat_kind kind, const json_t *messages, const json_t *tools,
                    const pol_chat_opts *opts, char **out, char *err, size_t errcap)
{
    static const pol_chat_opts defaults = {.add_generation_prompt = true, .enable_thinking = true};
    if (!out)
        return text_fail(err, errcap, "no output pointer");
    *out = NULL;
    if (kind != POL_CHAT_QWEN25 && kind != POL_CHAT_QWEN3 && kind != POL_CHAT_LLAMA3)
        return text_fail(err, errcap, "unknown chat template kind %d", (int)kind);
    chat_conv conv = {0};
    if (conv_parse(kind, messages, tools, &conv, err, errcap) != 0) {
        conv_free(&conv);
        return -1;
    }
    strbuf sb = STRBUF_INIT;
    const pol_chat_opts *o = opts ? opts : &defaults;
    int rc = kind == POL_CHAT_QWEN25  ? chat_render_qwen25(&conv, o, &sb)
             : kind == POL_CHAT_QWEN3 ? chat_render_qwen3(&conv, o, &sb)
                                      : chat_render_llama3(&conv, o, &sb);
    conv_free(&conv);
    if (rc != 0) {
        sb_free(&sb);
        return text_fail(err, errcap, "out of memory while rendering the chat");
    }
    *out = sb_steal(&sb);
    return *out ? 0 : text_fail(err, errcap, "out of memory");
}
