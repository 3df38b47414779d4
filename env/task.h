/* task: the task store, the catalogue of problems an episode can be started on (DESIGN.md §4).
 *
 * A task is one PyTorch reference (`model.py`: Model, get_inputs(), get_init_inputs()) plus its
 * metadata. Three sources load into one store:
 *  - a directory of task folders (our format, dataset/tasks/): <folder>/model.py and task.json;
 *    the optional CPU variant (the same model at a size a CPU test can run) is derived from
 *    model.py by task.json's "cpu_sizes" or, when it differs in more than sizes, read from a
 *    model_cpu.py;
 *  - a JSONL file in the CUDA-Agent-Ops-6K style: one {"code", "ops", "data_source", ...} a line;
 *  - KernelBench levels 1-3: a checkout's level folders, or a JSONL of {level, problem_id, name,
 *    code}.
 * Loading is strict and all-or-nothing per call: a malformed line, a missing field, a duplicate
 * id or an oversized file fails the whole call with a message naming the file, line or id, and
 * the store is left exactly as it was (the server refuses to start on a broken dataset rather
 * than serving part of it). The store is immutable once loaded, so readers need no lock. */
#ifndef KGYM_TASK_H
#define KGYM_TASK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Size limits. A reference model is a short Python file; anything near these is a mistake. */
#define TASK_MAX_CODE_BYTES (1u << 20)   /* model.py, model_cpu.py, a "code" field */
#define TASK_MAX_META_BYTES (256u << 10) /* task.json */
#define TASK_MAX_LINE_BYTES (4u << 20)   /* one JSONL line (code escaped + metadata) */
#define TASK_MAX_ID_LEN 200
#define TASK_MAX_TASKS 1000000 /* per store */

typedef struct task {
    char *id;          /* unique, e.g. "kgym/gemm_bias_gelu", "ops/17", "kb/L2/5" */
    char *suite;       /* "kgym", "ops", "kernelbench", or a JSONL line's "suite" */
    char *name;        /* short human name */
    char *description; /* never NULL ("" when the source has none) */
    int level;         /* 1 single op, 2 fusion, 3 larger; 0 = not given */
    char *code;        /* model.py text */
    char *code_cpu;    /* model.py at a CPU-test size (given or derived), or NULL */
    /* SHA-256 of code and of code_cpu ("" without one), set once when the task is made */
    char code_sha256[65], code_cpu_sha256[65];
    double atol, rtol; /* correctness tolerances (default 1e-2 each) */
    json_t *meta;      /* owned object: every other field of the source (ops, data_source, ...) */
    char *origin;      /* where it was loaded from ("path:line", a folder): for messages only */
} task;

typedef struct task_store task_store;

/* NULL only when memory ran out. */
task_store *task_store_new(void);
void task_store_free(task_store *ts);

/* Loaders. Each returns the number of tasks added (>= 0), or -1 with a message in err (errcap
 * bytes, always NUL-terminated when errcap > 0); on -1 nothing was added. */

/* A directory of task folders, loaded in folder-name order; hidden entries and plain files are
 * skipped. task.json: {"id"?, "name"?, "description"?, "level"?, "suite"?, "atol"?, "rtol"?,
 * "cpu_sizes"?, ...}; id defaults to "<suite>/<folder>" with suite "kgym".
 *
 * "cpu_sizes" is an object {NAME: number, ...} (NAME an ASCII Python identifier). code_cpu is
 * then model.py with, for each NAME, its one top-level line "NAME = <anything>" (at column 0,
 * exactly that spacing) replaced by "NAME = <value>": integers as integers, reals with %.17g
 * (plus ".0" if that looks like an integer). No such line, or more than one, is an error; so is
 * a folder with both "cpu_sizes" and model_cpu.py. */
int task_store_load_dir(task_store *ts, const char *dir, char *err, size_t errcap);

/* A JSONL file, in line order: {"id"?, "code", "code_cpu"?, "cpu_sizes"?, "suite"?, "name"?,
 * "description"?, "level"?, "atol"?, "rtol"?, ...}; suite defaults to "ops", id to
 * "<suite>/<line number>". "cpu_sizes" derives code_cpu from code as for a task folder (giving
 * both it and "code_cpu" is an error). */
int task_store_load_jsonl(task_store *ts, const char *path, char *err, size_t errcap);

/* KernelBench: a folder (holding level1..level3, or a repository root holding
 * KernelBench/level1..level3) of <problem_id>_<Name>.py files, or a JSONL file of {level,
 * problem_id, name, code}. Ids "kb/L<level>/<problem_id>", suite "kernelbench", ordered by level
 * then problem_id. */
int task_store_load_kernelbench(task_store *ts, const char *path, char *err, size_t errcap);

/* Lookups. Indices follow load order. find is a hash lookup; NULL when absent. */
size_t task_store_count(const task_store *ts);
const task *task_store_at(const task_store *ts, size_t i);
const task *task_store_find(const task_store *ts, const char *id);

/* {id, suite, level (null when 0), name, description, has_cpu_variant}. NULL on no memory. */
json_t *task_summary_json(const task *t);
/* The summary plus code, code_cpu (or null), atol, rtol and the meta fields (which never
 * override the fields above). NULL on no memory. */
json_t *task_detail_json(const task *t);

/* Whether id is acceptable as a task id: 1..TASK_MAX_ID_LEN bytes of [A-Za-z0-9._+:-] and '/'
 * separators, with no empty, "." or ".." segment (ids appear in URLs and file names). */
bool task_id_valid(const char *id);

#endif
