"""Idempotency-Key replays and POST /v1/batch."""
import threading
import time

STEP = {"action": {"tool": "Bash", "args": {"command": "echo $RANDOM$RANDOM > r.txt; cat r.txt"}}}


def key(name):
    return {"Idempotency-Key": f"{name}-{time.monotonic_ns()}"}


# ---- Idempotency-Key -------------------------------------------------------------------------

def test_step_replay_does_not_run_again(srv, client, episode):
    h = key("step")
    r1 = client.post(f"/v1/episodes/{episode}/step", STEP, headers=h)
    assert r1.status == 200, r1
    lines = len(client.trajectory(episode))
    other = srv.client()  # a retry may arrive on another connection
    try:
        r2 = other.post(f"/v1/episodes/{episode}/step", STEP, headers=h)
    finally:
        other.close()
    assert r2.status == 200
    assert r2.json == r1.json  # the very same response, timings and all
    assert client.state(episode)["step"] == 1
    assert len(client.trajectory(episode)) == lines
    # The command really ran once: the file holds the first run's output.
    rand = r1.json["observation"]["data"]["stdout"]
    assert client.get(f"/v1/episodes/{episode}/files/r.txt").text == rand
    # Without the key the same body runs again.
    r3 = client.post(f"/v1/episodes/{episode}/step", STEP)
    assert r3.status == 200 and client.state(episode)["step"] == 2


def test_step_key_reused_with_other_body(client, episode):
    h = key("reuse")
    assert client.post(f"/v1/episodes/{episode}/step", STEP, headers=h).status == 200
    other = {"action": {"tool": "Bash", "args": {"command": "echo different"}}}
    r = client.post(f"/v1/episodes/{episode}/step", other, headers=h)
    assert r.status == 409, r
    err = r.error()
    assert err["code"] == "IDEMPOTENCY_KEY_REUSED" and err["retryable"] is False
    assert err["details"]["key"] == h["Idempotency-Key"]
    assert client.state(episode)["step"] == 1
    assert len([x for x in client.trajectory(episode) if x["type"] == "step"]) == 1
    # The key is also bound to its route: the same key on the shorthand route is another request.
    r = client.post(f"/v1/episodes/{episode}/tools/Bash", {"command": "echo x"}, headers=h)
    assert r.status == 409


def test_step_keys_are_per_episode(client, new_episode):
    a, b = new_episode(), new_episode()
    h = key("scoped")
    ra = client.post(f"/v1/episodes/{a}/step", STEP, headers=h)
    rb = client.post(f"/v1/episodes/{b}/step", STEP, headers=h)
    assert ra.status == rb.status == 200
    assert client.state(a)["step"] == 1 and client.state(b)["step"] == 1


def test_errors_are_not_replayed(srv, client, episode):
    """A 409 busy is not stored under the key: the retry runs for real."""
    done = {}

    def slow():
        c = srv.client()
        try:
            done["r"] = c.post(f"/v1/episodes/{episode}/step",
                               {"action": {"tool": "Bash", "args": {"command": "sleep 0.6"}}})
        finally:
            c.close()

    t = threading.Thread(target=slow)
    t.start()
    deadline = time.monotonic() + 5
    while not client.state(episode)["busy"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    h = key("busy")
    r = client.post(f"/v1/episodes/{episode}/step", STEP, headers=h)
    assert r.status == 409 and r.error()["code"] == "EPISODE_BUSY"
    t.join(10)
    assert done["r"].status == 200
    r = client.post(f"/v1/episodes/{episode}/step", STEP, headers=h)
    assert r.status == 200, r
    assert client.state(episode)["step"] == 2


def test_create_with_key_twice(client):
    before = client.get("/v1/health").json["active_episodes"]
    h = key("create")
    body = {"task_id": "fixture/beta", "seed": 3}
    r1 = client.post("/v1/episodes", body, headers=h)
    r2 = client.post("/v1/episodes", body, headers=h)
    assert r1.status == 201 and r2.status == 201, (r1, r2)
    ep = r1.json["episode_id"]
    assert r2.json["episode_id"] == ep
    assert r2.header("location") == r1.header("location") == f"/v1/episodes/{ep}"
    assert client.get("/v1/health").json["active_episodes"] == before + 1
    listed = [e for e in client.get("/v1/episodes").json["episodes"] if e["task_id"] ==
              "fixture/beta" and e["seed"] == 3 and e["status"] == "active"]
    assert [e["episode_id"] for e in listed] == [ep]
    r3 = client.post("/v1/episodes", {"task_id": "fixture/alpha"}, headers=h)
    assert r3.status == 409 and r3.error()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert client.get("/v1/health").json["active_episodes"] == before + 1
    client.delete(f"/v1/episodes/{ep}")


def test_reset_replay(client, episode):
    h = key("reset")
    body = {"task_id": "fixture/beta", "seed": 11}
    r1 = client.post(f"/v1/episodes/{episode}/reset", body, headers=h)
    assert r1.status == 200
    client.tool(episode, "Write", file_path="after.txt", content="kept")
    r2 = client.post(f"/v1/episodes/{episode}/reset", body, headers=h)
    assert r2.status == 200 and r2.json == r1.json
    # Not reset a second time: the step and the file are still there.
    assert client.state(episode)["step"] == 1
    assert client.get(f"/v1/episodes/{episode}/files/after.txt").body == b"kept"
    assert len([x for x in client.trajectory(episode) if x["type"] == "reset"]) == 2


def test_upload_replay(client, episode):
    h = key("put")
    url = f"/v1/episodes/{episode}/files/u.txt"
    r1 = client.put(url, b"v1", headers=h)
    r2 = client.put(url, b"v1", headers=h)
    assert r1.status == 201 and r2.status == 201 and r2.json == r1.json
    assert len([x for x in client.trajectory(episode) if x["type"] == "upload"]) == 1
    r3 = client.put(url, b"v2", headers=h)
    assert r3.status == 409 and r3.error()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert client.get(url).body == b"v1"


# ---- batch -----------------------------------------------------------------------------------

def test_batch_in_order_with_a_failing_item(client, episode):
    ghost = "ep_00000000deadbeef"
    r = client.post("/v1/batch", {"requests": [
        {"op": "create", "body": {"task_id": "fixture/alpha", "seed": 5}},
        {"op": "create", "task_id": "fixture/beta"},
        {"op": "step", "episode_id": episode,
         "body": {"action": {"tool": "Write", "args": {"file_path": "b.txt",
                                                       "content": "batch"}}}},
        {"op": "step", "episode_id": ghost,
         "action": {"tool": "Bash", "args": {"command": "true"}}},
        {"op": "step", "episode_id": episode,
         "action": {"tool": "Read", "args": {"file_path": "b.txt"}}},
        {"op": "get", "episode_id": episode},
        {"op": "delete", "episode_id": episode},
        {"op": "step", "episode_id": episode,
         "action": {"tool": "Bash", "args": {"command": "true"}}},
    ]})
    assert r.status == 200, r
    res = r.json["responses"]
    assert [x["status"] for x in res] == [201, 201, 200, 404, 200, 200, 200, 410]
    created = [x["body"]["episode_id"] for x in res[:2]]
    assert res[0]["body"]["info"]["seed"] == 5
    assert res[1]["body"]["info"]["task_id"] == "fixture/beta"
    assert res[2]["body"]["observation"]["is_error"] is False
    assert res[3]["body"]["error"]["code"] == "EPISODE_NOT_FOUND"
    assert "batch" in res[4]["body"]["observation"]["content"]  # ran after the write
    assert res[5]["body"]["step"] == 2 and res[5]["body"]["status"] == "active"
    assert res[6]["body"]["status"] == "closed"
    assert res[7]["body"]["error"]["code"] == "EPISODE_CLOSED"
    types = [x["type"] for x in client.trajectory(episode)]
    assert types == ["reset", "step", "step", "close"]
    for ep in created:
        st = client.state(ep)
        assert st["status"] == "active" and st["step"] == 0
        client.delete(f"/v1/episodes/{ep}")


def test_batch_grpo_group(client):
    """A group of episodes on one task, stepped together, then purged."""
    n = 4
    r = client.post("/v1/batch", {"requests": [{"op": "create", "body": {
        "task_id": "fixture/alpha", "seed": 100}} for _ in range(n)]})
    eps = [x["body"]["episode_id"] for x in r.json["responses"]]
    assert len(set(eps)) == n
    r = client.post("/v1/batch", {"requests": [
        {"op": "step", "episode_id": ep, "action": {"tool": "Bash",
                                                    "args": {"command": f"echo member-{i}"}}}
        for i, ep in enumerate(eps)]})
    outs = [x["body"]["observation"]["data"]["stdout"] for x in r.json["responses"]]
    assert outs == [f"member-{i}\n" for i in range(n)]
    r = client.post("/v1/batch", {"requests": [{"op": "delete", "episode_id": ep, "purge": True}
                                               for ep in eps]})
    assert [x["status"] for x in r.json["responses"]] == [200] * n
    assert all(x["body"]["purged"] is True for x in r.json["responses"])
    for ep in eps:
        assert client.get(f"/v1/episodes/{ep}").status == 404


def test_batch_reset_op(client, episode):
    client.tool(episode, "Bash", command="true")
    r = client.post("/v1/batch", {"requests": [
        {"op": "reset", "episode_id": episode, "body": {"task_id": "fixture/beta", "seed": 9}}]})
    item = r.json["responses"][0]
    assert item["status"] == 200 and item["body"]["info"]["seed"] == 9
    st = client.state(episode)
    assert st["task_id"] == "fixture/beta" and st["step"] == 0


def test_batch_bad_items(client, episode):
    r = client.post("/v1/batch", {"requests": [
        "not an object",
        {"episode_id": episode},
        {"op": "explode", "episode_id": episode},
        {"op": "step"},
        {"op": "step", "episode_id": "ep_1/../x", "action": {"tool": "Bash"}},
        {"op": "create", "body": {"task_id": "fixture/nope"}},
        {"op": "create", "body": {"options": {"bogus": 1}}},
        {"op": "step", "episode_id": episode,
         "action": {"tool": "Bash", "args": {"command": "echo still-runs"}}},
    ]})
    assert r.status == 200, r
    res = r.json["responses"]
    assert [x["status"] for x in res] == [400, 400, 400, 400, 400, 404, 422, 200]
    for x in res[:7]:
        assert set(x["body"]["error"]) == {"code", "message", "retryable", "details"}
    assert res[7]["body"]["observation"]["data"]["stdout"] == "still-runs\n"
    assert client.state(episode)["step"] == 1


def test_batch_body_faults(client):
    for body in ({"requests": []}, {"requests": {}}, {}, {"requests": "x"},
                 {"requests": [{"op": "get", "episode_id": "x"}] * 257}):
        r = client.post("/v1/batch", body)
        assert r.status == 400, (str(body)[:80], r)
        assert r.error()["code"] == "BAD_REQUEST"


def test_batch_item_idempotency(client, episode):
    item = {"op": "step", "episode_id": episode, "idempotency_key": f"bk-{time.monotonic_ns()}",
            "action": {"tool": "Bash", "args": {"command": "echo once"}}}
    r1 = client.post("/v1/batch", {"requests": [item]})
    r2 = client.post("/v1/batch", {"requests": [item]})
    assert r1.json["responses"][0] == r2.json["responses"][0]
    assert client.state(episode)["step"] == 1
