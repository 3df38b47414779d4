/* safeopen: openat2(2) with resolve restrictions, the one way kgym opens a path it must not let
 * symlinks or ".." redirect (workspace files in wspath, agent-written solutions in kgym-bench). */
#ifndef KGYM_SAFEOPEN_H
#define KGYM_SAFEOPEN_H

#include <stdint.h>
#include <sys/types.h>

/* openat2(dir_fd, path) with flags (O_CLOEXEC always added; mode used only with O_CREAT or
 * O_TMPFILE) and resolve, a mask of RESOLVE_* from <linux/openat2.h> (RESOLVE_BENEATH,
 * RESOLVE_NO_SYMLINKS, ...). Retries the kernel's transient EAGAIN a few times. Returns an fd,
 * or -errno (ELOOP: a symlink under RESOLVE_NO_SYMLINKS; EXDEV: a way out under
 * RESOLVE_BENEATH). */
int safeopen_at(int dir_fd, const char *path, int flags, mode_t mode, uint64_t resolve);

#endif
