"""Trajectories survive crashes and restarts; SIGTERM drains (DESIGN.md §3.1)."""
import json
import signal
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
    assert s.wait_for_log(lambda r: r.get("event") == "draining", 3) is not None

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
    """A SIGKILLed server cannot stop its episodes' background jobs; the next server on the same
    host does, before it serves: their cgroups are killed and removed."""
    s = launch(name="orphans")
    c = s.client()
    ep = c.create("fixture/alpha")["episode_id"]
    obs = c.tool(ep, "Bash", command="sleep 1000", run_in_background=True)
    assert not obs["is_error"], obs
    uid = int(c.tool(ep, "Bash", command="id -u")["data"]["stdout"])
    c.close()

    def procs_of(u):
        out = subprocess.run(["ps", "-o", "pid=", "-u", str(u)], capture_output=True, text=True)
        return out.stdout.split()

    deadline = time.monotonic() + 5
    while not procs_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs_of(uid), "control: the job runs while the server is alive"
    s.kill9()
    time.sleep(0.3)
    assert procs_of(uid), "control: a SIGKILLed server leaves the job running"
    s.restart()
    deadline = time.monotonic() + 5
    while procs_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs_of(uid) == []
