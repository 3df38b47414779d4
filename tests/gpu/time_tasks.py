#!/usr/bin/env python3
"""Times every bundled task's model.py on a CUDA GPU: eager PyTorch and torch.compile.

For each dataset/tasks/<name>/model.py: build Model and its inputs directly on the GPU (seeded),
warm up, then time N forward calls with CUDA events around each call, the L2 cache flushed
between calls, and report the median. Prints a table, writes JSON, and flags tasks whose eager
time falls outside the 1-100 ms window the dataset promises (the paper's filter).

    python tests/gpu/time_tasks.py [--only NAME ...] [--iters 20] [--json out.json] [--strict]

--strict exits 1 when a task is flagged or fails, for CI.
"""
import argparse
import importlib.util
import json
import math
import pathlib
import statistics
import sys
import time
import traceback

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
WINDOW_MS = (1.0, 100.0)
L2_FLUSH_BYTES = 256 << 20  # several times the H200's 60 MB L2


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks-dir", type=pathlib.Path, default=REPO / "dataset" / "tasks")
    ap.add_argument("--only", nargs="*", help="task folder names (default: all)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true", help="time eager only")
    ap.add_argument("--json", type=pathlib.Path, default=pathlib.Path("task_timings.json"))
    ap.add_argument("--strict", action="store_true", help="exit 1 if any task is flagged")
    return ap.parse_args()


def load_module(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location("kgym_timed_" + path.parent.name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_forward(fn, inputs, warmup: int, iters: int, flush: torch.Tensor) -> list:
    """Per-call times in ms, each call bracketed by CUDA events, L2 flushed before each."""
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return times


def time_task(task_dir: pathlib.Path, args, flush: torch.Tensor) -> dict:
    meta = json.loads((task_dir / "task.json").read_text())
    row = {"id": f"kgym/{task_dir.name}", "name": task_dir.name, "level": meta.get("level"),
           "est_eager_ms": meta.get("est_eager_ms"), "eager_ms": None, "compile_ms": None,
           "compile_s": None, "error": None}
    module = load_module(task_dir / "model.py")
    # Build on the GPU directly: full-size inputs are gigabytes, slow to draw on the CPU.
    with torch.device("cuda"):
        torch.manual_seed(args.seed)
        model = module.Model(*module.get_init_inputs())
        torch.manual_seed(args.seed + 1)
        inputs = module.get_inputs()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]
    try:
        eager = time_forward(model, inputs, args.warmup, args.iters, flush)
        row["eager_ms"] = statistics.median(eager)
        row["eager_spread_ms"] = [min(eager), max(eager)]
        if not args.no_compile:
            compiled = torch.compile(model)
            t0 = time.perf_counter()
            with torch.no_grad():
                compiled(*inputs)
            torch.cuda.synchronize()
            row["compile_s"] = time.perf_counter() - t0
            comp = time_forward(compiled, inputs, args.warmup, args.iters, flush)
            row["compile_ms"] = statistics.median(comp)
    finally:
        del model, inputs
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return row


def flag_of(row: dict) -> str:
    if row["error"]:
        return "ERROR"
    lo, hi = WINDOW_MS
    return "" if lo <= row["eager_ms"] <= hi else "OUTSIDE 1-100 ms"


def fmt(v, spec=".3f"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def main() -> int:
    args = parse_args()
    if not torch.cuda.is_available():
        print("time_tasks.py: no CUDA device", file=sys.stderr)
        return 2
    names = sorted(p.name for p in args.tasks_dir.iterdir()
                   if p.is_dir() and not p.name.startswith("."))
    if args.only:
        unknown = set(args.only) - set(names)
        if unknown:
            print(f"unknown tasks: {sorted(unknown)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in args.only]
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    rows = []
    for name in names:
        try:
            row = time_task(args.tasks_dir / name, args, flush)
        except Exception as exc:  # one broken task must not hide the others' timings
            row = {"id": f"kgym/{name}", "name": name, "eager_ms": None, "compile_ms": None,
                   "error": f"{type(exc).__name__}: {exc}"}
            traceback.print_exc()
        row["flag"] = flag_of(row)
        rows.append(row)
        print(f"{name}: eager {fmt(row.get('eager_ms'))} ms, compile "
              f"{fmt(row.get('compile_ms'))} ms {row['flag']}", file=sys.stderr, flush=True)

    print(f"\n{'task':32s} {'L':>1s} {'est ms':>8s} {'eager ms':>9s} {'compile ms':>10s} "
          f"{'eager/compile':>13s}  flag")
    for r in rows:
        speed = (r["eager_ms"] / r["compile_ms"]) if r.get("eager_ms") and r.get("compile_ms") else None
        print(f"{r['name']:32s} {fmt(r.get('level'), 'd')} {fmt(r.get('est_eager_ms'), '.2f'):>8s} "
              f"{fmt(r.get('eager_ms')):>9s} {fmt(r.get('compile_ms')):>10s} "
              f"{fmt(speed, '.2f'):>13s}  {r['flag']}")
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "warmup": args.warmup, "iters": args.iters, "seed": args.seed,
        "window_ms": list(WINDOW_MS),
        "tasks": rows,
    }
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    flagged = [r["name"] for r in rows if r["flag"]]
    if flagged:
        print(f"flagged: {', '.join(flagged)}")
    return 1 if (flagged and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
