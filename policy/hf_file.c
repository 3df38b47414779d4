#include "policy/hf_file.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "util/fileio.h"

int pol_hf_read_file(const char *path, size_t max, char **out, size_t *len)
{
    char real[PATH_MAX];
    /* the link's target, read with file_read_all's checks; an unresolvable path is read as
     * given, so that its error (ENOENT, ...) is the one reported */
    return file_read_all(realpath(path, real) ? real : path, max, out, len);
}
