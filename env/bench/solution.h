/* solution: finds a task's solution in a --solutions folder and lists the files to upload.
 *
 * Layouts (relative to the solutions folder):
 *   KernelBench tasks (ids kb/L<level>/<problem_id>):
 *     level<L>/<P>/                 a kgym workspace: model_new.py, kernels/...
 *     level<L>/<P>_<name>.py        KernelBench style: one file holding ModelNew (load_inline)
 *   any other task (--tasks): <task_id>/ or <last part of the id>/, or the same with .py.
 * Exactly one of these may exist for a task: several (two <P>_*.py files, or <P>/ beside
 * <P>_x.py) are refused as ambiguous, naming them, rather than one picked in directory order.
 * A workspace folder with snapshots/<n>/ sub-folders (each a workspace) is a trajectory: every
 * snapshot is evaluated, in numeric order, and the best correct one counts (the paper's
 * best-of-trajectory rule); a model_new.py beside snapshots/ is the final state, evaluated last.
 * More than SOLUTION_MAX_SNAPSHOTS snapshots are refused, never cut to a subset.
 *
 * Nothing below the solutions folder is reached through a symlink: each path is opened with
 * openat2(RESOLVE_NO_SYMLINKS), and a symlink anywhere in a solution is refused, naming it (it
 * could otherwise upload host files from outside the folder into the workspace). openat2 needs
 * Linux 5.6 or later, unblocked by any seccomp profile: solution_check_support says whether it
 * works here. Names
 * that are not valid UTF-8 are refused too (a JSON result cannot hold them). Every message is
 * valid UTF-8: bytes that are not are shown as \xNN. */
#ifndef KGYM_BENCH_SOLUTION_H
#define KGYM_BENCH_SOLUTION_H

#include <limits.h>
#include <stddef.h>

#define SOLUTION_MAX_SNAPSHOTS 64
#define SOLUTION_MAX_FILES 128
/* kgym-env's default max_file_bytes: one file the server would accept */
#define SOLUTION_MAX_FILE_BYTES (8u << 20)
/* kgym-env's default disk_quota_bytes (a whole workspace): the most one state (a snapshot, the
 * final workspace or a .py file) may hold, checked from the files' sizes before any is read,
 * so that a huge solution costs neither memory nor an upload. */
#define SOLUTION_MAX_STATE_BYTES (256u << 20)

typedef struct solution {
    char rel[PATH_MAX];   /* as found, relative to the solutions folder ("" = no solution) */
    int kernelbench_file; /* 1: one .py file (uploaded as model_new.py) */
    int n_states;         /* workspaces to evaluate in order (snapshots, then the final one) */
    /* absolute folders (or the .py file), under the solutions folder as realpath() gives it */
    char state[SOLUTION_MAX_SNAPSHOTS + 1][PATH_MAX];
} solution;

/* Whether this kernel lets kgym-bench open solutions safely (openat2 with RESOLVE_NO_SYMLINKS:
 * Linux 5.6+, not blocked by a seccomp profile such as older Docker defaults). 0, or -1 with err
 * saying why: every solution would otherwise fail to open and be scored as the solution's
 * fault. */
int solution_check_support(char *err, size_t errcap);

/* Looks the task up. Returns 1 found, 0 none, -1 when the solution is refused (a symlink, an
 * ambiguous lookup, too many snapshots, a name that is not UTF-8) or a folder is unreadable;
 * err then says what and where (the caller records it as the task's BAD_SOLUTION). */
int solution_find(const char *root, const char *task_id, solution *out, char *err, size_t errcap);

/* One file to upload: path in the workspace ("model_new.py", "kernels/x.cu") and its bytes. */
typedef struct solution_file {
    char rel[256];
    char *data;
    size_t len;
} solution_file;

/* The files of one state (a workspace folder: model_new.py and kernels/ two sub-folders deep;
 * the fixed binding.cpp and binding_registry.h beside them are not read, the server keeps its
 * own; or a KernelBench .py as model_new.py). The state is opened again without following any
 * symlink, and its files' sizes are checked (SOLUTION_MAX_FILE_BYTES each,
 * SOLUTION_MAX_STATE_BYTES in all) before any is read. Returns the count (>= 0) or -1 with err
 * (too many, too big, a symlink, a name that is not UTF-8, unreadable, no model_new.py). Free
 * with solution_files_free. */
int solution_files(const char *state, solution_file *files, int max, char *err, size_t errcap);
void solution_files_free(solution_file *files, int n);

#endif
