#!/usr/bin/env python3
"""Sandbox overhead: the same command run directly and through kgym-sandbox, side by side.

    python3 tests/bench/bench_sandbox.py [--n 200] [--server URL]

Rows: `bash -c true` started directly (as the unsandboxed weak mode does) vs through the launcher
with the bash profile and a cgroup-less run; nvcc compiling the template's AXPBY example
(kernels/axpby.cu) in and out of the sandbox; and, with --server, the Bash `true` step latency
through the HTTP API of a running (sandboxed) server. Must run as root (the launcher needs it).
Target (issue 3): sandboxed Bash step p50 <= 10 ms.
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("KGYM_BUILD", "build")
UID = 201999


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def timed(cmd, n, cwd=None):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        out.append((time.perf_counter() - t0) * 1e3)
        if r.returncode != 0:
            sys.exit(f"bench_sandbox: {cmd[0]} failed: {r.stderr.decode()[-500:]}")
    return out


def sandboxed(ws, argv):
    return [str(BUILD / "kgym-sandbox"), "--profiles", str(REPO / "sandbox_profiles"),
            "--profile", "bash", "--workspace", str(ws), "--uid", str(UID), "--gid", str(UID),
            "--"] + argv


def row(name, xs, note=""):
    print(f"{name:<44} {len(xs):>5} {statistics.median(xs):>9.2f} {pct(xs, 99):>9.2f}  {note}")


def step_latency(url, n):
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def call(method, path, body=None):
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")

    _, created = call("POST", "/v1/episodes", {"options": {"max_steps": n + 10}})
    ep = created["episode_id"]
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, body = call("POST", f"/v1/episodes/{ep}/tools/Bash", {"command": "true"})
        xs.append((time.perf_counter() - t0) * 1e3)
        if status != 200 or body["observation"]["is_error"]:
            sys.exit(f"bench_sandbox: Bash step failed: {body}")
    call("DELETE", f"/v1/episodes/{ep}?purge=true")
    return xs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--server", help="URL of a running kgym-env for the step row")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_sandbox: run as root (the launcher needs it)")
    ws = Path(tempfile.mkdtemp(prefix="kgym-bench-sbx-"))
    os.chown(ws, UID, UID)
    try:
        print(f"sandbox overhead  machine: nproc {os.cpu_count()}; "
              f"{os.uname().sysname} {os.uname().release}")
        print(f"{'figure':<44} {'n':>5} {'p50 ms':>9} {'p99 ms':>9}")
        direct = timed(["/bin/bash", "-c", "true"], args.n)
        inside = timed(sandboxed(ws, ["/bin/bash", "-c", "true"]), args.n)
        row("bash -c true, direct", direct)
        row("bash -c true, kgym-sandbox (no cgroup)", inside,
            f"overhead p50 {statistics.median(inside) - statistics.median(direct):.2f} ms")
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        if Path(nvcc).exists():
            shutil.copy(REPO / "env/template/kernels/axpby.cu", ws / "axpby.cu")
            os.chown(ws / "axpby.cu", UID, UID)
            cmd = ["-c", "axpby.cu", "-o", "axpby.o", "-gencode=arch=compute_90a,code=sm_90a"]
            out = timed([nvcc] + cmd, 3, cwd=ws)
            inn = timed(sandboxed(ws, ["/usr/local/cuda/bin/nvcc"] + cmd), 3)
            row("nvcc axpby.cu (sm_90a), direct", out)
            row("nvcc axpby.cu (sm_90a), kgym-sandbox", inn)
        else:
            print("nvcc: not installed here; the compile rows were not measured")
        if args.server:
            xs = step_latency(args.server, args.n)
            row("HTTP Bash step `true`, sandboxed", xs,
                "target p50 <= 10 ms: " + ("met" if statistics.median(xs) <= 10 else "NOT met"))
    finally:
        shutil.rmtree(ws, ignore_errors=True)


if __name__ == "__main__":
    main()
