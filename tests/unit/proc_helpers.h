/* Helpers the process tests share: a monotonic clock, sleeping, and whether a pid is dead. */
#ifndef KGYM_TEST_PROC_HELPERS_H
#define KGYM_TEST_PROC_HELPERS_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

static inline int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Whether pid is dead: gone (ESRCH) or a zombie waiting for its (non-us) parent to reap it.
 * Waits up to ms for that to become true. */
static inline bool pid_dead(pid_t pid, int ms)
{
    int64_t until = mono_ms() + ms;
    for (;;) {
        if (kill(pid, 0) == -1 && errno == ESRCH)
            return true;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = '\0';
            char *rp = strrchr(buf, ')');
            if (rp && (rp[2] == 'Z' || rp[2] == 'X'))
                return true;
        }
        if (mono_ms() >= until)
            return false;
        sleep_ms(10);
    }
}

#endif
