/* libFuzzer target: the tool-call parser of every template on arbitrary bytes, and, when the
 * bytes are JSON, the renderers on them as a conversation ({"messages", "tools"} or a bare
 * array). Neither may crash, leak or read out of bounds; the parser may fail only for memory. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/chat.h"

static void parse_all_kinds(const char *text, size_t len)
{
    static const pol_chat_kind kinds[] = {POL_CHAT_QWEN25, POL_CHAT_QWEN3, POL_CHAT_LLAMA3};
    for (size_t k = 0; k < 3; k++) {
        json_t *calls = NULL, *errors = NULL;
        char *content = NULL;
        int n = pol_chat_parse_tool_calls(kinds[k], text, len, &calls, &errors, &content);
        if (n < 0 || (size_t)n != json_array_size(calls) || !errors || !content)
            abort(); /* the parser never fails on input, and counts what it returns */
        json_decref(calls);
        json_decref(errors);
        free(content);
    }
}

static void render_all_kinds(const char *text, size_t len)
{
    json_t *in = json_loadb(text, len, JSON_DECODE_ANY, NULL);
    if (!in)
        return;
    json_t *messages = json_is_object(in) ? json_object_get(in, "messages") : in;
    json_t *tools = json_is_object(in) ? json_object_get(in, "tools") : NULL;
    for (int k = POL_CHAT_QWEN25; k <= POL_CHAT_LLAMA3; k++)
        for (int o = 0; o < 4; o++) {
            pol_chat_opts opts = {.add_generation_prompt = o & 1, .enable_thinking = o & 2};
            char *out = NULL, err[256];
            if (pol_chat_render((pol_chat_kind)k, messages, tools, &opts, &out, err, sizeof err) ==
                0)
                free(out);
            else if (out || !memchr(err, '\0', sizeof err))
                abort(); /* a failure leaves no output and a terminated message */
        }
    json_decref(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse_all_kinds((const char *)data, size);
    render_all_kinds((const char *)data, size);
    return 0;
}
