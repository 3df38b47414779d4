"""kgym: the Python client of kgym-env, the CUDA-kernel RL environment server.

    from kgym import KgymEnv
    env = KgymEnv("http://127.0.0.1:8080", task_id="kgym/rms_norm", variant="cpu")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(
        {"tool": "Bash", "args": {"command": "ls kernels"}})
    env.close()

Modules: ``kgym.client`` (``KgymClient``: every route of the HTTP API, keep-alive, retries),
``kgym.env`` (``KgymEnv``: the Gymnasium API), ``kgym.aio`` (the same as coroutines, for many
concurrent episodes), ``kgym.spaces`` (spaces over JSON values), ``kgym.errors`` (typed errors of
the server's error envelope). No dependency beyond the standard library; when gymnasium is
installed, ``KgymEnv`` is a ``gymnasium.Env`` and ``kgym/Kernel-v0`` is registered on import.
"""
from .client import DEFAULT_URL, KgymClient
from .errors import (BadRequest, CapacityError, Conflict, Gone, KgymError, NotFound, ServerError,
                     TransportError)
from .spaces import HAVE_GYMNASIUM, ActionSpace, JsonSpace
from .env import ENV_ID, KgymEnv, register
from .aio import AsyncKgymClient, AsyncKgymEnv

__version__ = "0.1.0"

__all__ = [
    "KgymClient", "KgymEnv", "AsyncKgymClient", "AsyncKgymEnv", "JsonSpace", "ActionSpace",
    "KgymError", "BadRequest", "NotFound", "Conflict", "Gone", "CapacityError", "ServerError",
    "TransportError", "ENV_ID", "DEFAULT_URL", "HAVE_GYMNASIUM", "register", "__version__",
]

register()  # kgym/Kernel-v0, when gymnasium is importable (idempotent)
