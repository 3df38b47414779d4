"""The launcher never leaves a sandbox running without the process that started it.

The server starts every sandbox (a Bash call, a background job) through kgym-sandbox; only the
server times and stops them. A server killed outright (SIGKILL, the OOM killer) used to leave
background jobs running with no wall limit until a server started again. The launcher now
watches its parent (a pidfd) and, when the parent dies, kills its whole pid namespace and dies
itself. These tests start the launcher directly, under a throwaway parent process, with the
sandbox running a loop that touches a workspace file every 50 ms (the README's example
invocation: --profile bash --workspace DIR --uid N --gid N -- /bin/sh -c ...).
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from kgym_sbx import BINARY, PROFILES, host_procs_of_uid, wait_until

LAUNCHER = BINARY.parent / "kgym-sandbox"
UID = 299_417  # outside the ranges the suite's servers hand out (300000+, 400000+)
TICK_LOOP = "while :; do date +%s%N > /workspace/tick; sleep 0.05; done"

# The throwaway parent: starts the launcher, says its pid, then waits to be killed.
PARENT = r"""
import subprocess, sys, time
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
print(p.pid, flush=True)
time.sleep(3600)
"""


def launcher_argv(ws, *extra, command=TICK_LOOP):
    return [str(LAUNCHER), "--profiles", str(PROFILES), "--profile", "bash", "--workspace",
            str(ws), "--uid", str(UID), "--gid", str(UID), *extra, "--", "/bin/sh", "-c", command]


@pytest.fixture
def ws(tmp_path):
    d = tmp_path / "ws"
    d.mkdir()
    os.chmod(d, 0o1777)
    yield d
    for pid, _ in host_procs_of_uid(UID):  # never leave the loop behind, whatever failed
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def ticks(tick, seconds):
    """The distinct contents of the tick file seen over a while (one value: it stopped)."""
    seen, end = set(), time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            seen.add(tick.read_text())
        except OSError:
            pass
        time.sleep(0.02)
    return seen


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sandbox_dies_with_a_sigkilled_parent(ws):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, *launcher_argv(ws)],
                              stdout=subprocess.PIPE, text=True)
    try:
        launcher = int(parent.stdout.readline())
        tick = ws / "tick"
        assert wait_until(tick.exists, 10), "the sandboxed loop never started"
        # control: with its parent alive the sandbox runs, and keeps running
        assert len(ticks(tick, 1.0)) >= 5, "control: the loop ticks while the parent lives"
        assert alive(launcher) and host_procs_of_uid(UID)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        t0 = time.monotonic()
        assert wait_until(lambda: not alive(launcher), 2), "the launcher outlived its parent"
        assert wait_until(lambda: not host_procs_of_uid(UID), 2), \
            f"sandboxed processes outlived the launcher's parent: {host_procs_of_uid(UID)}"
        assert time.monotonic() - t0 < 2
        assert len(ticks(tick, 0.5)) <= 1, "the loop still writes after its parent died"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_living_parent_sees_the_commands_own_status(ws):
    """control: the watch changes nothing while the parent lives (exit code, output)."""
    r = subprocess.run(launcher_argv(ws, command="sleep 0.3; echo done; exit 7"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 7, r.stderr
    assert r.stdout == "done\n"
    assert "killed" not in r.stderr


def test_wall_ms_kills_the_sandbox(ws):
    t0 = time.monotonic()
    r = subprocess.run(launcher_argv(ws, "--wall-ms", "700"), capture_output=True, text=True,
                       timeout=30)
    took = time.monotonic() - t0
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert "wall-clock limit" in r.stderr
    assert 0.6 < took < 3, took
    assert wait_until(lambda: not host_procs_of_uid(UID), 2), host_procs_of_uid(UID)
    assert len(ticks(ws / "tick", 0.3)) <= 1
    # control: a command that ends within the limit is not touched
    r = subprocess.run(launcher_argv(ws, "--wall-ms", "5000", command="echo quick"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == "quick\n", r.stderr


@pytest.mark.parametrize("bad", ["0", "-5", "x", ""])
def test_wall_ms_needs_a_positive_count(ws, bad):
    r = subprocess.run(launcher_argv(ws, "--wall-ms", bad, command="true"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--wall-ms" in r.stderr, (r.returncode, r.stderr)
