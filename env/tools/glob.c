/* Glob: finds workspace files by name pattern, newest first. Also home of the glob matcher
 * (globpat.h) that Grep's `glob` filter shares. */
#include "tools/globpat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/fs.h"
#include "tools/tool.h"
#include "util/strbuf.h"

#define GLOB_MAX_RESULTS 1000
#define GLOB_MAX_PATTERN 4096

/* ---- brace expansion ------------------------------------------------------------------------- */

/* Index just past the bracket expression opening at p[i] ('['), or i when it is not closed (and
 * so the '[' is an ordinary character). */
static size_t class_end(const char *p, size_t len, size_t i)
{
    size_t j = i + 1;
    if (j < len && (p[j] == '!' || p[j] == '^'))
        j++;
    if (j < len && p[j] == ']') /* a leading ']' is a member, not the end */
        j++;
    while (j < len && p[j] != ']') {
        if (p[j] == '\\' && j + 1 < len)
            j++;
        j++;
    }
    return j < len ? j + 1 : i;
}

/* Finds the first brace group of p: *open at its '{', *close at its matching '}'. */
static bool find_brace_group(const char *p, size_t len, size_t *open, size_t *close)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '\\') {
            i++;
        } else if (p[i] == '[') {
            size_t e = class_end(p, len, i);
            if (e > i)
                i = e - 1;
        } else if (p[i] == '{') {
            int depth = 0;
            for (size_t j = i; j < len; j++) {
                if (p[j] == '\\')
                    j++;
                else if (p[j] == '{')
                    depth++;
                else if (p[j] == '}' && --depth == 0) {
                    *open = i;
                    *close = j;
                    return true;
                }
            }
            return false; /* unbalanced: the braces are ordinary characters */
        }
    }
    return false;
}

typedef struct alt_list {
    char **v;
    size_t n;
} alt_list;

static int alt_push(alt_list *l, const char *s, size_t len)
{
    if (l->n >= GLOBPAT_MAX_ALTERNATIVES)
        return -1;
    char **v = realloc(l->v, (l->n + 1) * sizeof *v);
    if (!v)
        return -1;
    l->v = v;
    char *copy = strndup(s, len);
    if (!copy)
        return -1;
    l->v[l->n++] = copy;
    return 0;
}

static int expand_braces(const char *p, size_t len, alt_list *out);

/* Expands prefix + part + suffix, where part is one alternative of a brace group. */
static int expand_choice(const char *p, size_t open, size_t close, size_t len, size_t from,
                         size_t to, alt_list *out)
{
    size_t n = open + (to - from) + (len - close - 1);
    char *s = malloc(n + 1);
    if (!s)
        return -1;
    memcpy(s, p, open);
    memcpy(s + open, p + from, to - from);
    memcpy(s + open + (to - from), p + close + 1, len - close - 1);
    s[n] = '\0';
    int rc = expand_braces(s, n, out);
    free(s);
    return rc;
}

/* Each step removes one brace group, so the recursion ends; the alternative cap bounds work. */
static int expand_braces(const char *p, size_t len, alt_list *out)
{
    size_t open, close;
    if (!find_brace_group(p, len, &open, &close))
        return alt_push(out, p, len);
    int depth = 0;
    size_t from = open + 1;
    for (size_t j = open + 1; j <= close; j++) {
        if (p[j] == '\\' && j < close) {
            j++;
            continue;
        }
        if (p[j] == '{')
            depth++;
        else if (p[j] == '}' && j != close)
            depth--;
        else if ((p[j] == ',' && depth == 0) || j == close) {
            if (expand_choice(p, open, close, len, from, j, out) != 0)
                return -1;
            from = j + 1;
        }
    }
    return 0;
}

/* ---- compiling ------------------------------------------------------------------------------- */

/* Splits an expanded alternative into segments, dropping empty and "." ones. */
static int split_alt(globpat_alt *a)
{
    size_t max = 1;
    for (const char *c = a->buf; *c; c++)
        max += *c == '/';
    a->segs = calloc(max, sizeof *a->segs);
    if (!a->segs)
        return -1;
    const char *s = a->buf;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n && !(n == 1 && s[0] == '.')) {
            globpat_seg *g = &a->segs[a->nsegs++];
            g->text = s;
            g->len = n;
            g->globstar = n == 2 && s[0] == '*' && s[1] == '*';
        }
        s += n + (e ? 1 : 0);
    }
    return 0;
}

void globpat_free(globpat *g)
{
    for (size_t i = 0; g->alts && i < g->nalts; i++) {
        free(g->alts[i].buf);
        free(g->alts[i].segs);
    }
    free(g->alts);
    g->alts = NULL;
    g->nalts = 0;
}

int globpat_compile(const char *pattern, globpat *g)
{
    memset(g, 0, sizeof *g);
    alt_list l = {NULL, 0};
    int rc = expand_braces(pattern, strlen(pattern), &l);
    if (rc == 0) {
        g->alts = calloc(l.n ? l.n : 1, sizeof *g->alts);
        rc = g->alts ? 0 : -1;
    }
    for (size_t i = 0; i < l.n; i++) {
        if (rc == 0) {
            g->alts[g->nalts].buf = l.v[i];
            rc = split_alt(&g->alts[g->nalts++]);
        } else {
            free(l.v[i]);
        }
    }
    free(l.v);
    if (rc != 0)
        globpat_free(g);
    return rc;
}

/* ---- matching -------------------------------------------------------------------------------- */

/* Decodes the UTF-8 character at s[i] (n bytes in all) into *cp; returns its byte length. A
 * malformed byte stands for itself, so matching never stalls. */
static size_t utf8_decode(const char *s, size_t n, size_t i, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s + i;
    size_t len = u[0] < 0x80 ? 1 : u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 1;
    if (i + len > n)
        len = 1;
    uint32_t c = len == 1 ? u[0] : len == 2 ? u[0] & 0x1F : len == 3 ? u[0] & 0x0F : u[0] & 0x07;
    for (size_t k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) {
            *cp = u[0];
            return 1;
        }
        c = (c << 6) | (u[k] & 0x3F);
    }
    *cp = c;
    return len;
}

/* Whether cp belongs to the bracket expression p[i..end). */
static bool class_matches(const char *p, size_t i, size_t end, uint32_t cp)
{
    size_t j = i + 1;
    bool negate = p[j] == '!' || p[j] == '^';
    if (negate)
        j++;
    bool found = false;
    size_t last = end - 1; /* the closing ']' */
    while (j < last) {
        uint32_t lo, hi;
        if (p[j] == '\\' && j + 1 < last)
            j++;
        j += utf8_decode(p, last, j, &lo);
        hi = lo;
        if (j + 1 < last && p[j] == '-') {
            size_t k = j + 1;
            if (p[k] == '\\' && k + 1 < last)
                k++;
            j = k + utf8_decode(p, last, k, &hi);
        }
        if (cp >= lo && cp <= hi)
            found = true;
    }
    return found != negate;
}

/* Tries to match one pattern element (not '*') at p[*pi] against s[*si]; advances both. */
static bool match_one(const char *p, size_t pn, size_t *pi, const char *s, size_t sn, size_t *si)
{
    if (*si >= sn)
        return false;
    uint32_t cp;
    size_t clen = utf8_decode(s, sn, *si, &cp);
    if (p[*pi] == '?') {
        *pi += 1;
        *si += clen;
        return true;
    }
    if (p[*pi] == '[') {
        size_t e = class_end(p, pn, *pi);
        if (e > *pi) {
            if (!class_matches(p, *pi, e, cp))
                return false;
            *pi = e;
            *si += clen;
            return true;
        }
    }
    size_t at = *pi;
    if (p[at] == '\\' && at + 1 < pn)
        at++;
    if (p[at] != s[*si])
        return false;
    *pi = at + 1;
    *si += 1;
    return true;
}

/* One path segment against one pattern segment (no '/'): greedy '*' with backtracking to the
 * last star only, which is linear in practice and never exponential. */
static bool segment_matches(const char *p, size_t pn, const char *s, size_t sn)
{
    size_t pi = 0, si = 0;
    size_t star_p = SIZE_MAX, star_s = 0;
    while (si < sn) {
        if (pi < pn && p[pi] == '*') {
            while (pi < pn && p[pi] == '*')
                pi++;
            star_p = pi;
            star_s = si;
            continue;
        }
        if (pi < pn && match_one(p, pn, &pi, s, sn, &si))
            continue;
        if (star_p == SIZE_MAX)
            return false;
        uint32_t cp;
        star_s += utf8_decode(s, sn, star_s, &cp);
        pi = star_p;
        si = star_s;
    }
    while (pi < pn && p[pi] == '*')
        pi++;
    return pi == pn;
}

/* Dynamic programming over segments: ok[i][j] tells whether pattern segments i.. match path
 * segments j..; a globstar may absorb any number of path segments. */
static bool alt_matches(const globpat_alt *a, const globpat_seg *path, size_t n)
{
    size_t m = a->nsegs, w = n + 1;
    bool *ok = calloc((m + 1) * w, sizeof *ok);
    if (!ok)
        return false;
    ok[m * w + n] = true;
    for (size_t i = m; i-- > 0;) {
        const globpat_seg *ps = &a->segs[i];
        for (size_t j = n + 1; j-- > 0;) {
            bool v;
            if (ps->globstar)
                v = ok[(i + 1) * w + j] || (j < n && ok[i * w + j + 1]);
            else
                v = j < n && ok[(i + 1) * w + j + 1] &&
                    segment_matches(ps->text, ps->len, path[j].text, path[j].len);
            ok[i * w + j] = v;
        }
    }
    bool result = ok[0];
    free(ok);
    return result;
}

bool globpat_match(const globpat *g, const char *path)
{
    size_t max = 1;
    for (const char *c = path; *c; c++)
        max += *c == '/';
    globpat_seg *segs = calloc(max, sizeof *segs);
    if (!segs)
        return false;
    size_t n = 0;
    for (const char *s = path; *s;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len) {
            segs[n].text = s;
            segs[n++].len = len;
        }
        s += len + (e ? 1 : 0);
    }
    bool matched = false;
    for (size_t i = 0; i < g->nalts && !matched; i++)
        matched = alt_matches(&g->alts[i], segs, n);
    free(segs);
    return matched;
}

/* ---- the Glob tool --------------------------------------------------------------------------- */

typedef struct glob_hit {
    char *shown;
    struct timespec mtime;
} glob_hit;

typedef struct glob_search {
    const globpat *pat;
    glob_hit *hits;
    size_t n, cap;
    size_t examined; /* files matched against the pattern so far */
    struct timespec deadline;
    bool oom;
    bool files_cut; /* stopped at fs_glob_budget.max_files */
    bool timed_out; /* stopped at the deadline */
} glob_search;

/* Whether the search must stop before it examines one more file: it has had its files or its
 * time. Checked before each file, as one file against a pattern of many alternatives is the unit
 * of work. */
static bool out_of_budget(glob_search *g)
{
    if (g->examined >= fs_glob_budget.max_files)
        g->files_cut = true;
    else if (fs_deadline_passed(&g->deadline))
        g->timed_out = true;
    return g->files_cut || g->timed_out;
}

static int collect_match(void *ctx, const char *rel, const char *sub, const struct stat *st)
{
    glob_search *g = ctx;
    if (out_of_budget(g))
        return 1;
    g->examined++;
    if (!globpat_match(g->pat, sub))
        return 0;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        glob_hit *h = realloc(g->hits, cap * sizeof *h);
        if (!h) {
            g->oom = true;
            return 1;
        }
        g->hits = h;
        g->cap = cap;
    }
    char shown[WS_PATH_MAX + 16];
    ws_display(rel, shown, sizeof shown);
    g->hits[g->n].shown = strdup(shown);
    g->hits[g->n].mtime = st->st_mtim;
    if (!g->hits[g->n].shown) {
        g->oom = true;
        return 1;
    }
    g->n++;
    return 0;
}

/* Newest first; equal times by path so the order is stable. */
static int by_mtime_desc(const void *a, const void *b)
{
    const glob_hit *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
    return strcmp(x->shown, y->shown);
}

/* The pattern relative to the search directory: an absolute pattern must lie beneath it. */
static const char *relative_pattern(const char *pattern, const fs_path *dir, tool_result *res)
{
    if (pattern[0] != '/')
        return pattern;
    size_t n = strlen(dir->shown);
    if (strncmp(pattern, dir->shown, n) == 0 && pattern[n] == '/')
        return pattern + n + 1;
    tool_fail(res, "INVALID_TOOL_CALL", NULL,
              "An absolute pattern must start with the search directory (%s/); better, give a "
              "pattern relative to it, such as **/*.cu.",
              dir->shown);
    return NULL;
}

static void report_hits(const tool_env *env, glob_search *g, bool incomplete, tool_result *res)
{
    if (g->n > 1) /* qsort must not see the NULL of an empty list */
        qsort(g->hits, g->n, sizeof *g->hits, by_mtime_desc);
    size_t shown_n = g->n < GLOB_MAX_RESULTS ? g->n : GLOB_MAX_RESULTS;
    json_t *files = json_array();
    strbuf sb = STRBUF_INIT;
    for (size_t i = 0; i < shown_n; i++) {
        json_array_append_new(files, json_string(g->hits[i].shown));
        sb_printf(&sb, "%s\n", g->hits[i].shown);
    }
    bool capped;
    char *list = fs_cap_output(env, sb_steal(&sb), &capped);
    bool truncated = g->n > shown_n || capped || incomplete || g->files_cut || g->timed_out;
    if (g->n == 0)
        sb_puts(&sb, "No files found\n");
    sb_puts(&sb, list);
    free(list);
    if (g->n > shown_n)
        sb_printf(&sb, "(Showing the %zu newest of %zu matches; narrow the pattern or path.)\n",
                  shown_n, g->n);
    if (g->files_cut)
        sb_printf(&sb,
                  "(Stopped after examining %zu files; the listing is incomplete. Narrow path or "
                  "pattern.)\n",
                  g->examined);
    if (g->timed_out)
        sb_puts(&sb, "(The search ran out of time; the listing is incomplete. Narrow path or "
                     "pattern.)\n");
    if (incomplete)
        sb_puts(&sb, "(The workspace is too large or deep to search completely.)\n");
    json_t *data = json_pack("{s:o,s:I,s:b}", "files", files, "count", (json_int_t)g->n,
                             "truncated", truncated);
    tool_ok_take(res, data, sb_steal(&sb));
}

static void glob_run(const tool_env *env, const json_t *args, tool_result *res)
{
    fs_path dir;
    if (fs_path_arg(args, "path", ".", &dir, res) != 0)
        return;
    const json_t *pv = json_object_get(args, "pattern");
    const char *pattern = json_string_value(pv);
    if (!pattern || strlen(pattern) != json_string_length(pv) || !pattern[0] ||
        strlen(pattern) > GLOB_MAX_PATTERN) {
        tool_fail(res, "INVALID_TOOL_CALL", NULL,
                  "pattern must be a non-empty string of at most %d bytes without NUL characters",
                  GLOB_MAX_PATTERN);
        return;
    }
    pattern = relative_pattern(pattern, &dir, res);
    if (!pattern)
        return;
    globpat pat;
    if (globpat_compile(pattern, &pat) != 0) {
        tool_fail(res, "INVALID_TOOL_CALL", NULL,
                  "pattern expands to more than %d alternatives; simplify its {a,b} groups",
                  GLOBPAT_MAX_ALTERNATIVES);
        return;
    }
    glob_search g = {.pat = &pat, .deadline = fs_deadline_in(fs_glob_budget.time_ms)};
    bool incomplete = false;
    int rc = fs_walk(env->root_fd, dir.rel, collect_match, &g, &incomplete);
    if (rc != WS_OK)
        fs_fail_path(res, rc, dir.shown);
    else if (g.oom)
        tool_fail(res, "IO_ERROR", NULL, "out of memory while searching");
    else
        report_hits(env, &g, incomplete, res);
    for (size_t i = 0; i < g.n; i++)
        free(g.hits[i].shown);
    free(g.hits);
    globpat_free(&pat);
}

const tool_def tool_def_glob = {
    .name = "Glob",
    .description =
        "Finds files whose path matches a glob pattern (*, ?, [a-z], ** for any depth, {a,b} "
        "alternatives), relative to `path` (default /workspace); lists them newest first.",
    .schema = "{\"type\":\"object\",\"properties\":{"
              "\"pattern\":{\"type\":\"string\",\"description\":\"Glob matched against paths "
              "relative to `path`, e.g. **/*.cu or src/*.{h,cpp}.\"},"
              "\"path\":{\"type\":\"string\",\"description\":\"Directory to search: /workspace/... "
              "or relative (default /workspace).\"}},"
              "\"required\":[\"pattern\"],\"additionalProperties\":false}",
    .run = glob_run,
};
