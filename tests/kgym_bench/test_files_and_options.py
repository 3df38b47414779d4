"""kgym-bench's files and options, with no evaluation: `baselines` against a fake server (below),
`diff` over hand-made results.json files, and command lines refused before anything starts.

What is checked (red-team D findings 2, 4, 10, 13, 17):
- a baselines file that does not parse, or is not a baselines document, is refused and left
  byte for byte as it was; so is one measured with another variant, device or torch version;
- two `baselines` on one --file: the second is refused while the first runs, and the first
  keeps every figure it measured;
- `baselines` with no task selected exits 1, as `run` does;
- `diff`: a task correct in OLD that NEW lacks, or a PARTIAL NEW, is a regression (exit 1);
  malformed input says so, apart from a regression;
- --task-timeout is bounded (a week), empty paths and an empty --only are refused."""
import fcntl
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fake_kgym import FakeKgym

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-bench"
FAKE_DEVICE, FAKE_TORCH = "Fake GPU", "0.0+fake"
# a port nothing listens on: a command that got past its checks fails to connect there
NO_SERVER = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def built():
    assert BENCH.is_file(), f"{BENCH} is missing: run make first"


class FakeServer(FakeKgym):
    """Just enough of kgym-env's API for `kgym-bench baselines --server`: /v1/health (one GPU),
    /v1/tasks, and POST /v1/tasks/{id}/baselines, which answers after `delay` seconds with fixed
    figures measured on `device` with `torch`. Every request is logged: (method, path, phase),
    and the measurements asked to go past the server's cache in `remeasured` (task paths)."""

    protocol_version = "HTTP/1.0"  # one connection per request, as http.server does by default

    def __init__(self, tasks, device=FAKE_DEVICE, torch=FAKE_TORCH, delay=0.0, digests=None,
                 no_compile=False):
        self.tasks, self.device, self.torch, self.delay = tasks, device, torch, delay
        self.no_compile = no_compile  # measurements without a compile figure (it timed out)
        self.digests = digests or {}  # task id -> the listing's extra fields (code_sha256, ...)
        self.requests, self.remeasured, self.lock = [], [], threading.Lock()
        super().__init__()

    def route(self, method, path, body, size):
        if method == "GET":
            self.log("GET", path, None)
            if path.startswith("/v1/health"):
                return 200, {"status": "ok", "gpus": [{"index": 0}]}
            return 200, {"tasks": [{"id": t, "level": 1, "suite": "kernelbench", "name": t,
                                    **self.digests.get(t, {})} for t in self.tasks]}
        body = json.loads(body)
        self.log("POST", path, body.get("phase"))
        if body.get("remeasure") is True:
            with self.lock:
                self.remeasured.append(path)
        time.sleep(self.delay)
        if body.get("phase") == "warmup":
            return 200, {"warmup": "compiled", "warmup_ms": 1.0, "device_name": self.device,
                         "torch_version": self.torch}
        if self.no_compile:
            return 200, {"t_eager_ms": 1.0, "t_compile_ms": None, "spread_eager": 0.01,
                         "spread_compile": None, "compile_unavailable": "torch.compile timed out",
                         "eval_ms": 5.0, "lease_wait_ms": 0.0, "device_name": self.device,
                         "torch_version": self.torch}
        return 200, {"t_eager_ms": 1.0, "t_compile_ms": 2.0, "spread_eager": 0.01,
                     "spread_compile": 0.01, "eval_ms": 5.0, "lease_wait_ms": 0.0,
                     "device_name": self.device, "torch_version": self.torch}

    def log(self, method, path, phase):
        with self.lock:
            self.requests.append((method, path, phase))

    def measurements(self):
        with self.lock:
            return [r for r in self.requests if r[2] == "measure"]


@pytest.fixture
def fake_factory():
    made = []

    def make(tasks, **kw):
        made.append(FakeServer(tasks, **kw))
        return made[-1]

    yield make
    for f in made:
        f.close()


def baselines_args(url, file, out, *extra):
    return [str(BENCH), "baselines", "--server", url, "--file", str(file), "--out", str(out),
            "--jobs", "1", "--warmup-jobs", "0", "--quiet", *extra]


def run_baselines(url, file, out, *extra):
    return subprocess.run(baselines_args(url, file, out, *extra), capture_output=True, text=True,
                          timeout=120)


def baselines_doc(tasks, device=FAKE_DEVICE, torch=FAKE_TORCH, variant="gpu"):
    rec = {"t_eager_ms": 3.0, "t_compile_ms": 4.0, "spread_eager": 0.01, "spread_compile": 0.01,
           "eval_ms": 9.0, "lease_wait_ms": 0.0, "cached": False, "level": 1}
    return {"tasks": {t: dict(rec) for t in tasks}, "device_name": device, "torch_version": torch,
            "variant": variant}


# ---- baselines: a file that is not this run's is refused, never rewritten ----------------------

H200_FILE = json.dumps(baselines_doc(["kb/L1/1", "kb/L1/2"], device="NVIDIA H200",
                                     torch="2.11.0+cu130"), indent=1)


@pytest.mark.parametrize("text, msg", [
    (H200_FILE.replace('"level": 1\n  }\n }', '"level": 1,\n  }\n }'), "cannot read it as JSON"),
    (H200_FILE[: len(H200_FILE) // 2], "cannot read it as JSON"),  # cut short (a crash)
    ("", "cannot read it as JSON"),
    ('{"kb/L1/1": {"t_eager_ms": 1.0}}', 'no "tasks" object'),
    ("[]", 'no "tasks" object'),
], ids=["trailing-comma", "truncated", "empty", "no-tasks", "array"])
def test_unreadable_baselines_file_is_refused_and_kept(fake_factory, tmp_path, text, msg):
    fake = fake_factory(["kb/L1/1", "kb/L1/3"])
    f = tmp_path / "b.json"
    f.write_text(text)
    p = run_baselines(fake.url, f, tmp_path / "o")
    assert p.returncode == 1, p.stderr
    assert msg in p.stderr and str(f) in p.stderr and "another --file" in p.stderr, p.stderr
    assert f.read_text() == text  # not one byte changed
    assert fake.requests == []  # refused before anything was measured


def test_file_of_another_variant_is_refused(fake_factory, tmp_path):
    fake = fake_factory(["kb/L1/1", "kb/L1/3"])
    f = tmp_path / "b.json"
    f.write_text(H200_FILE)
    p = run_baselines(fake.url, f, tmp_path / "o", "--variant", "cpu")
    assert p.returncode == 1, p.stderr
    assert 'variant "gpu"' in p.stderr and "--variant cpu" in p.stderr, p.stderr
    assert "another --file" in p.stderr, p.stderr
    assert f.read_text() == H200_FILE
    assert fake.requests == []


def test_figures_of_another_reference_are_measured_again(fake_factory, tmp_path):
    """A stored task whose code_sha256 differs from the server's (a KernelBench file that reuses
    ids for other code) is measured again and replaced; one stored with the same digest, or
    before digests existed (none stored), is kept."""
    doc = baselines_doc(["kb/L1/1", "kb/L1/2", "kb/L1/3"])
    doc["tasks"]["kb/L1/1"]["code_sha256"] = "a" * 64
    doc["tasks"]["kb/L1/2"]["code_sha256"] = "b" * 64
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    fake = fake_factory(["kb/L1/1", "kb/L1/2", "kb/L1/3"], digests={
        "kb/L1/1": {"code_sha256": "a" * 64}, "kb/L1/2": {"code_sha256": "c" * 64},
        "kb/L1/3": {"code_sha256": "d" * 64}})
    p = run_baselines(fake.url, f, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    assert [r[1] for r in fake.measurements()] == ["/v1/tasks/kb/L1/2/baselines"], fake.requests
    assert "kb/L1/2: the stored figures were measured on another reference" in p.stderr, p.stderr
    after = json.loads(f.read_text())["tasks"]
    assert after["kb/L1/2"]["code_sha256"] == "c" * 64 and after["kb/L1/2"]["t_eager_ms"] == 1.0
    assert after["kb/L1/1"] == doc["tasks"]["kb/L1/1"]  # same reference: kept as it was
    assert after["kb/L1/3"] == doc["tasks"]["kb/L1/3"]  # stored without a digest: kept


def test_noisy_figures_are_named_and_measured_again_on_request(fake_factory, tmp_path):
    """A stored figure whose spread is above 0.1 is named at the end (with how to measure it
    again); --remeasure-above CV measures those above CV again, past the server's cache, once
    each (a task whose noise is its own would be measured on every run), and keeps every other
    figure as it was."""
    doc = baselines_doc(["kb/L1/1", "kb/L1/2", "kb/L1/3", "kb/L1/4"])
    doc["tasks"]["kb/L1/1"]["spread_eager"] = 0.3
    doc["tasks"]["kb/L1/2"].update(spread_eager=None, spread_compile=0.2)  # no eager spread
    doc["tasks"]["kb/L1/3"].update(spread_eager=0.5, spread_compile=None, remeasured=True)
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    fake = fake_factory(["kb/L1/1", "kb/L1/2", "kb/L1/3", "kb/L1/4"])
    p = run_baselines(fake.url, f, tmp_path / "o")
    assert p.returncode == 0 and fake.measurements() == [], p.stderr
    assert ("2 of the selected tasks hold a spread above 0.1 (the largest: kb/L1/1, 0.30); "
            "--remeasure-above 0.1 measures them again") in p.stderr, p.stderr
    assert json.loads(f.read_text()) == doc
    p = run_baselines(fake.url, f, tmp_path / "o", "--remeasure-above", "0.25", "--warmup-jobs", "1")
    assert p.returncode == 0, p.stderr
    assert "3 in " in p.stderr and "1 to measure (1 of them again: a spread above 0.25)" in p.stderr
    assert [r[1] for r in fake.measurements()] == ["/v1/tasks/kb/L1/1/baselines"], fake.requests
    assert fake.remeasured == ["/v1/tasks/kb/L1/1/baselines"]  # the measurement, not the warm-up
    after = json.loads(f.read_text())["tasks"]
    assert after["kb/L1/1"]["spread_eager"] == 0.01 and after["kb/L1/1"]["t_eager_ms"] == 1.0
    assert after["kb/L1/1"]["remeasured"] is True
    for t in ("kb/L1/2", "kb/L1/3", "kb/L1/4"):
        assert after[t] == doc["tasks"][t], t
    assert "1 of the selected tasks hold a spread above 0.1 (the largest: kb/L1/2, 0.20)" in p.stderr


def test_a_remeasure_without_a_compile_figure_keeps_the_stored_one(fake_factory, tmp_path):
    """torch.compile timed out on the second try: the server keeps its cached figures, and so
    does the file, whole (a record with the new eager figure and no compile one would disagree
    with the server's cache, and never be picked again)."""
    doc = baselines_doc(["kb/L1/1"])
    doc["tasks"]["kb/L1/1"]["spread_eager"] = 0.3
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    fake = fake_factory(["kb/L1/1"], no_compile=True)
    p = run_baselines(fake.url, f, tmp_path / "o", "--remeasure-above", "0.1")
    assert p.returncode == 2, p.stderr  # a failed measurement: not a clean run
    assert ("kb/L1/1: measured again, but torch.compile gave no figure this time (torch.compile "
            "timed out); the stored figures are kept") in p.stderr, p.stderr
    assert fake.remeasured == ["/v1/tasks/kb/L1/1/baselines"]
    assert json.loads(f.read_text()) == doc


def test_cpu_variant_records_the_cpu_reference_digest(fake_factory, tmp_path):
    fake = fake_factory(["kb/L1/1", "kb/L1/2"], digests={
        "kb/L1/1": {"code_sha256": "g" * 64, "code_cpu_sha256": "c" * 64},
        "kb/L1/2": {"code_sha256": "h" * 64, "code_cpu_sha256": None}})
    f = tmp_path / "b.json"
    p = run_baselines(fake.url, f, tmp_path / "o", "--variant", "cpu")
    assert p.returncode == 0, p.stderr
    after = json.loads(f.read_text())["tasks"]
    assert after["kb/L1/1"]["code_sha256"] == "c" * 64  # the code the CPU variant runs
    assert after["kb/L1/2"]["code_sha256"] == "h" * 64  # no CPU variant of its own


@pytest.mark.parametrize("device, torch, field", [
    ("NVIDIA H200", FAKE_TORCH, "device_name"),
    (FAKE_DEVICE, "2.11.0+cu130", "torch_version"),
])
def test_file_of_another_device_or_torch_is_refused(fake_factory, tmp_path, device, torch, field):
    """The server's device and torch version come with its first measurement: that one is not
    kept, and the command stops at once (no further measurement)."""
    fake = fake_factory(["kb/L1/1", "kb/L1/2", "kb/L1/3", "kb/L1/4"])
    f = tmp_path / "b.json"
    text = json.dumps(baselines_doc(["kb/L1/1"], device=device, torch=torch), indent=1)
    f.write_text(text)
    p = run_baselines(fake.url, f, tmp_path / "o")
    assert p.returncode == 1, p.stderr
    assert field in p.stderr and "another --file" in p.stderr, p.stderr
    assert f.read_text() == text
    assert len(fake.measurements()) == 1, fake.requests


def test_another_device_is_refused_at_the_first_warm_up(fake_factory, tmp_path):
    """Warm-ups report the server's device and torch version too: a file of another device
    stops the command after the first warm-up, before any measurement or further warm-up."""
    fake = fake_factory(["kb/L1/2", "kb/L1/3", "kb/L1/4"])
    f = tmp_path / "b.json"
    text = json.dumps(baselines_doc(["kb/L1/1"], device="NVIDIA H200"), indent=1)
    f.write_text(text)
    p = run_baselines(fake.url, f, tmp_path / "o", "--warmup-jobs", "1")  # the last one counts
    assert p.returncode == 1, p.stderr
    assert "device_name" in p.stderr and "another --file" in p.stderr, p.stderr
    assert f.read_text() == text
    assert fake.measurements() == [], fake.requests
    assert [r[2] for r in fake.requests if r[0] == "POST"] == ["warmup"], fake.requests


def test_a_file_of_this_setup_is_resumed(fake_factory, tmp_path):
    """The control for the refusals above: the same file measured on this device gains the
    tasks it lacked, and no temp file is left beside it. Also the longest --task-timeout."""
    fake = fake_factory(["kb/L1/1", "kb/L1/2"])
    f = tmp_path / "b.json"
    f.write_text(json.dumps(baselines_doc(["kb/L1/1"])))
    p = run_baselines(fake.url, f, tmp_path / "o", "--task-timeout", "604800")
    assert p.returncode == 0, p.stderr
    assert "1 in " in p.stderr and "1 to measure" in p.stderr, p.stderr
    doc = json.loads(f.read_text())
    assert set(doc["tasks"]) == {"kb/L1/1", "kb/L1/2"}
    assert doc["tasks"]["kb/L1/1"]["t_eager_ms"] == 3.0  # the stored figure, not re-measured
    assert (doc["device_name"], doc["torch_version"], doc["variant"]) == (FAKE_DEVICE, FAKE_TORCH,
                                                                           "gpu")
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith("b.json")) == [
        "b.json", "b.json.lock"]


def test_no_task_selected_exits_1_as_run_does(fake_factory, tmp_path):
    fake = fake_factory(["kb/L1/1"])
    f = tmp_path / "b.json"
    p = run_baselines(fake.url, f, tmp_path / "o", "--only", "kb/L9/9")
    assert p.returncode == 1, p.stderr
    assert "no task selected" in p.stderr, p.stderr
    assert not f.exists()


# ---- baselines: one run per file at a time -----------------------------------------------------

def test_second_baselines_on_one_file_is_refused(fake_factory, tmp_path):
    tasks = [f"kb/L1/{i}" for i in range(1, 5)]
    fake = fake_factory(tasks, delay=0.5)
    f = tmp_path / "b.json"
    first = subprocess.Popen(baselines_args(fake.url, f, tmp_path / "o1"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not fake.measurements() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert first.poll() is None and fake.measurements(), "the first run never got going"
        second = subprocess.run(baselines_args(fake.url, f, tmp_path / "o2", "--only", "kb/L1/4"),
                                capture_output=True, text=True, timeout=60)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 1, second.stderr
    assert "in use by another kgym-bench" in second.stderr and str(f) in second.stderr, \
        second.stderr
    assert first.returncode == 0, err
    assert set(json.loads(f.read_text())["tasks"]) == set(tasks)  # the first run lost nothing
    assert len(fake.measurements()) == len(tasks)  # the second measured nothing


def test_baselines_holds_its_out_folder(fake_factory, tmp_path):
    """--out holds the private server's state dir and log: a second process on that folder is
    refused before it starts a server there (one truncated the other's log). With --server
    nothing goes to --out, and no lock is taken."""
    out = tmp_path / "o"
    out.mkdir()
    with open(out / ".lock", "a") as held:  # another kgym-bench holds the folder
        fcntl.flock(held, fcntl.LOCK_EX)
        p = subprocess.run([str(BENCH), "baselines", "--kernelbench", str(tmp_path / "kb.jsonl"),
                            "--variant", "cpu", "--file", str(tmp_path / "b.json"), "--out",
                            str(out)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 1, p.stderr
        assert f"results folder {out} is in use by another kgym-bench" in p.stderr, p.stderr
        assert not (out / "server.log").exists() and not (tmp_path / "b.json").exists()
        fake = fake_factory(["kb/L1/1"])
        p = subprocess.run(baselines_args(fake.url, tmp_path / "b.json", out), capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert fake.measurements()


# ---- diff: a missing or partial NEW is not a pass ----------------------------------------------

def result(i, status="correct", t=1.0):
    return {"task_id": f"kb/L1/{i}", "level": 1, "name": f"{i}_x", "status": status,
            "t_candidate_ms": t if status == "correct" else None, "spread_candidate": 0.01}


def results_file(path, tasks, selection=None):
    doc = {"tasks": tasks}
    if selection is not None:
        doc["meta"] = {"selection": [{"task_id": f"kb/L1/{i}", "level": 1} for i in selection]}
    path.write_text(json.dumps(doc))
    return path


def diff(tmp_path, old, new):
    return subprocess.run([str(BENCH), "diff", str(old), str(new)], capture_output=True,
                          text=True, timeout=60)


def test_diff_task_correct_in_old_and_absent_from_new_is_a_regression(tmp_path):
    old = results_file(tmp_path / "old.json", [result(1), result(2), result(3, "incorrect")])
    new = results_file(tmp_path / "new.json", [result(1)])
    p = diff(tmp_path, old, new)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL     kb/L1/2: correct -> absent" in p.stdout, p.stdout
    assert "REMOVED  kb/L1/3 (incorrect)" in p.stdout, p.stdout  # could not newly fail
    assert "1 regression (1 newly failing, 0 slower)" in p.stdout, p.stdout


def test_diff_absent_task_that_failed_in_old_is_no_regression(tmp_path):
    old = results_file(tmp_path / "old.json", [result(1), result(2, "compile_error")])
    new = results_file(tmp_path / "new.json", [result(1)])
    p = diff(tmp_path, old, new)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "REMOVED  kb/L1/2 (compile_error)" in p.stdout, p.stdout


def test_diff_correct_without_a_time_is_a_regression(tmp_path):
    """NEW says correct but holds no time where OLD had one: not shown to be no slower."""
    old = results_file(tmp_path / "old.json", [result(1), result(2)])
    lost = dict(result(2), t_candidate_ms=None)
    new = results_file(tmp_path / "new.json", [result(1), lost])
    p = diff(tmp_path, old, new)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "UNTIMED  kb/L1/2: 1.0000 ms -> correct, but no time to compare" in p.stdout, p.stdout
    assert "1 regression (0 newly failing, 0 slower, 1 untimed)" in p.stdout, p.stdout


def test_diff_refuses_what_it_cannot_compare(tmp_path):
    """Exit 2, nothing compared: runs of two variants (CPU times against GPU times), a document
    with two "tasks" keys (which one counts?), a selection that is not a list of task ids."""
    def doc(path, text):
        path.write_text(text)
        return path
    old = results_file(tmp_path / "old.json", [result(1)])
    gpu = doc(tmp_path / "gpu.json", json.dumps({"meta": {"variant": "gpu"}, "tasks": [result(1)]}))
    cpu = doc(tmp_path / "cpu.json", json.dumps({"meta": {"variant": "cpu"}, "tasks": [result(1)]}))
    p = diff(tmp_path, cpu, gpu)
    assert p.returncode == 2 and "not comparable" in p.stderr and "cpu variant" in p.stderr, p.stderr
    assert diff(tmp_path, old, gpu).returncode == 0  # a run naming no variant is taken to match
    twice = doc(tmp_path / "twice.json", '{"tasks": [], "tasks": ' + json.dumps([result(1)]) + "}")
    p = diff(tmp_path, old, twice)
    assert p.returncode == 2 and "duplicate object key" in p.stderr, p.stderr
    for selection in (["kb/L1/1"], {"task_id": "kb/L1/1"}, [{"task_id": 1}]):
        bad = doc(tmp_path / "sel.json", json.dumps({"meta": {"selection": selection},
                                                      "tasks": [result(1)]}))
        p = diff(tmp_path, old, bad)
        assert p.returncode == 2 and "meta.selection" in p.stderr, (selection, p.stderr)


def test_lost_output_is_a_failure(tmp_path):
    """stdout on a full disk: never exit 0 with the table or the diff lost (diff: 2, trouble)."""
    old = results_file(tmp_path / "old.json", [result(1)])
    with open("/dev/full", "w") as full:
        p = subprocess.run([str(BENCH), "diff", str(old), str(old)], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        assert p.returncode == 2 and "cannot write to stdout" in p.stderr, p.stderr
        p = subprocess.run([str(BENCH), "--help"], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=60)
        assert p.returncode == 1 and "cannot write to stdout" in p.stderr, p.stderr
    # a pipe whose reader has gone: reported, not a silent death by SIGPIPE (exit 141)
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([str(BENCH), "diff", str(old), str(old)], stdout=w,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 2 and "cannot write to stdout" in p.stderr, (p.returncode, p.stderr)


@pytest.mark.parametrize("argv, option", [
    (["run", "--solutions", "s", "--file", "b.json"], "--file"),  # run reads no baselines file
    (["run", "--solutions", "s", "--min-change", "0.2"], "--min-change"),
    (["run", "--solutions", "s", "--warmup-jobs", "2"], "--warmup-jobs"),
    (["run", "--solutions", "s", "--remeasure-above", "0.1"], "--remeasure-above"),
    (["baselines", "--solutions", "s"], "--solutions"),
    (["baselines", "--restart"], "--restart"),
    (["diff", "a", "b", "--jobs", "3"], "--jobs"),
    (["report", "r", "--levels", "1"], "--levels"),
], ids=["run-file", "run-min-change", "run-warmup-jobs", "run-remeasure", "baselines-solutions",
        "baselines-restart", "diff-jobs", "report-levels"])
def test_an_option_that_does_not_apply_is_refused(tmp_path, argv, option):
    """Never dropped unsaid: `run --file B` would read as "use these baselines"."""
    p = subprocess.run([str(BENCH), *argv, "--server", NO_SERVER] if argv[0] in ("run", "baselines")
                       else [str(BENCH), *argv], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert p.returncode == (2 if argv[0] == "diff" else 1), p.stderr
    assert f"{option} does not apply to {argv[0]}" in p.stderr, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == []  # nothing created


def test_out_that_is_a_file_is_said_so(tmp_path):
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "sol").mkdir()
    p = subprocess.run([str(BENCH), "run", "--server", NO_SERVER, "--solutions", str(tmp_path / "sol"),
                        "--out", str(tmp_path / "afile")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and f"cannot create {tmp_path / 'afile'}: Not a directory" in p.stderr, \
        p.stderr
    assert (tmp_path / "afile").read_text() == "mine"


def test_diff_partial_new_run_fails_the_check(tmp_path):
    """NEW selected 3 tasks and holds 2 (a PARTIAL run): the one not evaluated failed in OLD, so
    no task newly fails, yet the check does not pass."""
    old = results_file(tmp_path / "old.json", [result(1), result(2), result(3, "incorrect")])
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    results_file(new_dir / "results.json", [result(1), result(2)], selection=[1, 2, 3])
    p = diff(tmp_path, old, new_dir)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "is PARTIAL (1 of 3 selected tasks without a result)" in p.stdout, p.stdout
    assert "0 regressions" in p.stdout, p.stdout
    # a whole NEW over the same selection passes; a PARTIAL OLD is only noted
    results_file(new_dir / "results.json", [result(1), result(2), result(3)], selection=[1, 2, 3])
    whole = diff(tmp_path, old, new_dir)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    old_partial = results_file(tmp_path / "oldp.json", [result(1)], selection=[1, 2, 3])
    noted = diff(tmp_path, old_partial, new_dir)
    assert noted.returncode == 0, noted.stdout + noted.stderr
    assert "note: OLD" in noted.stdout and "is PARTIAL" in noted.stdout, noted.stdout


@pytest.mark.parametrize("new_text", [
    '{"tasks": {"kb/L1/1": {}}}',  # not an array
    '{"tasks": [{"task_id": "kb/L1/1", "status": "correct"}, '
    '{"task_id": "kb/L1/1", "status": "correct"}]}',  # a task twice
    '{"tasks": [',  # cut short
], ids=["not-an-array", "repeated-id", "truncated"])
def test_diff_malformed_input_is_told_apart_from_a_regression(tmp_path, new_text):
    old = results_file(tmp_path / "old.json", [result(1)])
    new = tmp_path / "new.json"
    new.write_text(new_text)
    p = diff(tmp_path, old, new)
    assert p.returncode == 2, p.stdout + p.stderr  # diff(1)'s "trouble", never 1 (a regression)
    assert "malformed input, nothing compared" in p.stderr and str(new) in p.stderr, p.stderr
    assert "regression" not in p.stdout, p.stdout


@pytest.mark.parametrize("argv, msg", [
    (["missing.json", "old.json"], "cannot read OLD"),
    (["old.json", "--min-change", "x", "old.json"], "bad --min-change"),
    (["old.json"], "diff needs OLD and NEW"),
    (["", "old.json"], "diff needs OLD and NEW"),
], ids=["unreadable", "bad-option", "one-argument", "empty-argument"])
def test_diff_that_compares_nothing_exits_2(tmp_path, argv, msg):
    results_file(tmp_path / "old.json", [result(1)])
    p = subprocess.run([str(BENCH), "diff", *argv], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert msg in p.stderr, p.stderr


# ---- options refused before anything starts ------------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "1e16", "604801", "nan", "0.5"])
def test_task_timeout_is_bounded(tmp_path, value):
    p = subprocess.run([str(BENCH), "baselines", "--server", NO_SERVER, "--file",
                        str(tmp_path / "b.json"), "--out", str(tmp_path / "o"), "--task-timeout",
                        value], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "bad --task-timeout (1 to 604800 seconds" in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command, option", [
    ("run", "--out"), ("run", "--solutions"), ("run", "--kernelbench"), ("run", "--tasks"),
    ("run", "--server"), ("run", "--server-bin"), ("run", "--python"), ("baselines", "--file"),
    ("baselines", "--out"),
])
def test_empty_path_is_refused(tmp_path, command, option):
    args = {"--out": str(tmp_path / "o"), "--solutions": str(tmp_path / "s"),
            "--server": NO_SERVER, "--file": str(tmp_path / "b.json")}
    args[option] = ""
    argv = [str(BENCH), command]
    for k, v in args.items():  # each command's own options only (others are refused)
        if (command == "run" and k != "--file") or (command != "run" and k != "--solutions"):
            argv += [k, v]
    if option not in args:
        argv += [option, ""]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    what = "a URL" if option == "--server" else "a path"
    assert f"{option} needs {what}, not an empty string" in p.stderr, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == []  # nothing created anywhere


@pytest.mark.parametrize("make, why", [
    (lambda p: None, "No such file or directory"),
    (lambda p: p.write_text("{}"), "not a directory"),
], ids=["missing", "a-file"])
def test_solutions_must_be_a_folder(tmp_path, make, why):
    """A mistyped --solutions is said before any server starts (it would otherwise score every
    task as having no solution)."""
    sol = tmp_path / "sol"
    make(sol)
    p = subprocess.run([str(BENCH), "run", "--server", NO_SERVER, "--solutions", str(sol), "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert f"--solutions {sol}: {why}" in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", [["--python", "/usr/bin/python3"], ["--server-bin", "/bin/true"],
                                    ["--server-arg", "--quiet"]])
def test_private_server_options_are_refused_with_server(tmp_path, option):
    """They set up the server kgym-bench starts: with --server URL they were dropped unsaid."""
    (tmp_path / "sol").mkdir()
    p = subprocess.run([str(BENCH), "run", "--server", NO_SERVER, "--solutions", str(tmp_path / "sol"),
                        "--out", str(tmp_path / "o"), *option], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1, p.stderr
    assert f"{option[0]} sets up the private server kgym-bench starts" in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()


def test_a_server_that_exits_at_once_says_why(tmp_path):
    """The private server's own reason (its log's last line) is in kgym-bench's error."""
    (tmp_path / "sol").mkdir()
    p = subprocess.run([str(BENCH), "run", "--kernelbench", str(tmp_path / "missing.jsonl"),
                        "--variant", "cpu", "--solutions", str(tmp_path / "sol"), "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "exited before listening: kgym-env: " in p.stderr, p.stderr
    assert "missing.jsonl: No such file or directory" in p.stderr, p.stderr
    # a bad option: the server's reason and its hint, on one line
    p = subprocess.run([str(BENCH), "run", "--kernelbench", str(tmp_path / "missing.jsonl"),
                        "--variant", "cpu", "--solutions", str(tmp_path / "sol"), "--out",
                        str(tmp_path / "o"), "--server-arg", "--bogus"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "unrecognized option '--bogus'; kgym-env: see kgym-env serve --help" in p.stderr, p.stderr
    # no such binary: the errno, not just the stage
    p = subprocess.run([str(BENCH), "run", "--kernelbench", str(tmp_path / "missing.jsonl"),
                        "--variant", "cpu", "--solutions", str(tmp_path / "sol"), "--out",
                        str(tmp_path / "o"), "--server-bin", str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert f"cannot start {tmp_path / 'nope'}: execve: No such file or directory" in p.stderr, p.stderr


@pytest.mark.parametrize("argv, msg", [
    (["baselines", "--only", ""], "bad --only (no task id"),
    (["baselines", "--only", ",,"], "bad --only (no task id"),
    (["baselines", "--jobs", "4294967297"], "bad --jobs (1..64)"),
    (["baselines", "--warmup-jobs", "-4294967296"], "bad --warmup-jobs (0..64)"),
    (["baselines", "--remeasure-above", "0"], "bad --remeasure-above"),
    (["baselines", "--remeasure-above", "nan"], "bad --remeasure-above"),
    (["baselines", "--remeasure-above", "0.1x"], "bad --remeasure-above"),
    (["report", ""], "report needs a results folder"),
], ids=["only-empty", "only-commas", "jobs-wraps", "warmup-jobs-wraps", "remeasure-zero",
        "remeasure-nan", "remeasure-junk", "report"])
def test_other_bad_options_are_refused(tmp_path, argv, msg):
    p = subprocess.run([str(BENCH), *argv, "--server", NO_SERVER, "--file",
                        str(tmp_path / "b.json"), "--out", str(tmp_path / "o")]
                       if argv[0] == "baselines" else [str(BENCH), *argv],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert msg in p.stderr, p.stderr
