/* digest: SHA-256 as lowercase hex, the one way the server names content (build-cache keys,
 * task references). Backed by libcrypto. */
#ifndef KGYM_DIGEST_H
#define KGYM_DIGEST_H

#include <stddef.h>

/* hex receives 64 hex digits and a NUL. Only a broken libcrypto fails: hex is then all zeros. */
void digest_sha256_hex(const void *data, size_t len, char hex[65]);

/* n bytes as 2n lowercase hex digits and a NUL (hex holds 2n + 1). */
void digest_to_hex(const unsigned char *bytes, size_t n, char *hex);

#endif
