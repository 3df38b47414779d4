/* libFuzzer target: the tokenizer's encoder and decoder on arbitrary bytes. Invalid UTF-8 must
 * be refused; valid text must encode, with special tokens recognised or not, and decode back to
 * itself byte for byte. Then the input's bytes, read as ids, go to the decoder, which must refuse
 * or decode them without a fault.
 *
 * The tokenizer: a small one built here at start-up (the 256 byte symbols, merges for common
 * English pairs, Qwen's split regex, a special and a non-special added token, no normaliser, so
 * that decoding gives the exact input back), or the one KGYM_FUZZ_TOKENIZER names (e.g. the
 * real Qwen3 tokenizer.json; there text is compared in its NFC form). */
#include "policy/tokenizer.h"
#include "util/strbuf.h"
#include "util/text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

static pol_tok *tok;
static bool tok_nfc; /* the tokenizer normalises: compare against NFC(input) */

/* GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the rest for
 * U+0100 onwards in byte order. */
static unsigned byte_code_point(int b)
{
    unsigned next = 256;
    for (int x = 0; x < 256; x++) {
        bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
        if (x == b)
            return printable ? (unsigned)x : next;
        if (!printable)
            next++;
    }
    return 0;
}

static void put_symbol(strbuf *sb, int b)
{
    unsigned cp = byte_code_point(b);
    if (cp == '"' || cp == '\\')
        sb_printf(sb, "\\%c", (char)cp);
    else if (cp < 0x80)
        sb_putc(sb, (char)cp);
    else
        sb_printf(sb, "\\u%04x", cp);
}

/* Merges of adjacent pairs in "pairs", then of their results two by two: enough levels for the
 * merge queue to see stale entries and equal ranks. */
static const char *const MERGES[][2] = {
    {"t", "h"},
    {"h", "e"},
    {"i", "n"},
    {"e", "r"},
    {"a", "n"},
    {"l", "l"},
    {"o", "u"},
    {"\\u0120", "t"},
    {"\\u0120", "a"},
    {"th", "e"},
    {"\\u0120t", "he"},
    {"in", "g"},
    {"e", "e"},
    {"ee", "ee"},
    {"\\u0120", "\\u0120"},
    {"\\u0120\\u0120", "\\u0120\\u0120"},
    {"1", "2"},
    {"\\u00e4", "\\u00bd"},
};

static char *fuzz_tokenizer_json(void)
{
    strbuf sb = STRBUF_INIT;
    size_t nm = sizeof MERGES / sizeof MERGES[0]; /* added tokens follow the vocabulary */
    sb_printf(
        &sb,
        "{\"added_tokens\": [{\"id\": %zu, \"content\": \"<|im_start|>\", \"special\": true},"
        " {\"id\": %zu, \"content\": \"<tool>\", \"special\": false, \"normalized\": false}],",
        256 + nm, 257 + nm);
    sb_puts(
        &sb,
        "\"normalizer\": null, \"decoder\": {\"type\": \"ByteLevel\"},"
        "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\","
        " \"behavior\": \"Isolated\", \"pattern\": {\"Regex\": "
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
        "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}},"
        " {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]},"
        "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        sb_putc(&sb, '"');
        put_symbol(&sb, b);
        sb_printf(&sb, "\": %d, ", b);
    }
    for (size_t i = 0; i < nm; i++)
        sb_printf(&sb, "\"%s%s\": %zu%s", MERGES[i][0], MERGES[i][1], 256 + i,
                  i + 1 < nm ? ", " : "}, \"merges\": [");
    for (size_t i = 0; i < nm; i++)
        sb_printf(&sb, "[\"%s\", \"%s\"]%s", MERGES[i][0], MERGES[i][1], i + 1 < nm ? ", " : "]}}");
    return sb_steal(&sb);
}

static int load_builtin(void)
{
    char path[] = "/tmp/kgym-fuzz-tok-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    char *json = fuzz_tokenizer_json();
    size_t len = strlen(json);
    bool written = write(fd, json, len) == (ssize_t)len;
    close(fd);
    free(json);
    char err[512];
    int rc = written ? pol_tok_load(path, &tok, err, sizeof err) : -1;
    unlink(path);
    if (rc < 0)
        fprintf(stderr, "fuzz_tokenizer: the built-in tokenizer does not load: %s\n",
                written ? err : "write failed");
    return rc;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *path = getenv("KGYM_FUZZ_TOKENIZER");
    if (!path) {
        if (load_builtin() < 0)
            abort();
        return 0;
    }
    char err[512];
    if (pol_tok_load(path, &tok, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    /* a normalising tokenizer gives the NFC form back: find out whether this one does */
    int32_t *ids;
    size_t n, len;
    char *back;
    if (pol_tok_encode(tok, "e\xcc\x81", 3, false, &ids, &n, err, sizeof err) < 0 ||
        pol_tok_decode(tok, ids, n, false, &back, &len, err, sizeof err) < 0)
        abort();
    tok_nfc = len != 3;
    free(ids);
    free(back);
    return 0;
}

/* What decoding must give back: the input, or its NFC form. NULL when NFC fails. */
static char *expected_text(const uint8_t *data, size_t size, size_t *len)
{
    if (!tok_nfc) {
        char *copy = malloc(size + 1);
        memcpy(copy, data, size);
        *len = size;
        return copy;
    }
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t n =
        utf8proc_map(data, (utf8proc_ssize_t)size, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0)
        return NULL;
    *len = (size_t)n;
    return (char *)nfc;
}

static void check_round_trip(const uint8_t *data, size_t size, bool allow_special)
{
    int32_t *ids;
    size_t n, len, want_len;
    char err[512], *back;
    bool valid = text_is_utf8((const char *)data, size);
    int rc =
        pol_tok_encode(tok, (const char *)data, size, allow_special, &ids, &n, err, sizeof err);
    if (!valid) {
        if (rc == 0) /* invalid UTF-8 must be refused */
            abort();
        return;
    }
    if (rc < 0 || pol_tok_decode(tok, ids, n, false, &back, &len, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    char *want = expected_text(data, size, &want_len);
    if (want && (len != want_len || memcmp(back, want, len)))
        abort(); /* decode(encode(x)) != x */
    free(want);
    free(back);
    free(ids);
}

/* The input's bytes as ids: out-of-range ones must be refused, never read past the table. */
static void check_decode_ids(const uint8_t *data, size_t size)
{
    size_t n = size / sizeof(int32_t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    memcpy(ids, data, n * sizeof *ids);
    for (size_t i = 0; i < n; i++) /* mostly small ids, so most decodes succeed */
        if (data[i] & 1)
            ids[i] = (int32_t)((uint32_t)ids[i] % (pol_tok_vocab_size(tok) + 2));
    char *out, err[256];
    size_t len;
    for (int skip = 0; skip < 2; skip++)
        if (pol_tok_decode(tok, ids, n, skip, &out, &len, err, sizeof err) == 0)
            free(out);
    const char *bytes;
    for (size_t i = 0; i < n; i++)
        (void)pol_tok_token_bytes(tok, ids[i], &bytes, &len);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_round_trip(data, size, true);
    check_round_trip(data, size, false);
    check_decode_ids(data, size);
    return 0;
}
