"""A kgym-env killed outright (SIGKILL, the OOM killer) takes its judges with it: a judge left
running would keep timing on a GPU that the next server leases again, or hold a measurement's
GPU timing lock. Here a baselines measurement (CPU variant: the judge is the same program) is
in flight when the server is killed with SIGKILL; its judge must be gone within seconds."""
import json
import signal
import threading
import time

from conftest import HarnessServer
from procs import pids_where


def judges_under(root):
    """PIDs of judge.py processes whose job lies under root."""
    return pids_where(lambda argv: any(a.endswith(b"judge.py") for a in argv)
                      and any(a.startswith(str(root).encode()) for a in argv))


def test_sigkilled_server_leaves_no_judge(tmp_path):
    cache = tmp_path / "cache"  # a private cache: nothing measured yet, so the judge works a while
    srv = HarnessServer(tmp_path, extra_args=["--build-cache", str(cache)])
    try:
        client = srv.client()
        ids = [t["id"] for t in client.get("/v1/tasks").json["tasks"]]
        relu = next(i for i in ids if i.endswith("relu"))
        # the request blocks for the whole measurement: send it from a thread, watch the judge
        threading.Thread(target=lambda: _post_quietly(client, f"/v1/tasks/{relu}/baselines", {"variant": "cpu"}),
                         daemon=True).start()
        deadline = time.monotonic() + 120
        while not judges_under(cache):
            assert time.monotonic() < deadline, "no judge started:\n" + "\n".join(srv.lines[-20:])
            assert srv.proc.poll() is None
            time.sleep(0.05)
        time.sleep(1.0)  # well into its work: torch imported, runners starting
        assert judges_under(cache)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while judges_under(cache):
            assert time.monotonic() < deadline, f"judges outlived the server: {judges_under(cache)}"
            time.sleep(0.05)
    finally:
        srv.stop()


def _post_quietly(client, path, body):
    try:
        client.post(path, json.loads(json.dumps(body)))
    except Exception:  # the server dies under it: that is the point
        pass
