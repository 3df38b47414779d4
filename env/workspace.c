#include "workspace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/strbuf.h"
#include "wspath.h"

#define TEMPLATE_MAX_FILES 256
#define TEMPLATE_MAX_BYTES (16u << 20)

typedef struct tpl_file {
    char *rel; /* path relative to the workspace root */
    char *bytes;
    size_t len;
    bool is_dir;
} tpl_file;

struct ws_template {
    tpl_file files[TEMPLATE_MAX_FILES];
    int n;
    size_t total;
};

static int tpl_add(ws_template *tpl, const char *rel, bool is_dir, const char *host_path, char *err,
                   size_t errcap)
{
    if (tpl->n >= TEMPLATE_MAX_FILES) {
        snprintf(err, errcap, "template has more than %d entries", TEMPLATE_MAX_FILES);
        return -1;
    }
    tpl_file *f = &tpl->files[tpl->n];
    memset(f, 0, sizeof *f);
    f->is_dir = is_dir;
    if (!is_dir) {
        int rc = file_read_all(host_path, TEMPLATE_MAX_BYTES - tpl->total, &f->bytes, &f->len);
        if (rc) {
            snprintf(err, errcap, "template file %s: %s", host_path, strerror(-rc));
            return -1;
        }
        tpl->total += f->len;
    }
    f->rel = strdup(rel);
    tpl->n++;
    return 0;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Walks dir (host path) whose workspace-relative prefix is rel, depth first, sorted. */
static int tpl_walk(ws_template *tpl, const char *dir, const char *rel, char *err, size_t errcap)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errcap, "cannot read template dir %s: %s", dir, strerror(errno));
        return -1;
    }
    char *names[TEMPLATE_MAX_FILES];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < TEMPLATE_MAX_FILES)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], entry_cmp);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char host[4096], sub[WS_PATH_MAX];
        snprintf(host, sizeof host, "%s/%s", dir, names[i]);
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
        struct stat st;
        if (rc == 0 && lstat(host, &st) != 0) {
            snprintf(err, errcap, "template %s: %s", host, strerror(errno));
            rc = -1;
        } else if (rc == 0 && S_ISDIR(st.st_mode)) {
            rc = tpl_add(tpl, sub, true, host, err, errcap);
            if (rc == 0)
                rc = tpl_walk(tpl, host, sub, err, errcap);
        } else if (rc == 0 && S_ISREG(st.st_mode)) {
            rc = tpl_add(tpl, sub, false, host, err, errcap);
        } else if (rc == 0) {
            snprintf(err, errcap, "template %s is neither a file nor a directory", host);
            rc = -1;
        }
        free(names[i]);
    }
    return rc;
}

void ws_template_free(ws_template *tpl)
{
    if (!tpl)
        return;
    for (int i = 0; i < tpl->n; i++) {
        free(tpl->files[i].rel);
        free(tpl->files[i].bytes);
    }
    free(tpl);
}

ws_template *ws_template_load(const char *dir, char *err, size_t errcap)
{
    ws_template *tpl = calloc(1, sizeof *tpl);
    if (!tpl || tpl_walk(tpl, dir, "", err, errcap) != 0) {
        ws_template_free(tpl);
        return NULL;
    }
    for (int i = 0; i < tpl->n; i++) {
        if (strcmp(tpl->files[i].rel, "model.py") == 0) {
            snprintf(err, errcap, "template %s must not hold model.py (it comes from the task)",
                     dir);
            ws_template_free(tpl);
            return NULL;
        }
    }
    return tpl;
}

json_t *ws_template_file_list(const ws_template *tpl)
{
    json_t *list = json_array();
    json_array_append_new(list, json_string("model.py"));
    for (int i = 0; i < tpl->n; i++)
        if (!tpl->files[i].is_dir)
            json_array_append_new(list, json_string(tpl->files[i].rel));
    return list;
}

static int write_new_file(int dirfd, const char *rel, const char *bytes, size_t len, mode_t mode)
{
    int fd = openat(dirfd, rel, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -errno;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, bytes + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        done += (size_t)w;
    }
    /* The umask must not decide the mode: fixed files are 0444 whatever it is. */
    int rc = fchmod(fd, mode) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

/* Gives an editable entry to the episode's sandbox identity. */
static int give_to_owner(int dirfd, const char *rel, const ws_owner *owner)
{
    if (!owner || ws_is_fixed(rel))
        return 0;
    return fchownat(dirfd, rel, owner->uid, owner->gid, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

int ws_create(const ws_template *tpl, const char *work_dir, const char *model_py, size_t model_len,
              const ws_owner *owner, char *err, size_t errcap)
{
    if (mkdir(work_dir, 0755) != 0 && errno != EEXIST) { /* EEXIST: the caller's fresh tmpfs */
        snprintf(err, errcap, "cannot create workspace %s: %s", work_dir, strerror(errno));
        return -1;
    }
    int dirfd = open(work_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        snprintf(err, errcap, "cannot open workspace %s: %s", work_dir, strerror(errno));
        return -1;
    }
    int rc = write_new_file(dirfd, "model.py", model_py, model_len, 0444);
    for (int i = 0; rc == 0 && i < tpl->n; i++) {
        const tpl_file *f = &tpl->files[i];
        if (f->is_dir)
            rc = mkdirat(dirfd, f->rel, 0755) == 0 ? 0 : -errno;
        else
            rc = write_new_file(dirfd, f->rel, f->bytes, f->len, ws_is_fixed(f->rel) ? 0444 : 0644);
        if (rc == 0)
            rc = give_to_owner(dirfd, f->rel, owner);
        if (rc)
            snprintf(err, errcap, "cannot create %s/%s: %s", work_dir, f->rel, strerror(-rc));
    }
    if (rc == 0 && owner && fchmod(dirfd, 01777) != 0)
        rc = -errno;
    if (rc)
        snprintf(err, errcap, "cannot set up workspace %s: %s", work_dir, strerror(-rc));
    close(dirfd);
    return rc ? -1 : 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int rc = (flag == FTW_DP) ? rmdir(path) : unlink(path);
    if (rc != 0 && errno == EACCES) {
        /* A directory the agent made unwritable: give it back its bits and retry. */
        chmod(path, 0700);
        rc = (flag == FTW_DP) ? rmdir(path) : unlink(path);
    }
    return 0; /* keep going: remove as much as possible */
}

int ws_remove_tree(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (nftw(dir, remove_entry, 32, FTW_DEPTH | FTW_PHYS) != 0)
        return -errno;
    return access(dir, F_OK) == 0 ? -ENOTEMPTY : 0;
}
