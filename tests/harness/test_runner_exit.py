"""A runner's end (judge.Channel.close): the runner leaves at once after its bye
(runner.quit_now: no interpreter teardown, which took seconds inside the GPU's timing turn),
its printed output still reaches the judge, and whatever it started in its process group is
killed with it, while its own process id is still reserved (an unreaped zombie)."""
import importlib.util
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "env" / "harness"))
_spec = importlib.util.spec_from_file_location("kgym_judge_exit", REPO / "env" / "harness" / "judge.py")
judge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(judge)

# a runner that answers bye as runner.py does, after starting a child that would outlive it
# and registering an atexit hook that would leave a mark and take 30 s
FAKE_RUNNER = r'''
import atexit, json, os, socket, subprocess, sys, time
sys.path.insert(0, sys.argv[3])
import runner
sock = socket.socket(fileno=int(sys.argv[1]))
child = subprocess.Popen(["sleep", "300"])
with open(sys.argv[2], "w") as f:
    f.write(str(child.pid))
def teardown():
    open(sys.argv[2] + ".teardown", "w").close()
    time.sleep(30)
atexit.register(teardown)
print("said before bye", flush=False)
msg = json.loads(sock.recv(1 << 20))
assert msg["op"] == "bye"
sock.send(json.dumps({"ok": True}).encode())
runner.quit_now()
'''


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] == "Z"
    except FileNotFoundError:
        return True


def test_a_runner_leaves_at_once_and_takes_its_children(tmp_path):
    script = tmp_path / "fake_runner.py"
    script.write_text(FAKE_RUNNER)
    pid_file = tmp_path / "child.pid"
    ch = judge.Channel([sys.executable, str(script), "@FD@", str(pid_file), str(REPO / "env" / "harness")],
                       dict(os.environ), 64 << 10, 30.0)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline, ch.log_text()
        time.sleep(0.02)
    child = int(pid_file.read_text())
    try:
        t0 = time.monotonic()
        ch.close()
        took = time.monotonic() - t0
        assert ch.proc.returncode == 0, ch.log_text()
        assert not (tmp_path / "child.pid.teardown").exists(), "the interpreter's teardown ran"
        assert took < 20, took
        deadline = time.monotonic() + 5
        while not gone(child):
            assert time.monotonic() < deadline, "the runner's child outlived it"
            time.sleep(0.02)
    finally:  # a failure above leaves no sleep behind
        if not gone(child):
            os.kill(child, 9)
    deadline = time.monotonic() + 5
    while "said before bye" not in ch.log_text():
        assert time.monotonic() < deadline, ch.log_text()
        time.sleep(0.02)
