/* kgym-env: the environment server's command line. */
#include <errno.h>
#include <getopt.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"
#include "util/text.h"

static void usage(FILE *out)
{
    fputs("usage: kgym-env <command> [options]\n"
          "\n"
          "commands:\n"
          "  serve      run the environment server (JSON over HTTP)\n"
          "  version    print the version\n"
          "  help       this text (also --help after any command)\n"
          "\n"
          "serve options (each overrides configs/server.json, which overrides the defaults):\n"
          "  --config PATH        JSON config file (unknown keys are an error)\n"
          "  --host ADDR          IPv4 address to listen on (default 127.0.0.1)\n"
          "  --port N             TCP port (default 8080; 0 picks a free one)\n"
          "  --tasks PATH         task folder or JSONL file; repeatable; replaces the config's\n"
          "  --kernelbench PATH   KernelBench checkout folder or {level,problem_id,name,code}\n"
          "                       JSONL; repeatable; tasks get ids kb/L<level>/<problem_id>\n"
          "  --state-dir DIR      episodes, workspaces and trajectories (default ./state)\n"
          "  --template DIR       agent workspace template (default env/template)\n"
          "  --max-episodes N     open episodes at once (429 past it)\n"
          "  --idle-timeout S     reap episodes idle this many seconds (0 = never)\n"
          "  --durability MODE    fsync (default: every step durable before the reply) | none\n"
          "  --sandbox-profiles DIR  sandbox profiles (default sandbox_profiles)\n"
          "  --sandbox-python PATH a Python (e.g. the project venv's, with torch) that sandboxed\n"
          "                       commands get as python3 (bound read-only, first on PATH)\n"
          "  --allow-weak-sandbox run tools unsandboxed when the host lacks a protection the\n"
          "                       sandbox needs (not running as root, no cgroups, ...); every\n"
          "                       health call and episode says so. Never for untrusted agents.\n"
          "  --harness DIR        the trusted harness (default: env/harness beside the binary)\n"
          "  --build-cache DIR    compiled objects, PCH and baselines (default STATE/cache)\n"
          "  --build-cache-max-bytes N  cap on the cached objects; the least recently used\n"
          "                       go first (default 21474836480 = 20 GiB; 0 = no cap)\n"
          "  --gpus LIST          GPUs evaluations may lease: all (default), none, or 0,2\n"
          "  --cuda-arch ARCH     build .cu files for ARCH (default: probed, sm_90a on H100/H200)\n"
          "  --eval-timeout S     one Verify/Profile/Submit evaluation (default 900)\n"
          "  --quiet              no per-request log lines\n"
          "\n"
          "The API is described in README.md. SIGTERM drains: in-flight steps finish, new\n"
          "episodes get 503, then the server exits.\n",
          out);
}

enum {
    OPT_CONFIG = 1000,
    OPT_TEMPLATE,
    OPT_IDLE,
    OPT_DURABILITY,
    OPT_PROFILES,
    OPT_WEAK,
    OPT_PYTHON,
    OPT_HARNESS,
    OPT_BUILD_CACHE,
    OPT_CACHE_MAX,
    OPT_GPUS,
    OPT_CUDA_ARCH,
    OPT_EVAL_TIMEOUT,
};

static int parse_number(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi)) { /* written so that NaN fails too */
        fprintf(stderr, "kgym-env: %s needs a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A whole decimal number in [lo, hi] (a port, a count, seconds of a whole-second limit):
 * "80.5", "0x50" or "1e3" are refused, never truncated or read in another base. */
static int parse_integer(const char *flag, const char *s, long long lo, long long hi,
                         long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    /* digits only: strtoll alone would also take " 80", "+80" and "-0" */
    if (s[strspn(s, "0123456789")] != '\0' || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "kgym-env: %s needs a whole number in [%lld, %lld], got '%s'\n", flag, lo,
                hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A string option into its fixed-size config field: one too long for it is refused (it was
 * cut short, and the server then used another path than the one given). */
static int set_text(const char *flag, char *field, size_t cap, const char *arg)
{
    if (text_fmt(field, cap, "%s", arg))
        return 0;
    fprintf(stderr, "kgym-env: %s is too long (at most %zu bytes)\n", flag, cap - 1);
    return -1;
}
#define SET_TEXT(flag, field) set_text(flag, cfg->field, sizeof cfg->field, arg)

static const struct option SERVE_OPTS[] = {
    {"config", required_argument, NULL, OPT_CONFIG},
    {"host", required_argument, NULL, 'H'},
    {"port", required_argument, NULL, 'p'},
    {"tasks", required_argument, NULL, 't'},
    {"kernelbench", required_argument, NULL, 'k'},
    {"state-dir", required_argument, NULL, 's'},
    {"template", required_argument, NULL, OPT_TEMPLATE},
    {"max-episodes", required_argument, NULL, 'm'},
    {"idle-timeout", required_argument, NULL, OPT_IDLE},
    {"durability", required_argument, NULL, OPT_DURABILITY},
    {"quiet", no_argument, NULL, 'q'},
    {"sandbox-profiles", required_argument, NULL, OPT_PROFILES},
    {"allow-weak-sandbox", no_argument, NULL, OPT_WEAK},
    {"sandbox-python", required_argument, NULL, OPT_PYTHON},
    {"harness", required_argument, NULL, OPT_HARNESS},
    {"build-cache", required_argument, NULL, OPT_BUILD_CACHE},
    {"build-cache-max-bytes", required_argument, NULL, OPT_CACHE_MAX},
    {"gpus", required_argument, NULL, OPT_GPUS},
    {"cuda-arch", required_argument, NULL, OPT_CUDA_ARCH},
    {"eval-timeout", required_argument, NULL, OPT_EVAL_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Options are read twice: first only --config (it is the base), then everything else. The
 * first pass is getopt_long's too, so that --config is found however getopt_long accepts it
 * (--config=F, an abbreviation such as --conf F) and never in another option's argument. Its
 * errors are left to the second pass. */
static int find_config(int argc, char **argv, server_config *cfg)
{
    int opt, rc = 0;
    opterr = 0;
    optind = 0; /* glibc: a full re-initialisation */
    while (rc == 0 && (opt = getopt_long(argc, argv, "h", SERVE_OPTS, NULL)) != -1) {
        char err[512];
        if (opt == OPT_CONFIG && config_load_file(cfg, optarg, err, sizeof err) != 0) {
            fprintf(stderr, "kgym-env: %s\n", err);
            rc = -1;
        }
    }
    opterr = 1;
    optind = 0;
    return rc;
}

static int apply_option(server_config *cfg, int opt, const char *arg, bool *sources_replaced)
{
    double v;
    long long n;
    char err[256];
    switch (opt) {
    case 'H':
        return SET_TEXT("--host", host);
    case 'p':
        if (parse_integer("--port", arg, 0, 65535, &n))
            return -1;
        cfg->port = (int)n;
        return 0;
    case 's':
        return SET_TEXT("--state-dir", state_dir);
    case OPT_TEMPLATE:
        return SET_TEXT("--template", template_dir);
    case 'm':
        if (parse_integer("--max-episodes", arg, 1, 1000000, &n))
            return -1;
        cfg->max_episodes = (int)n;
        return 0;
    case OPT_IDLE:
        if (parse_number("--idle-timeout", arg, 0, 30 * 86400, &v))
            return -1;
        cfg->idle_timeout_s = v;
        return 0;
    case OPT_DURABILITY:
        if (strcmp(arg, "fsync") && strcmp(arg, "none")) {
            fprintf(stderr, "kgym-env: --durability is fsync or none\n");
            return -1;
        }
        cfg->durability = strcmp(arg, "fsync") == 0 ? DURABILITY_FSYNC : DURABILITY_NONE;
        return 0;
    case 'q':
        cfg->log_requests = false;
        return 0;
    case OPT_PROFILES:
        return SET_TEXT("--sandbox-profiles", sandbox_profiles);
    case OPT_WEAK:
        cfg->allow_weak_sandbox = true;
        return 0;
    case OPT_PYTHON:
        return SET_TEXT("--sandbox-python", sandbox_python);
    case OPT_HARNESS:
        return SET_TEXT("--harness", harness_dir);
    case OPT_BUILD_CACHE:
        return SET_TEXT("--build-cache", build_cache);
    case OPT_CACHE_MAX:
        if (parse_integer("--build-cache-max-bytes", arg, 0, 1000000000000000LL, &n))
            return -1;
        cfg->build_cache_max_bytes = (uint64_t)n;
        return 0;
    case OPT_GPUS:
        return SET_TEXT("--gpus", gpus);
    case OPT_CUDA_ARCH:
        return SET_TEXT("--cuda-arch", cuda_arch);
    case OPT_EVAL_TIMEOUT:
        if (parse_integer("--eval-timeout", arg, 1, 86400, &n))
            return -1;
        cfg->eval_timeout_s = (int)n;
        return 0;
    case 't':
    case 'k':
        if (!*sources_replaced) {
            config_deinit(cfg); /* command-line sources replace the config file's */
            *sources_replaced = true;
        }
        if (config_add_source(cfg, opt == 'k', arg, err, sizeof err) != 0) {
            fprintf(stderr, "kgym-env: %s\n", err);
            return -1;
        }
        return 0;
    default:
        return 0;
    }
}

/* Each open episode holds two descriptors (workspace root, trajectory) and each client a
 * socket: the usual soft limit of 1,024 would cap the server far below max_episodes. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int cmd_serve(int argc, char **argv)
{
    static server srv; /* the process's one context */
    config_defaults(&srv.cfg);
    if (find_config(argc, argv, &srv.cfg) != 0)
        return 2;
    bool replaced = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", SERVE_OPTS, NULL)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            return 0;
        }
        if (opt == '?' || apply_option(&srv.cfg, opt, optarg, &replaced) != 0) {
            fprintf(stderr, "kgym-env: see kgym-env serve --help\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kgym-env: unexpected argument '%s'; see kgym-env serve --help\n",
                argv[optind]);
        return 2;
    }
    raise_fd_limit();
    char err[1024];
    int rc = 0;
    /* First line, before the host checks and the recovery: a slow start shows where it is. */
    server_log("info", "starting",
               json_pack("{s:i, s:s}", "pid", (int)getpid(), "state_dir", srv.cfg.state_dir));
    if (server_init(&srv, err, sizeof err) != 0 || server_run(&srv, err, sizeof err) != 0) {
        fprintf(stderr, "kgym-env: %s\n", err);
        rc = 1;
    }
    server_deinit(&srv);
    config_deinit(&srv.cfg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("kgym-env %s\n", KGYM_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "serve") == 0)
        return cmd_serve(argc - 1, argv + 1);
    fprintf(stderr, "kgym-env: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
