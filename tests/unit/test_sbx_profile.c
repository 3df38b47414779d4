/* sandbox/profile: the shipped profiles parse; the parser is strict (every unknown word is an
 * error with file:line); includes, overrides and list extension behave as the README says; and
 * the PFC export shows the rules that matter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/profile.h"
#include "sandbox/seccomp.h"

static const char *const SHIPPED[] = {"base", "bash", "compile", "candidate"};

static const char *profiles_dir(void)
{
    const char *d = getenv("KGYM_SBX_PROFILES");
    return d && *d ? d : "sandbox_profiles";
}

/* ---- a scratch directory of profiles --------------------------------------------------------- */

typedef struct scratch {
    char dir[64];
    sbx_profile *p;
    char err[512];
} scratch;

static int scratch_setup(void **state)
{
    scratch *s = calloc(1, sizeof *s);
    assert_non_null(s);
    snprintf(s->dir, sizeof s->dir, "/tmp/kgym-sbx-test.XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    s->p = calloc(1, sizeof *s->p);
    assert_non_null(s->p);
    *state = s;
    return 0;
}

static int scratch_teardown(void **state)
{
    scratch *s = *state;
    DIR *d = opendir(s->dir);
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        if (e->d_name[0] != '.')
            unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d)
        closedir(d);
    rmdir(s->dir);
    free(s->p);
    free(s);
    return 0;
}

static void put(scratch *s, const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s.sbx", s->dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The limits every scratch profile needs to be complete. */
#define LIMITS "[limits]\nwall = 1s\noutput = 1M\n"

static void expect_ok(scratch *s, const char *name)
{
    if (sbx_profile_load(s->dir, name, s->p, s->err, sizeof s->err) != 0)
        fail_msg("loading %s failed: %s", name, s->err);
}

/* Loads name and expects an error containing want. */
static void expect_err(scratch *s, const char *name, const char *want)
{
    int rc = sbx_profile_load(s->dir, name, s->p, s->err, sizeof s->err);
    if (rc == 0)
        fail_msg("%s loaded, expected an error containing \"%s\"", name, want);
    if (!strstr(s->err, want))
        fail_msg("%s: error \"%s\" lacks \"%s\"", name, s->err, want);
}

static const sbx_syscall_rule *rule(const sbx_profile *p, const char *name)
{
    for (int i = 0; i < p->n_rules; i++)
        if (strcmp(p->rules[i].name, name) == 0)
            return &p->rules[i];
    return NULL;
}

static const char *env_of(const sbx_profile *p, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < p->n_env; i++)
        if (strncmp(p->env[i], name, n) == 0 && p->env[i][n] == '=')
            return p->env[i] + n + 1;
    return NULL;
}

static const sbx_mount *mount_at(const sbx_profile *p, const char *dest)
{
    for (int i = 0; i < p->n_mounts; i++)
        if (strcmp(p->mounts[i].dest, dest) == 0)
            return &p->mounts[i];
    return NULL;
}

/* ---- the shipped profiles -------------------------------------------------------------------- */

static void expect_rule(const sbx_profile *p, const char *name, sbx_action action, int e)
{
    const sbx_syscall_rule *r = rule(p, name);
    if (!r)
        fail_msg("%s: no rule for %s", p->name, name);
    if (r->action != action || (action == SBX_ERRNO && r->errno_value != e))
        fail_msg("%s: %s has action %d errno %d, want %d/%d", p->name, name, r->action,
                 r->errno_value, action, e);
}

static void check_common_policy(const sbx_profile *p)
{
    assert_int_equal(p->default_errno, ENOSYS);
    const char *eperm[] = {"ptrace",
                           "process_vm_readv",
                           "process_vm_writev",
                           "kcmp",
                           "pidfd_getfd",
                           "mount",
                           "umount2",
                           "pivot_root",
                           "chroot",
                           "open_tree",
                           "move_mount",
                           "fsopen",
                           "fsconfig",
                           "fsmount",
                           "fspick",
                           "mount_setattr",
                           "unshare",
                           "setns",
                           "bpf",
                           "perf_event_open",
                           "userfaultfd",
                           "kexec_load",
                           "kexec_file_load",
                           "init_module",
                           "finit_module",
                           "delete_module",
                           "reboot",
                           "swapon",
                           "swapoff",
                           "acct",
                           "quotactl",
                           "syslog",
                           "iopl",
                           "ioperm",
                           "open_by_handle_at",
                           "settimeofday",
                           "clock_settime",
                           "adjtimex",
                           "clock_adjtime"};
    for (size_t i = 0; i < sizeof eperm / sizeof eperm[0]; i++)
        expect_rule(p, eperm[i], SBX_ERRNO, EPERM);
    const char *enosys[] = {"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register",
                            "keyctl", "add_key",        "request_key"};
    for (size_t i = 0; i < sizeof enosys / sizeof enosys[0]; i++)
        expect_rule(p, enosys[i], SBX_ERRNO, ENOSYS);
    const char *allowed[] = {"read", "write", "execve", "clone",      "fork",  "vfork", "ioctl",
                             "mmap", "futex", "socket", "socketpair", "wait4", "pipe2"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        expect_rule(p, allowed[i], SBX_ALLOW, 0);
    /* no network family in any profile: AF_UNIX only */
    assert_int_equal(p->n_socket_families, 1);
    assert_int_equal(p->socket_families[0], AF_UNIX);
    assert_true(p->n_guards >= 4);
    const sbx_syscall_rule *pers = rule(p, "personality");
    assert_non_null(pers);
    assert_int_equal(pers->n_values, 5);
}

static void check_common_root(const sbx_profile *p)
{
    const sbx_mount *ws = mount_at(p, "/workspace");
    assert_non_null(ws);
    assert_int_equal(ws->kind, SBX_MOUNT_RW);
    assert_string_equal(ws->src, "${WORKSPACE}");
    assert_int_equal(mount_at(p, "/usr")->kind, SBX_MOUNT_RO);
    assert_int_equal(mount_at(p, "/bin")->kind, SBX_MOUNT_SYMLINK);
    assert_string_equal(mount_at(p, "/lib64")->src, "usr/lib64");
    assert_int_equal(mount_at(p, "/tmp")->kind, SBX_MOUNT_TMPFS);
    assert_int_equal(mount_at(p, "/proc")->kind, SBX_MOUNT_PROC);
    assert_true(mount_at(p, "${PYTHON_PREFIX}")->optional);
    /* only the workspace is a writable bind */
    for (int i = 0; i < p->n_mounts; i++)
        if (p->mounts[i].kind == SBX_MOUNT_RW)
            assert_string_equal(p->mounts[i].dest, "/workspace");
    bool kcore = false, sys = false;
    for (int i = 0; i < p->n_proc_masked; i++)
        kcore = kcore || strcmp(p->proc_masked[i], "/proc/kcore") == 0;
    for (int i = 0; i < p->n_proc_readonly; i++)
        sys = sys || strcmp(p->proc_readonly[i], "/proc/sys") == 0;
    assert_true(kcore && sys);
    assert_int_equal(p->n_devices, 5);
    assert_true(p->ns_mount && p->ns_pid && p->ns_net && p->ns_ipc && p->ns_uts);
    assert_false(p->ns_user);
    assert_true(p->rl_core_set);
    assert_int_equal(p->rl_core, 0);
    assert_true(p->wall_ms > 0 && p->output_bytes > 0 && p->cg_memory_bytes > 0 && p->cg_pids > 0);
    assert_int_equal(p->rl_as, 0);
    assert_string_equal(env_of(p, "HOME"), "/tmp");
}

static void test_shipped_profiles_parse(void **state)
{
    (void)state;
    sbx_profile *p = calloc(1, sizeof *p);
    assert_non_null(p);
    char err[512];
    for (size_t i = 0; i < sizeof SHIPPED / sizeof SHIPPED[0]; i++) {
        if (sbx_profile_load(profiles_dir(), SHIPPED[i], p, err, sizeof err) != 0)
            fail_msg("%s: %s", SHIPPED[i], err);
        assert_string_equal(p->name, SHIPPED[i]);
        check_common_policy(p);
        check_common_root(p);
        bool candidate = strcmp(SHIPPED[i], "candidate") == 0;
        assert_int_equal(p->gpu, candidate);
        const sbx_syscall_rule *memfd = rule(p, "memfd_create");
        assert_int_equal(memfd != NULL, candidate);
    }
    free(p);
}

/* Every *.sbx in the directory (not just the four above) loads. */
static void test_every_file_in_dir_parses(void **state)
{
    (void)state;
    DIR *d = opendir(profiles_dir());
    assert_non_null(d);
    sbx_profile *p = calloc(1, sizeof *p);
    char err[512];
    int n = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".sbx") != 0)
            continue;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(len - 4), e->d_name);
        if (sbx_profile_load(profiles_dir(), name, p, err, sizeof err) != 0)
            fail_msg("%s: %s", e->d_name, err);
        n++;
    }
    closedir(d);
    free(p);
    assert_true(n >= 4);
}

static void test_profiles_differ_where_they_should(void **state)
{
    (void)state;
    sbx_profile *bash = calloc(1, sizeof *bash), *comp = calloc(1, sizeof *comp);
    sbx_profile *cand = calloc(1, sizeof *cand);
    char err[512];
    assert_int_equal(sbx_profile_load(profiles_dir(), "bash", bash, err, sizeof err), 0);
    assert_int_equal(sbx_profile_load(profiles_dir(), "compile", comp, err, sizeof err), 0);
    assert_int_equal(sbx_profile_load(profiles_dir(), "candidate", cand, err, sizeof err), 0);
    /* compile's /tmp overrides base's in place (same position, larger) */
    assert_true(mount_at(comp, "/tmp")->size > mount_at(bash, "/tmp")->size);
    assert_int_equal(comp->n_mounts, bash->n_mounts);
    assert_true(comp->rl_fsize < bash->rl_fsize); /* compiler bombs */
    assert_non_null(mount_at(cand, "/sys"));
    assert_null(mount_at(bash, "/sys"));
    assert_string_equal(env_of(cand, "PYTHONDONTWRITEBYTECODE"), "1");
    assert_null(env_of(bash, "PYTHONDONTWRITEBYTECODE"));
    free(bash);
    free(comp);
    free(cand);
}

/* ---- strictness ------------------------------------------------------------------------------ */

typedef struct bad_case {
    const char *text;
    const char *want;
} bad_case;

static void test_strict_errors_name_file_and_line(void **state)
{
    scratch *s = *state;
    static const bad_case cases[] = {
        {"[bogus]\n", "t.sbx:1: unknown section '[bogus]'"},
        {"# comment\n\n[rlimit]\nfsise = 1M\n", "t.sbx:4: unknown key 'fsise' in [rlimit]"},
        {"[limits]\nspeed = 1s\n", "t.sbx:2: unknown key 'speed' in [limits]"},
        {"[proc]\nhide /proc/kcore\n", "t.sbx:2: unknown key 'hide' in [proc]"},
        {"[seccomp]\nfrobnicate read\n", "t.sbx:2: unknown key 'frobnicate' in [seccomp]"},
        {"[seccomp]\nallow read frobnicate\n", "t.sbx:2: unknown syscall 'frobnicate'"},
        {"[seccomp]\ndeny EWHAT ptrace\n", "t.sbx:2: unknown errno name 'EWHAT'"},
        {"[seccomp]\ndefault EWHAT\n", "t.sbx:2: unknown errno name 'EWHAT'"},
        {"[guard]\nioctl a1 == TIOCFOO -> EPERM\n", "t.sbx:2: unknown constant 'TIOCFOO'"},
        {"[guard]\nioctl a1 == TIOCSTI -> ENOPE\n", "t.sbx:2: unknown errno name 'ENOPE'"},
        {"[guard]\nioctl a7 == 1 -> EPERM\n", "t.sbx:2: expected an argument a0..a5"},
        {"[guard]\nioctl a1 & 0xff == 0x100 -> EPERM\n", "t.sbx:2: value has bits outside"},
        {"[guard]\nsocket_families AF_FOO\n", "t.sbx:2: unknown constant 'AF_FOO'"},
        {"[seccomp]\nallow personality if a0 in {0, FOO}\n", "t.sbx:2: unknown constant 'FOO'"},
        {"[mount]\ntmpfs /tmp size=12Q\n", "t.sbx:2: bad size '12Q'"},
        {"[mount]\ntmpfs /tmp\n", "t.sbx:2: tmpfs /tmp needs size="},
        {"[mount]\ntmpfs /tmp size=1M mode=999\n", "t.sbx:2: bad mode '999'"},
        {"[mount]\ntmpfs /tmp size=1M uid=0\n", "t.sbx:2: unknown mount option 'uid=0'"},
        {"[mount]\noverlay /x\n", "t.sbx:2: unknown mount kind 'overlay'"},
        {"[mount]\n?tmpfs /x size=1M\n", "t.sbx:2: only ro and rw binds can be optional"},
        {"[mount]\nro usr\n", "t.sbx:2: path must be absolute"},
        {"[mount]\nro /usr/../etc\n", "t.sbx:2: path may not contain '.' or '..'"},
        {"[mount]\nro /x ${NOPE}\n", "t.sbx:2: unknown variable '${NOPE}'"},
        {"[mount]\nro /x $HOME\n", "t.sbx:2: '$' must start ${VARIABLE}"},
        {"[mount]\nro /x\nrw /x\n", "t.sbx:3: mount destination '/x' listed twice"},
        {"[mount]\nrw / /home\n", "t.sbx:2: the root itself cannot be a mount destination"},
        {"[seccomp] default ENOSYS\n", "t.sbx:1: malformed section header"},
        {"[dev]\nnull sda\n", "t.sbx:2: unknown device 'sda'"},
        {"[rlimit]\nfsize = 1X\n", "t.sbx:2: fsize: bad value '1X'"},
        {"[rlimit]\nnofile = 0\n", "t.sbx:2: nofile: 0 is not a limit"},
        {"[rlimit]\ncpu = 1500ms\n", "t.sbx:2: cpu: bad value '1500ms'"},
        {"[rlimit]\nnofile = 10\nnofile = 20\n", "t.sbx:3: key 'nofile' set twice"},
        {"[limits]\nwall = 10\n", "t.sbx:2: wall: bad value '10'"},
        {"[namespaces]\nnet = maybe\n", "t.sbx:2: net: bad value 'maybe'"},
        {"[namespaces]\nnet on\n", "t.sbx:2: expected 'key = value'"},
        {"[env]\n1X=2\n", "t.sbx:2: expected NAME=VALUE"},
        {"[env]\nA=1\nA=2\n", "t.sbx:3: A set twice in [env]"},
        {"[env]\nPATH=${CUDA_HOME}/bin\n", "t.sbx:2: variables are not expanded in [env]"},
        {"[seccomp]\nallow ptrace\ndeny EPERM ptrace\n",
         "t.sbx:3: syscall 'ptrace' conflicts with its rule at t.sbx:2"},
        {"[seccomp]\ndeny EPERM ptrace\ndeny ENOSYS ptrace\n",
         "t.sbx:3: syscall 'ptrace' conflicts"},
        {"[seccomp]\nallow personality\nallow personality if a0 in {0}\n",
         "t.sbx:3: syscall 'personality' conflicts"},
        {"[seccomp]\nallow read\n", "t.sbx: [limits] wall is required"},
        {"wall = 1s\n", "t.sbx:1: expected a [section] or include"},
        {"[limits]\nwall = 1s\ninclude other\n", "t.sbx:3: include must come before"},
        {"include missing\n", "t.sbx:1: cannot open"},
        {"include ../etc/x\n", "t.sbx:1: expected 'include NAME'"},
        {"[dev]\ngpu\n[rlimit]\nas = 16G\n" LIMITS, "t.sbx: a GPU profile must not set"},
        {"[seccomp]\nrequire memfd_create\n" LIMITS,
         "t.sbx:2: require memfd_create: the profile does not allow it"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put(s, "t", cases[i].text);
        expect_err(s, "t", cases[i].want);
    }
}

static void test_include_cycle_is_an_error(void **state)
{
    scratch *s = *state;
    put(s, "a", "include b\n" LIMITS);
    put(s, "b", "# b\ninclude a\n");
    expect_err(s, "a", "b.sbx:2: include cycle: 'a' includes itself");
    put(s, "self", "include self\n");
    expect_err(s, "self", "self.sbx:1: include cycle");
}

/* ---- includes, overrides, lists -------------------------------------------------------------- */

static void test_include_overrides_scalars_and_extends_lists(void **state)
{
    scratch *s = *state;
    put(s, "lower",
        "[limits]\nwall = 10s\noutput = 1M\n"
        "[rlimit]\nnofile = 100\nas = 1G\n"
        "[env]\nA=1\nB=2\n"
        "[mount]\nro /usr\ntmpfs /tmp size=1M\n"
        "[proc]\nmask /proc/kcore\n"
        "[dev]\nnull\n"
        "[seccomp]\nallow read\ndeny EPERM ptrace\n"
        "[guard]\nsocket_families AF_UNIX\n");
    put(s, "upper",
        "include lower\n"
        "[limits]\nwall = 250ms\n"
        "[rlimit]\nas = none\n"
        "[env]\nA=3\n"
        "[mount]\ntmpfs /tmp size=2M mode=700\n"
        "[proc]\nmask /proc/keys /proc/kcore\n"
        "[dev]\nnull zero\n"
        "[seccomp]\nallow write read\ndeny EPERM ptrace\n"
        "[guard]\nsocket_families AF_UNIX AF_INET\n");
    expect_ok(s, "upper");
    sbx_profile *p = s->p;
    assert_int_equal(p->wall_ms, 250);
    assert_int_equal(p->output_bytes, 1 << 20); /* inherited */
    assert_int_equal(p->rl_nofile, 100);
    assert_int_equal(p->rl_as, 0); /* cleared by none */
    assert_int_equal(p->n_env, 2);
    assert_string_equal(p->env[0], "A=3"); /* replaced in place */
    assert_string_equal(p->env[1], "B=2");
    assert_int_equal(p->n_mounts, 2);
    assert_string_equal(p->mounts[1].dest, "/tmp");
    assert_int_equal(p->mounts[1].size, 2 << 20);
    assert_int_equal(p->mounts[1].mode, 0700);
    assert_int_equal(p->n_proc_masked, 2);
    assert_int_equal(p->n_devices, 2);
    assert_int_equal(p->n_rules, 3); /* read, ptrace, write: repeats are harmless */
    assert_int_equal(p->n_socket_families, 2);
    assert_string_equal(p->name, "upper");
}

static void test_conflict_across_files_names_both_places(void **state)
{
    scratch *s = *state;
    put(s, "lower", "[seccomp]\n# ptrace is fine here\nallow ptrace\n" LIMITS);
    put(s, "upper", "include lower\n[seccomp]\ndeny EPERM ptrace\n");
    expect_err(s, "upper", "upper.sbx:3: syscall 'ptrace' conflicts with its rule at lower.sbx:3");
}

static void test_diamond_include_reads_a_file_once(void **state)
{
    scratch *s = *state;
    put(s, "root", "[limits]\nwall = 1s\noutput = 1M\n");
    put(s, "mid", "include root\n[limits]\nwall = 5s\n");
    put(s, "top", "include mid\ninclude root\n");
    expect_ok(s, "top");
    assert_int_equal(s->p->wall_ms, 5000); /* root was not re-read over mid */
}

static void test_optional_syscalls_are_skipped(void **state)
{
    scratch *s = *state;
    put(s, "t",
        "[seccomp]\nallow read ?kgym_no_such_syscall ?clone\n"
        "deny EPERM ?kgym_nor_this\nrequire ?kgym_nor_that\n"
        "[guard]\n?kgym_nope a0 == 1 -> EPERM\n" LIMITS);
    expect_ok(s, "t");
    assert_int_equal(s->p->n_rules, 2);
    assert_non_null(rule(s->p, "read"));
    assert_non_null(rule(s->p, "clone")); /* known: "?" only matters for unknown names */
    assert_int_equal(s->p->n_guards, 0);
    /* a name that exists only on other architectures is not a syscall here */
    put(s, "t", "[seccomp]\nallow socketcall\n" LIMITS);
    expect_err(s, "t", "t.sbx:2: unknown syscall 'socketcall'");
}

static void test_sizes_times_and_continuations(void **state)
{
    scratch *s = *state;
    put(s, "t",
        "[limits]   # sizes and times\n"
        "wall = 2s\noutput = 64K\n"
        "[rlimit]\nfsize = 3G\nstack=8M\ncpu = 90s\ncore = 0\n"
        "[cgroup]\nmemory = 1T\npids = 77\n"
        "[guard]\n"
        "clone a0 & CLONE_NEWUSER | \\   # continued\n"
        "      CLONE_NEWNET != 0 -> EPERM\n"
        "ioctl a1 & 0xffffffff == TIOCSTI -> EPERM\n"
        "prctl a0 != 4 -> EINVAL\n"
        "[seccomp]\nallow personality if a0 in {PER_LINUX, 0x8, PER_LINUX32|UNAME26}\n");
    expect_ok(s, "t");
    sbx_profile *p = s->p;
    assert_int_equal(p->wall_ms, 2000);
    assert_int_equal(p->output_bytes, 64 << 10);
    assert_int_equal(p->rl_fsize, 3ULL << 30);
    assert_int_equal(p->rl_stack, 8 << 20);
    assert_int_equal(p->rl_cpu_s, 90);
    assert_true(p->rl_core_set);
    assert_int_equal(p->cg_memory_bytes, 1ULL << 40);
    assert_int_equal(p->cg_pids, 77);
    assert_int_equal(p->n_guards, 3);
    assert_int_equal(p->guards[0].cmp, SBX_CMP_ANY_BIT);
    assert_int_equal(p->guards[0].mask, 0x10000000 | 0x40000000);
    assert_int_equal(p->guards[0].errno_value, EPERM);
    assert_int_equal(p->guards[1].cmp, SBX_CMP_MASKED_EQ);
    assert_int_equal(p->guards[1].mask, 0xffffffff);
    assert_int_equal(p->guards[1].value, TIOCSTI);
    assert_int_equal(p->guards[1].arg, 1);
    assert_int_equal(p->guards[2].cmp, SBX_CMP_NE);
    assert_int_equal(p->guards[2].errno_value, EINVAL);
    const sbx_syscall_rule *r = rule(p, "personality");
    assert_int_equal(r->n_values, 3);
    assert_int_equal(r->values[2], 0x20008);
}

/* ---- the PFC export -------------------------------------------------------------------------- */

static char *export_pfc(const char *name)
{
    sbx_profile *p = calloc(1, sizeof *p);
    char err[512];
    if (sbx_profile_load(profiles_dir(), name, p, err, sizeof err) != 0)
        fail_msg("%s: %s", name, err);
    int fd = memfd_create("pfc", MFD_CLOEXEC);
    assert_true(fd >= 0);
    if (sbx_seccomp_export_pfc(p, fd, err, sizeof err) != 0)
        fail_msg("export %s: %s", name, err);
    off_t size = lseek(fd, 0, SEEK_END);
    char *text = calloc(1, (size_t)size + 1);
    assert_int_equal(pread(fd, text, (size_t)size, 0), size);
    close(fd);
    free(p);
    return text;
}

/* The first "action ..." line after the rule block of syscall name in text (from `from` on). */
static const char *action_after(const char *from, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "syscall \"%s\"", name);
    const char *at = strstr(from, key);
    if (!at)
        return NULL;
    return strstr(at, "action ");
}

static void test_pfc_export_shows_the_rules_that_matter(void **state)
{
    (void)state;
    char *pfc = export_pfc("bash");
    const char *f2 = strstr(pfc, "filter 2 of 2");
    assert_non_null(strstr(pfc, "filter 1 of 2, guards (default ALLOW)"));
    assert_non_null(f2);
    /* TIOCSTI (0x5412) and TIOCLINUX (0x541c) compared on the low 32 bits only */
    char want[64];
    snprintf(want, sizeof want, "$a1.lo32 & 0xffffffff == %d", TIOCSTI);
    assert_non_null(strstr(pfc, want));
    snprintf(want, sizeof want, "$a1.lo32 & 0xffffffff == %d", TIOCLINUX);
    assert_non_null(strstr(pfc, want));
    assert_non_null(strstr(pfc, "$a1.hi32 & 0x00000000 == 0"));
    /* clone3 -> ENOSYS, ptrace -> EPERM, socket -> EAFNOSUPPORT for other families */
    const char *a = action_after(pfc, "clone3");
    assert_non_null(a);
    assert_memory_equal(a, "action ERRNO(38);", 17);
    a = action_after(f2, "ptrace");
    assert_non_null(a);
    assert_memory_equal(a, "action ERRNO(1);", 16);
    a = action_after(pfc, "socket");
    assert_non_null(a);
    assert_memory_equal(a, "action ERRNO(97);", 17);
    /* CLONE_NEWUSER as one of the per-bit masked rules */
    snprintf(want, sizeof want, "$a0.lo32 & 0x10000000 == %d", 0x10000000);
    assert_non_null(strstr(pfc, want));
    /* the allowlist's default and the bad-architecture action */
    assert_non_null(strstr(f2, "filter 2 of 2, allowlist (default ERRNO(38))"));
    assert_non_null(strstr(f2, "# default action\n  action ERRNO(38);"));
    assert_non_null(strstr(f2, "# invalid architecture action\naction KILL_PROCESS;"));
    assert_null(strstr(pfc, "x86 (")); /* native arch only: no i386 section */
    /* memfd_create is not in bash's allowlist */
    assert_null(strstr(pfc, "\"memfd_create\""));
    free(pfc);
    pfc = export_pfc("candidate");
    assert_non_null(strstr(pfc, "\"memfd_create\""));
    free(pfc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_profiles_parse),
        cmocka_unit_test(test_every_file_in_dir_parses),
        cmocka_unit_test(test_profiles_differ_where_they_should),
        cmocka_unit_test_setup_teardown(test_strict_errors_name_file_and_line, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_include_cycle_is_an_error, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_include_overrides_scalars_and_extends_lists,
                                        scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_conflict_across_files_names_both_places, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_diamond_include_reads_a_file_once, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_optional_syscalls_are_skipped, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_sizes_times_and_continuations, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test(test_pfc_export_shows_the_rules_that_matter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
