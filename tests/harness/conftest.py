"""Markers of the harness suite (tests/harness).

  naive_control  the exploit suite's positive control: each exploit (and each honest solution)
                 through the deliberately naive checker (naive_checker.py). Minutes: it builds a
                 few C++ extensions (cached under $TMPDIR/kgym-naive-builds between runs).
  kgym_eval      the same cases through a real kgym-env server (Submit): needs build/kgym-env,
                 root for the sandbox, and the evaluation engine.

Run one part alone: pytest tests/harness/test_exploits_naive.py, or -m naive_control.
"""


def pytest_configure(config):
    config.addinivalue_line("markers", "naive_control: exploits and solutions through naive_checker.py")
    config.addinivalue_line("markers", "kgym_eval: exploits and solutions through a real kgym-env (Submit)")


# ---- a real kgym-env serving tests/harness/tasks (for test_exploits_kgym.py, test_rewards.py) ----
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BINARY = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-env"
_spec = importlib.util.spec_from_file_location("kgym_http", REPO / "tests" / "api" / "kgym_http.py")
kgym_http = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kgym_http)


class HarnessServer:
    """One `kgym-env serve` on a free port with the harness task store and the trusted harness.
    Evaluations are slow on a 2-core CPU (builds, baselines, torch.compile), hence the long
    client timeout. KGYM_HARNESS_BUILD_CACHE keeps compiled objects and baselines between runs."""

    def __init__(self, workdir, extra_args=()):
        self.workdir = Path(workdir)
        self.state = self.workdir / "state"
        cmd = [str(BINARY), "serve", "--port", "0", "--state-dir", str(self.state),
               "--template", str(REPO / "env" / "template"),
               "--sandbox-profiles", str(REPO / "sandbox_profiles"),
               "--sandbox-python", sys.executable, "--harness", str(REPO / "env" / "harness"),
               "--tasks", str(REPO / "tests" / "harness" / "tasks"), "--idle-timeout", "0"]
        cache = os.environ.get("KGYM_HARNESS_BUILD_CACHE") or os.environ.get("KGYM_TEST_BUILD_CACHE")
        if cache:
            cmd += ["--build-cache", cache]
        cmd += list(extra_args)
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")  # the same single-threaded torch as the naive control
        self.lines = []
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env)
        threading.Thread(target=self._read, daemon=True).start()
        self.port = None
        deadline = time.monotonic() + 60
        while self.port is None and time.monotonic() < deadline and self.proc.poll() is None:
            for line in list(self.lines):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("event") == "listening":
                    self.port = rec["port"]
            time.sleep(0.05)
        assert self.port, "kgym-env did not start:\n" + "\n".join(self.lines[-40:])

    def _read(self):
        for raw in iter(self.proc.stderr.readline, b""):
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def client(self):
        return kgym_http.Client(self.port, timeout=1800)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def harness_server(tmp_path_factory):
    assert BINARY.is_file(), f"{BINARY} is missing: run make first"
    srv = HarnessServer(tmp_path_factory.mktemp("kgym_harness"))
    yield srv
    srv.stop()
