/* tokenizer_internal: what the tokenizer's source files share (not an API: see tokenizer.h).
 * tokenizer_load.c reads tokenizer.json (the file, normaliser, pre-tokenizer, decoder) into a
 * pol_tok, tokenizer_vocab.c its ids (BPE model, added tokens, decoding table),
 * tokenizer_bpe.c holds the hash maps, the byte-level table and the merge loop, and
 * tokenizer.c encodes and decodes. */
#ifndef KGYM_POLICY_TOKENIZER_INTERNAL_H
#define KGYM_POLICY_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/text.h"

/* Ids index the decoding table: a bound keeps a hostile file from asking for gigabytes. */
#define PTOK_ID_MAX ((1 << 24) - 1)

/* Fills err (when given) and returns -1. */

/* A boolean field of obj: def when absent or null; -1 (message naming where.key) otherwise. */
int ptok_json_bool(json_t *obj, const char *key, bool def, bool *out, const char *where, char *err,
                   size_t errcap);
/* The "type" string of a component, or NULL (message filled). */
const char *ptok_json_type(json_t *obj, const char *where, char *err, size_t errcap);
/* An id in 0..PTOK_ID_MAX; name is the token it belongs to, for the message. */
int ptok_json_id(json_t *v, const char *where, const char *name, int32_t *out, char *err,
                 size_t errcap);

/* Byte string -> int32 (open addressing, linear probing). Keys are borrowed: the caller keeps
 * them alive (the tokenizer keeps them in its arena). */
typedef struct {
    const char **keys;
    uint32_t *lens;
    int32_t *vals;
    uint32_t *slots; /* entry index + 1; 0 marks an empty slot */
    size_t n, cap, mask;
} ptok_strmap;

int ptok_strmap_init(ptok_strmap *m, size_t expected);
void ptok_strmap_deinit(ptok_strmap *m);
/* 0 when inserted, 1 when the key was there (its value in *old, left unchanged), -1 on OOM. */
int ptok_strmap_put(ptok_strmap *m, const char *key, size_t len, int32_t val, int32_t *old);
/* The value, or -1 when absent. */
int32_t ptok_strmap_get(const ptok_strmap *m, const char *key, size_t len);

/* (left id, right id) -> (rank, merged id): the BPE merge table. */
typedef struct {
    uint64_t *keys; /* PTOK_NO_PAIR marks an empty slot */
    uint32_t *ranks;
    int32_t *ids;
    size_t n, mask;
} ptok_mergemap;

#define PTOK_NO_PAIR UINT64_MAX

int ptok_mergemap_init(ptok_mergemap *m, size_t expected);
void ptok_mergemap_deinit(ptok_mergemap *m);
/* Inserts or overwrites (a later duplicate merge wins, as in HF). 0, or -1 on OOM. */
int ptok_mergemap_put(ptok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
/* true with *rank and *id when the pair merges. */
bool ptok_mergemap_get(const ptok_mergemap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id);

/* GPT-2's bytes_to_unicode: the code point that stands for each byte in vocabulary strings,
 * and its UTF-8 form. */
typedef struct {
    uint32_t cp[256];
    char utf8[256][2];
    uint8_t utf8_len[256];
    int16_t byte_of[324]; /* code point -> byte, -1 when it stands for none (cp < 324) */
} ptok_bytemap;

void ptok_bytemap_init(ptok_bytemap *bm);
/* Converts a vocabulary string back to the bytes it stands for (out holds at least len bytes).
 * Returns the byte count, or -1 when a character is outside the map (HF then keeps the string's
 * own UTF-8, and so does the caller). */
long ptok_bytemap_decode(const ptok_bytemap *bm, const char *s, size_t len, char *out);

/* An added token (added_tokens in tokenizer.json). */
typedef struct {
    char *content; /* as written in the file */
    size_t len;
    char *match; /* what is searched for: content, NFC'd for a normalized token */
    size_t match_len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} ptok_added;

/* Growable id array: the encoder's output and the merge loop's scratch. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} ptok_ids;

int ptok_ids_push(ptok_ids *a, int32_t id);

/* Scratch of the merge loop, reused across pieces of one encode call. */
typedef struct {
    struct ptok_sym *syms;
    size_t syms_cap;
    struct ptok_merge *heap;
    size_t heap_cap;
    char *mapped; /* a piece in vocabulary form (ignore_merges lookups) */
    size_t mapped_cap;
} ptok_bpe_scratch;

void ptok_bpe_scratch_free(ptok_bpe_scratch *s);

struct pol_tok {
    ptok_strmap vocab; /* vocabulary string (byte-level form) -> id */
    ptok_mergemap merges;
    ptok_bytemap bytemap;
    int32_t byte_id[256]; /* id of each single-byte symbol; -1 when the vocabulary lacks it */
    bool ignore_merges;
    bool nfc;            /* normalizer: NFC */
    int32_t unk_id;      /* -1: bytes missing from the vocabulary are dropped, as HF does */
    bool fuse_unk;       /* consecutive unknown symbols become one unk */
    pcre2_code **splits; /* pre-tokenizer regexes, applied in order */
    size_t nsplits;
    ptok_added *added;
    size_t nadded;
    bool added_first[2][256]; /* first bytes of raw [0] and normalized [1] added tokens */
    ptok_strmap added_by_content;
    char *arena; /* vocabulary strings */
    /* decoding: id -> bytes */
    size_t nids;
    char *dec_bytes;
    uint32_t *dec_off; /* nids + 1 offsets into dec_bytes */
    uint8_t *dec_flags;
};

#define PTOK_ASSIGNED 1u
#define PTOK_SPECIAL 2u

/* tokenizer_vocab.c: the model section (after which byte_id is set), the added tokens (after
 * the normaliser, whose NFC they need), and the decoding table (last). 0 or -1. */
int ptok_load_model(struct pol_tok *t, json_t *root, char *err, size_t errcap);
int ptok_load_added(struct pol_tok *t, json_t *root, char *err, size_t errcap);
int ptok_build_decoder(struct pol_tok *t, char *err, size_t errcap);

/* Appends the ids of one pre-token (bytes of one regex piece) to out. */
int ptok_bpe_piece(const struct pol_tok *t, const char *piece, size_t len, ptok_bpe_scratch *s,
                   ptok_ids *out);

#endif
