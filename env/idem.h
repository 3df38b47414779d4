/* idem: Idempotency-Key replay. A cache remembers the last N responses of one scope (an
 * episode, or the server for creates and batches): the same key with the same body replays the
 * stored response; the same key with another body is a 409. Not thread-safe: the caller holds
 * the scope's lock. */
#ifndef KGYM_IDEM_H
#define KGYM_IDEM_H

#include <stddef.h>
#include <stdint.h>

#include "api.h"

#define IDEM_DEFAULT_SLOTS 16

typedef struct idem_entry {
    char *key;
    uint64_t body_hash;
    int status;
    char *response; /* compact JSON of the body */
    int retry_after_s;
    char location[128];
} idem_entry;

typedef struct idem_cache {
    idem_entry *slots;
    size_t n_slots;
    size_t next; /* ring position of the oldest entry */
} idem_cache;

typedef enum { IDEM_MISS, IDEM_HIT, IDEM_MISMATCH } idem_lookup_result;

int idem_init(idem_cache *c, size_t slots);
void idem_deinit(idem_cache *c);
uint64_t idem_hash(const char *method, const char *path, const char *body, size_t len);
/* On IDEM_HIT fills resp with a copy of the stored response. */
idem_lookup_result idem_lookup(const idem_cache *c, const char *key, uint64_t body_hash,
                               api_response *resp);
/* Stores resp (JSON bodies only) under key, evicting the oldest entry. */
void idem_store(idem_cache *c, const char *key, uint64_t body_hash, const api_response *resp);

#endif
