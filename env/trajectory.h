/* trajectory: an episode's append-only JSONL record, the trainer's raw material.
 * A line is durable (written and, with DURABILITY_FSYNC, fdatasync'ed) before traj_append
 * returns, so every step the server acknowledged survives a crash or kill -9. */
#ifndef KGYM_TRAJECTORY_H
#define KGYM_TRAJECTORY_H

#include <jansson.h>
#include <stddef.h>

#include "config.h"

typedef struct trajectory trajectory;

/* Opens (creating if needed) path for appending. A torn last line left by a crash is cut off:
 * it was never acknowledged. Returns NULL with err filled. */
trajectory *traj_open(const char *path, durability_mode durability, char *err, size_t errcap);
/* Appends one compact JSON line. Returns 0, or -1 with err filled (the line is not recorded). */
int traj_append(trajectory *t, const json_t *record, char *err, size_t errcap);
/* Lines written so far (including those found at open). */
size_t traj_lines(const trajectory *t);
void traj_close(trajectory *t);

/* Makes a directory entry durable (after creating or renaming files in it). */
int fsync_dir(const char *dir);

/* Writes a whole file atomically: a temp file in the same directory, fsync'ed when asked,
 * renamed over path. Returns 0 or -errno. */
int write_file_atomic(const char *path, const void *bytes, size_t len, durability_mode durability);

#endif
