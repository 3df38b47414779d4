/* agent_regex: an agent's regular expression under limits. See agent_regex.h. */
#include "tools/agent_regex.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint32_t compile_options(unsigned flags)
{
    /* \C could end a match inside a UTF-8 character, and a next search starting there would
     * run with the UTF check off: refused. */
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
    if (flags & AGENT_RE_CASELESS)
        opts |= PCRE2_CASELESS;
    if (flags & AGENT_RE_MULTILINE)
        opts |= PCRE2_MULTILINE | PCRE2_DOTALL;
    if (flags & AGENT_RE_RAW_SUBJECT)
        opts |= PCRE2_MATCH_INVALID_UTF;
    return opts;
}

int agent_regex_compile(agent_regex *rx, const char *pattern, size_t len, unsigned flags, char *msg,
                        size_t msgcap, size_t *offset)
{
    memset(rx, 0, sizeof *rx);
    if (offset)
        *offset = 0;
    if (len > AGENT_REGEX_MAX_PATTERN) {
        snprintf(msg, msgcap, "the pattern is longer than %d bytes", AGENT_REGEX_MAX_PATTERN);
        return AGENT_REGEX_TOO_LONG;
    }
    int err;
    PCRE2_SIZE off = 0;
    rx->re = pcre2_compile((PCRE2_SPTR)pattern, len, compile_options(flags), &err, &off, NULL);
    if (!rx->re) {
        PCRE2_UCHAR text[256];
        if (pcre2_get_error_message(err, text, sizeof text) < 0)
            snprintf((char *)text, sizeof text, "unknown error");
        snprintf(msg, msgcap, "%s", (const char *)text);
        if (offset)
            *offset = (size_t)off;
        return AGENT_REGEX_INVALID;
    }
    rx->md = pcre2_match_data_create_from_pattern(rx->re, NULL);
    rx->mctx = pcre2_match_context_create(NULL);
    if (!rx->md || !rx->mctx) {
        snprintf(msg, msgcap, "out of memory");
        return AGENT_REGEX_NOMEM;
    }
    pcre2_set_match_limit(rx->mctx, AGENT_REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(rx->mctx, AGENT_REGEX_DEPTH_LIMIT);
    pcre2_set_heap_limit(rx->mctx, AGENT_REGEX_HEAP_LIMIT_KIB);
    /* Checked subjects were validated once by the caller; raw ones are never rejected. */
    rx->match_opts = (flags & AGENT_RE_RAW_SUBJECT) ? 0 : PCRE2_NO_UTF_CHECK;
    return AGENT_REGEX_OK;
}

void agent_regex_start_budget(agent_regex *rx, int budget_ms)
{
    rx->deadline_ms = now_ms() + (budget_ms > 0 ? budget_ms : 1);
    rx->expired = false;
}

bool agent_regex_expired(agent_regex *rx)
{
    if (!rx->expired && rx->deadline_ms && now_ms() >= rx->deadline_ms)
        rx->expired = true;
    return rx->expired;
}

int agent_regex_match(agent_regex *rx, const char *subject, size_t len, size_t start, size_t *ms,
                      size_t *me)
{
    int rc = pcre2_match(rx->re, (PCRE2_SPTR)subject, len, start, rx->match_opts, rx->md, rx->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0)
        return rc;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
    if (ms)
        *ms = ov[0];
    if (me)
        *me = ov[1] < ov[0] ? ov[0] : ov[1]; /* \K can put the end before the start */
    return 1;
}

void agent_regex_error_text(int err, char *buf, size_t cap)
{
    PCRE2_UCHAR text[256];
    if (pcre2_get_error_message(err, text, sizeof text) < 0)
        snprintf((char *)text, sizeof text, "resource limit");
    snprintf(buf, cap, "%s", (const char *)text);
}

void agent_regex_free(agent_regex *rx)
{
    pcre2_match_data_free(rx->md);
    pcre2_match_context_free(rx->mctx);
    pcre2_code_free(rx->re);
    memset(rx, 0, sizeof *rx);
}
