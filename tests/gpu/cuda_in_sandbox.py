"""Runs INSIDE kgym-sandbox (candidate profile) on a GPU machine; prints one JSON line.

Checks what a candidate needs and what it must not see: CUDA works (a matmul equals the CPU's),
exactly one GPU is visible, /dev holds only the standard nodes and the leased GPU's, and the
process is unprivileged (uid, capabilities, no_new_privs, seccomp).
"""
import json
import os

out = {"uid": os.getuid(), "dev": sorted(os.listdir("/dev"))}
with open("/proc/self/status") as f:
    for line in f:
        k, _, v = line.partition(":")
        if k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp"):
            out[k] = v.strip()
try:
    import torch
    out["cuda"] = torch.cuda.is_available()
    if out["cuda"]:
        out["device_count"] = torch.cuda.device_count()
        out["name"] = torch.cuda.get_device_name(0)
        torch.manual_seed(0)
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        got = (a.cuda() @ b.cuda()).cpu()
        out["matmul_max_err"] = float((got - a @ b).abs().max())
except Exception as e:  # noqa: BLE001 - reported, judged by the caller
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
