"""asyncio client and env: many concurrent episodes from one event loop.

Why a native asyncio HTTP/1.1 client (``asyncio.open_connection``) rather than the sync client
in threads (``asyncio.to_thread``): an RL rollout keeps hundreds of episodes open, most of them
waiting for a long tool call (a Compile, a Profile, a 60 s Bash). With threads, each waiting
request holds a thread of a bounded pool (``to_thread``'s default pool has ``min(32, cpus + 4)``:
on a 2-core machine 6 requests at once, the rest queued behind them), and a cancelled task cannot
stop its blocking request. Here a waiting request is a suspended coroutine on its own keep-alive
connection; cancelling it closes that connection. The request building, response decoding,
typed errors and retry policy are the sync client's own code (``kgym.client``), so both behave
the same.

Connections: a pool of at most ``max_connections`` kept-alive connections (default 256); a
request takes an idle one or opens one, and returns it when the exchange completed cleanly. kgym
serves one step per episode at a time, so one connection per concurrently stepping episode is
what the pool converges to.

    async with AsyncKgymClient(url) as client:
        envs = [AsyncKgymEnv(url, task_id=t, client=client, variant="cpu") for t in tasks]
        results = await asyncio.gather(*(run_episode(env) for env in envs))
"""
import asyncio
import ssl
from typing import Any, Dict, List, Optional, Tuple

from .client import (DEFAULT_TIMEOUT, DEFAULT_URL, USER_AGENT, Request, Response, _Api,
                     _RetryPolicy, decode, parse_url)
from .env import OBSERVATION_SCHEMA, _sample_observation, render_text, split_reset, split_step, \
    step_body
from .errors import Gone, KgymError, TransportError
from .spaces import ActionSpace, JsonSpace

__all__ = ["AsyncKgymClient", "AsyncKgymEnv"]

_MAX_HEADER_BYTES = 64 * 1024


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    def stale(self) -> bool:
        """Closed by the server while idle (EOF already received)."""
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a broken transport may fail; nothing to do
            pass


class _StaleConnection(Exception):
    """A reused connection failed before any byte of the reply."""


class AsyncKgymClient(_Api):
    """The ``KgymClient`` API as coroutines: ``await client.step(eid, action)``.

    ``timeout`` bounds each exchange (connect, send, the whole reply); the other arguments are
    ``KgymClient``'s. Safe to use from many tasks of one event loop at once.
    """

    def __init__(self, url: str = DEFAULT_URL, timeout: Optional[float] = DEFAULT_TIMEOUT,
                 retries: int = 5, backoff: float = 0.25, max_backoff: float = 10.0,
                 max_retry_after: float = 60.0, max_connections: int = 256,
                 headers: Optional[Dict[str, str]] = None):
        self.url = url
        self.scheme, self.host, self.port, self.base_path = parse_url(url)
        self.timeout = timeout
        self.policy = _RetryPolicy(retries, backoff, max_backoff, max_retry_after)
        self.extra_headers = dict(headers or {})
        if max_connections < 1:
            raise ValueError("kgym: max_connections must be >= 1")
        self.max_connections = max_connections
        self._idle: List[_Conn] = []
        self._slots: Optional[asyncio.Semaphore] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._closed = False
        self.connects = 0

    @property
    def retries(self) -> int:
        return self.policy.retries

    async def close(self) -> None:
        """Closes the idle connections (busy ones close when their request ends)."""
        self._closed = True
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()
        for c in idle:
            try:
                await c.writer.wait_closed()
            except Exception:  # noqa: BLE001
                pass

    async def __aenter__(self) -> "AsyncKgymClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---- transport -----------------------------------------------------------------------

    async def _open(self) -> _Conn:
        ctx = ssl.create_default_context() if self.scheme == "https" else None
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=ctx,
                                                       limit=_MAX_HEADER_BYTES)
        self.connects += 1
        return _Conn(reader, writer)

    def _request_bytes(self, req: Request) -> bytes:
        headers = {"Host": f"{self.host}:{self.port}", "User-Agent": USER_AGENT,
                   "Accept": "application/json", "Connection": "keep-alive"}
        headers.update(self.extra_headers)
        headers.update(req.headers)
        body = req.body or b""
        if req.body is not None or req.method in ("POST", "PUT"):
            headers["Content-Length"] = str(len(body))
        head = f"{req.method} {self.base_path}{req.path} HTTP/1.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        return head.encode("latin-1") + body

    @staticmethod
    async def _read_response(conn: _Conn) -> Tuple[Response, bool]:
        """(response, keep the connection) of one HTTP/1.1 reply."""
        r = conn.reader
        while True:
            line = await r.readline()
            if not line:
                raise _StaleConnection()
            parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
                raise TransportError(f"malformed status line {line[:80]!r}", code="BAD_RESPONSE")
            status = int(parts[1])
            headers: Dict[str, str] = {}
            while True:
                h = await r.readline()
                if not h:
                    raise TransportError("connection closed in the reply's headers")
                if h in (b"\r\n", b"\n"):
                    break
                name, _, value = h.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200:  # an interim reply: the real one follows
                continue
            break
        keep = parts[0] == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            chunks = []
            while True:
                size_line = await r.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await r.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(await r.readexactly(size))
                await r.readexactly(2)
            body = b"".join(chunks)
        elif "content-length" in headers:
            body = await r.readexactly(int(headers["content-length"]))
        elif status in (204, 304):
            body = b""
        else:
            body = await r.read()
            keep = False
        return Response(status, headers, body), keep

    async def _exchange(self, req: Request) -> Response:
        data = self._request_bytes(req)
        for fresh_try in (False, True):
            conn = None
            while self._idle:
                c = self._idle.pop()
                if c.stale():
                    c.close()
                    continue
                conn = c
                break
            reused = conn is not None
            if conn is None:
                try:
                    conn = await self._open()
                except (OSError, asyncio.TimeoutError) as e:
                    raise TransportError(f"cannot reach {self.url}: {e!r}", method=req.method,
                                         path=req.path) from None
            ok = False
            try:
                conn.writer.write(data)
                await conn.writer.drain()
                resp, keep = await self._read_response(conn)
                ok = True
            except (_StaleConnection, ConnectionResetError, BrokenPipeError,
                    asyncio.IncompleteReadError) as e:
                if reused and not fresh_try and req.idempotent:
                    continue
                what = "closed the connection" if isinstance(e, _StaleConnection) else repr(e)
                raise TransportError(f"{self.url} {what}", method=req.method,
                                     path=req.path) from None
            except (OSError, ValueError) as e:
                raise TransportError(f"connection to {self.url} failed: {e!r}",
                                     method=req.method, path=req.path) from None
            finally:
                if ok and keep and not self._closed:
                    self._idle.append(conn)
                elif conn is not None:
                    conn.close()
            return resp
        raise AssertionError("unreachable")

    async def _send_once(self, req: Request) -> Response:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            # connections and the semaphore belong to one event loop: a client reused under a
            # new loop (a second asyncio.run) starts afresh instead of touching dead transports
            for c in self._idle:
                c.close()
            self._idle = []
            self._slots = asyncio.Semaphore(self.max_connections)
            self._loop = loop
        async with self._slots:
            try:
                if self.timeout is None:
                    return await self._exchange(req)
                return await asyncio.wait_for(self._exchange(req), self.timeout)
            except asyncio.TimeoutError:
                raise TransportError(f"no answer from {self.url} within {self.timeout} s",
                                     code="TIMEOUT", method=req.method, path=req.path,
                                     timeout=True) from None

    async def _run(self, req: Request) -> Any:
        attempt = 0
        while True:
            try:
                resp = await self._send_once(req)
                return decode(req, resp)
            except KgymError as err:
                wait = self.policy.delay(req, err, attempt)
                if wait is None:
                    raise
                attempt += 1
                await asyncio.sleep(wait)

    def _execute(self, req: Request):
        return self._run(req)

    async def request(self, method: str, path: str, body: Any = None,
                      headers: Optional[Dict[str, str]] = None,
                      idempotent: Optional[bool] = None, parse: str = "json") -> Any:
        """Any route (see ``KgymClient.request``)."""
        raw = isinstance(body, (bytes, bytearray))
        return await self._run(Request(method, path, body, headers, idempotent, parse,
                                       raw_body=raw))


class AsyncKgymEnv:
    """``KgymEnv`` as coroutines: ``obs, info = await env.reset(seed=1)``, ``await
    env.step(action)``, ``await env.close()``. Not a ``gymnasium.Env`` (Gymnasium's API is
    synchronous); the same observations, info and actions as ``KgymEnv``. Share one
    ``AsyncKgymClient`` between many envs; the spaces exist after the first reset (their tool
    list is fetched then, once per client)."""

    def __init__(self, url: str = DEFAULT_URL, task_id: Optional[str] = None,
                 client: Optional[AsyncKgymClient] = None, tags: Optional[Dict[str, Any]] = None,
                 raw_info: bool = False, **options: Any):
        self.url = url
        self.task_id = task_id
        self.tags = tags
        self.options = dict(options)
        self.raw_info = raw_info
        self._own_client = client is None
        self.client = client if client is not None else AsyncKgymClient(url)
        self._episode_id: Optional[str] = None
        self._closed = False
        self.last_response: Optional[Dict[str, Any]] = None
        self.action_space: Optional[ActionSpace] = None
        self.observation_space = JsonSpace(OBSERVATION_SCHEMA, sampler=_sample_observation)

    @property
    def episode_id(self) -> Optional[str]:
        return self._episode_id

    async def _tools(self) -> List[Dict[str, Any]]:
        cached = getattr(self.client, "_kgym_tools", None)
        if cached is None:
            cached = await self.client.tools()
            self.client._kgym_tools = cached  # type: ignore[attr-defined]
        return cached

    async def reset(self, *, seed: Optional[int] = None,
                    options: Optional[Dict[str, Any]] = None
                    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """See ``KgymEnv.reset``."""
        if self._closed:
            raise RuntimeError("kgym: reset after close(); make a new AsyncKgymEnv")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)
                                 or seed < 0):
            raise ValueError(f"kgym: seed must be an int >= 0, not {seed!r}")
        if self.action_space is None:
            self.action_space = ActionSpace(await self._tools())
        opts = dict(options or {})
        if "task_id" in opts:
            self.task_id = opts.pop("task_id")
        if "tags" in opts:
            self.tags = opts.pop("tags")
        self.options.update(opts)
        resp = None
        if self._episode_id is not None:
            try:
                resp = await self.client.reset_episode(self._episode_id, task_id=self.task_id,
                                                       seed=seed, options=self.options,
                                                       tags=self.tags)
            except Gone:
                self._episode_id = None
        if resp is None:
            resp = await self.client.create_episode(task_id=self.task_id, seed=seed,
                                                    options=self.options, tags=self.tags)
            self._episode_id = resp["episode_id"]
        if self.task_id is None:
            self.task_id = (resp.get("info") or {}).get("task_id")
        self.last_response = resp
        return split_reset(resp, self.raw_info)

    async def step(self, action: Any) -> Tuple[Dict[str, Any], float, bool, bool, Dict[str, Any]]:
        """See ``KgymEnv.step``."""
        if self._episode_id is None:
            raise RuntimeError("kgym: call reset() before step()")
        one, many = step_body(action)
        resp = await self.client.step(self._episode_id, action=one, actions=many)
        self.last_response = resp
        return split_step(resp, self.raw_info)

    def render(self) -> str:
        return render_text(self.last_response)

    async def trajectory(self) -> List[Dict[str, Any]]:
        if self._episode_id is None:
            return []
        return await self.client.trajectory(self._episode_id)

    async def close(self, purge: bool = False) -> None:
        """Closes the episode and the env's own client; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._episode_id is not None:
                await self.client.close_episode(self._episode_id, purge=purge)
        finally:
            if self._own_client:
                await self.client.close()

    async def __aenter__(self) -> "AsyncKgymEnv":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
