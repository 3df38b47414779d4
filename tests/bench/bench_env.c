/* bench_env: load generator for a running kgym-env server (tests/bench/README.md).
 *
 * Plain POSIX sockets, HTTP/1.1 keep-alive, pthreads; Jansson for JSON. Measures reset latency,
 * in-process tool step latency (Read, Edit, Grep), throughput with many concurrent episodes and
 * the server's memory with many open episodes, and prints one table with the targets of
 * DESIGN.md beside each figure. All timings use CLOCK_MONOTONIC. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* ---- targets (DESIGN.md §3.1 and the benchmark brief) ------------------------------------ */

#define TARGET_RESET_P50_MS 2.0
#define TARGET_STEP_P50_MS 0.5
#define TARGET_STEPS_PER_S 5000.0
#define TARGET_RSS_MIB 1024.0

/* ---- options ----------------------------------------------------------------------------- */

typedef struct options {
    char host[256];
    char port[16];
    const char *task_id;
    const char *json_path;
    const char *config_label;
    const char *state_dir;
    long server_pid;
    int reset_n;
    int step_n;
    int tp_episodes;
    double tp_seconds;
    const char *tp_mode; /* auto | poll | threads */
    int tp_threads;      /* client threads in poll mode */
    int mem_episodes;
    int warmup;
    bool phase_reset, phase_steps, phase_tp, phase_mem;
    bool strict;
} options;

static options OPT;

static void usage(FILE *out)
{
    fputs("usage: bench_env --url http://HOST:PORT [options]\n"
          "\n"
          "Benchmarks a running kgym-env server and prints one table (targets beside each\n"
          "figure). mk/bench.sh (make bench) starts a server and runs this.\n"
          "\n"
          "  --url URL            the server (http://127.0.0.1:PORT); required\n"
          "  --server-pid PID     the server's pid: RSS and CPU use are read from /proc/PID\n"
          "  --config PATH        the server's config path (printed; not read)\n"
          "  --state-dir DIR      the server's state dir (printed with its filesystem type;\n"
          "                       disk use per episode is measured under it)\n"
          "  --task ID            the task episodes use (default: the first of GET /v1/tasks)\n"
          "  --reset-n N          sequential resets (default 500)\n"
          "  --step-n N           sequential steps per tool (default 1000)\n"
          "  --tp-episodes N      concurrent episodes of the throughput run (default 64)\n"
          "  --tp-seconds S       length of each throughput run (default 10)\n"
          "  --tp-mode MODE       auto (run both, report the better) | poll | threads\n"
          "                       (default auto). poll: --tp-threads client threads, each\n"
          "                       multiplexing its share of the connections with poll();\n"
          "                       threads: one client thread and connection per episode\n"
          "  --tp-threads N       client threads in poll mode (default 8)\n"
          "  --mem-episodes N     episodes held open for the memory figure (default 1000)\n"
          "  --warmup N           untimed requests before each latency phase (default 20)\n"
          "  --phases LIST        comma list of reset,steps,tp,mem (default all)\n"
          "  --json FILE          also write the figures as JSON to FILE\n"
          "  --strict             exit 3 when a target is not met\n"
          "  --help               this text\n"
          "\n"
          "Exit status: 0 every request succeeded; 1 some requests failed (HTTP error or a\n"
          "tool step with is_error true: the table says where); 2 usage or connection\n"
          "error; 3 (with --strict) every request succeeded but a target was not met.\n",
          out);
}

/* ---- small utilities --------------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_env: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        die("out of memory");
    return q;
}

typedef struct samples {
    double *v;
    size_t n, cap;
    bool sorted;
} samples;

static void samples_add(samples *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
    s->sorted = false;
}

static void samples_merge(samples *dst, const samples *src)
{
    for (size_t i = 0; i < src->n; i++)
        samples_add(dst, src->v[i]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile; NAN when there are no samples. */
static double pct(samples *s, double p)
{
    if (s->n == 0)
        return NAN;
    if (!s->sorted) {
        qsort(s->v, s->n, sizeof *s->v, cmp_double);
        s->sorted = true;
    }
    size_t rank = (size_t)ceil(p / 100.0 * (double)s->n);
    if (rank < 1)
        rank = 1;
    if (rank > s->n)
        rank = s->n;
    return s->v[rank - 1];
}

static void samples_free(samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

typedef struct buf {
    char *data;
    size_t len, cap;
} buf;

static void buf_reserve(buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

static void buf_append(buf *b, const char *p, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void buf_consume(buf *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    if (b->data)
        b->data[b->len] = '\0';
}

/* ---- failure accounting ------------------------------------------------------------------ */

typedef struct failures {
    pthread_mutex_t lock;
    long count;
    char first[512];
} failures;

static void fail_note(failures *f, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&f->lock);
    if (f->count++ == 0)
        snprintf(f->first, sizeof f->first, "%s", msg);
    pthread_mutex_unlock(&f->lock);
}

static void fail_init(failures *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->lock, NULL);
}

/* One line of a body for an error message: at most 200 bytes, control characters blanked. */
static const char *snippet(const char *body, size_t len, char *out, size_t cap)
{
    size_t n = len < 200 ? len : 200;
    if (n >= cap)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (body[i] < 0x20 && body[i] >= 0) ? ' ' : body[i];
    out[n] = '\0';
    return out;
}

/* ---- HTTP/1.1 ---------------------------------------------------------------------------- */

static struct addrinfo *SERVER_ADDR;

static int http_connect(bool nonblocking)
{
    int fd = socket(SERVER_ADDR->ai_family, SERVER_ADDR->ai_socktype | SOCK_CLOEXEC,
                    SERVER_ADDR->ai_protocol);
    if (fd < 0)
        return -1;
    if (connect(fd, SERVER_ADDR->ai_addr, SERVER_ADDR->ai_addrlen) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (nonblocking)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static void http_format(buf *out, const char *method, const char *path, const char *body,
                        size_t body_len)
{
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: %s:%s\r\nAccept: application/json\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, OPT.host, OPT.port, body_len);
    if (n < 0 || (size_t)n >= sizeof head)
        die("request line too long: %s", path);
    out->len = 0;
    buf_append(out, head, (size_t)n);
    if (body_len)
        buf_append(out, body, body_len);
}

typedef struct http_resp {
    int status;
    bool close;   /* the server will close the connection after this response */
    size_t total; /* bytes of the response in the input buffer */
} http_resp;

static const char *find_crlfcrlf(const char *p, size_t n)
{
    for (size_t i = 3; i < n; i++)
        if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r')
            return p + i + 1;
    return NULL;
}

/* Parses one response at the start of in. Returns 1 when complete (the decoded body goes to
 * body), 0 when more bytes are needed, -1 when malformed. */
static int http_parse(const buf *in, http_resp *r, buf *body)
{
    const char *p = in->data;
    size_t n = in->len;
    if (n < 12)
        return 0;
    const char *hend = find_crlfcrlf(p, n);
    if (!hend)
        return n > 65536 ? -1 : 0;
    if (strncmp(p, "HTTP/1.", 7) != 0)
        return -1;
    r->status = atoi(p + 9);
    r->close = p[7] == '0';
    long long clen = -1;
    bool chunked = false;
    const char *line = strstr(p, "\r\n") + 2;
    while (line < hend - 2) {
        const char *eol = strstr(line, "\r\n");
        if (!eol || eol > hend)
            return -1;
        size_t ln = (size_t)(eol - line);
        if (ln > 15 && strncasecmp(line, "Content-Length:", 15) == 0)
            clen = atoll(line + 15);
        else if (ln > 18 && strncasecmp(line, "Transfer-Encoding:", 18) == 0)
            chunked = memmem(line, ln, "chunked", 7) != NULL;
        else if (ln > 11 && strncasecmp(line, "Connection:", 11) == 0)
            r->close = memmem(line, ln, "close", 5) != NULL ||
                       (r->close && !memmem(line, ln, "eep-alive", 9));
        line = eol + 2;
    }
    size_t hlen = (size_t)(hend - p);
    body->len = 0;
    if (chunked) {
        size_t off = hlen;
        for (;;) {
            const char *eol = off < n ? memmem(p + off, n - off, "\r\n", 2) : NULL;
            if (!eol)
                return 0;
            unsigned long long sz = strtoull(p + off, NULL, 16);
            size_t data = (size_t)(eol - p) + 2;
            if (sz == 0) {
                /* trailers end with an empty line */
                const char *end = memmem(p + data - 2, n - (data - 2), "\r\n\r\n", 4);
                if (!end)
                    return 0;
                r->total = (size_t)(end - p) + 4;
                buf_append(body, "", 0);
                return 1;
            }
            if (n < data + sz + 2)
                return 0;
            buf_append(body, p + data, (size_t)sz);
            off = data + (size_t)sz + 2;
        }
    }
    if (clen < 0) {
        if (r->status == 204 || r->status == 304 || r->status / 100 == 1) {
            clen = 0;
        } else {
            return -1; /* read-until-close bodies are not used by the server */
        }
    }
    if (n < hlen + (size_t)clen)
        return 0;
    buf_append(body, p + hlen, (size_t)clen);
    r->total = hlen + (size_t)clen;
    return 1;
}

/* A blocking keep-alive connection. */
typedef struct conn {
    int fd;
    buf out, in, body;
    int status;
    long reconnects;
} conn;

static void conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static void conn_free(conn *c)
{
    conn_close(c);
    free(c->out.data);
    free(c->in.data);
    free(c->body.data);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Sends one request and reads its response into c->body / c->status. A connection the server
 * closed while idle is reopened and the request sent again (nothing of it was processed then).
 * Returns 0, or -1 on a transport error (message in err). */
static int conn_request(conn *c, const char *method, const char *path, const char *body,
                        size_t body_len, char *err, size_t errcap)
{
    http_format(&c->out, method, path, body, body_len);
    for (int attempt = 0; attempt < 2; attempt++) {
        bool reused = c->fd >= 0;
        if (c->fd < 0 && (c->fd = http_connect(false)) < 0) {
            snprintf(err, errcap, "connect: %s", strerror(errno));
            return -1;
        }
        c->in.len = 0;
        if (write_all(c->fd, c->out.data, c->out.len) != 0) {
            conn_close(c);
            if (reused) {
                c->reconnects++;
                continue;
            }
            snprintf(err, errcap, "send: %s", strerror(errno));
            return -1;
        }
        for (;;) {
            http_resp r = {0};
            int pr = http_parse(&c->in, &r, &c->body);
            if (pr < 0) {
                conn_close(c);
                snprintf(err, errcap, "malformed HTTP response");
                return -1;
            }
            if (pr == 1) {
                c->status = r.status;
                buf_consume(&c->in, r.total);
                if (r.close)
                    conn_close(c);
                return 0;
            }
            buf_reserve(&c->in, 16384);
            ssize_t got = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len - 1, 0);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                int e = got < 0 ? errno : 0;
                conn_close(c);
                if (reused && c->in.len == 0 && attempt == 0) {
                    c->reconnects++;
                    break; /* idle close raced with our request: retry once */
                }
                snprintf(err, errcap, "recv: %s", e ? strerror(e) : "connection closed");
                return -1;
            }
            c->in.len += (size_t)got;
            c->in.data[c->in.len] = '\0';
        }
    }
    snprintf(err, errcap, "connection closed twice");
    return -1;
}

/* A request whose response is JSON. Returns the parsed body (NULL if not JSON) and the status;
 * a transport error is fatal. */
static json_t *api(conn *c, const char *method, const char *path, const char *body, int *status)
{
    char err[256];
    if (conn_request(c, method, path, body, body ? strlen(body) : 0, err, sizeof err) != 0)
        die("%s %s: %s", method, path, err);
    *status = c->status;
    return json_loadb(c->body.data, c->body.len, 0, NULL);
}

/* ---- server facts ------------------------------------------------------------------------ */

typedef struct proc_status {
    double rss_mib, hwm_mib;
    long threads;
    bool ok;
} proc_status;

static proc_status read_proc_status(long pid)
{
    proc_status s = {0};
    if (pid <= 0)
        return s;
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return s;
    while (fgets(line, sizeof line, f)) {
        long v;
        if (sscanf(line, "VmRSS: %ld kB", &v) == 1) {
            s.rss_mib = (double)v / 1024.0;
            s.ok = true;
        } else if (sscanf(line, "VmHWM: %ld kB", &v) == 1) {
            s.hwm_mib = (double)v / 1024.0;
        } else if (sscanf(line, "Threads: %ld", &v) == 1) {
            s.threads = v;
        }
    }
    fclose(f);
    return s;
}

/* utime + stime of a process in seconds; -1 when unknown. */
static double proc_cpu_s(long pid)
{
    if (pid <= 0)
        return -1;
    char path[64], text[2048];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *p = strrchr(text, ')');
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static const char *fs_type_name(long type)
{
    static const struct {
        long magic;
        const char *name;
    } T[] = {
        {0xEF53, "ext2/ext3/ext4"},
        {0x01021994, "tmpfs"},
        {0x58465342, "xfs"},
        {0x9123683E, "btrfs"},
        {0x794C7630, "overlayfs"},
        {0x2FC12FC1, "zfs"},
        {0x6969, "nfs"},
        {0xF2F52010, "f2fs"},
        {0x65735546, "fuse"},
        {0x858458F6, "ramfs"},
        {0x01021997, "v9fs"},
        {0x73717368, "squashfs"},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (T[i].magic == type)
            return T[i].name;
    return NULL;
}

static uint64_t DU_BYTES;
static int du_visit(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)flag;
    (void)ftw;
    DU_BYTES += (uint64_t)st->st_blocks * 512;
    return 0;
}

/* Disk use of a tree in bytes (st_blocks), 0 when it cannot be walked. */
static uint64_t disk_use(const char *dir)
{
    DU_BYTES = 0;
    if (!dir || nftw(dir, du_visit, 32, FTW_PHYS) != 0)
        return 0;
    return DU_BYTES;
}

/* ---- figures ----------------------------------------------------------------------------- */

typedef struct row {
    char name[64];
    long n;
    double p50, p99;
    char other[96];
    char target[40];
    int met; /* 1 met, 0 not met, -1 no target on this row */
    long failures;
    char first_failure[512];
} row;

static row ROWS[16];
static int NROWS;
static json_t *JOUT;
static int TARGETS_MISSED;
static long TOTAL_FAILURES;

static row *add_row(const char *name)
{
    if (NROWS >= (int)(sizeof ROWS / sizeof ROWS[0]))
        die("too many rows");
    row *r = &ROWS[NROWS++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->met = -1;
    r->p50 = r->p99 = NAN;
    return r;
}

static void row_failures(row *r, failures *f)
{
    r->failures = f->count;
    snprintf(r->first_failure, sizeof r->first_failure, "%s", f->first);
    TOTAL_FAILURES += f->count;
}

static void row_target(row *r, bool met, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->target, sizeof r->target, fmt, ap);
    va_end(ap);
    r->met = met;
    if (!met)
        TARGETS_MISSED++;
}

static json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* ---- episodes ---------------------------------------------------------------------------- */

static char TASK_ID[256];

/* Creates an episode; returns 0 and its id, or -1 (status and body in the failure record). */
static int episode_create(conn *c, const char *body, char id[64], double *latency_ms,
                          double *server_reset_ms, failures *f)
{
    char err[256], sn[256];
    double t0 = now_ms();
    int rc = conn_request(c, "POST", "/v1/episodes", body, strlen(body), err, sizeof err);
    double t1 = now_ms();
    if (rc != 0)
        die("POST /v1/episodes: %s", err);
    if (latency_ms)
        *latency_ms = t1 - t0;
    json_t *j = json_loadb(c->body.data, c->body.len, 0, NULL);
    const char *eid = json_string_value(json_object_get(j, "episode_id"));
    if (c->status != 201 || !eid) {
        fail_note(f, "POST /v1/episodes -> %d %s", c->status,
                  snippet(c->body.data, c->body.len, sn, sizeof sn));
        json_decref(j);
        return -1;
    }
    snprintf(id, 64, "%s", eid);
    if (server_reset_ms) {
        json_t *t =
            json_object_get(json_object_get(json_object_get(j, "info"), "timing"), "reset_ms");
        *server_reset_ms = json_is_number(t) ? json_number_value(t) : NAN;
    }
    json_decref(j);
    return 0;
}

static void episode_delete(conn *c, const char *id, failures *f)
{
    char path[128], err[256], sn[256];
    snprintf(path, sizeof path, "/v1/episodes/%s?purge=true", id);
    if (conn_request(c, "DELETE", path, NULL, 0, err, sizeof err) != 0)
        die("DELETE %s: %s", path, err);
    if (c->status != 200)
        fail_note(f, "DELETE %s -> %d %s", path, c->status,
                  snippet(c->body.data, c->body.len, sn, sizeof sn));
}

static void step_body(char *out, size_t cap, const char *tool, const char *args_json)
{
    snprintf(out, cap, "{\"action\":{\"tool\":\"%s\",\"args\":%s}}", tool, args_json);
}

/* Quick check of a step response without a JSON parse (the throughput run shares the CPU
 * with the server): the first "is_error" key in a step response is the observation's, and
 * inside JSON strings quotes are escaped, so the pattern cannot match text of a file. */
static bool step_ok_fast(int status, const char *body)
{
    if (status != 200)
        return false;
    const char *k = strstr(body, "\"is_error\":");
    if (!k)
        return false;
    k += 11;
    while (*k == ' ')
        k++;
    return strncmp(k, "false", 5) == 0;
}

/* ---- phase 1: reset ---------------------------------------------------------------------- */

static void phase_reset(conn *c)
{
    failures f;
    fail_init(&f);
    samples lat = {0}, srv = {0};
    char body[512], id[64];
    snprintf(body, sizeof body, "{\"task_id\":\"%s\"}", TASK_ID);
    for (int i = 0; i < OPT.warmup; i++) {
        failures wf;
        fail_init(&wf);
        if (episode_create(c, body, id, NULL, NULL, &wf) == 0)
            episode_delete(c, id, &wf);
    }
    for (int i = 0; i < OPT.reset_n; i++) {
        double ms, sms;
        if (episode_create(c, body, id, &ms, &sms, &f) != 0)
            continue;
        samples_add(&lat, ms);
        if (isfinite(sms))
            samples_add(&srv, sms);
        episode_delete(c, id, &f);
    }
    row *r = add_row("reset: POST /v1/episodes");
    r->n = (long)lat.n;
    r->p50 = pct(&lat, 50);
    r->p99 = pct(&lat, 99);
    double sp50 = pct(&srv, 50), sp99 = pct(&srv, 99);
    snprintf(r->other, sizeof r->other, "server reset_ms p50 %.3f p99 %.3f", sp50, sp99);
    row_target(r, r->p50 <= TARGET_RESET_P50_MS, "p50 <= %g ms", TARGET_RESET_P50_MS);
    row_failures(r, &f);
    double sum = 0;
    for (size_t i = 0; i < lat.n; i++)
        sum += lat.v[i];
    json_object_set_new(JOUT, "reset",
                        json_pack("{s:i, s:o, s:o, s:o, s:o, s:o, s:f, s:b, s:I}", "n", (int)lat.n,
                                  "p50_ms", jnum(r->p50), "p99_ms", jnum(r->p99), "mean_ms",
                                  jnum(lat.n ? sum / (double)lat.n : NAN), "server_reset_ms_p50",
                                  jnum(sp50), "server_reset_ms_p99", jnum(sp99), "target_p50_ms",
                                  TARGET_RESET_P50_MS, "met", r->met == 1, "failures",
                                  (json_int_t)f.count));
    samples_free(&lat);
    samples_free(&srv);
}

/* ---- phase 2: sequential tool steps ------------------------------------------------------ */

typedef struct step_stats {
    samples lat, exec, record;
    failures f;
} step_stats;

/* One step with a full check: 200, observation.is_error false, not truncated. */
static void timed_step(conn *c, const char *path, const char *body, step_stats *s, bool record)
{
    char err[256], sn[256];
    double t0 = now_ms();
    if (conn_request(c, "POST", path, body, strlen(body), err, sizeof err) != 0)
        die("POST %s: %s", path, err);
    double ms = now_ms() - t0;
    json_t *j = json_loadb(c->body.data, c->body.len, 0, NULL);
    json_t *obs = json_object_get(j, "observation");
    bool ok = c->status == 200 && json_is_false(json_object_get(obs, "is_error")) &&
              json_is_false(json_object_get(j, "truncated"));
    if (!ok) {
        fail_note(&s->f, "POST %s %s -> %d %s", path, body, c->status,
                  snippet(c->body.data, c->body.len, sn, sizeof sn));
    } else if (record) {
        samples_add(&s->lat, ms);
        json_t *t = json_object_get(json_object_get(j, "info"), "timing");
        if (json_is_number(json_object_get(t, "exec_ms")))
            samples_add(&s->exec, json_number_value(json_object_get(t, "exec_ms")));
        if (json_is_number(json_object_get(t, "record_ms")))
            samples_add(&s->record, json_number_value(json_object_get(t, "record_ms")));
    }
    json_decref(j);
}

static void step_row(const char *name, const char *key, step_stats *s, json_t *jsteps)
{
    row *r = add_row(name);
    r->n = (long)s->lat.n;
    r->p50 = pct(&s->lat, 50);
    r->p99 = pct(&s->lat, 99);
    double e50 = pct(&s->exec, 50), r50 = pct(&s->record, 50);
    snprintf(r->other, sizeof r->other, "server exec p50 %.3f, record p50 %.3f", e50, r50);
    row_target(r, r->p50 <= TARGET_STEP_P50_MS, "p50 <= %g ms", TARGET_STEP_P50_MS);
    row_failures(r, &s->f);
    json_object_set_new(jsteps, key,
                        json_pack("{s:i, s:o, s:o, s:o, s:o, s:o, s:f, s:b, s:I}", "n",
                                  (int)s->lat.n, "p50_ms", jnum(r->p50), "p99_ms", jnum(r->p99),
                                  "server_exec_ms_p50", jnum(e50), "server_record_ms_p50",
                                  jnum(r50), "server_record_ms_p99", jnum(pct(&s->record, 99)),
                                  "target_p50_ms", TARGET_STEP_P50_MS, "met", r->met == 1,
                                  "failures", (json_int_t)s->f.count));
}

static void phase_steps(conn *c)
{
    failures f;
    fail_init(&f);
    char body[512], id[64], path[128];
    snprintf(body, sizeof body, "{\"task_id\":\"%s\",\"options\":{\"max_steps\":100000}}", TASK_ID);
    if (episode_create(c, body, id, NULL, NULL, &f) != 0)
        die("cannot create the episode of the step benchmark: %s", f.first);
    snprintf(path, sizeof path, "/v1/episodes/%s/step", id);

    step_stats st[3];
    memset(st, 0, sizeof st);
    for (int i = 0; i < 3; i++)
        fail_init(&st[i].f);

    /* Read */
    char read_b[256];
    step_body(read_b, sizeof read_b, "Read", "{\"file_path\":\"/workspace/model.py\"}");
    for (int i = 0; i < OPT.warmup; i++)
        timed_step(c, path, read_b, &st[0], false);
    for (int i = 0; i < OPT.step_n; i++)
        timed_step(c, path, read_b, &st[0], true);

    /* Edit: a file written first, its marker line swapped back and forth */
    char write_b[512], edit_ab[512], edit_ba[512];
    step_body(write_b, sizeof write_b, "Write",
              "{\"file_path\":\"/workspace/bench_edit.py\",\"content\":\"# bench\\n"
              "value = 1  # MARKER_A\\nprint(value)\\n\"}");
    step_body(edit_ab, sizeof edit_ab, "Edit",
              "{\"file_path\":\"/workspace/bench_edit.py\",\"old_string\":\"value = 1  # "
              "MARKER_A\",\"new_string\":\"value = 2  # MARKER_B\"}");
    step_body(edit_ba, sizeof edit_ba, "Edit",
              "{\"file_path\":\"/workspace/bench_edit.py\",\"old_string\":\"value = 2  # "
              "MARKER_B\",\"new_string\":\"value = 1  # MARKER_A\"}");
    timed_step(c, path, write_b, &st[1], false);
    int k = 0;
    for (int i = 0; i < OPT.warmup; i++, k++)
        timed_step(c, path, k % 2 ? edit_ba : edit_ab, &st[1], false);
    for (int i = 0; i < OPT.step_n; i++, k++)
        timed_step(c, path, k % 2 ? edit_ba : edit_ab, &st[1], true);

    /* Grep */
    char grep_b[256];
    step_body(grep_b, sizeof grep_b, "Grep", "{\"pattern\":\"import\",\"path\":\"/workspace\"}");
    for (int i = 0; i < OPT.warmup; i++)
        timed_step(c, path, grep_b, &st[2], false);
    for (int i = 0; i < OPT.step_n; i++)
        timed_step(c, path, grep_b, &st[2], true);

    episode_delete(c, id, &f);
    json_t *js = json_object();
    step_row("step: Read model.py", "Read", &st[0], js);
    step_row("step: Edit (1 line, alternating)", "Edit", &st[1], js);
    step_row("step: Grep \"import\" /workspace", "Grep", &st[2], js);
    json_object_set_new(JOUT, "steps", js);
    for (int i = 0; i < 3; i++) {
        samples_free(&st[i].lat);
        samples_free(&st[i].exec);
        samples_free(&st[i].record);
    }
    TOTAL_FAILURES += f.count;
}

/* ---- phase 3: throughput ----------------------------------------------------------------- */

typedef struct tp_shared {
    char (*ids)[64];
    int n_eps;
    double start, end; /* window, now_ms() */
    const char *body;
    size_t body_len;
    failures f;
    pthread_barrier_t ready, go; /* all connected; window set */
} tp_shared;

typedef struct tp_worker {
    tp_shared *sh;
    int first, count; /* episodes [first, first + count) */
    samples lat;
    long done;
    pthread_t tid;
} tp_worker;

static void tp_check(tp_shared *sh, int status, const buf *body)
{
    if (!step_ok_fast(status, body->data ? body->data : "")) {
        char sn[256];
        fail_note(&sh->f, "Read step -> %d %s", status,
                  snippet(body->data ? body->data : "", body->len, sn, sizeof sn));
    }
}

/* threads mode: one blocking connection per episode and thread. */
static void *tp_thread_main(void *arg)
{
    tp_worker *w = arg;
    tp_shared *sh = w->sh;
    conn c = {.fd = -1};
    char path[128], err[256];
    snprintf(path, sizeof path, "/v1/episodes/%s/step", sh->ids[w->first]);
    c.fd = http_connect(false);
    pthread_barrier_wait(&sh->ready);
    pthread_barrier_wait(&sh->go);
    for (;;) {
        double t0 = now_ms();
        if (t0 >= sh->end)
            break;
        if (conn_request(&c, "POST", path, sh->body, sh->body_len, err, sizeof err) != 0) {
            fail_note(&sh->f, "Read step: %s", err);
            continue;
        }
        double t1 = now_ms();
        tp_check(sh, c.status, &c.body);
        if (t1 < sh->end) {
            samples_add(&w->lat, t1 - t0);
            w->done++;
        }
    }
    conn_free(&c);
    return NULL;
}

/* poll mode: this thread's connections, one per episode, multiplexed with poll(). */
typedef struct aconn {
    int fd;
    char path[128];
    buf out, in, body;
    size_t out_off;
    double t0;
    bool busy;
} aconn;

static void aconn_send(tp_shared *sh, aconn *a)
{
    http_format(&a->out, "POST", a->path, sh->body, sh->body_len);
    a->out_off = 0;
    a->in.len = 0;
    a->t0 = now_ms();
    a->busy = true;
    ssize_t w = send(a->fd, a->out.data, a->out.len, MSG_NOSIGNAL);
    if (w > 0)
        a->out_off = (size_t)w;
}

static void *tp_poll_main(void *arg)
{
    tp_worker *w = arg;
    tp_shared *sh = w->sh;
    aconn *as = calloc((size_t)w->count, sizeof *as);
    struct pollfd *pf = calloc((size_t)w->count, sizeof *pf);
    if (!as || !pf)
        die("out of memory");
    for (int i = 0; i < w->count; i++) {
        as[i].fd = http_connect(true);
        if (as[i].fd < 0)
            die("connect: %s", strerror(errno));
        snprintf(as[i].path, sizeof as[i].path, "/v1/episodes/%s/step", sh->ids[w->first + i]);
    }
    pthread_barrier_wait(&sh->ready);
    pthread_barrier_wait(&sh->go);
    for (int i = 0; i < w->count; i++)
        aconn_send(sh, &as[i]);
    int busy = w->count;
    while (busy > 0) {
        for (int i = 0; i < w->count; i++) {
            pf[i].fd = as[i].busy ? as[i].fd : -1;
            pf[i].events = POLLIN | (as[i].out_off < as[i].out.len ? POLLOUT : 0);
            pf[i].revents = 0;
        }
        int pr = poll(pf, (nfds_t)w->count, 1000);
        if (pr < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        for (int i = 0; i < w->count && pr > 0; i++) {
            aconn *a = &as[i];
            if (!pf[i].revents)
                continue;
            if ((pf[i].revents & POLLOUT) && a->out_off < a->out.len) {
                ssize_t n =
                    send(a->fd, a->out.data + a->out_off, a->out.len - a->out_off, MSG_NOSIGNAL);
                if (n > 0)
                    a->out_off += (size_t)n;
            }
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            buf_reserve(&a->in, 16384);
            ssize_t got = recv(a->fd, a->in.data + a->in.len, a->in.cap - a->in.len - 1, 0);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (got <= 0) {
                fail_note(&sh->f, "Read step: connection closed by the server");
                close(a->fd);
                a->fd = -1;
                a->busy = false;
                busy--;
                continue;
            }
            a->in.len += (size_t)got;
            a->in.data[a->in.len] = '\0';
            http_resp r = {0};
            int st = http_parse(&a->in, &r, &a->body);
            if (st == 0)
                continue;
            double t1 = now_ms();
            if (st < 0) {
                fail_note(&sh->f, "Read step: malformed HTTP response");
                close(a->fd);
                a->fd = -1;
                a->busy = false;
                busy--;
                continue;
            }
            tp_check(sh, r.status, &a->body);
            if (t1 < sh->end) {
                samples_add(&w->lat, t1 - a->t0);
                w->done++;
            }
            if (r.close) {
                close(a->fd);
                a->fd = http_connect(true);
                if (a->fd < 0)
                    die("reconnect: %s", strerror(errno));
            }
            if (t1 < sh->end) {
                aconn_send(sh, a);
            } else {
                a->busy = false;
                busy--;
            }
        }
    }
    for (int i = 0; i < w->count; i++) {
        if (as[i].fd >= 0)
            close(as[i].fd);
        free(as[i].out.data);
        free(as[i].in.data);
        free(as[i].body.data);
    }
    free(as);
    free(pf);
    return NULL;
}

typedef struct tp_result {
    double steps_per_s, p50, p99, client_cpu_pct, server_cpu_pct;
    long steps, failures;
    int threads;
} tp_result;

static tp_result tp_run(char (*ids)[64], int n_eps, bool poll_mode)
{
    tp_shared sh;
    memset(&sh, 0, sizeof sh);
    fail_init(&sh.f);
    sh.ids = ids;
    sh.n_eps = n_eps;
    static char body[256];
    step_body(body, sizeof body, "Read", "{\"file_path\":\"/workspace/model.py\"}");
    sh.body = body;
    sh.body_len = strlen(body);
    int nthreads = poll_mode ? (OPT.tp_threads < n_eps ? OPT.tp_threads : n_eps) : n_eps;
    tp_worker *ws = calloc((size_t)nthreads, sizeof *ws);
    if (!ws)
        die("out of memory");
    pthread_barrier_init(&sh.ready, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&sh.go, NULL, (unsigned)nthreads + 1);
    int per = n_eps / nthreads, extra = n_eps % nthreads, first = 0;
    for (int i = 0; i < nthreads; i++) {
        ws[i].sh = &sh;
        ws[i].first = first;
        ws[i].count = poll_mode ? per + (i < extra) : 1;
        first += ws[i].count;
        if (pthread_create(&ws[i].tid, NULL, poll_mode ? tp_poll_main : tp_thread_main, &ws[i]) !=
            0)
            die("pthread_create failed");
    }
    /* every connection is open before the window starts */
    pthread_barrier_wait(&sh.ready);
    double c0 = self_cpu_s(), s0 = proc_cpu_s(OPT.server_pid);
    sh.start = now_ms();
    sh.end = sh.start + OPT.tp_seconds * 1000.0;
    pthread_barrier_wait(&sh.go);
    struct timespec ts = {(time_t)OPT.tp_seconds,
                          (long)((OPT.tp_seconds - floor(OPT.tp_seconds)) * 1e9)};
    nanosleep(&ts, NULL);
    double c1 = self_cpu_s(), s1 = proc_cpu_s(OPT.server_pid);
    samples all = {0};
    tp_result r = {0};
    for (int i = 0; i < nthreads; i++) {
        pthread_join(ws[i].tid, NULL);
        samples_merge(&all, &ws[i].lat);
        r.steps += ws[i].done;
        samples_free(&ws[i].lat);
    }
    double window_s = OPT.tp_seconds;
    r.steps_per_s = (double)r.steps / window_s;
    r.p50 = pct(&all, 50);
    r.p99 = pct(&all, 99);
    r.client_cpu_pct = 100.0 * (c1 - c0) / window_s;
    r.server_cpu_pct = s0 >= 0 && s1 >= 0 ? 100.0 * (s1 - s0) / window_s : NAN;
    r.failures = sh.f.count;
    r.threads = nthreads;
    if (sh.f.count) {
        TOTAL_FAILURES += sh.f.count;
        fprintf(stderr, "bench_env: throughput (%s): %ld failures; first: %s\n",
                poll_mode ? "poll" : "threads", sh.f.count, sh.f.first);
    }
    pthread_barrier_destroy(&sh.ready);
    pthread_barrier_destroy(&sh.go);
    samples_free(&all);
    free(ws);
    return r;
}

static json_t *tp_json(const tp_result *r, const char *mode)
{
    return json_pack("{s:s, s:i, s:I, s:f, s:o, s:o, s:f, s:o, s:I}", "client", mode,
                     "client_threads", r->threads, "steps", (json_int_t)r->steps, "steps_per_s",
                     r->steps_per_s, "p50_ms", jnum(r->p50), "p99_ms", jnum(r->p99),
                     "client_cpu_pct", r->client_cpu_pct, "server_cpu_pct", jnum(r->server_cpu_pct),
                     "failures", (json_int_t)r->failures);
}

static void phase_tp(conn *c)
{
    failures f;
    fail_init(&f);
    int n = OPT.tp_episodes;
    char(*ids)[64] = calloc((size_t)n, sizeof *ids);
    char body[512];
    if (!ids)
        die("out of memory");
    snprintf(body, sizeof body, "{\"task_id\":\"%s\",\"options\":{\"max_steps\":100000}}", TASK_ID);
    int made = 0;
    for (int i = 0; i < n; i++)
        if (episode_create(c, body, ids[made], NULL, NULL, &f) == 0)
            made++;
    if (made < n)
        die("throughput: only %d of %d episodes could be created: %s", made, n, f.first);

    bool do_poll = strcmp(OPT.tp_mode, "threads") != 0;
    bool do_threads = strcmp(OPT.tp_mode, "poll") != 0;
    tp_result rp = {0}, rt = {0};
    json_t *jt = json_object();
    char name[64];
    if (do_poll) {
        rp = tp_run(ids, n, true);
        json_object_set_new(jt, "poll", tp_json(&rp, "poll"));
    }
    if (do_threads) {
        rt = tp_run(ids, n, false);
        json_object_set_new(jt, "threads", tp_json(&rt, "threads"));
    }
    bool poll_best = do_poll && (!do_threads || rp.steps_per_s >= rt.steps_per_s);
    for (int m = 0; m < 2; m++) {
        bool is_poll = m == 0;
        if ((is_poll && !do_poll) || (!is_poll && !do_threads))
            continue;
        tp_result *r = is_poll ? &rp : &rt;
        if (is_poll)
            snprintf(name, sizeof name, "throughput: %d eps, %dx%d poll%s", n, r->threads,
                     (n + r->threads - 1) / r->threads, do_threads ? (poll_best ? " *" : "") : "");
        else
            snprintf(name, sizeof name, "throughput: %d eps, %d threads%s", n, r->threads,
                     do_poll ? (!poll_best ? " *" : "") : "");
        row *w = add_row(name);
        w->n = r->steps;
        w->p50 = r->p50;
        w->p99 = r->p99;
        if (isfinite(r->server_cpu_pct))
            snprintf(w->other, sizeof w->other, "%.0f steps/s; cpu: client %.0f%%, server %.0f%%",
                     r->steps_per_s, r->client_cpu_pct, r->server_cpu_pct);
        else
            snprintf(w->other, sizeof w->other, "%.0f steps/s; cpu: client %.0f%%", r->steps_per_s,
                     r->client_cpu_pct);
        w->failures = r->failures;
        if (is_poll == poll_best)
            row_target(w, r->steps_per_s >= TARGET_STEPS_PER_S, ">= %g steps/s",
                       TARGET_STEPS_PER_S);
    }
    tp_result *best = poll_best ? &rp : &rt;
    json_object_set_new(jt, "episodes", json_integer(n));
    json_object_set_new(jt, "seconds", json_real(OPT.tp_seconds));
    json_object_set_new(jt, "best", json_string(poll_best ? "poll" : "threads"));
    json_object_set_new(jt, "steps_per_s", json_real(best->steps_per_s));
    json_object_set_new(jt, "p50_ms", jnum(best->p50));
    json_object_set_new(jt, "p99_ms", jnum(best->p99));
    json_object_set_new(jt, "target_steps_per_s", json_real(TARGET_STEPS_PER_S));
    json_object_set_new(jt, "met", json_boolean(best->steps_per_s >= TARGET_STEPS_PER_S));
    json_object_set_new(JOUT, "throughput", jt);

    for (int i = 0; i < made; i++)
        episode_delete(c, ids[i], &f);
    TOTAL_FAILURES += f.count;
    free(ids);
}

/* ---- phase 4: memory --------------------------------------------------------------------- */

static void phase_mem(conn *c)
{
    failures f;
    fail_init(&f);
    int n = OPT.mem_episodes;
    char(*ids)[64] = calloc((size_t)n, sizeof *ids);
    if (!ids)
        die("out of memory");
    char body[512];
    snprintf(body, sizeof body, "{\"task_id\":\"%s\"}", TASK_ID);
    proc_status before = read_proc_status(OPT.server_pid);
    uint64_t du0 = disk_use(OPT.state_dir);
    int made = 0;
    double t0 = now_ms();
    for (int i = 0; i < n; i++)
        if (episode_create(c, body, ids[made], NULL, NULL, &f) == 0)
            made++;
    double create_s = (now_ms() - t0) / 1000.0;
    int status;
    json_t *h = api(c, "GET", "/v1/health", NULL, &status);
    long active = (long)json_integer_value(json_object_get(h, "active_episodes"));
    json_decref(h);
    proc_status held = read_proc_status(OPT.server_pid);
    uint64_t du1 = disk_use(OPT.state_dir);
    for (int i = 0; i < made; i++)
        episode_delete(c, ids[i], &f);
    proc_status after = read_proc_status(OPT.server_pid);

    char name[64];
    snprintf(name, sizeof name, "memory: %d open episodes", n);
    row *r = add_row(name);
    r->n = made;
    double per_ep_kib = NAN, du_per_ep_kib = NAN;
    if (held.ok) {
        per_ep_kib = made ? (held.rss_mib - before.rss_mib) * 1024.0 / made : NAN;
        snprintf(r->other, sizeof r->other, "RSS %.1f MiB (idle %.1f; +%.1f KiB/ep)", held.rss_mib,
                 before.rss_mib, per_ep_kib);
        row_target(r, made == n && held.rss_mib <= TARGET_RSS_MIB, "RSS <= %g MiB", TARGET_RSS_MIB);
    } else {
        snprintf(r->other, sizeof r->other, "RSS not measured (no --server-pid)");
    }
    if (du1 && made)
        du_per_ep_kib = (double)(du1 - du0) / 1024.0 / made;
    row_failures(r, &f);
    json_object_set_new(
        JOUT, "memory",
        json_pack("{s:i, s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:f, s:o, s:f, s:o}",
                  "episodes", n, "created", made, "active_reported", (json_int_t)active,
                  "rss_idle_mib", held.ok ? json_real(before.rss_mib) : json_null(), "rss_mib",
                  held.ok ? json_real(held.rss_mib) : json_null(), "rss_per_episode_kib",
                  jnum(per_ep_kib), "rss_after_delete_mib",
                  after.ok ? json_real(after.rss_mib) : json_null(), "hwm_mib",
                  after.ok ? json_real(after.hwm_mib) : json_null(), "disk_per_episode_kib",
                  jnum(du_per_ep_kib), "server_threads", (json_int_t)held.threads, "create_s",
                  create_s, "met", r->met == -1 ? json_null() : json_boolean(r->met),
                  "target_rss_mib", TARGET_RSS_MIB, "failures", json_integer((json_int_t)f.count)));
    /* a note line under the table */
    static char note[400];
    if (!held.ok)
        snprintf(note, sizeof note,
                 "memory detail: %d created in %.2f s (%.0f/s); RSS not measured (no "
                 "--server-pid); disk %.1f KiB/episode",
                 made, create_s, made / (create_s > 0 ? create_s : 1), du_per_ep_kib);
    else
        snprintf(note, sizeof note,
                 "memory detail: %d created in %.2f s (%.0f/s); server threads %ld; RSS after "
                 "deleting all %.1f MiB, peak %.1f MiB; disk %.1f KiB/episode",
                 made, create_s, made / (create_s > 0 ? create_s : 1), held.threads, after.rss_mib,
                 after.hwm_mib, du_per_ep_kib);
    json_object_set_new(JOUT, "_memory_note", json_string(note));
    free(ids);
}

/* ---- setup and report -------------------------------------------------------------------- */

static void parse_url(const char *url)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) == 0)
        p += 7;
    else if (strstr(p, "://"))
        die("--url: only http:// is supported");
    const char *colon = strrchr(p, ':');
    const char *slash = strchr(p, '/');
    size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
    if (hl == 0 || hl >= sizeof OPT.host)
        die("--url: no host in '%s'", url);
    memcpy(OPT.host, p, hl);
    OPT.host[hl] = '\0';
    if (colon) {
        size_t pl = slash && slash > colon ? (size_t)(slash - colon - 1) : strlen(colon + 1);
        if (pl == 0 || pl >= sizeof OPT.port)
            die("--url: bad port in '%s'", url);
        memcpy(OPT.port, colon + 1, pl);
        OPT.port[pl] = '\0';
    } else {
        snprintf(OPT.port, sizeof OPT.port, "80");
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int rc = getaddrinfo(OPT.host, OPT.port, &hints, &SERVER_ADDR);
    if (rc != 0)
        die("--url: %s: %s", OPT.host, gai_strerror(rc));
}

static void parse_phases(const char *list)
{
    OPT.phase_reset = OPT.phase_steps = OPT.phase_tp = OPT.phase_mem = false;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", list);
    for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "reset") == 0)
            OPT.phase_reset = true;
        else if (strcmp(t, "steps") == 0)
            OPT.phase_steps = true;
        else if (strcmp(t, "tp") == 0)
            OPT.phase_tp = true;
        else if (strcmp(t, "mem") == 0)
            OPT.phase_mem = true;
        else
            die("--phases: unknown phase '%s' (reset, steps, tp, mem)", t);
    }
}

static long parse_long(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        die("%s needs an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
    return v;
}

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 || strncmp(line, "Model", 5) == 0) {
            char *v = strchr(line, ':');
            if (!v)
                continue;
            v++;
            while (*v == ' ' || *v == '\t')
                v++;
            v[strcspn(v, "\n")] = '\0';
            snprintf(out, cap, "%s", v);
            break;
        }
    }
    fclose(f);
}

static void fmt_ms(char *out, size_t cap, double v)
{
    if (isfinite(v))
        snprintf(out, cap, "%.3f", v);
    else
        snprintf(out, cap, "-");
}

static void print_table(void)
{
    printf("\n%-38s %7s %9s %9s  %-44s %-18s %s\n", "figure", "n", "p50 ms", "p99 ms", "other",
           "target", "result");
    for (int i = 0; i < 140; i++)
        putchar('-');
    putchar('\n');
    for (int i = 0; i < NROWS; i++) {
        row *r = &ROWS[i];
        char a[32], b[32];
        fmt_ms(a, sizeof a, r->p50);
        fmt_ms(b, sizeof b, r->p99);
        const char *res = r->met == 1 ? "met" : r->met == 0 ? "NOT MET" : "";
        printf("%-38s %7ld %9s %9s  %-44s %-18s %s%s\n", r->name, r->n, a, b, r->other, r->target,
               res, r->failures ? "  (FAILURES)" : "");
    }
    for (int i = 0; i < 140; i++)
        putchar('-');
    putchar('\n');
}

int main(int argc, char **argv)
{
    static const struct option LONG[] = {
        {"url", required_argument, NULL, 'u'},      {"server-pid", required_argument, NULL, 'P'},
        {"config", required_argument, NULL, 'c'},   {"state-dir", required_argument, NULL, 's'},
        {"task", required_argument, NULL, 't'},     {"reset-n", required_argument, NULL, 1},
        {"step-n", required_argument, NULL, 2},     {"tp-episodes", required_argument, NULL, 3},
        {"tp-seconds", required_argument, NULL, 4}, {"tp-mode", required_argument, NULL, 5},
        {"tp-threads", required_argument, NULL, 6}, {"mem-episodes", required_argument, NULL, 7},
        {"warmup", required_argument, NULL, 8},     {"phases", required_argument, NULL, 9},
        {"json", required_argument, NULL, 'j'},     {"strict", no_argument, NULL, 10},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    OPT.reset_n = 500;
    OPT.step_n = 1000;
    OPT.tp_episodes = 64;
    OPT.tp_seconds = 10;
    OPT.tp_mode = "auto";
    OPT.tp_threads = 8;
    OPT.mem_episodes = 1000;
    OPT.warmup = 20;
    OPT.phase_reset = OPT.phase_steps = OPT.phase_tp = OPT.phase_mem = true;
    const char *url = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "h", LONG, NULL)) != -1) {
        switch (o) {
        case 'u':
            url = optarg;
            break;
        case 'P':
            OPT.server_pid = parse_long("--server-pid", optarg, 1, 1L << 30);
            break;
        case 'c':
            OPT.config_label = optarg;
            break;
        case 's':
            OPT.state_dir = optarg;
            break;
        case 't':
            OPT.task_id = optarg;
            break;
        case 1:
            OPT.reset_n = (int)parse_long("--reset-n", optarg, 1, 10000000);
            break;
        case 2:
            OPT.step_n = (int)parse_long("--step-n", optarg, 1, 10000000);
            break;
        case 3:
            OPT.tp_episodes = (int)parse_long("--tp-episodes", optarg, 1, 100000);
            break;
        case 4: {
            char *end;
            OPT.tp_seconds = strtod(optarg, &end);
            if (*end || !(OPT.tp_seconds > 0 && OPT.tp_seconds <= 3600))
                die("--tp-seconds needs a number in (0, 3600]");
            break;
        }
        case 5:
            if (strcmp(optarg, "auto") && strcmp(optarg, "poll") && strcmp(optarg, "threads"))
                die("--tp-mode is auto, poll or threads");
            OPT.tp_mode = optarg;
            break;
        case 6:
            OPT.tp_threads = (int)parse_long("--tp-threads", optarg, 1, 4096);
            break;
        case 7:
            OPT.mem_episodes = (int)parse_long("--mem-episodes", optarg, 1, 1000000);
            break;
        case 8:
            OPT.warmup = (int)parse_long("--warmup", optarg, 0, 1000000);
            break;
        case 9:
            parse_phases(optarg);
            break;
        case 'j':
            OPT.json_path = optarg;
            break;
        case 10:
            OPT.strict = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        die("unexpected argument '%s'; see --help", argv[optind]);
    if (!url) {
        usage(stderr);
        return 2;
    }
    parse_url(url);
    signal(SIGPIPE, SIG_IGN);

    conn c = {.fd = -1};
    int status;
    json_t *info = api(&c, "GET", "/v1/info", NULL, &status);
    if (status != 200 || !info)
        die("GET /v1/info -> %d", status);
    const json_t *lim = json_object_get(info, "limits");
    /* durability and sandbox: under limits in the design; top-level in this server */
    const char *durability = json_string_value(json_object_get(lim, "durability"));
    if (!durability)
        durability = json_string_value(json_object_get(info, "durability"));
    const char *sandbox = json_string_value(json_object_get(lim, "sandbox"));
    if (!sandbox)
        sandbox = json_string_value(json_object_get(info, "sandbox"));
    long max_eps = (long)json_integer_value(json_object_get(lim, "max_episodes"));
    const char *version = json_string_value(json_object_get(info, "version"));

    if (OPT.task_id) {
        snprintf(TASK_ID, sizeof TASK_ID, "%s", OPT.task_id);
    } else {
        json_t *tasks = api(&c, "GET", "/v1/tasks", NULL, &status);
        const char *tid = json_string_value(
            json_object_get(json_array_get(json_object_get(tasks, "tasks"), 0), "id"));
        if (status != 200 || !tid)
            die("GET /v1/tasks -> %d: the server has no tasks", status);
        snprintf(TASK_ID, sizeof TASK_ID, "%s", tid);
        json_decref(tasks);
    }
    json_t *health = api(&c, "GET", "/v1/health", NULL, &status);
    long active0 = (long)json_integer_value(json_object_get(health, "active_episodes"));
    json_decref(health);

    char cpu[256], fstype[64] = "-";
    cpu_model(cpu, sizeof cpu);
    struct utsname un;
    uname(&un);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (OPT.state_dir) {
        struct statfs sf;
        if (statfs(OPT.state_dir, &sf) == 0) {
            const char *nm = fs_type_name((long)sf.f_type);
            if (nm)
                snprintf(fstype, sizeof fstype, "%s", nm);
            else
                snprintf(fstype, sizeof fstype, "0x%lx", (unsigned long)sf.f_type);
        } else {
            snprintf(fstype, sizeof fstype, "unknown (%s)", strerror(errno));
        }
    }
    time_t wall = time(NULL);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&wall));

    printf("kgym-env benchmark  %s\n", stamp);
    printf("server     %s  kgym-env %s  pid %s%ld  task %s\n", url, version ? version : "?",
           OPT.server_pid ? "" : "? ", OPT.server_pid, TASK_ID);
    printf("settings   durability %s; max_episodes %ld; sandbox: %s\n",
           durability ? durability : "?", max_eps, sandbox ? sandbox : "?");
    printf("config     %s\n", OPT.config_label ? OPT.config_label : "(not given)");
    printf("state dir  %s  (filesystem %s)\n", OPT.state_dir ? OPT.state_dir : "(not given)",
           fstype);
    printf("machine    nproc %ld; %s; %s %s %s\n", ncpu, cpu, un.sysname, un.release, un.machine);
    printf("client     bench_env in the same machine (shares its CPUs with the server); "
           "warmup %d requests per latency phase\n",
           OPT.warmup);
    if (active0)
        printf("note       the server already had %ld open episodes\n", active0);
    fflush(stdout);

    JOUT = json_object();
    json_object_set_new(JOUT, "settings",
                        json_pack("{s:s, s:s?, s:s?, s:s?, s:s?, s:s, s:I, s:s, s:I}", "url", url,
                                  "version", version, "durability", durability, "sandbox", sandbox,
                                  "config", OPT.config_label, "state_dir_fs", fstype,
                                  "max_episodes", (json_int_t)max_eps, "task_id", TASK_ID,
                                  "server_pid", (json_int_t)OPT.server_pid));
    if (OPT.state_dir)
        json_object_set_new(json_object_get(JOUT, "settings"), "state_dir",
                            json_string(OPT.state_dir));
    json_object_set_new(JOUT, "machine",
                        json_pack("{s:I, s:s, s:s, s:s, s:s}", "nproc", (json_int_t)ncpu, "cpu",
                                  cpu, "kernel", un.release, "arch", un.machine, "time", stamp));

    if (OPT.phase_mem && max_eps && max_eps < OPT.mem_episodes + active0)
        fprintf(stderr,
                "bench_env: warning: max_episodes %ld < %d + %ld open: the memory phase will "
                "see 429s\n",
                max_eps, OPT.mem_episodes, active0);

    double t0 = now_ms();
    if (OPT.phase_reset) {
        fprintf(stderr, "bench_env: reset x%d...\n", OPT.reset_n);
        phase_reset(&c);
    }
    if (OPT.phase_steps) {
        fprintf(stderr, "bench_env: steps x%d per tool...\n", OPT.step_n);
        phase_steps(&c);
    }
    if (OPT.phase_tp) {
        fprintf(stderr, "bench_env: throughput %d episodes, %s, %.0f s each...\n", OPT.tp_episodes,
                OPT.tp_mode, OPT.tp_seconds);
        phase_tp(&c);
    }
    if (OPT.phase_mem) {
        fprintf(stderr, "bench_env: memory with %d episodes...\n", OPT.mem_episodes);
        phase_mem(&c);
    }
    double total_s = (now_ms() - t0) / 1000.0;

    print_table();
    bool any_tp = false;
    for (int i = 0; i < NROWS; i++)
        any_tp = any_tp || strncmp(ROWS[i].name, "throughput", 10) == 0;
    if (any_tp && strcmp(OPT.tp_mode, "auto") == 0)
        printf("* the client mode with the higher steps/s; its row is the one held to the "
               "target\n");
    const char *mn = json_string_value(json_object_get(JOUT, "_memory_note"));
    if (mn)
        printf("%s\n", mn);
    json_object_del(JOUT, "_memory_note");
    if (c.reconnects)
        printf("note: %ld keep-alive connections were reopened\n", c.reconnects);
    for (int i = 0; i < NROWS; i++)
        if (ROWS[i].failures)
            printf("FAILURES in '%s': %ld; first: %s\n", ROWS[i].name, ROWS[i].failures,
                   ROWS[i].first_failure);
    int met = 0, all = 0;
    for (int i = 0; i < NROWS; i++)
        if (ROWS[i].met >= 0) {
            all++;
            met += ROWS[i].met;
        }
    printf("targets: %d of %d met; failed requests: %ld%s; %.1f s\n", met, all, TOTAL_FAILURES,
           TOTAL_FAILURES ? " (THE FIGURES ABOVE INCLUDE FAILED RUNS)" : "", total_s);

    json_object_set_new(JOUT, "targets_met", json_integer(met));
    json_object_set_new(JOUT, "targets", json_integer(all));
    json_object_set_new(JOUT, "failures", json_integer((json_int_t)TOTAL_FAILURES));
    json_object_set_new(JOUT, "duration_s", json_real(total_s));
    if (OPT.json_path &&
        json_dump_file(JOUT, OPT.json_path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        die("cannot write %s", OPT.json_path);
    json_decref(JOUT);
    json_decref(info);
    conn_free(&c);
    freeaddrinfo(SERVER_ADDR);
    if (TOTAL_FAILURES)
        return 1;
    return OPT.strict && TARGETS_MISSED ? 3 : 0;
}
