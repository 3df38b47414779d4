#include "util/safeopen.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* openat2 returns EAGAIN when a concurrent rename makes a ".." check inconclusive; a few retries
 * make that transient failure invisible without risking an endless loop under attack. */
#define OPENAT2_RETRIES 8

int safeopen_at(int dir_fd, const char *path, int flags, mode_t mode, uint64_t resolve)
{
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)(unsigned)(flags | O_CLOEXEC);
    /* openat2 insists on mode 0 unless a file may be created. */
    if (flags & (O_CREAT | __O_TMPFILE))
        how.mode = mode & 07777;
    how.resolve = resolve;
    for (int attempt = 0; attempt < OPENAT2_RETRIES; attempt++) {
        long fd = syscall(SYS_openat2, dir_fd, path, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
    }
    return -EAGAIN;
}
