/* build: the Compile tool's engine. It builds the Python module `cuda_extension` of one
 * workspace by driving g++ and nvcc directly (never torch.utils.cpp_extension, which rebuilds
 * everything): one object per source, each compiled inside the compile sandbox, each cached in a
 * content-addressed object cache shared by all episodes.
 *
 * Trust: the cache key is a SHA-256 the server computes over everything that decides an object
 * (the source, every header of the workspace snapshot, the flags, the compiler's and torch's
 * versions); only the server writes the cache, after reading the object the sandboxed compiler
 * produced (O_NOFOLLOW, regular file), so one episode cannot plant an object for another. The
 * fixed files (binding.cpp, binding_registry.h) always come from the server's trusted template,
 * whatever the workspace holds. */
#ifndef KGYM_BUILD_H
#define KGYM_BUILD_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sandbox;
struct objcache;

/* What the machine builds with, probed once at server start. */
typedef struct build_toolchain {
    char python[PATH_MAX];  /* the interpreter whose torch the extension is built for */
    char torch_version[64]; /* torch.__version__ */
    char torch_include[2]
                      [PATH_MAX]; /* <torch>/include and <torch>/include/torch/csrc/api/include */
    char torch_lib[PATH_MAX];     /* <torch>/lib */
    char python_include[PATH_MAX];
    int cxx11_abi;      /* torch._C._GLIBCXX_USE_CXX11_ABI */
    bool torch_cuda;    /* torch was built with CUDA (libc10_cuda.so present) */
    char cxx[PATH_MAX]; /* g++ */
    char cxx_version[128];
    char nvcc[PATH_MAX]; /* "" when there is no CUDA toolkit */
    char nvcc_version[128];
    char cuda_home[PATH_MAX];
    char cuda_arch[32]; /* e.g. "sm_90a": -gencode=arch=compute_90a,code=sm_90a */
} build_toolchain;

/* Probes python (torch, its include and lib dirs, Python.h), g++ and, under cuda_home (may be
 * "" or NULL: none), nvcc. arch: the GPU architecture to build .cu files for ("sm_90a"), or
 * NULL/"" for none (CPU mode: .cu files are compiled for a default architecture only so that
 * their errors are caught, and are not linked). Returns 0, or -1 with err filled. */
int build_toolchain_probe(build_toolchain *tc, const char *python, const char *cuda_home,
                          const char *arch, char *err, size_t errcap);
/* {python, torch_version, cxx, cxx_version, nvcc?, nvcc_version?, cuda_arch?} for /v1/health. */
json_t *build_toolchain_json(const build_toolchain *tc);

typedef struct build_request {
    int ws_root_fd;           /* the workspace, read only through wspath (symlink-safe) */
    const char *template_dir; /* the trusted binding.cpp and binding_registry.h */
    const char *build_dir;    /* this episode's scratch dir, outside the workspace (created) */
    const char *cache_dir;    /* the shared object cache (created); only the server writes it */
    struct objcache *objects; /* its size cap (objcache.h); NULL: none */
    struct sandbox *sbx; /* compiles run in its "compile" profile; NULL/inactive: unsandboxed */
    uid_t uid;           /* the episode's identity inside the sandbox */
    gid_t gid;
    int timeout_ms;           /* for the whole build */
    int jobs;                 /* compiles run in parallel (>= 1) */
    bool link_cuda;           /* link the .cu objects and CUDA runtime (GPU mode) */
    size_t log_cap;           /* cap on the compiler output returned (head and tail kept) */
    uint64_t max_built_bytes; /* the objects one build may compile, together (0: 1 GiB) */
} build_request;

typedef struct build_result {
    bool ok;
    const char *error_code; /* NULL when ok; "COMPILE_ERROR", "NO_SOURCES", "TIMEOUT",
                               "INFRA_ERROR" otherwise; also "INVALID_SOURCE" (a source or
                               header of kernels/ that is a symlink, not a regular file, too
                               large, too many, or badly named) */
    char *log;              /* compiler output, verbatim and capped (malloc'd, never NULL) */
    json_t *sources;        /* [{file, cached, ok, ms}] in build order */
    char so_path[PATH_MAX]; /* the linked module, <build_dir>/out/cuda_extension.so */
    char key[65];           /* SHA-256 hex of the linked module's inputs */
    double ms;              /* wall time of the whole build */
    int compiled, cached;   /* objects compiled now, objects taken from the cache */
} build_result;

/* Builds the workspace's extension: binding.cpp (trusted copy) + kernels/ *.cu|*.cpp (not
 * recursive). Returns 0 when the build ran (res->ok says whether it succeeded), -1 on an
 * infrastructure failure (res->error_code "INFRA_ERROR", res->log says why). */
int build_extension(const build_toolchain *tc, const build_request *req, build_result *res);
void build_result_deinit(build_result *res);

struct tool_env;
/* The Compile tool's build of one episode's workspace (defined in env/tools/compile.c, shared
 * with Verify, Profile and Submit, which rebuild before evaluating): the request from the
 * episode's build dir, the server's cache, template, toolchain and sandbox. Returns as
 * build_extension; -1 with "INFRA_ERROR" also when the server cannot evaluate. */
int build_for_episode(const struct tool_env *env, build_result *res);

/* ---- for tests ---------------------------------------------------------------------------- */

/* Copies the object the (sandboxed, untrusted) compiler wrote at obj_path into the cache as
 * <cache_dir>/obj/<key>.o: opened with O_NOFOLLOW, must be a regular file of at most 512 MiB,
 * written through a temporary file and a rename, root's, 0644. Returns 0, -1 when the cache
 * could not be written (errno), -2 when the object is refused (missing, a symlink, not a
 * regular file, too large). */
int build_cache_store(const char *cache_dir, const char *key, const char *obj_path);

/* The compiler output as the agent reads it: "/workspace/src/" (inside the sandbox) and
 * "<build_dir>/src/" (unsandboxed; build_dir may be NULL) removed, so that paths read
 * "kernels/foo.cu:12:3: error: ...", invalid UTF-8 replaced, capped to cap bytes with the head
 * and the tail kept (cap 0: no cap). Never NULL unless memory ran out. */
char *build_clean_log(const char *text, size_t len, const char *build_dir, size_t cap);

#endif
