#!/usr/bin/env python3
"""Static checks of the KernelBench fixtures (no GPU needed), for every folder with a solution.json:

  1. each kernels/*.cu compiles with nvcc for sm_90a (the Compile engine's flags) without warnings;
  2. each kernels/*.cpp passes g++ -std=c++17 -fsyntax-only -Wall -Wextra against torch's headers
     (torch, Python and CUDA headers as system headers, so only our own warnings count);
  3. kgym's static scan (env/harness/scan.py) finds nothing in model_new.py and kernels/;
  4. ModelNew (with a stand-in cuda_extension module) takes the same constructor arguments as the
     task's Model and has the same state_dict keys and shapes; the task code is read from the
     KernelBench JSONL, never copied here;
  5. solution.json names the task that the JSONL has under that level and problem id.

Run it with the kgym venv's python (torch on the CPU is enough):
    $VENV/bin/python solutions/kernelbench/check_static.py [--only L1/88 ...] [--kernelbench FILE]
Compiler results are cached by content under /tmp/kgym-kb-static-cache.
"""
import argparse
import hashlib
import importlib.util
import inspect
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import types

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = pathlib.Path("/tmp/kgym-kb-static-cache")


def cached_run(key_parts, argv, cwd=None):
    """Runs argv (a compiler); returns (ok, output). A success is remembered by content hash."""
    h = hashlib.sha256("\0".join(key_parts + argv).encode()).hexdigest()
    mark = CACHE / h
    if mark.exists():
        return True, mark.read_text()
    p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout
    ok = p.returncode == 0 and "warning" not in out.lower()
    if ok:
        CACHE.mkdir(exist_ok=True)
        mark.write_text(out)
    return ok, out


def file_hash(paths):
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def check_compile(sol, torch_dir, cuda_home):
    problems = []
    kdir = sol / "kernels"
    headers = list(kdir.glob("*.cuh")) + list(kdir.glob("*.h"))
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="kb-static-"))
    try:
        # the workspace layout: binding_registry.h beside kernels/, as the Compile engine has it
        shutil.copy(REPO / "env/template/binding_registry.h", tmp)
        shutil.copytree(kdir, tmp / "kernels")
        for cu in sorted(kdir.glob("*.cu")):
            argv = [f"{cuda_home}/bin/nvcc", "-O3", "-std=c++17", "-Xcompiler", "-fPIC",
                    "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
                    "-c", str(tmp / "kernels" / cu.name), "-o", str(tmp / (cu.name + ".o"))]
            ok, out = cached_run([file_hash([cu] + headers)], argv)
            print(f"    nvcc {cu.name}: {'ok' if ok else 'FAILED'}")
            if not ok:
                problems.append(f"nvcc {cu.name}:\n{out}")
        inc = [f"-isystem{torch_dir}/include", f"-isystem{torch_dir}/include/torch/csrc/api/include",
               f"-isystem{sysconfig.get_paths()['include']}", f"-isystem{cuda_home}/include",
               f"-I{REPO}/env/template"]
        for cpp in sorted(kdir.glob("*.cpp")):
            argv = ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-DTORCH_EXTENSION_NAME=cuda_extension",
                    "-DTORCH_API_INCLUDE_EXTENSION_H", "-D_GLIBCXX_USE_CXX11_ABI=1", *inc,
                    str(tmp / "kernels" / cpp.name)]
            ok, out = cached_run([file_hash([cpp] + headers)], argv)
            print(f"    g++ -fsyntax-only {cpp.name}: {'ok' if ok else 'FAILED'}")
            if not ok:
                problems.append(f"g++ {cpp.name}:\n{out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return problems


def load_module(name, path=None, code=None):
    spec = importlib.util.spec_from_loader(name, loader=None) if code is not None else \
        importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if code is not None:
        exec(compile(code, f"<{name}>", "exec"), mod.__dict__)
    else:
        spec.loader.exec_module(mod)
    return mod


def check_model(sol, task):
    import torch

    problems = []
    sys.modules["cuda_extension"] = types.ModuleType("cuda_extension")  # stand-in: never called here
    ref = load_module("kb_task_model", code=task["code"])
    new = load_module("kb_model_new_" + sol.parent.name + "_" + sol.name, path=sol / "model_new.py")
    sig_ref = inspect.signature(ref.Model.__init__)
    sig_new = inspect.signature(new.ModelNew.__init__)
    names_ref = [(p.name, p.default) for p in sig_ref.parameters.values()]
    names_new = [(p.name, p.default) for p in sig_new.parameters.values()]
    if names_ref != names_new:
        problems.append(f"__init__ signatures differ: Model{sig_ref} vs ModelNew{sig_new}")
    # small get_init_inputs() values only (the inputs themselves are never built here)
    args = list(ref.get_init_inputs())
    torch.manual_seed(0)
    m_ref = ref.Model(*args)
    m_new = new.ModelNew(*args)
    sd_ref = {k: tuple(v.shape) for k, v in m_ref.state_dict().items()}
    sd_new = {k: tuple(v.shape) for k, v in m_new.state_dict().items()}
    if sd_ref != sd_new:
        problems.append(f"state_dict differs: Model {sd_ref} vs ModelNew {sd_new}")
    else:
        m_new.load_state_dict(m_ref.state_dict(), strict=True)
    print(f"    ModelNew: signature {'ok' if names_ref == names_new else 'DIFFERS'}, "
          f"state_dict {len(sd_ref)} tensor(s) {'ok' if sd_ref == sd_new else 'DIFFERS'}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=[], help="e.g. L1/88 L2/76")
    ap.add_argument("--kernelbench", default=str(REPO.parent / "shared/kernelbench/kernelbench-l1-l3.jsonl"))
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()

    import torch

    torch_dir = pathlib.Path(torch.__file__).parent
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    tasks = {}
    with open(a.kernelbench) as f:
        for line in f:
            t = json.loads(line)
            tasks[(t["level"], t["problem_id"])] = t
    sys.path.insert(0, str(REPO / "env/harness"))
    import scan

    failed = []
    sols = sorted(HERE.glob("level*/*/solution.json"), key=lambda p: (p.parent.parent.name, int(p.parent.name)))
    for sj in sols:
        sol = sj.parent
        level = int(sol.parent.name.replace("level", ""))
        tag = f"L{level}/{sol.name}"
        if a.only and tag not in a.only:
            continue
        print(f"== {tag}")
        meta = json.loads(sj.read_text())
        problems = []
        task = tasks.get((level, int(sol.name)))
        if task is None:
            problems.append("no such task in the KernelBench file")
        elif (meta.get("level"), meta.get("problem_id"), meta.get("name")) != (level, int(sol.name), task["name"]):
            problems.append(f"solution.json names {meta.get('name')!r}, the task is {task['name']!r}")
        if not meta.get("notes"):
            problems.append("solution.json has no notes")
        findings = scan.scan_dir(str(sol))
        print(f"    kgym scan: {'clean' if not findings else 'FINDINGS'}")
        problems += [f"scan: {x}" for x in findings]
        if task is not None:
            problems += check_model(sol, task)
        if not a.no_compile:
            problems += check_compile(sol, torch_dir, cuda_home)
        for p in problems:
            print("    PROBLEM: " + p)
        if problems:
            failed.append(tag)
    print(f"{len(sols) - len(failed) if not a.only else 'selected'}: static checks "
          f"{'passed' if not failed else 'FAILED for ' + ', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
