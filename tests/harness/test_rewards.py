"""The honest solutions of tests/harness/solutions/ through a real kgym-env: each is written into a
CPU episode of its task and submitted, and the reward must be one of its solution.json's
"expect_reward" (diag_matmul_fast 3, diag_matmul_slow 1, diag_matmul_wrong -1, scale_shift_fused
1-3: its margin over eager on a 2-core CPU is near the 5% bar, and timings never gate CI), and a
correct solution's reward must be exactly the milestone of the times the judge measured (computed
here from the paper's rule, not by kgym). Together with test_exploits_kgym.py this shows kgym's defences do not simply refuse
everything: real speed-ups are paid, a correct slow kernel gets 1, a wrong one -1.

Needs build/kgym-env with the evaluation engine, run as root (the sandbox).
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness_cases  # noqa: E402
import kgym_episode  # noqa: E402

pytestmark = pytest.mark.kgym_eval

SOLUTIONS = harness_cases.solutions()


@pytest.fixture
def client(harness_server):
    c = harness_server.client()
    yield c
    c.close()


def milestone(comp):
    """The paper's milestone reward of a correct solution from the measured median times: 3 when
    more than 5% faster than both eager and torch.compile, 2 than eager only, else 1."""
    tc, te, tk = comp["t_candidate_ms"], comp["t_eager_ms"], comp.get("t_compile_ms")
    beats_eager = (te - tc) / te > 0.05
    beats_compile = tk is not None and tk > 0 and (tk - tc) / tk > 0.05
    return 3 if beats_eager and beats_compile else 2 if beats_eager else 1


@pytest.mark.parametrize("name,meta,folder", SOLUTIONS, ids=[s[0] for s in SOLUTIONS])
def test_honest_solution_reward(client, name, meta, folder):
    res = kgym_episode.run_case(client, meta["task"], folder)
    summary = kgym_episode.describe(res)
    print(f"{name}: {summary}")
    assert res["info"].get("eval_status") == "ok", f"{name}: the evaluation itself failed: {summary}"
    if res["compile"] is not None:
        assert res["compile"]["is_error"] is False, f"{name} does not compile: {res['compile']['content'][-3000:]}"
    assert res["reward"] in meta["expect_reward"], (
        f"{name}: reward {res['reward']}, expected one of {meta['expect_reward']}: {summary}")
    comp = res["info"].get("reward_components", {})
    if res["reward"] == -1:
        assert comp.get("checks_failed"), summary
    else:
        assert comp.get("correct") is True, summary
        for k in ("t_candidate_ms", "t_eager_ms"):
            assert isinstance(comp.get(k), (int, float)) and comp[k] > 0, summary
        assert res["reward"] == milestone(comp), f"{name}: the reward is not the times' milestone: {summary}"
    if meta.get("noise_bound"):
        # paid only through the rounding-noise floor: the checks on the task's draws and the
        # probe calls (the mixed-sign probe, the hidden ones among the timed calls) measured the
        # noise of their own kind of draw, and both found the output all noise
        noise = comp.get("reference_noise", {})
        for kind in ("task", "probe"):
            assert noise.get(kind, {}).get("total", 0) >= 0.5, f"{name}: {kind}: {noise}"
