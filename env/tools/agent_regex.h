/* agent_regex: a regular expression an agent sent (Grep's pattern, BashOutput's filter),
 * compiled and matched under limits, so that no pattern can hold a server thread for long.
 *
 * Every match runs under PCRE2's match, depth and heap limits: catastrophic backtracking such
 * as (a+)+$ ends in a PCRE2 error (PCRE2_ERROR_MATCHLIMIT, ...) after a bounded amount of work
 * instead of running for minutes. A caller that matches many subjects also runs a time budget
 * (agent_regex_start_budget) and stops when agent_regex_expired says so: the limits bound one
 * match, the budget bounds them all. PCRE2 (Perl) syntax, UTF-8 with Unicode properties; \C is
 * refused (it could end a match inside a character). */
#ifndef KGYM_AGENT_REGEX_H
#define KGYM_AGENT_REGEX_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_REGEX_MAX_PATTERN 65536    /* bytes */
#define AGENT_REGEX_MATCH_LIMIT 1000000  /* backtracking steps per match attempt */
#define AGENT_REGEX_DEPTH_LIMIT 200000   /* nested backtracking points per match attempt */
#define AGENT_REGEX_HEAP_LIMIT_KIB 65536 /* backtracking memory per match attempt */

/* Compile flags. */
enum {
    AGENT_RE_CASELESS = 1u << 0,
    AGENT_RE_MULTILINE = 1u << 1, /* ^ and $ at every line, '.' matches newlines too */
    /* Subjects may hold invalid UTF-8 (a job's raw output): they are matched as far as they are
     * valid. Without it, subjects must be valid UTF-8 (the caller checked) and are not checked
     * again at every match. */
    AGENT_RE_RAW_SUBJECT = 1u << 2,
};

/* agent_regex_compile's results. */
enum {
    AGENT_REGEX_OK = 0,
    AGENT_REGEX_INVALID = -1,  /* a syntax error: message and offset say where */
    AGENT_REGEX_TOO_LONG = -2, /* longer than AGENT_REGEX_MAX_PATTERN */
    AGENT_REGEX_NOMEM = -3,
};

typedef struct agent_regex {
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    uint32_t match_opts;
    int64_t deadline_ms; /* CLOCK_MONOTONIC; 0: no budget running */
    bool expired;        /* the budget ran out (latched by agent_regex_expired) */
} agent_regex;

/* Compiles pattern (len bytes; NUL bytes in it are literal) with flags (AGENT_RE_*). On
 * AGENT_REGEX_INVALID, msg gets PCRE2's message and *offset where in the pattern it stopped; on
 * the other errors msg says what went wrong. rx needs agent_regex_free whatever this returns. */
int agent_regex_compile(agent_regex *rx, const char *pattern, size_t len, unsigned flags, char *msg,
                        size_t msgcap, size_t *offset);

/* Starts the time budget of the matches to come (budget_ms > 0). */
void agent_regex_start_budget(agent_regex *rx, int budget_ms);
/* Whether the budget ran out (false while none runs). Once true, stays true. */
bool agent_regex_expired(agent_regex *rx);

/* Matches subject[start..len) once: 1 on a match (its offsets in *ms, *me; either may be NULL),
 * 0 on none, or a negative PCRE2 error (a limit reached: PCRE2_ERROR_MATCHLIMIT,
 * PCRE2_ERROR_DEPTHLIMIT, PCRE2_ERROR_HEAPLIMIT, or PCRE2_ERROR_NOMEMORY). */
int agent_regex_match(agent_regex *rx, const char *subject, size_t len, size_t start, size_t *ms,
                      size_t *me);

/* PCRE2's message for err (a match error of agent_regex_match), into buf. */
void agent_regex_error_text(int err, char *buf, size_t cap);

void agent_regex_free(agent_regex *rx);

#endif
