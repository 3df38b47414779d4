#include "idem.h"

#include <stdlib.h>
#include <string.h>

int idem_init(idem_cache *c, size_t slots)
{
    c->slots = calloc(slots, sizeof *c->slots);
    c->n_slots = c->slots ? slots : 0;
    c->next = 0;
    return c->slots ? 0 : -1;
}

static void entry_clear(idem_entry *e)
{
    free(e->key);
    free(e->response);
    memset(e, 0, sizeof *e);
}

void idem_deinit(idem_cache *c)
{
    for (size_t i = 0; i < c->n_slots; i++)
        entry_clear(&c->slots[i]);
    free(c->slots);
    c->slots = NULL;
    c->n_slots = 0;
}

/* FNV-1a over method, path and body: which request a key was first used for. */
static uint64_t fnv1a(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

uint64_t idem_hash(const char *method, const char *path, const char *body, size_t len)
{
    uint64_t h = 14695981039346656037ull;
    h = fnv1a(h, method, strlen(method) + 1);
    h = fnv1a(h, path, strlen(path) + 1);
    return fnv1a(h, body ? body : "", body ? len : 0);
}

idem_lookup_result idem_lookup(const idem_cache *c, const char *key, uint64_t body_hash,
                               api_response *resp)
{
    for (size_t i = 0; i < c->n_slots; i++) {
        const idem_entry *e = &c->slots[i];
        if (!e->key || strcmp(e->key, key) != 0)
            continue;
        if (e->body_hash != body_hash)
            return IDEM_MISMATCH;
        resp->status = e->status;
        resp->json = json_loads(e->response, 0, NULL);
        resp->retry_after_s = e->retry_after_s;
        memcpy(resp->location, e->location, sizeof resp->location);
        return IDEM_HIT;
    }
    return IDEM_MISS;
}

void idem_store(idem_cache *c, const char *key, uint64_t body_hash, const api_response *resp)
{
    if (!c->n_slots || !resp->json)
        return;
    idem_entry *e = &c->slots[c->next];
    entry_clear(e);
    e->key = strdup(key);
    e->body_hash = body_hash;
    e->status = resp->status;
    e->response = json_dumps(resp->json, JSON_COMPACT);
    e->retry_after_s = resp->retry_after_s;
    memcpy(e->location, resp->location, sizeof e->location);
    c->next = (c->next + 1) % c->n_slots;
}
