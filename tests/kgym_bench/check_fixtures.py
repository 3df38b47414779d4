"""Checks kgym-bench's CPU fixtures (fixtures.json) end to end through a real kgym-env server.

For each fixture: a CPU episode of its KernelBench task, the template's CUDA example removed, the
solution uploaded the way an agent's writes land (PUT /v1/episodes/{id}/files/{path}: a
workspace folder file by file, a KernelBench-style file as model_new.py), Compile, then Submit.
Prints per fixture: compiled?, correct?, reward, t_candidate_ms, t_eager_ms, t_compile_ms and the
speed-up against eager, and whether it landed in its expected class:

  fast           correct and speed-up vs eager > 1.3
  slow           correct and speed-up vs eager < 0.7
  wrong          compiled but incorrect
  compile_error  not compiled
  missing        no solution (path null): nothing is evaluated

Exit status 0 when every fixture lands in its class, 1 otherwise, 2 when the run itself failed.

The server gets the KernelBench JSONL with --kernelbench. KernelBench tasks have no CPU variant
there (kgym-env refuses a CPU episode for them: "task kb/L1/12 has no CPU-sized variant"), so
when the tasks report has_cpu_variant false the script restarts the server on an overlay: a
temporary task JSONL (outside the repository) holding the same tasks under the same ids
(kb/L<level>/<id>), their code from the KernelBench file, and that same code as the CPU variant
(the fixture tasks were chosen to run on a CPU at their own sizes: find_cpu_tasks.py).
--no-overlay turns this off (the run then fails on such a server).

usage: PY tests/kgym_bench/check_fixtures.py [--kernelbench JSONL] [--build-cache DIR]
                                             [--only kb/L1/12 ...] [--json OUT] [--keep]
PY: the venv's python (the sandbox's too, as in tests/harness); root, build/kgym-env (built
with `make -s all` when missing). Not collected by pytest (no test_ prefix).
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURES = HERE / "fixtures.json"
DEFAULT_JSONL = REPO.parent / "shared" / "kernelbench" / "kernelbench-l1-l3.jsonl"

_spec = importlib.util.spec_from_file_location("kgym_http", REPO / "tests" / "api" / "kgym_http.py")
kgym_http = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kgym_http)

FAST, SLOW = 1.3, 0.7


class Server:
    """One `kgym-env serve` on a free port of 127.0.0.1, started the way tests/harness starts
    its (trusted harness, sandbox, OMP_NUM_THREADS=1 so that eager PyTorch and the candidates'
    C++ loops both run on one thread)."""

    def __init__(self, binary, workdir, sources, build_cache=None):
        cmd = [str(binary), "serve", "--port", "0", "--state-dir", str(Path(workdir) / "state"),
               "--template", str(REPO / "env" / "template"),
               "--sandbox-profiles", str(REPO / "sandbox_profiles"),
               "--sandbox-python", sys.executable, "--harness", str(REPO / "env" / "harness"),
               "--idle-timeout", "0"] + list(sources)
        if build_cache:
            cmd += ["--build-cache", str(build_cache)]
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.lines = []
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env)
        threading.Thread(target=self._read, daemon=True).start()
        self.port = None
        deadline = time.monotonic() + 60
        while self.port is None and time.monotonic() < deadline and self.proc.poll() is None:
            for line in list(self.lines):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("event") == "listening":
                    self.port = rec["port"]
            time.sleep(0.05)
        if not self.port:
            self.stop()
            raise RuntimeError("kgym-env did not start:\n" + "\n".join(self.lines[-40:]))

    def _read(self):
        for raw in iter(self.proc.stderr.readline, b""):
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def client(self):
        return kgym_http.Client(self.port, timeout=1800)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def kb_records(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                out[f"kb/L{r['level']}/{r['problem_id']}"] = r
    return out


def write_overlay(records, task_ids, path):
    """The fixture tasks as a kgym task JSONL: same ids and code, the code as its CPU variant."""
    with open(path, "w", encoding="utf-8") as f:
        for tid in task_ids:
            r = records[tid]
            f.write(json.dumps({"id": tid, "suite": "kernelbench", "level": r["level"],
                                "name": r["name"].removesuffix(".py"), "code": r["code"],
                                "code_cpu": r["code"]}) + "\n")


def solution_files(fx):
    """{workspace path: bytes} for a fixture's solution."""
    src = HERE / fx["path"]
    if fx["style"] == "kernelbench":
        return {"model_new.py": src.read_bytes()}
    files = {}
    for p in sorted(src.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            files[p.relative_to(src).as_posix()] = p.read_bytes()
    return files


def post_tool(c, ep, name, args):
    r = c.post(f"/v1/episodes/{ep}/tools/{name}", args)
    if r.status != 200:
        raise RuntimeError(f"{name}: HTTP {r.status}: {r.body[:500]!r}")
    return r.json


def run_fixture(c, fx):
    r = c.post("/v1/episodes", {"task_id": fx["task"], "options": {"variant": "cpu"}})
    if r.status != 201:
        raise RuntimeError(f"episode for {fx['task']}: HTTP {r.status}: {r.body[:500]!r}")
    ep = r.json["episode_id"]
    try:
        files = solution_files(fx)
        # the template's example (kernels/axpby.*) is CUDA: a CPU solution brings its own kernels
        listing = c.get(f"/v1/episodes/{ep}/files/kernels")
        if listing.status == 200:
            keep = set(files)
            stale = [f"kernels/{e['name']}" for e in listing.json.get("entries", [])
                     if e.get("type") in ("file", "symlink") and f"kernels/{e['name']}" not in keep]
            if stale:
                obs = post_tool(c, ep, "Bash", {"command": "rm -f -- " + " ".join(stale)})["observation"]
                if obs.get("is_error"):
                    raise RuntimeError(f"cannot remove the template's kernels: {obs.get('content')}")
        for rel, data in files.items():
            resp = c.put(f"/v1/episodes/{ep}/files/{rel}", data)
            if resp.status not in (200, 201):
                raise RuntimeError(f"upload {rel}: HTTP {resp.status}: {resp.body[:300]!r}")
        t0 = time.monotonic()
        comp = post_tool(c, ep, "Compile", {})["observation"]
        t_compile_tool = time.monotonic() - t0
        out = post_tool(c, ep, "Submit", {})
        info = out.get("info") or {}
        rc = info.get("reward_components") or {}
        return {"reward": out.get("reward"), "eval_status": info.get("eval_status"),
                "compile_ok": not comp.get("is_error"), "compile_tool_s": t_compile_tool,
                "compile_log": comp.get("content", "")[-1500:], "components": rc}
    finally:
        c.delete(f"/v1/episodes/{ep}")


def classify(res):
    rc = res["components"]
    if not rc.get("compiled"):
        return "compile_error"
    if not rc.get("correct"):
        return "wrong"
    s = rc.get("speedup_eager")
    if s is None and rc.get("t_candidate_ms") and rc.get("t_eager_ms"):
        s = rc["t_eager_ms"] / rc["t_candidate_ms"]
    if s is None:
        return "correct (no timing)"
    return "fast" if s > FAST else "slow" if s < SLOW else "in between"


def fmt(v, spec=".2f"):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--kernelbench", default=str(DEFAULT_JSONL))
    ap.add_argument("--build-cache", help="reuse compiled objects, the PCH and the baselines (default: "
                                          "a fresh cache, so every figure is measured)")
    ap.add_argument("--only", nargs="*", help="task ids to check (default: all fixtures)")
    ap.add_argument("--no-overlay", action="store_true",
                    help="never serve the tasks through the CPU overlay")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the server's state folder")
    args = ap.parse_args()

    t_start = time.monotonic()
    binary = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-env"
    if not binary.is_file():
        print(f"{binary} missing: make -s all", flush=True)
        subprocess.run(["make", "-s", "all"], cwd=REPO, check=True)
    fixtures = json.loads(FIXTURES.read_text())
    if args.only:
        fixtures = [f for f in fixtures if f["task"] in args.only]
    records = kb_records(args.kernelbench)
    task_ids = [f["task"] for f in fixtures]
    unknown = [t for t in task_ids if t not in records]
    if unknown:
        print(f"not in {args.kernelbench}: {', '.join(unknown)}")
        return 2

    work = Path(tempfile.mkdtemp(prefix="kgym-bench-fixtures-"))
    server = Server(binary, work, ["--kernelbench", args.kernelbench], args.build_cache)
    source = "--kernelbench"
    try:
        c = server.client()
        no_cpu = [t for t in task_ids if not c.get(f"/v1/tasks/{t}").json.get("has_cpu_variant")]
        c.close()
        if no_cpu and not args.no_overlay:
            print(f"note: the server gives KernelBench tasks no CPU variant ({', '.join(no_cpu)}); "
                  f"serving them through a CPU overlay (same ids, code_cpu = code)", flush=True)
            server.stop()
            overlay = work / "kb-cpu-overlay.jsonl"
            write_overlay(records, task_ids, overlay)
            server = Server(binary, work, ["--tasks", str(overlay)], args.build_cache)
            source = "overlay"
        print(f"server: port {server.port}, tasks via {source}, build cache "
              f"{args.build_cache or '(fresh, under the state dir)'}; {time.monotonic() - t_start:.1f} s",
              flush=True)

        rows = []
        c = server.client()
        for fx in fixtures:
            t0 = time.monotonic()
            row = {"fixture": fx, "expect": fx["expect"]}
            if fx.get("path") is None:
                row.update(outcome="missing", wall_s=0.0)
            else:
                try:
                    res = run_fixture(c, fx)
                    row.update(res, outcome=classify(res))
                except Exception as exc:  # noqa: BLE001 (a failed fixture is a result)
                    row.update(outcome="error", error=str(exc)[:1000])
                row["wall_s"] = time.monotonic() - t0
            row["ok"] = row["outcome"] == fx["expect"]
            rows.append(row)
            rc = row.get("components", {})
            print(f"  {fx['task']:<9} {fx['expect']:<13} -> {row['outcome']:<13} "
                  f"{'ok' if row['ok'] else 'MISMATCH'}  ({row['wall_s']:.0f} s)", flush=True)
            if not row["ok"]:
                print("    " + json.dumps({k: row.get(k) for k in ("eval_status", "reward", "error")} |
                                          {k: rc.get(k) for k in ("error_code", "error", "checks_failed")},
                                          default=str)[:1500], flush=True)
        c.close()
    finally:
        server.stop()
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)], check=False)
        else:
            print(f"state kept in {work}")

    total = time.monotonic() - t_start
    print()
    print(f"{'task':<9} {'style':<11} {'expect':<13} {'outcome':<13} {'ok':<3} {'compiled':>8} {'correct':>7} "
          f"{'reward':>6} {'t_cand ms':>10} {'t_eager ms':>10} {'t_comp ms':>10} {'x eager':>8} {'x comp':>7} "
          f"{'build s':>7} {'wall s':>6}")
    # build s: the Compile tool's wall time (g++ in the sandbox; the torch PCH on a fresh cache)
    for row in rows:
        fx, rc = row["fixture"], row.get("components", {})
        sp = rc.get("speedup_eager")
        if sp is None and rc.get("t_candidate_ms") and rc.get("t_eager_ms"):
            sp = rc["t_eager_ms"] / rc["t_candidate_ms"]
        spc = rc.get("speedup_compile")
        if spc is None and rc.get("t_candidate_ms") and rc.get("t_compile_ms"):
            spc = rc["t_compile_ms"] / rc["t_candidate_ms"]
        print(f"{fx['task']:<9} {fmt(fx.get('style')):<11} {fx['expect']:<13} {row['outcome']:<13} "
              f"{'ok' if row['ok'] else 'NO':<3} {fmt(rc.get('compiled')):>8} {fmt(rc.get('correct')):>7} "
              f"{fmt(row.get('reward'), 'g'):>6} {fmt(rc.get('t_candidate_ms')):>10} {fmt(rc.get('t_eager_ms')):>10} "
              f"{fmt(rc.get('t_compile_ms')):>10} {fmt(sp):>8} {fmt(spc):>7} "
              f"{fmt(row.get('compile_tool_s'), '.1f'):>7} {row['wall_s']:>6.0f}")
    bad = [r for r in rows if not r["ok"]]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} fixtures in their expected class; total wall time "
          f"{total:.0f} s (server start, builds, baselines incl. torch.compile, evaluations)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"total_s": total, "source": source, "rows": rows}, f, indent=1, default=str)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
