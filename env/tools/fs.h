/* fs: what the file tools (Read, Write, Edit, MultiEdit, Glob, Grep) share: resolving a path
 * argument, loading a file, the atomic replace, the quota check, the `cat -n` formatter and the
 * confined directory walk. Every workspace access goes through wspath. */
#ifndef KGYM_TOOLS_FS_H
#define KGYM_TOOLS_FS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "tools/tool.h"
#include "util/strbuf.h"
#include "wspath.h"

/* Lines longer than this many characters are cut in tool output. */
#define FS_LINE_MAX_CHARS 2000

/* fs_load codes beyond the ws_err ones. */
enum {
    FS_E_TOO_LARGE = -100,   /* larger than the byte cap */
    FS_E_NOT_REGULAR = -101, /* a FIFO, socket or device: never opened for reading */
};

/* A path argument resolved into the workspace. */
typedef struct fs_path {
    char rel[WS_PATH_MAX];        /* normalised, relative to the root ("." for the root) */
    char shown[WS_PATH_MAX + 16]; /* as the agent sees it: /workspace/... */
} fs_path;

/* A file's bytes, NUL-terminated (data[len] == 0). */
typedef struct fs_file {
    char *data;
    size_t len;
    struct stat st;
} fs_file;

/* The episode's limits; a tool_env without any gets conservative defaults. A limit of 0 means
 * "no limit" for max_file_bytes, disk_quota_bytes and max_output_chars. */
const tool_limits *fs_limits(const tool_env *env);

/* Reads the string argument key (dflt when absent; dflt NULL means required) and normalises
 * it into p. On failure fills res with the in-band error and returns -1. */
int fs_path_arg(const json_t *args, const char *key, const char *dflt, fs_path *p,
                tool_result *res);

/* Fills res with the in-band error of a ws_err (or an FS_E_ code) about the path shown. */
void fs_fail_path(tool_result *res, int err, const char *shown);

/* Loads the regular file rel (symlinks followed beneath the root). max_bytes 0 = no cap.
 * Returns 0, a ws_err, FS_E_TOO_LARGE or FS_E_NOT_REGULAR. */
int fs_load(int root_fd, const char *rel, uint64_t max_bytes, fs_file *f);
void fs_file_free(fs_file *f);

/* fs_load plus the text checks Read and Edit share: binary -> BINARY_FILE, invalid UTF-8 ->
 * NOT_UTF8, too large -> FILE_TOO_LARGE. On failure fills res and returns -1. */
int fs_load_text(const tool_env *env, const fs_path *p, fs_file *f, tool_result *res);

/* What a write to rel really replaces: the file itself, or the file a symlink at rel leads to
 * (still beneath the root). target gets that file's canonical relative path (WS_PATH_MAX bytes,
 * symlinked directories resolved, so ws_is_fixed can judge it); *exists and *st describe it.
 * Returns 0 or a ws_err (a directory is WS_E_ISDIR). */
int fs_resolve_target(int root_fd, const char *rel, char *target, struct stat *st, bool *exists);

/* The workspace's disk usage: from the episode's cache when nothing but the file tools wrote
 * since it was measured (no background job running), else by walking the tree, which refreshes
 * the cache. Returns WS_OK or WS_E_IO. */
int fs_disk_usage(const tool_env *env, unsigned long long *bytes);
/* Records in the cache that a file tool replaced old_size bytes by new_size. */
void fs_usage_changed(const tool_env *env, uint64_t old_size, uint64_t new_size);
/* Forgets the cached usage: something else (Bash, a job) wrote the workspace. */
void fs_usage_forget(const tool_env *env);

/* Checks that replacing a file of old_size bytes by new_size bytes keeps the workspace within
 * its disk quota. On failure fills res (DISK_QUOTA_EXCEEDED or IO_ERROR) and returns -1. */
int fs_check_quota(const tool_env *env, uint64_t old_size, uint64_t new_size, const char *shown,
                   tool_result *res);

/* Replaces (or creates) target, a resolved path from fs_resolve_target, with len bytes: they go
 * to a temporary file in the same directory that is then renamed over the target, so the file
 * is never seen half-written. mode is the new file's permission bits. Creates missing parent
 * directories. Refuses (WS_E_READONLY) when the directory really written to makes the target a
 * fixed file. Returns 0 or a ws_err; errno tells more about a WS_E_IO. */
int fs_write_atomic(int root_fd, const char *target, const char *data, size_t len, mode_t mode,
                    const ws_owner *owner);

/* Number of lines of text (a last line without '\n' counts; "" has none). */
size_t fs_count_lines(const char *text, size_t len);

/* Offset of the start of line `line` (1-based); len when the text has fewer lines. */
size_t fs_line_offset(const char *text, size_t len, size_t line);

/* Appends at most max_lines lines of text, starting at line `first` (1-based), in `cat -n`
 * format ("%6zu\t<line>\n"); lines over FS_LINE_MAX_CHARS characters are cut and marked.
 * Returns the number of lines appended; *cut_any tells whether a line was cut. */
size_t fs_cat_n(strbuf *sb, const char *text, size_t len, size_t first, size_t max_lines,
                bool *cut_any);

/* Appends one line (len bytes of valid UTF-8, no '\n'), cut and marked when longer than
 * FS_LINE_MAX_CHARS characters. Returns whether it was cut. */
bool fs_put_line(strbuf *sb, const char *line, size_t len);

/* Caps content to the episode's max_output_chars (head and tail kept). Takes ownership of
 * content; returns the capped text (content itself when nothing was cut). */
char *fs_cap_output(const tool_env *env, char *content, bool *truncated);

/* ---- walking ---------------------------------------------------------------------------- */

/* Called for each regular file beneath the walk's base: rel is its path from the root, sub its
 * path from the base, st its stat (of the file a symlink leads to, for symlinked files). A
 * non-zero return stops the walk. */
typedef int (*fs_walk_fn)(void *ctx, const char *rel, const char *sub, const struct stat *st);

/* Visits the regular files beneath the directory base_rel (normalised). Symlinks to files are
 * visited when they resolve beneath the root; symlinked directories are never entered. Gives
 * up quietly past FS_WALK_MAX_DEPTH levels or FS_WALK_MAX_ENTRIES entries (*incomplete set).
 * Returns 0 or a ws_err about base_rel. */
#define FS_WALK_MAX_DEPTH 64
#define FS_WALK_MAX_ENTRIES 200000
int fs_walk(int root_fd, const char *base_rel, fs_walk_fn fn, void *ctx, bool *incomplete);

/* ---- search budgets ---------------------------------------------------------------------- */

/* What one Glob may spend: the time budget Grep gives itself (GREP_TIME_BUDGET_MS), and a cap
 * on the files it matches against the pattern. A pattern of many alternatives costs about 0.1 ms
 * a file, so a tree of many files could otherwise hold a server thread for seconds. Past either,
 * Glob lists what it found and says the listing was cut. */
#define FS_GLOB_TIME_BUDGET_MS 15000
#define FS_GLOB_MAX_FILES 20000

typedef struct fs_search_budget {
    long time_ms;     /* for the whole search */
    size_t max_files; /* files matched against the pattern */
} fs_search_budget;

/* Glob's budget: {FS_GLOB_TIME_BUDGET_MS, FS_GLOB_MAX_FILES}. The server never changes it; it is
 * a variable only so tests can hit the limits without a tree of 20,000 files. */
extern fs_search_budget fs_glob_budget;

/* A deadline ms milliseconds from now, on the monotonic clock. */
struct timespec fs_deadline_in(long ms);
/* Whether the deadline has passed. */
bool fs_deadline_passed(const struct timespec *deadline);

#endif
