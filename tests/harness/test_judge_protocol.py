"""The judge's channel and shared memory against a candidate that attacks them (red team,
session 28): replies must answer the request just sent (a random nonce each), a late reply to a
request that timed out is skipped, the shared memfd cannot be resized, a candidate pays for GPU
work it queued before "run" (the L2 flush it delayed, beyond a reference taken before its code
loaded), and two attacks run end to end through the real judge.py (CPU, weak mode).

The end-to-end attacks (protocol_attacks/) are Python files that the static scan would refuse
(they import os, json, sys); a C++ extension can make the same calls, and the scan does not look
for them there. So the scan is stubbed out here: these tests are about the judge's own defences."""
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "env" / "harness"
ATTACKS = Path(__file__).resolve().parent / "protocol_attacks"
TASKS = Path(__file__).resolve().parent / "tasks"
sys.path.insert(0, str(HARNESS))  # judge.py imports its neighbours
_spec = importlib.util.spec_from_file_location("kgym_judge_protocol", HARNESS / "judge.py")
judge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(judge)


# ---- the channel ----------------------------------------------------------------------------
# A runner that answers each request as told by argv[2]: "ahead" echoes the nonce and queues one
# more reply; "forged" answers with a nonce of its own; "late" answers its first request after
# 1.5 s, then every request at once.
FAKE_RUNNER = r'''
import json, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[1]))
how = sys.argv[2]
first = True
while True:
    data = sock.recv(1 << 20)
    if not data:
        break
    msg = json.loads(data)
    if msg["op"] == "bye":
        sock.send(b'{"ok": true}')
        break
    nonce = msg["nonce"] if how != "forged" else "0123456789abcdef"
    if how == "late" and first:
        time.sleep(1.5)
    sock.send(json.dumps({"ok": True, "nonce": nonce, "seq": msg.get("seq")}).encode())
    if how == "ahead" and first:
        sock.send(json.dumps({"ok": True, "seq": 1}).encode())
    first = False
'''


@pytest.fixture
def fake_channel(tmp_path):
    script = tmp_path / "fake_runner.py"
    script.write_text(FAKE_RUNNER)
    made = []

    def make(how):
        ch = judge.Channel([sys.executable, str(script), "@FD@", how], dict(os.environ), 64 << 10, 10.0)
        ch.what = "candidate"
        made.append(ch)
        return ch
    yield make
    for ch in made:
        ch.close()


def test_replies_echo_their_request_nonce(fake_channel):
    ch = fake_channel("plain")
    for i in range(3):
        assert ch.call({"op": "ping", "seq": i})["seq"] == i


def test_a_reply_queued_ahead_is_refused(fake_channel):
    ch = fake_channel("ahead")
    ch.call({"op": "stage", "seq": 0})
    with pytest.raises(judge.CandidateFailed) as exc:
        ch.call({"op": "run", "seq": 1})
    assert exc.value.code == "RUNTIME_ERROR"
    assert "out of turn" in str(exc.value)


def test_a_reply_with_another_nonce_is_refused(fake_channel):
    ch = fake_channel("forged")
    with pytest.raises(judge.CandidateFailed) as exc:
        ch.call({"op": "ping", "seq": 0})
    assert exc.value.code == "RUNTIME_ERROR" and "out of turn" in str(exc.value)


def test_a_late_reply_to_a_timed_out_request_is_skipped(fake_channel):
    ch = fake_channel("late")
    with pytest.raises(judge.CandidateFailed) as exc:
        ch.call({"op": "ping", "seq": 0}, timeout_s=0.3)
    assert exc.value.code == "TIMEOUT"
    time.sleep(1.5)  # the late reply is queued now, ahead of the next one
    assert ch.call({"op": "ping", "seq": 7}, timeout_s=5)["seq"] == 7
    assert not ch.abandoned


def test_polling_for_a_reply_never_outlasts_the_limit(fake_channel):
    ch = fake_channel("late")  # its first reply comes after 1.5 s
    ch.spin = True  # as on CUDA: polls for up to SPIN_S (0.25 s) before sleeping
    t0 = time.monotonic()
    with pytest.raises(judge.CandidateFailed) as exc:
        ch.call({"op": "ping", "seq": 0}, timeout_s=0.01)
    assert exc.value.code == "TIMEOUT"
    assert time.monotonic() - t0 < 0.2  # the poll used to run its full 0.25 s whatever the limit


# ---- shared memory --------------------------------------------------------------------------
def test_the_shared_memfd_cannot_be_resized():
    shm = judge.HostShared(torch, 1 << 20, pin=False)
    seals = fcntl.fcntl(shm.fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW and seals & fcntl.F_SEAL_SEAL
    # as a runner would: through its own descriptor of the same file
    fd = os.open(f"/proc/self/fd/{shm.fd}", os.O_RDWR)
    try:
        for size in (0, 4096, 2 << 20):
            with pytest.raises(PermissionError):
                os.ftruncate(fd, size)
        assert os.fstat(fd).st_size == 1 << 20
        shm.base[-1] = 7  # the judge's mapping is still whole
        assert int(shm.base[-1]) == 7
    finally:
        os.close(fd)


# ---- the charge for work queued before "run" -------------------------------------------------
def test_a_candidate_pays_for_a_flush_it_delayed():
    # (run, fetch, stage, write, flush) seconds; ping 0.1 ms, references 1 ms fetch, 2 ms stage
    honest = judge.Sample(0.0051, 0.001, 0.002, 0.0009, 0.0002)
    # its forward ran while the judge flushed: 4.9 ms beyond the reference and its slack (5%)
    early = judge.Sample(0.0002, 0.001, 0.002, 0.0009, 0.00511)
    refs = (1e-4, 1e-3, 2e-3)
    assert judge.charge([honest] * 5, *refs, flush_ref_s=2e-4) == pytest.approx([5.0] * 5)
    assert judge.charge([early] * 5, *refs, flush_ref_s=2e-4) == pytest.approx([5.0] * 5)
    # a trusted baseline pays no flush term; a flush shorter than the reference earns nothing
    assert judge.charge([early], *refs) == pytest.approx([0.1])
    quick = judge.Sample(0.0051, 0.001, 0.002, 0.0009, 0.0001)
    assert judge.charge([quick], *refs, flush_ref_s=2e-4) == pytest.approx([5.0])


def test_the_flush_is_charged_on_its_median_not_per_call():
    refs = (1e-4, 1e-3, 2e-3)
    # an honest candidate's flushes scatter around the reference: per call, the ones above it
    # would be charged and the ones below earn nothing; on the median, nothing is charged
    noisy = [judge.Sample(0.0051, 0.001, 0.002, 0.0009, fl) for fl in (1.5e-4, 1.8e-4, 2.0e-4, 2.2e-4, 2.5e-4)]
    assert judge.charge(noisy, *refs, flush_ref_s=2e-4) == pytest.approx([5.0] * 5)
    # work moved into 3 of 5 flushes moves the median flush: every call pays that excess
    mixed = ([judge.Sample(0.0002, 0.001, 0.002, 0.0009, 0.00511)] * 3
             + [judge.Sample(0.0051, 0.001, 0.002, 0.0009, 0.0002)] * 2)
    ms = sorted(judge.charge(mixed, *refs, flush_ref_s=2e-4))
    assert ms[2] == pytest.approx(5.0)  # the median call, as paid


def test_an_honest_shift_of_the_flush_within_the_slack_is_not_charged():
    refs = (1e-4, 1e-3, 2e-3)
    # an H100's honest candidates flushed 1-5% slower than the reference (session 29)
    shifted = [judge.Sample(0.0051, 0.001, 0.002, 0.0009, 2e-4 * (1 + judge.FLUSH_SLACK) - 1e-7)] * 5
    assert judge.charge(shifted, *refs, flush_ref_s=2e-4) == pytest.approx([5.0] * 5)
    # beyond it, only what lies beyond the slack is paid
    beyond = [judge.Sample(0.0051, 0.001, 0.002, 0.0009, 2e-4 * (1 + judge.FLUSH_SLACK) + 1e-3)] * 5
    assert judge.charge(beyond, *refs, flush_ref_s=2e-4) == pytest.approx([6.0] * 5)


class RecordingChannel:
    """Answers every request at once and keeps the order of the ops."""

    what = "candidate"

    def __init__(self):
        self.ops = []

    def call(self, msg, fds=(), timeout_s=None):
        self.ops.append(msg["op"])
        return {"ok": True}


@pytest.mark.parametrize("mode,flushes,timed", [("profile", True, True), ("final", True, True),
                                                ("verify", True, False), ("profile", False, False)])
def test_the_flush_reference_is_taken_before_the_candidate_code_loads(mode, flushes, timed):
    j = judge.Judge({"reference": str(TASKS / "relu" / "model.py"), "seed": 3, "device": "cpu",
                     "data_path": "host", "mode": mode})
    j.plan()
    draws = j.rng.getstate()
    ch = RecordingChannel()
    flush_s = iter([0.5e-3] * judge.PRE_RUN_REF_SKIP + [1e-3, 2e-3, 3e-3, 4e-3] * 3)
    if flushes:  # as on CUDA (on a CPU there is no flush to time: nothing is measured)
        j.flush_buf = torch.empty(1)
        j.timed_flush = lambda: next(flush_s)
    j.hello(ch)
    if timed:
        # map, the reference's staged calls, an empty stage (the runner drops their inputs), load
        assert ch.ops == ["map"] + ["stage"] * (judge.PRE_RUN_REF_CALLS + 1) + ["load"]
        assert j.components["flush_ref_ms"] == pytest.approx(3.0)  # upper quartile, warm-ups skipped
        assert j.pre_refs[1] == pytest.approx(3e-3) and j.components["write_ref_ms"] > 0
    else:
        assert ch.ops == ["map", "load"] and j.pre_refs is None
    assert j.rng.getstate() == draws  # the job's own inputs are drawn as before


# ---- end to end, through judge.py ------------------------------------------------------------
def run_judge(tmp_path, attack, task, mode):
    """judge.py on a candidate folder (weak mode: the runner unsandboxed), the scan stubbed;
    returns (the judge's exit status, its result or None)."""
    cand = tmp_path / "cand"
    shutil.copytree(ATTACKS / attack, cand)
    (cand / "ext").mkdir()
    (cand / "ext" / "cuda_extension.py").write_text("")
    for name in ("runner.py", "gpushare.py"):  # as eval.c's snapshot does
        shutil.copy(HARNESS / name, cand)
    job = {"reference": str(TASKS / task / "model.py"), "seed": 1234, "device": "cpu", "data_path": "host",
           "mode": mode, "candidate_dir": str(cand), "deadline_s": 300, "checks": 3,
           "candidate_argv": [sys.executable, "-I", str(cand / "runner.py"), "--fd", "@FD@", "--kind", "candidate",
                              "--module", str(cand / "model_new.py"), "--ext-dir", str(cand / "ext")],
           "timing": {"warmup": 1, "min_reps": 5, "max_reps": 10, "budget_s": 0.5, "wall_cap_s": 5},
           "cache_dir": str(tmp_path / "cache"), "baseline_python": sys.executable,
           "runner_path": str(HARNESS / "runner.py"), "result_path": str(tmp_path / "result.json"),
           "call_timeout_s": 60, "start_timeout_s": 120}
    (tmp_path / "job.json").write_text(json.dumps(job))
    wrapper = tmp_path / "judge_unscanned.py"
    wrapper.write_text(
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(HARNESS)!r})\n"
        "import scan\n"
        "scan.scan_dir = lambda root: []\n"
        "scan.scan_extension = lambda path, nm='nm': []\n"
        f"sys.argv = [{str(HARNESS / 'judge.py')!r}, {str(tmp_path / 'job.json')!r}]\n"
        f"runpy.run_path({str(HARNESS / 'judge.py')!r}, run_name='__main__')\n")
    p = subprocess.run([sys.executable, str(wrapper)], env=dict(os.environ, OMP_NUM_THREADS="1"),
                       capture_output=True, text=True, timeout=300)
    result = tmp_path / "result.json"
    return p.returncode, (json.loads(result.read_text()) if result.exists() else None), p.stderr


def test_a_candidate_that_shrinks_the_shared_memory_gets_its_verdict(tmp_path):
    rc, res, err = run_judge(tmp_path, "shrink_shared", "relu", "verify")
    assert rc == 0 and res is not None, f"the judge died (status {rc}): {err[-2000:]}"
    assert res["eval_status"] == "ok", res
    assert res["error_code"] == "INCORRECT", res  # its wrong answer, judged
    out = res["candidate_output"]
    assert "TRIED 1" in out and "REFUSED" in out and "SHRUNK" not in out, out


def test_a_candidate_that_replies_ahead_is_refused(tmp_path):
    rc, res, err = run_judge(tmp_path, "reply_ahead", "relu", "verify")
    assert rc == 0 and res is not None, f"the judge died (status {rc}): {err[-2000:]}"
    assert res["eval_status"] == "ok", res
    assert res["correct"] is False and res["error_code"] == "RUNTIME_ERROR", res
    assert "out of turn" in res["error"], res["error"]
