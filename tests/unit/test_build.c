/* The Compile engine (env/harness/build.c) and the Compile tool, without torch: a fake
 * toolchain whose "torch" is a directory of empty libraries, plain C++ kernels and a plain C++
 * stand-in for the trusted binding.cpp, built unsandboxed with the host's g++. Checks the
 * cache keys (what recompiles and what does not), the refusals (symlinks, odd names, no
 * sources), the error log as the agent reads it, the object cache's O_NOFOLLOW store, and the
 * linked module itself (dlopen'd and called). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <time.h>
#include <sys/stat.h>

#include "fs_fixture.h"
#include "harness/build.h"
#include "harness/eval.h"
#include "harness/objcache.h"
#include "spawn.h"
#include "util/digest.h"

typedef struct bfx {
    fixture fx;
    char tpl[128], build[128], cache[128], lib[128];
    build_toolchain tc;
    build_request req;
} bfx;

static const char BINDING_CPP[] = "#include \"binding_registry.h\"\n"
                                  "extern \"C\" int kgym_binding_id(void) { return KGYM_REG; }\n";
static const char REGISTRY_H[] = "#pragma once\n#define KGYM_REG 7\n";

static void put_host(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* An empty shared library standing in for one of torch's. */
static void fake_lib(const char *dir, const char *name)
{
    char out[256];
    snprintf(out, sizeof out, "%s/lib%s.so", dir, name);
    const char *argv[] = {"/usr/bin/g++", "-shared", "-x", "c++", "/dev/null", "-o", out, NULL};
    static const char *const ENV[] = {"PATH=/usr/bin:/bin", NULL};
    spawn_opts o = SPAWN_OPTS_INIT;
    o.argv = argv;
    o.envp = ENV;
    o.timeout_ms = 60000;
    spawn_result r;
    assert_int_equal(spawn_run(&o, &r), 0);
    assert_int_equal(r.exit_code, 0);
    spawn_result_deinit(&r);
}

static int setup(void **state)
{
    bfx *b = calloc(1, sizeof *b);
    void *inner = NULL;
    if (!b || fx_setup(&inner) != 0)
        return -1;
    b->fx = *(fixture *)inner;
    free(inner);
    b->fx.env.root_fd = b->fx.root_fd;
    b->fx.env.root_path = b->fx.root;
    b->fx.env.episode_dir = b->fx.outside;
    b->fx.env.limits = &b->fx.limits;
    snprintf(b->tpl, sizeof b->tpl, "%s/template", b->fx.outside);
    snprintf(b->build, sizeof b->build, "%s/build", b->fx.outside);
    snprintf(b->cache, sizeof b->cache, "%s/cache", b->fx.outside);
    snprintf(b->lib, sizeof b->lib, "%s/lib", b->fx.outside);
    mkdir(b->tpl, 0755);
    mkdir(b->cache, 0700);
    mkdir(b->lib, 0755);
    char path[256];
    snprintf(path, sizeof path, "%s/binding.cpp", b->tpl);
    put_host(path, BINDING_CPP);
    snprintf(path, sizeof path, "%s/binding_registry.h", b->tpl);
    put_host(path, REGISTRY_H);
    static const char *const LIBS[] = {"c10", "torch", "torch_cpu", "torch_python"};
    for (size_t i = 0; i < 4; i++)
        fake_lib(b->lib, LIBS[i]);
    snprintf(b->tc.cxx, sizeof b->tc.cxx, "/usr/bin/g++");
    snprintf(b->tc.cxx_version, sizeof b->tc.cxx_version, "g++ (test)");
    snprintf(b->tc.torch_version, sizeof b->tc.torch_version, "0.0-fake");
    snprintf(b->tc.torch_lib, sizeof b->tc.torch_lib, "%s", b->lib);
    b->tc.cxx11_abi = 1;
    b->req = (build_request){.ws_root_fd = b->fx.root_fd,
                             .template_dir = b->tpl,
                             .build_dir = b->build,
                             .cache_dir = b->cache,
                             .timeout_ms = 120000,
                             .jobs = 2,
                             .log_cap = 30000};
    *state = b;
    return 0;
}

static int teardown(void **state)
{
    bfx *b = *state;
    fixture *fx = malloc(sizeof *fx);
    *fx = b->fx;
    void *inner = fx;
    free(b);
    return fx_teardown(&inner);
}

static build_result build(bfx *b)
{
    build_result r;
    int rc = build_extension(&b->tc, &b->req, &r);
    assert_non_null(r.log);
    assert_non_null(r.sources);
    if (rc != 0)
        fail_msg("infrastructure failure: %s", r.log);
    return r;
}

static void assert_built(const build_result *r, int compiled, int cached)
{
    if (!r->ok)
        fail_msg("build failed (%s): %s", r->error_code, r->log);
    assert_null(r->error_code);
    assert_int_equal(r->compiled, compiled);
    assert_int_equal(r->cached, cached);
    assert_int_equal(strlen(r->key), 64);
    struct stat st;
    assert_int_equal(lstat(r->so_path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
}

/* A kernel source exporting kgym_<name>() = value + the header's constant. */
static void put_kernel(bfx *b, const char *name, int value)
{
    char rel[128], text[512];
    snprintf(rel, sizeof rel, "kernels/%s.cpp", name);
    snprintf(text, sizeof text,
             "#include \"common.h\"\n#include \"../binding_registry.h\"\n"
             "extern \"C\" int kgym_%s(void) { return %d + COMMON + KGYM_REG; }\n",
             name, value);
    fx_puts(&b->fx, rel, text);
}

static int call_module(const char *so, const char *fn)
{
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fail_msg("dlopen %s: %s", so, dlerror());
    int (*f)(void) = (int (*)(void))dlsym(h, fn);
    assert_non_null(f);
    int v = f();
    dlclose(h);
    return v;
}

static void test_build_links_a_module(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    build_result r = build(b);
    assert_built(&r, 2, 0);
    json_t *s0 = json_array_get(r.sources, 0), *s1 = json_array_get(r.sources, 1);
    assert_string_equal(json_string_value(json_object_get(s0, "file")), "binding.cpp");
    assert_string_equal(json_string_value(json_object_get(s1, "file")), "kernels/add.cpp");
    assert_true(json_is_false(json_object_get(s1, "cached")));
    assert_true(json_is_true(json_object_get(s1, "ok")));
    assert_int_equal(call_module(r.so_path, "kgym_add"), 108);
    assert_int_equal(call_module(r.so_path, "kgym_binding_id"), 7);
    /* the snapshot sits in the build dir, root's and read-only to the episode */
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/src/kernels/common.h", b->build);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    build_result_deinit(&r);
}

static void test_rebuild_takes_the_cache(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    put_kernel(b, "mul", 2);
    build_result r1 = build(b);
    assert_built(&r1, 3, 0);
    build_result r2 = build(b);
    assert_built(&r2, 0, 3);
    assert_string_equal(r1.key, r2.key);
    assert_int_equal(call_module(r2.so_path, "kgym_mul"), 109);
    /* an unrelated file changes nothing */
    fx_puts(&b->fx, "kernels/notes.txt", "hello\n");
    fx_puts(&b->fx, "model_new.py", "import torch\n");
    build_result r3 = build(b);
    assert_built(&r3, 0, 3);
    assert_string_equal(r1.key, r3.key);
    /* one source changes: only it recompiles */
    put_kernel(b, "mul", 3);
    build_result r4 = build(b);
    assert_built(&r4, 1, 2);
    assert_string_not_equal(r1.key, r4.key);
    assert_int_equal(call_module(r4.so_path, "kgym_mul"), 110);
    build_result_deinit(&r1);
    build_result_deinit(&r2);
    build_result_deinit(&r3);
    build_result_deinit(&r4);
}

/* Sets every cached object's mtime to the epoch: "never used". */
static void age_cache(bfx *b)
{
    char dir[160], path[512];
    snprintf(dir, sizeof dir, "%s/obj", b->cache);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            struct timespec ts[2] = {{.tv_sec = 1}, {.tv_sec = 1}};
            assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
        }
    closedir(d);
}

/* Counts the cached objects; *oldest gets the earliest mtime among them. */
static int cached_objects(bfx *b, time_t *oldest)
{
    char dir[160], path[512];
    snprintf(dir, sizeof dir, "%s/obj", b->cache);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    *oldest = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strlen(e->d_name) == 66) {
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            assert_int_equal(stat(path, &st), 0);
            *oldest = n++ == 0 || st.st_mtime < *oldest ? st.st_mtime : *oldest;
        }
    closedir(d);
    return n;
}

/* The object cache's cap: a hit marks its object used; a cap below what a build stores
 * removes the objects (the least recently used first), and the next build compiles them
 * again and still links a working module. */
static void test_object_cache_cap(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    put_kernel(b, "mul", 2);
    build_result r1 = build(b);
    assert_built(&r1, 3, 0);
    time_t oldest;
    age_cache(b);
    assert_int_equal(cached_objects(b, &oldest), 3);
    assert_true(oldest < 10);
    build_result r2 = build(b); /* three hits: each touched */
    assert_built(&r2, 0, 3);
    assert_int_equal(cached_objects(b, &oldest), 3);
    assert_true(oldest > time(NULL) - 600);

    objcache cap;
    assert_int_equal(objcache_init(&cap, b->cache, 1), 0); /* one byte: nothing stays */
    b->req.objects = &cap;
    put_kernel(b, "mul", 3);
    build_result r3 = build(b);
    assert_built(&r3, 1, 2);
    assert_int_equal(cached_objects(b, &oldest), 0);
    json_t *j = objcache_json(&cap);
    assert_int_equal(json_integer_value(json_object_get(j, "evicted_files")), 4);
    json_decref(j);
    build_result r4 = build(b); /* evicted: compiled again, and the module works */
    assert_built(&r4, 3, 0);
    assert_string_equal(r3.key, r4.key);
    assert_int_equal(call_module(r4.so_path, "kgym_mul"), 110);
    b->req.objects = NULL;
    objcache_deinit(&cap);
    build_result_deinit(&r1);
    build_result_deinit(&r2);
    build_result_deinit(&r3);
    build_result_deinit(&r4);
}

/* A few bytes of source that compile to a large object (red team: 78 bytes, 1.8 GB of host
 * disk): past the build's cap on compiled bytes the build fails, says why, and neither the
 * build dir nor the cache keeps the object. */
static void test_build_total_is_capped(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    fx_puts(&b->fx, "kernels/big.cpp", "extern \"C\" const char kgym_big[1 << 20] = {7};\n");
    b->req.max_built_bytes = 512u << 10;
    build_result r;
    assert_int_equal(build_extension(&b->tc, &b->req, &r), 0);
    assert_false(r.ok);
    assert_string_equal(r.error_code, "COMPILE_ERROR");
    assert_non_null(strstr(r.log, "kgym builds at most 512 KiB of objects per Compile"));
    time_t oldest;
    char obj[256];
    snprintf(obj, sizeof obj, "%s/obj/kernels_big.cpp.o", b->build);
    assert_int_equal(access(obj, F_OK), -1);
    int cached = cached_objects(b, &oldest); /* at most the small ones */
    assert_true(cached <= 2);
    build_result_deinit(&r);
    /* under the cap, the same source builds */
    b->req.max_built_bytes = 0;
    build_result r2 = build(b);
    assert_true(r2.ok);
    build_result_deinit(&r2);
}

static void test_header_change_recompiles_kernels(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    put_kernel(b, "mul", 2);
    build_result r1 = build(b);
    assert_built(&r1, 3, 0);
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 200\n");
    build_result r2 = build(b);
    /* every kernel recompiles; the trusted binding.cpp sees no workspace header: cached */
    assert_built(&r2, 2, 1);
    assert_string_not_equal(r1.key, r2.key);
    assert_true(json_is_true(json_object_get(json_array_get(r2.sources, 0), "cached")));
    assert_int_equal(call_module(r2.so_path, "kgym_add"), 208);
    /* a new header counts too, even one nobody includes (conservative) */
    fx_puts(&b->fx, "kernels/extra.cuh", "// nothing\n");
    build_result r3 = build(b);
    assert_built(&r3, 2, 1);
    build_result_deinit(&r1);
    build_result_deinit(&r2);
    build_result_deinit(&r3);
}

/* A source may #include another source: editing the included one must rebuild the includer
 * (a stale object would run old code), while unrelated sources stay cached. */
static void test_included_source_change_recompiles_includer(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    fx_puts(&b->fx, "kernels/part.cpp", "static inline int part_value(void) { return 10; }\n");
    fx_puts(&b->fx, "kernels/whole.cpp",
            "#include \"common.h\"\n#include \"part.cpp\"\n"
            "extern \"C\" int kgym_whole(void) { return part_value() + COMMON; }\n");
    build_result r1 = build(b);
    assert_built(&r1, 3, 0);
    assert_int_equal(call_module(r1.so_path, "kgym_whole"), 110);
    fx_puts(&b->fx, "kernels/part.cpp", "static inline int part_value(void) { return 20; }\n");
    build_result r2 = build(b);
    assert_built(&r2, 2, 1); /* part.cpp and whole.cpp; binding.cpp cached */
    assert_int_equal(call_module(r2.so_path, "kgym_whole"), 120);
    fx_puts(&b->fx, "kernels/other.cpp",
            "// not part.cpp's includer (naming it in a comment is fine)\n"
            "extern \"C\" int kgym_other(void) { return 1; }\n");
    build_result r3 = build(b);
    assert_built(&r3, 1, 3); /* nobody includes other.cpp */
    /* an include through a macro could name anything: that unit follows every edit */
    fx_puts(&b->fx, "kernels/mac.cpp",
            "#define PART \"part.cpp\"\n#include PART\n"
            "extern \"C\" int kgym_mac(void) { return part_value(); }\n");
    build_result r4 = build(b);
    assert_built(&r4, 1, 4);
    fx_puts(&b->fx, "kernels/other.cpp", "extern \"C\" int kgym_other(void) { return 2; }\n");
    build_result r5 = build(b);
    assert_built(&r5, 2, 3); /* other.cpp and mac.cpp */
    assert_int_equal(call_module(r5.so_path, "kgym_mac"), 20);
    build_result_deinit(&r1);
    build_result_deinit(&r2);
    build_result_deinit(&r3);
    build_result_deinit(&r4);
    build_result_deinit(&r5);
}

static void test_workspace_fixed_files_are_ignored(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    fx_puts(&b->fx, "binding.cpp", "this is not C++\n");
    fx_puts(&b->fx, "binding_registry.h", "#define KGYM_REG 666\n");
    build_result r = build(b);
    assert_built(&r, 2, 0);
    assert_int_equal(call_module(r.so_path, "kgym_add"), 108);
    build_result_deinit(&r);
}

static void test_no_sources(void **state)
{
    bfx *b = *state;
    build_result r = build(b);
    assert_false(r.ok);
    assert_string_equal(r.error_code, "NO_SOURCES");
    assert_non_null(strstr(r.log, "kernels/"));
    assert_string_equal(r.so_path, "");
    build_result_deinit(&r);
    fx_puts(&b->fx, "kernels/only.h", "#pragma once\n");
    fx_puts(&b->fx, "kernels/sub/deep.cpp", "int x;\n"); /* not directly inside kernels/ */
    r = build(b);
    assert_string_equal(r.error_code, "NO_SOURCES");
    build_result_deinit(&r);
}

static void test_symlink_refused(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    char target[256];
    snprintf(target, sizeof target, "%s/secret.txt", b->fx.outside);
    fx_link(&b->fx, target, "kernels/evil.cpp");
    build_result r = build(b);
    assert_false(r.ok);
    assert_string_equal(r.error_code, "INVALID_SOURCE");
    assert_non_null(strstr(r.log, "kernels/evil.cpp"));
    assert_null(strstr(r.log, "TOP SECRET"));
    build_result_deinit(&r);
    /* a symlink inside the workspace is refused as well, and so is a symlinked header */
    unlink(fx_path(&b->fx, "kernels/evil.cpp", target, sizeof target));
    fx_link(&b->fx, "add.cpp", "kernels/twin.cpp");
    r = build(b);
    assert_string_equal(r.error_code, "INVALID_SOURCE");
    build_result_deinit(&r);
    unlink(fx_path(&b->fx, "kernels/twin.cpp", target, sizeof target));
    fx_link(&b->fx, "common.h", "kernels/alias.h");
    r = build(b);
    assert_string_equal(r.error_code, "INVALID_SOURCE");
    build_result_deinit(&r);
}

static void test_odd_names_and_sizes_refused(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/my kernel.cpp", "int x;\n");
    build_result r = build(b);
    assert_string_equal(r.error_code, "INVALID_SOURCE");
    assert_non_null(strstr(r.log, "my kernel.cpp"));
    build_result_deinit(&r);
    unlink(fx_path(&b->fx, "kernels/my kernel.cpp", (char[256]){0}, 256));
    char *big = malloc((1u << 20) + 2);
    memset(big, ' ', (1u << 20) + 1);
    big[(1u << 20) + 1] = '\0';
    fx_puts(&b->fx, "kernels/big.cpp", big);
    free(big);
    r = build(b);
    assert_string_equal(r.error_code, "INVALID_SOURCE");
    assert_non_null(strstr(r.log, "too large"));
    build_result_deinit(&r);
}

static void test_compile_error_reads_naturally(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    build_result ok = build(b);
    assert_built(&ok, 2, 0);
    fx_puts(&b->fx, "kernels/bad.cpp", "int f() {\n  return undefined_name;\n}\n");
    build_result r = build(b);
    assert_false(r.ok);
    assert_string_equal(r.error_code, "COMPILE_ERROR");
    assert_non_null(strstr(r.log, "kernels/bad.cpp:2:"));
    assert_non_null(strstr(r.log, "undefined_name"));
    assert_null(strstr(r.log, "/workspace/src"));
    assert_null(strstr(r.log, b->build));
    assert_string_equal(r.so_path, "");
    /* the failed build left no module: an old one can never be taken for it */
    char so[256];
    struct stat st;
    snprintf(so, sizeof so, "%s/out/cuda_extension.so", b->build);
    assert_int_not_equal(lstat(so, &st), 0);
    json_t *last = json_array_get(r.sources, 2);
    assert_string_equal(json_string_value(json_object_get(last, "file")), "kernels/bad.cpp");
    assert_true(json_is_false(json_object_get(last, "ok")));
    build_result_deinit(&ok);
    build_result_deinit(&r);
}

static void test_stale_objects_never_linked(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    build_result r1 = build(b);
    assert_built(&r1, 2, 0);
    char stale[256];
    snprintf(stale, sizeof stale, "%s/obj/kernels_old.cpp.o", b->build);
    put_host(stale, "junk");
    build_result r2 = build(b);
    assert_built(&r2, 0, 2);
    struct stat st;
    assert_int_not_equal(lstat(stale, &st), 0);
    build_result_deinit(&r1);
    build_result_deinit(&r2);
}

static void test_cu_without_nvcc_is_skipped(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    fx_puts(&b->fx, "kernels/k.cu", "__global__ void k() {}\n");
    build_result r = build(b);
    assert_built(&r, 2, 0);
    json_t *cu = json_array_get(r.sources, 2);
    assert_string_equal(json_string_value(json_object_get(cu, "file")), "kernels/k.cu");
    assert_true(json_is_true(json_object_get(cu, "skipped")));
    build_result_deinit(&r);
}

static void test_parallel_jobs(void **state)
{
    bfx *b = *state;
    b->req.jobs = 4;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    char name[16];
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "k%d", i);
        put_kernel(b, name, i);
    }
    build_result r = build(b);
    assert_built(&r, 7, 0);
    assert_int_equal(call_module(r.so_path, "kgym_k5"), 112);
    build_result_deinit(&r);
}

static void test_timeout(void **state)
{
    bfx *b = *state;
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    b->req.timeout_ms = 1;
    build_result r = build(b);
    assert_false(r.ok);
    assert_string_equal(r.error_code, "TIMEOUT");
    assert_non_null(strstr(r.log, "timed out"));
    build_result_deinit(&r);
}

static void test_template_missing_is_infra(void **state)
{
    bfx *b = *state;
    put_kernel(b, "add", 1);
    b->req.template_dir = b->fx.root; /* holds no binding.cpp */
    build_result r;
    assert_int_equal(build_extension(&b->tc, &b->req, &r), -1);
    assert_false(r.ok);
    assert_string_equal(r.error_code, "INFRA_ERROR");
    build_result_deinit(&r);
}

static void test_cache_store_refuses_symlinks(void **state)
{
    bfx *b = *state;
    char obj[256], cached[256], key[65];
    digest_sha256_hex("x", 1, key);
    snprintf(obj, sizeof obj, "%s/x.o", b->fx.outside);
    snprintf(cached, sizeof cached, "%s/obj/%s.o", b->cache, key);
    struct stat st;
    assert_int_equal(symlink("/etc/passwd", obj), 0);
    assert_int_equal(build_cache_store(b->cache, key, obj), -2);
    assert_int_not_equal(lstat(cached, &st), 0);
    unlink(obj);
    assert_int_equal(mkfifo(obj, 0644), 0); /* would block a plain open */
    assert_int_equal(build_cache_store(b->cache, key, obj), -2);
    unlink(obj);
    assert_int_equal(build_cache_store(b->cache, key, obj), -2); /* missing */
    assert_int_not_equal(lstat(cached, &st), 0);
    put_host(obj, "ELF-ish");
    assert_int_equal(build_cache_store(b->cache, key, obj), 0);
    assert_int_equal(lstat(cached, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0644);
    assert_int_equal(st.st_size, 7);
    /* no temporary file is left behind */
    char dir[256];
    snprintf(dir, sizeof dir, "%s/obj", b->cache);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(n, 1);
}

static void test_clean_log(void **state)
{
    (void)state;
    const char *in = "/workspace/src/kernels/a.cu(3): error: x\n"
                     "In file included from /workspace/src/kernels/b.cpp:1:\n"
                     "/tmp/b/src/kernels/c.cpp:2:5: error: y\n"
                     "/workspace/obj/z.o stays\n";
    char *out = build_clean_log(in, strlen(in), "/tmp/b", 0);
    assert_string_equal(out, "kernels/a.cu(3): error: x\n"
                             "In file included from kernels/b.cpp:1:\n"
                             "kernels/c.cpp:2:5: error: y\n"
                             "/workspace/obj/z.o stays\n");
    free(out);
    out = build_clean_log("bad \xff byte", 10, NULL, 0);
    assert_string_equal(out, "bad \xef\xbf\xbd byte");
    free(out);
    /* head and tail kept */
    char big[5000];
    for (size_t i = 0; i < sizeof big - 1; i++)
        big[i] = i < 100 ? 'H' : i >= sizeof big - 101 ? 'T' : '.';
    big[sizeof big - 1] = '\0';
    out = build_clean_log(big, strlen(big), NULL, 1000);
    assert_true(strlen(out) <= 1000);
    assert_memory_equal(out, "HHHHHHHHHH", 10);
    assert_memory_equal(out + strlen(out) - 10, "TTTTTTTTTT", 10);
    assert_non_null(strstr(out, "omitted"));
    free(out);
}

static void test_sha256(void **state)
{
    (void)state;
    char hex[65];
    digest_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/* The tool: unavailable evaluation is said in-band; a ready one builds and records the module
 * in the episode's state, and a failing build forgets it. */
static void test_compile_tool(void **state)
{
    bfx *b = *state;
    tool_result r = fx_call(&b->fx, &tool_def_compile, json_object());
    assert_true(r.is_error);
    assert_string_equal(fx_code(&r), "EVAL_UNAVAILABLE");
    tool_result_deinit(&r);

    eval_server *es = calloc(1, sizeof *es);
    pthread_mutex_init(&es->probe_lock, NULL);
    snprintf(es->unavailable, sizeof es->unavailable, "no torch here");
    b->fx.env.eval = es;
    ep_eval evs = {0};
    snprintf(evs.build_dir, sizeof evs.build_dir, "%s", b->build);
    b->fx.env.evs = &evs;
    r = fx_call(&b->fx, &tool_def_compile, json_object());
    assert_string_equal(fx_code(&r), "EVAL_UNAVAILABLE");
    assert_non_null(strstr(r.content, "no torch here"));
    tool_result_deinit(&r);

    es->ready = es->probed = es->configured = true;
    es->tc = b->tc;
    es->compile_jobs = 2;
    es->compile_timeout_ms = 120000;
    snprintf(es->template_dir, sizeof es->template_dir, "%s", b->tpl);
    snprintf(es->cache_dir, sizeof es->cache_dir, "%s", b->cache);
    b->fx.env.episode_id = "ep_tool";
    fx_puts(&b->fx, "kernels/common.h", "#define COMMON 100\n");
    put_kernel(b, "add", 1);
    r = fx_call(&b->fx, &tool_def_compile, json_object());
    if (r.is_error)
        fail_msg("%s", r.content);
    assert_non_null(strstr(r.content, "Compiled cuda_extension: 2 sources (2 compiled, 0 cached)"));
    assert_true(fx_bool(&r, "ok"));
    assert_int_equal(fx_int(&r, "compiled"), 2);
    assert_int_equal(strlen(evs.build_key), 64);
    assert_int_equal(call_module(evs.so_path, "kgym_add"), 108);
    tool_result_deinit(&r);

    fx_puts(&b->fx, "kernels/add.cpp", "int broken(\n");
    r = fx_call(&b->fx, &tool_def_compile, json_object());
    assert_true(r.is_error);
    assert_string_equal(fx_code(&r), "COMPILE_ERROR");
    assert_non_null(strstr(r.content, "kernels/add.cpp:1:"));
    assert_string_equal(evs.so_path, "");
    tool_result_deinit(&r);
    b->fx.env.eval = NULL;
    pthread_mutex_destroy(&es->probe_lock);
    free(es);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_build_links_a_module, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_takes_the_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_object_cache_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_total_is_capped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_change_recompiles_kernels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_included_source_change_recompiles_includer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_workspace_fixed_files_are_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_sources, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_odd_names_and_sizes_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compile_error_reads_naturally, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_objects_never_linked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cu_without_nvcc_is_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_template_missing_is_infra, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_store_refuses_symlinks, setup, teardown),
        cmocka_unit_test(test_clean_log),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test_setup_teardown(test_compile_tool, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
