"""The HTTP plumbing shared by the suites' fake kgym-env servers: a subclass of FakeKgym sets its
state, calls FakeKgym.__init__ (which starts serving on a free port of 127.0.0.1, at .url) and
answers every request in one method, route(method, path, body, size) -> (status, obj)."""
import http.server
import json
import threading

# the most of a request body a fake keeps: bigger uploads are counted, not stored
BODY_KEPT = 1 << 20


class _Handler(http.server.BaseHTTPRequestHandler):
    """Reads the body, asks the fake for an answer and sends it as JSON."""

    def setup(self):
        super().setup()
        # per fake, not per class: HTTP/1.1 keeps connections alive between requests, 1.0 does not
        self.protocol_version = self.server.fake.protocol_version

    def log_message(self, *args):
        pass

    def read_body(self):
        """(the first BODY_KEPT bytes, the total size): read in chunks, so a huge upload a case
        means to refuse costs the fake no memory."""
        n, data, size = int(self.headers.get("Content-Length") or 0), b"", 0
        while size < n:
            chunk = self.rfile.read(min(n - size, BODY_KEPT))
            if not chunk:
                break
            size += len(chunk)
            if size <= BODY_KEPT:
                data += chunk
        return data, size

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up waiting (--task-timeout): nobody to answer
            self.close_connection = True

    def answer(self):
        body, size = self.read_body()
        self.reply(*self.server.fake.route(self.command, self.path, body, size))

    do_GET = do_POST = do_PUT = do_DELETE = answer


class FakeKgym:
    """A fake kgym-env on 127.0.0.1: .url, close(). Subclasses implement route()."""

    protocol_version = "HTTP/1.1"

    def __init__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.fake = self
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def route(self, method, path, body, size):
        """The answer to one request, as (HTTP status, JSON-able object). body: its first
        BODY_KEPT bytes; size: its whole length."""
        raise NotImplementedError

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
