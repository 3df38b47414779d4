"""Planted files: symlinks, hard links, FIFOs and a rename race set up by the agent where the
root-owned server reads, writes or removes workspace files. The server never reads or writes
outside the workspace, never blocks, and never answers with outside content."""
import errno
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from kgym_sbx import api

SHADOW = Path("/etc/shadow").read_bytes()


def make_canary(tmp_path):
    """A host directory the episode's uid could never reach, with a secret and many files."""
    d = tmp_path / "canary"
    d.mkdir()
    token = "CANARY-" + uuid.uuid4().hex
    (d / "secret.txt").write_text(token + "\n")
    for i in range(100):
        (d / f"f{i}").write_text(f"{token} {i}\n")
    (d / "sub").mkdir()
    (d / "sub" / "secret.txt").write_text(token + "\n")
    return d, token


def canary_state(d):
    return sorted((str(p.relative_to(d)), p.read_bytes() if p.is_file() else b"<dir>")
                  for p in d.rglob("*"))


def never_outside(body, token):
    assert token.encode() not in body, body[:200]
    assert SHADOW not in body and not body.startswith(b"root:"), body[:200]


def test_symlinks_to_the_outside_are_never_followed(new_episode, tmp_path):
    canary, token = make_canary(tmp_path)
    before = canary_state(canary)
    ep = new_episode()
    ep.sh(f"rm model_new.py && ln -s /etc/shadow model_new.py && "
          f"ln -s {canary}/secret.txt canary_link && ln -s {canary} cdir && "
          "ln -s ../../../../../../../../../../etc/shadow rel_link && "
          "ln -s /proc/1/root/etc/shadow magic_link && ln -s /proc/self/fd/0 fd_link && "
          f"mkdir -p kernels/deep && ln -s {canary} kernels/deep/up && ln -s / root_link")
    links = ["model_new.py", "canary_link", "rel_link", "magic_link", "fd_link", "cdir/secret.txt",
             "kernels/deep/up/secret.txt", "kernels/deep/up/sub/secret.txt", "root_link/etc/shadow"]
    # control: on the host every one of these names leads to the outside content
    assert (ep.host_workspace / "model_new.py").read_bytes() == SHADOW
    assert (ep.host_workspace / "canary_link").read_text().strip() == token
    assert (ep.host_workspace / "cdir" / "sub" / "secret.txt").read_text().strip() == token
    assert (ep.host_workspace / "root_link" / "etc" / "shadow").read_bytes() == SHADOW

    for rel in links:
        r = ep.get(rel)
        never_outside(r.body, token)
        assert r.status == 403 and r.error()["code"] == "PATH_OUTSIDE_WORKSPACE", (rel, r)
        obs = ep.tool("Read", file_path=rel)
        never_outside(obs["content"].encode(), token)
        assert obs["is_error"] and obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE", (rel, obs)
    for rel in ("cdir", "kernels/deep/up", "root_link"):
        r = ep.get(rel + "/")
        assert r.status == 403, (rel, r)
    # search tools do not wander out through them
    obs = ep.tool("Grep", pattern=token.split("-")[0] + "-", output_mode="content")
    never_outside(obs["content"].encode(), token)
    obs = ep.tool("Grep", pattern="^root:", output_mode="files_with_matches")
    assert "shadow" not in obs["content"] and "model_new.py" not in obs["content"], obs
    obs = ep.tool("Glob", pattern="**/secret.txt")
    assert "secret.txt" not in obs["content"], obs
    # nor do the writers: Write, Edit, MultiEdit, PUT through each link
    for rel in ("canary_link", "cdir/secret.txt", "cdir/new.txt", "kernels/deep/up/x.txt",
                "rel_link", "root_link/tmp/kgym-pwned"):
        obs = ep.tool("Write", file_path=rel, content="PWNED\n")
        assert obs["is_error"] and obs["data"]["error_code"] == "PATH_OUTSIDE_WORKSPACE", (rel, obs)
        obs = ep.tool("Edit", file_path=rel, old_string=token, new_string="PWNED")
        assert obs["is_error"], (rel, obs)
        obs = ep.tool("MultiEdit", file_path=rel, edits=[{"old_string": token, "new_string": "P"}])
        assert obs["is_error"], (rel, obs)
        r = ep.put(rel, b"PWNED\n")
        assert r.status == 403, (rel, r)
    assert canary_state(canary) == before
    assert not Path("/tmp/kgym-pwned").exists()
    assert Path("/etc/shadow").read_bytes() == SHADOW


def test_hardlinks_to_outside_files_are_refused(new_episode, tmp_path):
    # control: root on the host links /etc/shadow into a directory of the same filesystem
    # (a root-only test directory; into /etc itself if that is another filesystem)
    same_fs = os.stat("/etc/shadow").st_dev == os.stat(tmp_path).st_dev
    link = tmp_path / "shadow_link" if same_fs else Path(f"/etc/.kgym-sbx-{uuid.uuid4().hex}")
    os.link("/etc/shadow", link)
    try:
        assert link.read_bytes() == SHADOW and os.stat(link).st_nlink >= 2
    finally:
        os.unlink(link)

    ep = new_episode()
    obs = ep.bash("ln /etc/shadow h1; echo rc=$?; ln /usr/bin/passwd h2; echo rc=$?; "
                  "ln /etc/passwd h3; echo rc=$?; ln model.py h4; echo rc=$?; "
                  "ln binding.cpp kernels/h5; echo rc=$?; ln /proc/self/exe h6; echo rc=$?")
    out, err = obs["data"]["stdout"], obs["data"]["stderr"]
    assert out.split() == ["rc=1"] * 6, obs
    assert "h1': No such file or directory" in err or "'/etc/shadow': No such file" in err, err
    assert err.count("Invalid cross-device link") >= 2, err          # /usr, the sandbox's /etc
    assert err.count("Operation not permitted") >= 2, err            # protected_hardlinks
    names = {e["name"] for e in ep.get("").json["entries"]}
    assert not {"h1", "h2", "h3", "h4", "h6"} & names, names
    assert "h5" not in {e["name"] for e in ep.get("kernels").json["entries"]}


def _open_fifo_writer(path):
    """Releases a reader blocked on a FIFO (what a hung server thread waits for)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError as e:
        if e.errno != errno.ENXIO:  # no reader: nothing was blocked
            raise


def test_fifo_where_the_server_reads(srv, new_episode, tmp_path):
    # control: a plain blocking open of a FIFO hangs until a writer comes
    fifo = tmp_path / "ctl.fifo"
    os.mkfifo(fifo)
    done = threading.Event()
    t = threading.Thread(target=lambda: (open(fifo, "rb").close(), done.set()), daemon=True)
    t.start()
    assert not done.wait(0.5)
    _open_fifo_writer(fifo)
    assert done.wait(5)

    ep = new_episode()
    ep.sh("mkfifo fifo kernels/k.fifo && ls -l fifo")
    host_fifo = ep.host_workspace / "fifo"
    failures = []
    for rel in ("fifo", "kernels/k.fifo"):
        result = {}

        def download():
            c = api.Client(srv.port, timeout=3)
            t0 = time.monotonic()
            try:
                result["response"] = c.get(f"{ep.path}/files/{rel}")
            except (socket.timeout, TimeoutError):
                result["hung"] = True
            finally:
                result["took"] = time.monotonic() - t0
                c.close()

        t = threading.Thread(target=download, daemon=True)
        t.start()
        time.sleep(0.3)
        # meanwhile the server and the episode must keep answering
        other = api.Client(srv.port, timeout=1.5)
        try:
            assert other.get("/v1/health").status == 200
            try:
                r = other.post(f"{ep.path}/tools/Bash", {"command": "echo alive"})
                assert r.status == 200 and r.json["observation"]["content"].startswith("alive")
            except (socket.timeout, TimeoutError):
                failures.append(f"a Bash step on the episode hung while GET files/{rel} ran")
        finally:
            other.close()
        t.join(6)
        if result.get("hung"):
            failures.append(f"GET files/{rel} hung (no answer in 3 s)")
            _open_fifo_writer(ep.host_workspace / rel)  # release the server's thread
        else:
            r = result["response"]
            if not (400 <= r.status < 500):
                failures.append(f"GET files/{rel}: {r.status} {r.body[:120]!r} (want a 4xx)")
            if result["took"] > 2:
                failures.append(f"GET files/{rel} took {result['took']:.1f}s")
        time.sleep(0.3)  # a released download and step finish
    # the tools see the FIFO and step around it, quickly
    for tool, args in (("Read", {"file_path": "fifo"}),
                       ("Edit", {"file_path": "fifo", "old_string": "a", "new_string": "b"}),
                       ("Grep", {"pattern": "x", "output_mode": "count"}),
                       ("Glob", {"pattern": "**/*"})):
        t0 = time.monotonic()
        obs = ep.tool(tool, **args)
        assert time.monotonic() - t0 < 2, (tool, obs)
        if tool in ("Read", "Edit"):
            assert obs["is_error"], (tool, obs)
    # the episode is not wedged: a Bash step and a download still answer
    assert ep.sh("echo alive").strip() == "alive"
    assert ep.get("model.py").status == 200
    assert host_fifo.exists()
    assert not failures, failures


def test_rename_race_during_downloads(srv, new_episode, probe_bin):
    ep = new_episode()
    ep.install_probe(probe_bin)
    ep.sh("mkdir -p real/etc && echo INSIDE-DIR > real/etc/shadow && ln -s / swap && "
          "echo INSIDE-FILE > f && ln -s /etc/shadow fl && "
          "mkdir -p rel/etc && echo INSIDE-REL > rel/etc/shadow && "
          "ln -s ../../../../../../../../../.. relswap")
    # control: on the host, the swapped-in names lead to the real /etc/shadow
    assert (ep.host_workspace / "swap" / "etc" / "shadow").read_bytes() == SHADOW
    assert (ep.host_workspace / "fl").read_bytes() == SHADOW
    assert (ep.host_workspace / "relswap" / "etc" / "shadow").read_bytes() == SHADOW
    jobs = [ep.start_job("./probe exchange real swap stop 30"),
            ep.start_job("./probe exchange f fl stop 30"),
            ep.start_job("./probe exchange rel relswap stop 30")]
    time.sleep(0.2)
    seen = {}
    fails = []
    targets = [("real/etc/shadow", b"INSIDE-DIR\n"), ("f", b"INSIDE-FILE\n"),
               ("rel/etc/shadow", b"INSIDE-REL\n")]
    for i in range(200):
        for rel, inside in targets:
            r = ep.get(rel)
            if SHADOW in r.body or r.body.startswith(b"root:"):
                fails.append((rel, r.status, r.body[:60]))
            key = (rel, r.status, r.body if r.status == 200 else r.error()["code"])
            seen[key] = seen.get(key, 0) + 1
            if r.status == 200 and r.body != inside:
                fails.append((rel, r.status, r.body[:60]))
    for i in range(30):
        obs = ep.tool("Read", file_path="real/etc/shadow")
        if "root:" in obs["content"]:
            fails.append(("Read", obs["content"][:60]))
        r = ep.get("real/")
        if r.status == 200:
            names = {e["name"] for e in r.json["entries"]}
            if names != {"etc"}:
                fails.append(("listing", names))
    ep.sh("touch stop")
    swaps = []
    for job in jobs:
        text, data = ep.wait_job(job, timeout=10)
        swaps.append(text.strip())
        assert text.startswith("exchange OK swaps="), text
    assert not fails, fails[:5]
    # the race really raced: downloads were served inside content and refused the swapped-in
    # links (which target lands where depends on scheduling, so counted over all of them)
    inside = sum(n for (rel, st, body), n in seen.items() if st == 200)
    refused = sum(n for (rel, st, body), n in seen.items() if st == 403)
    assert inside and refused, (seen, swaps)
    bad = {k: n for k, n in seen.items() if k[1] >= 500}
    assert not bad, bad


def test_removal_does_not_follow_planted_links(srv, new_episode, probe_bin, tmp_path):
    """Closing or resetting an episode removes its workspace; links (and a dir/link swap still
    running in a job) must never make the root-owned removal reach outside."""
    canary, token = make_canary(tmp_path)
    before = canary_state(canary)
    for how in ("delete", "reset"):
        ep = new_episode()
        ep.install_probe(probe_bin)
        ep.sh(f"ln -s {canary} c && ln -s {canary}/secret.txt s && mkdir d && "
              "for i in $(seq 0 99); do echo x > d/f$i; done && mkdir d/sub && echo x > d/sub/secret.txt && "
              f"ln -s {canary} dl && chmod 000 d/sub")
        # control: through the host path the planted link reaches the canary
        assert sorted(os.listdir(ep.host_workspace / "c")) == sorted(os.listdir(canary))
        ep.start_job("./probe exchange d dl never 30")
        time.sleep(0.2)
        if how == "delete":
            ep.delete()
        else:
            r = ep.c.post(f"{ep.path}/reset", {"task_id": "fixture/alpha", "seed": 5})
            assert r.status == 200, r
            assert not (ep.host_workspace / "c").exists()
        assert canary_state(canary) == before, how
