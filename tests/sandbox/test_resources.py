"""Resource attacks: fork bombs, memory bombs, disk and /tmp filling, output floods. Each ends
in-band (data.error_code), quickly, within its limit, and leaves the host and the server fine.

The `small` server runs the real base.sbx under a bash.sbx with memory 256M, pids 64 and a 32M
/tmp (conftest.SMALL_BASH_SBX), so these attacks take seconds and megabytes."""
import os
import re
import subprocess
import threading
import time

from kgym_sbx import (SMALL_MEMORY, SMALL_PIDS, SMALL_TMP, api, busy_cgroups,
                      host_process_count, host_procs_of_uid, wait_until)

QUOTA = api.BASE_CONFIG["disk_quota_bytes"]        # 16 MiB on the suite's servers
MAX_FILE = api.BASE_CONFIG["max_file_bytes"]       # 2 MiB
MAX_OUTPUT = api.BASE_CONFIG["max_output_chars"]   # 4000


class UidWatch:
    """Counts the host's processes of one uid every few ms while a call runs; keeps the peak."""

    def __init__(self, uid):
        self.uid = uid
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, len(host_procs_of_uid(self.uid)))
            time.sleep(0.005)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def fork_bomb(ep, server, pids_limit):
    uid = ep.uid
    baseline = host_process_count()
    t0 = time.monotonic()
    with UidWatch(uid) as watch:
        obs = ep.bash(":(){ :|:& };:; sleep 2; echo survived", timeout_ms=20000)
    took = time.monotonic() - t0
    assert obs["is_error"], obs
    assert obs["data"]["error_code"] == "RESOURCE_LIMIT", obs["data"]
    assert obs["data"]["ended_by"] == "pids", obs["data"]
    assert f"the process limit ({pids_limit}) was reached" in obs["content"], obs["content"][-400:]
    assert took < 15, took
    # the bomb never held more processes than the cgroup allows (init is root, not counted)
    assert 0 < watch.peak <= pids_limit, watch.peak
    # nothing of it is left, the host's process count is back, the episode works
    # (the kernel may still be tearing the last ones down when the call returns)
    assert wait_until(lambda: host_procs_of_uid(uid) == [], 5), host_procs_of_uid(uid)
    assert wait_until(lambda: busy_cgroups(server, ep.uid) == {}, 5)
    assert wait_until(lambda: host_process_count() <= baseline + 50, 5), (
        baseline, host_process_count())
    assert ep.sh("echo alive").strip() == "alive"


def test_fork_bomb_small_limit(small, new_small_episode):
    fork_bomb(new_small_episode(), small, SMALL_PIDS)


def test_fork_bomb_real_profile(srv, new_episode):
    fork_bomb(new_episode(), srv, 1024)


def test_fork_bomb_in_a_background_job(srv, small, new_episode, new_small_episode):
    loop = "for i in $(seq 100); do sleep 30 & done 2>/dev/null; wait"

    def peak_of(ep, server, settle_s):
        uid = ep.uid
        job = ep.start_job(loop)
        with UidWatch(uid) as watch:
            wait_until(lambda: len(host_procs_of_uid(uid)) > 100, settle_s)
        assert ep.tool("KillBash", shell_id=job)["data"]["status"] == "killed"
        assert wait_until(lambda: host_procs_of_uid(uid) == [], 5), host_procs_of_uid(uid)
        assert wait_until(lambda: busy_cgroups(server, ep.uid) == {}, 5)
        return watch.peak

    # control: where the limit (1024) allows it, the job runs all 100 sleeps at once. The wait
    # ends as soon as they are all up; a loaded 2-core CI machine once needed more than 1.5 s.
    assert peak_of(new_episode(), srv, 15) > 100
    # with pids 64 the job's own cgroup stops it (the wait runs out: 100 are never up at once)
    assert 0 < peak_of(new_small_episode(), small, 1.5) <= SMALL_PIDS


def test_memory_bomb_is_oom(small, new_small_episode, probe_bin):
    # control: the same allocation succeeds unconfined
    r = subprocess.run(["python3", "-c", "b = bytearray(1 << 30); print('ALLOCATED', len(b))"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == f"ALLOCATED {1 << 30}", r

    ep = new_small_episode()
    uid = ep.uid
    obs = ep.bash("python3 -c \"b = bytearray(1 << 30); print('ALLOCATED', len(b))\"",
                  timeout_ms=20000)
    assert obs["is_error"], obs
    assert obs["data"]["error_code"] == "OOM", obs["data"]
    assert obs["data"]["ended_by"] == "memory", obs["data"]
    assert "ALLOCATED" not in obs["content"]
    assert f"memory limit of {SMALL_MEMORY} bytes" in obs["content"], obs["content"]
    # a C program touching pages one by one
    ep.install_probe(probe_bin)
    obs = ep.bash("./probe touch 1024", timeout_ms=20000)
    assert obs["data"]["error_code"] == "OOM", obs["data"]
    assert "touch OK" not in obs["content"]
    # /dev/shm (1G) pages are charged to the command's memory: filling it is an OOM too
    obs = ep.bash(f"for i in $(seq 200); do head -c {MAX_FILE} /dev/zero > /dev/shm/f$i || "
                  "{ echo STOPPED $i; break; }; done", timeout_ms=20000)
    assert obs["is_error"] and obs["data"]["error_code"] == "OOM", obs["data"]
    assert host_procs_of_uid(uid) == []
    assert ep.sh("echo alive").strip() == "alive"


def test_memory_bomb_in_a_background_job(small, new_small_episode):
    # (the unconfined control of this allocation is in test_memory_bomb_is_oom)
    ep = new_small_episode()
    job = ep.start_job("python3 -c \"b = bytearray(1 << 30); print('ALLOCATED', len(b))\"")
    text, data = ep.wait_job(job, timeout=30)
    assert "ALLOCATED" not in text, text
    assert data["status"] == "exited" and data.get("signal") == 9, data
    assert host_procs_of_uid(ep.uid) == []


def test_disk_quota_and_file_size(srv, new_episode, tmp_path):
    # control: unconfined, the same command writes a file past the cap
    big = tmp_path / "big"
    subprocess.run(["bash", "-c", f"head -c 3M /dev/zero > {big}"], check=True)
    assert big.stat().st_size == 3 << 20

    ep = new_episode()
    # one file past max_file_bytes: SIGXFSZ, cut at the cap exactly
    obs = ep.bash("head -c 3M /dev/zero > big")
    assert obs["is_error"] and obs["data"]["error_code"] == "RESOURCE_LIMIT", obs
    assert obs["data"].get("signal_name") == "SIGXFSZ" or obs["data"]["exit_code"] == 128 + 25
    assert "SIGXFSZ" in obs["content"]
    sizes = {e["name"]: e["size"] for e in ep.get("").json["entries"]}
    assert sizes["big"] == MAX_FILE, sizes
    # python ignores SIGXFSZ: the write fails with EFBIG instead
    out = ep.sh("python3 -c \"import errno\n"
                "try:\n"
                "    open('big2', 'wb').write(b'0' * (3 << 20)); print('WROTE')\n"
                "except OSError as e:\n"
                "    print(errno.errorcode[e.errno])\"")
    assert out.strip() == "EFBIG", out
    # past the workspace quota: reported in-band, and uploads/writes are refused after
    n = QUOTA // MAX_FILE + 1
    obs = ep.bash(f"rm -f big big2; for i in $(seq {n}); do head -c {MAX_FILE} /dev/zero > q$i; done")
    assert obs["is_error"] and obs["data"]["error_code"] == "DISK_QUOTA_EXCEEDED", obs["data"]
    # the workspace is a tmpfs of the quota's size: the kernel stopped the writes at it
    assert "No space left on device" in obs["content"]
    assert QUOTA - MAX_FILE < obs["data"]["disk_usage_bytes"] <= QUOTA
    assert obs["data"]["disk_quota_bytes"] == QUOTA
    obs = ep.tool("Write", file_path="more.txt", content="x" * 100000)
    assert obs["is_error"] and obs["data"]["error_code"] == "DISK_QUOTA_EXCEEDED", obs
    r = ep.put("more.bin", b"x" * 100000)
    assert r.status == 413 and r.error()["code"] == "DISK_QUOTA_EXCEEDED", r
    assert not ep.bash("rm -f q*")["is_error"]
    assert not ep.tool("Write", file_path="more.txt", content="fine")["is_error"]


def test_disk_fill_stops_at_the_quota_during_the_command(srv, new_episode):
    """One command must not be able to write far past the workspace quota onto the host's disk
    (sandbox.md §9: per-episode quota -> ENOSPC, "the host disk unchanged"). The quota check
    after the command is not enough: a single `dd` can fill the host's disk before it runs."""
    ep = new_episode()
    files = 4 * QUOTA // MAX_FILE  # 4x the quota, each file within the file-size cap
    obs = ep.bash(f"for i in $(seq {files}); do head -c {MAX_FILE} /dev/zero > fill$i || "
                  "{ echo STOPPED $i; break; }; done; du -sb . | cut -f1", timeout_ms=20000)
    used = sum(f.stat().st_size for f in ep.host_workspace.rglob("*") if f.is_file())
    ep.bash("rm -f fill*")
    assert "STOPPED" in obs["content"], (
        f"one command wrote {used} bytes into a workspace whose quota is {QUOTA}: {obs['data']}")
    assert used <= QUOTA + MAX_FILE, used


def test_preallocated_blocks_count_against_the_quota(srv, new_episode):
    """fallocate --keep-size reserves disk blocks without growing st_size: the workspace must
    still count them (and RLIMIT_FSIZE never sees them)."""
    ep = new_episode()
    size = 4 * QUOTA
    obs = ep.bash(f"touch blob && fallocate -n -l {size} blob; echo rc=$?")
    st = os.stat(ep.host_workspace / "blob")
    allocated = st.st_blocks * 512
    try:
        if "rc=0" not in obs["data"]["stdout"]:
            assert allocated <= QUOTA, allocated  # refused: nothing was reserved
            return
        # control: the host's disk really holds the blocks, behind an empty-looking file
        assert st.st_size == 0 and allocated >= size, (st.st_size, allocated)
        assert obs["is_error"] and obs["data"].get("error_code") == "DISK_QUOTA_EXCEEDED", (
            f"{allocated} bytes of disk reserved in a workspace whose quota is {QUOTA} "
            f"(and file cap {MAX_FILE}), not reported: {obs['data']}")
        r = ep.put("more.bin", b"x" * 1000)
        assert r.status == 413 and r.error()["code"] == "DISK_QUOTA_EXCEEDED", r
    finally:
        ep.bash("rm -f blob")


def test_deep_directories_count_against_the_quota(srv, new_episode):
    """Files below a deep directory chain count like any other."""
    ep = new_episode()
    n = QUOTA // MAX_FILE + 1
    obs = ep.bash(f"p=deep; for i in $(seq 70); do p=$p/d; done; mkdir -p $p && "
                  f"for i in $(seq {n}); do head -c {MAX_FILE} /dev/zero > $p/f$i; done; "
                  "du -sb deep | cut -f1")
    # control: the host counts what the command wrote
    used = sum(os.path.getsize(os.path.join(d, f))
               for d, _, files in os.walk(ep.host_workspace / "deep") for f in files)
    try:
        # the kernel stops the writes at the quota, however deep the directories
        assert QUOTA - MAX_FILE < used <= QUOTA < n * MAX_FILE, used
        assert obs["is_error"] and obs["data"].get("error_code") == "DISK_QUOTA_EXCEEDED", (
            f"{used} bytes under a 70-level directory chain, quota {QUOTA}, not reported: "
            f"{obs['data']}")
        r = ep.put("more.bin", b"x" * 1000)
        assert r.status == 413 and r.error()["code"] == "DISK_QUOTA_EXCEEDED", r
    finally:
        ep.bash("rm -rf deep")


def test_background_job_logs_do_not_escape_the_quota(srv, new_episode):
    """Each background job's output goes to a log file on the host, outside the workspace and
    its quota. However many jobs an episode runs, what it keeps on the host's disk stays
    bounded: the quota plus the logs of the jobs that may run at once."""
    ep = new_episode()
    jobs = 20
    for i in range(jobs):
        job = ep.start_job(f"head -c {MAX_FILE + (1 << 20)} /dev/zero")
        text, data = ep.wait_job(job)
        assert data["status"] == "exited", data
    logs = ep.host_workspace.parent / "jobs"
    # control: the logs are where the server keeps them, each cut at the file-size cap
    sizes = [f.stat().st_size for f in logs.iterdir()]
    assert len(sizes) >= 1 and max(sizes) <= MAX_FILE, sizes
    footprint = sum(f.stat().st_blocks * 512 for f in ep.host_workspace.parent.rglob("*")
                    if f.is_file())
    bound = QUOTA + api.BASE_CONFIG["max_background_jobs"] * MAX_FILE
    assert footprint <= bound, (
        f"after {jobs} finished background jobs the episode holds {footprint} bytes on the "
        f"host ({sum(sizes)} in {len(sizes)} job logs); bound {bound}")


def test_tmp_is_a_sized_tmpfs(srv, small, new_episode, new_small_episode, tmp_path):
    # real profile: /tmp 4G and /dev/shm 1G tmpfs, whatever the host's /tmp is
    ep = new_episode()
    out = ep.sh("stat -f -c '%T %b %S' /tmp /dev/shm")
    (t1, b1, s1), (t2, b2, s2) = (line.split() for line in out.splitlines())
    assert (t1, int(b1) * int(s1)) == ("tmpfs", 4 << 30), out
    assert (t2, int(b2) * int(s2)) == ("tmpfs", 1 << 30), out
    # control: on the host the same loop writes past 32 MiB
    n = SMALL_TMP // MAX_FILE + 4
    subprocess.run(["bash", "-c", f"for i in $(seq {n}); do head -c {MAX_FILE} /dev/zero > "
                    f"{tmp_path}/f$i || exit 1; done"], check=True)
    # small profile: filling its 32M /tmp ends in ENOSPC, before the memory limit
    sm = new_small_episode()
    obs = sm.bash(f"for i in $(seq {n}); do head -c {MAX_FILE} /dev/zero > /tmp/f$i || "
                  "{ echo STOPPED $i; break; }; done")
    assert not obs["is_error"], obs
    assert "No space left on device" in obs["data"]["stderr"], obs
    m = re.search(r"STOPPED (\d+)", obs["data"]["stdout"])
    assert m and int(m.group(1)) <= SMALL_TMP // MAX_FILE + 1, obs
    # the next command gets a fresh, empty /tmp
    assert sm.sh("ls -A /tmp | wc -l").strip() == "0"


def test_output_flood(srv, new_episode):
    ep = new_episode()
    t0 = time.monotonic()
    obs = ep.bash("yes | head -c 50M", timeout_ms=20000)
    took = time.monotonic() - t0
    assert not obs["is_error"], obs["data"]
    assert obs["data"]["exit_code"] == 0 and obs["data"]["truncated"] is True
    assert obs["data"]["output_bytes"] >= 50 << 20, obs["data"]
    assert len(obs["content"]) <= MAX_OUTPUT + 200, len(obs["content"])
    assert obs["content"].startswith("y\ny\n") and obs["content"].endswith("[exit code: 0]")
    assert took < 15, took
    # an endless flood on both streams ends at the timeout, with capped output
    obs = ep.bash("yes out & yes err >&2", timeout_ms=2000)
    assert obs["is_error"] and obs["data"]["error_code"] == "TIMEOUT", obs["data"]
    assert obs["data"]["truncated"] is True and len(obs["content"]) <= MAX_OUTPUT + 300
    assert host_procs_of_uid(ep.uid) == []
    assert ep.sh("echo alive").strip() == "alive"
