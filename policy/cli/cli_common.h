/* What kgym-policy's model commands (cmd_model.c, cmd_inspect.c) share: option parsing, the
 * messages of a usage error (exit 2) and of a failure (exit 1), and small JSON output. */
#ifndef KGYM_POLICY_CLI_COMMON_H
#define KGYM_POLICY_CLI_COMMON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define ERRCAP 1024

typedef struct {
    const char *name;
    bool takes_value;
    const char **value; /* takes_value */
    bool *set;          /* a flag */
} opt_spec;

/* Parses argv into specs; positional arguments go to *positional (at most one). Returns 0 to go
 * on, 1 after printing help (exit 0), 2 on a usage error (printed). */
int cli_parse_args(const char *cmd, const char *help, int argc, char **argv, const opt_spec *specs,
                   size_t n, const char **positional);
/* "kgym-policy CMD: WHAT (see --help)" on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *what);
/* "kgym-policy CMD: ERR" on stderr; returns 1. */
int cli_fail(const char *cmd, const char *err);
/* A whole decimal integer / number s within [lo, hi] into *out; false for anything else. */
bool cli_parse_long(const char *s, long lo, long hi, long *out);
bool cli_parse_double(const char *s, double lo, double hi, double *out);
bool cli_is_file(const char *path);
bool cli_is_dir(const char *path);
/* ids as a JSON array. */
json_t *cli_ids_json(const int32_t *ids, int n);
/* j as one compact, ASCII-only line on stdout. */
void cli_print_json(json_t *j);

#endif
