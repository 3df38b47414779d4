"""KernelBench levels 1-3 served from the JSONL beside the project (../shared/kernelbench/).

Required under make test: without ../shared the test skips, and a skip fails the run
(tests/conftest.py). KGYM_KERNELBENCH points it at another copy.
"""
import json
import os
from pathlib import Path

import pytest

from conftest import REPO

KB = Path(os.environ.get("KGYM_KERNELBENCH",
                         REPO.parent / "shared" / "kernelbench" / "kernelbench-l1-l3.jsonl"))


@pytest.fixture(scope="module")
def kb_lines():
    if not KB.is_file():
        pytest.skip(f"KernelBench JSONL not found at {KB} (set KGYM_KERNELBENCH)")
    return [json.loads(l) for l in KB.read_text().splitlines() if l.strip()]


def test_kernelbench_jsonl_serves_all_levels(launch, kb_lines):
    srv = launch(args=("--kernelbench", str(KB)), name="kb")
    c = srv.client()
    body = c.get("/v1/tasks?suite=kernelbench&limit=1000").json
    assert body["count"] == len(kb_lines) == 250
    ids = [t["id"] for t in body["tasks"]]
    assert ids[0] == "kb/L1/1" and "kb/L3/50" in ids and len(set(ids)) == 250
    per_level = {lv: c.get(f"/v1/tasks?suite=kernelbench&level={lv}").json["count"]
                 for lv in (1, 2, 3)}
    assert per_level == {1: 100, 2: 100, 3: 50}

    src = next(l for l in kb_lines if l["level"] == 1 and l["problem_id"] == 23)
    task = c.get("/v1/tasks/kb/L1/23").json
    assert task["code"] == src["code"]
    assert task["name"] == src["name"].removesuffix(".py")

    # An episode on a KernelBench task gets that task's code as its model.py, byte for byte.
    src = next(l for l in kb_lines if l["level"] == 2 and l["problem_id"] == 5)
    ep = c.create("kb/L2/5", seed=3)["episode_id"]
    got = c.get(f"/v1/episodes/{ep}/files/model.py")
    assert got.status == 200 and got.body.decode() == src["code"]
    c.delete(f"/v1/episodes/{ep}")
    c.close()


def test_bad_kernelbench_path_refuses_to_start(tmp_path):
    import subprocess
    from conftest import BINARY, TEMPLATE
    bad = tmp_path / "kb.jsonl"
    bad.write_text('{"level": 1, "problem_id": 1, "name": "1_x.py", "code": "x"}\n{not json\n')
    out = subprocess.run([str(BINARY), "serve", "--port", "0", "--state-dir",
                          str(tmp_path / "s"), "--template", str(TEMPLATE), "--kernelbench",
                          str(bad)], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "kb.jsonl" in out.stderr and ":2" in out.stderr
