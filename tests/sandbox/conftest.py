"""Fixtures of the sandbox escape suite.

Every test drives a real `kgym-env serve` (the black-box API suite's ServerProc, reused from
tests/api/conftest.py) with the sandbox active, runs an attack inside an episode through the
HTTP API, and runs the same probe unconfined on the host as its control, so that no test can
pass because the probe itself was broken.

Two servers live for the whole session:
- `srv`: the real `sandbox_profiles/`;
- `small`: the real `base.sbx` under a `bash.sbx` with low limits (memory 256M, pids 64, a 32M
  /tmp), for the resource attacks, which would otherwise take gigabytes and seconds.
They hand out uids from different bases, so the host-side checks ("no process of this uid is
left") never mix the two.

A bystander episode on `srv` holds known files from the start; the last test (test_zz_final.py)
and the session teardown check that nothing the suite did changed them.
"""
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# The tests import these helpers as `kgym_sbx` (several conftest.py files share the module
# name "conftest", so importing it by that name could find another one).
sys.modules["kgym_sbx"] = sys.modules[__name__]


def _load_api_conftest():
    """tests/api/conftest.py as a plain module (its helpers; its fixtures stay its own)."""
    name = "kgym_api_conftest"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "api" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


api = _load_api_conftest()
ServerProc = api.ServerProc
BINARY = api.BINARY
PROFILES = api.PROFILES
TEMPLATE = api.TEMPLATE

SRV_UID_BASE = 300000
SMALL_UID_BASE = 400000
UID_SPAN = 60000  # uids a server hands out: base .. base+59,999 (from a random start)

# The lowered limits of the `small` server (its bash.sbx, below).
SMALL_MEMORY = 256 << 20
SMALL_PIDS = 64
SMALL_TMP = 32 << 20

SMALL_BASH_SBX = """\
# The sandbox suite's bash profile: the real base.sbx with low limits, so resource attacks end
# in seconds and megabytes.
include base

[mount]
tmpfs /tmp size=32M mode=1777

[rlimit]
cpu   = 600s
fsize = 4G

[cgroup]
memory = 256M
pids   = 64

[limits]
wall   = 120s
"""

FIXED_FILES = ("model.py", "binding.cpp", "binding_registry.h")


# ---- host-side views ---------------------------------------------------------------------------

def _host_procs():
    """(pid, real uid, effective uid, name) of every host process."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                status = f.read()
        except OSError:
            continue  # gone meanwhile
        m = re.search(r"^Uid:\s+(\d+)\s+(\d+)", status, re.M)
        name = re.search(r"^Name:\s+(.*)$", status, re.M)
        if m:
            yield int(d), int(m.group(1)), int(m.group(2)), name.group(1) if name else "?"


def host_procs_of_uid(uid):
    """[(pid, name)] of the host processes whose real or effective uid is uid."""
    return [(pid, name) for pid, ruid, euid, name in _host_procs() if uid in (ruid, euid)]


def host_procs_in_uid_range(lo, hi):
    """[(pid, uid)] of the host processes with a real or effective uid in [lo, hi)."""
    return [(pid, ruid) for pid, ruid, euid, _ in _host_procs()
            if lo <= ruid < hi or lo <= euid < hi]


def host_process_count():
    return sum(1 for d in os.listdir("/proc") if d.isdigit())


def wait_until(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


def run_host(cmd, **kw):
    """A command on the host, unconfined (as root): CompletedProcess with text output."""
    kw.setdefault("timeout", 30)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def parse_verdicts(text):
    """probe output -> {name: "OK"|"EPERM"|..., name+"_detail": "..."}."""
    out = {}
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) >= 2 and re.fullmatch(r"[a-z0-9_]+", parts[0]):
            out[parts[0]] = parts[1]
            if len(parts) == 3:
                out[parts[0] + "_detail"] = parts[2]
    return out


def profile_denials(path=PROFILES / "base.sbx"):
    """{syscall: errno} of the `deny ERRNO name...` lines of a profile (continuations joined)."""
    text = Path(path).read_text()
    text = re.sub(r"#[^\n]*", "", text)
    text = re.sub(r"\\\s*\n", " ", text)
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "deny":
            for name in words[2:]:
                out[name.lstrip("?")] = words[1]
    return out


# ---- servers -----------------------------------------------------------------------------------

def health(server):
    c = server.client(timeout=10)
    try:
        r = c.get("/v1/health")
    finally:
        c.close()
    return r


def assert_sandbox_healthy(server):
    """GET /v1/health: 200 ok, the sandbox active, every required protection ok."""
    assert server.running(), f"the server died:\n{server.stderr_text()[-3000:]}"
    r = health(server)
    assert r.status == 200, r
    doc = r.json
    assert doc["status"] == "ok", doc
    sb = doc["sandbox"]
    assert sb["active"] is True, sb
    assert sb["all_required_ok"] is True, sb
    bad = [p for p in sb["protections"] if p["required"] and not p["ok"]]
    assert not bad, bad
    assert {"privileges", "ns_mount", "ns_pid", "ns_net", "seccomp", "cgroup"} <= {
        p["name"] for p in sb["protections"]}
    return doc


def cgroup_roots(server):
    """kgym's cgroup parents of a server, from the `cgroup` protection's detail."""
    doc = health(server).json
    item = next(p for p in doc["sandbox"]["protections"] if p["name"] == "cgroup")
    roots = []
    for m in re.finditer(r"(/sys/fs/cgroup/[^\s,]+)", item["detail"]):
        p = Path(m.group(1))
        if p.is_dir():
            roots.append(p)
    assert roots, item
    return roots


def busy_cgroups(server, uid=None):
    """{cgroup dir: [pids]} of the command cgroups of a server that still hold processes
    (only those of the episode with that uid, when given: named u<uid>-..., never after the
    episode id, which is a credential). The server's own leaf is not counted."""
    busy = {}
    for root in cgroup_roots(server):
        for dirpath, dirnames, filenames in os.walk(root):
            d = Path(dirpath)
            if d == root or d.name.endswith("-server"):
                continue
            if uid is not None and not d.name.startswith(f"u{uid}-"):
                continue
            try:
                pids = (d / "cgroup.procs").read_text().split()
            except OSError:
                continue
            if pids:
                busy[str(d)] = pids
    return busy


@pytest.fixture(scope="session")
def task_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sbx_tasks")
    for folder, (meta, code, code_cpu) in api.FIXTURE_TASKS.items():
        d = root / folder
        d.mkdir()
        (d / "task.json").write_text(json.dumps(meta))
        (d / "model.py").write_text(code)
        if code_cpu is not None:
            (d / "model_cpu.py").write_text(code_cpu)
    return root


@pytest.fixture(scope="session")
def small_profiles(tmp_path_factory):
    """A profile directory: copies of the real base (and the others; the loader refuses
    symlinked profiles), with a low-limit bash.sbx."""
    d = tmp_path_factory.mktemp("sbx_profiles_small")
    for f in PROFILES.glob("*.sbx"):
        if f.name != "bash.sbx":
            shutil.copyfile(f, d / f.name)
    (d / "bash.sbx").write_text(SMALL_BASH_SBX)
    return d


def _start(tmp_path_factory, task_dir, name, config, args=()):
    s = ServerProc(tmp_path_factory.mktemp(name), [task_dir], config=config, args=list(args))
    s.start()
    return s


@pytest.fixture(scope="session")
def srv(tmp_path_factory, task_dir):
    """The session's server on the real profiles."""
    s = _start(tmp_path_factory, task_dir, "sbx_srv", {"sandbox_uid_base": SRV_UID_BASE})
    try:
        assert_sandbox_healthy(s)
        yield s
    finally:
        _finish(s)


@pytest.fixture(scope="session")
def small(tmp_path_factory, task_dir, small_profiles):
    """The session's server with low limits (memory 256M, pids 64, /tmp 32M)."""
    s = _start(tmp_path_factory, task_dir, "sbx_small", {"sandbox_uid_base": SMALL_UID_BASE},
               args=["--sandbox-profiles", str(small_profiles)])
    try:
        assert_sandbox_healthy(s)
        yield s
    finally:
        _finish(s)


def _finish(s):
    if not s.running():
        s.proc.wait()
        raise AssertionError(f"the server died during the suite:\n{s.stderr_text()[-4000:]}")
    s.finish()  # SIGTERM, exit 0, and never a 5xx in its request log


@pytest.fixture(autouse=True)
def _servers_stay_healthy(request):
    """After every test: each server the test used still answers /v1/health with the sandbox
    active, and the bystander episode's files are as they were."""
    yield
    for name in ("srv", "small"):
        if name in request.fixturenames:
            assert_sandbox_healthy(request.getfixturevalue(name))
    if "srv" in request.fixturenames:
        request.getfixturevalue("bystander").check()


# ---- episodes ----------------------------------------------------------------------------------

class Episode:
    """One episode of a server, driven through the HTTP API."""

    def __init__(self, server, client, episode_id):
        self.server = server
        self.c = client
        self.id = episode_id
        self._uid = None
        self.closed = False

    @property
    def path(self):
        return f"/v1/episodes/{self.id}"

    @property
    def host_workspace(self):
        """Where the workspace lives on the host (the test knows the server's state dir)."""
        return self.server.state_dir / "episodes" / self.id / "work"

    def tool(self, name, **args):
        r = self.c.post(f"{self.path}/tools/{name}", args)
        assert r.status == 200, r
        return r.json["observation"]

    def bash(self, command, timeout_ms=None, background=False):
        args = {"command": command}
        if timeout_ms is not None:
            args["timeout"] = timeout_ms
        if background:
            args["run_in_background"] = True
        return self.tool("Bash", **args)

    def sh(self, command, timeout_ms=None):
        """Bash that must run to an exit (any code) without a tool error: its stdout."""
        obs = self.bash(command, timeout_ms=timeout_ms)
        assert not obs["is_error"], obs
        return obs["data"]["stdout"]

    def start_job(self, command):
        obs = self.bash(command, background=True)
        assert not obs["is_error"], obs
        return obs["data"]["bash_id"]

    def job_output(self, bash_id):
        return self.tool("BashOutput", bash_id=bash_id)

    def wait_job(self, bash_id, timeout=30):
        """Polls BashOutput until the job is no longer running: (all output, last data)."""
        text, deadline = "", time.monotonic() + timeout
        while True:
            obs = self.job_output(bash_id)
            assert not obs["is_error"], obs
            if obs["data"]["new_bytes"]:
                text += obs["content"].rsplit("[status:", 1)[0]
            if obs["data"]["status"] != "running":
                return text, obs["data"]
            assert time.monotonic() < deadline, f"job {bash_id} still running: {text[-500:]}"
            time.sleep(0.1)

    def get(self, rel):
        return self.c.get(f"{self.path}/files/{rel}")

    def put(self, rel, data):
        return self.c.put(f"{self.path}/files/{rel}", data)

    def read_file(self, rel):
        r = self.get(rel)
        assert r.status == 200, r
        return r.body

    @property
    def uid(self):
        if self._uid is None:
            self._uid = int(self.sh("id -u").strip())
        return self._uid

    def install_probe(self, probe_bin, name="probe"):
        r = self.put(name, Path(probe_bin).read_bytes())
        assert r.status in (200, 201), r
        out = self.sh(f"chmod +x {name} && echo installed")
        assert "installed" in out

    def probe(self, *args, name="probe"):
        """Runs the uploaded probe inside the sandbox: its verdicts."""
        quoted = " ".join(_q(a) for a in args)
        out = self.sh(f"./{name} {quoted}")
        return parse_verdicts(out)

    def delete(self):
        if not self.closed:
            r = self.c.delete(self.path)
            assert r.status == 200, r
            self.closed = True


def _q(s):
    s = str(s)
    return s if re.fullmatch(r"[A-Za-z0-9_./:=-]+", s) else "'" + s.replace("'", "'\\''") + "'"


class EpisodeFactory:
    def __init__(self, server):
        self.server = server
        self.c = server.client(timeout=60)
        self.made = []

    def __call__(self, task_id="fixture/alpha", seed=1):
        doc = self.c.create(task_id, seed=seed)
        ep = Episode(self.server, self.c, doc["episode_id"])
        self.made.append(ep)
        return ep

    def close_all(self):
        for ep in self.made:
            if not ep.closed:
                r = self.c.delete(ep.path)
                assert r.status in (200, 410), r
                ep.closed = True
        self.c.close()


@pytest.fixture
def new_episode(srv):
    f = EpisodeFactory(srv)
    yield f
    f.close_all()


@pytest.fixture
def new_small_episode(small):
    f = EpisodeFactory(small)
    yield f
    f.close_all()


# ---- the probe ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def probe_bin(tmp_path_factory):
    """tests/sandbox/probes/probe.c, built for this host (it runs inside and outside)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on this host"
    out = tmp_path_factory.mktemp("probe") / "probe"
    r = run_host([cc, "-O1", "-Wall", "-o", str(out), str(HERE / "probes" / "probe.c")],
                 timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def host_probe(probe_bin, *args, wrap=(), **kw):
    r = run_host([*wrap, str(probe_bin), *map(str, args)], **kw)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return parse_verdicts(r.stdout)


# ---- the bystander -----------------------------------------------------------------------------

class Bystander:
    """An episode that only ever holds known files; nothing the suite does may change them."""

    def __init__(self, ep, token):
        self.ep = ep
        self.token = token
        self.files = {}

    def snapshot(self):
        listing = self.ep.get("").json
        names = sorted(e["name"] for e in listing["entries"])
        files = {}
        for rel in ("model.py", "binding.cpp", "binding_registry.h", "model_new.py",
                    "SKILL.md", "secret.txt", "bash_secret.txt", "deep/dir/secret2.txt"):
            files[rel] = hashlib.sha256(self.ep.read_file(rel)).hexdigest()
        host = {}
        for rel in ("secret.txt", "model.py"):
            st = os.lstat(self.ep.host_workspace / rel)
            host[rel] = (st.st_uid, st.st_mode, st.st_size)
        return {"names": names, "files": files, "host": host}

    def check(self):
        now = self.snapshot()
        assert now == self.files, "the bystander episode's files changed"
        assert self.ep.read_file("secret.txt").decode().strip() == self.token
        assert self.ep.sh("cat bash_secret.txt").strip() == self.token


@pytest.fixture(scope="session")
def bystander(srv):
    c = srv.client(timeout=60)
    doc = c.create("fixture/beta", seed=3)
    ep = Episode(srv, c, doc["episode_id"])
    token = "BYSTANDER-" + uuid.uuid4().hex
    obs = ep.tool("Write", file_path="secret.txt", content=token + "\n")
    assert not obs["is_error"], obs
    ep.sh(f"echo {token} > bash_secret.txt && mkdir -p deep/dir && echo {token} > "
          f"deep/dir/secret2.txt")
    b = Bystander(ep, token)
    b.files = b.snapshot()
    yield b
    if srv.running():
        b.check()
        ep.delete()
    c.close()


@pytest.fixture(scope="session", autouse=True)
def _bystander_from_the_start(bystander):
    """The bystander exists before the first attack runs."""
    yield
