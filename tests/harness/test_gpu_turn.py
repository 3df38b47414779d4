"""Baseline measurements that share a GPU take turns at the GPU under the timing lock the server
names in the job ("gpu_timing_lock"): the judge starts its interpreter and both runners (their
torch imports) first, then waits for the lock before the reference's first forward, and holds
it to the last timed call. Run here on the CPU (the lock does not depend on the device): the test holds the lock,
sees the judge block on it with its runners up, releases it and checks the judge's figures."""
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "env" / "harness"

REFERENCE = '''
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0
def get_inputs():
    return [torch.randn(64, 64)]
def get_init_inputs():
    return []
'''


def write_job(tmp_path, lock):
    ref = tmp_path / "reference.py"
    ref.write_text(REFERENCE)
    job = {"mode": "baselines", "device": "cpu", "reference": str(ref), "baseline_python": sys.executable,
           "runner_path": str(HARNESS / "runner.py"), "seed": 12345, "atol": 1e-2, "rtol": 1e-2, "checks": 2,
           "cache_dir": str(tmp_path / "cache"), "probe": 1, "deadline_s": 300,
           "timing": {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.05},
           "result_path": str(tmp_path / "result.json"), "gpu_timing_lock": str(lock)}
    (tmp_path / "cache").mkdir(exist_ok=True)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    return path


@pytest.fixture(scope="module")
def inductor_cache(tmp_path_factory):
    """One torch.compile cache for the module: the CPU compile is paid once."""
    return tmp_path_factory.mktemp("inductor")


def start_judge(job_path, inductor):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(job_path.parent),
           "TORCHINDUCTOR_CACHE_DIR": str(inductor), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-I", str(HARNESS / "judge.py"), str(job_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def holds_open(pid, path):
    """Whether process pid has path open (the judge opens the lock file, then blocks in flock)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


def test_measurement_waits_for_the_gpu_timing_lock(tmp_path, inductor_cache):
    lock = tmp_path / "gpu0.timing.lock"
    job = write_job(tmp_path, lock)
    result = tmp_path / "result.json"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        judge = start_judge(job, inductor_cache)
        try:
            deadline = time.monotonic() + 240
            while not holds_open(judge.pid, lock):
                assert judge.poll() is None, judge.stdout.read().decode()
                assert time.monotonic() < deadline, "the judge never reached the GPU timing lock"
                time.sleep(0.05)
            hold_s = 2.0
            time.sleep(hold_s)
            # blocked at the lock: nothing measured, nothing written
            assert judge.poll() is None
            assert not result.exists()
        except BaseException:
            judge.kill()
            raise
    out, _ = judge.communicate(timeout=300)
    assert judge.returncode == 0, out.decode()
    verdict = json.loads(result.read_text())
    assert verdict["eval_status"] == "ok", verdict
    assert verdict["t_eager_ms"] > 0
    assert verdict["baseline_cached"] is False
    phases = verdict["phases_ms"]
    # the runners were up before the wait, and the wait lasted as long as the test held the lock
    assert list(phases)[:3] == ["start", "runners_started", "gpu_wait"], phases
    assert phases["gpu_wait"] >= hold_s * 1000 * 0.9, phases
    assert list(phases)[3:] == ["plan", "runners_ready", "eager", "compile", "runners_closed"], phases
    # each timing loop says where its wall time went, step by step, over how many calls
    for runner in ("eager", "compile"):
        loop = verdict["timing_loop_ms"][runner]
        assert set(loop) == {"inputs", "reference", "stage", "flush", "run_fetch", "read", "compare", "calls"}
        assert 1 + 3 <= loop["calls"] <= 1 + 5  # warm-up + min_reps .. max_reps
        assert all(v >= 0 for v in loop.values()) and loop["run_fetch"] > 0

    # cached now: the same job returns the stored figures without starting runners
    result.unlink()
    again = start_judge(job, inductor_cache)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out.decode()
    cached = json.loads(result.read_text())
    assert cached["baseline_cached"] is True
    assert cached["t_eager_ms"] == verdict["t_eager_ms"]
    assert "runners_started" not in cached["phases_ms"]


def test_without_a_lock_nothing_is_waited_for(tmp_path, inductor_cache):
    job = write_job(tmp_path, tmp_path / "unused.lock")
    spec = json.loads(job.read_text())
    del spec["gpu_timing_lock"]  # a judge that holds its GPU alone (or the CPU) takes no lock
    job.write_text(json.dumps(spec))
    judge = start_judge(job, inductor_cache)
    out, _ = judge.communicate(timeout=300)
    assert judge.returncode == 0, out.decode()
    verdict = json.loads((tmp_path / "result.json").read_text())
    assert verdict["eval_status"] == "ok", verdict
    assert verdict["t_eager_ms"] > 0
    assert not (tmp_path / "unused.lock").exists()
