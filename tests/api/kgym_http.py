"""A tiny HTTP/1.1 client for the black-box API tests (stdlib only, keep-alive).

One Client holds one persistent connection; it is not thread-safe: give each thread its own.
Paths are sent exactly as given (no dot-segment removal, no re-quoting), so tests can send
"../" and other hostile paths the way an attacker would.
"""
import http.client
import json
import socket


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # lower-cased names -> value
        self.body = body        # bytes

    @property
    def text(self):
        return self.body.decode("utf-8")

    @property
    def json(self):
        return json.loads(self.body)

    def header(self, name):
        return self.headers.get(name.lower())

    def error(self):
        """The error envelope's inner object (asserting the envelope's shape)."""
        doc = self.json
        assert set(doc) == {"error"}, doc
        err = doc["error"]
        assert set(err) == {"code", "message", "retryable", "details"}, err
        assert isinstance(err["code"], str) and err["code"]
        assert isinstance(err["message"], str) and err["message"]
        assert isinstance(err["retryable"], bool)
        assert isinstance(err["details"], dict)
        return err

    def __repr__(self):
        return f"<Response {self.status} {self.body[:300]!r}>"


class Client:
    def __init__(self, port, host="127.0.0.1", timeout=30.0):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _connect(self):
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, method, path, body=None, headers=None):
        """Sends one request. body: None, bytes, str, or anything else (sent as JSON)."""
        hdrs = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, bytearray)):
            if isinstance(body, str):
                body = body.encode("utf-8")
            else:
                body = json.dumps(body).encode("utf-8")
                hdrs.setdefault("Content-Type", "application/json")
        reused = self.conn is not None
        for attempt in (0, 1):
            if self.conn is None:
                self._connect()
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                r = self.conn.getresponse()
                data = r.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                # Only a request on a kept-alive connection that the server had already
                # dropped is retried; it never reached the server.
                if attempt == 0 and reused:
                    continue
                raise
            except BaseException:
                # a timeout or a broken reply leaves the connection mid-request: every later
                # request on it would fail at once (CannotSendRequest), so it goes
                self.close()
                raise
            headers_out = {k.lower(): v for k, v in r.getheaders()}
            if r.will_close:
                self.close()
            return Response(r.status, r.reason, headers_out, data)
        raise AssertionError("unreachable")

    # Shorthands.
    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    # Episode helpers: assert success and return the parsed body.
    def create(self, task_id=None, seed=None, options=None, expect=201, **extra):
        body = dict(extra)
        if task_id is not None:
            body["task_id"] = task_id
        if seed is not None:
            body["seed"] = seed
        if options is not None:
            body["options"] = options
        r = self.post("/v1/episodes", body)
        assert r.status == expect, r
        return r.json

    def step(self, ep, action=None, actions=None, expect=200, headers=None):
        body = {"action": action} if actions is None else {"actions": actions}
        r = self.post(f"/v1/episodes/{ep}/step", body, headers=headers)
        assert r.status == expect, r
        return r.json

    def tool(self, ep, name, **args):
        """Runs one tool call through the step route; returns its observation."""
        out = self.step(ep, {"tool": name, "args": args})
        return out["observation"]

    def state(self, ep):
        r = self.get(f"/v1/episodes/{ep}")
        assert r.status == 200, r
        return r.json

    def trajectory(self, ep):
        r = self.get(f"/v1/episodes/{ep}/trajectory")
        assert r.status == 200, r
        assert r.body.endswith(b"\n"), r.body[-200:]
        return [json.loads(line) for line in r.body.decode("utf-8").splitlines()]
