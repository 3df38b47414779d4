/* tokenizer: encoding and decoding through a loaded tokenizer.json (tokenizer_load.c), in HF
 * tokenizers' order: added tokens are cut out of the raw text first, each remaining segment is
 * normalised (NFC), normalised added tokens are cut out of it, the rest is split by the
 * pre-tokenizer's regexes (HF's "Isolated": matches and the text between them are pieces), and
 * each piece goes through byte-level BPE (tokenizer_bpe.c). All state of a call lives in its
 * enc_ctx, so one pol_tok serves many threads. */
#include "policy/tokenizer.h"
#include "tokenizer_internal.h"

#include "util/text.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct {
    const pol_tok *t;
    bool allow_special;
    pcre2_match_data *md;
    ptok_bpe_scratch bpe;
    ptok_ids out;
    char *err;
    size_t errcap;
} enc_ctx;

typedef int (*segment_fn)(enc_ctx *c, const char *s, size_t n);

/* ---- characters ------------------------------------------------------------------------------ */

/* The code point at s (valid UTF-8, n > 0) and its length. */
static size_t decode_char(const char *s, size_t n, int32_t *cp)
{
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, cp);
    if (k <= 0) { /* cannot happen on validated text; step one byte rather than loop */
        *cp = (unsigned char)s[0];
        return 1;
    }
    return (size_t)k;
}

/* The start of the character that ends at s[end] (valid UTF-8). */
static size_t char_start_before(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

/* Rust's char::is_whitespace (Unicode White_Space), which HF's lstrip and rstrip use. */
static bool is_white_space(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* A word character in the sense of HF's single_word check (regex \w: letters, marks, decimal
 * digits, connector punctuation). */
static bool is_word_char(int32_t c)
{
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* ---- added tokens ---------------------------------------------------------------------------- */

/* The leftmost match of an added token of this pass (0: raw, 1: normalized) at or after from,
 * the longest one there; NULL when none. This is HF's leftmost-longest Aho-Corasick search. */
static const ptok_added *find_added(const pol_tok *t, const char *s, size_t n, size_t from,
                                    int pass, size_t *at)
{
    for (size_t i = from; i < n; i++) {
        if (!t->added_first[pass][(unsigned char)s[i]])
            continue;
        const ptok_added *best = NULL;
        for (size_t k = 0; k < t->nadded; k++) {
            const ptok_added *a = &t->added[k];
            if (a->normalized == (pass == 1) && a->match_len <= n - i &&
                (!best || a->match_len > best->match_len) && !memcmp(s + i, a->match, a->match_len))
                best = a;
        }
        if (best) {
            *at = i;
            return best;
        }
    }
    return NULL;
}

/* single_word: the match must not touch a word character on either side. */
static bool stands_alone(const char *s, size_t n, size_t start, size_t stop)
{
    int32_t c;
    if (start > 0) {
        size_t b = char_start_before(s, start);
        decode_char(s + b, start - b, &c);
        if (is_word_char(c))
            return false;
    }
    if (stop < n) {
        decode_char(s + stop, n - stop, &c);
        if (is_word_char(c))
            return false;
    }
    return true;
}

/* lstrip: where the whitespace run that ends at start begins. */
static size_t white_space_start(const char *s, size_t start)
{
    while (start > 0) {
        size_t b = char_start_before(s, start);
        int32_t c;
        decode_char(s + b, start - b, &c);
        if (!is_white_space(c))
            break;
        start = b;
    }
    return start;
}

/* rstrip: the length of the whitespace run that starts at s. */
static size_t white_space_len(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int32_t c;
        size_t k = decode_char(s + i, n - i, &c);
        if (!is_white_space(c))
            break;
        i += k;
    }
    return i;
}

/* Cuts this pass's added tokens out of s, passing the text between them to gap. A match that
 * is not taken (a special token when specials are off, a single_word token inside a word) is
 * still consumed by the search, as in HF, and its text goes to gap. */
static int split_added(enc_ctx *c, const char *s, size_t n, int pass, segment_fn gap)
{
    const pol_tok *t = c->t;
    size_t done = 0, from = 0, at;
    const ptok_added *a;
    while (from < n && (a = find_added(t, s, n, from, pass, &at))) {
        size_t start = at, stop = at + a->match_len;
        from = stop;
        if (a->special && !c->allow_special)
            continue;
        if (a->single_word && !stands_alone(s, n, start, stop))
            continue;
        if (a->lstrip) {
            size_t ws = white_space_start(s, start);
            start = ws > done ? ws : done;
        }
        if (a->rstrip)
            stop += white_space_len(s + stop, n - stop);
        if (done < start && gap(c, s + done, start - done) < 0)
            return -1;
        if (ptok_ids_push(&c->out, a->id) < 0)
            return text_fail(c->err, c->errcap, "out of memory");
        done = stop;
    }
    return done < n ? gap(c, s + done, n - done) : 0;
}

/* ---- pre-tokenizer and model ----------------------------------------------------------------- */

static int encode_piece(enc_ctx *c, const char *s, size_t n)
{
    if (ptok_bpe_piece(c->t, s, n, &c->bpe, &c->out) < 0)
        return text_fail(c->err, c->errcap, "out of memory");
    return 0;
}

/* The next match of re in s at or after from: 1 with [*ms, *me), 0 for none, -1 on error. */
static int next_match(enc_ctx *c, const pcre2_code *re, const char *s, size_t n, size_t from,
                      size_t *ms, size_t *me)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, c->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its backtracking on the heap */
        rc =
            pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, c->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return text_fail(c->err, c->errcap, "pre-tokenizer regex: %s", (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *ms = ov[0] < from ? from : ov[0];
    *me = ov[1] < *ms ? *ms : ov[1] > n ? n : ov[1];
    return 1;
}

/* Splits s with the pre-tokenizer's regex number level and passes each piece on to the next
 * level, and after the last one to BPE. */
static int pre_split(enc_ctx *c, const char *s, size_t n, size_t level)
{
    if (n == 0)
        return 0;
    if (level == c->t->nsplits)
        return encode_piece(c, s, n);
    const pcre2_code *re = c->t->splits[level];
    size_t done = 0, from = 0, ms = 0, me = 0;
    int rc = 0;
    while (from < n && (rc = next_match(c, re, s, n, from, &ms, &me)) == 1) {
        if (ms > done && pre_split(c, s + done, ms - done, level + 1) < 0)
            return -1;
        if (me > ms) {
            if (pre_split(c, s + ms, me - ms, level + 1) < 0)
                return -1;
            from = me;
        } else { /* an empty match only splits: step over one character */
            int32_t cp;
            from = ms < n ? ms + decode_char(s + ms, n - ms, &cp) : n;
        }
        done = me; /* ms >= from >= done: matches never start before the last piece's end */
    }
    if (from < n && rc < 0)
        return -1;
    return done < n ? pre_split(c, s + done, n - done, level + 1) : 0;
}

static int pre_split_top(enc_ctx *c, const char *s, size_t n)
{
    return pre_split(c, s, n, 0);
}

static bool is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    return true;
}

/* A segment between raw added tokens: NFC, then the normalized added tokens, then the rest. */
static int normalize_segment(enc_ctx *c, const char *s, size_t n)
{
    if (!c->t->nfc || is_ascii(s, n)) /* ASCII is always in NFC */
        return split_added(c, s, n, 1, pre_split_top);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                        UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (len < 0)
        return text_fail(c->err, c->errcap, "NFC: %s", utf8proc_errmsg(len));
    int rc = split_added(c, (const char *)nfc, (size_t)len, 1, pre_split_top);
    free(nfc);
    return rc;
}

/* Where the first invalid UTF-8 byte is, for the message (text_is_utf8 said there is one). */
static size_t first_invalid_byte(const char *text, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t k = 1;
        while (k <= 4 && i + k <= len && !text_is_utf8(text + i, k))
            k++;
        if (k > 4 || i + k > len)
            return i;
        i += k;
    }
    return len;
}

int pol_tok_encode(const pol_tok *t, const char *text, size_t len, bool allow_special,
                   int32_t **ids, size_t *n, char *err, size_t errcap)
{
    *ids = NULL;
    *n = 0;
    if (!text && len)
        return text_fail(err, errcap, "no text");
    if (!text_is_utf8(text, len))
        return text_fail(err, errcap, "the text is not valid UTF-8 (byte %zu)",
                         first_invalid_byte(text, len));
    enc_ctx c = {.t = t, .allow_special = allow_special, .err = err, .errcap = errcap};
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md)
        return text_fail(err, errcap, "out of memory");
    int rc = split_added(&c, text ? text : "", len, 0, normalize_segment);
    pcre2_match_data_free(c.md);
    ptok_bpe_scratch_free(&c.bpe);
    if (rc < 0) {
        free(c.out.v);
        return -1;
    }
    *ids = c.out.v ? c.out.v : malloc(sizeof **ids); /* never NULL on success */
    if (!*ids)
        return text_fail(err, errcap, "out of memory");
    *n = c.out.n;
    return 0;
}

/* ---- decoding and lookups -------------------------------------------------------------------- */

static bool id_assigned(const pol_tok *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->nids && (t->dec_flags[id] & PTOK_ASSIGNED);
}

int pol_tok_decode(const pol_tok *t, const int32_t *ids, size_t n, bool skip_special, char **out,
                   size_t *len, char *err, size_t errcap)
{
    *out = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!id_assigned(t, ids[i]))
            return text_fail(err, errcap,
                             "id %d (position %zu) is not a token of this vocabulary (0..%zu)",
                             ids[i], i, t->nids - 1);
        total += t->dec_off[ids[i] + 1] - t->dec_off[ids[i]];
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return text_fail(err, errcap, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && (t->dec_flags[ids[i]] & PTOK_SPECIAL))
            continue;
        size_t k = t->dec_off[ids[i] + 1] - t->dec_off[ids[i]];
        memcpy(buf + o, t->dec_bytes + t->dec_off[ids[i]], k);
        o += k;
    }
    buf[o] = '\0';
    *out = buf;
    *len = o;
    return 0;
}

int pol_tok_token_bytes(const pol_tok *t, int32_t id, const char **bytes, size_t *len)
{
    if (!id_assigned(t, id))
        return -1;
    *bytes = t->dec_bytes + t->dec_off[id];
    *len = t->dec_off[id + 1] - t->dec_off[id];
    return 0;
}

int32_t pol_tok_id(const pol_tok *t, const char *token)
{
    size_t len = strlen(token);
    int32_t id = ptok_strmap_get(&t->added_by_content, token, len);
    return id >= 0 ? id : ptok_strmap_get(&t->vocab, token, len);
}

size_t pol_tok_vocab_size(const pol_tok *t)
{
    return t->nids;
}

bool pol_tok_is_special(const pol_tok *t, int32_t id)
{
    return id_assigned(t, id) && (t->dec_flags[id] & PTOK_SPECIAL);
}
