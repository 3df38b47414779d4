"""How kgym-bench finds and reads a task's solution (env/bench/solution.c), against a fake
kgym-env: no evaluation runs, every case takes a second or two. The fake answers the routes
`kgym-bench run --server` uses, records every upload and says "correct" to every Profile and
Submit, so what a case checks is what kgym-bench read and sent, and the result line it wrote.

Each case was a red-team finding: a symlinked folder in a solution uploaded host files into the
workspace; more snapshots than the cap were cut to an arbitrary subset; a solution of any size
was read whole into memory; several files for one problem were picked in directory order; a
file name that is not UTF-8 dropped fields from the result line."""
import errno
import json
import os
import subprocess
import threading
from pathlib import Path

from fake_kgym import FakeKgym
from test_kgym_bench import BENCH

MARKER = b"HOST-SECRET-never-upload-me"
RELU = b"import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
       b"        return torch.relu(x)\n"


class FakeEvalServer(FakeKgym):
    """Just enough of kgym-env for `kgym-bench run --server`. tasks: {task_id: level}. Records
    episodes (task id), uploads (episode, path, size, bytes when small) and tool calls, in
    order."""

    def __init__(self, tasks):
        self.tasks, self.lock = tasks, threading.Lock()
        self.episodes, self.uploads, self.tools = {}, [], []
        super().__init__()

    def route(self, method, path, body, size):
        if method == "GET":
            return self.get(path)
        if method == "POST":
            return self.post(path, body)
        if method == "PUT":
            ep, file = path.split("/")[3], path.split("/files/", 1)[1]
            with self.lock:
                self.uploads.append((ep, file, size, body))
            return 200, {"path": file, "bytes": size}
        return 200, {"closed": True}  # DELETE

    def get(self, path):
        if path.startswith("/v1/health"):
            return 200, {"status": "ok", "gpus": []}
        if path.startswith("/v1/tasks"):
            return 200, {"tasks": [
                {"id": t, "level": lv, "name": t.replace("/", "_"),
                 "suite": "kernelbench" if t.startswith("kb/") else "tasks"}
                for t, lv in self.tasks.items()]}
        # the workspace's kernels/ listing: an empty workspace, nothing stale to remove
        return 404, {"error": {"code": "NOT_FOUND", "message": "no such file"}}

    def post(self, path, body):
        with self.lock:
            if path == "/v1/episodes":
                ep = f"ep_{len(self.episodes)}"
                self.episodes[ep] = json.loads(body)["task_id"]
                return 201, {"episode_id": ep}
            ep, tool = path.split("/")[3], path.rsplit("/", 1)[1]
            self.tools.append((ep, tool))
        if tool == "Bash":
            return 200, {"observation": {"is_error": False, "content": ""}}
        return 200, {"observation": {"is_error": False, "data": {
            "eval_status": "ok", "compiled": True, "correct": True, "reward": 2.0,
            "t_candidate_ms": 1.0, "t_eager_ms": 2.0, "t_compile_ms": 1.5}}}

    def uploads_of(self, task):
        return [(p, d) for ep, p, _, d in self.uploads if self.episodes.get(ep) == task]


def run_bench(tmp_path, solutions, tasks, rusage=False):
    """kgym-bench run over the fake; returns (results by task id, fake, stderr[, rusage]).
    Every results.jsonl line must parse and carry its fields."""
    fake = FakeEvalServer(tasks)
    out = tmp_path / "out"
    args = [str(BENCH), "run", "--server", fake.url, "--solutions", str(solutions), "--out",
            str(out), "--variant", "cpu", "--jobs", "1", "--quiet", "--task-timeout", "60"]
    for t in tasks:
        args += ["--only", t]
    errf = tmp_path / "stderr.txt"
    try:
        with open(errf, "wb") as err:
            p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
            try:
                _, status, ru = os.wait4(p.pid, 0)
            except BaseException:
                p.kill()
                raise
            p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        fake.close()
    stderr = errf.read_text(errors="replace")
    assert p.returncode == 0, f"exit {p.returncode}\n{stderr}"
    results = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        results[r["task_id"]] = r
    assert set(results) == set(tasks), stderr
    return (results, fake, stderr, ru) if rusage else (results, fake, stderr)


def workspace(folder, model=RELU, kernels=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_new.py").write_bytes(model)
    for name, text in (kernels or {}).items():
        (folder / "kernels" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "kernels" / name).write_bytes(text)
    return folder


def host_secrets(tmp_path):
    """A folder outside the solutions folder, standing in for ~/.ssh: a secret file, and a whole
    workspace (model_new.py, kernels/) whose every file holds the marker."""
    host = tmp_path / "host-private"
    workspace(host / "ws", model=MARKER + b"\n", kernels={"leak.h": MARKER})
    (host / "id_secret").write_bytes(MARKER)
    return host


def assert_refused(r, *words):
    assert r["status"] == "incorrect" and r.get("error_code") == "BAD_SOLUTION", r
    for w in words:
        assert w in r.get("error", ""), (w, r)


# ---- finding 6: no symlink in a solution is followed ---------------------------------------

def _kernels_sub(sol, host):
    workspace(sol / "level1" / "1", kernels={"relu.cu": b"// relu\n"})
    (sol / "level1" / "1" / "kernels" / "sub").symlink_to(host)
    return "level1/1/kernels/sub"


def _kernels_deep(sol, host):
    workspace(sol / "level1" / "1", kernels={"a/relu.cu": b"// relu\n"})
    (sol / "level1" / "1" / "kernels" / "a" / "b").symlink_to(host)
    return "level1/1/kernels/a/b"


def _kernels(sol, host):
    workspace(sol / "level1" / "1")
    (sol / "level1" / "1" / "kernels").symlink_to(host / "ws" / "kernels")
    return "level1/1/kernels"


def _kernel_file(sol, host):
    workspace(sol / "level1" / "1")
    (sol / "level1" / "1" / "kernels").mkdir()
    (sol / "level1" / "1" / "kernels" / "leak.h").symlink_to(host / "id_secret")
    return "level1/1/kernels/leak.h"


def _model_new(sol, host):
    (sol / "level1" / "1").mkdir(parents=True)
    (sol / "level1" / "1" / "model_new.py").symlink_to(host / "ws" / "model_new.py")
    return "level1/1/model_new.py"


def _problem_folder(sol, host):
    (sol / "level1").mkdir(parents=True)
    (sol / "level1" / "1").symlink_to(host / "ws")
    return "level1/1"


def _level_folder(sol, host):
    (host / "level1").mkdir()
    (host / "level1" / "1").symlink_to(host / "ws")  # inside the host folder: never reached
    sol.mkdir()
    (sol / "level1").symlink_to(host / "level1")
    return "level1"


def _kernelbench_file(sol, host):
    (sol / "level1").mkdir(parents=True)
    (sol / "level1" / "1_Relu.py").symlink_to(host / "ws" / "model_new.py")
    return "level1/1_Relu.py"


def _snapshot(sol, host):
    workspace(sol / "level1" / "1" / "snapshots" / "0")
    (sol / "level1" / "1" / "snapshots" / "1").symlink_to(host / "ws")
    return "level1/1/snapshots/1"


def _snapshots_folder(sol, host):
    workspace(sol / "level1" / "1")
    (host / "snaps").mkdir()
    (host / "snaps" / "0").symlink_to(host / "ws")
    (sol / "level1" / "1" / "snapshots").symlink_to(host / "snaps")
    return "level1/1/snapshots"


SYMLINK_CASES = [_kernels_sub, _kernels_deep, _kernels, _kernel_file, _model_new,
                 _problem_folder, _level_folder, _kernelbench_file, _snapshot, _snapshots_folder]


def test_symlinks_at_any_depth_are_refused_and_never_followed(tmp_path):
    """A symlink anywhere in a solution (a kernels sub-folder, kernels/ itself, the problem's
    folder, the level folder, a snapshot, model_new.py, the KernelBench file) makes the task a
    BAD_SOLUTION naming the link, and nothing from the host folder reaches the server."""
    host = host_secrets(tmp_path)
    failures = []
    for i, make in enumerate(SYMLINK_CASES):
        case = tmp_path / f"case{i}"
        case.mkdir()
        link = make(case / "sol", host)
        results, fake, stderr = run_bench(case, case / "sol", {"kb/L1/1": 1})
        r = results["kb/L1/1"]
        leaked = [p for _, p, _, d in fake.uploads if MARKER in d]
        ok = (r.get("error_code") == "BAD_SOLUTION" and "symlink" in r.get("error", "")
              and link in r.get("error", "") and not leaked)
        if not ok:
            failures.append(f"{make.__name__}: {link}: leaked {leaked}: {r}")
    assert not failures, "\n".join(failures)


def test_a_symlinked_solutions_folder_itself_is_the_users_choice(tmp_path):
    """--solutions may itself be a symlink, or relative: only what lies below it is checked."""
    real = tmp_path / "real-solutions"
    workspace(real / "level1" / "1", kernels={"relu.cu": b"// relu\n"})
    (tmp_path / "link").symlink_to(real)
    results, fake, _ = run_bench(tmp_path, tmp_path / "link", {"kb/L1/1": 1})
    assert results["kb/L1/1"]["status"] == "correct", results
    assert sorted(p for p, _ in fake.uploads_of("kb/L1/1")) == ["kernels/relu.cu",
                                                                "model_new.py"]


# ---- finding 8: the snapshot cap -------------------------------------------------------------

def test_snapshots_are_evaluated_in_numeric_order_up_to_the_cap(tmp_path):
    """64 snapshots (the cap) and a final state: all 65 are evaluated, 0, 1, 2, ..., 10, ...
    in numeric order, then the final one is submitted."""
    sol = tmp_path / "sol"
    for n in range(64):
        workspace(sol / "level1" / "1" / "snapshots" / str(n), model=f"# snapshot {n}\n".encode())
    workspace(sol / "level1" / "1", model=b"# final\n")
    results, fake, _ = run_bench(tmp_path, sol, {"kb/L1/1": 1})
    r = results["kb/L1/1"]
    assert r["status"] == "correct" and r["snapshots"] == 65, r
    models = [d.decode() for p, d in fake.uploads_of("kb/L1/1") if p == "model_new.py"]
    assert models == [f"# snapshot {n}\n" for n in range(64)] + ["# final\n"]
    assert [t for _, t in fake.tools] == ["Profile"] * 64 + ["Submit"]


def test_more_snapshots_than_the_cap_are_refused_not_cut(tmp_path):
    """65 snapshots: refused as a whole (BAD_SOLUTION saying how many and the cap), never an
    arbitrary 64 of them, and nothing is evaluated."""
    sol = tmp_path / "sol"
    for n in range(65):
        workspace(sol / "level1" / "1" / "snapshots" / str(n), model=f"# snapshot {n}\n".encode())
    results, fake, _ = run_bench(tmp_path, sol, {"kb/L1/1": 1})
    assert_refused(results["kb/L1/1"], "65 snapshots", "64", "level1/1/snapshots")
    assert not fake.episodes and not fake.uploads


# ---- finding 14: a solution's size is capped before it is read -------------------------------

def test_a_solution_over_the_byte_cap_is_refused_before_it_is_read(tmp_path):
    """40 files of 8 MiB (sparse: no disk) under kernels/, 320 MiB in all, over the 256 MiB a
    state may hold: refused before anything is read or uploaded, so kgym-bench stays small."""
    ws = workspace(tmp_path / "sol" / "level1" / "1")
    (ws / "kernels").mkdir()
    for i in range(40):
        with open(ws / "kernels" / f"k{i}.h", "wb") as f:
            f.truncate(8 << 20)
    results, fake, _, ru = run_bench(tmp_path, tmp_path / "sol", {"kb/L1/1": 1}, rusage=True)
    assert_refused(results["kb/L1/1"], "256 MiB")
    assert not fake.uploads
    # ru_maxrss starts from the forking process's RSS (Linux keeps the larger of the two across
    # exec): this bound holds while no test of the suite imports torch into pytest itself
    assert ru.ru_maxrss < 100 * 1024, f"kgym-bench's max RSS: {ru.ru_maxrss} KiB"


def test_one_file_over_the_file_cap_is_refused(tmp_path):
    ws = workspace(tmp_path / "sol" / "level1" / "1")
    (ws / "kernels").mkdir()
    with open(ws / "kernels" / "big.h", "wb") as f:
        f.truncate((8 << 20) + 1)
    results, fake, _ = run_bench(tmp_path, tmp_path / "sol", {"kb/L1/1": 1})
    assert_refused(results["kb/L1/1"], "kernels/big.h", "8 MiB")
    assert not fake.uploads


# ---- finding 15: ambiguous lookups, names that are not UTF-8 ---------------------------------

def test_ambiguous_lookups_are_refused_naming_the_candidates(tmp_path):
    sol = tmp_path / "sol"
    (sol / "level1").mkdir(parents=True)
    for name in ("23_A.py", "23_B.py", "23_Zzz.py"):  # three files for one problem
        (sol / "level1" / name).write_bytes(RELU)
    workspace(sol / "level1" / "24")  # a folder and a file for one problem
    (sol / "level1" / "24_Relu.py").write_bytes(RELU)
    workspace(sol / "foo")  # another task store's id: foo/ and foo.py
    (sol / "foo.py").write_bytes(RELU)
    (sol / "level1" / "25_Relu.py").write_bytes(RELU)  # one candidate: found
    (sol / "level1" / "250_Other.py").write_bytes(b"# not problem 25\n")
    results, fake, _ = run_bench(tmp_path, sol, {"kb/L1/23": 1, "kb/L1/24": 1, "foo": 1,
                                                 "kb/L1/25": 1})
    assert_refused(results["kb/L1/23"], "ambiguous", "level1/23_A.py", "level1/23_B.py",
                   "level1/23_Zzz.py")
    assert_refused(results["kb/L1/24"], "ambiguous", "level1/24", "level1/24_Relu.py")
    assert_refused(results["foo"], "ambiguous", "foo", "foo.py")
    assert results["kb/L1/25"]["status"] == "correct", results["kb/L1/25"]
    assert results["kb/L1/25"]["solution"] == "level1/25_Relu.py"
    assert sorted(fake.episodes.values()) == ["kb/L1/25"]


def test_the_full_task_id_wins_over_its_last_part(tmp_path):
    """A task store id grp/foo: grp/foo/ is the exact match; foo/ beside it is another
    task's (or a short alias) and never makes the lookup ambiguous. foo/ alone is found."""
    sol = tmp_path / "sol"
    workspace(sol / "grp" / "foo")
    workspace(sol / "foo")
    workspace(sol / "bar")
    results, _, _ = run_bench(tmp_path, sol, {"grp/foo": 1, "grp/bar": 1})
    assert results["grp/foo"]["status"] == "correct", results["grp/foo"]
    assert results["grp/foo"]["solution"] == "grp/foo"
    assert results["grp/bar"]["solution"] == "bar", results["grp/bar"]


def test_a_name_that_is_not_utf8_gets_a_clear_error(tmp_path):
    """A KernelBench file and a kernels/ file whose names are not UTF-8: each task is a
    BAD_SOLUTION whose error shows the name (bytes as \\xNN), and the line keeps its fields."""
    sol = tmp_path / "sol"
    (sol / "level1").mkdir(parents=True)
    with open(os.path.join(bytes(sol / "level1"), b"1_\xff\xfe.py"), "wb") as f:
        f.write(RELU)
    ws = workspace(sol / "level1" / "2", kernels={"relu.cu": b"// relu\n"})
    with open(os.path.join(bytes(ws / "kernels"), b"x\xe9.cu"), "wb") as f:
        f.write(b"// latin-1 name\n")
    results, fake, _ = run_bench(tmp_path, sol, {"kb/L1/1": 1, "kb/L1/2": 1})
    assert_refused(results["kb/L1/1"], "UTF-8", "level1/1_\\xFF\\xFE.py")
    assert_refused(results["kb/L1/2"], "UTF-8", "kernels/x\\xE9.cu")
    assert not fake.uploads


# ---- review of the openat2 walk: a kernel without it is a setup error, not the solutions' ----

NO_OPENAT2_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
/* syscall(2) as on a kernel before 5.6 (or under a seccomp profile that refuses openat2) */
long syscall(long number, ...)
{
    va_list ap;
    va_start(ap, number);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_openat2) {
        errno = ENOSYS;
        return -1;
    }
    long (*real)(long, ...) = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
"""


def test_a_kernel_without_openat2_stops_the_run_instead_of_failing_every_solution(tmp_path):
    """Without openat2 every solution would fail to open and be scored incorrect, with exit 0
    and a table that looks valid: the run is refused up front (exit 1), saying why."""
    shim_c, shim = tmp_path / "no_openat2.c", tmp_path / "no_openat2.so"
    shim_c.write_text(NO_OPENAT2_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(shim_c), "-ldl"], check=True)
    sol = tmp_path / "sol"
    workspace(sol / "level1" / "1")
    fake = FakeEvalServer({"kb/L1/1": 1})
    try:
        p = subprocess.run([str(BENCH), "run", "--server", fake.url, "--solutions", str(sol),
                            "--out", str(tmp_path / "out"), "--variant", "cpu", "--only",
                            "kb/L1/1", "--quiet"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "LD_PRELOAD": str(shim)})
    finally:
        fake.close()
    assert p.returncode == 1, p.stderr
    assert f"refuses openat2 ({os.strerror(errno.ENOSYS)})" in p.stderr, p.stderr  # the shim's
    assert "Linux 5.6" in p.stderr, p.stderr
    assert fake.episodes == {} and fake.uploads == [], (fake.episodes, fake.uploads)
    assert not (tmp_path / "out" / "results.jsonl").exists()
