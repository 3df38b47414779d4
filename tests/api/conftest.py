"""Fixtures of the black-box API suite: task folders, real kgym-env servers, HTTP clients.

Every test talks to a real `kgym-env serve` process over HTTP on 127.0.0.1 (port 0: the server
picks a free port and logs it). Most tests share one server per module (`srv`); tests that need
special settings (capacity, reaper, restarts, signals) start their own with `launch`.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kgym_http import Client  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BINARY = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-env"
TEMPLATE = REPO / "env" / "template"
BUNDLED_TASKS = REPO / "dataset" / "tasks"
PROFILES = REPO / "sandbox_profiles"

# Settings of every server unless a test overrides them: short timeouts keep the suite fast.
BASE_CONFIG = {
    "reaper_interval_s": 0.1,
    "bash_timeout_ms": 10000,
    "bash_timeout_max_ms": 20000,
    "bash_kill_grace_ms": 200,
    "drain_timeout_s": 20,
    "max_output_chars": 4000,
    "max_body_bytes": 4 << 20,
    "max_file_bytes": 2 << 20,
    "disk_quota_bytes": 16 << 20,
    "retry_after_s": 3,
    "max_background_jobs": 4,
}

# ---- the fixture tasks ---------------------------------------------------------------------

ALPHA_GPU = '''"""fixture task alpha (ALPHA_GPU_MARKER)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)  # ALPHA_GPU_MARKER


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
'''
ALPHA_CPU = ALPHA_GPU.replace("ALPHA_GPU_MARKER", "ALPHA_CPU_MARKER").replace("4096", "16")
BETA_GPU = ALPHA_GPU.replace("ALPHA_GPU_MARKER", "BETA_GPU_MARKER").replace("relu", "tanh")
BETA_CPU = BETA_GPU.replace("BETA_GPU_MARKER", "BETA_CPU_MARKER").replace("4096", "16")
GAMMA_GPU = ALPHA_GPU.replace("ALPHA_GPU_MARKER", "GAMMA_GPU_MARKER").replace("relu", "sigmoid")

FIXTURE_TASKS = {
    # folder: (task.json, model.py, model_cpu.py or None)
    "alpha": ({"id": "fixture/alpha", "suite": "fixture", "name": "Alpha", "level": 1,
               "description": "ReLU of a matrix (fixture)."}, ALPHA_GPU, ALPHA_CPU),
    "beta": ({"id": "fixture/beta", "suite": "fixture", "name": "Beta", "level": 2,
              "description": "Tanh of a matrix (fixture)."}, BETA_GPU, BETA_CPU),
    "gamma": ({"id": "fixture/deep/gamma", "suite": "fixture", "name": "Gamma", "level": 2,
               "description": "Sigmoid; an id with two slashes and no CPU variant."},
              GAMMA_GPU, None),
}


@pytest.fixture(scope="session")
def task_dirs(tmp_path_factory):
    """[fixture task folder, bundled dataset/tasks (when it holds at least one task)]."""
    root = tmp_path_factory.mktemp("fixture_tasks")
    for folder, (meta, code, code_cpu) in FIXTURE_TASKS.items():
        d = root / folder
        d.mkdir()
        (d / "task.json").write_text(json.dumps(meta))
        (d / "model.py").write_text(code)
        if code_cpu is not None:
            (d / "model_cpu.py").write_text(code_cpu)
    dirs = [root]
    if BUNDLED_TASKS.is_dir() and any((p / "model.py").is_file()
                                      for p in BUNDLED_TASKS.iterdir() if p.is_dir()):
        dirs.append(BUNDLED_TASKS)
    return dirs


# ---- servers -------------------------------------------------------------------------------

class ServerProc:
    """One kgym-env serve process; its stderr is collected line by line."""

    def __init__(self, workdir, task_dirs, state_dir=None, config=None, args=(), port=0):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state_dir = Path(state_dir) if state_dir else self.workdir / "state"
        self.task_dirs = list(task_dirs)
        self.config = dict(BASE_CONFIG)
        self.config.update(config or {})
        self.args = list(args)
        self.want_port = port
        self.proc = None
        self.port = None
        self._lines = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = None
        self.expect_exit = 0  # checked at teardown; None: the test handled the exit itself

    def start(self, timeout=15):
        assert BINARY.is_file(), f"{BINARY} is missing: run make first"
        cfg = self.workdir / f"config-{time.monotonic_ns()}.json"
        cfg.write_text(json.dumps(self.config))
        cmd = [str(BINARY), "serve", "--port", str(self.want_port), "--state-dir",
               str(self.state_dir), "--template", str(TEMPLATE), "--sandbox-profiles",
               str(PROFILES), "--sandbox-python", sys.executable, "--config", str(cfg)]
        for d in self.task_dirs:
            cmd += ["--tasks", str(d)]
        if os.environ.get("KGYM_TEST_BUILD_CACHE"):
            # one object/PCH/baseline cache for the whole run: the torch PCH takes a minute
            cmd += ["--build-cache", os.environ["KGYM_TEST_BUILD_CACHE"]]
        cmd += self.args
        if self._reader is not None:
            # a restart: the previous process's reader must be done before the lines and the
            # EOF flag are reset, or its late last line and EOF would end the wait for the new
            # process's "listening" at once
            self._reader.join(10)
        self._lines, self._eof = [], False
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read_stderr, args=(self.proc,), daemon=True)
        self._reader.start()
        rec = self.wait_for_log(lambda r: r.get("event") == "listening", timeout)
        assert rec is not None, f"the server did not start:\n{self.stderr_text()}"
        self.port = rec["port"]
        assert isinstance(self.port, int) and self.port > 0
        return self

    def _read_stderr(self, proc):
        for raw in iter(proc.stderr.readline, b""):
            with self._cond:
                self._lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def lines(self):
        with self._cond:
            return list(self._lines)

    def stderr_text(self):
        return "\n".join(self.lines())

    def records(self):
        """Every stderr line parsed as JSON (each must be a JSON object)."""
        out = []
        for line in self.lines():
            rec = json.loads(line)
            assert isinstance(rec, dict), line
            out.append(rec)
        return out

    def wait_for_log(self, pred, timeout=10):
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                while seen < len(self._lines):
                    line = self._lines[seen]
                    seen += 1
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and pred(rec):
                        return rec
                left = deadline - time.monotonic()
                if left <= 0 or (self._eof and seen >= len(self._lines)):
                    return None
                self._cond.wait(left)

    def client(self, timeout=30.0):
        return Client(self.port, timeout=timeout)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=30):
        rc = self.proc.wait(timeout)
        with self._cond:  # let the reader thread collect the last lines
            self._cond.wait_for(lambda: self._eof, 5)
        return rc

    def stop(self, timeout=30):
        """SIGTERM, then the exit status."""
        if self.running():
            self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the server did not exit on SIGTERM:\n{self.stderr_text()}")

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.expect_exit = None

    def restart(self):
        """A new process on the same state dir (after stop or kill9)."""
        assert not self.running()
        self.expect_exit = 0
        # a restart sweeps what the killed server left (cgroups, mounts): slower on a busy host
        return self.start(timeout=60)

    def request_log(self):
        return [r for r in self.records() if r.get("event") == "request"]

    def finish(self):
        """Teardown: stop the server, check it exited 0 and never answered 5xx."""
        if self.proc is None:
            return
        was_running = self.running()
        rc = self.stop()
        if self.expect_exit is not None and was_running:
            assert rc == 0, f"kgym-env exited {rc}:\n{self.stderr_text()[-4000:]}"
        bad = [r for r in self.request_log() if r.get("status", 0) >= 500]
        assert not bad, f"the server answered 5xx: {bad}"


@pytest.fixture(scope="session")
def launch_server(tmp_path_factory, task_dirs):
    """launch(config=..., args=..., state_dir=...) -> a started ServerProc (session helper)."""
    started = []

    def launch(config=None, args=(), state_dir=None, name="srv"):
        s = ServerProc(tmp_path_factory.mktemp(name), task_dirs, state_dir=state_dir,
                       config=config, args=args)
        started.append(s)
        return s.start()

    yield launch
    for s in started:  # servers a test forgot: never leave a process behind
        if s.running():
            s.proc.kill()
            s.proc.wait()


@pytest.fixture
def launch(launch_server):
    """Per-test servers with special settings; stopped (SIGTERM, exit 0 checked) at teardown."""
    mine = []

    def _launch(**kw):
        s = launch_server(**kw)
        mine.append(s)
        return s

    yield _launch
    errors = []
    for s in mine:
        try:
            s.finish()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)


@pytest.fixture(scope="module")
def srv(launch_server):
    """The module's shared server, stopped with SIGTERM (exit 0 checked) after the module."""
    s = launch_server(name="shared")
    yield s
    s.finish()


@pytest.fixture
def client(srv):
    c = srv.client()
    yield c
    c.close()


@pytest.fixture
def episode(client):
    """A fresh episode on fixture/alpha; closed at teardown."""
    ep = client.create("fixture/alpha", seed=1)["episode_id"]
    yield ep
    client.delete(f"/v1/episodes/{ep}")


@pytest.fixture
def new_episode(client):
    """Factory of episodes closed at teardown."""
    made = []

    def make(task_id="fixture/alpha", **kw):
        ep = client.create(task_id, **kw)["episode_id"]
        made.append(ep)
        return ep

    yield make
    for ep in made:
        client.delete(f"/v1/episodes/{ep}")
