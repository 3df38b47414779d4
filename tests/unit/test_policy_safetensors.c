/* safetensors: round trips through pol_st_write, every class of malformed file (built byte by
 * byte), sharded checkpoints and their index errors, the fp32 conversions, and the files the
 * Python suite writes with the `safetensors` package and transformers (KGYM_ST_PYFILES: a folder
 * with an expect.json; see tests/policy/test_safetensors.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/config.h"
#include "policy/safetensors.h"

/* ---- fixture: a temp dir per test ------------------------------------------------------------ */

typedef struct tdir {
    char root[64];
} tdir;

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *f)
{
    (void)sb;
    (void)type;
    (void)f;
    remove(path);
    return 0;
}

static int dir_setup(void **state)
{
    tdir *d = calloc(1, sizeof *d);
    if (!d)
        return -1;
    strcpy(d->root, "/tmp/kgym-st-XXXXXX");
    if (!mkdtemp(d->root))
        return -1;
    *state = d;
    return 0;
}

static int dir_teardown(void **state)
{
    tdir *d = *state;
    nftw(d->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(d);
    return 0;
}

/* A path under the test's dir (static buffers rotate so a few can be alive at once). */
static const char *at(void **state, const char *name)
{
    static char bufs[4][512];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", ((tdir *)*state)->root, name);
    return b;
}

static void write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* A safetensors file from parts: a declared header length (which may lie), header text, data. */
static void write_st_parts(const char *path, uint64_t declared, const char *header,
                           const void *data, size_t data_len)
{
    size_t hl = strlen(header);
    uint8_t *buf = malloc(8 + hl + data_len + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(declared >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (data_len)
        memcpy(buf + 8 + hl, data, data_len);
    write_bytes(path, buf, 8 + hl + data_len);
    free(buf);
}

static void write_st_raw(const char *path, const char *header, size_t data_len)
{
    uint8_t data[256] = {0};
    assert_true(data_len <= sizeof data);
    write_st_parts(path, strlen(header), header, data, data_len);
}

/* Opening must fail, leaving *out NULL, with every given piece in the message; the same bytes
 * must fail pol_st_check_buffer too (naming the tensor, when one is given). */
static void expect_reject(const char *path, const char *want_a, const char *want_b)
{
    char err[512] = "";
    pol_st *st = (pol_st *)1;
    assert_int_equal(pol_st_open(path, &st, err, sizeof err), -1);
    assert_null(st);
    if (!strstr(err, want_a) || (want_b && !strstr(err, want_b)))
        fail_msg("%s: error \"%s\" lacks \"%s\" / \"%s\"", path, err, want_a, want_b ? want_b : "");
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || strstr(path, ".json"))
        return;
    size_t n;
    void *bytes = read_bytes(path, &n);
    char err2[512] = "";
    assert_int_equal(pol_st_check_buffer(bytes, n, err2, sizeof err2), -1);
    if (want_b && !strstr(err2, want_b))
        fail_msg("check_buffer: error \"%s\" lacks \"%s\"", err2, want_b);
    free(bytes);
}

static pol_st *open_ok(const char *path)
{
    char err[512] = "";
    pol_st *st = NULL;
    if (pol_st_open(path, &st, err, sizeof err) != 0)
        fail_msg("pol_st_open(%s): %s", path, err);
    assert_non_null(st);
    return st;
}

/* ---- dtypes ---------------------------------------------------------------------------------- */

static void test_dtype_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        size_t size;
    } want[POL_DT_COUNT] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8},
                            {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},  {"BOOL", 1}};
    for (int i = 0; i < POL_DT_COUNT; i++) {
        assert_string_equal(pol_dtype_name((pol_dtype)i), want[i].name);
        assert_int_equal(pol_dtype_size((pol_dtype)i), want[i].size);
        assert_int_equal(pol_dtype_parse(want[i].name), i);
    }
    assert_null(pol_dtype_name(POL_DT_COUNT));
    assert_int_equal(pol_dtype_size(POL_DT_COUNT), 0);
    assert_int_equal(pol_dtype_parse("F8_E4M3"), -1);
    assert_int_equal(pol_dtype_parse("f32"), -1);
    assert_int_equal(pol_dtype_parse(""), -1);
    assert_int_equal(pol_dtype_parse(NULL), -1);
}

/* ---- writing and reading back ---------------------------------------------------------------- */

static const float rt_f32[6] = {1.5f, -2.0f, 0.0f, 3.25f, -0.125f, 1e30f};
static const uint16_t rt_bf16[4] = {0x3f80, 0xc000, 0x7f80, 0x0001};
static const uint16_t rt_f16[1] = {0x3c00};
static const uint8_t rt_u8[5] = {0, 1, 2, 254, 255};
static const uint8_t rt_bool[3] = {1, 0, 1};
static const int64_t rt_i64[2] = {-1, INT64_MAX};

static void write_roundtrip_file(const char *path)
{
    const pol_st_entry es[] = {
        {"w.f32", POL_DT_F32, 2, {2, 3}, rt_f32}, {"b.bf16", POL_DT_BF16, 1, {4}, rt_bf16},
        {"scalar", POL_DT_F16, 0, {0}, rt_f16},   {"empty", POL_DT_I64, 2, {3, 0}, NULL},
        {"bytes", POL_DT_U8, 1, {5}, rt_u8},      {"flags", POL_DT_BOOL, 1, {3}, rt_bool},
        {"ints", POL_DT_I64, 1, {2}, rt_i64},
    };
    const char *meta[] = {"format", "pt", "note", "caf\xc3\xa9", NULL};
    char err[256] = "";
    if (pol_st_write(path, es, sizeof es / sizeof es[0], meta, err, sizeof err) != 0)
        fail_msg("pol_st_write: %s", err);
}

static void test_roundtrip(void **state)
{
    const char *path = at(state, "rt.safetensors");
    write_roundtrip_file(path);
    assert_int_equal(access(at(state, "rt.safetensors.tmp"), F_OK), -1);
    pol_st *st = open_ok(path);
    assert_int_equal(pol_st_count(st), 7);
    const char *order[] = {"b.bf16", "bytes", "empty", "flags", "ints", "scalar", "w.f32"};
    for (size_t i = 0; i < 7; i++)
        assert_string_equal(pol_st_at(st, i)->name, order[i]);
    assert_null(pol_st_at(st, 7));

    const pol_tensor *w = pol_st_find(st, "w.f32");
    assert_non_null(w);
    assert_int_equal(w->dtype, POL_DT_F32);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->shape[0], 2);
    assert_int_equal(w->shape[1], 3);
    assert_int_equal(w->numel, 6);
    assert_int_equal(w->nbytes, 24);
    assert_memory_equal(w->data, rt_f32, 24);
    assert_string_equal(w->file, path);

    const pol_tensor *s = pol_st_find(st, "scalar");
    assert_int_equal(s->ndim, 0);
    assert_int_equal(s->numel, 1);
    assert_int_equal(s->nbytes, 2);
    assert_memory_equal(s->data, rt_f16, 2);

    const pol_tensor *e = pol_st_find(st, "empty");
    assert_int_equal(e->numel, 0);
    assert_int_equal(e->nbytes, 0);
    assert_memory_equal(pol_st_find(st, "bytes")->data, rt_u8, 5);
    assert_memory_equal(pol_st_find(st, "flags")->data, rt_bool, 3);
    assert_memory_equal(pol_st_find(st, "ints")->data, rt_i64, 16);
    assert_memory_equal(pol_st_find(st, "b.bf16")->data, rt_bf16, 8);
    assert_null(pol_st_find(st, "missing"));
    assert_null(pol_st_find(st, "w.f3"));

    assert_string_equal(pol_st_metadata(st, "format"), "pt");
    assert_string_equal(pol_st_metadata(st, "note"), "caf\xc3\xa9");
    assert_null(pol_st_metadata(st, "absent"));
    pol_st_free(st);
}

/* The header is deterministic, starts the data 8-byte aligned and is padded with spaces. */
static void test_write_layout(void **state)
{
    const char *path = at(state, "one.safetensors");
    const float v[2] = {1.0f, 2.0f};
    const uint16_t h[1] = {0x3c00};
    const pol_st_entry es[] = {{"z", POL_DT_F32, 1, {2}, v}, {"a", POL_DT_F16, 1, {1}, h}};
    const char *meta[] = {"format", "pt", NULL};
    char err[256];
    assert_int_equal(pol_st_write(path, es, 2, meta, err, sizeof err), 0);
    size_t n;
    uint8_t *b = read_bytes(path, &n);
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"z\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[8,10]}}";
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | b[i];
    assert_int_equal(hl % 8, 0);
    assert_true(hl >= strlen(want) && hl < strlen(want) + 8);
    assert_memory_equal(b + 8, want, strlen(want));
    for (size_t i = strlen(want); i < hl; i++)
        assert_int_equal(b[8 + i], ' ');
    assert_int_equal(n, 8 + hl + 10);
    assert_memory_equal(b + 8 + hl, v, 8);
    assert_memory_equal(b + 8 + hl + 8, h, 2);
    assert_int_equal(pol_st_check_buffer(b, n, err, sizeof err), 0);
    free(b);

    /* writing again replaces the file whole */
    assert_int_equal(pol_st_write(path, es, 1, NULL, err, sizeof err), 0);
    pol_st *st = open_ok(path);
    assert_int_equal(pol_st_count(st), 1);
    assert_null(pol_st_metadata(st, "format"));
    pol_st_free(st);
}

static void expect_write_error(void **state, const pol_st_entry *es, size_t n,
                               const char *const *meta, const char *want)
{
    const char *path = at(state, "bad.safetensors");
    char err[256] = "";
    assert_int_equal(pol_st_write(path, es, n, meta, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access(at(state, "bad.safetensors.tmp"), F_OK), -1);
}

static void test_write_rejects(void **state)
{
    const float v[4] = {0};
    const pol_st_entry dup[] = {{"a", POL_DT_F32, 1, {1}, v}, {"a", POL_DT_F32, 1, {1}, v}};
    expect_write_error(state, dup, 2, NULL, "tensor 'a': duplicate");
    const pol_st_entry bad_dt[] = {{"x", POL_DT_COUNT, 1, {1}, v}};
    expect_write_error(state, bad_dt, 1, NULL, "tensor 'x': unknown dtype");
    const pol_st_entry dims[] = {{"x", POL_DT_F32, 9, {1, 1, 1, 1, 1, 1, 1, 1}, v}};
    expect_write_error(state, dims, 1, NULL, "9 dims");
    const pol_st_entry neg[] = {{"x", POL_DT_F32, 1, {-1}, v}};
    expect_write_error(state, neg, 1, NULL, "negative");
    const pol_st_entry huge[] = {{"x", POL_DT_F32, 2, {INT64_MAX, 4}, v}};
    expect_write_error(state, huge, 1, NULL, "overflows");
    const pol_st_entry reserved[] = {{"__metadata__", POL_DT_F32, 1, {1}, v}};
    expect_write_error(state, reserved, 1, NULL, "not a valid tensor name");
    const pol_st_entry unnamed[] = {{"", POL_DT_F32, 1, {1}, v}};
    expect_write_error(state, unnamed, 1, NULL, "not a valid tensor name");
    const pol_st_entry nodata[] = {{"x", POL_DT_F32, 1, {1}, NULL}};
    expect_write_error(state, nodata, 1, NULL, "no data");
    const pol_st_entry ok[] = {{"x", POL_DT_F32, 1, {1}, v}};
    const char *odd_meta[] = {"k", NULL};
    expect_write_error(state, ok, 1, odd_meta, "metadata key 'k' has no value");
    const char *bad_utf8[] = {"k", "\xff", NULL};
    expect_write_error(state, ok, 1, bad_utf8, "not valid UTF-8");

    char err[256] = "";
    assert_int_equal(
        pol_st_write(at(state, "no/such/dir/x.safetensors"), ok, 1, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "no/such/dir/x.safetensors.tmp"));
}

/* ---- malformed files ------------------------------------------------------------------------- */

static void test_reject_length_field(void **state)
{
    const char *p = at(state, "t.safetensors");
    write_bytes(p, "\x10\0\0\0\0", 5);
    expect_reject(p, "t.safetensors: 5 bytes is too short", NULL);
    write_bytes(p, "", 0);
    expect_reject(p, "0 bytes is too short", NULL);
    write_st_parts(p, 1000, "{}", NULL, 0);
    expect_reject(p, "header length 1000 runs past the end of the file (10 bytes)", NULL);
    write_st_parts(p, 1ull << 40, "{}", NULL, 0);
    expect_reject(p, "exceeds the limit", NULL);
    write_st_parts(p, (uint64_t)POL_ST_MAX_HEADER + 1, "{}", NULL, 0);
    expect_reject(p, "exceeds the limit", NULL);
    write_st_parts(p, UINT64_MAX, "{}", NULL, 0);
    expect_reject(p, "exceeds the limit", NULL);
    write_st_parts(p, 0, "", NULL, 0);
    expect_reject(p, "header is not a JSON object", NULL);
}

static void test_reject_header_json(void **state)
{
    const char *p = at(state, "h.safetensors");
    write_st_raw(p, "[1, 2]", 0);
    expect_reject(p, "h.safetensors: header is not a JSON object", NULL);
    write_st_raw(p, "\"str\"", 0);
    expect_reject(p, "header is not a JSON object", NULL);
    write_st_raw(p, "{\"a\":", 0);
    expect_reject(p, "header is not valid JSON", NULL);
    write_st_raw(p, "{} x", 0);
    expect_reject(p, "header is not valid JSON", NULL);
    write_st_raw(p, "{\"caf\xff\": 1}", 0);
    expect_reject(p, "not valid UTF-8", NULL);
    write_st_raw(p,
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 8);
    expect_reject(p, "duplicate tensor name", "'\"w\"'");
    write_st_raw(p, "{\"__metadata__\":{\"format\":1}}", 0);
    expect_reject(p, "'__metadata__' value of 'format' is not a string", NULL);
    write_st_raw(p, "{\"__metadata__\":[\"pt\"]}", 0);
    expect_reject(p, "'__metadata__' is not an object", NULL);
    /* an empty checkpoint is fine; an empty one with stray data is not */
    write_st_raw(p, "{}", 0);
    pol_st_free(open_ok(p));
    write_st_raw(p, "{}", 4);
    expect_reject(p, "4 unaccounted for", NULL);
}

/* One tensor entry that is wrong in one way; the message must name the tensor. */
static void reject_entry(void **state, const char *entry, size_t data_len, const char *want)
{
    char hdr[512];
    snprintf(hdr, sizeof hdr,
             "{\"ok\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
             "\"bad.w\":%s}",
             entry);
    const char *p = at(state, "e.safetensors");
    write_st_raw(p, hdr, data_len);
    expect_reject(p, want, "tensor 'bad.w'");
}

static void test_reject_entries(void **state)
{
    reject_entry(state, "[1]", 0, "entry is not an object");
    reject_entry(state, "{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
                 "unsupported dtype 'F7'");
    reject_entry(state, "{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}", 1,
                 "unsupported dtype 'F8_E4M3'");
    reject_entry(state, "{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}", 4,
                 "'dtype' is not a string");
    reject_entry(state, "{\"shape\":[1],\"data_offsets\":[0,4]}", 4, "missing 'dtype'");
    reject_entry(state, "{\"dtype\":\"F32\",\"data_offsets\":[0,4]}", 4, "missing 'shape'");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[1]}", 4, "missing 'data_offsets'");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}", 4,
                 "unexpected field 'x'");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}", 4,
                 "shape[0] is not a non-negative integer");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}", 4,
                 "shape[0] is not a non-negative integer");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}", 4,
                 "'shape' is not an array");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}",
                 4, "shape has 9 dims");
    reject_entry(state,
                 "{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}", 4,
                 "element count overflows");
    reject_entry(state,
                 "{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,4]}", 4,
                 "byte length overflows");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}", 4,
                 "end before they begin");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}", 4,
                 "'data_offsets' is not [begin, end]");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}", 4,
                 "'data_offsets' is not [begin, end]");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}", 8,
                 "data offsets [0, 400) lie outside the data area (8 bytes)");
    reject_entry(state, "{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}", 8,
                 "hold 8 bytes, but 3 elements of F32 need 12");
}

static void test_reject_tiling(void **state)
{
    const char *p = at(state, "tile.safetensors");
    write_st_raw(p,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                 12);
    expect_reject(p, "overlap tensor 'a'", "tensor 'b'");
    write_st_raw(p,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                 12);
    expect_reject(p, "gap of 4 bytes after tensor 'a'", "tensor 'b'");
    write_st_raw(p, "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    expect_reject(p, "gap of 4 bytes after the start", "tensor 'b'");
    write_st_raw(p,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                 4);
    expect_reject(p, "overlap", "tensor 'b'");
    write_st_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6);
    expect_reject(p, "2 unaccounted for after tensor 'a'", "tensor 'a'");
    /* out of order in the header, and zero-byte tensors anywhere, are fine */
    write_st_raw(p,
                 "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                 "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
                 "\"y\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[8,8]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                 8);
    pol_st *st = open_ok(p);
    assert_int_equal(pol_st_count(st), 4);
    assert_string_equal(pol_st_at(st, 0)->name, "a");
    assert_int_equal(pol_st_find(st, "z")->numel, 0);
    pol_st_free(st);
}

static void test_reject_paths(void **state)
{
    expect_reject(at(state, "nope.safetensors"), "nope.safetensors: No such file", NULL);
    expect_reject(((tdir *)*state)->root, "holds neither model.safetensors.index.json nor", NULL);
    char err[64];
    pol_st *st = (pol_st *)1;
    assert_int_equal(pol_st_open(NULL, &st, err, sizeof err), -1);
    assert_int_equal(pol_st_check_buffer(NULL, 4, err, sizeof err), -1);
    pol_st_free(NULL);
    assert_int_equal(pol_st_count(NULL), 0);
    assert_null(pol_st_find(NULL, "a"));
    /* a tiny error buffer truncates, never overflows */
    char tiny[8];
    write_bytes(at(state, "short"), "abc", 3);
    assert_int_equal(pol_st_open(at(state, "short"), &st, tiny, sizeof tiny), -1);
    assert_int_equal(strlen(tiny), 7);
}

/* ---- directories and sharded checkpoints ----------------------------------------------------- */

static const float sh_a[2] = {1, 2}, sh_b[3] = {3, 4, 5}, sh_c[1] = {6};

static void write_shard(void **state, const char *name, const char *t1, const float *d1, int n1,
                        const char *t2, const float *d2, int n2)
{
    pol_st_entry es[2] = {{t1, POL_DT_F32, 1, {n1}, d1}, {t2, POL_DT_F32, 1, {n2}, d2}};
    const char *meta[] = {"format", name, NULL};
    char err[256];
    assert_int_equal(pol_st_write(at(state, name), es, t2 ? 2 : 1, meta, err, sizeof err), 0);
}

static void write_index(void **state, const char *weight_map)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 24}, \"weight_map\": %s}",
             weight_map);
    write_bytes(at(state, "model.safetensors.index.json"), text, strlen(text));
}

static void write_two_shards(void **state)
{
    write_shard(state, "s1.safetensors", "a", sh_a, 2, "b", sh_b, 3);
    write_shard(state, "s2.safetensors", "c", sh_c, 1, NULL, NULL, 0);
}

static void test_sharded(void **state)
{
    write_two_shards(state);
    write_index(state, "{\"b\": \"s1.safetensors\", \"c\": \"s2.safetensors\", "
                       "\"a\": \"s1.safetensors\"}");
    /* a lone model.safetensors beside the index: the index wins */
    write_shard(state, "model.safetensors", "lone", sh_c, 1, NULL, NULL, 0);
    const char *ways[] = {at(state, "model.safetensors.index.json"), ((tdir *)*state)->root};
    for (int w = 0; w < 2; w++) {
        pol_st *st = open_ok(ways[w]);
        assert_int_equal(pol_st_count(st), 3);
        assert_string_equal(pol_st_at(st, 0)->name, "a");
        assert_string_equal(pol_st_at(st, 2)->name, "c");
        assert_memory_equal(pol_st_find(st, "b")->data, sh_b, sizeof sh_b);
        assert_memory_equal(pol_st_find(st, "c")->data, sh_c, sizeof sh_c);
        assert_non_null(strstr(pol_st_find(st, "b")->file, "/s1.safetensors"));
        assert_non_null(strstr(pol_st_find(st, "c")->file, "/s2.safetensors"));
        assert_string_equal(pol_st_metadata(st, "format"), "s1.safetensors");
        assert_null(pol_st_find(st, "lone"));
        pol_st_free(st);
    }
    /* without an index, a directory means its model.safetensors */
    unlink(at(state, "model.safetensors.index.json"));
    pol_st *st = open_ok(((tdir *)*state)->root);
    assert_int_equal(pol_st_count(st), 1);
    assert_non_null(pol_st_find(st, "lone"));
    pol_st_free(st);
}

static void test_sharded_errors(void **state)
{
    const char *idx = at(state, "model.safetensors.index.json");
    write_two_shards(state);
    write_index(state, "{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
                       "\"c\": \"s3.safetensors\"}");
    expect_reject(idx, "shard 's3.safetensors' is missing", NULL);
    write_index(state, "{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
                       "\"c\": \"s2.safetensors\", \"d\": \"s2.safetensors\"}");
    expect_reject(idx, "weight_map puts tensor 'd' in shard 's2.safetensors', which does not hold",
                  NULL);
    write_index(state, "{\"a\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}");
    expect_reject(idx, "tensor 'b' of shard", "s1.safetensors is not in the weight_map");
    write_index(state, "{\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\", "
                       "\"c\": \"s2.safetensors\"}");
    expect_reject(idx, "weight_map puts tensor 'b' in 's2.safetensors', but it is in shard", NULL);
    /* the same tensor in two shards */
    write_shard(state, "s2.safetensors", "c", sh_c, 1, "a", sh_a, 2);
    write_index(state, "{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
                       "\"c\": \"s2.safetensors\"}");
    expect_reject(idx, "tensor 'a' is in two shards", "s2.safetensors");
    /* a broken shard is reported under its own name */
    write_bytes(at(state, "s2.safetensors"), "xyz", 3);
    expect_reject(idx, "s2.safetensors: 3 bytes is too short", NULL);
    /* the index itself */
    write_index(state, "{\"a\": \"/etc/passwd\"}");
    expect_reject(idx, "weight_map entry for tensor 'a' is not a relative shard file name", NULL);
    write_index(state, "{\"a\": \"../s1.safetensors\"}");
    expect_reject(idx, "not a relative shard file name", NULL);
    write_index(state, "{\"a\": 7}");
    expect_reject(idx, "not a relative shard file name", NULL);
    write_index(state, "{}");
    expect_reject(idx, "the weight_map is empty", NULL);
    write_index(state, "[]");
    expect_reject(idx, "no \"weight_map\" object", NULL);
    write_bytes(idx, "{\"weight_map\": {", 16);
    expect_reject(idx, "model.safetensors.index.json: not valid JSON", NULL);
    write_bytes(idx, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"a\": \"s1.safetensors\"}}",
                61);
    expect_reject(idx, "duplicate object key", NULL);
}

/* ---- fp32 conversions ------------------------------------------------------------------------ */

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void test_to_f32(void **state)
{
    (void)state;
    /* bf16 is the top half of fp32: every pattern (inf, NaN, subnormal, -0) maps exactly */
    const uint16_t bf[] = {0x0000, 0x8000, 0x3f80, 0xc000, 0x7f80, 0xff80,
                           0x7fc0, 0x0001, 0x807f, 0x7f7f, 0x0080, 0x3eab};
    size_t nb = sizeof bf / sizeof bf[0];
    pol_tensor t = {.name = "bf",
                    .dtype = POL_DT_BF16,
                    .ndim = 1,
                    .numel = (int64_t)nb,
                    .data = bf,
                    .nbytes = sizeof bf};
    float out[16];
    assert_int_equal(pol_tensor_to_f32(&t, out), 0);
    for (size_t i = 0; i < nb; i++)
        assert_int_equal(bits_of(out[i]), (uint32_t)bf[i] << 16);

    /* f16, against values written out by hand */
    const struct {
        uint16_t h;
        float f;
    } hv[] = {
        {0x0000, 0.0f},
        {0x3c00, 1.0f},
        {0xc000, -2.0f},
        {0x7bff, 65504.0f},
        {0xfbff, -65504.0f},
        {0x0400, 6.103515625e-05f},
        {0x0001, 5.9604644775390625e-08f},
        {0x8001, -5.9604644775390625e-08f},
        {0x03ff, 6.097555160522461e-05f},
        {0x0200, 3.0517578125e-05f},
        {0x3555, 0.333251953125f},
        {0x3bff, 0.99951171875f},
        {0x7c00, INFINITY},
        {0xfc00, -INFINITY},
    };
    size_t nh = sizeof hv / sizeof hv[0];
    uint16_t hbits[16];
    for (size_t i = 0; i < nh; i++)
        hbits[i] = hv[i].h;
    pol_tensor h = {.name = "h",
                    .dtype = POL_DT_F16,
                    .ndim = 1,
                    .numel = (int64_t)nh,
                    .data = hbits,
                    .nbytes = 2 * nh};
    assert_int_equal(pol_tensor_to_f32(&h, out), 0);
    for (size_t i = 0; i < nh; i++)
        if (bits_of(out[i]) != bits_of(hv[i].f))
            fail_msg("f16 0x%04x -> %a, want %a", hv[i].h, (double)out[i], (double)hv[i].f);
    /* -0 keeps its sign; NaNs stay NaN, with sign */
    const uint16_t special[] = {0x8000, 0x7e00, 0xfe01, 0x7c01};
    pol_tensor s = {
        .name = "s", .dtype = POL_DT_F16, .ndim = 1, .numel = 4, .data = special, .nbytes = 8};
    assert_int_equal(pol_tensor_to_f32(&s, out), 0);
    assert_int_equal(bits_of(out[0]), 0x80000000u);
    assert_true(isnan(out[1]) && !signbit(out[1]));
    assert_true(isnan(out[2]) && signbit(out[2]));
    assert_true(isnan(out[3]));

    /* F32 is a copy, even unaligned; other dtypes are refused */
    uint8_t raw[13];
    float one = 1.5f;
    memcpy(raw + 1, &one, 4);
    pol_tensor f = {
        .name = "f", .dtype = POL_DT_F32, .ndim = 1, .numel = 1, .data = raw + 1, .nbytes = 4};
    assert_int_equal(pol_tensor_to_f32(&f, out), 0);
    assert_true(out[0] == 1.5f);
    pol_tensor i32 = {
        .name = "i", .dtype = POL_DT_I32, .ndim = 1, .numel = 1, .data = raw, .nbytes = 4};
    assert_int_equal(pol_tensor_to_f32(&i32, out), -1);
    pol_tensor none = {.name = "e", .dtype = POL_DT_BF16, .ndim = 1, .numel = 0, .data = raw};
    assert_int_equal(pol_tensor_to_f32(&none, NULL), 0);
}

/* ---- files written by Python (or, without KGYM_ST_PYFILES, by this test) --------------------- */

static void sha256_hex(const void *data, size_t n, char hex[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(data, n, md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        sprintf(hex + 2 * i, "%02x", md[i]);
}

static const char *base_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static bool is_float(pol_dtype dt)
{
    return dt == POL_DT_F32 || dt == POL_DT_F16 || dt == POL_DT_BF16;
}

/* "f32_bits": the fp32 bit patterns of the first elements; NaN only has to stay NaN. */
static void check_f32_values(const pol_tensor *t, const json_t *bits)
{
    float *vals = malloc(((size_t)t->numel + 1) * sizeof *vals);
    assert_non_null(vals);
    assert_int_equal(pol_tensor_to_f32(t, vals), 0);
    assert_true(json_array_size(bits) <= (size_t)t->numel);
    for (size_t i = 0; i < json_array_size(bits); i++) {
        uint32_t want = (uint32_t)json_integer_value(json_array_get(bits, i));
        float wf;
        memcpy(&wf, &want, 4);
        bool ok = isnan(wf) ? isnan(vals[i]) : bits_of(vals[i]) == want;
        if (!ok)
            fail_msg("%s[%zu]: got %a (0x%08x), want %a (0x%08x)", t->name, i, (double)vals[i],
                     bits_of(vals[i]), (double)wf, want);
    }
    free(vals);
}

static void check_tensor(const pol_st *st, const json_t *want)
{
    const char *name = json_string_value(json_object_get(want, "name"));
    assert_non_null(name);
    const pol_tensor *t = pol_st_find(st, name);
    if (!t)
        fail_msg("tensor '%s' missing", name);
    assert_string_equal(pol_dtype_name(t->dtype),
                        json_string_value(json_object_get(want, "dtype")));
    const json_t *shape = json_object_get(want, "shape");
    assert_int_equal(t->ndim, json_array_size(shape));
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        assert_int_equal(t->shape[d], json_integer_value(json_array_get(shape, (size_t)d)));
        numel *= t->shape[d];
    }
    assert_int_equal(t->numel, numel);
    assert_int_equal(t->nbytes, (size_t)numel * pol_dtype_size(t->dtype));
    char hex[65];
    sha256_hex(t->data, t->nbytes, hex);
    if (strcmp(hex, json_string_value(json_object_get(want, "sha256"))) != 0)
        fail_msg("tensor '%s': sha256 %s differs", name, hex);
    const json_t *file = json_object_get(want, "file");
    if (file)
        assert_string_equal(base_of(t->file), json_string_value(file));
    if (is_float(t->dtype))
        check_f32_values(t, json_object_get(want, "f32_bits"));
}

static size_t check_checkpoint(const char *dir, const json_t *ck)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(ck, "path")));
    pol_st *st = NULL;
    if (pol_st_open(path, &st, err, sizeof err) != 0)
        fail_msg("%s: %s", path, err);
    const json_t *tensors = json_object_get(ck, "tensors");
    assert_int_equal(pol_st_count(st), json_array_size(tensors));
    for (size_t i = 1; i < pol_st_count(st); i++)
        assert_true(strcmp(pol_st_at(st, i - 1)->name, pol_st_at(st, i)->name) < 0);
    for (size_t i = 0; i < json_array_size(tensors); i++)
        check_tensor(st, json_array_get(tensors, i));
    const char *key;
    const json_t *v;
    json_object_foreach(json_object_get(ck, "metadata"), key, v)
    {
        const char *got = pol_st_metadata(st, key);
        if (!got || strcmp(got, json_string_value(v)) != 0)
            fail_msg("%s: metadata '%s' = '%s', want '%s'", path, key, got ? got : "(none)",
                     json_string_value(v));
    }
    size_t i;
    json_array_foreach(json_object_get(ck, "absent_metadata"), i, v)
    {
        if (pol_st_metadata(st, json_string_value(v)))
            fail_msg("%s: metadata '%s' should be absent", path, json_string_value(v));
    }
    pol_st_free(st);
    return json_array_size(tensors);
}

/* {"path": ..., "contains": [..]}: loading must fail with every piece in the message. */
static void check_rejected(const char *dir, const json_t *bad, bool config)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(bad, "path")));
    int rc;
    if (config) {
        pol_config c;
        rc = pol_config_load(path, &c, err, sizeof err);
    } else {
        pol_st *st = NULL;
        rc = pol_st_open(path, &st, err, sizeof err);
        pol_st_free(st);
    }
    if (rc != -1)
        fail_msg("%s: accepted", path);
    const json_t *want;
    size_t i;
    json_array_foreach(json_object_get(bad, "contains"), i, want)
    {
        if (!strstr(err, json_string_value(want)))
            fail_msg("%s: error \"%s\" lacks \"%s\"", path, err, json_string_value(want));
    }
}

static void expect_field(const json_t *want, const char *key, double got)
{
    const json_t *v = json_object_get(want, key);
    if (!v)
        fail_msg("expect.json config lacks '%s'", key);
    double w = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
    if (strcmp(key, "rms_eps") == 0)
        w = (float)w;
    if (got != w)
        fail_msg("config field %s: got %.17g, want %.17g", key, got, w);
}

static void check_config(const char *dir, const json_t *cfg)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(cfg, "path")));
    pol_config c;
    if (pol_config_load(path, &c, err, sizeof err) != 0)
        fail_msg("%s: %s", path, err);
    const json_t *w = json_object_get(cfg, "expect");
    assert_string_equal(pol_arch_name(c.arch), json_string_value(json_object_get(w, "arch")));
    expect_field(w, "vocab_size", c.vocab_size);
    expect_field(w, "hidden", c.hidden);
    expect_field(w, "n_layers", c.n_layers);
    expect_field(w, "n_heads", c.n_heads);
    expect_field(w, "n_kv_heads", c.n_kv_heads);
    expect_field(w, "head_dim", c.head_dim);
    expect_field(w, "ffn", c.ffn);
    expect_field(w, "max_pos", c.max_pos);
    expect_field(w, "rms_eps", c.rms_eps);
    expect_field(w, "rope_theta", c.rope_theta);
    expect_field(w, "tie_embeddings", c.tie_embeddings);
    expect_field(w, "attn_bias", c.attn_bias);
    expect_field(w, "qk_norm", c.qk_norm);
    expect_field(w, "bos_id", c.bos_id);
    assert_string_equal(c.rope_type == POL_ROPE_LLAMA3 ? "llama3" : "default",
                        json_string_value(json_object_get(w, "rope_type")));
    if (c.rope_type == POL_ROPE_LLAMA3) {
        expect_field(w, "rope_factor", c.rope_factor);
        expect_field(w, "rope_low_freq", c.rope_low_freq);
        expect_field(w, "rope_high_freq", c.rope_high_freq);
        expect_field(w, "rope_orig_max_pos", c.rope_orig_max_pos);
    }
    const json_t *eos = json_object_get(w, "eos_ids");
    assert_int_equal(c.n_eos, json_array_size(eos));
    for (int i = 0; i < c.n_eos; i++)
        assert_int_equal(c.eos_ids[i], json_integer_value(json_array_get(eos, (size_t)i)));
    assert_string_equal(c.torch_dtype, json_string_value(json_object_get(w, "torch_dtype")));
}

/* Checks everything dir/expect.json lists; prints the counts (the Python side asserts them). */
static void check_expect_dir(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/expect.json", dir);
    json_error_t jerr;
    json_t *ex = json_load_file(path, 0, &jerr);
    if (!ex)
        fail_msg("%s: %s", path, jerr.text);
    size_t i, n_tensors = 0;
    const json_t *v;
    json_array_foreach(json_object_get(ex, "checkpoints"), i, v) n_tensors +=
        check_checkpoint(dir, v);
    json_array_foreach(json_object_get(ex, "bad"), i, v) check_rejected(dir, v, false);
    json_array_foreach(json_object_get(ex, "configs"), i, v) check_config(dir, v);
    json_array_foreach(json_object_get(ex, "bad_configs"), i, v) check_rejected(dir, v, true);
    printf("pyfiles: %zu checkpoints, %zu tensors, %zu bad files, %zu configs, %zu bad configs\n",
           json_array_size(json_object_get(ex, "checkpoints")), n_tensors,
           json_array_size(json_object_get(ex, "bad")),
           json_array_size(json_object_get(ex, "configs")),
           json_array_size(json_object_get(ex, "bad_configs")));
    assert_true(n_tensors > 0);
    json_decref(ex);
}

/* An expect.json tensor entry from the bytes that went into a file. */
static json_t *want_tensor(const char *name, const char *dtype, int ndim, const int64_t *shape,
                           const void *data, size_t nbytes, const uint32_t *bits, size_t n_bits,
                           const char *file)
{
    char hex[65];
    sha256_hex(data ? data : "", nbytes, hex);
    json_t *t = json_pack("{s:s, s:s, s:[], s:s, s:[]}", "name", name, "dtype", dtype, "shape",
                          "sha256", hex, "f32_bits");
    assert_non_null(t);
    for (int d = 0; d < ndim; d++)
        json_array_append_new(json_object_get(t, "shape"), json_integer(shape[d]));
    for (size_t i = 0; i < n_bits; i++)
        json_array_append_new(json_object_get(t, "f32_bits"), json_integer(bits[i]));
    if (file)
        json_object_set_new(t, "file", json_string(file));
    return t;
}

static json_t *own_checkpoints(void)
{
    static const int64_t s23[] = {2, 3}, s4[] = {4}, s30[] = {3, 0}, s5[] = {5}, s3[] = {3},
                         s2[] = {2}, s1[] = {1};
    static const uint32_t b_f32[] = {0x3fc00000, 0xc0000000, 0, 0x40500000, 0xbe000000, 0x7149f2ca};
    static const uint32_t b_bf16[] = {0x3f800000, 0xc0000000, 0x7f800000, 0x00010000};
    static const uint32_t b_one[] = {0x3f800000}, b_six[] = {0x40c00000};
    json_t *rt = json_pack("{s:s, s:{s:s, s:s}, s:[]}", "path", "rt.safetensors", "metadata",
                           "format", "pt", "note", "caf\xc3\xa9", "tensors");
    json_t *ts = json_object_get(rt, "tensors");
    json_array_append_new(ts, want_tensor("w.f32", "F32", 2, s23, rt_f32, 24, b_f32, 6, NULL));
    json_array_append_new(ts, want_tensor("b.bf16", "BF16", 1, s4, rt_bf16, 8, b_bf16, 4, NULL));
    json_array_append_new(ts, want_tensor("scalar", "F16", 0, NULL, rt_f16, 2, b_one, 1, NULL));
    json_array_append_new(ts, want_tensor("empty", "I64", 2, s30, NULL, 0, NULL, 0, NULL));
    json_array_append_new(ts, want_tensor("bytes", "U8", 1, s5, rt_u8, 5, NULL, 0, NULL));
    json_array_append_new(ts, want_tensor("flags", "BOOL", 1, s3, rt_bool, 3, NULL, 0, NULL));
    json_array_append_new(ts, want_tensor("ints", "I64", 1, s2, rt_i64, 16, NULL, 0, NULL));
    json_t *sh = json_pack("{s:s, s:{s:s}, s:[]}", "path", ".", "metadata", "format",
                           "s1.safetensors", "tensors");
    ts = json_object_get(sh, "tensors");
    json_array_append_new(ts, want_tensor("a", "F32", 1, s2, sh_a, 8, b_one, 1, "s1.safetensors"));
    json_array_append_new(ts, want_tensor("b", "F32", 1, s3, sh_b, 12, NULL, 0, "s1.safetensors"));
    json_array_append_new(ts, want_tensor("c", "F32", 1, s1, sh_c, 4, b_six, 1, "s2.safetensors"));
    return json_pack("[o, o]", rt, sh);
}

/* Without KGYM_ST_PYFILES: files this test writes, and an expect.json built from the source
 * arrays and hand-written values (never from reading the files back), so the checker itself
 * is exercised. */
static void write_own_expect(void **state)
{
    write_roundtrip_file(at(state, "rt.safetensors"));
    write_two_shards(state);
    write_index(state, "{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
                       "\"c\": \"s2.safetensors\"}");
    write_st_raw(at(state, "bad.safetensors"), "{\"x\": 1}", 0);
    const char *cfg = "{\"model_type\": \"qwen3\", \"vocab_size\": 1000, \"hidden_size\": 64, "
                      "\"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                      "\"head_dim\": 32, \"rope_theta\": 1000000, \"eos_token_id\": [5, 7], "
                      "\"torch_dtype\": \"bfloat16\"}";
    write_bytes(at(state, "config.json"), cfg, strlen(cfg));
    json_t *ex = json_pack(
        "{s:o, s:[{s:s, s:[s,s]}], s:[{s:s, s:{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:b,"
        "s:b,s:b,s:i,s:s,s:[i,i],s:s}}], s:[]}",
        "checkpoints", own_checkpoints(), "bad", "path", "bad.safetensors", "contains",
        "bad.safetensors", "tensor 'x'", "configs", "path", "config.json", "expect", "arch",
        "qwen3", "vocab_size", 1000, "hidden", 64, "n_layers", 2, "n_heads", 4, "n_kv_heads", 2,
        "head_dim", 32, "ffn", 96, "max_pos", 32768, "rms_eps", 1e-6, "rope_theta", 1e6,
        "tie_embeddings", 0, "attn_bias", 0, "qk_norm", 1, "bos_id", -1, "rope_type", "default",
        "eos_ids", 5, 7, "torch_dtype", "bfloat16", "bad_configs");
    assert_non_null(ex);
    assert_int_equal(json_dump_file(ex, at(state, "expect.json"), 0), 0);
    json_decref(ex);
}

static void test_expected_files(void **state)
{
    const char *dir = getenv("KGYM_ST_PYFILES");
    if (dir && *dir) {
        check_expect_dir(dir);
        /* and the other way: a file of ours for the Python side to read with `safetensors` */
        char out[1024];
        snprintf(out, sizeof out, "%s/c_written.safetensors", dir);
        write_roundtrip_file(out);
        return;
    }
    write_own_expect(state);
    check_expect_dir(((tdir *)*state)->root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test_setup_teardown(test_roundtrip, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_write_layout, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_write_rejects, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_reject_length_field, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_reject_header_json, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_reject_entries, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_reject_tiling, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_reject_paths, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_sharded, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_errors, dir_setup, dir_teardown),
        cmocka_unit_test(test_to_f32),
        cmocka_unit_test_setup_teardown(test_expected_files, dir_setup, dir_teardown),
    };
    return cmocka_run_group_tests_name("policy_safetensors", tests, NULL, NULL);
}
