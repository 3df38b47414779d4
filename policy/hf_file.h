/* hf_file: reading a whole text file of a Hugging Face folder (config.json,
 * generation_config.json, ...) or one a command line names: the one way the policy code and
 * kgym-policy read such files. */
#ifndef KGYM_POLICY_HF_FILE_H
#define KGYM_POLICY_HF_FILE_H

#include <stddef.h>

/* Reads the regular file at path into a new NUL-terminated buffer, following symbolic links (a
 * Hugging Face cache's snapshot folder links each file to a blob, which util/fileio.h's
 * file_read_all refuses). Returns 0, or what file_read_all returns: -EFBIG when the file holds
 * more than max bytes, -EINVAL when it is not a regular file, another -errno. */
int pol_hf_read_file(const char *path, size_t max, char **out, size_t *len);

#endif
