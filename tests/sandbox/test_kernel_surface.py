"""Kernel attack surface: namespaces, mounts, keyrings, bpf, perf, io_uring, userfaultfd,
terminal injection, setuid helpers, capabilities and leaked file descriptors.

Each probe runs inside (through Bash) and on the host as root (the control, where it must
succeed or fail differently). The errno a denial must give is read from base.sbx's `deny`
lines, so the tests follow the profile's stated policy."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from kgym_sbx import host_probe, profile_denials, run_host

DENY = profile_denials()


def expect_denied(verdicts, probe_name, syscall):
    """The probe's verdict equals the errno the profile states for that syscall."""
    assert syscall in DENY, f"{syscall} is not denied by base.sbx"
    assert verdicts[probe_name] == DENY[syscall], (probe_name, verdicts, DENY[syscall])


def test_namespaces_and_mounts_are_refused(new_episode, probe_bin, tmp_path):
    # controls: root on the host may do all of it (mount in a private mount namespace)
    v = host_probe(probe_bin, "unshare")
    assert all(v[k] == "OK" for k in ("unshare_user", "unshare_mount", "unshare_net", "unshare_pid")), v
    assert host_probe(probe_bin, "clone_newuser")["clone_newuser"] == "OK"
    assert host_probe(probe_bin, "clone3")["clone3"] == "OK"
    assert host_probe(probe_bin, "setns")["setns"] == "OK"
    v = host_probe(probe_bin, "mount", tmp_path, wrap=("unshare", "-m", "--propagation", "private"))
    assert v["mount"] == "OK" and v["fsopen"] == "OK" and v["open_tree"] == "OK", v
    assert run_host(["unshare", "-U", "true"]).returncode == 0

    ep = new_episode()
    ep.install_probe(probe_bin)
    v = ep.probe("unshare")
    for k in ("unshare_user", "unshare_mount", "unshare_net", "unshare_pid"):
        expect_denied(v, k, "unshare")
    v = ep.probe("clone_newuser")
    assert v["clone_newuser"] == "EPERM", v  # the guard on clone's namespace flags
    expect_denied(ep.probe("clone3"), "clone3", "clone3")
    expect_denied(ep.probe("setns"), "setns", "setns")
    v = ep.probe("mount", "/tmp")
    expect_denied(v, "mount", "mount")
    expect_denied(v, "fsopen", "fsopen")
    expect_denied(v, "open_tree", "open_tree")
    expect_denied(v, "chroot", "chroot")
    expect_denied(v, "pivot_root", "pivot_root")
    # the command-line tools say the same
    obs = ep.bash("unshare -U true; echo rc=$?; unshare -r id -u; echo rc=$?; "
                  "unshare -m true; echo rc=$?; mount -t tmpfs none /tmp; echo rc=$?; "
                  "mkdir -p /tmp/m; mount --bind /workspace /tmp/m; echo rc=$?; "
                  "umount /proc; echo rc=$?")
    out = obs["data"]["stdout"]
    assert obs["data"]["stderr"].count("unshare failed: Operation not permitted") == 3, obs
    # (util-linux: 1 = unshare failed, 32 = mount failure)
    assert re.findall(r"rc=(\d+)", out) == ["1", "1", "1", "32", "32", "32"], out


def test_kernel_object_calls_are_refused(new_episode, probe_bin):
    calls = [("keyctl", "keyctl", "keyctl"), ("keyctl", "add_key", "add_key"),
             ("keyctl", "request_key", "request_key"), ("bpf", "bpf", "bpf"),
             ("perf", "perf_event_open", "perf_event_open"),
             ("io_uring", "io_uring_setup", "io_uring_setup"),
             ("userfaultfd", "userfaultfd", "userfaultfd")]
    # control: root on the host gets each of them (request_key may find no key: ENOKEY)
    for sub, name, _ in calls:
        v = host_probe(probe_bin, sub)
        assert v[name] == ("ENOKEY" if name == "request_key" and v[name] != "OK" else "OK"), (name, v)

    ep = new_episode()
    ep.install_probe(probe_bin)
    for sub, name, syscall in calls:
        expect_denied(ep.probe(sub), name, syscall)


def test_tty_injection_is_refused(new_episode, probe_bin):
    # control: on the host a pty opens and TIOCSTI injects a byte that reads back; on a file that
    # is no tty the driver answers ENOTTY
    v = host_probe(probe_bin, "tiocsti_pty")
    assert v["openpt"] == "OK" and v["tiocsti_pty"] == "OK", v
    assert v["tiocsti_pty_detail"] == "(read back 'Z')", v
    v = host_probe(probe_bin, "tiocsti_fd", "/dev/null")
    assert (v["tiocsti"], v["tiocsti_hi"], v["tioclinux"]) == ("ENOTTY",) * 3, v

    ep = new_episode()
    ep.install_probe(probe_bin)
    # the sandbox has ptys of its own (a private devpts): TIOCSTI on one is refused, and no
    # byte is injected, where the same probe injects one on the host
    v = ep.probe("tiocsti_pty")
    assert v["openpt"] == "OK", v
    assert v["tiocsti_pty"] == "EPERM", v
    out = ep.sh("ls /dev; ls /dev/pts; exec 4</dev/tty; echo rc=$?")
    listing = out.split("rc=")[0].split()
    assert "ptmx" in listing and not {"tty", "console"} & set(listing), out
    assert "rc=1" in out, out
    # and the filter answers before any driver: both the plain and the 64-bit-junk request
    v = ep.probe("tiocsti_fd", "/dev/null")
    assert (v["tiocsti"], v["tiocsti_hi"], v["tioclinux"]) == ("EPERM",) * 3, v


def test_setuid_helpers_do_not_elevate(new_episode, probe_bin):
    ep = new_episode()
    ep.install_probe(probe_bin)
    uid = ep.uid
    # a root-owned setuid copy of the probe, planted by the host in the workspace
    planted = ep.host_workspace / "suid_probe"
    shutil.copy(probe_bin, planted)
    os.chown(planted, 0, 0)
    os.chmod(planted, 0o4755)
    # control: the same setuid file, run by the episode's uid on the host, becomes root (a
    # copy: the episode's directory is closed to that uid on the host)
    outside = Path(tempfile.mkdtemp(prefix="kgym-sbx-suid-"))
    try:
        os.chmod(outside, 0o711)
        shutil.copy2(planted, outside / "suid_probe")
        os.chown(outside / "suid_probe", 0, 0)
        os.chmod(outside / "suid_probe", 0o4755)
        r = run_host([str(outside / "suid_probe"), "ids"], user=uid, group=uid, extra_groups=[])
    finally:
        shutil.rmtree(outside)
    assert f"ids ruid={uid} euid=0 " in r.stdout, (r.stdout, r.stderr)
    # control: su and mount are setuid root on the host
    for tool in ("su", "mount"):
        path = shutil.which(tool)
        assert path and os.stat(path).st_mode & 0o4000 and os.stat(path).st_uid == 0, tool

    out = ep.sh("./suid_probe ids")
    assert f"ids ruid={uid} euid={uid} suid={uid}" in out, out
    assert "setuid0 EPERM" in out and "setgid0 EPERM" in out, out
    # a setuid bit the agent sets on its own file gives it nothing either
    out = ep.sh("cp probe own_suid && chmod u+s own_suid && stat -c %A own_suid && ./own_suid ids")
    assert out.startswith("-rwsr-xr-x\n") and f"euid={uid}" in out, out
    # the host's setuid helpers run without their bit: nosuid mounts and no_new_privs
    obs = ep.bash("su root -c 'id -u'; echo rc=$?; sudo id -u; echo rc=$?; "
                  "mount -t tmpfs none /tmp; echo rc=$?; newgrp root </dev/null; echo rc=$?")
    rcs = re.findall(r"rc=(\d+)", obs["data"]["stdout"])
    assert rcs == ["1", "127", "32", "1"], obs  # su, sudo (absent), mount, newgrp
    assert not re.search(r"^0$", obs["data"]["stdout"], re.M), obs
    mounts = ep.sh("cat /proc/self/mountinfo")
    for line in mounts.splitlines():
        fields = line.split()
        if fields[4] in ("/", "/usr", "/workspace", "/tmp", "/dev/shm", "/proc"):
            assert "nosuid" in fields[5].split(","), line


def test_credentials_are_empty(new_episode):
    fields = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    # control: a host process (root) has capabilities, no NNP and no filter
    host = dict(re.findall(r"^(\w+):\s+(\S+)", open("/proc/self/status").read(), re.M))
    assert host["CapEff"] != "0000000000000000" and host["NoNewPrivs"] == "0"
    assert host["Seccomp"] == "0"

    ep = new_episode()
    uid = ep.uid
    status = dict(re.findall(r"^(\w+):[ \t]*(.*)$", ep.sh("cat /proc/self/status"), re.M))
    for cap in fields[:5]:
        assert status[cap] == "0000000000000000", (cap, status[cap])
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"
    assert status["Uid"].split() == [str(uid)] * 4
    assert status["Gid"].split() == [str(uid)] * 4
    assert status["Groups"].split() == []
    assert uid != 0 and uid != os.getuid()
    out = ep.sh("id; hostname")
    assert f"uid={uid}(agent) gid={uid}(agent) groups={uid}(agent)" in out, out
    assert out.split()[-1] != os.uname().nodename, out  # its own uts namespace


def test_no_inherited_file_descriptors(new_episode, tmp_path):
    # control: the listing does show an fd a process inherits
    with open(tmp_path / "leak", "w") as leak:
        leaked = leak.fileno()
        r = subprocess.run(["bash", "-c", "ls /proc/$$/fd"], capture_output=True, text=True,
                           pass_fds=(leaked,))
    assert str(leaked) in r.stdout.split(), r.stdout

    ep = new_episode()
    out = ep.sh("ls /proc/$$/fd; echo --; readlink /proc/$$/fd/0; pwd -P")
    fds, rest = out.split("--\n")
    assert fds.split() == ["0", "1", "2"], out
    assert rest.split() == ["/dev/null", "/workspace"], out
    out = ep.sh("python3 -c \"import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))\"")
    assert out.strip() == "[0, 1, 2, 3]", out  # 3: the listing's own directory fd
    # a background command inherits nothing more
    job = ep.start_job("ls /proc/$$/fd; true")
    text, data = ep.wait_job(job)
    assert text.split() == ["0", "1", "2"], text
    assert data["status"] == "exited" and data["exit_code"] == 0, data
