/* strbuf: a growable byte buffer, always NUL-terminated (binary-safe through len). */
#ifndef KGYM_STRBUF_H
#define KGYM_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct strbuf {
    char *data; /* NUL-terminated; NULL until the first append */
    size_t len;
    size_t cap;
} strbuf;

#define STRBUF_INIT                                                                                \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }

/* All return 0, or -1 when memory ran out (the buffer is left as it was). */
int sb_append(strbuf *sb, const void *bytes, size_t n);
int sb_puts(strbuf *sb, const char *s);
int sb_putc(strbuf *sb, char c);
int sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sb_vprintf(strbuf *sb, const char *fmt, va_list ap);
/* Empties the buffer, keeping its memory. */
void sb_reset(strbuf *sb);
/* Hands the bytes to the caller (never NULL: "" when empty) and leaves the buffer empty. */
char *sb_steal(strbuf *sb);
void sb_free(strbuf *sb);

#endif
