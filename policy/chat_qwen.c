/* chat_qwen: the Qwen2.5-Instruct and Qwen3 chat templates (ChatML: <|im_start|>role\n...
 * <|im_end|>\n), branch by branch as their Jinja templates render them through HF
 * apply_chat_template. The Qwen3 template is the one in Qwen3's tokenizer_config.json; the
 * Qwen2.5 one is kept for the tests in tests/policy/templates/qwen2.5.jinja. */
#include "chat_internal.h"

#include <string.h>

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>"

static const char QWEN25_DEFAULT_SYSTEM[] =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

static const char TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";

static const char TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>" IM_END "\n";

static bool has_tools(const chat_conv *c)
{
    return c->tools && json_array_size(c->tools) > 0; /* the templates test `if tools` */
}

/* "\n" + tojson(tool) for each tool, between the fixed head and tail. */
static int put_tools(const chat_conv *c, strbuf *sb)
{
    int rc = sb_puts(sb, TOOLS_HEAD);
    for (size_t i = 0; rc == 0 && i < json_array_size(c->tools); i++)
        rc = sb_putc(sb, '\n') | chat_json_dump(sb, json_array_get(c->tools, i), -1);
    return rc | sb_puts(sb, TOOLS_TAIL);
}

static int put_turn(strbuf *sb, const chat_msg *m)
{
    return sb_puts(sb, IM_START) | sb_puts(sb, m->role_name) | sb_putc(sb, '\n') |
           chat_put(sb, m->content) | sb_puts(sb, IM_END "\n");
}

/* A run of tool results is one user turn of <tool_response> blocks. */
static int put_tool_result(const chat_conv *c, size_t i, strbuf *sb)
{
    int rc = 0;
    if (i == 0 || c->msgs[i - 1].role != CHAT_TOOL)
        rc |= sb_puts(sb, IM_START "user");
    rc |= sb_puts(sb, "\n<tool_response>\n") | chat_put(sb, c->msgs[i].content) |
          sb_puts(sb, "\n</tool_response>");
    if (i + 1 == c->n || c->msgs[i + 1].role != CHAT_TOOL)
        rc |= sb_puts(sb, IM_END "\n");
    return rc;
}

/* <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>. Qwen3 writes string arguments
 * as they are (`if tool_call.arguments is string`); Qwen2.5 always passes them through tojson,
 * so a string comes out quoted. */
static int put_call(strbuf *sb, const chat_call *call, bool raw_string_args)
{
    int rc = sb_puts(sb, "<tool_call>\n{\"name\": \"") | chat_put(sb, call->name) |
             sb_puts(sb, "\", \"arguments\": ");
    if (raw_string_args && json_is_string(call->args))
        rc |= sb_append(sb, json_string_value(call->args), json_string_length(call->args));
    else
        rc |= chat_json_dump(sb, call->args, -1);
    return rc | sb_puts(sb, "}\n</tool_call>");
}

/* ---- Qwen2.5 ----------------------------------------------------------------------------------
 */

static int qwen25_system(const chat_conv *c, strbuf *sb)
{
    bool own = c->msgs[0].role == CHAT_SYSTEM;
    chat_str text = own ? c->msgs[0].content
                        : (chat_str){QWEN25_DEFAULT_SYSTEM, sizeof QWEN25_DEFAULT_SYSTEM - 1};
    int rc = sb_puts(sb, IM_START "system\n") | chat_put(sb, text);
    if (has_tools(c))
        return rc | sb_puts(sb, "\n\n") | put_tools(c, sb);
    return rc | sb_puts(sb, IM_END "\n");
}

static int qwen25_assistant_calls(const chat_msg *m, strbuf *sb)
{
    int rc = sb_puts(sb, IM_START "assistant");
    if (m->content.len)
        rc |= sb_putc(sb, '\n') | chat_put(sb, m->content);
    for (size_t j = 0; rc == 0 && j < m->n_calls; j++)
        rc |= sb_putc(sb, '\n') | put_call(sb, &m->calls[j], false);
    return rc | sb_puts(sb, IM_END "\n");
}

int chat_render_qwen25(const chat_conv *c, const pol_chat_opts *o, strbuf *sb)
{
    int rc = qwen25_system(c, sb);
    for (size_t i = 0; rc == 0 && i < c->n; i++) {
        const chat_msg *m = &c->msgs[i];
        if (m->role == CHAT_USER || (m->role == CHAT_SYSTEM && i > 0) ||
            (m->role == CHAT_ASSISTANT && m->n_calls == 0))
            rc |= put_turn(sb, m);
        else if (m->role == CHAT_ASSISTANT)
            rc |= qwen25_assistant_calls(m, sb);
        else if (m->role == CHAT_TOOL)
            rc |= put_tool_result(c, i, sb);
    }
    if (o->add_generation_prompt)
        rc |= sb_puts(sb, IM_START "assistant\n");
    return rc ? -1 : 0;
}

/* ---- Qwen3 ------------------------------------------------------------------------------------
 */

static int qwen3_system(const chat_conv *c, strbuf *sb)
{
    bool own = c->msgs[0].role == CHAT_SYSTEM;
    if (has_tools(c)) {
        int rc = sb_puts(sb, IM_START "system\n");
        if (own)
            rc |= chat_put(sb, c->msgs[0].content) | sb_puts(sb, "\n\n");
        return rc | put_tools(c, sb);
    }
    return own ? put_turn(sb, &c->msgs[0]) : 0;
}

/* The last user message that is a real query, not tool output wrapped in <tool_response>:
 * reasoning is shown only for the assistant turns after it. */
static size_t qwen3_last_query(const chat_conv *c)
{
    for (size_t i = c->n; i-- > 0;) {
        const chat_msg *m = &c->msgs[i];
        if (m->role != CHAT_USER)
            continue;
        bool wrapped = chat_str_starts(m->content.s, m->content.len, "<tool_response>") &&
                       chat_str_ends(m->content.s, m->content.len, "</tool_response>");
        if (!wrapped)
            return i;
    }
    return c->n - 1;
}

static chat_str str_lstrip_nl(chat_str s)
{
    while (s.len && s.s[0] == '\n')
        s.s++, s.len--;
    return s;
}

static chat_str str_rstrip_nl(chat_str s)
{
    while (s.len && s.s[s.len - 1] == '\n')
        s.len--;
    return s;
}

/* The last occurrence of needle in s, or NULL. */
static const char *str_rfind(chat_str s, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = s.len; i >= n; i--)
        if (!memcmp(s.s + i - n, needle, n))
            return s.s + i - n;
    return NULL;
}

/* Without reasoning_content, the template splits "<think>R</think>C" inside the content:
 * content = after the last </think>, reasoning = before the first </think>, after its last
 * <think>, newlines trimmed as the template does. */
static void qwen3_split_think(const chat_msg *m, chat_str *content, chat_str *reasoning)
{
    *content = m->content;
    *reasoning = (chat_str){"", 0};
    if (m->has_reasoning) {
        *reasoning = m->reasoning;
        return;
    }
    const char *first = memmem(m->content.s, m->content.len, "</think>", 8);
    if (!first)
        return;
    const char *last = str_rfind(m->content, "</think>");
    const char *after = last + 8;
    *content = str_lstrip_nl((chat_str){after, (size_t)(m->content.s + m->content.len - after)});
    chat_str before = str_rstrip_nl((chat_str){m->content.s, (size_t)(first - m->content.s)});
    const char *open = str_rfind(before, "<think>");
    if (open)
        before = (chat_str){open + 7, (size_t)(before.s + before.len - (open + 7))};
    *reasoning = str_lstrip_nl(before);
}

static int qwen3_assistant(const chat_conv *c, size_t i, size_t last_query, strbuf *sb)
{
    const chat_msg *m = &c->msgs[i];
    chat_str content, reasoning;
    qwen3_split_think(m, &content, &reasoning);
    bool last = i + 1 == c->n;
    int rc = sb_puts(sb, IM_START "assistant\n");
    if (i > last_query && (last || reasoning.len > 0))
        rc |= sb_puts(sb, "<think>\n") | chat_put(sb, str_rstrip_nl(str_lstrip_nl(reasoning))) |
              sb_puts(sb, "\n</think>\n\n") | chat_put(sb, str_lstrip_nl(content));
    else
        rc |= chat_put(sb, content);
    for (size_t j = 0; rc == 0 && j < m->n_calls; j++) {
        if (j > 0 || content.len > 0)
            rc |= sb_putc(sb, '\n');
        rc |= put_call(sb, &m->calls[j], true);
    }
    return rc | sb_puts(sb, IM_END "\n");
}

int chat_render_qwen3(const chat_conv *c, const pol_chat_opts *o, strbuf *sb)
{
    int rc = qwen3_system(c, sb);
    size_t last_query = qwen3_last_query(c);
    for (size_t i = 0; rc == 0 && i < c->n; i++) {
        const chat_msg *m = &c->msgs[i];
        if (m->role == CHAT_USER || (m->role == CHAT_SYSTEM && i > 0))
            rc |= put_turn(sb, m);
        else if (m->role == CHAT_ASSISTANT)
            rc |= qwen3_assistant(c, i, last_query, sb);
        else if (m->role == CHAT_TOOL)
            rc |= put_tool_result(c, i, sb);
    }
    if (o->add_generation_prompt) {
        rc |= sb_puts(sb, IM_START "assistant\n");
        if (!o->enable_thinking)
            rc |= sb_puts(sb, "<think>\n\n</think>\n\n");
    }
    return rc ? -1 : 0;
}
