"""OpenEnv peer of kgym-env's benchmark (tests/bench/README.md, "Side-by-side with OpenEnv").

An environment written against OpenEnv's own Environment API (openenv-core), served by OpenEnv's
own app factory (`create_app`, i.e. HTTPEnvServer: HTTP /reset, /step and the WebSocket /ws)
under uvicorn. It does work comparable to kgym-env's `Read` step:

* `reset` removes the previous episode's directory (if any), creates a fresh per-episode
  directory under $KGYM_PEER_STATE_DIR with one small file, model.py (the bytes of
  $KGYM_PEER_MODEL_FILE: mk/bench-peer.sh passes the model.py of the task kgym's bench uses),
  and returns a short observation;
* `step` with {"tool": "Read", "file_path": "/workspace/model.py"} reads that file and returns
  its text as the observation.

Each observation carries `env_ms`, the time spent inside reset()/step() (perf_counter_ns), the
counterpart of kgym's info.timing; a reset's `cleanup_ms` is the part of it spent removing the
previous episode's directory (kgym's bench deletes episodes outside its timing). Nothing is
fsynced: OpenEnv environments do not make durable writes, so compare with kgym-env under
`--durability none` for the same work.

OpenEnv's HTTP /reset and /step are stateless (each request builds a fresh environment with the
factory and closes it after). A fresh environment has no episode, so for HTTP /step the episode
is looked up by `episode_id` (an extra field of the StepRequest, which OpenEnv passes to step()
as a keyword argument) in a process-wide registry of live workspaces; mk/bench-peer.sh keeps
that episode alive in a WebSocket session. Without `episode_id` an HTTP /step answers
is_error=true ("no episode").

Run: uvicorn env_server:app --app-dir tests/bench/peer_openenv --host 127.0.0.1 --port 0
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, Literal, Optional

from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

WORKSPACE = "/workspace"
MODEL_NAME = "model.py"


def _model_text() -> str:
    path = os.environ.get("KGYM_PEER_MODEL_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read()
    # a stand-in of about the size of a task's model.py
    return (
        "import torch\nimport torch.nn as nn\n\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x, y):\n        return torch.nn.functional.layer_norm(x + y, x.shape[-1:])\n"
    ) * 4


MODEL_TEXT = _model_text()
MODEL_BYTES = MODEL_TEXT.encode("utf-8")
STATE_DIR = os.environ.get("KGYM_PEER_STATE_DIR") or None  # None: the system temp dir
MAX_SESSIONS = int(os.environ.get("KGYM_PEER_MAX_SESSIONS", "8"))

# episode_id -> workspace directory, for stateless HTTP /step (see the module docstring)
_LIVE: Dict[str, str] = {}
_LIVE_LOCK = threading.Lock()


class ReadAction(Action):
    """kgym's Read tool, reduced to what the benchmark uses."""

    tool: Literal["Read"] = "Read"
    file_path: str


class ReadObservation(Observation):
    text: str = ""
    is_error: bool = False
    episode_id: str = ""
    env_ms: float = 0.0  # time inside reset()/step()
    cleanup_ms: float = 0.0  # of env_ms, removing the previous episode's directory (reset)


class ReadState(State):
    workspace: Optional[str] = None


class ReadFileEnvironment(Environment[ReadAction, ReadObservation, ReadState]):
    # Every instance has its own directory and no shared mutable state but the registry (locked).
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = ReadState()
        self._dir: Optional[str] = None

    # --- the episode's directory -------------------------------------------------------------

    def _drop_dir(self) -> None:
        if self._dir is None:
            return
        with _LIVE_LOCK:
            _LIVE.pop(self._state.episode_id or "", None)
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> ReadObservation:
        t0 = time.perf_counter_ns()
        self._drop_dir()
        cleanup_ms = (time.perf_counter_ns() - t0) / 1e6
        eid = episode_id or uuid.uuid4().hex
        d = tempfile.mkdtemp(prefix="ep-", dir=STATE_DIR)
        with open(os.path.join(d, MODEL_NAME), "wb") as f:
            f.write(MODEL_BYTES)
        self._dir = d
        self._state = ReadState(episode_id=eid, step_count=0, workspace=d)
        with _LIVE_LOCK:
            _LIVE[eid] = d
        return ReadObservation(
            text=f"Episode {eid} ready: {WORKSPACE}/{MODEL_NAME}",
            episode_id=eid,
            env_ms=(time.perf_counter_ns() - t0) / 1e6,
            cleanup_ms=cleanup_ms,
        )

    def step(
        self, action: ReadAction, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> ReadObservation:
        t0 = time.perf_counter_ns()
        d = self._dir
        eid = self._state.episode_id or ""
        if d is None and kwargs.get("episode_id"):
            eid = str(kwargs["episode_id"])
            with _LIVE_LOCK:
                d = _LIVE.get(eid)
        if d is None:
            return self._error("no episode: call reset first (HTTP /step runs on a fresh env)", t0)
        fp = action.file_path
        if not fp.startswith(WORKSPACE + "/"):
            return self._error(f"{fp}: outside {WORKSPACE}", t0)
        rel = os.path.normpath(fp[len(WORKSPACE) + 1 :])
        if rel.startswith("..") or os.path.isabs(rel):
            return self._error(f"{fp}: outside {WORKSPACE}", t0)
        try:
            with open(os.path.join(d, rel), encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            return self._error(f"{fp}: {e.strerror}", t0)
        self._state.step_count += 1
        return ReadObservation(
            text=text, episode_id=eid, env_ms=(time.perf_counter_ns() - t0) / 1e6
        )

    def _error(self, msg: str, t0: int) -> ReadObservation:
        return ReadObservation(
            text=msg,
            is_error=True,
            episode_id=self._state.episode_id or "",
            env_ms=(time.perf_counter_ns() - t0) / 1e6,
        )

    @property
    def state(self) -> ReadState:
        return self._state

    def close(self) -> None:
        self._drop_dir()


app = create_app(
    ReadFileEnvironment,
    ReadAction,
    ReadObservation,
    env_name="kgym_peer_read",
    max_concurrent_envs=MAX_SESSIONS,
)
