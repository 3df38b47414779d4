"""The command line of `kgym-env serve`: help, bad options and configs, start-up failures."""
import json
import subprocess

from conftest import BINARY, TEMPLATE


def run(*args, timeout=10):
    return subprocess.run([str(BINARY), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_serve_help():
    r = run("serve", "--help")
    assert r.returncode == 0
    for opt in ("--config", "--port", "--tasks", "--state-dir", "--template", "--max-episodes",
                "--idle-timeout", "--build-cache-max-bytes"):
        assert opt in r.stdout, opt


def test_version():
    r = run("version")
    assert r.returncode == 0 and r.stdout.startswith("kgym-env ")


def test_bad_options(tmp_path, task_dirs):
    base = ["serve", "--port", "0", "--state-dir", str(tmp_path / "s"), "--template",
            str(TEMPLATE), "--tasks", str(task_dirs[0])]
    for extra in (["--port", "99999"], ["--max-episodes", "0"], ["--idle-timeout", "-1"],
                  ["--durability", "sometimes"], ["--no-such-flag"], ["stray"],
                  ["--port", "nan"], ["--build-cache-max-bytes", "nan"],
                  ["--build-cache-max-bytes", "-1"], ["--build-cache-max-bytes", "2e15"],
                  # whole numbers only: these were truncated or read in base 16
                  ["--port", "80.5"], ["--port", "0x1F91"], ["--max-episodes", "2.5"],
                  ["--port", " 80"], ["--port", "+80"], ["--port", "-0"],
                  ["--eval-timeout", "1e3"], ["--build-cache-max-bytes", "1e9"],
                  # a path longer than its field was cut short and used
                  ["--state-dir", str(tmp_path / ("d" * 700))], ["--cuda-arch", "sm_" + "9" * 40]):
        r = run(*base, *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert "kgym-env" in r.stderr


def test_bad_config(tmp_path, task_dirs):
    base = ["serve", "--port", "0", "--state-dir", str(tmp_path / "s"), "--template",
            str(TEMPLATE), "--tasks", str(task_dirs[0])]
    for cfg, word in (({"no_such_key": 1}, "no_such_key"),
                      ({"max_episodes": "ten"}, "max_episodes"),
                      ({"reaper_interval_s": 0}, "reaper_interval_s"),
                      ({"bash_timeout_ms": 10, "bash_timeout_max_ms": 5}, "bash_timeout")):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(cfg))
        r = run(*base, "--config", str(path))
        assert r.returncode == 2, (cfg, r.stderr)
        assert word in r.stderr, (word, r.stderr)
    (tmp_path / "broken.json").write_text("{not json")
    r = run(*base, "--config", str(tmp_path / "broken.json"))
    assert r.returncode == 2
    path.write_text(json.dumps({"state_dir": "/tmp/" + "d" * 700}))
    r = run(*base, "--config", str(path))
    assert r.returncode == 2 and "config key 'state_dir' is too long" in r.stderr, r.stderr
    path.write_text(json.dumps({"bash_timeout_ms": 10, "bash_timeout_max_ms": 5}))
    # however getopt_long takes it: an abbreviated --config was once ignored (the server started
    # on its defaults, port 8080 included)
    for spelling in (["--conf", str(path)], [f"--confi={path}"], [f"--config={path}"]):
        r = run(*base, *spelling)
        assert r.returncode == 2 and "bash_timeout" in r.stderr, (spelling, r.stderr)
    # a "--config" that is another option's argument is not a config file
    r = run(*base, "--cuda-arch", "--config", "--max-episodes", "0")
    assert r.returncode == 2 and "--max-episodes needs a whole number" in r.stderr, r.stderr


def test_no_tasks_refuses_to_start(tmp_path):
    empty = tmp_path / "empty_tasks"
    empty.mkdir()
    r = run("serve", "--port", "0", "--state-dir", str(tmp_path / "s"), "--template",
            str(TEMPLATE), "--tasks", str(empty))
    assert r.returncode == 1
    assert "no tasks" in r.stderr


def test_a_source_without_tasks_is_named(tmp_path, task_dirs):
    """A task's own folder given as a store loads nothing: said, even beside a good source."""
    one_task = next(p for p in sorted(task_dirs[0].iterdir()) if (p / "task.json").is_file())
    r = run("serve", "--port", "0", "--state-dir", str(tmp_path / "s"), "--template",
            str(TEMPLATE), "--tasks", str(task_dirs[0]), "--tasks", str(one_task))
    assert r.returncode == 1, r.stderr
    assert f"--tasks {one_task}: no tasks in it" in r.stderr, r.stderr


def test_port_in_use_is_refused(srv, tmp_path, task_dirs):
    """A second server on a port already served fails with a clear error: it must never start
    and share the first one's connections (SO_REUSEPORT would let it)."""
    r = run("serve", "--port", str(srv.port), "--state-dir", str(tmp_path / "s"), "--template",
            str(TEMPLATE), "--tasks", str(task_dirs[0]), timeout=30)
    assert r.returncode != 0, r.stderr
    assert "cannot listen" in r.stderr and str(srv.port) in r.stderr, r.stderr
    assert srv.client().get("/v1/health").status == 200  # the first one still serves


def test_state_dir_in_use_is_refused(launch, task_dirs):
    """A second server on a live server's state dir is refused before it touches anything: its
    recovery would otherwise rebuild the first one's episodes and delete their workspaces."""
    first = launch(name="statelock")
    c = first.client()
    ep = c.create("fixture/alpha")["episode_id"]
    assert c.put(f"/v1/episodes/{ep}/files/notes.txt", b"kept").status in (200, 201)
    r = run("serve", "--port", "0", "--state-dir", str(first.state_dir), "--template",
            str(TEMPLATE), "--tasks", str(task_dirs[0]), timeout=30)
    assert r.returncode != 0, r.stderr
    assert f"state dir {first.state_dir} is in use by another kgym-env" in r.stderr, r.stderr
    assert c.get(f"/v1/episodes/{ep}/files/notes.txt").text == "kept"
    out = c.tool(ep, "Bash", command="cat notes.txt")
    assert not out["is_error"] and "kept" in out["content"], out
