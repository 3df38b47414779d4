"""A candidate that never returns must get a verdict, not an infra_error.

The server kills a judge that outlives --eval-timeout, and a killed judge is an infra_error: no
reward, not even -1. So a hang would dodge the penalty that a wrong answer gets. The judge
therefore keeps its own deadline for the candidate's calls, inside the server's limit (90% of it,
less 5 s), and ends a hang with TIMEOUT. Here the server's limit is 40 s and the candidate's kernel
spins for days (diag_matmul_slow with its kernel replaced by
tests/harness/timeouts/diag_naive_hang.cpp): Verify must come back as an evaluation
that ran ("eval_status": "ok") and failed with TIMEOUT, well before the 120 s per-call limit.
"""
import shutil
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import conftest  # noqa: E402
import kgym_episode  # noqa: E402

pytestmark = pytest.mark.kgym_eval


@pytest.fixture(scope="module")
def short_limit_server(tmp_path_factory):
    assert conftest.BINARY.is_file(), f"{conftest.BINARY} is missing: run make first"
    srv = conftest.HarnessServer(tmp_path_factory.mktemp("kgym_deadline"), ["--eval-timeout", "40"])
    yield srv
    srv.stop()


def hang_case(tmp_path):
    """diag_matmul_slow, whose kernel now spins before working (the binding and model stay)."""
    case = tmp_path / "diag_matmul_hang"
    shutil.copytree(HERE / "solutions" / "diag_matmul_slow", case)
    shutil.copy(HERE / "timeouts" / "diag_naive_hang.cpp", case / "kernels" / "diag_naive.cpp")
    return case


def test_hanging_candidate_gets_timeout_not_infra_error(short_limit_server, tmp_path):
    case = hang_case(tmp_path)
    client = short_limit_server.client()
    try:
        t0 = time.monotonic()
        res = kgym_episode.run_case(client, "diag_matmul", case, final_tool="Verify")
        took = time.monotonic() - t0
    finally:
        client.close()
    data = res["data"]
    assert res["compile"]["is_error"] is False, res["compile"]["content"][-2000:]
    assert data.get("eval_status") == "ok", f"the hang became an infra error: {data}"
    assert data.get("error_code") == "TIMEOUT", data
    assert "time limit" in data.get("error", ""), data
    assert took < 120 + 60, f"took {took:.0f} s: the per-call limit, not the deadline, ended it"
