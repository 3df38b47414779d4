/* tokenizer_vocab: the ids of a tokenizer.json: the BPE model (vocabulary, merges and the
 * options that change them), the added tokens, with the ids HF tokenizers would give them, and
 * the id -> bytes table that decoding reads. */
#include "policy/tokenizer.h"
#include "tokenizer_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- model: vocabulary and merges ------------------------------------------------------------ */

/* Copies every vocabulary string into one arena and indexes it. */
static int load_vocab(pol_tok *t, json_t *vocab, char *err, size_t errcap)
{
    if (!json_is_object(vocab))
        return text_fail(err, errcap, "model.vocab: expected an object {token: id}");
    size_t total = 0, count = json_object_size(vocab);
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(vocab, key, klen, v)
    {
        total += klen + 1;
    }
    t->arena = malloc(total ? total : 1);
    if (!t->arena || ptok_strmap_init(&t->vocab, count) < 0)
        return text_fail(err, errcap, "model.vocab: out of memory");
    size_t off = 0;
    json_object_keylen_foreach(vocab, key, klen, v)
    {
        int32_t id;
        if (ptok_json_id(v, "model.vocab", key, &id, err, errcap) < 0)
            return -1;
        char *copy = t->arena + off;
        memcpy(copy, key, klen);
        copy[klen] = '\0';
        off += klen + 1;
        if (ptok_strmap_put(&t->vocab, copy, klen, id, NULL) < 0)
            return text_fail(err, errcap, "model.vocab: out of memory");
        if ((size_t)id + 1 > t->nids)
            t->nids = (size_t)id + 1;
    }
    return 0;
}

/* Two vocabulary strings on one id are refused: decoding could not tell them apart. */
static int check_vocab_ids(const pol_tok *t, char *err, size_t errcap)
{
    uint8_t *seen = calloc(t->nids ? t->nids : 1, 1);
    if (!seen)
        return text_fail(err, errcap, "model.vocab: out of memory");
    int rc = 0;
    for (size_t e = 0; e < t->vocab.n && rc == 0; e++) {
        int32_t id = t->vocab.vals[e];
        if (!seen[id]) {
            seen[id] = 1;
            continue;
        }
        size_t first = 0;
        while (t->vocab.vals[first] != id)
            first++;
        rc = text_fail(err, errcap, "model.vocab: '%s' and '%s' share id %d", t->vocab.keys[first],
                       t->vocab.keys[e], id);
    }
    free(seen);
    return rc;
}

/* Splits one merge, "a b" (exactly one space, as HF requires) or ["a", "b"]. 1 for a
 * "#version" line, which HF skips without taking a rank. */
static int merge_parts(json_t *m, size_t i, const char **a, size_t *alen, const char **b,
                       size_t *blen, char *err, size_t errcap)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t len = json_string_length(m);
        if (len >= 8 && !memcmp(s, "#version", 8))
            return 1;
        const char *sp = memchr(s, ' ', len);
        if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s)))
            return text_fail(err, errcap,
                             "model.merges[%zu]: expected \"a b\" (two tokens, one space)", i);
        *a = s, *alen = (size_t)(sp - s), *b = sp + 1, *blen = len - *alen - 1;
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *alen = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *blen = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return text_fail(err, errcap, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", i);
}

static int add_merge(pol_tok *t, size_t i, uint32_t rank, const char *a, size_t alen, const char *b,
                     size_t blen, char **buf, size_t *bufcap, char *err, size_t errcap)
{
    int32_t ida = ptok_strmap_get(&t->vocab, a, alen), idb = ptok_strmap_get(&t->vocab, b, blen);
    if (ida < 0 || idb < 0)
        return text_fail(err, errcap, "model.merges[%zu]: '%.*s' is not in the vocabulary", i,
                         (int)(ida < 0 ? alen : blen), ida < 0 ? a : b);
    if (alen + blen > *bufcap) {
        char *p = realloc(*buf, alen + blen);
        if (!p)
            return text_fail(err, errcap, "model.merges: out of memory");
        *buf = p, *bufcap = alen + blen;
    }
    memcpy(*buf, a, alen);
    memcpy(*buf + alen, b, blen);
    int32_t id = ptok_strmap_get(&t->vocab, *buf, alen + blen);
    if (id < 0)
        return text_fail(err, errcap,
                         "model.merges[%zu]: the merged token '%.*s' is not in the vocabulary", i,
                         (int)(alen + blen), *buf);
    if (ptok_mergemap_put(&t->merges, ida, idb, rank, id) < 0)
        return text_fail(err, errcap, "model.merges: out of memory");
    return 0;
}

static int load_merges(pol_tok *t, json_t *merges, char *err, size_t errcap)
{
    if (!json_is_array(merges))
        return text_fail(err, errcap, "model.merges: expected an array");
    if (ptok_mergemap_init(&t->merges, json_array_size(merges)) < 0)
        return text_fail(err, errcap, "model.merges: out of memory");
    char *buf = NULL;
    size_t bufcap = 0, i;
    uint32_t rank = 0;
    json_t *m;
    json_array_foreach(merges, i, m)
    {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        int rc = merge_parts(m, i, &a, &alen, &b, &blen, err, errcap);
        if (rc == 1)
            continue;
        if (rc < 0 || add_merge(t, i, rank++, a, alen, b, blen, &buf, &bufcap, err, errcap) < 0) {
            free(buf);
            return -1;
        }
    }
    free(buf);
    return 0;
}

/* Options of the BPE model that change the ids and that the encoder does not implement. */
static int check_model_options(json_t *model, char *err, size_t errcap)
{
    bool fallback;
    if (ptok_json_bool(model, "byte_fallback", false, &fallback, "model", err, errcap) < 0)
        return -1;
    if (fallback)
        return text_fail(err, errcap, "model.byte_fallback: true is not supported");
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) &&
        !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return text_fail(err, errcap,
                         "model.dropout: BPE dropout is not supported (null expected)");
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return text_fail(err, errcap, "model.%s: only null or \"\" is supported", affixes[i]);
    }
    return 0;
}

static int load_unk(pol_tok *t, json_t *model, char *err, size_t errcap)
{
    t->unk_id = -1;
    json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk))
            return text_fail(err, errcap, "model.unk_token: expected a string or null");
        t->unk_id = ptok_strmap_get(&t->vocab, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0)
            return text_fail(err, errcap, "model.unk_token: '%s' is not in the vocabulary",
                             json_string_value(unk));
    }
    return ptok_json_bool(model, "fuse_unk", false, &t->fuse_unk, "model", err, errcap);
}

int ptok_load_model(pol_tok *t, json_t *root, char *err, size_t errcap)
{
    json_t *model = json_object_get(root, "model");
    if (!model || json_is_null(model))
        return text_fail(err, errcap, "\"model\" is missing");
    const char *type = ptok_json_type(model, "model", err, errcap);
    if (!type)
        return -1;
    if (strcmp(type, "BPE"))
        return text_fail(err, errcap, "model.type: '%s' is not supported (only BPE)", type);
    if (check_model_options(model, err, errcap) < 0 ||
        load_vocab(t, json_object_get(model, "vocab"), err, errcap) < 0 ||
        check_vocab_ids(t, err, errcap) < 0 ||
        load_merges(t, json_object_get(model, "merges"), err, errcap) < 0 ||
        load_unk(t, model, err, errcap) < 0 ||
        ptok_json_bool(model, "ignore_merges", false, &t->ignore_merges, "model", err, errcap) < 0)
        return -1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = ptok_strmap_get(&t->vocab, t->bytemap.utf8[b], t->bytemap.utf8_len[b]);
    return 0;
}

/* ---- added tokens ---------------------------------------------------------------------------- */

static int nfc_copy(const char *s, size_t len, char **out, size_t *outlen)
{
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0)
        return -1;
    *out = (char *)dst;
    *outlen = (size_t)n;
    return 0;
}

static int load_added_flags(ptok_added *a, json_t *item, const char *where, char *err,
                            size_t errcap)
{
    if (ptok_json_bool(item, "special", false, &a->special, where, err, errcap) < 0 ||
        ptok_json_bool(item, "lstrip", false, &a->lstrip, where, err, errcap) < 0 ||
        ptok_json_bool(item, "rstrip", false, &a->rstrip, where, err, errcap) < 0 ||
        ptok_json_bool(item, "single_word", false, &a->single_word, where, err, errcap) < 0 ||
        ptok_json_bool(item, "normalized", !a->special, &a->normalized, where, err, errcap) < 0)
        return -1;
    return 0;
}

/* The id HF tokenizers gives an added token, whatever the file says: its vocabulary id, or
 * else the one after the largest added id so far, or the vocabulary size if that is larger. */
static int32_t hf_added_id(const pol_tok *t, const ptok_added *a, int32_t max_added)
{
    int32_t in_vocab = ptok_strmap_get(&t->vocab, a->content, a->len);
    if (in_vocab >= 0)
        return in_vocab;
    int32_t vocab_size = (int32_t)t->vocab.n;
    if (max_added < 0)
        return vocab_size;
    return max_added >= vocab_size ? max_added + 1 : vocab_size;
}

static int load_added_one(pol_tok *t, ptok_added *a, json_t *item, size_t i, int32_t *max_added,
                          char *err, size_t errcap)
{
    char where[48];
    snprintf(where, sizeof where, "added_tokens[%zu]", i);
    json_t *content = json_object_get(item, "content");
    if (!json_is_string(content) || json_string_length(content) == 0)
        return text_fail(err, errcap, "%s.content: expected a non-empty string", where);
    a->len = json_string_length(content);
    a->content = malloc(a->len + 1);
    if (!a->content)
        return text_fail(err, errcap, "%s: out of memory", where);
    memcpy(a->content, json_string_value(content), a->len + 1);
    if (ptok_json_id(json_object_get(item, "id"), where, a->content, &a->id, err, errcap) < 0 ||
        load_added_flags(a, item, where, err, errcap) < 0)
        return -1;
    if (a->normalized && t->nfc) {
        if (nfc_copy(a->content, a->len, &a->match, &a->match_len) < 0 || !a->match_len)
            return text_fail(err, errcap, "%s: content does not normalise", where);
    } else {
        a->match = a->content;
        a->match_len = a->len;
    }
    int put = ptok_strmap_put(&t->added_by_content, a->content, a->len, a->id, NULL);
    if (put != 0)
        return text_fail(err, errcap,
                         put > 0 ? "%s: '%s' is listed twice" : "%s: '%s': out of memory", where,
                         a->content);
    int32_t hf_id = hf_added_id(t, a, *max_added);
    if (hf_id != a->id)
        return text_fail(err, errcap,
                         "%s: '%s' is declared with id %d, but Hugging Face tokenizers gives "
                         "it %d (added tokens take their vocabulary id, or the next ids "
                         "after the vocabulary, in file order)",
                         where, a->content, a->id, hf_id);
    if (a->id > *max_added)
        *max_added = a->id;
    if ((size_t)a->id + 1 > t->nids)
        t->nids = (size_t)a->id + 1;
    t->added_first[a->normalized][(unsigned char)a->match[0]] = true;
    return 0;
}

int ptok_load_added(pol_tok *t, json_t *root, char *err, size_t errcap)
{
    json_t *list = json_object_get(root, "added_tokens");
    if (!list || json_is_null(list))
        list = NULL;
    else if (!json_is_array(list))
        return text_fail(err, errcap, "added_tokens: expected an array");
    size_t n = json_array_size(list);
    int32_t max_added = -1;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added || ptok_strmap_init(&t->added_by_content, n) < 0)
        return text_fail(err, errcap, "added_tokens: out of memory");
    for (size_t i = 0; i < n; i++) {
        t->nadded = i + 1; /* counted before it can fail, so pol_tok_free frees it */
        json_t *item = json_array_get(list, i);
        if (!json_is_object(item))
            return text_fail(err, errcap, "added_tokens[%zu]: expected an object", i);
        if (load_added_one(t, &t->added[i], item, i, &max_added, err, errcap) < 0)
            return -1;
    }
    return 0;
}

/* ---- decoding table -------------------------------------------------------------------------- */

/* Which vocabulary entry and which added token hold each id; an added token on another
 * string's id is refused, since decoding could not tell them apart. */
static int index_ids(const pol_tok *t, int32_t *vocab_of, int32_t *added_of, char *err,
                     size_t errcap)
{
    for (size_t i = 0; i < t->nids; i++)
        vocab_of[i] = added_of[i] = -1;
    for (size_t e = 0; e < t->vocab.n; e++) /* one string per id: check_vocab_ids saw to it */
        vocab_of[t->vocab.vals[e]] = (int32_t)e;
    for (size_t i = 0; i < t->nadded; i++) {
        const ptok_added *a = &t->added[i];
        if (added_of[a->id] >= 0)
            return text_fail(err, errcap, "added_tokens: '%s' and '%s' share id %d",
                             t->added[added_of[a->id]].content, a->content, a->id);
        int32_t v = vocab_of[a->id];
        if (v >= 0 && (t->vocab.lens[v] != a->len || memcmp(t->vocab.keys[v], a->content, a->len)))
            return text_fail(err, errcap,
                             "added_tokens: '%s' has id %d, which the vocabulary gives to '%s'",
                             a->content, a->id, t->vocab.keys[v]);
        added_of[a->id] = (int32_t)i;
    }
    return 0;
}

/* Appends one id's bytes at dec_bytes + *off: an added token's content, or a vocabulary string
 * mapped back to bytes (kept as it is when it is not byte-level text, as HF's decoder does). */
static void put_id_bytes(pol_tok *t, int32_t vocab_e, int32_t added_i, size_t id, size_t *off)
{
    char *dst = t->dec_bytes + *off;
    if (added_i >= 0) {
        const ptok_added *a = &t->added[added_i];
        memcpy(dst, a->content, a->len);
        *off += a->len;
        t->dec_flags[id] = PTOK_ASSIGNED | (a->special ? PTOK_SPECIAL : 0);
    } else if (vocab_e >= 0) {
        const char *s = t->vocab.keys[vocab_e];
        size_t slen = t->vocab.lens[vocab_e];
        long n = ptok_bytemap_decode(&t->bytemap, s, slen, dst);
        if (n < 0) {
            memcpy(dst, s, slen);
            n = (long)slen;
        }
        *off += (size_t)n;
        t->dec_flags[id] = PTOK_ASSIGNED;
    }
}

int ptok_build_decoder(pol_tok *t, char *err, size_t errcap)
{
    size_t total = 0, nids = t->nids ? t->nids : 1;
    for (size_t e = 0; e < t->vocab.n; e++)
        total += t->vocab.lens[e]; /* decoding never lengthens a vocabulary string */
    for (size_t i = 0; i < t->nadded; i++)
        total += t->added[i].len;
    int32_t *vocab_of = malloc(nids * sizeof *vocab_of),
            *added_of = malloc(nids * sizeof *added_of);
    t->dec_bytes = malloc(total + 1);
    t->dec_off = calloc(nids + 1, sizeof *t->dec_off);
    t->dec_flags = calloc(nids, 1);
    int rc = -1;
    if (!vocab_of || !added_of || !t->dec_bytes || !t->dec_off || !t->dec_flags)
        text_fail(err, errcap, "out of memory");
    else if (total > UINT32_MAX)
        text_fail(err, errcap, "the vocabulary is too large");
    else
        rc = index_ids(t, vocab_of, added_of, err, errcap);
    size_t off = 0;
    for (size_t id = 0; rc == 0 && id < t->nids; id++) {
        t->dec_off[id] = (uint32_t)off;
        put_id_bytes(t, vocab_of[id], added_of[id], id, &off);
    }
    if (rc == 0)
        t->dec_off[t->nids] = (uint32_t)off;
    free(vocab_of);
    free(added_of);
    return rc;
}
