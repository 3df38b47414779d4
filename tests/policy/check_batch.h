/* check_batch: what the policy's test dumpers (tests/policy/policy_check.c for the CPU reference,
 * tests/gpu/policy_gpu_check.c for the GPU model) share: the JSON batch they read, their option
 * lookups and their safetensors entries. Header-only (static functions): each is one program.
 *
 * A batch is JSON: {"ids": [[...], ...], "targets", "weights", "ent_weights", "pos", "doc",
 * "values"} (all B x T; ids required). */
#ifndef KGYM_TESTS_CHECK_BATCH_H
#define KGYM_TESTS_CHECK_BATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/safetensors.h"
#include "util/text.h"

#ifndef ERRCAP
#define ERRCAP 1024
#endif

/* A batch: B rows of T, each field NULL when absent. */
typedef struct batch {
    int B, T;
    int32_t *ids, *targets, *pos, *doc;
    float *weights, *ent_weights, *values;
} batch;

static inline void batch_free(batch *b)
{
    free(b->ids);
    free(b->targets);
    free(b->pos);
    free(b->doc);
    free(b->weights);
    free(b->ent_weights);
    free(b->values);
}

/* Reads field key, when present, as a B x T grid of numbers into *ints or *floats (the one that is
 * non-NULL). The first field read fixes B and T. */
static inline int read_grid(json_t *root, const char *key, batch *b, int32_t **ints, float **floats,
                            char *err)
{
    json_t *rows = json_object_get(root, key);
    if (!rows)
        return 0;
    if (!json_is_array(rows) || json_array_size(rows) == 0 ||
        (b->B && (int)json_array_size(rows) != b->B))
        return text_fail(err, ERRCAP, "batch: '%s' is not a list of %d rows", key, b->B);
    b->B = (int)json_array_size(rows);
    for (int r = 0; r < b->B; r++) {
        json_t *row = json_array_get(rows, (size_t)r);
        if (!json_is_array(row) || json_array_size(row) == 0 ||
            (b->T && (int)json_array_size(row) != b->T))
            return text_fail(err, ERRCAP, "batch: '%s' row %d is not a list of %d numbers", key, r,
                             b->T);
        b->T = (int)json_array_size(row);
    }
    size_t n = (size_t)b->B * (size_t)b->T;
    if ((ints && !(*ints = malloc(n * sizeof **ints))) ||
        (floats && !(*floats = malloc(n * sizeof **floats))))
        return text_fail(err, ERRCAP, "batch: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(json_array_get(rows, i / (size_t)b->T), i % (size_t)b->T);
        if (!json_is_number(v))
            return text_fail(err, ERRCAP, "batch: '%s' has a non-number at %zu", key, i);
        if (ints)
            (*ints)[i] = (int32_t)json_integer_value(v);
        else
            (*floats)[i] = (float)json_number_value(v);
    }
    return 0;
}

static inline int batch_load(const char *path, batch *b, char *err)
{
    memset(b, 0, sizeof *b);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return text_fail(err, ERRCAP, "%s: %s", path, je.text);
    int rc = read_grid(root, "ids", b, &b->ids, NULL, err) ||
             read_grid(root, "targets", b, &b->targets, NULL, err) ||
             read_grid(root, "weights", b, NULL, &b->weights, err) ||
             read_grid(root, "ent_weights", b, NULL, &b->ent_weights, err) ||
             read_grid(root, "pos", b, &b->pos, NULL, err) ||
             read_grid(root, "doc", b, &b->doc, NULL, err) ||
             read_grid(root, "values", b, NULL, &b->values, err);
    json_decref(root);
    if (rc == 0 && !b->ids)
        rc = text_fail(err, ERRCAP, "%s: no 'ids'", path);
    return rc ? -1 : 0;
}

static inline const char *opt(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return dflt;
}

static inline bool flag(int argc, char **argv, const char *name)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], name))
            return true;
    return false;
}

static inline pol_st_entry f32_entry(const char *name, const float *data, int ndim, int64_t d0,
                                     int64_t d1, int64_t d2)
{
    pol_st_entry e = {.name = name, .dtype = POL_DT_F32, .ndim = ndim, .data = data};
    e.shape[0] = d0;
    e.shape[1] = d1;
    e.shape[2] = d2;
    return e;
}

static inline pol_st_entry f64_entry(const char *name, const double *data, int64_t n)
{
    pol_st_entry e = {.name = name, .dtype = POL_DT_F64, .ndim = 1, .data = data};
    e.shape[0] = n;
    return e;
}

#endif
