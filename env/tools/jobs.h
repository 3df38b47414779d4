/* jobs: the background Bash jobs of one episode (Bash run_in_background, BashOutput, KillBash).
 * Each job runs in its own process group; its output goes to a file in the episode's private
 * directory. Jobs die with their episode. */
#ifndef KGYM_JOBS_H
#define KGYM_JOBS_H

#include <stddef.h>

typedef struct job_table job_table;

/* log_dir: where job output files are written (created if missing); max_jobs: running jobs cap. */
job_table *job_table_new(const char *log_dir, int max_jobs);
/* Kills every job's process group (SIGKILL), reaps them, frees the table. NULL is fine. */
void job_table_free(job_table *jobs);
/* Number of jobs still running (reaps those that ended). */
size_t job_table_running(job_table *jobs);

#endif
