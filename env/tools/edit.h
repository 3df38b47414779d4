/* edit: the string replacement behind the Edit and MultiEdit tools, kept pure (no files) so its
 * semantics can be tested on their own. */
#ifndef KGYM_TOOLS_EDIT_H
#define KGYM_TOOLS_EDIT_H

#include <stdbool.h>
#include <stddef.h>

enum edit_err {
    EDIT_OK = 0,
    EDIT_E_EMPTY = -1,      /* old_str is empty: "INVALID_TOOL_CALL" */
    EDIT_E_NOOP = -2,       /* old_str == new_str: "EDIT_NOOP" */
    EDIT_E_NO_MATCH = -3,   /* "EDIT_NO_MATCH" */
    EDIT_E_NOT_UNIQUE = -4, /* several matches and not all: "EDIT_NOT_UNIQUE" */
    EDIT_E_NOMEM = -5,      /* "IO_ERROR" */
};

/* Replaces old_str in text[0..len) by new_str: its single occurrence, or with all every
 * non-overlapping occurrence, scanning left to right. On success *out is a new malloc'd,
 * NUL-terminated text of *out_len bytes. *count gets the number of occurrences found (also on
 * EDIT_E_NOT_UNIQUE, so the caller can say how many). Returns EDIT_OK or an edit_err. */
int edit_apply(const char *text, size_t len, const char *old_str, const char *new_str, bool all,
               char **out, size_t *out_len, size_t *count);

/* The in-band error code of an edit_err. */
const char *edit_err_code(int err);

#endif
