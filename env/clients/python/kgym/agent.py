"""kgym-agent: run kgym-env episodes with any OpenAI-compatible chat-completions endpoint.

    python -m kgym.agent --server http://127.0.0.1:8080 --base-url http://127.0.0.1:8000/v1 \\
        --model Qwen/Qwen3-8B --suite kernelbench --levels 1,2 --parallel 8 --out runs/qwen3
    kgym-bench run --kernelbench KB.jsonl --levels 1,2 --solutions runs/qwen3/solutions ...

One episode: create it on the kgym-env server (the Gym reset), send the model a system prompt and
the task as the server states it (the observation: the task, ``model.py``, the workspace), with
the server's own tool schemas (``GET /v1/tools?format=openai``) as the tool list; then, turn by
turn, run the model's tool calls as one kgym step and answer each call with its observation,
until the episode ends. The final evaluation happens at Submit (the CUDA Agent paper's rule), so
when the model stops calling tools twice in a row, when it reaches ``--max-turns``, or when its
endpoint fails for good after the workspace changed, the agent calls Submit itself and records
why: every workspace that was worked on gets its reward.

Tool calls come natively (``tool_calls``) or, for models served without a tool parser, as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks in the text, which are answered
in the same form (``<tool_response>`` blocks in a user message). A malformed call (arguments that
are not a JSON object, an unknown tool, no name, a broken block) is answered with an error the
model can act on; it never ends the episode.

Outputs under ``--out``:

* ``trajectories/<task id, '/' as '_'>__<n>.jsonl``: a ``start`` line (the episode, the first
  messages, the tool list), one ``turn`` line per model turn (the messages it added to the
  conversation, the raw response message, token usage, retries, the step's reward and info), a
  ``submit`` line when the agent submitted, and a final ``summary`` line. The whole conversation
  is the start line's ``messages`` followed by every turn's ``messages``, in order.
* ``summary.jsonl``: one line per finished episode (task, episode id, turns, reward, status,
  tokens); ``--resume`` skips the episodes listed there (except those whose status is
  ``error``, which run again).
* ``workspaces/<name>__<n>/``: each episode's final ``model_new.py`` and ``kernels/``,
  downloaded before the episode is closed;
* ``solutions/``: for each task, its best workspace (highest reward), laid out as ``kgym-bench
  run --solutions`` reads it: ``level<L>/<P>/`` for KernelBench ids ``kb/L<L>/<P>``,
  ``<task id>/`` otherwise.

Only the standard library is used (``http.client`` for the endpoint, ``kgym.client`` for
kgym-env), so this runs wherever the kgym package does.
"""
import argparse
import http.client
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import sys
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from .client import KgymClient
from .errors import BadRequest, CapacityError, KgymError, NotFound, TransportError

__all__ = ["main", "ChatEndpoint", "LLMError", "parse_text_tool_calls", "AgentConfig",
           "run_agent", "solution_rel_path", "DEFAULT_SYSTEM_PROMPT"]

PROG = "kgym-agent"
USER_AGENT = "kgym-agent/0.1"

# Exit statuses (the same scheme as kgym-bench).
EXIT_OK, EXIT_USAGE, EXIT_EPISODE_ERRORS, EXIT_INTERRUPTED = 0, 1, 2, 3

DEFAULT_SYSTEM_PROMPT = """\
You are an expert GPU performance engineer. You work in a sandboxed workspace, /workspace, and
act only through the tools you are given (Bash, Read, Write, Edit, MultiEdit, Glob, Grep and the
evaluation tools Compile, Verify, Profile and Submit).

Your goal: write ModelNew in /workspace/model_new.py that computes exactly what Model in
/workspace/model.py computes, faster, using kernels you write yourself in /workspace/kernels/.
/workspace/SKILL.md explains the workflow and the rules: read it first.

Work in small steps: Compile after every change, Verify until it is correct, Profile to find
what to speed up. Correctness comes first: a fast wrong answer scores like no answer.
Every reply must contain at least one tool call until you are done. When you are done, call
Submit: it ends the episode with the final evaluation. You have at most {max_turns} turns.
"""

TEXT_TOOLS_PROMPT = """\

# Tools

You call a tool by writing, anywhere in your reply, one block per call:
<tool_call>
{"name": "<tool name>", "arguments": {<the arguments as a JSON object>}}
</tool_call>
Each result comes back in a <tool_response> block, in the same order. The tools (JSON schemas):
"""

CPU_NOTE = (
    "\n\nNote: this episode uses the task's CPU variant and is evaluated on CPU PyTorch, without "
    "a GPU: write the kernels as C++ (`kernels/<name>.cpp` and `kernels/<name>_binding.cpp`), "
    "not .cu files, and remove the template's CUDA example from kernels/.")

NO_TOOL_CALL_NUDGE = (
    "Your reply had no tool call. Continue the work by calling a tool; when you are done, call "
    "Submit (it ends the episode with the final evaluation). If you reply again without a tool "
    "call, the workspace is submitted as it is.")

TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
KB_ID_RE = re.compile(r"^kb/L(\d+)/(\d+)$")


class UsageError(Exception):
    """A bad command line or an unusable setup: printed, exit 1."""


# ---- the chat-completions endpoint -----------------------------------------------------------

class LLMError(Exception):
    """The endpoint failed: ``status`` (HTTP status, None for transport failures), ``retryable``
    (429, 408, 5xx, transport errors and malformed 200 bodies are), ``retry_after`` (seconds from
    the Retry-After header, or None)."""

    def __init__(self, message: str, status: Optional[int] = None, retryable: bool = False,
                 retry_after: Optional[float] = None):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


def _retry_after_seconds(value: Optional[str]) -> Optional[float]:
    """Retry-After as seconds: either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class ChatEndpoint:
    """POST {base_url}/chat/completions with retries.

    A new connection per request: a turn's generation takes seconds to minutes, so a kept-alive
    connection saves nothing, and a fresh one never meets a connection the server dropped.
    Retried with exponential backoff and jitter (``backoff`` doubled per attempt, at most
    ``max_backoff``): 429, 408 and 5xx answers, transport failures and unparseable 200 bodies.
    A Retry-After header is honoured (never retried earlier; capped at ``max_retry_after``).
    Other 4xx answers (a context too long, a bad request) are not retried.
    """

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 600.0,
                 retries: int = 8, backoff: float = 1.0, max_backoff: float = 60.0,
                 max_retry_after: float = 300.0, stop: Optional[threading.Event] = None):
        parts = urlsplit(base_url if "://" in base_url else "http://" + base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--base-url {base_url!r}: expected http(s)://HOST[:PORT][/PATH]")
        self.base_url = base_url
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.path = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.stop = stop or threading.Event()
        self._rng = random.Random()

    def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(extra or {})
        return h

    def _exchange(self, method: str, path: str, body: Optional[bytes],
                  headers: Dict[str, str]) -> Tuple[int, Dict[str, str], bytes]:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, self.path + path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            conn.close()

    def preflight(self) -> None:
        """Fails fast (UsageError) when nothing answers at the endpoint. ``GET /models`` is only
        a probe: any HTTP answer, even a 404 or 401, shows the endpoint is there."""
        try:
            self._exchange("GET", "/models", None, self._headers())
        except (OSError, http.client.HTTPException) as e:
            raise UsageError(f"the model endpoint {self.base_url} is unreachable: {e}") from None

    def _once(self, payload: bytes, headers: Dict[str, str]) -> Dict[str, Any]:
        try:
            status, rh, data = self._exchange("POST", "/chat/completions", payload, headers)
        except socket.timeout:
            raise LLMError(f"no answer within {self.timeout} s", retryable=True) from None
        except (OSError, http.client.HTTPException) as e:
            raise LLMError(f"transport error: {e!r}", retryable=True) from None
        if status != 200:
            text = data[:2000].decode("utf-8", "replace")
            retryable = status in (408, 429) or status >= 500
            raise LLMError(f"HTTP {status}: {text}", status=status, retryable=retryable,
                           retry_after=_retry_after_seconds(rh.get("retry-after")))
        try:
            doc = json.loads(data.decode("utf-8"))
            message = doc["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, UnicodeDecodeError, KeyError, IndexError, TypeError) as e:
            raise LLMError(f"malformed 200 response ({e!r}): "
                           f"{data[:500].decode('utf-8', 'replace')}", status=status,
                           retryable=True) from None
        return doc

    def complete(self, body: Dict[str, Any],
                 headers: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, Any], List[Dict]]:
        """The parsed response, and the failed attempts before it ([{status, error, wait_s}]).
        Raises LLMError when a failure is not retryable, the retries are spent, or ``stop`` is
        set while waiting."""
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        hdrs = self._headers({"Content-Type": "application/json"})
        hdrs.update(headers or {})
        failures: List[Dict[str, Any]] = []
        attempt = 0
        while True:
            try:
                return self._once(payload, hdrs), failures
            except LLMError as err:
                if not err.retryable or attempt >= self.retries:
                    err.failures = failures  # type: ignore[attr-defined]
                    raise
                if err.retry_after is not None:
                    wait = min(err.retry_after, self.max_retry_after)
                else:
                    wait = min(self.backoff * (2 ** attempt), self.max_backoff)
                    wait *= self._rng.uniform(0.5, 1.0)
                failures.append({"attempt": attempt + 1, "status": err.status,
                                 "error": str(err)[:500], "wait_s": round(wait, 3)})
                attempt += 1
                if self.stop.wait(wait):
                    err.failures = failures  # type: ignore[attr-defined]
                    raise


# ---- tool calls ------------------------------------------------------------------------------

class Call:
    """One tool call of the model, validated: either ``action`` (a kgym action) or ``error``
    (the text the model gets back instead)."""

    __slots__ = ("call_id", "name", "args", "error", "raw")

    def __init__(self, call_id: str, name: Optional[str], args: Any, error: Optional[str],
                 raw: Any):
        self.call_id = call_id
        self.name = name
        self.args = args
        self.error = error
        self.raw = raw

    @property
    def action(self) -> Dict[str, Any]:
        return {"tool": self.name, "args": self.args, "call_id": self.call_id}

    def as_record(self) -> Dict[str, Any]:
        return {"call_id": self.call_id, "name": self.name, "error": self.error}


def _resolve(name: Any, arguments: Any, tools: Dict[str, str], call_id: str, raw: Any) -> Call:
    """Checks one call's name and arguments against the tool list (names case-insensitive, as
    the server takes them). Arguments may be a JSON string (OpenAI), an object, or empty."""
    listing = ", ".join(sorted(tools.values(), key=str.lower))
    if not isinstance(name, str) or not name.strip():
        return Call(call_id, None, None,
                    "Error: this tool call has no function name, so it was not run. Call one of "
                    f"these tools by name, with a JSON object of arguments: {listing}.", raw)
    canonical = tools.get(name.strip().lower())
    if canonical is None:
        return Call(call_id, name, None,
                    f"Error: there is no tool named {name!r}; the call was not run. The tools "
                    f"are: {listing}.", raw)
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        args: Any = {}
    elif isinstance(arguments, str):
        try:
            args = json.loads(arguments)
        except ValueError as e:
            return Call(call_id, canonical, None,
                        f"Error: the arguments of this {canonical} call are not valid JSON ({e}); "
                        "the call was not run. Send the arguments as one JSON object, with "
                        "strings escaped (newlines as \\n, quotes as \\\").", raw)
    else:
        args = arguments
    if not isinstance(args, dict):
        return Call(call_id, canonical, None,
                    f"Error: the arguments of this {canonical} call must be a JSON object, not "
                    f"{type(args).__name__}; the call was not run.", raw)
    return Call(call_id, canonical, args, None, raw)


def parse_native_tool_calls(tool_calls: Any, tools: Dict[str, str],
                            turn: int) -> Tuple[List[Call], List[Dict[str, Any]]]:
    """The calls of an assistant message's ``tool_calls``, and those tool_calls as they go back
    into the conversation (every one with an id, so each gets its tool message)."""
    calls: List[Call] = []
    echoed: List[Dict[str, Any]] = []
    if not isinstance(tool_calls, list):
        tool_calls = [tool_calls]
    for i, tc in enumerate(tool_calls):
        tc_ok = isinstance(tc, dict)
        call_id = tc.get("id") if tc_ok else None
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{turn}_{i}"
        fn = tc.get("function") if tc_ok else None
        fn = fn if isinstance(fn, dict) else {}
        name, arguments = fn.get("name"), fn.get("arguments")
        calls.append(_resolve(name, arguments, tools, call_id, tc))
        if isinstance(arguments, str):
            arg_text = arguments
        else:
            arg_text = json.dumps(arguments if arguments is not None else {})
        echoed.append({"id": call_id, "type": "function",
                       "function": {"name": name if isinstance(name, str) else "",
                                    "arguments": arg_text}})
    return calls, echoed


def parse_text_tool_calls(content: str, tools: Dict[str, str], turn: int) -> List[Call]:
    """The ``<tool_call>{json}</tool_call>`` blocks of a text reply (Hermes/Qwen style), in
    order; an unterminated last block (a reply cut by max_tokens) is answered as an error too.
    ``arguments`` may also be named ``parameters``; it may be an object or a JSON string."""
    calls: List[Call] = []
    blocks = [m.group(1) for m in TOOL_CALL_RE.finditer(content)]
    tail = content[content.rfind("</tool_call>") + len("</tool_call>"):] \
        if "</tool_call>" in content else content
    unterminated = "<tool_call>" in tail
    for i, block in enumerate(blocks):
        call_id = f"text_{turn}_{i}"
        try:
            doc = json.loads(block.strip())
        except ValueError as e:
            calls.append(Call(call_id, None, None,
                              f"Error: this <tool_call> block is not valid JSON ({e}); it was not "
                              'run. Write {"name": "<tool>", "arguments": {...}} between the '
                              "tags.", block))
            continue
        if not isinstance(doc, dict):
            calls.append(Call(call_id, None, None,
                              "Error: a <tool_call> block must hold a JSON object "
                              '{"name": ..., "arguments": {...}}; it was not run.', block))
            continue
        arguments = doc.get("arguments", doc.get("parameters"))
        calls.append(_resolve(doc.get("name"), arguments, tools, call_id, block))
    if unterminated:
        calls.append(Call(f"text_{turn}_{len(blocks)}", None, None,
                          "Error: a <tool_call> block was not closed with </tool_call> (was the "
                          "reply cut off?); it was not run.", tail[tail.find("<tool_call>"):]))
    return calls


# ---- configuration ---------------------------------------------------------------------------

class AgentConfig:
    """Everything one run needs (built from the command line by ``main``)."""

    def __init__(self, **kw: Any):
        self.server: str = kw.pop("server")
        self.base_url: str = kw.pop("base_url")
        self.model: str = kw.pop("model")
        self.api_key: Optional[str] = kw.pop("api_key", None)
        self.out: str = kw.pop("out")
        self.max_turns: int = kw.pop("max_turns", 200)
        self.temperature: Optional[float] = kw.pop("temperature", None)
        self.top_p: Optional[float] = kw.pop("top_p", None)
        self.max_tokens: Optional[int] = kw.pop("max_tokens", None)
        self.extra_body: Dict[str, Any] = kw.pop("extra_body", None) or {}
        self.system_prompt: str = kw.pop("system_prompt", DEFAULT_SYSTEM_PROMPT)
        self.tool_mode: str = kw.pop("tool_mode", "native")
        self.episodes_per_task: int = kw.pop("episodes_per_task", 1)
        self.parallel: int = kw.pop("parallel", 1)
        self.seed: Optional[int] = kw.pop("seed", None)
        self.options: Dict[str, Any] = kw.pop("options", None) or {}
        self.resume: bool = kw.pop("resume", False)
        self.llm_timeout: float = kw.pop("llm_timeout", 600.0)
        self.llm_retries: int = kw.pop("llm_retries", 8)
        self.llm_backoff: float = kw.pop("llm_backoff", 1.0)
        self.kgym_timeout: float = kw.pop("kgym_timeout", 1200.0)
        self.capacity_wait: float = kw.pop("capacity_wait", 1800.0)
        self.keep_episodes: bool = kw.pop("keep_episodes", False)
        self.quiet: bool = kw.pop("quiet", False)
        if kw:
            raise TypeError(f"unknown AgentConfig fields: {sorted(kw)}")


def safe_name(task_id: str) -> str:
    """A task id as one file-name component ('/' becomes '_'; anything odd too)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", task_id.replace("/", "_")) or "_"


def episode_name(task_id: str, n: int) -> str:
    return f"{safe_name(task_id)}__{n}"


def solution_rel_path(task_id: str) -> str:
    """Where kgym-bench looks for a task's solution workspace under --solutions:
    ``level<L>/<P>`` for ``kb/L<L>/<P>``, the task id itself otherwise."""
    m = KB_ID_RE.match(task_id)
    if m:
        return f"level{int(m.group(1))}/{int(m.group(2))}"
    parts = [p for p in task_id.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"task id {task_id!r} cannot name a solution folder")
    return "/".join(parts)


# ---- one episode -----------------------------------------------------------------------------

class Interrupted(Exception):
    """The run was interrupted (Ctrl-C): the episode is abandoned, not recorded."""


class Episode:
    """Runs one episode from creation to close and writes its trajectory file."""

    def __init__(self, cfg: AgentConfig, task_id: str, n: int, tools_openai: List[Dict],
                 tool_names: Dict[str, str], max_actions: int, stop: threading.Event):
        self.cfg = cfg
        self.task_id = task_id
        self.n = n
        self.name = episode_name(task_id, n)
        self.tools_openai = tools_openai
        self.tool_names = tool_names
        self.max_actions = max_actions
        self.stop = stop
        self.client = KgymClient(cfg.server, timeout=cfg.kgym_timeout)
        self.llm = ChatEndpoint(cfg.base_url, cfg.api_key, timeout=cfg.llm_timeout,
                                retries=cfg.llm_retries, backoff=cfg.llm_backoff, stop=stop)
        self.eid: Optional[str] = None
        self.messages: List[Dict[str, Any]] = []
        self.tokens = {"prompt": 0, "completion": 0, "total": 0}
        self.turns = 0
        self.steps = 0
        self.llm_requests = 0
        self.llm_retries = 0
        self.malformed = 0
        self.reward: Optional[float] = None
        self.last_info: Dict[str, Any] = {}
        self.done = False
        self.terminated = False
        self.truncated = False
        self.status = "running"
        self.error: Optional[str] = None
        self.submitted_by: Optional[str] = None  # "model" or the agent's reason
        self.traj_path = os.path.join(cfg.out, "trajectories", self.name + ".jsonl")
        self.ws_rel = os.path.join("workspaces", self.name)
        self._traj = None

    # -- trajectory file --

    def _write(self, rec: Dict[str, Any]) -> None:
        rec = dict(rec)
        rec.setdefault("ts", round(time.time(), 3))
        self._traj.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
        self._traj.flush()

    # -- the episode --

    def run(self) -> Dict[str, Any]:
        t0 = time.monotonic()
        os.makedirs(os.path.dirname(self.traj_path), exist_ok=True)
        with open(self.traj_path, "w", encoding="utf-8") as traj:
            self._traj = traj
            try:
                self._create()
                self._loop()
            except Interrupted:
                self._close()
                raise
            except LLMError as e:
                self._fail(f"model endpoint: {e}", submit=True)
            except KgymError as e:
                self._fail(f"kgym-env: {e}", submit=False)
            except Exception as e:  # noqa: BLE001 - an episode's bug must not end the run
                self._fail(f"agent: {type(e).__name__}: {e}", submit=False)
            workspace = self._download() if self.eid else None
            self._close()
            summary = self.summary(time.monotonic() - t0, workspace)
            self._write(dict(summary, type="summary"))
        self.client.close()
        return summary

    def _fail(self, message: str, submit: bool) -> None:
        self.error = message
        self.status = "error"
        self._write({"type": "error", "turn": self.turns, "error": message})
        # The workspace was changed: it still gets its final evaluation (Submit), as in the
        # paper. An untouched workspace is not worth an evaluation.
        if submit and self.eid and self.steps > 0 and not self.done and not self.stop.is_set():
            try:
                self._submit("error")
            except KgymError as e:
                self._write({"type": "error", "turn": self.turns,
                             "error": f"kgym-env: the final Submit failed: {e}"})

    def _create(self) -> None:
        options = dict(self.cfg.options)
        options.setdefault("max_steps", self.cfg.max_turns + 1)  # +1: room for the final Submit
        seed = None if self.cfg.seed is None else self.cfg.seed + self.n
        deadline = time.monotonic() + self.cfg.capacity_wait
        while True:
            try:
                ep = self.client.create_episode(self.task_id, seed=seed, options=options,
                                                tags={"agent": PROG, "model": self.cfg.model,
                                                      "n": self.n})
                break
            except CapacityError as e:
                # the server is full: wait (its Retry-After) and try again, within capacity_wait
                wait = e.retry_after if e.retry_after is not None else 5.0
                if time.monotonic() + wait > deadline:
                    raise
                if self.stop.wait(wait):
                    raise Interrupted() from None
        self.eid = ep["episode_id"]
        obs = ep.get("observation") or {}
        user = obs.get("content") or f"Task {self.task_id}."
        if (obs.get("data") or {}).get("variant") == "cpu":
            user += CPU_NOTE
        system = (self.cfg.system_prompt.replace("{max_turns}", str(self.cfg.max_turns))
                  .replace("{task_id}", self.task_id))
        if self.cfg.tool_mode == "text":
            system += TEXT_TOOLS_PROMPT + "\n".join(
                json.dumps(t.get("function", t), ensure_ascii=False) for t in self.tools_openai)
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        self._write({"type": "start", "task_id": self.task_id, "n": self.n,
                     "episode_id": self.eid, "model": self.cfg.model, "info": ep.get("info"),
                     "observation": obs, "tool_mode": self.cfg.tool_mode,
                     "tools": [t.get("function", {}).get("name") for t in self.tools_openai],
                     "messages": list(self.messages)})

    def _request_body(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {"model": self.cfg.model, "messages": self.messages}
        if self.cfg.tool_mode == "native":
            body["tools"] = self.tools_openai
        if self.cfg.temperature is not None:
            body["temperature"] = self.cfg.temperature
        if self.cfg.top_p is not None:
            body["top_p"] = self.cfg.top_p
        if self.cfg.max_tokens is not None:
            body["max_tokens"] = self.cfg.max_tokens
        body.update(self.cfg.extra_body)
        return body

    def _loop(self) -> None:
        no_call_streak = 0
        while not self.done:
            if self.stop.is_set():
                raise Interrupted()
            if self.turns >= self.cfg.max_turns:
                self._submit("max_turns")
                return
            turn = self.turns
            self.llm_requests += 1
            try:
                resp, failures = self.llm.complete(
                    self._request_body(),
                    {"X-Kgym-Episode-Id": self.eid or "", "X-Kgym-Task-Id": self.task_id})
            except LLMError as e:
                fails = getattr(e, "failures", [])
                self.llm_requests += len(fails)
                self.llm_retries += len(fails)
                if self.stop.is_set():
                    raise Interrupted() from None
                self._write({"type": "llm_error", "turn": turn, "error": str(e)[:2000],
                             "status": e.status, "retries": fails})
                raise
            self.llm_requests += len(failures)
            self.llm_retries += len(failures)
            self.turns += 1
            choice = resp["choices"][0]
            raw = choice["message"]
            usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else None
            if usage:
                for key, field in (("prompt", "prompt_tokens"), ("completion", "completion_tokens"),
                                   ("total", "total_tokens")):
                    v = usage.get(field)
                    if isinstance(v, (int, float)):
                        self.tokens[key] += int(v)
            content = raw.get("content")
            if content is not None and not isinstance(content, str):
                content = json.dumps(content)  # content parts: kept as text
            native = raw.get("tool_calls")
            rec: Dict[str, Any] = {"type": "turn", "turn": turn,
                                   "finish_reason": choice.get("finish_reason"),
                                   "usage": usage, "response_message": raw,
                                   "llm_retries": failures}
            if native:
                calls, echoed = parse_native_tool_calls(native, self.tool_names, turn)
                assistant = {"role": "assistant", "content": content, "tool_calls": echoed}
                mode = "native"
            elif content and "<tool_call>" in content:
                calls = parse_text_tool_calls(content, self.tool_names, turn)
                assistant = {"role": "assistant", "content": content}
                mode = "text"
            else:
                calls, mode = [], "none"
                assistant = {"role": "assistant", "content": content or ""}
            added = [assistant]
            if not calls:
                no_call_streak += 1
                rec.update(mode=mode, calls=[])
                if no_call_streak >= 2:
                    self.messages.extend(added)
                    rec["messages"] = added
                    self._write(rec)
                    self._submit("model_stopped")
                    return
                nudge = {"role": "user", "content": NO_TOOL_CALL_NUDGE}
                added.append(nudge)
                self.messages.extend(added)
                rec["messages"] = added
                self._write(rec)
                continue
            no_call_streak = 0
            results, step = self._run_calls(calls)
            if mode == "native":
                for call, text in zip(calls, results):
                    added.append({"role": "tool", "tool_call_id": call.call_id, "content": text})
            else:
                added.append({"role": "user", "content": "\n".join(
                    f"<tool_response>\n{text}\n</tool_response>" for text in results)})
            self.messages.extend(added)
            rec.update(mode=mode, calls=[c.as_record() for c in calls], messages=added)
            if step is not None:
                rec.update(reward=step.get("reward"), terminated=step.get("terminated"),
                           truncated=step.get("truncated"), info=step.get("info"))
            self._write(rec)
            if step is not None and self.done and self.submitted_by is None:
                # the model's own Submit, or the server's turn/time limit (which evaluates too)
                self.submitted_by = "model" if self.terminated else "limit"

    def _run_calls(self, calls: List[Call]) -> Tuple[List[str], Optional[Dict[str, Any]]]:
        """Runs the valid calls as one kgym step (one turn, at most max_actions of them) and
        returns, for every call in order, the text the model gets back, with the step."""
        results: List[Optional[str]] = [None] * len(calls)
        runnable = []
        for i, c in enumerate(calls):
            if c.error is not None:
                self.malformed += 1
                results[i] = c.error
            elif len(runnable) >= self.max_actions:
                results[i] = (f"Error: at most {self.max_actions} tool calls run per turn; this "
                              "one was not run. Send it again in your next reply.")
            else:
                runnable.append(i)
        step = None
        if runnable:
            try:
                step = self.client.step(self.eid, actions=[calls[i].action for i in runnable])
            except (BadRequest,) as e:
                # the server refused the turn as a whole (e.g. a Write larger than its body
                # limit): the model is told and may try otherwise; nothing ran
                for i in runnable:
                    results[i] = (f"Error: the environment refused this turn ({e.code}: "
                                  f"{e.message}); none of its calls ran.")
                return [r or "" for r in results], None
            self.steps += 1
            observations = step.get("observations")
            if observations is None:
                observations = [step.get("observation")]
            for i, obs in zip(runnable, observations):
                obs = obs or {}
                results[i] = obs.get("content") or ("(error)" if obs.get("is_error") else "(ok)")
            self._after_step(step)
        return [r if r is not None else "" for r in results], step

    def _after_step(self, step: Dict[str, Any]) -> None:
        self.last_info = step.get("info") or {}
        if step.get("terminated") or step.get("truncated"):
            self.done = True
            self.terminated = bool(step.get("terminated"))
            self.truncated = bool(step.get("truncated"))
            self.reward = step.get("reward")
            self.status = "truncated" if self.truncated and not self.terminated else "submitted"

    def _submit(self, reason: str) -> None:
        """The agent's own Submit: the final evaluation of the workspace as it is."""
        step = self.client.step(self.eid, action={"tool": "Submit", "args": {},
                                                  "call_id": "kgym-agent-submit"})
        self.steps += 1
        self._after_step(step)
        obs = step.get("observation") or (step.get("observations") or [{}])[0]
        self._write({"type": "submit", "reason": reason, "turn": self.turns,
                     "reward": step.get("reward"), "terminated": step.get("terminated"),
                     "truncated": step.get("truncated"), "observation": obs,
                     "info": step.get("info")})
        self.submitted_by = reason
        if self.status != "error":
            self.status = reason

    def _download(self) -> Optional[str]:
        """The workspace's solution files (model_new.py, kernels/ two levels deep: what
        kgym-bench uploads) into workspaces/<name>/; its path relative to --out, or None."""
        dest = os.path.join(self.cfg.out, self.ws_rel)
        tmp = dest + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            files: List[Tuple[str, bytes]] = []
            try:
                files.append(("model_new.py", self.client.read_file(self.eid, "model_new.py")))
            except NotFound:
                pass

            def walk(rel: str, depth: int) -> None:
                try:
                    listing = self.client.list_files(self.eid, rel)
                except (NotFound, BadRequest):
                    return
                for e in listing.get("entries", []):
                    name = e.get("name", "")
                    if not name or name.startswith(".") or "/" in name:
                        continue
                    sub = f"{rel}/{name}"
                    if e.get("type") == "file":
                        files.append((sub, self.client.read_file(self.eid, sub)))
                    elif e.get("type") == "dir" and depth < 2:
                        walk(sub, depth + 1)

            walk("kernels", 0)
        except KgymError as e:
            self._write({"type": "error", "turn": self.turns,
                         "error": f"kgym-env: downloading the workspace failed: {e}"})
            return None
        if not files:
            return None
        for rel, data in files:
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
        return self.ws_rel

    def _close(self) -> None:
        if self.eid and not self.cfg.keep_episodes:
            try:
                self.client.close_episode(self.eid)
            except KgymError:
                pass  # closing is a courtesy: the reaper frees it anyway

    def summary(self, wall_s: float, workspace: Optional[str]) -> Dict[str, Any]:
        comps = self.last_info.get("reward_components") if self.done else None
        comps = comps if isinstance(comps, dict) else {}
        return {"task_id": self.task_id, "n": self.n, "episode_id": self.eid,
                "status": self.status, "reward": self.reward, "turns": self.turns,
                "steps": self.steps, "terminated": self.terminated, "truncated": self.truncated,
                "submitted_by": self.submitted_by, "eval_status": comps.get("eval_status"),
                "correct": comps.get("correct"), "speedup_eager": comps.get("speedup_eager"),
                "speedup_compile": comps.get("speedup_compile"), "tokens": dict(self.tokens),
                "llm_requests": self.llm_requests, "llm_retries": self.llm_retries,
                "malformed_calls": self.malformed, "error": self.error,
                "model": self.cfg.model, "wall_s": round(wall_s, 3),
                "trajectory": os.path.relpath(self.traj_path, self.cfg.out),
                "workspace": workspace}


# ---- a run of many episodes ------------------------------------------------------------------

def _read_jsonl(path: str) -> List[Dict[str, Any]]:
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn last line of a killed run
                if isinstance(rec, dict):
                    out.append(rec)
    except FileNotFoundError:
        pass
    return out


def _reward_key(rec: Dict[str, Any]) -> Tuple[int, float, int]:
    r = rec.get("reward")
    return (0, 0.0, 0) if not isinstance(r, (int, float)) else (1, float(r), -int(rec["n"]))


def write_solutions(out: str) -> Dict[str, str]:
    """solutions/: for each task, the workspace of its best episode (highest reward, then the
    lowest n), at the path kgym-bench reads. Rebuilt from summary.jsonl (the latest line per
    episode wins) after every run, so a resumed run's solutions cover all its episodes."""
    latest: Dict[Tuple[str, int], Dict[str, Any]] = {}
    for rec in _read_jsonl(os.path.join(out, "summary.jsonl")):
        if "task_id" in rec and "n" in rec:
            latest[(rec["task_id"], int(rec["n"]))] = rec
    best: Dict[str, Dict[str, Any]] = {}
    for rec in latest.values():
        ws = rec.get("workspace")
        if not ws or not os.path.isfile(os.path.join(out, ws, "model_new.py")):
            continue
        cur = best.get(rec["task_id"])
        if cur is None or _reward_key(rec) > _reward_key(cur):
            best[rec["task_id"]] = rec
    root = os.path.join(out, "solutions")
    chosen: Dict[str, str] = {}
    for task_id, rec in sorted(best.items()):
        try:
            rel = solution_rel_path(task_id)
        except ValueError:
            continue
        dest = os.path.join(root, rel)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(os.path.join(out, rec["workspace"]), dest)
        chosen[task_id] = rec["workspace"]
    os.makedirs(root, exist_ok=True)
    return chosen


def _tool_names(tools_openai: List[Dict[str, Any]]) -> Dict[str, str]:
    names = {}
    for t in tools_openai:
        name = (t.get("function") or {}).get("name") if isinstance(t, dict) else None
        if isinstance(name, str):
            names[name.lower()] = name
    return names


def run_agent(cfg: AgentConfig, task_ids: List[str],
              stop: Optional[threading.Event] = None,
              log=None) -> Tuple[int, List[Dict[str, Any]]]:
    """Runs episodes_per_task episodes of every task, ``parallel`` at a time (threads, one
    KgymClient each). Returns (exit status, the summaries of the episodes run now)."""
    stop = stop or threading.Event()
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    os.makedirs(cfg.out, exist_ok=True)
    summary_path = os.path.join(cfg.out, "summary.jsonl")

    with KgymClient(cfg.server, timeout=60.0, retries=2) as probe:
        try:
            probe.health()
            tools_openai = probe.tools("openai")
            info = probe.info()
        except TransportError as e:
            raise UsageError(f"the kgym-env server {cfg.server} is unreachable: {e}") from None
        except KgymError as e:
            raise UsageError(f"the kgym-env server {cfg.server} answered an error: {e}") from None
    max_actions = int((info.get("limits") or {}).get("max_actions_per_turn") or 16)
    tool_names = _tool_names(tools_openai)
    if not tool_names:
        raise UsageError(f"{cfg.server}/v1/tools lists no tools")
    ChatEndpoint(cfg.base_url, cfg.api_key, timeout=min(cfg.llm_timeout, 30.0)).preflight()

    done = set()
    if cfg.resume:
        for rec in _read_jsonl(summary_path):
            if rec.get("status") != "error" and "task_id" in rec and "n" in rec:
                done.add((rec["task_id"], int(rec["n"])))
    elif _read_jsonl(summary_path):
        raise UsageError(f"{cfg.out} already holds a run (summary.jsonl): pass --resume to "
                         "continue it, or choose another --out")
    with open(os.path.join(cfg.out, "run.json"), "w", encoding="utf-8") as f:
        json.dump({"server": cfg.server, "base_url": cfg.base_url, "model": cfg.model,
                   "tasks": task_ids, "episodes_per_task": cfg.episodes_per_task,
                   "max_turns": cfg.max_turns, "temperature": cfg.temperature,
                   "max_tokens": cfg.max_tokens, "options": cfg.options,
                   "tool_mode": cfg.tool_mode, "started": time.strftime(
                       "%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f, indent=1)

    todo = [(t, n) for t in task_ids for n in range(cfg.episodes_per_task)
            if (t, n) not in done]
    total = len(todo)
    if done:
        log(f"{PROG}: {len(done)} episodes already done, {total} to run")
    work: "queue.Queue[Tuple[str, int]]" = queue.Queue()
    for item in todo:
        work.put(item)
    lock = threading.Lock()
    results: List[Dict[str, Any]] = []
    t_start = time.monotonic()

    def worker() -> None:
        while not stop.is_set():
            try:
                task_id, n = work.get_nowait()
            except queue.Empty:
                return
            ep = Episode(cfg, task_id, n, tools_openai, tool_names, max_actions, stop)
            try:
                summary = ep.run()
            except Interrupted:
                return
            except Exception as e:  # noqa: BLE001 - e.g. the out folder became unwritable
                summary = ep.summary(0.0, None)
                summary.update(status="error", error=f"agent: {type(e).__name__}: {e}")
            with lock:
                with open(summary_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(summary, ensure_ascii=False) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                results.append(summary)
                k = len(results)
            if not cfg.quiet:
                r = summary["reward"]
                reward = "-" if r is None else f"{r:g}"
                err = f" ({summary['error'][:200]})" if summary.get("error") else ""
                log(f"[{k}/{total}] {task_id} #{n} {summary['episode_id'] or '-'}: "
                    f"{summary['status']}, reward {reward}, {summary['turns']} turns, "
                    f"{summary['tokens']['total']} tokens, {summary['wall_s']:.1f} s | elapsed "
                    f"{time.monotonic() - t_start:.0f} s{err}")

    threads = [threading.Thread(target=worker, name=f"{PROG}-{i}", daemon=True)
               for i in range(max(1, min(cfg.parallel, total or 1)))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)  # a timed join keeps the main thread responsive to Ctrl-C
    chosen = write_solutions(cfg.out)
    if stop.is_set():
        log(f"{PROG}: interrupted after {len(results)} of {total} episodes; run again with "
            "--resume to continue")
        return EXIT_INTERRUPTED, results
    errors = [s for s in results if s["status"] == "error"]
    rewards = [s["reward"] for s in results if isinstance(s.get("reward"), (int, float))]
    mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
    log(f"{PROG}: {len(results)} episodes, {len(errors)} errors, mean reward {mean}; "
        f"{len(chosen)} solutions in {os.path.join(cfg.out, 'solutions')}")
    return (EXIT_EPISODE_ERRORS if errors else EXIT_OK), results


# ---- command line ----------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 1, like kgym-bench
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run kgym-env episodes with an OpenAI-compatible chat-completions endpoint "
                    "(vLLM, SGLang, OpenAI, ...), write each trajectory as JSONL and the final "
                    "workspaces as a kgym-bench --solutions folder.",
        epilog="""\
outputs (under --out):
  trajectories/<task>__<n>.jsonl  start, one line per turn (messages, usage, reward, info),
                                  submit, summary
  summary.jsonl                   one line per episode: task, episode id, status, reward,
                                  turns, tokens
  workspaces/<task>__<n>/         each episode's final model_new.py and kernels/
  solutions/                      the best workspace per task, for kgym-bench run --solutions

an episode ends when the model calls Submit, the server's turn limit is reached, or the agent
submits for it: at --max-turns, or after two replies in a row without a tool call.
statuses: submitted, truncated, max_turns, model_stopped, error.

example (a full KernelBench evaluation of a served model):
  python -m kgym.agent --server http://127.0.0.1:8080 --base-url http://127.0.0.1:8000/v1 \\
      --model Qwen/Qwen3-8B --suite kernelbench --levels 1,2 --parallel 16 --out runs/q3
  kgym-bench run --kernelbench KB.jsonl --levels 1,2 --solutions runs/q3/solutions \\
      --out results/q3

exit status: 0 done, 1 usage or setup error (bad arguments, unreachable server or endpoint),
2 some episodes ended in an error (see summary.jsonl), 3 interrupted (rerun with --resume).""")
    g = p.add_argument_group("endpoints")
    g.add_argument("--server", default="http://127.0.0.1:8080",
                   help="kgym-env URL (default %(default)s)")
    g.add_argument("--base-url", required=True,
                   help="OpenAI-compatible API base, e.g. http://127.0.0.1:8000/v1 "
                        "(the agent POSTs BASE/chat/completions)")
    g.add_argument("--model", required=True, help="the model name sent to the endpoint")
    g.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable holding the API key (sent as a Bearer token)")
    g = p.add_argument_group("tasks (one of)")
    g.add_argument("--tasks", metavar="ID,ID", help="task ids, comma-separated")
    g.add_argument("--suite", help="every task of this suite on the server (e.g. kernelbench)")
    g.add_argument("--levels", metavar="1,2", help="with --suite: only these levels")
    g.add_argument("--task-file", metavar="F",
                   help="a file of task ids, one a line (# comments), or JSONL with task_id/id")
    g = p.add_argument_group("episodes")
    g.add_argument("--episodes-per-task", type=int, default=1, metavar="N")
    g.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="episodes run at once (default 1)")
    g.add_argument("--max-turns", type=int, default=200, metavar="N",
                   help="model turns per episode before the agent submits (default 200, the "
                        "paper's evaluation limit)")
    g.add_argument("--variant", choices=("gpu", "cpu"),
                   help="the episode variant (reset option; cpu: CPU-sized tasks, for tests)")
    g.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                   help="a reset option, e.g. --option reward_on='\"best\"' (repeatable)")
    g.add_argument("--seed", type=int, help="episode seeds: SEED + n (default: server-drawn)")
    g.add_argument("--keep-episodes", action="store_true",
                   help="leave the episodes open on the server (default: closed when done)")
    g = p.add_argument_group("model")
    g.add_argument("--temperature", type=float)
    g.add_argument("--top-p", type=float)
    g.add_argument("--max-tokens", type=int, metavar="N", help="per reply")
    g.add_argument("--system-prompt", metavar="FILE",
                   help="system prompt file ({max_turns} and {task_id} are filled in)")
    g.add_argument("--tool-mode", choices=("native", "text"), default="native",
                   help="native: send the tool list (tool_calls; <tool_call> blocks in the text "
                        "are understood too); text: describe the tools in the system prompt "
                        "and parse <tool_call> blocks only")
    g.add_argument("--extra-body", metavar="JSON",
                   help="fields merged into every request, e.g. "
                        "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}'")
    g.add_argument("--llm-timeout", type=float, default=600.0, metavar="S",
                   help="seconds one completion may take (default %(default)s)")
    g.add_argument("--llm-retries", type=int, default=8, metavar="N",
                   help="retries of a failed completion (429/5xx/transport) before the "
                        "episode is recorded as an error (default %(default)s)")
    g.add_argument("--llm-backoff", type=float, default=1.0, metavar="S",
                   help="first retry delay, doubled per retry up to 60 s; a Retry-After "
                        "header overrides it (default %(default)s)")
    g = p.add_argument_group("output")
    g.add_argument("--out", default="runs/agent", metavar="DIR",
                   help="output folder (default %(default)s)")
    g.add_argument("--resume", action="store_true",
                   help="continue the run in --out: skip the episodes in summary.jsonl "
                        "(episodes that ended in an error run again)")
    g.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _positive(p: argparse.ArgumentParser, name: str, v: Optional[float], zero_ok=False) -> None:
    if v is not None and (v < 0 or (v == 0 and not zero_ok)):
        p.error(f"{name} must be {'>= 0' if zero_ok else '> 0'}, got {v}")


def select_tasks(args: argparse.Namespace, server: str) -> List[str]:
    """The task ids of --tasks, --task-file or --suite/--levels (checked against the server)."""
    given = [x for x in (args.tasks, args.suite, args.task_file) if x]
    if len(given) != 1:
        raise UsageError("give exactly one of --tasks, --suite, --task-file")
    if args.levels and not args.suite:
        raise UsageError("--levels goes with --suite")
    try:
        with KgymClient(server, timeout=60.0, retries=2) as c:
            if args.tasks or args.task_file:
                ids = args.tasks.split(",") if args.tasks else _read_task_file(args.task_file)
                ids = [i.strip() for i in ids if i.strip()]
                if not ids:
                    raise UsageError("no task ids given")
                for tid in ids:
                    try:
                        c.task(tid)
                    except NotFound:
                        raise UsageError(f"task {tid!r} is not on the server {server}") from None
                return list(dict.fromkeys(ids))
            levels: List[Optional[int]] = [None]
            if args.levels:
                try:
                    levels = [int(x) for x in args.levels.split(",") if x.strip()]
                except ValueError:
                    raise UsageError(f"--levels {args.levels!r}: expected e.g. 1,2") from None
            ids = []
            for level in levels:
                offset = 0
                while True:
                    page = c.tasks(suite=args.suite, level=level, limit=500, offset=offset)
                    batch = page.get("tasks") or []
                    ids += [t["id"] for t in batch]
                    offset += len(batch)
                    if not batch or offset >= int(page.get("count", 0)):
                        break
            if not ids:
                raise UsageError(f"the server has no tasks of suite {args.suite!r}"
                                 + (f" at levels {args.levels}" if args.levels else ""))
            return list(dict.fromkeys(ids))
    except TransportError as e:
        raise UsageError(f"the kgym-env server {server} is unreachable: {e}") from None


def _read_task_file(path: str) -> List[str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise UsageError(f"--task-file {path}: {e.strerror or e}") from None
    ids = []
    for i, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            try:
                doc = json.loads(line)
                ids.append(str(doc.get("task_id") or doc["id"]))
            except (ValueError, KeyError, AttributeError):
                raise UsageError(f"--task-file {path}:{i}: a JSON line needs task_id or id") \
                    from None
        else:
            ids.append(line)
    return ids


def config_from_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> AgentConfig:
    for name in ("episodes_per_task", "parallel", "max_turns", "max_tokens"):
        _positive(p, "--" + name.replace("_", "-"), getattr(args, name))
    for name in ("llm_timeout", "llm_backoff"):
        _positive(p, "--" + name.replace("_", "-"), getattr(args, name))
    _positive(p, "--llm-retries", args.llm_retries, zero_ok=True)
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise UsageError(f"--api-key-env {args.api_key_env}: that variable is not set")
    options: Dict[str, Any] = {}
    for item in args.option:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--option {item!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(val)
        except ValueError:
            options[key] = val  # a bare string: --option reward_on=best
    if args.variant:
        options["variant"] = args.variant
    extra = {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except ValueError as e:
            raise UsageError(f"--extra-body is not JSON: {e}") from None
        if not isinstance(extra, dict):
            raise UsageError("--extra-body must be a JSON object")
    system = DEFAULT_SYSTEM_PROMPT
    if args.system_prompt:
        try:
            with open(args.system_prompt, encoding="utf-8") as f:
                system = f.read()
        except OSError as e:
            raise UsageError(f"--system-prompt {args.system_prompt}: {e.strerror or e}") from None
    return AgentConfig(server=args.server, base_url=args.base_url, model=args.model,
                       api_key=api_key, out=args.out, max_turns=args.max_turns,
                       temperature=args.temperature, top_p=args.top_p,
                       max_tokens=args.max_tokens, extra_body=extra, system_prompt=system,
                       tool_mode=args.tool_mode, episodes_per_task=args.episodes_per_task,
                       parallel=args.parallel, seed=args.seed, options=options,
                       resume=args.resume, llm_timeout=args.llm_timeout,
                       llm_retries=args.llm_retries, llm_backoff=args.llm_backoff,
                       keep_episodes=args.keep_episodes, quiet=args.quiet)


def main(argv: Optional[List[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    stop = threading.Event()
    try:
        cfg = config_from_args(p, args)
        ChatEndpoint(cfg.base_url)  # validates --base-url before anything is contacted
        tasks = select_tasks(args, cfg.server)
        previous = signal.getsignal(signal.SIGINT)

        def on_sigint(signum, frame):
            if stop.is_set():
                raise KeyboardInterrupt  # a second Ctrl-C: stop now
            stop.set()
            print(f"{PROG}: stopping: the turns in flight finish, then the run ends "
                  "(Ctrl-C again to quit at once)", file=sys.stderr, flush=True)

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, on_sigint)
        try:
            rc, _ = run_agent(cfg, tasks, stop)
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, previous)
        return rc
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
