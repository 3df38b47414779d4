"""Real `kgym-env serve` processes for the suites that drive the server over HTTP.

tests/api/conftest.py and tests/clients/conftest.py (and tests/sandbox, through tests/api's
ServerProc) start their servers with the ServeProcess class below and build their task folders
with write_task / with_bundled_tasks. Each suite subclasses ServeProcess for its own defaults
(base_config, fixed_args, start_timeout, log_must_be_json) and helpers; the pytest fixtures stay
in the suites' conftest.py files.

A server listens on 127.0.0.1 on port 0 by default: it picks a free port and logs it in its
"listening" line, which start() waits for. Its stderr (one JSON log record a line) is collected
by a reader thread, so that tests can wait for and inspect log records.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BINARY = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-env"
TEMPLATE = REPO / "env" / "template"
BUNDLED_TASKS = REPO / "dataset" / "tasks"
PROFILES = REPO / "sandbox_profiles"


# Server settings with short timeouts, which keep a suite fast; each suite adds its own.
SHORT_TIMEOUTS = {
    "reaper_interval_s": 0.1,
    "bash_timeout_ms": 10000,
    "bash_timeout_max_ms": 20000,
    "bash_kill_grace_ms": 200,
    "drain_timeout_s": 20,
}


# ---- task folders --------------------------------------------------------------------------

_ELEMENTWISE_MODEL = '''"""{title} ({marker})."""
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


def elementwise_model(op, n, title, marker):
    """A fixture task's model.py: torch.<op> of one n x n random matrix. The marker (in the
    docstring and on the forward line) tells tasks and variants apart in the files served."""
    return _ELEMENTWISE_MODEL.format(op=op, n=n, title=title, marker=marker)



def write_task(folder, meta, model, model_cpu=None):
    """One task folder: task.json, model.py and, when the task has a CPU variant, model_cpu.py."""
    folder = Path(folder)
    folder.mkdir()
    (folder / "task.json").write_text(json.dumps(meta))
    (folder / "model.py").write_text(model)
    if model_cpu is not None:
        (folder / "model_cpu.py").write_text(model_cpu)


def with_bundled_tasks(root):
    """[root, dataset/tasks]: the bundled folder only when it holds at least one task."""
    dirs = [root]
    if BUNDLED_TASKS.is_dir() and any((p / "model.py").is_file()
                                      for p in BUNDLED_TASKS.iterdir() if p.is_dir()):
        dirs.append(BUNDLED_TASKS)
    return dirs


# ---- servers -------------------------------------------------------------------------------

def _json_object(line):
    """The log record on this line, or None when the line is not a JSON object."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def kill_leftovers(servers):
    """SIGKILL every server still running: a test that forgot one must not leave a process."""
    for s in servers:
        if s.running():
            s.proc.kill()
            s.proc.wait()


class ServeProcess:
    """One kgym-env serve process; its stderr is collected line by line."""

    base_config = {}         # the suite's server settings; a server's own config= overrides them
    fixed_args = ()          # arguments every server of the suite gets, before its own args
    start_timeout = 15       # seconds start() waits for the "listening" line by default
    log_must_be_json = True  # records(): every stderr line must be a JSON object

    def __init__(self, workdir, task_dirs, state_dir=None, config=None, args=(), port=0):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state_dir = Path(state_dir) if state_dir else self.workdir / "state"
        self.task_dirs = list(task_dirs)
        self.config = dict(self.base_config)
        self.config.update(config or {})
        self.args = list(args)
        self.want_port = port
        self.proc = None
        self.port = None
        self._lines = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _command(self, port):
        cfg = self.workdir / f"config-{time.monotonic_ns()}.json"
        cfg.write_text(json.dumps(self.config))
        cmd = [str(BINARY), "serve", "--port", str(port), "--state-dir",
               str(self.state_dir), "--template", str(TEMPLATE), "--sandbox-profiles",
               str(PROFILES), "--sandbox-python", sys.executable, "--config", str(cfg)]
        for d in self.task_dirs:
            cmd += ["--tasks", str(d)]
        if os.environ.get("KGYM_TEST_BUILD_CACHE"):
            # one object/PCH/baseline cache for the whole run: the torch PCH takes a minute
            cmd += ["--build-cache", os.environ["KGYM_TEST_BUILD_CACHE"]]
        return cmd + list(self.fixed_args) + self.args

    def start(self, timeout=None, port=None):
        """Launch on `port` (default: the constructor's, 0 = a free one); wait for "listening"."""
        assert BINARY.is_file(), f"{BINARY} is missing: run make first"
        cmd = self._command(self.want_port if port is None else port)
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
        rec = self.wait_for_log(lambda r: r.get("event") == "listening",
                                self.start_timeout if timeout is None else timeout)
        assert rec is not None, f"kgym-env did not start:\n{self.stderr_text()}"
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
        """Every stderr line parsed as JSON. With log_must_be_json each line must be a JSON
        object; without it, other lines are skipped."""
        out = []
        for line in self.lines():
            if self.log_must_be_json:
                rec = json.loads(line)
                assert isinstance(rec, dict), line
            else:
                rec = _json_object(line)
                if rec is None:
                    continue
            out.append(rec)
        return out

    def request_log(self):
        return [r for r in self.records() if r.get("event") == "request"]

    def wait_for_log(self, pred, timeout=10):
        """The first log record (of this process) that satisfies pred; None after timeout
        seconds, or once the process has closed its stderr without one."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                while seen < len(self._lines):
                    rec = _json_object(self._lines[seen])
                    seen += 1
                    if rec is not None and pred(rec):
                        return rec
                left = deadline - time.monotonic()
                if left <= 0 or (self._eof and seen >= len(self._lines)):
                    return None
                self._cond.wait(left)

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
        """SIGTERM (the server drains), then its exit status; None if it was never started."""
        if self.proc is None:
            return None
        if self.running():
            self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"kgym-env did not exit on SIGTERM:\n{self.stderr_text()[-4000:]}")

    def kill9(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()

    def restart(self, timeout=60, port=None):
        """A new process on the same state dir (after stop or kill9), on `port` (default: the
        constructor's). A restart sweeps what a killed server left (cgroups, mounts): slower on a
        busy host, hence the longer timeout."""
        assert not self.running()
        return self.start(timeout=timeout, port=port)
