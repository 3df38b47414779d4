"""kgym.client / kgym.aio / kgym.errors against a real kgym-env on 127.0.0.1.

Every client method, every error class the server can send, retries (capacity with Retry-After,
busy episodes, transport failures), keep-alive reconnects, idempotent steps that are never applied
twice (a reply cut by a proxy, a timed-out step), and the asyncio client with 8 episodes at once.
"""
import asyncio
import http.server
import json
import re
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from kgym import errors
from kgym.aio import AsyncKgymClient, AsyncKgymEnv
from kgym.client import KgymClient

REPO = Path(__file__).resolve().parents[2]
TASK = "clients/alpha"
CPU = {"variant": "cpu"}


@pytest.fixture
def client(server):
    c = KgymClient(server, timeout=60, retries=3, backoff=0.05)
    yield c
    c.close()


@pytest.fixture
def episode(client):
    """A fresh CPU episode of clients/alpha; closed at teardown."""
    eid = client.create_episode(TASK, seed=1, options=CPU)["episode_id"]
    yield eid
    client.close_episode(eid)


def steps_in(trajectory):
    return [r for r in trajectory if r.get("type") == "step"]


def requests_to(srv, method, path_re, at_least=0):
    """The server's request log lines of method and a path matching path_re (waiting up to 5 s
    for at least ``at_least`` of them: the log is read from the server's stderr by a thread)."""
    rx = re.compile(path_re)
    deadline = time.monotonic() + 5
    while True:
        lines = [r for r in srv.request_log()
                 if r.get("method") == method and rx.search(r["path"])]
        if len(lines) >= at_least or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


# ---- a TCP proxy that can cut replies ---------------------------------------------------------

class CuttingProxy:
    """Forwards 127.0.0.1:port to the server. ``cut_next_reply()``: the next reply from the
    server is swallowed and the client's connection closed, after the server ran the request
    (the lost-reply case retries must survive). ``drop_all()``: closes every open connection
    (a server-side close of kept-alive connections)."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self._cut = threading.Event()
        self.cuts = 0
        self.accepted = 0
        self._conns = []
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def cut_next_reply(self):
        self._cut.set()

    def drop_all(self):
        with self._lock:
            conns, self._conns = self._conns, []
        for a, b in conns:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self):
        self._stop = True
        self.sock.close()
        self.drop_all()

    def _accept(self):
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            self.accepted += 1
            with self._lock:
                self._conns.append((c, u))
            threading.Thread(target=self._pump, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, True), daemon=True).start()

    def _pump(self, src, dst, replies):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if replies and self._cut.is_set():
                    self._cut.clear()
                    self.cuts += 1
                    break  # the reply is lost: close both sides
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# ---- a stub HTTP server for what a healthy kgym-env never sends (5xx, garbage) ----------------

class StubServer:
    """Answers every request from a list of (status, headers, body); records the requests."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.seen = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                stub.seen.append((self.command, self.path, dict(self.headers), body))
                status, headers, out = stub.replies.pop(0) if stub.replies else (200, {}, b"{}")
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def envelope(code, message="m", retryable=False, details=None):
    return json.dumps({"error": {"code": code, "message": message, "retryable": retryable,
                                 "details": details or {}}}).encode()


# ---- every method ----------------------------------------------------------------------------

def test_server_routes(client):
    h = client.health()
    assert h["status"] == "ok" and isinstance(h["max_episodes"], int)
    info = client.info()
    assert "Read" in info["tools"] and info["task_count"] >= 2
    tools = client.tools()
    names = [t["function"]["name"] for t in tools]
    assert names == info["tools"]
    assert all(t["type"] == "function" and "parameters" in t["function"] for t in tools)
    anthropic = client.tools(format="anthropic")
    assert [t["name"] for t in anthropic] == names and "input_schema" in anthropic[0]
    fixture = client.tasks(suite="clients")
    assert sorted(t["id"] for t in fixture["tasks"]) == ["clients/alpha", "clients/beta"]
    assert [t["id"] for t in client.tasks(suite="clients", level=2)["tasks"]] == ["clients/beta"]
    everything = client.tasks()["tasks"]
    page = client.tasks(limit=2, offset=1)["tasks"]
    assert [t["id"] for t in page] == [t["id"] for t in everything[1:3]]
    t = client.task(TASK)
    assert t["id"] == TASK and "ALPHA_GPU" in t["code"]
    assert "kgym_" in client.metrics()


def test_episode_lifecycle(client):
    out = client.create_episode(TASK, seed=5, options={"variant": "cpu", "max_steps": 50},
                                tags={"who": "test_client"})
    eid = out["episode_id"]
    assert eid.startswith("ep_") and "ALPHA_CPU" in out["observation"]["content"]
    assert out["info"]["seed"] == 5 and out["info"]["max_steps"] == 50
    st = client.episode(eid)
    assert st["status"] == "active" and st["tags"] == {"who": "test_client"} and st["step"] == 0
    assert eid in [e["episode_id"] for e in client.episodes()["episodes"]]
    assert eid in [e["episode_id"] for e in client.episodes(status="active")["episodes"]]

    # one action, several actions, the tool shorthand
    r = client.step(eid, {"tool": "Bash", "args": {"command": "echo one > a.txt"}, "call_id": "c1"})
    assert r["observation"]["call_id"] == "c1" and r["observation"]["is_error"] is False
    assert r["reward"] == 0.0 and r["info"]["step"] == 1
    r = client.step(eid, actions=[
        {"tool": "Read", "args": {"file_path": "/workspace/a.txt"}},
        {"id": "oa", "type": "function",
         "function": {"name": "Grep", "arguments": json.dumps({"pattern": "one",
                                                               "output_mode": "count"})}},
        {"type": "tool_use", "id": "an", "name": "Glob", "input": {"pattern": "*.txt"}}])
    assert [o["tool"] for o in r["observations"]] == ["Read", "Grep", "Glob"]
    assert "one" in r["observations"][0]["content"]
    assert [o["call_id"] for o in r["observations"]][1:] == ["oa", "an"]
    r = client.call_tool(eid, "Read", {"file_path": "a.txt"})
    assert "one" in r["observation"]["content"] and r["info"]["step"] == 3
    # an unknown tool and a bad argument are observations, not exceptions
    r = client.call_tool(eid, "NoSuchTool", {})
    assert r["observation"]["is_error"] and r["observation"]["data"]["error_code"] == "UNKNOWN_TOOL"
    r = client.step(eid, {"tool": "Read", "args": {"file_path": "missing.txt"}})
    assert r["observation"]["data"]["error_code"] == "FILE_NOT_FOUND"

    # files: upload (str and bytes, odd names), download, listing, /workspace prefix
    w = client.write_file(eid, "dir x/ü #1.txt", "héllo\n")
    assert w == {"path": "/workspace/dir x/ü #1.txt", "bytes": 7, "created": True}
    assert client.write_file(eid, "/workspace/dir x/ü #1.txt", b"\x00\x01")["created"] is False
    assert client.read_file(eid, "dir x/ü #1.txt") == b"\x00\x01"
    assert client.read_file(eid, "/workspace/a.txt") == b"one\n"
    listing = client.list_files(eid)
    assert listing["path"] == "/workspace"
    names = {e["name"]: e["type"] for e in listing["entries"]}
    assert names["dir x"] == "dir" and names["a.txt"] == "file" and names["model.py"] == "file"
    assert [e["name"] for e in client.list_files(eid, "/workspace/dir x")["entries"]] == ["ü #1.txt"]

    traj = client.trajectory(eid)
    assert [r["type"] for r in traj][:1] == ["reset"]
    assert len(steps_in(traj)) == 5 and [r["type"] for r in traj].count("upload") == 2

    # reset in place: same id, fresh workspace, new seed, options kept
    r = client.reset_episode(eid, seed=9)
    assert r["episode_id"] == eid and r["info"]["seed"] == 9
    with pytest.raises(errors.NotFound) as ei:
        client.read_file(eid, "a.txt")
    assert ei.value.code == "FILE_NOT_FOUND" and ei.value.status == 404
    assert client.episode(eid)["options"] == {"variant": "cpu", "max_steps": 50}
    r = client.reset_episode(eid, task_id="clients/beta", options={"variant": "cpu"})
    assert "BETA_CPU" in r["observation"]["content"] and client.episode(eid)["task_id"] == "clients/beta"

    closed = client.close_episode(eid)
    assert closed["status"] == "closed" and closed["purged"] is False
    assert client.close_episode(eid)["status"] == "closed"  # idempotent
    assert client.trajectory(eid)[-1]["type"] == "close"
    assert client.close_episode(eid, purge=True)["purged"] is True
    with pytest.raises(errors.NotFound):
        client.trajectory(eid)


def test_batch(client):
    out = client.batch([
        {"op": "create", "body": {"task_id": TASK, "seed": 3, "options": CPU}},
        {"op": "get", "episode_id": "ep_0000000000000000"},
    ])
    assert [r["status"] for r in out] == [201, 404]  # a failed item is returned, not raised
    assert out[1]["body"]["error"]["code"] == "EPISODE_NOT_FOUND"
    eid = out[0]["body"]["episode_id"]
    out = client.batch([
        {"op": "step", "episode_id": eid,
         "body": {"action": {"tool": "Bash", "args": {"command": "echo b >> n.txt"}}}},
        {"op": "get", "episode_id": eid},
        {"op": "delete", "episode_id": eid},
    ])
    assert [r["status"] for r in out] == [200, 200, 200]
    assert out[1]["body"]["step"] == 1 and out[2]["body"]["status"] == "closed"


def test_baselines_route(client):
    # no GPU on the test server: the route answers that it cannot measure here
    with pytest.raises(errors.CapacityError) as ei:
        KgymClient(client.url, retries=0).baselines(TASK, variant="gpu")
    assert ei.value.status == 503 and ei.value.code == "BASELINES_UNAVAILABLE"
    assert ei.value.retryable is True and "GPU" in ei.value.message
    with pytest.raises(errors.BadRequest) as ei:
        client.baselines(TASK, variant="tpu")
    assert ei.value.code == "BAD_REQUEST" and ei.value.status == 400
    with pytest.raises(errors.BadRequest):
        client.baselines(TASK, variant="cpu", phase="never")
    with pytest.raises(errors.NotFound) as ei:
        client.baselines("clients/none")
    assert ei.value.code == "TASK_NOT_FOUND"


def test_raw_request_and_url_forms(server, client):
    port = int(server.rsplit(":", 1)[1])
    for url in (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}/"):
        with KgymClient(url) as c:
            assert c.health()["status"] == "ok"
    assert client.request("GET", "/v1/info")["name"] == "kgym-env"
    with pytest.raises(ValueError):
        KgymClient("ftp://127.0.0.1:1")
    with pytest.raises(ValueError):
        client.step("ep_x")  # neither action nor actions


# ---- errors ----------------------------------------------------------------------------------

def test_every_server_error_code_is_mapped():
    """Every code the C server can put in an envelope is in kgym.errors.ERROR_CODES, with the
    status the server sends; a new code in env/ fails this test until the client knows it."""
    src = ""
    for f in list((REPO / "env").glob("*.c")) + list((REPO / "env").glob("*/*.c")):
        src += f.read_text(errors="replace")
    sent = set()
    for call in re.finditer(r"\bapi_(?:fail|error_set)\((.*?)\);", src, re.S):
        sent |= set(re.findall(r'"([A-Z][A-Z_]*[A-Z])"', call.group(1)))
    # codes from the workspace path errors (ws_err_code) reach the file routes too
    ws = re.search(r"const char \*ws_err_code\(int err\)(.*?)\n}", src, re.S)
    sent |= set(re.findall(r'return "([A-Z_]+)";', ws.group(1))) - {"OK"}
    assert {"CAPACITY_REACHED", "EPISODE_BUSY", "DRAINING", "INVALID_JSON"} <= sent
    missing = sent - set(errors.ERROR_CODES)
    assert not missing, f"codes the server sends that kgym.errors does not list: {missing}"
    for code, (status, cls) in errors.ERROR_CODES.items():
        assert errors.class_for_status(status) is cls, code
        assert issubclass(cls, errors.KgymError)
    assert issubclass(errors.Gone, errors.Conflict)


def test_not_found_errors(client, episode):
    with pytest.raises(errors.NotFound) as ei:
        client.create_episode("clients/nope", options=CPU)
    assert (ei.value.status, ei.value.code, ei.value.retryable) == (404, "TASK_NOT_FOUND", False)
    assert "clients/nope" in ei.value.message and ei.value.method == "POST"
    with pytest.raises(errors.NotFound) as ei:
        client.task("clients/nope")
    assert ei.value.code == "TASK_NOT_FOUND"
    with pytest.raises(errors.NotFound) as ei:
        client.step("ep_0123456789abcdef", {"tool": "Glob", "args": {"pattern": "*"}})
    assert ei.value.code == "EPISODE_NOT_FOUND"
    with pytest.raises(errors.NotFound) as ei:
        client.request("GET", "/v1/nothing-here")
    assert ei.value.code == "NOT_FOUND" and ei.value.path == "/v1/nothing-here"
    with pytest.raises(errors.NotFound) as ei:
        client.read_file(episode, "kernels/none.cu")
    assert ei.value.code == "FILE_NOT_FOUND" and ei.value.details["path"].endswith("none.cu")


def test_bad_request_errors(client, episode):
    cases = [
        (lambda: client.request("POST", f"/v1/episodes/{episode}/step", b"{not json"),
         400, "INVALID_JSON"),
        (lambda: client.step(episode, actions=[]), 400, "BAD_REQUEST"),
        (lambda: client.step(episode, actions=[{"tool": "Glob", "args": {"pattern": "*"}}] * 17),
         400, "BAD_REQUEST"),
        (lambda: client.create_episode(TASK, options={"variant": "cpu", "no_such_option": 1}),
         422, "VALIDATION_ERROR"),
        (lambda: client.create_episode(TASK, seed=-1), 422, "VALIDATION_ERROR"),
        (lambda: client.request("DELETE", "/v1/info"), 405, "METHOD_NOT_ALLOWED"),
        (lambda: client.write_file(episode, "model.py", b"x = 1\n"), 403, "READ_ONLY_FILE"),
        (lambda: client.write_file(episode, "../escape.txt", b"x"), 403, "PATH_OUTSIDE_WORKSPACE"),
        (lambda: client.read_file(episode, "/etc/passwd"), 403, "PATH_OUTSIDE_WORKSPACE"),
    ]
    for call, status, code in cases:
        with pytest.raises(errors.BadRequest) as ei:
            call()
        assert (ei.value.status, ei.value.code) == (status, code), ei.value
        assert ei.value.retryable is False and ei.value.message
    with pytest.raises(errors.BadRequest) as ei:
        client.read_file(episode, "kernels")
    assert ei.value.code == "IS_DIRECTORY"
    with pytest.raises(errors.BadRequest) as ei:
        client.list_files(episode, "model.py")
    assert ei.value.code == "NOT_A_DIRECTORY"
    with pytest.raises(TypeError):
        client.write_file(episode, "x.bin", 12)


def test_payload_too_large(client, episode):
    info = client.info()["limits"]
    too_big = b"x" * (min(info["max_file_bytes"], info["max_body_bytes"]) + 1)
    with pytest.raises(errors.BadRequest) as ei:
        client.write_file(episode, "big.bin", too_big)
    assert ei.value.status == 413 and ei.value.code == "PAYLOAD_TOO_LARGE"


def test_conflict_and_gone_errors(client):
    # a GPU episode: its final evaluation at the step limit is a quick infra_error here
    eid = client.create_episode(TASK, options={"max_steps": 1})["episode_id"]
    r = client.step(eid, {"tool": "Glob", "args": {"pattern": "*"}})
    assert r["truncated"] is True and r["reward"] is None
    assert r["info"]["eval_status"] == "infra_error"
    t0 = time.monotonic()
    with pytest.raises(errors.Conflict) as ei:
        client.step(eid, {"tool": "Glob", "args": {"pattern": "*"}})
    assert ei.value.code == "EPISODE_TERMINATED" and ei.value.status == 409
    assert not ei.value.retryable and time.monotonic() - t0 < 1.0  # not retried
    # the same key for a different request
    client.reset_episode(eid)
    client.step(eid, {"tool": "Glob", "args": {"pattern": "*"}}, idempotency_key="k-1")
    with pytest.raises(errors.Conflict) as ei:
        client.step(eid, {"tool": "Glob", "args": {"pattern": "*.py"}}, idempotency_key="k-1")
    assert ei.value.code == "IDEMPOTENCY_KEY_REUSED" and ei.value.details == {"key": "k-1"}
    client.close_episode(eid)
    with pytest.raises(errors.Gone) as ei:
        client.step(eid, {"tool": "Glob", "args": {"pattern": "*"}})
    assert ei.value.code == "EPISODE_CLOSED" and ei.value.status == 410
    assert isinstance(ei.value, errors.Conflict)
    with pytest.raises(errors.Gone):
        client.write_file(eid, "a.txt", b"x")


def test_busy_episode_is_retried(server, client, episode):
    """409 EPISODE_BUSY is retryable: with retries the second step waits for the first."""
    slow = threading.Thread(target=lambda: KgymClient(server).step(
        episode, {"tool": "Bash", "args": {"command": "sleep 1.5; echo slow >> order.txt"}}))
    slow.start()
    time.sleep(0.4)
    with pytest.raises(errors.Conflict) as ei:
        KgymClient(server, retries=0).step(episode, {"tool": "Glob", "args": {"pattern": "*"}})
    assert ei.value.code == "EPISODE_BUSY" and ei.value.retryable is True
    patient = KgymClient(server, retries=30, backoff=0.05, max_backoff=0.2)
    r = patient.step(episode, {"tool": "Bash", "args": {"command": "echo fast >> order.txt"}})
    assert r["observation"]["is_error"] is False
    slow.join()
    assert client.read_file(episode, "order.txt") == b"slow\nfast\n"


def test_capacity_429_and_retry_after(launch_server):
    srv = launch_server(config={"retry_after_s": 1}, args=["--max-episodes", "1"])
    c = KgymClient(srv.url, retries=0)
    first = c.create_episode(TASK, options=CPU)["episode_id"]
    with pytest.raises(errors.CapacityError) as ei:
        c.create_episode(TASK, options=CPU)
    e = ei.value
    assert (e.status, e.code, e.retryable) == (429, "CAPACITY_REACHED", True)
    assert e.retry_after == 1.0 and e.details == {"active": 1, "max": 1}

    # Retry-After is honoured: the backoff (10 ms) would retry far sooner than the server asked
    patient = KgymClient(srv.url, retries=5, backoff=0.01, max_backoff=0.01)
    # the log is read by a thread: wait until the two creates above (201, 429) are in it, or
    # they would be counted as the patient client's attempts
    before = len(requests_to(srv, "POST", r"^/v1/episodes$", 2))
    assert before == 2
    closer = threading.Timer(0.5, lambda: KgymClient(srv.url).close_episode(first))
    closer.start()
    t0 = time.monotonic()
    second = patient.create_episode(TASK, options=CPU)["episode_id"]
    elapsed = time.monotonic() - t0
    closer.join()
    assert 1.0 <= elapsed < 3.0, elapsed
    attempts = requests_to(srv, "POST", r"^/v1/episodes$", before + 2)[before:]
    assert [r["status"] for r in attempts] == [429, 201], attempts

    # the cap on Retry-After: 3 attempts 0.2 s apart instead of 1 s apart, then the error
    capped = KgymClient(srv.url, retries=2, backoff=0.01, max_retry_after=0.2)
    before = len(requests_to(srv, "POST", r"^/v1/episodes$", 4))
    assert before == 4
    t0 = time.monotonic()
    with pytest.raises(errors.CapacityError):
        capped.create_episode(TASK, options=CPU)
    elapsed = time.monotonic() - t0
    assert 0.4 <= elapsed < 0.9, elapsed
    time.sleep(0.2)  # a fourth attempt, if any, would be logged by now
    assert len(requests_to(srv, "POST", r"^/v1/episodes$", before + 3)[before:]) == 3
    KgymClient(srv.url).close_episode(second)


def test_draining_503(launch_server):
    srv = launch_server(config={"retry_after_s": 2})
    c = KgymClient(srv.url, retries=0)
    eid = c.create_episode(TASK, options=CPU)["episode_id"]
    slow = threading.Thread(target=lambda: KgymClient(srv.url).step(
        eid, {"tool": "Bash", "args": {"command": "sleep 1.5"}}))
    slow.start()
    time.sleep(0.3)
    srv.proc.send_signal(signal.SIGTERM)  # drains: the running step finishes, nothing new starts
    time.sleep(0.2)
    with pytest.raises(errors.CapacityError) as ei:
        c.create_episode(TASK, options=CPU)
    assert (ei.value.status, ei.value.code, ei.value.retry_after) == (503, "DRAINING", 2.0)
    h = c.health()  # the health report is returned while draining, not raised
    assert h["status"] == "draining"
    slow.join()
    assert srv.proc.wait(30) == 0


def test_server_errors_5xx_from_a_stub():
    """kgym-env answers 5xx only when its disk fails: a stub plays that part."""
    stub = StubServer([
        (500, {}, envelope("TRAJECTORY_WRITE_FAILED", "disk full", retryable=True)),
        (200, {"Content-Type": "application/json"}, b'{"status":"ok"}'),
        (500, {}, envelope("INTERNAL", "boom", retryable=False)),
        (500, {}, envelope("TRAJECTORY_WRITE_FAILED", "disk full", retryable=True)),
        (502, {}, b"<html>bad gateway</html>"),
        (200, {"Content-Type": "application/json"}, b"not json"),
    ])
    try:
        c = KgymClient(stub.url, retries=2, backoff=0.01)
        assert c.health() == {"status": "ok"}  # a retryable 500 on a GET: retried
        assert len(stub.seen) == 2
        with pytest.raises(errors.ServerError) as ei:
            c.info()
        assert (ei.value.status, ei.value.code, ei.value.retryable) == (500, "INTERNAL", False)
        assert len(stub.seen) == 3  # not retryable: one attempt
        # a non-idempotent POST (no key) is not retried after a retryable 500: it may have run
        with pytest.raises(errors.ServerError) as ei:
            c.request("POST", "/v1/anything", {"x": 1}, idempotent=False)
        assert ei.value.code == "TRAJECTORY_WRITE_FAILED" and len(stub.seen) == 4
        with pytest.raises(errors.ServerError) as ei:
            KgymClient(stub.url, retries=0).info()
        assert ei.value.status == 502 and ei.value.code == "HTTP_502" and "bad gateway" in str(ei.value)
        with pytest.raises(errors.TransportError) as ei:
            KgymClient(stub.url, retries=0).info()
        assert ei.value.code == "BAD_RESPONSE" and ei.value.status is None
        # every step carries an Idempotency-Key, the same on each attempt
        stub.replies = [(503, {"Retry-After": "0"}, envelope("DRAINING", retryable=True)),
                        (200, {}, b'{"observation": {}, "reward": 0.0}')]
        n = len(stub.seen)
        c.step("ep_1", {"tool": "Glob", "args": {"pattern": "*"}})
        keys = [h.get("Idempotency-Key") for _, _, h, _ in stub.seen[n:]]
        assert len(keys) == 2 and keys[0] and keys[0] == keys[1]
        c.step("ep_1", {"tool": "Glob", "args": {"pattern": "*"}})
        assert stub.seen[-1][2]["Idempotency-Key"] != keys[0]  # a new step, a new key
    finally:
        stub.close()


def test_transport_errors(launch_server):
    srv = launch_server()
    url = srv.url
    c = KgymClient(url, retries=2, backoff=0.01)
    assert c.health()["status"] == "ok"
    srv.stop()
    t0 = time.monotonic()
    with pytest.raises(errors.TransportError) as ei:
        c.health()
    assert ei.value.status is None and ei.value.retryable is True
    assert "127.0.0.1" in str(ei.value) and time.monotonic() - t0 < 2
    assert isinstance(ei.value, errors.KgymError)


def test_timeout_is_a_transport_error(client, episode, server):
    quick = KgymClient(server, timeout=0.5, retries=0)
    with pytest.raises(errors.TransportError) as ei:
        quick.step(episode, {"tool": "Bash", "args": {"command": "sleep 1.2"}})
    assert ei.value.timeout is True and ei.value.code == "TIMEOUT"
    time.sleep(1.0)


def test_reconnect_after_server_closed_connection(launch_server):
    srv = launch_server()
    c = KgymClient(srv.url, retries=0)
    eid = c.create_episode(TASK, options=CPU)["episode_id"]
    assert c.connects == 1
    c.health()
    assert c.connects == 1  # keep-alive: one connection for several requests
    srv.stop()
    srv.restart()  # same port, same state dir; the old connection is dead
    # a non-idempotent request on the dead connection: noticed before sending, sent once
    r = c.request("GET", "/v1/health", idempotent=False)
    assert r["status"] == "ok" and c.connects == 2
    with pytest.raises(errors.Gone) as ei:  # episodes of the old process ended with it
        c.step(eid, {"tool": "Glob", "args": {"pattern": "*"}})
    assert ei.value.code == "EPISODE_ENDED"


def test_reconnect_through_proxy_drop(server):
    proxy = CuttingProxy(int(server.rsplit(":", 1)[1]))
    try:
        c = KgymClient(proxy.url, retries=0)
        for _ in range(3):
            assert c.health()["status"] == "ok"
        assert proxy.accepted == 1
        proxy.drop_all()
        time.sleep(0.1)
        assert c.info()["name"] == "kgym-env"
        assert proxy.accepted == 2 and c.connects == 2
    finally:
        proxy.close()


# ---- idempotent steps are never applied twice -------------------------------------------------

def test_step_with_lost_reply_is_applied_once(server, client, episode):
    proxy = CuttingProxy(int(server.rsplit(":", 1)[1]))
    try:
        c = KgymClient(proxy.url, retries=3, backoff=0.05)
        c.health()
        proxy.cut_next_reply()
        r = c.step(episode, {"tool": "Bash", "args": {"command": "echo x >> count.txt; cat count.txt"}})
        assert proxy.cuts == 1  # the first reply was really lost
        assert r["observation"]["content"].startswith("x\n")
        assert r["info"]["step"] == 1
        assert client.read_file(episode, "count.txt") == b"x\n"  # ran once
        assert len(steps_in(client.trajectory(episode))) == 1
        # without retries the lost reply is a TransportError (and the step did run)
        proxy.cut_next_reply()
        with pytest.raises(errors.TransportError):
            KgymClient(proxy.url, retries=0).step(
                episode, {"tool": "Bash", "args": {"command": "echo y >> count.txt"}})
        assert client.read_file(episode, "count.txt") == b"x\ny\n"
    finally:
        proxy.close()


def test_batch_with_lost_reply_is_applied_once(server, client, episode):
    """Batch items that change state get idempotency keys from the client: a batch retried
    after its reply was lost replays them instead of running them again."""
    proxy = CuttingProxy(int(server.rsplit(":", 1)[1]))
    try:
        c = KgymClient(proxy.url, retries=3, backoff=0.05)
        c.health()
        before = {e["episode_id"] for e in client.episodes(status="active")["episodes"]}
        proxy.cut_next_reply()
        out = c.batch([
            {"op": "step", "episode_id": episode,
             "body": {"action": {"tool": "Bash", "args": {"command": "echo b >> batch.txt"}}}},
            {"op": "create", "body": {"task_id": TASK, "options": CPU}},
        ])
        assert proxy.cuts == 1 and [r["status"] for r in out] == [200, 201]
        assert client.read_file(episode, "batch.txt") == b"b\n"
        after = {e["episode_id"] for e in client.episodes(status="active")["episodes"]}
        assert after - before == {out[1]["body"]["episode_id"]}  # one episode, not two
        assert len(steps_in(client.trajectory(episode))) == 1
        client.close_episode(out[1]["body"]["episode_id"])
    finally:
        proxy.close()


def test_timed_out_step_retried_is_applied_once(server, client, episode):
    """The first attempt times out while the step runs; the retries meet EPISODE_BUSY, then
    the replay of the finished step: the command ran exactly once."""
    c = KgymClient(server, timeout=0.5, retries=20, backoff=0.1, max_backoff=0.3)
    r = c.step(episode, {"tool": "Bash",
                         "args": {"command": "echo run >> count.txt; sleep 1.5; echo done"}})
    assert "done" in r["observation"]["content"]
    assert client.read_file(episode, "count.txt") == b"run\n"
    assert len(steps_in(client.trajectory(episode))) == 1


def test_same_key_replays(client, episode):
    a = client.step(episode, {"tool": "Bash", "args": {"command": "echo k >> k.txt"}},
                    idempotency_key="same-key")
    b = client.step(episode, {"tool": "Bash", "args": {"command": "echo k >> k.txt"}},
                    idempotency_key="same-key")
    assert a == b and client.read_file(episode, "k.txt") == b"k\n"
    e1 = client.create_episode(TASK, options=CPU, idempotency_key="create-key")
    e2 = client.create_episode(TASK, options=CPU, idempotency_key="create-key")
    assert e1["episode_id"] == e2["episode_id"]
    client.close_episode(e1["episode_id"])


# ---- asyncio ---------------------------------------------------------------------------------

def test_async_eight_concurrent_episodes(server):
    async def one(client, i):
        env = AsyncKgymEnv(server, task_id=TASK, client=client, variant="cpu")
        obs, info = await env.reset(seed=i)
        assert "ALPHA_CPU" in obs["content"] and info["seed"] == i
        obs, reward, term, trunc, info = await env.step(
            {"tool": "Bash", "args": {"command": f"sleep 0.6; echo {i} > mine.txt"}})
        assert obs["is_error"] is False and reward == 0.0 and not term and not trunc
        obs, *_ = await env.step([{"tool": "Read", "args": {"file_path": "mine.txt"}},
                                  {"tool": "Glob", "args": {"pattern": "*.txt"}}])
        assert f"{i}" in obs["observations"][0]["content"]
        data = await client.read_file(env.episode_id, "mine.txt")
        assert env.action_space.contains({"tool": "Read", "args": {"file_path": "x"}})
        traj = await env.trajectory()
        await env.close()
        return env.episode_id, data, len(steps_in(traj))

    async def main():
        async with AsyncKgymClient(server, retries=3, backoff=0.05) as client:
            t0 = time.monotonic()
            out = await asyncio.gather(*(one(client, i) for i in range(8)))
            elapsed = time.monotonic() - t0
            return out, elapsed, client.connects

    out, elapsed, connects = asyncio.run(main())
    assert len({eid for eid, _, _ in out}) == 8
    assert [data for _, data, _ in out] == [f"{i}\n".encode() for i in range(8)]
    assert all(n == 2 for _, _, n in out)
    # 8 x 0.6 s of sleep ran concurrently, not one after the other
    assert elapsed < 4.0, elapsed
    assert 2 <= connects <= 8 * 3, connects


def test_async_client_methods_and_errors(server, launch_server):
    async def main():
        async with AsyncKgymClient(server, retries=2, backoff=0.01) as c:
            assert (await c.health())["status"] == "ok"
            assert "Read" in (await c.info())["tools"]
            assert len(await c.tools()) == len((await c.info())["tools"])
            assert (await c.task(TASK))["id"] == TASK
            out = await c.create_episode(TASK, seed=2, options=CPU)
            eid = out["episode_id"]
            r = await c.call_tool(eid, "Bash", {"command": "printf abc > f.txt"})
            assert r["observation"]["is_error"] is False
            assert await c.read_file(eid, "f.txt") == b"abc"
            await c.write_file(eid, "g.txt", b"\xff\x00")
            assert await c.read_file(eid, "/workspace/g.txt") == b"\xff\x00"
            assert "g.txt" in [e["name"] for e in (await c.list_files(eid))["entries"]]
            assert (await c.reset_episode(eid, seed=4))["info"]["seed"] == 4
            assert (await c.batch([{"op": "get", "episode_id": eid}]))[0]["status"] == 200
            with pytest.raises(errors.NotFound):
                await c.read_file(eid, "f.txt")
            with pytest.raises(errors.NotFound) as ei:
                await c.create_episode("clients/nope")
            assert ei.value.code == "TASK_NOT_FOUND"
            with pytest.raises(errors.BadRequest) as ei:
                await c.request("POST", f"/v1/episodes/{eid}/step", b"{")
            assert ei.value.code == "INVALID_JSON"
            # the connection survives errors: still one connection in use
            assert (await c.episode(eid))["status"] == "active"
            assert (await c.close_episode(eid))["status"] == "closed"
            with pytest.raises(errors.Gone):
                await c.step(eid, {"tool": "Glob", "args": {"pattern": "*"}})
            assert c.connects == 1
            # timeout, then the retried step is replayed, not run twice
            eid = (await c.create_episode(TASK, options=CPU))["episode_id"]
            slow = AsyncKgymClient(server, timeout=0.5, retries=20, backoff=0.1, max_backoff=0.3)
            r = await slow.step(eid, {"tool": "Bash",
                                      "args": {"command": "echo once >> n.txt; sleep 1.2"}})
            assert r["info"]["step"] == 1
            assert await c.read_file(eid, "n.txt") == b"once\n"
            with pytest.raises(errors.TransportError) as ei:
                await AsyncKgymClient(server, timeout=0.3, retries=0).step(
                    eid, {"tool": "Bash", "args": {"command": "sleep 1"}})
            assert ei.value.timeout is True
            await asyncio.sleep(0.9)
            await slow.close()
            await c.close_episode(eid)

        # capacity: Retry-After honoured by the async client too
        srv = launch_server(config={"retry_after_s": 1}, args=["--max-episodes", "1"])
        async with AsyncKgymClient(srv.url, retries=4, backoff=0.01, max_backoff=0.01) as c:
            first = (await c.create_episode(TASK, options=CPU))["episode_id"]
            with pytest.raises(errors.CapacityError) as ei:
                await AsyncKgymClient(srv.url, retries=0).create_episode(TASK, options=CPU)
            assert ei.value.retry_after == 1.0

            async def close_later():
                await asyncio.sleep(0.5)
                await c.close_episode(first)

            t0 = time.monotonic()
            _, second = await asyncio.gather(close_later(), c.create_episode(TASK, options=CPU))
            assert 1.0 <= time.monotonic() - t0 < 3.0
            # a restart closes the kept-alive connections: the next request reconnects
            n = c.connects
            srv.stop()
            srv.restart()
            assert (await c.health())["status"] == "ok" and c.connects == n + 1
            with pytest.raises(errors.Gone):
                await c.step(second["episode_id"], {"tool": "Glob", "args": {"pattern": "*"}})
            port = srv.port
            srv.stop()
        with pytest.raises(errors.TransportError):
            await AsyncKgymClient(f"http://127.0.0.1:{port}", retries=1, backoff=0.01).health()

    asyncio.run(main())
