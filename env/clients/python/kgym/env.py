"""``KgymEnv``: one kgym-env episode behind the Gymnasium API.

    env = KgymEnv("http://127.0.0.1:8080", task_id="kgym/rms_norm", variant="cpu")
    obs, info = env.reset(seed=7)                    # the task prompt: obs["content"]
    obs, reward, terminated, truncated, info = env.step(
        {"tool": "Read", "args": {"file_path": "/workspace/model.py"}})
    env.close()

The first ``reset`` creates the episode on the server, later ones reset it in place (same id,
fresh workspace); ``close`` closes it (the trajectory stays on the server). Keyword arguments
other than the client's are the episode's reset options (``max_steps``, ``variant``, ``reward``,
``reward_on``, ``mode``, ``max_wall_s``, ``idle_timeout_s``); an unknown one is the server's 422.

Actions: one tool call, as kgym's ``{"tool", "args", "call_id"}``, an OpenAI ``tool_call`` or an
Anthropic ``tool_use`` (verbatim, as the model produced it), or a list of up to 16 of them (one
turn). Observations are what the server sends: for one action the observation object ``{tool,
call_id, is_error, content, data}``, for a list ``{"observations": [...]}``, for a reset ``{content,
is_error, data}``. Per-call timings (``duration_ms`` in observations, ``timing`` and the moving
``expires_at`` in info) are left out of ``obs`` and ``info``, so that the same seed and actions
give the same observations (what ``check_env`` checks); the server's full answer of the last call
is ``env.last_response``, and ``raw_info=True`` keeps info verbatim.

A ``null`` reward (an evaluation that could not run: ``info["eval_status"] == "infra_error"``)
is returned as 0.0 with ``info["reward_null"] = True``: it must not be trained on as a failure.

When gymnasium is importable, ``KgymEnv`` is a ``gymnasium.Env`` and ``kgym/Kernel-v0`` is
registered (``gymnasium.make("kgym/Kernel-v0", url=..., task_id=...)``).
"""
import copy
from typing import Any, Dict, List, Optional, Tuple

from .client import DEFAULT_URL, KgymClient
from .errors import Gone
from .spaces import HAVE_GYMNASIUM, ActionSpace, JsonSpace

if HAVE_GYMNASIUM:
    import gymnasium as _gym

    _EnvBase = _gym.Env
else:  # pragma: no cover - exercised by tests/clients/test_bare_python.py
    class _EnvBase:  # type: ignore[no-redef]
        """Stand-in for gymnasium.Env when gymnasium is not installed."""

        metadata: Dict[str, Any] = {"render_modes": []}
        render_mode = None
        spec = None

        def reset(self, *, seed=None, options=None):
            return None

        @property
        def unwrapped(self):
            return self

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()
            return False

__all__ = ["KgymEnv", "ENV_ID", "register"]

ENV_ID = "kgym/Kernel-v0"
OBSERVATION_SCHEMA = {"type": "object"}
# What changes between two identical calls: not part of obs/info (see the module docstring).
_VOLATILE_INFO = ("timing", "expires_at")
_VOLATILE_OBS = ("duration_ms",)


def _strip(d: Any, keys) -> Any:
    if isinstance(d, dict):
        return {k: v for k, v in d.items() if k not in keys}
    return d


def split_reset(resp: Dict[str, Any], raw_info: bool) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(obs, info) of a create/reset response."""
    obs = copy.deepcopy(resp.get("observation") or {})
    info = copy.deepcopy(resp.get("info") or {})
    if not raw_info:
        info = _strip(info, _VOLATILE_INFO)
    info["episode_id"] = resp.get("episode_id")
    return obs, info


def split_step(resp: Dict[str, Any], raw_info: bool
               ) -> Tuple[Dict[str, Any], float, bool, bool, Dict[str, Any]]:
    """(obs, reward, terminated, truncated, info) of a step response."""
    if "observations" in resp:
        obs = {"observations": [o if raw_info else _strip(o, _VOLATILE_OBS)
                                for o in copy.deepcopy(resp["observations"])]}
    else:
        o = copy.deepcopy(resp.get("observation") or {})
        obs = o if raw_info else _strip(o, _VOLATILE_OBS)
    info = copy.deepcopy(resp.get("info") or {})
    if not raw_info:
        info = _strip(info, _VOLATILE_INFO)
    reward = resp.get("reward")
    if reward is None:
        info["reward_null"] = True
        reward = 0.0
    return obs, float(reward), bool(resp.get("terminated")), bool(resp.get("truncated")), info


def step_body(action: Any) -> Tuple[Optional[Any], Optional[List[Any]]]:
    """(action, actions) for the step request: a list is one turn of several calls."""
    if isinstance(action, (list, tuple)):
        return None, list(action)
    return action, None


def render_text(last: Optional[Dict[str, Any]]) -> str:
    """The text an LLM would see of the last observation(s)."""
    if not last:
        return ""
    if "observations" in last:
        return "\n\n".join(f"[{o.get('tool')}] {o.get('content', '')}"
                           for o in last["observations"])
    o = last.get("observation") or {}
    return str(o.get("content", ""))


class KgymEnv(_EnvBase):
    """One kgym-env episode as a Gymnasium environment (see the module docstring).

    ``url``: the server. ``task_id``: the task (None: the server's first, or keep the current
    one on reset). ``client``: a ``KgymClient`` to share (default: a new one, closed with the
    env). ``tags``: free-form tags stored with the episode. ``timeout``/``retries``: for the
    client made here. ``raw_info``: info exactly as the server sent it. ``render_mode``: None or
    "ansi" (``render()`` returns the last observation's text). Other keyword arguments are the
    episode's reset options.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, url: str = DEFAULT_URL, task_id: Optional[str] = None,
                 client: Optional[KgymClient] = None, render_mode: Optional[str] = None,
                 tags: Optional[Dict[str, Any]] = None, raw_info: bool = False,
                 timeout: Optional[float] = None, retries: Optional[int] = None, **options: Any):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"kgym: render_mode must be None or 'ansi', not {render_mode!r}")
        self.render_mode = render_mode
        self.url = url
        self.task_id = task_id
        self.tags = tags
        self.options = dict(options)
        self.raw_info = raw_info
        self._own_client = client is None
        if client is None:
            kw: Dict[str, Any] = {}
            if timeout is not None:
                kw["timeout"] = timeout
            if retries is not None:
                kw["retries"] = retries
            client = KgymClient(url, **kw)
        self.client = client
        self._episode_id: Optional[str] = None
        self._closed = False
        self.last_response: Optional[Dict[str, Any]] = None
        self.tool_list = self.client.tools()
        self.action_space = ActionSpace(self.tool_list)
        self.observation_space = JsonSpace(OBSERVATION_SCHEMA, sampler=_sample_observation)

    @property
    def episode_id(self) -> Optional[str]:
        """The server's episode id (None before the first reset)."""
        return self._episode_id

    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
              ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """Starts (first call) or restarts the episode: a fresh workspace. ``seed`` (int >= 0)
        is the server's episode seed (its evaluations' inputs) and seeds ``np_random``.
        ``options``: ``task_id`` switches the task, ``tags`` replaces the tags, anything else
        overrides the constructor's reset options for this and later resets."""
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)
                                 or seed < 0):
            raise ValueError(f"kgym: seed must be an int >= 0, not {seed!r}")
        super().reset(seed=seed)
        opts = dict(options or {})
        if "task_id" in opts:
            self.task_id = opts.pop("task_id")
        if "tags" in opts:
            self.tags = opts.pop("tags")
        self.options.update(opts)
        if self._closed:
            raise RuntimeError("kgym: reset after close(); make a new KgymEnv")
        resp = None
        if self._episode_id is not None:
            try:
                resp = self.client.reset_episode(self._episode_id, task_id=self.task_id,
                                                 seed=seed, options=self.options, tags=self.tags)
            except Gone:  # expired or ended by a server restart: start a new one
                self._episode_id = None
        if resp is None:
            resp = self.client.create_episode(task_id=self.task_id, seed=seed,
                                              options=self.options, tags=self.tags)
            self._episode_id = resp["episode_id"]
        if self.task_id is None:
            self.task_id = (resp.get("info") or {}).get("task_id")
        self.last_response = resp
        return split_reset(resp, self.raw_info)

    def step(self, action: Any) -> Tuple[Dict[str, Any], float, bool, bool, Dict[str, Any]]:
        """One turn: ``action`` is one tool call or a list of them (see the module docstring).
        Tool failures are observations with ``is_error``; a step after the episode ended is a
        ``kgym.errors.Conflict`` (``EPISODE_TERMINATED``): reset first."""
        if self._episode_id is None:
            raise RuntimeError("kgym: call reset() before step()")
        one, many = step_body(action)
        resp = self.client.step(self._episode_id, action=one, actions=many)
        self.last_response = resp
        return split_step(resp, self.raw_info)

    def render(self) -> Optional[str]:
        """"ansi": the last observation's text (what the LLM sees); None otherwise."""
        if self.render_mode == "ansi":
            return render_text(self.last_response)
        return None

    def trajectory(self) -> List[Dict[str, Any]]:
        """The episode's trajectory as the server recorded it."""
        if self._episode_id is None:
            return []
        return self.client.trajectory(self._episode_id)

    def close(self, purge: bool = False) -> None:
        """Closes the episode (its trajectory stays unless ``purge``) and the env's own client.
        Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._episode_id is not None:
                self.client.close_episode(self._episode_id, purge=purge)
        finally:
            if self._own_client:
                self.client.close()


def _sample_observation(rng) -> Dict[str, Any]:
    return {"tool": "Read", "call_id": "", "is_error": False,
            "content": "".join(rng.choice("abc \n") for _ in range(rng.randrange(0, 20))),
            "data": {}}


def register() -> bool:
    """Registers ``kgym/Kernel-v0`` with gymnasium (once); False without gymnasium."""
    if not HAVE_GYMNASIUM:
        return False
    if ENV_ID not in _gym.registry:
        _gym.register(id=ENV_ID, entry_point="kgym.env:KgymEnv")
    return True
