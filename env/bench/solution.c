/* solution: where a task's solution lies and what to upload (see solution.h). */
#include "bench/solution.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fileio.h"
#include "util/text.h"

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* "kb/L2/17" -> level 2, problem 17; 0 when the id is not a KernelBench one. */
static int kb_id(const char *id, int *level, int *problem)
{
    char tail;
    return sscanf(id, "kb/L%d/%d%c", level, problem, &tail) == 2 ? 1 : 0;
}

static int by_number(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    long nx = strtol(x, NULL, 10), ny = strtol(y, NULL, 10);
    return nx != ny ? (nx < ny ? -1 : 1) : strcmp(x, y);
}

/* The snapshots/<n>/ folders of a workspace, in numeric order, then the workspace itself when it
 * holds a model_new.py. */
static int collect_states(const char *ws, solution *out, char *err, size_t errcap)
{
    char snaps[PATH_MAX + 16];
    text_fmt(snaps, sizeof snaps, "%s/snapshots", ws);
    out->n_states = 0;
    if (is_dir(snaps)) {
        DIR *d = opendir(snaps);
        if (!d) {
            text_fmt(err, errcap, "%s: %s", snaps, strerror(errno));
            return -1;
        }
        char *names[SOLUTION_MAX_SNAPSHOTS];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) && n < SOLUTION_MAX_SNAPSHOTS) {
            char p[PATH_MAX + 300];
            text_fmt(p, sizeof p, "%s/%s", snaps, e->d_name);
            if (e->d_name[0] != '.' && is_dir(p))
                names[n++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(names, (size_t)n, sizeof names[0], by_number);
        for (int i = 0; i < n; i++) {
            text_fmt(out->state[out->n_states++], PATH_MAX, "%s/%s", snaps, names[i]);
            free(names[i]);
        }
    }
    char final[PATH_MAX + 16];
    text_fmt(final, sizeof final, "%s/model_new.py", ws);
    if (is_file(final) || out->n_states == 0)
        text_fmt(out->state[out->n_states++], PATH_MAX, "%s", ws);
    return 0;
}

/* A file "<dir>/<prefix>*.py" (the KernelBench layout: "<P>_<name>.py"). */
static int find_prefixed_py(const char *dir, const char *prefix, char *found, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int hit = 0;
    size_t n = strlen(prefix);
    while (!hit && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, n) == 0 && len > 3 &&
            strcmp(e->d_name + len - 3, ".py") == 0) {
            text_fmt(found, cap, "%s", e->d_name);
            hit = 1;
        }
    }
    closedir(d);
    return hit;
}

static int found_at(const char *root, const char *rel, solution *out, char *err, size_t errcap)
{
    char abs[PATH_MAX + 300];
    text_fmt(abs, sizeof abs, "%s/%s", root, rel);
    text_fmt(out->rel, sizeof out->rel, "%s", rel);
    if (is_file(abs)) {
        out->kernelbench_file = 1;
        out->n_states = 1;
        text_fmt(out->state[0], PATH_MAX, "%s", abs);
        return 1;
    }
    return collect_states(abs, out, err, errcap) == 0 ? 1 : -1;
}

int solution_find(const char *root, const char *task_id, solution *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    if (!is_dir(root)) {
        text_fmt(err, errcap, "%s: not a folder", root);
        return -1;
    }
    char rel[PATH_MAX], p[PATH_MAX + 300];
    int level, problem;
    if (kb_id(task_id, &level, &problem)) {
        text_fmt(rel, sizeof rel, "level%d/%d", level, problem);
        text_fmt(p, sizeof p, "%s/%s", root, rel);
        if (is_dir(p))
            return found_at(root, rel, out, err, errcap);
        char dir[PATH_MAX + 16], prefix[32], name[256];
        text_fmt(dir, sizeof dir, "%s/level%d", root, level);
        text_fmt(prefix, sizeof prefix, "%d_", problem);
        if (find_prefixed_py(dir, prefix, name, sizeof name)) {
            text_fmt(rel, sizeof rel, "level%d/%s", level, name);
            return found_at(root, rel, out, err, errcap);
        }
        return 0;
    }
    const char *last = strrchr(task_id, '/');
    const char *tries[2] = {task_id, last ? last + 1 : NULL};
    for (int i = 0; i < 2 && tries[i]; i++) {
        if (strstr(tries[i], "..") || tries[i][0] == '/' || !tries[i][0])
            continue; /* an id never leads out of the solutions folder */
        for (int py = 0; py < 2; py++) {
            text_fmt(rel, sizeof rel, "%s%s", tries[i], py ? ".py" : "");
            text_fmt(p, sizeof p, "%s/%s", root, rel);
            if (py ? is_file(p) : is_dir(p))
                return found_at(root, rel, out, err, errcap);
        }
    }
    return 0;
}

static int add_file(const char *abs, const char *rel, solution_file *files, int *n, int max,
                    char *err, size_t errcap)
{
    if (*n >= max) {
        text_fmt(err, errcap, "more than %d files in the solution", max);
        return -1;
    }
    solution_file *f = &files[*n];
    if (!text_fmt(f->rel, sizeof f->rel, "%s", rel)) {
        text_fmt(err, errcap, "%s: path too long", rel);
        return -1;
    }
    if (file_read_all(abs, SOLUTION_MAX_FILE_BYTES, &f->data, &f->len) != 0) {
        text_fmt(err, errcap, "%s: unreadable or larger than %u bytes", abs,
                 SOLUTION_MAX_FILE_BYTES);
        return -1;
    }
    (*n)++;
    return 0;
}

static int add_kernels(const char *dir, const char *rel_dir, solution_file *files, int *n, int max,
                       int depth, char *err, size_t errcap)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0; /* no kernels/: a pure model_new.py (it will fail the checks on its own) */
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char abs[PATH_MAX + 300], rel[PATH_MAX + 300];
        text_fmt(abs, sizeof abs, "%s/%s", dir, e->d_name);
        text_fmt(rel, sizeof rel, "%s/%s", rel_dir, e->d_name);
        if (is_file(abs))
            rc = add_file(abs, rel, files, n, max, err, errcap);
        else if (is_dir(abs) && depth < 2)
            rc = add_kernels(abs, rel, files, n, max, depth + 1, err, errcap);
    }
    closedir(d);
    return rc;
}

int solution_files(const char *state, solution_file *files, int max, char *err, size_t errcap)
{
    int n = 0;
    if (is_file(state)) {
        if (add_file(state, "model_new.py", files, &n, max, err, errcap) != 0)
            return -1;
        return n;
    }
    char p[PATH_MAX + 32];
    text_fmt(p, sizeof p, "%s/model_new.py", state);
    if (!is_file(p)) {
        text_fmt(err, errcap, "%s: no model_new.py", state);
        return -1;
    }
    if (add_file(p, "model_new.py", files, &n, max, err, errcap) != 0)
        goto fail;
    text_fmt(p, sizeof p, "%s/kernels", state);
    if (add_kernels(p, "kernels", files, &n, max, 0, err, errcap) != 0)
        goto fail;
    return n;
fail:
    solution_files_free(files, n);
    return -1;
}

void solution_files_free(solution_file *files, int n)
{
    for (int i = 0; i < n; i++) {
        free(files[i].data);
        files[i].data = NULL;
    }
}
