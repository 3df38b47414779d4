/* sandbox/seccomp: the syscall policy of a profile, compiled with libseccomp.
 *
 * Two filters, loaded in this order (filters stack; the most restrictive result wins):
 *  1. the guard filter, default ALLOW, holding only argument rules (TIOCSTI/TIOCLINUX with a
 *     32-bit mask, namespace flags on clone, socket families, ...);
 *  2. the allowlist filter: the profile's allowed syscalls, its deliberate denials (EPERM, or
 *     ENOSYS where glibc must fall back, e.g. clone3), default ENOSYS for everything unlisted.
 *     (Denials whose errno equals the default are written into filter 1 instead: libseccomp
 *     refuses a rule equal to its filter's default, and there they stay visible in the dump.)
 * Only the native architecture is added: any other ABI entry (i386 int 0x80, x32) is killed. */
#ifndef KGYM_SANDBOX_SECCOMP_H
#define KGYM_SANDBOX_SECCOMP_H

#include <stddef.h>

#include "sandbox/profile.h"

/* Builds both filters and loads them into the calling process. PR_SET_NO_NEW_PRIVS must be set.
 * Meant for the launcher's last step before execve. Returns 0 or -1 with err filled. */
int sbx_seccomp_install(const sbx_profile *p, char *err, size_t errcap);

/* Writes both filters in libseccomp's PFC text form to fd (for review and golden tests).
 * Returns 0 or -1 with err filled. */
int sbx_seccomp_export_pfc(const sbx_profile *p, int fd, char *err, size_t errcap);

#endif
