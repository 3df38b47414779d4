#include "trajectory.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct trajectory {
    int fd;
    size_t lines;
    durability_mode durability;
};

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Counts the complete lines of the file and cuts a torn tail (bytes after the last newline). */
static int recover_tail(int fd, size_t *lines)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    off_t end = st.st_size, complete = 0;
    char buf[65536];
    *lines = 0;
    for (off_t off = 0; off < end;) {
        ssize_t r = pread(fd, buf, sizeof buf, off);
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] == '\n') {
                (*lines)++;
                complete = off + i + 1;
            }
        }
        off += r;
    }
    if (complete != end && ftruncate(fd, complete) != 0)
        return -errno;
    return 0;
}

trajectory *traj_open(const char *path, durability_mode durability, char *err, size_t errcap)
{
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errcap, "cannot open trajectory %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t lines = 0;
    int rc = recover_tail(fd, &lines);
    trajectory *t = rc == 0 ? calloc(1, sizeof *t) : NULL;
    if (!t) {
        snprintf(err, errcap, "cannot recover trajectory %s: %s", path,
                 strerror(rc ? -rc : ENOMEM));
        close(fd);
        return NULL;
    }
    t->fd = fd;
    t->lines = lines;
    t->durability = durability;
    return t;
}

int traj_append(trajectory *t, const json_t *record, char *err, size_t errcap)
{
    char *line = json_dumps(record, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!line) {
        snprintf(err, errcap, "cannot serialise the trajectory record");
        return -1;
    }
    size_t n = strlen(line);
    line[n] = '\n'; /* json_dumps leaves room: replace the NUL, write n + 1 bytes */
    int rc = write_all(t->fd, line, n + 1);
    free(line);
    if (rc == 0 && t->durability == DURABILITY_FSYNC && fdatasync(t->fd) != 0)
        rc = -errno;
    if (rc != 0) {
        snprintf(err, errcap, "trajectory write failed: %s", strerror(-rc));
        return -1;
    }
    t->lines++;
    return 0;
}

size_t traj_lines(const trajectory *t)
{
    return t->lines;
}

void traj_close(trajectory *t)
{
    if (!t)
        return;
    close(t->fd);
    free(t);
}

int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

int write_file_atomic(const char *path, const void *bytes, size_t len, durability_mode durability)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)gettid()) >= sizeof tmp)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = write_all(fd, bytes, len);
    if (rc == 0 && durability == DURABILITY_FSYNC && fdatasync(fd) != 0)
        rc = -errno;
    close(fd);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    if (durability == DURABILITY_FSYNC) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        return fsync_dir(dirname(dir));
    }
    return 0;
}
