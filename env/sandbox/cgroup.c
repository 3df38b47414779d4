/* sandbox/cgroup: per-command control groups on cgroup v2 (a delegated subtree) or v1 (the
 * memory, pids and freezer hierarchies). See cgroup.h.
 *
 * Layout. v2: <server's cgroup>/<name>/<cmd>; the server's own cgroup gets memory+pids in its
 * subtree_control, which v2 allows only when it holds no processes, so the processes in it are
 * first moved into the leaf <server's cgroup>/<name>-server (what systemd-run scopes do).
 * v1: <hierarchy>/<server's cgroup there>/<name>/<cmd> in each of memory, pids, freezer. */
#include "sandbox/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a kill may take before it reports failure: long enough for the kernel to tear down a
 * few hundred processes, short enough that a stuck task cannot stall a request for long. */
#define KILL_WAIT_MS 2000
/* How long a v1 freeze may take before we kill anyway (a task in uninterruptible sleep can keep
 * the cgroup FREEZING; SIGKILL still reaches it once it wakes). */
#define FREEZE_WAIT_MS 100
/* How long sbx_cg_freeze waits for the kernel to confirm a freeze: a busy cgroup freezes within
 * milliseconds; only a task stuck in uninterruptible sleep takes longer. */
#define FREEZE_CONFIRM_MS 1000
/* Pids handled per kill round; a bigger cgroup is emptied over several rounds. */
#define KILL_BATCH 1024
#define LINE_MAX_ 4096

/* ---- small helpers --------------------------------------------------------------------------- */

static void set_err(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t cap, const char *fmt, ...)
{
    if (!err || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* out = a "/" b; -1 (ENAMETOOLONG) when it does not fit: a cut path would name another cgroup. */
static int join(char out[SBX_CG_PATH_MAX], const char *a, const char *b)
{
    int n = snprintf(out, SBX_CG_PATH_MAX, "%s/%s", a, b);
    if (n < 0 || n >= SBX_CG_PATH_MAX) {
        out[0] = '\0';
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

static bool exists(const char *dir, const char *file)
{
    char p[SBX_CG_PATH_MAX];
    return join(p, dir, file) == 0 && access(p, F_OK) == 0;
}

/* Writes s to dir/file in one write(2): cgroup files act on each write. 0 or -1 with errno. */
static int write_at(const char *dir, const char *file, const char *s)
{
    char p[SBX_CG_PATH_MAX];
    if (join(p, dir, file) < 0)
        return -1;
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = strlen(s);
    ssize_t w = write(fd, s, len);
    int saved = errno;
    close(fd);
    errno = saved;
    return w == (ssize_t)len ? 0 : -1;
}

static int write_u64(const char *dir, const char *file, uint64_t v)
{
    char s[32];
    snprintf(s, sizeof s, "%llu", (unsigned long long)v);
    return write_at(dir, file, s);
}

/* Reads up to cap-1 bytes of path, NUL-terminated. Length or -1. */
static ssize_t read_path(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}

static ssize_t read_at(const char *dir, const char *file, char *buf, size_t cap)
{
    char p[SBX_CG_PATH_MAX];
    if (join(p, dir, file) < 0)
        return -1;
    return read_path(p, buf, cap);
}

/* The number after "key " on a line of a flat-keyed file (memory.events, pids.events,
 * memory.oom_control). 0, or -1 when the file or key is absent. */
static int read_key(const char *dir, const char *file, const char *key, uint64_t *v)
{
    char buf[LINE_MAX_];
    if (read_at(dir, file, buf, sizeof buf) < 0)
        return -1;
    size_t klen = strlen(key);
    for (char *line = buf; *line;) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            *v = strtoull(line + klen + 1, NULL, 10);
            return 0;
        }
        char *nl = strchr(line, '\n');
        if (!nl)
            break;
        line = nl + 1;
    }
    return -1;
}

static int read_u64(const char *dir, const char *file, uint64_t *v)
{
    char buf[64];
    if (read_at(dir, file, buf, sizeof buf) <= 0)
        return -1;
    *v = strtoull(buf, NULL, 10);
    return 0;
}

/* The pids listed in dir/cgroup.procs (at most max). */
static int read_pids(const char *dir, pid_t *pids, int max)
{
    char path[SBX_CG_PATH_MAX];
    if (join(path, dir, "cgroup.procs") < 0)
        return 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int n = 0;
    long v;
    while (n < max && fscanf(f, "%ld", &v) == 1)
        pids[n++] = (pid_t)v;
    fclose(f);
    return n;
}

/* Whether word occurs in the space-separated list s (cgroup.controllers, subtree_control). */
static bool has_word(const char *s, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = s; (p = strstr(p, word)) != NULL; p += n) {
        bool start = p == s || p[-1] == ' ' || p[-1] == ',';
        bool end = p[n] == '\0' || p[n] == ' ' || p[n] == '\n' || p[n] == ',';
        if (start && end)
            return true;
    }
    return false;
}

/* A cgroup name we create: one path component, never "." or "..", nothing a file name in
 * /sys could misread (control characters). '..' anywhere is refused outright: names come from
 * ids, and refusing more than needed is cheaper than a traversal. */
static bool valid_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 128 || strchr(name, '/') || strstr(name, ".."))
        return false;
    if (strcmp(name, ".") == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return false;
    return true;
}

static int make_dir(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* rmdir, retried briefly: right after its last task exits a cgroup can still read as busy. */
static void remove_dir(const char *path)
{
    for (int i = 0; path[0] && i < 50; i++) {
        if (rmdir(path) == 0 || errno == ENOENT)
            return;
        if (errno != EBUSY)
            return;
        nap_ms(10);
    }
}

/* ---- where the server sits ------------------------------------------------------------------- */

/* The mount of fstype (cgroup or cgroup2) whose super options name controller (NULL: any), from
 * /proc/self/mountinfo: its mount point and the cgroup path mounted there (its "root"). */
static int find_mount(const char *fstype, const char *controller, char mnt[SBX_CG_PATH_MAX],
                      char root[SBX_CG_PATH_MAX])
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[LINE_MAX_];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        char r[SBX_CG_PATH_MAX], m[SBX_CG_PATH_MAX], fs[64], opts[512];
        char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %511s %511s", r, m) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", fs, opts) != 2)
            continue;
        if (strcmp(fs, fstype) != 0 || (controller && !has_word(opts, controller)))
            continue;
        snprintf(mnt, SBX_CG_PATH_MAX, "%s", m);
        snprintf(root, SBX_CG_PATH_MAX, "%s", r);
        found = 0;
    }
    fclose(f);
    return found;
}

/* The server's cgroup path in the hierarchy holding controller (NULL: the v2 "0::" line), from
 * /proc/self/cgroup. */
static int own_path(const char *controller, char path[SBX_CG_PATH_MAX])
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return -1;
    char line[LINE_MAX_];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        bool match =
            controller ? has_word(c1 + 1, controller) : (strcmp(line, "0:") == 0 && c1[1] == '\0');
        if (match) {
            snprintf(path, SBX_CG_PATH_MAX, "%s", c2 + 1);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* The directory of the server's cgroup: mount point + own path, less the mount's root (a
 * container sees its own cgroup mounted as the hierarchy's root). */
static int own_dir(const char *fstype, const char *controller, char dir[SBX_CG_PATH_MAX])
{
    char mnt[SBX_CG_PATH_MAX], root[SBX_CG_PATH_MAX], path[SBX_CG_PATH_MAX];
    if (find_mount(fstype, controller, mnt, root) < 0 || own_path(controller, path) < 0)
        return -1;
    const char *rel = path;
    size_t rl = strlen(root);
    if (strcmp(root, "/") != 0 && strncmp(path, root, rl) == 0 &&
        (path[rl] == '/' || path[rl] == '\0'))
        rel = path + rl;
    while (*rel == '/')
        rel++;
    int n = *rel ? snprintf(dir, SBX_CG_PATH_MAX, "%s/%s", mnt, rel)
                 : snprintf(dir, SBX_CG_PATH_MAX, "%s", mnt);
    return n > 0 && n < SBX_CG_PATH_MAX ? 0 : -1;
}

/* ---- v2 probe -------------------------------------------------------------------------------- */

/* The controllers kgym uses that dir offers: "+memory +pids" or "+memory" ("" without memory). */
static void v2_wanted(const char *dir, char want[32])
{
    char ctl[256];
    want[0] = '\0';
    if (read_at(dir, "cgroup.controllers", ctl, sizeof ctl) < 0 || !has_word(ctl, "memory"))
        return;
    snprintf(want, 32, "%s", has_word(ctl, "pids") ? "+memory +pids" : "+memory");
}

/* Enables in dir's subtree_control those of want ("+memory +pids") that are off, and says
 * which in added ("" if none was). 0, or -1 with errno. */
static int v2_enable(const char *dir, const char *want, char added[32])
{
    char cur[256] = "";
    added[0] = '\0';
    (void)read_at(dir, "cgroup.subtree_control", cur, sizeof cur);
    const char *names[] = {"memory", "pids"};
    size_t len = 0;
    for (int i = 0; i < 2; i++)
        if (strstr(want, names[i]) && !has_word(cur, names[i]))
            len += (size_t)snprintf(added + len, 32 - len, "%s+%s", len ? " " : "", names[i]);
    return added[0] ? write_at(dir, "cgroup.subtree_control", added) : 0;
}

/* Moves every process of from into to, a few rounds (processes may fork meanwhile). Processes
 * that cannot move (kernel threads) are left; the caller's next write says whether that matters. */
static void v2_move_all(const char *from, const char *to)
{
    pid_t pids[KILL_BATCH];
    for (int round = 0; round < 5; round++) {
        int n = read_pids(from, pids, KILL_BATCH);
        if (n == 0)
            return;
        for (int i = 0; i < n; i++) {
            char s[24];
            snprintf(s, sizeof s, "%d", (int)pids[i]);
            (void)write_at(to, "cgroup.procs", s);
        }
    }
}

/* "123 bash (S), 456 python3 (Z)": the first few processes left in dir, with their /proc state
 * letter, for an error that says which processes would not move. */
static void describe_pids(const char *dir, char *out, size_t cap)
{
    pid_t pids[6];
    int n = read_pids(dir, pids, 6);
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < n && len < cap; i++) {
        char procdir[32], stat[256] = "", comm[64] = "?", state = '?';
        snprintf(procdir, sizeof procdir, "/proc/%d", (int)pids[i]);
        /* stat: "pid (comm) S ...": comm may hold spaces and ')', so the last ')' ends it */
        if (read_at(procdir, "stat", stat, sizeof stat) > 0) {
            char *open = strchr(stat, '('), *close = strrchr(stat, ')');
            if (open && close && close > open) {
                snprintf(comm, sizeof comm, "%.*s", (int)(close - open - 1), open + 1);
                if (close[1] == ' ' && close[2])
                    state = close[2];
            }
        }
        int w = snprintf(out + len, cap - len, "%s%d %s (%c)", i ? ", " : "", (int)pids[i], comm,
                         state);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* Records how to undo what was added in base: "+memory +pids" -> "-memory -pids". */
static void v2_note_undo(sbx_cg_host *h, const char *added)
{
    snprintf(h->v2_undo, sizeof h->v2_undo, "%s", added);
    for (char *c = h->v2_undo; (c = strchr(c, '+')) != NULL;)
        *c = '-';
}

/* Puts back what v2_enable_base changed: controllers off in base, processes back from the
 * leaf. Only possible once no child of base uses the controllers (else it leaves all as is). */
static void v2_undo_base(const sbx_cg_host *h)
{
    if (!h->v2_server_leaf[0])
        return;
    char base[SBX_CG_PATH_MAX];
    snprintf(base, sizeof base, "%s", h->v2_server_leaf);
    *strrchr(base, '/') = '\0';
    if (h->v2_undo[0] && write_at(base, "cgroup.subtree_control", h->v2_undo) < 0)
        return;
    v2_move_all(h->v2_server_leaf, base);
    remove_dir(h->v2_server_leaf);
}

/* Enables want below base. v2 forbids controllers in subtree_control of a (non-root) cgroup
 * that holds processes (EBUSY), so on EBUSY the processes of base, the server's among them, go
 * to the leaf base/<name>-server first. They all share the server's delegation and keep their
 * ancestors' limits, so moving them one level down changes nothing for them; cleanup moves them
 * back. */
static int v2_enable_base(sbx_cg_host *h, const char *base, const char *name, const char *want,
                          char *err, size_t cap)
{
    char added[32];
    /* Nothing to undo on this path: base had no processes (or is the root), so others may rely on
     * the controllers now on, and turning them off later could drop their limits. */
    if (v2_enable(base, want, added) == 0)
        return 0;
    if (errno != EBUSY) {
        set_err(err, cap, "cgroup v2: enabling %s in %s: %s", want, base, strerror(errno));
        return -1;
    }
    char leafname[160];
    snprintf(leafname, sizeof leafname, "%s-server", name);
    if (join(h->v2_server_leaf, base, leafname) < 0 || make_dir(h->v2_server_leaf) < 0) {
        set_err(err, cap, "cgroup v2: creating the server's leaf under %s: %s", base,
                strerror(errno));
        h->v2_server_leaf[0] = '\0';
        return -1;
    }
    v2_move_all(base, h->v2_server_leaf);
    if (v2_enable(base, want, added) == 0) {
        v2_note_undo(h, added);
        return 0;
    }
    int enable_errno = errno;
    char left[256];
    describe_pids(base, left, sizeof left);
    set_err(err, cap, "cgroup v2: enabling %s in %s: %s (processes that would not move: %s)", want,
            base, strerror(enable_errno), left[0] ? left : "none listed");
    v2_undo_base(h);
    h->v2_server_leaf[0] = h->v2_undo[0] = '\0';
    return -1;
}

static int probe_v2(sbx_cg_host *h, const char *name, char *err, size_t cap)
{
    char base[SBX_CG_PATH_MAX], want[32];
    if (own_dir("cgroup2", NULL, base) < 0) {
        set_err(err, cap, "cgroup v2: no cgroup2 mount or no 0:: line in /proc/self/cgroup");
        return -1;
    }
    v2_wanted(base, want);
    if (!want[0]) {
        set_err(err, cap, "cgroup v2: %s does not offer the memory controller", base);
        return -1;
    }
    if (v2_enable_base(h, base, name, want, err, cap) < 0)
        return -1;
    char added[32];
    if (join(h->v2_base, base, name) < 0 || make_dir(h->v2_base) < 0 ||
        v2_enable(h->v2_base, want, added) < 0) {
        set_err(err, cap, "cgroup v2: creating %s/%s with %s: %s", base, name, want,
                strerror(errno));
        remove_dir(h->v2_base);
        h->v2_base[0] = '\0';
        v2_undo_base(h);
        h->v2_server_leaf[0] = h->v2_undo[0] = '\0';
        return -1;
    }
    h->has_pids = has_word(want, "+pids");
    h->mode = SBX_CG_V2;
    return 0;
}

/* ---- v1 probe -------------------------------------------------------------------------------- */

/* out = <controller's hierarchy>/<server's cgroup>/<name>, created. */
static int v1_dir(const char *controller, const char *name, char out[SBX_CG_PATH_MAX])
{
    char own[SBX_CG_PATH_MAX];
    if (own_dir("cgroup", controller, own) < 0) {
        errno = ENOENT;
        return -1;
    }
    if (join(out, own, name) < 0 || make_dir(out) < 0) {
        out[0] = '\0';
        return -1;
    }
    return 0;
}

static int probe_v1(sbx_cg_host *h, const char *name, char *err, size_t cap)
{
    if (v1_dir("memory", name, h->v1_memory) < 0) {
        set_err(err, cap, "cgroup v1: memory hierarchy: %s", strerror(errno));
        return -1;
    }
    /* Without pids the launcher falls back to RLIMIT_NPROC under the episode's own uid; without
     * the freezer kills still converge by looping. */
    h->has_pids = v1_dir("pids", name, h->v1_pids) == 0;
    if (!h->has_pids)
        h->v1_pids[0] = '\0';
    if (v1_dir("freezer", name, h->v1_freezer) < 0)
        h->v1_freezer[0] = '\0';
    h->memsw = exists(h->v1_memory, "memory.memsw.limit_in_bytes");
    h->mode = SBX_CG_V1;
    return 0;
}

int sbx_cg_host_probe(sbx_cg_host *h, const char *name, char *err, size_t errcap)
{
    memset(h, 0, sizeof *h);
    h->mode = SBX_CG_NONE;
    if (!valid_name(name)) {
        set_err(err, errcap, "invalid cgroup name '%s'", name ? name : "(null)");
        return -1;
    }
    char e2[256] = "";
    if (probe_v2(h, name, e2, sizeof e2) == 0)
        return 0;
    char e1[256] = "";
    if (probe_v1(h, name, e1, sizeof e1) == 0)
        return 0;
    set_err(err, errcap, "%s; %s", e2, e1);
    return -1;
}

/* ---- one command's cgroup -------------------------------------------------------------------- */

/* Fills cg's paths for name under the host's directories (creates nothing). */
static int fill_paths(const sbx_cg_host *h, const char *name, sbx_cgroup *cg)
{
    memset(cg, 0, sizeof *cg);
    cg->host = h;
    if (h->mode == SBX_CG_V2)
        return join(cg->v2, h->v2_base, name);
    if (h->mode != SBX_CG_V1) {
        errno = ENODEV;
        return -1;
    }
    if (join(cg->v1_memory, h->v1_memory, name) < 0)
        return -1;
    if (h->v1_pids[0] && join(cg->v1_pids, h->v1_pids, name) < 0)
        return -1;
    return h->v1_freezer[0] ? join(cg->v1_freezer, h->v1_freezer, name) : 0;
}

/* The cgroup's directories that exist: v2's one, or v1's memory, pids, freezer. */
static int dirs_of(const sbx_cgroup *cg, const char *dirs[3])
{
    const char *all[3] = {cg->v2[0] ? cg->v2 : cg->v1_memory, cg->v1_pids, cg->v1_freezer};
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (all[i][0])
            dirs[n++] = all[i];
    return n;
}

static int v2_limits(const sbx_cgroup *cg, uint64_t mem, uint64_t pids)
{
    if (mem && write_u64(cg->v2, "memory.max", mem) < 0)
        return -1;
    /* No swap escape from memory.max, and an OOM kills the whole command, not one victim that
     * leaves the rest half-working. Both files are absent on some kernels / without swap. */
    if (exists(cg->v2, "memory.swap.max") && write_at(cg->v2, "memory.swap.max", "0") < 0)
        return -1;
    if (exists(cg->v2, "memory.oom.group") && write_at(cg->v2, "memory.oom.group", "1") < 0)
        return -1;
    return pids && write_u64(cg->v2, "pids.max", pids) < 0 ? -1 : 0;
}

static int v1_limits(const sbx_cgroup *cg, uint64_t mem, uint64_t pids)
{
    /* memory first: memsw may never be below it. Equal limits leave no room to swap. */
    if (mem && write_u64(cg->v1_memory, "memory.limit_in_bytes", mem) < 0)
        return -1;
    if (mem && cg->host->memsw && write_u64(cg->v1_memory, "memory.memsw.limit_in_bytes", mem) < 0)
        return -1;
    return pids && write_u64(cg->v1_pids, "pids.max", pids) < 0 ? -1 : 0;
}

/* v1 memory and memsw to one value: memsw may never be below memory, so a lower value goes to
 * memory first and a higher one to memsw first. */
static int v1_memory_pair(const sbx_cg_host *h, uint64_t bytes)
{
    if (!h->memsw)
        return write_u64(h->v1_memory, "memory.limit_in_bytes", bytes);
    if (write_u64(h->v1_memory, "memory.limit_in_bytes", bytes) == 0)
        return write_u64(h->v1_memory, "memory.memsw.limit_in_bytes", bytes);
    if (write_u64(h->v1_memory, "memory.memsw.limit_in_bytes", bytes) < 0)
        return -1;
    return write_u64(h->v1_memory, "memory.limit_in_bytes", bytes);
}

int sbx_cg_host_totals(const sbx_cg_host *h, uint64_t memory_bytes, uint64_t pids, char *err,
                       size_t errcap)
{
    int rc = 0;
    if (h->mode == SBX_CG_V2) {
        /* no memory.oom.group here: one command past the total must not take every other
         * command of the server with it */
        if ((memory_bytes && write_u64(h->v2_base, "memory.max", memory_bytes) < 0) ||
            (pids && exists(h->v2_base, "pids.max") && write_u64(h->v2_base, "pids.max", pids) < 0))
            rc = -1;
    } else if (h->mode == SBX_CG_V1) {
        if ((memory_bytes && v1_memory_pair(h, memory_bytes) < 0) ||
            (pids && h->v1_pids[0] && write_u64(h->v1_pids, "pids.max", pids) < 0))
            rc = -1;
    } else {
        errno = ENODEV;
        rc = -1;
    }
    if (rc != 0)
        set_err(err, errcap, "cannot set the sandboxes' total limits: %s", strerror(errno));
    return rc;
}

/* A pids limit on a host without the pids controller is refused, not dropped: the caller must
 * know to use its fallback (RLIMIT_NPROC under the episode's uid). */
static bool limits_possible(const sbx_cg_host *h, uint64_t pids, char *err, size_t cap)
{
    if (pids == 0 || h->has_pids)
        return true;
    set_err(err, cap, "no pids controller on this host: use RLIMIT_NPROC under the episode's uid");
    errno = EOPNOTSUPP;
    return false;
}

int sbx_cg_create(const sbx_cg_host *h, const char *name, uint64_t memory_bytes, uint64_t pids,
                  sbx_cgroup *cg, char *err, size_t errcap)
{
    if (!valid_name(name)) {
        memset(cg, 0, sizeof *cg);
        set_err(err, errcap, "invalid cgroup name '%s'", name ? name : "(null)");
        errno = EINVAL;
        return -1;
    }
    if (!limits_possible(h, pids, err, errcap)) {
        memset(cg, 0, sizeof *cg);
        return -1;
    }
    if (fill_paths(h, name, cg) < 0) {
        set_err(err, errcap, "cgroup %s: %s", name, strerror(errno));
        return -1;
    }
    const char *dirs[3];
    int n = dirs_of(cg, dirs);
    for (int i = 0; i < n; i++) {
        /* EEXIST is an error here: a leftover could hold processes or limits we did not set. */
        if (mkdir(dirs[i], 0755) < 0) {
            int saved = errno;
            set_err(err, errcap, "mkdir %s: %s", dirs[i], strerror(saved));
            for (int j = 0; j < i; j++)
                remove_dir(dirs[j]);
            memset(cg, 0, sizeof *cg);
            errno = saved;
            return -1;
        }
    }
    int rc = h->mode == SBX_CG_V2 ? v2_limits(cg, memory_bytes, pids)
                                  : v1_limits(cg, memory_bytes, pids);
    if (rc < 0) {
        int saved = errno;
        set_err(err, errcap, "cgroup %s: setting limits: %s", name, strerror(saved));
        sbx_cg_destroy(cg);
        errno = saved;
        return -1;
    }
    return 0;
}

int sbx_cg_attach(const sbx_cgroup *cg, pid_t pid, char *err, size_t errcap)
{
    char s[24];
    snprintf(s, sizeof s, "%d", (int)pid);
    const char *dirs[3];
    int n = dirs_of(cg, dirs);
    for (int i = 0; i < n; i++) {
        if (write_at(dirs[i], "cgroup.procs", s) < 0) {
            set_err(err, errcap, "attach %d to %s: %s", (int)pid, dirs[i], strerror(errno));
            return -1;
        }
    }
    return 0;
}

int sbx_cg_procs_files(const sbx_cgroup *cg, char out[][SBX_CG_PATH_MAX + 32], int max)
{
    const char *dirs[3];
    int n = dirs_of(cg, dirs), k = 0;
    for (int i = 0; i < n && k < max; i++)
        snprintf(out[k++], SBX_CG_PATH_MAX + 32, "%s/cgroup.procs", dirs[i]);
    if (k < max)
        out[k][0] = '\0';
    return k;
}

int sbx_cg_dir_fd(const sbx_cgroup *cg)
{
    if (!cg->v2[0]) {
        errno = ENOTSUP;
        return -1;
    }
    return open(cg->v2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* ---- kill ------------------------------------------------------------------------------------ */

static bool listed(const pid_t *pids, int n, pid_t pid)
{
    for (int i = 0; i < n; i++)
        if (pids[i] == pid)
            return true;
    return false;
}

/* SIGKILLs every process listed in dir, without ever signalling a stranger: each pid is pinned
 * with a pidfd first, then signalled only if a second read still lists it (if a listed process
 * had died and its pid been reused outside the cgroup between the read and pidfd_open, the
 * second read would not list it). Falls back to kill(2) on kernels without pidfds. */
static void kill_listed(const char *dir)
{
    pid_t first[KILL_BATCH], again[KILL_BATCH];
    int fds[KILL_BATCH]; /* a pidfd, or -errno of pidfd_open */
    int n = read_pids(dir, first, KILL_BATCH);
    for (int i = 0; i < n; i++) {
        fds[i] = (int)syscall(SYS_pidfd_open, first[i], 0);
        if (fds[i] < 0)
            fds[i] = -errno;
    }
    int m = read_pids(dir, again, KILL_BATCH);
    for (int i = 0; i < n; i++) {
        bool still = listed(again, m, first[i]);
        if (fds[i] >= 0) {
            if (still)
                (void)syscall(SYS_pidfd_send_signal, fds[i], SIGKILL, NULL, 0);
            close(fds[i]);
        } else if (still && fds[i] == -ENOSYS) {
            (void)kill(first[i], SIGKILL);
        }
    }
}

static bool is_empty(const sbx_cgroup *cg)
{
    const char *dirs[3];
    pid_t one;
    int n = dirs_of(cg, dirs);
    for (int i = 0; i < n; i++)
        if (read_pids(dirs[i], &one, 1) > 0)
            return false;
    return true;
}

static bool wait_empty(const sbx_cgroup *cg, int64_t until)
{
    for (;;) {
        if (is_empty(cg))
            return true;
        if (now_ms() >= until)
            return false;
        nap_ms(1);
    }
}

/* v1 freezer: FROZEN stops every task, so none can fork or exit while the list is read and
 * signalled. v1 frozen tasks do not die of SIGKILL until thawed, hence freeze/kill/thaw. Returns
 * whether the state reads FROZEN within wait_ms (thawing: whether the write went through). */
static bool v1_freeze(const char *freezer, bool on, int wait_ms)
{
    if (!freezer[0] || write_at(freezer, "freezer.state", on ? "FROZEN" : "THAWED") < 0)
        return false;
    if (!on)
        return true;
    int64_t until = now_ms() + wait_ms;
    char st[32];
    for (;;) {
        if (read_at(freezer, "freezer.state", st, sizeof st) <= 0)
            return false;
        if (strncmp(st, "FROZEN", 6) == 0)
            return true;
        if (now_ms() >= until)
            return false;
        nap_ms(1);
    }
}

/* One round: (freeze,) SIGKILL whatever each hierarchy lists, (thaw). A launcher between its
 * writes to the hierarchies' cgroup.procs can be in one but not another, so every one is read. */
static void kill_round(const sbx_cgroup *cg)
{
    const char *dirs[3];
    int n = dirs_of(cg, dirs);
    (void)v1_freeze(cg->v1_freezer, true, FREEZE_WAIT_MS);
    for (int i = 0; i < n; i++)
        kill_listed(dirs[i]);
    (void)v1_freeze(cg->v1_freezer, false, 0);
}

int sbx_cg_kill(const sbx_cgroup *cg)
{
    int64_t until = now_ms() + KILL_WAIT_MS;
    /* v2 cgroup.kill (5.14+) kills the whole subtree atomically, forks in flight included. */
    if (cg->v2[0] && write_at(cg->v2, "cgroup.kill", "1") == 0 && wait_empty(cg, until))
        return 0;
    while (!is_empty(cg)) {
        if (now_ms() >= until)
            return -1;
        kill_round(cg);
        (void)wait_empty(cg, now_ms() + 20 < until ? now_ms() + 20 : until);
    }
    return 0;
}

/* ---- freeze ---------------------------------------------------------------------------------- */

/* v2: cgroup.freeze, then cgroup.events' "frozen 1" once every task has stopped. */
static int v2_freeze(const char *dir, bool on, int wait_ms)
{
    if (!exists(dir, "cgroup.freeze")) {
        errno = ENOTSUP; /* kernels before 5.2 */
        return -1;
    }
    if (write_at(dir, "cgroup.freeze", on ? "1" : "0") < 0)
        return -1;
    if (!on)
        return 0;
    int64_t until = now_ms() + wait_ms;
    for (;;) {
        uint64_t frozen = 0;
        if (read_key(dir, "cgroup.events", "frozen", &frozen) < 0) {
            errno = ENOTSUP;
            return -1;
        }
        if (frozen == 1)
            return 0;
        if (now_ms() >= until) {
            errno = ETIMEDOUT;
            return -1;
        }
        nap_ms(1);
    }
}

int sbx_cg_freeze(const sbx_cgroup *cg, bool on)
{
    if (cg->v2[0])
        return v2_freeze(cg->v2, on, FREEZE_CONFIRM_MS);
    if (!cg->v1_freezer[0]) {
        errno = ENOTSUP;
        return -1;
    }
    errno = 0;
    if (v1_freeze(cg->v1_freezer, on, FREEZE_CONFIRM_MS))
        return 0;
    if (errno == 0)
        errno = ETIMEDOUT;
    return -1;
}

/* ---- stats ----------------------------------------------------------------------------------- */

static void v2_stats(const sbx_cgroup *cg, sbx_cg_stats *st)
{
    uint64_t v;
    if (read_u64(cg->v2, "memory.peak", &v) == 0)
        st->memory_peak_bytes = v;
    if ((read_key(cg->v2, "memory.events", "oom_kill", &v) == 0 && v > 0) ||
        (read_key(cg->v2, "memory.events", "oom_group_kill", &v) == 0 && v > 0))
        st->oom_killed = true;
    if (cg->host && cg->host->has_pids && read_key(cg->v2, "pids.events", "max", &v) == 0 && v > 0)
        st->pids_limited = true;
}

static void v1_stats(const sbx_cgroup *cg, sbx_cg_stats *st)
{
    uint64_t v;
    if (read_u64(cg->v1_memory, "memory.max_usage_in_bytes", &v) == 0)
        st->memory_peak_bytes = v;
    if (read_key(cg->v1_memory, "memory.oom_control", "oom_kill", &v) == 0)
        st->oom_killed = v > 0;
    /* Kernels before 4.13 lack the oom_kill count; hitting the limit is the best evidence then
     * (it also counts reclaim that succeeded, so the caller should pair it with a SIGKILL). */
    else if (read_u64(cg->v1_memory, "memory.failcnt", &v) == 0)
        st->oom_killed = v > 0;
    if (cg->v1_pids[0] && read_key(cg->v1_pids, "pids.events", "max", &v) == 0 && v > 0)
        st->pids_limited = true;
}

int sbx_cg_stats_read(const sbx_cgroup *cg, sbx_cg_stats *st)
{
    memset(st, 0, sizeof *st);
    if (cg->v2[0])
        v2_stats(cg, st);
    else if (cg->v1_memory[0])
        v1_stats(cg, st);
    else
        return -1;
    return 0;
}

/* ---- teardown -------------------------------------------------------------------------------- */

void sbx_cg_destroy(sbx_cgroup *cg)
{
    if (!cg->v2[0] && !cg->v1_memory[0] && !cg->v1_pids[0])
        return;
    if (!is_empty(cg))
        (void)sbx_cg_kill(cg);
    const char *dirs[3];
    int n = dirs_of(cg, dirs);
    for (int i = 0; i < n; i++)
        remove_dir(dirs[i]);
    memset(cg, 0, sizeof *cg);
}

/* Kills and removes every command cgroup left under dir (a server stopping mid-command). */
static void sweep(const sbx_cg_host *h, const char *dir)
{
    DIR *d = dir[0] ? opendir(dir) : NULL;
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        sbx_cgroup cg;
        if (e->d_type == DT_DIR && valid_name(e->d_name) && fill_paths(h, e->d_name, &cg) == 0)
            sbx_cg_destroy(&cg);
    }
    closedir(d);
}

void sbx_cg_host_cleanup(const sbx_cg_host *h)
{
    if (h->mode == SBX_CG_V2) {
        sweep(h, h->v2_base);
        remove_dir(h->v2_base);
        v2_undo_base(h);
    } else if (h->mode == SBX_CG_V1) {
        sweep(h, h->v1_memory);
        sweep(h, h->v1_pids);
        sweep(h, h->v1_freezer);
        remove_dir(h->v1_memory);
        remove_dir(h->v1_pids);
        remove_dir(h->v1_freezer);
    }
}
