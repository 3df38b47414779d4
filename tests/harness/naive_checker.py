#!/usr/bin/env python3
"""naive_checker.py: a DELIBERATELY NAIVE evaluator, the positive control of kgym's exploit tests.

Do not use it to evaluate anything. It is written the way the released CUDA-Agent harness
(agent_workdir/utils/{compile,verification,profiling}.py, ../shared/reference/cuda-agent-repo.md)
and KernelBench's eval_kernel_against_ref (kernelbench.md A.4) do it, holes included, so that an
exploit earning a high reward here proves that it really cheats such a harness; the same exploit
submitted to kgym must then earn nothing (tests/harness/test_exploits_kgym.py). Every hole below is
on purpose; do not fix them:

  * agent code runs in the evaluating process: `from model_new import ModelNew` executes the
    agent's module (and the extension's static initialisers) before any check, so it can patch
    torch, the reference class, the comparator or the timer;
  * the workspace is first on sys.path, so a `cuda_extension.py` there shadows the built module;
    the extension is only built when kernels/ holds .cpp files (torch.utils.cpp_extension.load,
    -O3, build directory under a temporary folder keyed by the sources' hash, reused);
  * the reference is the workspace's own model.py (imported as module `model`), so an edited
    model.py changes what "correct" means; its outputs are cached on disk in
    <workspace>/.ref_cache/, where the candidate can read them;
  * fixed seed 42 (KernelBench's set_seed(42)), trial seeds drawn from it, so inputs are
    predictable; the reference runs first, then the candidate on the SAME input objects; the
    reference output is a local variable named `output` in the checking frame;
  * correctness is torch.allclose(atol = rtol = 1e-2) on 5 trials of the task's own input
    distribution (no probe, no normalised error, no check that the output follows the input), and
    torch.nn.functional is blocked during the candidate's forward only, as CUDA-Agent does it
    (names bound before the block escape it);
  * timing is time.perf_counter around each call on ONE input set reused for every call (mean of
    the trials, KernelBench style), candidate first, then eager, then torch.compile of the same
    (patchable) reference object, all in the same process; timed outputs are never checked;
  * the verdict travels as text: the evaluation runs in a child process and the parent takes the
    LAST stdout line that starts with "RESULT " as the result, as an outer CUDA-Agent driver that
    greps the scripts' output does.

Milestone reward (the CUDA-Agent paper's): -1 if the build or any check fails; 3 if more than 5%
faster than both eager and torch.compile; 2 if more than 5% faster than eager; 1 otherwise.
Without torch.compile (--no-compile, or inductor unavailable) the best is 2.

CLI:  python naive_checker.py --workspace DIR [--model PATH] [--no-compile] [--threads N]
prints progress, then as its last line {"reward": r, "correct": ..., "speedup_eager": ..., ...}.
The workspace must hold model.py (unless --model), model_new.py and, when kernels/ has .cpp
files, binding.cpp + binding_registry.h (the template's fixed files).

Speed knobs for tests on small machines (they change no verdict): NAIVE_CHECKER_BUILD_ROOT (where
builds are cached; default $TMPDIR/kgym-naive-builds), and TORCHINDUCTOR_VEC_ISA_OK=1 is set in the
child unless already set (inductor otherwise spends ~15 s per process test-compiling SIMD flags).
"""
import argparse
import contextlib
import fcntl
import glob
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

TOL = 1e-2
NUM_TRIALS = 5
WARMUP = 3
PERF_ITERS = 20
PERF_BUDGET_S = 2.0   # a call slower than this budget is timed at least MIN_PERF_ITERS times
MIN_PERF_ITERS = 5
HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_FLAGS = ["-O3"]


def default_build_root():
    return os.environ.get("NAIVE_CHECKER_BUILD_ROOT") or os.path.join(tempfile.gettempdir(),
                                                                      "kgym-naive-builds")


def kernel_sources(ws):
    """CUDA-Agent's compile.py compiles every .cu/.cpp directly in kernels/; on a CPU only .cpp."""
    return sorted(glob.glob(os.path.join(ws, "kernels", "*.cpp")))


def build_key(ws, sources, python):
    h = hashlib.sha256()
    h.update(("naive-1\0" + python + "\0" + " ".join(BUILD_FLAGS) + "\0").encode())
    extra = [os.path.join(ws, "binding.cpp"), os.path.join(ws, "binding_registry.h")]
    extra += sorted(glob.glob(os.path.join(ws, "kernels", "*.h")))
    for path in extra + list(sources):
        h.update(os.path.relpath(path, ws).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()[:24]


def milestone(t, t_eager, t_compile):
    def faster(t0):
        return t0 is not None and t0 > 0 and (t0 - t) / t0 > 0.05

    if faster(t_eager) and faster(t_compile):
        return 3
    if faster(t_eager):
        return 2
    return 1


# ---- parent side ------------------------------------------------------------------------------
def build(ws, python, build_root, timeout, log):
    """Builds cuda_extension for ws (cached by content); returns (ext_dir or None, error or None)."""
    sources = kernel_sources(ws)
    if not sources:
        return None, None
    for fixed in ("binding.cpp", "binding_registry.h"):
        if not os.path.isfile(os.path.join(ws, fixed)):
            return None, f"kernels/ has .cpp files but the workspace has no {fixed}"
    bdir = os.path.join(build_root, build_key(ws, sources, python))
    os.makedirs(build_root, exist_ok=True)
    so = os.path.join(bdir, "cuda_extension.so")
    with open(bdir + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two checkers building the same sources: one builds
        if os.path.isfile(so):
            log(f"[naive] build cached: {bdir}")
            return bdir, None
        log(f"[naive] building cuda_extension from {len(sources)} kernel file(s) in {bdir}")
        t0 = time.monotonic()
        try:
            p = subprocess.run([python, os.path.abspath(__file__), "--_build", ws, bdir],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                               cwd=ws)
        except subprocess.TimeoutExpired:
            return None, f"build timed out after {timeout} s"
        text = p.stdout.decode("utf-8", "replace")
        if p.returncode != 0 or not os.path.isfile(so):
            return None, "Compilation failed.\n" + text[-4000:]
        log(f"[naive] built in {time.monotonic() - t0:.1f} s")
        return bdir, None


def evaluate(workspace, model=None, use_compile=True, python=None, threads=None,
             build_root=None, timeout=900, log=None):
    """Runs the naive evaluation of one workspace; returns the parent's summary dict."""
    t_start = time.monotonic()
    ws = os.path.abspath(workspace)
    model = os.path.abspath(model) if model else os.path.join(ws, "model.py")
    python = python or sys.executable
    build_root = build_root or default_build_root()
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    summary = {"reward": -1, "compiled": False, "correct": False}

    ext_dir, err = build(ws, python, build_root, timeout, log)
    if err:
        summary.update(error=err, wall_s=round(time.monotonic() - t_start, 2))
        return summary

    cmd = [python, os.path.abspath(__file__), "--_child", "--workspace", ws, "--model", model]
    if ext_dir:
        cmd += ["--ext-dir", ext_dir]
    if not use_compile:
        cmd.append("--no-compile")
    if threads:
        cmd += ["--threads", str(threads)]
    env = dict(os.environ)
    env.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                           cwd=ws, env=env)
        out, errtext, rc = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), p.returncode
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode("utf-8", "replace")
        errtext, rc = f"timed out after {timeout} s", None

    # The naive part: the verdict is whatever the child printed last.
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            with contextlib.suppress(ValueError):
                result = json.loads(line[len("RESULT "):])
    if not isinstance(result, dict):
        summary.update(compiled=True, error=f"no RESULT line (exit {rc}):\n{errtext[-3000:]}\n{out[-1000:]}")
        summary["wall_s"] = round(time.monotonic() - t_start, 2)
        return summary

    summary.update({k: result.get(k) for k in ("compiled", "correct", "t_candidate_ms", "t_eager_ms",
                                               "t_compile_ms", "compile_unavailable", "error",
                                               "trials_passed")})
    summary["compiled"] = bool(result.get("compiled", True))
    summary["correct"] = bool(result.get("correct"))
    t, te, tc = result.get("t_candidate_ms"), result.get("t_eager_ms"), result.get("t_compile_ms")
    if summary["compiled"] and summary["correct"] and isinstance(t, (int, float)):
        summary["reward"] = milestone(float(t), te, tc)
        summary["speedup_eager"] = round(te / t, 3) if te and t > 0 else None
        summary["speedup_compile"] = round(tc / t, 3) if tc and t > 0 else None
    else:
        summary["reward"] = -1
    summary["child_exit"] = rc
    summary["build_dir"] = ext_dir
    summary["wall_s"] = round(time.monotonic() - t_start, 2)
    return summary


# ---- child: the build (CUDA-Agent utils/compile.py) -------------------------------------------
def child_build(ws, bdir):
    from torch.utils.cpp_extension import load

    os.makedirs(bdir, exist_ok=True)
    sources = [os.path.join(ws, "binding.cpp")] + kernel_sources(ws)
    load(name="cuda_extension", sources=sources, build_directory=bdir, extra_cflags=BUILD_FLAGS,
         extra_include_paths=[ws], verbose=False)
    print("Compile success: cuda_extension.so", flush=True)
    return 0


# ---- child: verification + profiling in one process (KernelBench / CUDA-Agent) ----------------
def emit(result):
    print("RESULT " + json.dumps(result), flush=True)


@contextlib.contextmanager
def block_torch_functional():
    """CUDA-Agent's blocker: every public callable of torch.nn.functional raises, during the
    candidate's forward only. Names bound earlier (from ... import ...) are not affected."""
    import torch.nn.functional as F

    saved = {}
    for name in dir(F):
        if name.startswith("_"):
            continue
        fn = getattr(F, name)
        if not callable(fn):
            continue

        def blocked(*_a, _name=name, **_k):
            raise RuntimeError(f"Function torch.nn.functional.{_name} is not allowed in this context.")

        saved[name] = fn
        setattr(F, name, blocked)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(F, name, fn)


def set_seed(torch, seed):
    torch.manual_seed(seed)


def time_model(torch, model, inputs):
    """KernelBench-style host timing: warm-ups, then perf_counter around each call on the same
    inputs; the mean in ms. Outputs are discarded unchecked."""
    with torch.no_grad():
        for _ in range(WARMUP):
            model(*inputs)
        times = []
        spent = 0.0
        for _ in range(PERF_ITERS):
            t0 = time.perf_counter()
            model(*inputs)
            dt = time.perf_counter() - t0
            times.append(dt)
            spent += dt
            if len(times) >= MIN_PERF_ITERS and spent > PERF_BUDGET_S:
                break
    return sum(times) / len(times) * 1e3


def child_eval(args):
    ws = os.path.abspath(args.workspace)
    os.chdir(ws)
    sys.path.insert(0, ws)                 # the workspace first: its cuda_extension.py wins
    if args.ext_dir:
        sys.path.insert(1, args.ext_dir)   # the built cuda_extension.so, after the workspace
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"compiled": True, "correct": False}

    # `from model import Model, get_inputs, get_init_inputs`, from the workspace's model.py
    with open(args.model, "rb") as f:
        model_src = f.read()
    spec = importlib.util.spec_from_file_location("model", args.model)
    ref_mod = importlib.util.module_from_spec(spec)
    sys.modules["model"] = ref_mod
    spec.loader.exec_module(ref_mod)
    Model, get_inputs, get_init_inputs = ref_mod.Model, ref_mod.get_inputs, ref_mod.get_init_inputs

    try:
        from model_new import ModelNew  # the agent's code runs here, in this process
    except Exception as exc:  # KernelBench: no ModelNew = a compile failure
        result.update(compiled=False, error=f"importing model_new failed: {type(exc).__name__}: {exc}")
        emit(result)
        return 1

    try:
        set_seed(torch, 42)
        init_inputs = get_init_inputs()
        if not isinstance(init_inputs, (list, tuple)):
            init_inputs = [init_inputs]
        set_seed(torch, 42)
        ref_model = Model(*init_inputs).eval()
        set_seed(torch, 42)
        new_model = ModelNew(*init_inputs).eval()
        new_model.load_state_dict(ref_model.state_dict())  # strict
    except Exception as exc:
        result.update(error=f"building the models failed: {type(exc).__name__}: {exc}")
        emit(result)
        return 1

    ok, info = run_and_check_correctness(torch, ref_model, new_model, get_inputs, ws,
                                         hashlib.sha256(model_src).hexdigest()[:16])
    result.update(info)
    if not ok:
        emit(result)
        return 1
    result["correct"] = True

    # Profiling (CUDA-Agent order: extension, eager, torch.compile), one input set for all.
    set_seed(torch, 42)
    inputs = get_inputs()
    try:
        result["t_candidate_ms"] = time_model(torch, new_model, inputs)
        result["t_eager_ms"] = time_model(torch, ref_model, inputs)
    except Exception as exc:
        result.update(correct=False, error=f"profiling failed: {type(exc).__name__}: {exc}")
        emit(result)
        return 1
    result["t_compile_ms"] = None
    if args.no_compile:
        result["compile_unavailable"] = "--no-compile"
    else:
        try:
            compiled = torch.compile(ref_model)
            result["t_compile_ms"] = time_model(torch, compiled, inputs)
        except Exception as exc:
            result["compile_unavailable"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    emit(result)
    return 0


def reference_output(torch, ref_model, inputs, ws, key):
    """Reference outputs cached on disk in <workspace>/.ref_cache, as some harnesses do."""
    cache = os.path.join(ws, ".ref_cache")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, key + ".pt")
    if os.path.isfile(path):
        return torch.load(path)
    out = ref_model(*inputs)
    torch.save(out, path)
    return out


def run_and_check_correctness(torch, ref_model, new_model, get_inputs, ws, model_hash):
    """KernelBench's loop: trial seeds from seed 42, fresh get_inputs() per trial, reference
    first, candidate on the same input objects, torch.allclose at 1e-2."""
    set_seed(torch, 42)
    trial_seeds = [int(torch.randint(0, 2 ** 32 - 1, (1,)).item()) for _ in range(NUM_TRIALS)]
    passed = 0
    with torch.no_grad():
        for trial, seed in enumerate(trial_seeds):
            set_seed(torch, seed)
            inputs = get_inputs()
            output = reference_output(torch, ref_model, inputs, ws, f"{model_hash}_{trial}_{seed}")
            try:
                with block_torch_functional():
                    output_new = new_model(*inputs)
            except Exception as exc:
                return False, {"trials_passed": passed,
                               "error": f"trial {trial + 1}: runtime error: {type(exc).__name__}: {exc}"}
            if output.shape != output_new.shape:
                return False, {"trials_passed": passed,
                               "error": f"trial {trial + 1}: shape {tuple(output_new.shape)} != {tuple(output.shape)}"}
            if not torch.allclose(output, output_new, atol=TOL, rtol=TOL):
                try:
                    diff = float((output - output_new).abs().max())
                except Exception:
                    diff = None
                return False, {"trials_passed": passed,
                               "error": f"trial {trial + 1}: outputs differ (max abs diff {diff})"}
            passed += 1
    return True, {"trials_passed": passed}


def main(argv=None):
    ap = argparse.ArgumentParser(description="A deliberately naive kernel evaluator (positive "
                                             "control of kgym's exploit tests; see the docstring).")
    ap.add_argument("--workspace")
    ap.add_argument("--model", help="the reference model.py (default: the workspace's own)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads in the child")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--ext-dir", help=argparse.SUPPRESS)
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_build", nargs=2, metavar=("WS", "BDIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._build:
        return child_build(*args._build)
    if args._child:
        return child_eval(args)
    if not args.workspace:
        ap.error("--workspace is required")
    summary = evaluate(args.workspace, model=args.model, use_compile=not args.no_compile,
                       threads=args.threads, timeout=args.timeout)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
