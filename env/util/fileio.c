#include "util/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/strbuf.h"

int file_read_all(const char *path, size_t max, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    int rc = file_read_fd(fd, max, out, len);
    close(fd);
    return rc;
}

int file_read_fd(int fd, size_t max, char **out, size_t *len)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL; /* a FIFO or device is never read (O_NONBLOCK: never waited on either) */
    strbuf sb = STRBUF_INIT;
    char buf[16384];
    ssize_t r;
    int rc = 0;
    /* Read to the end rather than trusting st_size: a file may grow while we read it. */
    while (rc == 0 && (r = read(fd, buf, sizeof buf)) != 0) {
        if (r < 0)
            rc = errno == EINTR ? 0 : -errno;
        else if (sb.len + (size_t)r > max)
            rc = -EFBIG;
        else if (sb_append(&sb, buf, (size_t)r) != 0)
            rc = -ENOMEM;
    }
    if (rc) {
        sb_free(&sb);
        return rc;
    }
    *len = sb.len;
    *out = sb_steal(&sb);
    return 0;
}

int file_lock_exclusive(const char *lock_path)
{
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return fd;
    int e = errno;
    close(fd);
    return -e;
}
