/* Write: creates or replaces a workspace file with the given content, atomically. */
#include <errno.h>
#include <string.h>

#include "tools/fs.h"
#include "tools/tool.h"

#define NEW_FILE_MODE 0644

static void write_run(const tool_env *env, const json_t *args, tool_result *res)
{
    fs_path p;
    if (fs_path_arg(args, "file_path", NULL, &p, res) != 0)
        return;
    const json_t *c = json_object_get(args, "content");
    const char *content = json_string_value(c);
    size_t len = json_string_length(c);
    if (!content) {
        tool_fail(res, "INVALID_TOOL_CALL", NULL, "argument 'content' must be a string");
        return;
    }
    char target[WS_PATH_MAX];
    struct stat st;
    bool exists;
    int rc = fs_resolve_target(env->root_fd, p.rel, target, &st, &exists);
    if (rc == WS_OK && ws_is_fixed(target))
        rc = WS_E_READONLY;
    if (rc != WS_OK) {
        fs_fail_path(res, rc, p.shown);
        return;
    }
    uint64_t cap = fs_limits(env)->max_file_bytes;
    if (cap && len > cap) {
        tool_fail(res, "FILE_TOO_LARGE",
                  json_pack("{s:s,s:I,s:I}", "file_path", p.shown, "size", (json_int_t)len,
                            "max_bytes", (json_int_t)cap),
                  "The content is %zu bytes, over the %llu-byte limit for one file.", len,
                  (unsigned long long)cap);
        return;
    }
    uint64_t old_size = exists && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    if (fs_check_quota(env, old_size, len, p.shown, res) != 0)
        return;
    /* An existing file keeps its permissions (a script stays executable). */
    mode_t mode = exists ? (st.st_mode & 07777) : NEW_FILE_MODE;
    rc = fs_write_atomic(env->root_fd, target, content, len, mode, env->owner);
    if (rc == WS_E_IO) {
        tool_fail(res, "IO_ERROR", json_pack("{s:s}", "file_path", p.shown),
                  "Could not write %s: %s", p.shown, strerror(errno));
        return;
    }
    if (rc != WS_OK) {
        fs_fail_path(res, rc, p.shown);
        return;
    }
    fs_usage_changed(env, old_size, len);
    tool_ok(res,
            json_pack("{s:s,s:I,s:b}", "file_path", p.shown, "bytes", (json_int_t)len, "created",
                      !exists),
            "%s %s (%zu bytes).", exists ? "Overwrote" : "Created", p.shown, len);
}

const tool_def tool_def_write = {
    .name = "Write",
    .description =
        "Writes a file of the workspace with exactly the given content, creating it (and its "
        "directories) or replacing it whole. Prefer Edit for changing part of an existing file; "
        "paths are /workspace/... or relative to it.",
    .schema = "{\"type\":\"object\",\"properties\":{"
              "\"file_path\":{\"type\":\"string\",\"description\":\"The file to write: "
              "/workspace/... or a path relative to /workspace.\"},"
              "\"content\":{\"type\":\"string\",\"description\":\"The complete new content of "
              "the file.\"}},"
              "\"required\":[\"file_path\",\"content\"],\"additionalProperties\":false}",
    .run = write_run,
};
