/* solution: finds a task's solution in a --solutions folder and lists the files to upload.
 *
 * Layouts (relative to the solutions folder):
 *   KernelBench tasks (ids kb/L<level>/<problem_id>):
 *     level<L>/<P>/                 a kgym workspace: model_new.py, kernels/...
 *     level<L>/<P>_<name>.py        KernelBench style: one file holding ModelNew (load_inline)
 *   any other task (--tasks): <task_id>/ or <last part of the id>/, or the same with .py.
 * A workspace folder with snapshots/<n>/ sub-folders (each a workspace) is a trajectory: every
 * snapshot is evaluated and the best correct one counts (the paper's best-of-trajectory rule);
 * a model_new.py beside snapshots/ is the final state, evaluated last. */
#ifndef KGYM_BENCH_SOLUTION_H
#define KGYM_BENCH_SOLUTION_H

#include <limits.h>
#include <stddef.h>

#define SOLUTION_MAX_SNAPSHOTS 64
#define SOLUTION_MAX_FILES 128
#define SOLUTION_MAX_FILE_BYTES (8u << 20)

typedef struct solution {
    char rel[PATH_MAX];   /* as found, relative to the solutions folder ("" = no solution) */
    int kernelbench_file; /* 1: one .py file (uploaded as model_new.py) */
    int n_states;         /* workspaces to evaluate in order (snapshots, then the final one) */
    char state[SOLUTION_MAX_SNAPSHOTS + 1][PATH_MAX]; /* absolute folders (or the .py file) */
} solution;

/* Looks the task up. level/problem_id: from a kb id (0 otherwise). Returns 1 found, 0 none,
 * -1 on an unreadable folder (err set). */
int solution_find(const char *root, const char *task_id, solution *out, char *err, size_t errcap);

/* One file to upload: path in the workspace ("model_new.py", "kernels/x.cu") and its bytes. */
typedef struct solution_file {
    char rel[256];
    char *data;
    size_t len;
} solution_file;

/* The files of one state (a workspace folder: model_new.py and kernels/ one level deep; the
 * fixed files binding.cpp and binding_registry.h are skipped, the server keeps its own; or a
 * KernelBench .py as model_new.py). Returns the count (>= 0) or -1 with err (too many, too big,
 * unreadable, no model_new.py). Free with solution_files_free. */
int solution_files(const char *state, solution_file *files, int max, char *err, size_t errcap);
void solution_files_free(solution_file *files, int n);

#endif
