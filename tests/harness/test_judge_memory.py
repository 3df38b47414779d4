"""The judge's memory for KernelBench's largest tasks (6-7 GB tensors on an 80 GB card): the
shared memory holds the planned weights, outputs and inputs once, plus headroom for larger
inputs capped at SHM_HEADROOM_MAX; a trusted baseline's outputs are compared in place, a
candidate's copied first; the reference runs on the drawn inputs themselves (no copy), which are
then drawn again from their seed, unless a second draw differs. On the CPU (host shared memory),
with references of known sizes."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "env" / "harness"))  # judge.py imports its neighbours
_spec = importlib.util.spec_from_file_location("kgym_judge_mem", REPO / "env" / "harness" / "judge.py")
judge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(judge)

# inputs: x [64, 256] + y [64, 256] fp32 (2 x 65,536 bytes); weight [256, 256] fp32 (262,144
# bytes); one output [64, 256] fp32 (65,536 bytes); every size a multiple of the 256-byte ALIGN.
# GROW (an environment variable the module reads when get_inputs runs) makes later inputs larger.
REFERENCE = '''
import os
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(256, 256, bias=False)

    def forward(self, x, y):
        return self.lin(x) + y[: x.shape[0]]

def get_inputs():
    rows = 64 + int(os.environ.get("KGYM_TEST_GROW_ROWS", "0"))
    return [torch.randn(64, 256), torch.randn(rows, 256)]

def get_init_inputs():
    return []
'''
IN_BYTES, W_BYTES, OUT_BYTES = 2 * 64 * 256 * 4, 256 * 256 * 4, 64 * 256 * 4


@pytest.fixture
def new_judge(tmp_path):
    ref = tmp_path / "model.py"
    ref.write_text(REFERENCE)

    def make():
        return judge.Judge({"reference": str(ref), "seed": 5, "device": "cpu", "data_path": "host"})
    return make


def test_shared_memory_is_the_plan_once_plus_headroom_as_large_as_the_inputs(new_judge):
    j = new_judge()
    j.plan()
    want = W_BYTES + OUT_BYTES + IN_BYTES + IN_BYTES + (1 << 20)  # headroom min(inputs, cap)
    assert j.shm.nbytes == want
    assert j.components["shm_bytes"] == want


def test_the_headroom_is_capped(new_judge, monkeypatch):
    monkeypatch.setattr(judge, "SHM_HEADROOM_MAX", 4096)
    j = new_judge()
    j.plan()
    assert j.shm.nbytes == W_BYTES + OUT_BYTES + IN_BYTES + 4096 + (1 << 20)


def test_inputs_larger_than_the_headroom_are_a_clear_infra_error(new_judge, monkeypatch):
    monkeypatch.setattr(judge, "SHM_HEADROOM_MAX", 4096)
    j = new_judge()
    j.plan()
    _, end = j.shm.layout(j.fresh_inputs(), j.out_end)
    assert end <= j.shm.nbytes
    # 4 more rows of y (4 KiB) fit the headroom; 1 MiB + 8 KiB more of y do not
    monkeypatch.setenv("KGYM_TEST_GROW_ROWS", "4")
    j.shm.layout(j.fresh_inputs(), j.out_end)
    monkeypatch.setenv("KGYM_TEST_GROW_ROWS", str((1 << 20) // 1024 + 8))
    with pytest.raises(judge.Infra, match="bytes of shared memory"):
        j.shm.layout(j.fresh_inputs(), j.out_end)


def test_outputs_are_copied_for_a_candidate_and_read_in_place_for_a_baseline(new_judge):
    j = new_judge()
    j.plan()
    j.shm.write(j.out_specs[0], torch.full((64, 256), 3.0))
    copied, in_place = j.read_outputs()[0], j.read_outputs(copy=False)[0]
    assert torch.equal(copied, in_place)
    # a runner writing after its reply changes what is read in place, never the copy
    j.shm.write(j.out_specs[0], torch.full((64, 256), 4.0))
    assert float(copied[0, 0]) == 3.0
    assert float(in_place[0, 0]) == 4.0


class FakeChannel:
    """A runner that answers every call at once (the outputs are never looked at: compare is
    replaced), to see which reads of the outputs the timing loop asks for."""
    what = "fake"

    def call(self, msg, fds=(), timeout_s=None):
        return {}

    def timed_call(self, msg, timeout_s=None):
        return 1e-4, {}


def test_the_timing_loop_copies_a_candidates_outputs_and_reads_a_baselines_in_place(new_judge, monkeypatch):
    j = new_judge()
    j.cur_w = j.plan()[0]
    j.job["timing"] = {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.0}
    reads = []
    real_read = j.read_outputs
    monkeypatch.setattr(j, "read_outputs", lambda copy=True: reads.append(copy) or real_read(copy))
    monkeypatch.setattr(j, "compare", lambda got, want, label: (True, {"label": label, "ok": True}))
    for name in ("hidden_call", "tracking"):
        monkeypatch.setattr(j, name, lambda *a, **k: None)
    j.timed(FakeChannel())  # a candidate: every output read, always copied
    assert reads and all(reads), reads
    reads.clear()
    j.timed(FakeChannel(), check_calls=2)  # a trusted baseline: the first 2 read in place
    assert reads == [False, False], reads


# A reference that changes its input in place: run on the draw itself (no copy), it must still
# give the outputs of the untouched inputs, and the inputs handed on are a clean second draw.
IN_PLACE_REFERENCE = '''
import random
import torch

class Model(torch.nn.Module):
    def forward(self, x, k):
        x.mul_(2.0)
        return x + k

def get_inputs():
    return [torch.randn(128, 64), 3]

def get_init_inputs():
    return []
'''

# get_inputs drawing from Python's own generator, which the judge does not seed: a second draw
# from the same seed differs, and the reference must then be of the draw handed on.
UNSEEDED_REFERENCE = IN_PLACE_REFERENCE.replace("torch.randn(128, 64)", "torch.randn(128, 64) + random.random()")


def judge_for(tmp_path, code):
    ref = tmp_path / "model.py"
    ref.write_text(code)
    j = judge.Judge({"reference": str(ref), "seed": 11, "device": "cpu", "data_path": "host"})
    j.ref_model = j.ref_mod.Model()
    return j


def test_the_reference_runs_on_the_draw_itself_and_the_inputs_are_drawn_again(tmp_path, monkeypatch):
    j = judge_for(tmp_path, IN_PLACE_REFERENCE)
    copies = []
    real = j.reference
    monkeypatch.setattr(j, "reference", lambda w, x, copy_inputs=True: copies.append(copy_inputs) or real(w, x, copy_inputs))
    x, want = j.inputs_and_reference({})
    assert copies == [False]  # no copy of the inputs was made
    assert "inputs_redrawn_differ" not in j.components
    assert x[1] == 3
    assert torch.equal(want[0], x[0] * 2.0 + 3)  # the untouched draw's outputs
    # the same seed sequence as before: the next draw is the one fresh_inputs would make next
    j2 = judge_for(tmp_path, IN_PLACE_REFERENCE)
    assert torch.equal(j2.fresh_inputs()[0], x[0])


def test_a_draw_not_from_torchs_seed_is_noticed_and_its_reference_recomputed(tmp_path):
    j = judge_for(tmp_path, UNSEEDED_REFERENCE)
    x, want = j.inputs_and_reference({})
    assert j.components.get("inputs_redrawn_differ") is True
    assert torch.equal(want[0], x[0] * 2.0 + 3)  # of x as handed on: the reference ran on a copy


def test_input_samples_tell_draws_apart(tmp_path):
    a = [torch.arange(10.0), 5]
    s = judge.input_sample(torch, a)
    assert judge.same_sample(torch, s, judge.input_sample(torch, [torch.arange(10.0), 5]))
    assert not judge.same_sample(torch, s, judge.input_sample(torch, [torch.arange(10.0) + 1, 5]))
    assert not judge.same_sample(torch, s, judge.input_sample(torch, [torch.arange(10.0), 6]))
    assert not judge.same_sample(torch, s, judge.input_sample(torch, [torch.arange(11.0), 5]))
    assert not judge.same_sample(torch, s, judge.input_sample(torch, [torch.arange(10), 5]))  # dtype
    nan = torch.tensor([float("nan"), 1.0])
    assert judge.same_sample(torch, judge.input_sample(torch, [nan]), judge.input_sample(torch, [nan.clone()]))
    assert judge.input_sample(torch, [torch.ones(4, 4).t()[:, :2]]) is None  # not contiguous: no sample
    big = torch.zeros(1 << 20)
    other = big.clone()
    other[-(1 << 4)] = 1.0  # on the sample's stride
    assert len(judge.input_sample(torch, [big])[0][3]) <= (judge.INPUT_SAMPLE_ELEMS + 1) * big.element_size()  # bytes
    assert not judge.same_sample(torch, judge.input_sample(torch, [big]), judge.input_sample(torch, [other]))


def reference_with(get_inputs, forward="x.mul_(2.0)\n        return x + k", extra=""):
    return f"""
import torch
{extra}
class Model(torch.nn.Module):
    def forward(self, x, k):
        {forward}

def get_inputs():
    return {get_inputs}

def get_init_inputs():
    return []
"""


def copies_asked(j, monkeypatch):
    copies = []
    real = j.reference
    monkeypatch.setattr(j, "reference", lambda w, x, copy_inputs=True: copies.append(copy_inputs) or real(w, x, copy_inputs))
    return copies


def test_aliased_inputs_are_not_drawn_twice(tmp_path, monkeypatch):
    # one tensor twice: the runner gets two copies, so the reference must not change both at once
    j = judge_for(tmp_path, reference_with("[t, t] if (t := torch.randn(8, 8)) is not None else None",
                                           forward="x.mul_(2.0)\n        return x + k"))
    copies = copies_asked(j, monkeypatch)
    x, want = j.inputs_and_reference({})
    assert copies == [True]
    assert torch.equal(want[0], x[0] * 3.0)


def test_expanded_inputs_are_not_changed_in_place(tmp_path, monkeypatch):
    j = judge_for(tmp_path, reference_with("[torch.randn(1, 64).expand(128, 64), 1.0]",
                                           forward="return x.add_(k)"))
    copies = copies_asked(j, monkeypatch)
    x, want = j.inputs_and_reference({})  # in place on the expanded draw itself would raise
    assert copies == [True]
    assert torch.equal(want[0], x[0] + 1.0)


def test_a_tensor_the_task_keeps_is_noticed_and_later_references_run_on_copies(tmp_path):
    j = judge_for(tmp_path, reference_with("[CACHE, 3]", extra="CACHE = torch.randn(16, 16)"))
    x, want = j.inputs_and_reference({})
    assert j.components.get("inputs_kept_by_task") is True
    assert torch.equal(want[0], x[0] * 2.0 + 3)  # consistent with what the runner gets
    after_first = j.ref_mod.CACHE.clone()
    x, want = j.inputs_and_reference({})
    assert torch.equal(j.ref_mod.CACHE, after_first)  # no longer changed in place
    assert torch.equal(want[0], x[0] * 2.0 + 3)


def test_a_reference_returning_its_input_changed_in_place_is_not_taken_for_a_kept_one(tmp_path, monkeypatch):
    j = judge_for(tmp_path, reference_with("[torch.randn(32, 32), 0]", forward="return x.mul_(2.0)"))
    copies = copies_asked(j, monkeypatch)
    for _ in range(3):
        x, want = j.inputs_and_reference({})
        assert torch.equal(want[0], x[0] * 2.0)
    assert copies == [False] * 3
    assert "inputs_kept_by_task" not in j.components and "inputs_redrawn_differ" not in j.components


def test_a_probe_draw_is_the_same_as_before(tmp_path):
    # scaled in place now (GPU memory): the same numbers as randn_like(v) * scale
    j = judge_for(tmp_path, IN_PLACE_REFERENCE)
    got = j.fresh_inputs(probe=True, seed=7)[0]
    torch.manual_seed(7)
    v = j.ref_mod.get_inputs()[0]
    assert torch.equal(got, torch.randn_like(v) * max(1.0, float(v.abs().amax())))


def test_input_samples_of_other_dtypes(tmp_path):
    for dtype in (torch.float8_e4m3fn, torch.bfloat16, torch.bool, torch.int8, torch.complex64):
        a = torch.ones(300).to(dtype)
        assert judge.same_sample(torch, judge.input_sample(torch, [a]), judge.input_sample(torch, [a.clone()])), dtype
        b = torch.zeros(300).to(dtype)
        assert not judge.same_sample(torch, judge.input_sample(torch, [a]), judge.input_sample(torch, [b])), dtype
    zero_dim = torch.tensor(2.5)
    assert judge.same_sample(torch, judge.input_sample(torch, [zero_dim]), judge.input_sample(torch, [zero_dim.clone()]))
    assert judge.same_sample(torch, judge.input_sample(torch, [torch.empty(0)]), judge.input_sample(torch, [torch.empty(0)]))
