/* sandbox/seccomp: a parsed profile's syscall policy compiled with libseccomp. See seccomp.h.
 *
 * Filter 1 (guards, default ALLOW) holds the argument rules and, besides, the deliberate
 * denials whose errno equals the allowlist's default (clone3 and io_uring -> ENOSYS):
 * libseccomp refuses a rule whose action is its filter's default, and keeping them explicit
 * somewhere means the review dump shows them and they survive a change of the default.
 * Filter 2 (the allowlist, default ERRNO(default_errno)) holds every ALLOW rule and the other
 * denials. Why the denials with another errno must sit in filter 2: when two filters both
 * return ERRNO, the kernel returns the data of the most recently installed one, so an EPERM in
 * filter 1 would come out as filter 2's ENOSYS default. Guards are different: they fire on
 * syscalls filter 2 ALLOWs, and ERRNO outranks ALLOW whichever filter says it.
 *
 * Only the native architecture is in either filter, and the bad-architecture action kills the
 * process: i386 entry (int 0x80) and x32 (nr | 0x40000000, which libseccomp's x86_64 filter
 * treats as foreign) never reach a syscall. */
#include "sandbox/seccomp.h"

#include <errno.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FAMILY_MAX 64 /* socket families are small numbers (AF_MAX is 46 on Linux 6.x) */

static int seterr(char *err, size_t errcap, const char *what, int rc)
{
    if (err && errcap)
        snprintf(err, errcap, "seccomp: %s: %s", what, strerror(rc < 0 ? -rc : rc));
    return -1;
}

/* Attributes both filters share. CTL_NNP stays at its default (on): seccomp_load sets
 * no_new_privs itself if the caller has not. */
static int set_common_attrs(scmp_filter_ctx ctx)
{
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc != 0)
        return rc;
    /* a binary tree of syscall numbers keeps a 300-entry allowlist cheap per call; older
     * libseccomp lacks the attribute and falls back to a linear list, which is still correct */
    (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    return 0;
}

static int add_cmp(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned arg, enum scmp_compare op,
                   uint64_t a, uint64_t b)
{
    struct scmp_arg_cmp cmp = {arg, op, a, b};
    return seccomp_rule_add_array(ctx, action, nr, 1, &cmp);
}

/* One guard; "any bit of MASK" becomes one masked rule per bit (a rule compares an argument
 * once, and the bits are alternatives). */
static int add_guard(scmp_filter_ctx ctx, const sbx_guard *g)
{
    uint32_t act = SCMP_ACT_ERRNO((uint32_t)g->errno_value);
    switch (g->cmp) {
    case SBX_CMP_EQ:
        return add_cmp(ctx, act, g->syscall_nr, g->arg, SCMP_CMP_EQ, g->value, 0);
    case SBX_CMP_NE:
        return add_cmp(ctx, act, g->syscall_nr, g->arg, SCMP_CMP_NE, g->value, 0);
    case SBX_CMP_MASKED_EQ:
        return add_cmp(ctx, act, g->syscall_nr, g->arg, SCMP_CMP_MASKED_EQ, g->mask, g->value);
    case SBX_CMP_ANY_BIT:
        for (int bit = 0; bit < 64; bit++) {
            uint64_t b = 1ULL << bit;
            if (!(g->mask & b))
                continue;
            int rc = add_cmp(ctx, act, g->syscall_nr, g->arg, SCMP_CMP_MASKED_EQ, b, b);
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    return -EINVAL;
}

static bool family_allowed(const sbx_profile *p, uint64_t fam)
{
    for (int i = 0; i < p->n_socket_families; i++)
        if ((uint64_t)p->socket_families[i] == fam)
            return true;
    return false;
}

/* socket()/socketpair() with a family outside the list -> EAFNOSUPPORT. "Not in a set" is
 * spelled as EQ for every excluded value below the largest allowed one, plus GT that one; all
 * 64 bits are compared, so junk in the upper half of the int is refused too (fail closed). */
static int add_family_guard(scmp_filter_ctx ctx, const sbx_profile *p, int nr)
{
    uint32_t act = SCMP_ACT_ERRNO(EAFNOSUPPORT);
    if (p->n_socket_families == 0)
        return seccomp_rule_add_array(ctx, act, nr, 0, NULL);
    uint64_t max = 0;
    for (int i = 0; i < p->n_socket_families; i++)
        if ((uint64_t)p->socket_families[i] > max)
            max = (uint64_t)p->socket_families[i];
    for (uint64_t fam = 0; fam < max && fam < FAMILY_MAX; fam++) {
        if (family_allowed(p, fam))
            continue;
        int rc = add_cmp(ctx, act, nr, 0, SCMP_CMP_EQ, fam, 0);
        if (rc != 0)
            return rc;
    }
    return add_cmp(ctx, act, nr, 0, SCMP_CMP_GT, max, 0);
}

static bool is_default_denial(const sbx_profile *p, const sbx_syscall_rule *r)
{
    return r->action == SBX_ERRNO && r->errno_value == p->default_errno;
}

static int build_guard(const sbx_profile *p, scmp_filter_ctx *out, char *err, size_t errcap)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return seterr(err, errcap, "seccomp_init", ENOMEM);
    int rc = set_common_attrs(ctx);
    const char *what = "attributes";
    for (int i = 0; rc == 0 && i < p->n_guards; i++) {
        rc = add_guard(ctx, &p->guards[i]);
        what = p->guards[i].syscall;
    }
    if (rc == 0 && (rc = add_family_guard(ctx, p, SCMP_SYS(socket))) != 0)
        what = "socket";
    if (rc == 0 && (rc = add_family_guard(ctx, p, SCMP_SYS(socketpair))) != 0)
        what = "socketpair";
    for (int i = 0; rc == 0 && i < p->n_rules; i++) {
        const sbx_syscall_rule *r = &p->rules[i];
        if (!is_default_denial(p, r))
            continue;
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO((uint32_t)r->errno_value), r->nr, 0, NULL);
        what = r->name;
    }
    if (rc != 0) {
        seccomp_release(ctx);
        return seterr(err, errcap, what, rc);
    }
    *out = ctx;
    return 0;
}

/* One rule of the allowlist filter; a conditional allow is one EQ rule per value. */
static int add_allowlist_rule(scmp_filter_ctx ctx, const sbx_syscall_rule *r)
{
    if (r->action == SBX_KILL)
        return seccomp_rule_add_array(ctx, SCMP_ACT_KILL_PROCESS, r->nr, 0, NULL);
    if (r->action == SBX_ERRNO)
        return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO((uint32_t)r->errno_value), r->nr, 0,
                                      NULL);
    if (r->n_values == 0)
        return seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, r->nr, 0, NULL);
    for (int i = 0; i < r->n_values; i++) {
        int rc = add_cmp(ctx, SCMP_ACT_ALLOW, r->nr, r->arg, SCMP_CMP_EQ, r->values[i], 0);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int build_allowlist(const sbx_profile *p, scmp_filter_ctx *out, char *err, size_t errcap)
{
    if (p->default_errno <= 0 || p->default_errno > 4095)
        return seterr(err, errcap, "default errno", EINVAL);
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO((uint32_t)p->default_errno));
    if (!ctx)
        return seterr(err, errcap, "seccomp_init", ENOMEM);
    int rc = set_common_attrs(ctx);
    const char *what = "attributes";
    for (int i = 0; rc == 0 && i < p->n_rules; i++) {
        if (is_default_denial(p, &p->rules[i]))
            continue;
        rc = add_allowlist_rule(ctx, &p->rules[i]);
        what = p->rules[i].name;
    }
    if (rc != 0) {
        seccomp_release(ctx);
        return seterr(err, errcap, what, rc);
    }
    *out = ctx;
    return 0;
}

int sbx_seccomp_install(const sbx_profile *p, char *err, size_t errcap)
{
    scmp_filter_ctx guard = NULL, allow = NULL;
    if (build_guard(p, &guard, err, errcap) != 0)
        return -1;
    if (build_allowlist(p, &allow, err, errcap) != 0) {
        seccomp_release(guard);
        return -1;
    }
    /* the guards first: filter 2, loaded last, must be the one whose errno wins ties */
    int rc = seccomp_load(guard);
    const char *what = "loading the guard filter";
    if (rc == 0) {
        rc = seccomp_load(allow);
        what = "loading the allowlist filter (the guard filter is already in place)";
    }
    seccomp_release(guard);
    seccomp_release(allow);
    return rc == 0 ? 0 : seterr(err, errcap, what, rc);
}

static int write_all(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

int sbx_seccomp_export_pfc(const sbx_profile *p, int fd, char *err, size_t errcap)
{
    scmp_filter_ctx guard = NULL, allow = NULL;
    if (build_guard(p, &guard, err, errcap) != 0)
        return -1;
    if (build_allowlist(p, &allow, err, errcap) != 0) {
        seccomp_release(guard);
        return -1;
    }
    char head[160];
    snprintf(head, sizeof head,
             "# kgym sandbox profile '%s': filter 1 of 2, guards (default ALLOW)\n", p->name);
    int rc = write_all(fd, head) == 0 ? seccomp_export_pfc(guard, fd) : -EIO;
    snprintf(head, sizeof head,
             "# kgym sandbox profile '%s': filter 2 of 2, allowlist (default ERRNO(%d))\n", p->name,
             p->default_errno);
    if (rc == 0)
        rc = write_all(fd, head) == 0 ? seccomp_export_pfc(allow, fd) : -EIO;
    seccomp_release(guard);
    seccomp_release(allow);
    return rc == 0 ? 0 : seterr(err, errcap, "exporting PFC", rc);
}
