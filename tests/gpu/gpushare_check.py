"""make test-gpu suite gpu-share: GPU memory shared between two processes through
env/harness/gpushare.py (CUDA VMM allocation exported as a POSIX fd, passed over a Unix socket),
the path the judge and its runners use on CUDA.

The parent allocates and fills the arena, the child (optionally started through a wrapper such
as the sandbox launcher: --wrap "CMD ...") maps it, checks what it reads, writes its own pattern
and answers; the parent checks that pattern. Exits non-zero on any mismatch.

usage: gpushare_check.py [--mib N] [--wrap "launcher args ..."]
"""
import argparse
import array
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "env" / "harness"
sys.path.insert(0, str(HARNESS))


def child(fd, nbytes):
    import torch

    import gpushare

    sock = socket.socket(fileno=fd)
    fds = array.array("i")
    data, anc, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: fds.itemsize])
    torch.empty(1, device="cuda")
    arena = gpushare.Arena.import_fd(torch, fds[0], nbytes)
    floats = arena.base.view(torch.float32)
    want = torch.arange(floats.numel(), device="cuda", dtype=torch.float32)
    seen_ok = bool(torch.equal(floats, want))
    floats.mul_(-2.0)
    torch.cuda.synchronize()
    sock.send(b"ok" if seen_ok else b"mismatch")
    return 0


def parent(mib, wrap):
    import torch

    import gpushare

    arena, fd = gpushare.Arena.create(torch, mib << 20)
    floats = arena.base.view(torch.float32)
    floats.copy_(torch.arange(floats.numel(), device="cuda", dtype=torch.float32))
    torch.cuda.synchronize()
    here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    argv = shlex.split(wrap) + [sys.executable, __file__, "--child-fd", str(there.fileno()), "--nbytes",
                                str(arena.nbytes)]
    proc = subprocess.Popen(argv, pass_fds=(there.fileno(),))
    there.close()
    here.sendmsg([b"map"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    here.settimeout(300)
    reply = here.recv(64)
    proc.wait(timeout=60)
    want = torch.arange(floats.numel(), device="cuda", dtype=torch.float32) * -2.0
    back_ok = bool(torch.equal(floats, want))
    # what a judge-side copy of inputs into the arena costs per GB (the per-call data path)
    src = torch.randn(floats.numel(), device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        floats.copy_(src)
    torch.cuda.synchronize()
    gbps = 10 * arena.nbytes / (time.perf_counter() - t0) / 1e9
    print(f"gpushare: {arena.nbytes >> 20} MiB arena; child read {reply.decode()}; parent read back "
          f"{'ok' if back_ok else 'mismatch'}; device copy into the arena {gbps:.0f} GB/s")
    return 0 if reply == b"ok" and back_ok and proc.returncode == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="arena size")
    ap.add_argument("--wrap", default="", help="command the child runs under (e.g. the sandbox launcher)")
    ap.add_argument("--child-fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--nbytes", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_fd is not None:
        return child(args.child_fd, args.nbytes)
    return parent(args.mib, args.wrap)


if __name__ == "__main__":
    sys.exit(main())
