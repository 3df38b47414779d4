"""bench_openenv: the OpenEnv peer of tests/bench/bench_env.c (tests/bench/README.md).

Measures a running OpenEnv server (tests/bench/peer_openenv/env_server.py; mk/bench-peer.sh
starts one) with the method of bench_env: one client on the same machine, sequential requests,
`--warmup` (20) untimed requests before each latency phase, then `--reset-n` (500) resets and
`--step-n` (1000) steps, each timed with time.perf_counter_ns (CLOCK_MONOTONIC) from before the
request is written to after the whole response is read (JSON is parsed outside the timing);
percentiles are nearest-rank, as in bench_env. Rows:

  ws reset           N resets on one WebSocket session (/ws), the path OpenEnv's EnvClient uses
  ws step            N Read steps of one episode on that session
  ws connect+reset   N new sessions: WebSocket handshake (session + env created) and a reset;
                     the close is untimed (as bench_env's DELETE is)
  http /reset        N POST /reset on one HTTP/1.1 keep-alive connection (stateless: each
                     request builds an env, resets it and closes it)
  http /step         N POST /step {"action": Read, "episode_id": ID} on that connection
                     (stateless: a fresh env per request finds the episode, held open by a
                     WebSocket session, by episode_id)
  client reset/step  the ws rows again through OpenEnv's own GenericEnvClient (asyncio), i.e.
                     with its client-side overhead

Every response is checked (HTTP 200 / message type "observation", is_error false, done false;
a step's text must equal model.py); failures are counted, the row is marked and the first one
printed. Exit status: 0 all requests succeeded, 1 some failed, 2 usage or connection error.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import math
import os
import platform
import socket
import sys
import time
import urllib.parse
from datetime import datetime, timezone
from importlib import metadata

from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import connect as ws_connect

READ_ACTION = {"tool": "Read", "file_path": "/workspace/model.py"}
MAX_MESSAGE = 100 * 1024 * 1024  # what OpenEnv's EnvClient allows


def die(msg: str) -> None:
    print(f"bench_openenv: {msg}", file=sys.stderr)
    sys.exit(2)


def pct(sorted_v: list[float], p: float) -> float:
    """Nearest-rank percentile, as bench_env's pct()."""
    if not sorted_v:
        return math.nan
    rank = math.ceil(p / 100.0 * len(sorted_v))
    rank = min(max(rank, 1), len(sorted_v))
    return sorted_v[rank - 1]


class Row:
    def __init__(self, key: str, name: str):
        self.key, self.name = key, name
        self.lat: list[float] = []  # ms
        self.extra: dict[str, list[float]] = {}
        self.failures = 0
        self.first_failure = ""
        self.other = ""
        self.info: dict = {}

    def fail(self, msg: str) -> None:
        if self.failures == 0:
            self.first_failure = msg[:300]
        self.failures += 1

    def add_extra(self, k: str, v: float) -> None:
        self.extra.setdefault(k, []).append(v)

    def stats(self, v: list[float]) -> tuple[float, float]:
        s = sorted(v)
        return pct(s, 50), pct(s, 99)

    def json(self) -> dict:
        p50, p99 = self.stats(self.lat)
        d = {
            "name": self.name,
            "n": len(self.lat),
            "p50_ms": p50,
            "p99_ms": p99,
            "mean_ms": sum(self.lat) / len(self.lat) if self.lat else math.nan,
            "failures": self.failures,
        }
        for k, v in self.extra.items():
            a, b = self.stats(v)
            d[f"{k}_p50"], d[f"{k}_p99"] = a, b
        if self.first_failure:
            d["first_failure"] = self.first_failure
        d.update(self.info)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def fmt2(row: Row, key: str, label: str) -> str:
    a, b = row.stats(row.extra.get(key, []))
    return f"{label} p50 {a:.3f} p99 {b:.3f}"


def check_obs(row: Row, i: int, payload: dict, expect_text: str | None) -> dict | None:
    """payload: {"observation": {...}, "reward": ..., "done": ...}; returns the observation."""
    obs = payload.get("observation")
    if not isinstance(obs, dict):
        row.fail(f"#{i}: no observation in {json.dumps(payload)[:200]}")
        return None
    if obs.get("is_error") is not False:
        row.fail(f"#{i}: is_error: {str(obs.get('text'))[:200]}")
        return None
    if payload.get("done") is not False:
        row.fail(f"#{i}: done is {payload.get('done')!r}")
        return None
    if expect_text is not None and obs.get("text") != expect_text:
        row.fail(f"#{i}: the text is not model.py ({len(str(obs.get('text')))} chars)")
        return None
    return obs


# ---- WebSocket (the raw protocol of /ws, as OpenEnv's EnvClient speaks it) -----------------


def ws_open(url: str):
    # The options of OpenEnv's EnvClient.connect(): max_size 100 MB, open_timeout 10 s, and the
    # websockets defaults (permessage-deflate offered, pings every 20 s).
    return ws_connect(url, open_timeout=10, max_size=MAX_MESSAGE)


def ws_call(ws, msg: str, row: Row, i: int) -> dict:
    """One request; the reply with "_ms" added, or only {"_ms": ...} when it failed."""
    t0 = time.perf_counter_ns()
    ws.send(msg)
    raw = ws.recv(timeout=60)
    t1 = time.perf_counter_ns()
    ms = (t1 - t0) / 1e6
    try:
        reply = json.loads(raw)
    except ValueError:
        row.fail(f"#{i}: not JSON: {str(raw)[:200]}")
        return {"_ms": ms}
    if reply.get("type") != "observation":
        row.fail(f"#{i}: {json.dumps(reply)[:200]}")
        return {"_ms": ms}
    reply["_ms"] = ms
    return reply


def ws_finish(ws) -> None:
    """Ends a session: the close message, then waits for the server to close the connection.
    (OpenEnv's EnvClient closes its side right after the message; openenv-core 0.3.0 then logs
    an ERROR traceback per session, huggingface/OpenEnv#1159, costing the server time that would
    land in the next request's figure.)"""
    ws.send(json.dumps({"type": "close"}))
    try:
        while True:
            ws.recv(timeout=10)
    except (ConnectionClosed, TimeoutError):
        pass


RESET_MSG = json.dumps({"type": "reset", "data": {}})
STEP_MSG = json.dumps({"type": "step", "data": READ_ACTION})


def phase_ws(ws_url: str, opt, model_text: str, rows: list[Row]) -> None:
    r_reset = Row("ws_reset", "ws reset (one session)")
    r_step = Row("ws_step", "ws step: Read model.py")
    rows += [r_reset, r_step]
    with ws_open(ws_url) as ws:
        ext = ws.response.headers.get("Sec-WebSocket-Extensions") or "none"
        r_reset.info["ws_extensions"] = ext
        for i in range(opt.warmup + opt.reset_n):
            rep = ws_call(ws, RESET_MSG, r_reset, i)
            obs = check_obs(r_reset, i, rep.get("data", {}), None) if "data" in rep else None
            if i >= opt.warmup:
                r_reset.lat.append(rep["_ms"])
                if obs:
                    r_reset.add_extra("env_ms", obs["env_ms"])
                    r_reset.add_extra("cleanup_ms", obs["cleanup_ms"])
        for i in range(opt.warmup + opt.step_n):
            rep = ws_call(ws, STEP_MSG, r_step, i)
            obs = check_obs(r_step, i, rep.get("data", {}), model_text) if "data" in rep else None
            if i >= opt.warmup:
                r_step.lat.append(rep["_ms"])
                if obs:
                    r_step.add_extra("env_ms", obs["env_ms"])
        ws_finish(ws)
    r_reset.other = fmt2(r_reset, "env_ms", "env") + fmt2(r_reset, "cleanup_ms", "; rm prev")
    r_step.other = fmt2(r_step, "env_ms", "env")


def phase_ws_new(ws_url: str, opt, rows: list[Row]) -> None:
    row = Row("ws_new_session", "ws connect+reset (new session)")
    rows.append(row)
    for i in range(opt.warmup + opt.reset_n):
        t0 = time.perf_counter_ns()
        try:
            with ws_open(ws_url) as ws:
                t1 = time.perf_counter_ns()
                rep = ws_call(ws, RESET_MSG, row, i)
                t2 = time.perf_counter_ns()
                # the close is untimed, as bench_env's DELETE after each reset
                ws_finish(ws)
        except Exception as e:  # noqa: BLE001 - any failure to connect is a failed request
            row.fail(f"#{i}: {type(e).__name__}: {e}")
            continue
        obs = check_obs(row, i, rep.get("data", {}), None) if "data" in rep else None
        if i >= opt.warmup:
            row.lat.append((t2 - t0) / 1e6)
            row.add_extra("connect_ms", (t1 - t0) / 1e6)
            if obs:
                row.add_extra("env_ms", obs["env_ms"])
    row.other = fmt2(row, "connect_ms", "connect")


# ---- HTTP/1.1 keep-alive ---------------------------------------------------------------------


class Http:
    def __init__(self, host: str, port: int):
        self.c = http.client.HTTPConnection(host, port, timeout=60)
        self.sock = None
        self.connects = 0
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}

    def post(self, path: str, body: bytes) -> tuple[int, bytes, float]:
        if self.c.sock is None:
            self.c.connect()
            self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connects += 1
        t0 = time.perf_counter_ns()
        self.c.request("POST", path, body=body, headers=self.headers)
        resp = self.c.getresponse()
        data = resp.read()
        t1 = time.perf_counter_ns()
        return resp.status, data, (t1 - t0) / 1e6

    def close(self) -> None:
        self.c.close()


def http_call(h: Http, path: str, body: bytes, row: Row, i: int, expect_text):
    status, data, ms = h.post(path, body)
    obs = None
    if status != 200:
        row.fail(f"#{i}: HTTP {status}: {data[:200]!r}")
    else:
        try:
            obs = check_obs(row, i, json.loads(data), expect_text)
        except ValueError:
            row.fail(f"#{i}: not JSON: {data[:200]!r}")
    return obs, ms


def phase_http(host: str, port: int, ws_url: str, opt, model_text: str, rows: list[Row], notes):
    r_reset = Row("http_reset", "http POST /reset (stateless)")
    r_step = Row("http_step", "http POST /step: Read (stateless)")
    rows += [r_reset, r_step]
    h = Http(host, port)
    body = b"{}"
    for i in range(opt.warmup + opt.reset_n):
        obs, ms = http_call(h, "/reset", body, r_reset, i, None)
        if i >= opt.warmup:
            r_reset.lat.append(ms)
            if obs:
                r_reset.add_extra("env_ms", obs["env_ms"])
    # What a plain stateless /step does: a fresh env without an episode.
    status, data, _ = h.post("/step", json.dumps({"action": READ_ACTION}).encode())
    try:
        pobs = json.loads(data).get("observation", {})
        notes.append(
            f"http /step without episode_id: HTTP {status}, is_error={pobs.get('is_error')}: "
            f"{str(pobs.get('text'))[:80]!r} (HTTP is stateless: a fresh env per request)"
        )
    except ValueError:
        notes.append(f"http /step without episode_id: HTTP {status}: {data[:120]!r}")
    # The episode lives in a WebSocket session held open for the whole phase.
    with ws_open(ws_url) as ws:
        ws.send(RESET_MSG)
        raw = ws.recv(timeout=60)
        try:
            eid = json.loads(raw)["data"]["observation"]["episode_id"]
        except (ValueError, KeyError, TypeError):
            die(f"reset of the episode for http /step failed: {str(raw)[:200]}")
        body = json.dumps({"action": READ_ACTION, "episode_id": eid}).encode()
        for i in range(opt.warmup + opt.step_n):
            obs, ms = http_call(h, "/step", body, r_step, i, model_text)
            if i >= opt.warmup:
                r_step.lat.append(ms)
                if obs:
                    r_step.add_extra("env_ms", obs["env_ms"])
        ws_finish(ws)
    h.close()
    extra = f"; {h.connects} TCP connects" if h.connects != 1 else ""
    r_reset.other = fmt2(r_reset, "env_ms", "env") + extra
    r_step.other = fmt2(r_step, "env_ms", "env") + extra
    r_reset.info["tcp_connects"] = r_step.info["tcp_connects"] = h.connects


# ---- OpenEnv's own client --------------------------------------------------------------------


def phase_client(base_url: str, opt, model_text: str, rows: list[Row]) -> None:
    from openenv.core.generic_client import GenericEnvClient

    r_reset = Row("client_reset", "client reset (GenericEnvClient)")
    r_step = Row("client_step", "client step: Read (GenericEnvClient)")
    rows += [r_reset, r_step]

    async def run() -> None:
        async with GenericEnvClient(base_url=base_url) as env:
            for row, n, call, expect in (
                (r_reset, opt.reset_n, lambda: env.reset(), None),
                (r_step, opt.step_n, lambda: env.step(dict(READ_ACTION)), model_text),
            ):
                for i in range(opt.warmup + n):
                    t0 = time.perf_counter_ns()
                    try:
                        res = await call()
                    except Exception as e:  # noqa: BLE001 - the client raises on error replies
                        row.fail(f"#{i}: {e}")
                        continue
                    ms = (time.perf_counter_ns() - t0) / 1e6
                    payload = {"observation": res.observation, "done": res.done}
                    obs = check_obs(row, i, payload, expect)
                    if i >= opt.warmup:
                        row.lat.append(ms)
                        if obs:
                            row.add_extra("env_ms", obs["env_ms"])

    asyncio.run(run())
    r_reset.other = "incl. the client's parsing; " + fmt2(r_reset, "env_ms", "env")
    r_step.other = "incl. the client's parsing; " + fmt2(r_step, "env_ms", "env")


# ---- report ----------------------------------------------------------------------------------


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def fstype(path: str) -> str:
    # as `stat -f -c %T` (what mk/bench.sh prints)
    import subprocess

    try:
        return subprocess.run(
            ["stat", "-f", "-c", "%T", path], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def print_table(rows: list[Row]) -> None:
    print(f"\n{'figure':<38} {'n':>7} {'p50 ms':>9} {'p99 ms':>9}  other")
    print("-" * 120)
    for r in rows:
        p50, p99 = r.stats(r.lat)
        a = f"{p50:.3f}" if math.isfinite(p50) else "-"
        b = f"{p99:.3f}" if math.isfinite(p99) else "-"
        mark = "  (FAILURES)" if r.failures else ""
        print(f"{r.name:<38} {len(r.lat):>7} {a:>9} {b:>9}  {r.other}{mark}")
    print("-" * 120)


def main() -> int:
    ap = argparse.ArgumentParser(
        description="Benchmarks a running OpenEnv server (env_server.py) like bench_env does "
        "kgym-env; mk/bench-peer.sh starts one and runs this."
    )
    ap.add_argument("--url", required=True, help="http://127.0.0.1:PORT")
    ap.add_argument("--server-pid", type=int, default=0, help="printed only")
    ap.add_argument("--state-dir", help="where the env makes its episode dirs (printed)")
    ap.add_argument("--model-file", required=True, help="the model.py the env serves")
    ap.add_argument("--reset-n", type=int, default=500)
    ap.add_argument("--step-n", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--phases", default="ws,ws-new,http,client",
                    help="comma list of ws,ws-new,http,client (default all)")
    ap.add_argument("--server-args", default="", help="the uvicorn command line (printed)")
    ap.add_argument("--json", help="also write the figures as JSON to FILE")
    opt = ap.parse_args()

    u = urllib.parse.urlsplit(opt.url)
    if u.scheme != "http" or not u.hostname or not u.port:
        die(f"--url must be http://HOST:PORT, not {opt.url}")
    phases = [p.strip() for p in opt.phases.split(",") if p.strip()]
    for p in phases:
        if p not in ("ws", "ws-new", "http", "client"):
            die(f"unknown phase {p}")
    base = f"http://{u.hostname}:{u.port}"
    ws_url = f"ws://{u.hostname}:{u.port}/ws"
    with open(opt.model_file, encoding="utf-8") as f:
        model_text = f.read()

    h = Http(u.hostname, u.port)
    try:
        h.c.request("GET", "/health")
        health = json.loads(h.c.getresponse().read())
    except (OSError, ValueError) as e:
        die(f"GET {base}/health: {e}")
    finally:
        h.close()
    if health.get("status") != "healthy":
        die(f"GET /health: {health}")

    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    vers = {d: version(d) for d in
            ("openenv-core", "fastapi", "starlette", "uvicorn", "websockets", "pydantic", "h11",
             "uvloop", "httptools")}
    un = os.uname()
    fs = fstype(opt.state_dir) if opt.state_dir else "?"
    print(f"OpenEnv peer benchmark  {stamp}")
    print(f"server     {base}  openenv-core {vers['openenv-core']}  pid {opt.server_pid or '?'}  "
          f"env ReadFileEnvironment (tests/bench/peer_openenv/env_server.py)")
    print(f"stack      Python {platform.python_version()}; fastapi {vers['fastapi']}, starlette "
          f"{vers['starlette']}, uvicorn {vers['uvicorn']} (uvloop {vers['uvloop']}, httptools "
          f"{vers['httptools']}), websockets {vers['websockets']}, pydantic {vers['pydantic']}")
    if opt.server_args:
        print(f"command    {opt.server_args}")
    print(f"model.py   {opt.model_file} ({len(model_text.encode())} bytes); no fsync")
    print(f"state dir  {opt.state_dir or '(system temp dir)'}  (filesystem {fs})")
    print(f"machine    nproc {os.cpu_count()}; {cpu_model()}; {un.sysname} {un.release} {un.machine}")
    print(f"client     bench_openenv.py (Python) in the same machine; warmup {opt.warmup} "
          "requests per latency phase")
    sys.stdout.flush()

    rows: list[Row] = []
    notes: list[str] = []
    t0 = time.perf_counter()
    # The client's own garbage collection would land in the tails; it is off while timing.
    gc.collect()
    gc.disable()
    try:
        if "ws" in phases:
            print(f"bench_openenv: ws reset x{opt.reset_n}, step x{opt.step_n}...", file=sys.stderr)
            phase_ws(ws_url, opt, model_text, rows)
        if "ws-new" in phases:
            print(f"bench_openenv: ws new session x{opt.reset_n}...", file=sys.stderr)
            phase_ws_new(ws_url, opt, rows)
        if "http" in phases:
            print(f"bench_openenv: http reset x{opt.reset_n}, step x{opt.step_n}...", file=sys.stderr)
            phase_http(u.hostname, u.port, ws_url, opt, model_text, rows, notes)
        if "client" in phases:
            print(f"bench_openenv: GenericEnvClient reset x{opt.reset_n}, step x{opt.step_n}...",
                  file=sys.stderr)
            phase_client(base, opt, model_text, rows)
    except (OSError, EOFError, http.client.HTTPException, WebSocketException) as e:
        die(f"connection error: {type(e).__name__}: {e}")
    finally:
        gc.enable()
    total_s = time.perf_counter() - t0

    print_table(rows)
    ext = next((r.info.get("ws_extensions") for r in rows if "ws_extensions" in r.info), None)
    if ext:
        notes.insert(0, f"ws extensions negotiated: {ext}")
    for n in notes:
        print(f"note: {n}")
    failures = sum(r.failures for r in rows)
    for r in rows:
        if r.failures:
            print(f"FAILURES in {r.name}: {r.failures}; first: {r.first_failure}")

    if opt.json:
        out = {
            "settings": {"url": base, "server_pid": opt.server_pid, "versions": vers,
                         "python": platform.python_version(), "server_args": opt.server_args,
                         "model_file": opt.model_file, "model_bytes": len(model_text.encode()),
                         "state_dir": opt.state_dir, "state_dir_fs": fs,
                         "warmup": opt.warmup},
            "machine": {"nproc": os.cpu_count(), "cpu": cpu_model(), "kernel": un.release,
                        "arch": un.machine, "time": stamp},
            "rows": {r.key: r.json() for r in rows},
            "notes": notes,
            "failures": failures,
            "duration_s": total_s,
        }
        os.makedirs(os.path.dirname(os.path.abspath(opt.json)), exist_ok=True)
        with open(opt.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
