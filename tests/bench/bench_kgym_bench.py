"""make bench: kgym-bench's wall time per task of a full evaluation, cold (empty build cache:
objects, torch PCH, eager/compile baselines) and warm (the same run again: baselines and objects
cached), through a private kgym-env.

usage: bench_kgym_bench.py [--device cpu|cuda] [--python PY] [--bench BIN] [--kernelbench JSONL]
                           [--json OUT]
CPU: the CI fixture set (tests/kgym_bench/fixtures.json, KernelBench tasks from ../shared);
CUDA: the bundled tasks with solutions/bundled. Needs root (the sandbox), like the server."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(args, out, cache):
    cmd = args + ["--out", str(out), "--restart", "--quiet", "--server-arg", "--build-cache",
                  "--server-arg", str(cache)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    wall = time.monotonic() - t0
    if p.returncode not in (0, 2):
        sys.exit(f"kgym-bench failed ({p.returncode}):\n{p.stderr[-3000:]}")
    res = json.loads((out / "results.json").read_text())
    per = {t["task_id"]: t.get("eval_s") for t in res["tasks"] if t["status"] != "missing"}
    return wall, per, res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--bench", default=str(REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-bench"))
    ap.add_argument("--kernelbench", default=str(REPO.parent / "shared/kernelbench/kernelbench-l1-l3.jsonl"))
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.device == "cpu":
        if not Path(a.kernelbench).is_file():
            sys.exit(f"KernelBench JSONL not found at {a.kernelbench} (--kernelbench)")
        fixtures = json.loads((REPO / "tests/kgym_bench/fixtures.json").read_text())
        args = [a.bench, "run", "--kernelbench", a.kernelbench, "--variant", "cpu", "--solutions",
                str(REPO / "tests/kgym_bench/solutions"), "--python", a.python]
        for f in fixtures:
            if f["expect"] != "missing":
                args += ["--only", f["task"]]
        what = f"{len(fixtures) - 1} CPU fixtures (KernelBench)"
    else:
        args = [a.bench, "run", "--tasks", str(REPO / "dataset/tasks"), "--solutions",
                str(REPO / "solutions/bundled"), "--python", a.python]
        what = "bundled tasks with solutions/bundled"
    with tempfile.TemporaryDirectory(prefix="kgym-bench-bench-") as tmp:
        tmp = Path(tmp)
        cold_wall, cold, _ = run(args, tmp / "cold", tmp / "cache")
        warm_wall, warm, res = run(args, tmp / "warm", tmp / "cache")
    figures = {"device": a.device, "what": what, "tasks": len(warm), "cold_wall_s": cold_wall,
               "warm_wall_s": warm_wall, "warm_per_task_s": warm, "cold_per_task_s": cold,
               "warm_median_s": statistics.median(v for v in warm.values() if v is not None)}
    print(f"kgym-bench ({a.device}): {what}, {len(warm)} evaluated tasks")
    print(f"  whole run, cold cache (builds, PCH, baselines)   {cold_wall:8.1f} s")
    print(f"  whole run, warm (baselines and objects cached)   {warm_wall:8.1f} s")
    print(f"  per task, warm: median {figures['warm_median_s']:.1f} s")
    for tid, s in warm.items():
        st = next(t["status"] for t in res["tasks"] if t["task_id"] == tid)
        print(f"    {tid:<34} {s:7.1f} s warm  {cold.get(tid, float('nan')):7.1f} s cold  ({st})")
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
