"""KernelBench-style solutions (ModelNew built with torch.utils.cpp_extension.load_inline):
Compile reads the sources out of model_new.py without running it (env/harness/inline.py) and builds
them like any kernel; the candidate process compiles nothing. Unit tests of the extraction, then
one solution through a real server."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "env" / "harness"))
import inline  # noqa: E402

CPU_RELU = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cpp = """
#include <torch/extension.h>

torch::Tensor relu_cpu(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous float32");
    auto out = torch::empty_like(x);
    const float *in = x.data_ptr<float>();
    float *o = out.data_ptr<float>();
    for (int64_t i = 0, n = x.numel(); i < n; i++)
        o[i] = in[i] > 0.0f ? in[i] : 0.0f;
    return out;
}
"""

relu_ext = load_inline(name="relu_ext", cpp_sources=relu_cpp, functions=["relu_cpu"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_cpu(x)
'''


def test_extracts_literals_and_module_constants():
    files = inline.extract(CPU_RELU)
    binding = files["kernels/load_inline_relu_ext_binding.cpp"]
    assert "torch::Tensor relu_cpu(torch::Tensor x)" in binding
    assert 'm.def("relu_cpu", &relu_cpu);' in binding
    assert "REGISTER_BINDING(load_inline_relu_ext" in binding
    assert not any(p.endswith(".cu") for p in files)  # no cuda_sources: no .cu file


def test_refuses_what_it_cannot_read_without_running():
    src = CPU_RELU.replace('cpp_sources=relu_cpp', 'cpp_sources=open("x").read()')
    with pytest.raises(inline.Refused):
        inline.extract(src)
    with pytest.raises(inline.Refused):
        inline.extract(CPU_RELU.replace('functions=["relu_cpu"]', 'functions=[]'))


def test_cli_reports_errors_as_json(tmp_path):
    bad = tmp_path / "model_new.py"
    bad.write_text("def (:\n")
    out = subprocess.run([sys.executable, str(REPO / "env/harness/inline.py"), str(bad)],
                         capture_output=True, text=True, check=True)
    assert "syntax error" in json.loads(out.stdout)["error"]


@pytest.mark.kgym_eval
def test_kernelbench_style_solution_through_the_server(harness_server):
    c = harness_server.client()
    r = c.post("/v1/episodes", json.dumps({"task_id": "kgym/relu", "options": {"variant": "cpu"}}).encode())
    assert r.status == 201, r.text
    ep = r.json["episode_id"]
    assert c.put(f"/v1/episodes/{ep}/files/model_new.py", CPU_RELU.encode()).status in (200, 201)
    # the template's CUDA example has no place in a CPU solution
    c.post(f"/v1/episodes/{ep}/tools/Bash", json.dumps({"command": "rm kernels/axpby*"}).encode())
    r = c.post(f"/v1/episodes/{ep}/tools/Compile", b"{}")
    obs = r.json["observation"]
    assert not obs["is_error"], obs["content"]
    listing = c.post(f"/v1/episodes/{ep}/tools/Bash", json.dumps({"command": "ls kernels"}).encode())
    assert "load_inline_relu_ext_binding.cpp" in listing.json["observation"]["content"]
    r = c.post(f"/v1/episodes/{ep}/tools/Submit", b"{}")
    out = r.json
    comp = out["info"]["reward_components"]
    assert out["info"]["eval_status"] == "ok", comp
    assert comp["correct"] is True, comp.get("error")
    assert out["reward"] >= 1
    c.close()


@pytest.mark.kgym_eval
def test_unreadable_load_inline_is_the_agents_error(harness_server):
    """inline.py parses the agent's file in the compile sandbox: a file it cannot read comes
    back to the agent as a Compile error, and its staging dir does not outlive the call."""
    c = harness_server.client()
    r = c.post("/v1/episodes", json.dumps({"task_id": "kgym/relu", "options": {"variant": "cpu"}}).encode())
    assert r.status == 201, r.text
    ep = r.json["episode_id"]
    broken = b"from torch.utils.cpp_extension import load_inline\ndef (:\n"
    assert c.put(f"/v1/episodes/{ep}/files/model_new.py", broken).status in (200, 201)
    obs = c.post(f"/v1/episodes/{ep}/tools/Compile", b"{}").json["observation"]
    assert obs["is_error"] and "load_inline" in obs["content"] and "syntax" in obs["content"], obs
    assert not list(harness_server.state.rglob("inline"))
    # the same episode goes on: a readable file compiles
    assert c.put(f"/v1/episodes/{ep}/files/model_new.py", CPU_RELU.encode()).status in (200, 201)
    c.post(f"/v1/episodes/{ep}/tools/Bash", json.dumps({"command": "rm kernels/axpby*"}).encode())
    obs = c.post(f"/v1/episodes/{ep}/tools/Compile", b"{}").json["observation"]
    assert not obs["is_error"], obs["content"]
    assert not list(harness_server.state.rglob("inline"))
    c.delete(f"/v1/episodes/{ep}")
    c.close()
