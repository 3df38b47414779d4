"""Fixtures of the Python client suite (env/clients/python): real kgym-env servers, the package path.

Every test talks to a real `kgym-env serve` on 127.0.0.1 (port 0: the server picks a free port and
logs it in its "listening" line), with `--gpus none`, and CPU-capable tasks: the small fixture tasks written here (each
with a CPU-sized `model_cpu.py`) and the bundled `dataset/tasks`. This mirrors tests/api/conftest.py
(which stays untouched) in a smaller form: the clients suite needs a URL, not raw HTTP.

Fixtures:
  server            the session's shared server: its base URL ("http://127.0.0.1:PORT")
  server_proc       the same server's KgymServer (logs, port)
  launch_server     factory: launch_server(config=..., args=...) -> a started KgymServer for special
                    settings (small --max-episodes, a server to kill); stopped at the test's end
  clients_pythonpath  the folder to put on PYTHONPATH so that `import kgym` finds the package
  task_dirs         the task folders every server is given
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

REPO = Path(__file__).resolve().parents[2]
CLIENT_PKG_ROOT = REPO / "env" / "clients" / "python"
BINARY = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-env"
TEMPLATE = REPO / "env" / "template"
BUNDLED_TASKS = REPO / "dataset" / "tasks"
PROFILES = REPO / "sandbox_profiles"

# The package under test is imported from the source tree (not from an installed copy).
if str(CLIENT_PKG_ROOT) not in sys.path:
    sys.path.insert(0, str(CLIENT_PKG_ROOT))

# Short timeouts keep the suite fast; retry_after_s is small so capacity retries finish quickly.
BASE_CONFIG = {
    "reaper_interval_s": 0.1,
    "bash_timeout_ms": 10000,
    "bash_timeout_max_ms": 20000,
    "bash_kill_grace_ms": 200,
    "drain_timeout_s": 20,
    "retry_after_s": 1,
}

_MODEL = '''"""clients fixture task ({marker})."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.{op}(x)  # {marker}


def get_inputs():
    return [torch.randn({n}, {n})]


def get_init_inputs():
    return []
'''

# folder: (task.json, op); every fixture task has a CPU variant
FIXTURE_TASKS = {
    "alpha": ({"id": "clients/alpha", "suite": "clients", "name": "Alpha", "level": 1,
               "description": "ReLU of a matrix (clients fixture)."}, "relu"),
    "beta": ({"id": "clients/beta", "suite": "clients", "name": "Beta", "level": 2,
              "description": "Tanh of a matrix (clients fixture)."}, "tanh"),
}


@pytest.fixture(scope="session")
def clients_pythonpath():
    """The folder holding the `kgym` package (for PYTHONPATH of subprocesses)."""
    assert (CLIENT_PKG_ROOT / "kgym" / "__init__.py").is_file(), CLIENT_PKG_ROOT
    return str(CLIENT_PKG_ROOT)


@pytest.fixture(scope="session")
def task_dirs(tmp_path_factory):
    """[the clients fixture tasks, dataset/tasks when it holds tasks]."""
    root = tmp_path_factory.mktemp("clients_tasks")
    for folder, (meta, op) in FIXTURE_TASKS.items():
        d = root / folder
        d.mkdir()
        (d / "task.json").write_text(json.dumps(meta))
        marker = folder.upper()
        (d / "model.py").write_text(_MODEL.format(marker=marker + "_GPU", op=op, n=4096))
        (d / "model_cpu.py").write_text(_MODEL.format(marker=marker + "_CPU", op=op, n=16))
    dirs = [root]
    if BUNDLED_TASKS.is_dir() and any((p / "model.py").is_file()
                                      for p in BUNDLED_TASKS.iterdir() if p.is_dir()):
        dirs.append(BUNDLED_TASKS)
    return dirs


class KgymServer:
    """One `kgym-env serve` process on a free port; stderr (JSON log lines) collected."""

    def __init__(self, workdir, task_dirs, config=None, args=()):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.task_dirs = list(task_dirs)
        self.config = dict(BASE_CONFIG)
        self.config.update(config or {})
        self.args = list(args)
        self.proc = None
        self.port = None
        self._lines = []
        self._eof = False
        self._reader = None
        self._cond = threading.Condition()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=30, port=0):
        assert BINARY.is_file(), f"{BINARY} is missing: run make first"
        cfg = self.workdir / f"config-{time.monotonic_ns()}.json"
        cfg.write_text(json.dumps(self.config))
        cmd = [str(BINARY), "serve", "--port", str(port), "--state-dir",
               str(self.workdir / "state"), "--template", str(TEMPLATE), "--sandbox-profiles",
               str(PROFILES), "--sandbox-python", sys.executable, "--config", str(cfg)]
        for d in self.task_dirs:
            cmd += ["--tasks", str(d)]
        if os.environ.get("KGYM_TEST_BUILD_CACHE"):
            cmd += ["--build-cache", os.environ["KGYM_TEST_BUILD_CACHE"]]
        # GPU-variant episodes get a quick infra_error (never a real GPU evaluation), whatever
        # the machine: the suite's timings and verdicts do not depend on a GPU being present
        cmd += ["--gpus", "none"] + self.args
        if self._reader is not None:
            self._reader.join(10)  # a restart: the old reader's late EOF must not end our wait
        self._lines, self._eof = [], False
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read_stderr, args=(self.proc,), daemon=True)
        self._reader.start()
        rec = self.wait_for_log(lambda r: r.get("event") == "listening", timeout)
        assert rec is not None, f"kgym-env did not start:\n{self.stderr_text()}"
        self.port = rec["port"]
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
        out = []
        for line in self.lines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def request_log(self):
        return [r for r in self.records() if r.get("event") == "request"]

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

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=30):
        """SIGTERM (the server drains), then its exit status."""
        if self.proc is None:
            return None
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"kgym-env did not exit on SIGTERM:\n{self.stderr_text()[-4000:]}")
        with self._cond:
            self._cond.wait_for(lambda: self._eof, 5)
        return rc

    def kill9(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()

    def restart(self, timeout=60):
        """A new process on the same state dir and the same port (after stop or kill9)."""
        assert not self.running()
        return self.start(timeout=timeout, port=self.port)


@pytest.fixture(scope="session")
def _all_servers():
    started = []
    yield started
    for s in started:  # never leave a process behind
        if s.running():
            s.proc.kill()
            s.proc.wait()


@pytest.fixture(scope="session")
def server_proc(tmp_path_factory, task_dirs, _all_servers):
    """The session's shared server (kgym-env on a free port, CPU-capable tasks)."""
    s = KgymServer(tmp_path_factory.mktemp("clients_srv"), task_dirs)
    _all_servers.append(s)
    s.start()
    yield s
    rc = s.stop()
    assert rc == 0, f"kgym-env exited {rc}:\n{s.stderr_text()[-4000:]}"
    # 503 is an answer (draining, no GPU for baselines); a 500 is a server bug
    bad = [r for r in s.request_log() if r.get("status", 0) >= 500 and r.get("status") != 503]
    assert not bad, f"the shared server answered 500s: {bad}"


@pytest.fixture(scope="session")
def server(server_proc):
    """The shared server's base URL, e.g. http://127.0.0.1:41234."""
    return server_proc.url


@pytest.fixture
def launch_server(tmp_path_factory, task_dirs, _all_servers):
    """launch_server(config=None, args=()) -> a started KgymServer of this test's own."""
    mine = []

    def launch(config=None, args=(), name="clients_own"):
        s = KgymServer(tmp_path_factory.mktemp(name), task_dirs, config=config, args=args)
        _all_servers.append(s)
        mine.append(s)
        return s.start()

    yield launch
    for s in mine:
        if s.running():
            s.stop()
