"""make test-gpu suite: the trusted evaluation on CUDA, through the HTTP API of a real server.

  1. the untouched template solves its own task (test/axpby);
  2. real CUDA solutions of bundled tasks (solutions/bundled/) compile, verify and profile,
     and their speed-ups are printed;
  3. the GPU-only exploits (tests/gpu/exploits/): each first earns >= 2 from the naive in-process
     checker (naive_cuda.py, the positive control), then -1 or no speed credit from kgym;
  4. the CPU exploit suite's pure-Python cheats (tests/harness/exploits/ without C++ kernels),
     now on CUDA: each must get -1 from kgym.

usage: eval_gpu.py [--python PY] [--server BIN] [--only NAME[,NAME...]]   (needs root and a GPU)
"""
import argparse
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("kgym_http", REPO / "tests" / "api" / "kgym_http.py")
kgym_http = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kgym_http)

FAILURES = []
LOCK = threading.Lock()
FINISHED = set()  # names of the cases that ended (passed, failed or raised)
ALL_CASES = []  # in the order they were queued
STOPPING = threading.Event()  # set when interrupted: queued cases are not started


def check(cond, what):
    with LOCK:
        print(("  ok    " if cond else "  FAIL  ") + what, flush=True)
        if not cond:
            FAILURES.append(what)


def term_with_parent():
    """In the server's child before exec: SIGTERM (its drain) when this script dies, even by
    SIGKILL, so that no server outlives the call (an orphan kept its cgroup leaf busy)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Server:
    def __init__(self, binary, python, state, eval_timeout=900):
        self.state = Path(state)
        cmd = [binary, "serve", "--port", "0", "--state-dir", str(self.state), "--template", str(REPO / "env/template"),
               "--sandbox-profiles", str(REPO / "sandbox_profiles"), "--sandbox-python", python,
               "--harness", str(REPO / "env/harness"), "--tasks", str(REPO / "dataset/tasks"),
               "--tasks", str(REPO / "tests/gpu/tasks"), "--tasks", str(REPO / "tests/harness/tasks"),
               "--idle-timeout", "0", "--eval-timeout", str(eval_timeout)]
        # not --quiet: the per-request lines say what each case was doing if the server fails
        self.log = open(self.state.parent / "server.log", "w+")
        env = dict(os.environ)
        if os.environ.get("KGYM_SERVER_LIBS"):  # carried shared libraries, for the server alone
            env["LD_LIBRARY_PATH"] = os.environ["KGYM_SERVER_LIBS"]
        # its own process group, so that stop() ends it and whatever it started even when a case hangs
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, cwd=REPO, env=env,
                                     start_new_session=True, preexec_fn=term_with_parent)
        self.port = None
        for _ in range(300):
            time.sleep(0.1)
            self.log.seek(0)
            for line in self.log:
                if '"listening"' in line:
                    self.port = json.loads(line)["port"]
            if self.port or self.proc.poll() is not None:
                break
        if not self.port:
            self.log.seek(0)
            sys.exit("the server did not start:\n" + self.log.read()[-3000:])
        self.local = threading.local()

    @property
    def client(self):
        """One keep-alive connection per thread: cases run in parallel."""
        if not hasattr(self.local, "c"):
            self.local.c = kgym_http.Client(self.port, timeout=1800)
        return self.local.c

    def stop(self):
        """SIGTERM (the server drains and cleans its cgroups), SIGKILL to its process group after
        20 s; then the server's log and each episode's trajectory (every step's result) go to
        $KGYM_EVAL_LOGS if set."""
        if self.proc.poll() is None:
            self.proc.terminate()  # a drain: in-flight steps finish first (a hung one never does)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        keep = os.environ.get("KGYM_EVAL_LOGS")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(self.state.parent / "server.log", Path(keep) / "server.log")
            for log in self.state.glob("episodes/*/trajectory.jsonl"):
                dst = Path(keep) / log.relative_to(self.state)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(log, dst)


def upload(c, ep, folder):
    for f in sorted(Path(folder).rglob("*")):
        rel = f.relative_to(folder).as_posix()
        if f.is_file() and not rel.endswith(".json") and not rel.endswith(".md"):
            r = c.put(f"/v1/episodes/{ep}/files/{rel}", f.read_bytes())
            # a refused file (model.py, a fixed file) is part of some exploits: it stays refused
            assert r.status in (200, 201) or rel in ("model.py", "binding.cpp", "binding_registry.h"), \
                (rel, r.status, r.text)


def tool(c, ep, name, **args):
    r = c.post(f"/v1/episodes/{ep}/tools/{name}", json.dumps(args).encode())
    assert r.status == 200, (name, r.status, r.text)
    return r.json


VARIANT = "gpu"  # --variant cpu: a dry run of the plumbing on a machine without a GPU


def create(c, task):
    r = c.post("/v1/episodes", json.dumps({"task_id": task, "options": {"variant": VARIANT}}).encode())
    assert r.status == 201, r.text
    return r.json["episode_id"]


def figures(comp):
    f = lambda k: comp.get(k) if comp.get(k) is not None else float("nan")  # noqa: E731
    return (f"t={f('t_candidate_ms'):.4g} ms (cv {100 * f('spread_candidate'):.2g}%), eager {f('t_eager_ms'):.4g} ms "
            f"x{f('speedup_eager'):.3g}, compile {f('t_compile_ms'):.4g} ms x{f('speedup_compile'):.3g}, "
            f"eval {f('eval_ms') / 1e3:.1f} s, flush ref {f('flush_ref_used_ms'):.3g} ms +{f('flush_excess_ms'):.3g} "
            f"(charged {f('flush_charged_ms'):.3g}), "
            f"write ref {f('write_ref_ms'):.3g} ms +{f('write_excess_ms'):.3g} (reported)")


def submit(c, ep):
    out = tool(c, ep, "Submit")
    comp = out["info"].get("reward_components", {})
    return out["reward"], comp, out["observation"]["content"]


def run_template(srv):
    ep = create(srv.client, "test/axpby")
    r, comp, text = submit(srv.client, ep)
    check(r is not None and r >= 1, f"template: reward {r}; {figures(comp)}")
    if r is None or r < 1:
        print(text)


def wanted(name, only):
    """--only: comma-separated strings, a case runs if its name holds one of them ("" = all)."""
    return not only or any(o and o in name for o in only.split(","))


def solution_cases(srv, only):
    for sol in sorted((REPO / "solutions/bundled").iterdir()):
        meta = sol / "solution.json"
        if meta.is_file() and wanted(sol.name, only):
            yield sol.name, lambda sol=sol: run_solution(srv, sol)


def run_solution(srv, sol):
    meta = sol / "solution.json"
    task = json.loads(meta.read_text())["task"]
    task_id = task if "/" in task else ("test/axpby" if task == "axpby" else f"kgym/{task}")
    ep = create(srv.client, task_id)
    upload(srv.client, ep, sol)
    prof = tool(srv.client, ep, "Profile")
    r, comp, text = submit(srv.client, ep)
    check(r is not None and r >= 1, f"{sol.name}: reward {r}; {figures(comp)}")
    if r is None or r < 1:
        print(prof["observation"]["content"][-3000:])
        print(text[-3000:])


def naive(python, model_py, workspace, ext_dir):
    out = subprocess.run([python, str(REPO / "tests/gpu/naive_cuda.py"), "--model", model_py, "--workspace",
                          workspace, "--ext-dir", ext_dir], capture_output=True, text=True, timeout=1200)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"reward": None, "error": out.stderr[-2000:]}


def exploit_cases(srv, python, folder, only, pure_python_only=False):
    for ex in sorted(folder.iterdir()):
        meta_path = ex / "exploit.json"
        if not meta_path.is_file() or not wanted(ex.name, only):
            continue
        if pure_python_only and any((ex / "kernels").glob("*.c*")):
            continue
        task = json.loads(meta_path.read_text())["task"]
        if pure_python_only and not (REPO / "tests/harness/tasks" / task).is_dir():
            continue
        yield ex.name, lambda ex=ex: run_exploit(srv, python, ex)


def run_exploit(srv, python, ex):
    meta = json.loads((ex / "exploit.json").read_text())
    task = meta["task"]
    task_id = task if "/" in task else f"kgym/{task}"
    ep = create(srv.client, task_id)
    upload(srv.client, ep, ex)
    comp_out = tool(srv.client, ep, "Compile")
    ext = srv.state / "episodes" / ep / "build" / "out"
    model_py = srv.state / "episodes" / ep / "work" / "model.py"
    with tempfile.TemporaryDirectory() as ws:
        for f in ex.rglob("*"):
            if f.is_file():
                dst = Path(ws) / f.relative_to(ex)
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(f.read_bytes())
        n = naive(python, str(model_py), ws, str(ext))
    r, comp, text = submit(srv.client, ep)
    want = meta.get("kgym_expect", "fail")
    stopped = r == -1 if want == "fail" else (r is not None and r <= 1)
    # some cheats only the CPU suite's naive checker allows ("naive_cuda": false); some fool its
    # correctness on CUDA but gain no speed on a launch-bound task ("naive_cuda_min": 1, with why)
    if meta.get("naive_cuda", True):
        floor = int(meta.get("naive_cuda_min", 2))
        check((n.get("reward") or -9) >= floor, f"{ex.name}: the naive checker pays {n.get('reward')} (>= {floor}) "
                                             f"(control; compile: {comp_out['observation']['is_error'] is False})")
    check(stopped, f"{ex.name}: kgym pays {r} (expected {want}); {comp.get('checks_failed') or figures(comp)}")


def timed_case(srv, name, case):
    if STOPPING.is_set():  # interrupted: the server is going away; said once, by main()
        return
    print(f"  ...   {name}: started", flush=True)
    t0 = time.monotonic()
    try:
        case()
    except Exception as exc:  # said at once: main() reports it only when it reaches this case
        status = srv.proc.poll()
        print(f"  ...   {name}: raised {type(exc).__name__}: {str(exc)[-1500:]}"
              f"{'' if status is None else f' (the server has exited, status {status})'}", flush=True)
        raise
    finally:
        with LOCK:
            FINISHED.add(name)
        print(f"  ...   {name}: done in {time.monotonic() - t0:.0f} s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--server", default=str(REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-env"))
    ap.add_argument("--only", default="", help="run the cases whose name holds one of these comma-separated strings")
    ap.add_argument("--parts", default="template,solutions,gpu_exploits,cpu_exploits")
    ap.add_argument("--jobs", type=int, default=4, help="cases at once (the GPU lease serialises timing)")
    ap.add_argument("--variant", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--skip", default="", help="comma-separated case names to leave out")
    ap.add_argument("--eval-timeout", type=int, default=900, help="the server's limit per evaluation (s)")
    args = ap.parse_args()
    global VARIANT
    VARIANT = args.variant
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # a killed server leaves mounts
        srv = Server(args.server, args.python, Path(tmp) / "state", args.eval_timeout)
        try:
            cases = []
            if "template" in parts and not args.only:
                cases.append(("template", lambda: run_template(srv)))
            if "solutions" in parts:
                cases += list(solution_cases(srv, args.only))
            if "gpu_exploits" in parts:
                cases += list(exploit_cases(srv, args.python, REPO / "tests/gpu/exploits", args.only))
            if "cpu_exploits" in parts:
                cases += list(exploit_cases(srv, args.python, REPO / "tests/harness/exploits", args.only, True))
            skip = {x for x in args.skip.split(",") if x}
            cases = [c for c in cases if c[0] not in skip]
            print(f"eval_gpu: {len(cases)} cases, {args.jobs} at a time", flush=True)
            ALL_CASES[:] = [name for name, _ in cases]
            pool = ThreadPoolExecutor(args.jobs)
            for fut in [pool.submit(timed_case, srv, name, case) for name, case in cases]:
                try:
                    fut.result()
                except Exception as exc:  # one broken case never stops the others
                    check(False, f"a case raised {type(exc).__name__}: {exc}")
            pool.shutdown()
        except KeyboardInterrupt:
            # out of time (timeout(1)): said before the stop, which makes the cases in flight raise
            STOPPING.set()
            with LOCK:
                unfinished = [n for n in ALL_CASES if n not in FINISHED]
            print(f"eval_gpu: interrupted; {len(unfinished)} case(s) had not ended (those in flight "
                  f"now fail as the server stops; the rest never start): {', '.join(unfinished)}", flush=True)
            raise
        finally:
            # before the threads are joined: a hung case's request ends when the server does
            srv.stop()
    print(f"eval_gpu: {len(FAILURES)} failure(s)")
    for f in FAILURES:
        print("  " + f)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    # timeout(1) sends SIGINT or SIGTERM: both unwind main(), which stops the server
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        code = main()
    except KeyboardInterrupt:
        print("eval_gpu: interrupted; the server was stopped", flush=True)
        code = 130
    sys.stdout.flush()
    os._exit(code)  # hung case threads (if any) are not waited for
