"""A candidate that never returns must get a verdict, not an infra_error.

The server kills a judge that outlives --eval-timeout, and a killed judge is an infra_error: no
reward, not even -1. So a hang would dodge the penalty that a wrong answer gets. The judge
therefore keeps its own deadline for the candidate's calls, inside the server's limit (90% of it,
less 5 s), and ends a hang with TIMEOUT. Here the server's limit is 40 s and the candidate's kernel
spins for days (tests/harness/timeouts/diag_matmul_hang): Verify must come back as an evaluation
that ran ("eval_status": "ok") and failed with TIMEOUT, well before the 120 s per-call limit.
"""
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


def test_hanging_candidate_gets_timeout_not_infra_error(short_limit_server):
    client = short_limit_server.client()
    try:
        t0 = time.monotonic()
        res = kgym_episode.run_case(client, "diag_matmul", HERE / "timeouts" / "diag_matmul_hang",
                                    final_tool="Verify")
        took = time.monotonic() - t0
    finally:
        client.close()
    data = res["data"]
    assert res["compile"]["is_error"] is False, res["compile"]["content"][-2000:]
    assert data.get("eval_status") == "ok", f"the hang became an infra error: {data}"
    assert data.get("error_code") == "TIMEOUT", data
    assert "time limit" in data.get("error", ""), data
    assert took < 120 + 60, f"took {took:.0f} s: the per-call limit, not the deadline, ended it"
