/* chat_llama: the Llama 3.1-Instruct chat template (<|begin_of_text|>, header tokens, <|eot_id|>),
 * as tests/policy/templates/llama3.jinja renders it through HF apply_chat_template, with that
 * template's defaults: tools given as JSON in the first user message (tools_in_user_message),
 * date "26 Jul 2024", no built-in tools (so no <|eom_id|>). */
#include "chat_internal.h"

#define HEADER(role) "<|start_header_id|>" role "<|end_header_id|>\n\n"
#define EOT "<|eot_id|>"

static const char TOOLS_PROMPT[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\n"
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name "
    "and its value}.Do not use variables.\n\n";

/* Jinja's `trim`: Python's str.strip(), so Unicode whitespace goes too. */
static int put_trimmed(strbuf *sb, chat_str s)
{
    size_t b, e;
    chat_py_strip(s.s, s.len, &b, &e);
    return sb_append(sb, s.s + b, e - b);
}

static int put_system(const chat_conv *c, strbuf *sb)
{
    int rc = sb_puts(sb, "<|begin_of_text|>" HEADER("system"));
    if (c->tools)
        rc |= sb_puts(sb, "Environment: ipython\n");
    rc |= sb_puts(sb, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    if (c->msgs[0].role == CHAT_SYSTEM)
        rc |= put_trimmed(sb, c->msgs[0].content);
    return rc | sb_puts(sb, EOT);
}

/* The tools, each as json.dumps(indent=4) and a blank line, then the first user message. */
static int put_tools_turn(const chat_conv *c, const chat_msg *first_user, strbuf *sb)
{
    int rc = sb_puts(sb, HEADER("user")) | sb_puts(sb, TOOLS_PROMPT);
    for (size_t i = 0; rc == 0 && i < json_array_size(c->tools); i++)
        rc |= chat_json_dump(sb, json_array_get(c->tools, i), 4) | sb_puts(sb, "\n\n");
    return rc | put_trimmed(sb, first_user->content) | sb_puts(sb, EOT);
}

/* {"name": "NAME", "parameters": tojson(arguments)}: a string argument comes out quoted. */
static int put_call(const chat_msg *m, strbuf *sb)
{
    const chat_call *call = &m->calls[0];
    return sb_puts(sb, HEADER("assistant") "{\"name\": \"") | chat_put(sb, call->name) |
           sb_puts(sb, "\", \"parameters\": ") | chat_json_dump(sb, call->args, -1) |
           sb_puts(sb, "}" EOT);
}

/* The template tests `content is mapping or content is iterable`, which a string also is, so
 * every tool result is written through tojson: text comes out as a quoted JSON string. */
static int put_tool_result(const chat_msg *m, strbuf *sb)
{
    return sb_puts(sb, HEADER("ipython")) | chat_json_dump(sb, m->content_json, -1) |
           sb_puts(sb, EOT);
}

static int put_turn(const chat_msg *m, strbuf *sb)
{
    return sb_puts(sb, "<|start_header_id|>") | sb_puts(sb, m->role_name) |
           sb_puts(sb, "<|end_header_id|>\n\n") | put_trimmed(sb, m->content) | sb_puts(sb, EOT);
}

int chat_render_llama3(const chat_conv *c, const pol_chat_opts *o, strbuf *sb)
{
    size_t i = c->msgs[0].role == CHAT_SYSTEM ? 1 : 0;
    int rc = put_system(c, sb);
    if (c->tools) /* chat_render.c checked that message i is a user message */
        rc |= put_tools_turn(c, &c->msgs[i++], sb);
    for (; rc == 0 && i < c->n; i++) {
        const chat_msg *m = &c->msgs[i];
        if (m->role == CHAT_TOOL || m->role == CHAT_IPYTHON)
            rc |= put_tool_result(m, sb);
        else if (m->has_tool_calls)
            rc |= put_call(m, sb);
        else
            rc |= put_turn(m, sb);
    }
    if (o->add_generation_prompt)
        rc |= sb_puts(sb, HEADER("assistant"));
    return rc ? -1 : 0;
}
