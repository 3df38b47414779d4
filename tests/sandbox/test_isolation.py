"""Isolation: another episode's workspace and processes, the host's secrets, the repository
(where the harness will live) and the server process itself are out of a command's reach."""
import os
import sys
import re
import uuid

from kgym_sbx import BINARY, PROFILES, REPO, host_probe, run_host


def test_other_episode_is_unreachable(srv, new_episode):
    a, b = new_episode(), new_episode()
    token = "EPISODE-A-" + uuid.uuid4().hex
    a.sh(f"echo {token} > secret.txt && mkdir -p deep/x && echo {token} > deep/x/s2.txt")
    # A keeps processes, /tmp, /dev/shm and a SysV segment alive while B looks around
    job = a.start_job(f"echo {token} > /tmp/a_tmp; echo {token} > /dev/shm/a_shm; "
                      "ipcmk -M 4096 >/dev/null; ipcs -m | grep -c '^0x'; ls /tmp /dev/shm; "
                      f"exec -a sleep-{token} sleep 60")
    a_ws = a.host_workspace
    a_dir = a_ws.parent

    # controls: the host reads A's secret at its host path; A reads its own; A's job sees its
    # /tmp, /dev/shm and segment
    assert (a_ws / "secret.txt").read_text().strip() == token
    assert a.sh("cat secret.txt").strip() == token
    assert b.uid != a.uid, (a.uid, b.uid)

    probes = [
        f"cat {a_ws}/secret.txt",
        f"ls {a_dir}",
        f"ls {srv.state_dir}/episodes",
        f"cat {a_ws}/deep/x/s2.txt",
        "cat /workspace/../secret.txt",
        "cat ../secret.txt",
        "cat /workspace/../../workspace/../secret.txt",
        f"echo pwned > {a_ws}/pwned",
        "ls -a /tmp /dev/shm",
        "ipcs -m | grep -c '^0x'",
        "ls /proc/*/root/ /proc/*/cwd/",
        "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline | tr '\\0' ' '",
        "ps -eo pid,user,args",
        "find / \\( -path /proc -o -path /usr -o -path /sys \\) -prune -o -name '*s2.txt' -print",
        "grep -rs -D skip . /tmp /dev /etc /workspace | head -50",
        "kill -9 -1; echo killed-all",
    ]
    outs = {}
    for cmd in probes:
        obs = b.bash(cmd)
        text = obs["content"]
        assert token not in text, (cmd, text)
        outs[cmd] = text
    assert "No such file or directory" in outs[f"cat {a_ws}/secret.txt"]
    assert "No such file or directory" in outs[f"ls {a_dir}"]
    assert "No such file or directory" in outs[f"echo pwned > {a_ws}/pwned"]
    assert outs["ipcs -m | grep -c '^0x'"].startswith("0\n"), outs
    listing = outs["ls -a /tmp /dev/shm"]
    assert re.fullmatch(r"/dev/shm:\n\.\n\.\.\n\n/tmp:\n\.\n\.\.\n\[exit code: 0\]", listing), listing
    # B's process list holds only its own command (and the sandbox's init)
    users = {line.split()[1] for line in outs["ps -eo pid,user,args"].splitlines()
             if line.strip()[:1].isdigit()}
    assert users <= {"root", "agent"}, outs["ps -eo pid,user,args"]
    assert "sleep" not in outs["ps -eo pid,user,args"]

    # A is untouched: its job still runs, its files are as they were, nothing new appeared
    text = a.job_output(job)
    assert text["data"]["status"] == "running", text
    # its own segment, /tmp and /dev/shm files, seen from inside A
    assert text["content"].startswith("1\n") and "a_tmp" in text["content"], text
    assert "a_shm" in text["content"], text
    assert not (a_ws / "pwned").exists()
    assert a.read_file("secret.txt").decode().strip() == token
    assert a.read_file("deep/x/s2.txt").decode().strip() == token
    assert a.tool("KillBash", shell_id=job)["data"]["status"] == "killed"


def test_host_secrets_repo_and_state_are_absent(srv, new_episode):
    secrets = ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/root", "/home", "/var", "/run",
               "/sys", "/boot", "/work", str(REPO), str(REPO / "env"), str(REPO / "env" / "harness"),
               str(REPO / "env" / "template"), str(srv.state_dir), str(srv.workdir),
               str(PROFILES), str(BINARY), str(BINARY.parent / "kgym-sandbox")]
    # control: every one of them is there on the host
    present = [p for p in secrets if os.path.lexists(p)]
    assert "/etc/shadow" in present and "/root" in present and str(REPO / "env") in present
    assert str(srv.state_dir) in present  # (env/harness joins the list once it exists)

    ep = new_episode()
    # The project's Python environment is bound read-only at its own path (--sandbox-python);
    # where it lives under /root (pyenv, ~/.cache), /root exists inside as the bare path to it.
    python_paths = [sys.prefix, sys.base_prefix]
    via_python = [p for p in present if any(q == p or q.startswith(p.rstrip("/") + "/")
                                              for q in python_paths)]
    script = "; ".join(f"if [ -e {p} ] || [ -L {p} ]; then echo PRESENT {p}; else echo ABSENT {p}; fi"
                       for p in present if p not in via_python)
    out = ep.sh(script)
    assert out.split("\n")[:-1] == [f"ABSENT {p}" for p in present if p not in via_python], out
    for p in via_python:
        # nothing of it but the directories leading to the Python environment
        listing = ep.sh(f"find {p} -maxdepth 3 -mindepth 1 2>/dev/null | sort").split()
        for entry in listing:
            assert any(q.startswith(entry.rstrip("/") + "/") or entry.startswith(q)
                       for q in python_paths), (p, entry)
    obs = ep.bash("cat /etc/shadow")
    assert obs["data"]["exit_code"] == 1
    assert "/etc/shadow: No such file or directory" in obs["data"]["stderr"]
    # /etc is curated: the accounts are the sandbox's own three, not the host's
    host_users = [line.split(":")[0] for line in open("/etc/passwd") if line.strip()]
    users = [line.split(":")[0] for line in ep.sh("cat /etc/passwd").splitlines()]
    assert users == ["root", "agent", "nobody"], users
    assert len(host_users) > 3
    etc = ep.sh("ls /etc").split()
    assert "shadow" not in etc and "hosts" not in etc and "resolv.conf" not in etc, etc


def test_server_process_is_invisible_and_untouchable(srv, new_episode, probe_bin):
    pid = srv.proc.pid
    # controls: the host sees the server, may signal it, and the probe can ptrace, read the
    # memory of and process_vm_readv a process of its own
    assert os.path.exists(f"/proc/{pid}")
    os.kill(pid, 0)
    assert "kgym-env" in run_host(["ps", "-p", str(pid), "-o", "comm="]).stdout
    v = host_probe(probe_bin, "ptrace_child")
    assert v["ptrace_attach_child"] == "OK" and v["ptrace_traceme"] == "OK", v
    v = host_probe(probe_bin, "vmread_child")
    assert v["process_vm_readv"] == "OK" and v["process_vm_readv_detail"] == "(read the marker)", v
    assert host_probe(probe_bin, "procmem", "child")["proc_mem"] == "OK"
    assert host_probe(probe_bin, "kill", pid, 0)["kill"] == "OK"

    ep = new_episode()
    ep.install_probe(probe_bin)
    out = ep.sh("ps -eo pid=,user=,comm=")
    rows = [line.split() for line in out.splitlines()]
    comms = {r[2] for r in rows}
    assert "ps" in comms and comms <= {"kgym-sandbox", "bash", "ps"}, out
    assert all(int(r[0]) < 10 for r in rows), out
    assert "kgym-env" not in out
    out = ep.sh(f"test -e /proc/{pid} && echo VISIBLE || echo ABSENT; ls /proc | grep -c '^[0-9]'")
    assert out.split()[0] == "ABSENT", out
    obs = ep.bash(f"kill -9 {pid}; echo rc=$?")
    assert "No such process" in obs["data"]["stderr"] and "rc=1" in obs["data"]["stdout"], obs
    v = ep.probe("kill", pid, 9)
    assert v["kill"] == "ESRCH", v
    # pid 1 (the sandbox's init, root) can be neither signalled, traced nor read
    assert ep.probe("kill", 1, 9)["kill"] == "EPERM"
    assert ep.probe("ptrace_pid", 1)["ptrace_attach_pid"] == "EPERM"
    v = ep.probe("ptrace_child")
    assert (v["ptrace_attach_child"], v["ptrace_traceme"]) == ("EPERM", "EPERM"), v
    assert ep.probe("vmread_child")["process_vm_readv"] == "EPERM"
    assert ep.probe("vmread_pid", 1)["process_vm_readv_pid"] == "EPERM"
    # /proc is mounted hidepid=invisible: init (root) is not even listed
    v = ep.probe("procmem", 1)
    assert (v["proc_mem"], v["proc_mem_detail"]) == ("ENOENT", "(open)"), v
    v = ep.probe("procmem", pid)
    assert (v["proc_mem"], v["proc_mem_detail"]) == ("ENOENT", "(open)"), v
    out = ep.sh("cat /proc/1/environ 2>&1; ls /proc/1/root/ 2>&1; ls /proc/1/fd 2>&1; true")
    assert out.count("No such file or directory") == 3, out
    assert srv.running()


def test_system_is_read_only_and_masked(new_episode, tmp_path):
    # controls: on the host root may write these places, /proc/kallsyms and /proc/keys have
    # content, and mknod makes a working device node
    for p in ("/usr/bin", "/proc/sys/kernel/hostname"):
        assert os.access(p, os.W_OK), p
    with open("/proc/kallsyms") as f:
        assert f.readline().strip()
    with open("/proc/keys") as f:
        assert f.read().strip()
    r = run_host(["mknod", str(tmp_path / "null2"), "c", "1", "3"])
    assert r.returncode == 0 and (tmp_path / "null2").is_char_device(), r

    ep = new_episode()
    obs = ep.bash(
        "touch /usr/bin/kgym-pwn; echo rc=$?; touch /kgym-pwn; echo rc=$?; "
        "touch /etc/kgym-pwn; echo rc=$?; echo x > /etc/passwd; echo rc=$?; "
        "echo pwned > /proc/sys/kernel/hostname; echo rc=$?; echo h > /proc/sysrq-trigger; echo rc=$?; "
        "mknod null2 c 1 3; echo rc=$?; mkdir -p /dev/x; echo rc=$?")
    out, err = obs["data"]["stdout"], obs["data"]["stderr"]
    assert out.split() == ["rc=1"] * 8, obs
    assert err.count("Read-only file system") >= 5, err
    assert "mknod: null2: Operation not permitted" in err, err
    out = ep.sh("wc -c < /proc/kallsyms; wc -c < /proc/kcore 2>/dev/null || echo 0; "
                "wc -c < /proc/keys; wc -c < /proc/timer_list")
    assert out.split() == ["0", "0", "0", "0"], out
    devs = ep.sh("ls -A /dev").split()
    assert sorted(devs) == ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
                            "urandom", "zero"], devs
