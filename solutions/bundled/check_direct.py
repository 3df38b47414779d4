#!/usr/bin/env python3
"""Quick direct check of the solutions in this folder on a CUDA GPU, without the kgym server.

For each solution: build cuda_extension the way the Compile engine does (one g++/nvcc object
per source, env/template's binding.cpp and binding_registry.h, linked against torch and cudart)
in a temporary directory, then, in a fresh process, load the task's Model and the solution's
ModelNew, copy the weights in with load_state_dict(strict=True), compare outputs on a few seeds
and on a wide "probe" input (randn * max|x|, as the judge does), and time eager, torch.compile and
ModelNew (median of CUDA-event times with an L2 flush before each call). It is a developer aid:
the judge (env/harness, tests/gpu/eval_gpu.py) is the real referee.

    python solutions/bundled/check_direct.py [--only NAME ...] [--config N] [--iters 20]
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]


def build(sol, out_dir, arch):
    import torch

    tdir = pathlib.Path(torch.__file__).parent
    shutil.copy(REPO / "env/template/binding.cpp", out_dir)
    shutil.copy(REPO / "env/template/binding_registry.h", out_dir)
    shutil.copytree(sol / "kernels", out_dir / "kernels")
    inc = [f"-I{tdir}/include", f"-I{tdir}/include/torch/csrc/api/include",
           f"-I{sysconfig.get_paths()['include']}", f"-I{out_dir}"]
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    objs = []
    for src in [out_dir / "binding.cpp", *sorted((out_dir / "kernels").glob("*.cpp"))]:
        obj = src.with_suffix(".o")
        subprocess.run(["g++", "-O3", "-std=c++17", "-fPIC", "-DTORCH_EXTENSION_NAME=cuda_extension",
                        "-DTORCH_API_INCLUDE_EXTENSION_H", abi, *inc, f"-I{cuda_home}/include", "-c", str(src),
                        "-o", str(obj)], check=True)
        objs.append(str(obj))
    for src in sorted((out_dir / "kernels").glob("*.cu")):
        obj = src.with_suffix(".cu.o")
        subprocess.run([f"{cuda_home}/bin/nvcc", "-O3", "-std=c++17", "-Xcompiler", "-fPIC",
                        "--expt-relaxed-constexpr", f"-gencode=arch=compute_{arch},code=sm_{arch}", abi, *inc,
                        "-c", str(src), "-o", str(obj)], check=True)
        objs.append(str(obj))
    subprocess.run(["g++", "-shared", "-o", str(out_dir / "cuda_extension.so"), *objs, f"-L{tdir}/lib",
                    f"-Wl,-rpath,{tdir}/lib", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10_cuda",
                    "-ltorch_cuda", f"-L{cuda_home}/lib64", f"-Wl,-rpath,{cuda_home}/lib64", "-lcudart"],
                   check=True)


CHILD = r'''
import importlib.util, json, math, re, statistics, sys
import torch
ext_dir, model_py, new_py, config, iters = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sys.path.insert(0, ext_dir)

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m; spec.loader.exec_module(m); return m

ref_mod = load("model", model_py)
src = open(new_py).read()
if config >= 0:  # try another launch configuration: rewrite the trailing ", 0)" of the call
    src = re.sub(r", 0\)(\s*)$", f", {config})\\1", src.rstrip()) + "\n"
new_mod = type(sys)("model_new"); exec(compile(src, new_py, "exec"), new_mod.__dict__)
init = ref_mod.get_init_inputs()
ref = ref_mod.Model(*init).cuda().eval()
new = new_mod.ModelNew(*init).cuda().eval()
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
res = {"checks": []}

def inputs(seed, probe=False):
    torch.manual_seed(seed)
    with torch.device("cuda"):
        xs = list(ref_mod.get_inputs())
    if probe:
        xs = [torch.randn_like(x) * max(1.0, float(x.abs().amax())) if torch.is_tensor(x) and x.is_floating_point() else x for x in xs]
    return xs

with torch.no_grad():
    for i, probe in enumerate([False, False, False, True]):
        torch.manual_seed(100 + i)
        w = ref_mod.Model(*init).state_dict()
        ref.load_state_dict(w, strict=True); new.load_state_dict(w, strict=True)
        xs = inputs(i, probe)
        want = ref(*[x.clone() for x in xs]); got = new(*xs); torch.cuda.synchronize()
        d = (got.double() - want.double()).abs()
        ok = got.shape == want.shape and got.dtype == want.dtype and bool(torch.allclose(got, want, atol=1e-2, rtol=1e-2))
        res["checks"].append({"probe": probe, "ok": ok, "max_abs_err": float(d.max()),
                              "rel_l2": float(d.norm() / want.double().norm().clamp_min(1e-30))})
        del want, got, d

    def timed(fn, xs):
        for _ in range(3):
            fn(*xs)
        ts = []
        for _ in range(iters):
            flush.zero_(); torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(*xs); b.record(); torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    xs = inputs(7)
    res["t_new_ms"] = timed(new, xs)
    res["t_eager_ms"] = timed(ref, xs)
    try:
        res["t_compile_ms"] = timed(torch.compile(ref), xs)
    except Exception as e:  # noqa: BLE001
        res["compile_error"] = str(e)[:200]
print(json.dumps(res))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--config", type=int, default=-1, help="launch config passed instead of 0 (-1: as written)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--arch", default="90a")
    args = ap.parse_args()
    failures = 0
    for sol in sorted(p for p in HERE.iterdir() if (p / "solution.json").is_file()):
        if args.only and sol.name not in args.only:
            continue
        task = json.loads((sol / "solution.json").read_text())["task"]
        tdir = REPO / ("tests/gpu/tasks/axpby" if task == "axpby" else f"dataset/tasks/{task}")
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp)
            try:
                build(sol, out, args.arch)
            except subprocess.CalledProcessError as e:
                print(f"{sol.name}: BUILD FAILED ({e})")
                failures += 1
                continue
            p = subprocess.run([sys.executable, "-c", CHILD, str(out), str(tdir / "model.py"),
                                str(sol / "model_new.py"), str(args.config), str(args.iters)],
                               capture_output=True, text=True)
        try:
            r = json.loads(p.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            print(f"{sol.name}: RUN FAILED\n{p.stderr[-3000:]}")
            failures += 1
            continue
        ok = all(c["ok"] for c in r["checks"])
        failures += not ok
        worst = max(c["max_abs_err"] for c in r["checks"])
        te, tc, tn = r["t_eager_ms"], r.get("t_compile_ms", float("nan")), r["t_new_ms"]
        reward = -1 if not ok else 3 if (te - tn) / te > 0.05 and (tc - tn) / tc > 0.05 else 2 if (te - tn) / te > 0.05 else 1
        print(f"{sol.name:22s} {'ok  ' if ok else 'FAIL'} max|err| {worst:.2e}  new {tn:.3f} ms  eager {te:.3f} ms "
              f"(x{te / tn:.2f})  compile {tc:.3f} ms (x{tc / tn:.2f})  -> reward {reward}")
        if not ok:
            print("   ", json.dumps(r["checks"]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
