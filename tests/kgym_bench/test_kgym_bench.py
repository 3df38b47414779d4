"""kgym-bench end to end on the CPU: a fixture set of real KernelBench tasks (from ../shared) with
CPU solutions of known outcome (fixtures.json: fast, slow, wrong, compile_error, missing).

Checks that the table is right (computed here, by hand, from the fixtures' known outcomes and the
per-task figures; never from the tool's earlier output), that a killed run resumes to the same
result, that `diff` flags an injected regression, that `baselines` stores and resumes, and that
bad input gets a clear error. Required under make test: without ../shared it skips, and a skip
fails the run (tests/conftest.py)."""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fake_kgym import FakeKgym

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BENCH = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-bench"
KB = Path(os.environ.get("KGYM_KERNELBENCH",
                         REPO.parent / "shared" / "kernelbench" / "kernelbench-l1-l3.jsonl"))
FIXTURES = json.loads((HERE / "fixtures.json").read_text())
SOLUTIONS = HERE / "solutions"
CORRECT = {"fast", "slow"}


@pytest.fixture(scope="module")
def kb():
    if not KB.is_file():
        pytest.skip(f"KernelBench JSONL not found at {KB} (set KGYM_KERNELBENCH)")
    assert BENCH.is_file(), f"{BENCH} is missing: run make first"
    return KB


def bench_args(out, *extra):
    args = [str(BENCH), "run", "--kernelbench", str(KB), "--variant", "cpu", "--solutions",
            str(SOLUTIONS), "--out", str(out), "--python", sys.executable, "--quiet"]
    for f in FIXTURES:
        args += ["--only", f["task"]]
    cache = os.environ.get("KGYM_TEST_BUILD_CACHE") or os.environ.get("KGYM_HARNESS_BUILD_CACHE")
    if cache:  # compiled objects and baselines shared with the other suites of the run
        args += ["--server-arg", "--build-cache", "--server-arg", cache]
    return args + list(extra)


def env():
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def run_bench(out, *extra, timeout=1800):
    return subprocess.run(bench_args(out, *extra), capture_output=True, text=True, timeout=timeout,
                          env=env())


@pytest.fixture(scope="module")
def first_run(kb, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "run1"
    t0 = time.monotonic()
    p = run_bench(out)
    print(f"kgym-bench run over {len(FIXTURES)} fixtures: {time.monotonic() - t0:.0f} s")
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return out, json.loads((out / "results.json").read_text()), p.stdout


def by_task(results):
    return {t["task_id"]: t for t in results["tasks"]}


def test_each_fixture_lands_in_its_known_class(first_run):
    _, res, _ = first_run
    got = by_task(res)
    assert set(got) == {f["task"] for f in FIXTURES}
    for f in FIXTURES:
        r = got[f["task"]]
        want = {"fast": "correct", "slow": "correct", "wrong": "incorrect",
                "compile_error": "compile_error", "missing": "missing"}[f["expect"]]
        assert r["status"] == want, f"{f['task']} ({f['expect']}): {r}"
        if f["expect"] == "fast":
            assert r["speedup_eager"] > 1.0, r
        if f["expect"] == "slow":
            assert r["speedup_eager"] < 1.0, r
        if f["expect"] in CORRECT:  # the speed-up is the ratio of the reported medians
            assert r["speedup_eager"] == pytest.approx(r["t_eager_ms"] / r["t_candidate_ms"], rel=1e-6)
        else:
            assert r.get("speedup_eager") is None


def test_results_name_where_they_were_measured(first_run):
    """Each task timed against baselines names the device and torch version they were measured
    on (here the CPU: "cpu:<model>", this Python's torch), and report.md and the summary say it
    once."""
    # torch's version from a child: importing torch here would grow this process by ~400 MB,
    # which every later child's ru_maxrss inherits through fork (test_solution_layouts.py's
    # RSS bound on kgym-bench would then fail)
    torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    out, res, stdout = first_run
    evaluated = [r for r in res["tasks"] if r.get("t_eager_ms") is not None]
    assert len(evaluated) >= sum(1 for f in FIXTURES if f["expect"] in CORRECT)
    for r in evaluated:
        assert r["device_name"].startswith("cpu:") and r["torch_version"] == torch_version, r
    setup = f"{evaluated[0]['device_name']} (torch {torch_version})"
    assert f"measured on: {setup}\n" in stdout, stdout
    assert f"- **measured on**: {setup}\n" in (out / "report.md").read_text()


def expected_row(fixtures, got):
    """Table 1's figures for a set of fixtures, by hand: every task of the set is the denominator,
    only the known-correct ones pass, speed-ups taken from the per-task figures."""
    n = len(fixtures)
    correct = [got[f["task"]] for f in fixtures if f["expect"] in CORRECT]
    sp = [r["speedup_eager"] for r in correct]
    spc = [r["speedup_compile"] for r in correct if r.get("speedup_compile") is not None]
    geo = math.exp(sum(map(math.log, sp)) / len(sp)) if sp else None
    geoc = math.exp(sum(map(math.log, spc)) / len(spc)) if spc else None
    return {
        "n": n, "passed": len(correct),
        "faster_eager": sum(1 for f in fixtures if f["expect"] == "fast"),
        "faster_eager_5pct": sum(1 for s in sp if s > 1.05),
        "faster_compile": sum(1 for s in spc if s > 1.0),
        "geomean_eager": geo, "geomean_compile": geoc,
        "fast_p": [sum(1 for s in sp if s > p) for p in (0, 1, 1.5, 2)],
    }


def test_table_matches_the_hand_computed_one(first_run):
    out, res, stdout = first_run
    got = by_task(res)
    rows = {r["label"]: r for r in res["table"]}
    levels = sorted({int(f["task"].split("/")[1][1:]) for f in FIXTURES})
    for label, fx in [(f"L{lv}", [f for f in FIXTURES if f["task"].startswith(f"kb/L{lv}/")])
                      for lv in levels] + [("all", FIXTURES)]:
        want, row = expected_row(fx, got), rows[label]
        assert row["n"] == want["n"] and row["passed"] == want["passed"], (label, row)
        assert row["passed_rate"] == pytest.approx(want["passed"] / want["n"])
        assert row["faster_eager"] == want["faster_eager"], (label, row)
        assert row["faster_eager_rate"] == pytest.approx(want["faster_eager"] / want["n"])
        assert row["faster_eager_5pct"] == want["faster_eager_5pct"]
        assert row["faster_compile"] == want["faster_compile"]
        for key in ("geomean_eager", "geomean_compile"):
            if want[key] is None:
                assert row[key] is None
            else:
                assert row[key] == pytest.approx(want[key], rel=1e-6), (label, key)
        assert [x["count"] for x in row["fast_p"]] == want["fast_p"], (label, row)
    # the files a user reads carry the same figures
    md = (out / "report.md").read_text()
    overall = rows["all"]
    assert f"{100 * overall['passed_rate']:.1f}" in md and "Pass Rate" in md
    assert "Pass Rate" in stdout or "pass" in stdout.lower()
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(FIXTURES)


def start_and_wait_for_results(out, n):
    """A run in its own session, once n tasks are done and the next is in flight."""
    p = subprocess.Popen(bench_args(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(),
                         text=True, start_new_session=True)
    log = out / "results.jsonl"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and p.poll() is None:
        if log.is_file() and len(log.read_text().splitlines()) >= n:
            break
        time.sleep(0.1)
    assert p.poll() is None, "the run ended before it could be stopped"
    return p, log


def test_killed_run_resumes_to_the_same_result(first_run, tmp_path):
    _, res1, _ = first_run
    out = tmp_path / "run2"
    p, log = start_and_wait_for_results(out, 2)
    os.killpg(p.pid, signal.SIGKILL)  # kgym-bench, mid-run
    p.wait()
    before = log.read_text().splitlines()
    assert 2 <= len(before) < len(FIXTURES)
    r = run_bench(out)
    assert r.returncode == 0, r.stderr
    assert f"{len(before)} already done (resumed)" in r.stderr or "already done" in r.stderr
    after = log.read_text().splitlines()
    assert after[: len(before)] == before  # nothing finished was evaluated again
    assert len(after) == len(FIXTURES)
    res2 = json.loads((out / "results.json").read_text())
    s1 = {t["task_id"]: t["status"] for t in res1["tasks"]}
    s2 = {t["task_id"]: t["status"] for t in res2["tasks"]}
    assert s1 == s2
    t1 = {r["label"]: (r["n"], r["passed"], r["faster_eager"]) for r in res1["table"]}
    t2 = {r["label"]: (r["n"], r["passed"], r["faster_eager"]) for r in res2["table"]}
    assert t1 == t2
    # the killed run's private server (a session of its own, so the SIGKILL missed it) was told
    # by the kernel that its parent died, drained and exited; the resumed run stopped its own
    assert not servers_left_after(out, 120), "a killed kgym-bench left its server running"


def own_servers(out):
    """kgym-env processes serving this run (their command line names its folder)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "kgym-env" in cmd and str(out) in cmd:
                pids.append(int(d.name))
    return pids


def servers_left_after(out, seconds):
    """The run's kgym-env processes still there after waiting up to seconds for them to exit
    (killed then, so that a failing test leaves none behind)."""
    deadline = time.monotonic() + seconds
    while own_servers(out) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = own_servers(out)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def test_one_interrupt_finishes_the_tasks_in_flight(kb, tmp_path):
    out = tmp_path / "int1"
    p, log = start_and_wait_for_results(out, 1)
    os.kill(p.pid, signal.SIGINT)
    try:
        _, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 3, err
    assert "interrupt again to stop now" in err
    assert "run the same command again to resume" in err
    lines = log.read_text().splitlines()
    assert 1 <= len(lines) < len(FIXTURES)
    for line in lines:
        json.loads(line)  # every result whole
    assert not own_servers(out), "kgym-bench left its server running"


def busy_solutions(root):
    """The L1-12 fixture's workspace (its kernels build and run) with a ModelNew that first spends
    some 20 s in a pure-Python loop (nothing the static scan refuses): the task stays in flight
    long enough for two interrupts to land while it runs."""
    ws = root / "level1" / "12"
    shutil.copytree(SOLUTIONS / "level1" / "12", ws)
    model = ws / "model_new.py"
    src = model.read_text()
    init = "        super().__init__()\n"
    assert init in src
    model.write_text(src.replace(init, init + "        n = 0\n        for i in range(300000000):\n"
                                            "            n += i\n"))
    return root


def test_second_interrupt_stops_at_once(kb, tmp_path):
    sols = busy_solutions(tmp_path / "busy")
    out = tmp_path / "int2"
    args = [str(BENCH), "run", "--kernelbench", str(KB), "--variant", "cpu", "--solutions",
            str(sols), "--out", str(out), "--python", sys.executable, "--quiet", "--only",
            "kb/L1/12"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(), text=True,
                         start_new_session=True)
    try:
        server_log = out / "server.log"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None and not (
                server_log.is_file() and "listening" in server_log.read_text()):
            time.sleep(0.1)
        time.sleep(5)  # the one task is in flight now (its baselines, then that loop)
        assert p.poll() is None, "the run ended before it could be interrupted"
        os.kill(p.pid, signal.SIGINT)
        time.sleep(1)
        assert p.poll() is None, "the first interrupt did not wait for the task in flight"
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert time.monotonic() - t0 < 10, "the second interrupt did not stop the run at once"
    assert p.returncode == 3, err
    assert "interrupt again to stop now" in err and "stopped; run the same command again" in err
    log = out / "results.jsonl"
    assert not log.is_file() or not log.read_text().strip()  # the one task never finished
    # the private server was told to stop: it drains the task in flight and exits by itself
    left = servers_left_after(out, 300)
    assert not left, "the private server did not exit after the second interrupt"


def test_diff_flags_an_injected_regression(first_run, tmp_path):
    out, res, _ = first_run
    same = subprocess.run([str(BENCH), "diff", str(out), str(out)], capture_output=True, text=True)
    assert same.returncode == 0, same.stdout + same.stderr
    new = json.loads(json.dumps(res))
    fast = [f["task"] for f in FIXTURES if f["expect"] == "fast"]
    slow = [f["task"] for f in FIXTURES if f["expect"] == "slow"]
    wrong = [f["task"] for f in FIXTURES if f["expect"] == "wrong"]
    for t in new["tasks"]:
        if t["task_id"] == fast[0]:  # newly failing
            t.update(status="incorrect", speedup_eager=None, speedup_compile=None)
        if len(fast) > 1 and t["task_id"] == fast[1]:  # 3x slower: far beyond any noise
            t["t_candidate_ms"] *= 3
            t["speedup_eager"] /= 3
        if wrong and t["task_id"] == wrong[0]:  # newly passing
            t.update(status="correct", t_candidate_ms=1.0, t_eager_ms=1.0, speedup_eager=1.0)
    (tmp_path / "new.json").write_text(json.dumps(new))
    d = subprocess.run([str(BENCH), "diff", str(out / "results.json"), str(tmp_path / "new.json")],
                       capture_output=True, text=True)
    assert d.returncode == 1, d.stdout + d.stderr
    assert fast[0] in d.stdout
    if len(fast) > 1:
        assert fast[1] in d.stdout
    if wrong:
        assert wrong[0] in d.stdout
    # the reverse direction has no regression from the injected failure... but the 3x faster
    # and newly passing tasks are listed, not counted as regressions
    rev = subprocess.run([str(BENCH), "diff", str(tmp_path / "new.json"), str(out / "results.json")],
                         capture_output=True, text=True)
    assert fast[0] in rev.stdout
    del slow


def test_baselines_are_stored_and_resumed(kb, tmp_path):
    # a private cache (not the run's shared one, where the other tests' Profiles left these
    # tasks' baselines): the warm-ups and the measurements really run
    f = tmp_path / "baselines.json"
    args = [str(BENCH), "baselines", "--kernelbench", str(KB), "--variant", "cpu", "--file", str(f),
            "--out", str(tmp_path / "b"), "--python", sys.executable,
            "--server-arg", "--build-cache", "--server-arg", str(tmp_path / "cache")]
    chosen = ["kb/L1/12", "kb/L2/6"]  # small references: CPU compiles in seconds
    for task in chosen:
        args += ["--only", task]
    p = subprocess.run(args + ["--jobs", "1", "--warmup-jobs", "2"], capture_output=True, text=True,
                       timeout=1200, env=env())
    assert p.returncode == 0, p.stderr
    # torch.compile warmed up first, untimed, two at a time; then the measurements
    warm = [ln for ln in p.stderr.splitlines() if ln.startswith("[warm-up ")]
    assert len(warm) == 2 and all(" compiled " in ln for ln in warm), p.stderr
    assert p.stderr.index("[warm-up ") < p.stderr.index("[measure "), p.stderr
    data = json.loads(f.read_text())
    assert data["torch_version"] and data["device_name"]
    assert set(data["tasks"]) == set(chosen)
    for rec in data["tasks"].values():
        assert rec["t_eager_ms"] > 0
    again = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env())
    assert again.returncode == 0 and "0 measured" in again.stderr, again.stderr
    assert "[warm-up" not in again.stderr  # nothing left to measure, nothing to warm
    # a noisy stored figure is measured again on request, past the server's cache (which
    # holds the same figures and would otherwise answer)
    before = data["tasks"]["kb/L2/6"]
    data["tasks"]["kb/L1/12"]["spread_eager"] = 0.9
    f.write_text(json.dumps(data))
    noisy = subprocess.run(args + ["--remeasure-above", "0.5"], capture_output=True, text=True,
                           timeout=600, env=env())
    assert noisy.returncode == 0, noisy.stderr
    assert "1 to measure (1 of them again: a spread above 0.5)" in noisy.stderr, noisy.stderr
    assert "1 measured, 0 failed" in noisy.stderr, noisy.stderr
    after = json.loads(f.read_text())["tasks"]
    assert after["kb/L1/12"]["cached"] is False and after["kb/L1/12"]["spread_eager"] != 0.9, after
    assert after["kb/L2/6"] == before  # not noisy: untouched
    # and the server's cache holds the new figures, which later Profiles read
    cached = [json.loads(c.read_text()) for c in (tmp_path / "cache").glob("**/baselines/*.json")]
    eager = sorted(c["t_eager_ms"] for c in cached)
    # (the file keeps 8 significant digits)
    want = sorted([after["kb/L1/12"]["t_eager_ms"], before["t_eager_ms"]])
    assert eager == pytest.approx(want, rel=1e-6), (eager, after)


@pytest.mark.parametrize("argv, msg", [
    (["run", "--kernelbench", "x.jsonl"], "--solutions"),
    (["run", "--levels", "0"], "--levels"),
    (["run", "--variant", "tpu"], "--variant"),
    (["frobnicate"], "unknown command"),
    (["diff", "/nonexistent/a", "/nonexistent/b"], "nonexistent"),
    (["report", "/nonexistent"], "nonexistent"),
])
def test_bad_input_gets_a_clear_error(argv, msg):
    assert BENCH.is_file()
    p = subprocess.run([str(BENCH)] + argv, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and msg in p.stderr, p.stderr


def test_help():
    p = subprocess.run([str(BENCH), "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "kgym-bench run" in p.stdout or "usage: kgym-bench" in p.stdout


def test_task_timeout_is_the_tasks_result_not_the_runs_end(kb, tmp_path):
    """--task-timeout: a task that outlives it is recorded as "timeout" (a failure of that task)
    and the run still ends normally with its table."""
    slow = next(f for f in FIXTURES if f["expect"] == "slow")
    args = [str(BENCH), "run", "--kernelbench", str(KB), "--variant", "cpu", "--solutions",
            str(SOLUTIONS), "--out", str(tmp_path / "t"), "--python", sys.executable, "--quiet",
            "--only", slow["task"], "--task-timeout", "2"]
    t0 = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env())
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "t" / "results.json").read_text())
    (r,) = res["tasks"]
    assert r["status"] == "timeout", r
    assert r["eval_s"] < 30, r  # the client gave up at its deadline, not at the evaluation's end
    assert res["table"][-1]["passed"] == 0
    print(f"timeout case: {time.monotonic() - t0:.0f} s")


class FakeBaselineServer(FakeKgym):
    """Just enough of kgym-env's API for `kgym-bench baselines --server`: /v1/health (one GPU),
    /v1/tasks, and POST /v1/tasks/{id}/baselines, where a warm-up that overlaps another one
    "runs out of GPU memory" (the H200's message) and one alone compiles; measurements return
    fixed figures. Every call is logged, in order, with whether it overlapped another."""

    protocol_version = "HTTP/1.0"  # one connection per request, as http.server does by default

    def __init__(self, tasks):
        import threading
        self.tasks, self.calls, self.active = tasks, [], {}
        self.lock = threading.Lock()
        super().__init__()

    def route(self, method, path, body, size):
        if method == "GET":
            if path.startswith("/v1/health"):
                return 200, {"status": "ok", "gpus": [{"index": 0}]}
            return 200, {"tasks": [{"id": t, "level": 1, "suite": "kernelbench", "name": t}
                                   for t in self.tasks]}
        body = json.loads(body)
        task = path.split("/v1/tasks/")[1].rsplit("/baselines", 1)[0]
        task = task.replace("%2F", "/").replace("%2f", "/")
        return 200, self.baselines(task, body["phase"])

    def baselines(self, task, phase):
        me = object()
        with self.lock:
            overlapped = bool(self.active)
            for other in self.active:
                self.active[other] = True
            self.active[me] = overlapped
        time.sleep(0.4)
        with self.lock:
            overlapped = self.active.pop(me)
            self.calls.append((phase, task, overlapped))
        if phase == "measure":
            return {"t_eager_ms": 1.0, "t_compile_ms": 2.0, "spread_eager": 0.01,
                    "spread_compile": 0.01, "eval_ms": 400.0, "lease_wait_ms": 0.0,
                    "device_name": "Fake GPU", "torch_version": "0.0+fake"}
        if overlapped:
            return {"warmup": "compile_failed", "warmup_ms": 400.0, "compile_unavailable":
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB"}
        return {"warmup": "compiled", "warmup_ms": 400.0}


def test_baselines_retry_out_of_memory_warmups_alone(tmp_path):
    """Warm-ups that ran out of GPU memory beside each other are compiled again one at a time,
    before their measurements, and the run says so (a fake server plays the GPU)."""
    assert BENCH.is_file(), f"{BENCH} is missing: run make first"
    tasks = [f"kb/L1/{i}" for i in range(1, 7)]
    fake = FakeBaselineServer(tasks)
    try:
        f = tmp_path / "baselines.json"
        p = subprocess.run([str(BENCH), "baselines", "--server", fake.url, "--file", str(f),
                            "--out", str(tmp_path / "b"), "--warmup-jobs", "3", "--jobs", "1"],
                           capture_output=True, text=True, timeout=120)
    finally:
        fake.close()
    assert p.returncode == 0, p.stderr
    ran_out = [t for ph, t, over in fake.calls if ph == "warmup" and over]
    assert ran_out, f"the fake's 3 parallel warm-ups never overlapped: {fake.calls}"
    assert "again, one at a time" in p.stderr, p.stderr
    for task in ran_out:
        order = [(ph, over) for ph, t, over in fake.calls if t == task]
        # overlapped warm-up, then one alone that compiled, then the measurement
        assert order == [("warmup", True), ("warmup", False), ("measure", False)], (task, order)
    alone = [ln for ln in p.stderr.splitlines() if ln.startswith("[warm-up alone ")]
    assert len(alone) == len(ran_out) and all(" compiled " in ln for ln in alone), p.stderr
    assert (f"{len(ran_out)} warm-ups ran out of GPU memory beside the others; "
            f"{len(ran_out)} retried alone, of which 0 ran out again") in p.stderr, p.stderr
    assert set(json.loads(f.read_text())["tasks"]) == set(tasks)
