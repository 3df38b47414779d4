"""Checks every bundled task of dataset/tasks/ (CPU only).

For each task folder: task.json is complete; model.py and model_cpu.py are the same model at two
sizes (same Model source, same constructor signature, same parameter names); the CPU variant
runs fast, deterministically, with a finite and non-degenerate output that depends on every input
and every parameter at the tolerance the verifier uses; the full-size model.py builds and runs
on the meta device (shapes only, no memory), so its sizes are consistent.
"""
import ast
import importlib.util
import inspect
import json
import math
import pathlib
import time

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
TASKS_DIR = REPO / "dataset" / "tasks"
TASK_NAMES = sorted(p.name for p in TASKS_DIR.iterdir() if p.is_dir() and not p.name.startswith("."))
REQUIRED_KEYS = {"name": str, "description": str, "level": int, "ops": list, "atol": float,
                 "rtol": float, "est_eager_ms": float}
SEED = 1234
CPU_FORWARD_LIMIT_S = 1.0  # "well under a second on 2 CPU cores"

torch.set_num_threads(2)


def load_module(path: pathlib.Path):
    """Imports a file by path under a unique name (task files all define Model)."""
    name = "kgym_task_" + "_".join(path.parts[-2:]).replace(".", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def top_level(path: pathlib.Path):
    """(source of each top-level def and class by name, names assigned at module level)."""
    text = path.read_text()
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
    for f in ("model.py", "model_cpu.py"):
        assert (TASKS_DIR / task / f).is_file(), f"{task}: no {f}"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_same_model_at_two_sizes(task):
    full = load_module(TASKS_DIR / task / "model.py")
    cpu = load_module(TASKS_DIR / task / "model_cpu.py")
    for module in (full, cpu):
        assert issubclass(module.Model, torch.nn.Module)
        assert callable(module.get_inputs) and callable(module.get_init_inputs)
    # The same code: identical functions and classes, the same size constants (other values).
    defs_full, names_full = top_level(TASKS_DIR / task / "model.py")
    defs_cpu, names_cpu = top_level(TASKS_DIR / task / "model_cpu.py")
    assert defs_full == defs_cpu, "model_cpu.py is not model.py's code at another size"
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
def test_full_size_shapes_on_meta(task):
    """model.py's own sizes fit together: build and run it on the meta device."""
    full = load_module(TASKS_DIR / task / "model.py")
    cpu = load_module(TASKS_DIR / task / "model_cpu.py")
    with torch.device("meta"):
        model, inputs = build(full, SEED)
        out = run(model, inputs)
    assert isinstance(out, torch.Tensor) and out.numel() > 0
    assert all(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in inputs)
    cpu_out = run(*build(cpu, SEED))
    assert out.dim() == cpu_out.dim() and out.dtype == cpu_out.dtype


@pytest.mark.parametrize("task", TASK_NAMES)
def test_cpu_variant_behaves(task):
    meta = read_meta(task)
    cpu = load_module(TASKS_DIR / task / "model_cpu.py")
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
def test_output_depends_on_every_input(task):
    """Each input, drawn afresh, changes the output beyond the tolerance."""
    meta = read_meta(task)
    cpu = load_module(TASKS_DIR / task / "model_cpu.py")
    model, inputs = build(cpu, SEED)
    out = run(model, inputs)
    torch.manual_seed(SEED + 99)
    other = cpu.get_inputs()
    for i in range(len(inputs)):
        changed = list(inputs)
        changed[i] = other[i]
        assert fails_tolerance(out, run(model, changed), meta), f"input {i} barely matters"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_output_depends_on_every_parameter(task):
    """Nudging any parameter moves the output: no dead weights (e.g. a bias a norm cancels)."""
    cpu = load_module(TASKS_DIR / task / "model_cpu.py")
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
