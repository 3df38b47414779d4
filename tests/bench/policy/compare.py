#!/usr/bin/env python3
"""Side-by-side table of `kgym-policy-cuda bench --json` and `bench_torch.py --json` (kgym issue 8),
with the issue's targets marked reached / NOT reached. Always exits 0 once a table is printed:
benchmarks report, they never gate (2: neither file could be read, or bad arguments).

The contract both JSON files follow (extra keys are allowed and ignored):

    {"train": {"tokens_per_s": float,   # trained tokens per second (B * T * steps / seconds)
               "tflops": float,         # tokens_per_s * FLOPs/token / 1e12
               "mfu": float,            # tflops / 790, a fraction (0.35); a value > 1.5 is read
                                        # as a percentage (35.0)
               "ms_per_step": float,
               "batch": int, "seq": int},            # optional: checked to match the other side
     "decode": [{"batch": int,          # sequences decoded together
                 "tokens_per_s": float, # generated tokens/s after the prefill, all rows together
                 "prefill_tokens_per_s": float,
                 "prompt": int, "new": int}, ...]}   # prompt/new optional, checked likewise

FLOPs/token = 6 * N_matmul + 6 * L * H * hd * T (bench_torch.py's docstring gives the detail).

Read defensively: a missing file, "train": null, a missing key, a non-number or a non-finite
number becomes "-" in the table and "NOT reached (no figure)" in the targets; "decode" may also
be an object keyed by batch size. The table's TFLOP/s and MFU are recomputed from each side's
tokens/s with the one formula above (so the two sides are compared by the same rule); when a
side's own figures differ from that by more than 2%, a note says so.

Targets (issue 8), all on the kgym side:
    train tokens/s >= PyTorch's;  train MFU >= 40%;
    decode >= 1,000 tokens/s at batch 1;  decode >= 20,000 tokens/s at batch 64.

usage: compare.py --kgym kgym.json --torch torch.json [--seq T] [--json combined.json]
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import PEAK_TFLOPS, QWEN2_5_0_5B, flops_per_token  # noqa: E402 (stdlib only)

TRAIN_MFU_TARGET = 0.40
DECODE_TARGETS = {1: 1000.0, 64: 20000.0}  # batch -> kgym decode tokens/s
REPORTED_TOLERANCE = 0.02


def number(value):
    """`value` as a finite float, or None for anything else (bools, strings, NaN, missing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def load(path, notes):
    """The JSON object in `path`, or None (with a note) when it is missing or unreadable."""
    if not path:
        return None
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        notes.append(f"{path}: not read ({exc})")
        return None
    if not isinstance(data, dict):
        notes.append(f"{path}: not a JSON object")
        return None
    return data


def train_figures(report):
    """The train section's figures, each a float or None."""
    train = report.get("train") if report else None
    if not isinstance(train, dict):
        train = {}
    figures = {key: number(train.get(key))
               for key in ("tokens_per_s", "tflops", "mfu", "ms_per_step", "batch", "seq")}
    if figures["mfu"] is not None and figures["mfu"] > 1.5:
        figures["mfu"] /= 100.0  # given as a percentage
    return figures


def decode_figures(report):
    """{batch: {"tokens_per_s", "prefill_tokens_per_s", "prompt", "new"}} from either a list of
    rows with a "batch" key or an object keyed by batch size."""
    decode = report.get("decode") if report else None
    if isinstance(decode, dict):
        rows = [dict(row, batch=key) for key, row in decode.items() if isinstance(row, dict)]
    elif isinstance(decode, list):
        rows = [row for row in decode if isinstance(row, dict)]
    else:
        rows = []
    figures = {}
    for row in rows:
        try:
            batch = int(row.get("batch"))
        except (TypeError, ValueError):
            continue
        figures[batch] = {key: number(row.get(key))
                          for key in ("tokens_per_s", "prefill_tokens_per_s", "prompt", "new")}
    return figures


def common_flops_per_token(reports, seq):
    """FLOPs/token of the run: the shape from the PyTorch report's config when it has one (a
    smoke-test shape), else Qwen2.5-0.5B's, at `seq` tokens per row."""
    for report in reports:
        config = report.get("config") if report else None
        if isinstance(config, dict) and all(number(config.get(k)) for k in
                                            ("vocab", "hidden", "intermediate", "layers",
                                             "heads", "kv_heads")):
            return flops_per_token({k: int(config[k]) for k in
                                    ("vocab", "hidden", "intermediate", "layers", "heads",
                                     "kv_heads")}, seq)
    return flops_per_token(QWEN2_5_0_5B, seq)


def run_seq(args, kgym, torch, notes):
    """Tokens per row for the formula: what the reports say, else --seq, else 2048."""
    seqs = sorted({int(s) for s in (kgym["seq"], torch["seq"]) if s})
    if len(seqs) > 1:
        notes.append(f"the two runs trained different T: {seqs}; not comparable")
    if seqs and args.seq and args.seq not in seqs:
        notes.append(f"--seq {args.seq} differs from the reports' T {seqs}; the reports win")
    return seqs[-1] if seqs else (args.seq or 2048)


def recompute(name, figures, fpt, peak, notes):
    """Sets the common-formula TFLOP/s and MFU of one side; notes a disagreeing report."""
    tps = figures["tokens_per_s"]
    common_tflops = tps * fpt / 1e12 if tps is not None else None
    for key, common in (("tflops", common_tflops),
                        ("mfu", common_tflops / peak if common_tflops is not None else None)):
        reported = figures[key]
        if reported is not None and common:
            if abs(reported - common) > REPORTED_TOLERANCE * common:
                notes.append(f"{name} reported {key} {reported:.4g}, the common formula gives "
                             f"{common:.4g} from its tokens/s; the table uses the latter")
        figures[key + "_common"] = common


def speedup(faster, slower):
    """faster / slower, or None when either is missing."""
    return faster / slower if faster is not None and slower else None


def status(value, target):
    """reached / NOT reached for value >= target."""
    if value is None or target is None:
        return "NOT reached (no figure)"
    return "reached" if value >= target else "NOT reached"


def row(metric, unit, kgym, torch, speed, target=None, target_text=""):
    """One table row; `unit` picks its formatting, `target` (kgym >= target) its status."""
    return {"metric": metric, "unit": unit, "kgym": kgym, "pytorch": torch,
            "kgym_speedup": speed, "target": target_text,
            "status": status(kgym, target) if target_text else ""}


def build_rows(kt, tt, kd, td, peak):
    """The table: training rows, then a tokens/s and a prefill row per decode batch size."""
    rows = [
        row("train tokens/s", "rate", kt["tokens_per_s"], tt["tokens_per_s"],
            speedup(kt["tokens_per_s"], tt["tokens_per_s"]), tt["tokens_per_s"], ">= PyTorch"),
        row("train TFLOP/s", "tflops", kt["tflops_common"], tt["tflops_common"],
            speedup(kt["tflops_common"], tt["tflops_common"])),
        row(f"train MFU (of {peak:g})", "fraction", kt["mfu_common"], tt["mfu_common"], None,
            TRAIN_MFU_TARGET, f">= {100 * TRAIN_MFU_TARGET:.0f}%"),
        row("train ms/step", "ms", kt["ms_per_step"], tt["ms_per_step"],
            speedup(tt["ms_per_step"], kt["ms_per_step"])),
    ]
    for batch in sorted(set(kd) | set(td) | set(DECODE_TARGETS)):
        k, t = kd.get(batch, {}), td.get(batch, {})
        target = DECODE_TARGETS.get(batch)
        rows.append(row(f"decode b{batch} tokens/s", "rate", k.get("tokens_per_s"),
                        t.get("tokens_per_s"),
                        speedup(k.get("tokens_per_s"), t.get("tokens_per_s")),
                        target, f">= {target:,.0f}" if target else ""))
        rows.append(row(f"decode b{batch} prefill tok/s", "rate",
                        k.get("prefill_tokens_per_s"), t.get("prefill_tokens_per_s"),
                        speedup(k.get("prefill_tokens_per_s"), t.get("prefill_tokens_per_s"))))
    return rows


def cell(value, unit):
    """A figure as the table shows it; "-" when missing."""
    if value is None:
        return "-"
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    if unit == "speedup":
        return f"{value:.2f}x"
    if unit == "rate" and value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def check_decode_settings(kd, td, notes):
    """Notes decode rows whose prompt or new-token counts differ between the two sides."""
    for batch in sorted(set(kd) & set(td)):
        for key in ("prompt", "new"):
            a, b = kd[batch].get(key), td[batch].get(key)
            if a is not None and b is not None and a != b:
                notes.append(f"decode batch {batch}: {key} {a:g} (kgym) vs {b:g} (PyTorch)")


def header(kgym, torch, kt, tt, kd, td, seq):
    """One line describing the run."""
    first = next((r for r in (torch, kgym) if r), {})
    batch = kt["batch"] or tt["batch"]
    rows = list(kd.values()) + list(td.values())
    prompt = next((r["prompt"] for r in rows if r.get("prompt")), None)
    new = next((r["new"] for r in rows if r.get("new")), None)
    parts = [f"policy bench: {first.get('shape', 'qwen2.5-0.5b')}",
             f"train B {batch:.0f} x T {seq}" if batch else f"train T {seq}"]
    if prompt and new:
        parts.append(f"decode prompt {prompt:.0f} + {new:.0f} new")
    device = (kgym or {}).get("device") or (torch or {}).get("device")
    if device:
        parts.append(str(device))
    if torch:
        train = torch.get("train") if isinstance(torch.get("train"), dict) else {}
        parts.append(f"PyTorch {torch.get('torch', '?')} + transformers "
                     f"{torch.get('transformers', '?')} ({train.get('precision', 'bf16 params')})")
    return ", ".join(parts)


def print_table(title, rows, notes):
    """Plain-text table on stdout, then the notes."""
    head = ["", "kgym (CUDA)", "PyTorch", "kgym speed-up", "target (kgym)", ""]
    lines = [head] + [[r["metric"], cell(r["kgym"], r["unit"]), cell(r["pytorch"], r["unit"]),
                       cell(r["kgym_speedup"], "speedup") if r["unit"] != "fraction" else "",
                       r["target"], r["status"]] for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    print(title)
    for line in lines:
        cells = [line[0].ljust(widths[0])]
        cells += [text.rjust(width) for text, width in zip(line[1:4], widths[1:4])]
        cells += [line[4].ljust(widths[4]), line[5]]
        print("  ".join(cells).rstrip())
    for note in notes:
        print(f"note: {note}")


def parse_args(argv):
    """Command line."""
    ap = argparse.ArgumentParser(
        description="Side-by-side table of kgym-policy-cuda bench and bench_torch.py JSON "
        "files, with issue 8's targets marked. Exit 0 once a table is printed.",
        epilog="The JSON contract is in this file's docstring.")
    ap.add_argument("--kgym", metavar="FILE", help="kgym-policy-cuda bench --json output")
    ap.add_argument("--torch", metavar="FILE", help="bench_torch.py --json output")
    ap.add_argument("--seq", type=int,
                    help="T of the training run when neither report gives train.seq (2048)")
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS,
                    help="peak for MFU (%(default)s)")
    ap.add_argument("--json", metavar="FILE", help="write the table and statuses here too")
    return ap.parse_args(argv)


def main(argv=None):
    """Reads both reports, prints the table, optionally writes it as JSON."""
    args = parse_args(argv)
    notes = []
    kgym, torch = load(args.kgym, notes), load(args.torch, notes)
    if kgym is None and torch is None:
        for note in notes:
            print(f"compare: {note}", file=sys.stderr)
        print("compare: no report to show", file=sys.stderr)
        return 2
    kt, tt = train_figures(kgym), train_figures(torch)
    kd, td = decode_figures(kgym), decode_figures(torch)
    seq = run_seq(args, kt, tt, notes)
    fpt = common_flops_per_token([torch, kgym], seq)
    recompute("kgym", kt, fpt, args.peak_tflops, notes)
    recompute("PyTorch", tt, fpt, args.peak_tflops, notes)
    check_decode_settings(kd, td, notes)
    shapes = {r.get("shape") for r in (kgym, torch) if r and isinstance(r.get("shape"), str)}
    if len(shapes) > 1:
        notes.append(f"the two runs used different shapes: {sorted(shapes)}; not comparable")
    if kt["batch"] and tt["batch"] and kt["batch"] != tt["batch"]:
        notes.append(f"train batch {kt['batch']:g} (kgym) vs {tt['batch']:g} (PyTorch)")
    rows = build_rows(kt, tt, kd, td, args.peak_tflops)
    notes.append(f"TFLOP/s and MFU: {fpt / 1e9:.3f} GFLOP/token (6*N_matmul + 6*L*H*hd*T, "
                 f"T {seq}) times each side's tokens/s; peak {args.peak_tflops:g} TFLOP/s")
    print_table(header(kgym, torch, kt, tt, kd, td, seq), rows, notes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "notes": notes,
                       "flops_per_token": fpt, "kgym": kgym, "pytorch": torch}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
