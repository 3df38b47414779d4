/* A throwaway workspace for the file tool tests: a temp dir under /tmp opened as the root fd,
 * a sibling "outside" dir holding a secret (the target of escape attempts), limits, and a
 * tool_env. Helpers create and read files from the host side, bypassing the tools. */
#ifndef KGYM_TEST_FS_FIXTURE_H
#define KGYM_TEST_FS_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/tool.h"
#include "wspath.h"

typedef struct fixture {
    char root[64];    /* host path of the workspace */
    char outside[64]; /* host path of a directory outside it */
    int root_fd;
    tool_limits limits;
    tool_env env;
} fixture;

static inline int fx_rm_entry(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)type;
    (void)f;
    remove(path);
    return 0;
}

static inline int fx_setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    strcpy(fx->root, "/tmp/kgym-ws-XXXXXX");
    strcpy(fx->outside, "/tmp/kgym-out-XXXXXX");
    if (!mkdtemp(fx->root) || !mkdtemp(fx->outside))
        return -1;
    fx->root_fd = open(fx->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fx->root_fd < 0)
        return -1;
    fx->limits.disk_quota_bytes = 1 << 20;
    fx->limits.max_file_bytes = 64 << 10;
    fx->limits.max_output_chars = 100000;
    fx->env.root_fd = fx->root_fd;
    fx->env.root_path = fx->root;
    fx->env.episode_dir = fx->outside;
    fx->env.limits = &fx->limits;
    char secret[128];
    snprintf(secret, sizeof secret, "%s/secret.txt", fx->outside);
    FILE *f = fopen(secret, "w");
    if (!f)
        return -1;
    fputs("TOP SECRET\n", f);
    fclose(f);
    *state = fx;
    return 0;
}

static inline int fx_teardown(void **state)
{
    fixture *fx = *state;
    close(fx->root_fd);
    nftw(fx->root, fx_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    nftw(fx->outside, fx_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

/* Host path of rel inside the workspace. */
static inline const char *fx_path(const fixture *fx, const char *rel, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", fx->root, rel);
    return buf;
}

/* Creates rel (and its directories) with len bytes, from the host side. */
static inline void fx_put(const fixture *fx, const char *rel, const char *data, size_t len)
{
    char path[4096];
    fx_path(fx, rel, path, sizeof path);
    for (char *s = path + strlen(fx->root) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static inline void fx_puts(const fixture *fx, const char *rel, const char *text)
{
    fx_put(fx, rel, text, strlen(text));
}

/* Reads rel from the host side (NULL if missing); *len gets its size. */
static inline char *fx_get(const fixture *fx, const char *rel, size_t *len)
{
    char path[4096];
    FILE *f = fopen(fx_path(fx, rel, path, sizeof path), "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

/* Asserts that rel holds exactly text. */
static inline void fx_assert_file(const fixture *fx, const char *rel, const char *text)
{
    size_t len;
    char *got = fx_get(fx, rel, &len);
    assert_non_null(got);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(got, text, len);
    free(got);
}

static inline bool fx_exists(const fixture *fx, const char *rel)
{
    char path[4096];
    struct stat st;
    return lstat(fx_path(fx, rel, path, sizeof path), &st) == 0;
}

/* Makes a symlink at rel (inside the workspace) pointing to target. */
static inline void fx_link(const fixture *fx, const char *target, const char *rel)
{
    char path[4096];
    assert_int_equal(symlink(target, fx_path(fx, rel, path, sizeof path)), 0);
}

/* Entries of a workspace directory whose name starts with prefix. */
static inline int fx_count_prefix(const fixture *fx, const char *dir_rel, const char *prefix)
{
    char path[4096];
    DIR *d = opendir(fx_path(fx, dir_rel, path, sizeof path));
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Runs a tool with args (stolen) and returns the result. */
static inline tool_result fx_call(const fixture *fx, const tool_def *tool, json_t *args)
{
    assert_non_null(args);
    tool_result res = {0};
    tool_invoke(tool, &fx->env, args, &res);
    json_decref(args);
    assert_non_null(res.content);
    assert_non_null(res.data);
    return res;
}

static inline const char *fx_code(const tool_result *res)
{
    const char *c = json_string_value(json_object_get(res->data, "error_code"));
    return c ? c : "";
}

static inline json_int_t fx_int(const tool_result *res, const char *key)
{
    const json_t *v = json_object_get(res->data, key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static inline bool fx_bool(const tool_result *res, const char *key)
{
    const json_t *v = json_object_get(res->data, key);
    assert_true(json_is_boolean(v));
    return json_is_true(v);
}

static inline const char *fx_str(const tool_result *res, const char *key)
{
    const char *s = json_string_value(json_object_get(res->data, key));
    assert_non_null(s);
    return s;
}

/* Asserts an in-band error with the given code. */
#define assert_tool_error(res, code)                                                               \
    do {                                                                                           \
        assert_true((res).is_error);                                                               \
        assert_string_equal(fx_code(&(res)), (code));                                              \
    } while (0)

#define assert_tool_ok(res)                                                                        \
    do {                                                                                           \
        if ((res).is_error)                                                                        \
            fail_msg("tool failed: %s (%s)", (res).content, fx_code(&(res)));                      \
    } while (0)

#define assert_contains(haystack, needle)                                                          \
    do {                                                                                           \
        if (!strstr((haystack), (needle)))                                                         \
            fail_msg("expected \"%s\" in:\n%s", (needle), (haystack));                             \
    } while (0)

#define assert_not_contains(haystack, needle)                                                      \
    do {                                                                                           \
        if (strstr((haystack), (needle)))                                                          \
            fail_msg("did not expect \"%s\" in:\n%s", (needle), (haystack));                       \
    } while (0)

#endif
