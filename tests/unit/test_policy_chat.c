/* policy chat: the JSON that the templates' tojson must match (Python's json.dumps, whose outputs
 * are quoted below), Python's str.strip, the renderers' fixed text, every malformed-message error
 * naming its index, and the tool-call parser on good, malformed and hostile input. The renderers
 * are compared with HF on many conversations in tests/policy/test_chat.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy/chat.h"
#include "policy/chat_internal.h"
#include "util/text.h"

/* ---- helpers ----------------------------------------------------------------------------------
 */

static json_t *parse_json(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &e);
    if (!v)
        fail_msg("bad JSON in the test: %s: %s", e.text, text);
    return v;
}

static char *dump(const char *json_text, int indent)
{
    json_t *v = parse_json(json_text);
    strbuf sb = STRBUF_INIT;
    assert_int_equal(chat_json_dump(&sb, v, indent), 0);
    json_decref(v);
    return sb_steal(&sb);
}

/* Renders messages_json (and tools_json, NULL for none) with default options. */
static int render(pol_chat_kind kind, const char *messages_json, const char *tools_json,
                  bool generation_prompt, char **out, char *err)
{
    json_t *m = parse_json(messages_json);
    json_t *t = tools_json ? parse_json(tools_json) : NULL;
    pol_chat_opts o = {.add_generation_prompt = generation_prompt, .enable_thinking = true};
    int rc = pol_chat_render(kind, m, t, &o, out, err, 256);
    json_decref(m);
    json_decref(t);
    return rc;
}

static void expect_render(pol_chat_kind kind, const char *messages_json, const char *want)
{
    char *out = NULL, err[256] = "";
    if (render(kind, messages_json, NULL, true, &out, err) != 0)
        fail_msg("render failed: %s", err);
    assert_string_equal(out, want);
    free(out);
}

static void expect_error(pol_chat_kind kind, const char *messages_json, const char *tools_json,
                         const char *needle)
{
    char *out = (char *)1, err[256] = "";
    assert_int_equal(render(kind, messages_json, tools_json, true, &out, err), -1);
    assert_null(out);
    if (!strstr(err, needle))
        fail_msg("error \"%s\" lacks \"%s\"", err, needle);
}

/* ---- JSON as Python writes it -----------------------------------------------------------------
 */

static void test_float_repr_as_python(void **state)
{
    (void)state;
    /* left: the double; right: Python's repr() of it */
    static const struct {
        double d;
        const char *repr;
    } cases[] = {{0.1, "0.1"},
                 {1e-05, "1e-05"},
                 {1e16, "1e+16"},
                 {1e15, "1000000000000000.0"},
                 {123.0, "123.0"},
                 {-0.0, "-0.0"},
                 {0.0, "0.0"},
                 {5e-324, "5e-324"},
                 {1.7976931348623157e308, "1.7976931348623157e+308"},
                 {0.0001, "0.0001"},
                 {2.5e-07, "2.5e-07"},
                 {1234567.125, "1234567.125"},
                 {1.0 / 3.0, "0.3333333333333333"}};
    char buf[40];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(chat_py_float_repr(cases[i].d, buf, sizeof buf), 0);
        assert_string_equal(buf, cases[i].repr);
    }
    assert_int_equal(chat_py_float_repr(1.0 / 3.0, buf, 5), -1); /* too small a buffer */
}

static void test_json_dump_as_python(void **state)
{
    (void)state;
    /* Python: json.dumps({...}, ensure_ascii=False) */
    char *s = dump("{\"k\\u00e9\": [1, 2.0, \"a\\\"b\\\\c\\n\\t\\u0001\\u001f\\u007f\\u2028\", "
                   "null, true, false, {}, []], \"z\": {\"y\": -3}}",
                   -1);
    assert_string_equal(s, "{\"k\xc3\xa9\": [1, 2.0, \"a\\\"b\\\\c\\n\\t\\u0001\\u001f\x7f"
                           "\xe2\x80\xa8\", null, true, false, {}, []], \"z\": {\"y\": -3}}");
    free(s);
    /* Python: json.dumps({"a": [1, {"b": []}], "c": {}}, indent=4) */
    s = dump("{\"a\": [1, {\"b\": []}], \"c\": {}}", 4);
    assert_string_equal(s, "{\n    \"a\": [\n        1,\n        {\n            \"b\": []\n"
                           "        }\n    ],\n    \"c\": {}\n}");
    free(s);
    s = dump("{\"z\": 1, \"a\": 2, \"m\": 3}", -1); /* the given key order, never sorted */
    assert_string_equal(s, "{\"z\": 1, \"a\": 2, \"m\": 3}");
    free(s);
}

static void test_py_strip(void **state)
{
    (void)state;
    /* Python: ' \u3000\u00a0x\u200b y\u2029\x1c'.strip() == 'x\u200b y' (U+200B is no space) */
    const char *s = " \xe3\x80\x80\xc2\xa0x\xe2\x80\x8b y\xe2\x80\xa9\x1c";
    size_t b, e;
    chat_py_strip(s, strlen(s), &b, &e);
    assert_int_equal(e - b, strlen("x\xe2\x80\x8b y"));
    assert_memory_equal(s + b, "x\xe2\x80\x8b y", e - b);
    chat_py_strip(" \t\n", 3, &b, &e);
    assert_int_equal(e - b, 0);
    chat_py_strip("\xff \x80", 3, &b, &e); /* broken UTF-8 is never whitespace */
    assert_int_equal(b, 0);
    assert_int_equal(e, 3);
}

/* ---- rendering --------------------------------------------------------------------------------
 */

static void test_kind_parse(void **state)
{
    (void)state;
    assert_int_equal(pol_chat_kind_parse("qwen3"), POL_CHAT_QWEN3);
    assert_int_equal(pol_chat_kind_parse("qwen2.5"), POL_CHAT_QWEN25);
    assert_int_equal(pol_chat_kind_parse("llama3"), POL_CHAT_LLAMA3);
    assert_int_equal(pol_chat_kind_parse("mistral"), -1);
    assert_int_equal(pol_chat_kind_parse(""), -1);
    assert_int_equal(pol_chat_kind_parse(NULL), -1);
}

static void test_render_fixed_text(void **state)
{
    (void)state;
    const char *chat = "[{\"role\": \"user\", \"content\": \" hi \"}]";
    expect_render(POL_CHAT_QWEN3, chat,
                  "<|im_start|>user\n hi <|im_end|>\n<|im_start|>assistant\n");
    expect_render(
        POL_CHAT_QWEN25, chat,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\n hi <|im_end|>\n<|im_start|>assistant\n");
    expect_render(
        POL_CHAT_LLAMA3, chat,
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
        "Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>"
        "user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant"
        "<|end_header_id|>\n\n");
    /* enable_thinking=false: the empty think block after the generation prompt */
    json_t *m = parse_json(chat);
    pol_chat_opts o = {.add_generation_prompt = true, .enable_thinking = false};
    char *out = NULL, err[256];
    assert_int_equal(pol_chat_render(POL_CHAT_QWEN3, m, NULL, &o, &out, err, sizeof err), 0);
    assert_string_equal(out, "<|im_start|>user\n hi <|im_end|>\n<|im_start|>assistant\n"
                             "<think>\n\n</think>\n\n");
    free(out);
    json_decref(m);
}

static void test_render_qwen3_tool_call_arguments(void **state)
{
    (void)state;
    /* object arguments through tojson; string arguments written as they are */
    const char *chat =
        "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
        "\"content\": \"\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
        "\"arguments\": {\"x\":1}}}, {\"name\": \"g\", \"arguments\": \"{\\\"y\\\":2}\"}]}]";
    char *out = NULL, err[256];
    assert_int_equal(render(POL_CHAT_QWEN3, chat, NULL, false, &out, err), 0);
    assert_string_equal(out,
                        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                        "</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n"
                        "</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"y\":2}}\n"
                        "</tool_call><|im_end|>\n");
    free(out);
}

static void test_render_errors_name_the_message(void **state)
{
    (void)state;
    const char *u = "{\"role\": \"user\", \"content\": \"u\"}";
    char chat[512];
#define WITH(second) (snprintf(chat, sizeof chat, "[%s, %s]", u, second), chat)
    expect_error(POL_CHAT_QWEN3, WITH("{\"role\": \"robot\", \"content\": \"x\"}"), NULL,
                 "message 1: unknown role \"robot\"");
    expect_error(POL_CHAT_QWEN3, WITH("{\"role\": \"ipython\", \"content\": \"x\"}"), NULL,
                 "message 1: unknown role \"ipython\"");
    expect_error(POL_CHAT_QWEN25, WITH("{\"content\": \"x\"}"), NULL, "message 1: no \"role\"");
    expect_error(POL_CHAT_QWEN25, WITH("{\"role\": 3}"), NULL, "message 1: \"role\" is not");
    expect_error(POL_CHAT_LLAMA3, WITH("{\"role\": \"user\"}"), NULL,
                 "message 1 (user): no \"content\"");
    expect_error(POL_CHAT_QWEN3, WITH("{\"role\": \"user\", \"content\": null}"), NULL,
                 "message 1 (user): no \"content\"");
    expect_error(POL_CHAT_QWEN3, WITH("{\"role\": \"user\", \"content\": [1]}"), NULL,
                 "message 1 (user): \"content\" is not a string");
    expect_error(POL_CHAT_QWEN3, WITH("\"text\""), NULL, "message 1 is not a JSON object");
    expect_error(POL_CHAT_QWEN3,
                 WITH("{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                      "{\"name\": \"f\", \"arguments\": {}}}]}"),
                 NULL, "message 1 (assistant): no \"content\"");
    expect_error(POL_CHAT_QWEN3,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"tool_calls\": {}}"),
                 NULL, "message 1: \"tool_calls\" is not an array");
    expect_error(POL_CHAT_QWEN3,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"tool_calls\": [7]}"),
                 NULL, "message 1: tool_calls[0] is not an object");
    expect_error(POL_CHAT_QWEN25,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"tool_calls\": [{\"function\": {\"arguments\": {}}}]}"),
                 NULL, "message 1: tool_calls[0]: no function name");
    expect_error(POL_CHAT_QWEN25,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}"),
                 NULL, "message 1: tool_calls[0] (f): no \"arguments\"");
    expect_error(POL_CHAT_QWEN3,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"tool_calls\": [{\"function\": {\"name\": \"f\", "
                      "\"arguments\": 5}}]}"),
                 NULL, "\"arguments\" is neither an object nor a JSON-encoded string");
    expect_error(POL_CHAT_QWEN3,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"tool_calls\": [{\"function\": 1}]}"),
                 NULL, "message 1: tool_calls[0].function is not an object");
    expect_error(POL_CHAT_LLAMA3,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]}"),
                 NULL, "message 1: tool_calls[0] has no \"function\"");
    expect_error(POL_CHAT_LLAMA3,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"tool_calls\": []}"),
                 NULL, "message 1: the Llama 3 template takes exactly one tool call");
    expect_error(POL_CHAT_QWEN3,
                 WITH("{\"role\": \"user\", \"content\": \"\", \"tool_calls\": []}"), NULL,
                 "message 1: tool_calls on a \"user\" message");
    expect_error(POL_CHAT_QWEN3,
                 WITH("{\"role\": \"assistant\", \"content\": \"\", "
                      "\"reasoning_content\": 1}"),
                 NULL, "message 1: \"reasoning_content\" is not a string");
#undef WITH
    expect_error(POL_CHAT_QWEN3, "[]", NULL, "the conversation is empty");
    expect_error(POL_CHAT_QWEN3, "{}", NULL, "messages: not an array");
    expect_error(POL_CHAT_QWEN3, "[{\"role\": \"user\", \"content\": \"\"}]", "{}",
                 "tools: not an array");
    expect_error(POL_CHAT_QWEN3, "[{\"role\": \"user\", \"content\": \"\"}]", "[{}, 2]",
                 "tools[1]: not a JSON object");
    expect_error(POL_CHAT_LLAMA3, "[{\"role\": \"system\", \"content\": \"\"}]", "[]",
                 "puts the tools in the first user message, and there is none");
    expect_error(POL_CHAT_LLAMA3,
                 "[{\"role\": \"system\", \"content\": \"\"}, {\"role\": \"assistant\", "
                 "\"content\": \"\"}]",
                 "[]", "message 1 (assistant): the Llama 3 template puts the tools");
}

static void test_render_null_arguments(void **state)
{
    (void)state;
    json_t *m = parse_json("[{\"role\": \"user\", \"content\": \"x\"}]");
    char *out = (char *)1, err[64];
    assert_int_equal(pol_chat_render(POL_CHAT_QWEN3, m, NULL, NULL, NULL, err, sizeof err), -1);
    assert_int_equal(pol_chat_render((pol_chat_kind)9, m, NULL, NULL, &out, err, sizeof err), -1);
    assert_null(out);
    assert_non_null(strstr(err, "unknown chat template kind"));
    /* NULL options: a generation prompt, thinking on */
    assert_int_equal(pol_chat_render(POL_CHAT_QWEN3, m, NULL, NULL, &out, err, sizeof err), 0);
    assert_string_equal(out, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    json_decref(m);
}

/* ---- the tool-call parser ---------------------------------------------------------------------
 */

typedef struct {
    json_t *calls, *errors;
    char *content;
    int n;
} parsed;

static parsed parse(pol_chat_kind kind, const char *text, size_t len)
{
    parsed p = {0};
    p.n = pol_chat_parse_tool_calls(kind, text, len, &p.calls, &p.errors, &p.content);
    assert_true(p.n >= 0);
    assert_int_equal((size_t)p.n, json_array_size(p.calls));
    return p;
}

static void parsed_free(parsed *p)
{
    json_decref(p->calls);
    json_decref(p->errors);
    free(p->content);
}

static void expect_json(const json_t *got, const char *want_json)
{
    json_t *want = parse_json(want_json);
    if (!json_equal((json_t *)got, want)) {
        char *g = json_dumps(got, JSON_COMPACT);
        fail_msg("got %s, want %s", g, want_json);
    }
    json_decref(want);
}

static const char *error_at(const parsed *p, size_t i)
{
    return json_string_value(json_object_get(json_array_get(p->errors, i), "error"));
}

static void test_parse_qwen_calls(void **state)
{
    (void)state;
    const char *text = "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1]}}\n"
                       "</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"y\\\": 2}\"}"
                       "</tool_call><|im_end|>";
    parsed p = parse(POL_CHAT_QWEN3, text, strlen(text));
    expect_json(p.calls, "[{\"name\": \"a\", \"arguments\": {\"x\": [1]}}, "
                         "{\"name\": \"b\", \"arguments\": {\"y\": 2}}]");
    expect_json(p.errors, "[]");
    assert_string_equal(p.content, "Sure.");
    parsed_free(&p);
}

static void test_parse_qwen_malformed(void **state)
{
    (void)state;
    const char *text = "<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>" /* bad JSON */
                       "<tool_call>[1]</tool_call>"                                 /* not object */
                       "<tool_call>{\"name\": 3}</tool_call>"                       /* bad name */
                       "<tool_call>{\"name\": \"x\", \"arguments\": 4}</tool_call>" /* bad args */
                       "<tool_call> \n </tool_call>"                                /* empty */
                       "<tool_call>{\"name\": \"ok\"}</tool_call>"                  /* fine */
                       "<tool_call>{\"name\": \"cut\""; /* unterminated */
    parsed p = parse(POL_CHAT_QWEN25, text, strlen(text));
    expect_json(p.calls, "[{\"name\": \"ok\", \"arguments\": {}}]");
    assert_int_equal(json_array_size(p.errors), 6);
    assert_non_null(strstr(error_at(&p, 0), "not valid JSON"));
    assert_non_null(strstr(error_at(&p, 1), "not a JSON object"));
    assert_non_null(strstr(error_at(&p, 2), "\"name\" is not a non-empty string"));
    assert_non_null(strstr(error_at(&p, 3), "arguments are not a JSON object"));
    assert_non_null(strstr(error_at(&p, 4), "empty"));
    assert_non_null(strstr(error_at(&p, 5), "unterminated"));
    json_t *last = json_array_get(p.errors, 5);
    assert_int_equal(json_integer_value(json_object_get(last, "index")), 6);
    assert_string_equal(json_string_value(json_object_get(last, "text")),
                        "<tool_call>{\"name\": \"cut\"");
    assert_string_equal(p.content, "");
    parsed_free(&p);
}

static void test_parse_qwen_unterminated_then_good(void **state)
{
    (void)state;
    const char *text = "a<tool_call>{\"name\": \"x\"<tool_call>{\"name\": \"y\"}</tool_call>b";
    parsed p = parse(POL_CHAT_QWEN3, text, strlen(text));
    expect_json(p.calls, "[{\"name\": \"y\", \"arguments\": {}}]");
    assert_int_equal(json_array_size(p.errors), 1);
    assert_non_null(strstr(error_at(&p, 0), "unterminated"));
    assert_string_equal(p.content, "ab");
    parsed_free(&p);
}

static void test_parse_llama(void **state)
{
    (void)state;
    const char *text = "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"1;2\"}}; "
                       "{\"name\": \"b\", \"arguments\": \"{}\"};{\"name\": \"c\"} junk; {\"x\": 1}"
                       "<|eom_id|>\n";
    parsed p = parse(POL_CHAT_LLAMA3, text, strlen(text));
    expect_json(p.calls, "[{\"name\": \"a\", \"arguments\": {\"s\": \"1;2\"}}, "
                         "{\"name\": \"b\", \"arguments\": {}}]");
    assert_int_equal(json_array_size(p.errors), 2);
    assert_non_null(strstr(error_at(&p, 0), "text follows"));
    assert_non_null(strstr(error_at(&p, 1), "no \"name\""));
    parsed_free(&p);

    text = "  {\"name\": \"solo\", \"parameters\": {\"k\": true}}<|eot_id|>";
    p = parse(POL_CHAT_LLAMA3, text, strlen(text));
    expect_json(p.calls, "[{\"name\": \"solo\", \"arguments\": {\"k\": true}}]");
    assert_string_equal(p.content, "");
    parsed_free(&p);

    text = "Plain answer with {braces} and ; semicolons.";
    p = parse(POL_CHAT_LLAMA3, text, strlen(text));
    assert_int_equal(p.n, 0);
    expect_json(p.errors, "[]");
    assert_string_equal(p.content, text);
    parsed_free(&p);
}

static void test_parse_hostile_bytes(void **state)
{
    (void)state;
    /* NULs, invalid UTF-8 inside and outside the blocks: reported, content made valid UTF-8 */
    static const char text[] = "\xff\x00x<tool_call>{\"name\": \"\xc3\x28\"}</tool_call>\x80";
    parsed p = parse(POL_CHAT_QWEN3, text, sizeof text - 1);
    assert_int_equal(p.n, 0);
    assert_int_equal(json_array_size(p.errors), 1);
    const char *raw = json_string_value(json_object_get(json_array_get(p.errors, 0), "text"));
    assert_string_equal(raw, "<tool_call>{\"name\": \"\xef\xbf\xbd(\"}</tool_call>");
    assert_non_null(strstr(error_at(&p, 0), "not valid JSON"));
    assert_string_equal(p.content, "\xef\xbf\xbd\xef\xbf\xbdx\xef\xbf\xbd");
    parsed_free(&p);
    /* Jansson's message quotes the token it stopped in, here cut inside a UTF-8 character: the
     * error is still valid UTF-8 (a failed JSON string here once made the parser report OOM) */
    static const char cut[] = "<tool_call>{\"q\": \"\\\xc5\x81\"}</tool_call>";
    p = parse(POL_CHAT_QWEN3, cut, sizeof cut - 1);
    assert_int_equal(json_array_size(p.errors), 1);
    const char *what = error_at(&p, 0);
    assert_non_null(strstr(what, "invalid escape near"));
    assert_true(text_is_utf8(what, strlen(what)));
    parsed_free(&p);
    /* nothing at all */
    p = parse(POL_CHAT_LLAMA3, NULL, 0);
    assert_int_equal(p.n, 0);
    assert_string_equal(p.content, "");
    parsed_free(&p);
    /* content may be left out */
    json_t *calls, *errors;
    assert_int_equal(pol_chat_parse_tool_calls(POL_CHAT_QWEN3,
                                               "<tool_call>{\"name\":\"a\"}"
                                               "</tool_call>",
                                               35, &calls, &errors, NULL),
                     1);
    json_decref(calls);
    json_decref(errors);
}

/* Many blocks and deep nesting stay linear and never recurse without bound. */
static void test_parse_large_input(void **state)
{
    (void)state;
    const char *unit = "<tool_call>{\"name\": \"f\", \"arguments\": {\"i\": 1}}</tool_call>";
    size_t reps = 20000, n = strlen(unit);
    char *big = malloc(reps * n + 200000);
    assert_non_null(big);
    for (size_t i = 0; i < reps; i++)
        memcpy(big + i * n, unit, n);
    memset(big + reps * n, '[', 200000); /* an unterminated, very deep JSON block at the end */
    memcpy(big + reps * n, "<tool_call>", 11);
    parsed p = parse(POL_CHAT_QWEN3, big, reps * n + 200000);
    assert_int_equal(p.n, (int)reps);
    assert_int_equal(json_array_size(p.errors), 1);
    parsed_free(&p);
    memset(big, '{', 200000);
    p = parse(POL_CHAT_LLAMA3, big, 200000);
    assert_int_equal(p.n, 0);
    assert_int_equal(json_array_size(p.errors), 1);
    parsed_free(&p);
    free(big);
}

/* Many <tool_call> openers and no closer: one error each, in linear time (a fresh search for the
 * closer per block made 1 MB of openers take seconds; here the bound is ~1000x the linear time). */
static void test_parse_many_unterminated_is_linear(void **state)
{
    (void)state;
    size_t reps = 100000, n = strlen("<tool_call>");
    char *big = malloc(reps * n);
    assert_non_null(big);
    for (size_t i = 0; i < reps; i++)
        memcpy(big + i * n, "<tool_call>", n);
    double t0 = text_mono_ms();
    parsed p = parse(POL_CHAT_QWEN3, big, reps * n);
    double ms = text_mono_ms() - t0;
    assert_int_equal(p.n, 0);
    assert_int_equal(json_array_size(p.errors), reps);
    assert_true(ms < 5000);
    parsed_free(&p);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_repr_as_python),
        cmocka_unit_test(test_json_dump_as_python),
        cmocka_unit_test(test_py_strip),
        cmocka_unit_test(test_kind_parse),
        cmocka_unit_test(test_render_fixed_text),
        cmocka_unit_test(test_render_qwen3_tool_call_arguments),
        cmocka_unit_test(test_render_errors_name_the_message),
        cmocka_unit_test(test_render_null_arguments),
        cmocka_unit_test(test_parse_qwen_calls),
        cmocka_unit_test(test_parse_qwen_malformed),
        cmocka_unit_test(test_parse_qwen_unterminated_then_good),
        cmocka_unit_test(test_parse_llama),
        cmocka_unit_test(test_parse_hostile_bytes),
        cmocka_unit_test(test_parse_large_input),
        cmocka_unit_test(test_parse_many_unterminated_is_linear),
    };
    return cmocka_run_group_tests_name("policy_chat", tests, NULL, NULL);
}
