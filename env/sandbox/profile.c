/* sandbox/profile: the strict parser of sandbox_profiles/NAME.sbx. See profile.h; the format is
 * documented in sandbox_profiles/README.md.
 *
 * A profile is read line by line into a zeroed sbx_profile. `include` lines (only at the top)
 * load other profiles first, so the including file's own lines come later and win for scalar
 * keys; lists (syscalls, guards, devices, /proc entries) only grow. Every unknown word is an
 * error naming file and line: the point of the format is that a typo can never silently weaken
 * the sandbox. */
#include "sandbox/profile.h"
#include "util/fileio.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080 /* Linux 5.6; older libc headers lack it */
#endif

/* A profile is a page or two of text; anything much larger is a mistake. */
#define FILE_MAX_BYTES (256 * 1024)
#define LINE_MAX_BYTES 4096 /* one logical line, continuations joined */
#define MAX_TOKENS 128
#define INCLUDE_DEPTH 8
#define MAX_FILES 32
#define MAX_REQUIRE 64
#define ORIGIN_MAX 96

/* ---- tables ---------------------------------------------------------------------------------- */

typedef enum section {
    SEC_NONE,
    SEC_NAMESPACES,
    SEC_MOUNT,
    SEC_PROC,
    SEC_DEV,
    SEC_RLIMIT,
    SEC_CGROUP,
    SEC_LIMITS,
    SEC_ENV,
    SEC_SECCOMP,
    SEC_GUARD,
} section;

static const char *const SECTION_NAMES[] = {
    [SEC_NONE] = "",         [SEC_NAMESPACES] = "namespaces",
    [SEC_MOUNT] = "mount",   [SEC_PROC] = "proc",
    [SEC_DEV] = "dev",       [SEC_RLIMIT] = "rlimit",
    [SEC_CGROUP] = "cgroup", [SEC_LIMITS] = "limits",
    [SEC_ENV] = "env",       [SEC_SECCOMP] = "seccomp",
    [SEC_GUARD] = "guard",
};
#define N_SECTIONS ((int)(sizeof SECTION_NAMES / sizeof SECTION_NAMES[0]))

typedef struct named_value {
    const char *name;
    uint64_t value;
} named_value;

/* The errno names a profile may use: the ones a denial or a guard can sensibly return. */
static const named_value ERRNOS[] = {
    {"EPERM", EPERM},
    {"ENOENT", ENOENT},
    {"EINTR", EINTR},
    {"EIO", EIO},
    {"ENXIO", ENXIO},
    {"EBADF", EBADF},
    {"EAGAIN", EAGAIN},
    {"ENOMEM", ENOMEM},
    {"EACCES", EACCES},
    {"EFAULT", EFAULT},
    {"EBUSY", EBUSY},
    {"EEXIST", EEXIST},
    {"ENODEV", ENODEV},
    {"EINVAL", EINVAL},
    {"ENOTTY", ENOTTY},
    {"ENOSPC", ENOSPC},
    {"EROFS", EROFS},
    {"ENOSYS", ENOSYS},
    {"EOPNOTSUPP", EOPNOTSUPP},
    {"EAFNOSUPPORT", EAFNOSUPPORT},
    {"EPROTONOSUPPORT", EPROTONOSUPPORT},
};

/* The symbolic constants argument rules may use. Deliberately small: a constant the profiles
 * do not use is one more thing to get wrong. */
static const named_value CONSTANTS[] = {
    {"TIOCSTI", TIOCSTI},
    {"TIOCLINUX", TIOCLINUX},
    {"CLONE_NEWNS", CLONE_NEWNS},
    {"CLONE_NEWUTS", CLONE_NEWUTS},
    {"CLONE_NEWIPC", CLONE_NEWIPC},
    {"CLONE_NEWUSER", CLONE_NEWUSER},
    {"CLONE_NEWPID", CLONE_NEWPID},
    {"CLONE_NEWNET", CLONE_NEWNET},
    {"CLONE_NEWCGROUP", CLONE_NEWCGROUP},
    {"CLONE_NEWTIME", CLONE_NEWTIME},
    {"AF_UNSPEC", AF_UNSPEC},
    {"AF_UNIX", AF_UNIX},
    {"AF_LOCAL", AF_LOCAL},
    {"AF_INET", AF_INET},
    {"AF_INET6", AF_INET6},
    {"AF_NETLINK", AF_NETLINK},
    {"AF_PACKET", AF_PACKET},
    {"AF_VSOCK", AF_VSOCK},
    {"AF_ALG", AF_ALG},
    {"PR_SET_MM", PR_SET_MM},
    {"FALLOC_FL_KEEP_SIZE", FALLOC_FL_KEEP_SIZE},
    {"FALLOC_FL_PUNCH_HOLE", FALLOC_FL_PUNCH_HOLE},
    {"FALLOC_FL_COLLAPSE_RANGE", FALLOC_FL_COLLAPSE_RANGE},
    {"FALLOC_FL_ZERO_RANGE", FALLOC_FL_ZERO_RANGE},
    {"FALLOC_FL_INSERT_RANGE", FALLOC_FL_INSERT_RANGE},
    {"FALLOC_FL_UNSHARE_RANGE", FALLOC_FL_UNSHARE_RANGE},
    {"PER_LINUX", PER_LINUX},
    {"PER_LINUX32", PER_LINUX32},
    {"UNAME26", UNAME26},
    {"ADDR_NO_RANDOMIZE", ADDR_NO_RANDOMIZE},
    {"PER_QUERY", 0xffffffffu}, /* personality(0xffffffff) only reads the persona */
};

/* The variables bind sources (and env values) may name; the launcher expands them. */
static const char *const VARIABLES[] = {"WORKSPACE", "PYTHON_PREFIX", "PYTHON_BASE_PREFIX",
                                        "CUDA_HOME"};

/* The /dev entries a profile may ask for ("gpu" = the leased GPU's nodes). */
static const char *const DEVICES[] = {"null", "zero", "full", "random", "urandom", "gpu"};

/* Scalar keys: one value each; a later file overrides, the same file may not repeat one. */
typedef enum key_kind {
    K_BOOL,    /* on | off -> bool */
    K_SIZE,    /* bytes with K/M/G/T suffix -> uint64_t */
    K_COUNT,   /* plain number -> uint64_t */
    K_SECONDS, /* time (ms or s), whole seconds -> uint64_t */
    K_MS,      /* time (ms or s) -> int */
    K_ERRNO,   /* errno name -> int */
} key_kind;

typedef struct key_def {
    section sec;
    const char *name;
    key_kind kind;
    size_t off;
    bool zero_ok; /* 0 is a meaningful value (core=0), not "unset" */
    bool none_ok; /* "none" clears the key (0 = not set) */
} key_def;

#define F(field) offsetof(sbx_profile, field)
static const key_def KEYS[] = {
    {SEC_NAMESPACES, "user", K_BOOL, F(ns_user), true, false},
    {SEC_NAMESPACES, "mount", K_BOOL, F(ns_mount), true, false},
    {SEC_NAMESPACES, "pid", K_BOOL, F(ns_pid), true, false},
    {SEC_NAMESPACES, "net", K_BOOL, F(ns_net), true, false},
    {SEC_NAMESPACES, "ipc", K_BOOL, F(ns_ipc), true, false},
    {SEC_NAMESPACES, "uts", K_BOOL, F(ns_uts), true, false},
    {SEC_NAMESPACES, "cgroup", K_BOOL, F(ns_cgroup), true, false},
    {SEC_RLIMIT, "cpu", K_SECONDS, F(rl_cpu_s), false, true},
    {SEC_RLIMIT, "fsize", K_SIZE, F(rl_fsize), false, true},
    {SEC_RLIMIT, "nofile", K_COUNT, F(rl_nofile), false, true},
    {SEC_RLIMIT, "nproc", K_COUNT, F(rl_nproc), false, true},
    {SEC_RLIMIT, "stack", K_SIZE, F(rl_stack), false, true},
    {SEC_RLIMIT, "as", K_SIZE, F(rl_as), false, true},
    {SEC_RLIMIT, "core", K_SIZE, F(rl_core), true, true},
    {SEC_CGROUP, "memory", K_SIZE, F(cg_memory_bytes), false, true},
    {SEC_CGROUP, "pids", K_COUNT, F(cg_pids), false, true},
    {SEC_LIMITS, "wall", K_MS, F(wall_ms), false, false},
    {SEC_LIMITS, "output", K_SIZE, F(output_bytes), false, false},
    {SEC_SECCOMP, "default", K_ERRNO, F(default_errno), false, false},
};
#undef F
#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

/* ---- parser state ---------------------------------------------------------------------------- */

/* Where something was said, for "conflicts with base.sbx:12" messages. */
typedef char origin[ORIGIN_MAX];

typedef struct parser {
    const char *dir;
    sbx_profile *p;
    char *err;
    size_t errcap;
    char stack[INCLUDE_DEPTH][SBX_NAME_MAX]; /* files being read, for include cycles */
    int depth;
    char done[MAX_FILES][SBX_NAME_MAX]; /* files read completely: a second include is a no-op */
    int n_done;
    int file_seq;         /* numbers the files in reading order, from 1 */
    int key_file[N_KEYS]; /* which file set each scalar key (0: none) */
    int mount_file[SBX_MAX_MOUNTS];
    int env_file[SBX_MAX_ENV];
    origin rule_origin[SBX_MAX_SYSCALLS];
    int require_nr[MAX_REQUIRE];
    char require_name[MAX_REQUIRE][32];
    origin require_origin[MAX_REQUIRE];
    int n_require;
} parser;

/* The file being read. */
typedef struct file_ctx {
    char fname[SBX_NAME_MAX + 8]; /* "base.sbx" */
    int seq;
    int line; /* first physical line of the logical line being parsed */
    section sec;
    bool in_body; /* a section header was seen: no more includes */
} file_ctx;

/* One logical line: the raw text (comment stripped) and its whitespace-separated tokens. */
typedef struct line {
    char raw[LINE_MAX_BYTES];
    char buf[LINE_MAX_BYTES];
    char *tok[MAX_TOKENS];
    int n;
} line;

static int load_file(parser *ps, const char *name, const file_ctx *from);

static int fail(parser *ps, const file_ctx *f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fills err with "file:line: message" (or "file: message" for whole-profile checks). */
static int fail(parser *ps, const file_ctx *f, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!ps->err || ps->errcap == 0)
        return -1;
    if (f && f->line > 0)
        snprintf(ps->err, ps->errcap, "%s:%d: %s", f->fname, f->line, msg);
    else if (f)
        snprintf(ps->err, ps->errcap, "%s: %s", f->fname, msg);
    else
        snprintf(ps->err, ps->errcap, "%s", msg);
    return -1;
}

static void set_origin(origin o, const file_ctx *f)
{
    snprintf(o, ORIGIN_MAX, "%s:%d", f->fname, f->line);
}

/* ---- lexical helpers ------------------------------------------------------------------------- */

static bool lookup(const named_value *tab, size_t n, const char *name, uint64_t *out)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tab[i].name, name) == 0) {
            *out = tab[i].value;
            return true;
        }
    }
    return false;
}

static bool lookup_errno(const char *name, int *out)
{
    uint64_t v;
    if (!lookup(ERRNOS, sizeof ERRNOS / sizeof ERRNOS[0], name, &v))
        return false;
    *out = (int)v;
    return true;
}

static int parse_errno(parser *ps, const file_ctx *f, const char *tok, int *out)
{
    if (!lookup_errno(tok, out))
        return fail(ps, f, "unknown errno name '%s'", tok);
    return 0;
}

/* A decimal or 0x-hex number, the whole token. Leading zeros are decimal: octal is too easy to
 * misread in a policy file (modes are the one octal field and say so). */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
    int base = 10;
    if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        len -= 2;
    }
    if (len == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        int d;
        if (isdigit((unsigned char)s[i]))
            d = s[i] - '0';
        else if (base == 16 && isxdigit((unsigned char)s[i]))
            d = tolower((unsigned char)s[i]) - 'a' + 10;
        else
            return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = v;
    return true;
}

/* "4096", "8M", "16G": binary multiples; a bare number is bytes. */
/* s[0..len) as decimal digits only, times mult, without overflow. */
static bool scaled_digits(const char *s, size_t len, uint64_t mult, uint64_t *out)
{
    uint64_t v;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    if (!parse_u64(s, len, &v) || v > UINT64_MAX / mult)
        return false;
    *out = v * mult;
    return true;
}

static bool parse_size(const char *s, uint64_t *out)
{
    size_t len = strlen(s);
    uint64_t mult = 1;
    if (len > 1) {
        switch (s[len - 1]) {
        case 'K':
            mult = 1ULL << 10;
            break;
        case 'M':
            mult = 1ULL << 20;
            break;
        case 'G':
            mult = 1ULL << 30;
            break;
        case 'T':
            mult = 1ULL << 40;
            break;
        default:
            break;
        }
        if (mult != 1)
            len--;
    }
    return scaled_digits(s, len, mult, out);
}

/* "250ms", "600s" -> milliseconds. A unit is required: a bare number is ambiguous. */
static bool parse_time_ms(const char *s, uint64_t *out)
{
    size_t len = strlen(s);
    uint64_t mult;
    if (len > 2 && strcmp(s + len - 2, "ms") == 0) {
        mult = 1;
        len -= 2;
    } else if (len > 1 && s[len - 1] == 's') {
        mult = 1000;
        len -= 1;
    } else {
        return false;
    }
    return scaled_digits(s, len, mult, out);
}

static bool valid_name(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_' &&
            s[i] != '-')
            return false;
    return true;
}

/* Every '$' must start a known ${VAR}. */
static int check_variables(parser *ps, const file_ctx *f, const char *s)
{
    for (const char *d = strchr(s, '$'); d; d = strchr(d + 1, '$')) {
        const char *close = d[1] == '{' ? strchr(d + 2, '}') : NULL;
        if (!close)
            return fail(ps, f, "'$' must start ${VARIABLE} in '%s'", s);
        size_t n = (size_t)(close - (d + 2));
        bool known = false;
        for (size_t i = 0; i < sizeof VARIABLES / sizeof VARIABLES[0]; i++)
            if (strlen(VARIABLES[i]) == n && strncmp(VARIABLES[i], d + 2, n) == 0)
                known = true;
        if (!known)
            return fail(ps, f, "unknown variable '${%.*s}'", (int)n, d + 2);
    }
    return 0;
}

/* A path of the sandbox's root or a bind source: absolute (or starting with a variable that
 * expands to one), no "..", no "." components, no empty components but the root itself. A
 * symlink target may also be relative. */
static int check_path(parser *ps, const file_ctx *f, const char *s, bool relative_ok)
{
    if (strlen(s) >= SBX_PATH_MAX)
        return fail(ps, f, "path too long: '%.40s...'", s);
    if (check_variables(ps, f, s) != 0)
        return -1;
    if (s[0] != '/' && strncmp(s, "${", 2) != 0 && !relative_ok)
        return fail(ps, f, "path must be absolute: '%s'", s);
    const char *c = s;
    while (*c) {
        while (*c == '/')
            c++;
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return fail(ps, f, "path may not contain '.' or '..': '%s'", s);
        c += n;
    }
    return 0;
}

/* ---- scalar keys ----------------------------------------------------------------------------- */

static int find_key(section sec, const char *name)
{
    for (int i = 0; i < N_KEYS; i++)
        if (KEYS[i].sec == sec && strcmp(KEYS[i].name, name) == 0)
            return i;
    return -1;
}

/* Parses value for key k into v (64-bit, the caller stores it by the key's kind). */
static int parse_key_value(parser *ps, const file_ctx *f, const key_def *k, const char *value,
                           uint64_t *v)
{
    bool ok = false;
    int e = 0;
    switch (k->kind) {
    case K_BOOL:
        ok = strcmp(value, "on") == 0 || strcmp(value, "off") == 0;
        *v = strcmp(value, "on") == 0;
        break;
    case K_SIZE:
        ok = parse_size(value, v);
        break;
    case K_COUNT:
        ok = parse_u64(value, strlen(value), v);
        break;
    case K_SECONDS:
        ok = parse_time_ms(value, v) && *v % 1000 == 0;
        *v /= 1000;
        break;
    case K_MS:
        ok = parse_time_ms(value, v) && *v <= INT32_MAX;
        break;
    case K_ERRNO:
        ok = lookup_errno(value, &e);
        *v = (uint64_t)e;
        if (!ok)
            return fail(ps, f, "unknown errno name '%s'", value);
        break;
    }
    if (!ok) {
        static const char *const want[] = {"on or off",
                                           "a size (e.g. 4096, 64K, 8M, 2G)",
                                           "a number",
                                           "a time in whole seconds (e.g. 600s)",
                                           "a time (e.g. 250ms, 600s)",
                                           "an errno name"};
        return fail(ps, f, "%s: bad value '%s' (want %s%s)", k->name, value, want[k->kind],
                    k->none_ok ? " or none" : "");
    }
    if (*v == 0 && !k->zero_ok)
        return fail(ps, f, "%s: 0 is not a limit%s", k->name,
                    k->none_ok ? " (write none for no limit)" : "");
    return 0;
}

static void store_key(sbx_profile *p, const key_def *k, uint64_t v, bool none)
{
    char *base = (char *)p;
    switch (k->kind) {
    case K_BOOL:
        *(bool *)(base + k->off) = v != 0;
        break;
    case K_MS:
    case K_ERRNO:
        *(int *)(base + k->off) = (int)v;
        break;
    default:
        *(uint64_t *)(base + k->off) = v;
        break;
    }
    /* core=0 means "no core files", so whether it is set is tracked apart from its value */
    if (k->off == offsetof(sbx_profile, rl_core))
        p->rl_core_set = !none;
}

static int set_key(parser *ps, const file_ctx *f, const char *key, const char *value)
{
    int i = find_key(f->sec, key);
    if (i < 0)
        return fail(ps, f, "unknown key '%s' in [%s]", key, SECTION_NAMES[f->sec]);
    const key_def *k = &KEYS[i];
    if (ps->key_file[i] == f->seq)
        return fail(ps, f, "key '%s' set twice in [%s]", key, SECTION_NAMES[f->sec]);
    uint64_t v = 0;
    bool none = k->none_ok && strcmp(value, "none") == 0;
    if (!none && parse_key_value(ps, f, k, value, &v) != 0)
        return -1;
    store_key(ps->p, k, v, none);
    ps->key_file[i] = f->seq;
    return 0;
}

/* "key = value" (spaces around '=' optional), one per line. */
static int parse_key_line(parser *ps, const file_ctx *f, const line *ln)
{
    char key[64], value[256];
    const char *eq = strchr(ln->raw, '=');
    if (!eq)
        return fail(ps, f, "expected 'key = value' in [%s]", SECTION_NAMES[f->sec]);
    const char *ks = ln->raw, *ke = eq;
    while (ks < ke && isspace((unsigned char)*ks))
        ks++;
    while (ke > ks && isspace((unsigned char)ke[-1]))
        ke--;
    const char *vs = eq + 1, *ve = ln->raw + strlen(ln->raw);
    while (vs < ve && isspace((unsigned char)*vs))
        vs++;
    while (ve > vs && isspace((unsigned char)ve[-1]))
        ve--;
    if (ke == ks || ve == vs || (size_t)(ke - ks) >= sizeof key ||
        (size_t)(ve - vs) >= sizeof value)
        return fail(ps, f, "expected 'key = value' in [%s]", SECTION_NAMES[f->sec]);
    snprintf(key, sizeof key, "%.*s", (int)(ke - ks), ks);
    snprintf(value, sizeof value, "%.*s", (int)(ve - vs), vs);
    for (const char *c = value; *c; c++)
        if (isspace((unsigned char)*c))
            return fail(ps, f, "%s: one value expected, got '%s'", key, value);
    return set_key(ps, f, key, value);
}

/* ---- [mount] --------------------------------------------------------------------------------- */

static int mount_option(parser *ps, const file_ctx *f, sbx_mount *m, const char *opt,
                        bool *have_size)
{
    if (strncmp(opt, "size=", 5) == 0 && m->kind == SBX_MOUNT_TMPFS) {
        if (!parse_size(opt + 5, &m->size) || m->size == 0)
            return fail(ps, f, "bad size '%s' (e.g. 512M, 4G)", opt + 5);
        *have_size = true;
        return 0;
    }
    if (strncmp(opt, "mode=", 5) == 0) {
        char *end;
        const char *s = opt + 5;
        errno = 0;
        unsigned long mode = strtoul(s, &end, 8);
        if (!*s || *end || errno || mode > 07777 || *s == '-' || *s == '+')
            return fail(ps, f, "bad mode '%s' (octal, e.g. 1777)", s);
        m->mode = (unsigned)mode;
        return 0;
    }
    return fail(ps, f, "unknown mount option '%s'", opt);
}

/* Adds m, or replaces an entry with the same destination from an earlier file in place (so the
 * mount order stays valid). The same destination twice in one file is an error. */
static int put_mount(parser *ps, const file_ctx *f, const sbx_mount *m)
{
    sbx_profile *p = ps->p;
    for (int i = 0; i < p->n_mounts; i++) {
        if (strcmp(p->mounts[i].dest, m->dest) != 0)
            continue;
        if (ps->mount_file[i] == f->seq)
            return fail(ps, f, "mount destination '%s' listed twice", m->dest);
        p->mounts[i] = *m;
        ps->mount_file[i] = f->seq;
        return 0;
    }
    if (p->n_mounts >= SBX_MAX_MOUNTS)
        return fail(ps, f, "too many mounts (at most %d)", SBX_MAX_MOUNTS);
    ps->mount_file[p->n_mounts] = f->seq;
    p->mounts[p->n_mounts++] = *m;
    return 0;
}

static bool mount_kind(const char *word, sbx_mount_kind *kind)
{
    static const struct {
        const char *name;
        sbx_mount_kind kind;
    } kinds[] = {{"ro", SBX_MOUNT_RO},           {"rw", SBX_MOUNT_RW},   {"tmpfs", SBX_MOUNT_TMPFS},
                 {"symlink", SBX_MOUNT_SYMLINK}, {"dir", SBX_MOUNT_DIR}, {"proc", SBX_MOUNT_PROC}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(kinds[i].name, word) == 0) {
            *kind = kinds[i].kind;
            return true;
        }
    }
    return false;
}

/* Checks the word count of a mount line: ro/rw DEST [SRC], symlink DEST TARGET, proc DEST;
 * tmpfs and dir take options after DEST. */
static int mount_arity(parser *ps, const file_ctx *f, sbx_mount_kind kind, int n)
{
    bool ok;
    switch (kind) {
    case SBX_MOUNT_RO:
    case SBX_MOUNT_RW:
        ok = n == 2 || n == 3;
        break;
    case SBX_MOUNT_SYMLINK:
        ok = n == 3;
        break;
    case SBX_MOUNT_PROC:
        ok = n == 2;
        break;
    default:
        ok = n >= 2;
        break;
    }
    if (!ok)
        return fail(ps, f, "wrong number of words for this mount (see sandbox_profiles/README.md)");
    return 0;
}

static int parse_mount(parser *ps, const file_ctx *f, const line *ln)
{
    sbx_mount m;
    memset(&m, 0, sizeof m);
    const char *word = ln->tok[0];
    if (word[0] == '?') {
        m.optional = true;
        word++;
    }
    if (!mount_kind(word, &m.kind))
        return fail(ps, f, "unknown mount kind '%s'", ln->tok[0]);
    if (m.optional && m.kind != SBX_MOUNT_RO && m.kind != SBX_MOUNT_RW)
        return fail(ps, f, "only ro and rw binds can be optional ('?')");
    if (mount_arity(ps, f, m.kind, ln->n) != 0 || check_path(ps, f, ln->tok[1], false) != 0)
        return -1;
    if (strspn(ln->tok[1], "/") == strlen(ln->tok[1]))
        return fail(ps, f, "the root itself cannot be a mount destination");
    snprintf(m.dest, sizeof m.dest, "%s", ln->tok[1]);
    m.mode = m.kind == SBX_MOUNT_TMPFS ? 01777 : m.kind == SBX_MOUNT_DIR ? 0755 : 0;
    if (m.kind == SBX_MOUNT_RO || m.kind == SBX_MOUNT_RW || m.kind == SBX_MOUNT_SYMLINK) {
        if (ln->n == 3) {
            if (check_path(ps, f, ln->tok[2], m.kind == SBX_MOUNT_SYMLINK) != 0)
                return -1;
            snprintf(m.src, sizeof m.src, "%s", ln->tok[2]);
        }
    } else if (m.kind == SBX_MOUNT_TMPFS || m.kind == SBX_MOUNT_DIR) {
        bool have_size = false;
        for (int i = 2; i < ln->n; i++)
            if (mount_option(ps, f, &m, ln->tok[i], &have_size) != 0)
                return -1;
        if (m.kind == SBX_MOUNT_TMPFS && !have_size)
            return fail(ps, f, "tmpfs %s needs size=", m.dest);
    }
    if (m.kind != SBX_MOUNT_RO && m.kind != SBX_MOUNT_RW && strchr(m.dest, '$'))
        return fail(ps, f, "only bind destinations may use variables");
    return put_mount(ps, f, &m);
}

/* ---- [proc] [dev] [env] ---------------------------------------------------------------------- */

/* Adds s to a list of paths unless it is there already (lists extend across files). */
static int add_unique(parser *ps, const file_ctx *f, char (*list)[SBX_PATH_MAX], int *n, int max,
                      const char *s)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(list[i], s) == 0)
            return 0;
    if (*n >= max)
        return fail(ps, f, "too many entries (at most %d)", max);
    snprintf(list[(*n)++], SBX_PATH_MAX, "%s", s);
    return 0;
}

static int parse_proc(parser *ps, const file_ctx *f, const line *ln)
{
    sbx_profile *p = ps->p;
    bool mask = strcmp(ln->tok[0], "mask") == 0;
    if (!mask && strcmp(ln->tok[0], "ro") != 0)
        return fail(ps, f, "unknown key '%s' in [proc] (mask or ro)", ln->tok[0]);
    if (ln->n < 2)
        return fail(ps, f, "%s needs at least one path", ln->tok[0]);
    for (int i = 1; i < ln->n; i++) {
        const char *s = ln->tok[i];
        if (strncmp(s, "/proc/", 6) != 0 || strchr(s, '$'))
            return fail(ps, f, "[proc] paths are under /proc/: '%s'", s);
        if (check_path(ps, f, s, false) != 0)
            return -1;
        int rc = mask ? add_unique(ps, f, p->proc_masked, &p->n_proc_masked, 16, s)
                      : add_unique(ps, f, p->proc_readonly, &p->n_proc_readonly, 16, s);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int parse_dev(parser *ps, const file_ctx *f, const line *ln)
{
    sbx_profile *p = ps->p;
    for (int i = 0; i < ln->n; i++) {
        const char *d = ln->tok[i];
        bool known = false;
        for (size_t j = 0; j < sizeof DEVICES / sizeof DEVICES[0]; j++)
            known = known || strcmp(DEVICES[j], d) == 0;
        if (!known)
            return fail(ps, f, "unknown device '%s'", d);
        if (strcmp(d, "gpu") == 0) {
            p->gpu = true;
            continue;
        }
        bool have = false;
        for (int j = 0; j < p->n_devices; j++)
            have = have || strcmp(p->devices[j], d) == 0;
        if (have)
            continue;
        if (p->n_devices >= SBX_MAX_DEVICES)
            return fail(ps, f, "too many devices");
        snprintf(p->devices[p->n_devices++], sizeof p->devices[0], "%s", d);
    }
    return 0;
}

/* NAME=VALUE, the value is the rest of the line. A later file replaces a variable. */
static int parse_env(parser *ps, const file_ctx *f, const line *ln)
{
    sbx_profile *p = ps->p;
    const char *s = ln->raw;
    while (isspace((unsigned char)*s))
        s++;
    const char *eq = strchr(s, '=');
    size_t nlen = eq ? (size_t)(eq - s) : 0;
    bool ok = nlen > 0 && (isalpha((unsigned char)s[0]) || s[0] == '_');
    for (size_t i = 0; ok && i < nlen; i++)
        ok = isalnum((unsigned char)s[i]) || s[i] == '_';
    if (!ok)
        return fail(ps, f, "expected NAME=VALUE in [env]");
    if (strlen(s) >= sizeof p->env[0])
        return fail(ps, f, "environment entry too long");
    /* the launcher passes [env] entries as written: a ${VAR} here would reach the program
     * unexpanded, which is never what the author meant */
    if (strstr(eq + 1, "${"))
        return fail(ps, f, "variables are not expanded in [env]: '%s'", s);
    for (int i = 0; i < p->n_env; i++) {
        if (strncmp(p->env[i], s, nlen + 1) != 0)
            continue;
        if (ps->env_file[i] == f->seq)
            return fail(ps, f, "%.*s set twice in [env]", (int)nlen, s);
        memcpy(p->env[i], s, strlen(s) + 1);
        ps->env_file[i] = f->seq;
        return 0;
    }
    if (p->n_env >= SBX_MAX_ENV)
        return fail(ps, f, "too many environment variables (at most %d)", SBX_MAX_ENV);
    ps->env_file[p->n_env] = f->seq;
    memcpy(p->env[p->n_env++], s, strlen(s) + 1); /* length checked above */
    return 0;
}

/* ---- argument expressions -------------------------------------------------------------------- */

/* A tiny scanner over the condition text of guards and conditional allows:
 *   aN [& VALUE] (==|!=) VALUE      aN in {VALUE, ...}      VALUE := ATOM ('|' ATOM)*
 * where ATOM is a decimal or 0x number or a constant of the table. */
typedef struct scanner {
    const char *s;
    parser *ps;
    const file_ctx *f;
} scanner;

static void skip_ws(scanner *sc)
{
    while (isspace((unsigned char)*sc->s))
        sc->s++;
}

static bool scan_accept(scanner *sc, const char *tok)
{
    skip_ws(sc);
    size_t n = strlen(tok);
    if (strncmp(sc->s, tok, n) != 0)
        return false;
    sc->s += n;
    return true;
}

static int scan_atom(scanner *sc, uint64_t *out)
{
    skip_ws(sc);
    const char *start = sc->s;
    while (isalnum((unsigned char)*sc->s) || *sc->s == '_')
        sc->s++;
    size_t n = (size_t)(sc->s - start);
    if (n == 0)
        return fail(sc->ps, sc->f, "expected a number or constant at '%.20s'", start);
    if (isdigit((unsigned char)start[0])) {
        if (!parse_u64(start, n, out))
            return fail(sc->ps, sc->f, "bad number '%.*s'", (int)n, start);
        return 0;
    }
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)n, start);
    if (!lookup(CONSTANTS, sizeof CONSTANTS / sizeof CONSTANTS[0], name, out))
        return fail(sc->ps, sc->f, "unknown constant '%s'", name);
    return 0;
}

static int scan_value(scanner *sc, uint64_t *out)
{
    if (scan_atom(sc, out) != 0)
        return -1;
    while (scan_accept(sc, "|")) {
        uint64_t more;
        if (scan_atom(sc, &more) != 0)
            return -1;
        *out |= more;
    }
    return 0;
}

static int scan_arg(scanner *sc, unsigned *arg)
{
    skip_ws(sc);
    if (sc->s[0] != 'a' || sc->s[1] < '0' || sc->s[1] > '5' || isalnum((unsigned char)sc->s[2]))
        return fail(sc->ps, sc->f, "expected an argument a0..a5 at '%.20s'", sc->s);
    *arg = (unsigned)(sc->s[1] - '0');
    sc->s += 2;
    return 0;
}

static int scan_end(scanner *sc)
{
    skip_ws(sc);
    if (*sc->s)
        return fail(sc->ps, sc->f, "unexpected '%.20s'", sc->s);
    return 0;
}

/* "aN in {V, ...}" into a rule's condition. */
static int scan_in_set(scanner *sc, sbx_syscall_rule *r)
{
    if (scan_arg(sc, &r->arg) != 0)
        return -1;
    if (!scan_accept(sc, "in") || !scan_accept(sc, "{"))
        return fail(sc->ps, sc->f, "expected 'aN in {VALUE, ...}'");
    do {
        if (r->n_values >= SBX_MAX_ARG_VALUES)
            return fail(sc->ps, sc->f, "too many values (at most %d)", SBX_MAX_ARG_VALUES);
        if (scan_value(sc, &r->values[r->n_values++]) != 0)
            return -1;
    } while (scan_accept(sc, ","));
    if (!scan_accept(sc, "}"))
        return fail(sc->ps, sc->f, "expected '}'");
    return scan_end(sc);
}

/* "aN [& MASK] (==|!=) VALUE" into a guard. */
static int scan_compare(scanner *sc, sbx_guard *g)
{
    if (scan_arg(sc, &g->arg) != 0)
        return -1;
    bool masked = scan_accept(sc, "&");
    if (masked && scan_value(sc, &g->mask) != 0)
        return -1;
    bool eq = scan_accept(sc, "==");
    if (!eq && !scan_accept(sc, "!="))
        return fail(sc->ps, sc->f, "expected == or != at '%.20s'", sc->s);
    if (scan_value(sc, &g->value) != 0 || scan_end(sc) != 0)
        return -1;
    if (!masked) {
        g->cmp = eq ? SBX_CMP_EQ : SBX_CMP_NE;
    } else if (eq) {
        if (g->value & ~g->mask)
            return fail(sc->ps, sc->f, "value has bits outside the mask: never matches");
        g->cmp = SBX_CMP_MASKED_EQ;
    } else {
        /* "a & M != 0" is "any bit of M": one masked rule per bit. Other != forms cannot be
         * expressed with one comparison per argument, so they are refused. */
        if (g->value != 0 || g->mask == 0)
            return fail(sc->ps, sc->f, "with a mask, only '!= 0' (any bit set) is supported");
        g->cmp = SBX_CMP_ANY_BIT;
    }
    return 0;
}

/* ---- [seccomp] ------------------------------------------------------------------------------- */

/* Resolves a syscall name. 1: found, 0: skipped ("?name" unknown to libseccomp), -1: error.
 * Names libseccomp maps to a negative pseudo-number do not exist on this architecture. */
static int resolve_syscall(parser *ps, const file_ctx *f, const char *tok, char name[32], int *nr)
{
    bool optional = tok[0] == '?';
    const char *s = tok + optional;
    if (!valid_name(s, 32))
        return fail(ps, f, "bad syscall name '%s'", tok);
    snprintf(name, 32, "%s", s);
    *nr = seccomp_syscall_resolve_name(s);
    if (*nr >= 0 && *nr != __NR_SCMP_ERROR)
        return 1;
    if (optional)
        return 0;
    return fail(ps, f, "unknown syscall '%s' (prefix '?' if it may be missing)", s);
}

static bool same_rule(const sbx_syscall_rule *a, const sbx_syscall_rule *b)
{
    if (a->action != b->action || a->n_values != b->n_values)
        return false;
    if (a->action == SBX_ERRNO && a->errno_value != b->errno_value)
        return false;
    if (a->n_values && a->arg != b->arg)
        return false;
    for (int i = 0; i < a->n_values; i++)
        if (a->values[i] != b->values[i])
            return false;
    return true;
}

/* Adds r; the same syscall again with the same rule is fine (includes overlap), with a
 * different one it is an error: "allow" in one file must never quietly undo "deny" in another. */
static int add_rule(parser *ps, const file_ctx *f, const sbx_syscall_rule *r)
{
    sbx_profile *p = ps->p;
    for (int i = 0; i < p->n_rules; i++) {
        if (p->rules[i].nr != r->nr)
            continue;
        if (same_rule(&p->rules[i], r))
            return 0;
        return fail(ps, f, "syscall '%s' conflicts with its rule at %s", r->name,
                    ps->rule_origin[i]);
    }
    if (p->n_rules >= SBX_MAX_SYSCALLS)
        return fail(ps, f, "too many syscall rules (at most %d)", SBX_MAX_SYSCALLS);
    set_origin(ps->rule_origin[p->n_rules], f);
    p->rules[p->n_rules++] = *r;
    return 0;
}

/* allow|kill NAME..., deny ERRNO NAME...: the names from token first on. */
static int add_rules(parser *ps, const file_ctx *f, const line *ln, int first, sbx_action action,
                     int errno_value)
{
    if (first >= ln->n)
        return fail(ps, f, "%s needs at least one syscall", ln->tok[0]);
    for (int i = first; i < ln->n; i++) {
        sbx_syscall_rule r;
        memset(&r, 0, sizeof r);
        int rc = resolve_syscall(ps, f, ln->tok[i], r.name, &r.nr);
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        r.action = action;
        r.errno_value = errno_value;
        if (add_rule(ps, f, &r) != 0)
            return -1;
    }
    return 0;
}

/* "allow NAME if aN in {V, ...}" */
static int add_conditional_allow(parser *ps, const file_ctx *f, const line *ln)
{
    if (ln->n < 4)
        return fail(ps, f, "expected 'allow NAME if aN in {VALUE, ...}'");
    sbx_syscall_rule r;
    memset(&r, 0, sizeof r);
    int rc = resolve_syscall(ps, f, ln->tok[1], r.name, &r.nr);
    if (rc <= 0)
        return rc;
    r.action = SBX_ALLOW;
    const char *cond = strstr(ln->raw, " if ");
    scanner sc = {cond + 4, ps, f};
    if (scan_in_set(&sc, &r) != 0)
        return -1;
    return add_rule(ps, f, &r);
}

static int add_requires(parser *ps, const file_ctx *f, const line *ln)
{
    if (ln->n < 2)
        return fail(ps, f, "require needs at least one syscall");
    for (int i = 1; i < ln->n; i++) {
        char name[32];
        int nr;
        int rc = resolve_syscall(ps, f, ln->tok[i], name, &nr);
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        if (ps->n_require >= MAX_REQUIRE)
            return fail(ps, f, "too many required syscalls");
        ps->require_nr[ps->n_require] = nr;
        snprintf(ps->require_name[ps->n_require], 32, "%s", name);
        set_origin(ps->require_origin[ps->n_require++], f);
    }
    return 0;
}

static int parse_seccomp(parser *ps, const file_ctx *f, const line *ln)
{
    const char *kw = ln->tok[0];
    if (strcmp(kw, "default") == 0) {
        if (ln->n != 2)
            return fail(ps, f, "expected 'default ERRNO'");
        return set_key(ps, f, "default", ln->tok[1]);
    }
    if (strcmp(kw, "allow") == 0) {
        if (ln->n >= 3 && strcmp(ln->tok[2], "if") == 0)
            return add_conditional_allow(ps, f, ln);
        return add_rules(ps, f, ln, 1, SBX_ALLOW, 0);
    }
    if (strcmp(kw, "deny") == 0) {
        int e;
        if (ln->n < 2)
            return fail(ps, f, "expected 'deny ERRNO NAME...'");
        if (parse_errno(ps, f, ln->tok[1], &e) != 0)
            return -1;
        return add_rules(ps, f, ln, 2, SBX_ERRNO, e);
    }
    if (strcmp(kw, "kill") == 0)
        return add_rules(ps, f, ln, 1, SBX_KILL, 0);
    if (strcmp(kw, "require") == 0)
        return add_requires(ps, f, ln);
    return fail(ps, f, "unknown key '%s' in [seccomp]", kw);
}

/* ---- [guard] --------------------------------------------------------------------------------- */

static int add_socket_families(parser *ps, const file_ctx *f, const line *ln)
{
    sbx_profile *p = ps->p;
    if (ln->n < 2)
        return fail(ps, f, "socket_families needs at least one AF_ name");
    for (int i = 1; i < ln->n; i++) {
        uint64_t v;
        if (strncmp(ln->tok[i], "AF_", 3) != 0 ||
            !lookup(CONSTANTS, sizeof CONSTANTS / sizeof CONSTANTS[0], ln->tok[i], &v))
            return fail(ps, f, "unknown constant '%s' (want an AF_ family)", ln->tok[i]);
        bool have = false;
        for (int j = 0; j < p->n_socket_families; j++)
            have = have || p->socket_families[j] == (int)v;
        if (have)
            continue;
        if (p->n_socket_families >= 16)
            return fail(ps, f, "too many socket families");
        p->socket_families[p->n_socket_families++] = (int)v;
    }
    return 0;
}

static bool same_guard(const sbx_guard *a, const sbx_guard *b)
{
    return a->syscall_nr == b->syscall_nr && a->arg == b->arg && a->cmp == b->cmp &&
           a->mask == b->mask && a->value == b->value && a->errno_value == b->errno_value;
}

/* "NAME CONDITION -> ERRNO" */
static int add_guard(parser *ps, const file_ctx *f, const line *ln)
{
    sbx_profile *p = ps->p;
    sbx_guard g;
    memset(&g, 0, sizeof g);
    const char *arrow = strstr(ln->raw, "->");
    if (!arrow || ln->n < 4)
        return fail(ps, f, "expected 'SYSCALL aN [& MASK] ==|!= VALUE -> ERRNO'");
    int rc = resolve_syscall(ps, f, ln->tok[0], g.syscall, &g.syscall_nr);
    if (rc <= 0)
        return rc;
    char cond[LINE_MAX_BYTES];
    const char *start = strstr(ln->raw, ln->tok[0]) + strlen(ln->tok[0]);
    snprintf(cond, sizeof cond, "%.*s", (int)(arrow - start), start);
    scanner sc = {cond, ps, f};
    if (scan_compare(&sc, &g) != 0)
        return -1;
    char errname[32];
    if (sscanf(arrow + 2, " %31s", errname) != 1)
        return fail(ps, f, "expected an errno name after '->'");
    scanner tail = {arrow + 2 + strspn(arrow + 2, " \t") + strlen(errname), ps, f};
    if (parse_errno(ps, f, errname, &g.errno_value) != 0 || scan_end(&tail) != 0)
        return -1;
    for (int i = 0; i < p->n_guards; i++)
        if (same_guard(&p->guards[i], &g))
            return 0;
    if (p->n_guards >= SBX_MAX_GUARDS)
        return fail(ps, f, "too many guards (at most %d)", SBX_MAX_GUARDS);
    p->guards[p->n_guards++] = g;
    return 0;
}

static int parse_guard(parser *ps, const file_ctx *f, const line *ln)
{
    if (strcmp(ln->tok[0], "socket_families") == 0)
        return add_socket_families(ps, f, ln);
    return add_guard(ps, f, ln);
}

/* ---- lines and files ------------------------------------------------------------------------- */

static int parse_header(parser *ps, file_ctx *f, const line *ln)
{
    const char *t = ln->tok[0];
    size_t n = strlen(t);
    if (ln->n != 1 || t[n - 1] != ']')
        return fail(ps, f, "malformed section header");
    for (int i = 1; i < N_SECTIONS; i++) {
        if (strlen(SECTION_NAMES[i]) == n - 2 && strncmp(SECTION_NAMES[i], t + 1, n - 2) == 0) {
            f->sec = (section)i;
            f->in_body = true;
            return 0;
        }
    }
    return fail(ps, f, "unknown section '%s'", t);
}

static int parse_include(parser *ps, file_ctx *f, const line *ln)
{
    if (f->in_body)
        return fail(ps, f, "include must come before the first section");
    if (ln->n != 2 || !valid_name(ln->tok[1], SBX_NAME_MAX))
        return fail(ps, f, "expected 'include NAME' (a profile name, no .sbx)");
    return load_file(ps, ln->tok[1], f);
}

static int parse_line(parser *ps, file_ctx *f, const line *ln)
{
    if (ln->tok[0][0] == '[')
        return parse_header(ps, f, ln);
    if (strcmp(ln->tok[0], "include") == 0)
        return parse_include(ps, f, ln);
    switch (f->sec) {
    case SEC_NONE:
        return fail(ps, f, "expected a [section] or include");
    case SEC_NAMESPACES:
    case SEC_RLIMIT:
    case SEC_CGROUP:
    case SEC_LIMITS:
        return parse_key_line(ps, f, ln);
    case SEC_MOUNT:
        return parse_mount(ps, f, ln);
    case SEC_PROC:
        return parse_proc(ps, f, ln);
    case SEC_DEV:
        return parse_dev(ps, f, ln);
    case SEC_ENV:
        return parse_env(ps, f, ln);
    case SEC_SECCOMP:
        return parse_seccomp(ps, f, ln);
    case SEC_GUARD:
        return parse_guard(ps, f, ln);
    }
    return fail(ps, f, "internal: bad section");
}

/* Splits the line into words; false when there are more than MAX_TOKENS (never truncate a
 * policy line silently). */
static bool tokenize(line *ln)
{
    memcpy(ln->buf, ln->raw, sizeof ln->buf);
    ln->n = 0;
    for (char *save = NULL, *t = strtok_r(ln->buf, " \t\r", &save); t;
         t = strtok_r(NULL, " \t\r", &save)) {
        if (ln->n >= MAX_TOKENS)
            return false;
        ln->tok[ln->n++] = t;
    }
    return true;
}

/* Appends one physical line (comment stripped) to the logical line being built. Returns 1 when
 * it continues ('\' at its end), 0 when the logical line is complete, -1 when too long. */
static int append_physical(line *ln, size_t *len, const char *s, size_t n)
{
    const char *hash = memchr(s, '#', n);
    if (hash)
        n = (size_t)(hash - s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    bool cont = n > 0 && s[n - 1] == '\\';
    if (cont)
        n--;
    if (*len + n + 2 > sizeof ln->raw)
        return -1;
    memcpy(ln->raw + *len, s, n);
    *len += n;
    if (cont)
        ln->raw[(*len)++] = ' ';
    ln->raw[*len] = '\0';
    return cont ? 1 : 0;
}

static int parse_text(parser *ps, file_ctx *f, const char *text, size_t size)
{
    line *ln = malloc(sizeof *ln);
    if (!ln)
        return fail(ps, f, "out of memory");
    int rc = 0, physical = 0;
    size_t len = 0;
    const char *s = text, *end = text + size;
    while (rc == 0 && s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        physical++;
        if (len == 0)
            f->line = physical;
        int c = append_physical(ln, &len, s, n);
        s += n + (nl != NULL);
        if (c < 0) {
            rc = fail(ps, f, "line too long");
            break;
        }
        if (c == 1 && s < end)
            continue; /* a continuation on the last line just ends it */
        len = 0;
        if (!tokenize(ln))
            rc = fail(ps, f, "more than %d words on one line", MAX_TOKENS);
        else if (ln->n > 0)
            rc = parse_line(ps, f, ln);
    }
    free(ln);
    return rc;
}

static int read_whole(parser *ps, const file_ctx *f, const char *path, char **text, size_t *size)
{
    int rc = file_read_all(path, FILE_MAX_BYTES, text, size);
    if (rc == -EFBIG || rc == -EINVAL)
        return fail(ps, f, "%s: not a regular file of at most %d bytes", path, FILE_MAX_BYTES);
    if (rc != 0)
        return fail(ps, f, "cannot open %s: %s", path, strerror(-rc));
    if (memchr(*text, '\0', *size)) {
        free(*text);
        return fail(ps, f, "%s: cannot read it as text", path);
    }
    return 0;
}

/* Reads NAME.sbx; `from` is the including file (NULL at the top), for error positions. */
static int load_file(parser *ps, const char *name, const file_ctx *from)
{
    for (int i = 0; i < ps->depth; i++)
        if (strcmp(ps->stack[i], name) == 0)
            return fail(ps, from, "include cycle: '%s' includes itself", name);
    for (int i = 0; i < ps->n_done; i++)
        if (strcmp(ps->done[i], name) == 0)
            return 0;
    if (ps->depth >= INCLUDE_DEPTH || ps->n_done >= MAX_FILES)
        return fail(ps, from, "includes nested too deeply");
    char path[SBX_PATH_MAX + SBX_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s/%s.sbx", ps->dir, name);
    char *text = NULL;
    size_t size = 0;
    if (read_whole(ps, from, path, &text, &size) != 0)
        return -1;
    file_ctx f;
    memset(&f, 0, sizeof f);
    snprintf(f.fname, sizeof f.fname, "%s.sbx", name);
    f.seq = ++ps->file_seq;
    snprintf(ps->stack[ps->depth++], SBX_NAME_MAX, "%s", name);
    int rc = parse_text(ps, &f, text, size);
    ps->depth--;
    free(text);
    if (rc == 0)
        snprintf(ps->done[ps->n_done++], SBX_NAME_MAX, "%s", name);
    return rc;
}

/* ---- whole-profile checks -------------------------------------------------------------------- */

static bool rule_allows(const sbx_profile *p, int nr)
{
    for (int i = 0; i < p->n_rules; i++)
        if (p->rules[i].nr == nr)
            return p->rules[i].action == SBX_ALLOW && p->rules[i].n_values == 0;
    return false;
}

static int validate(parser *ps, const char *name)
{
    const sbx_profile *p = ps->p;
    file_ctx top;
    memset(&top, 0, sizeof top);
    snprintf(top.fname, sizeof top.fname, "%s.sbx", name);
    if (p->wall_ms <= 0)
        return fail(ps, &top, "[limits] wall is required");
    if (p->output_bytes == 0)
        return fail(ps, &top, "[limits] output is required");
    if (p->gpu && p->rl_as != 0)
        return fail(ps, &top,
                    "a GPU profile must not set [rlimit] as (CUDA reserves address "
                    "space far beyond physical memory)");
    for (int i = 0; i < ps->n_require; i++) {
        if (!rule_allows(p, ps->require_nr[i]))
            return fail(ps, NULL, "%s: require %s: the profile does not allow it",
                        ps->require_origin[i], ps->require_name[i]);
    }
    return 0;
}

int sbx_profile_load(const char *dir, const char *name, sbx_profile *out, char *err, size_t errcap)
{
    if (err && errcap)
        err[0] = '\0';
    parser *ps = calloc(1, sizeof *ps);
    if (!ps) {
        if (err && errcap)
            snprintf(err, errcap, "out of memory");
        return -1;
    }
    ps->dir = dir;
    ps->p = out;
    ps->err = err;
    ps->errcap = errcap;
    memset(out, 0, sizeof *out);
    out->default_errno = ENOSYS;
    int rc;
    if (!dir || !name || !valid_name(name, SBX_NAME_MAX))
        rc = fail(ps, NULL, "bad profile name '%s'", name ? name : "(null)");
    else
        rc = load_file(ps, name, NULL);
    if (rc == 0)
        rc = validate(ps, name);
    if (rc == 0)
        snprintf(out->name, sizeof out->name, "%s", name);
    free(ps);
    return rc;
}
