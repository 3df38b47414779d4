# Attack on the judge's channel (red team, session 28): the candidate takes over its runner's
# socket when the model is built and queues one reply ahead of time. Before replies had to echo
# their request's nonce, every later call then received the previous message's reply: the timed
# "run" got the (instant) stage reply, the forward's own reply landed on "fetch", and the timed
# window held almost nothing. The forward writes its outputs straight into shared memory, so they
# are in place when the judge reads them. Python stands in for a C++ extension here (the static
# scan refuses these imports in model_new.py; kernels/*.cpp can make the same calls).
import json
import os
import sys

import torch


def take_over():
    f = sys._getframe()
    while f is not None and not (f.f_code.co_name == "main" and "sock" in f.f_locals):
        f = f.f_back
    sock, runner = f.f_locals["sock"], f.f_locals["runner"]

    def send(obj):
        sock.sendall(json.dumps(obj).encode())

    ok = {"ok": True, "ops": ["empty"]}
    send(dict(ok, nonce=f.f_locals["msg"].get("nonce")))  # the reply to "load", as the runner's
    send(ok)  # the one queued ahead: no request to echo yet
    xs, outs = [], []
    while True:
        data = sock.recv(1 << 20)
        if not data:
            os._exit(0)
        msg = json.loads(data)
        if msg["op"] == "stage":
            xs = [runner.view(s) if s["kind"] == "tensor" else s["value"] for s in msg["inputs"]]
            outs = [runner.view(s) for s in msg["outputs"]]
        elif msg["op"] == "run":
            with torch.no_grad():
                torch.clamp(xs[0], min=0, out=outs[0])  # the right answer, written in place
        elif msg["op"] == "bye":
            send(ok)
            os._exit(0)
        send(dict(ok, seq=msg.get("seq")))


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        take_over()  # never returns
