"""The candidate profile (the runner of Verify/Profile), run through the launcher directly:
read-only binds are read-only all the way down (a mount below /sys must not stay writable),
with the host's own view as the control. (Its GPU nodes are checked by make test-gpu.)"""
import os
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-sandbox"
PROFILES = REPO / "sandbox_profiles"


def sandboxed(cmd):
    with tempfile.TemporaryDirectory() as ws:
        os.chmod(ws, 0o1777)
        return subprocess.run([str(LAUNCHER), "--profiles", str(PROFILES), "--profile", "candidate",
                               "--workspace", ws, "--uid", "200991", "--gid", "200991", "--", "/bin/bash",
                               "-c", cmd], capture_output=True, text=True, timeout=60)


def sys_mounts(mountinfo):
    """(mount point, options) of every mount at or below /sys."""
    out = []
    for line in mountinfo.splitlines():
        f = line.split()
        if f[4] == "/sys" or f[4].startswith("/sys/"):
            out.append((f[4], f[5]))
    return out


def test_sys_is_read_only_including_submounts():
    host = sys_mounts(Path("/proc/self/mountinfo").read_text())
    # control: the host has writable mounts below /sys (cgroups at least), so the check can fail
    assert any("rw" in opts.split(",") for _, opts in host if _ != "/sys"), host
    r = sandboxed("cat /proc/self/mountinfo; touch /sys/fs/cgroup/kgym-probe 2>/dev/null && echo WROTE; true")
    assert r.returncode == 0, r.stderr
    inside = sys_mounts(r.stdout)
    assert len(inside) > 1, "submounts of /sys are expected (the sandbox binds it recursively)"
    writable = [m for m, opts in inside if "rw" in opts.split(",")]
    assert not writable, f"writable mounts below /sys in the candidate sandbox: {writable}"
    assert "WROTE" not in r.stdout
