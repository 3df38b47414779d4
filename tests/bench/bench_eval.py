"""make bench: the evaluation's cost and its timing spread, through the HTTP API of a real server.

  * Compile: cold (empty object cache, the torch PCH built), unchanged, after editing one kernel
    file, after editing one binding file; side by side with torch.utils.cpp_extension.load of the
    same sources into a fresh build directory (the full rebuild a harness built on it pays);
  * Verify and Profile wall time per call, with the baseline cache warm;
  * timing spread: the candidate time of N Profile calls of the same solution (coefficient of
    variation across calls), and the spread inside one call.

usage: bench_eval.py [--device cpu|cuda] [--profiles N] [--python PY] [--server BIN] [--json OUT]
CPU: the mish_elementwise CPU solution (dataset/solutions/cpu/); CUDA: the AXPBY template on
test/axpby (tests/gpu/tasks). Needs root (the sandbox), like the server.
"""
import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("kgym_http", REPO / "tests" / "api" / "kgym_http.py")
kgym_http = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kgym_http)


def start_server(binary, python, tmp):
    log = open(tmp / "server.log", "w+")
    cmd = [binary, "serve", "--port", "0", "--state-dir", str(tmp / "state"), "--template",
           str(REPO / "env/template"), "--sandbox-profiles", str(REPO / "sandbox_profiles"),
           "--sandbox-python", python, "--harness", str(REPO / "env/harness"), "--tasks",
           str(REPO / "dataset/tasks"), "--tasks", str(REPO / "tests/gpu/tasks"), "--quiet",
           "--build-cache", str(tmp / "cache")]
    env = dict(os.environ)
    if os.environ.get("KGYM_SERVER_LIBS"):  # carried shared libraries, for the server alone
        env["LD_LIBRARY_PATH"] = os.environ["KGYM_SERVER_LIBS"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env=env)
    for _ in range(300):
        time.sleep(0.1)
        log.seek(0)
        for line in log:
            if '"listening"' in line:
                return proc, json.loads(line)["port"]
        if proc.poll() is not None:
            break
    log.seek(0)
    sys.exit("the server did not start:\n" + log.read()[-3000:])


class Episode:
    def __init__(self, client, task, variant):
        self.c = client
        r = client.post("/v1/episodes", json.dumps({"task_id": task, "options": {"variant": variant}}).encode())
        assert r.status == 201, r.text
        self.id = r.json["episode_id"]

    def put(self, rel, data):
        r = self.c.put(f"/v1/episodes/{self.id}/files/{rel}", data)
        assert r.status in (200, 201), r.text

    def tool(self, name, **args):
        t0 = time.perf_counter()
        r = self.c.post(f"/v1/episodes/{self.id}/tools/{name}", json.dumps(args).encode())
        dt = time.perf_counter() - t0
        assert r.status == 200, r.text
        obs = r.json["observation"]
        if obs["is_error"]:
            sys.exit(f"{name} failed:\n{obs['content'][-3000:]}")
        return dt, obs


def setup_episode(client, device):
    if device == "cpu":
        ep = Episode(client, "kgym/mish_elementwise", "cpu")
        sol = REPO / "dataset/solutions/cpu/mish_elementwise"
        for rel in ("model_new.py", "kernels/mish.cpp", "kernels/mish_binding.cpp"):
            ep.put(rel, (sol / rel).read_bytes())
        ep.tool("Bash", command="rm kernels/axpby.cu kernels/axpby_binding.cpp")
        sources = [sol / "kernels/mish.cpp", sol / "kernels/mish_binding.cpp"]
        kernel, binding = "kernels/mish.cpp", "kernels/mish_binding.cpp"
    else:
        ep = Episode(client, "test/axpby", "gpu")
        t = REPO / "env/template/kernels"
        sources = [t / "axpby.cu", t / "axpby_binding.cpp"]
        kernel, binding = "kernels/axpby.cu", "kernels/axpby_binding.cpp"
    return ep, sources, kernel, binding


def touch_source(ep, rel, n):
    """An edit that changes the file's content (a comment), so its object is rebuilt."""
    r = ep.c.get(f"/v1/episodes/{ep.id}/files/{rel}")
    assert r.status == 200, r.text
    ep.put(rel, r.body + f"// edit {n}\n".encode())


def cpp_extension_full_build(python, sources, device):
    """torch.utils.cpp_extension.load of the same sources into a fresh build dir (seconds)."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "src"
        (src / "kernels").mkdir(parents=True)
        shutil.copy(REPO / "env/template/binding.cpp", src)
        shutil.copy(REPO / "env/template/binding_registry.h", src)
        for s in sources:
            shutil.copy(s, src / "kernels")
        files = [str(src / "binding.cpp")] + [str(src / "kernels" / s.name) for s in sources]
        code = ("import sys, time, torch.utils.cpp_extension as ce; t=time.perf_counter(); "
                f"ce.load(name='cuda_extension', sources={files!r}, build_directory={str(Path(d) / 'build')!r}, "
                f"extra_cflags=['-O3'], with_cuda={device == 'cuda'}, verbose=False); print(time.perf_counter()-t)")
        (Path(d) / "build").mkdir()
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            return None, out.stderr[-1500:]
        return float(out.stdout.strip().splitlines()[-1]), ""


class Figures(dict):
    """The figures, each printed (stderr) and saved (--json) the moment it is measured: a run cut
    short (a time limit on a borrowed GPU machine) still leaves what it measured."""

    def __init__(self, json_path, **kw):
        super().__init__(**kw)
        self.json_path = json_path

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        print(f"  [measured] {key} = {value}", file=sys.stderr, flush=True)
        if self.json_path:
            Path(self.json_path).write_text(json.dumps(self, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--profiles", type=int, default=10)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--server", default=str(REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-env"))
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    fig = Figures(args.json, device=args.device)
    with tempfile.TemporaryDirectory(dir=os.environ.get("KGYM_BENCH_TMP")) as tmp:
        proc, port = start_server(args.server, args.python, Path(tmp))
        try:
            c = kgym_http.Client(port, timeout=3600)
            ep, sources, kernel, binding = setup_episode(c, args.device)
            fig["compile_cold_s"], _ = ep.tool("Compile")
            fig["compile_unchanged_s"], _ = ep.tool("Compile")
            touch_source(ep, kernel, 1)
            fig["compile_edit_kernel_s"], _ = ep.tool("Compile")
            touch_source(ep, binding, 2)
            fig["compile_edit_binding_s"], _ = ep.tool("Compile")
            full, err = cpp_extension_full_build(args.python, sources, args.device)
            fig["cpp_extension_load_full_s"] = full
            if err:
                fig["cpp_extension_load_error"] = err
            ep.tool("Profile")  # warms the baseline cache (torch.compile's first call)
            fig["verify_s"] = statistics.median(ep.tool("Verify")[0] for _ in range(3))
            walls, medians, spreads, device = [], [], [], []
            for _ in range(args.profiles):
                dt, obs = ep.tool("Profile")
                walls.append(dt)
                medians.append(obs["data"]["t_candidate_ms"])
                spreads.append(obs["data"]["spread_candidate"])
                if obs["data"].get("runner_reported_device_ms") is not None:
                    device.append(obs["data"]["runner_reported_device_ms"])
            fig["percentiles_last_profile_ms"] = obs["data"].get("percentiles_candidate_ms")
            fig["spread_eager"] = obs["data"].get("spread_eager")
            if device:  # the runner's CUDA events: where the spread comes from (device or host)
                fig["runner_device_ms_median"] = statistics.median(device)
                fig["runner_device_cv_across_profiles"] = statistics.pstdev(device) / statistics.mean(device)
            fig["profile_s"] = statistics.median(walls)
            fig["t_candidate_ms_median"] = statistics.median(medians)
            fig["cv_across_profiles"] = statistics.pstdev(medians) / statistics.mean(medians)
            fig["spread_within_profile_median"] = statistics.median(spreads)
            fig["t_eager_ms"] = obs["data"].get("t_eager_ms")
            fig["t_compile_ms"] = obs["data"].get("t_compile_ms")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    inc = fig["compile_edit_kernel_s"]
    print(f"evaluation benchmark ({args.device})")
    print(f"  Compile cold (empty cache, torch PCH built)  {fig['compile_cold_s']:8.2f} s")
    print(f"  Compile unchanged (all objects cached)      {fig['compile_unchanged_s']:8.2f} s")
    print(f"  Compile after editing one kernel file        {inc:8.2f} s")
    print(f"  Compile after editing one binding file       {fig['compile_edit_binding_s']:8.2f} s")
    if fig["cpp_extension_load_full_s"]:
        print(f"  cpp_extension.load, full rebuild (peer)      {fig['cpp_extension_load_full_s']:8.2f} s"
              f"   -> incremental {fig['cpp_extension_load_full_s'] / inc:.1f}x faster (target >= 8x)")
    else:
        print(f"  cpp_extension.load: failed: {fig.get('cpp_extension_load_error', '')[:300]}")
    print(f"  Verify per call (warm)                       {fig['verify_s']:8.2f} s")
    print(f"  Profile per call (warm baseline cache)       {fig['profile_s']:8.2f} s")
    print(f"  candidate median over {args.profiles} Profiles            {fig['t_candidate_ms_median']:8.4f} ms"
          f"  (eager {fig['t_eager_ms']:.4g} ms, compile {fig['t_compile_ms'] or float('nan'):.4g} ms)")
    print(f"  CV of the median across Profiles             {100 * fig['cv_across_profiles']:8.2f} %   (target <= 1%)")
    print(f"  spread inside one Profile (CV, middle 80%)   {100 * fig['spread_within_profile_median']:8.2f} %")
    print(f"  eager spread inside its timing (CV)          {100 * (fig.get('spread_eager') or float('nan')):8.2f} %")
    print(f"  last Profile's samples p10/p25/p50/p75/p90   "
          f"{' '.join(f'{v:.4g}' for v in (fig.get('percentiles_last_profile_ms') or {}).values())} ms")
    if fig.get("runner_device_ms_median") is not None:
        print(f"  runner's CUDA-event time (advisory)          {fig['runner_device_ms_median']:8.4f} ms, "
              f"CV across Profiles {100 * fig['runner_device_cv_across_profiles']:.2f} %")
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
