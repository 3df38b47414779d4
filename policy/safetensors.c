/* safetensors: the strict reader (mmap + header check), sharded checkpoints through their index,
 * the atomic writer and the fp32 conversions. See safetensors.h for the contract.
 *
 * The format is little-endian; like the rest of kgym this assumes a little-endian host. Tensor
 * data pointers point straight into the mapping, so they are only as aligned as the file makes
 * them (HF writers keep them aligned); pol_tensor_to_f32 reads through memcpy either way. */
#include "policy/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/text.h"

/* ---- dtypes ---------------------------------------------------------------------------------- */

static const char *const dtype_names[POL_DT_COUNT] = {
    [POL_DT_F32] = "F32", [POL_DT_F16] = "F16",  [POL_DT_BF16] = "BF16", [POL_DT_F64] = "F64",
    [POL_DT_I64] = "I64", [POL_DT_I32] = "I32",  [POL_DT_I16] = "I16",   [POL_DT_I8] = "I8",
    [POL_DT_U8] = "U8",   [POL_DT_BOOL] = "BOOL"};

static const size_t dtype_sizes[POL_DT_COUNT] = {
    [POL_DT_F32] = 4, [POL_DT_F16] = 2, [POL_DT_BF16] = 2, [POL_DT_F64] = 8, [POL_DT_I64] = 8,
    [POL_DT_I32] = 4, [POL_DT_I16] = 2, [POL_DT_I8] = 1,   [POL_DT_U8] = 1,  [POL_DT_BOOL] = 1};

const char *pol_dtype_name(pol_dtype dt)
{
    return (unsigned)dt < POL_DT_COUNT ? dtype_names[dt] : NULL;
}

size_t pol_dtype_size(pol_dtype dt)
{
    return (unsigned)dt < POL_DT_COUNT ? dtype_sizes[dt] : 0;
}

int pol_dtype_parse(const char *name)
{
    for (int i = 0; name && i < POL_DT_COUNT; i++)
        if (strcmp(name, dtype_names[i]) == 0)
            return i;
    return -1;
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* ---- parsing one file's bytes ---------------------------------------------------------------- */

/* One parsed file: the header JSON owns the tensor names the tensors point to. */
typedef struct st_parsed {
    json_t *header;
    pol_tensor *tensors;
    size_t n;
} st_parsed;

static void st_parsed_free(st_parsed *p)
{
    json_decref(p->header);
    free(p->tensors);
    memset(p, 0, sizeof *p);
}

/* A JSON integer in [0, INT64_MAX]. */
static bool json_get_count(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static int parse_dtype(const char *file, const char *name, const json_t *v, pol_tensor *t,
                       char *err, size_t errcap)
{
    if (!json_is_string(v))
        return text_fail(err, errcap, "%s: tensor '%s': 'dtype' is not a string", file, name);
    int dt = pol_dtype_parse(json_string_value(v));
    if (dt < 0)
        return text_fail(err, errcap, "%s: tensor '%s': unsupported dtype '%s'", file, name,
                         json_string_value(v));
    t->dtype = (pol_dtype)dt;
    return 0;
}

static int parse_shape(const char *file, const char *name, const json_t *v, pol_tensor *t,
                       char *err, size_t errcap)
{
    if (!json_is_array(v))
        return text_fail(err, errcap, "%s: tensor '%s': 'shape' is not an array", file, name);
    if (json_array_size(v) > POL_ST_MAX_DIMS)
        return text_fail(err, errcap, "%s: tensor '%s': shape has %zu dims (at most %d)", file,
                         name, json_array_size(v), POL_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(v);
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d;
        if (!json_get_count(json_array_get(v, (size_t)i), &d))
            return text_fail(err, errcap,
                             "%s: tensor '%s': shape[%d] is not a non-negative integer", file, name,
                             i);
        t->shape[i] = (int64_t)d;
        if (__builtin_mul_overflow(numel, t->shape[i], &numel))
            return text_fail(err, errcap, "%s: tensor '%s': shape's element count overflows", file,
                             name);
    }
    t->numel = numel;
    return 0;
}

/* Offsets [begin, end) relative to the data area; their length must match shape x dtype. */
static int parse_offsets(const char *file, const char *name, const json_t *v, const uint8_t *data,
                         size_t data_len, pol_tensor *t, char *err, size_t errcap)
{
    uint64_t b, e, need;
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_get_count(json_array_get(v, 0), &b) ||
        !json_get_count(json_array_get(v, 1), &e))
        return text_fail(
            err, errcap,
            "%s: tensor '%s': 'data_offsets' is not [begin, end] of non-negative integers", file,
            name);
    if (b > e)
        return text_fail(err, errcap,
                         "%s: tensor '%s': data offsets [%llu, %llu) end before they begin", file,
                         name, (unsigned long long)b, (unsigned long long)e);
    if (e > data_len)
        return text_fail(err, errcap,
                         "%s: tensor '%s': data offsets [%llu, %llu) lie outside the data area "
                         "(%zu bytes)",
                         file, name, (unsigned long long)b, (unsigned long long)e, data_len);
    if (__builtin_mul_overflow((uint64_t)t->numel, (uint64_t)dtype_sizes[t->dtype], &need))
        return text_fail(err, errcap, "%s: tensor '%s': byte length overflows", file, name);
    if (e - b != need)
        return text_fail(err, errcap,
                         "%s: tensor '%s': data offsets [%llu, %llu) hold %llu bytes, but %lld "
                         "elements of %s need %llu",
                         file, name, (unsigned long long)b, (unsigned long long)e,
                         (unsigned long long)(e - b), (long long)t->numel, dtype_names[t->dtype],
                         (unsigned long long)need);
    t->data = data + b;
    t->nbytes = (size_t)need;
    return 0;
}

/* One header entry: exactly "dtype", "shape" and "data_offsets". */
static int parse_entry(const char *file, const char *name, const json_t *v, const uint8_t *data,
                       size_t data_len, pol_tensor *t, char *err, size_t errcap)
{
    if (!json_is_object(v))
        return text_fail(err, errcap, "%s: tensor '%s': entry is not an object", file, name);
    const char *key;
    const json_t *field;
    json_object_foreach((json_t *)v, key, field)
    {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
            strcmp(key, "data_offsets") != 0)
            return text_fail(err, errcap, "%s: tensor '%s': unexpected field '%s'", file, name,
                             key);
    }
    static const char *const required[] = {"dtype", "shape", "data_offsets"};
    for (size_t i = 0; i < 3; i++)
        if (!json_object_get(v, required[i]))
            return text_fail(err, errcap, "%s: tensor '%s': missing '%s'", file, name, required[i]);
    memset(t, 0, sizeof *t);
    t->name = name;
    t->file = file;
    if (parse_dtype(file, name, json_object_get(v, "dtype"), t, err, errcap) < 0 ||
        parse_shape(file, name, json_object_get(v, "shape"), t, err, errcap) < 0)
        return -1;
    return parse_offsets(file, name, json_object_get(v, "data_offsets"), data, data_len, t, err,
                         errcap);
}

static int check_metadata(const char *file, const json_t *meta, char *err, size_t errcap)
{
    if (!json_is_object(meta))
        return text_fail(err, errcap, "%s: '__metadata__' is not an object", file);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)meta, key, v)
    {
        if (!json_is_string(v))
            return text_fail(err, errcap, "%s: '__metadata__' value of '%s' is not a string", file,
                             key);
    }
    return 0;
}

/* A tensor's byte span inside the data area, for the tiling check. */
typedef struct st_span {
    size_t begin, end;
    const char *name;
} st_span;

static int span_cmp(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Sorted by begin, the tensors must cover the data area exactly: no gap, no overlap, nothing
 * after the last one (the reference implementation's rule; it also makes aliasing impossible). */
static int check_tiling(const char *file, const pol_tensor *ts, size_t n, const uint8_t *data,
                        size_t data_len, char *err, size_t errcap)
{
    st_span *spans = calloc(n ? n : 1, sizeof *spans);
    if (!spans)
        return text_fail(err, errcap, "%s: out of memory", file);
    for (size_t i = 0; i < n; i++) {
        spans[i].begin = (size_t)((const uint8_t *)ts[i].data - data);
        spans[i].end = spans[i].begin + ts[i].nbytes;
        spans[i].name = ts[i].name;
    }
    qsort(spans, n, sizeof *spans, span_cmp);
    size_t at = 0;
    const char *prev = NULL;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (spans[i].begin < at)
            rc = text_fail(err, errcap,
                           "%s: tensor '%s': data offsets [%zu, %zu) overlap tensor '%s'", file,
                           spans[i].name, spans[i].begin, spans[i].end, prev);
        else if (spans[i].begin > at)
            rc =
                text_fail(err, errcap,
                          "%s: tensor '%s': data offsets [%zu, %zu) leave a gap of %zu bytes after "
                          "%s%s%s",
                          file, spans[i].name, spans[i].begin, spans[i].end, spans[i].begin - at,
                          prev ? "tensor '" : "the start of the data area", prev ? prev : "",
                          prev ? "'" : "");
        at = spans[i].end;
        prev = spans[i].name;
    }
    if (rc == 0 && at != data_len)
        rc = text_fail(err, errcap,
                       "%s: the tensors end at byte %zu but the data area holds %zu bytes (%zu "
                       "unaccounted for after %s%s%s)",
                       file, at, data_len, data_len - at, prev ? "tensor '" : "the header",
                       prev ? prev : "", prev ? "'" : "");
    free(spans);
    return rc;
}

static int load_header(const char *file, const uint8_t *buf, size_t len, json_t **out,
                       size_t *data_start, char *err, size_t errcap)
{
    if (len < 8)
        return text_fail(
            err, errcap,
            "%s: %zu bytes is too short for a safetensors file (no 8-byte header length)", file,
            len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    if (n > POL_ST_MAX_HEADER)
        return text_fail(err, errcap, "%s: header length %llu exceeds the limit of %u bytes", file,
                         (unsigned long long)n, POL_ST_MAX_HEADER);
    if (n > len - 8)
        return text_fail(err, errcap,
                         "%s: header length %llu runs past the end of the file (%zu bytes)", file,
                         (unsigned long long)n, len);
    const char *hdr = (const char *)buf + 8;
    if (n == 0 || hdr[0] != '{')
        return text_fail(err, errcap, "%s: header is not a JSON object", file);
    if (!text_is_utf8(hdr, (size_t)n))
        return text_fail(err, errcap, "%s: header is not valid UTF-8", file);
    json_error_t jerr;
    json_t *root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root && json_error_code(&jerr) == json_error_duplicate_key)
        return text_fail(err, errcap, "%s: duplicate tensor name in the header (%s)", file,
                         jerr.text);
    if (!root)
        return text_fail(err, errcap, "%s: header is not valid JSON: %s (byte %d)", file, jerr.text,
                         jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return text_fail(err, errcap, "%s: header is not a JSON object", file);
    }
    *out = root;
    *data_start = 8 + (size_t)n;
    return 0;
}

/* Parses and checks a whole file held in memory; names in messages are prefixed with `file`,
 * which the tensors keep pointing to. */
static int st_parse(const char *file, const uint8_t *buf, size_t len, st_parsed *out, char *err,
                    size_t errcap)
{
    memset(out, 0, sizeof *out);
    size_t start;
    if (load_header(file, buf, len, &out->header, &start, err, errcap) < 0)
        return -1;
    const uint8_t *data = buf + start;
    size_t data_len = len - start;
    size_t cap = json_object_size(out->header);
    out->tensors = calloc(cap ? cap : 1, sizeof *out->tensors);
    if (!out->tensors) {
        st_parsed_free(out);
        return text_fail(err, errcap, "%s: out of memory", file);
    }
    const char *key;
    const json_t *v;
    json_object_foreach(out->header, key, v)
    {
        int rc =
            strcmp(key, "__metadata__") == 0
                ? check_metadata(file, v, err, errcap)
                : parse_entry(file, key, v, data, data_len, &out->tensors[out->n++], err, errcap);
        if (rc < 0) {
            st_parsed_free(out);
            return -1;
        }
    }
    if (check_tiling(file, out->tensors, out->n, data, data_len, err, errcap) < 0) {
        st_parsed_free(out);
        return -1;
    }
    return 0;
}

int pol_st_check_buffer(const uint8_t *buf, size_t len, char *err, size_t errcap)
{
    if (!buf && len)
        return text_fail(err, errcap, "safetensors buffer: NULL");
    st_parsed p;
    if (st_parse("safetensors buffer", buf ? buf : (const uint8_t *)"", len, &p, err, errcap) < 0)
        return -1;
    st_parsed_free(&p);
    return 0;
}

/* ---- the checkpoint: mapped files and their tensors ------------------------------------------ */

typedef struct st_file {
    char *path; /* what pol_tensor.file points to */
    void *map;
    size_t len;
    json_t *header;
} st_file;

struct pol_st {
    st_file *files;
    size_t n_files;
    pol_tensor *tensors; /* in name order */
    size_t n;
    const json_t *metadata; /* the first file's __metadata__ (borrowed from its header) */
};

/* Maps a regular file read-only; the descriptor is closed at once (the mapping keeps it). */
static int map_file(const char *path, void **map, size_t *len, char *err, size_t errcap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return text_fail(err, errcap, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return text_fail(err, errcap, "%s: not a regular file", path);
    }
    *map = NULL;
    *len = (size_t)sb.st_size;
    if (*len > 0) {
        void *m = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return text_fail(err, errcap, "%s: mmap: %s", path, strerror(e));
        }
        *map = m;
    }
    close(fd);
    return 0;
}

/* Maps, checks and adds one safetensors file's tensors to st (still unsorted). */
static int st_add_file(pol_st *st, const char *path, char *err, size_t errcap)
{
    st_file *files = realloc(st->files, (st->n_files + 1) * sizeof *files);
    if (!files)
        return text_fail(err, errcap, "%s: out of memory", path);
    st->files = files;
    st_file *f = &st->files[st->n_files];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path)))
        return text_fail(err, errcap, "%s: out of memory", path);
    st->n_files++; /* from here pol_st_free releases it */
    if (map_file(path, &f->map, &f->len, err, errcap) < 0)
        return -1;
    st_parsed p;
    if (st_parse(f->path, f->map ? f->map : "", f->len, &p, err, errcap) < 0)
        return -1;
    f->header = p.header;
    pol_tensor *ts = realloc(st->tensors, (st->n + p.n + 1) * sizeof *ts);
    if (!ts) {
        free(p.tensors);
        return text_fail(err, errcap, "%s: out of memory", path);
    }
    st->tensors = ts;
    memcpy(st->tensors + st->n, p.tensors, p.n * sizeof *ts);
    st->n += p.n;
    free(p.tensors);
    return 0;
}

static int tensor_name_cmp(const void *a, const void *b)
{
    return strcmp(((const pol_tensor *)a)->name, ((const pol_tensor *)b)->name);
}

/* Sorts by name; two tensors of one name (only possible across shards) are an error. */
static int st_sort_unique(pol_st *st, char *err, size_t errcap)
{
    qsort(st->tensors, st->n, sizeof *st->tensors, tensor_name_cmp);
    for (size_t i = 1; i < st->n; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return text_fail(err, errcap, "tensor '%s' is in two shards: %s and %s",
                             st->tensors[i].name, st->tensors[i - 1].file, st->tensors[i].file);
    return 0;
}

void pol_st_free(pol_st *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n_files; i++) {
        if (st->files[i].map)
            munmap(st->files[i].map, st->files[i].len);
        json_decref(st->files[i].header);
        free(st->files[i].path);
    }
    free(st->files);
    free(st->tensors);
    free(st);
}

/* ---- sharded checkpoints --------------------------------------------------------------------- */

/* A shard is named relative to the index's folder, never outside it. */
static bool shard_name_ok(const char *s)
{
    if (!*s || s[0] == '/')
        return false;
    for (const char *p = s; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == s || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return false;
    return true;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The weight_map's distinct shard names, sorted (so the first shard is model-00001-...). */
static int collect_shards(const char *index, const json_t *wmap, const char ***out, size_t *n_out,
                          char *err, size_t errcap)
{
    size_t n = 0, cap = json_object_size(wmap);
    const char **names = calloc(cap ? cap : 1, sizeof *names);
    if (!names)
        return text_fail(err, errcap, "%s: out of memory", index);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)wmap, key, v)
    {
        if (!json_is_string(v) || !shard_name_ok(json_string_value(v))) {
            free(names);
            return text_fail(
                err, errcap,
                "%s: weight_map entry for tensor '%s' is not a relative shard file name", index,
                key);
        }
        names[n++] = json_string_value(v);
    }
    qsort(names, n, sizeof *names, str_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0)
            names[u++] = names[i];
    *out = names;
    *n_out = u;
    return 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Every shard tensor must be mapped to its own shard, and every mapped tensor must exist. */
static int check_weight_map(const pol_st *st, const char *index, const json_t *wmap, char *err,
                            size_t errcap)
{
    size_t dir_len = (size_t)(base_name(index) - index); /* every shard path is dir + name */
    for (size_t i = 0; i < st->n; i++) {
        const pol_tensor *t = &st->tensors[i];
        const json_t *v = json_object_get(wmap, t->name);
        if (!v)
            return text_fail(err, errcap, "%s: tensor '%s' of shard %s is not in the weight_map",
                             index, t->name, t->file);
        const char *shard = json_string_value(v);
        if (strcmp(t->file + dir_len, shard) != 0)
            return text_fail(err, errcap,
                             "%s: weight_map puts tensor '%s' in '%s', but it is in shard %s",
                             index, t->name, shard, t->file);
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)wmap, key, v)
    {
        if (!pol_st_find(st, key))
            return text_fail(err, errcap,
                             "%s: weight_map puts tensor '%s' in shard '%s', which does "
                             "not hold it",
                             index, key, json_string_value(v));
    }
    return 0;
}

static int load_index_json(const char *index, json_t **out, char *err, size_t errcap)
{
    void *map;
    size_t len;
    if (map_file(index, &map, &len, err, errcap) < 0)
        return -1;
    json_error_t jerr;
    json_t *root = json_loadb(map ? map : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (map)
        munmap(map, len);
    if (!root)
        return text_fail(err, errcap, "%s: not valid JSON: %s (line %d)", index, jerr.text,
                         jerr.line);
    if (!json_is_object(root) || !json_is_object(json_object_get(root, "weight_map"))) {
        json_decref(root);
        return text_fail(err, errcap, "%s: no \"weight_map\" object", index);
    }
    if (json_object_size(json_object_get(root, "weight_map")) == 0) {
        json_decref(root);
        return text_fail(err, errcap, "%s: the weight_map is empty", index);
    }
    *out = root;
    return 0;
}

static int open_shards(pol_st *st, const char *index, const json_t *wmap, char *err, size_t errcap)
{
    const char **shards = NULL;
    size_t n_shards = 0;
    if (collect_shards(index, wmap, &shards, &n_shards, err, errcap) < 0)
        return -1;
    size_t dir_len = (size_t)(base_name(index) - index);
    int rc = 0;
    for (size_t i = 0; i < n_shards && rc == 0; i++) {
        size_t need = dir_len + strlen(shards[i]) + 1;
        char *path = malloc(need);
        if (!path) {
            rc = text_fail(err, errcap, "%s: out of memory", index);
            break;
        }
        snprintf(path, need, "%.*s%s", (int)dir_len, index, shards[i]);
        if (access(path, F_OK) != 0)
            rc = text_fail(err, errcap, "%s: shard '%s' is missing (%s)", index, shards[i],
                           strerror(errno));
        else
            rc = st_add_file(st, path, err, errcap);
        free(path);
    }
    free(shards);
    return rc;
}

static int open_index(pol_st *st, const char *index, char *err, size_t errcap)
{
    json_t *root;
    if (load_index_json(index, &root, err, errcap) < 0)
        return -1;
    const json_t *wmap = json_object_get(root, "weight_map");
    int rc = open_shards(st, index, wmap, err, errcap);
    if (rc == 0)
        rc = st_sort_unique(st, err, errcap);
    if (rc == 0)
        rc = check_weight_map(st, index, wmap, err, errcap);
    json_decref(root);
    return rc;
}

/* ---- opening --------------------------------------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int open_path(pol_st *st, const char *path, char *err, size_t errcap)
{
    struct stat sb;
    if (stat(path, &sb) < 0)
        return text_fail(err, errcap, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        char p[4096];
        if (!text_fmt(p, sizeof p, "%s/model.safetensors.index.json", path))
            return text_fail(err, errcap, "%s: path too long", path);
        if (access(p, F_OK) == 0)
            return open_index(st, p, err, errcap);
        if (!text_fmt(p, sizeof p, "%s/model.safetensors", path))
            return text_fail(err, errcap, "%s: path too long", path);
        if (access(p, F_OK) == 0)
            return st_add_file(st, p, err, errcap);
        return text_fail(err, errcap,
                         "%s: holds neither model.safetensors.index.json nor "
                         "model.safetensors",
                         path);
    }
    if (ends_with(path, ".json"))
        return open_index(st, path, err, errcap);
    return st_add_file(st, path, err, errcap);
}

int pol_st_open(const char *path, pol_st **out, char *err, size_t errcap)
{
    if (!path || !out)
        return text_fail(err, errcap, "pol_st_open: no path");
    *out = NULL;
    pol_st *st = calloc(1, sizeof *st);
    if (!st)
        return text_fail(err, errcap, "%s: out of memory", path);
    if (open_path(st, path, err, errcap) < 0 || st_sort_unique(st, err, errcap) < 0) {
        pol_st_free(st);
        return -1;
    }
    if (st->n_files > 0)
        st->metadata = json_object_get(st->files[0].header, "__metadata__");
    *out = st;
    return 0;
}

size_t pol_st_count(const pol_st *st)
{
    return st ? st->n : 0;
}

const pol_tensor *pol_st_at(const pol_st *st, size_t i)
{
    return st && i < st->n ? &st->tensors[i] : NULL;
}

const pol_tensor *pol_st_find(const pol_st *st, const char *name)
{
    if (!st || !name || st->n == 0)
        return NULL;
    pol_tensor key = {.name = name};
    return bsearch(&key, st->tensors, st->n, sizeof key, tensor_name_cmp);
}

const char *pol_st_metadata(const pol_st *st, const char *key)
{
    if (!st || !key || !st->metadata)
        return NULL;
    return json_string_value(json_object_get(st->metadata, key));
}

/* ---- fp32 conversion ------------------------------------------------------------------------- */

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16 to binary32, exactly: subnormals are normalised, inf and NaN keep their sign and
 * (NaN) payload. */
static float half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f)
        return f32_from_bits(sign | 0x7f800000u | mant << 13);
    if (exp == 0) {
        /* zero or subnormal: mant x 2^-24 is exact in fp32 */
        float v = ldexpf((float)mant, -24);
        return sign ? -v : v;
    }
    return f32_from_bits(sign | (exp + 112) << 23 | mant << 13);
}

int pol_tensor_to_f32(const pol_tensor *t, float *out)
{
    if (!t || (!out && t->numel > 0))
        return -1;
    const uint8_t *p = t->data;
    size_t n = (size_t)t->numel;
    switch (t->dtype) {
    case POL_DT_F32:
        if (n)
            memcpy(out, p, n * sizeof *out);
        return 0;
    case POL_DT_BF16:
    case POL_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, sizeof h);
            out[i] = t->dtype == POL_DT_BF16 ? f32_from_bits((uint32_t)h << 16) : half_to_f32(h);
        }
        return 0;
    default:
        return -1;
    }
}

/* ---- writing --------------------------------------------------------------------------------- */

static int add_metadata(const char *path, json_t *root, const char *const *metadata, char *err,
                        size_t errcap)
{
    if (!metadata)
        return 0;
    json_t *meta = json_object();
    if (!meta || json_object_set_new(root, "__metadata__", meta) < 0)
        return text_fail(err, errcap, "%s: out of memory", path);
    for (size_t i = 0; metadata[i]; i += 2) {
        if (!metadata[i + 1])
            return text_fail(err, errcap, "%s: metadata key '%s' has no value", path, metadata[i]);
        json_t *v = json_string(metadata[i + 1]);
        if (!v)
            return text_fail(err, errcap, "%s: metadata '%s': value is not valid UTF-8", path,
                             metadata[i]);
        if (json_object_get(meta, metadata[i]) || json_object_set_new(meta, metadata[i], v) < 0) {
            json_decref(v);
            return text_fail(err, errcap, "%s: metadata key '%s': duplicate or not valid UTF-8",
                             path, metadata[i]);
        }
    }
    return 0;
}

/* Checks one entry to write and computes its byte length. */
static int entry_bytes(const char *path, const pol_st_entry *e, uint64_t *nbytes, char *err,
                       size_t errcap)
{
    const char *name = e->name;
    if (!name || !*name || strcmp(name, "__metadata__") == 0 || !text_is_utf8(name, strlen(name)))
        return text_fail(err, errcap, "%s: tensor '%s': not a valid tensor name", path,
                         name ? name : "(null)");
    if (!pol_dtype_name(e->dtype))
        return text_fail(err, errcap, "%s: tensor '%s': unknown dtype %d", path, name,
                         (int)e->dtype);
    if (e->ndim < 0 || e->ndim > POL_ST_MAX_DIMS)
        return text_fail(err, errcap, "%s: tensor '%s': %d dims (0 to %d allowed)", path, name,
                         e->ndim, POL_ST_MAX_DIMS);
    uint64_t count = dtype_sizes[e->dtype];
    for (int i = 0; i < e->ndim; i++)
        if (e->shape[i] < 0 || __builtin_mul_overflow(count, (uint64_t)e->shape[i], &count))
            return text_fail(err, errcap,
                             "%s: tensor '%s': shape[%d] = %lld is negative or overflows", path,
                             name, i, (long long)e->shape[i]);
    if (count > (uint64_t)INT64_MAX / 2)
        return text_fail(err, errcap, "%s: tensor '%s': too large", path, name);
    if (count && !e->data)
        return text_fail(err, errcap, "%s: tensor '%s': no data", path, name);
    *nbytes = count;
    return 0;
}

static json_t *entry_json(const pol_st_entry *e, uint64_t begin, uint64_t end)
{
    json_t *shape = json_array();
    for (int i = 0; shape && i < e->ndim; i++)
        json_array_append_new(shape, json_integer(e->shape[i]));
    return json_pack("{s:s, s:o, s:[I,I]}", "dtype", dtype_names[e->dtype], "shape", shape,
                     "data_offsets", (json_int_t)begin, (json_int_t)end);
}

/* The header's JSON: __metadata__ first, then the tensors in the given order, their data packed
 * one after another. */
static json_t *build_header(const char *path, const pol_st_entry *entries, size_t n,
                            const char *const *metadata, char *err, size_t errcap)
{
    json_t *root = json_object();
    if (!root) {
        text_fail(err, errcap, "%s: out of memory", path);
        return NULL;
    }
    if (add_metadata(path, root, metadata, err, errcap) < 0)
        goto fail;
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = entries[i].name;
        uint64_t nbytes = 0;
        if (entry_bytes(path, &entries[i], &nbytes, err, errcap) < 0)
            goto fail;
        if (json_object_get(root, name)) {
            text_fail(err, errcap, "%s: tensor '%s': duplicate name", path, name);
            goto fail;
        }
        if (at + nbytes > (uint64_t)INT64_MAX) {
            text_fail(err, errcap, "%s: tensor '%s': the file would be too large", path, name);
            goto fail;
        }
        json_t *ej = entry_json(&entries[i], at, at + nbytes);
        if (!ej || json_object_set_new(root, name, ej) < 0) {
            text_fail(err, errcap, "%s: tensor '%s': out of memory", path, name);
            goto fail;
        }
        at += nbytes;
    }
    return root;
fail:
    json_decref(root);
    return NULL;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        size_t chunk = len < (1u << 30) ? len : (1u << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* The 8-byte length, then the header padded with spaces to a multiple of 8 (so the data area,
 * and with it every tensor HF-style writers put first, starts 8-byte aligned), then the data. */
static int write_contents(int fd, const char *hdr, const pol_st_entry *entries, size_t n)
{
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    if (write_all(fd, len8, 8) < 0 || write_all(fd, hdr, hlen) < 0 ||
        write_all(fd, spaces, padded - hlen) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t nbytes = dtype_sizes[entries[i].dtype];
        for (int d = 0; d < entries[i].ndim; d++)
            nbytes *= (size_t)entries[i].shape[d]; /* checked in build_header */
        if (nbytes && write_all(fd, entries[i].data, nbytes) < 0)
            return -1;
    }
    return 0;
}

static void fsync_parent_dir(const char *path)
{
    size_t dir_len = (size_t)(base_name(path) - path);
    char dir[4096];
    if (dir_len == 0)
        strcpy(dir, ".");
    else if (!text_fmt(dir, sizeof dir, "%.*s", (int)dir_len, path))
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Writes everything into tmp and fsyncs it; the caller renames. */
static int write_tmp(const char *tmp, const char *hdr, const pol_st_entry *entries, size_t n,
                     char *err, size_t errcap)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return text_fail(err, errcap, "%s: %s", tmp, strerror(errno));
    int rc = write_contents(fd, hdr, entries, n) < 0 || fsync(fd) < 0 ? -1 : 0;
    int e = errno;
    if (close(fd) < 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    return rc < 0 ? text_fail(err, errcap, "%s: write: %s", tmp, strerror(e)) : 0;
}

int pol_st_write(const char *path, const pol_st_entry *entries, size_t n,
                 const char *const *metadata, char *err, size_t errcap)
{
    if (!path || (!entries && n))
        return text_fail(err, errcap, "pol_st_write: no path or entries");
    json_t *root = build_header(path, entries, n, metadata, err, errcap);
    if (!root)
        return -1;
    char *hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    size_t tmp_len = strlen(path) + 5;
    char *tmp = malloc(tmp_len);
    if (!hdr || !tmp) {
        free(hdr);
        free(tmp);
        return text_fail(err, errcap, "%s: out of memory", path);
    }
    snprintf(tmp, tmp_len, "%s.tmp", path);
    int rc = write_tmp(tmp, hdr, entries, n, err, errcap);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = text_fail(err, errcap, "%s: rename from %s: %s", path, tmp, strerror(errno));
    if (rc == 0)
        fsync_parent_dir(path);
    else
        unlink(tmp);
    free(tmp);
    free(hdr);
    return rc;
}
