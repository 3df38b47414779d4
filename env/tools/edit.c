/* Edit and MultiEdit: exact string replacement in one workspace file, written atomically.
 * Both tools run the same pipeline (run_edits) over a list of edits; Edit is a list of one. */
#include "tools/edit.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/fs.h"
#include "tools/tool.h"
#include "util/strbuf.h"

/* Lines of context shown around the changed region, and the most lines a snippet shows. */
#define SNIPPET_CONTEXT 3
#define SNIPPET_MAX_LINES 40
/* Room for the "edits[N]: " prefix that names the failing edit of a MultiEdit. */
#define WHERE_MAX 48

/* An edit whose result would pass the file cap. Kept out of edit.h's edit_err on purpose: the tools
 * report it as FILE_TOO_LARGE, the code of the same check on the final text. */
#define EDIT_E_TOO_LARGE (-100)

const char *edit_err_code(int err)
{
    switch (err) {
    case EDIT_E_TOO_LARGE:
        return "FILE_TOO_LARGE";
    case EDIT_E_EMPTY:
        return "INVALID_TOOL_CALL";
    case EDIT_E_NOOP:
        return "EDIT_NOOP";
    case EDIT_E_NO_MATCH:
        return "EDIT_NO_MATCH";
    case EDIT_E_NOT_UNIQUE:
        return "EDIT_NOT_UNIQUE";
    default:
        return "IO_ERROR";
    }
}

/* Non-overlapping occurrences of needle in text, left to right; counting stops at limit. */
static size_t count_occurrences(const char *text, size_t len, const char *needle, size_t nlen,
                                size_t limit)
{
    size_t n = 0;
    const char *p = text, *end = text + len;
    while (n < limit && (p = memmem(p, (size_t)(end - p), needle, nlen)) != NULL) {
        n++;
        p += nlen;
    }
    return n;
}

/* Length of a text of len bytes once count occurrences of olen bytes become nlen bytes each;
 * SIZE_MAX when that does not fit a size_t. */
static size_t size_after(size_t len, size_t count, size_t olen, size_t nlen)
{
    if (nlen <= olen)
        return len - count * (olen - nlen); /* count * olen <= len: they lie within the text */
    size_t growth = nlen - olen;
    return count > (SIZE_MAX - len) / growth ? SIZE_MAX : len + count * growth;
}

/* How many occurrences replace_all may count before its result must be over max_size: those that
 * fit, plus one that shows it overflows. Stopping there bounds the work a refused edit costs. */
static size_t count_limit(size_t len, size_t olen, size_t nlen, size_t max_size)
{
    if (nlen <= olen)
        return SIZE_MAX; /* the text does not grow: count them all */
    if (len > max_size)
        return 1;
    return (max_size - len) / (nlen - olen) + 1;
}

/* Builds text with the first `count` occurrences of old replaced by new: total bytes, as
 * size_after measured them. */
static char *replace_occurrences(const char *text, size_t len, const char *old_str, size_t olen,
                                 const char *new_str, size_t nlen, size_t count, size_t total)
{
    char *out = malloc(total + 1);
    if (!out)
        return NULL;
    const char *src = text, *end = text + len;
    char *dst = out;
    for (size_t i = 0; i < count; i++) {
        const char *hit = memmem(src, (size_t)(end - src), old_str, olen);
        memcpy(dst, src, (size_t)(hit - src));
        dst += hit - src;
        memcpy(dst, new_str, nlen);
        dst += nlen;
        src = hit + olen;
    }
    memcpy(dst, src, (size_t)(end - src));
    dst += end - src;
    *dst = '\0';
    return out;
}

/* edit_apply with a cap on the result: one longer than max_size bytes (at most SIZE_MAX - 1) is
 * refused with EDIT_E_TOO_LARGE before any of it is built; *out_len then gets its length, or a
 * lower bound of it when *size_cut says the count stopped early. The checks before it keep their
 * order, so a legal edit sees no difference. */
static int apply_capped(const char *text, size_t len, const char *old_str, const char *new_str,
                        bool all, size_t max_size, char **out, size_t *out_len, size_t *count,
                        bool *size_cut)
{
    *size_cut = false;
    *out = NULL;
    *out_len = 0;
    *count = 0;
    if (!old_str || !new_str || old_str[0] == '\0')
        return EDIT_E_EMPTY;
    if (strcmp(old_str, new_str) == 0)
        return EDIT_E_NOOP;
    size_t olen = strlen(old_str), nlen = strlen(new_str);
    /* A single replacement needs every match counted, for the "occurs N times" error. */
    size_t limit = all ? count_limit(len, olen, nlen, max_size) : SIZE_MAX;
    size_t n = text ? count_occurrences(text, len, old_str, olen, limit) : 0;
    *count = n;
    if (n == 0)
        return EDIT_E_NO_MATCH;
    if (n > 1 && !all)
        return EDIT_E_NOT_UNIQUE;
    size_t total = size_after(len, n, olen, nlen);
    if (total > max_size) {
        *out_len = total;
        *size_cut = n == limit;
        return EDIT_E_TOO_LARGE;
    }
    *out = replace_occurrences(text, len, old_str, olen, new_str, nlen, n, total);
    if (!*out)
        return EDIT_E_NOMEM;
    *out_len = total;
    return EDIT_OK;
}

int edit_apply(const char *text, size_t len, const char *old_str, const char *new_str, bool all,
               char **out, size_t *out_len, size_t *count)
{
    /* No cap but the one that keeps total + 1 (the NUL) a size_t: out of memory, as ever. */
    bool size_cut;
    int rc = apply_capped(text, len, old_str, new_str, all, SIZE_MAX - 1, out, out_len, count,
                          &size_cut);
    if (rc == EDIT_E_TOO_LARGE) {
        *out_len = 0;
        rc = EDIT_E_NOMEM;
    }
    return rc;
}

/* ---- the tools ------------------------------------------------------------------------------- */

typedef struct edit_spec {
    const char *old_str;
    const char *new_str;
    bool all;
} edit_spec;

/* Reads one edit's fields from obj. JSON strings may hold U+0000, which C strings cannot carry
 * (and a text file never contains), so they are refused rather than silently cut. */
static int parse_edit(const json_t *obj, edit_spec *e, const char **bad_field)
{
    const json_t *o = json_object_get(obj, "old_string"), *n = json_object_get(obj, "new_string");
    e->old_str = json_string_value(o);
    e->new_str = json_string_value(n);
    e->all = json_is_true(json_object_get(obj, "replace_all"));
    if (!e->old_str || strlen(e->old_str) != json_string_length(o)) {
        *bad_field = "old_string";
        return -1;
    }
    if (!e->new_str || strlen(e->new_str) != json_string_length(n)) {
        *bad_field = "new_string";
        return -1;
    }
    return 0;
}

/* The data of a failed edit, and in where (WHERE_MAX bytes) the prefix that names the edit of a
 * MultiEdit ("" for Edit and for the final text). */
static json_t *failure_data(const fs_path *p, bool multi, size_t index, char *where)
{
    json_t *data = json_pack("{s:s}", "file_path", p->shown);
    where[0] = '\0';
    if (multi) {
        json_object_set_new(data, "edit_index", json_integer((json_int_t)index));
        snprintf(where, WHERE_MAX, "edits[%zu]: ", index);
    }
    return data;
}

/* FILE_TOO_LARGE: the edited text would be size bytes (at least that many, when at_least), over
 * the cap. The same words for an edit refused midway and for the final text. */
static void fail_too_large(tool_result *res, const fs_path *p, bool multi, size_t index,
                           size_t size, bool at_least, uint64_t cap)
{
    char where[WHERE_MAX];
    json_t *data = failure_data(p, multi, index, where);
    json_object_set_new(data, "size", json_integer((json_int_t)size));
    json_object_set_new(data, "max_bytes", json_integer((json_int_t)cap));
    tool_fail(res, "FILE_TOO_LARGE", data,
              "%sThe edited %s would be %s%zu bytes, over the %llu-byte file limit.", where,
              p->shown, at_least ? "at least " : "", size, (unsigned long long)cap);
}

/* The message for a failed edit, with the advice the agent needs to fix its call. */
static void fail_edit(tool_result *res, int err, const fs_path *p, bool multi, size_t index,
                      size_t matches)
{
    char where[WHERE_MAX];
    json_t *data = failure_data(p, multi, index, where);
    const char *code = edit_err_code(err);
    switch (err) {
    case EDIT_E_EMPTY:
        tool_fail(res, code, data,
                  "%sold_string must not be empty; to create a file or replace it whole, use "
                  "Write.",
                  where);
        break;
    case EDIT_E_NOOP:
        tool_fail(res, code, data, "%sold_string and new_string are identical: nothing to change.",
                  where);
        break;
    case EDIT_E_NO_MATCH:
        tool_fail(res, code, data,
                  "%sold_string was not found in %s. It must match the file exactly, including "
                  "whitespace and indentation; Read the file to copy the text.",
                  where, p->shown);
        break;
    case EDIT_E_NOT_UNIQUE:
        json_object_set_new(data, "matches", json_integer((json_int_t)matches));
        tool_fail(res, code, data,
                  "%sold_string occurs %zu times in %s. Include more surrounding lines to make it "
                  "unique, or set replace_all to true to change every occurrence.",
                  where, matches, p->shown);
        break;
    default:
        tool_fail(res, code, data, "%sout of memory while editing %s.", where, p->shown);
        break;
    }
}

/* Applies every edit, in order, to the text in *text (replaced by the result). Every
 * intermediate text is held to the file cap (0: none), not just the last: a few edits that each
 * double the text would otherwise take any amount of memory before the final check. On failure
 * fills res and returns -1, leaving *text as it was. */
static int apply_all(const edit_spec *edits, size_t n, bool multi, const fs_path *p, uint64_t cap,
                     fs_file *text, size_t *replacements, tool_result *res)
{
    size_t max_size = cap && cap < SIZE_MAX - 1 ? (size_t)cap : SIZE_MAX - 1;
    char *cur = text->data;
    size_t cur_len = text->len;
    *replacements = 0;
    for (size_t i = 0; i < n; i++) {
        char *next;
        size_t next_len, count;
        bool size_cut;
        int rc = apply_capped(cur, cur_len, edits[i].old_str, edits[i].new_str, edits[i].all,
                              max_size, &next, &next_len, &count, &size_cut);
        if (rc != EDIT_OK) {
            if (cur != text->data)
                free(cur);
            if (rc == EDIT_E_TOO_LARGE && cap)
                fail_too_large(res, p, multi, i, next_len, size_cut, cap);
            else /* without a cap, only a size_t bounds the text: out of memory, as ever */
                fail_edit(res, rc == EDIT_E_TOO_LARGE ? EDIT_E_NOMEM : rc, p, multi, i, count);
            return -1;
        }
        if (cur != text->data)
            free(cur);
        cur = next;
        cur_len = next_len;
        *replacements += count;
    }
    free(text->data);
    text->data = cur;
    text->len = cur_len;
    return 0;
}

/* Line (1-based) holding byte off of text. */
static size_t line_of(const char *text, size_t off)
{
    size_t line = 1;
    for (const char *p = text; (p = memchr(p, '\n', off - (size_t)(p - text))) != NULL; p++)
        line++;
    return line;
}

/* A `cat -n` view of the part of the new text that differs from the old one. */
static void append_snippet(strbuf *sb, const char *before, size_t blen, const char *after,
                           size_t alen)
{
    size_t common = blen < alen ? blen : alen;
    size_t prefix = 0;
    while (prefix < common && before[prefix] == after[prefix])
        prefix++;
    size_t suffix = 0;
    while (suffix < common - prefix && before[blen - 1 - suffix] == after[alen - 1 - suffix])
        suffix++;
    size_t change_end = alen - suffix; /* the changed bytes of after: [prefix, change_end) */
    size_t first = line_of(after, prefix);
    size_t last = change_end > prefix ? line_of(after, change_end - 1) : first;
    size_t from = first > SNIPPET_CONTEXT ? first - SNIPPET_CONTEXT : 1;
    size_t want = last + SNIPPET_CONTEXT - from + 1;
    size_t shown =
        fs_cat_n(sb, after, alen, from, want < SNIPPET_MAX_LINES ? want : SNIPPET_MAX_LINES, NULL);
    if (want > SNIPPET_MAX_LINES && shown == SNIPPET_MAX_LINES)
        sb_puts(sb, "     ...\n");
}

/* Writes the edited text back; on failure fills res and returns -1. */
static int store(const tool_env *env, const fs_path *p, const char *target, const struct stat *st,
                 const fs_file *edited, tool_result *res)
{
    uint64_t cap = fs_limits(env)->max_file_bytes;
    if (cap && edited->len > cap) { /* apply_all refuses this first; kept as the last word */
        fail_too_large(res, p, false, 0, edited->len, false, cap);
        return -1;
    }
    if (fs_check_quota(env, (uint64_t)st->st_size, edited->len, p->shown, res) != 0)
        return -1;
    int rc = fs_write_atomic(env->root_fd, target, edited->data, edited->len, st->st_mode & 07777,
                             env->owner);
    if (rc == WS_E_IO) {
        tool_fail(res, "IO_ERROR", json_pack("{s:s}", "file_path", p->shown),
                  "Could not write %s: %s", p->shown, strerror(errno));
        return -1;
    }
    if (rc != WS_OK) {
        fs_fail_path(res, rc, p->shown);
        return -1;
    }
    fs_usage_changed(env, (uint64_t)st->st_size, edited->len);
    return 0;
}

/* Resolves and loads the file to edit (following a symlink to its real file); -1 on failure. */
static int load_for_edit(const tool_env *env, const fs_path *p, char *target, struct stat *st,
                         fs_file *f, tool_result *res)
{
    bool exists;
    int rc = fs_resolve_target(env->root_fd, p->rel, target, st, &exists);
    if (rc == WS_OK && !exists)
        rc = WS_E_NOENT;
    if (rc == WS_OK && ws_is_fixed(target))
        rc = WS_E_READONLY;
    if (rc != WS_OK) {
        fs_fail_path(res, rc, p->shown);
        return -1;
    }
    fs_path real = *p;
    snprintf(real.rel, sizeof real.rel, "%s", target);
    return fs_load_text(env, &real, f, res);
}

static void run_edits(const tool_env *env, const json_t *args, const edit_spec *edits, size_t n,
                      bool multi, tool_result *res)
{
    fs_path p;
    if (fs_path_arg(args, "file_path", NULL, &p, res) != 0)
        return;
    char target[WS_PATH_MAX];
    struct stat st;
    fs_file f;
    if (load_for_edit(env, &p, target, &st, &f, res) != 0)
        return;
    char *before = malloc(f.len + 1);
    size_t before_len = f.len;
    size_t replacements;
    if (!before) {
        tool_fail(res, "IO_ERROR", NULL, "out of memory");
        fs_file_free(&f);
        return;
    }
    memcpy(before, f.data, f.len + 1);
    uint64_t cap = fs_limits(env)->max_file_bytes;
    if (apply_all(edits, n, multi, &p, cap, &f, &replacements, res) == 0 &&
        store(env, &p, target, &st, &f, res) == 0) {
        strbuf sb = STRBUF_INIT;
        sb_printf(&sb, "Edited %s: %zu replacement%s", p.shown, replacements,
                  replacements == 1 ? "" : "s");
        if (multi)
            sb_printf(&sb, " from %zu edit%s", n, n == 1 ? "" : "s");
        sb_puts(&sb, ". The changed part now reads:\n");
        append_snippet(&sb, before, before_len, f.data, f.len);
        bool truncated;
        char *content = fs_cap_output(env, sb_steal(&sb), &truncated);
        tool_ok_take(
            res,
            json_pack("{s:s,s:I}", "file_path", p.shown, "replacements", (json_int_t)replacements),
            content);
    }
    free(before);
    fs_file_free(&f);
}

static void fail_nul(tool_result *res, const char *field, bool multi, size_t index)
{
    json_t *data = multi ? json_pack("{s:I}", "edit_index", (json_int_t)index) : NULL;
    tool_fail(res, "INVALID_TOOL_CALL", data, "%s must not contain NUL characters", field);
}

static void edit_run(const tool_env *env, const json_t *args, tool_result *res)
{
    edit_spec e;
    const char *bad;
    if (parse_edit(args, &e, &bad) != 0) {
        fail_nul(res, bad, false, 0);
        return;
    }
    run_edits(env, args, &e, 1, false, res);
}

static void multiedit_run(const tool_env *env, const json_t *args, tool_result *res)
{
    const json_t *list = json_object_get(args, "edits");
    size_t n = json_array_size(list);
    if (n == 0) {
        tool_fail(res, "INVALID_TOOL_CALL", NULL, "edits must hold at least one edit");
        return;
    }
    edit_spec *edits = calloc(n, sizeof *edits);
    if (!edits) {
        tool_fail(res, "IO_ERROR", NULL, "out of memory");
        return;
    }
    const char *bad;
    for (size_t i = 0; i < n; i++) {
        if (parse_edit(json_array_get(list, i), &edits[i], &bad) != 0) {
            fail_nul(res, bad, true, i);
            free(edits);
            return;
        }
    }
    run_edits(env, args, edits, n, true, res);
    free(edits);
}

#define EDIT_FIELDS_SCHEMA                                                                         \
    "\"old_string\":{\"type\":\"string\",\"description\":\"The exact text to replace, "            \
    "including whitespace and indentation; must occur exactly once unless replace_all is "         \
    "true.\"},"                                                                                    \
    "\"new_string\":{\"type\":\"string\",\"description\":\"The text to put in its place (must "    \
    "differ from old_string).\"},"                                                                 \
    "\"replace_all\":{\"type\":\"boolean\",\"description\":\"Replace every occurrence of "         \
    "old_string (default false).\"}"

const tool_def tool_def_edit = {
    .name = "Edit",
    .description =
        "Replaces an exact string in a text file with another; old_string must match the file "
        "exactly and be unique unless replace_all is true. Read the file first; paths are "
        "/workspace/... or relative to it.",
    .schema = "{\"type\":\"object\",\"properties\":{"
              "\"file_path\":{\"type\":\"string\",\"description\":\"The file to edit: "
              "/workspace/... or a path relative to /workspace.\"}," EDIT_FIELDS_SCHEMA "},"
              "\"required\":[\"file_path\",\"old_string\",\"new_string\"],"
              "\"additionalProperties\":false}",
    .run = edit_run,
};

const tool_def tool_def_multiedit = {
    .name = "MultiEdit",
    .description =
        "Applies several exact-string replacements to one file, in order, each to the result of "
        "the previous one; if any edit fails, none is applied. Each edit follows the rules of "
        "Edit.",
    .schema = "{\"type\":\"object\",\"properties\":{"
              "\"file_path\":{\"type\":\"string\",\"description\":\"The file to edit: "
              "/workspace/... or a path relative to /workspace.\"},"
              "\"edits\":{\"type\":\"array\",\"minItems\":1,\"description\":\"The edits, applied "
              "in order.\",\"items\":{\"type\":\"object\",\"properties\":{" EDIT_FIELDS_SCHEMA "},"
              "\"required\":[\"old_string\",\"new_string\"],\"additionalProperties\":false}}},"
              "\"required\":[\"file_path\",\"edits\"],\"additionalProperties\":false}",
    .run = multiedit_run,
};
