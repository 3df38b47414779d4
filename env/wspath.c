/* wspath: turning agent-supplied paths into files confined to one episode's workspace.
 *
 * Confinement is layered: ws_normalize refuses what is lexically outside (absolute paths other
 * than /workspace, ".." above the root), and ws_open lets the kernel resolve what remains with
 * openat2(RESOLVE_BENEATH), so a symlink planted in the workspace can never lead outside it. */
#include "wspath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/safeopen.h"
#include "util/text.h"

/* Directory nesting ws_disk_usage descends into. One fd stays open per level, so this bounds the
 * fds a walk holds; anything deeper is not counted. */
#define DU_MAX_DEPTH 64

const char *ws_err_code(int err)
{
    switch (err) {
    case WS_OK:
        return "OK";
    case WS_E_INVALID:
        return "INVALID_PATH";
    case WS_E_OUTSIDE:
        return "PATH_OUTSIDE_WORKSPACE";
    case WS_E_NOENT:
        return "FILE_NOT_FOUND";
    case WS_E_ISDIR:
        return "IS_DIRECTORY";
    case WS_E_NOTDIR:
        return "NOT_A_DIRECTORY";
    case WS_E_READONLY:
        return "READ_ONLY_FILE";
    case WS_E_NOSPACE:
        return "DISK_QUOTA_EXCEEDED";
    default:
        return "IO_ERROR";
    }
}

/* ---- normalisation --------------------------------------------------------------------------- */

/* Strips the virtual root from an absolute path. Returns the remainder (possibly empty), or NULL
 * when the path is absolute but names something other than the workspace. */
static const char *strip_virtual_root(const char *p, size_t len, size_t *rest_len)
{
    const size_t vlen = sizeof WS_VIRTUAL_ROOT - 1;
    if (len < vlen || memcmp(p, WS_VIRTUAL_ROOT, vlen) != 0)
        return NULL;
    if (len > vlen && p[vlen] != '/')
        return NULL; /* "/workspacefoo" is a different directory */
    *rest_len = len - vlen;
    return p + vlen;
}

/* Appends one path segment to rel (currently *out_len bytes). */
static int push_segment(char *rel, size_t *out_len, const char *seg, size_t seg_len)
{
    size_t need = *out_len + (*out_len ? 1 : 0) + seg_len;
    if (need >= WS_PATH_MAX)
        return WS_E_INVALID;
    if (*out_len)
        rel[(*out_len)++] = '/';
    memcpy(rel + *out_len, seg, seg_len);
    *out_len += seg_len;
    return WS_OK;
}

/* Removes the last segment of rel; climbing above the root is an escape. */
static int pop_segment(char *rel, size_t *out_len)
{
    if (*out_len == 0)
        return WS_E_OUTSIDE;
    const char *slash = memrchr(rel, '/', *out_len);
    *out_len = slash ? (size_t)(slash - rel) : 0;
    return WS_OK;
}

int ws_normalize(const char *user_path, size_t len, char *rel)
{
    if (!user_path || !rel)
        return WS_E_INVALID;
    rel[0] = '\0';
    if (len == 0 || len > WS_PATH_MAX || memchr(user_path, '\0', len) ||
        !text_is_utf8(user_path, len))
        return WS_E_INVALID;

    const char *p = user_path;
    size_t n = len;
    if (p[0] == '/') {
        p = strip_virtual_root(user_path, len, &n);
        if (!p)
            return WS_E_OUTSIDE;
    }

    size_t out_len = 0;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n && p[i] != '/')
            i++;
        size_t seg_len = i - start;
        const char *seg = p + start;
        i++; /* past the '/' */
        int rc = WS_OK;
        if (seg_len == 0 || (seg_len == 1 && seg[0] == '.'))
            continue;
        if (seg_len == 2 && seg[0] == '.' && seg[1] == '.')
            rc = pop_segment(rel, &out_len);
        else
            rc = push_segment(rel, &out_len, seg, seg_len);
        if (rc != WS_OK) {
            rel[0] = '\0';
            return rc;
        }
    }
    if (out_len == 0)
        rel[out_len++] = '.';
    rel[out_len] = '\0';
    return WS_OK;
}

void ws_display(const char *rel, char *out, size_t cap)
{
    if (!out || cap == 0)
        return;
    if (!rel || rel[0] == '\0' || strcmp(rel, ".") == 0)
        snprintf(out, cap, "%s", WS_VIRTUAL_ROOT);
    else
        snprintf(out, cap, "%s/%s", WS_VIRTUAL_ROOT, rel);
}

/* ---- confined opening ------------------------------------------------------------------------ */

static int errno_to_ws(int e)
{
    switch (e) {
    case EXDEV: /* RESOLVE_BENEATH: the path (or a symlink in it) leads outside */
    case ELOOP: /* a magic link (/proc/.../fd) or a symlink we refuse to chase */
        return WS_E_OUTSIDE;
    case ENOENT:
        return WS_E_NOENT;
    case EISDIR:
        return WS_E_ISDIR;
    case ENOTDIR:
        return WS_E_NOTDIR;
    case ENAMETOOLONG:
        return WS_E_INVALID;
    case ENOSPC: /* a tmpfs workspace at its quota (blocks or inodes) */
    case EDQUOT:
        return WS_E_NOSPACE;
    default:
        return WS_E_IO;
    }
}

int ws_open(int root_fd, const char *rel, int flags, mode_t mode)
{
    if (!rel || rel[0] == '\0' || rel[0] == '/')
        return WS_E_INVALID;
    int fd = safeopen_at(root_fd, rel, flags, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
    return fd >= 0 ? fd : errno_to_ws(-fd);
}

/* Opens (as a directory) the first prefix_len bytes of rel beneath the root. */
static int open_dir_prefix(int root_fd, const char *rel, size_t prefix_len)
{
    char prefix[WS_PATH_MAX];
    if (prefix_len >= sizeof prefix)
        return WS_E_INVALID;
    memcpy(prefix, rel, prefix_len);
    prefix[prefix_len] = '\0';
    return ws_open(root_fd, prefix, O_PATH | O_DIRECTORY, 0);
}

/* Makes sure the directory rel[0..end) exists. parent_fd is its parent, already confined.
 * Returns an O_PATH fd of the directory or a ws_err. */
static int ensure_dir(int root_fd, int parent_fd, const char *rel, size_t end,
                      const ws_owner *owner)
{
    int fd = open_dir_prefix(root_fd, rel, end);
    if (fd != WS_E_NOENT)
        return fd;
    const char *name_start = rel;
    for (size_t i = end; i > 0; i--) {
        if (rel[i - 1] == '/') {
            name_start = rel + i;
            break;
        }
    }
    char name[WS_PATH_MAX];
    size_t name_len = (size_t)(rel + end - name_start);
    memcpy(name, name_start, name_len);
    name[name_len] = '\0';
    /* mkdirat on a single name never follows a symlink: an existing entry of any kind (a dangling
     * link included) makes it fail with EEXIST, and the re-open below judges that entry. */
    if (mkdirat(parent_fd, name, 0755) == 0) {
        if (owner && fchownat(parent_fd, name, owner->uid, owner->gid, AT_SYMLINK_NOFOLLOW) != 0)
            return errno_to_ws(errno);
    } else if (errno != EEXIST) {
        return errno_to_ws(errno);
    }
    return open_dir_prefix(root_fd, rel, end);
}

int ws_mkdirs_for(int root_fd, const char *rel, const ws_owner *owner)
{
    if (!rel || rel[0] == '\0' || rel[0] == '/')
        return WS_E_INVALID;
    const char *last_slash = strrchr(rel, '/');
    if (!last_slash)
        return WS_OK; /* the parent is the root itself */
    int parent = ws_open(root_fd, ".", O_PATH | O_DIRECTORY, 0);
    if (parent < 0)
        return parent;
    size_t parent_len = (size_t)(last_slash - rel);
    for (size_t i = 1; i <= parent_len; i++) {
        if (i != parent_len && rel[i] != '/')
            continue;
        int dir = ensure_dir(root_fd, parent, rel, i, owner);
        close(parent);
        if (dir < 0)
            return dir;
        parent = dir;
    }
    close(parent);
    return WS_OK;
}

bool ws_is_fixed(const char *rel)
{
    static const char *const FIXED[] = {"model.py", "binding.cpp", "binding_registry.h"};
    if (!rel)
        return false;
    for (size_t i = 0; i < sizeof FIXED / sizeof FIXED[0]; i++)
        if (strcmp(rel, FIXED[i]) == 0)
            return true;
    return false;
}

/* ---- disk usage ------------------------------------------------------------------------------ */

/* Adds the sizes of the regular files beneath the directory dir_fd (which it closes). */
static int du_dir(int dir_fd, int depth, unsigned long long *bytes)
{
    DIR *d = fdopendir(dir_fd);
    if (!d) {
        close(dir_fd);
        return WS_E_IO;
    }
    int rc = WS_OK;
    struct dirent *e;
    while (rc == WS_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* removed meanwhile */
        if (S_ISREG(st.st_mode)) {
            *bytes += (unsigned long long)st.st_size;
        } else if (S_ISDIR(st.st_mode) && depth < DU_MAX_DEPTH) {
            /* A single name resolved with no symlinks at all cannot leave this directory. */
            int sub = safeopen_at(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY, 0,
                                  RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS);
            if (sub >= 0)
                rc = du_dir(sub, depth + 1, bytes);
        }
    }
    closedir(d);
    return rc;
}

int ws_disk_usage(int root_fd, unsigned long long *bytes)
{
    if (!bytes)
        return WS_E_INVALID;
    *bytes = 0;
    int fd = ws_open(root_fd, ".", O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return WS_E_IO;
    return du_dir(fd, 0, bytes) == WS_OK ? WS_OK : WS_E_IO;
}
