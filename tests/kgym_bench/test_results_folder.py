"""kgym-bench run's results folder under crashes, hand edits and a second process, and what it
does with an episode that outlives --task-timeout. A fake kgym-env plays the server (no
evaluation runs), so every case takes seconds: it answers the routes `kgym-bench run --server`
uses and logs every call in order.

Each case here was a red-team finding: results deleted without --restart, a torn last line that
swallowed the next result, two runs writing one folder, a stale kernel file whose name holds a
quote never removed, a compile error's log dropped, a timed-out evaluation left running beside
the next task, more than 15 levels failing the table after every task had run."""
import fcntl
import json
import os
import shlex
import subprocess
import threading
import time
from pathlib import Path

from fake_kgym import FakeKgym

BENCH = Path(__file__).resolve().parents[2] / os.environ.get("KGYM_BUILD", "build") / "kgym-bench"


class FakeEpisodeServer(FakeKgym):
    """Just enough of kgym-env for `kgym-bench run --server`. tasks: {task_id: level}. verdict:
    the Submit observation's data. submit_s: how long a Submit takes. While a Submit is running
    its episode's DELETE answers 409 (busy), as the real server's does. kernels: the names the
    workspace's kernels/ listing shows."""

    def __init__(self, tasks, verdict=None, submit_s=0.0, kernels=()):
        self.tasks, self.submit_s, self.kernels = tasks, submit_s, list(kernels)
        self.verdict = verdict or {"eval_status": "ok", "compiled": True, "correct": True,
                                   "reward": 2.0, "t_candidate_ms": 1.0, "t_eager_ms": 2.0,
                                   "t_compile_ms": 1.5}
        self.calls, self.busy, self.lock, self.next_ep = [], set(), threading.Lock(), 0
        super().__init__()

    def route(self, method, path, body, size):
        return getattr(self, method.lower())(path, body)

    def get(self, path, body):
        self.log("GET", path)
        if path.startswith("/v1/health"):
            return 200, {"status": "ok", "gpus": []}
        if path.startswith("/v1/tasks"):
            return 200, {"tasks": [{"id": t, "level": lv, "suite": "kernelbench", "name": t}
                                   for t, lv in self.tasks.items()]}
        if path.endswith("/files/kernels"):
            return 200, {"entries": [{"name": n, "type": "file"} for n in self.kernels]}
        return 404, {"error": {"code": "NOT_FOUND", "message": "no"}}

    def put(self, path, body):
        self.log("PUT", path)
        return 201, {"ok": True}

    def post(self, path, body):
        self.log("POST", path, body)
        if path == "/v1/episodes":
            with self.lock:
                self.next_ep += 1
                ep = f"ep{self.next_ep}"
            return 201, {"episode_id": ep}
        ep = path.split("/")[3]
        if path.endswith("/tools/Bash"):
            return 200, {"observation": {"is_error": False, "content": ""}}
        with self.lock:
            self.busy.add(ep)
        time.sleep(self.submit_s)
        with self.lock:
            self.busy.discard(ep)
        self.log("DONE", path)
        return 200, {"observation": {"data": self.verdict}}  # the client may have given up

    def delete(self, path, body):
        ep = path.split("/")[3].split("?")[0]
        with self.lock:
            busy = ep in self.busy
        self.log("DELETE", path, b"409" if busy else b"200")
        if busy:
            return 409, {"error": {"code": "EPISODE_BUSY", "message": "a step is running"}}
        return 200, {"ok": True}

    def log(self, method, path, body=b""):
        with self.lock:
            self.calls.append((method, path, body))


def solutions(root, ids):
    """kgym-workspace solutions (level<L>/<P>/model_new.py) for kb/L<L>/<P> ids."""
    for tid in ids:
        _, lv, p = tid.split("/")
        d = root / f"level{lv[1:]}" / p
        d.mkdir(parents=True)
        (d / "model_new.py").write_text("class ModelNew: pass\n")
    return root


def run(fake, sol, out, *extra, timeout=120):
    argv = [str(BENCH), "run", "--server", fake.url, "--kernelbench", "unused",
            "--solutions", str(sol), "--out", str(out), "--quiet", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def lines(path):
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def test_unreadable_meta_refuses_and_keeps_the_results(tmp_path):
    fake = FakeEpisodeServer({"kb/L1/1": 1, "kb/L1/2": 1})
    try:
        sol, out = solutions(tmp_path / "sol", ["kb/L1/1", "kb/L1/2"]), tmp_path / "out"
        assert run(fake, sol, out).returncode == 0
        log = out / "results.jsonl"
        kept = log.read_bytes()
        meta = out / "meta.json"
        meta.write_text(meta.read_text().rstrip().rstrip("}") + ",}")  # a stray comma
        p = run(fake, sol, out)
        assert p.returncode == 1 and "cannot resume" in p.stderr and "--restart" in p.stderr, \
            p.stderr
        assert log.read_bytes() == kept
        meta.unlink()  # no meta.json at all, results still there
        p = run(fake, sol, out)
        assert p.returncode == 1 and "no meta.json" in p.stderr, p.stderr
        assert log.read_bytes() == kept
        p = run(fake, sol, out, "--restart")  # asked for: the old results move aside
        assert p.returncode == 0, p.stderr
        assert (out / "results.jsonl.discarded.1").read_bytes() == kept
        assert len(lines(log)) == 2
        p = run(fake, sol, out, "--restart")  # again: the first backup is not replaced
        assert p.returncode == 0, p.stderr
        assert (out / "results.jsonl.discarded.1").read_bytes() == kept
        assert (out / "results.jsonl.discarded.2").is_file()
        assert (out / "meta.json.discarded.2").is_file()
    finally:
        fake.close()


def test_torn_last_line_is_cut_and_the_next_result_kept(tmp_path):
    fake = FakeEpisodeServer({"kb/L1/1": 1, "kb/L1/2": 1})
    try:
        sol, out = solutions(tmp_path / "sol", ["kb/L1/1", "kb/L1/2"]), tmp_path / "out"
        assert run(fake, sol, out, "--only", "kb/L1/1").returncode == 0
        log = out / "results.jsonl"
        first = log.read_text()
        # the same selection, kb/L1/2's line torn by a crash mid-write
        assert run(fake, sol, out, "--restart").returncode == 0
        rows = log.read_text().splitlines()
        torn = next(r for r in rows if '"kb/L1/2"' in r)
        keep = next(r for r in rows if '"kb/L1/1"' in r)
        log.write_text(keep + "\n" + torn[: len(torn) // 2])
        p = run(fake, sol, out)
        assert p.returncode == 0, p.stderr
        assert "torn line" in p.stderr, p.stderr
        got = lines(log)  # every line parses: nothing glued onto the torn one
        assert [r["task_id"] for r in got] == ["kb/L1/1", "kb/L1/2"]
        res = json.loads((out / "results.json").read_text())
        assert {t["task_id"]: t["status"] for t in res["tasks"]} == \
            {"kb/L1/1": "correct", "kb/L1/2": "correct"}
        assert first  # the first run wrote its line
    finally:
        fake.close()


def test_a_second_process_on_the_folder_is_refused(tmp_path):
    fake = FakeEpisodeServer({"kb/L1/1": 1})
    try:
        sol, out = solutions(tmp_path / "sol", ["kb/L1/1"]), tmp_path / "out"
        assert run(fake, sol, out).returncode == 0
        before = (out / "results.jsonl").read_bytes()
        with open(out / ".lock", "a") as held:  # another kgym-bench holds the folder
            fcntl.flock(held, fcntl.LOCK_EX)
            p = run(fake, sol, out, "--restart")
            assert p.returncode == 1 and "in use by another kgym-bench" in p.stderr, p.stderr
            r = subprocess.run([str(BENCH), "report", str(out)], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 1 and "in use" in r.stderr, r.stderr
        assert (out / "results.jsonl").read_bytes() == before
        assert not list(out.glob("results.jsonl.discarded*"))
    finally:
        fake.close()


def test_report_refuses_a_meta_without_selection(tmp_path):
    fake = FakeEpisodeServer({"kb/L1/1": 1})
    try:
        sol, out = solutions(tmp_path / "sol", ["kb/L1/1"]), tmp_path / "out"
        assert run(fake, sol, out).returncode == 0
    finally:
        fake.close()
    good = (out / "results.json").read_bytes()
    meta = json.loads((out / "meta.json").read_text())
    del meta["selection"]
    (out / "meta.json").write_text(json.dumps(meta))
    p = subprocess.run([str(BENCH), "report", str(out)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and "selection" in p.stderr, p.stderr
    assert (out / "results.json").read_bytes() == good


def test_stale_kernel_with_a_quote_in_its_name_is_removed(tmp_path):
    name = "it's_scratch.h"
    fake = FakeEpisodeServer({"kb/L1/1": 1}, kernels=[name, "keep.cu"])
    try:
        sol = solutions(tmp_path / "sol", ["kb/L1/1"])
        (sol / "level1" / "1" / "kernels").mkdir()
        (sol / "level1" / "1" / "kernels" / "keep.cu").write_text("// the solution's\n")
        assert run(fake, sol, tmp_path / "out").returncode == 0
        bash = [json.loads(b)["command"] for m, p, b in fake.calls
                if m == "POST" and p.endswith("/tools/Bash")]
        assert len(bash) == 1, fake.calls
        assert shlex.split(bash[0]) == ["rm", "-f", "--", f"kernels/{name}"], bash[0]
    finally:
        fake.close()


def test_compile_error_keeps_the_compilers_output(tmp_path):
    log = "kernels/k.cu(3): error: identifier \"x\" is undefined\n" + "note: é\n" * 2000
    fake = FakeEpisodeServer({"kb/L1/1": 1}, verdict={
        "eval_status": "ok", "compiled": False, "correct": False, "reward": -1.0,
        "error_code": "COMPILE_ERROR", "compile_log": log})
    try:
        out = tmp_path / "out"
        assert run(fake, solutions(tmp_path / "sol", ["kb/L1/1"]), out).returncode == 0
        (row,) = lines(out / "results.jsonl")
        assert row["status"] == "compile_error"
        assert row["compile_log"].startswith("kernels/k.cu(3): error:")  # the first error
        assert len(row["compile_log"].encode()) <= 4000  # capped, on a character boundary
    finally:
        fake.close()


def test_timed_out_evaluation_ends_before_the_next_task_starts(tmp_path):
    fake = FakeEpisodeServer({"kb/L1/1": 1, "kb/L1/2": 1}, submit_s=4.0)
    try:
        sol = solutions(tmp_path / "sol", ["kb/L1/1", "kb/L1/2"])
        p = run(fake, sol, tmp_path / "out", "--task-timeout", "1", "--jobs", "1")
        assert p.returncode == 0, p.stderr
        rows = lines(tmp_path / "out" / "results.jsonl")
        assert [r["status"] for r in rows] == ["timeout", "timeout"]
        # ep1's DELETE was refused while its Submit ran and asked again until it went; only
        # then was the second episode created
        seq = [(m, p.split("?")[0], b) for m, p, b in fake.calls]
        gone = seq.index(("DELETE", "/v1/episodes/ep1", b"200"))
        assert ("DELETE", "/v1/episodes/ep1", b"409") in seq[:gone], seq
        assert seq.index(("DONE", "/v1/episodes/ep1/tools/Submit", b"")) < gone, seq
        creates = [i for i, (m, p, b) in enumerate(seq) if m == "POST" and p == "/v1/episodes"]
        assert len(creates) == 2 and creates[1] > gone, seq
    finally:
        fake.close()


def test_twenty_levels_are_tabulated(tmp_path):
    tasks = {f"kb/L{lv}/1": lv for lv in range(1, 21)}
    fake = FakeEpisodeServer(tasks)
    try:
        out = tmp_path / "out"
        p = run(fake, solutions(tmp_path / "sol", list(tasks)[:3]), out)
        assert p.returncode == 0, p.stderr
        table = json.loads((out / "results.json").read_text())["table"]
        assert len(table) == 21  # 20 levels and the overall row
        assert table[-1]["n"] == 20
    finally:
        fake.close()


def test_levels_select_any_level_up_to_100(tmp_path):
    tasks = {"kb/L3/1": 3, "kb/L40/1": 40, "kb/L100/1": 100, "kb/L7/1": 7}
    fake = FakeEpisodeServer(tasks)
    try:
        out = tmp_path / "out"
        p = run(fake, solutions(tmp_path / "sol", list(tasks)), out, "--levels", "40,100,3")
        assert p.returncode == 0, p.stderr
        got = {t["task_id"] for t in json.loads((out / "results.json").read_text())["tasks"]}
        assert got == {"kb/L3/1", "kb/L40/1", "kb/L100/1"}
        bad = run(fake, tmp_path / "sol", tmp_path / "out2", "--levels", "101")
        assert bad.returncode == 1 and "--levels" in bad.stderr, bad.stderr
    finally:
        fake.close()



def test_a_malformed_result_line_is_evaluated_again(tmp_path):
    """A hand-edited line the table cannot count (a level as a string, a status as a number, not
    JSON at all) is said with its line number and its task evaluated again: it once counted as
    done and then failed every resume and report with no line named."""
    fake = FakeEpisodeServer({"kb/L1/1": 1, "kb/L1/2": 1, "kb/L1/3": 1})
    try:
        sol, out = solutions(tmp_path / "sol", ["kb/L1/1", "kb/L1/2", "kb/L1/3"]), tmp_path / "out"
        assert run(fake, sol, out).returncode == 0
        log = out / "results.jsonl"
        recs = {r["task_id"]: r for r in lines(log)}
        recs["kb/L1/1"]["level"] = "1"
        recs["kb/L1/2"]["status"] = 7
        # kb/L1/3 is correct on line 4, then a rejected line 6 says it again: the earlier
        # result no longer stands either (the warning says the task counts as not evaluated)
        bad3 = dict(recs["kb/L1/3"], level=[1])
        log.write_text("\n".join([json.dumps(recs["kb/L1/1"]), "{garbage", json.dumps(recs["kb/L1/2"]),
                                  json.dumps(recs["kb/L1/3"]), "", json.dumps(bad3)]) + "\n")
        rep = subprocess.run([str(BENCH), "report", str(out)], capture_output=True, text=True,
                             timeout=60)
        assert rep.returncode == 3, rep.stderr  # a PARTIAL folder: a run not yet done
        assert f"{log} line 1: task kb/L1/1: \"level\" is missing or not an integer" in rep.stderr
        assert f"{log} line 2: not JSON" in rep.stderr and f"{log} line 3: task kb/L1/2" in rep.stderr
        assert f"{log} line 6: task kb/L1/3" in rep.stderr and "line 5" not in rep.stderr  # blank
        assert "PARTIAL" in (out / "report.md").read_text()
        before = len([c for c in fake.calls if c[1] == "/v1/episodes"])
        p = run(fake, sol, out)
        assert p.returncode == 0, p.stderr
        assert "line 1: task kb/L1/1" in p.stderr and "3 to evaluate" in p.stderr, p.stderr
        assert len([c for c in fake.calls if c[1] == "/v1/episodes"]) == before + 3
        res = json.loads((out / "results.json").read_text())
        assert sorted(t["task_id"] for t in res["tasks"]) == ["kb/L1/1", "kb/L1/2", "kb/L1/3"]
        assert all(t["status"] == "correct" for t in res["tasks"])
        rep = subprocess.run([str(BENCH), "report", str(out)], capture_output=True, text=True,
                             timeout=60)
        assert rep.returncode == 0 and "PARTIAL" not in rep.stdout, rep.stderr  # whole again
        # --server: the server's own data; --kernelbench only chose its KernelBench suite, and
        # its path (never read) is not recorded as if it had been
        meta = json.loads((out / "meta.json").read_text())
        assert meta["suites"] == "kernelbench" and "kernelbench" not in meta, meta
    finally:
        fake.close()
