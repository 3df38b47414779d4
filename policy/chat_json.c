/* chat_json: JSON text byte-identical to Python's json.dumps(x, ensure_ascii=False), which is
 * what transformers' `tojson` filter calls inside chat templates, plus the few Python string
 * methods the templates use. Jansson's own dumper differs (float format, escapes, spacing), so
 * the templates' JSON is written here. */
#include "chat_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strings ----------------------------------------------------------------------------------
 */

/* json.dumps escapes ", \ and the C0 controls only (ensure_ascii=False keeps everything else). */
static const char *short_escape(unsigned char c)
{
    switch (c) {
    case '"':
        return "\\\"";
    case '\\':
        return "\\\\";
    case '\n':
        return "\\n";
    case '\r':
        return "\\r";
    case '\t':
        return "\\t";
    case '\b':
        return "\\b";
    case '\f':
        return "\\f";
    default:
        return NULL;
    }
}

int chat_json_dump_string(strbuf *sb, const char *s, size_t len)
{
    if (sb_putc(sb, '"') != 0)
        return -1;
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (sb_append(sb, s + run, i - run) != 0)
            return -1;
        const char *esc = short_escape(c);
        int rc = esc ? sb_puts(sb, esc) : sb_printf(sb, "\\u%04x", c);
        if (rc != 0)
            return -1;
        run = i + 1;
    }
    if (sb_append(sb, s + run, len - run) != 0)
        return -1;
    return sb_putc(sb, '"');
}

/* ---- numbers ----------------------------------------------------------------------------------
 */

/* The shortest digits that read back as d: *digits (no point, no sign) and the decimal exponent
 * of the first digit, from C's %e at increasing precision, as Python's repr chooses them. */
static int shortest_digits(double d, char *digits, size_t cap, int *exp10)
{
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) != d && prec < 17)
            continue;
        const char *p = buf + (buf[0] == '-');
        size_t n = 0;
        for (; *p && *p != 'e'; p++)
            if (*p != '.' && n + 1 < cap)
                digits[n++] = *p;
        while (n > 1 && digits[n - 1] == '0')
            n--;
        digits[n] = '\0';
        *exp10 = *p == 'e' ? atoi(p + 1) : 0;
        return 0;
    }
    return -1;
}

/* Python's repr: positional notation when -4 <= exponent < 16, otherwise d.ddde+XX. */
static int format_repr(bool neg, const char *digits, int exp10, char *out, size_t cap)
{
    strbuf sb = STRBUF_INIT;
    int n = (int)strlen(digits);
    int rc = neg ? sb_putc(&sb, '-') : 0;
    if (exp10 < -4 || exp10 >= 16) {
        rc |= sb_putc(&sb, digits[0]);
        if (n > 1)
            rc |= sb_printf(&sb, ".%s", digits + 1);
        rc |= sb_printf(&sb, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (exp10 < 0) {
        rc |= sb_puts(&sb, "0.");
        for (int i = 0; i < -exp10 - 1; i++)
            rc |= sb_putc(&sb, '0');
        rc |= sb_puts(&sb, digits);
    } else {
        for (int i = 0; i <= exp10; i++)
            rc |= sb_putc(&sb, i < n ? digits[i] : '0');
        rc |= sb_putc(&sb, '.');
        rc |= n > exp10 + 1 ? sb_puts(&sb, digits + exp10 + 1) : sb_putc(&sb, '0');
    }
    if (rc != 0 || sb.len + 1 > cap) {
        sb_free(&sb);
        return -1;
    }
    memcpy(out, sb.data, sb.len + 1);
    sb_free(&sb);
    return 0;
}

int chat_py_float_repr(double d, char *out, size_t cap)
{
    if (isnan(d) || isinf(d))
        return -1;
    if (d == 0.0)
        return format_repr(signbit(d) != 0, "0", 0, out, cap);
    char digits[24];
    int exp10 = 0;
    if (shortest_digits(d, digits, sizeof digits, &exp10) != 0)
        return -1;
    return format_repr(d < 0, digits, exp10, out, cap);
}

/* ---- values -----------------------------------------------------------------------------------
 */

static int newline_indent(strbuf *sb, int indent, int depth)
{
    if (sb_putc(sb, '\n') != 0)
        return -1;
    for (int i = 0; i < indent * depth; i++)
        if (sb_putc(sb, ' ') != 0)
            return -1;
    return 0;
}

static int dump_value(strbuf *sb, const json_t *v, int indent, int depth);

/* Between items: ", " on one line, or "," and a new indented line. */
static int item_separator(strbuf *sb, size_t i, int indent, int depth)
{
    if (indent < 0)
        return i ? sb_puts(sb, ", ") : 0;
    if (i && sb_putc(sb, ',') != 0)
        return -1;
    return newline_indent(sb, indent, depth);
}

static int dump_array(strbuf *sb, const json_t *v, int indent, int depth)
{
    size_t n = json_array_size(v);
    if (n == 0)
        return sb_puts(sb, "[]");
    if (sb_putc(sb, '[') != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (item_separator(sb, i, indent, depth + 1) != 0 ||
            dump_value(sb, json_array_get(v, i), indent, depth + 1) != 0)
            return -1;
    if (indent >= 0 && newline_indent(sb, indent, depth) != 0)
        return -1;
    return sb_putc(sb, ']');
}

static int dump_object(strbuf *sb, const json_t *v, int indent, int depth)
{
    if (json_object_size(v) == 0)
        return sb_puts(sb, "{}");
    if (sb_putc(sb, '{') != 0)
        return -1;
    size_t i = 0;
    const char *key;
    size_t key_len;
    json_t *item;
    /* Jansson keeps insertion order, which is the order Python's dict (and json.loads) keeps. */
    json_object_keylen_foreach((json_t *)v, key, key_len, item)
    {
        if (item_separator(sb, i++, indent, depth + 1) != 0 ||
            chat_json_dump_string(sb, key, key_len) != 0 || sb_puts(sb, ": ") != 0 ||
            dump_value(sb, item, indent, depth + 1) != 0)
            return -1;
    }
    if (indent >= 0 && newline_indent(sb, indent, depth) != 0)
        return -1;
    return sb_putc(sb, '}');
}

static int dump_value(strbuf *sb, const json_t *v, int indent, int depth)
{
    char num[40];
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return dump_object(sb, v, indent, depth);
    case JSON_ARRAY:
        return dump_array(sb, v, indent, depth);
    case JSON_STRING:
        return chat_json_dump_string(sb, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        return sb_printf(sb, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL:
        if (chat_py_float_repr(json_real_value(v), num, sizeof num) != 0)
            return -1;
        return sb_puts(sb, num);
    case JSON_TRUE:
        return sb_puts(sb, "true");
    case JSON_FALSE:
        return sb_puts(sb, "false");
    case JSON_NULL:
        return sb_puts(sb, "null");
    }
    return -1;
}

int chat_json_dump(strbuf *sb, const json_t *v, int indent)
{
    return dump_value(sb, v, indent, 0);
}

/* ---- Python string methods --------------------------------------------------------------------
 */

/* str.isspace() of one code point (the Unicode White_Space set plus the C0 separators 1C..1F). */
static bool py_isspace(uint32_t cp)
{
    if ((cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20))
        return true;
    if (cp < 0x85)
        return false;
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* The code point of the well-formed UTF-8 sequence at s[0..avail) and its length, or 0. */
static size_t decode_utf8(const unsigned char *s, size_t avail, uint32_t *cp)
{
    size_t n = s[0] < 0x80             ? 1
               : (s[0] & 0xe0) == 0xc0 ? 2
               : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    if (n == 0 || n > avail)
        return 0;
    uint32_t v = n == 1 ? s[0] : s[0] & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    *cp = v;
    return n;
}

void chat_py_strip(const char *s, size_t len, size_t *begin, size_t *end)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t b = 0, e = len;
    uint32_t cp;
    size_t n;
    while (b < e && (n = decode_utf8(u + b, e - b, &cp)) != 0 && py_isspace(cp))
        b += n;
    while (e > b) {
        size_t start = e - 1; /* back to the first byte of the last character */
        while (start > b && (u[start] & 0xc0) == 0x80 && e - start < 4)
            start--;
        n = decode_utf8(u + start, e - start, &cp);
        if (n != e - start || !py_isspace(cp))
            break;
        e = start;
    }
    *begin = b;
    *end = e;
}

bool chat_str_contains(const char *s, size_t len, const char *needle)
{
    return memmem(s, len, needle, strlen(needle)) != NULL;
}

bool chat_str_starts(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

bool chat_str_ends(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}
