/* pol_gpu_generate (see decode_gpu.h): many prompts run to their ends over a decoder's slots with
 * continuous batching.
 *
 * Each round is one append and one draw: first one token for every running sequence whose prompt
 * is in (the token it drew last round), then pieces of prompts waiting to be read, as many tokens
 * as the call has room for. A sequence is admitted as soon as a slot is free, and its slot goes
 * back the round it stops, so the batch stays full while prompts wait. */
#include "policy/cuda/decode_gpu.h"

#include <stdlib.h>
#include <string.h>

#include "util/text.h"

const char *pol_finish_name(pol_finish f)
{
    switch (f) {
    case POL_FINISH_EOS:
        return "eos";
    case POL_FINISH_STOP:
        return "stop";
    case POL_FINISH_LENGTH:
        return "length";
    case POL_FINISH_CONTEXT:
        return "context";
    case POL_FINISH_NONE:
        break;
    }
    return "none";
}

void pol_gpu_gen_free(pol_gpu_gen_seq *seqs, int n_seqs)
{
    for (int i = 0; seqs && i < n_seqs; i++) {
        free(seqs[i].ids);
        free(seqs[i].logp);
        seqs[i].ids = NULL;
        seqs[i].logp = NULL;
        seqs[i].n = 0;
    }
}

/* A sequence's progress through the run. */
typedef struct gen_state {
    int slot;     /* -1 until admitted and after it stops */
    int fed;      /* prompt tokens appended */
    int feeding;  /* of which in the current round */
    int32_t next; /* the token drawn last round, appended this round */
    char *tail;   /* the last bytes of the new text (stop-string matching) */
    size_t tail_len;
} gen_state;

/* Everything a run works with. */
typedef struct gen_run {
    pol_gpu_dec *d;
    pol_gpu_gen_seq *seqs;
    int n_seqs;
    const pol_gpu_gen_opts *o;
    gen_state *st;
    int *owner;           /* [n_slots] the sequence in each slot, -1 */
    int32_t *slots, *ids; /* [max_tokens] the round's tokens */
    uint64_t *seeds;      /* [max_tokens] per row */
    int32_t *drawn;       /* [max_tokens] per row */
    float *logp;          /* [max_tokens] per row */
    size_t max_stop;      /* longest stop string */
    char *window;         /* scratch for stop matching */
    size_t window_cap;
    int n_slots, max_len, max_tokens, next_waiting, finished;
} gen_run;

static int check_request(const gen_run *g, int vocab, char *err, size_t errcap)
{
    const pol_gpu_gen_opts *o = g->o;
    if (o->max_new < 1)
        return text_fail(err, errcap, "decode_gpu generate: max_new must be at least 1");
    if (o->n_stop > 0 && !o->tok)
        return text_fail(err, errcap, "decode_gpu generate: stop strings need the tokenizer");
    for (int i = 0; i < o->n_stop; i++)
        if (!o->stop[i] || !o->stop[i][0])
            return text_fail(err, errcap, "decode_gpu generate: stop string %d is empty", i);
    for (int i = 0; i < g->n_seqs; i++) {
        const pol_gpu_gen_seq *s = &g->seqs[i];
        if (!s->prompt || s->n_prompt < 1 || s->n_prompt > g->max_len)
            return text_fail(err, errcap,
                             "decode_gpu generate: prompt %d has %d tokens (1 to %d fit a slot)", i,
                             s->n_prompt, g->max_len);
        for (int t = 0; t < s->n_prompt; t++)
            if (s->prompt[t] < 0 || s->prompt[t] >= vocab)
                return text_fail(err, errcap,
                                 "decode_gpu generate: prompt %d token %d has id %d, outside the "
                                 "vocabulary [0, %d)",
                                 i, t, s->prompt[t], vocab);
    }
    return 0;
}

static int alloc_run(gen_run *g)
{
    size_t T = (size_t)g->max_tokens;
    g->st = calloc((size_t)g->n_seqs, sizeof *g->st);
    g->owner = malloc((size_t)g->n_slots * sizeof *g->owner);
    g->slots = malloc(T * sizeof *g->slots);
    g->ids = malloc(T * sizeof *g->ids);
    g->seeds = malloc(T * sizeof *g->seeds);
    g->drawn = malloc(T * sizeof *g->drawn);
    g->logp = malloc(T * sizeof *g->logp);
    if (!g->st || !g->owner || !g->slots || !g->ids || !g->seeds || !g->drawn || !g->logp)
        return -1;
    for (int i = 0; i < g->n_slots; i++)
        g->owner[i] = -1;
    for (int i = 0; i < g->n_seqs; i++)
        g->st[i].slot = -1;
    for (int i = 0; i < g->o->n_stop; i++) {
        size_t len = strlen(g->o->stop[i]);
        g->max_stop = len > g->max_stop ? len : g->max_stop;
    }
    return 0;
}

static void free_run(gen_run *g)
{
    for (int i = 0; g->st && i < g->n_seqs; i++) {
        free(g->st[i].tail);
        if (g->st[i].slot >= 0)
            pol_gpu_dec_release(g->d, g->st[i].slot);
    }
    free(g->st);
    free(g->owner);
    free(g->slots);
    free(g->ids);
    free(g->seeds);
    free(g->drawn);
    free(g->logp);
    free(g->window);
}

/* Gives free slots to waiting sequences, in order. */
static int admit(gen_run *g, char *err, size_t errcap)
{
    while (g->next_waiting < g->n_seqs) {
        int slot = pol_gpu_dec_acquire(g->d);
        if (slot < 0)
            return 0;
        int i = g->next_waiting++;
        pol_gpu_gen_seq *s = &g->seqs[i];
        s->n = 0;
        s->finish = POL_FINISH_NONE;
        s->ids = malloc((size_t)g->o->max_new * sizeof *s->ids);
        s->logp = malloc((size_t)g->o->max_new * sizeof *s->logp);
        if (!s->ids || !s->logp) {
            pol_gpu_dec_release(g->d, slot);
            return text_fail(err, errcap, "decode_gpu generate: out of host memory");
        }
        g->st[i].slot = slot;
        g->owner[slot] = i;
    }
    return 0;
}

/* The round's tokens: the running sequences' last draws first, then prompt pieces. */
static int build_round(gen_run *g)
{
    int n = 0;
    for (int slot = 0; slot < g->n_slots; slot++) {
        int i = g->owner[slot];
        if (i >= 0 && g->st[i].fed == g->seqs[i].n_prompt) {
            g->slots[n] = slot;
            g->ids[n++] = g->st[i].next;
        }
    }
    for (int slot = 0; slot < g->n_slots && n < g->max_tokens; slot++) {
        int i = g->owner[slot];
        if (i < 0)
            continue;
        gen_state *st = &g->st[i];
        int left = g->seqs[i].n_prompt - st->fed, room = g->max_tokens - n;
        st->feeding = left < room ? left : room;
        for (int t = 0; t < st->feeding; t++) {
            g->slots[n] = slot;
            g->ids[n++] = g->seqs[i].prompt[st->fed + t];
        }
    }
    return n;
}

/* Whether the new text, after token id, holds a stop string (over token boundaries: the last
 * max_stop - 1 bytes before the token are kept). */
static int hits_stop(gen_run *g, gen_state *st, int32_t id, bool *hit)
{
    *hit = false;
    if (g->o->n_stop == 0)
        return 0;
    const char *bytes;
    size_t len;
    if (pol_tok_token_bytes(g->o->tok, id, &bytes, &len) != 0)
        return 0; /* an id past the tokenizer (padding rows): no text */
    size_t need = st->tail_len + len;
    if (need > g->window_cap) {
        char *w = realloc(g->window, need);
        if (!w)
            return -1;
        g->window = w;
        g->window_cap = need;
    }
    memcpy(g->window, st->tail, st->tail_len);
    memcpy(g->window + st->tail_len, bytes, len);
    for (int k = 0; k < g->o->n_stop && !*hit; k++)
        *hit = memmem(g->window, need, g->o->stop[k], strlen(g->o->stop[k])) != NULL;
    size_t keep = g->max_stop - 1 < need ? g->max_stop - 1 : need;
    if (!st->tail && !(st->tail = malloc(g->max_stop)))
        return -1;
    memcpy(st->tail, g->window + need - keep, keep);
    st->tail_len = keep;
    return 0;
}

static bool is_eos(const pol_gpu_gen_opts *o, int32_t id)
{
    for (int k = 0; k < o->n_eos; k++)
        if (o->eos[k] == id)
            return true;
    return false;
}

static void finish(gen_run *g, int i, pol_finish why)
{
    gen_state *st = &g->st[i];
    g->seqs[i].finish = why;
    g->owner[st->slot] = -1;
    pol_gpu_dec_release(g->d, st->slot);
    st->slot = -1;
    g->finished++;
}

/* One drawn token for sequence i: kept, then the reasons to stop, in HF's order. */
static int take_token(gen_run *g, int i, int32_t id, float logp, char *err, size_t errcap)
{
    pol_gpu_gen_seq *s = &g->seqs[i];
    gen_state *st = &g->st[i];
    s->ids[s->n] = id;
    s->logp[s->n++] = logp;
    bool stop;
    if (hits_stop(g, st, id, &stop) != 0)
        return text_fail(err, errcap, "decode_gpu generate: out of host memory");
    if (is_eos(g->o, id))
        finish(g, i, POL_FINISH_EOS);
    else if (stop)
        finish(g, i, POL_FINISH_STOP);
    else if (s->n >= g->o->max_new)
        finish(g, i, POL_FINISH_LENGTH);
    else if (pol_gpu_dec_len(g->d, st->slot) >= g->max_len)
        finish(g, i, POL_FINISH_CONTEXT);
    else
        st->next = id;
    return 0;
}

static int run_round(gen_run *g, char *err, size_t errcap)
{
    if (admit(g, err, errcap) != 0)
        return -1;
    int n = build_round(g);
    if (pol_gpu_dec_append(g->d, g->slots, g->ids, n, err, errcap) != 0)
        return -1;
    for (int slot = 0; slot < g->n_slots; slot++)
        if (g->owner[slot] >= 0) {
            gen_state *st = &g->st[g->owner[slot]];
            st->fed += st->feeding;
            st->feeding = 0;
        }
    const int32_t *row_slot;
    int rows = pol_gpu_dec_rows(g->d, &row_slot);
    for (int r = 0; r < rows; r++)
        g->seeds[r] = g->seqs[g->owner[row_slot[r]]].seed;
    if (pol_gpu_dec_sample(g->d, &g->o->sample, g->o->n_valid, g->seeds, g->drawn, g->logp, err,
                           errcap) != 0)
        return -1;
    /* rows of prompts not yet read in full give no token */
    for (int r = 0; r < rows; r++) {
        int i = g->owner[row_slot[r]];
        if (g->st[i].fed == g->seqs[i].n_prompt &&
            take_token(g, i, g->drawn[r], g->logp[r], err, errcap) != 0)
            return -1;
    }
    return 0;
}

int pol_gpu_generate(pol_gpu_dec *d, pol_gpu_gen_seq *seqs, int n_seqs, const pol_gpu_gen_opts *o,
                     void (*progress)(void *ctx, int finished, int total), void *progress_ctx,
                     char *err, size_t errcap)
{
    gen_run g = {.d = d, .seqs = seqs, .n_seqs = n_seqs, .o = o};
    pol_gpu_dec_shape(d, &g.n_slots, &g.max_len, &g.max_tokens);
    for (int i = 0; i < n_seqs; i++) {
        seqs[i].ids = NULL;
        seqs[i].logp = NULL;
        seqs[i].n = 0;
        seqs[i].finish = POL_FINISH_NONE;
    }
    if (n_seqs < 0 || (n_seqs > 0 && !seqs))
        return text_fail(err, errcap, "decode_gpu generate: bad sequence list");
    if (check_request(&g, pol_gpu_dec_vocab(d), err, errcap) != 0)
        return -1;
    if (n_seqs == 0)
        return 0;
    int rc = 0;
    if (alloc_run(&g) != 0)
        rc = text_fail(err, errcap, "decode_gpu generate: out of host memory");
    while (rc == 0 && g.finished < n_seqs) {
        rc = run_round(&g, err, errcap);
        if (rc == 0 && progress)
            progress(progress_ctx, g.finished, n_seqs);
    }
    free_run(&g);
    return rc;
}
