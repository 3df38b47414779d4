/* policy tokenizer: the C API on a tiny tokenizer.json written by the test. Its vocabulary is
 * the 256 byte symbols (id = byte value) plus a few merges, so every expected id below follows
 * from the file by hand: "h e" (rank 0) -> 256 "he", "l l" (1) -> 257 "ll", "he ll" (2) -> 258
 * "hell", "hell o" (3) -> 259 "hello", "Ġ w" (4) -> 260 "Ġw"; added tokens <|im_start|> 261
 * (special) and <tool> 262 (not special). The suite against HF is tests/policy/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "policy/tokenizer.h"
#include "util/strbuf.h"

#define QWEN_PATTERN                                                                               \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "              \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

/* ---- the tokenizer file ---------------------------------------------------------------------- */

/* GPT-2's byte-level alphabet, written out here independently of the tokenizer: printable
 * Latin-1 bytes stand for themselves, the 68 others for U+0100 onwards in byte order. */
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

/* The byte's symbol as a JSON string body (escaped where JSON needs it). */
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

static char *tiny_json(const char *normalizer, const char *extra_model)
{
    strbuf sb = STRBUF_INIT;
    sb_puts(
        &sb,
        "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
        "\"added_tokens\": [\n"
        " {\"id\": 261, \"content\": \"<|im_start|>\", \"special\": true, \"lstrip\": false,"
        "  \"rstrip\": false, \"normalized\": false, \"single_word\": false},\n"
        " {\"id\": 262, \"content\": \"<tool>\", \"special\": false, \"normalized\": false}],\n");
    sb_printf(&sb, "\"normalizer\": %s,\n", normalizer);
    sb_puts(&sb, "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                 "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" QWEN_PATTERN "\"},"
                 " \"behavior\": \"Isolated\", \"invert\": false},"
                 "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false,"
                 " \"use_regex\": false}]},\n"
                 "\"decoder\": {\"type\": \"ByteLevel\"},\n"
                 "\"model\": {\"type\": \"BPE\", \"unk_token\": null, \"byte_fallback\": false,");
    sb_printf(&sb, "%s \"vocab\": {", extra_model);
    for (int b = 0; b < 256; b++) {
        sb_putc(&sb, '"');
        put_symbol(&sb, b);
        sb_printf(&sb, "\": %d, ", b);
    }
    sb_puts(&sb, "\"he\": 256, \"ll\": 257, \"hell\": 258, \"hello\": 259, \"\\u0120w\": 260},\n"
                 "\"merges\": [\"h e\", [\"l\", \"l\"], \"he ll\", [\"hell\", \"o\"], "
                 "\"\\u0120 w\"]}}\n");
    return sb_steal(&sb);
}

typedef struct {
    char dir[64];
    char file[96];
    pol_tok *tok;
} fixture;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static int setup_with(void **state, const char *normalizer, const char *extra_model)
{
    fixture *fx = calloc(1, sizeof *fx);
    strcpy(fx->dir, "/tmp/kgym-tok-XXXXXX");
    if (!fx || !mkdtemp(fx->dir))
        return -1;
    snprintf(fx->file, sizeof fx->file, "%s/tokenizer.json", fx->dir);
    char *json = tiny_json(normalizer, extra_model);
    write_file(fx->file, json);
    free(json);
    char err[512] = "";
    if (pol_tok_load(fx->file, &fx->tok, err, sizeof err) < 0) {
        fprintf(stderr, "load failed: %s\n", err);
        return -1;
    }
    *state = fx;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, "{\"type\": \"NFC\"}", "");
}

static int setup_ignore_merges(void **state)
{
    return setup_with(state, "null", "\"ignore_merges\": true,");
}

static int teardown(void **state)
{
    fixture *fx = *state;
    pol_tok_free(fx->tok);
    unlink(fx->file);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

/* ---- helpers --------------------------------------------------------------------------------- */

static void expect_ids(const pol_tok *t, const char *text, size_t len, bool special,
                       const int32_t *want, size_t nwant)
{
    int32_t *ids = NULL;
    size_t n = 99;
    char err[256] = "";
    if (pol_tok_encode(t, text, len, special, &ids, &n, err, sizeof err) < 0)
        fail_msg("encode failed: %s", err);
    assert_non_null(ids);
    if (n != nwant || memcmp(ids, want, n * sizeof *ids)) {
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "%d ", ids[i]);
        fail_msg("\"%s\": %zu ids, %zu expected", text, n, nwant);
    }
    free(ids);
}

#define EXPECT(t, text, special, ...)                                                              \
    do {                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                     \
        expect_ids(t, text, sizeof(text) - 1, special, want_, sizeof want_ / sizeof want_[0]);     \
    } while (0)

static char *decode(const pol_tok *t, const int32_t *ids, size_t n, bool skip, size_t *len)
{
    char *out = NULL, err[256] = "";
    if (pol_tok_decode(t, ids, n, skip, &out, len, err, sizeof err) < 0)
        fail_msg("decode failed: %s", err);
    return out;
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_lookups(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    assert_int_equal(pol_tok_vocab_size(t), 263);
    assert_int_equal(pol_tok_id(t, "hello"), 259);
    assert_int_equal(pol_tok_id(t, "\xc4\xa0w"), 260); /* Ġw: vocabulary strings are byte-level */
    assert_int_equal(pol_tok_id(t, "<|im_start|>"), 261);
    assert_int_equal(pol_tok_id(t, "<tool>"), 262);
    assert_int_equal(pol_tok_id(t, "nope"), -1);
    assert_true(pol_tok_is_special(t, 261));
    assert_false(pol_tok_is_special(t, 262));
    assert_false(pol_tok_is_special(t, 259));
    assert_false(pol_tok_is_special(t, -1));
    assert_false(pol_tok_is_special(t, 263));
    const char *bytes;
    size_t len;
    assert_int_equal(pol_tok_token_bytes(t, 260, &bytes, &len), 0);
    assert_int_equal(len, 2);
    assert_memory_equal(bytes, " w", 2);
    assert_int_equal(pol_tok_token_bytes(t, 0xE9, &bytes, &len), 0); /* one byte of a character */
    assert_int_equal(len, 1);
    assert_int_equal((unsigned char)bytes[0], 0xE9);
    assert_int_equal(pol_tok_token_bytes(t, 263, &bytes, &len), -1);
    assert_int_equal(pol_tok_token_bytes(t, -5, &bytes, &len), -1);
}

static void test_merges_by_rank(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    EXPECT(t, "hello", true, 259);
    EXPECT(t, "hell", true, 258);
    EXPECT(t, "helo", true, 256, 'l', 'o');
    /* two equal-rank "l l" pairs: the leftmost merges first */
    EXPECT(t, "lll", true, 257, 'l');
    /* the regex keeps the space with the word: " hello" is one piece, and "Ġ h" has no merge */
    EXPECT(t, "hello hello", true, 259, ' ', 259);
    EXPECT(t, " world", true, 260, 'o', 'r', 'l', 'd');
}

static void test_pre_tokenizer_pieces(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    /* digits one by one, contractions apart, whitespace before a word split off but one */
    EXPECT(t, "x 12", true, 'x', ' ', '1', '2');
    EXPECT(t, "I'LL", true, 'I', '\'', 'L', 'L');
    EXPECT(t, "a   b", true, 'a', ' ', ' ', ' ', 'b');
    EXPECT(t, "a\r\n\r\nb", true, 'a', '\r', '\n', '\r', '\n', 'b');
}

static void test_added_tokens(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    EXPECT(t, "<|im_start|>hello", true, 261, 259);
    /* not allowed: the special token is plain text (none of its bytes merge) */
    EXPECT(t, "<|im_start|>hello", false, '<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|',
           '>', 259);
    /* a non-special added token is always recognised */
    EXPECT(t, "<tool>hello<tool>", false, 262, 259, 262);
    EXPECT(t, "x<|im_start|><|im_start|>", true, 'x', 261, 261);
}

static void test_nfc_and_bytes(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    EXPECT(t, "e\xcc\x81", true, 0xC3, 0xA9); /* e + U+0301 becomes é, U+00E9 */
    EXPECT(t, "\xc3\xa9", true, 0xC3, 0xA9);
    EXPECT(t, "\xf0\x9f\x99\x82", true, 0xF0, 0x9F, 0x99, 0x82);
    int32_t *ids = NULL;
    size_t n = 7;
    char err[256] = "";
    assert_int_equal(pol_tok_encode(t, "a\0b", 3, true, &ids, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 0); /* NUL is a character like any other */
    free(ids);
    assert_int_equal(pol_tok_encode(t, "", 0, true, &ids, &n, err, sizeof err), 0);
    assert_non_null(ids);
    assert_int_equal(n, 0);
    free(ids);
}

static void test_invalid_utf8(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    const char *bad[] = {"ab\xff", "caf\xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = (int32_t *)1;
        size_t n = 5;
        char err[256] = "";
        assert_int_equal(pol_tok_encode(t, bad[i], strlen(bad[i]), true, &ids, &n, err, sizeof err),
                         -1);
        assert_null(ids);
        assert_int_equal(n, 0);
        assert_non_null(strstr(err, "not valid UTF-8"));
    }
}

static void test_decode(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    const int32_t ids[] = {261, 259, 260, 0xC3, 0xA9, 262};
    size_t len;
    char *s = decode(t, ids, 6, false, &len);
    assert_int_equal(len, strlen("<|im_start|>hello w\xc3\xa9<tool>"));
    assert_string_equal(s, "<|im_start|>hello w\xc3\xa9<tool>");
    free(s);
    s = decode(t, ids, 6, true, &len); /* only special tokens go: <tool> is not one */
    assert_string_equal(s, "hello w\xc3\xa9<tool>");
    free(s);
    s = decode(t, ids + 3, 1, false, &len); /* half a character: bytes, as they are */
    assert_int_equal(len, 1);
    free(s);
    const int32_t bad[] = {259, 263};
    char *out = (char *)1, err[256] = "";
    assert_int_equal(pol_tok_decode(t, bad, 2, false, &out, &len, err, sizeof err), -1);
    assert_null(out);
    assert_non_null(strstr(err, "id 263 (position 1)"));
}

static void test_round_trip(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    const char *texts[] = {"hello world",
                           "  lead\ttab\r\nCRLF  ",
                           "<|im_start|>user\nhi<tool>",
                           "don't STOP 12345",
                           "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x99\x82",
                           ""};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        for (int special = 0; special < 2; special++) {
            int32_t *ids;
            size_t n, len;
            char err[256];
            assert_int_equal(
                pol_tok_encode(t, texts[i], strlen(texts[i]), special, &ids, &n, err, sizeof err),
                0);
            char *back = decode(t, ids, n, false, &len);
            assert_string_equal(back, texts[i]);
            free(back);
            free(ids);
        }
    }
}

static void test_ignore_merges(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    /* "hell" is in the vocabulary: emitted whole; "helo" is not: merged as usual */
    EXPECT(t, "hell", true, 258);
    EXPECT(t, "helo", true, 256, 'l', 'o');
    /* without NFC here, the combining accent stays its own character */
    EXPECT(t, "e\xcc\x81", true, 'e', 0xCC, 0x81);
}

static void test_directory_path(void **state)
{
    fixture *fx = *state;
    pol_tok *t = NULL;
    char err[512] = "";
    assert_int_equal(pol_tok_load(fx->dir, &t, err, sizeof err), 0);
    assert_int_equal(pol_tok_vocab_size(t), 263);
    pol_tok_free(t);
}

static void expect_load_error(fixture *fx, const char *json, const char *want)
{
    char path[128];
    snprintf(path, sizeof path, "%s/bad.json", fx->dir);
    write_file(path, json);
    pol_tok *t = (pol_tok *)1;
    char err[512] = "";
    assert_int_equal(pol_tok_load(path, &t, err, sizeof err), -1);
    assert_null(t);
    if (!strstr(err, want) || !strstr(err, "bad.json"))
        fail_msg("error \"%s\" does not say \"%s\"", err, want);
    unlink(path);
}

static void test_load_errors(void **state)
{
    fixture *fx = *state;
    expect_load_error(fx, "{", "line 1");
    expect_load_error(fx, "[]", "expected a JSON object");
    expect_load_error(fx, "{}", "\"model\" is missing");
    expect_load_error(fx, "{\"model\": {\"type\": \"Unigram\"}}", "'Unigram' is not supported");
    char *json = tiny_json("{\"type\": \"NFKC\"}", "");
    expect_load_error(fx, json, "normalizer: 'NFKC' is not supported");
    free(json);
    json = tiny_json("null", "\"dropout\": 0.5,");
    expect_load_error(fx, json, "model.dropout");
    free(json);
    pol_tok *t = (pol_tok *)1;
    char err[512] = "";
    assert_int_equal(pol_tok_load("/nonexistent/tok.json", &t, err, sizeof err), -1);
    assert_null(t);
    assert_non_null(strstr(err, "/nonexistent/tok.json"));
}

/* One pol_tok, many threads: every call keeps its state to itself. */
typedef struct {
    const pol_tok *t;
    int32_t first[64];
    size_t nfirst;
    bool ok;
} thread_job;

static void *encode_many(void *arg)
{
    thread_job *job = arg;
    const char *text = "hello <|im_start|> world 12 don't \xc3\xa9\xf0\x9f\x99\x82 hell lll";
    job->ok = true;
    for (int i = 0; i < 300 && job->ok; i++) {
        int32_t *ids;
        size_t n;
        char err[128];
        if (pol_tok_encode(job->t, text, strlen(text), true, &ids, &n, err, sizeof err) < 0) {
            job->ok = false;
            break;
        }
        if (i == 0) {
            job->nfirst = n < 64 ? n : 64;
            memcpy(job->first, ids, job->nfirst * sizeof *ids);
        } else if (n != job->nfirst || memcmp(ids, job->first, n * sizeof *ids)) {
            job->ok = false;
        }
        free(ids);
    }
    return NULL;
}

static void test_threads_share_one_tokenizer(void **state)
{
    const pol_tok *t = ((fixture *)*state)->tok;
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){.t = t};
        assert_int_equal(pthread_create(&th[i], NULL, encode_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(jobs[i].ok);
        assert_int_equal(jobs[i].nfirst, jobs[0].nfirst);
        assert_memory_equal(jobs[i].first, jobs[0].first, jobs[0].nfirst * sizeof(int32_t));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lookups, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merges_by_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pre_tokenizer_pieces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_added_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nfc_and_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_decode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ignore_merges, setup_ignore_merges, teardown),
        cmocka_unit_test_setup_teardown(test_directory_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_share_one_tokenizer, setup, teardown),
    };
    return cmocka_run_group_tests_name("policy_tokenizer", tests, NULL, NULL);
}
