#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/strbuf.h"

/* Histogram buckets (seconds): 100 us .. 10 min, for in-process tools and long Bash alike. */
static const double BUCKETS[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                 0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                 5,      10,      30,     60,    120,    300,   600};
#define N_BUCKETS (sizeof BUCKETS / sizeof BUCKETS[0])

typedef struct histogram {
    unsigned long long counts[N_BUCKETS + 1];
    double sum;
    unsigned long long total;
} histogram;

/* A labelled series: the label text is pre-rendered ({tool="Read",code="X"}). */
typedef struct series {
    char *labels;
    unsigned long long count;
    histogram hist;
} series;

typedef struct family {
    series *items;
    size_t n, cap;
} family;

struct metrics {
    pthread_mutex_t lock;
    family http, tool_calls, tool_errors, tool_seconds, ended;
    histogram reset_seconds;
    unsigned long long created;
};

metrics *metrics_new(void)
{
    metrics *m = calloc(1, sizeof *m);
    if (m)
        pthread_mutex_init(&m->lock, NULL);
    return m;
}

static void family_free(family *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->items[i].labels);
    free(f->items);
}

void metrics_free(metrics *m)
{
    if (!m)
        return;
    family_free(&m->http);
    family_free(&m->tool_calls);
    family_free(&m->tool_errors);
    family_free(&m->tool_seconds);
    family_free(&m->ended);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Finds or adds the series with these labels; NULL when memory ran out. */
static series *family_get(family *f, const char *labels)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->items[i].labels, labels) == 0)
            return &f->items[i];
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        series *p = realloc(f->items, cap * sizeof *p);
        if (!p)
            return NULL;
        f->items = p;
        f->cap = cap;
    }
    series *s = &f->items[f->n];
    memset(s, 0, sizeof *s);
    s->labels = strdup(labels);
    if (!s->labels)
        return NULL;
    f->n++;
    return s;
}

static void hist_observe(histogram *h, double v)
{
    size_t i = 0;
    while (i < N_BUCKETS && v > BUCKETS[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->total++;
}

/* Label values are our own route patterns, tool names and error codes, but a tool name may
 * come from the agent: keep only safe characters so the exposition format stays valid. */
static void safe_label(char *out, size_t cap, const char *v)
{
    size_t o = 0;
    for (const char *p = v; *p && o + 1 < cap; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '/' || c == '{' || c == '}' || c == '-' || c == '.';
        out[o++] = ok ? c : '_';
    }
    out[o] = '\0';
}

void metrics_http(metrics *m, const char *route, int status, double seconds)
{
    char r[96], labels[160];
    safe_label(r, sizeof r, route);
    snprintf(labels, sizeof labels, "{route=\"%s\",status=\"%d\"}", r, status);
    (void)seconds;
    pthread_mutex_lock(&m->lock);
    series *s = family_get(&m->http, labels);
    if (s)
        s->count++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_tool(metrics *m, const char *tool, const char *error_code, double seconds)
{
    char t[48], c[48], labels[128];
    safe_label(t, sizeof t, tool);
    snprintf(labels, sizeof labels, "{tool=\"%s\"}", t);
    pthread_mutex_lock(&m->lock);
    series *s = family_get(&m->tool_calls, labels);
    if (s)
        s->count++;
    s = family_get(&m->tool_seconds, labels);
    if (s)
        hist_observe(&s->hist, seconds);
    if (error_code) {
        safe_label(c, sizeof c, error_code);
        snprintf(labels, sizeof labels, "{tool=\"%s\",code=\"%s\"}", t, c);
        s = family_get(&m->tool_errors, labels);
        if (s)
            s->count++;
    }
    pthread_mutex_unlock(&m->lock);
}

void metrics_reset(metrics *m, double seconds)
{
    pthread_mutex_lock(&m->lock);
    m->created++;
    hist_observe(&m->reset_seconds, seconds);
    pthread_mutex_unlock(&m->lock);
}

void metrics_episode_end(metrics *m, const char *reason)
{
    char r[48], labels[96];
    safe_label(r, sizeof r, reason);
    snprintf(labels, sizeof labels, "{reason=\"%s\"}", r);
    pthread_mutex_lock(&m->lock);
    series *s = family_get(&m->ended, labels);
    if (s)
        s->count++;
    pthread_mutex_unlock(&m->lock);
}

static void render_counter(strbuf *sb, const char *name, const char *help, const family *f)
{
    sb_printf(sb, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < f->n; i++)
        sb_printf(sb, "%s%s %llu\n", name, f->items[i].labels, f->items[i].count);
}

/* labels is "" or "{a=\"b\"}"; bucket lines need le= merged into it. */
static void render_hist(strbuf *sb, const char *name, const char *labels, const histogram *h)
{
    char inner[128] = "";
    size_t l = strlen(labels);
    if (l > 2)
        snprintf(inner, sizeof inner, "%.*s,", (int)(l - 2), labels + 1);
    unsigned long long cum = 0;
    for (size_t i = 0; i <= N_BUCKETS; i++) {
        cum += h->counts[i];
        if (i < N_BUCKETS)
            sb_printf(sb, "%s_bucket{%sle=\"%g\"} %llu\n", name, inner, BUCKETS[i], cum);
        else
            sb_printf(sb, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, inner, cum);
    }
    sb_printf(sb, "%s_sum%s %.6f\n%s_count%s %llu\n", name, labels, h->sum, name, labels, h->total);
}

char *metrics_render(metrics *m, const metrics_gauges *g, size_t *len)
{
    strbuf sb = STRBUF_INIT;
    sb_printf(&sb,
              "# HELP kgym_episodes_active Episodes open now.\n# TYPE kgym_episodes_active gauge\n"
              "kgym_episodes_active %ld\n"
              "# HELP kgym_episodes_max The server's episode capacity.\n"
              "# TYPE kgym_episodes_max gauge\nkgym_episodes_max %ld\n"
              "# HELP kgym_steps_in_flight Steps running now.\n"
              "# TYPE kgym_steps_in_flight gauge\nkgym_steps_in_flight %ld\n"
              "# HELP kgym_draining 1 while the server drains after SIGTERM.\n"
              "# TYPE kgym_draining gauge\nkgym_draining %d\n"
              "# HELP kgym_uptime_seconds Time since the server started.\n"
              "# TYPE kgym_uptime_seconds gauge\nkgym_uptime_seconds %.3f\n",
              g->active_episodes, g->max_episodes, g->steps_in_flight, g->draining ? 1 : 0,
              g->uptime_s);
    pthread_mutex_lock(&m->lock);
    sb_printf(&sb,
              "# HELP kgym_episodes_created_total Episodes created or reset.\n"
              "# TYPE kgym_episodes_created_total counter\nkgym_episodes_created_total %llu\n",
              m->created);
    render_counter(&sb, "kgym_episodes_ended_total", "Episodes that left the active set.",
                   &m->ended);
    render_counter(&sb, "kgym_http_requests_total", "HTTP requests by route and status.", &m->http);
    render_counter(&sb, "kgym_tool_calls_total", "Tool calls by tool.", &m->tool_calls);
    render_counter(&sb, "kgym_tool_errors_total", "Tool calls that failed, by error code.",
                   &m->tool_errors);
    sb_puts(&sb, "# HELP kgym_tool_duration_seconds Tool call duration.\n"
                 "# TYPE kgym_tool_duration_seconds histogram\n");
    for (size_t i = 0; i < m->tool_seconds.n; i++)
        render_hist(&sb, "kgym_tool_duration_seconds", m->tool_seconds.items[i].labels,
                    &m->tool_seconds.items[i].hist);
    sb_puts(&sb, "# HELP kgym_reset_duration_seconds Episode create/reset duration.\n"
                 "# TYPE kgym_reset_duration_seconds histogram\n");
    render_hist(&sb, "kgym_reset_duration_seconds", "", &m->reset_seconds);
    pthread_mutex_unlock(&m->lock);
    *len = sb.len;
    return sb_steal(&sb);
}
