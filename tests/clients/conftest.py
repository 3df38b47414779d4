"""Fixtures of the Python client suite (env/clients/python): real kgym-env servers, the package path.

Every test talks to a real `kgym-env serve` on 127.0.0.1 (port 0: the server picks a free port and
logs it in its "listening" line), with `--gpus none`, and CPU-capable tasks: the small fixture tasks
written here (each with a CPU-sized `model_cpu.py`) and the bundled `dataset/tasks`. The server
processes are tests/kgym_server.py's, shared with tests/api/conftest.py; this suite's KgymServer
adds its own settings and a base URL (the clients suite needs a URL, not raw HTTP), and restarts
on the same port.

Fixtures:
  server            the session's shared server: its base URL ("http://127.0.0.1:PORT")
  server_proc       the same server's KgymServer (logs, port)
  launch_server     factory: launch_server(config=..., args=...) -> a started KgymServer for special
                    settings (small --max-episodes, a server to kill); stopped at the test's end
  clients_pythonpath  the folder to put on PYTHONPATH so that `import kgym` finds the package
  task_dirs         the task folders every server is given
"""
import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS) not in sys.path:  # kgym_server
    sys.path.insert(0, str(_TESTS))
from kgym_server import (REPO, SHORT_TIMEOUTS, ServeProcess, elementwise_model,  # noqa: E402
                         kill_leftovers, with_bundled_tasks, write_task)

CLIENT_PKG_ROOT = REPO / "env" / "clients" / "python"

# The package under test is imported from the source tree (not from an installed copy).
if str(CLIENT_PKG_ROOT) not in sys.path:
    sys.path.insert(0, str(CLIENT_PKG_ROOT))

# Short timeouts keep the suite fast; retry_after_s is small so capacity retries finish quickly.
BASE_CONFIG = {**SHORT_TIMEOUTS, "retry_after_s": 1}

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
        marker = folder.upper()
        write_task(root / folder, meta,
                   elementwise_model(op, 4096, "clients fixture task", marker + "_GPU"),
                   elementwise_model(op, 16, "clients fixture task", marker + "_CPU"))
    return with_bundled_tasks(root)


class KgymServer(ServeProcess):
    """A server of this suite: BASE_CONFIG settings, `--gpus none`, restarts on the same port."""

    base_config = BASE_CONFIG
    # GPU-variant episodes get a quick infra_error (never a real GPU evaluation), whatever
    # the machine: the suite's timings and verdicts do not depend on a GPU being present
    fixed_args = ("--gpus", "none")
    start_timeout = 30
    # records() skips stderr lines that are not JSON objects; tests/api checks the log format
    log_must_be_json = False

    def restart(self, timeout=60):
        """A new process on the same state dir and the same port (after stop or kill9)."""
        return super().restart(timeout, port=self.port)


@pytest.fixture(scope="session")
def _all_servers():
    started = []
    yield started
    kill_leftovers(started)


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
