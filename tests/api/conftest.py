"""Fixtures of the black-box API suite: task folders, real kgym-env servers, HTTP clients.

Every test talks to a real `kgym-env serve` process over HTTP on 127.0.0.1 (port 0: the server
picks a free port and logs it). Most tests share one server per module (`srv`); tests that need
special settings (capacity, reaper, restarts, signals) start their own with `launch`.

The server processes themselves are tests/kgym_server.py's (shared with tests/clients);
ServerProc below adds this suite's settings, an HTTP client and the teardown checks.
tests/sandbox loads this file as a module and reuses ServerProc, FIXTURE_TASKS and BASE_CONFIG.
"""
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))  # kgym_http
if str(_HERE.parent) not in sys.path:  # kgym_server, also when tests/sandbox loads this file
    sys.path.insert(0, str(_HERE.parent))
from kgym_http import Client  # noqa: E402
# the suite's tests import the paths from here (from conftest import BINARY, ...)
from kgym_server import (BINARY, BUNDLED_TASKS, PROFILES, REPO, SHORT_TIMEOUTS,  # noqa: E402,F401
                         TEMPLATE, ServeProcess, elementwise_model, kill_leftovers,
                         with_bundled_tasks, write_task)

# Settings of every server unless a test overrides them: short timeouts keep the suite fast.
BASE_CONFIG = {
    **SHORT_TIMEOUTS,
    "max_output_chars": 4000,
    "max_body_bytes": 4 << 20,
    "max_file_bytes": 2 << 20,
    "disk_quota_bytes": 16 << 20,
    "retry_after_s": 3,
    "max_background_jobs": 4,
}

# ---- the fixture tasks ---------------------------------------------------------------------

ALPHA_GPU = elementwise_model("relu", 4096, "fixture task alpha", "ALPHA_GPU_MARKER")
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
        write_task(root / folder, meta, code, code_cpu)
    return with_bundled_tasks(root)


# ---- servers -------------------------------------------------------------------------------

class ServerProc(ServeProcess):
    """A server of this suite: BASE_CONFIG settings, an HTTP client, a checked teardown."""

    base_config = BASE_CONFIG

    def __init__(self, workdir, task_dirs, state_dir=None, config=None, args=(), port=0):
        super().__init__(workdir, task_dirs, state_dir=state_dir, config=config, args=args,
                         port=port)
        self.expect_exit = 0  # checked at teardown; None: the test handled the exit itself

    def client(self, timeout=30.0):
        return Client(self.port, timeout=timeout)

    def kill9(self):
        super().kill9()
        self.expect_exit = None

    def restart(self):
        """A new process on the same state dir (after stop or kill9); its exit is checked again."""
        self.expect_exit = 0
        return super().restart()

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
    kill_leftovers(started)  # servers a test forgot


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
