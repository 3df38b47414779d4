#include "strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sb_reserve(strbuf *sb, size_t extra)
{
    if (extra > ((size_t)-1) / 2 - sb->len)
        return -1;
    size_t need = sb->len + extra + 1;
    if (need <= sb->cap)
        return 0;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = realloc(sb->data, cap);
    if (!p)
        return -1;
    sb->data = p;
    sb->cap = cap;
    return 0;
}

int sb_append(strbuf *sb, const void *bytes, size_t n)
{
    if (sb_reserve(sb, n) != 0)
        return -1;
    if (n)
        memcpy(sb->data + sb->len, bytes, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
    return 0;
}

int sb_puts(strbuf *sb, const char *s)
{
    return sb_append(sb, s, strlen(s));
}

int sb_putc(strbuf *sb, char c)
{
    return sb_append(sb, &c, 1);
}

int sb_vprintf(strbuf *sb, const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (n < 0 || sb_reserve(sb, (size_t)n) != 0)
        return -1;
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
    return 0;
}

int sb_printf(strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = sb_vprintf(sb, fmt, ap);
    va_end(ap);
    return rc;
}

void sb_reset(strbuf *sb)
{
    sb->len = 0;
    if (sb->data)
        sb->data[0] = '\0';
}

char *sb_steal(strbuf *sb)
{
    char *p = sb->data ? sb->data : strdup("");
    sb->data = NULL;
    sb->len = sb->cap = 0;
    return p;
}

void sb_free(strbuf *sb)
{
    free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
}
