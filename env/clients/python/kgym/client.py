"""A dependency-free client of kgym-env's HTTP API (stdlib ``http.client``, keep-alive).

``KgymClient`` holds one persistent HTTP/1.1 connection: kgym-env answers a tool step in a fraction
of a millisecond, so a new TCP connection per request would cost more than the step. When the
server has closed the kept-alive connection (idle timeout, restart), the next request reconnects
by itself.

Retries. A request is retried, with exponential backoff and jitter, up to ``retries`` times, when:

* the server says it is full or going away (429 ``CAPACITY_REACHED``, 503 ``DRAINING``), or that
  the episode is busy with another request (409 ``EPISODE_BUSY``): nothing ran, so a retry is
  always safe. A ``Retry-After`` header is honoured (capped at ``max_retry_after`` seconds);
* the connection failed or timed out, or the server answered a 5xx it marks ``retryable``.
  Then the request may or may not have run. That is safe only because every mutating request
  carries an ``Idempotency-Key`` (the client makes one per call; the server replays the stored
  response of a key it has already run instead of running it again). So a step retried after a
  lost reply is applied once, never twice.

One ``KgymClient`` is not meant to be shared by threads (a lock serialises its requests if it is);
for many concurrent episodes use one client per thread, or ``kgym.aio.AsyncKgymClient``.
"""
import http.client
import json
import random
import select
import socket
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

from .errors import (CapacityError, KgymError, TransportError, BadRequest, error_from_response)

__all__ = ["KgymClient", "DEFAULT_URL", "DEFAULT_TIMEOUT"]

DEFAULT_URL = "http://127.0.0.1:8080"
# One request may legitimately run for minutes: a Bash call up to 600 s, an evaluation (Verify,
# Profile, Submit) up to the server's --eval-timeout (900 s). The timeout is per socket read.
DEFAULT_TIMEOUT = 1200.0
USER_AGENT = "kgym-python/0.1"


def new_key() -> str:
    """A fresh Idempotency-Key (random, 128 bits)."""
    return "kgym-" + uuid.uuid4().hex


def _quote_id(value: str) -> str:
    """An episode id as one path segment."""
    return quote(str(value), safe="")


def _quote_path(value: str) -> str:
    """A task id or a workspace path: slashes kept, everything else that HTTP would misread
    (space, %, ?, #, non-ASCII) percent-encoded; the server decodes %XX."""
    return quote(str(value), safe="/")


def _ws_path(path: str) -> str:
    """A workspace path for the file routes: ``/workspace/x`` (as the agent sees it) and ``x``
    are the same file, as for the tools."""
    p = str(path)
    if p == "/workspace" or p.startswith("/workspace/"):
        return _quote_path(p[len("/workspace/"):])
    # any other absolute path goes as it is (after the route's slash): the server refuses it
    # (PATH_OUTSIDE_WORKSPACE) rather than the client quietly reading a workspace file instead
    return _quote_path(p)


class Request:
    """One API call, independent of the transport (the sync and async clients share these).

    ``parse``: "json" (the body parsed), "bytes" (raw), "ndjson" (a list, one value a line),
    "file" / "listing" (workspace file routes). ``ok``: extra statuses that are answers, not
    errors (``/v1/health`` answers 503 with its normal body while the server drains).
    """

    __slots__ = ("method", "path", "body", "headers", "idempotent", "parse", "ok")

    def __init__(self, method: str, path: str, body: Any = None,
                 headers: Optional[Dict[str, str]] = None, idempotent: Optional[bool] = None,
                 parse: str = "json", ok: Tuple[int, ...] = (), raw_body: bool = False):
        self.method = method
        self.path = path
        self.headers = dict(headers or {})
        if body is None or raw_body:
            self.body = body
        else:
            self.body = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            self.headers.setdefault("Content-Type", "application/json")
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "DELETE") or "Idempotency-Key" in self.headers
        self.idempotent = idempotent
        self.parse = parse
        self.ok = ok


class Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes):
        self.status = status
        self.headers = headers  # lower-cased names
        self.body = body


def parse_url(url: str) -> Tuple[str, str, int, str]:
    """(scheme, host, port, base path) of the server's URL."""
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"kgym: unsupported URL scheme {parts.scheme!r} in {url!r}")
    if not parts.hostname:
        raise ValueError(f"kgym: no host in URL {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


class _Api:
    """Every API method, written once: each builds a ``Request`` and hands it to
    ``self._execute``, which the sync client runs and returns and the async client returns as a
    coroutine. So ``client.step(...)`` and ``await aclient.step(...)`` are the same code."""

    def _execute(self, req: Request) -> Any:  # pragma: no cover - implemented by subclasses
        raise NotImplementedError

    # ---- server ------------------------------------------------------------------------------

    def health(self):
        """``GET /v1/health``: ``{status, active_episodes, max_episodes, gpus, sandbox, ...}``.
        While the server drains, it answers 503 with ``status: "draining"``: returned, not
        raised, since that is the health report asked for."""
        return self._execute(Request("GET", "/v1/health", ok=(503,)))

    def info(self):
        """``GET /v1/info``: version, limits, tool names, task count, sandbox and durability."""
        return self._execute(Request("GET", "/v1/info"))

    def tools(self, format: str = "openai"):
        """``GET /v1/tools``: the tools' JSON schemas as a list, ready for an LLM's tool list
        (``format``: "openai" or "anthropic")."""
        return self._execute(Request("GET", "/v1/tools?" + urlencode({"format": format}),
                                     parse="tools"))

    def tasks(self, suite: Optional[str] = None, level: Optional[int] = None,
              limit: Optional[int] = None, offset: Optional[int] = None):
        """``GET /v1/tasks``: ``{count, tasks: [{id, suite, level, name, ...}]}``."""
        q = {k: v for k, v in (("suite", suite), ("level", level), ("limit", limit),
                               ("offset", offset)) if v is not None}
        return self._execute(Request("GET", "/v1/tasks" + ("?" + urlencode(q) if q else "")))

    def task(self, task_id: str):
        """``GET /v1/tasks/{id}``: one task with its ``code`` (model.py)."""
        return self._execute(Request("GET", "/v1/tasks/" + _quote_path(task_id)))

    def baselines(self, task_id: str, variant: str = "gpu", phase: Optional[str] = None):
        """``POST /v1/tasks/{id}/baselines``: the task's eager and torch.compile times, measured
        once per machine and cached (``phase="warmup"`` only compiles). 503
        ``BASELINES_UNAVAILABLE`` (a ``CapacityError``) when they cannot be measured here."""
        body = {"variant": variant}
        if phase is not None:
            body["phase"] = phase
        return self._execute(Request("POST", "/v1/tasks/" + _quote_path(task_id) + "/baselines",
                                     body, idempotent=True))

    def metrics(self) -> Any:
        """``GET /metrics``: the Prometheus text (str)."""
        return self._execute(Request("GET", "/metrics", parse="text"))

    # ---- episodes ----------------------------------------------------------------------------

    def create_episode(self, task_id: Optional[str] = None, seed: Optional[int] = None,
                       options: Optional[Dict[str, Any]] = None,
                       tags: Optional[Dict[str, Any]] = None,
                       idempotency_key: Optional[str] = None):
        """``POST /v1/episodes`` (Gym reset): ``{episode_id, observation, info}``. Sent with an
        Idempotency-Key, so a create retried after a lost reply never opens two episodes."""
        body = _episode_body(task_id, seed, options, tags)
        return self._execute(Request("POST", "/v1/episodes", body,
                                     {"Idempotency-Key": idempotency_key or new_key()}))

    def episodes(self, status: Optional[str] = None):
        """``GET /v1/episodes``: ``{count, episodes}``, closed and ended ones too."""
        q = "?" + urlencode({"status": status}) if status else ""
        return self._execute(Request("GET", "/v1/episodes" + q))

    def episode(self, eid: str):
        """``GET /v1/episodes/{id}``: the episode's state (status, task, seed, step, ...)."""
        return self._execute(Request("GET", "/v1/episodes/" + _quote_id(eid)))

    def reset_episode(self, eid: str, task_id: Optional[str] = None, seed: Optional[int] = None,
                      options: Optional[Dict[str, Any]] = None,
                      tags: Optional[Dict[str, Any]] = None,
                      idempotency_key: Optional[str] = None):
        """``POST /v1/episodes/{id}/reset``: a fresh workspace under the same id; the task and
        options stay unless given."""
        body = _episode_body(task_id, seed, options, tags)
        return self._execute(Request("POST", f"/v1/episodes/{_quote_id(eid)}/reset", body,
                                     {"Idempotency-Key": idempotency_key or new_key()}))

    def step(self, eid: str, action: Any = None, actions: Optional[List[Any]] = None,
             idempotency_key: Optional[str] = None):
        """``POST /v1/episodes/{id}/step``: one turn. ``action`` is one tool call (``{"tool",
        "args", "call_id"}``, an OpenAI ``tool_call`` or an Anthropic ``tool_use``, verbatim);
        ``actions`` a list of them (at most 16), answered as ``observations`` in order. Returns
        ``{observation(s), reward, terminated, truncated, info}``.

        The step carries an Idempotency-Key (a fresh one unless given), so when the reply is
        lost and the step retried, the server replays its answer instead of running it again.
        """
        if (action is None) == (actions is None):
            raise ValueError("kgym: step needs exactly one of action= or actions=")
        body = {"action": action} if actions is None else {"actions": list(actions)}
        return self._execute(Request("POST", f"/v1/episodes/{_quote_id(eid)}/step", body,
                                     {"Idempotency-Key": idempotency_key or new_key()}))

    def call_tool(self, eid: str, tool: str, args: Optional[Dict[str, Any]] = None,
                  idempotency_key: Optional[str] = None):
        """``POST /v1/episodes/{id}/tools/{Tool}`` with the tool's arguments: one turn of one
        call; the same response as ``step``."""
        return self._execute(Request("POST", f"/v1/episodes/{_quote_id(eid)}/tools/"
                                     f"{_quote_id(tool)}", dict(args or {}),
                                     {"Idempotency-Key": idempotency_key or new_key()}))

    def trajectory(self, eid: str):
        """``GET /v1/episodes/{id}/trajectory``: every reset, step, upload and close, as a list of
        dicts (one per JSONL line)."""
        return self._execute(Request("GET", f"/v1/episodes/{_quote_id(eid)}/trajectory",
                                     parse="ndjson"))

    def read_file(self, eid: str, path: str):
        """``GET .../files/{path}``: the file's bytes. A directory raises ``BadRequest``
        (``IS_DIRECTORY``): use ``list_files``."""
        return self._execute(Request("GET", f"/v1/episodes/{_quote_id(eid)}/files/"
                                     f"{_ws_path(path)}", parse="file"))

    def list_files(self, eid: str, path: str = ""):
        """``GET .../files/{dir}``: ``{path, entries: [{name, type, size}]}``."""
        return self._execute(Request("GET", f"/v1/episodes/{_quote_id(eid)}/files/"
                                     f"{_ws_path(path)}", parse="listing"))

    def write_file(self, eid: str, path: str, data: Any, idempotency_key: Optional[str] = None):
        """``PUT .../files/{path}``: atomic upload of ``data`` (bytes, or str as UTF-8);
        ``{path, bytes, created}``. Fixed files and paths outside the workspace are refused
        (``BadRequest``, 403)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("kgym: write_file data must be bytes or str")
        return self._execute(Request("PUT", f"/v1/episodes/{_quote_id(eid)}/files/"
                                     f"{_ws_path(path)}", bytes(data),
                                     {"Idempotency-Key": idempotency_key or new_key(),
                                      "Content-Type": "application/octet-stream"},
                                     raw_body=True))

    def close_episode(self, eid: str, purge: bool = False):
        """``DELETE /v1/episodes/{id}``: close (idempotent); ``purge`` removes the trajectory."""
        q = "?purge=true" if purge else ""
        return self._execute(Request("DELETE", f"/v1/episodes/{_quote_id(eid)}{q}"))

    def batch(self, requests: Iterable[Dict[str, Any]]):
        """``POST /v1/batch``: ``[{op: create|step|reset|delete|get, episode_id?, body?,
        idempotency_key?}]`` run in order (not atomically); returns the list of ``{status,
        body}``. Sub-request errors come back in that list, not as exceptions. Items that change
        state get an idempotency_key when they lack one, so the whole batch is safe to retry."""
        items = []
        for item in requests:
            item = dict(item)
            if item.get("op") in ("create", "step", "reset") and not item.get("idempotency_key"):
                item["idempotency_key"] = new_key()
            items.append(item)
        return self._execute(Request("POST", "/v1/batch", {"requests": items}, idempotent=True,
                                     parse="batch"))


class _RetryPolicy:
    """When and how long to wait before retrying (shared by the sync and async clients)."""

    def __init__(self, retries: int, backoff: float, max_backoff: float,
                 max_retry_after: float):
        if retries < 0:
            raise ValueError("kgym: retries must be >= 0")
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_retry_after = float(max_retry_after)
        self._rng = random.Random()

    def delay(self, req: Request, err: KgymError, attempt: int) -> Optional[float]:
        """Seconds to wait before attempt ``attempt + 1``, or None: do not retry."""
        if attempt >= self.retries:
            return None
        if isinstance(err, TransportError):
            safe = req.idempotent
        elif not err.retryable:
            return None
        else:
            # 429/503 and a busy episode: the server ran nothing. A retryable 500 may have
            # run part of the request: only with an idempotency key.
            safe = (isinstance(err, CapacityError) or err.code == "EPISODE_BUSY"
                    or req.idempotent)
        if not safe:
            return None
        if err.retry_after is not None:
            base = min(err.retry_after, self.max_retry_after)
            return base + self._rng.uniform(0, 0.1) * base  # never earlier than asked
        wait = min(self.backoff * (2 ** attempt), self.max_backoff)
        return wait * self._rng.uniform(0.5, 1.0)


def decode(req: Request, resp: Response) -> Any:
    """The parsed answer of a successful response, or raises its typed error."""
    ok = 200 <= resp.status < 300 or resp.status in req.ok
    if not ok:
        raise error_from_response(resp.status, resp.body, resp.headers.get("retry-after"),
                                  req.method, req.path)
    ctype = resp.headers.get("content-type", "")
    try:
        if req.parse == "bytes":
            return resp.body
        if req.parse == "text":
            return resp.body.decode("utf-8")
        if req.parse == "file":
            if ctype.startswith("application/json"):
                raise BadRequest(f"{req.path} is a directory: use list_files", status=resp.status,
                                 code="IS_DIRECTORY", method=req.method, path=req.path)
            return resp.body
        if req.parse == "listing":
            if not ctype.startswith("application/json"):
                raise BadRequest(f"{req.path} is a file: use read_file", status=resp.status,
                                 code="NOT_A_DIRECTORY", method=req.method, path=req.path)
            return json.loads(resp.body.decode("utf-8"))
        if req.parse == "ndjson":
            text = resp.body.decode("utf-8")
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        doc = json.loads(resp.body.decode("utf-8")) if resp.body else None
        if req.parse == "tools":
            return doc["tools"]
        if req.parse == "batch":
            return doc["responses"]
        return doc
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise TransportError(f"malformed {resp.status} response body: {e}", code="BAD_RESPONSE",
                             method=req.method, path=req.path) from None


def _peer_closed(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection was closed by the server (readable at EOF)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    # an idle HTTP/1.1 connection has nothing to read: readable means EOF, a reset or junk
    return bool(readable)


def _episode_body(task_id, seed, options, tags) -> Dict[str, Any]:
    """The body of a create or reset: only the fields given (absent ones keep the server's
    defaults, or on a reset the episode's current values)."""
    given = {"task_id": task_id, "seed": seed, "options": options, "tags": tags}
    return {k: v for k, v in given.items() if v is not None}


class KgymClient(_Api):
    """Synchronous client of one kgym-env server.

    ``url``: e.g. ``http://127.0.0.1:8080``. ``timeout``: seconds a socket read may wait (a step
    runs as long as its tool: keep it above the longest call). ``retries``: how many times a
    failed request is retried (see the module docstring). ``backoff``: the first backoff in
    seconds, doubled per retry up to ``max_backoff``; ``max_retry_after`` caps a server's
    Retry-After.
    """

    def __init__(self, url: str = DEFAULT_URL, timeout: Optional[float] = DEFAULT_TIMEOUT,
                 retries: int = 5, backoff: float = 0.25, max_backoff: float = 10.0,
                 max_retry_after: float = 60.0, headers: Optional[Dict[str, str]] = None):
        self.url = url
        self.scheme, self.host, self.port, self.base_path = parse_url(url)
        self.timeout = timeout
        self.policy = _RetryPolicy(retries, backoff, max_backoff, max_retry_after)
        self.extra_headers = dict(headers or {})
        self._conn: Optional[http.client.HTTPConnection] = None
        self._lock = threading.Lock()
        self._sleep: Callable[[float], None] = time.sleep
        self.connects = 0  # connections opened so far (tests and stats)

    @property
    def retries(self) -> int:
        return self.policy.retries

    # ---- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection (a later request opens a new one)."""
        with self._lock:
            self._drop()

    def __enter__(self) -> "KgymClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KgymClient({self.url!r})"

    # ---- transport -----------------------------------------------------------------------

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        conn.connect()
        try:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self.connects += 1
        return conn

    def _send_once(self, req: Request) -> Response:
        """One exchange on the kept-alive connection. A connection the server closed while it
        sat idle fails on reuse before any reply: that (and only that) is resent at once on a
        fresh connection when the request is idempotent (a closed socket seen before sending
        is simply replaced: that request never left)."""
        for fresh_try in (False, True):
            if self._conn is not None and _peer_closed(self._conn):
                self._drop()  # closed while idle: reconnect before sending anything
            reused = self._conn is not None
            try:
                if self._conn is None:
                    self._conn = self._connect()
                headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
                headers.update(self.extra_headers)
                headers.update(req.headers)
                self._conn.request(req.method, self.base_path + req.path, body=req.body,
                                   headers=headers)
                r = self._conn.getresponse()
                body = r.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    ConnectionAbortedError) as e:
                self._drop()
                if reused and not fresh_try and req.idempotent:
                    continue
                raise TransportError(f"connection to {self.url} lost: {e!r}", method=req.method,
                                     path=req.path) from None
            except socket.timeout:
                self._drop()
                raise TransportError(f"no answer from {self.url} within {self.timeout} s",
                                     code="TIMEOUT", method=req.method, path=req.path,
                                     timeout=True) from None
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise TransportError(f"cannot reach {self.url}: {e!r}", method=req.method,
                                     path=req.path) from None
            headers_out = {k.lower(): v for k, v in r.getheaders()}
            if r.will_close:
                self._drop()
            return Response(r.status, headers_out, body)
        raise AssertionError("unreachable")

    def _execute(self, req: Request) -> Any:
        attempt = 0
        while True:
            try:
                with self._lock:
                    resp = self._send_once(req)
                return decode(req, resp)
            except KgymError as err:
                wait = self.policy.delay(req, err, attempt)
                if wait is None:
                    raise
                attempt += 1
                self._sleep(wait)

    def request(self, method: str, path: str, body: Any = None,
                headers: Optional[Dict[str, str]] = None, idempotent: Optional[bool] = None,
                parse: str = "json") -> Any:
        """Any route, with this client's connection, errors and retries: ``body`` is sent as
        JSON (bytes as they are); ``idempotent`` says whether a lost reply may be retried
        (default: GET/DELETE, or an ``Idempotency-Key`` header)."""
        raw = isinstance(body, (bytes, bytearray))
        return self._execute(Request(method, path, body, headers, idempotent, parse,
                                     raw_body=raw))
