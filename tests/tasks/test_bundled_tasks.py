"""Checks every bundled task of dataset/tasks/ (CPU only).

For each task folder: task.json is complete; the CPU variant is model.py at other sizes (same
Model source, same constructor signature, same parameter names); it runs fast, deterministically,
with a finite and non-degenerate output that depends on every input and every parameter at the
tolerance the verifier uses; the full-size model.py builds and runs on the meta device (shapes
only, no memory), so its sizes are consistent.

The CPU variant is not in the folder: the task store derives it from model.py and task.json's
"cpu_sizes". So that these checks test what the env serves, and the rule lives in one place, the
code comes from the real loader: one `kgym-env serve` on the bundled tasks (built by `make`),
asked GET /v1/tasks/<id> for `code` and `code_cpu`.
"""
import ast
import http.client
import inspect
import json
import math
import os
import pathlib
import queue
import signal
import subprocess
import threading
import time
import types

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
TASKS_DIR = REPO / "dataset" / "tasks"
TASK_NAMES = sorted(p.name for p in TASKS_DIR.iterdir() if p.is_dir() and not p.name.startswith("."))
BINARY = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-env"
REQUIRED_KEYS = {"name": str, "description": str, "level": int, "ops": list, "atol": float,
                 "rtol": float, "est_eager_ms": float, "cpu_sizes": dict}
SEED = 1234
CPU_FORWARD_LIMIT_S = 1.0  # "well under a second on 2 CPU cores"
SERVER_START_S = 30.0

torch.set_num_threads(2)


def start_server(state_dir: pathlib.Path):
    """A kgym-env serving the bundled tasks on a free port: (process, port)."""
    assert BINARY.is_file(), f"{BINARY} is missing: run make first"
    proc = subprocess.Popen(
        [str(BINARY), "serve", "--port", "0", "--tasks", str(TASKS_DIR), "--state-dir",
         str(state_dir), "--template", str(REPO / "env" / "template"), "--quiet"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # stderr is read on a thread (a readline here could block forever) and drained to the end,
    # so the server never stalls on a full pipe.
    lines = queue.Queue()

    def drain():
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    seen, deadline = [], time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:  # exited: a load error (e.g. a bad "cpu_sizes") is on stderr
            proc.wait()
            pytest.fail(f"kgym-env exited with {proc.returncode}: {''.join(seen)}")
        seen.append(line)
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "listening":
            return proc, event["port"]
    proc.kill()
    proc.wait()
    pytest.fail(f"kgym-env did not report listening within {SERVER_START_S} s: {''.join(seen)}")


def get_json(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    assert resp.status == 200, f"GET {path}: {resp.status} {body[:500]!r}"
    return json.loads(body)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Each bundled task's detail as the env serves it, by folder name."""
    proc, port = start_server(tmp_path_factory.mktemp("kgym_state"))
    try:
        details = {task: get_json(port, f"/v1/tasks/kgym/{task}") for task in TASK_NAMES}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert rc == 0, f"kgym-env exited with {rc} on SIGTERM"
    return details


def load_code(code: str, task: str, variant: str):
    """Runs code in a fresh module (task files all define Model, so nothing is shared)."""
    module = types.ModuleType(f"kgym_task_{task}_{variant}")
    exec(compile(code, f"<kgym/{task} {variant}>", "exec"), module.__dict__)
    return module


def load_task(served, task: str):
    """(model.py module, CPU variant module), from the code the env serves."""
    detail = served[task]
    assert detail["code_cpu"] is not None, f"{task}: the env serves no CPU variant"
    return load_code(detail["code"], task, "full"), load_code(detail["code_cpu"], task, "cpu")


def top_level(text: str):
    """(source of each top-level def and class by name, names assigned at module level)."""
    tree = ast.parse(text)
    defs = {n.name: ast.get_source_segment(text, n) for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}
    return defs, assigned


def read_meta(task: str) -> dict:
    return json.loads((TASKS_DIR / task / "task.json").read_text())


def build(module, seed: int):
    """The module's Model with weights from seed, and inputs from seed + 1."""
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(seed + 1)
    inputs = module.get_inputs()
    return model, inputs


def run(model, inputs):
    with torch.no_grad():
        return model(*inputs)


def fails_tolerance(a: torch.Tensor, b: torch.Tensor, meta: dict) -> bool:
    """Whether b would be rejected as an answer for a at the task's tolerance."""
    return not torch.allclose(a, b, atol=meta["atol"], rtol=meta["rtol"])


def test_there_are_enough_tasks():
    assert len(TASK_NAMES) >= 12, TASK_NAMES


@pytest.mark.parametrize("task", TASK_NAMES)
def test_task_json(task):
    meta = read_meta(task)
    for key, kind in REQUIRED_KEYS.items():
        assert key in meta, f"{task}: task.json lacks {key}"
        value = meta[key]
        ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
        assert ok and not isinstance(value, bool), f"{task}: {key} is {value!r}"
    assert meta["name"].strip() and meta["description"].strip()
    assert meta["level"] in (1, 2, 3)
    assert meta["ops"] and all(isinstance(op, str) and op for op in meta["ops"])
    assert meta["atol"] == 1e-2 and meta["rtol"] == 1e-2
    assert 1.0 <= meta["est_eager_ms"] <= 100.0, "outside the 1-100 ms eager window"
    assert "code" not in meta and "id" not in meta  # model.py holds the code; id is the folder's
    assert meta["cpu_sizes"] and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                     for v in meta["cpu_sizes"].values()), meta["cpu_sizes"]
    assert (TASKS_DIR / task / "model.py").is_file(), f"{task}: no model.py"
    # One source of truth: the sizes in task.json, not a near-copy of model.py.
    assert not (TASKS_DIR / task / "model_cpu.py").exists(), f"{task}: model_cpu.py and cpu_sizes"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_served_code(task, served):
    """The env serves model.py as is, and a CPU variant whose sizes are task.json's."""
    detail = served[task]
    assert detail["code"] == (TASKS_DIR / task / "model.py").read_text()
    assert detail["has_cpu_variant"] is True and detail["code_cpu"] != detail["code"]
    assert "cpu_sizes" not in detail  # consumed by the loader, not metadata
    cpu = load_code(detail["code_cpu"], task, "cpu")
    for name, value in read_meta(task)["cpu_sizes"].items():
        assert getattr(cpu, name) == value, name


@pytest.mark.parametrize("task", TASK_NAMES)
def test_same_model_at_two_sizes(task, served):
    full, cpu = load_task(served, task)
    for module in (full, cpu):
        assert issubclass(module.Model, torch.nn.Module)
        assert callable(module.get_inputs) and callable(module.get_init_inputs)
    # The same code: identical functions and classes, the same size constants (other values).
    defs_full, names_full = top_level(served[task]["code"])
    defs_cpu, names_cpu = top_level(served[task]["code_cpu"])
    assert defs_full == defs_cpu, "the CPU variant is not model.py's code at another size"
    assert names_full == names_cpu
    assert inspect.signature(full.Model.__init__) == inspect.signature(cpu.Model.__init__)
    init_full, init_cpu = full.get_init_inputs(), cpu.get_init_inputs()
    assert [type(v) for v in init_full] == [type(v) for v in init_cpu]
    torch.manual_seed(SEED)
    with torch.device("meta"):
        sd_full = full.Model(*init_full).state_dict()
    sd_cpu = cpu.Model(*init_cpu).state_dict()
    assert list(sd_full) == list(sd_cpu)
    assert [v.dim() for v in sd_full.values()] == [v.dim() for v in sd_cpu.values()]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_full_size_shapes_on_meta(task, served):
    """model.py's own sizes fit together: build and run it on the meta device."""
    full, cpu = load_task(served, task)
    with torch.device("meta"):
        model, inputs = build(full, SEED)
        out = run(model, inputs)
    assert isinstance(out, torch.Tensor) and out.numel() > 0
    assert all(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in inputs)
    cpu_out = run(*build(cpu, SEED))
    assert out.dim() == cpu_out.dim() and out.dtype == cpu_out.dtype


@pytest.mark.parametrize("task", TASK_NAMES)
def test_cpu_variant_behaves(task, served):
    meta = read_meta(task)
    _, cpu = load_task(served, task)
    model, inputs = build(cpu, SEED)
    assert all(x.device.type == "cpu" and x.dtype == torch.float32 for x in inputs)

    start = time.perf_counter()
    out = run(model, inputs)
    elapsed = time.perf_counter() - start
    assert elapsed < CPU_FORWARD_LIMIT_S, f"CPU forward took {elapsed:.2f} s"

    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert torch.isfinite(out).all(), "non-finite output"
    assert out.std().item() > 0, "constant output"
    # Not degenerate at the verifier's tolerance: zeros or a constant would not pass.
    assert fails_tolerance(out, torch.zeros_like(out), meta), "zeros would pass"
    assert fails_tolerance(out, torch.full_like(out, out.mean().item()), meta), "a constant would pass"

    # Deterministic: the same seeds give the same weights, inputs and output.
    model2, inputs2 = build(cpu, SEED)
    assert all(torch.equal(a, b) for a, b in zip(inputs, inputs2))
    assert torch.equal(run(model2, inputs2), out)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_output_depends_on_every_input(task, served):
    """Each input, drawn afresh, changes the output beyond the tolerance."""
    meta = read_meta(task)
    _, cpu = load_task(served, task)
    model, inputs = build(cpu, SEED)
    out = run(model, inputs)
    torch.manual_seed(SEED + 99)
    other = cpu.get_inputs()
    for i in range(len(inputs)):
        changed = list(inputs)
        changed[i] = other[i]
        assert fails_tolerance(out, run(model, changed), meta), f"input {i} barely matters"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_output_depends_on_every_parameter(task, served):
    """Nudging any parameter moves the output: no dead weights (e.g. a bias a norm cancels)."""
    _, cpu = load_task(served, task)
    model, inputs = build(cpu, SEED)
    out = run(model, inputs)
    torch.manual_seed(SEED + 7)
    for name, param in model.named_parameters():
        saved = param.detach().clone()
        scale = saved.std().item() if saved.numel() > 1 else 1.0
        with torch.no_grad():
            param.add_(torch.randn_like(param) * 0.2 * (scale if math.isfinite(scale) and scale > 0 else 1.0))
        moved = (run(model, inputs) - out).abs().max().item()
        with torch.no_grad():
            param.copy_(saved)
        assert moved > 1e-4, f"parameter {name} does not affect the output"
