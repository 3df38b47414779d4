/* fileio: reading a whole (trusted-location) file into memory, the one way the server and the
 * launcher do it. Workspace files are read through tools/fs.h instead (confined, capped). */
#ifndef KGYM_FILEIO_H
#define KGYM_FILEIO_H

#include <stddef.h>

/* Reads the regular file at path (symlinks at the last component refused) into a new
 * NUL-terminated buffer. Returns 0, -EFBIG when it holds more than max bytes, -EINVAL when it
 * is not a regular file, or another -errno. */
int file_read_all(const char *path, size_t max, char **out, size_t *len);

/* The same for a file the caller opened (with O_NONBLOCK, so that a FIFO swapped in is never
 * waited on); fd stays open. Same returns. */
int file_read_fd(int fd, size_t max, char **out, size_t *len);

/* Opens (creating) lock_path and takes an exclusive, non-blocking flock on it: the one way a
 * process claims a folder or file for itself (kgym-env its state dir, kgym-bench its results
 * folder and baselines file). The lock lasts while the returned fd is open, and ends with the
 * process however it dies (close-on-exec: no child keeps it). Returns the fd, -EWOULDBLOCK
 * when another process holds it, or another -errno. */
int file_lock_exclusive(const char *lock_path);

#endif
