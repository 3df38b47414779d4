"""Leftovers: whatever a command leaves running (setsid/nohup daemons, double forks, a
background job's children) is gone when the command, the job or the episode ends; checked from
the host (no process of the episode's uid, no busy cgroup of the episode)."""
import os
import re
import signal
import time
import uuid

from kgym_sbx import busy_cgroups, host_procs_of_uid, run_host, wait_until
from procs import pids_where

# Four ways to outlive a shell: setsid+nohup, a double fork, a python daemon (fork, setsid,
# fork, close stdio), and disown.
def daemonize_script(tag):
    return (
        f"setsid nohup sleep {tag}1 >/dev/null 2>&1 &\n"
        f"( (exec sleep {tag}2 </dev/null >/dev/null 2>&1 &) & )\n"
        "python3 -c \"import os, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        "[os.close(fd) for fd in (0, 1, 2)]\n"
        f"os.execvp('sleep', ['sleep', '{tag}3'])\"\n"
        f"sleep {tag}4 </dev/null >/dev/null 2>&1 & disown\n"
        "sleep 0.3; echo launched\n")


def host_sleepers(tag):
    """pids of host processes running `sleep <tag>N`."""
    return pids_where(lambda argv: len(argv) >= 2 and argv[0].endswith(b"sleep")
                      and argv[1].startswith(str(tag).encode()))


def test_daemons_die_with_the_command(srv, new_episode):
    # control: unconfined, the script leaves four sleepers behind (killed here, by pid)
    tag = 900000 + int(uuid.uuid4().int % 90000)
    r = run_host(["bash", "-c", daemonize_script(tag)])
    assert "launched" in r.stdout, r
    left = wait_until(lambda: len(host_sleepers(tag)) == 4 and host_sleepers(tag), 3)
    try:
        assert left and len(left) == 4, host_sleepers(tag)
    finally:
        for pid in host_sleepers(tag):
            os.kill(pid, signal.SIGKILL)

    ep = new_episode()
    uid = ep.uid
    t0 = time.monotonic()
    obs = ep.bash(daemonize_script(tag + 1))
    assert not obs["is_error"] and "launched" in obs["content"], obs
    assert time.monotonic() - t0 < 5
    # gone the moment the call returned: no process of the uid, no busy cgroup
    assert host_procs_of_uid(uid) == [], host_procs_of_uid(uid)
    assert host_sleepers(tag + 1) == []
    assert busy_cgroups(srv, ep.uid) == {}
    # and the next command does not see them either
    out = ep.sh("ps -eo comm= | sort | uniq -c")
    assert "sleep" not in out, out


def test_killbash_leaves_nothing(srv, new_episode):
    ep = new_episode()
    uid = ep.uid
    tag = 800000 + int(uuid.uuid4().int % 90000)
    job = ep.start_job(daemonize_script(tag) + f"exec sleep {tag}5")
    running = wait_until(lambda: len(host_sleepers(tag)) == 5, 5)
    assert running, host_sleepers(tag)
    assert busy_cgroups(srv, ep.uid), "the job's processes should sit in its cgroup"
    obs = ep.tool("KillBash", shell_id=job)
    assert not obs["is_error"] and obs["data"]["status"] == "killed", obs
    assert wait_until(lambda: host_procs_of_uid(uid) == [], 3), host_procs_of_uid(uid)
    assert host_sleepers(tag) == []
    assert wait_until(lambda: busy_cgroups(srv, ep.uid) == {}, 3), busy_cgroups(srv, ep.uid)


def test_finished_job_leaves_nothing(srv, new_episode):
    ep = new_episode()
    uid = ep.uid
    tag = 700000 + int(uuid.uuid4().int % 90000)
    job = ep.start_job(daemonize_script(tag))
    text, data = ep.wait_job(job)
    assert "launched" in text and data["status"] == "exited" and data["exit_code"] == 0, data
    assert wait_until(lambda: host_procs_of_uid(uid) == [], 3), host_procs_of_uid(uid)
    assert host_sleepers(tag) == []
    assert wait_until(lambda: busy_cgroups(srv, ep.uid) == {}, 3), busy_cgroups(srv, ep.uid)


def test_closing_or_resetting_the_episode_kills_its_jobs(srv, new_episode):
    for how in ("delete", "reset"):
        ep = new_episode()
        uid = ep.uid
        tag = 600000 + int(uuid.uuid4().int % 90000)
        ep.start_job(daemonize_script(tag) + f"exec sleep {tag}5")
        assert wait_until(lambda: len(host_sleepers(tag)) == 5, 5), host_sleepers(tag)
        if how == "delete":
            ep.delete()
        else:
            r = ep.c.post(f"{ep.path}/reset", {"task_id": "fixture/alpha", "seed": 2})
            assert r.status == 200, r
        assert wait_until(lambda: host_procs_of_uid(uid) == [], 3), (how, host_procs_of_uid(uid))
        assert host_sleepers(tag) == []
        assert wait_until(lambda: busy_cgroups(srv, ep.uid) == {}, 3), busy_cgroups(srv, ep.uid)


def test_timeout_kills_the_whole_tree(srv, new_episode):
    ep = new_episode()
    uid = ep.uid
    tag = 500000 + int(uuid.uuid4().int % 90000)
    obs = ep.bash(daemonize_script(tag) + f"sleep {tag}5", timeout_ms=1500)
    assert obs["is_error"] and obs["data"]["error_code"] == "TIMEOUT", obs["data"]
    assert obs["data"]["exit_code"] == 124 and "launched" in obs["content"]
    assert host_procs_of_uid(uid) == [] and host_sleepers(tag) == []
    assert busy_cgroups(srv, ep.uid) == {}
    # the uid owns nothing else on the host either (ps, the control view)
    assert not re.search(rf"^\s*{uid}\b", run_host(["ps", "-eo", "uid="]).stdout, re.M)
