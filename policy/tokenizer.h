/* tokenizer: Hugging Face `tokenizer.json` byte-level BPE (GPT-2 / Llama 3 / Qwen2 / Qwen3 style):
 * NFC normalisation (utf8proc) when the file asks for it, the pre-tokenizer's split regex (PCRE2
 * with UTF and Unicode properties), byte-level mapping, merges by rank (both JSON forms: "a b"
 * strings and ["a", "b"] pairs), `ignore_merges`, added tokens matched before everything else
 * (special ones only when allowed). Decoding yields bytes: one token may end mid-character. */
#ifndef KGYM_POLICY_TOKENIZER_H
#define KGYM_POLICY_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pol_tok pol_tok;

/* Loads a tokenizer.json (or a directory holding one). Returns 0, or -1 with err filled (an
 * unsupported model type, pre-tokenizer or normaliser is named in the message). */
int pol_tok_load(const char *path, pol_tok **out, char *err, size_t errcap);
void pol_tok_free(pol_tok *t);

/* Encodes len bytes of UTF-8 text into *ids (malloc'd, *n ids). allow_special: added tokens
 * marked special (e.g. <|im_start|>) are recognised in the text, as HF does by default;
 * otherwise they are encoded as plain text. Invalid UTF-8 is an error. Returns 0 or -1. */
int pol_tok_encode(const pol_tok *t, const char *text, size_t len, bool allow_special,
                   int32_t **ids, size_t *n, char *err, size_t errcap);

/* Decodes ids into bytes (malloc'd, NUL-terminated, *len bytes). skip_special drops special
 * tokens. An id out of range is an error. Returns 0 or -1. */
int pol_tok_decode(const pol_tok *t, const int32_t *ids, size_t n, bool skip_special, char **out,
                   size_t *len, char *err, size_t errcap);

/* The bytes one token stands for (for streaming output); -1 for an id out of range. */
int pol_tok_token_bytes(const pol_tok *t, int32_t id, const char **bytes, size_t *len);

/* The id of a token given by its vocabulary string or added-token content; -1 when absent. */
int32_t pol_tok_id(const pol_tok *t, const char *token);
/* One past the largest id (vocabulary plus added tokens). */
size_t pol_tok_vocab_size(const pol_tok *t);
bool pol_tok_is_special(const pol_tok *t, int32_t id);

#endif
