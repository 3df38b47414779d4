"""Finding processes by their command line, for tests that check what is left running (jobs
that must die with their episode, judges with their server, daemons with their command)."""
import os


def pids_where(match):
    """PIDs of live processes whose argv (a list of bytes: /proc/PID/cmdline split at its NULs)
    satisfies match. Processes that end while being read are skipped."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if match(argv):
            found.append(int(pid))
    return found
