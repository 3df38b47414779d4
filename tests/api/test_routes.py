"""Every route of the API (DESIGN.md §3.2): bodies, headers and the state changes they cause."""
import hashlib
import json
import re

from conftest import ALPHA_CPU, ALPHA_GPU, BASE_CONFIG, BETA_GPU, GAMMA_GPU

TOOL_NAMES = {"Bash", "BashOutput", "KillBash", "Read", "Write", "Edit", "MultiEdit", "Glob",
              "Grep", "Compile", "Verify", "Profile", "Submit"}
# Claude Code argument names (DESIGN.md §3.2): each tool's schema must offer at least these.
TOOL_ARGS = {
    "Bash": {"command", "timeout", "run_in_background"},
    "Read": {"file_path", "offset", "limit"},
    "Write": {"file_path", "content"},
    "Edit": {"file_path", "old_string", "new_string", "replace_all"},
    "MultiEdit": {"file_path", "edits"},
    "Glob": {"pattern", "path"},
    "Grep": {"pattern", "path", "glob", "output_mode", "-i", "-n", "-A", "-B", "-C",
             "head_limit"},
    "BashOutput": {"bash_id"},
    "KillBash": {"shell_id"},
    "Compile": set(),
    "Verify": set(),
    "Profile": set(),
    "Submit": {"files"},  # single-turn mode: Submit carries the files
}
EP_ID = re.compile(r"^ep_[0-9a-f]{16}$")


# ---- server-level routes ---------------------------------------------------------------------

def test_health(client):
    r = client.get("/v1/health")
    assert r.status == 200
    assert r.header("content-type").startswith("application/json")
    assert r.header("x-request-id")
    body = r.json
    assert body["status"] == "ok"
    assert body["max_episodes"] == 1024
    assert isinstance(body["active_episodes"], int)
    assert body["gpus"] == []
    # the object cache's cap (the default, 20 GiB); nothing counted before a Compile stores
    assert body["evaluation"]["object_cache"] == {
        "bytes": None, "max_bytes": 20 << 30, "trims": 0, "evicted_files": 0,
        "evicted_bytes": 0}


def test_object_cache_cap_is_configurable(launch):
    """--build-cache-max-bytes overrides the config file's build_cache_max_bytes; 0 is no cap."""
    s = launch(config={"build_cache_max_bytes": 0}, args=["--build-cache-max-bytes", "12345"])
    assert s.client().get("/v1/health").json["evaluation"]["object_cache"]["max_bytes"] == 12345
    s = launch(config={"build_cache_max_bytes": 0})
    assert s.client().get("/v1/health").json["evaluation"]["object_cache"]["max_bytes"] is None


def test_servers_on_one_host_get_disjoint_uids(launch, tmp_path):
    """Two servers sharing a host (and a lock dir) claim different blocks of the uid range; each
    episode's commands run as a uid of its server's block, held until the episode closes."""
    locks = str(tmp_path / "uid-locks")
    servers = [launch(config={"sandbox_uid_lock_dir": locks}) for _ in range(2)]
    ranges = []
    for s in servers:
        c = s.client()
        uids = c.get("/v1/health").json["sandbox"]["uids"]
        assert uids["claimed"] is True and uids["in_use"] == 0, uids
        assert uids["last"] - uids["first"] + 1 == 10000
        ranges.append((uids["first"], uids["last"]))
        ep = c.create("fixture/alpha")["episode_id"]
        uid = int(c.tool(ep, "Bash", command="id -u")["data"]["stdout"])
        assert uids["first"] <= uid <= uids["last"]
        assert c.get("/v1/health").json["sandbox"]["uids"]["in_use"] == 1
        assert c.delete(f"/v1/episodes/{ep}").status == 200
        assert c.get("/v1/health").json["sandbox"]["uids"]["in_use"] == 0
    (a0, a1), (b0, b1) = sorted(ranges)
    assert a1 < b0, ranges


def test_sandbox_totals_cap_all_commands(launch):
    """sandbox_total_pids caps every sandboxed command of the server together: one command's
    60 sleepers stop at the total, though its own pids limit is far higher; health says it."""
    s = launch(config={"sandbox_total_pids": 40})
    c = s.client()
    totals = c.get("/v1/health").json["sandbox"]["totals"]
    assert totals["pids"] == 40 and totals["memory_bytes"] > 0, totals
    ep = c.create("fixture/alpha")["episode_id"]
    forker = ("import os, time\n"
              "kids = []\n"
              "for _ in range(60):\n"
              "    try:\n"
              "        pid = os.fork()\n"
              "    except OSError:\n"
              "        break\n"
              "    if pid == 0:\n"
              "        time.sleep(5)\n"
              "        os._exit(0)\n"
              "    kids.append(pid)\n"
              "print(len(kids))\n"
              "for pid in kids:\n"
              "    os.kill(pid, 9)\n")
    c.tool(ep, "Write", file_path="forker.py", content=forker)
    obs = c.tool(ep, "Bash", command="python3 forker.py")
    running = int(obs["data"]["stdout"].split()[-1])
    print("forks under the total:", running)
    assert 10 < running < 40, obs
    assert c.delete(f"/v1/episodes/{ep}").status == 200


def test_health_counts_open_episodes(client):
    before = client.get("/v1/health").json["active_episodes"]
    ep = client.create("fixture/alpha")["episode_id"]
    assert client.get("/v1/health").json["active_episodes"] == before + 1
    assert client.delete(f"/v1/episodes/{ep}").status == 200
    assert client.get("/v1/health").json["active_episodes"] == before


def test_info(client):
    r = client.get("/v1/info")
    assert r.status == 200
    info = r.json
    assert info["name"] == "kgym-env"
    assert re.match(r"^\d+\.\d+\.\d+", info["version"])
    assert set(info["tools"]) == TOOL_NAMES
    tasks = client.get("/v1/tasks").json
    assert info["task_count"] == tasks["count"] >= 3
    lim = info["limits"]
    assert lim["max_episodes"] == 1024
    assert lim["max_steps"] == 200
    assert lim["max_actions_per_turn"] == 16
    assert lim["max_body_bytes"] == BASE_CONFIG["max_body_bytes"]
    assert lim["max_file_bytes"] == BASE_CONFIG["max_file_bytes"]
    assert lim["disk_quota_bytes"] == BASE_CONFIG["disk_quota_bytes"]
    assert lim["bash_timeout_ms"] == BASE_CONFIG["bash_timeout_ms"]
    assert lim["bash_timeout_max_ms"] == BASE_CONFIG["bash_timeout_max_ms"]
    assert lim["max_output_chars"] == BASE_CONFIG["max_output_chars"]
    assert info["durability"] == "fsync"
    assert info["draining"] is False


def _check_schema(name, schema):
    assert schema["type"] == "object", name
    assert TOOL_ARGS[name] <= set(schema["properties"]), (name, schema["properties"].keys())
    assert set(schema.get("required", [])) <= set(schema["properties"])


def test_tools_openai_is_default(client):
    r = client.get("/v1/tools")
    assert r.status == 200
    doc = r.json
    assert doc["format"] == "openai"
    names = []
    for t in doc["tools"]:
        assert set(t) == {"type", "function"}
        assert t["type"] == "function"
        fn = t["function"]
        assert set(fn) == {"name", "description", "parameters"}
        assert fn["description"]
        _check_schema(fn["name"], fn["parameters"])
        names.append(fn["name"])
    assert sorted(names) == sorted(TOOL_NAMES)
    explicit = client.get("/v1/tools?format=openai")
    assert explicit.status == 200 and explicit.json == doc


def test_tools_anthropic(client):
    openai = {t["function"]["name"]: t["function"] for t in client.get("/v1/tools").json["tools"]}
    r = client.get("/v1/tools?format=anthropic")
    assert r.status == 200
    doc = r.json
    assert doc["format"] == "anthropic"
    assert {t["name"] for t in doc["tools"]} == TOOL_NAMES
    for t in doc["tools"]:
        assert set(t) == {"name", "description", "input_schema"}
        _check_schema(t["name"], t["input_schema"])
        assert t["input_schema"] == openai[t["name"]]["parameters"]
        assert t["description"] == openai[t["name"]]["description"]


def test_tools_bad_format(client):
    r = client.get("/v1/tools?format=xml")
    assert r.status == 400
    err = r.error()
    assert err["code"] == "BAD_REQUEST"
    assert "xml" in err["message"]


def test_tasks_list(client):
    r = client.get("/v1/tasks")
    assert r.status == 200
    doc = r.json
    assert doc["count"] == len(doc["tasks"])
    by_id = {t["id"]: t for t in doc["tasks"]}
    assert len(by_id) == len(doc["tasks"]), "task ids must be unique"
    alpha = by_id["fixture/alpha"]
    # the digests name the references (clients key stored figures on them): sha256 of the code
    detail = client.get("/v1/tasks/fixture/alpha").json
    sha = hashlib.sha256(detail["code"].encode()).hexdigest()
    sha_cpu = hashlib.sha256(detail["code_cpu"].encode()).hexdigest()
    assert alpha == {"id": "fixture/alpha", "suite": "fixture", "level": 1, "name": "Alpha",
                     "description": "ReLU of a matrix (fixture).", "has_cpu_variant": True,
                     "code_sha256": sha, "code_cpu_sha256": sha_cpu}
    assert by_id["fixture/deep/gamma"]["has_cpu_variant"] is False
    assert by_id["fixture/deep/gamma"]["code_cpu_sha256"] is None
    for t in doc["tasks"]:  # summaries, not the code
        assert "code" not in t


def test_tasks_filters(client):
    doc = client.get("/v1/tasks?suite=fixture").json
    assert doc["count"] == 3
    assert [t["id"] for t in doc["tasks"]] == ["fixture/alpha", "fixture/beta",
                                               "fixture/deep/gamma"]
    lvl = client.get("/v1/tasks?suite=fixture&level=2").json
    assert lvl["count"] == 2
    assert {t["id"] for t in lvl["tasks"]} == {"fixture/beta", "fixture/deep/gamma"}
    assert all(t["level"] == 2 for t in client.get("/v1/tasks?level=2").json["tasks"])
    none = client.get("/v1/tasks?suite=no-such-suite").json
    assert none == {"count": 0, "tasks": []}


def test_tasks_limit_offset(client):
    full = [t["id"] for t in client.get("/v1/tasks?suite=fixture").json["tasks"]]
    page = client.get("/v1/tasks?suite=fixture&limit=1&offset=1").json
    assert page["count"] == 3  # the number that matched, not the page size
    assert [t["id"] for t in page["tasks"]] == full[1:2]
    pages = []
    for off in range(0, 4, 2):
        pages += [t["id"] for t in
                  client.get(f"/v1/tasks?suite=fixture&limit=2&offset={off}").json["tasks"]]
    assert pages == full
    assert client.get("/v1/tasks?suite=fixture&limit=0").json["tasks"] == []
    assert client.get("/v1/tasks?suite=fixture&offset=10").json["tasks"] == []


def test_tasks_bad_filters(client):
    for q in ("level=0", "level=abc", "limit=-1", "offset=-5"):
        r = client.get(f"/v1/tasks?{q}")
        assert r.status == 400, q
        assert r.error()["code"] == "BAD_REQUEST"


def test_task_detail_with_slashes(client):
    r = client.get("/v1/tasks/fixture/alpha")
    assert r.status == 200
    t = r.json
    assert t["id"] == "fixture/alpha" and t["suite"] == "fixture" and t["level"] == 1
    assert t["code"] == ALPHA_GPU
    assert t["code_cpu"] == ALPHA_CPU
    assert t["atol"] == 0.01 and t["rtol"] == 0.01
    g = client.get("/v1/tasks/fixture/deep/gamma")
    assert g.status == 200
    assert g.json["id"] == "fixture/deep/gamma"
    assert g.json["code"] == GAMMA_GPU
    assert g.json["code_cpu"] is None


def test_task_unknown(client):
    for path in ("/v1/tasks/fixture/nope", "/v1/tasks/fixture", "/v1/tasks/fixture/alpha/x"):
        r = client.get(path)
        assert r.status == 404, path
        assert r.error()["code"] == "TASK_NOT_FOUND"


def test_task_baselines_bad_requests(client):
    """POST /v1/tasks/{id}/baselines: protocol faults are clear errors and measure nothing (the
    measurement itself is tested through kgym-bench, tests/kgym_bench)."""
    r = client.post("/v1/tasks/fixture/nope/baselines", {})
    assert r.status == 404 and r.error()["code"] == "TASK_NOT_FOUND"
    for body in ({"variant": "tpu"}, {"variant": 3}, {"phase": "cook"}, {"phase": None},
                 {"remeasure": "yes"}, {"remeasure": 1}, {"phase": "warmup", "remeasure": True}):
        r = client.post("/v1/tasks/fixture/alpha/baselines", body)
        assert r.status == 400 and r.error()["code"] == "BAD_REQUEST", body
    r = client.request("POST", "/v1/tasks/fixture/alpha/baselines", b"{not json")
    assert r.status == 400
    r = client.get("/v1/tasks/fixture/alpha/baselines")
    assert r.status == 405 and r.error()["code"] == "METHOD_NOT_ALLOWED"
    assert client.get("/v1/health").status == 200  # still serving


# ---- create, list, state ---------------------------------------------------------------------

def test_create_episode(client):
    r = client.post("/v1/episodes", {"task_id": "fixture/alpha", "seed": 42})
    assert r.status == 201, r
    doc = r.json
    ep = doc["episode_id"]
    assert EP_ID.match(ep), ep
    assert r.header("location") == f"/v1/episodes/{ep}"
    obs = doc["observation"]
    assert obs["is_error"] is False
    assert "fixture/alpha" in obs["content"]
    assert ALPHA_GPU.strip() in obs["content"]  # the reference is shown to the agent
    assert obs["data"]["task_id"] == "fixture/alpha"
    assert obs["data"]["workdir"] == "/workspace"
    assert obs["data"]["variant"] == "gpu"
    assert "model.py" in obs["data"]["files"]
    info = doc["info"]
    assert info["task_id"] == "fixture/alpha"
    assert info["seed"] == 42
    assert info["step"] == 0
    assert info["max_steps"] == 200
    st = client.state(ep)
    assert st["episode_id"] == ep
    assert st["status"] == "active"
    assert st["task_id"] == "fixture/alpha"
    assert st["seed"] == 42
    assert st["step"] == 0
    assert st["busy"] is False and st["terminated"] is False and st["truncated"] is False
    # The workspace really holds the task's model.py.
    assert client.get(f"/v1/episodes/{ep}/files/model.py").body == ALPHA_GPU.encode()
    client.delete(f"/v1/episodes/{ep}")


def test_create_ids_are_random_and_seed_is_drawn(client):
    a = client.create("fixture/alpha")
    b = client.create("fixture/alpha")
    for d in (a, b):
        client.delete(f"/v1/episodes/{d['episode_id']}")
    assert a["episode_id"] != b["episode_id"]
    assert isinstance(a["info"]["seed"], int) and a["info"]["seed"] >= 0
    assert a["info"]["seed"] != b["info"]["seed"]


def test_create_cpu_variant(client):
    doc = client.create("fixture/alpha", options={"variant": "cpu"})
    ep = doc["episode_id"]
    try:
        assert doc["observation"]["data"]["variant"] == "cpu"
        assert "ALPHA_CPU_MARKER" in doc["observation"]["content"]
        assert client.get(f"/v1/episodes/{ep}/files/model.py").body == ALPHA_CPU.encode()
        assert client.state(ep)["options"] == {"variant": "cpu"}
    finally:
        client.delete(f"/v1/episodes/{ep}")


def test_create_default_task(client):
    first = client.get("/v1/tasks?limit=1").json["tasks"][0]["id"]
    for body in (None, b"", {}):
        r = client.post("/v1/episodes", body)
        assert r.status == 201, (body, r)
        assert r.json["info"]["task_id"] == first
        client.delete(f"/v1/episodes/{r.json['episode_id']}")


def test_create_validation(client):
    active = client.get("/v1/health").json["active_episodes"]
    cases = [
        ({"task_id": "fixture/alpha", "options": {"no_such_option": 1}}, "no_such_option"),
        ({"task_id": "fixture/alpha", "options": {"max_steps": 0}}, "max_steps"),
        ({"task_id": "fixture/alpha", "options": {"variant": "tpu"}}, "variant"),
        ({"task_id": "fixture/alpha", "options": {"reward_on": "sometimes"}}, "reward_on"),
        ({"task_id": "fixture/alpha", "options": "fast"}, "options"),
        ({"task_id": "fixture/alpha", "bogus": True}, "bogus"),
        ({"task_id": "fixture/alpha", "seed": -1}, "seed"),
        ({"task_id": "fixture/alpha", "seed": "7"}, "seed"),
        ({"task_id": 5}, "task_id"),
        ({"task_id": "fixture/deep/gamma", "options": {"variant": "cpu"}}, "CPU"),
    ]
    for body, word in cases:
        r = client.post("/v1/episodes", body)
        assert r.status == 422, (body, r)
        err = r.error()
        assert err["code"] == "VALIDATION_ERROR", body
        assert err["retryable"] is False
        assert word in err["message"], (word, err)
    bad_opt = client.post("/v1/episodes", {"options": {"max_steps": 0}}).error()
    assert bad_opt["details"] == {"option": "max_steps"}
    assert client.get("/v1/health").json["active_episodes"] == active  # nothing was created


def test_create_unknown_task(client):
    r = client.post("/v1/episodes", {"task_id": "fixture/missing"})
    assert r.status == 404
    err = r.error()
    assert err["code"] == "TASK_NOT_FOUND"
    assert "fixture/missing" in err["message"]


def test_create_body_not_an_object(client):
    for body in ([], "x", 3):
        r = client.post("/v1/episodes", json.dumps(body))
        assert r.status in (400, 422), (body, r)
        r.error()


def test_list_episodes_and_status_filter(client):
    a = client.create("fixture/alpha", tags={"who": "list-test"})["episode_id"]
    b = client.create("fixture/beta")["episode_id"]
    assert client.delete(f"/v1/episodes/{b}").status == 200
    doc = client.get("/v1/episodes").json
    assert doc["count"] == len(doc["episodes"])
    by_id = {e["episode_id"]: e for e in doc["episodes"]}
    assert by_id[a]["status"] == "active" and by_id[a]["task_id"] == "fixture/alpha"
    assert by_id[a]["tags"] == {"who": "list-test"}
    assert by_id[b]["status"] == "closed" and by_id[b]["task_id"] == "fixture/beta"
    closed = client.get("/v1/episodes?status=closed").json
    ids = {e["episode_id"] for e in closed["episodes"]}
    assert b in ids and a not in ids
    assert all(e["status"] == "closed" for e in closed["episodes"])
    active = client.get("/v1/episodes?status=active").json
    ids = {e["episode_id"] for e in active["episodes"]}
    assert a in ids and b not in ids
    assert client.get("/v1/episodes?status=nonsense").json == {"count": 0, "episodes": []}
    client.delete(f"/v1/episodes/{a}")


def test_state_counts_steps(client, episode):
    assert client.state(episode)["step"] == 0
    first = client.step(episode, {"tool": "Bash", "args": {"command": "true"}})
    assert first["info"]["step"] == 1
    assert first["info"]["steps_left"] == 199
    second = client.step(episode, {"tool": "Bash", "args": {"command": "true"}})
    assert second["info"]["step"] == 2 and second["info"]["steps_left"] == 198
    st = client.state(episode)
    assert st["step"] == 2
    assert st["status"] == "active" and st["busy"] is False


# ---- reset -----------------------------------------------------------------------------------

def test_reset_new_task_and_seed(client, episode):
    client.tool(episode, "Write", file_path="notes.txt", content="before reset\n")
    assert client.put(f"/v1/episodes/{episode}/files/up.bin", b"\x00\x01").status == 201
    assert client.state(episode)["step"] == 1
    r = client.post(f"/v1/episodes/{episode}/reset", {"task_id": "fixture/beta", "seed": 7})
    assert r.status == 200, r
    doc = r.json
    assert doc["observation"]["data"]["task_id"] == "fixture/beta"
    assert "BETA_GPU_MARKER" in doc["observation"]["content"]
    assert doc["info"]["seed"] == 7 and doc["info"]["step"] == 0
    st = client.state(episode)
    assert (st["task_id"], st["seed"], st["step"], st["status"]) == ("fixture/beta", 7, 0,
                                                                     "active")
    # A fresh workspace: earlier files are gone, model.py is the new task's.
    for name in ("notes.txt", "up.bin"):
        g = client.get(f"/v1/episodes/{episode}/files/{name}")
        assert g.status == 404, g
        assert g.error()["code"] == "FILE_NOT_FOUND"
    obs = client.tool(episode, "Read", file_path="notes.txt")
    assert obs["is_error"] and obs["data"]["error_code"] == "FILE_NOT_FOUND"
    assert client.get(f"/v1/episodes/{episode}/files/model.py").body == BETA_GPU.encode()
    resets = [r for r in client.trajectory(episode) if r["type"] == "reset"]
    assert [(x["task_id"], x["seed"]) for x in resets][-1] == ("fixture/beta", 7)
    assert len(resets) == 2


def test_reset_keeps_task_without_body(client, episode):
    client.tool(episode, "Bash", command="true")
    r = client.post(f"/v1/episodes/{episode}/reset")
    assert r.status == 200, r
    assert r.json["info"]["task_id"] == "fixture/alpha"
    assert client.state(episode)["step"] == 0


def test_reset_unknown_task_leaves_episode(client, episode):
    client.tool(episode, "Write", file_path="keep.txt", content="kept")
    r = client.post(f"/v1/episodes/{episode}/reset", {"task_id": "fixture/nope"})
    assert r.status == 404 and r.error()["code"] == "TASK_NOT_FOUND"
    st = client.state(episode)
    assert st["task_id"] == "fixture/alpha" and st["step"] == 1
    assert client.get(f"/v1/episodes/{episode}/files/keep.txt").body == b"kept"


# ---- step: the action forms ------------------------------------------------------------------

def test_step_single_action(client, episode):
    out = client.step(episode, {"tool": "Bash", "args": {"command": "echo hello"},
                                "call_id": "c-1"})
    assert set(out) == {"observation", "reward", "terminated", "truncated", "info"}
    assert out["reward"] == 0 and out["terminated"] is False and out["truncated"] is False
    obs = out["observation"]
    assert {"tool", "call_id", "is_error", "content", "data"} <= set(obs)
    assert obs["tool"] == "Bash" and obs["call_id"] == "c-1" and obs["is_error"] is False
    assert "hello" in obs["content"]
    assert obs["data"]["exit_code"] == 0 and obs["data"]["stdout"] == "hello\n"
    info = out["info"]
    assert info["step"] == 1 and info["max_steps"] == 200
    assert "expires_at" in info and "timing" in info


def test_step_actions_run_in_order(client, episode):
    out = client.step(episode, actions=[
        {"tool": "Write", "args": {"file_path": "seq.txt", "content": "one\n"}, "call_id": "a"},
        {"tool": "Bash", "args": {"command": "cat seq.txt; echo two >> seq.txt"},
         "call_id": "b"},
        {"tool": "Read", "args": {"file_path": "/workspace/seq.txt"}, "call_id": "c"},
    ])
    assert "observation" not in out
    obs = out["observations"]
    assert [o["tool"] for o in obs] == ["Write", "Bash", "Read"]
    assert [o["call_id"] for o in obs] == ["a", "b", "c"]
    assert not any(o["is_error"] for o in obs)
    assert obs[1]["data"]["stdout"] == "one\n"
    assert "one" in obs[2]["content"] and "two" in obs[2]["content"]
    assert out["info"]["step"] == 1  # one turn, however many actions
    assert client.state(episode)["step"] == 1


def test_step_openai_tool_call_verbatim(client, episode):
    call = {"id": "call_abc123", "type": "function",
            "function": {"name": "Write",
                         "arguments": json.dumps({"file_path": "oa.txt", "content": "openai"})}}
    obs = client.step(episode, call)["observation"]
    assert obs["is_error"] is False, obs
    assert obs["tool"] == "Write" and obs["call_id"] == "call_abc123"
    assert client.get(f"/v1/episodes/{episode}/files/oa.txt").body == b"openai"
    # Arguments given as an object work too.
    call2 = {"id": "call_2", "type": "function",
             "function": {"name": "Read", "arguments": {"file_path": "oa.txt"}}}
    obs2 = client.step(episode, call2)["observation"]
    assert obs2["is_error"] is False and "openai" in obs2["content"]


def test_step_anthropic_tool_use(client, episode):
    use = {"type": "tool_use", "id": "toolu_01XYZ", "name": "Bash",
           "input": {"command": "echo from-claude"}}
    obs = client.step(episode, use)["observation"]
    assert obs["is_error"] is False, obs
    assert obs["tool"] == "Bash" and obs["call_id"] == "toolu_01XYZ"
    assert obs["data"]["stdout"] == "from-claude\n"


def test_step_mixed_forms_in_one_turn(client, episode):
    out = client.step(episode, actions=[
        {"tool": "Write", "args": {"file_path": "m.txt", "content": "x"}},
        {"id": "call_9", "type": "function",
         "function": {"name": "Bash", "arguments": "{\"command\": \"cat m.txt\"}"}},
        {"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {"file_path": "m.txt"}},
    ])
    obs = out["observations"]
    assert [o["call_id"] for o in obs] == ["", "call_9", "toolu_9"]
    assert obs[1]["data"]["stdout"] == "x"
    assert not any(o["is_error"] for o in obs)


def test_tool_shorthand(client, episode):
    r = client.post(f"/v1/episodes/{episode}/tools/Bash", {"command": "echo short"})
    assert r.status == 200, r
    obs = r.json["observation"]
    assert obs["tool"] == "Bash" and obs["data"]["stdout"] == "short\n"
    # Tool names are case-insensitive; the observation uses the canonical name.
    r = client.post(f"/v1/episodes/{episode}/tools/write",
                    {"file_path": "sh.txt", "content": "lower"})
    assert r.status == 200 and r.json["observation"]["tool"] == "Write"
    r = client.post(f"/v1/episodes/{episode}/tools/READ", {"file_path": "sh.txt"})
    assert r.json["observation"]["tool"] == "Read" and "lower" in r.json["observation"]["content"]
    assert client.state(episode)["step"] == 3
    traj = client.trajectory(episode)
    assert [s["actions"][0]["tool"] for s in traj if s["type"] == "step"] == ["Bash", "Write",
                                                                            "Read"]


def test_tool_shorthand_unknown_tool_is_in_band(client, episode):
    r = client.post(f"/v1/episodes/{episode}/tools/Teleport", {"where": "mars"})
    assert r.status == 200, r
    obs = r.json["observation"]
    assert obs["is_error"] and obs["data"]["error_code"] == "UNKNOWN_TOOL"


# ---- trajectory ------------------------------------------------------------------------------

def test_trajectory_records_every_step(client, episode):
    s1 = client.step(episode, {"tool": "Bash", "args": {"command": "echo t1"}, "call_id": "x1"})
    s2 = client.step(episode, actions=[
        {"tool": "Write", "args": {"file_path": "t.txt", "content": "t2"}, "call_id": "x2"},
        {"tool": "Read", "args": {"file_path": "t.txt"}, "call_id": "x3"}])
    r = client.get(f"/v1/episodes/{episode}/trajectory")
    assert r.status == 200
    assert r.header("content-type").startswith("application/x-ndjson")
    lines = client.trajectory(episode)
    assert [x["type"] for x in lines] == ["reset", "step", "step"]
    reset = lines[0]
    assert reset["episode_id"] == episode and reset["task_id"] == "fixture/alpha"
    assert reset["seed"] == 1
    assert "fixture/alpha" in reset["observation"]["content"]
    one, two = lines[1], lines[2]
    assert one["step"] == 1 and two["step"] == 2
    assert one["actions"] == [{"tool": "Bash", "call_id": "x1", "args": {"command": "echo t1"}}]
    assert one["observations"][0]["content"] == s1["observation"]["content"]
    assert one["observations"][0]["data"] == s1["observation"]["data"]
    assert [a["call_id"] for a in two["actions"]] == ["x2", "x3"]
    assert two["actions"][0]["args"] == {"file_path": "t.txt", "content": "t2"}
    assert [o["content"] for o in two["observations"]] == [o["content"] for o in
                                                           s2["observations"]]
    for rec in (one, two):
        assert rec["reward"] == 0 and rec["terminated"] is False and rec["truncated"] is False
        assert isinstance(rec["ts"], (int, float))


# ---- files -----------------------------------------------------------------------------------

def test_file_upload_and_download(client, episode):
    base = f"/v1/episodes/{episode}/files"
    r = client.put(f"{base}/src/new.txt", b"hello\n")
    assert r.status == 201, r
    assert r.json == {"path": "/workspace/src/new.txt", "bytes": 6, "created": True}
    g = client.get(f"{base}/src/new.txt")
    assert g.status == 200 and g.body == b"hello\n"
    assert g.header("content-type") == "application/octet-stream"
    r2 = client.put(f"{base}/src/new.txt", b"replaced")
    assert r2.status == 200 and r2.json["created"] is False and r2.json["bytes"] == 8
    assert client.get(f"{base}/src/new.txt").body == b"replaced"
    # The agent's tools see the upload.
    obs = client.tool(episode, "Read", file_path="src/new.txt")
    assert "replaced" in obs["content"]
    # Uploads are recorded in the trajectory, with the content when it is text.
    ups = [x for x in client.trajectory(episode) if x["type"] == "upload"]
    assert len(ups) == 2
    assert ups[0]["path"] == "/workspace/src/new.txt" and ups[0]["bytes"] == 6
    assert ups[0]["content"] == "hello\n" and ups[0]["created"] is True
    assert ups[1]["content"] == "replaced" and ups[1]["created"] is False


def test_file_binary_roundtrip(client, episode):
    data = bytes(range(256)) * 8 + b"\xff\xfe\x00\x00tail"
    base = f"/v1/episodes/{episode}/files"
    assert client.put(f"{base}/blob.bin", data).status == 201
    g = client.get(f"{base}/blob.bin")
    assert g.status == 200 and g.body == data
    up = [x for x in client.trajectory(episode) if x["type"] == "upload"][-1]
    assert up["bytes"] == len(data) and "content" not in up
    empty = client.put(f"{base}/empty.txt", b"")
    assert empty.status == 201 and empty.json["bytes"] == 0
    assert client.get(f"{base}/empty.txt").body == b""


def test_file_download_fixed_file(client, episode):
    r = client.get(f"/v1/episodes/{episode}/files/model.py")
    assert r.status == 200 and r.body == ALPHA_GPU.encode()
    r = client.get(f"/v1/episodes/{episode}/files/%2Fworkspace%2Fmodel.py")
    assert r.status == 200 and r.body == ALPHA_GPU.encode()


def test_file_upload_fixed_file_refused(client, episode):
    base = f"/v1/episodes/{episode}/files"
    for path in ("model.py", "./model.py", "sub/../model.py", "%2Fworkspace%2Fmodel.py",
                 "binding.cpp", "binding_registry.h"):
        r = client.put(f"{base}/{path}", b"print('pwned')\n")
        assert r.status == 403, (path, r)
        assert r.error()["code"] == "READ_ONLY_FILE"
    assert client.get(f"{base}/model.py").body == ALPHA_GPU.encode()
    assert not [x for x in client.trajectory(episode) if x["type"] == "upload"]


def test_file_traversal_refused(srv, client, episode):
    base = f"/v1/episodes/{episode}/files"
    ep_dir = srv.state_dir / "episodes" / episode
    assert (ep_dir / "trajectory.jsonl").is_file()
    for path in ("../escape.txt", "a/../../escape.txt", "%2E%2E/escape.txt",
                 "%2Fetc%2Fescape.txt"):
        r = client.put(f"{base}/{path}", b"x")
        assert r.status == 403, (path, r)
        assert r.error()["code"] == "PATH_OUTSIDE_WORKSPACE"
    assert not (ep_dir / "escape.txt").exists()
    assert not (srv.state_dir / "episodes" / "escape.txt").exists()
    for path in ("../trajectory.jsonl", "../../../../../../etc/passwd", "%2Fetc%2Fpasswd"):
        r = client.get(f"{base}/{path}")
        assert r.status == 403, (path, r)
        assert r.error()["code"] == "PATH_OUTSIDE_WORKSPACE"
        assert b"root:" not in r.body


def test_file_missing(client, episode):
    r = client.get(f"/v1/episodes/{episode}/files/nope.txt")
    assert r.status == 404
    err = r.error()
    assert err["code"] == "FILE_NOT_FOUND" and err["details"]["path"] == "/workspace/nope.txt"


def test_file_upload_over_file_cap(client, episode):
    big = b"a" * (BASE_CONFIG["max_file_bytes"] + 1)
    r = client.put(f"/v1/episodes/{episode}/files/big.txt", big)
    assert r.status == 413, r
    assert r.error()["code"] == "PAYLOAD_TOO_LARGE"
    assert client.get(f"/v1/episodes/{episode}/files/big.txt").status == 404


def test_directory_listing_root(client, episode):
    client.put(f"/v1/episodes/{episode}/files/sub/x.txt", b"12345")
    r = client.get(f"/v1/episodes/{episode}/files/.")
    assert r.status == 200, r
    doc = r.json
    assert doc["path"] == "/workspace"
    entries = {e["name"]: e for e in doc["entries"]}
    assert entries["model.py"]["type"] == "file"
    assert entries["model.py"]["size"] == len(ALPHA_GPU.encode())
    assert entries["sub"]["type"] == "dir"
    assert "." not in entries and ".." not in entries


def test_directory_listing_root_empty_path(client, episode):
    """GET .../files/ (and .../files) name the workspace root: a listing, like files/."""
    for path in (f"/v1/episodes/{episode}/files/", f"/v1/episodes/{episode}/files"):
        r = client.get(path)
        assert r.status == 200, (path, r)
        assert r.json["path"] == "/workspace"
        assert "model.py" in {e["name"] for e in r.json["entries"]}


def test_directory_listing_subdir(client, episode):
    client.put(f"/v1/episodes/{episode}/files/sub/x.txt", b"12345")
    client.put(f"/v1/episodes/{episode}/files/sub/deeper/y.txt", b"1")
    for path in ("sub", "sub/", "%2Fworkspace%2Fsub"):
        r = client.get(f"/v1/episodes/{episode}/files/{path}")
        assert r.status == 200, (path, r)
        doc = r.json
        assert doc["path"] == "/workspace/sub"
        entries = {e["name"]: e for e in doc["entries"]}
        assert entries == {"x.txt": {"name": "x.txt", "type": "file", "size": 5},
                           "deeper": entries["deeper"]}
        assert entries["deeper"]["type"] == "dir"


def test_file_unicode_name(client, episode):
    base = f"/v1/episodes/{episode}/files"
    r = client.put(f"{base}/%C3%A9t%C3%A9/%E2%9C%93.txt", "caf\u00e9".encode())
    assert r.status == 201, r
    assert r.json["path"] == "/workspace/\u00e9t\u00e9/\u2713.txt"
    assert client.get(f"{base}/%C3%A9t%C3%A9/%E2%9C%93.txt").body == "caf\u00e9".encode()
    obs = client.tool(episode, "Read", file_path="\u00e9t\u00e9/\u2713.txt")
    assert obs["is_error"] is False and "caf\u00e9" in obs["content"]
    listing = client.get(f"{base}/.").json
    assert "\u00e9t\u00e9" in {e["name"] for e in listing["entries"]}


def test_keep_alive(srv):
    """HTTP/1.1 keep-alive: many requests, errors included, on one connection."""
    c = srv.client()
    try:
        assert c.get("/v1/health").status == 200
        sock = c.conn.sock
        ep = c.create("fixture/alpha")["episode_id"]
        for path in ("/v1/info", "/v1/nothing", f"/v1/episodes/{ep}", "/v1/tools?format=x",
                     f"/v1/episodes/{ep}/trajectory", "/metrics"):
            c.get(path)
        assert c.post(f"/v1/episodes/{ep}/step", b"{bad").status == 400
        c.tool(ep, "Bash", command="true")
        assert c.put(f"/v1/episodes/{ep}/files/k.txt", b"k").status == 201
        assert c.delete(f"/v1/episodes/{ep}").status == 200
        assert c.conn is not None and c.conn.sock is sock
    finally:
        c.close()
