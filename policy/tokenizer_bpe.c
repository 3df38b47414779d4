/* tokenizer_bpe: the tokenizer's tables (vocabulary and merge hash maps, GPT-2's byte-level
 * alphabet) and the BPE merge loop over one pre-token. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- byte string -> int32 map ---------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a: keys are short token strings */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static size_t table_size_for(size_t expected)
{
    size_t size = 16;
    while (size < expected * 2) /* load factor at most 1/2 keeps probe runs short */
        size *= 2;
    return size;
}

int ptok_strmap_init(ptok_strmap *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    size_t nslots = table_size_for(expected);
    m->cap = expected ? expected : 1;
    m->slots = calloc(nslots, sizeof *m->slots);
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->lens = malloc(m->cap * sizeof *m->lens);
    m->vals = malloc(m->cap * sizeof *m->vals);
    m->mask = nslots - 1;
    if (!m->slots || !m->keys || !m->lens || !m->vals) {
        ptok_strmap_deinit(m);
        return -1;
    }
    return 0;
}

void ptok_strmap_deinit(ptok_strmap *m)
{
    free(m->slots);
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t strmap_find_slot(const ptok_strmap *m, const char *key, size_t len)
{
    size_t i = hash_bytes(key, len) & m->mask;
    for (;;) {
        uint32_t e = m->slots[i];
        if (!e)
            return i;
        e--;
        if (m->lens[e] == len && !memcmp(m->keys[e], key, len))
            return i;
        i = (i + 1) & m->mask;
    }
}

/* Doubles the slot array once entries pass half of it. */
static int strmap_grow(ptok_strmap *m)
{
    size_t nslots = (m->mask + 1) * 2;
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return -1;
    free(m->slots);
    m->slots = slots;
    m->mask = nslots - 1;
    for (size_t e = 0; e < m->n; e++)
        m->slots[strmap_find_slot(m, m->keys[e], m->lens[e])] = (uint32_t)e + 1;
    return 0;
}

static int strmap_reserve_entry(ptok_strmap *m)
{
    if (m->n < m->cap)
        return 0;
    size_t cap = m->cap * 2;
    const char **keys = realloc(m->keys, cap * sizeof *keys);
    if (!keys)
        return -1;
    m->keys = keys;
    uint32_t *lens = realloc(m->lens, cap * sizeof *lens);
    if (!lens)
        return -1;
    m->lens = lens;
    int32_t *vals = realloc(m->vals, cap * sizeof *vals);
    if (!vals)
        return -1;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int ptok_strmap_put(ptok_strmap *m, const char *key, size_t len, int32_t val, int32_t *old)
{
    if (len > UINT32_MAX)
        return -1;
    size_t i = strmap_find_slot(m, key, len);
    if (m->slots[i]) {
        if (old)
            *old = m->vals[m->slots[i] - 1];
        return 1;
    }
    if (strmap_reserve_entry(m) < 0)
        return -1;
    size_t e = m->n++;
    m->keys[e] = key;
    m->lens[e] = (uint32_t)len;
    m->vals[e] = val;
    m->slots[i] = (uint32_t)e + 1;
    if (m->n * 2 > m->mask + 1 && strmap_grow(m) < 0)
        return -1;
    return 0;
}

int32_t ptok_strmap_get(const ptok_strmap *m, const char *key, size_t len)
{
    if (!m->slots)
        return -1;
    uint32_t e = m->slots[strmap_find_slot(m, key, len)];
    return e ? m->vals[e - 1] : -1;
}

/* ---- (id, id) -> (rank, id) map -------------------------------------------------------------- */

static uint64_t pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static size_t pair_slot(uint64_t key, size_t mask)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing spreads consecutive ids */
    return (size_t)(h ^ (h >> 32)) & mask;
}

int ptok_mergemap_init(ptok_mergemap *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    size_t nslots = table_size_for(expected);
    m->keys = malloc(nslots * sizeof *m->keys);
    m->ranks = malloc(nslots * sizeof *m->ranks);
    m->ids = malloc(nslots * sizeof *m->ids);
    if (!m->keys || !m->ranks || !m->ids) {
        ptok_mergemap_deinit(m);
        return -1;
    }
    memset(m->keys, 0xff, nslots * sizeof *m->keys); /* every slot PTOK_NO_PAIR */
    m->mask = nslots - 1;
    return 0;
}

void ptok_mergemap_deinit(ptok_mergemap *m)
{
    free(m->keys);
    free(m->ranks);
    free(m->ids);
    memset(m, 0, sizeof *m);
}

static size_t mergemap_find_slot(const ptok_mergemap *m, uint64_t key)
{
    size_t i = pair_slot(key, m->mask);
    while (m->keys[i] != PTOK_NO_PAIR && m->keys[i] != key)
        i = (i + 1) & m->mask;
    return i;
}

static int mergemap_grow(ptok_mergemap *m)
{
    ptok_mergemap bigger;
    if (ptok_mergemap_init(&bigger, (m->mask + 1)) < 0)
        return -1;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->keys[i] == PTOK_NO_PAIR)
            continue;
        size_t j = mergemap_find_slot(&bigger, m->keys[i]);
        bigger.keys[j] = m->keys[i];
        bigger.ranks[j] = m->ranks[i];
        bigger.ids[j] = m->ids[i];
    }
    bigger.n = m->n;
    ptok_mergemap_deinit(m);
    *m = bigger;
    return 0;
}

int ptok_mergemap_put(ptok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    uint64_t key = pair_key(a, b);
    size_t i = mergemap_find_slot(m, key);
    if (m->keys[i] == PTOK_NO_PAIR) {
        m->keys[i] = key;
        m->n++;
    }
    m->ranks[i] = rank;
    m->ids[i] = id;
    if (m->n * 2 > m->mask + 1)
        return mergemap_grow(m);
    return 0;
}

bool ptok_mergemap_get(const ptok_mergemap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id)
{
    size_t i = mergemap_find_slot(m, pair_key(a, b));
    if (m->keys[i] == PTOK_NO_PAIR)
        return false;
    *rank = m->ranks[i];
    *id = m->ids[i];
    return true;
}

/* ---- byte-level alphabet --------------------------------------------------------------------- */

/* Printable bytes stand for themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen)
 * take the code points 256, 257, ... in byte order, so every byte is a visible character. */
static bool byte_is_printable(int b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

void ptok_bytemap_init(ptok_bytemap *bm)
{
    uint32_t next = 256;
    for (size_t i = 0; i < sizeof bm->byte_of / sizeof bm->byte_of[0]; i++)
        bm->byte_of[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_is_printable(b) ? (uint32_t)b : next++;
        bm->cp[b] = cp;
        bm->byte_of[cp] = (int16_t)b;
        if (cp < 0x80) {
            bm->utf8[b][0] = (char)cp;
            bm->utf8_len[b] = 1;
        } else {
            bm->utf8[b][0] = (char)(0xC0 | (cp >> 6));
            bm->utf8[b][1] = (char)(0x80 | (cp & 0x3F));
            bm->utf8_len[b] = 2;
        }
    }
}

long ptok_bytemap_decode(const ptok_bytemap *bm, const char *s, size_t len, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        if (u[i] < 0x80) {
            cp = u[i];
            i += 1;
        } else if ((u[i] & 0xE0) == 0xC0 && i + 1 < len) {
            cp = ((uint32_t)(u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1; /* three-byte and longer characters are beyond the map */
        }
        if (cp >= sizeof bm->byte_of / sizeof bm->byte_of[0] || bm->byte_of[cp] < 0)
            return -1;
        out[o++] = (char)bm->byte_of[cp];
    }
    return (long)o;
}

/* ---- the merge loop -------------------------------------------------------------------------- */

int ptok_ids_push(ptok_ids *a, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

struct ptok_sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    bool gone;          /* merged into its left neighbour */
};

/* A candidate merge of the symbol at pos with its right neighbour. */
struct ptok_merge {
    uint32_t rank;
    uint32_t pos;
    int32_t id;
};

void ptok_bpe_scratch_free(ptok_bpe_scratch *s)
{
    free(s->syms);
    free(s->heap);
    free(s->mapped);
    memset(s, 0, sizeof *s);
}

static int grow_buffer(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*buf, cap2 * elem);
    if (!p)
        return -1;
    *buf = p;
    *cap = cap2;
    return 0;
}

/* Lowest rank first; among equal ranks the leftmost, as HF orders its queue. */
static bool merge_before(const struct ptok_merge *a, const struct ptok_merge *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct ptok_merge *h, size_t *n, struct ptok_merge m)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!merge_before(&m, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = m;
}

static struct ptok_merge heap_pop(struct ptok_merge *h, size_t *n)
{
    struct ptok_merge top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n)
            break;
        if (child + 1 < *n && merge_before(&h[child + 1], &h[child]))
            child++;
        if (!merge_before(&h[child], &last))
            break;
        h[i] = h[child];
        i = child;
    }
    h[i] = last;
    return top;
}

/* Queues the merge of syms[pos] with its right neighbour, when the pair has one. */
static void queue_pair(const struct pol_tok *t, const struct ptok_sym *syms, int32_t pos,
                       struct ptok_merge *heap, size_t *nheap)
{
    if (pos < 0 || syms[pos].next < 0)
        return;
    struct ptok_merge m = {0, (uint32_t)pos, 0};
    if (ptok_mergemap_get(&t->merges, syms[pos].id, syms[syms[pos].next].id, &m.rank, &m.id))
        heap_push(heap, nheap, m);
}

/* The piece's first symbols: one per byte, unknown bytes becoming unk (fused when asked) or
 * dropped when the model has no unk token, as HF does. Returns the symbol count. */
static size_t initial_symbols(const struct pol_tok *t, const unsigned char *p, size_t len,
                              struct ptok_sym *syms)
{
    size_t n = 0;
    bool last_unk = false;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[p[i]];
        bool unk = id < 0;
        if (unk && t->unk_id < 0)
            continue;
        if (unk && t->fuse_unk && last_unk)
            continue;
        syms[n] = (struct ptok_sym){unk ? t->unk_id : id, (int32_t)n - 1, (int32_t)n + 1, false};
        n++;
        last_unk = unk;
    }
    if (n)
        syms[n - 1].next = -1;
    return n;
}

/* Whether the whole piece is one vocabulary entry (the ignore_merges shortcut). */
static int32_t whole_piece_id(const struct pol_tok *t, const unsigned char *p, size_t len,
                              ptok_bpe_scratch *s)
{
    if (grow_buffer((void **)&s->mapped, &s->mapped_cap, 2 * len + 1, 1) < 0)
        return -2;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        memcpy(s->mapped + o, t->bytemap.utf8[p[i]], t->bytemap.utf8_len[p[i]]);
        o += t->bytemap.utf8_len[p[i]];
    }
    return ptok_strmap_get(&t->vocab, s->mapped, o);
}

static void merge_all(const struct pol_tok *t, struct ptok_sym *syms, size_t nsyms,
                      struct ptok_merge *heap)
{
    size_t nheap = 0;
    for (size_t i = 0; i + 1 < nsyms; i++)
        queue_pair(t, syms, (int32_t)i, heap, &nheap);
    while (nheap) {
        struct ptok_merge top = heap_pop(heap, &nheap);
        struct ptok_sym *left = &syms[top.pos];
        if (left->gone || left->next < 0)
            continue;
        /* a stale entry: one side has merged since it was queued */
        uint32_t rank;
        int32_t id;
        if (!ptok_mergemap_get(&t->merges, left->id, syms[left->next].id, &rank, &id) ||
            id != top.id)
            continue;
        struct ptok_sym *right = &syms[left->next];
        left->id = top.id;
        right->gone = true;
        left->next = right->next;
        if (right->next >= 0)
            syms[right->next].prev = (int32_t)top.pos;
        queue_pair(t, syms, left->prev, heap, &nheap);
        queue_pair(t, syms, (int32_t)top.pos, heap, &nheap);
    }
}

int ptok_bpe_piece(const struct pol_tok *t, const char *piece, size_t len, ptok_bpe_scratch *s,
                   ptok_ids *out)
{
    const unsigned char *p = (const unsigned char *)piece;
    if (t->ignore_merges) {
        int32_t id = whole_piece_id(t, p, len, s);
        if (id == -2)
            return -1;
        if (id >= 0)
            return ptok_ids_push(out, id);
    }
    /* each merge pushes at most two entries: 2 * len bounds the heap */
    if (grow_buffer((void **)&s->syms, &s->syms_cap, len, sizeof *s->syms) < 0 ||
        grow_buffer((void **)&s->heap, &s->heap_cap, 3 * len + 1, sizeof *s->heap) < 0)
        return -1;
    size_t nsyms = initial_symbols(t, p, len, s->syms);
    if (nsyms > 1)
        merge_all(t, s->syms, nsyms, s->heap);
    for (size_t i = 0; i < nsyms; i++)
        if (!s->syms[i].gone && ptok_ids_push(out, s->syms[i].id) < 0)
            return -1;
    return 0;
}
