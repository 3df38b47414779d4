/* build: the Compile tool's engine (see build.h for the trust model).
 *
 * One build: snapshot the sources into <build_dir>/src (root's, read-only to the episode),
 * compute each object's cache key, take the hits from the cache, compile the misses in parallel
 * inside the compile sandbox (the build dir is its /workspace), copy each new object into the
 * cache, link. Every command line is written as the sandbox sees it ("/workspace/..."); only
 * map_arg() turns it into host paths for the unsandboxed (weak) mode, so that the cache keys,
 * which hash the command lines, are the same in every episode. */
#include "harness/build.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness/objcache.h"
#include "sandbox/sandbox.h"
#include "server.h"
#include "spawn.h"
#include "util/digest.h"
#include "util/fileio.h"
#include "util/strbuf.h"
#include "util/text.h"
#include "workspace.h"
#include "wspath.h"

#define VWS "/workspace"                /* the build dir as the sandbox shows it */
#define BUILD_MAX_SOURCE (1u << 20)     /* one source or header of kernels/ */
#define BUILD_MAX_FILES 256             /* sources and headers of kernels/ together */
#define BUILD_MAX_TOTAL (32u << 20)     /* all of them together */
#define BUILD_MAX_OBJECT (512ull << 20) /* one object the compiler produced */
#define BUILD_MAX_BUILT (1ull << 30)    /* the objects one build compiles, together */
#define BUILD_MAX_PCH (4ull << 30)      /* the precompiled torch header */
#define BUILD_CAPTURE (1u << 20)        /* output kept per stream of one command */
#define BUILD_FSIZE (2ull << 30) /* RLIMIT_FSIZE of unsandboxed compilers (the PCH: ~0.7 GB) */
#define PCH_HEADER "torch_ext.h" /* force-included; its .gch sits beside it */

/* ---- SHA-256 ------------------------------------------------------------------------------ */

/* An incremental hash of length-prefixed fields: ("ab", "c") and ("a", "bc") differ. */
typedef struct hasher {
    EVP_MD_CTX *md;
    bool bad;
} hasher;

static void h_init(hasher *h)
{
    h->md = EVP_MD_CTX_new();
    h->bad = !h->md || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1;
}

static void h_field(hasher *h, const void *data, size_t len)
{
    uint64_t n = len;
    if (!h->bad)
        h->bad =
            EVP_DigestUpdate(h->md, &n, sizeof n) != 1 || EVP_DigestUpdate(h->md, data, len) != 1;
}

static void h_str(hasher *h, const char *s)
{
    h_field(h, s, strlen(s));
}

/* Returns 0, or -1 when libcrypto failed (out of memory). */
static int h_final(hasher *h, char hex[65])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!h->bad)
        h->bad = EVP_DigestFinal_ex(h->md, d, &n) != 1 || n != 32;
    EVP_MD_CTX_free(h->md);
    h->md = NULL;
    if (h->bad)
        return -1;
    digest_to_hex(d, 32, hex);
    return 0;
}

/* ---- command lines ------------------------------------------------------------------------ */

typedef struct argvec {
    char **v; /* NULL-terminated once non-empty */
    size_t n, cap;
    bool oom;
} argvec;

static void av_push(argvec *a, const char *s)
{
    if (a->oom)
        return;
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        char **v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) {
        a->oom = true;
        return;
    }
    a->v[++a->n] = NULL;
}

static void av_pushf(argvec *a, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void av_pushf(argvec *a, const char *f, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    if (n < 0) {
        a->oom = true;
        return;
    }
    av_push(a, s);
    free(s);
}

static void av_free(argvec *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static void h_argv(hasher *h, const argvec *a)
{
    for (size_t i = 0; i < a->n; i++)
        h_str(h, a->v[i]);
}

/* The flags of every g++ compile (and of the precompiled header, which g++ only uses when they
 * match). Torch's headers are found through the probed include dirs; the snapshot's through
 * /workspace/src, so a binding file's "../binding_registry.h" and <binding_registry.h> both
 * find the trusted copy. */
static void cxx_flags(const build_toolchain *tc, argvec *a)
{
    static const char *const FIXED[] = {"-O3", "-std=c++17", "-fPIC",
                                        "-DTORCH_EXTENSION_NAME=cuda_extension",
                                        "-DTORCH_API_INCLUDE_EXTENSION_H"};
    for (size_t i = 0; i < sizeof FIXED / sizeof FIXED[0]; i++)
        av_push(a, FIXED[i]);
    av_pushf(a, "-D_GLIBCXX_USE_CXX11_ABI=%d", tc->cxx11_abi);
    for (int i = 0; i < 2; i++)
        if (tc->torch_include[i][0])
            av_pushf(a, "-I%s", tc->torch_include[i]);
    if (tc->python_include[0])
        av_pushf(a, "-I%s", tc->python_include);
    if (tc->cuda_home[0])
        av_pushf(a, "-I%s/include", tc->cuda_home);
    av_push(a, "-I" VWS "/src");
}

/* "sm_90a" -> -gencode=arch=compute_90a,code=sm_90a. No architecture (a CPU server): a common
 * one, only so that the file's errors are caught (it is not linked then). */
static void nvcc_arch(const build_toolchain *tc, argvec *a)
{
    const char *arch = tc->cuda_arch;
    if (strncmp(arch, "sm_", 3) == 0 && arch[3])
        av_pushf(a, "-gencode=arch=compute_%s,code=%s", arch + 3, arch);
    else
        av_push(a, "-arch=sm_80");
}

/* nvcc: plain CUDA is expected in .cu files (SKILL.md), but torch's headers are reachable
 * too, with the same ABI macro as the g++ objects they link with. */
static void nvcc_flags(const build_toolchain *tc, argvec *a)
{
    static const char *const FIXED[] = {"-O3", "-std=c++17", "-Xcompiler", "-fPIC",
                                        "--expt-relaxed-constexpr"};
    for (size_t i = 0; i < sizeof FIXED / sizeof FIXED[0]; i++)
        av_push(a, FIXED[i]);
    nvcc_arch(tc, a);
    av_pushf(a, "-D_GLIBCXX_USE_CXX11_ABI=%d", tc->cxx11_abi);
    for (int i = 0; i < 2; i++)
        if (tc->torch_include[i][0])
            av_pushf(a, "-I%s", tc->torch_include[i]);
    if (tc->python_include[0])
        av_pushf(a, "-I%s", tc->python_include);
    av_push(a, "-I" VWS "/src");
}

/* ---- the snapshot ------------------------------------------------------------------------- */

typedef enum src_kind { SRC_CXX, SRC_CU, SRC_HEADER } src_kind;

typedef struct src_file {
    char rel[300]; /* as the agent knows it and under src/: "binding.cpp", "kernels/x.cu" */
    char obj[320]; /* the object, relative to the build dir: "obj/kernels_x.cu.o" */
    src_kind kind;
    bool trusted; /* from the server's template */
    char *data;
    size_t len;
} src_file;

typedef struct snapshot {
    src_file *f;
    size_t n, cap;
    size_t total;
} snapshot;

static void snapshot_free(snapshot *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->f[i].data);
    free(s->f);
    memset(s, 0, sizeof *s);
}

static src_file *snapshot_add(snapshot *s)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        src_file *f = realloc(s->f, cap * sizeof *f);
        if (!f)
            return NULL;
        s->f = f;
        s->cap = cap;
    }
    memset(&s->f[s->n], 0, sizeof s->f[0]);
    return &s->f[s->n++];
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a > b && strcmp(s + a - b, suffix) == 0;
}

/* Which kind of file name is, or -1 when the build ignores it. */
static int kind_of(const char *name)
{
    if (ends_with(name, ".cpp"))
        return SRC_CXX;
    if (ends_with(name, ".cu"))
        return SRC_CU;
    if (ends_with(name, ".h") || ends_with(name, ".cuh") || ends_with(name, ".hpp"))
        return SRC_HEADER;
    return -1;
}

/* File names end up on command lines and in object names: keep them plain. */
static bool plain_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 128 || name[0] == '.' || name[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '+'))
            return false;
    }
    return true;
}

/* Sets the result's failure (the build ran, the workspace is at fault or the build failed). */
static void fail(build_result *res, const char *code, const char *f, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(build_result *res, const char *code, const char *f, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, f);
    if (vasprintf(&msg, f, ap) < 0)
        msg = NULL;
    va_end(ap);
    res->ok = false;
    res->error_code = code;
    if (msg) {
        free(res->log);
        res->log = msg;
    }
}

/* Reads one entry of kernels/ (dfd): a regular file, never through a symlink, within limits.
 * Returns 0, or fills res (INVALID_SOURCE / INFRA_ERROR) and returns 1 / -1. */
static int read_entry(int dfd, const char *name, snapshot *s, src_file *f, build_result *res)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 && errno == ELOOP) {
        fail(res, "INVALID_SOURCE",
             "kernels/%s is a symbolic link: sources and headers in "
             "kernels/ must be regular files",
             name);
        return 1;
    }
    if (fd < 0 || fstat(fd, &st) != 0) {
        fail(res, "INFRA_ERROR", "cannot read kernels/%s: %s", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > BUILD_MAX_SOURCE ||
        s->total + (size_t)st.st_size > BUILD_MAX_TOTAL) {
        close(fd);
        if (!S_ISREG(st.st_mode))
            fail(res, "INVALID_SOURCE", "kernels/%s is not a regular file", name);
        else
            fail(res, "INVALID_SOURCE",
                 "kernels/%s is too large (%lld bytes): a source or "
                 "header may hold at most %u bytes, all of them together %u",
                 name, (long long)st.st_size, BUILD_MAX_SOURCE, BUILD_MAX_TOTAL);
        return 1;
    }
    f->data = malloc((size_t)st.st_size + 1);
    ssize_t got = f->data ? read(fd, f->data, (size_t)st.st_size) : -1;
    close(fd);
    if (got != st.st_size) {
        fail(res, "INFRA_ERROR", "cannot read kernels/%s", name);
        return -1;
    }
    f->len = (size_t)got;
    f->data[f->len] = '\0';
    s->total += f->len;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names of kernels/ the build takes, sorted. Returns the count, or -1 (res filled). */
static int list_kernels(int dfd, char ***names, build_result *res)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        fail(res, "INFRA_ERROR", "cannot list kernels/: %s", strerror(errno));
        return -1;
    }
    size_t n = 0, cap = 0;
    char **v = NULL;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || kind_of(e->d_name) < 0)
            continue;
        if (n == BUILD_MAX_FILES) {
            fail(res, "INVALID_SOURCE", "kernels/ holds more than %d sources and headers",
                 BUILD_MAX_FILES);
            rc = -1;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = -1;
                fail(res, "INFRA_ERROR", "out of memory");
                break;
            }
            v = nv;
        }
        if (!(v[n] = strdup(e->d_name))) {
            rc = -1;
            fail(res, "INFRA_ERROR", "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (rc != 0) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return -1;
    }
    qsort(v, n, sizeof *v, cmp_str);
    *names = v;
    return (int)n;
}

/* kernels/ *.cu|*.cpp|*.h|*.cuh|*.hpp of the workspace (top level only), read through wspath.
 * Returns 0, 1 (the workspace is at fault: res filled) or -1 (infrastructure). */
static int load_kernels(const build_request *req, snapshot *s, build_result *res)
{
    int dfd = ws_open(req->ws_root_fd, "kernels", O_RDONLY | O_DIRECTORY, 0);
    if (dfd == WS_E_NOENT || dfd == WS_E_NOTDIR)
        return 0; /* no sources: said below */
    if (dfd == WS_E_OUTSIDE) {
        fail(res, "INVALID_SOURCE", "kernels/ leads outside the workspace");
        return 1;
    }
    if (dfd < 0) {
        fail(res, "INFRA_ERROR", "cannot open kernels/: %s", ws_err_code(dfd));
        return -1;
    }
    char **names = NULL;
    int n = list_kernels(dfd, &names, res); /* closes dfd's stream, reopened below */
    if (n < 0)
        return strcmp(res->error_code, "INFRA_ERROR") == 0 ? -1 : 1;
    int rc = 0;
    dfd = n > 0 ? ws_open(req->ws_root_fd, "kernels", O_RDONLY | O_DIRECTORY, 0) : -1;
    if (n > 0 && dfd < 0) {
        fail(res, "INFRA_ERROR", "cannot open kernels/: %s", ws_err_code(dfd));
        rc = -1;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (!plain_name(names[i])) {
            char *shown = text_sanitize_utf8(names[i], strlen(names[i]));
            fail(res, "INVALID_SOURCE",
                 "kernels/%s: file names of sources and headers may "
                 "only use letters, digits, '.', '_', '-' and '+' (at most 128)",
                 shown ? shown : "?");
            free(shown);
            rc = 1;
            break;
        }
        src_file *f = snapshot_add(s);
        if (!f) {
            fail(res, "INFRA_ERROR", "out of memory");
            rc = -1;
            break;
        }
        f->kind = (src_kind)kind_of(names[i]);
        text_fmt(f->rel, sizeof f->rel, "kernels/%s", names[i]);
        text_fmt(f->obj, sizeof f->obj, "obj/kernels_%s.o", names[i]);
        rc = read_entry(dfd, names[i], s, f, res);
    }
    if (dfd >= 0)
        close(dfd);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* The trusted binding.cpp and binding_registry.h, from the template, never the workspace. */
static int load_trusted(const build_request *req, snapshot *s, build_result *res)
{
    static const char *const NAMES[] = {"binding.cpp", "binding_registry.h"};
    for (size_t i = 0; i < 2; i++) {
        char path[PATH_MAX];
        src_file *f = snapshot_add(s);
        if (!f) {
            fail(res, "INFRA_ERROR", "out of memory");
            return -1;
        }
        text_fmt(path, sizeof path, "%s/%s", req->template_dir ? req->template_dir : "", NAMES[i]);
        int rc = file_read_all(path, BUILD_MAX_SOURCE, &f->data, &f->len);
        if (rc != 0) {
            fail(res, "INFRA_ERROR", "cannot read the trusted %s: %s", path, strerror(-rc));
            return -1;
        }
        f->kind = i == 0 ? SRC_CXX : SRC_HEADER;
        f->trusted = true;
        text_fmt(f->rel, sizeof f->rel, "%s", NAMES[i]);
        text_fmt(f->obj, sizeof f->obj, "obj/%s.o", NAMES[i]);
    }
    return 0;
}

/* ---- the build directory ------------------------------------------------------------------ */

static int put_file(const char *path, const char *data, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    return close(fd);
}

/* A fresh directory under the build dir: root's and read-only to the episode, or the
 * episode's own (owned) where its compilers write. */
static int fresh_dir(const build_request *req, bool sandboxed, const char *sub, bool owned)
{
    char path[PATH_MAX];
    if (!text_fmt(path, sizeof path, "%s/%s", req->build_dir, sub))
        return errno = ENAMETOOLONG, -1;
    if (ws_remove_tree(path) != 0)
        return -1;
    if (mkdir(path, 0755) != 0 || chmod(path, 0755) != 0)
        return -1;
    if (owned && sandboxed && chown(path, req->uid, req->gid) != 0)
        return -1;
    return 0;
}

/* The build dir, clean: src/ (the snapshot), obj/ and out/ (written by the compilers: an old
 * object can never be linked), pch/ (the precompiled header, linked in when needed). */
static int prepare_dirs(const build_request *req, bool sandboxed, const snapshot *s,
                        build_result *res)
{
    struct stat st;
    if (mkdir(req->build_dir, 0755) != 0 && errno != EEXIST)
        goto infra;
    if (lstat(req->build_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        goto infra;
    }
    if (fresh_dir(req, sandboxed, "src", false) != 0 ||
        fresh_dir(req, sandboxed, "src/kernels", false) != 0 ||
        fresh_dir(req, sandboxed, "obj", true) != 0 ||
        fresh_dir(req, sandboxed, "out", true) != 0 || fresh_dir(req, sandboxed, "pch", false) != 0)
        goto infra;
    for (size_t i = 0; i < s->n; i++) {
        char path[PATH_MAX];
        if (!text_fmt(path, sizeof path, "%s/src/%s", req->build_dir, s->f[i].rel) ||
            put_file(path, s->f[i].data, s->f[i].len, 0644) != 0)
            goto infra;
    }
    return 0;
infra:
    fail(res, "INFRA_ERROR", "cannot prepare the build directory %s: %s", req->build_dir,
         strerror(errno));
    return -1;
}

/* ---- running a command -------------------------------------------------------------------- */

typedef struct runner {
    const build_request *req;
    bool sandboxed;
    double deadline; /* monotonic ms */
} runner;

typedef struct run_out {
    int exit_code;
    bool timed_out;
    bool infra; /* could not run at all (why says) */
    char why[200];
    strbuf text; /* stdout then stderr, as the command wrote them */
    double ms;
} run_out;

/* The one place a "/workspace/..." argument (alone or after -I) becomes what the command
 * sees: itself inside the sandbox, the build dir's host path outside it. */
static char *map_arg(const runner *r, const char *arg)
{
    size_t pre = strncmp(arg, "-I", 2) == 0 ? 2 : 0;
    const char *p = arg + pre;
    bool vws = strncmp(p, VWS, strlen(VWS)) == 0 && (p[strlen(VWS)] == '/' || !p[strlen(VWS)]);
    char *out = NULL;
    if (r->sandboxed || !vws)
        return strdup(arg);
    if (asprintf(&out, "%.*s%s%s", (int)pre, arg, r->req->build_dir, p + strlen(VWS)) < 0)
        return NULL;
    return out;
}

static void add_stream(strbuf *sb, const spawn_stream *s)
{
    if (s->data && s->len)
        sb_append(sb, s->data, s->len);
}

/* Why a sandboxed compiler ended abnormally, said to the agent after its output. */
static void sandbox_end_note(const sandbox_result *sr, run_out *o)
{
    const char *why = NULL;
    switch (sr->end) {
    case SBX_END_MEMORY:
        why = "the compiler was killed: it reached the compile sandbox's memory limit";
        break;
    case SBX_END_PIDS:
        why = "the compiler was killed: too many processes";
        break;
    case SBX_END_FILE_SIZE:
        why = "the compiler was killed: an output file reached the size limit";
        break;
    case SBX_END_CPU:
        why = "the compiler was killed: CPU time limit";
        break;
    case SBX_END_SIGNAL:
        why = "the compiler was killed by a signal";
        break;
    default:
        break;
    }
    if (why) {
        sb_printf(&o->text, "\n[%s (%s)]\n", why, spawn_signal_name(sr->run.term_signal));
        if (o->exit_code == 0)
            o->exit_code = 128 + sr->run.term_signal;
    }
}

static int run_sandboxed(const runner *r, const char *const *argv, int timeout_ms, run_out *o)
{
    const build_request *req = r->req;
    sandbox_cmd c = {0};
    c.profile = "compile";
    c.workspace = req->build_dir;
    c.uid = req->uid;
    c.gid = req->gid;
    c.argv = argv;
    c.timeout_ms = timeout_ms;
    c.kill_grace_ms = 1000;
    c.capture_cap = BUILD_CAPTURE;
    sandbox_result sr;
    if (sandbox_run(req->sbx, &c, &sr) != 0) {
        o->infra = true;
        text_fmt(o->why, sizeof o->why, "the compile sandbox could not start (%s: %s)",
                 sr.run.fail_stage ? sr.run.fail_stage : "?", strerror(sr.run.fail_errno));
        sandbox_result_deinit(&sr);
        return -1;
    }
    add_stream(&o->text, &sr.run.out);
    add_stream(&o->text, &sr.run.err);
    o->exit_code = sr.run.exit_code;
    o->timed_out = sr.end == SBX_END_TIMEOUT;
    if (sr.end == SBX_END_SETUP) {
        o->infra = true;
        text_fmt(o->why, sizeof o->why, "the compile sandbox could not be set up: %.150s",
                 sr.run.err.data ? sr.run.err.data : "");
    }
    sandbox_end_note(&sr, o);
    sandbox_result_deinit(&sr);
    return o->infra ? -1 : 0;
}

/* Weak mode: the same command, unsandboxed, in the build dir, with a minimal environment. */
static int run_plain(const runner *r, const char *const *argv, int timeout_ms, run_out *o)
{
    static const char *const ENV[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                                      "HOME=/tmp",
                                      "TMPDIR=/tmp",
                                      "LANG=C.UTF-8",
                                      "LC_ALL=C.UTF-8",
                                      NULL};
    spawn_opts so = SPAWN_OPTS_INIT;
    so.argv = argv;
    so.envp = ENV;
    so.cwd = r->req->build_dir;
    so.timeout_ms = timeout_ms;
    so.kill_grace_ms = 1000;
    so.capture_cap = BUILD_CAPTURE;
    so.rl.fsize_bytes = BUILD_FSIZE;
    so.rl.no_core = true;
    spawn_result sr;
    if (spawn_run(&so, &sr) != 0) {
        o->infra = true;
        text_fmt(o->why, sizeof o->why, "cannot run %s (%s: %s)", argv[0],
                 sr.fail_stage ? sr.fail_stage : "?", strerror(sr.fail_errno));
        spawn_result_deinit(&sr);
        return -1;
    }
    add_stream(&o->text, &sr.out);
    add_stream(&o->text, &sr.err);
    o->exit_code = sr.exit_code;
    o->timed_out = sr.timed_out;
    if (!sr.timed_out && sr.term_signal)
        sb_printf(&o->text, "\n[the compiler was killed by %s]\n",
                  spawn_signal_name(sr.term_signal));
    spawn_result_deinit(&sr);
    return 0;
}

/* Runs one command (written as the sandbox sees it) within the build's deadline, at most
 * cap_ms. Returns 0 when it ran (o says how it ended), -1 on an infrastructure failure. */
static int run_cmd(const runner *r, const argvec *a, int cap_ms, run_out *o)
{
    memset(o, 0, sizeof *o);
    double t0 = text_mono_ms();
    double left = r->deadline - t0;
    if (cap_ms > 0 && left > cap_ms)
        left = cap_ms;
    if (left < 1) {
        o->timed_out = true;
        o->exit_code = 124;
        return 0;
    }
    const char **argv = calloc(a->n + 1, sizeof *argv);
    int rc = argv ? 0 : -1;
    for (size_t i = 0; i < a->n && rc == 0; i++)
        if (!(argv[i] = map_arg(r, a->v[i])))
            rc = -1;
    if (rc != 0) {
        o->infra = true;
        text_fmt(o->why, sizeof o->why, "out of memory");
    } else if (r->sandboxed) {
        rc = run_sandboxed(r, argv, (int)left, o);
    } else {
        rc = run_plain(r, argv, (int)left, o);
    }
    for (size_t i = 0; argv && i < a->n; i++)
        free((char *)argv[i]);
    free(argv);
    o->ms = text_mono_ms() - t0;
    return rc;
}

/* ---- the object cache --------------------------------------------------------------------- */

static int ensure_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST) {
        struct stat st;
        return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : (errno = ENOTDIR, -1);
    }
    return -1;
}

static int copy_fd(int in, int out)
{
    char buf[1 << 16];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return -1;
            off += w;
        }
    }
}

/* Copies the untrusted file at src (O_NOFOLLOW, a regular file of at most max bytes) to dest
 * through a temporary file in dest's directory and a rename: readers see the whole file or
 * none. Returns 0, -1 (writing failed: errno) or -2 (src refused). */
static int store_file(const char *src, const char *dest, uint64_t max)
{
    int in = open(src, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        if (in >= 0)
            close(in);
        return -2;
    }
    char tmp[PATH_MAX];
    static atomic_uint seq;
    if (!text_fmt(tmp, sizeof tmp, "%s.tmp-%d-%u", dest, (int)getpid(),
                  atomic_fetch_add(&seq, 1))) {
        close(in);
        errno = ENAMETOOLONG;
        return -1;
    }
    int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    int rc = out < 0 ? -1 : copy_fd(in, out);
    int saved = errno;
    close(in);
    if (out >= 0) {
        if (rc == 0 && (fchmod(out, 0644) != 0 || fsync(out) != 0))
            rc = -1, saved = errno;
        if (close(out) != 0 && rc == 0)
            rc = -1, saved = errno;
        if (rc == 0 && rename(tmp, dest) != 0)
            rc = -1, saved = errno;
        if (rc != 0)
            unlink(tmp);
    }
    errno = saved;
    return rc;
}

int build_cache_store(const char *cache_dir, const char *key, const char *obj_path)
{
    char dir[PATH_MAX], dest[PATH_MAX];
    if (!text_fmt(dir, sizeof dir, "%s/obj", cache_dir) ||
        !text_fmt(dest, sizeof dest, "%s/%s.o", dir, key))
        return errno = ENAMETOOLONG, -1;
    if (ensure_dir(cache_dir) != 0 || ensure_dir(dir) != 0)
        return -1;
    return store_file(obj_path, dest, BUILD_MAX_OBJECT);
}

/* Puts a cached file at dest: a hard link (no copy of large objects), else a copy. */
static int place_cached(const char *cached, const char *dest)
{
    if (link(cached, dest) == 0)
        return 0;
    int rc = store_file(cached, dest, BUILD_MAX_PCH);
    return rc == 0 ? 0 : -1;
}

/* ---- the precompiled torch header --------------------------------------------------------- */

/* One PCH per toolchain and flags, built once by whichever build first needs it (the others
 * wait on the lock rather than build it again). A build that fails is remembered so it is not
 * tried again by every build of this server's life. */
static pthread_mutex_t pch_lock = PTHREAD_MUTEX_INITIALIZER;       /* held while one builds */
static pthread_mutex_t pch_state_lock = PTHREAD_MUTEX_INITIALIZER; /* guards pch_failed */
static char pch_failed[8][65];
static size_t pch_failed_next;

static bool pch_known_bad(const char *key)
{
    bool bad = false;
    pthread_mutex_lock(&pch_state_lock);
    for (size_t i = 0; i < sizeof pch_failed / sizeof pch_failed[0]; i++)
        bad |= strcmp(pch_failed[i], key) == 0;
    pthread_mutex_unlock(&pch_state_lock);
    return bad;
}

static void pch_mark_bad(const char *key)
{
    pthread_mutex_lock(&pch_state_lock);
    size_t i = pch_failed_next++ % (sizeof pch_failed / sizeof pch_failed[0]);
    text_fmt(pch_failed[i], sizeof pch_failed[i], "%s", key);
    pthread_mutex_unlock(&pch_state_lock);
}

/* The PCH's command line and key: the g++ flags of the objects that use it. */
static int pch_plan(const build_toolchain *tc, argvec *a, char key[65])
{
    av_push(a, tc->cxx);
    cxx_flags(tc, a);
    hasher h;
    h_init(&h);
    h_str(&h, "kgym-pch-v1");
    h_str(&h, tc->cxx_version);
    h_str(&h, tc->torch_version);
    h_argv(&h, a);
    av_push(a, "-x");
    av_push(a, "c++-header");
    av_push(a, VWS "/pchbuild/" PCH_HEADER);
    av_push(a, "-o");
    av_push(a, VWS "/pchbuild/" PCH_HEADER ".gch");
    return h_final(&h, key) != 0 || a->oom ? -1 : 0;
}

static void log_event(const char *level, const char *event, const char *key, const char *msg)
{
    server_log(level, event, json_pack("{s:s, s:s}", "pch_key", key, "message", msg));
}

/* Builds the PCH in <build_dir>/pchbuild (the episode's compilers' identity, the sandbox) and
 * stores it into the cache. Called with pch_lock held. */
static void pch_build(const runner *r, argvec *a, const char *key, const char *cached)
{
    const build_request *req = r->req;
    char path[PATH_MAX], built[PATH_MAX], dir[PATH_MAX];
    static const char WRAP[] = "#include <torch/extension.h>\n";
    text_fmt(path, sizeof path, "%s/pchbuild/" PCH_HEADER, req->build_dir);
    text_fmt(built, sizeof built, "%s.gch", path);
    if (fresh_dir(req, r->sandboxed, "pchbuild", true) != 0 ||
        put_file(path, WRAP, sizeof WRAP - 1, 0644) != 0)
        return;
    run_out o;
    double t0 = text_mono_ms();
    int rc = run_cmd(r, a, 600000, &o);
    if (rc == 0 && !o.timed_out && o.exit_code == 0) {
        text_fmt(dir, sizeof dir, "%s/pch", req->cache_dir);
        int st = ensure_dir(dir);
        text_fmt(dir, sizeof dir, "%s/pch/%s", req->cache_dir, key);
        if (st == 0 && ensure_dir(dir) == 0 && store_file(built, cached, BUILD_MAX_PCH) == 0) {
            char msg[96];
            text_fmt(msg, sizeof msg, "built in %.1f s", (text_mono_ms() - t0) / 1e3);
            log_event("info", "pch_built", key, msg);
        }
    } else if (rc == 0 && !o.timed_out) {
        pch_mark_bad(key); /* it will not build: compile without it from now on */
        char *msg =
            build_clean_log(o.text.data ? o.text.data : "", o.text.len, req->build_dir, 2000);
        log_event("warn", "pch_failed", key, msg ? msg : "");
        free(msg);
    }
    sb_free(&o.text);
    char sub[PATH_MAX];
    text_fmt(sub, sizeof sub, "%s/pchbuild", req->build_dir);
    ws_remove_tree(sub);
}

/* Makes <build_dir>/pch/torch_ext.h(.gch) ready, building the PCH first if nobody has.
 * Returns whether it is there; false means: compile without it. */
static bool pch_ensure(const runner *r, const build_toolchain *tc)
{
    const build_request *req = r->req;
    argvec a = {0};
    char key[65], cached[PATH_MAX], path[PATH_MAX];
    if (pch_plan(tc, &a, key) != 0) {
        av_free(&a);
        return false;
    }
    text_fmt(cached, sizeof cached, "%s/pch/%s/" PCH_HEADER ".gch", req->cache_dir, key);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double left = r->deadline - text_mono_ms();
    if (left < 0)
        left = 0;
    until.tv_sec += (time_t)(left / 1000);
    until.tv_nsec += (long)((long long)left % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    if (pthread_mutex_timedlock(&pch_lock, &until) != 0) {
        av_free(&a);
        return false;
    }
    struct stat st;
    bool bad = pch_known_bad(key);
    if (!bad && lstat(cached, &st) != 0)
        pch_build(r, &a, key, cached);
    bad = pch_known_bad(key);
    pthread_mutex_unlock(&pch_lock);
    av_free(&a);
    if (bad || lstat(cached, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    static const char WRAP[] = "#include <torch/extension.h>\n";
    text_fmt(path, sizeof path, "%s/pch/" PCH_HEADER, req->build_dir);
    if (put_file(path, WRAP, sizeof WRAP - 1, 0644) != 0)
        return false;
    text_fmt(path, sizeof path, "%s/pch/" PCH_HEADER ".gch", req->build_dir);
    return link(cached, path) == 0; /* a ~GB copy per build would cost more than it saves */
}

/* Whether a .cpp includes torch's headers: then the PCH is force-included (parsing them is
 * about a third of such a compile). Not for files that include only pybind11, like binding.cpp:
 * loading the whole of torch into them costs more than it saves (7 s -> 24 s, measured). */
static bool wants_pch(const src_file *f)
{
    return f->kind == SRC_CXX &&
           (memmem(f->data, f->len, "torch/", 6) || memmem(f->data, f->len, "ATen/", 5));
}

/* ---- compile units ------------------------------------------------------------------------ */

typedef struct unit {
    const src_file *src;
    argvec argv; /* as the sandbox sees it */
    char key[65];
    bool pch; /* -include of the PCH in argv */
    bool cached, skipped, ok;
    run_out out;
} unit;

static const char *base_name(const char *rel)
{
    const char *slash = strrchr(rel, '/');
    return slash ? slash + 1 : rel;
}

/* Whether text (not NUL-terminated) may #include a file called name: an #include "..." or
 * <...> whose target's last component is name, or any #include through a macro
 * (`#include KERNEL_FILE`), which could name anything. Directives inside comments count too: a
 * needless rebuild, never a stale object. */
static bool may_include(const char *text, size_t len, const char *name)
{
    size_t name_len = strlen(name);
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '#')
            continue;
        size_t j = i + 1;
        while (j < len && (text[j] == ' ' || text[j] == '\t'))
            j++;
        if (j + 7 > len || memcmp(text + j, "include", 7) != 0)
            continue;
        j += 7;
        while (j < len && (text[j] == ' ' || text[j] == '\t'))
            j++;
        if (j >= len || (text[j] != '"' && text[j] != '<'))
            return true; /* a macro include */
        char close = text[j] == '"' ? '"' : '>';
        size_t start = ++j;
        while (j < len && text[j] != close && text[j] != '\n')
            j++;
        size_t last = start; /* the target's last path component */
        for (size_t k = start; k < j; k++)
            if (text[k] == '/')
                last = k + 1;
        if (j - last == name_len && memcmp(text + last, name, name_len) == 0)
            return true;
    }
    return false;
}

/* Marks in `in` the files the unit may include: every header (conservative), and each source
 * (.cu/.cpp) that the unit, a header or a source already marked may #include, to a fixpoint
 * (an `#include "other.cu"` chain). */
static void mark_included_sources(const snapshot *s, const src_file *own, bool *in)
{
    for (size_t i = 0; i < s->n; i++)
        in[i] = &s->f[i] == own || s->f[i].kind == SRC_HEADER;
    for (bool grew = true; grew;) {
        grew = false;
        for (size_t i = 0; i < s->n; i++) {
            if (in[i])
                continue;
            const char *name = base_name(s->f[i].rel);
            for (size_t j = 0; j < s->n && !in[i]; j++)
                in[i] = in[j] && may_include(s->f[j].data, s->f[j].len, name);
            grew |= in[i];
        }
    }
}

/* The hash of every file the unit may include from the snapshot. The trusted binding.cpp
 * reaches only trusted headers (its quoted include finds src/binding_registry.h first), so
 * its object does not depend on the workspace and is shared by every episode. Conservative
 * for the agent's files: any header edit recompiles them all, and so does an edit of another
 * source the unit (or a header) names, since it may `#include "other.cu"`. */
static int h_headers(hasher *h, const snapshot *s, const src_file *own)
{
    bool *in = calloc(s->n ? s->n : 1, sizeof *in);
    if (!in)
        return -1;
    mark_included_sources(s, own, in);
    for (size_t i = 0; i < s->n; i++) {
        const src_file *f = &s->f[i];
        if (f == own || !in[i] || (own->trusted && !f->trusted) ||
            (own->trusted && f->kind != SRC_HEADER))
            continue;
        h_str(h, f->rel);
        h_field(h, f->data, f->len);
    }
    free(in);
    return 0;
}

/* The unit's command line and cache key: the source's path and text, the headers, the exact
 * command (the output path aside), the compilers' and torch's versions, the architecture. */
static int unit_plan(unit *u, const build_toolchain *tc, const snapshot *s, bool sandboxed,
                     bool pch)
{
    av_free(&u->argv);
    argvec *a = &u->argv;
    u->pch = pch;
    if (u->src->kind == SRC_CU) {
        av_push(a, tc->nvcc);
        nvcc_flags(tc, a);
    } else {
        av_push(a, tc->cxx);
        cxx_flags(tc, a);
        if (pch) {
            av_push(a, "-include");
            av_push(a, VWS "/pch/" PCH_HEADER);
        }
    }
    av_push(a, "-c");
    av_pushf(a, VWS "/src/%s", u->src->rel);
    hasher h;
    h_init(&h);
    h_str(&h, "kgym-obj-v1");
    h_str(&h, sandboxed ? "sandboxed" : "weak");
    h_str(&h, u->src->rel);
    h_field(&h, u->src->data, u->src->len);
    if (h_headers(&h, s, u->src) != 0)
        h.bad = true;
    h_argv(&h, a);
    h_str(&h, u->src->kind == SRC_CU ? tc->nvcc_version : "");
    h_str(&h, tc->cxx_version);
    h_str(&h, tc->torch_version);
    h_str(&h, tc->cuda_arch);
    av_push(a, "-o");
    av_pushf(a, VWS "/%s", u->src->obj);
    return h_final(&h, u->key) != 0 || a->oom ? -1 : 0;
}

static void host_path(const build_request *req, const char *rel, char *out, size_t cap)
{
    text_fmt(out, cap, "%s/%s", req->build_dir, rel);
}

static void cache_path(const build_request *req, const char *key, char *out, size_t cap)
{
    text_fmt(out, cap, "%s/obj/%s.o", req->cache_dir, key);
}

/* Takes the unit's object from the cache when it is there. */
static bool take_cached(const build_request *req, unit *u)
{
    char cached[PATH_MAX], dest[PATH_MAX];
    struct stat st;
    cache_path(req, u->key, cached, sizeof cached);
    if (lstat(cached, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    host_path(req, u->src->obj, dest, sizeof dest);
    unlink(dest);
    if (place_cached(cached, dest) != 0)
        return false;
    objcache_touch(cached); /* used now: the last object the cap would remove */
    return true;
}

/* Counts the unit's object into the build's total; past BUILD_MAX_BUILT the unit fails and its
 * object goes, before the cache copies it: a few bytes of source (`char big[300 << 20] =
 * {1};`, red team) must not turn into gigabytes of host disk. */
static bool within_build_total(const runner *r, unit *u, const char *obj,
                               atomic_uint_least64_t *built)
{
    uint64_t cap = r->req->max_built_bytes ? r->req->max_built_bytes : BUILD_MAX_BUILT;
    struct stat st;
    uint64_t size = lstat(obj, &st) == 0 ? (uint64_t)st.st_size : 0;
    uint64_t total = atomic_fetch_add(built, size) + size;
    if (total <= cap)
        return true;
    atomic_fetch_sub(built, size); /* not built after all: the other units are judged alone */
    unlink(obj);
    u->ok = false;
    u->out.exit_code = 1;
    sb_printf(&u->out.text,
              "%s: the build's objects pass %llu KiB together (this one: %llu KiB); "
              "kgym builds at most %llu KiB of objects per Compile\n",
              u->src->rel, (unsigned long long)(total >> 10), (unsigned long long)(size >> 10),
              (unsigned long long)(cap >> 10));
    return false;
}

/* Compiles one unit and, when it worked, stores its object in the cache. */
static void compile_unit(const runner *r, unit *u, atomic_uint_least64_t *built)
{
    if (run_cmd(r, &u->argv, 0, &u->out) != 0)
        return;
    u->ok = !u->out.timed_out && u->out.exit_code == 0;
    if (!u->ok)
        return;
    char obj[PATH_MAX];
    host_path(r->req, u->src->obj, obj, sizeof obj);
    if (!within_build_total(r, u, obj, built))
        return;
    int rc = build_cache_store(r->req->cache_dir, u->key, obj);
    struct stat st;
    if (rc == 0 && lstat(obj, &st) == 0)
        objcache_added(r->req->objects, (uint64_t)st.st_size);
    if (rc == -2) { /* what the compiler left is no object: never linked, never cached */
        u->ok = false;
        u->out.exit_code = 1;
        sb_printf(&u->out.text, "%s: the compiler produced no regular object file\n", u->src->rel);
    } else if (rc != 0) {
        char msg[PATH_MAX + 64];
        text_fmt(msg, sizeof msg, "cannot write the object cache %s: %s", r->req->cache_dir,
                 strerror(errno));
        server_log("warn", "build_cache", json_pack("{s:s}", "message", msg));
    }
}

typedef struct pool {
    const runner *r;
    unit **todo;
    size_t n;
    atomic_size_t next;
    atomic_uint_least64_t built; /* bytes of the objects compiled so far */
} pool;

static void *pool_worker(void *arg)
{
    pool *p = arg;
    size_t i;
    while ((i = atomic_fetch_add(&p->next, 1)) < p->n)
        compile_unit(p->r, p->todo[i], &p->built);
    return NULL;
}

/* Compiles the misses, jobs at a time (each its own sandbox). */
static void compile_all(const runner *r, unit **todo, size_t n, int jobs)
{
    pool p = {.r = r, .todo = todo, .n = n};
    atomic_init(&p.next, 0);
    atomic_init(&p.built, 0);
    size_t k = jobs < 1 ? 1 : (size_t)jobs;
    if (k > n)
        k = n;
    pthread_t th[64];
    size_t started = 0;
    for (size_t i = 1; i < k && i < 64; i++)
        if (pthread_create(&th[started], NULL, pool_worker, &p) == 0)
            started++;
    pool_worker(&p); /* this thread works too: a failed pthread_create only slows it down */
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

/* ---- the build ---------------------------------------------------------------------------- */

char *build_clean_log(const char *text, size_t len, const char *build_dir, size_t cap)
{
    char host[PATH_MAX + 8] = "";
    if (build_dir && build_dir[0])
        text_fmt(host, sizeof host, "%s/src/", build_dir);
    const char *pats[2] = {VWS "/src/", host};
    strbuf sb = STRBUF_INIT;
    size_t i = 0;
    while (i < len) {
        /* the earliest occurrence of either prefix; the text up to it is kept */
        const char *hit = NULL;
        size_t skip = 0;
        for (int k = 0; k < 2; k++) {
            size_t n = strlen(pats[k]);
            const char *m = n ? memmem(text + i, len - i, pats[k], n) : NULL;
            if (m && (!hit || m < hit || (m == hit && n > skip))) {
                hit = m;
                skip = n;
            }
        }
        size_t keep = hit ? (size_t)(hit - (text + i)) : len - i;
        if (sb_append(&sb, text + i, keep) != 0)
            break;
        i += keep + skip;
    }
    char *clean = text_sanitize_utf8(sb.data ? sb.data : "", sb.len);
    sb_free(&sb);
    if (!clean || cap == 0)
        return clean;
    bool cut;
    char *capped = text_cap_head_tail(clean, strlen(clean), cap, &cut);
    free(clean);
    return capped;
}

static void init_result(build_result *res)
{
    memset(res, 0, sizeof *res);
    res->log = strdup("");
    res->sources = json_array();
}

typedef struct build {
    const build_toolchain *tc;
    const build_request *req;
    runner r;
    snapshot s;
    unit *u;
    size_t nu;
    char pch_key[65]; /* "" when torch's headers are unknown (no PCH) */
    strbuf log;       /* everything the compilers said, in build order */
} build;

/* One unit per compilable source: binding.cpp first, then kernels/ by name. */
static int plan_units(build *b, build_result *res)
{
    b->u = calloc(b->s.n, sizeof *b->u);
    if (!b->u) {
        fail(res, "INFRA_ERROR", "out of memory");
        return -1;
    }
    bool any_kernel = false;
    for (size_t i = 0; i < b->s.n; i++) {
        const src_file *f = &b->s.f[i];
        if (f->kind == SRC_HEADER)
            continue;
        any_kernel |= !f->trusted;
        unit *u = &b->u[b->nu++];
        u->src = f;
        u->skipped = f->kind == SRC_CU && !b->tc->nvcc[0];
        bool pch = wants_pch(f) && b->pch_key[0] && !pch_known_bad(b->pch_key);
        if (!u->skipped && unit_plan(u, b->tc, &b->s, b->r.sandboxed, pch) != 0) {
            fail(res, "INFRA_ERROR", "out of memory");
            return -1;
        }
    }
    if (!any_kernel) {
        fail(res, "NO_SOURCES",
             "No sources to compile: put your kernels in kernels/*.cu "
             "and their PyTorch bindings in kernels/*_binding.cpp (directly inside kernels/, "
             "not in subdirectories).");
        return 1;
    }
    return 0;
}

/* Takes the hits; ready the PCH if a miss needs it (or plan those without it). Returns the
 * number of misses put in todo. */
static size_t plan_misses(build *b, unit **todo, build_result *res)
{
    size_t n = 0;
    bool need_pch = false;
    for (size_t i = 0; i < b->nu; i++) {
        unit *u = &b->u[i];
        if (u->skipped)
            continue;
        u->cached = take_cached(b->req, u);
        if (!u->cached) {
            need_pch |= u->pch;
            todo[n++] = u;
        }
    }
    if (need_pch && !pch_ensure(&b->r, b->tc)) {
        /* no PCH: the misses that wanted it compile without (their key changes with argv) */
        for (size_t i = 0; i < n; i++) {
            unit *u = todo[i];
            if (u->pch && unit_plan(u, b->tc, &b->s, b->r.sandboxed, false) != 0)
                fail(res, "INFRA_ERROR", "out of memory");
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            todo[i]->cached = take_cached(b->req, todo[i]);
            if (!todo[i]->cached)
                todo[m++] = todo[i];
        }
        n = m;
    }
    return n;
}

/* The compilers' output in build order; the build's verdict from the units. Returns 0 when
 * every unit is ok, 1 when one failed or timed out (res filled), -1 on infrastructure. */
static int gather(build *b, build_result *res)
{
    int rc = 0;
    const char *timed_out = NULL;
    for (size_t i = 0; i < b->nu; i++) {
        unit *u = &b->u[i];
        json_t *e = json_pack("{s:s, s:b, s:b, s:f}", "file", u->src->rel, "cached", u->cached,
                              "ok", u->cached || u->skipped || u->ok, "ms", u->out.ms);
        if (u->skipped)
            json_object_set_new(e, "skipped", json_true());
        json_array_append_new(res->sources, e);
        if (u->cached || u->skipped)
            continue;
        res->compiled++;
        if (u->out.infra) {
            fail(res, "INFRA_ERROR", "%s: %s", u->src->rel, u->out.why);
            return -1;
        }
        if (u->out.text.len)
            sb_append(&b->log, u->out.text.data, u->out.text.len);
        if (u->out.timed_out && !timed_out)
            timed_out = u->src->rel;
        if (!u->ok)
            rc = 1;
    }
    for (size_t i = 0; i < b->nu; i++)
        res->cached += b->u[i].cached;
    if (timed_out) {
        sb_printf(&b->log, "\n[the build timed out while compiling %s: limit %.0f s]\n", timed_out,
                  b->req->timeout_ms / 1e3);
        res->error_code = "TIMEOUT";
    } else if (rc) {
        res->error_code = "COMPILE_ERROR";
    }
    return rc;
}

/* Links the objects into out/cuda_extension.so; the .cu objects and CUDA libraries only in
 * CUDA mode. The module's key hashes the objects' keys and the link command. */
static int link_module(build *b, build_result *res)
{
    const build_toolchain *tc = b->tc;
    argvec a = {0};
    av_push(&a, tc->cxx);
    av_push(&a, "-shared");
    av_push(&a, "-o");
    av_push(&a, VWS "/out/cuda_extension.so");
    hasher h;
    h_init(&h);
    h_str(&h, "kgym-link-v1");
    for (size_t i = 0; i < b->nu; i++) {
        const unit *u = &b->u[i];
        if (u->skipped || (u->src->kind == SRC_CU && !b->req->link_cuda))
            continue;
        av_pushf(&a, VWS "/%s", u->src->obj);
        h_str(&h, u->key);
    }
    av_pushf(&a, "-L%s", tc->torch_lib);
    av_pushf(&a, "-Wl,-rpath,%s", tc->torch_lib);
    static const char *const LIBS[] = {"-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"};
    for (size_t i = 0; i < 4; i++)
        av_push(&a, LIBS[i]);
    if (b->req->link_cuda) {
        av_push(&a, "-lc10_cuda");
        av_push(&a, "-ltorch_cuda");
        if (tc->cuda_home[0]) {
            av_pushf(&a, "-L%s/lib64", tc->cuda_home);
            av_pushf(&a, "-Wl,-rpath,%s/lib64", tc->cuda_home);
        }
        av_push(&a, "-lcudart");
    }
    h_argv(&h, &a);
    bool oom = h_final(&h, res->key) != 0 || a.oom;
    run_out o = {0};
    int rc = oom ? -1 : run_cmd(&b->r, &a, 0, &o);
    av_free(&a);
    if (rc != 0) {
        fail(res, "INFRA_ERROR", "the link could not run: %s", oom ? "out of memory" : o.why);
        sb_free(&o.text);
        return -1;
    }
    if (o.text.len)
        sb_append(&b->log, o.text.data, o.text.len);
    sb_free(&o.text);
    if (o.timed_out || o.exit_code != 0) {
        res->error_code = o.timed_out ? "TIMEOUT" : "COMPILE_ERROR";
        return 1;
    }
    return 0;
}

/* The linked module: a regular file, never through a symlink. */
static int check_module(build *b, build_result *res)
{
    char path[PATH_MAX];
    host_path(b->req, "out/cuda_extension.so", path, sizeof path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    bool ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (fd >= 0)
        close(fd);
    if (!ok) {
        fail(res, "INFRA_ERROR", "the linker reported success but left no module at %s", path);
        return -1;
    }
    text_fmt(res->so_path, sizeof res->so_path, "%s", path);
    return 0;
}

static void build_free(build *b)
{
    for (size_t i = 0; i < b->nu; i++) {
        av_free(&b->u[i].argv);
        sb_free(&b->u[i].out.text);
    }
    free(b->u);
    snapshot_free(&b->s);
    sb_free(&b->log);
}

/* Hands the compilers' output to res->log, paths rewritten and capped. */
static void finish_log(build *b, build_result *res)
{
    char *clean = build_clean_log(b->log.data ? b->log.data : "", b->log.len, b->req->build_dir,
                                  b->req->log_cap);
    if (clean) {
        free(res->log);
        res->log = clean;
    }
}

int build_extension(const build_toolchain *tc, const build_request *req, build_result *res)
{
    init_result(res);
    double t0 = text_mono_ms();
    build b = {.tc = tc, .req = req};
    b.r.req = req;
    b.r.sandboxed = req->sbx && req->sbx->active && req->uid != 0 && req->gid != 0;
    b.r.deadline = t0 + (req->timeout_ms > 0 ? req->timeout_ms : 600000);
    int rc = !res->log || !res->sources ? -1 : 0;
    if (rc != 0)
        fail(res, "INFRA_ERROR", "out of memory");
    if (rc == 0 && tc->torch_include[0][0]) {
        argvec pa = {0};
        if (pch_plan(tc, &pa, b.pch_key) != 0)
            b.pch_key[0] = '\0';
        av_free(&pa);
    }
    if (rc == 0)
        rc = load_trusted(req, &b.s, res);
    if (rc == 0)
        rc = load_kernels(req, &b.s, res);
    if (rc == 0)
        rc = plan_units(&b, res);
    if (rc == 0)
        rc = prepare_dirs(req, b.r.sandboxed, &b.s, res);
    unit **todo = rc == 0 ? calloc(b.nu + 1, sizeof *todo) : NULL;
    if (rc == 0 && !todo) {
        fail(res, "INFRA_ERROR", "out of memory");
        rc = -1;
    }
    if (rc == 0) {
        size_t n = plan_misses(&b, todo, res);
        rc = res->error_code ? -1 : 0;
        if (rc == 0 && n)
            compile_all(&b.r, todo, n, req->jobs);
        if (rc == 0)
            rc = gather(&b, res);
        if (rc == 0)
            rc = link_module(&b, res);
        if (rc == 0)
            rc = check_module(&b, res);
        if (rc >= 0)
            finish_log(&b, res);
    }
    free(todo);
    build_free(&b);
    res->ok = rc == 0;
    if (res->ok)
        res->error_code = NULL;
    else if (!res->error_code)
        res->error_code = "INFRA_ERROR";
    if (!res->ok)
        res->so_path[0] = '\0';
    if (!res->ok)
        res->key[0] = '\0';
    res->ms = text_mono_ms() - t0;
    return rc < 0 ? -1 : 0;
}

void build_result_deinit(build_result *res)
{
    free(res->log);
    json_decref(res->sources);
    res->log = NULL;
    res->sources = NULL;
}

/* ---- the toolchain probe ------------------------------------------------------------------ */

static const char PROBE_PY[] =
    "import json, os, sys, sysconfig\n"
    "try:\n"
    "    import torch\n"
    "except Exception as e:\n"
    "    print(json.dumps({'error': '%s: %s' % (type(e).__name__, e)})); sys.exit(0)\n"
    "d = os.path.dirname(torch.__file__)\n"
    "inc = sysconfig.get_paths()['include']\n"
    "print(json.dumps({'torch_version': torch.__version__,\n"
    "  'include': [os.path.join(d, 'include'),\n"
    "              os.path.join(d, 'include', 'torch', 'csrc', 'api', 'include')],\n"
    "  'lib': os.path.join(d, 'lib'), 'python_include': inc,\n"
    "  'python_h': os.path.exists(os.path.join(inc, 'Python.h')),\n"
    "  'abi': int(bool(torch._C._GLIBCXX_USE_CXX11_ABI)),\n"
    "  'cuda': os.path.exists(os.path.join(d, 'lib', 'libc10_cuda.so'))}))\n";

/* Runs argv; its stdout into *out (malloc'd). Returns the exit code, or -1 (errbuf says). */
static int probe_run(const char *const *argv, char **out, char *err, size_t errcap)
{
    static const char *const ENV[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp",
                                      "LANG=C.UTF-8", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = ENV;
    o.timeout_ms = 180000;
    o.capture_cap = 1 << 20;
    spawn_result r;
    *out = NULL;
    if (spawn_run(&o, &r) != 0) {
        text_fmt(err, errcap, "cannot run %s: %s", argv[0], strerror(r.fail_errno));
        spawn_result_deinit(&r);
        return -1;
    }
    int code = r.timed_out ? 124 : r.exit_code;
    if (code != 0) {
        size_t n = r.err.len > 300 ? 300 : r.err.len;
        text_fmt(err, errcap, "%s exited with %d: %.*s", argv[0], code, (int)n,
                 r.err.data + r.err.len - n);
    }
    *out = r.out.data;
    r.out.data = NULL;
    spawn_result_deinit(&r);
    return code;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    text_fmt(dst, cap, "%s", src ? src : "");
}

/* The first (last: true, the last) non-empty line of text. */
static void pick_line(const char *text, bool last, char *out, size_t cap)
{
    out[0] = '\0';
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n) {
            text_fmt(out, cap, "%.*s", (int)n, p);
            if (!last)
                return;
        }
        p = nl ? nl + 1 : NULL;
    }
}

static int probe_torch(build_toolchain *tc, char *err, size_t errcap)
{
    const char *argv[] = {tc->python, "-I", "-c", PROBE_PY, NULL};
    char *out;
    if (probe_run(argv, &out, err, errcap) != 0) {
        free(out);
        return -1;
    }
    char line[8192];
    pick_line(out, true, line, sizeof line);
    free(out);
    json_t *j = json_loads(line, 0, NULL);
    int rc = -1;
    if (!j)
        text_fmt(err, errcap, "%s printed no answer to the torch probe", tc->python);
    else if (json_object_get(j, "error"))
        text_fmt(err, errcap, "torch is not importable by %s (%s): install it (mk/venv.sh)",
                 tc->python, json_string_value(json_object_get(j, "error")));
    else if (!json_is_true(json_object_get(j, "python_h")))
        text_fmt(err, errcap, "python3-dev missing: no Python.h in %s",
                 json_string_value(json_object_get(j, "python_include")));
    else
        rc = 0;
    if (rc == 0) {
        const json_t *inc = json_object_get(j, "include");
        copy_str(tc->torch_version, sizeof tc->torch_version,
                 json_string_value(json_object_get(j, "torch_version")));
        for (int i = 0; i < 2; i++)
            copy_str(tc->torch_include[i], sizeof tc->torch_include[i],
                     json_string_value(json_array_get(inc, (size_t)i)));
        copy_str(tc->torch_lib, sizeof tc->torch_lib, json_string_value(json_object_get(j, "lib")));
        copy_str(tc->python_include, sizeof tc->python_include,
                 json_string_value(json_object_get(j, "python_include")));
        tc->cxx11_abi = (int)json_integer_value(json_object_get(j, "abi"));
        tc->torch_cuda = json_is_true(json_object_get(j, "cuda"));
    }
    json_decref(j);
    return rc;
}

/* The first (last) line of `<tool> --version`. */
static int probe_version(const char *tool, bool last, char *out, size_t cap, char *err,
                         size_t errcap)
{
    const char *argv[] = {tool, "--version", NULL};
    char *text;
    int rc = probe_run(argv, &text, err, errcap);
    if (rc == 0)
        pick_line(text, last, out, cap);
    free(text);
    return rc == 0 && out[0] ? 0 : -1;
}

int build_toolchain_probe(build_toolchain *tc, const char *python, const char *cuda_home,
                          const char *arch, char *err, size_t errcap)
{
    memset(tc, 0, sizeof *tc);
    if (!python || !python[0]) {
        text_fmt(err, errcap, "no Python interpreter given");
        return -1;
    }
    copy_str(tc->python, sizeof tc->python, python);
    copy_str(tc->cuda_arch, sizeof tc->cuda_arch, arch);
    if (probe_torch(tc, err, errcap) != 0)
        return -1;
    static const char *const CXX[] = {"/usr/bin/g++", "/usr/bin/c++", "/usr/local/bin/g++"};
    for (size_t i = 0; i < 3 && !tc->cxx[0]; i++)
        if (access(CXX[i], X_OK) == 0)
            copy_str(tc->cxx, sizeof tc->cxx, CXX[i]);
    if (!tc->cxx[0]) {
        text_fmt(err, errcap, "no C++ compiler: install g++");
        return -1;
    }
    if (probe_version(tc->cxx, false, tc->cxx_version, sizeof tc->cxx_version, err, errcap) != 0)
        return -1;
    char nvcc[PATH_MAX + 16], why[256];
    if (cuda_home && cuda_home[0] && text_fmt(nvcc, sizeof nvcc, "%s/bin/nvcc", cuda_home) &&
        access(nvcc, X_OK) == 0 &&
        probe_version(nvcc, true, tc->nvcc_version, sizeof tc->nvcc_version, why, sizeof why) ==
            0) {
        copy_str(tc->nvcc, sizeof tc->nvcc, nvcc);
        copy_str(tc->cuda_home, sizeof tc->cuda_home, cuda_home);
    }
    return 0;
}

json_t *build_toolchain_json(const build_toolchain *tc)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:b, s:i}", "python", tc->python, "torch_version",
                          tc->torch_version, "cxx", tc->cxx, "cxx_version", tc->cxx_version,
                          "torch_cuda", tc->torch_cuda, "cxx11_abi", tc->cxx11_abi);
    if (j && tc->nvcc[0]) {
        json_object_set_new(j, "nvcc", json_string(tc->nvcc));
        json_object_set_new(j, "nvcc_version", json_string(tc->nvcc_version));
        json_object_set_new(j, "cuda_home", json_string(tc->cuda_home));
    }
    if (j && tc->cuda_arch[0])
        json_object_set_new(j, "cuda_arch", json_string(tc->cuda_arch));
    return j;
}
