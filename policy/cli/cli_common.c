/* What kgym-policy's model commands share: option parsing, messages, small JSON output. */
#include "cli_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Parses argv into specs; positional arguments go to *positional (at most one). Returns 0 to go
 * on, 1 after printing help (exit 0), 2 on a usage error (printed). */
int cli_parse_args(const char *cmd, const char *help, int argc, char **argv, const opt_spec *specs,
                   size_t n, const char **positional)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 1;
        }
        size_t k = 0;
        while (k < n && strcmp(a, specs[k].name))
            k++;
        if (k == n && a[0] != '-' && positional && !*positional) {
            *positional = a;
            continue;
        }
        if (k == n) {
            fprintf(stderr, "kgym-policy %s: unknown argument '%s' (see --help)\n", cmd, a);
            return 2;
        }
        if (!specs[k].takes_value) {
            *specs[k].set = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kgym-policy %s: %s needs a value\n", cmd, a);
            return 2;
        }
        *specs[k].value = argv[++i];
    }
    return 0;
}

int cli_usage_error(const char *cmd, const char *what)
{
    fprintf(stderr, "kgym-policy %s: %s (see --help)\n", cmd, what);
    return 2;
}

int cli_fail(const char *cmd, const char *err)
{
    fprintf(stderr, "kgym-policy %s: %s\n", cmd, err);
    return 1;
}

bool cli_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool cli_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

json_t *cli_ids_json(const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

void cli_print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s)
        puts(s);
    free(s);
}

bool cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}
