/* workspace: creating and removing an episode's workspace. The template (env/template/) is read
 * once at start into memory, so a reset only writes a handful of small files (reset p50 target
 * 2 ms). Files inside a live workspace are reached only through wspath.h. */
#ifndef KGYM_WORKSPACE_H
#define KGYM_WORKSPACE_H

#include <jansson.h>
#include <stddef.h>

#include "wspath.h"

typedef struct ws_template ws_template;

/* Reads every regular file beneath dir (symlinks and special files are refused). */
ws_template *ws_template_load(const char *dir, char *err, size_t errcap);
void ws_template_free(ws_template *tpl);
/* The workspace's files after creation (template files + "model.py"), as a JSON array. */
json_t *ws_template_file_list(const ws_template *tpl);

/* Creates work_dir (which must not exist) holding the template and the task's model.py.
 * Fixed files are made read-only (0444). Returns 0 or -1 with err filled. */
/* owner (may be NULL): the episode's sandbox identity. Then the template's editable files and
 * directories are its own, while the root stays root's with the sticky bit (mode 1777): the agent
 * can add files there but never remove or replace the fixed ones. */
int ws_create(const ws_template *tpl, const char *work_dir, const char *model_py, size_t model_len,
              const ws_owner *owner, char *err, size_t errcap);

/* Removes a directory tree without following symlinks. Missing is fine. Returns 0 or -errno. */
int ws_remove_tree(const char *dir);

#endif
