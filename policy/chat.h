/* chat: the chat templates of Qwen2.5, Qwen3 and Llama 3, written in C, producing exactly the
 * text HF `apply_chat_template` renders from the models' Jinja templates (so that tokenizing it
 * with special tokens allowed gives the same ids); and a parser of tool calls out of generated
 * text, which reports malformed calls and never fails on any input.
 *
 * Messages and tools are OpenAI-style JSON (Jansson):
 *   {"role": "system"|"user"|"assistant"|"tool", "content": "...",
 *    "reasoning_content": "..." (Qwen3, optional),
 *    "tool_calls": [{"type": "function", "function": {"name": "...", "arguments": {...} or
 * "..."}}]} tools: [{"type": "function", "function": {"name", "description", "parameters"}}] */
#ifndef KGYM_POLICY_CHAT_H
#define KGYM_POLICY_CHAT_H

#include <jansson.h>
#include <stdbool.h>

typedef enum { POL_CHAT_QWEN25, POL_CHAT_QWEN3, POL_CHAT_LLAMA3 } pol_chat_kind;

typedef struct pol_chat_opts {
    bool add_generation_prompt;
    bool enable_thinking; /* Qwen3 only: false adds the empty <think></think> block, as HF */
} pol_chat_opts;

/* "qwen2.5", "qwen3", "llama3" -> kind; -1 when unknown. */
int pol_chat_kind_parse(const char *name);

/* Renders messages (a JSON array) and tools (NULL or a JSON array) into *out (malloc'd,
 * NUL-terminated). A malformed message (unknown role, missing content, bad tool call) is an
 * error naming the message's index. Returns 0, or -1 with err filled. */
int pol_chat_render(pol_chat_kind kind, const json_t *messages, const json_t *tools,
                    const pol_chat_opts *opts, char **out, char *err, size_t errcap);

/* Tool calls out of an assistant's generated text.
 * *calls: a new JSON array of {"name": "...", "arguments": {...}} for each well-formed call;
 * *errors: a new JSON array of {"index": i, "error": "...", "text": "<the raw block>"} for each
 * malformed one (bad JSON, no name, arguments not an object, unterminated block);
 * *content (may be NULL): the text outside the call blocks, malloc'd.
 * Never fails on any input; returns the number of well-formed calls, or -1 only when memory ran
 * out. */
int pol_chat_parse_tool_calls(pol_chat_kind kind, const char *text, size_t len, json_t **calls,
                              json_t **errors, char **content);

#endif
