"""Episode lifecycle: close, purge, step limits, capacity (429) and the idle reaper (410)."""
import os
import threading
import time

from procs import pids_where


def _procs_with(marker):
    """Pids whose command line holds marker as one argument (jobs must die with their episode)."""
    return pids_where(lambda argv: marker.encode() in argv)


def _wait_gone(marker, timeout=5):
    deadline = time.monotonic() + timeout
    while _procs_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _procs_with(marker)


# ---- delete ----------------------------------------------------------------------------------

def test_delete_closes(srv, client):
    active = client.get("/v1/health").json["active_episodes"]
    ep = client.create("fixture/alpha")["episode_id"]
    client.tool(ep, "Write", file_path="w.txt", content="x")
    ep_dir = srv.state_dir / "episodes" / ep
    assert (ep_dir / "work" / "w.txt").is_file()
    r = client.delete(f"/v1/episodes/{ep}")
    assert r.status == 200, r
    body = r.json
    assert body["episode_id"] == ep and body["status"] == "closed" and body["purged"] is False
    assert client.get("/v1/health").json["active_episodes"] == active
    assert not (ep_dir / "work").exists()  # the workspace is freed
    assert (ep_dir / "trajectory.jsonl").is_file()
    # Idempotent.
    again = client.delete(f"/v1/episodes/{ep}")
    assert again.status == 200 and again.json["status"] == "closed"
    assert client.state(ep)["status"] == "closed"
    # Gone for everything that needs the workspace or another turn.
    for method, path, body in (
            ("POST", "/step", {"action": {"tool": "Bash", "args": {"command": "true"}}}),
            ("POST", "/tools/Bash", {"command": "true"}),
            ("POST", "/reset", {}),
            ("GET", "/files/w.txt", None),
            ("PUT", "/files/new.txt", b"x")):
        r = client.request(method, f"/v1/episodes/{ep}{path}", body=body)
        assert r.status == 410, (method, path, r)
        err = r.error()
        assert err["code"] == "EPISODE_CLOSED" and err["retryable"] is False
    # The trajectory is kept, ending with the close.
    traj = client.trajectory(ep)
    assert [x["type"] for x in traj] == ["reset", "step", "close"]
    assert traj[-1]["reason"] == "closed"


def test_delete_purge(srv, client):
    ep = client.create("fixture/alpha")["episode_id"]
    client.tool(ep, "Bash", command="true")
    r = client.delete(f"/v1/episodes/{ep}?purge=true")
    assert r.status == 200 and r.json["purged"] is True
    for path in ("", "/trajectory", "/files/model.py"):
        g = client.get(f"/v1/episodes/{ep}{path}")
        assert g.status == 404, (path, g)
        assert g.error()["code"] == "EPISODE_NOT_FOUND"
    assert client.delete(f"/v1/episodes/{ep}").status == 404
    assert not (srv.state_dir / "episodes" / ep).exists()
    assert ep not in {e["episode_id"] for e in client.get("/v1/episodes").json["episodes"]}


def test_purge_after_close(srv, client):
    ep = client.create("fixture/alpha")["episode_id"]
    assert client.delete(f"/v1/episodes/{ep}").status == 200
    assert client.get(f"/v1/episodes/{ep}/trajectory").status == 200
    r = client.delete(f"/v1/episodes/{ep}?purge=1")
    assert r.status == 200 and r.json["purged"] is True
    assert client.get(f"/v1/episodes/{ep}/trajectory").status == 404
    assert not (srv.state_dir / "episodes" / ep).exists()


def test_delete_kills_background_jobs(client):
    ep = client.create("fixture/alpha")["episode_id"]
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000}"
    obs = client.tool(ep, "Bash", command=f"sleep 3{marker}", run_in_background=True)
    assert obs["is_error"] is False
    deadline = time.monotonic() + 3
    while not _procs_with(f"3{marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _procs_with(f"3{marker}"), "the background job never started"
    assert client.delete(f"/v1/episodes/{ep}").status == 200
    assert _wait_gone(f"3{marker}") == []


def test_reset_kills_background_jobs(client, episode):
    marker = f"4{time.monotonic_ns() % 100000}.{os.getpid() % 1000}"
    bid = client.tool(episode, "Bash", command=f"sleep {marker}",
                      run_in_background=True)["data"]["bash_id"]
    deadline = time.monotonic() + 3
    while not _procs_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.post(f"/v1/episodes/{episode}/reset").status == 200
    assert _wait_gone(marker) == []
    obs = client.tool(episode, "BashOutput", bash_id=bid)
    assert obs["data"]["error_code"] == "JOB_NOT_FOUND"


# ---- step limit ------------------------------------------------------------------------------

def test_max_steps_truncates(client):
    ep = client.create("fixture/alpha", options={"max_steps": 2})["episode_id"]
    assert client.state(ep)["max_steps"] == 2
    one = client.step(ep, {"tool": "Bash", "args": {"command": "true"}})
    assert one["truncated"] is False and one["info"]["steps_left"] == 1
    two = client.step(ep, {"tool": "Bash", "args": {"command": "true"}})
    assert two["truncated"] is True and two["terminated"] is False
    assert two["info"]["steps_left"] == 0
    st = client.state(ep)
    assert st["status"] == "truncated" and st["truncated"] is True and st["step"] == 2
    r = client.post(f"/v1/episodes/{ep}/step",
                    {"action": {"tool": "Bash", "args": {"command": "true"}}})
    assert r.status == 409, r
    assert r.error()["code"] == "EPISODE_TERMINATED"
    steps = [x for x in client.trajectory(ep) if x["type"] == "step"]
    assert [s["truncated"] for s in steps] == [False, True]
    # The workspace is still readable, and a reset starts over.
    assert client.get(f"/v1/episodes/{ep}/files/model.py").status == 200
    assert client.post(f"/v1/episodes/{ep}/reset").status == 200
    st = client.state(ep)
    assert st["status"] == "active" and st["step"] == 0 and st["max_steps"] == 2
    client.delete(f"/v1/episodes/{ep}")


def test_max_wall_time_truncates(client):
    ep = client.create("fixture/alpha", options={"max_wall_s": 1})["episode_id"]
    first = client.step(ep, {"tool": "Bash", "args": {"command": "sleep 1.1"}})
    assert first["truncated"] is True
    assert client.state(ep)["status"] == "truncated"
    client.delete(f"/v1/episodes/{ep}")


# ---- capacity --------------------------------------------------------------------------------

def test_capacity(launch):
    s = launch(args=["--max-episodes", "2"], name="capacity")
    c = s.client()
    a = c.create("fixture/alpha")["episode_id"]
    b = c.create("fixture/beta")["episode_id"]
    h = c.get("/v1/health").json
    assert h["active_episodes"] == 2 and h["max_episodes"] == 2
    r = c.post("/v1/episodes", {"task_id": "fixture/alpha"})
    assert r.status == 429, r
    assert r.header("retry-after") == "3"
    err = r.error()
    assert err["code"] == "CAPACITY_REACHED" and err["retryable"] is True
    assert err["details"] == {"active": 2, "max": 2}
    # In a batch, the refusal is per item.
    br = c.post("/v1/batch", {"requests": [{"op": "create"}, {"op": "get", "episode_id": a}]})
    items = br.json["responses"]
    assert items[0]["status"] == 429 and items[0]["retry_after_s"] == 3
    assert items[1]["status"] == 200
    assert len(c.get("/v1/episodes").json["episodes"]) == 2
    # A closed episode frees its slot (it stays listed).
    assert c.delete(f"/v1/episodes/{a}").status == 200
    d = c.create("fixture/alpha")["episode_id"]
    assert c.get("/v1/health").json["active_episodes"] == 2
    r = c.post("/v1/episodes", {})
    assert r.status == 429
    # Resetting an open episode needs no new slot.
    assert c.post(f"/v1/episodes/{b}/reset").status == 200
    listed = {e["episode_id"]: e["status"] for e in c.get("/v1/episodes").json["episodes"]}
    assert listed == {a: "closed", b: "active", d: "active"}
    c.close()


def test_capacity_under_concurrent_creates(launch):
    s = launch(args=["--max-episodes", "3"], name="capacity-race")
    statuses = []
    lock = threading.Lock()

    def create():
        c = s.client()
        try:
            r = c.post("/v1/episodes", {"task_id": "fixture/alpha"})
            with lock:
                statuses.append(r.status)
        finally:
            c.close()

    threads = [threading.Thread(target=create) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(statuses) == [201] * 3 + [429] * 9
    c = s.client()
    assert c.get("/v1/health").json["active_episodes"] == 3
    assert len(c.get("/v1/episodes").json["episodes"]) == 3
    c.close()


# ---- reaper ----------------------------------------------------------------------------------

def test_idle_reaper(launch):
    s = launch(args=["--idle-timeout", "1"], config={"reaper_interval_s": 0.1}, name="reaper")
    c = s.client()
    idle = c.create("fixture/alpha")["episode_id"]
    c.tool(idle, "Write", file_path="w.txt", content="x")
    kept = c.create("fixture/alpha", options={"idle_timeout_s": 100})["episode_id"]
    busy = c.create("fixture/beta")["episode_id"]
    assert c.state(idle)["expires_at"]
    # busy runs one step longer than the idle timeout: a running step is never reaped.
    slow = c.step(busy, {"tool": "Bash", "args": {"command": "sleep 1.6; echo alive"}})
    assert slow["observation"]["data"]["stdout"] == "alive\n"
    assert c.state(busy)["status"] == "active"
    deadline = time.monotonic() + 5
    while c.state(idle)["status"] == "active" and time.monotonic() < deadline:
        time.sleep(0.1)
    st = c.state(idle)
    assert st["status"] == "expired", st
    r = c.post(f"/v1/episodes/{idle}/step",
               {"action": {"tool": "Bash", "args": {"command": "true"}}})
    assert r.status == 410, r
    err = r.error()
    assert err["code"] == "EPISODE_EXPIRED" and err["retryable"] is False
    assert c.get(f"/v1/episodes/{idle}/files/w.txt").status == 410
    traj = c.trajectory(idle)
    assert [x["type"] for x in traj] == ["reset", "step", "close"]
    assert traj[-1]["reason"] == "reaped"
    assert not (s.state_dir / "episodes" / idle / "work").exists()
    assert c.state(kept)["status"] == "active"
    assert s.wait_for_log(lambda rec: rec.get("event") == "reaped", 1) is not None
    expired = {e["episode_id"] for e in c.get("/v1/episodes?status=expired").json["episodes"]}
    assert idle in expired and kept not in expired
    # Delete of an expired episode is fine and keeps it expired.
    d = c.delete(f"/v1/episodes/{idle}")
    assert d.status == 200 and d.json["status"] == "expired"
    c.close()
