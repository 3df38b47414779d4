/* Grep: searches workspace files with a PCRE2 regular expression, ripgrep style.
 *
 * Patterns come from the agent, so every match runs under agent_regex's limits (catastrophic
 * backtracking becomes a REGEX_LIMIT error, not a hung thread), and the whole search under a time
 * budget. Binary and non-UTF-8 files are skipped. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/agent_regex.h"
#include "tools/fs.h"
#include "tools/globpat.h"
#include "tools/tool.h"
#include "util/strbuf.h"
#include "util/text.h"

#define GREP_TIME_BUDGET_MS 15000 /* the whole search */
#define GREP_MAX_CONTEXT 1000     /* -A/-B/-C beyond this are clamped */

typedef enum grep_mode { MODE_CONTENT, MODE_FILES, MODE_COUNT } grep_mode;

static const char *const MODE_NAMES[] = {"content", "files_with_matches", "count"};

/* File types the `type` argument knows, as globs on the file name. */
static const struct {
    const char *name, *glob;
} TYPES[] = {
    {"c", "*.{c,h}"},
    {"cpp", "*.{cpp,cc,cxx,c++,hpp,hh,hxx,h,inl}"},
    {"cuda", "*.{cu,cuh}"},
    {"py", "*.{py,pyi}"},
    {"h", "*.{h,hh,hpp,hxx,cuh}"},
    {"md", "*.{md,markdown}"},
    {"json", "*.json"},
};

/* What the agent asked for. */
typedef struct grep_req {
    grep_mode mode;
    bool line_numbers;
    size_t before, after;
    size_t head_limit; /* 0: no limit */
    bool multiline;
    bool has_glob, glob_on_path; /* a glob without '/' applies to the file name alone */
    globpat glob;
    bool has_type;
    globpat type;
} grep_req;

/* The state of one search. */
typedef struct grep_state {
    const grep_req *req;
    agent_regex rx; /* with the search's time budget */
    strbuf out;
    size_t out_lines;
    bool head_cut, printed_any, timed_out;
    size_t total; /* matching lines, all files */
    size_t searched, skipped;
    int regex_err;         /* the PCRE2 error that stopped the search, or 0 */
    size_t regex_err_line; /* where (0 when unknown) */
    char regex_err_file[WS_PATH_MAX + 16];
} grep_state;

/* A file to search or one that matched. */
typedef struct grep_file {
    char *rel;
    struct timespec mtime;
} grep_file;

typedef struct file_list {
    grep_file *v;
    size_t n, cap;
    bool oom;
} file_list;

/* ---- arguments ------------------------------------------------------------------------------- */

static size_t count_arg(const json_t *args, const char *key, size_t dflt, size_t max)
{
    const json_t *v = json_object_get(args, key);
    if (!json_is_number(v))
        return dflt;
    double d = json_number_value(v);
    return d <= 0 ? 0 : d >= (double)max ? max : (size_t)d;
}

static bool bool_arg(const json_t *args, const char *key, bool dflt)
{
    const json_t *v = json_object_get(args, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static grep_mode mode_arg(const json_t *args)
{
    const char *m = json_string_value(json_object_get(args, "output_mode"));
    for (int i = 0; m && i < 3; i++)
        if (strcmp(m, MODE_NAMES[i]) == 0)
            return (grep_mode)i;
    return MODE_FILES;
}

static void req_free(grep_req *r)
{
    if (r->has_glob)
        globpat_free(&r->glob);
    if (r->has_type)
        globpat_free(&r->type);
}

/* Fills r from args; on a bad argument fills res and returns -1. */
static int parse_req(const json_t *args, grep_req *r, tool_result *res)
{
    memset(r, 0, sizeof *r);
    r->mode = mode_arg(args);
    r->line_numbers = bool_arg(args, "-n", true);
    r->multiline = bool_arg(args, "multiline", false);
    size_t ctx = count_arg(args, "-C", 0, GREP_MAX_CONTEXT);
    r->before = count_arg(args, "-B", ctx, GREP_MAX_CONTEXT);
    r->after = count_arg(args, "-A", ctx, GREP_MAX_CONTEXT);
    r->head_limit = count_arg(args, "head_limit", 0, SIZE_MAX / 2);
    if (r->mode != MODE_CONTENT)
        r->before = r->after = 0;
    const char *glob = json_string_value(json_object_get(args, "glob"));
    if (glob && glob[0]) {
        if (globpat_compile(glob, &r->glob) != 0) {
            tool_fail(res, "INVALID_TOOL_CALL", NULL,
                      "glob expands to more than %d alternatives; simplify its {a,b} groups",
                      GLOBPAT_MAX_ALTERNATIVES);
            return -1;
        }
        r->has_glob = true;
        r->glob_on_path = strchr(glob, '/') != NULL;
    }
    const char *type = json_string_value(json_object_get(args, "type"));
    for (size_t i = 0; type && i < sizeof TYPES / sizeof TYPES[0]; i++) {
        if (strcmp(type, TYPES[i].name) == 0) {
            if (globpat_compile(TYPES[i].glob, &r->type) != 0) {
                tool_fail(res, "IO_ERROR", NULL, "out of memory");
                return -1;
            }
            r->has_type = true;
        }
    }
    return 0;
}

/* ---- regular expression ---------------------------------------------------------------------- */

static void state_free(grep_state *g)
{
    agent_regex_free(&g->rx);
    sb_free(&g->out);
}

/* Compiles the pattern (with agent_regex's limits); on failure fills res and returns -1. */
static int compile_pattern(const json_t *args, const grep_req *r, grep_state *g, tool_result *res)
{
    const json_t *pv = json_object_get(args, "pattern");
    size_t len = json_string_length(pv);
    if (!json_is_string(pv) || len > AGENT_REGEX_MAX_PATTERN) {
        tool_fail(res, "INVALID_TOOL_CALL", NULL, "pattern must be a string of at most %d bytes",
                  AGENT_REGEX_MAX_PATTERN);
        return -1;
    }
    unsigned flags = (bool_arg(args, "-i", false) ? AGENT_RE_CASELESS : 0) |
                     (r->multiline ? AGENT_RE_MULTILINE : 0);
    char msg[256];
    size_t off;
    int rc = agent_regex_compile(&g->rx, json_string_value(pv), len, flags, msg, sizeof msg, &off);
    if (rc == AGENT_REGEX_INVALID) {
        tool_fail(res, "INVALID_REGEX",
                  json_pack("{s:s,s:I}", "message", msg, "offset", (json_int_t)off),
                  "Invalid regular expression at offset %zu: %s. Grep uses PCRE2 (Perl) syntax; "
                  "escape literal characters such as ( [ { . * + ? with a backslash.",
                  off, msg);
        return -1;
    }
    if (rc != AGENT_REGEX_OK) {
        tool_fail(res, "IO_ERROR", NULL, "%s", msg);
        return -1;
    }
    return 0;
}

/* Matches subject[start..len): 1 on a match (offsets in *ms, *me), 0 on none, or a negative
 * PCRE2 error. The file was checked to be UTF-8 once, so PCRE2 need not check it again. */
static int match_at(grep_state *g, const char *subject, size_t len, size_t start, size_t *ms,
                    size_t *me)
{
    return agent_regex_match(&g->rx, subject, len, start, ms, me);
}

static bool past_deadline(grep_state *g)
{
    return agent_regex_expired(&g->rx);
}

/* ---- output ---------------------------------------------------------------------------------- */

/* Whether head_limit leaves room for one more output line. */
static bool room(grep_state *g)
{
    if (g->req->head_limit && g->out_lines >= g->req->head_limit) {
        g->head_cut = true;
        return false;
    }
    return true;
}

/* One line of content output: sep is ':' for a matching line, '-' for context. */
static void emit_line(grep_state *g, const char *shown, size_t lineno, char sep, const char *text,
                      size_t len)
{
    if (!room(g))
        return;
    sb_puts(&g->out, shown);
    sb_putc(&g->out, sep);
    if (g->req->line_numbers) {
        sb_printf(&g->out, "%zu", lineno);
        sb_putc(&g->out, sep);
    }
    fs_put_line(&g->out, text, len);
    sb_putc(&g->out, '\n');
    g->out_lines++;
    g->printed_any = true;
}

static void emit_separator(grep_state *g)
{
    if (!room(g))
        return;
    sb_puts(&g->out, "--\n");
    g->out_lines++;
}

/* ---- searching one file ---------------------------------------------------------------------- */

typedef struct line_range {
    size_t first, last; /* 1-based, inclusive */
} line_range;

typedef struct range_list {
    line_range *v;
    size_t n, cap;
} range_list;

static int range_add(range_list *l, size_t first, size_t last)
{
    if (l->n && first <= l->v[l->n - 1].last + 1) { /* overlapping or adjacent: merge */
        if (last > l->v[l->n - 1].last)
            l->v[l->n - 1].last = last;
        return 0;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        line_range *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].first = first;
    l->v[l->n++].last = last;
    return 0;
}

/* Newlines in text[from..to). */
static size_t newlines_between(const char *text, size_t from, size_t to)
{
    size_t n = 0;
    for (const char *p = text + from; (p = memchr(p, '\n', (size_t)(text + to - p))) != NULL; p++)
        n++;
    return n;
}

/* Multiline mode: matches run over the whole text and may span lines; collects the line
 * ranges they cover, in order. Returns 0 or a negative PCRE2 error. */
static int multiline_ranges(grep_state *g, const char *text, size_t len, range_list *out)
{
    size_t start = 0, line = 1, line_at = 0; /* line holds offset line_at */
    while (start <= len) {
        size_t ms, me;
        int rc = match_at(g, text, len, start, &ms, &me);
        if (rc <= 0)
            return rc;
        line += newlines_between(text, line_at, ms);
        line_at = ms;
        size_t last = me > ms ? line + newlines_between(text, ms, me - 1) : line;
        if (range_add(out, line, last) != 0)
            return PCRE2_ERROR_NOMEMORY;
        if (me > ms) {
            start = me;
        } else { /* an empty match: step over one character so the loop moves on */
            if (ms >= len)
                break;
            size_t step = 1;
            while (ms + step < len && ((unsigned char)text[ms + step] & 0xC0) == 0x80)
                step++;
            start = ms + step;
        }
        if (past_deadline(g)) {
            g->timed_out = true;
            break;
        }
    }
    return 0;
}

/* Streams a file's lines, deciding which match and printing them with their context. */
typedef struct file_scan {
    grep_state *g;
    const char *shown, *text;
    size_t len;
    range_list ranges; /* multiline mode */
    size_t next_range;
    size_t *ring_off, *ring_len; /* the last `before` lines, by line number modulo before */
    size_t last_printed, after_left;
    size_t count;
} file_scan;

/* Whether line lineno ([off, off+llen) of the text) matches; negative: a PCRE2 error. */
static int scan_line_matches(file_scan *s, size_t lineno, size_t off, size_t llen)
{
    if (s->g->req->multiline) {
        while (s->next_range < s->ranges.n && s->ranges.v[s->next_range].last < lineno)
            s->next_range++;
        return s->next_range < s->ranges.n && s->ranges.v[s->next_range].first <= lineno;
    }
    size_t ms, me;
    return match_at(s->g, s->text + off, llen, 0, &ms, &me);
}

/* Prints a matching line, preceded by its unprinted before-context (and "--" after a gap). */
static void print_match(file_scan *s, size_t lineno, size_t off, size_t llen)
{
    grep_state *g = s->g;
    size_t before = g->req->before;
    size_t from = lineno > before ? lineno - before : 1;
    if (from <= s->last_printed)
        from = s->last_printed + 1;
    bool context = g->req->before || g->req->after;
    if (context && g->printed_any && (s->last_printed == 0 || from > s->last_printed + 1))
        emit_separator(g);
    for (size_t k = from; k < lineno; k++)
        emit_line(g, s->shown, k, '-', s->text + s->ring_off[k % before], s->ring_len[k % before]);
    emit_line(g, s->shown, lineno, ':', s->text + off, llen);
    s->last_printed = lineno;
    s->after_left = g->req->after;
}

static void record_error(grep_state *g, int err, const char *shown, size_t lineno)
{
    g->regex_err = err;
    g->regex_err_line = lineno;
    snprintf(g->regex_err_file, sizeof g->regex_err_file, "%s", shown);
}

/* Searches one file's text; adds to the totals. Returns -1 when a regex limit stopped it. */
static int scan_text(file_scan *s)
{
    grep_state *g = s->g;
    bool content = g->req->mode == MODE_CONTENT;
    size_t before = content ? g->req->before : 0;
    if (g->req->multiline) {
        int rc = multiline_ranges(g, s->text, s->len, &s->ranges);
        if (rc < 0) {
            record_error(g, rc, s->shown, 0);
            return -1;
        }
    }
    size_t lineno = 0;
    for (size_t off = 0; off < s->len && !g->timed_out;) {
        lineno++;
        const char *nl = memchr(s->text + off, '\n', s->len - off);
        size_t end = nl ? (size_t)(nl - s->text) : s->len;
        int m = scan_line_matches(s, lineno, off, end - off);
        if (m < 0) {
            record_error(g, m, s->shown, lineno);
            return -1;
        }
        if (m) {
            s->count++;
            if (content)
                print_match(s, lineno, off, end - off);
        } else if (s->after_left) {
            emit_line(g, s->shown, lineno, '-', s->text + off, end - off);
            s->last_printed = lineno;
            s->after_left--;
        }
        if (before) {
            s->ring_off[lineno % before] = off;
            s->ring_len[lineno % before] = end - off;
        }
        off = nl ? end + 1 : s->len;
        if ((lineno & 15) == 0 && past_deadline(g))
            g->timed_out = true;
    }
    return 0;
}

/* Searches text; returns its number of matching lines, or -1 on a regex limit. */
static long search_text(grep_state *g, const char *shown, const char *text, size_t len)
{
    file_scan s = {.g = g, .shown = shown, .text = text, .len = len};
    size_t before = g->req->mode == MODE_CONTENT ? g->req->before : 0;
    if (before) {
        s.ring_off = calloc(before, sizeof *s.ring_off);
        s.ring_len = calloc(before, sizeof *s.ring_len);
    }
    int rc = (before && (!s.ring_off || !s.ring_len)) ? -1 : scan_text(&s);
    if (rc != 0 && !g->regex_err)
        record_error(g, PCRE2_ERROR_NOMEMORY, shown, 0);
    free(s.ring_off);
    free(s.ring_len);
    free(s.ranges.v);
    return rc == 0 ? (long)s.count : -1;
}

/* ---- which files ----------------------------------------------------------------------------- */

static int list_push(file_list *l, const char *rel, const struct stat *st)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        grep_file *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->oom = true;
            return 1;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].rel = strdup(rel);
    l->v[l->n].mtime = st->st_mtim;
    if (!l->v[l->n].rel) {
        l->oom = true;
        return 1;
    }
    l->n++;
    return 0;
}

static void list_free(file_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].rel);
    free(l->v);
}

typedef struct collect_ctx {
    const grep_req *req;
    file_list *files;
} collect_ctx;

static int collect_file(void *ctx, const char *rel, const char *sub, const struct stat *st)
{
    collect_ctx *c = ctx;
    const char *slash = strrchr(sub, '/');
    const char *name = slash ? slash + 1 : sub;
    if (c->req->has_glob && !globpat_match(&c->req->glob, c->req->glob_on_path ? sub : name))
        return 0;
    if (c->req->has_type && !globpat_match(&c->req->type, name))
        return 0;
    return list_push(c->files, rel, st);
}

static int by_rel(const void *a, const void *b)
{
    return strcmp(((const grep_file *)a)->rel, ((const grep_file *)b)->rel);
}

static int by_mtime_desc(const void *a, const void *b)
{
    const grep_file *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
    return strcmp(x->rel, y->rel);
}

/* The files to search: path itself when it is a file (filters do not apply to a file named
 * outright), else the files beneath it that pass glob and type, in path order. Returns 0 or a
 * ws_err about path. */
static int files_to_search(const tool_env *env, const fs_path *p, const grep_req *req,
                           file_list *files, bool *incomplete)
{
    int fd = ws_open(env->root_fd, p->rel, O_PATH, 0);
    if (fd < 0)
        return fd;
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? WS_OK : WS_E_IO;
    close(fd);
    if (rc != WS_OK)
        return rc;
    if (!S_ISDIR(st.st_mode))
        return list_push(files, p->rel, &st) == 0 ? WS_OK : WS_E_IO;
    collect_ctx c = {req, files};
    rc = fs_walk(env->root_fd, p->rel, collect_file, &c, incomplete);
    if (rc == WS_OK && files->oom)
        rc = WS_E_IO;
    if (files->n > 1)
        qsort(files->v, files->n, sizeof *files->v, by_rel);
    return rc;
}

/* ---- the tool -------------------------------------------------------------------------------- */

/* Searches every file; files that matched go to matched. Returns -1 on a regex limit. */
static int search_files(const tool_env *env, grep_state *g, const file_list *files,
                        file_list *matched)
{
    uint64_t cap = fs_limits(env)->max_file_bytes;
    for (size_t i = 0; i < files->n && !g->timed_out; i++) {
        fs_file f;
        if (fs_load(env->root_fd, files->v[i].rel, cap, &f) != WS_OK) {
            g->skipped++;
            continue;
        }
        if (text_looks_binary(f.data, f.len) || !text_is_utf8(f.data, f.len)) {
            g->skipped++;
            fs_file_free(&f);
            continue;
        }
        char shown[WS_PATH_MAX + 16];
        ws_display(files->v[i].rel, shown, sizeof shown);
        long n = search_text(g, shown, f.data, f.len);
        fs_file_free(&f);
        if (n < 0)
            return -1;
        g->searched++;
        g->total += (size_t)n;
        if (n == 0)
            continue;
        list_push(matched, files->v[i].rel, &f.st);
        if (g->req->mode == MODE_COUNT && room(g)) {
            sb_printf(&g->out, "%s:%ld\n", shown, n);
            g->out_lines++;
        }
        if ((i & 15) == 0 && past_deadline(g))
            g->timed_out = true;
    }
    return 0;
}

/* files_with_matches: the matching files, newest first, head_limit of them. */
static json_t *list_matched_files(grep_state *g, file_list *matched)
{
    if (matched->n > 1)
        qsort(matched->v, matched->n, sizeof *matched->v, by_mtime_desc);
    json_t *files = json_array();
    for (size_t i = 0; i < matched->n && room(g); i++) {
        char shown[WS_PATH_MAX + 16];
        ws_display(matched->v[i].rel, shown, sizeof shown);
        json_array_append_new(files, json_string(shown));
        sb_printf(&g->out, "%s\n", shown);
        g->out_lines++;
    }
    return files;
}

static void fail_regex_limit(grep_state *g, tool_result *res)
{
    char msg[256];
    agent_regex_error_text(g->regex_err, msg, sizeof msg);
    json_t *data = json_pack("{s:s,s:s}", "file_path", g->regex_err_file, "message", msg);
    if (g->regex_err_line)
        json_object_set_new(data, "line", json_integer((json_int_t)g->regex_err_line));
    char where[WS_PATH_MAX + 48];
    if (g->regex_err_line)
        snprintf(where, sizeof where, "%s line %zu", g->regex_err_file, g->regex_err_line);
    else
        snprintf(where, sizeof where, "%s", g->regex_err_file);
    tool_fail(res, "REGEX_LIMIT", data,
              "The pattern needs too much work to match (%s) in %s. Simplify it: avoid nested "
              "quantifiers such as (a+)+ and prefer specific character classes to .*.",
              msg, where);
}

static void report(const tool_env *env, grep_state *g, file_list *matched, bool incomplete,
                   tool_result *res)
{
    json_t *files = g->req->mode == MODE_FILES ? list_matched_files(g, matched) : NULL;
    bool capped;
    char *body = fs_cap_output(env, sb_steal(&g->out), &capped);
    bool truncated = capped || g->head_cut || g->timed_out || incomplete;
    strbuf sb = STRBUF_INIT;
    if (matched->n == 0)
        sb_puts(&sb, "No matches found\n");
    else if (g->req->mode == MODE_FILES)
        sb_printf(&sb, "Found %zu file%s\n", matched->n, matched->n == 1 ? "" : "s");
    sb_puts(&sb, body);
    free(body);
    if (g->head_cut)
        sb_printf(&sb, "(Stopped at head_limit=%zu; %zu matching line%s in %zu file%s in all.)\n",
                  g->req->head_limit, g->total, g->total == 1 ? "" : "s", matched->n,
                  matched->n == 1 ? "" : "s");
    if (g->timed_out)
        sb_puts(&sb,
                "(The search ran out of time; results are incomplete. Narrow path or glob.)\n");
    if (incomplete)
        sb_puts(&sb, "(The workspace is too large or deep to search completely.)\n");
    if (g->skipped && matched->n == 0)
        sb_printf(&sb, "(%zu binary, non-UTF-8 or oversized file%s skipped.)\n", g->skipped,
                  g->skipped == 1 ? "" : "s");
    json_t *data = json_pack("{s:s,s:I,s:b,s:I}", "mode", MODE_NAMES[g->req->mode], "count",
                             (json_int_t)g->total, "truncated", truncated, "files_searched",
                             (json_int_t)g->searched);
    if (files)
        json_object_set_new(data, "files", files);
    tool_ok_take(res, data, sb_steal(&sb));
}

static void grep_run(const tool_env *env, const json_t *args, tool_result *res)
{
    grep_req req;
    grep_state g = {.req = &req};
    fs_path p;
    file_list files = {0}, matched = {0};
    bool incomplete = false;
    if (parse_req(args, &req, res) != 0)
        goto out;
    if (compile_pattern(args, &req, &g, res) != 0 || fs_path_arg(args, "path", ".", &p, res) != 0)
        goto out;
    int rc = files_to_search(env, &p, &req, &files, &incomplete);
    if (rc != WS_OK) {
        fs_fail_path(res, rc, p.shown);
        goto out;
    }
    agent_regex_start_budget(&g.rx, GREP_TIME_BUDGET_MS);
    if (search_files(env, &g, &files, &matched) != 0)
        fail_regex_limit(&g, res);
    else
        report(env, &g, &matched, incomplete, res);
out:
    list_free(&files);
    list_free(&matched);
    state_free(&g);
    req_free(&req);
}

const tool_def tool_def_grep = {
    .name = "Grep",
    .description =
        "Searches file contents with a PCRE2 regular expression (ripgrep-like). output_mode "
        "\"files_with_matches\" (default) lists matching files, \"content\" shows matching lines "
        "(with -n, -A/-B/-C context), \"count\" counts matching lines per file; narrow with path, "
        "glob or type.",
    .schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"pattern\":{\"type\":\"string\",\"description\":\"PCRE2 regular expression to search "
        "for.\"},"
        "\"path\":{\"type\":\"string\",\"description\":\"File or directory to search: "
        "/workspace/... or relative (default /workspace).\"},"
        "\"glob\":{\"type\":\"string\",\"description\":\"Only files matching this glob, e.g. "
        "*.cu or *.{h,cpp} (matched on the file name, or on the relative path if it has a "
        "'/').\"},"
        "\"type\":{\"type\":\"string\",\"enum\":[\"c\",\"cpp\",\"cuda\",\"py\",\"h\",\"md\","
        "\"json\"],\"description\":\"Only files of this type.\"},"
        "\"output_mode\":{\"type\":\"string\",\"enum\":[\"content\",\"files_with_matches\","
        "\"count\"],\"description\":\"What to show (default files_with_matches).\"},"
        "\"-i\":{\"type\":\"boolean\",\"description\":\"Case-insensitive search.\"},"
        "\"-n\":{\"type\":\"boolean\",\"description\":\"Show line numbers in content mode "
        "(default true).\"},"
        "\"-A\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"Lines of context after "
        "each match (content mode).\"},"
        "\"-B\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"Lines of context before "
        "each match (content mode).\"},"
        "\"-C\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"Lines of context before "
        "and after each match (content mode).\"},"
        "\"head_limit\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"Show at most this "
        "many output lines or entries (0: no limit).\"},"
        "\"multiline\":{\"type\":\"boolean\",\"description\":\"Let matches span lines ('.' also "
        "matches newlines).\"}},"
        "\"required\":[\"pattern\"],\"additionalProperties\":false}",
    .run = grep_run,
};
