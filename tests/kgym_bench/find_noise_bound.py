"""Lists the KernelBench tasks whose reference output is mostly its own rounding noise: those the
judge holds to its rounding-noise floor instead of rtol (env/harness/judge.py, NOISE_BOUND).

KernelBench L2/23 (Conv3d, GroupNorm, mean) returns the mean of a GroupNorm's output: exactly 0
for every input, computed as float32 noise, which no other honest program reproduces to 1%.
This finds such tasks the way the judge does: for each task, in a worker process of its own, the
judge's own Judge.reference_noise() runs the reference in float32 and as a float64 copy on one
fresh draw, and reports per output their distance over the output's norm (capped at 1).

To fit a CPU, a task's `batch_size = N` line is set to --batch (noise-boundness is per sample:
a smaller batch does not change it); tasks that still take longer than --timeout or more memory
than --max-gb are listed as skipped with the reason. Prints one line per task: level, id, name,
relative noise (total), and '*' where the judge's floor applies.

usage: PY find_noise_bound.py [--jsonl PATH] [--levels 1,2,3] [--only IDS] [--batch 2]
                              [--timeout 60] [--max-gb 8] [--jobs 2] [--json OUT]
(PY: the project venv's python (mk/venv.sh prints its path); torch CPU is enough.)
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS = os.path.join(HERE, "..", "..", "env", "harness")
sys.path.insert(0, HERE)
from find_cpu_tasks import DEFAULT_JSONL, load_tasks  # noqa: E402  (the same JSONL, read the same way)

# What a worker runs: the judge's estimate for one reference file, as one JSON line.
WORKER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
import judge
j = judge.Judge({"reference": sys.argv[2], "device": "cpu", "seed": 1})
j.ref_model = j.ref_mod.Model(*j.init_args).eval()
noise = j.reference_noise()
print(json.dumps({"noise": noise, "why": j.components["reference_noise"]["task"].get("why"),
                  "bound": judge.NOISE_BOUND}))
"""


def task_id(rec):
    return f"kb/L{rec['level']}/{rec['problem_id']}"


def shrink(code, batch):
    """The task's code with its batch size set to batch (when it has one such line)."""
    return re.sub(r"^batch_size\s*=\s*\d+\s*$", f"batch_size = {batch}", code, count=1, flags=re.M)


def limit_memory(max_bytes):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


def estimate(rec, args, tmp):
    """{"noise": ..., "why": ...} for one task, or {"skipped": reason}."""
    path = os.path.join(tmp, f"L{rec['level']}_{rec['problem_id']}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(shrink(rec["code"], args.batch))
    try:
        p = subprocess.run([sys.executable, "-c", WORKER, HARNESS, path], capture_output=True, text=True,
                           timeout=args.timeout, preexec_fn=limit_memory(int(args.max_gb * (1 << 30))))
    except subprocess.TimeoutExpired:
        return {"skipped": f"over {args.timeout} s"}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        last = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        return {"skipped": last[:160]}
    return json.loads(lines[-1])


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jsonl", default=DEFAULT_JSONL, help="KernelBench JSONL (default: ../shared's)")
    ap.add_argument("--levels", default="1,2,3", help="comma-separated levels (default 1,2,3)")
    ap.add_argument("--only", default="", help="comma-separated task ids (kb/L2/13,...): these only")
    ap.add_argument("--batch", type=int, default=2, help="batch_size each task runs with (default 2)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per task (default 60)")
    ap.add_argument("--max-gb", type=float, default=8, help="address space per worker (default 8)")
    ap.add_argument("--jobs", type=int, default=2, help="workers at once (default 2)")
    ap.add_argument("--json", help="also write every task's result here")
    args = ap.parse_args(argv)
    try:
        args.levels = {int(x) for x in args.levels.split(",") if x}
    except ValueError:
        ap.error("--levels: comma-separated integers")
    if args.batch < 1 or args.jobs < 1 or args.timeout <= 0 or args.max_gb <= 0:
        ap.error("--batch, --jobs, --timeout and --max-gb must be positive")
    if not os.path.isfile(args.jsonl):
        ap.error(f"--jsonl: {args.jsonl}: no such file")
    return args


def main(argv):
    args = parse_args(argv)
    tasks = load_tasks(args.jsonl, args.levels)
    only = {x for x in args.only.split(",") if x}
    if only:
        tasks = [r for r in tasks if task_id(r) in only]
        missing = only - {task_id(r) for r in tasks}
        if missing:
            print(f"find_noise_bound.py: not among the tasks of --levels: {', '.join(sorted(missing))}",
                  file=sys.stderr)
            return 2
    results, bound = {}, []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        futures = [(rec, pool.submit(estimate, rec, args, tmp)) for rec in tasks]
        for n, (rec, fut) in enumerate(futures, 1):
            r = fut.result()
            tid = task_id(rec)
            results[tid] = r
            noise = r.get("noise")
            if noise:
                mark = "*" if noise["total"] >= r["bound"] else " "
                if mark == "*":
                    bound.append(tid)
                shown = f"{noise['total']:.2g}"
            else:
                mark, shown = " ", "skipped: " + r.get("skipped", r.get("why") or "?")
            print(f"[{n}/{len(tasks)}] {mark} {tid:<10} {rec['name'][:48]:<48} {shown}", flush=True)
    print(f"noise-bound (the judge's floor applies): {len(bound)}: {', '.join(bound) or 'none'}")
    print(f"skipped: {sum(1 for r in results.values() if not r.get('noise'))} of {len(results)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
