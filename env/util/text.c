#include "text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if it is not valid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

bool text_is_utf8(const char *bytes, size_t len)
{
    const unsigned char *s = (const unsigned char *)bytes;
    size_t i = 0;
    while (i < len) {
        size_t k = utf8_seq_len(s + i, len - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

bool text_looks_binary(const char *bytes, size_t len)
{
    return memchr(bytes, '\0', len < 8192 ? len : 8192) != NULL;
}

char *text_sanitize_utf8(const char *bytes, size_t len)
{
    if (len > ((size_t)-1) / 3 - 1)
        return NULL;
    char *out = malloc(len * 3 + 1); /* worst case: every byte becomes U+FFFD (3 bytes) */
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)bytes;
    size_t i = 0, o = 0;
    while (i < len) {
        size_t k = s[i] ? utf8_seq_len(s + i, len - i) : 0; /* NUL cannot live in a C string */
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += 1;
        }
    }
    out[o] = '\0';
    return out;
}

/* Moves pos back to the start of the UTF-8 character containing it. */
static size_t char_start(const char *text, size_t pos)
{
    while (pos > 0 && ((unsigned char)text[pos] & 0xC0) == 0x80)
        pos--;
    return pos;
}

char *text_cap_head_tail(const char *text, size_t len, size_t cap, bool *truncated)
{
    *truncated = false;
    if (len <= cap) {
        char *out = malloc(len + 1);
        if (out) {
            memcpy(out, text, len);
            out[len] = '\0';
        }
        return out;
    }
    *truncated = true;
    /* The marker counts against the cap: size it for the largest omitted count first. */
    char marker[96];
    int mlen = snprintf(marker, sizeof marker, "\n[... %zu bytes omitted ...]\n", len);
    size_t budget = (size_t)mlen < cap ? cap - (size_t)mlen : 0;
    size_t head = char_start(text, budget / 2);
    size_t tail_from = char_start(text, len - (budget - budget / 2));
    if (tail_from < head)
        tail_from = head;
    int m = snprintf(marker, sizeof marker, "\n[... %zu bytes omitted ...]\n", tail_from - head);
    size_t tail = len - tail_from;
    char *out = malloc(head + (size_t)m + tail + 1);
    if (!out)
        return NULL;
    memcpy(out, text, head);
    memcpy(out + head, marker, (size_t)m);
    memcpy(out + head + (size_t)m, text + tail_from, tail);
    out[head + (size_t)m + tail] = '\0';
    return out;
}

bool text_fmt(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < cap;
}

double text_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int text_fail(char *err, size_t errcap, const char *fmt, ...)
{
    if (err && errcap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errcap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void text_escape_utf8(const char *s, char *out, size_t cap)
{
    if (cap == 0)
        return;
    size_t o = 0, len = strlen(s);
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq_len((const unsigned char *)s + i, len - i);
        if (o + (k ? k : 4) >= cap)
            break;
        if (k)
            memcpy(out + o, s + i, k);
        else
            snprintf(out + o, 5, "\\x%02X", (unsigned char)s[i]);
        o += k ? k : 4;
        i += k ? k : 1;
    }
    out[o] = '\0';
}
