"""Every tool, driven through the HTTP API (DESIGN.md §3.2: Claude Code argument names)."""
import time

from conftest import ALPHA_GPU, BASE_CONFIG


def files(client, ep):
    return f"/v1/episodes/{ep}/files"


def ok(obs):
    assert obs["is_error"] is False, obs
    return obs


def err(obs, code):
    assert obs["is_error"] is True, obs
    assert obs["data"]["error_code"] == code, obs
    return obs


# ---- Read ------------------------------------------------------------------------------------

def test_read_numbered_lines(client, episode):
    obs = ok(client.tool(episode, "Read", file_path="model.py"))
    lines = ALPHA_GPU.splitlines()
    assert obs["content"].startswith(f"     1\t{lines[0]}\n")
    assert f"{len(lines):6d}\t{lines[-1]}" in obs["content"]
    d = obs["data"]
    assert d["file_path"] == "/workspace/model.py"
    assert d["total_lines"] == len(lines) and d["lines_returned"] == len(lines)
    assert d["start_line"] == 1 and d["truncated"] is False
    # Absolute /workspace paths name the same file.
    assert client.tool(episode, "Read", file_path="/workspace/model.py")["content"] == \
        obs["content"]


def test_read_offset_limit(client, episode):
    text = "".join(f"line{i}\n" for i in range(1, 11))
    client.put(f"{files(client, episode)}/ten.txt", text.encode())
    obs = ok(client.tool(episode, "Read", file_path="ten.txt", offset=3, limit=2))
    assert "     3\tline3\n     4\tline4\n" in obs["content"]
    assert "line2" not in obs["content"] and "line5" not in obs["content"]
    assert "offset=5" in obs["content"]  # how to read on
    d = obs["data"]
    assert (d["start_line"], d["lines_returned"], d["total_lines"], d["truncated"]) == \
        (3, 2, 10, True)
    past = ok(client.tool(episode, "Read", file_path="ten.txt", offset=50))
    assert past["data"]["lines_returned"] == 0


def test_read_errors(client, episode):
    client.put(f"{files(client, episode)}/d/f.txt", b"x")
    err(client.tool(episode, "Read", file_path="missing.txt"), "FILE_NOT_FOUND")
    err(client.tool(episode, "Read", file_path="d"), "IS_DIRECTORY")
    err(client.tool(episode, "Read", file_path="d/f.txt/deeper"), "NOT_A_DIRECTORY")
    err(client.tool(episode, "Read", file_path="model.py", offset=0), "INVALID_TOOL_CALL")
    client.put(f"{files(client, episode)}/empty.txt", b"")
    empty = ok(client.tool(episode, "Read", file_path="empty.txt"))
    assert "empty" in empty["content"] and empty["data"]["total_lines"] == 0


# ---- Write -----------------------------------------------------------------------------------

def test_write_creates_and_overwrites(client, episode):
    text = "h\u00e9llo \u2713 \U0001F600\n"
    obs = ok(client.tool(episode, "Write", file_path="deep/er/w.txt", content=text))
    assert obs["data"] == {"file_path": "/workspace/deep/er/w.txt",
                           "bytes": len(text.encode()), "created": True}
    assert client.get(f"{files(client, episode)}/deep/er/w.txt").body == text.encode()
    obs = ok(client.tool(episode, "Write", file_path="/workspace/deep/er/w.txt", content="2"))
    assert obs["data"]["created"] is False and obs["data"]["bytes"] == 1
    assert client.get(f"{files(client, episode)}/deep/er/w.txt").body == b"2"


def test_write_keeps_mode(client, episode):
    client.tool(episode, "Write", file_path="run.sh", content="echo one\n")
    client.tool(episode, "Bash", command="chmod +x run.sh")
    client.tool(episode, "Write", file_path="run.sh", content="#!/bin/sh\necho two\n")
    assert client.tool(episode, "Bash", command="./run.sh")["data"]["stdout"] == "two\n"


def test_write_fixed_file_refused(client, episode):
    for name in ("model.py", "/workspace/model.py", "x/../model.py"):
        obs = err(client.tool(episode, "Write", file_path=name, content="hacked"),
                  "READ_ONLY_FILE")
        assert obs["data"]["file_path"] == "/workspace/model.py"
    assert client.get(f"{files(client, episode)}/model.py").body == ALPHA_GPU.encode()


def test_write_too_large(client, episode):
    big = "a" * (BASE_CONFIG["max_file_bytes"] + 10)
    obs = err(client.tool(episode, "Write", file_path="big.txt", content=big), "FILE_TOO_LARGE")
    assert obs["data"]["max_bytes"] == BASE_CONFIG["max_file_bytes"]
    assert client.get(f"{files(client, episode)}/big.txt").status == 404


# ---- Edit and MultiEdit ----------------------------------------------------------------------

def test_edit_unique(client, episode):
    client.tool(episode, "Write", file_path="e.py", content="a = 1\nb = 2\nc = 3\n")
    obs = ok(client.tool(episode, "Edit", file_path="e.py", old_string="b = 2",
                         new_string="b = 20"))
    assert obs["data"] == {"file_path": "/workspace/e.py", "replacements": 1}
    assert "b = 20" in obs["content"]  # the changed part is shown
    assert client.get(f"{files(client, episode)}/e.py").body == b"a = 1\nb = 20\nc = 3\n"


def test_edit_no_match(client, episode):
    client.tool(episode, "Write", file_path="e.py", content="a = 1\n")
    obs = err(client.tool(episode, "Edit", file_path="e.py", old_string="zzz", new_string="y"),
              "EDIT_NO_MATCH")
    assert obs["data"]["file_path"] == "/workspace/e.py"
    assert client.get(f"{files(client, episode)}/e.py").body == b"a = 1\n"


def test_edit_not_unique_then_replace_all(client, episode):
    client.tool(episode, "Write", file_path="e.py", content="x\nx\nx\ny\n")
    obs = err(client.tool(episode, "Edit", file_path="e.py", old_string="x", new_string="z"),
              "EDIT_NOT_UNIQUE")
    assert obs["data"]["matches"] == 3
    assert "3" in obs["content"]
    assert client.get(f"{files(client, episode)}/e.py").body == b"x\nx\nx\ny\n"
    obs = ok(client.tool(episode, "Edit", file_path="e.py", old_string="x", new_string="z",
                         replace_all=True))
    assert obs["data"]["replacements"] == 3
    assert client.get(f"{files(client, episode)}/e.py").body == b"z\nz\nz\ny\n"


def test_edit_other_errors(client, episode):
    client.tool(episode, "Write", file_path="e.py", content="same\n")
    err(client.tool(episode, "Edit", file_path="e.py", old_string="same", new_string="same"),
        "EDIT_NOOP")
    err(client.tool(episode, "Edit", file_path="e.py", old_string="", new_string="x"),
        "INVALID_TOOL_CALL")
    err(client.tool(episode, "Edit", file_path="nope.py", old_string="a", new_string="b"),
        "FILE_NOT_FOUND")
    err(client.tool(episode, "Edit", file_path="model.py", old_string="relu",
                    new_string="gelu"), "READ_ONLY_FILE")
    assert client.get(f"{files(client, episode)}/model.py").body == ALPHA_GPU.encode()


def test_multiedit_in_order(client, episode):
    client.tool(episode, "Write", file_path="m.txt", content="alpha beta\n")
    obs = ok(client.tool(episode, "MultiEdit", file_path="m.txt", edits=[
        {"old_string": "alpha", "new_string": "gamma"},
        {"old_string": "gamma beta", "new_string": "delta"},  # sees the first edit's result
    ]))
    assert obs["data"]["replacements"] == 2
    assert client.get(f"{files(client, episode)}/m.txt").body == b"delta\n"


def test_multiedit_all_or_nothing(client, episode):
    client.tool(episode, "Write", file_path="m.txt", content="one two\n")
    obs = err(client.tool(episode, "MultiEdit", file_path="m.txt", edits=[
        {"old_string": "one", "new_string": "1"},
        {"old_string": "three", "new_string": "3"},
    ]), "EDIT_NO_MATCH")
    assert obs["data"]["edit_index"] == 1
    assert client.get(f"{files(client, episode)}/m.txt").body == b"one two\n"
    err(client.tool(episode, "MultiEdit", file_path="m.txt", edits=[]), "INVALID_TOOL_CALL")


# ---- Glob and Grep ---------------------------------------------------------------------------

def _tree(client, ep):
    """A small tree under t/ (searches are scoped to it: the template has files of its own)."""
    for path, text in {"t/src/a.cu": "int needle = 1;\nNEEDLE two\nthree\n",
                       "t/src/b.py": "needle here\n", "t/top.cu": "nothing\n",
                       "t/src/sub/c.cu": "x\n"}.items():
        ok(client.tool(ep, "Write", file_path=path, content=text))


def test_glob(client, episode):
    _tree(client, episode)
    obs = ok(client.tool(episode, "Glob", pattern="**/*.cu", path="t"))
    assert set(obs["data"]["files"]) == {"/workspace/t/top.cu", "/workspace/t/src/a.cu",
                                         "/workspace/t/src/sub/c.cu"}
    assert obs["data"]["count"] == 3
    for f in obs["data"]["files"]:
        assert f in obs["content"]
    top = ok(client.tool(episode, "Glob", pattern="*.cu", path="/workspace/t"))
    assert top["data"]["files"] == ["/workspace/t/top.cu"]
    sub = ok(client.tool(episode, "Glob", pattern="*.py", path="t/src"))
    assert sub["data"]["files"] == ["/workspace/t/src/b.py"]
    anywhere = ok(client.tool(episode, "Glob", pattern="**/b.py"))
    assert anywhere["data"]["files"] == ["/workspace/t/src/b.py"]
    root = ok(client.tool(episode, "Glob", pattern="*.py"))
    assert "/workspace/model.py" in root["data"]["files"]
    assert not any(f.startswith("/workspace/t/") for f in root["data"]["files"])
    none = ok(client.tool(episode, "Glob", pattern="*.zz"))
    assert none["data"]["count"] == 0 and "No files found" in none["content"]
    err(client.tool(episode, "Glob", pattern="*", path="missing"), "FILE_NOT_FOUND")


def test_grep_modes(client, episode):
    _tree(client, episode)
    fm = ok(client.tool(episode, "Grep", pattern="needle", path="t"))
    assert fm["data"]["mode"] == "files_with_matches"
    assert set(fm["data"]["files"]) == {"/workspace/t/src/a.cu", "/workspace/t/src/b.py"}
    content = ok(client.tool(episode, "Grep", pattern="needle", output_mode="content",
                             path="t", **{"-n": True}))
    assert "/workspace/t/src/a.cu:1:int needle = 1;" in content["content"]
    assert "/workspace/t/src/b.py:1:needle here" in content["content"]
    assert "NEEDLE" not in content["content"]
    ci = ok(client.tool(episode, "Grep", pattern="needle", output_mode="content", path="t",
                        **{"-i": True}))
    assert "NEEDLE two" in ci["content"] and ci["data"]["count"] == 3
    ctx = ok(client.tool(episode, "Grep", pattern="two", output_mode="content",
                         path="t/src/a.cu", **{"-B": 1, "-A": 1}))
    assert "int needle" in ctx["content"] and "three" in ctx["content"]
    cnt = ok(client.tool(episode, "Grep", pattern="needle", output_mode="count", path="t",
                         **{"-i": True}))
    assert "/workspace/t/src/a.cu:2" in cnt["content"]
    assert "/workspace/t/src/b.py:1" in cnt["content"]
    only_py = ok(client.tool(episode, "Grep", pattern="needle", glob="*.py", path="t"))
    assert only_py["data"]["files"] == ["/workspace/t/src/b.py"]
    head = ok(client.tool(episode, "Grep", pattern="needle", output_mode="content", path="t",
                          head_limit=1, **{"-i": True}))
    assert len([ln for ln in head["content"].splitlines() if ln.startswith("/workspace")]) == 1
    assert head["data"]["truncated"] is True
    none = ok(client.tool(episode, "Grep", pattern="absent-word-[0-9]{9}"))
    assert none["data"]["count"] == 0 and "No matches" in none["content"]


def test_grep_errors(client, episode):
    obs = err(client.tool(episode, "Grep", pattern="("), "INVALID_REGEX")
    assert obs["data"]["offset"] == 1
    err(client.tool(episode, "Grep", pattern="x", output_mode="everything"), "INVALID_TOOL_CALL")
    err(client.tool(episode, "Grep", pattern="x", path="../"), "PATH_OUTSIDE_WORKSPACE")


# ---- Bash ------------------------------------------------------------------------------------

def test_bash_exit_code_and_streams(client, episode):
    obs = client.tool(episode, "Bash", command="echo out; echo oops >&2; exit 3")
    d = obs["data"]
    assert d["exit_code"] == 3
    assert d["stdout"] == "out\n" and d["stderr"] == "oops\n"
    assert d["timed_out"] is False
    assert "out" in obs["content"] and "oops" in obs["content"]
    assert obs["content"].rstrip().endswith("[exit code: 3]")
    good = ok(client.tool(episode, "Bash", command="true"))
    assert good["data"]["exit_code"] == 0


def test_bash_environment(client, srv, episode):
    obs = ok(client.tool(episode, "Bash",
                         command="pwd; echo HOME=$HOME; ls; read x; echo read=$?"))
    out = obs["data"]["stdout"].splitlines()
    ws = out[0]
    # Sandboxed (make test runs as root, where the sandbox must be active): the workspace is
    # /workspace and HOME a scratch directory, whatever the host paths are.
    assert client.get("/v1/health").json["sandbox"]["active"] is True
    assert ws == "/workspace"
    assert "HOME=/tmp" in out
    assert "model.py" in out
    assert "read=1" in out  # stdin is closed
    # Each call is a fresh shell: no cd or variable carries over.
    client.tool(episode, "Bash", command="cd /tmp; export KGYM_T=1")
    again = ok(client.tool(episode, "Bash", command="pwd; echo v=$KGYM_T"))
    assert again["data"]["stdout"] == f"{ws}\nv=\n"


def test_bash_timeout(client, episode):
    t0 = time.monotonic()
    obs = err(client.tool(episode, "Bash", command="echo start; sleep 5; echo never",
                          timeout=500), "TIMEOUT")
    assert time.monotonic() - t0 < 3
    d = obs["data"]
    assert d["exit_code"] == 124 and d["timed_out"] is True
    assert d["stdout"] == "start\n"  # partial output kept
    assert "start" in obs["content"] and "never" not in obs["content"]


def test_bash_kills_process_group(client, episode):
    # A child still running when the timeout hits, and one left behind by a command that exits:
    # both must die with their command.
    err(client.tool(episode, "Bash", command="(sleep 1; echo x > timed.txt) & sleep 5",
                    timeout=300), "TIMEOUT")
    ok(client.tool(episode, "Bash", command="(sleep 1; echo x > left.txt) & echo started"))
    time.sleep(1.6)
    listing = client.tool(episode, "Bash", command="ls")["data"]["stdout"].split()
    assert "timed.txt" not in listing and "left.txt" not in listing


def test_bash_output_capped(client, episode):
    obs = ok(client.tool(episode, "Bash", command="seq 1 20000"))
    cap = BASE_CONFIG["max_output_chars"]
    assert len(obs["content"]) <= cap
    assert obs["content"].startswith("1\n2\n3\n")  # head kept
    assert "19999\n20000" in obs["content"]          # tail kept
    assert obs["data"]["truncated"] is True
    assert obs["data"]["exit_code"] == 0


def test_bash_bad_timeout(client, episode):
    err(client.tool(episode, "Bash", command="true", timeout=0), "INVALID_TOOL_CALL")
    obs = err(client.tool(episode, "Bash", command="true",
                          timeout=BASE_CONFIG["bash_timeout_max_ms"] + 1), "INVALID_TOOL_CALL")
    assert "timeout" in obs["content"]


def test_bash_file_size_limit(client, episode):
    """RLIMIT_FSIZE = max_file_bytes: a command writing a bigger file is stopped."""
    cap = BASE_CONFIG["max_file_bytes"]
    obs = err(client.tool(episode, "Bash", command=f"head -c {cap + 4096} /dev/zero > big.bin"),
              "RESOURCE_LIMIT")
    assert obs["data"]["exit_code"] != 0
    size = int(client.tool(episode, "Bash", command="stat -c %s big.bin")["data"]["stdout"])
    assert size <= cap


def test_disk_quota(client, episode):
    quota = BASE_CONFIG["disk_quota_bytes"]
    per = BASE_CONFIG["max_file_bytes"] - 4096
    n = quota // per + 1
    obs = err(client.tool(episode, "Bash", command=f"for i in $(seq {n}); do "
                                                   f"head -c {per} /dev/zero > q$i.bin; done"),
              "DISK_QUOTA_EXCEEDED")
    # The sandboxed workspace is a tmpfs of the quota's size: writes stop at the quota.
    assert "No space left on device" in obs["content"]
    assert quota - per < obs["data"]["disk_usage_bytes"] <= quota
    assert obs["data"]["disk_quota_bytes"] == quota
    # At the quota, nothing more may be written through the tools or uploads.
    err(client.tool(episode, "Write", file_path="more.txt", content="x" * per),
        "DISK_QUOTA_EXCEEDED")
    r = client.put(f"/v1/episodes/{episode}/files/more.txt", b"x" * per)
    assert r.status == 413 and r.error()["code"] == "DISK_QUOTA_EXCEEDED"
    # Deleting files gets the workspace back under its quota.
    ok(client.tool(episode, "Bash", command="rm -f q*.bin"))
    ok(client.tool(episode, "Write", file_path="more.txt", content="x"))


# ---- background jobs -------------------------------------------------------------------------

def _poll_until_done(client, ep, bash_id, deadline_s=8):
    chunks, end = [], time.monotonic() + deadline_s
    while True:
        obs = ok(client.tool(ep, "BashOutput", bash_id=bash_id))
        chunks.append(obs)
        if obs["data"]["status"] != "running" or time.monotonic() > end:
            return chunks
        time.sleep(0.1)


def test_background_job_and_bash_output(client, episode):
    start = ok(client.tool(episode, "Bash", command="echo first; sleep 0.4; echo second >&2",
                           run_in_background=True))
    bid = start["data"]["bash_id"]
    assert bid.startswith("bash_")
    assert bid in start["content"]
    chunks = _poll_until_done(client, episode, bid)
    last = chunks[-1]
    assert last["data"]["status"] == "exited" and last["data"]["exit_code"] == 0
    text = "".join(c["content"] for c in chunks)
    assert "first" in text and "second" in text
    assert text.index("first") < text.index("second")
    # Output is consumed: nothing new afterwards.
    again = ok(client.tool(episode, "BashOutput", bash_id=bid))
    assert again["data"]["new_bytes"] == 0 and "first" not in again["content"]


def test_background_filter(client, episode):
    bid = ok(client.tool(episode, "Bash", command="printf 'keep 1\\ndrop 2\\nkeep 3\\n'",
                         run_in_background=True))["data"]["bash_id"]
    time.sleep(0.3)
    obs = ok(client.tool(episode, "BashOutput", bash_id=bid, filter="^keep"))
    assert "keep 1" in obs["content"] and "keep 3" in obs["content"]
    assert "drop" not in obs["content"]


def test_kill_bash(client, episode):
    bid = ok(client.tool(episode, "Bash", command="echo up; sleep 30",
                         run_in_background=True))["data"]["bash_id"]
    time.sleep(0.2)
    t0 = time.monotonic()
    kill = ok(client.tool(episode, "KillBash", shell_id=bid))
    assert time.monotonic() - t0 < 3
    assert kill["data"]["shell_id"] == bid
    assert kill["data"]["was_running"] is True and kill["data"]["status"] == "killed"
    out = ok(client.tool(episode, "BashOutput", bash_id=bid))
    assert out["data"]["status"] == "killed" and "up" in out["content"]
    twice = ok(client.tool(episode, "KillBash", shell_id=bid))
    assert twice["data"]["was_running"] is False


def test_job_ids_unknown(client, episode):
    err(client.tool(episode, "BashOutput", bash_id="bash_99"), "JOB_NOT_FOUND")
    err(client.tool(episode, "KillBash", shell_id="bash_99"), "JOB_NOT_FOUND")
    err(client.tool(episode, "KillBash", shell_id="nonsense"), "JOB_NOT_FOUND")


def test_jobs_are_per_episode(client, new_episode):
    a, b = new_episode(), new_episode()
    bid = ok(client.tool(a, "Bash", command="sleep 30", run_in_background=True))["data"]["bash_id"]
    err(client.tool(b, "BashOutput", bash_id=bid), "JOB_NOT_FOUND")
    err(client.tool(b, "KillBash", shell_id=bid), "JOB_NOT_FOUND")
    assert ok(client.tool(a, "KillBash", shell_id=bid))["data"]["was_running"] is True



# ---- background jobs while the judge evaluates -----------------------------------------------

def _stamps(client, ep):
    r = client.get(f"{files(client, ep)}/stamps.txt")
    return [int(x) for x in r.body.split()] if r.status == 200 else []


def _wait_stamps(client, ep, more_than, timeout=5):
    end = time.monotonic() + timeout
    while len(_stamps(client, ep)) <= more_than and time.monotonic() < end:
        time.sleep(0.05)
    return len(_stamps(client, ep))


def test_evaluation_freezes_background_jobs(client, new_episode):
    """Red team B: an episode's background jobs are frozen for the whole of each evaluation
    (Verify, Profile, Submit), so a busy loop cannot load the CPUs the judge measures with or
    starve it; they are thawed afterwards. The result (and Submit's reward_components) says how
    many were frozen. The evaluation here fails fast (no sources), whatever the machine: the
    stall itself is measured by tests/unit/test_bash.c and test_sbx_cgroup.c."""
    sandboxed = client.get("/v1/health").json["sandbox"]["active"]
    ep = new_episode(options={"variant": "cpu"})
    ok(client.tool(ep, "Bash", command="rm -f kernels/*"))
    bid = ok(client.tool(ep, "Bash", command="while :; do date +%s%N >> stamps.txt; sleep 0.02; "
                         "done", run_in_background=True))["data"]["bash_id"]
    assert _wait_stamps(client, ep, 3) > 3
    obs = err(client.tool(ep, "Verify"), "NO_SOURCES")
    frozen, running = (1, 0) if sandboxed else (0, 1)
    assert obs["data"]["jobs_frozen"] == frozen, obs
    assert obs["data"]["jobs_not_frozen"] == running, obs
    if sandboxed:
        assert "1 background command was paused during the evaluation" in obs["content"], obs
    else:
        assert "kept running during the evaluation" in obs["content"], obs
    # thawed: the job goes on, and is still there to be read and killed
    n = len(_stamps(client, ep))
    assert _wait_stamps(client, ep, n + 3) > n + 3
    assert ok(client.tool(ep, "BashOutput", bash_id=bid))["data"]["status"] == "running"
    # Submit: the episode's reward_components carry the same figures
    step = client.post(f"/v1/episodes/{ep}/tools/Submit", {}).json
    comps = step["info"]["reward_components"]
    assert comps["jobs_frozen"] == frozen and comps["jobs_not_frozen"] == running, comps
    assert step["reward"] == -1 and step["terminated"] is True, step
    # a job that had finished is not counted
    ep2 = new_episode(options={"variant": "cpu"})
    ok(client.tool(ep2, "Bash", command="rm -f kernels/*"))
    bid2 = ok(client.tool(ep2, "Bash", command="echo done", run_in_background=True))["data"]["bash_id"]
    _poll_until_done(client, ep2, bid2)
    obs = err(client.tool(ep2, "Verify"), "NO_SOURCES")
    assert obs["data"]["jobs_frozen"] == 0 and obs["data"]["jobs_not_frozen"] == 0, obs
    assert "background command" not in obs["content"], obs
