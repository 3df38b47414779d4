"""The judge's output comparison runs in float64 chunks (a KernelBench output can hold 1.6e9
elements): chunked, it must reach exactly the verdicts and figures of one whole-tensor pass."""
import importlib.util
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "env" / "harness"))  # judge.py imports its neighbours
_spec = importlib.util.spec_from_file_location("kgym_judge", REPO / "env" / "harness" / "judge.py")
judge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(judge)


def verdict(got, want, chunk, monkeypatch):
    monkeypatch.setattr(judge, "CHUNK_ELEMS", chunk)
    me = SimpleNamespace(torch=torch, atol=1e-2, rtol=1e-2)
    return judge.Judge.compare(me, got, want, "t")


def cases():
    g = torch.Generator().manual_seed(7)
    w = torch.randn(37, 11, generator=g)
    yield "equal", [w.clone()], [w], True
    near = w + 1e-4
    yield "within tolerance", [near], [w], True
    late = w.clone()
    late.view(-1)[-1] += 1.0  # the last element, in the last chunk
    yield "one wrong element at the end", [late], [w], False
    nan_w = w.clone()
    nan_w.view(-1)[100] = float("nan")
    yield "NaN where the reference has none", [nan_w], [w], False
    yield "NaN matched", [nan_w.clone()], [nan_w], True
    inf_w = w.clone()
    inf_w.view(-1)[200] = float("inf")
    neg = inf_w.clone()
    neg.view(-1)[200] = float("-inf")
    yield "Inf of the wrong sign", [neg], [inf_w], False
    yield "two outputs, the second wrong", [w.clone(), w[:3] * 2], [w, w[:3]], False
    t = w.t()  # a non-contiguous reference
    yield "non-contiguous reference", [t.contiguous() + 1e-5], [t], True


@pytest.mark.parametrize("name, got, want, ok", list(cases()), ids=[c[0] for c in cases()])
def test_chunked_compare_equals_one_pass(name, got, want, ok, monkeypatch):
    whole_ok, whole = verdict(got, want, 1 << 30, monkeypatch)
    for chunk in (1, 7, 64, 406):
        c_ok, c = verdict(got, want, chunk, monkeypatch)
        assert c_ok == whole_ok == ok, (name, chunk, c, whole)
        assert c["max_abs_err"] == pytest.approx(whole["max_abs_err"], rel=1e-12, abs=0)
        assert c["max_rel_err"] == pytest.approx(whole["max_rel_err"], rel=1e-12, abs=0)
        assert c.get("why") == whole.get("why")


def test_diff_norm_is_the_l2_norm_over_every_output(monkeypatch):
    monkeypatch.setattr(judge, "CHUNK_ELEMS", 5)
    a = [torch.randn(9, 4), torch.randn(13)]
    b = [torch.randn(9, 4), torch.randn(13)]
    want = math.sqrt(sum(float(((x.double() - y.double()) ** 2).sum()) for x, y in zip(a, b)))
    assert judge.diff_norm(torch, a, b) == pytest.approx(want, rel=1e-12)
    assert judge.diff_norm(torch, a) == pytest.approx(math.sqrt(sum(float((x.double() ** 2).sum()) for x in a)), rel=1e-12)
