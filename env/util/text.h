/* text: UTF-8 checks and the head+tail cap every observation goes through. */
#ifndef KGYM_TEXT_H
#define KGYM_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether bytes[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
bool text_is_utf8(const char *bytes, size_t len);

/* Whether the bytes look binary (a NUL in the first 8 KiB, as git and grep decide). */
bool text_looks_binary(const char *bytes, size_t len);

/* Copies bytes into a new NUL-terminated string of valid UTF-8: each invalid byte, and each NUL
 * byte (which a C string cannot hold), becomes U+FFFD. Never NULL unless memory ran out. */
char *text_sanitize_utf8(const char *bytes, size_t len);

/* Copies the C string s into out (cap bytes, always NUL-terminated when cap > 0, cut on a
 * character boundary when it does not fit), writing every byte that is not part of a valid
 * UTF-8 character as \xNN: for messages naming files whose names may not be UTF-8, where the
 * bad bytes must stay visible (text_sanitize_utf8 would turn them all into U+FFFD). */
void text_escape_utf8(const char *s, char *out, size_t cap);

/* Caps text to at most cap bytes by keeping the head and the tail and putting a marker line
 * "[... N bytes omitted ...]" between them; cuts only on UTF-8 character boundaries. Returns a
 * new string; *truncated tells whether anything was cut. Input must be valid UTF-8. */
char *text_cap_head_tail(const char *text, size_t len, size_t cap, bool *truncated);

/* snprintf whose truncation is checked (true when it all fitted); through a va_list, so the
 * compiler's truncation warnings stay for the call sites that ignore the result. */
bool text_fmt(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The error path of functions that return 0 / -1 and fill a caller's message buffer: formats
 * into err (when err and errcap are set) and returns -1, so a check reads
 * `if (bad) return text_fail(err, errcap, "...", ...);`. */
int text_fail(char *err, size_t errcap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Milliseconds of CLOCK_MONOTONIC: for durations. */
double text_mono_ms(void);

#endif
