/* Read: a text file of the workspace, numbered like `cat -n`, a window of lines at a time. */
#include <stdlib.h>
#include <string.h>

#include "tools/fs.h"
#include "tools/tool.h"
#include "util/strbuf.h"

#define READ_DEFAULT_LIMIT 2000

/* An optional integer argument (>= 1 by the schema); dflt when absent. Integral reals such as
 * 3.0 pass the schema check, so numbers are read as numbers. */
static size_t line_arg(const json_t *args, const char *key, size_t dflt)
{
    const json_t *v = json_object_get(args, key);
    if (!json_is_number(v))
        return dflt;
    double d = json_number_value(v);
    if (d < 1)
        return 1;
    if (d > 1e15) /* far past any file we would load */
        return (size_t)1e15;
    return (size_t)d;
}

static void read_run(const tool_env *env, const json_t *args, tool_result *res)
{
    fs_path p;
    if (fs_path_arg(args, "file_path", NULL, &p, res) != 0)
        return;
    fs_file f;
    if (fs_load_text(env, &p, &f, res) != 0)
        return;
    size_t start = line_arg(args, "offset", 1);
    size_t limit = line_arg(args, "limit", READ_DEFAULT_LIMIT);
    size_t total = fs_count_lines(f.data, f.len);

    strbuf sb = STRBUF_INIT;
    bool cut_line = false;
    size_t returned = 0;
    if (total == 0)
        sb_printf(&sb, "(%s exists but is empty.)\n", p.shown);
    else if (start > total)
        sb_printf(&sb, "(%s has only %zu line%s; offset %zu is past its end.)\n", p.shown, total,
                  total == 1 ? "" : "s", start);
    else
        returned = fs_cat_n(&sb, f.data, f.len, start, limit, &cut_line);

    bool capped;
    char *listing = fs_cap_output(env, sb_steal(&sb), &capped);
    size_t end = returned ? start + returned - 1 : 0;
    bool more_lines = returned && end < total;
    /* Notes go after the cap so the agent always learns how to continue. */
    sb_puts(&sb, listing);
    free(listing);
    if (cut_line)
        sb_printf(&sb, "(Lines longer than %d characters were cut.)\n", FS_LINE_MAX_CHARS);
    if (more_lines)
        sb_printf(&sb, "(Showing lines %zu-%zu of %zu; use offset=%zu to read on.)\n", start, end,
                  total, end + 1);
    if (capped)
        sb_puts(&sb, "(Output was too long and its middle was omitted; read fewer lines at a "
                     "time with offset and limit.)\n");
    json_t *data = json_pack("{s:s,s:I,s:I,s:I,s:b}", "file_path", p.shown, "total_lines",
                             (json_int_t)total, "start_line", (json_int_t)start, "lines_returned",
                             (json_int_t)returned, "truncated", cut_line || more_lines || capped);
    tool_ok_take(res, data, sb_steal(&sb));
    fs_file_free(&f);
}

const tool_def tool_def_read = {
    .name = "Read",
    .description =
        "Reads a text file of the workspace and shows it with line numbers (like cat -n), up to "
        "2000 lines from `offset`; use offset and limit to page through long files. Paths are "
        "/workspace/... or relative to it.",
    .schema = "{\"type\":\"object\",\"properties\":{"
              "\"file_path\":{\"type\":\"string\",\"description\":\"The file to read: "
              "/workspace/... or a path relative to /workspace.\"},"
              "\"offset\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"First line to "
              "show, 1-based (default 1).\"},"
              "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"How many lines to "
              "show (default 2000).\"}},"
              "\"required\":[\"file_path\"],\"additionalProperties\":false}",
    .run = read_run,
};
