/* wspath: the one place where a path the agent (or an HTTP client) names is turned into a file
 * inside an episode's workspace. Everything that touches workspace files goes through here.
 *
 * Rules (DESIGN.md §3.1, issue 2):
 *  - the workspace is shown to the agent as "/workspace"; "/workspace/x" and "x" name the same
 * file;
 *  - any other absolute path, a ".." that climbs above the root, an empty path, an embedded NUL
 *    byte or invalid UTF-8 are refused;
 *  - symlinks are resolved by the kernel beneath the workspace root (openat2 RESOLVE_BENEATH):
 *    one that leads outside is refused, never followed. */
#ifndef KGYM_WSPATH_H
#define KGYM_WSPATH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define WS_VIRTUAL_ROOT "/workspace"
#define WS_PATH_MAX 1024

/* Negative return codes of the wspath functions. Each maps to one in-band error code. */
enum ws_err {
    WS_OK = 0,
    WS_E_INVALID = -1,  /* "INVALID_PATH": empty, NUL byte, not UTF-8, too long */
    WS_E_OUTSIDE = -2,  /* "PATH_OUTSIDE_WORKSPACE": absolute elsewhere, "..", symlink out */
    WS_E_NOENT = -3,    /* "FILE_NOT_FOUND" */
    WS_E_ISDIR = -4,    /* "IS_DIRECTORY" */
    WS_E_NOTDIR = -5,   /* "NOT_A_DIRECTORY" */
    WS_E_READONLY = -6, /* "READ_ONLY_FILE": one of the fixed files */
    WS_E_IO = -7,       /* "IO_ERROR": anything else (errno kept by the caller's message) */
    WS_E_NOSPACE = -8,  /* "DISK_QUOTA_EXCEEDED": the workspace's filesystem is full */
};

/* The in-band error code string of a ws_err ("PATH_OUTSIDE_WORKSPACE", ...). */
const char *ws_err_code(int err);

/* Normalises a user path (len bytes, may hold NULs, which are refused) into a path relative to
 * the workspace root, written to rel (at least WS_PATH_MAX bytes): no leading '/', no "." or
 * empty segments, ".." folded lexically (climbing above the root is WS_E_OUTSIDE). The root
 * itself becomes ".". Returns WS_OK or a ws_err. */
int ws_normalize(const char *user_path, size_t len, char *rel);

/* The path as the agent sees it: "/workspace" or "/workspace/<rel>", into out (WS_PATH_MAX+16). */
void ws_display(const char *rel, char *out, size_t cap);

/* Opens rel (already normalised) beneath the workspace root fd with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS), flags as for openat (O_CLOEXEC is always added). Returns an fd, or a
 * ws_err (symlink escapes give WS_E_OUTSIDE, ENOENT gives WS_E_NOENT, EISDIR WS_E_ISDIR ...). */
int ws_open(int root_fd, const char *rel, int flags, mode_t mode);

/* Who owns what the server creates in a workspace: the episode's uid and gid when tools run
 * sandboxed (so that the agent's own processes can change it later). NULL wherever a function
 * takes one: the server's own identity. */
typedef struct ws_owner {
    uid_t uid;
    gid_t gid;
} ws_owner;

/* Creates the missing parent directories of rel (mode 0755, owned by owner), confined like
 * ws_open. */
int ws_mkdirs_for(int root_fd, const char *rel, const ws_owner *owner);

/* Whether rel is one of the workspace's fixed files (model.py, binding.cpp, binding_registry.h),
 * which tools may read but never write. */
bool ws_is_fixed(const char *rel);

/* Total size in bytes of the regular files beneath the root (symlinks not followed), for the
 * per-episode disk quota. Returns WS_OK or WS_E_IO. */
int ws_disk_usage(int root_fd, unsigned long long *bytes);

#endif
