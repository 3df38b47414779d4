"""A scripted OpenAI-compatible chat-completions server for the kgym-agent tests.

It stands in for a served model: ``POST /v1/chat/completions`` answers from a script of canned
responses, and every request is recorded (headers, parsed body, the time, what was answered) so a
test can check what the agent sent. ``GET /v1/models`` answers a one-model list (the agent's
reachability probe).

A script maps a conversation key to a list of turns. The key is the task id, read from the first
user message (the kgym observation starts "Task <id>: ..."), so one server can drive several
episodes running in parallel; the turn is the number of assistant messages already in the
request. A turn is one response, or a list of responses served to successive requests of that
same turn (the last one repeats): ``[fail(429, retry_after=1), fail(500), reply(...)]`` makes the
agent retry twice before it gets its reply. A turn past the end of a script answers plain text
without a tool call.

Only the standard library is used; the server runs in a daemon thread on 127.0.0.1:0.
"""
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TASK_RE = re.compile(r"^Task (\S+?):")

DONE_TEXT = "I have nothing more to do."


def tool_call(name, args=None, call_id=None, raw_arguments=None):
    """A native OpenAI tool call. ``raw_arguments`` (a string) is sent verbatim instead of
    ``json.dumps(args)``: malformed JSON for the tests. ``name=None`` leaves the name out."""
    fn = {"arguments": raw_arguments if raw_arguments is not None else json.dumps(args or {})}
    if name is not None:
        fn["name"] = name
    tc = {"type": "function", "function": fn}
    if call_id is not None:
        tc["id"] = call_id
    return tc


def text_call(name, args=None):
    """A ``<tool_call>`` block (the text fallback), e.g. for a model without a tool parser."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args or {}}) + "\n</tool_call>"


class Reply:
    """A 200 chat.completion with one choice."""

    def __init__(self, content=None, tool_calls=None, finish_reason=None):
        self.content = content
        self.tool_calls = tool_calls
        self.finish_reason = finish_reason or ("tool_calls" if tool_calls else "stop")


class Fail:
    """An error answer: ``status`` with an OpenAI-style error body, optionally Retry-After."""

    def __init__(self, status, retry_after=None, body=None):
        self.status = status
        self.retry_after = retry_after
        self.body = body


def reply(content=None, tool_calls=None, finish_reason=None):
    return Reply(content, tool_calls, finish_reason)


def fail(status, retry_after=None, body=None):
    return Fail(status, retry_after, body)


def conversation_key(body):
    """The task id of the conversation (from its first user message), or None."""
    for m in body.get("messages") or []:
        if isinstance(m, dict) and m.get("role") == "user":
            found = TASK_RE.match(m.get("content") or "")
            return found.group(1) if found else None
    return None


def turn_of(body):
    return sum(1 for m in body.get("messages") or []
               if isinstance(m, dict) and m.get("role") == "assistant")


class FakeOpenAI:
    """``FakeOpenAI(scripts).start()``; ``.url`` is the base URL (``http://127.0.0.1:P/v1``),
    ``.requests`` the recorded chat requests, ``.for_key(key)`` those of one conversation."""

    def __init__(self, scripts=None):
        self.scripts = dict(scripts or {})
        self.requests = []
        self.other_requests = []  # anything but chat completions (the /models probe)
        self._served = {}  # (key, turn) -> responses served so far
        self._lock = threading.Lock()
        self._counter = 0
        self._httpd = None
        self._thread = None

    # -- lifecycle --

    def start(self):
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def port(self):
        return self._httpd.server_address[1]

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- recorded traffic --

    def for_key(self, key):
        with self._lock:
            return [r for r in self.requests if r["key"] == key]

    def set_script(self, key, turns):
        with self._lock:
            self.scripts[key] = list(turns)
            for k in [k for k in self._served if k[0] == key]:
                del self._served[k]

    # -- answering --

    def _pick(self, key, turn):
        script = self.scripts.get(key)
        if script is None or turn >= len(script):
            return Reply(content=DONE_TEXT)
        entry = script[turn]
        if not isinstance(entry, list):
            return entry
        k = (key, turn)
        i = self._served.get(k, 0)
        self._served[k] = i + 1
        return entry[min(i, len(entry) - 1)]

    def _completion(self, body, answer):
        self._counter += 1
        message = {"role": "assistant", "content": answer.content}
        if answer.tool_calls is not None:
            message["tool_calls"] = json.loads(json.dumps(answer.tool_calls))  # a copy
        prompt_chars = sum(len(json.dumps(m)) for m in body.get("messages") or [])
        prompt_tokens = prompt_chars // 4 + 1
        completion_tokens = len(json.dumps(message)) // 4 + 1
        return {
            "id": f"chatcmpl-fake-{self._counter}", "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status, doc, headers=None):
                data = json.dumps(doc).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                with fake._lock:
                    fake.other_requests.append({"method": "GET", "path": self.path,
                                                "headers": dict(self.headers.items())})
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": "fake-model", "object": "model", "owned_by": "kgym-tests"}]})
                else:
                    self._send(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                t = time.monotonic()
                if self.path.rstrip("/") != "/v1/chat/completions":
                    with fake._lock:
                        fake.other_requests.append({"method": "POST", "path": self.path,
                                                    "headers": dict(self.headers.items())})
                    self._send(404, {"error": {"message": "not found", "type": "not_found"}})
                    return
                try:
                    body = json.loads(raw.decode("utf-8"))
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    self._send(400, {"error": {"message": "body is not a JSON object",
                                               "type": "invalid_request_error"}})
                    return
                with fake._lock:
                    key, turn = conversation_key(body), turn_of(body)
                    answer = fake._pick(key, turn)
                    rec = {"t": t, "key": key, "turn": turn, "path": self.path,
                           "headers": {k.lower(): v for k, v in self.headers.items()},
                           "body": body}
                    if isinstance(answer, Fail):
                        rec["status"] = answer.status
                        rec["response"] = None
                    else:
                        rec["status"] = 200
                        rec["response"] = fake._completion(body, answer)
                    fake.requests.append(rec)
                if isinstance(answer, Fail):
                    headers = {}
                    if answer.retry_after is not None:
                        headers["Retry-After"] = str(answer.retry_after)
                    self._send(answer.status, answer.body or {"error": {
                        "message": f"scripted failure {answer.status}", "type": "server_error"}},
                        headers)
                else:
                    self._send(200, rec["response"])

        return Handler
