"""Trajectories survive crashes and restarts; SIGTERM drains (DESIGN.md §3.1)."""
import json
import signal
import socket
import subprocess
import threading
import time

import pytest


def test_kill9_keeps_every_acknowledged_step(launch):
    s = launch(name="crash")
    c = s.client()
    ep = c.create("fixture/alpha", seed=77)["episode_id"]
    closed = c.create("fixture/beta")["episode_id"]
    assert c.delete(f"/v1/episodes/{closed}").status == 200
    acked = []
    for i in range(5):
        out = c.step(ep, actions=[
            {"tool": "Write", "args": {"file_path": f"f{i}.txt", "content": f"v{i}"}},
            {"tool": "Bash", "args": {"command": f"echo step-{i}"}, "call_id": f"c{i}"}])
        acked.append(out)
    assert c.put(f"/v1/episodes/{ep}/files/up.txt", b"uploaded").status == 201
    c.close()
    s.kill9()  # no drain, no flush: only what was durable before each reply survives
    # On disk, before any recovery code runs: every acknowledged record is there, whole.
    disk = (s.state_dir / "episodes" / ep / "trajectory.jsonl").read_bytes()
    assert disk.endswith(b"\n")
    disk_types = [json.loads(line)["type"] for line in disk.splitlines()]
    assert disk_types == ["reset"] + ["step"] * 5 + ["upload"]

    s.restart()
    assert s.wait_for_log(lambda r: r.get("event") == "recovered", 1)["episodes"] == 2
    c = s.client()
    listed = {e["episode_id"]: e for e in c.get("/v1/episodes").json["episodes"]}
    assert listed[ep]["status"] == "ended"
    assert listed[ep]["task_id"] == "fixture/alpha" and listed[ep]["seed"] == 77
    assert listed[ep]["step"] == 5
    assert listed[closed]["status"] == "closed"  # a closed episode stays closed
    assert c.get("/v1/health").json["active_episodes"] == 0
    traj = c.trajectory(ep)
    assert [x["type"] for x in traj] == ["reset"] + ["step"] * 5 + ["upload"]
    for i, (rec, out) in enumerate(zip(traj[1:6], acked)):
        assert rec["step"] == i + 1
        assert [a["call_id"] for a in rec["actions"]] == ["", f"c{i}"]
        assert [o["content"] for o in rec["observations"]] == \
            [o["content"] for o in out["observations"]]
        assert rec["observations"][1]["data"]["stdout"] == f"step-{i}\n"
    assert traj[-1]["content"] == "uploaded"
    # The episode is over: steps are refused, its workspace is gone, its trajectory stays.
    r = c.post(f"/v1/episodes/{ep}/step", {"action": {"tool": "Bash",
                                                       "args": {"command": "true"}}})
    assert r.status == 410, r
    assert r.error()["code"] == "EPISODE_ENDED"
    assert c.post(f"/v1/episodes/{ep}/reset").status == 410
    assert c.get(f"/v1/episodes/{ep}/files/f0.txt").status == 410
    assert not (s.state_dir / "episodes" / ep / "work").exists()
    # The restarted server serves new episodes as usual.
    new = c.create("fixture/alpha")["episode_id"]
    assert c.tool(new, "Bash", command="echo fresh")["data"]["stdout"] == "fresh\n"
    # Ended episodes can be closed and purged.
    d = c.delete(f"/v1/episodes/{ep}?purge=true")
    assert d.status == 200 and d.json["purged"] is True
    assert c.get(f"/v1/episodes/{ep}/trajectory").status == 404
    c.close()


def test_restart_cuts_a_torn_trajectory_line(launch):
    s = launch(name="torn")
    c = s.client()
    ep = c.create("fixture/alpha")["episode_id"]
    c.step(ep, {"tool": "Bash", "args": {"command": "echo one"}})
    c.close()
    s.kill9()
    path = s.state_dir / "episodes" / ep / "trajectory.jsonl"
    with open(path, "ab") as f:  # a crash in the middle of an append
        f.write(b'{"type":"step","step":2,"actions":[{"tool":"Ba')
    s.restart()
    c = s.client()
    traj = c.trajectory(ep)  # every line parses
    assert [x["type"] for x in traj] == ["reset", "step"]
    assert traj[-1]["step"] == 1
    assert c.state(ep)["status"] == "ended"
    c.close()


def test_sigterm_drains_in_flight_step(launch):
    s = launch(name="drain")
    c = s.client()
    ep = c.create("fixture/alpha")["episode_id"]
    other = c.create("fixture/beta")["episode_id"]
    result = {}

    def slow():
        cc = s.client()
        try:
            result["r"] = cc.post(f"/v1/episodes/{ep}/step", {"action": {
                "tool": "Bash", "args": {"command": "sleep 2; echo done"}, "call_id": "slow"}})
        except Exception as e:  # noqa: BLE001 - reported below
            result["exc"] = e
        finally:
            cc.close()

    t = threading.Thread(target=slow)
    t.start()
    deadline = time.monotonic() + 5
    while not c.state(ep)["busy"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.3)
    s.signal(signal.SIGTERM)
    drain = s.wait_for_log(lambda r: r.get("event") == "draining", 3)
    assert drain is not None
    assert drain["in_flight"] == 1 and drain["requests_pending"] >= 1, drain  # the slow step

    # While draining: health says so, new work is refused, reads still work.
    h = c.get("/v1/health")
    assert h.status == 503, h
    assert h.json["status"] == "draining"
    assert h.header("retry-after") == "3"
    r = c.post("/v1/episodes", {"task_id": "fixture/alpha"})
    assert r.status == 503, r
    err = r.error()
    assert err["code"] == "DRAINING" and err["retryable"] is True
    assert r.header("retry-after") == "3"
    r = c.post(f"/v1/episodes/{other}/step", {"action": {"tool": "Bash",
                                                          "args": {"command": "true"}}})
    assert r.status == 503 and r.error()["code"] == "DRAINING"
    st = c.get(f"/v1/episodes/{ep}")
    assert st.status == 200 and st.json["busy"] is True
    c.close()

    t.join(15)
    assert "exc" not in result, result.get("exc")
    r = result["r"]
    assert r.status == 200, r
    obs = r.json["observation"]
    assert obs["is_error"] is False
    assert obs["data"]["exit_code"] == 0 and obs["data"]["stdout"] == "done\n"
    assert s.wait(15) == 0
    events = [x.get("event") for x in s.records()]
    assert "signal" in events and "stopped" in events
    # Once stopped, nothing listens any more.
    with pytest.raises(ConnectionRefusedError):
        s.client(timeout=2).get("/v1/health")

    s.restart()
    c = s.client()
    traj = c.trajectory(ep)
    steps = [x for x in traj if x["type"] == "step"]
    assert len(steps) == 1
    assert steps[0]["actions"][0]["call_id"] == "slow"
    assert steps[0]["observations"][0]["data"]["stdout"] == "done\n"
    assert c.state(ep)["status"] == "ended"
    c.close()


def test_sigterm_when_idle_exits_zero(launch):
    s = launch(name="idle-stop")
    c = s.client()
    ep = c.create("fixture/alpha")["episode_id"]
    c.tool(ep, "Bash", command="true")
    c.close()
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    assert s.wait(10) == 0
    assert time.monotonic() - t0 < 3


def test_background_jobs_do_not_outlive_a_killed_server(launch):
    """A SIGKILLed server cannot stop its episodes' background jobs itself: each job's launcher
    watches the server and, when it dies, kills its sandbox at once (no job keeps running, or
    writing to the workspace, until a server starts again). The next server on the same host
    still sweeps what a dead one left (cgroups) before it serves."""
    s = launch(name="orphans")
    c = s.client()
    ep = c.create("fixture/alpha")["episode_id"]
    obs = c.tool(ep, "Bash", command="while :; do date +%s%N > tick; sleep 0.05; done",
                 run_in_background=True)
    assert not obs["is_error"], obs
    uid = int(c.tool(ep, "Bash", command="id -u")["data"]["stdout"])
    c.close()
    tick = s.state_dir / "episodes" / ep / "work" / "tick"

    def procs_of(u):
        out = subprocess.run(["ps", "-o", "pid=", "-u", str(u)], capture_output=True, text=True)
        return out.stdout.split()

    def ticks(seconds):
        """The distinct contents of the tick file over a few seconds' sampling."""
        seen, end = set(), time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                seen.add(tick.read_text())
            except OSError:
                pass
            time.sleep(0.02)
        return seen

    deadline = time.monotonic() + 5
    while not procs_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs_of(uid), "control: the job runs while the server is alive"
    assert len(ticks(0.5)) >= 3, "control: the job writes while the server is alive"
    s.kill9()
    deadline = time.monotonic() + 2
    while procs_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs_of(uid) == [], "the job outlived its server"
    assert len(ticks(0.5)) <= 1, "the job still writes to the workspace after its server died"
    s.restart()
    assert procs_of(uid) == []


# ---- trajectory downloads: streamed from the file, never held in memory ------------------------

def _vm_kib(pid, field):
    """A Vm* line of /proc/PID/status, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _reset_peak_rss(pid):
    """Resets VmHWM to the current RSS (Linux >= 4.0; root). False when it cannot."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _grow_trajectory(c, ep, target_bytes):
    """Steps of 16 Writes of ~240 KiB each (under the 4 MiB body cap) until the trajectory holds
    target_bytes: the trajectory records every action's content, the workspace keeps one file."""
    content = "K" * (240 << 10)
    turn = [{"tool": "Write", "args": {"file_path": "big.txt", "content": content}}] * 16
    for _ in range(target_bytes // (16 * len(content)) + 1):
        out = c.step(ep, actions=turn)
        assert not any(o["is_error"] for o in out["observations"]), out["observations"][0]


def _raw_get(port, path):
    """A socket with a GET sent and its response head read: (socket, status, headers, first
    body bytes). The rest of the body is left unread in the kernel, so the server must hold the
    response until the client reads on."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, f"the connection closed in the response head: {buf!r}"
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return s, status, headers, rest


def _read_body(s, have, length):
    parts, n = [have], len(have)
    while n < length:
        chunk = s.recv(1 << 20)
        assert chunk, f"the connection closed after {n} of {length} body bytes"
        parts.append(chunk)
        n += len(chunk)
    s.close()
    return b"".join(parts)


def test_trajectory_download_is_streamed_not_buffered(launch):
    """Concurrent GETs of a large trajectory send the file's exact bytes without the server
    loading it: a server that reads it into memory (and copies it again for the response)
    holds size x clients while slow clients read."""
    s = launch(name="traj-stream")
    c = s.client(timeout=120)
    ep = c.create("fixture/alpha")["episode_id"]
    _grow_trajectory(c, ep, 40 << 20)
    path = s.state_dir / "episodes" / ep / "trajectory.jsonl"
    disk = path.read_bytes()
    size = len(disk)
    assert size >= 40 << 20, size
    pid = s.proc.pid
    clients = 4
    rss_before = _vm_kib(pid, "VmRSS")
    if not _reset_peak_rss(pid):
        rss_before = _vm_kib(pid, "VmHWM")  # growth measured above the steps' own peak

    # Every client has its response head (the server has built the response) before any reads
    # the body: the responses are in flight together.
    conns = [_raw_get(s.port, f"/v1/episodes/{ep}/trajectory") for _ in range(clients)]
    time.sleep(0.5)
    peak_during = _vm_kib(pid, "VmHWM")
    bodies = []
    for sock, status, headers, first in conns:
        assert status == 200, (status, first[:300])
        assert headers["content-type"] == "application/x-ndjson", headers
        assert int(headers["content-length"]) == size, headers
        bodies.append(_read_body(sock, first, size))
    for body in bodies:
        assert len(body) == size and body == disk
    growth = (max(peak_during, _vm_kib(pid, "VmHWM")) - rss_before) << 10
    # buffered: >= clients x size (plus a second copy while each response is built)
    assert growth < size // 2, \
        f"the server's RSS grew by {growth >> 20} MiB serving {clients} x {size >> 20} MiB"

    # The keep-alive client still works after a streamed response, and gets the same bytes.
    r = c.get(f"/v1/episodes/{ep}/trajectory")
    assert r.status == 200 and r.body == disk
    assert r.header("content-type") == "application/x-ndjson"
    assert c.get(f"/v1/episodes/{ep}").status == 200
    c.close()


def test_trajectory_download_during_steps_has_whole_lines(launch):
    """A GET while steps append sends the trajectory as of the moment it was opened, whole lines
    only: each download is a prefix of the final file ending at a line's end."""
    s = launch(name="traj-live")
    c = s.client(timeout=120)
    ep = c.create("fixture/alpha")["episode_id"]
    done = threading.Event()
    failure = []

    def writer():
        cc = s.client(timeout=120)
        try:
            content = "L" * (1 << 20)  # one megabyte-sized line per step: appends take a while
            for i in range(12):
                cc.step(ep, actions=[{"tool": "Write", "args": {"file_path": f"w{i % 2}.txt",
                                                                 "content": content}}] * 3)
        except Exception as e:  # noqa: BLE001 - reported below
            failure.append(e)
        finally:
            done.set()
            cc.close()

    t = threading.Thread(target=writer)
    t.start()
    downloads = []
    while not done.is_set():
        r = c.get(f"/v1/episodes/{ep}/trajectory")
        assert r.status == 200, r
        downloads.append(r.body)
    t.join(60)
    assert not failure, failure
    final = (s.state_dir / "episodes" / ep / "trajectory.jsonl").read_bytes()
    assert c.get(f"/v1/episodes/{ep}/trajectory").body == final
    assert len(downloads) >= 2
    for body in downloads:
        assert body.endswith(b"\n") and final.startswith(body), (len(body), body[-80:])
        for line in body.splitlines():
            json.loads(line)
    c.close()

