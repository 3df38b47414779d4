"""Finds KernelBench tasks small enough for a CPU-only CI machine: the pool kgym-bench's CPU
fixtures (fixtures.json) are drawn from.

For every task of the KernelBench JSONL (never copied into the project: read from where it lies):
  1. size it without allocating: the task's code runs with factory functions defaulting to the
     meta device (torch.device("meta") as a context), so get_init_inputs()/get_inputs() and
     Model(...) give shapes and dtypes only; inputs and parameters are summed in MB;
  2. for the tasks whose inputs + parameters stay under --max-mb, times a real eager forward on
     the CPU with torch.set_num_threads(1) (median of a few calls after one warm-up call), in a
     worker process that is killed and replaced when a task runs past --timeout.

Prints a table (level, id, name, input MB, param MB, eager ms) of the tasks it timed, those at
most --max-ms marked '*' and those fixtures.json uses marked 'F', and the reason for the others
with --all. Eager times are wall-clock medians on a machine that may be busy: compare them with
each other, not with another machine's.

usage: PY find_cpu_tasks.py [--jsonl PATH] [--levels 1,2,3] [--max-mb 200] [--max-ms 600]
                            [--timeout 5] [--all] [--json OUT]
(PY: the project venv's python (mk/venv.sh prints its path); torch CPU is enough.)
"""
import argparse
import json
import os
import select
import subprocess
import sys
import time

DEFAULT_JSONL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                             "shared", "kernelbench", "kernelbench-l1-l3.jsonl")


def load_tasks(path, levels):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if rec["level"] in levels:
                    out.append(rec)
    return out


def nbytes(torch, objs):
    total = 0
    for o in objs:
        if isinstance(o, torch.Tensor):
            total += o.numel() * o.element_size()
        elif isinstance(o, (list, tuple)):
            total += nbytes(torch, o)
    return total


def size_task(torch, code):
    """(input bytes, parameter+buffer bytes or None, error or None) without allocating."""
    ns = {"__name__": "kb_task"}
    with torch.device("meta"):
        exec(compile(code, "<task>", "exec"), ns)
        init = ns["get_init_inputs"]()
        inputs = ns["get_inputs"]()
        in_b = nbytes(torch, inputs)
        try:
            model = ns["Model"](*init)
            par_b = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
        except Exception:  # a Model that needs real values in __init__: unknown size
            par_b = None
    return in_b, par_b


def time_task(torch, code, reps=5, budget_s=1.0):
    """Median ms of an eager forward (fresh inputs per call, like the harness), after a warm-up."""
    ns = {"__name__": "kb_task"}
    exec(compile(code, "<task>", "exec"), ns)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]()).eval()
    times = []
    with torch.no_grad():
        model(*ns["get_inputs"]())  # warm-up (first-call allocations, lazy init)
        t_end = time.perf_counter() + budget_s
        for _ in range(reps):
            inputs = ns["get_inputs"]()
            t0 = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
            if time.perf_counter() > t_end:
                break
    times.sort()
    return times[len(times) // 2]


def worker():
    """Reads task code (one JSON string a line) from stdin, answers {"ms"} or {"error"} a line."""
    import torch
    torch.set_num_threads(1)
    for line in sys.stdin:
        code = json.loads(line)
        try:
            res = {"ms": time_task(torch, code)}
        except Exception as exc:  # noqa: BLE001 (any task failure is a result, not a crash)
            res = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        print(json.dumps(res), flush=True)


class Worker:
    def __init__(self):
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.slack = 30.0  # the first task also waits for the worker's import of torch

    def run(self, code, timeout):
        self.p.stdin.write(json.dumps(code) + "\n")
        self.p.stdin.flush()
        ready, _, _ = select.select([self.p.stdout], [], [], timeout + self.slack)
        self.slack = 0.0
        if not ready:
            return None
        line = self.p.stdout.readline()
        return json.loads(line) if line else {"error": "worker died"}

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def main():
    if "--worker" in sys.argv:
        worker()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--jsonl", default=DEFAULT_JSONL)
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--max-mb", type=float, default=200.0, help="inputs + parameters, MB")
    ap.add_argument("--max-ms", type=float, default=600.0, help="eager forward, ms, to be marked '*'")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per task (warm-up + timing)")
    ap.add_argument("--all", action="store_true", help="also list the tasks not timed, and why")
    ap.add_argument("--json", help="write every row here as JSON")
    args = ap.parse_args()

    import torch
    fixtures = set()
    fx_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures.json")
    if os.path.exists(fx_path):
        with open(fx_path) as f:
            fixtures = {x["task"] for x in json.load(f)}
    levels = {int(x) for x in args.levels.split(",")}
    tasks = load_tasks(args.jsonl, levels)
    rows = []
    t_start = time.monotonic()
    w = None
    for rec in tasks:
        row = {"level": rec["level"], "id": rec["problem_id"], "name": rec["name"].removesuffix(".py"),
               "input_mb": None, "param_mb": None, "eager_ms": None, "why": ""}
        rows.append(row)
        try:
            in_b, par_b = size_task(torch, rec["code"])
        except Exception as exc:  # noqa: BLE001
            row["why"] = f"sizing failed: {type(exc).__name__}: {exc}"[:120]
            continue
        row["input_mb"] = in_b / 1e6
        row["param_mb"] = None if par_b is None else par_b / 1e6
        total_mb = row["input_mb"] + (row["param_mb"] or 0.0)
        if total_mb > args.max_mb:
            row["why"] = f"{total_mb:.0f} MB"
            continue
        if w is None:
            w = Worker()
        res = w.run(rec["code"], args.timeout)
        if res is None:
            w.stop()
            w = None
            row["why"] = f"over {args.timeout:g} s"
        elif "error" in res:
            row["why"] = res["error"]
        else:
            row["eager_ms"] = res["ms"]
    if w is not None:
        w.stop()

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    print(f"{'':2} {'level':>5} {'id':>4}  {'name':<52} {'input MB':>9} {'param MB':>9} {'eager ms':>9}")
    shown = 0
    for r in rows:
        if r["eager_ms"] is None and not args.all:
            continue
        mark = "*" if r["eager_ms"] is not None and r["eager_ms"] <= args.max_ms else " "
        shown += mark == "*"
        mark += "F" if f"kb/L{r['level']}/{r['id']}" in fixtures else " "
        print(f"{mark:2} {r['level']:>5} {r['id']:>4}  {r['name'][:52]:<52} {fmt(r['input_mb'], '9.2f')} "
              f"{fmt(r['param_mb'], '9.2f')} {fmt(r['eager_ms'], '9.2f')}" + (f"  ({r['why']})" if r["why"] else ""))
    timed = sum(r["eager_ms"] is not None for r in rows)
    print(f"\n{len(rows)} tasks; {timed} timed (inputs + parameters <= {args.max_mb:g} MB); "
          f"{shown} at most {args.max_ms:g} ms ('*'); 'F': in fixtures.json; torch {torch.__version__}, 1 thread; "
          f"{time.monotonic() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
