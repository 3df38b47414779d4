#!/usr/bin/env python3
"""PyTorch reference for `kgym-policy-cuda bench`: HF transformers trains and decodes the same
Qwen2.5-0.5B-shaped model (random weights) so the two can be put side by side (kgym issue 8).

Model: `Qwen2Config` (vocab 151936, hidden 896, intermediate 4864, 24 layers, 14 heads, 2 KV
heads, head_dim 64, rope_theta 1e6, rms_norm_eps 1e-6, tied embeddings) built with
`AutoModelForCausalLM.from_config(dtype=torch.bfloat16, attn_implementation="sdpa")` and HF's own
random initialisation.

Training: B rows of T random ids per step, `labels = input_ids` (HF shifts them), `use_cache=False`,
`loss.backward()`, `clip_grad_norm_(1.0)`, `torch.optim.AdamW(lr=1e-5, fused=True)`. By default
the optimizer steps the bf16 parameters themselves: that is the usual PyTorch speed baseline,
and it is cheaper than what kgym does (kgym keeps fp32 master weights and fp32 Adam moments).
`--fp32-master` is the like-for-like variant: fp32 parameters (and moments), the forward and
backward under `torch.autocast(bfloat16)`. `--warmup` steps are untimed; then `--steps` steps run
between two `torch.cuda.synchronize()` calls.

Decoding: for each batch size, prompts of P random ids (equal lengths, no padding) and
`model.generate(max_new_tokens=N, min_new_tokens=N, do_sample=False, eos_token_id=None,
pad_token_id=0, use_cache=True)` (HF's default dynamic KV cache). A generate with
max_new_tokens=1 measures the prefill (median of 3); the full one (median of --decode-repeats)
adds N-1 decode steps, so

    decode tokens/s  = batch * (N - 1) / (t_full - t_prefill)
    prefill tokens/s = batch * P / t_prefill

FLOPs (the same formula as the C side, so that MFU is comparable):

    FLOPs/token = 6 * N_matmul + 6 * L * H * hd * T

N_matmul counts every matmul weight: per layer q, k, v, o (hidden x (H + 2 KV + H) * hd) and the
MLP's gate, up, down (3 * hidden * intermediate), plus the LM head (vocab * hidden; the tied
embedding is counted once, as the head; the embedding lookup is no matmul). Biases and norms are
not counted. 6 * L * H * hd * T is attention's QK^T and PV over the causal half of a T-long
row (forward 2, backward 4). TFLOP/s = tokens/s * FLOPs/token / 1e12; MFU = TFLOP/s / peak, the
peak being the H200's measured 790 TFLOP/s dense bf16 (`--peak-tflops`). For the default shape
and T 2048: N_matmul 493,961,216, 3.228 GFLOP/token; 86,000 tokens/s is 278 TFLOP/s, 35% MFU.

JSON (`--json FILE`), the shape `kgym-policy-cuda bench --json` writes, plus extra keys:

    {"impl": "pytorch", "shape": "qwen2.5-0.5b" | "custom", "config": {...}, "device": "...",
     "torch": "2.11.0", "transformers": "5.24.0", "cuda": "13.0", "peak_tflops": 790,
     "n_matmul_params": 493961216, "flops_per_token": 3228..., "seed": 0,
     "train": {"batch", "seq", "steps", "warmup", "tokens_per_s", "tflops", "mfu" (a fraction,
               0.35), "ms_per_step", "ms_per_step_median", "loss_first", "loss_last",
               "precision", "optimizer", "peak_mem_gib"} | null (--skip-train),
     "decode": [{"batch", "prompt", "new", "tokens_per_s", "prefill_tokens_per_s", "prefill_s",
                 "full_s"}, ...]}  ([] with --skip-decode)

Smoke test on a CPU (tiny shape, no GPU):

    python bench_torch.py --device cpu --layers 2 --hidden 128 --heads 2 --kv-heads 1 \\
        --intermediate 256 --vocab 1000 --train-batch 2 --seq 32 --steps 2 --warmup 1 \\
        --decode-batches 1,2 --prompt 8 --new 4
"""
import argparse
import json
import math
import statistics
import sys
import time

# Qwen2.5-0.5B's shape (its config.json), the one the C side's `--shape qwen2.5-0.5b` names.
QWEN2_5_0_5B = {
    "vocab": 151936,
    "hidden": 896,
    "intermediate": 4864,
    "layers": 24,
    "heads": 14,
    "kv_heads": 2,
    "rope_theta": 1e6,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
PEAK_TFLOPS = 790.0  # H200, bf16 dense, measured (tests/bench/kernels/bench_matmul.cu)
SHAPE_OVERRIDES = ("vocab", "hidden", "intermediate", "layers", "heads", "kv_heads")


def head_dim(shape):
    """Width of one attention head."""
    return shape["hidden"] // shape["heads"]


def n_matmul_params(shape):
    """Weights that take part in a matmul: attention and MLP projections and the LM head.

    The tied embedding counts once, as the head; the embedding lookup, biases and norms are
    not matmuls and are left out."""
    hd = head_dim(shape)
    attn = shape["hidden"] * (2 * shape["heads"] + 2 * shape["kv_heads"]) * hd
    mlp = 3 * shape["hidden"] * shape["intermediate"]
    return shape["layers"] * (attn + mlp) + shape["vocab"] * shape["hidden"]


def flops_per_token(shape, seq):
    """Training FLOPs per token: 6 * N_matmul + 6 * L * H * hd * T (see the module docstring)."""
    attn = 6 * shape["layers"] * shape["heads"] * head_dim(shape) * seq
    return 6 * n_matmul_params(shape) + attn


def positive_int(text):
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 1")
    return value


def batch_list(text):
    """argparse type: a comma-separated list of batch sizes, e.g. "1,64"."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: expected integers separated by commas")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected batch sizes >= 1")
    return values


def parse_args(argv):
    """Command line; the options mirror `kgym-policy-cuda bench`'s."""
    ap = argparse.ArgumentParser(
        description="PyTorch (HF transformers, bf16, SDPA, fused AdamW) training and HF generate "
        "decoding of a Qwen2.5-0.5B-shaped model with random weights: the reference for "
        "`kgym-policy-cuda bench`.",
        epilog="FLOPs/token = 6*N_matmul + 6*L*H*hd*T; MFU against --peak-tflops. "
        "See the module docstring for the JSON written by --json.",
    )
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=["qwen2.5-0.5b"],
                    help="model shape (default %(default)s)")
    ap.add_argument("--train-batch", type=positive_int, default=8, help="rows per step (8)")
    ap.add_argument("--seq", type=positive_int, default=2048, help="tokens per row (2048)")
    ap.add_argument("--steps", type=positive_int, default=10, help="timed training steps (10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed training steps first (2)")
    ap.add_argument("--decode-batches", type=batch_list, default=[1, 64],
                    help="decode batch sizes, comma-separated (1,64)")
    ap.add_argument("--prompt", type=positive_int, default=128, help="prompt tokens (128)")
    ap.add_argument("--new", type=int, default=256, help="generated tokens, >= 2 (256)")
    ap.add_argument("--decode-repeats", type=positive_int, default=1,
                    help="full generates per batch size, median taken (1)")
    ap.add_argument("--json", metavar="FILE", help="write the figures here")
    ap.add_argument("--skip-train", action="store_true", help="decode only")
    ap.add_argument("--skip-decode", action="store_true", help="train only")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for weights and ids (0)")
    ap.add_argument("--fp32-master", action="store_true",
                    help="train fp32 parameters under bf16 autocast (kgym's precision scheme) "
                    "instead of bf16 parameters; decoding still runs in bf16")
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS,
                    help="peak for MFU (%(default)s, the H200's measured bf16 dense)")
    ap.add_argument("--device", default="cuda", help="torch device (cuda; cpu for smoke tests)")
    smoke = ap.add_argument_group("shape overrides (smoke tests; the JSON says shape: custom)")
    smoke.add_argument("--layers", type=positive_int)
    smoke.add_argument("--hidden", type=positive_int)
    smoke.add_argument("--intermediate", type=positive_int)
    smoke.add_argument("--heads", type=positive_int)
    smoke.add_argument("--kv-heads", type=positive_int)
    smoke.add_argument("--vocab", type=positive_int)
    args = ap.parse_args(argv)
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.new < 2:
        ap.error("--new must be >= 2 (decode speed is measured over new - 1 steps)")
    try:
        args.model_shape = resolve_shape(args)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def resolve_shape(args):
    """The named shape with any smoke-test overrides applied, checked for consistency."""
    shape = dict(QWEN2_5_0_5B)
    for key in SHAPE_OVERRIDES:
        value = getattr(args, key)
        if value is not None:
            shape[key] = value
    if shape["hidden"] % shape["heads"]:
        raise ValueError(f"hidden {shape['hidden']} is not a multiple of heads {shape['heads']}")
    if head_dim(shape) % 2:
        raise ValueError(f"head_dim {head_dim(shape)} must be even (RoPE)")
    if shape["heads"] % shape["kv_heads"]:
        raise ValueError(f"heads {shape['heads']} is not a multiple of kv heads "
                         f"{shape['kv_heads']}")
    return shape


def is_custom(shape):
    """True when a smoke-test override changed the named shape."""
    return any(shape[key] != QWEN2_5_0_5B[key] for key in SHAPE_OVERRIDES)


def build_model(shape, max_positions, device, dtype):
    """A Qwen2 causal LM of `shape`, HF's random initialisation, SDPA attention, on `device`."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=max(32768, max_positions),
        rope_theta=shape["rope_theta"],  # transformers 5 moves it into rope_parameters
        rms_norm_eps=shape["rms_norm_eps"],
        tie_word_embeddings=shape["tie_word_embeddings"],
        use_sliding_window=False,
        hidden_act="silu",
    )
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    except TypeError:  # transformers < 4.56 calls it torch_dtype
        model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype,
                                                 attn_implementation="sdpa")
    if next(model.parameters()).dtype != dtype:
        model = model.to(dtype)
    model = model.to(device)
    check_matmul_count(model, shape, torch)
    return model


def check_matmul_count(model, shape, torch):
    """The formula's N_matmul must be what the HF model multiplies by: the nn.Linear weights
    (the LM head included, tied or not; the embedding is an nn.Embedding)."""
    seen, total = set(), 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            total += module.weight.numel()
    expected = n_matmul_params(shape)
    if total != expected:
        raise RuntimeError(f"model has {total} matmul weights, the formula counts {expected}")
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    if tied != shape["tie_word_embeddings"]:
        raise RuntimeError(f"embeddings tied: {tied}, expected {shape['tie_word_embeddings']}")


def synchronize(device):
    """Wait for the device's queued work (a no-op on the CPU)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def bench_train(model, args, shape):
    """Times `args.steps` optimizer steps after `args.warmup` untimed ones."""
    import torch

    device = args.device
    dev_type = torch.device(device).type
    params = [p for p in model.parameters() if p.requires_grad]
    fused = dev_type in ("cuda", "cpu")
    optimizer = torch.optim.AdamW(params, lr=1e-5, fused=fused)
    autocast = torch.autocast(dev_type, dtype=torch.bfloat16, enabled=args.fp32_master)
    n_steps = args.warmup + args.steps
    batches = torch.randint(0, shape["vocab"], (n_steps, args.train_batch, args.seq),
                            device=device)
    model.train()

    def step(ids):
        with autocast:
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    losses = [step(batches[i]) for i in range(args.warmup)]
    if dev_type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timer = StepTimer(device)
    synchronize(device)
    start = time.perf_counter()
    for i in range(args.warmup, n_steps):
        timer.mark()
        losses.append(step(batches[i]))
    timer.mark()
    synchronize(device)
    seconds = time.perf_counter() - start

    tokens_per_s = args.train_batch * args.seq * args.steps / seconds
    tflops = tokens_per_s * flops_per_token(shape, args.seq) / 1e12
    result = {
        "batch": args.train_batch,
        "seq": args.seq,
        "steps": args.steps,
        "warmup": args.warmup,
        "tokens_per_s": tokens_per_s,
        "tflops": tflops,
        "mfu": tflops / args.peak_tflops,
        "ms_per_step": 1e3 * seconds / args.steps,
        "ms_per_step_median": statistics.median(timer.intervals_ms()),
        "loss_first": float(losses[0]),
        "loss_last": float(losses[-1]),
        "precision": ("fp32 params, bf16 autocast" if args.fp32_master else "bf16 params"),
        "optimizer": f"torch.optim.AdamW(lr=1e-5, fused={fused}), clip_grad_norm_(1.0)",
    }
    if dev_type == "cuda":
        result["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    model.zero_grad(set_to_none=True)  # the optimizer's state goes with this frame
    if not all(math.isfinite(x) for x in (result["loss_first"], result["loss_last"])):
        raise RuntimeError(f"training loss is not finite: {result['loss_first']} .. "
                           f"{result['loss_last']}")
    return result


class StepTimer:
    """Per-step times without a host sync between steps: CUDA events on a GPU, the host clock on
    a CPU (where every op is synchronous anyway)."""

    def __init__(self, device):
        import torch

        self.cuda = torch.device(device).type == "cuda"
        self.marks = []

    def mark(self):
        """Records a step boundary."""
        import torch

        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def intervals_ms(self):
        """Milliseconds between consecutive marks (call after a synchronize)."""
        pairs = zip(self.marks, self.marks[1:])
        if self.cuda:
            return [a.elapsed_time(b) for a, b in pairs]
        return [1e3 * (b - a) for a, b in pairs]


def timed_generate(model, ids, new_tokens, device):
    """Seconds for one greedy `generate` of exactly `new_tokens` tokens after the prompt `ids`."""
    import torch

    mask = torch.ones_like(ids)
    synchronize(device)
    start = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                         pad_token_id=0, use_cache=True)
    synchronize(device)
    seconds = time.perf_counter() - start
    expected = (ids.shape[0], ids.shape[1] + new_tokens)
    if tuple(out.shape) != expected:
        raise RuntimeError(f"generate returned {tuple(out.shape)}, expected {expected}")
    return seconds


def bench_decode(model, args, shape):
    """Prefill and decode speed of HF generate at each batch size."""
    import torch

    model.eval()
    results = []
    with torch.inference_mode():
        for batch in args.decode_batches:
            ids = torch.randint(0, shape["vocab"], (batch, args.prompt), device=args.device)
            timed_generate(model, ids, 2, args.device)  # warm-up: kernels, allocator, handles
            prefill_s = statistics.median(
                timed_generate(model, ids, 1, args.device) for _ in range(3))
            full_s = statistics.median(
                timed_generate(model, ids, args.new, args.device)
                for _ in range(args.decode_repeats))
            decode_s = full_s - prefill_s
            results.append({
                "batch": batch,
                "prompt": args.prompt,
                "new": args.new,
                "tokens_per_s": batch * (args.new - 1) / decode_s if decode_s > 0 else None,
                "prefill_tokens_per_s": batch * args.prompt / prefill_s,
                "prefill_s": prefill_s,
                "full_s": full_s,
            })
            print(f"  decode batch {batch}: prefill {prefill_s * 1e3:.1f} ms, "
                  f"{args.new} tokens {full_s:.2f} s", file=sys.stderr, flush=True)
    return results


def device_name(device):
    """A readable name of the device the run used."""
    import platform

    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def fmt(value, spec):
    """`value` formatted by `spec`, or "-" when it is missing."""
    return "-" if value is None else format(value, spec)


def print_table(report):
    """Human-readable summary on stdout."""
    cfg = report["config"]
    print(f"pytorch policy bench: {report['shape']} (L {cfg['layers']}, hidden {cfg['hidden']}, "
          f"vocab {cfg['vocab']}), {report['device']}, torch {report['torch']}, "
          f"transformers {report['transformers']}")
    train = report["train"]
    if train:
        print(f"train   B {train['batch']} x T {train['seq']}, {train['precision']}: "
              f"{train['tokens_per_s']:,.0f} tokens/s, {train['tflops']:.1f} TFLOP/s, "
              f"MFU {100 * train['mfu']:.1f}% of {report['peak_tflops']:g}, "
              f"{train['ms_per_step']:.1f} ms/step (median {train['ms_per_step_median']:.1f}), "
              f"loss {train['loss_first']:.3f} -> {train['loss_last']:.3f}"
              + (f", peak {train['peak_mem_gib']:.1f} GiB" if "peak_mem_gib" in train else ""))
    for row in report["decode"]:
        print(f"decode  batch {row['batch']:>3}, prompt {row['prompt']} + {row['new']} new: "
              f"{fmt(row['tokens_per_s'], ',.1f')} tokens/s, prefill "
              f"{row['prefill_tokens_per_s']:,.0f} tokens/s")


def versions():
    """Library versions for the report."""
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.version.cuda}


def main(argv=None):
    """Builds the model, runs the requested phases, prints and writes the figures."""
    args = parse_args(argv)
    import torch

    shape = args.model_shape
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print("bench_torch: --device cuda but torch sees no GPU (use --device cpu to smoke-test)",
              file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    train_dtype = torch.float32 if (args.fp32_master and not args.skip_train) else torch.bfloat16
    max_positions = max(args.seq, args.prompt + args.new)
    model = build_model(shape, max_positions, args.device, train_dtype)
    report = {
        "impl": "pytorch",
        "shape": "custom" if is_custom(shape) else args.shape,
        "config": {**shape, "head_dim": head_dim(shape)},
        "device": device_name(args.device),
        **versions(),
        "peak_tflops": args.peak_tflops,
        "n_matmul_params": n_matmul_params(shape),
        "flops_per_token": flops_per_token(shape, args.seq),
        "seed": args.seed,
        "train": None,
        "decode": [],
    }
    if not args.skip_train:
        print(f"  train: B {args.train_batch} x T {args.seq}, {args.warmup} warm-up + "
              f"{args.steps} timed steps", file=sys.stderr, flush=True)
        report["train"] = bench_train(model, args, shape)
    if not args.skip_decode:
        if next(model.parameters()).dtype != torch.bfloat16:
            model = model.to(torch.bfloat16)  # --fp32-master: decode as the baseline does
        report["decode"] = bench_decode(model, args, shape)
    print_table(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
