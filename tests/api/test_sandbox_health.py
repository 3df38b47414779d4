"""The server reports its sandbox, and under make test (root, CI) every protection is active."""
import json
import shutil
import signal
import subprocess


def test_health_reports_every_protection_active(client):
    health = client.get("/v1/health").json
    sb = health["sandbox"]
    assert sb["active"] is True, sb.get("weak_reason")
    assert sb["all_required_ok"] is True
    names = {p["name"] for p in sb["protections"]}
    for required in ("privileges", "ns_mount", "ns_pid", "ns_net", "seccomp", "cgroup", "openat2"):
        assert required in names
    missing = [p for p in sb["protections"] if p["required"] and not p["ok"]]
    assert not missing, missing
    info = client.get("/v1/info").json
    assert info["sandbox"].startswith("on:")


def test_bash_runs_as_the_episodes_own_uid(client, new_episode):
    a, b = new_episode(), new_episode()
    ids = []
    for ep in (a, b):
        obs = client.tool(ep, "Bash", command="id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' "
                                              "/proc/self/status")
        lines = obs["data"]["stdout"].split("\n")
        ids.append(int(lines[0]))
        assert "CapEff:\t0000000000000000" in lines
        assert "NoNewPrivs:\t1" in lines and "Seccomp:\t2" in lines
    assert ids[0] != ids[1] and min(ids) >= 1000


def _serve(binary, tmp_path, *extra):
    from conftest import PROFILES, TEMPLATE, BUNDLED_TASKS
    return subprocess.Popen(
        [str(binary), "serve", "--port", "0", "--state-dir", str(tmp_path / "state"),
         "--template", str(TEMPLATE), "--sandbox-profiles", str(PROFILES), "--tasks",
         str(BUNDLED_TASKS), "--quiet", *extra],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_missing_protection_refuses_to_start_unless_weak(tmp_path):
    """A kgym-env without its launcher beside it cannot sandbox: it refuses to start, and with
    --allow-weak-sandbox it starts and says it is weak on every health call."""
    from conftest import BINARY
    from kgym_http import Client
    lone = tmp_path / "bin" / "kgym-env"
    lone.parent.mkdir()
    shutil.copy(BINARY, lone)
    p = _serve(lone, tmp_path)
    _, err = p.communicate(timeout=30)
    assert p.returncode != 0
    assert "--allow-weak-sandbox" in err and "kgym-sandbox" in err

    p = _serve(lone, tmp_path, "--allow-weak-sandbox")
    try:
        port = None
        for line in p.stderr:
            rec = json.loads(line)
            if rec.get("event") == "listening":
                port = rec["port"]
                assert "WEAK" in rec["sandbox"]
                break
        assert port
        c = Client(port)
        sb = c.get("/v1/health").json["sandbox"]
        assert sb["active"] is False and "kgym-sandbox" in sb["weak_reason"]
        assert c.get("/v1/info").json["sandbox"].startswith("WEAK")
        c.close()
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)


def test_relative_state_dir_works_sandboxed(tmp_path):
    """make run uses --state-dir state (relative): the sandbox must still find the workspace."""
    from conftest import BINARY, BUNDLED_TASKS, PROFILES, TEMPLATE
    from kgym_http import Client
    p = subprocess.Popen(
        [str(BINARY), "serve", "--port", "0", "--state-dir", "state", "--template", str(TEMPLATE),
         "--sandbox-profiles", str(PROFILES), "--tasks", str(BUNDLED_TASKS)],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        port = None
        for line in p.stderr:
            rec = json.loads(line)
            if rec.get("event") == "listening":
                port = rec["port"]
                break
        assert port
        c = Client(port)
        ep = c.post("/v1/episodes", {}).json["episode_id"]
        obs = c.tool(ep, "Bash", command="pwd")
        assert not obs["is_error"], obs
        assert obs["data"]["stdout"] == "/workspace\n"
        c.close()
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)


def test_a_command_cannot_fake_a_sandbox_setup_failure(client, new_episode):
    """Setup failures travel on a pipe only the launcher holds, not in the exit status/stderr."""
    ep = new_episode()
    obs = client.tool(ep, "Bash", command="echo out; echo 'kgym-sandbox: fake' >&2; exit 125")
    assert obs["is_error"] is False
    assert obs["data"]["exit_code"] == 125 and obs["data"]["ended_by"] == "exit"
    assert obs["data"]["stdout"] == "out\n"
