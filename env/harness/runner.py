"""kgym runner: runs ONE model (the candidate's ModelNew, or the reference Model for the eager
and torch.compile baselines) for the trusted judge (judge.py), and nothing else.

The same code serves both sides on purpose: the baselines and the candidate are timed through
the same path, so fixed costs (the socket round trip, the output copy) are the same for both.

For the candidate this process runs in the candidate sandbox, and everything in it is under the
agent's control once model_new.py is imported: the agent may patch this very file's functions.
So nothing here decides anything. The judge times the round trips from its own process, reads
the outputs from shared memory it owns, and compares them with a reference it computed itself.
Whatever this process says (errors, the list of ops it saw) is advice the judge may use to
refuse, never to accept.

Protocol: a SOCK_SEQPACKET socket (fd given as --fd) carries one JSON object per message. The
first message, "map", passes one fd (SCM_RIGHTS): a memfd (CPU) or a CUDA VMM allocation
exported as a POSIX fd (GPU, see gpushare.py). Tensors travel through that shared memory: the
judge writes inputs and weights there, the runner writes outputs there. "load" then builds the
model; only from then on does any of the agent's code run in this process. Every request carries
a random "nonce" that its reply echoes: the judge refuses a reply to anything else.
"""
import argparse
import array
import importlib.util
import json
import mmap
import os
import socket
import sys
import time
import traceback

MAX_MSG = 1 << 20


SPIN = {"s": 0.0}  # how long to poll for the next message before sleeping (set for CUDA by map)


def recv_msg(sock):
    """The next message. Polls (non-blocking) for a while first: a process asleep in recvmsg
    wakes up tens to hundreds of microseconds late, depending on the CPU's idle state, and that
    wake-up is inside the judge's timed window. The judge sends the next call within
    milliseconds while it times; an idle runner goes to sleep after SPIN["s"]. On CUDA only: on
    the CPU the forward itself runs here, and polling beside it (on a sibling hyperthread, or a
    shared core) would slow the very work being timed."""
    fds = array.array("i")
    space = socket.CMSG_SPACE(4 * fds.itemsize)
    deadline = time.monotonic() + SPIN["s"]
    while True:
        try:
            data, anc, _flags, _addr = sock.recvmsg(MAX_MSG, space, socket.MSG_DONTWAIT)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                data, anc, _flags, _addr = sock.recvmsg(MAX_MSG, space)
                break
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        raise EOFError("the judge closed the channel")
    return json.loads(data.decode()), list(fds)


def send_msg(sock, obj):
    sock.sendall(json.dumps(obj).encode())


class Runner:
    def __init__(self, args):
        self.args = args
        self.torch = None
        self.model = None
        self.shm = None
        self.inputs = []
        self.outputs = []
        self.device = "cpu"
        self.last = None

    # ---- shared memory views -----------------------------------------------------------------
    def view(self, spec):
        torch = self.torch
        dtype = getattr(torch, spec["dtype"])
        n = spec["nbytes"]
        if n == 0:
            return torch.empty(spec["shape"], dtype=dtype, device=self.shm.device)
        return self.shm[spec["offset"]: spec["offset"] + n].view(dtype).view(spec["shape"])

    # ---- messages ----------------------------------------------------------------------------
    def map(self, msg, fds):
        """Maps the judge's shared memory; no code of the agent has run yet."""
        if len(fds) != 1:
            raise RuntimeError("map carries exactly one shared-memory fd")
        self.device = msg["device"]
        import torch  # already imported by main(): this only binds the name

        self.torch = torch
        if self.device == "cuda":
            torch.cuda.init()
            torch.empty(1, device="cuda")  # the primary context, which the mapping joins
            SPIN["s"] = 0.05
        if msg.get("shm_kind") == "cuda":
            here = os.path.dirname(os.path.abspath(__file__))  # by path: -I keeps this folder off sys.path
            gpushare = load_module("kgym_gpushare", os.path.join(here, "gpushare.py"))
            self.arena = gpushare.Arena.import_fd(torch, fds[0], msg["shm_bytes"])
            self.shm = self.arena.base
        else:
            self.mapping = mmap.mmap(fds[0], msg["shm_bytes"])
            os.close(fds[0])
            self.shm = torch.frombuffer(self.mapping, dtype=torch.uint8)
            if self.device == "cuda":
                self.pin_shared_memory()
        return {}

    def load(self, msg, _fds):
        if self.shm is None:
            raise RuntimeError("load before map")
        self.model = self.build_model(msg)
        return {}

    def pin_shared_memory(self):
        """Page-locks host shared memory so device copies run at full speed (best effort)."""
        try:
            self.torch.cuda.cudart().cudaHostRegister(self.shm.data_ptr(), self.shm.numel(), 0)
        except Exception:  # pageable copies are slower, not wrong
            pass

    def build_model(self, msg):
        torch = self.torch
        kind = self.args.kind
        if kind == "candidate":
            sys.path.insert(0, self.args.ext_dir)
            import cuda_extension  # the module Compile built: first on the path, before the agent's code
            import torch.utils.cpp_extension as cpp_extension

            # KernelBench-style solutions: Compile built their load_inline sources into the
            # module (harness/inline.py); nothing is compiled in this process.
            cpp_extension.load_inline = lambda *a, **k: cuda_extension
            mod = load_module("model_new", self.args.module)
            cls = getattr(mod, "ModelNew", None)
            if cls is None:
                raise RuntimeError("model_new.py defines no class ModelNew")
            del cuda_extension
        else:
            mod = load_module("reference", self.args.module)
            cls = mod.Model
        model = cls(*msg.get("init_args", []))
        model = model.to(self.device).eval()
        if kind == "compile":
            model = torch.compile(model)
        return model

    def weights(self, msg, _fds):
        torch = self.torch
        target = getattr(self.model, "_orig_mod", self.model)
        state = {t["name"]: self.view(t).to(self.device, copy=True) for t in msg["tensors"]}
        with torch.no_grad():
            target.load_state_dict(state, strict=True)
        return {}

    def stage(self, msg, _fds):
        """Fresh input tensors (new storage every call) and the output regions."""
        # the last call's inputs go first: KernelBench's largest are 6-7 GB, and two sets of
        # them in one runner, beside the judge and the other runners, overfill an 80 GB card
        self.inputs = []
        values = []
        for spec in msg["inputs"]:
            if spec["kind"] == "tensor":
                values.append(self.view(spec).to(self.device, copy=True))
            else:
                values.append(spec["value"])
        self.inputs = values
        self.outputs = msg["outputs"]
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return {}

    def run(self, msg, _fds):
        """The timed part: the forward and a device-wide synchronisation, outputs kept."""
        torch = self.torch
        record = msg.get("record_ops", False) and self.args.kind == "candidate"
        ops = None
        events = None
        if self.device == "cuda":  # advisory only: the judge reports it, never pays by it
            events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            events[0].record()
        with torch.no_grad():
            if record:
                out, ops = run_recording(torch, self.model, self.inputs)
            else:
                out = self.model(*self.inputs)
        if events:
            events[1].record()
        if self.device == "cuda":
            torch.cuda.synchronize()  # every stream of the device: side-stream work counts
        self.last = out
        reply = {"seq": msg.get("seq")}
        if events:
            reply["device_ms"] = events[0].elapsed_time(events[1])
        if ops is not None:
            reply["ops"] = sorted(ops)
        return reply

    def fetch(self, msg, _fds):
        """Copies the last outputs into shared memory (timed separately by the judge, which
        charges any excess over a trusted copy of the same bytes to the candidate)."""
        out, self.last = self.last, None
        with self.torch.no_grad():
            self.write_outputs(out)
        return {"seq": msg.get("seq")}

    def ping(self, msg, _fds):
        """The bare round trip: the judge's measure of the fixed cost it subtracts."""
        return {"seq": msg.get("seq")}

    def write_outputs(self, out):
        torch = self.torch
        flat = flatten(torch, out)
        if len(flat) != len(self.outputs):
            raise RuntimeError(f"forward returned {len(flat)} outputs, the reference {len(self.outputs)}")
        for t, spec in zip(flat, self.outputs):
            if list(t.shape) != spec["shape"] or str(t.dtype) != "torch." + spec["dtype"]:
                raise RuntimeError(
                    f"output shape/dtype {list(t.shape)} {t.dtype} differs from the reference's "
                    f"{spec['shape']} torch.{spec['dtype']}"
                )
            self.view(spec).copy_(t)
        if self.device == "cuda":
            torch.cuda.synchronize()


def flatten(torch, out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            res.extend(flatten(torch, o))
        return res
    if isinstance(out, (int, float, bool)):
        return [torch.tensor(out)]
    raise RuntimeError(f"forward returned a {type(out).__name__}, not tensors")


def run_recording(torch, model, inputs):
    """Runs one forward under a dispatch mode that records every aten op that ran."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(str(func.overloadpacket.__name__))
            return func(*args, **(kwargs or {}))

    with Record():
        out = model(*inputs)
    return out, seen


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def quit_now():
    """Leaves at once, the output flushed: nothing is owed after the judge's bye, and the
    interpreter's orderly teardown (torch.compile's worker pool, atexit hooks, module cleanup)
    took seconds that the judge spent waiting, on GPU baselines inside the GPU's timing turn.
    The CUDA context goes with the process, as on any exit."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # a closed or broken stream: nothing left to save
            pass
    try:  # the C library's buffers too (a CUDA extension's printf)
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description="kgym runner (started by judge.py; not for humans)")
    ap.add_argument("--fd", type=int, required=True, help="the judge's SOCK_SEQPACKET channel")
    ap.add_argument("--kind", choices=["candidate", "eager", "compile"], required=True)
    ap.add_argument("--module", required=True, help="model_new.py (candidate) or the reference")
    ap.add_argument("--ext-dir", default="", help="where the built cuda_extension lives")
    args = ap.parse_args()
    sock = socket.socket(fileno=args.fd)
    try:  # seconds: started while the judge prepares the reference, so the two overlap
        import torch  # noqa: F401
    except Exception:  # reported when hello needs it
        pass
    runner = Runner(args)
    handlers = {
        "map": runner.map,
        "load": runner.load,
        "weights": runner.weights,
        "stage": runner.stage,
        "run": runner.run,
        "fetch": runner.fetch,
        "ping": runner.ping,
    }
    while True:
        try:
            msg, fds = recv_msg(sock)
        except EOFError:
            return 0
        op = msg.get("op")
        if op == "bye":
            send_msg(sock, {"ok": True})
            quit_now()
        try:
            reply = handlers[op](msg, fds)
            reply["ok"] = True
        except Exception as exc:  # reported to the judge, which decides what it means
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "trace": traceback.format_exc(limit=6)[-4000:]}
        reply["nonce"] = msg.get("nonce")  # the judge takes only the reply to what it asked
        send_msg(sock, reply)


if __name__ == "__main__":
    sys.exit(main())
