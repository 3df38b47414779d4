"""Hostile and malformed input. Protocol faults are HTTP errors with the one envelope; tool
failures are in-band (200, is_error, data.error_code) and recorded (DESIGN.md §3.2). After each
test the server still serves and an unrelated episode's files are untouched."""
import http.client
import json
import os
import threading
import time

import pytest

from conftest import ALPHA_GPU, BASE_CONFIG

SENTINEL_TEXT = b"sentinel: nobody may change this\n"


@pytest.fixture(scope="module")
def sentinel(srv):
    """An episode nobody touches: its files and trajectory must survive every attack."""
    c = srv.client()
    ep = c.create("fixture/alpha")["episode_id"]
    assert c.put(f"/v1/episodes/{ep}/files/keep/sentinel.txt", SENTINEL_TEXT).status == 201
    lines = len(c.trajectory(ep))
    listing = c.get(f"/v1/episodes/{ep}/files/.").json
    c.close()
    return ep, lines, listing


@pytest.fixture(autouse=True)
def still_serving(srv, sentinel):
    yield
    assert srv.running(), f"the server died:\n{srv.stderr_text()[-3000:]}"
    c = srv.client()
    try:
        h = c.get("/v1/health")
        assert h.status == 200 and h.json["status"] == "ok", h
        ep, lines, listing = sentinel
        base = f"/v1/episodes/{ep}/files"
        assert c.get(f"{base}/keep/sentinel.txt").body == SENTINEL_TEXT
        assert c.get(f"{base}/model.py").body == ALPHA_GPU.encode()
        assert c.get(f"{base}/.").json == listing
        assert len(c.trajectory(ep)) == lines
        assert c.state(ep)["step"] == 0
    finally:
        c.close()


def step_raw(client, ep, raw, headers=None):
    return client.post(f"/v1/episodes/{ep}/step", raw,
                       headers=headers or {"Content-Type": "application/json"})


def in_band(client, ep, action):
    """One action, expected to come back as an in-band error (200)."""
    r = client.post(f"/v1/episodes/{ep}/step", {"action": action})
    assert r.status == 200, r
    obs = r.json["observation"]
    assert obs["is_error"] is True, obs
    return obs


# ---- JSON and body faults --------------------------------------------------------------------

def test_invalid_json(client, episode):
    for raw in (b"{not json", b'{"action": ', b"", b"[1, 2", b'{"a": 1} trailing'):
        r = step_raw(client, episode, raw)
        assert r.status == 400, (raw, r)
        err = r.error()
        assert err["code"] == "INVALID_JSON" and err["retryable"] is False
    r = step_raw(client, episode, b"{not json")
    assert set(r.error()["details"]) >= {"line", "column"}
    assert client.post("/v1/episodes", b"{oops").error()["code"] == "INVALID_JSON"
    assert client.post("/v1/batch", b"{oops").error()["code"] == "INVALID_JSON"
    assert client.post(f"/v1/episodes/{episode}/reset", b"{oops").error()["code"] == \
        "INVALID_JSON"
    assert client.state(episode)["step"] == 0
    assert [x["type"] for x in client.trajectory(episode)] == ["reset"]


def test_invalid_utf8_body(client, episode):
    raw = b'{"action": {"tool": "Bash", "args": {"command": "echo \xff\xfe"}}}'
    r = step_raw(client, episode, raw)
    assert r.status == 400, r
    assert r.error()["code"] == "INVALID_JSON"
    r = client.post("/v1/episodes", b'{"task_id": "fixture/\xc3"}',
                    headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.error()["code"] == "INVALID_JSON"
    # A lone surrogate escape is not valid Unicode either.
    r = step_raw(client, episode, b'{"action": {"tool": "Read", "args": {"file_path": "\\ud800"}}}')
    assert r.status == 400 and r.error()["code"] == "INVALID_JSON"
    assert client.state(episode)["step"] == 0


def test_deeply_nested_and_duplicate_keys(client, episode):
    r = step_raw(client, episode, b"[" * 200000)
    assert r.status == 400 and r.error()["code"] == "INVALID_JSON"
    r = step_raw(client, episode, b'{"action": {"tool": "Bash"}, "action": {"tool": "Read"}}')
    assert r.status == 400 and r.error()["code"] == "INVALID_JSON"


def test_step_body_shape_faults(client, episode):
    cases = [
        {"actions": {"tool": "Bash"}},          # not an array
        {"actions": "Bash"},
        {"actions": []},                         # empty
        {},                                      # neither
        {"action": {"tool": "Bash", "args": {"command": "true"}},
         "actions": [{"tool": "Bash", "args": {"command": "true"}}]},  # both
        [{"tool": "Bash"}],                      # not an object
    ]
    for body in cases:
        r = client.post(f"/v1/episodes/{episode}/step", body)
        assert r.status == 400, (body, r)
        assert r.error()["code"] == "BAD_REQUEST", body
    many = [{"tool": "Bash", "args": {"command": "true"}}] * 17
    r = client.post(f"/v1/episodes/{episode}/step", {"actions": many})
    assert r.status == 400
    assert r.error()["details"] == {"max_actions_per_turn": 16}
    assert client.state(episode)["step"] == 0
    assert [x["type"] for x in client.trajectory(episode)] == ["reset"]
    # 16 is allowed.
    out = client.step(episode, actions=many[:16])
    assert len(out["observations"]) == 16


def test_action_of_wrong_type_is_in_band(client, episode):
    for action in (5, "Bash", None, [1]):
        obs = in_band(client, episode, action)
        assert obs["data"]["error_code"] == "INVALID_TOOL_CALL", (action, obs)
    out = client.step(episode, actions=[7, {"tool": "Bash", "args": {"command": "echo after"}}])
    assert out["observations"][0]["data"]["error_code"] == "INVALID_TOOL_CALL"
    assert out["observations"][1]["data"]["stdout"] == "after\n"  # the turn goes on
    traj = [x for x in client.trajectory(episode) if x["type"] == "step"]
    assert len(traj) == 5
    assert traj[0]["actions"][0]["raw"] == 5  # recorded as sent


def test_tool_args_of_wrong_type_name_the_field(client, episode):
    cases = [
        ("Read", {"file_path": 5}, "file_path"),
        ("Read", {"file_path": "model.py", "limit": "ten"}, "limit"),
        ("Bash", {"command": ["ls"]}, "command"),
        ("Bash", {"command": "true", "timeout": "fast"}, "timeout"),
        ("Bash", {"command": "true", "run_in_background": "yes"}, "run_in_background"),
        ("Edit", {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": 1},
         "replace_all"),
        ("MultiEdit", {"file_path": "a", "edits": [{"old_string": "x"}]}, "new_string"),
        ("MultiEdit", {"file_path": "a", "edits": "x->y"}, "edits"),
        ("Write", {"file_path": "a"}, "content"),
        ("Read", {"file_path": "model.py", "color": "red"}, "color"),
        ("Grep", {"pattern": "x", "-A": -1}, "-A"),
        ("Glob", {}, "pattern"),
    ]
    for tool, args, field in cases:
        obs = in_band(client, episode, {"tool": tool, "args": args})
        assert obs["data"]["error_code"] == "INVALID_TOOL_CALL", (tool, args, obs)
        assert field in obs["content"], (field, obs["content"])
        assert obs["tool"] == tool
    # Arguments that are not an object at all.
    for args in (["model.py"], 3, "not json"):
        obs = in_band(client, episode, {"tool": "Read", "args": args})
        assert obs["data"]["error_code"] == "INVALID_TOOL_CALL", (args, obs)
    assert client.get(f"/v1/episodes/{episode}/files/a").status == 404


def test_unknown_tool_recorded(client, episode):
    obs = in_band(client, episode, {"tool": "RmRf", "args": {"path": "/"}, "call_id": "u1"})
    assert obs["data"]["error_code"] == "UNKNOWN_TOOL"
    assert obs["data"]["tool"] == "RmRf"
    assert obs["call_id"] == "u1"
    assert "RmRf" in obs["content"]
    step = [x for x in client.trajectory(episode) if x["type"] == "step"]
    assert len(step) == 1
    assert step[0]["actions"][0]["tool"] == "RmRf"
    assert step[0]["observations"][0]["data"]["error_code"] == "UNKNOWN_TOOL"
    assert client.state(episode)["step"] == 1


def test_malformed_openai_arguments(client, episode):
    call = {"id": "call_bad", "type": "function",
            "function": {"name": "Write", "arguments": "{\"file_path\": \"x.txt\", \"content\":"}}
    obs = in_band(client, episode, call)
    assert obs["data"]["error_code"] == "INVALID_TOOL_CALL"
    assert obs["call_id"] == "call_bad"
    assert client.get(f"/v1/episodes/{episode}/files/x.txt").status == 404
    nameless = in_band(client, episode, {"id": "c2", "type": "function",
                                         "function": {"arguments": "{}"}})
    assert nameless["data"]["error_code"] == "INVALID_TOOL_CALL"
    unknown = in_band(client, episode, {"id": "c3", "type": "function",
                                        "function": {"name": "Nope", "arguments": "{}"}})
    assert unknown["data"]["error_code"] == "UNKNOWN_TOOL"
    rec = [x for x in client.trajectory(episode) if x["type"] == "step"][0]
    assert rec["actions"][0]["raw"] == call  # the malformed call is kept verbatim


def test_body_too_large(srv, client, episode):
    big = b'{"action": {"tool": "Write", "args": {"file_path": "big", "content": "' + \
        b"a" * (10 << 20) + b'"}}}'
    c = srv.client()
    try:
        r = c.post(f"/v1/episodes/{episode}/step", big,
                   headers={"Content-Type": "application/json"})
    finally:
        c.close()
    assert r.status == 413, r
    err = r.error()
    assert err["code"] == "PAYLOAD_TOO_LARGE"
    assert err["details"]["max_body_bytes"] == BASE_CONFIG["max_body_bytes"]
    assert client.state(episode)["step"] == 0
    assert client.get(f"/v1/episodes/{episode}/files/big").status == 404


def test_body_too_large_chunked(srv, episode, client):
    """No Content-Length: the limit is enforced while the body streams in."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        def chunks():
            yield b'{"action": {"tool": "Write", "args": {"file_path": "big", "content": "'
            for _ in range(10):
                yield b"a" * (1 << 20)
            yield b'"}}}'
        conn.request("POST", f"/v1/episodes/{episode}/step", body=chunks(),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    assert r.status == 413, body
    assert json.loads(body)["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert client.state(episode)["step"] == 0


# ---- paths -----------------------------------------------------------------------------------

OUTSIDE_PATHS = ["../escape.txt", "/etc/passwd", "/workspace/../etc/passwd", "a/../../x",
                 "/workspacefoo/x", "/tmp/x", "../../../../../../../etc/passwd"]


def test_paths_outside_workspace(srv, client, episode, tmp_path):
    absolute = tmp_path / "abs.txt"
    for p in OUTSIDE_PATHS + [str(absolute)]:
        obs = in_band(client, episode, {"tool": "Read", "args": {"file_path": p}})
        assert obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE", (p, obs)
        assert "root:" not in obs["content"]
        obs = in_band(client, episode, {"tool": "Write", "args": {"file_path": p,
                                                                   "content": "x"}})
        assert obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE", (p, obs)
        obs = in_band(client, episode, {"tool": "Edit", "args": {
            "file_path": p, "old_string": "root", "new_string": "toor"}})
        assert obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE", (p, obs)
    for tool, args in (("Glob", {"pattern": "*", "path": "/etc"}),
                       ("Glob", {"pattern": "*", "path": ".."}),
                       ("Grep", {"pattern": "root", "path": "/etc/passwd"}),
                       ("Grep", {"pattern": "x", "path": "../"})):
        obs = in_band(client, episode, {"tool": tool, "args": args})
        assert obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE", (tool, obs)
    ep_dir = srv.state_dir / "episodes" / episode
    assert not (ep_dir / "escape.txt").exists()
    assert not absolute.exists()


def test_symlink_to_outside_file(srv, client, episode, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside secret\n")
    client.tool(episode, "Bash", command=f"ln -s /etc/passwd leak && ln -s {outside} mine")
    obs = in_band(client, episode, {"tool": "Read", "args": {"file_path": "leak"}})
    assert obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE"
    assert "root:" not in obs["content"]
    for action in ({"tool": "Read", "args": {"file_path": "mine"}},
                   {"tool": "Write", "args": {"file_path": "mine", "content": "pwned"}},
                   {"tool": "Edit", "args": {"file_path": "mine", "old_string": "secret",
                                             "new_string": "pwned"}}):
        obs = in_band(client, episode, action)
        assert obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE", (action, obs)
        assert "outside secret" not in obs["content"]
    grep = client.tool(episode, "Grep", pattern="root:|outside secret", output_mode="content")
    assert "root:" not in grep["content"] and "outside secret" not in grep["content"]
    base = f"/v1/episodes/{episode}/files"
    g = client.get(f"{base}/leak")
    assert g.status == 403 and g.error()["code"] == "PATH_OUTSIDE_WORKSPACE"
    p = client.put(f"{base}/mine", b"pwned")
    assert p.status == 403 and p.error()["code"] == "PATH_OUTSIDE_WORKSPACE"
    assert outside.read_text() == "outside secret\n"


def test_symlink_to_outside_dir(srv, client, episode, tmp_path):
    outdir = tmp_path / "outdir"
    outdir.mkdir()
    (outdir / "inner.txt").write_text("inner secret\n")
    ep_dir = srv.state_dir / "episodes" / episode
    client.tool(episode, "Bash", command=f"ln -s /etc etcdir && ln -s {outdir} outdir && "
                                         "ln -s .. up")
    for action in (
            {"tool": "Read", "args": {"file_path": "etcdir/passwd"}},
            {"tool": "Read", "args": {"file_path": "outdir/inner.txt"}},
            {"tool": "Read", "args": {"file_path": "up/trajectory.jsonl"}},
            {"tool": "Read", "args": {"file_path": "up/meta.json"}},
            {"tool": "Write", "args": {"file_path": "outdir/new.txt", "content": "x"}},
            {"tool": "Write", "args": {"file_path": "up/planted.txt", "content": "x"}},
            {"tool": "Edit", "args": {"file_path": "outdir/inner.txt", "old_string": "secret",
                                      "new_string": "gone"}},
            {"tool": "Glob", "args": {"pattern": "*", "path": "etcdir"}},
            {"tool": "Grep", "args": {"pattern": "secret", "path": "outdir"}}):
        obs = in_band(client, episode, action)
        assert obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE", (action, obs)
        assert "secret" not in obs["content"] and "root:" not in obs["content"]
    glob = client.tool(episode, "Glob", pattern="**/*")
    assert not any("inner.txt" in f or "passwd" in f for f in glob["data"]["files"])
    base = f"/v1/episodes/{episode}/files"
    assert client.get(f"{base}/outdir/inner.txt").status == 403
    assert client.get(f"{base}/up/trajectory.jsonl").status == 403
    assert client.put(f"{base}/outdir/new.txt", b"x").status == 403
    assert client.put(f"{base}/up/planted.txt", b"x").status == 403
    assert sorted(os.listdir(outdir)) == ["inner.txt"]
    assert (outdir / "inner.txt").read_text() == "inner secret\n"
    assert not (ep_dir / "planted.txt").exists()


def test_symlink_inside_workspace_is_fine(client, episode):
    client.tool(episode, "Bash", command="mkdir d && echo hi > d/real.txt && "
                                         "ln -s d/real.txt alias.txt && ln -s model.py alias.py")
    obs = client.tool(episode, "Read", file_path="alias.txt")
    assert obs["is_error"] is False and "hi" in obs["content"]
    # Writing through a symlink to a fixed file is still refused.
    obs = in_band(client, episode, {"tool": "Write", "args": {"file_path": "alias.py",
                                                               "content": "x"}})
    assert obs["data"]["error_code"] == "READ_ONLY_FILE"
    assert client.put(f"/v1/episodes/{episode}/files/alias.py", b"x").status == 403
    assert client.get(f"/v1/episodes/{episode}/files/model.py").body == ALPHA_GPU.encode()


def test_nul_bytes_in_paths(client, episode):
    for p in ("a\u0000b", "x.txt\u0000/../../escape", "\u0000"):
        obs = in_band(client, episode, {"tool": "Read", "args": {"file_path": p}})
        assert obs["data"]["error_code"] == "INVALID_PATH", (p, obs)
        obs = in_band(client, episode, {"tool": "Write", "args": {"file_path": p,
                                                                   "content": "x"}})
        assert obs["data"]["error_code"] == "INVALID_PATH", (p, obs)
    assert client.get(f"/v1/episodes/{episode}/files/x.txt").status == 404
    assert client.get(f"/v1/episodes/{episode}/files/a").status == 404
    obs = in_band(client, episode, {"tool": "Bash", "args": {"command": "echo a\u0000rm -rf ."}})
    assert obs["data"]["error_code"] == "INVALID_TOOL_CALL"
    obs = in_band(client, episode, {"tool": "Edit", "args": {
        "file_path": "model.py", "old_string": "x\u0000", "new_string": "y"}})
    assert obs["data"]["error_code"] in ("INVALID_TOOL_CALL", "READ_ONLY_FILE")


def test_nul_byte_in_url_path(client, episode):
    """files/n%00ul.txt names a path with a NUL byte: refused, never cut to "n"."""
    r = client.put(f"/v1/episodes/{episode}/files/n%00ul.txt", b"x")
    assert r.status == 400, r
    assert r.error()["code"] == "INVALID_PATH"
    assert client.get(f"/v1/episodes/{episode}/files/n").status == 404
    r = client.get(f"/v1/episodes/{episode}/files/model.py%00.txt")
    assert r.status == 400, r


def test_invalid_utf8_in_url_path(srv, client, episode):
    r = client.put(f"/v1/episodes/{episode}/files/bad%FF%FE.txt", b"x")
    assert r.status == 400, r
    assert r.error()["code"] == "INVALID_PATH"
    r = client.get(f"/v1/episodes/{episode}/files/bad%C3.txt")
    assert r.status == 400 and r.error()["code"] == "INVALID_PATH"
    # The request log stays one JSON object per line.
    srv.records()


def test_invalid_utf8_in_url_keeps_the_envelope(client):
    """Errors about a URL that is not UTF-8 still carry the one error envelope."""
    for method, path, status, code in (
            ("GET", "/v1/%FF", 404, "NOT_FOUND"),
            ("GET", "/v1/tasks/%FF%FE", 404, "TASK_NOT_FOUND"),
            ("GET", "/v1/episodes/%FF", 404, "EPISODE_NOT_FOUND"),
            ("POST", "/v1/episodes/ep_%FF/step", 404, "EPISODE_NOT_FOUND")):
        r = client.request(method, path, body={} if method == "POST" else None)
        assert r.status == status, (path, r)
        assert r.error()["code"] == code, path


def test_empty_and_invalid_paths(client, episode):
    obs = in_band(client, episode, {"tool": "Read", "args": {"file_path": ""}})
    assert obs["data"]["error_code"] == "INVALID_PATH"
    obs = in_band(client, episode, {"tool": "Read", "args": {"file_path": "x" * 5000}})
    assert obs["data"]["error_code"] == "INVALID_PATH"
    obs = in_band(client, episode, {"tool": "Write", "args": {"file_path": ".",
                                                               "content": "x"}})
    assert obs["data"]["error_code"] == "IS_DIRECTORY"


def test_read_binary_and_non_utf8(client, episode):
    base = f"/v1/episodes/{episode}/files"
    client.put(f"{base}/bin.dat", b"\x7fELF\x00\x00\x01binary")
    client.put(f"{base}/latin1.txt", "caf\u00e9\n".encode("latin-1"))
    obs = in_band(client, episode, {"tool": "Read", "args": {"file_path": "bin.dat"}})
    assert obs["data"]["error_code"] == "BINARY_FILE"
    obs = in_band(client, episode, {"tool": "Read", "args": {"file_path": "latin1.txt"}})
    assert obs["data"]["error_code"] == "NOT_UTF8"
    obs = in_band(client, episode, {"tool": "Edit", "args": {
        "file_path": "bin.dat", "old_string": "ELF", "new_string": "FLE"}})
    assert obs["data"]["error_code"] == "BINARY_FILE"
    assert client.get(f"{base}/bin.dat").body == b"\x7fELF\x00\x00\x01binary"
    # Bash output that is not UTF-8 still comes back as valid JSON text.
    out = client.tool(episode, "Bash", command="cat latin1.txt")
    assert out["data"]["exit_code"] == 0
    assert out["data"]["stdout"] == "caf\ufffd\n"


def test_bash_output_with_nul_bytes(client, episode):
    """NUL bytes in a command's output must not cut off what follows them."""
    out = client.tool(episode, "Bash", command="printf 'before\\0after\\n'; echo err >&2")
    assert out["data"]["exit_code"] == 0
    assert out["data"]["stdout"].startswith("before")
    assert "after" in out["data"]["stdout"], out["data"]
    assert "after" in out["content"] and "err" in out["content"], out["content"]


# ---- concurrency -----------------------------------------------------------------------------

def test_concurrent_step_is_busy(srv, client, episode):
    result = {}

    def slow():
        c = srv.client()
        try:
            result["r"] = c.post(f"/v1/episodes/{episode}/step", {
                "action": {"tool": "Bash", "args": {"command": "sleep 1; echo slept"}}})
        finally:
            c.close()

    t = threading.Thread(target=slow)
    t.start()
    deadline = time.monotonic() + 5
    while not client.state(episode)["busy"]:
        assert time.monotonic() < deadline, "the slow step never started"
        time.sleep(0.02)
    r = client.post(f"/v1/episodes/{episode}/step",
                    {"action": {"tool": "Bash", "args": {"command": "echo second"}}})
    assert r.status == 409, r
    err = r.error()
    assert err["code"] == "EPISODE_BUSY" and err["retryable"] is True
    # Other mutations wait their turn too; reads do not block.
    up = client.put(f"/v1/episodes/{episode}/files/during.txt", b"x")
    assert up.status == 409 and up.error()["code"] == "EPISODE_BUSY"
    rs = client.post(f"/v1/episodes/{episode}/reset")
    assert rs.status == 409 and rs.error()["code"] == "EPISODE_BUSY"
    sh = client.post(f"/v1/episodes/{episode}/tools/Bash", {"command": "true"})
    assert sh.status == 409
    t0 = time.monotonic()
    assert client.get(f"/v1/episodes/{episode}/files/model.py").status == 200
    assert client.get(f"/v1/episodes/{episode}/trajectory").status == 200
    assert time.monotonic() - t0 < 0.5
    t.join(10)
    assert result["r"].status == 200, result["r"]
    obs = result["r"].json["observation"]
    assert obs["data"]["exit_code"] == 0 and obs["data"]["stdout"] == "slept\n"
    st = client.state(episode)
    assert st["step"] == 1 and st["busy"] is False
    steps = [x for x in client.trajectory(episode) if x["type"] == "step"]
    assert len(steps) == 1 and steps[0]["actions"][0]["args"]["command"].startswith("sleep")
    assert client.get(f"/v1/episodes/{episode}/files/during.txt").status == 404
    # And the episode takes steps again.
    assert client.tool(episode, "Bash", command="echo again")["data"]["stdout"] == "again\n"


def test_parallel_episodes_do_not_block_each_other(srv, client, new_episode):
    a, b = new_episode(), new_episode()
    done = {}

    def slow():
        c = srv.client()
        try:
            done["r"] = c.step(a, {"tool": "Bash", "args": {"command": "sleep 1"}})
        finally:
            c.close()

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.15)
    t0 = time.monotonic()
    obs = client.tool(b, "Bash", command="echo quick")
    assert obs["data"]["stdout"] == "quick\n"
    assert time.monotonic() - t0 < 0.8
    t.join(10)
    assert done["r"]["observation"]["data"]["exit_code"] == 0


# ---- routing faults --------------------------------------------------------------------------

def test_unknown_routes(client, episode):
    for method, path in (("GET", "/"), ("GET", "/v1"), ("GET", "/v1/nothing"),
                         ("GET", "/v2/health"), ("POST", "/v1/healthz"),
                         ("GET", f"/v1/episodes/{episode}/bogus"),
                         ("POST", f"/v1/episodes/{episode}/step/extra")):
        r = client.request(method, path)
        assert r.status == 404, (method, path, r)
        assert r.error()["code"] == "NOT_FOUND", (method, path)


def test_wrong_methods(client, episode):
    cases = [("DELETE", "/v1/health", "GET"), ("POST", "/v1/info", "GET"),
             ("PUT", "/v1/episodes", "GET, POST"), ("GET", "/v1/batch", "POST"),
             ("POST", "/metrics", "GET"), ("POST", "/v1/tasks", "GET"),
             ("DELETE", "/v1/tasks/fixture/alpha", "GET")]
    for method, path, allowed in cases:
        r = client.request(method, path)
        assert r.status == 405, (method, path, r)
        err = r.error()
        assert err["code"] == "METHOD_NOT_ALLOWED"
        assert err["details"].get("allowed", allowed) == allowed
    for method, path in (("GET", "/step"), ("PUT", "/reset"), ("GET", "/tools/Bash"),
                         ("POST", "/trajectory"), ("POST", ""), ("PUT", ""),
                         ("DELETE", "/files/model.py"), ("POST", "/files/x.txt")):
        r = client.request(method, f"/v1/episodes/{episode}{path}")
        assert r.status == 405, (method, path, r)
        assert r.error()["code"] == "METHOD_NOT_ALLOWED"
    assert client.state(episode)["step"] == 0
    assert client.get(f"/v1/episodes/{episode}/files/x.txt").status == 404


def test_unknown_episode(client):
    ghost = "ep_0123456789abcdef"
    for method, path, body in (("GET", "", None), ("DELETE", "", None),
                               ("POST", "/step", {"action": {"tool": "Bash",
                                                             "args": {"command": "true"}}}),
                               ("POST", "/reset", {}), ("POST", "/tools/Bash",
                                                        {"command": "true"}),
                               ("GET", "/trajectory", None), ("GET", "/files/model.py", None),
                               ("PUT", "/files/x.txt", b"x")):
        r = client.request(method, f"/v1/episodes/{ghost}{path}", body=body)
        assert r.status == 404, (method, path, r)
        err = r.error()
        assert err["code"] == "EPISODE_NOT_FOUND"
        assert err["retryable"] is False
    long_id = "ep_" + "f" * 300
    r = client.get(f"/v1/episodes/{long_id}")
    assert r.status == 404 and r.error()["code"] == "EPISODE_NOT_FOUND"
    r = client.get("/v1/episodes/..%2F..%2Fetc")
    assert r.status == 404
