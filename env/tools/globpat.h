/* globpat: the glob patterns of the Glob tool and of Grep's `glob` filter.
 *
 * Syntax: `*` any run of characters but '/', `?` one character but '/', `[abc]`, `[a-z]`,
 * `[!a]` / `[^a]` one character of (not of) a set, `**` as a whole path segment any number of
 * directories (zero included), `{a,b}` alternatives (nestable), `\x` a literal x. Matching is
 * case-sensitive and applies to a relative path whose segments are separated by '/'. */
#ifndef KGYM_TOOLS_GLOBPAT_H
#define KGYM_TOOLS_GLOBPAT_H

#include <stdbool.h>
#include <stddef.h>

/* Brace alternatives one pattern may expand to; more is refused (exponential patterns). */
#define GLOBPAT_MAX_ALTERNATIVES 256

typedef struct globpat_seg {
    const char *text; /* points into the alternative's buffer; not NUL-terminated */
    size_t len;
    bool globstar; /* the segment is exactly "**" */
} globpat_seg;

typedef struct globpat_alt {
    char *buf;
    globpat_seg *segs;
    size_t nsegs;
} globpat_alt;

typedef struct globpat {
    globpat_alt *alts;
    size_t nalts;
} globpat;

/* Compiles pattern. Returns 0, or -1 when it has too many alternatives or memory ran out. */
int globpat_compile(const char *pattern, globpat *g);
/* Whether the relative path matches one of the pattern's alternatives. */
bool globpat_match(const globpat *g, const char *path);
void globpat_free(globpat *g);

#endif
