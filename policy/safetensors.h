/* safetensors: Hugging Face safetensors files, read through mmap with a strict header check, and
 * written atomically. One file (`model.safetensors`), or a sharded checkpoint through its
 * `model.safetensors.index.json`; `pol_st_open` takes either, or a directory holding one.
 *
 * The header is untrusted input: its size is bounded, every tensor's offsets must lie inside the
 * data area, the tensors must cover the data area contiguously without overlap, shape x dtype
 * size must equal the byte length, and names must be unique (across shards too). Every
 * rejection names the file and the tensor. */
#ifndef KGYM_POLICY_SAFETENSORS_H
#define KGYM_POLICY_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POL_ST_MAX_DIMS 8
#define POL_ST_MAX_HEADER (100u << 20) /* as the reference implementation: 100 MB */

typedef enum {
    POL_DT_F32,
    POL_DT_F16,
    POL_DT_BF16,
    POL_DT_F64,
    POL_DT_I64,
    POL_DT_I32,
    POL_DT_I16,
    POL_DT_I8,
    POL_DT_U8,
    POL_DT_BOOL,
    POL_DT_COUNT
} pol_dtype;

typedef struct pol_tensor {
    const char *name;
    pol_dtype dtype;
    int ndim;
    int64_t shape[POL_ST_MAX_DIMS];
    int64_t numel;
    const void *data; /* inside the mapping: valid until pol_st_free */
    size_t nbytes;
    const char *file; /* the shard it came from */
} pol_tensor;

typedef struct pol_st pol_st;

/* "F32", "BF16", ...; NULL for an unknown dtype. */
const char *pol_dtype_name(pol_dtype dt);
/* Bytes per element (1 for BOOL). */
size_t pol_dtype_size(pol_dtype dt);
/* Parses a dtype name; -1 when unknown. */
int pol_dtype_parse(const char *name);

/* Opens a checkpoint. Returns 0, or -1 with err filled ("model.safetensors: tensor
 * 'model.norm.weight': data offsets [10, 20) overlap ..."). */
int pol_st_open(const char *path, pol_st **out, char *err, size_t errcap);
void pol_st_free(pol_st *st);

size_t pol_st_count(const pol_st *st);
/* Tensors in name order. */
const pol_tensor *pol_st_at(const pol_st *st, size_t i);
/* NULL when absent. */
const pol_tensor *pol_st_find(const pol_st *st, const char *name);
/* A `__metadata__` string value of the (first) file; NULL when absent. */
const char *pol_st_metadata(const pol_st *st, const char *key);

/* Checks one whole safetensors file held in memory (the fuzzer's entry point, and what
 * pol_st_open runs on each mapping). Returns 0, or -1 with err filled. */
int pol_st_check_buffer(const uint8_t *buf, size_t len, char *err, size_t errcap);

/* Copies a tensor into fp32 (from F32, F16 or BF16); -1 for another dtype. out holds numel. */
int pol_tensor_to_f32(const pol_tensor *t, float *out);

/* One tensor to write. */
typedef struct pol_st_entry {
    const char *name;
    pol_dtype dtype;
    int ndim;
    int64_t shape[POL_ST_MAX_DIMS];
    const void *data; /* numel x dtype size bytes */
} pol_st_entry;

/* Writes a safetensors file: into PATH.tmp, fsync, rename, so a crash never leaves a partial
 * file under PATH. metadata: NULL or a NULL-terminated key, value, key, value, ... list.
 * Returns 0, or -1 with err filled. */
int pol_st_write(const char *path, const pol_st_entry *entries, size_t n,
                 const char *const *metadata, char *err, size_t errcap);

#endif
