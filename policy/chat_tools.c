/* chat_tools: tool calls out of a model's generated text.
 *   Qwen2.5 / Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> blocks, any
 *     number per message, newlines optional; arguments as an object or as a JSON-encoded string.
 *   Llama 3: <|python_tag|> followed by the call(s), or a reply that is itself a JSON object
 *     {"name": ..., "parameters": {...}}; several calls are separated by ';'.
 * Whatever the bytes (invalid UTF-8, NULs, unterminated blocks), the parser reports what it
 * cannot use in *errors and never fails but for memory. */
#include "chat_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/text.h"

#define CALL_OPEN "<tool_call>"
#define CALL_CLOSE "</tool_call>"
#define PYTHON_TAG "<|python_tag|>"

typedef struct {
    json_t *calls;
    json_t *errors;
    strbuf content;
    size_t index; /* of the next call block, well-formed or not */
    bool oom;
} parse_state;

static bool is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* ---- one call ---------------------------------------------------------------------------------
 */

static void add_error(parse_state *ps, const char *what, const char *raw, size_t raw_len)
{
    /* both go into JSON strings, which must be valid UTF-8 without NULs: the raw block may be
     * anything, and Jansson's messages quote the bytes they stopped at */
    char *clean_what = text_sanitize_utf8(what, strlen(what));
    char *clean_raw = text_sanitize_utf8(raw, raw_len);
    json_t *e = clean_what && clean_raw
                    ? json_pack("{s:I, s:s, s:s}", "index", (json_int_t)ps->index, "error",
                                clean_what, "text", clean_raw)
                    : NULL;
    free(clean_what);
    free(clean_raw);
    if (!e || json_array_append_new(ps->errors, e) != 0)
        ps->oom = true;
    ps->index++;
}

/* The arguments as an object: given as one, or as a string holding one. On a problem returns
 * NULL and points *why at the reason. */
static json_t *arguments_object(const json_t *args, const char **why)
{
    if (!args || json_is_null(args))
        return json_object(); /* a call of a tool without parameters, e.g. {"name": "Submit"} */
    if (json_is_object(args))
        return json_incref((json_t *)args);
    if (!json_is_string(args)) {
        *why = "the arguments are not a JSON object";
        return NULL;
    }
    json_t *parsed =
        json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
    if (!parsed)
        *why = "the arguments are a string that is not valid JSON";
    else if (!json_is_object(parsed))
        *why = "the arguments are a string that does not hold a JSON object";
    if (parsed && json_is_object(parsed))
        return parsed;
    json_decref(parsed);
    return NULL;
}

/* Adds a decoded call {"name", args_key: ...} to the calls, or its problem to the errors. */
static void add_call(parse_state *ps, json_t *obj, const char *const *args_keys, const char *raw,
                     size_t raw_len)
{
    const char *why = NULL;
    json_t *name = json_object_get(obj, "name");
    if (!json_is_object(obj))
        why = "the call is not a JSON object";
    else if (!name)
        why = "the call has no \"name\"";
    else if (!json_is_string(name) || json_string_length(name) == 0)
        why = "the call's \"name\" is not a non-empty string";
    if (why) {
        add_error(ps, why, raw, raw_len);
        return;
    }
    const json_t *args = json_object_get(obj, args_keys[0]);
    if (!args && args_keys[1])
        args = json_object_get(obj, args_keys[1]);
    json_t *args_obj = arguments_object(args, &why);
    if (!args_obj) {
        add_error(ps, why ? why : "out of memory", raw, raw_len);
        return;
    }
    json_t *call = json_pack("{s:O, s:o}", "name", name, "arguments", args_obj);
    if (!call || json_array_append_new(ps->calls, call) != 0)
        ps->oom = true;
    ps->index++;
}

/* Decodes body (one JSON object, whitespace around allowed) as a call. */
static void parse_call_body(parse_state *ps, const char *body, size_t len,
                            const char *const *args_keys, const char *raw, size_t raw_len)
{
    while (len && is_json_space(body[0]))
        body++, len--;
    while (len && is_json_space(body[len - 1]))
        len--;
    if (len == 0) {
        add_error(ps, "the tool call is empty", raw, raw_len);
        return;
    }
    json_error_t jerr;
    json_t *obj = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    if (!obj) {
        char what[200];
        text_fmt(what, sizeof what, "the tool call is not valid JSON: %s (column %d)", jerr.text,
                 jerr.column);
        add_error(ps, what, raw, raw_len);
        return;
    }
    add_call(ps, obj, args_keys, raw, raw_len);
    json_decref(obj);
}

/* ---- Qwen -------------------------------------------------------------------------------------
 */

static void put_content(parse_state *ps, const char *s, size_t n)
{
    if (sb_append(&ps->content, s, n) != 0)
        ps->oom = true;
}

static void parse_qwen(parse_state *ps, const char *text, size_t len)
{
    static const char *const args_keys[] = {"arguments", NULL};
    const size_t open_len = strlen(CALL_OPEN), close_len = strlen(CALL_CLOSE);
    size_t pos = 0;
    /* the first </tool_call> at or after `body`, kept between blocks: searching afresh for each
     * of many unterminated blocks would make the parse quadratic in the text's length */
    const char *close = text;
    while (pos < len && !ps->oom) {
        const char *open = memmem(text + pos, len - pos, CALL_OPEN, open_len);
        if (!open) {
            put_content(ps, text + pos, len - pos);
            return;
        }
        size_t at = (size_t)(open - text), body = at + open_len;
        put_content(ps, text + pos, at - pos);
        if (close && close < text + body)
            close = memmem(text + body, len - body, CALL_CLOSE, close_len);
        const char *reopen = memmem(text + body, len - body, CALL_OPEN, open_len);
        if (!close || (reopen && reopen < close)) {
            /* cut short: up to the next block, if any, so the calls after it still count */
            size_t end = reopen ? (size_t)(reopen - text) : len;
            add_error(ps, "unterminated <tool_call> block (no </tool_call>)", text + at, end - at);
            pos = end;
            continue;
        }
        size_t end = (size_t)(close - text);
        parse_call_body(ps, text + body, end - body, args_keys, text + at, end + close_len - at);
        pos = end + close_len;
    }
}

/* ---- Llama 3 ----------------------------------------------------------------------------------
 */

/* Calls separated by ';': each decoded where it stands (Jansson stops after one object and says
 * how far it read), so a ';' inside a string does not split a call. */
static void parse_llama_calls(parse_state *ps, const char *body, size_t len)
{
    static const char *const args_keys[] = {"parameters", "arguments"};
    size_t pos = 0;
    while (!ps->oom) {
        while (pos < len && (is_json_space(body[pos]) || body[pos] == ';'))
            pos++;
        if (pos >= len)
            return;
        json_error_t jerr;
        json_t *obj = json_loadb(body + pos, len - pos, JSON_DISABLE_EOF_CHECK, &jerr);
        size_t used = obj ? (size_t)jerr.position : 0;
        size_t end = pos + used;
        while (obj && end < len && is_json_space(body[end]))
            end++;
        if (!obj || (end < len && body[end] != ';')) {
            /* not one JSON object up to the next ';': report that stretch, go on after it */
            const char *semi = memchr(body + end, ';', len - end);
            size_t stop = semi ? (size_t)(semi - body) : len;
            char what[200];
            text_fmt(what, sizeof what, "the tool call is not valid JSON: %s",
                     obj ? "text follows the JSON object" : jerr.text);
            json_decref(obj);
            add_error(ps, what, body + pos, stop - pos);
            pos = stop;
            continue;
        }
        add_call(ps, obj, args_keys, body + pos, used);
        json_decref(obj);
        pos = end;
    }
}

static void parse_llama(parse_state *ps, const char *text, size_t len)
{
    const char *tag = memmem(text, len, PYTHON_TAG, strlen(PYTHON_TAG));
    if (tag) {
        size_t at = (size_t)(tag - text), body = at + strlen(PYTHON_TAG);
        put_content(ps, text, at);
        size_t before = ps->index;
        parse_llama_calls(ps, text + body, len - body);
        if (ps->index == before)
            add_error(ps, "nothing follows <|python_tag|>", text + at, len - at);
        return;
    }
    size_t lead = 0;
    while (lead < len && is_json_space(text[lead]))
        lead++;
    if (lead < len && text[lead] == '{') /* a reply that is a JSON object is a call */
        parse_llama_calls(ps, text + lead, len - lead);
    else
        put_content(ps, text, len);
}

/* ---- the API ----------------------------------------------------------------------------------
 */

/* The end-of-turn token a decoder may leave at the end is not part of the reply. */
static size_t without_end_token(pol_chat_kind kind, const char *text, size_t len)
{
    static const char *const qwen[] = {"<|im_end|>", "<|endoftext|>", NULL};
    static const char *const llama[] = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", NULL};
    const char *const *ends = kind == POL_CHAT_LLAMA3 ? llama : qwen;
    size_t n = len;
    while (n && is_json_space(text[n - 1]))
        n--;
    for (size_t i = 0; ends[i]; i++)
        if (chat_str_ends(text, n, ends[i]))
            return n - strlen(ends[i]);
    return len;
}

/* The content without the whitespace the call blocks leave around it, as a C string of valid
 * UTF-8 (invalid bytes and NULs become U+FFFD, as the JSON it usually goes into needs). */
static char *trimmed_content(strbuf *sb)
{
    size_t b = 0, e = sb->len;
    while (b < e && is_json_space(sb->data[b]))
        b++;
    while (e > b && is_json_space(sb->data[e - 1]))
        e--;
    return text_sanitize_utf8(e > b ? sb->data + b : "", e - b);
}

int pol_chat_parse_tool_calls(pol_chat_kind kind, const char *text, size_t len, json_t **calls,
                              json_t **errors, char **content)
{
    parse_state ps = {.calls = json_array(), .errors = json_array(), .content = STRBUF_INIT};
    ps.oom = !ps.calls || !ps.errors;
    if (!text)
        len = 0;
    len = without_end_token(kind, text ? text : "", len);
    if (!ps.oom && len > 0) {
        if (kind == POL_CHAT_LLAMA3)
            parse_llama(&ps, text, len);
        else
            parse_qwen(&ps, text, len);
    }
    char *c = NULL;
    if (!ps.oom && content && !(c = trimmed_content(&ps.content)))
        ps.oom = true;
    sb_free(&ps.content);
    if (ps.oom) {
        json_decref(ps.calls);
        json_decref(ps.errors);
        free(c);
        *calls = *errors = NULL;
        if (content)
            *content = NULL;
        return -1;
    }
    *calls = ps.calls;
    *errors = ps.errors;
    if (content)
        *content = c;
    return (int)json_array_size(ps.calls);
}
