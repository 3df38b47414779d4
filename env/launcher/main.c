/* kgym-sandbox: runs one command in a sandbox described by a profile (see launcher.h). The
 * server starts it for every Bash call; it can also be run by hand to see what an agent sees:
 *   sudo build/kgym-sandbox --profile bash --workspace /tmp/ws --uid 200000 --gid 200000 \
 *        -- /bin/bash -c 'id; ls /' */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/launcher.h"

static void usage(FILE *out)
{
    fputs("usage: kgym-sandbox [options] -- COMMAND [ARGS...]\n"
          "\n"
          "Runs COMMAND (an absolute path inside the sandbox) in a fresh sandbox: new mount, pid,\n"
          "net, ipc and uts namespaces, a minimal read-only root, the workspace at /workspace,\n"
          "no capabilities, the given uid, no_new_privs and the profile's seccomp filter.\n"
          "Must be started as root. Exits with the command's status, or dies of its signal;\n"
          "125 means the sandbox could not be set up (the reason is on stderr). When the\n"
          "process that started it ends, or --wall-ms passes, everything in the sandbox is\n"
          "killed and the launcher dies of SIGKILL.\n"
          "\n"
          "  --profiles DIR        profile directory (default sandbox_profiles)\n"
          "  --profile NAME        profile to apply: bash, compile, candidate (default bash)\n"
          "  --workspace PATH      host directory bound read-write at /workspace (required)\n"
          "  --uid N --gid N       the identity of the command (required, never 0)\n"
          "  --cwd PATH            working directory inside (default /workspace)\n"
          "  --hostname NAME       (default kgym)\n"
          "  --cgroup-procs FILE   a cgroup.procs file to join first (repeatable)\n"
          "  --keep-fd N           an fd the command keeps (repeatable)\n"
          "  --var NAME=VALUE      a ${NAME} used by the profile's mounts (repeatable)\n"
          "  --env NAME=VALUE      set a variable of the command's environment (repeatable)\n"
          "  --gpu-device PATH     a GPU device node for profiles with [dev] gpu (repeatable)\n"
          "  --fsize BYTES         lower the profile's file-size limit\n"
          "  --wall-ms N           kill the sandbox after N milliseconds\n"
          "  --status-fd N         write \"setup\" to fd N if the sandbox cannot be set up\n"
          "  --check               parse the profile, print nothing, exit 0 if it is valid\n",
          out);
}

static long parse_id(const char *flag, const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v <= 0 || v > 2147483647L) {
        fprintf(stderr, "kgym-sandbox: %s needs a positive integer, got '%s'\n", flag, s);
        exit(2);
    }
    return v;
}

enum {
    O_PROFILES = 1000,
    O_PROFILE,
    O_WORKSPACE,
    O_UID,
    O_GID,
    O_CWD,
    O_HOSTNAME,
    O_CGROUP,
    O_KEEP,
    O_VAR,
    O_GPU,
    O_CHECK,
    O_FSIZE,
    O_ENV,
    O_STATUS,
    O_WALL
};

static int parse_count(const char *flag, const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || v == 0 || s[0] == '-') {
        fprintf(stderr, "kgym-sandbox: %s needs a positive integer, got '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int add(const char **list, int *n, int max, const char *flag, const char *value)
{
    if (*n >= max) {
        fprintf(stderr, "kgym-sandbox: at most %d %s\n", max, flag);
        return -1;
    }
    list[(*n)++] = value;
    return 0;
}

static int parse_option(launch_opts *o, int opt, const char *arg, bool *check)
{
    switch (opt) {
    case O_PROFILES:
        o->profiles_dir = arg;
        return 0;
    case O_PROFILE:
        o->profile_name = arg;
        return 0;
    case O_WORKSPACE:
        o->workspace = arg;
        return 0;
    case O_UID:
        o->uid = (uid_t)parse_id("--uid", arg);
        return 0;
    case O_GID:
        o->gid = (gid_t)parse_id("--gid", arg);
        return 0;
    case O_CWD:
        o->cwd = arg;
        return 0;
    case O_HOSTNAME:
        o->hostname = arg;
        return 0;
    case O_CGROUP:
        return add(o->cgroup_procs, &o->n_cgroup_procs, LAUNCH_MAX_CGROUP_FILES, "--cgroup-procs",
                   arg);
    case O_VAR:
        return add(o->vars, &o->n_vars, LAUNCH_MAX_VARS, "--var", arg);
    case O_ENV:
        if (!strchr(arg, '=') || arg[0] == '=') {
            fprintf(stderr, "kgym-sandbox: --env needs NAME=VALUE\n");
            return -1;
        }
        return add(o->env, &o->n_env, LAUNCH_MAX_VARS, "--env", arg);
    case O_GPU:
        return add(o->gpu_devices, &o->n_gpu_devices, 4, "--gpu-device", arg);
    case O_KEEP:
        if (o->n_keep_fds >= LAUNCH_MAX_KEEP_FDS)
            return -1;
        o->keep_fds[o->n_keep_fds++] = (int)parse_id("--keep-fd", arg);
        return 0;
    case O_CHECK:
        *check = true;
        return 0;
    case O_STATUS:
        o->status_fd = (int)parse_id("--status-fd", arg);
        return 0;
    case O_FSIZE:
        return parse_count("--fsize", arg, &o->fsize);
    case O_WALL:
        return parse_count("--wall-ms", arg, &o->wall_ms);
    default:
        return -1;
    }
}

int main(int argc, char **argv)
{
    /* First thing: the process that started us (the server). Once it has died, getppid() names
     * whoever adopted us, so a later look could watch the wrong process. pid 1 (the server as a
     * container's init, or an orphan already) is not watched: nothing can be told from it. */
    pid_t parent = getppid();
    static const struct option OPTS[] = {
        {"profiles", required_argument, NULL, O_PROFILES},
        {"profile", required_argument, NULL, O_PROFILE},
        {"workspace", required_argument, NULL, O_WORKSPACE},
        {"uid", required_argument, NULL, O_UID},
        {"gid", required_argument, NULL, O_GID},
        {"cwd", required_argument, NULL, O_CWD},
        {"hostname", required_argument, NULL, O_HOSTNAME},
        {"cgroup-procs", required_argument, NULL, O_CGROUP},
        {"keep-fd", required_argument, NULL, O_KEEP},
        {"var", required_argument, NULL, O_VAR},
        {"gpu-device", required_argument, NULL, O_GPU},
        {"check", no_argument, NULL, O_CHECK},
        {"fsize", required_argument, NULL, O_FSIZE},
        {"env", required_argument, NULL, O_ENV},
        {"status-fd", required_argument, NULL, O_STATUS},
        {"wall-ms", required_argument, NULL, O_WALL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    launch_opts o = {.profiles_dir = "sandbox_profiles",
                     .profile_name = "bash",
                     .status_fd = -1,
                     .parent_pid = parent > 1 ? parent : 0};
    bool check = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "+h", OPTS, NULL)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            return 0;
        }
        if (opt == '?' || parse_option(&o, opt, optarg, &check) != 0) {
            usage(stderr);
            return 2;
        }
    }
    static sbx_profile profile; /* large: not on the stack */
    char err[1024];
    if (sbx_profile_load(o.profiles_dir, o.profile_name, &profile, err, sizeof err) != 0) {
        fprintf(stderr, "kgym-sandbox: %s\n", err);
        return 125;
    }
    if (check)
        return 0;
    if (optind >= argc || !o.workspace || !o.uid || !o.gid || argv[optind][0] != '/') {
        fprintf(stderr, "kgym-sandbox: needs --workspace, --uid, --gid and an absolute "
                        "command after --\n");
        return 2;
    }
    o.argv = argv + optind;
    return launch_run(&o, &profile);
}
