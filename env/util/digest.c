#include "util/digest.h"

#include <openssl/evp.h>
#include <string.h>

void digest_to_hex(const unsigned char *bytes, size_t n, char *hex)
{
    static const char X[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = X[bytes[i] >> 4];
        hex[2 * i + 1] = X[bytes[i] & 15];
    }
    hex[2 * n] = '\0';
}

void digest_sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(data, len, d, &n, EVP_sha256(), NULL) != 1 || n != 32) {
        memset(hex, '0', 64); /* only when libcrypto itself is broken */
        hex[64] = '\0';
        return;
    }
    digest_to_hex(d, 32, hex);
}
