/* metrics: counters and histograms, rendered in the Prometheus text format at /metrics. */
#ifndef KGYM_METRICS_H
#define KGYM_METRICS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct metrics metrics;

metrics *metrics_new(void);
void metrics_free(metrics *m);

/* One HTTP request: route is the route's pattern ("/v1/episodes/{id}/step"). */
void metrics_http(metrics *m, const char *route, int status, double seconds);
/* One tool call; error_code NULL when it succeeded. */
void metrics_tool(metrics *m, const char *tool, const char *error_code, double seconds);
void metrics_reset(metrics *m, double seconds);
/* An episode left the active set: "closed", "reaped", "terminated", "truncated", "purged". */
void metrics_episode_end(metrics *m, const char *reason);

/* Gauges read at render time. */
typedef struct metrics_gauges {
    long active_episodes;
    long max_episodes;
    long steps_in_flight;
    bool draining;
    double uptime_s;
} metrics_gauges;

/* Renders everything; returns a malloc'd text and its length. */
char *metrics_render(metrics *m, const metrics_gauges *g, size_t *len);

#endif
