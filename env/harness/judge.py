"""kgym judge: the trusted side of one evaluation (Verify, Profile or the final one of Submit).

Started by the server (env/harness/eval.c) with the path of a job file; writes its verdict as JSON to
job["result_path"], a file in a directory the candidate never sees. It

  * scans the candidate's sources (scan.py) and refuses forbidden code before running any;
  * builds the reference Model from the task store's model.py (never the workspace's), in this
    process, and computes every expected output itself;
  * starts the candidate runner (runner.py) in the candidate sandbox with the launcher argv the
    server built, and the baseline runners (the same runner.py, on the reference) outside it;
  * feeds every call fresh inputs and weights drawn from the server's seed, through shared
    memory it owns, and reads the outputs back from there (nothing the candidate prints is
    parsed);
  * checks K fresh input sets plus a mixed-sign probe, requires outputs to track the reference
    across inputs (not only land inside the tolerance), and checks every timed output too;
  * times each call from this process: the "run" round trip (the forward and a device-wide
    synchronisation, so side streams are inside the window) less the bare round trip of a
    trusted runner, plus whatever the following "fetch" of the outputs takes beyond a trusted
    copy of the same bytes (work deferred past the reply, e.g. to a host thread, lands there),
    and whatever the staging and the judge's L2 flush before the call take beyond their
    references (GPU work queued early, before "run" was sent, lands there); with warm-up and an
    L2 flush before every call. Every reply must echo its request's random nonce.
"""
import array
import contextlib
import copy
import fcntl
import hashlib
import json
import math
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
import weakref
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scan  # noqa: E402

# part of every cached baseline's key: a change to what a baseline records (7: torch.compile's
# output on a task whose output is mostly rounding noise, KernelBench L2/23, is held to that
# noise and no longer refused) must not be answered from figures cached before it
HARNESS_VERSION = "kgym-judge-7"
MSG_MAX = 1 << 20
SPIN_S = 0.25  # Channel.receive on CUDA: how long to poll for a reply before sleeping
ALIGN = 256

# aten ops a candidate's forward may run: allocation, views, metadata. Anything else recorded
# during the candidate's forward is PyTorch compute (the dynamic backstop of the static scan).
ALLOWED_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "permute",
    "transpose", "t", "squeeze", "unsqueeze", "slice", "select", "alias", "detach", "lift_fresh",
    "contiguous", "flatten", "unflatten", "view_as", "reshape_as", "expand_as", "split",
    "chunk", "unbind", "narrow", "movedim", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_contiguous", "size", "stride", "dim", "numel", "_local_scalar_dense",
}


class Infra(Exception):
    """Our fault, not the candidate's: no reward either way."""


class CandidateFailed(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# The judge keeps CPU 0, the runners (candidate and baselines alike) get the others: the judge's
# own work (inputs, references, comparisons) then never competes with the call being timed.
RUNNER_CPUS = []


def split_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not shutil.which("taskset"):
        return
    os.sched_setaffinity(0, {cpus[0]})
    RUNNER_CPUS[:] = ["taskset", "-c", ",".join(str(c) for c in cpus[1:])]


# ---- the channel to a runner ------------------------------------------------------------------
class Channel:
    """One runner process and its SOCK_SEQPACKET channel."""

    def __init__(self, argv_template, env, log_cap, timeout_s):
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fd = str(child.fileno())
        argv = RUNNER_CPUS + [fd if a == "@FD@" else a for a in argv_template]
        self.log = bytearray()
        self.log_cap = log_cap
        self.proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        child.close()
        self.timeout_s = timeout_s
        # The candidate's channel gets one: a candidate that is merely slow must end with a
        # verdict (TIMEOUT, -1) before the server's own limit kills the judge (infra_error,
        # which pays nothing and would let slowness dodge the penalty).
        self.deadline = None
        self.spin = False
        self.abandoned = set()  # the nonces of requests that timed out: their late replies are skipped
        self.drainer = threading.Thread(target=self._drain, daemon=True)
        self.drainer.start()

    def _drain(self):
        """Keeps the tail of what the runner prints (shown to the agent, never parsed)."""
        for chunk in iter(lambda: self.proc.stdout.read(4096), b""):
            self.log += chunk
            if len(self.log) > self.log_cap:
                del self.log[: len(self.log) - self.log_cap]

    def log_text(self):
        return self.log.decode("utf-8", "replace")

    @staticmethod
    def request(msg):
        """(nonce, bytes) of one request: a fresh random nonce that its reply must echo, so that
        a reply queued ahead of time (answering "run" before it was asked, so that the timed
        window holds nothing) or one out of turn is refused."""
        nonce = secrets.token_hex(8)
        return nonce, json.dumps(dict(msg, nonce=nonce)).encode()

    def call(self, msg, fds=(), timeout_s=None, request=None):
        """Sends msg (as request(msg) made it, if given) and returns the runner's reply to it."""
        nonce, data = request or self.request(msg)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        limit = timeout_s or self.timeout_s
        by_deadline = False
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise CandidateFailed("TIMEOUT", "the evaluation's time limit ran out while the candidate ran")
            by_deadline, limit = left < limit, min(limit, left)
        try:
            self.sock.settimeout(limit)  # the send too: a runner that never reads blocks it
            self.sock.sendmsg([data], anc)
            return self.answer(nonce, limit)
        except socket.timeout:
            self.abandoned.add(nonce)
            if by_deadline:
                raise CandidateFailed("TIMEOUT", f"the evaluation's time limit ran out during '{msg['op']}'")
            raise CandidateFailed("TIMEOUT", f"no answer to '{msg['op']}' within {limit:.0f} s")
        except OSError as exc:
            raise CandidateFailed("RUNTIME_ERROR", f"the process died ({exc}); output:\n{self.log_text()[-2000:]}")

    def answer(self, nonce, limit):
        """The reply carrying nonce, within limit seconds. Late replies to requests that timed
        out before are skipped; any other reply is a protocol violation."""
        end = time.monotonic() + limit
        while True:
            raw = self.receive(max(0.001, end - time.monotonic()))
            if not raw:
                time.sleep(0.1)
                raise CandidateFailed("RUNTIME_ERROR", f"the process exited (status {self.exit_status()}); "
                                      f"output:\n{self.log_text()[-2000:]}")
            try:
                reply = json.loads(raw.decode())
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise CandidateFailed("RUNTIME_ERROR", "the process answered something other than the protocol")
            got = reply.get("nonce") if isinstance(reply, dict) else None
            if isinstance(got, str) and got in self.abandoned:
                self.abandoned.discard(got)
                continue
            if got != nonce:
                raise CandidateFailed("RUNTIME_ERROR", "the runner's reply does not answer the judge's request "
                                      "(a reply out of turn, or one sent before it was asked for)")
            if reply.get("ok") is not True:
                err = reply.get("error")
                raise CandidateFailed("RUNTIME_ERROR", str(err)[:4000] if err else "the runner refused")
            return reply

    def receive(self, limit):
        """The reply. On CUDA, polls (non-blocking) for SPIN_S first, so that the end of a short
        call is seen when it happens, not when this process is woken up; then sleeps until limit.
        Not on the CPU: there the forward computes on the CPUs, and polling beside it (a sibling
        hyperthread of a 2-vCPU machine) slows the very work being timed."""
        t0 = time.monotonic()
        if self.spin:
            self.sock.setblocking(False)
            while time.monotonic() - t0 < min(SPIN_S, limit):  # never past the caller's limit
                try:
                    return self.sock.recv(MSG_MAX)
                except BlockingIOError:
                    pass
        self.sock.settimeout(max(0.001, limit - (time.monotonic() - t0)))
        return self.sock.recv(MSG_MAX)

    def timed_call(self, msg, timeout_s=None):
        req = self.request(msg)  # outside the window: the baselines cached before nonces paid none
        t0 = time.perf_counter()
        reply = self.call(msg, timeout_s=timeout_s, request=req)
        return time.perf_counter() - t0, reply

    def close(self):
        with contextlib.suppress(Exception):
            self.sock.settimeout(2)
            self.sock.send(json.dumps({"op": "bye"}).encode())
            self.sock.recv(MSG_MAX)
        with contextlib.suppress(Exception):
            self.sock.close()
        self._end(grace_s=5)
        # the output it printed last (its pipe closes as it exits; bounded: a child that
        # escaped the group kill may hold it open)
        self.drainer.join(timeout=1)

    def _peek_exit(self):
        """The runner's waitid record once it has exited, None while it runs, without reaping it
        (Popen.poll would: then _end could no longer kill its process group safely). Raises
        ChildProcessError once it has been reaped."""
        return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)

    def exit_status(self):
        """The runner's exit status (negative: the signal), None while it runs or if unknown."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        try:
            info = self._peek_exit()
        except ChildProcessError:
            return None
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def _end(self, grace_s):
        """Waits up to grace_s for the runner to exit (it leaves at once after its bye:
        runner.quit_now), then kills whatever is left of its process group (torch.compile's
        workers; the runner itself if it did not exit) and reaps it. The group is killed while
        its leader is still an unreaped zombie, so its id cannot have gone to anyone else. A
        child that left the group (setsid, or setpgid into a group of its own) is not reached
        here: a sandbox profile with its own PID namespace ends those with the runner (its init
        goes, and the namespace with it); an unsandboxed one (weak mode) may outlive it."""
        if self.proc.returncode is not None:  # ended before: its pid may be someone else's now
            return
        deadline = time.monotonic() + grace_s
        try:
            while self._peek_exit() is None and time.monotonic() < deadline:
                time.sleep(0.005)
        except ChildProcessError:  # reaped already: its group id is no longer ours to signal
            self.proc.wait()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()


# ---- shared memory ----------------------------------------------------------------------------
class Shared:
    """Memory the judge owns and shares with its runners: inputs, weights and outputs travel
    through it (nothing the candidate prints is parsed). `base` is a uint8 tensor over all of it."""

    kind = "host"

    def layout(self, tensors, start):
        """Specs placing each tensor after start, aligned; returns (specs, end)."""
        specs, off = [], start
        for t in tensors:
            n = t.numel() * t.element_size()
            specs.append({"offset": off, "nbytes": n, "shape": list(t.shape),
                          "dtype": str(t.dtype).replace("torch.", "")})
            off += (n + ALIGN - 1) // ALIGN * ALIGN
        if off > self.nbytes:
            raise Infra(f"tensors need {off} bytes of shared memory, {self.nbytes} were made")
        return specs, off

    def view(self, spec):
        torch = self.torch
        dtype = getattr(torch, spec["dtype"])
        if spec["nbytes"] == 0:
            return torch.empty(spec["shape"], dtype=dtype, device=self.base.device)
        return self.base[spec["offset"]: spec["offset"] + spec["nbytes"]].view(dtype).view(spec["shape"])

    def write(self, spec, t):
        self.view(spec).copy_(t.detach().reshape(spec["shape"]))

    def published(self):
        """Called before a runner is told to read what was written: the writes must have landed."""


class HostShared(Shared):
    """A memfd mapped here and in the runner (CPU mode, or CUDA when device sharing is unavailable)."""

    def __init__(self, torch, nbytes, pin):
        import mmap

        self.torch = torch
        self.nbytes = nbytes
        self.fd = os.memfd_create("kgym-io", os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, nbytes)
        # The runner keeps the fd (mmap holds a duplicate), and a candidate's code can reach it:
        # shrunk, every later touch of the judge's mapping is a SIGBUS, a dead judge and no
        # verdict (infra_error, no penalty). Sealed, its size is fixed for good; writing into it
        # is the runner's job and changes nothing the judge decides by.
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.map = mmap.mmap(self.fd, nbytes)
        self.base = torch.frombuffer(self.map, dtype=torch.uint8)
        if pin:  # page-locked: copies to and from the GPU run at full speed
            with contextlib.suppress(Exception):
                torch.cuda.cudart().cudaHostRegister(self.base.data_ptr(), nbytes, 0)


class DeviceShared(Shared):
    """GPU memory exported as a POSIX fd (gpushare.py): on CUDA nothing crosses PCIe per call."""

    kind = "cuda"

    def __init__(self, torch, nbytes):
        import gpushare

        self.torch = torch
        self.arena, self.fd = gpushare.Arena.create(torch, nbytes)
        self.nbytes = self.arena.nbytes
        self.base = self.arena.base

    def published(self):
        self.torch.cuda.synchronize()


def make_shared(torch, nbytes, device, path):
    """Device memory on CUDA unless the job asks for host memory; returns (shared, note)."""
    if device == "cuda" and path != "host":
        try:
            return DeviceShared(torch, nbytes), "cuda-vmm"
        except Exception as exc:  # an old driver or no VMM support: host memory still works
            return HostShared(torch, nbytes, pin=True), f"host (GPU sharing unavailable: {exc})"
    return HostShared(torch, nbytes, pin=device == "cuda"), "host"


def nbytes_of(tensors):
    return sum((t.numel() * t.element_size() + ALIGN - 1) // ALIGN * ALIGN for t in tensors)


# ---- the evaluation ---------------------------------------------------------------------------
class Judge:
    def __init__(self, job):
        self.job = job
        self.started = time.monotonic()
        import torch

        self.torch = torch
        self.device = job["device"]
        self.rng = random.Random(job["seed"])
        self.atol = float(job.get("atol", 1e-2))
        self.rtol = float(job.get("rtol", 1e-2))
        self.checks_failed = []
        self.components = {"checks": []}
        self.last_mark = self.started
        self.ref_mod = load_reference(job["reference"])
        self.init_args = list(self.ref_mod.get_init_inputs())
        self.flush_buf = None
        self.inputs_kept = False  # inputs_and_reference: a task's drawn tensors outlive their draw
        self.pre_refs = None  # (write_s, flush_s): pre_run_refs, for a candidate's timing
        # reference_noise's estimates, by draw kind (task inputs or the probe's), made on demand
        self.noise = {}
        self.noise_rng = random.Random(f"reference-noise/{job['seed']}")  # self.rng's draws unchanged
        if self.device == "cuda":
            torch.cuda.init()
            self.flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def new_seed(self):
        return self.rng.getrandbits(63)

    def mark(self, phase):
        """Wall time since the previous mark, kept as components["phases_ms"][phase]: where a
        baselines job spends its (leased) time."""
        now = time.monotonic()
        self.components.setdefault("phases_ms", {})[phase] = round((now - self.last_mark) * 1e3, 1)
        self.last_mark = now

    # -- reference side --
    def fresh_weights(self, seed=None):
        torch = self.torch
        torch.manual_seed(self.new_seed() if seed is None else seed)
        model = self.ref_mod.Model(*self.init_args)
        return {k: v.detach().to(self.device) for k, v in model.state_dict().items()}

    def fresh_inputs(self, probe=False, seed=None):
        torch = self.torch
        torch.manual_seed(self.new_seed() if seed is None else seed)
        ctx = torch.device(self.device) if self.device == "cuda" else contextlib.nullcontext()
        with ctx:
            values = list(self.ref_mod.get_inputs())
        out = []
        for i, v in enumerate(values):
            values[i] = None  # each drawn tensor is held once: GPU memory (a probe's draw)
            if isinstance(v, torch.Tensor):
                v = v.to(self.device)
                if probe and v.is_floating_point():
                    # mixed-sign, wider inputs than the task's own distribution: catches answers
                    # that only hold on it (the identity for ReLU on U[0,1), closed-form means);
                    # scaled in place, the task's draw gone first (2 input-sized tensors at most)
                    scale = max(1.0, float(v.abs().amax()))
                    v = torch.randn_like(v).mul_(scale)
            out.append(v)
        return out

    def reference(self, weights, inputs, copy_inputs=True):
        """The reference's outputs on inputs, run on copies of them (a reference may change its
        inputs in place) unless copy_inputs is False (the caller drops them afterwards)."""
        torch = self.torch
        model = self.ref_model
        model.load_state_dict(weights, strict=True)
        if copy_inputs:
            inputs = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
        with torch.no_grad():
            out = model(*inputs)
        flat = flatten(torch, out)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return [t.detach() for t in flat]

    def inputs_and_reference(self, weights, probe=False):
        """Fresh inputs and the reference's outputs on them, with no copy of the inputs: the
        reference runs on one draw (which it may change in place), and the same seed draws the
        inputs again for the runner. A copy of KernelBench's largest inputs is 8 GiB of the GPU
        the candidate needs, at the judge's peak (an H100 was 1 GiB short for kb/L1/38). A task
        whose get_inputs does not follow torch's seed (another generator) draws differently the
        second time: the samples differ, and the reference runs again on a copy of that draw."""
        seed = self.new_seed()
        x = self.fresh_inputs(probe=probe, seed=seed)
        drawn = None if self.inputs_kept else input_sample(self.torch, x)
        if drawn is None:  # not to be drawn twice (see input_sample, inputs_kept): a copy, as before
            return x, self.reference(weights, x)
        kept = [weakref.ref(t) for t in x if isinstance(t, self.torch.Tensor)]
        want = self.reference(weights, x, copy_inputs=False)
        x = None
        if outlived(self.torch, kept, want):
            # a drawn tensor outlived the draw (a get_inputs returning a tensor it keeps, or a
            # reference keeping its input): what the reference did to it in place may show in
            # the next draws, so every later reference runs on a copy
            self.inputs_kept = True
            self.components["inputs_kept_by_task"] = True
        x = self.fresh_inputs(probe=probe, seed=seed)
        if not same_sample(self.torch, drawn, input_sample(self.torch, x)):
            self.components["inputs_redrawn_differ"] = True
            want = None
            want = self.reference(weights, x)
        return x, want

    def reference_noise(self, probe=False):
        """The reference's own rounding error, relative: per output, the L2 norm of its result
        minus the same model's in float64, over the result's own L2 norm (capped at 1), on one
        fresh draw of the task's inputs (or of the probe's); 0.0 for an output not in floating
        point. {"outputs": [...], "total": the same over every output}, or None when the
        float64 run is not possible or not meaningful (a reference that fixes its dtypes or
        draws random numbers in forward, an op without float64, out of memory). Made once per
        kind of draw, and only when a check is about to fail on the relative L2 error or on
        tracking: a task whose exact output is constant (KernelBench L2/23 takes the mean of a
        GroupNorm's output, 0 for any input) returns rounding noise, which no honest program
        reproduces to within rtol (torch.compile's own output was refused)."""
        if probe in self.noise:
            return self.noise[probe]
        torch = self.torch
        t0 = time.monotonic()
        # weights, inputs and the forwards from seeds of their own: one seed for all would make
        # a parameter and an input of the same shape and distribution equal
        seeds = [self.noise_rng.getrandbits(63) for _ in range(3)]
        noise = x = w = y = y64 = model64 = None
        try:
            x = self.fresh_inputs(probe=probe, seed=seeds[0])
            w = self.fresh_weights(seeds[1])
            torch.manual_seed(seeds[2])
            rng_before = rng_states(torch)
            y = self.reference(w, x)  # on a copy: x stays as drawn
            if rng_states(torch) != rng_before:
                raise ValueError("the reference draws random numbers in forward: its float64 twin "
                                 "draws others, so their distance is not rounding")
            model64 = copy.deepcopy(self.ref_model).double()
            x = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in x]
            with torch.no_grad():
                y64 = flatten(torch, model64(*x))
            x = model64 = None
            if len(y64) != len(y) or any(a.shape != b.shape for a, b in zip(y, y64)):
                raise ValueError("the float64 outputs differ in number or shape")
            diffs = [diff_norm(torch, [b], [a]) if a.is_floating_point() else 0.0 for a, b in zip(y, y64)]
            norms = [diff_norm(torch, [a]) if a.is_floating_point() else 0.0 for a in y]
            if not all(math.isfinite(v) for v in diffs + norms):
                raise ValueError("not finite")
            noise = {"outputs": [relative(d, n) for d, n in zip(diffs, norms)],
                     "total": relative(math.hypot(*diffs), math.hypot(*norms))}
            why = None
        except Exception as exc:  # noqa: BLE001 - any failure only leaves the floor out
            why = f"no estimate: {type(exc).__name__}: {str(exc)[:200]}"
        x = w = y = y64 = model64 = None
        self.release_cached_memory()
        self.noise[probe] = noise
        self.components.setdefault("reference_noise", {})["probe" if probe else "task"] = {
            **(noise or {"why": why}), "ms": round((time.monotonic() - t0) * 1e3, 1)}
        return noise

    def noise_floor(self, i, want_norm, probe):
        """compare's allowance for output i's L2 error beyond rtol: NOISE_MULTIPLE times the
        reference's rounding error scaled to this output (want_norm), where that error is at
        least NOISE_BOUND of the output (the output is mostly noise); else 0."""
        noise = self.reference_noise(probe)
        rho = noise["outputs"][i] if noise else 0.0
        return NOISE_MULTIPLE * rho * want_norm if rho >= NOISE_BOUND else 0.0

    # -- shared memory plan --
    def plan(self):
        torch = self.torch
        self.ref_model = self.ref_mod.Model(*self.init_args).to(self.device).eval()
        w = self.fresh_weights()
        x, y = self.inputs_and_reference(w)
        tensors_in = [v for v in x if isinstance(v, torch.Tensor)]
        # weights, outputs and inputs are laid out once each; the headroom is for inputs that
        # come out larger on a later call (a task drawing its shapes), capped: on the GPU this
        # is device memory, and doubling KernelBench's 6-7 GB tensors cost 12 GB of an 80 GB
        # card (a later call that does not fit is an Infra error that says so, see layout)
        n_in = nbytes_of(tensors_in)
        size = nbytes_of(w.values()) + nbytes_of(y) + n_in + min(n_in, SHM_HEADROOM_MAX) + (1 << 20)
        self.shm, self.components["data_path"] = make_shared(torch, size, self.device,
                                                             self.job.get("data_path", "auto"))
        self.components["shm_bytes"] = self.shm.nbytes  # device memory on CUDA: reported
        self.w_specs, self.w_end = self.shm.layout(list(w.values()), 0)
        self.out_specs, self.out_end = self.shm.layout(y, self.w_end)
        return w, x, y

    def send_weights(self, ch, weights):
        specs, _ = self.shm.layout(list(weights.values()), 0)
        for spec, (name, t) in zip(specs, weights.items()):
            spec["name"] = name
            self.shm.write(spec, t)
        self.shm.published()
        ch.call({"op": "weights", "tensors": specs})

    def stage(self, ch, inputs):
        """Writes the inputs into shared memory and has the runner take them; returns (the
        writes' seconds, the call's). The runner can see the inputs from the first write on."""
        torch = self.torch
        t_write = time.perf_counter()
        tensors = [v for v in inputs if isinstance(v, torch.Tensor)]
        specs, _ = self.shm.layout(tensors, self.out_end)
        it = iter(specs)
        wire = []
        for v in inputs:
            if isinstance(v, torch.Tensor):
                spec = next(it)
                self.shm.write(spec, v)
                wire.append(dict(spec, kind="tensor"))
            else:
                wire.append({"kind": "value", "value": v})
        self.shm.published()
        t0 = time.perf_counter()
        ch.call({"op": "stage", "inputs": wire, "outputs": self.out_specs})
        return t0 - t_write, time.perf_counter() - t0

    def read_outputs(self, copy=True):
        """The outputs in shared memory: copied, since a candidate's runner may still write there
        after its reply; a trusted baseline's are compared in place (copy=False), saving an
        output-sized buffer (6-7 GB for KernelBench's largest)."""
        views = [self.shm.view(s) for s in self.out_specs]
        return [v.clone() for v in views] if copy else views

    def release_cached_memory(self):
        """Hands the CUDA caching allocator's free blocks back to the driver at a phase's end:
        the judge's tensors of the phase before (the plan's, the checks', a baseline's) would
        otherwise stay reserved by this process while the next runner needs the memory. An
        80 GB card held 24 GB of them, unused, when KernelBench's largest ran out of memory."""
        if self.device == "cuda":
            self.torch.cuda.empty_cache()

    def flush_l2(self):
        if self.flush_buf is not None:
            self.flush_buf.zero_()
            self.torch.cuda.synchronize()

    def timed_flush(self):
        """flush_l2, timed: a candidate's work queued on the GPU before "run" (launched while
        staging, or by a thread watching the shared memory) runs first, since the contexts of
        two processes take turns, and lengthens this flush, which is charged beyond the
        reference (pre_run_refs)."""
        t0 = time.perf_counter()
        self.flush_l2()
        return time.perf_counter() - t0

    def pre_run_refs(self, ch):
        """The judge's own work between a call's first input write and its "run" (CUDA: writing
        the inputs, and the L2 flush), timed on the candidate's runner after its map and before
        its load, so that no code of the candidate has run yet, with the runner's process and
        CUDA context alive as they are in the timed loop. Returns (write_s, flush_s), each the
        upper quartile of the calls after the first few: the timed loop charges a candidate
        whatever its median flush takes beyond the flush's (charge); the writes' excess is
        reported only: rewriting one input set here is faster than writing a fresh one there
        (caches), by 10-20% of a small call on a 2-core CPU, which would be charged to every
        honest candidate. The inputs are drawn from a seed of their own (the job's sequence of
        inputs stays as it was), and dropped by the runner before its load."""
        x = self.fresh_inputs(seed=random.SystemRandom().getrandbits(63))
        writes, flushes = [], []
        for _ in range(PRE_RUN_REF_CALLS):
            t_write, _ = self.stage(ch, x)
            writes.append(t_write)
            flushes.append(self.timed_flush())
        x = None
        ch.call({"op": "stage", "inputs": [], "outputs": self.out_specs})  # the runner's copies go
        self.release_cached_memory()
        skip = PRE_RUN_REF_SKIP  # the first ones warm the allocator and the caches
        refs = percentile(writes[skip:], 75), percentile(flushes[skip:], 75)
        self.components["write_ref_ms"], self.components["flush_ref_ms"] = refs[0] * 1e3, refs[1] * 1e3
        return refs

    # -- checks --
    def compare(self, got, want, label, probe=False):
        """Elementwise allclose plus a normalised error; returns (ok, stats). In chunks: a
        KernelBench output can hold 1.6e9 elements, and whole float64 copies of it (and of the
        reference) would take tens of GB of the very GPU the candidate needs. An output that is
        mostly the reference's own rounding noise may have an L2 error of NOISE_MULTIPLE times
        that noise instead (noise_floor; probe: want is of the probe's draw); allclose holds
        either way."""
        torch = self.torch
        worst_abs, worst_rel, ok, why = 0.0, 0.0, True, ""
        for i, (g, w) in enumerate(zip(got, want)):
            special_ok, close, max_d, sq_d, sq_w = True, True, 0.0, 0.0, 0.0
            for gc, wc in chunk_pairs(g, w):
                finite = torch.isfinite(wc)
                inf = torch.isinf(wc)
                if not torch.equal(torch.isnan(gc), torch.isnan(wc)) or not torch.equal(torch.isinf(gc), inf) \
                        or not torch.equal(gc[inf], wc[inf]):
                    special_ok = False
                    break
                d = (gc - wc).abs()[finite]
                wf = wc[finite]
                if d.numel():
                    max_d = max(max_d, float(d.max()))
                    worst_rel = max(worst_rel, float((d / wf.abs().clamp_min(1e-12)).max()))
                close = close and bool(torch.allclose(gc[finite], wf, atol=self.atol, rtol=self.rtol))
                sq_d += float((d * d).sum())
                sq_w += float((wf * wf).sum())
            if not special_ok:
                ok, why = False, f"output {i}: NaN/Inf where the reference has none (or the reverse)"
                continue
            worst_abs = max(worst_abs, max_d)
            if not close:
                ok, why = False, f"output {i}: not within atol={self.atol} rtol={self.rtol} (max abs err {max_d:.3g})"
                continue
            if sq_w > 0:
                rel_l2 = math.sqrt(sq_d) / math.sqrt(sq_w)
                if rel_l2 > self.rtol:
                    floor = self.noise_floor(i, math.sqrt(sq_w), probe)
                    if math.sqrt(sq_d) > floor:
                        ok, why = False, f"output {i}: relative L2 error {rel_l2:.3g} above {self.rtol}"
                        if floor:
                            why += f" (the reference's output is mostly rounding noise: an L2 error of " \
                                   f"{NOISE_MULTIPLE}x its own, {floor:.3g}, was allowed; this one is {math.sqrt(sq_d):.3g})"
        return ok, {"label": label, "ok": ok, "max_abs_err": worst_abs, "max_rel_err": worst_rel,
                    **({"why": why} if why else {})}

    def check_call(self, ch, weights, inputs, want, label, record=False, probe=False):
        """One untimed call on inputs, its outputs compared with want (inputs_and_reference's;
        probe: of the probe's draw)."""
        if weights is not None:
            self.send_weights(ch, weights)
        self.stage(ch, inputs)
        reply = ch.call({"op": "run", "seq": 0, "record_ops": record})
        ch.call({"op": "fetch", "seq": 0})
        got = self.read_outputs()
        ok, stats = self.compare(got, want, label, probe=probe)
        return ok, stats, got, reply

    def correctness(self, ch, w0, x0, y0):
        """K checks with fresh weights and inputs each, then the probe; records tracking data."""
        k = int(self.job.get("checks", 5))
        # tracking data, kept as norms: whole float64 copies of K outputs would not fit a GPU
        # for the largest KernelBench tasks
        prev, diffs, norms, errs = None, [], [], []
        for i in range(k):
            planned = i == 0 and x0 is not None  # the plan's inputs and outputs, when still kept
            w = w0 if i == 0 else self.fresh_weights()
            x, want = (x0, y0) if planned else self.inputs_and_reference(w)
            self.cur_w = w
            record = i == 0 and self.job.get("record_ops", True)
            ok, stats, got, reply = self.check_call(ch, w, x, want, f"check {i + 1}", record=record)
            x = None
            if record:
                self.check_ops(reply.get("ops"))
            self.components["checks"].append(stats)
            if not ok:
                raise CandidateFailed("INCORRECT", f"check {i + 1} of {k} failed: {stats['why']}")
            norms.append(diff_norm(self.torch, want, None))
            errs.append(diff_norm(self.torch, got, want))
            if prev is not None:
                diffs.append(diff_norm(self.torch, want, prev))
            prev = want
            del got
        want = prev = None  # GPU memory: the probe draws its own
        self.tracking(diffs, norms, errs)
        if self.job.get("probe", True):
            self.probe(ch)

    def check_ops(self, ops, key="ops_seen"):
        if ops is None:  # asked for, not given: the runner was tampered with, or is broken
            raise CandidateFailed("RUNTIME_ERROR", "the runner returned no op record for a recorded call")
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise CandidateFailed("RUNTIME_ERROR", "the runner's op record is not a list of names")
        bad = sorted(set(ops) - ALLOWED_OPS)
        self.components[key] = ops[:200]
        if bad:
            raise CandidateFailed("FORBIDDEN_CODE", "PyTorch compute ran in ModelNew.forward: aten::" +
                                  ", aten::".join(bad[:20]) + " (only cuda_extension kernels may compute)")

    def tracking(self, diffs, norms, errs, where="checks"):
        """An output must follow the reference across inputs, not merely sit inside the tolerance.
        diffs: the reference's change between consecutive checks; norms: its size; errs: the
        candidate's error on each check (all L2 norms over every output). where: "checks" or
        "timed" (the same rule over the timed calls)."""
        if not diffs:
            return
        var = statistics.mean(diffs)
        scale = statistics.mean(norms)
        suffix = "" if where == "checks" else "_" + where
        self.components["reference_variation" + suffix] = var
        if var <= 1e-7 * max(scale, 1e-30):
            self.components["reference_degenerate"] = True  # the task itself ignores its inputs
            return
        ratio = max(errs) / var
        self.components["tracking_ratio" + suffix] = ratio
        if ratio > 0.5 and self.noise_bound():
            self.components["reference_degenerate"] = True  # constant but for its rounding noise
            return
        if ratio > 0.5:
            which = "" if where == "checks" else " in the timed calls"
            raise CandidateFailed("INCORRECT", f"the output does not track the reference across inputs{which}: its "
                                  f"error ({max(errs):.3g}) is {ratio:.2f}x the reference's own change between inputs")

    def noise_bound(self):
        """Whether the reference's outputs are mostly its own rounding noise (NOISE_BOUND of their
        norm, on the task's draws): their change between inputs is then noise too, and tracking
        it means nothing. Only then: a replayed answer on a nearly constant output with a real
        signal (KernelBench L2/42, VGG16) must still fail tracking."""
        noise = self.reference_noise()
        return bool(noise) and noise["total"] >= NOISE_BOUND

    def probe(self, ch):
        torch = self.torch
        x, want = self.inputs_and_reference(self.cur_w, probe=True)
        if not all(bool(torch.isfinite(t).all()) for t in want if t.is_floating_point()):
            self.components["probe"] = "skipped: the reference is not finite on mixed-sign inputs"
            return
        ok, stats, _, _ = self.check_call(ch, None, x, want, "probe (mixed-sign inputs)", probe=True)
        self.components["checks"].append(stats)
        self.components["probe"] = "passed" if ok else "failed"
        if not ok:
            raise CandidateFailed("INCORRECT", f"the mixed-sign probe failed: {stats['why']}")

    # -- timing --
    # Hidden calls among the candidate's timed ones: after any timed call, with these odds,
    # and once each after the last, so that no call index is safe to cheat at (red team C:
    # hidden calls drawn from the first min_reps only were beaten by counting past them).
    AUDIT_ODDS, PROBE_ODDS = 0.1, 0.05

    def timed(self, ch, check_calls=None):
        """Times calls on fresh inputs, each output checked (or only the first check_calls: the
        trusted baselines, whose later outputs prove nothing new, and whose comparison of a
        KernelBench-sized output, ~0.3 s a call, would be 90% of a baseline's wall time).
        Returns [(run_s, fetch_s)]: the
        forward with a device-wide sync, then the copy of its outputs, timed apart so that the
        copy (a fixed, output-sized cost) stays out of the figure unless it takes longer than a
        trusted copy of the same bytes (work deferred past the first reply shows up there).
        For the candidate, every timed output must also track the reference across inputs, as
        in the checks, and untimed audit and probe calls hide among the timed ones (AUDIT_ODDS)."""
        t = self.job.get("timing", {})
        warm, min_reps, max_reps = int(t.get("warmup", 2)), int(t.get("min_reps", 10)), int(t.get("max_reps", 100))
        budget = float(t.get("budget_s", 2.0))
        wall_cap = float(t.get("wall_cap_s", 20.0))
        candidate = check_calls is None
        dice = random.SystemRandom()  # not the job's seed: nothing the candidate can predict
        if candidate:
            # a few more warm-up calls and a shorter loop, at random: a call's index tells
            # nothing of its role, nor where the loop ends
            warm += dice.randint(0, 3)
            max_reps = max(min_reps, max_reps - dice.randint(0, max_reps // 4))
        track = {"diffs": [], "norms": [], "errs": [], "prev": None}
        samples, spent, i, t0 = [], 0.0, 0, time.monotonic()
        self.reported_device_ms = []
        loop = LoopClock()  # where the loop's wall time goes, reported per runner
        while i < warm + max_reps:
            loop.calls += 1
            checked = candidate or i < check_calls
            x, want = (None, None) if checked else (self.fresh_inputs(), None)
            loop.lap("inputs")
            if checked:  # its inputs are drawn with its reference: both in this lap
                x, want = self.inputs_and_reference(self.cur_w)
            loop.lap("reference")
            t_write, t_stage = self.stage(ch, x)  # the writes' time: reported (pre_run_refs)
            x = None  # the runner has its copy: GPU memory for the outputs' copy and compare
            loop.lap("stage")
            t_flush = self.timed_flush()
            loop.lap("flush")
            t_run, reply = ch.timed_call({"op": "run", "seq": i})
            t_fetch, _ = ch.timed_call({"op": "fetch", "seq": i})
            loop.lap("run_fetch")
            # an output-sized copy, only to compare (a trusted baseline's compared in place)
            got = self.read_outputs(copy=candidate) if checked else None
            loop.lap("read")
            if checked:
                ok, stats = self.compare(got, want, f"timed call {i + 1}")
                if not ok:
                    raise CandidateFailed("INCORRECT", f"timed call {i + 1} returned a wrong output: {stats['why']}")
                if candidate:
                    self.track_call(track, got, want)
            loop.lap("compare")
            # this call's tensors go before the next ones (a hidden call's, the next call's) are
            # made: with KernelBench's largest (6-7 GB each), two sets at once beside the runners
            # overfill an 80 GB card (want lives on in track["prev"] where tracking needs it)
            x = want = got = None
            if i >= warm:
                samples.append(Sample(t_run, t_fetch, t_stage, t_write, t_flush))
                dev = reply.get("device_ms")
                if isinstance(dev, (int, float)) and math.isfinite(dev):
                    self.reported_device_ms.append(float(dev))
                spent += t_run
                # enough calls and either the timing budget or (big tensors: every call moves
                # them through shared memory) the wall-clock cap is spent
                if len(samples) >= min_reps and (spent > budget or time.monotonic() - t0 > wall_cap):
                    break
            if candidate and dice.random() < self.AUDIT_ODDS:
                self.hidden_call(ch, i, audit=True, track=track)
            if candidate and self.job.get("probe", True) and dice.random() < self.PROBE_ODDS:
                self.hidden_call(ch, i, audit=False, track=track)
            i += 1
        self.components.setdefault("timing_loop_ms", {})[ch.what] = loop.report()
        if candidate:
            self.hidden_call(ch, i, audit=True, track=track)  # after the last: always one of each
            if self.job.get("probe", True):
                self.hidden_call(ch, i + 1, audit=False, track=track)
            self.tracking(track["diffs"], track["norms"], track["errs"], where="timed")
        return samples

    def track_call(self, track, got, want):
        """Adds one checked call to the tracking data (norms only, as in correctness)."""
        torch = self.torch
        track["norms"].append(diff_norm(torch, want, None))
        track["errs"].append(diff_norm(torch, got, want))
        if track["prev"] is not None:
            track["diffs"].append(diff_norm(torch, want, track["prev"]))
        track["prev"] = want

    def hidden_call(self, ch, seq, audit, track):
        """One untimed call among the timed ones: the audit (task inputs, ops recorded, tracked)
        or the mixed-sign probe (skipped when the reference is not finite on it)."""
        x, want = self.inputs_and_reference(self.cur_w, probe=not audit)
        if not audit and not all(bool(self.torch.isfinite(t).all()) for t in want if t.is_floating_point()):
            return
        self.stage(ch, x)
        x = None
        record = audit and self.job.get("record_ops", True)
        reply = ch.call({"op": "run", "seq": seq, "record_ops": record})
        ch.call({"op": "fetch", "seq": seq})
        got = self.read_outputs()
        label = "audit call among the timed ones" if audit else "probe among the timed calls (mixed-sign inputs)"
        ok, stats = self.compare(got, want, label, probe=not audit)
        self.components["checks"].append(stats)
        if not ok:
            raise CandidateFailed("INCORRECT", f"the {label} returned a wrong output: {stats['why']}")
        if record:
            self.check_ops(reply.get("ops"), key="ops_seen_audit")
        if audit:
            self.track_call(track, got, want)

    def ping_overhead(self, ch):
        """The bare round trip to a (trusted) runner, subtracted from every run window."""
        times = [ch.timed_call({"op": "ping", "seq": i})[0] for i in range(50)]
        return statistics.median(times[10:])


    # -- runners --
    def env_for_runner(self):
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "CUDA_VISIBLE_DEVICES", "HOME", "LANG", "TMPDIR",
                                                            "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "TORCHINDUCTOR_CACHE_DIR")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def baseline_argv(self, kind):
        job = self.job
        return [job["baseline_python"], "-I", job["runner_path"], "--fd", "@FD@", "--kind", kind,
                "--module", job["reference"]]

    def baseline_channel(self, kind):
        return self.hello(self.spawn(self.baseline_argv(kind), self.env_for_runner(), kind))

    def spawn(self, argv, env, what):
        """Starts a runner; it imports torch while this process prepares (see hello)."""
        ch = Channel(argv, env, 64 << 10, float(self.job.get("call_timeout_s", 120)))
        ch.what = what
        ch.spin = self.device == "cuda"
        return ch

    def hello(self, ch):
        """Maps the shared memory (before any candidate code is loaded: a failure there is ours),
        then loads the model (from here on, everything the runner says is the candidate's)."""
        start = float(self.job.get("start_timeout_s", 300))
        try:
            ch.call({"op": "map", "device": self.device, "shm_kind": self.shm.kind, "shm_bytes": self.shm.nbytes},
                    fds=[self.shm.fd], timeout_s=start)
        except CandidateFailed as exc:
            raise Infra(f"the {ch.what} runner could not map the shared memory: {exc}")
        if ch.what == "candidate" and self.job["mode"] in ("profile", "final") and self.flush_buf is not None:
            try:
                self.pre_refs = self.pre_run_refs(ch)
            except CandidateFailed as exc:
                raise Infra(f"the candidate runner failed before its code was loaded: {exc}")
        ch.call({"op": "load", "init_args": self.init_args}, timeout_s=start)
        return ch

    def run(self):
        job = self.job
        comp = self.components
        comp.update({"harness": HARNESS_VERSION, "device": self.device, "atol": self.atol, "rtol": self.rtol})
        violations = scan.scan_dir(job["candidate_dir"])
        violations += scan.scan_extension(os.path.join(job["candidate_dir"], "ext", "cuda_extension.so"))
        if violations:
            comp["static_violations"] = violations[:50]
            raise CandidateFailed("FORBIDDEN_CODE", "the static scan refused the candidate:\n" +
                                  "\n".join(violations[:20]))
        cand = self.spawn(job["candidate_argv"], {}, "candidate")
        cand.deadline = self.started + float(job.get("deadline_s", 800))
        try:
            w0, x0, y0 = self.plan()
            self.cur_w = w0
            base = None
            if job["mode"] in ("profile", "final"):
                # Baselines first: the candidate's process has only imported torch so far (its
                # code loads at hello), so it cannot disturb the shared, cached figures. The
                # plan's inputs and outputs are not kept through them (GPU memory: the first
                # check then draws its own, as the others do).
                x0 = y0 = None
                self.release_cached_memory()
                base = self.baselines()
            self.release_cached_memory()
            self.hello(cand)
            self.correctness(cand, w0, x0, y0)
            x0 = y0 = None  # GPU memory: the timing loop makes its own
            self.release_cached_memory()
            comp["correct"] = True
            if base is not None:
                self.profile(cand, base)
        finally:
            cand.close()  # first: what it printed last is then in the log
            comp["candidate_output"] = cand.log_text()[-4000:]

    def run_baselines(self):
        """mode "baselines": the eager and compile figures alone, no candidate (kgym-bench
        baselines). Measured, or taken from the cache, exactly as a Profile would. The server
        may run a few of these on one GPU under a shared lease: the interpreters and runners
        start (import torch) side by side, and everything that touches the GPU after that (the
        reference's forwards, the runners' CUDA set-up and model, the timed calls) waits for the
        GPU's timing lock."""
        comp = self.components
        comp.pop("checks", None)
        comp.update({"harness": HARNESS_VERSION, "device": self.device})
        self.mark("start")  # interpreter, torch import, CUDA init, the reference module
        runners = None
        remeasure = bool(self.job.get("remeasure"))  # an operator's call: past the cache
        if remeasure or not os.path.exists(self.baseline_path(self.baseline_key()[0])):
            runners = self.start_baseline_runners()  # their imports overlap other judges' timing
            self.mark("runners_started")
        try:
            with self.gpu_turn():
                self.mark("gpu_wait")
                w0 = self.plan()[0]  # the planned inputs and outputs are not kept: GPU memory
                self.cur_w = w0
                self.release_cached_memory()
                self.mark("plan")
                base = self.baselines(runners, remeasure=remeasure)
                runners = None  # baselines() closed them
        finally:
            for ch in runners or ():
                ch.close()
        for k in ("t_eager_ms", "spread_eager", "t_compile_ms", "spread_compile", "compile_unavailable",
                  "overhead_ms", "device_name", "torch_version", "measured_unix"):
            if k in base:
                comp[k] = base[k]
        comp["baseline_cached"] = base.get("cached", False)
        comp["baseline_key"] = base["key"]

    @contextlib.contextmanager
    def gpu_turn(self):
        """The GPU's timing lock (an flock the server names when measurements share the GPU;
        nothing to take when this judge holds the GPU alone). A killed judge's lock goes with
        its file descriptor."""
        path = self.job.get("gpu_timing_lock")
        if not path:
            yield
            return
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def run_warmup(self):
        """mode "warmup": torch.compile compiles the reference once, untimed, under a shared GPU
        lease, so that the baselines measurement (exclusive lease) finds Inductor's caches under
        TORCHINDUCTOR_CACHE_DIR warm and holds the GPU for the timing alone. Nothing to do when
        the task's baselines are cached already."""
        comp = self.components
        comp.pop("checks", None)
        comp.update({"harness": HARNESS_VERSION, "device": self.device})
        key, dev = self.baseline_key()
        # the same fields as a measurement's: a client keeping figures of one device and torch
        # version learns at the first warm-up that this server's differ, before any timing
        comp.update({"baseline_key": key, "device_name": dev, "torch_version": self.torch.__version__})
        if os.path.exists(self.baseline_path(key)):
            comp["warmup"] = "cached"
            return
        w0, x0 = self.plan()[:2]  # the planned outputs are not kept: GPU memory
        self.release_cached_memory()
        t0 = time.monotonic()
        ch = None
        try:
            ch = self.baseline_channel("compile")
            self.send_weights(ch, w0)
            self.stage(ch, x0)
            ch.call({"op": "run", "seq": 0})  # the first call compiles
            ch.call({"op": "fetch", "seq": 0})
            comp["warmup"] = "compiled"
        except CandidateFailed as exc:  # the measurement will record compile_unavailable itself
            comp["warmup"] = "compile_failed"
            comp["compile_unavailable"] = str(exc)[:1000]
        finally:
            if ch is not None:
                ch.close()
        comp["warmup_ms"] = (time.monotonic() - t0) * 1e3

    def profile(self, cand, base):
        torch = self.torch
        comp = self.components
        samples = self.timed(cand)
        flush_ref = None
        if self.pre_refs:
            # the smaller of this runner's pre-load reference and the eager loop's (a trusted
            # runner, same loop; absent from baselines cached before it was kept): load on the
            # machine while the reference was taken cannot buy a candidate slack
            flush_ref = min(self.pre_refs[1], base.get("flush_ref_ms", math.inf) / 1e3)
            comp["flush_ref_used_ms"] = flush_ref * 1e3
            flushes = [s.flush for s in samples]
            comp["flush_excess_ms"] = median_excess(flushes, flush_ref) * 1e3
            comp["flush_charged_ms"] = flush_charge(flushes, flush_ref) * 1e3
            comp["write_excess_ms"] = median_excess([s.write for s in samples], self.pre_refs[0]) * 1e3
        cand_ms = charge(samples, base["overhead_ms"] / 1e3, base["fetch_ref_ms"] / 1e3,
                         base["stage_ref_ms"] / 1e3, flush_ref)
        comp["t_candidate_ms"] = statistics.median(cand_ms)
        comp["percentiles_candidate_ms"] = {str(p): percentile(cand_ms, p) for p in (10, 25, 50, 75, 90)}
        if self.reported_device_ms:  # the runner's own CUDA-event figure: reported, never paid by
            comp["runner_reported_device_ms"] = statistics.median(self.reported_device_ms)
        comp["spread_candidate"] = spread(cand_ms)
        comp["reps_candidate"] = len(cand_ms)
        comp["overhead_ms"] = base["overhead_ms"]
        comp["fetch_ref_ms"] = base["fetch_ref_ms"]
        comp["stage_ref_ms"] = base["stage_ref_ms"]
        comp["t_eager_ms"] = base["t_eager_ms"]
        comp["spread_eager"] = base.get("spread_eager")
        comp["t_compile_ms"] = base.get("t_compile_ms")
        comp["spread_compile"] = base.get("spread_compile")
        if base.get("compile_unavailable"):
            comp["compile_unavailable"] = base["compile_unavailable"]
        comp["baseline_cached"] = base.get("cached", False)
        comp["baseline_key"] = base["key"]
        # where the baselines were measured: a report of many tasks names the GPU from these
        comp["device_name"] = base.get("device_name")
        comp["torch_version"] = base.get("torch_version")
        del torch

    # -- baselines (cached per task, device, torch version, seed policy) --
    def baseline_key(self):
        torch = self.torch
        with open(self.job["reference"], "rb") as f:
            code = f.read()
        dev = torch.cuda.get_device_name() if self.device == "cuda" else "cpu:" + cpu_model()
        parts = [HARNESS_VERSION, hashlib.sha256(code).hexdigest(), dev, torch.__version__, "fresh-seed-per-call",
                 json.dumps(self.job.get("timing", {}), sort_keys=True), str(torch.get_num_threads())]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32], dev

    def baseline_path(self, key):
        return os.path.join(self.job["cache_dir"], "baselines", key + ".json")

    def baselines(self, runners=None, remeasure=False):
        """The task's baselines from the cache, or measured (with the runners given, if any:
        they are closed either way); remeasure: measured even when cached, the new figures
        replacing the cached ones (kgym-bench baselines --remeasure-above)."""
        key, dev = self.baseline_key()
        path = self.baseline_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one measurement per key; the others wait and reuse it
            if os.path.exists(path) and not remeasure:
                for ch in runners or ():
                    ch.close()
                with open(path) as f:
                    base = json.load(f)
                base["cached"] = True
                return base
            base = self.measure_baselines(runners)
            base.update({"key": key, "device_name": dev, "torch_version": self.torch.__version__,
                         "measured_unix": time.time()})
            if base.pop("compile_timed_out", False):
                # a compile that ran out of time says more about the machine's load then (an
                # agent's busy loops, red team) than about the task: measured again next time,
                # never kept as "unavailable" for every later episode
                base["cached"] = False
                base["not_cached"] = "torch.compile timed out"
                return base
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(base, f)
            os.replace(tmp, path)
            return base

    def start_baseline_runners(self):
        """The eager and compile runners, started at once. Each imports torch as it starts; a
        ping's reply says it has (a failed start is reported by hello, later)."""
        env = self.env_for_runner()
        runners = (self.spawn(self.baseline_argv("eager"), env, "eager"),
                   self.spawn(self.baseline_argv("compile"), env, "compile"))
        start = float(self.job.get("start_timeout_s", 300))
        for ch in runners:
            with contextlib.suppress(CandidateFailed):
                ch.call({"op": "ping", "seq": 0}, timeout_s=start)
        return runners

    def measure_baselines(self, runners=None):
        """Eager and compile figures, with the runners given (started, and closed here) or
        started now. Both load the model before anything is timed, so that no runner's start-up
        runs beside timed calls."""
        eager, comp = runners or self.start_baseline_runners()
        base = {}
        try:
            try:
                self.hello(eager)
            except CandidateFailed as exc:
                raise Infra(f"the eager baseline failed: {exc}")
            try:
                self.hello(comp)
            except CandidateFailed as exc:
                base["compile_unavailable"] = str(exc)[:1000]
                base["compile_timed_out"] = exc.code == "TIMEOUT"
            self.mark("runners_ready")
            self.time_eager(eager, base)
            eager.close()
            self.release_cached_memory()
            self.mark("eager")
            if "compile_unavailable" not in base:
                self.time_compile(comp, base)
                self.mark("compile")
            else:
                base["t_compile_ms"] = None
        finally:
            eager.close()
            comp.close()
        self.mark("runners_closed")
        return base

    def time_eager(self, eager, base):
        try:
            ping = self.ping_overhead(eager)
            self.send_weights(eager, self.cur_w)
            samples = self.timed(eager, check_calls=BASELINE_CHECKED_CALLS)
        except CandidateFailed as exc:
            raise Infra(f"the eager baseline failed: {exc}")
        fetch_ref = statistics.median(s.fetch for s in samples)
        stage_ref = statistics.median(s.stage for s in samples)
        ms = charge(samples, ping, fetch_ref, stage_ref)
        base.update({"overhead_ms": ping * 1e3, "fetch_ref_ms": fetch_ref * 1e3, "stage_ref_ms": stage_ref * 1e3,
                     "t_eager_ms": statistics.median(ms), "spread_eager": spread(ms)})
        if self.flush_buf is not None:  # a candidate's flush reference, at most this (profile)
            base["flush_ref_ms"] = percentile([s.flush for s in samples], 75) * 1e3

    def time_compile(self, comp, base):
        try:
            self.send_weights(comp, self.cur_w)
            ms = charge(self.timed(comp, check_calls=BASELINE_CHECKED_CALLS), base["overhead_ms"] / 1e3,
                        base["fetch_ref_ms"] / 1e3, base["stage_ref_ms"] / 1e3)
            base["t_compile_ms"], base["spread_compile"] = statistics.median(ms), spread(ms)
        except CandidateFailed as exc:
            base["t_compile_ms"] = None
            base["compile_unavailable"] = str(exc)[:1000]
            base["compile_timed_out"] = exc.code == "TIMEOUT"


class LoopClock:
    """Wall time per step of a timing loop, summed over its calls: which of the judge's own steps
    (inputs, reference, staging, comparison) make a measurement long. Reported, never charged."""

    def __init__(self):
        self.total = {}
        self.calls = 0
        self.last = time.perf_counter()

    def lap(self, step):
        now = time.perf_counter()
        self.total[step] = self.total.get(step, 0.0) + now - self.last
        self.last = now

    def report(self):
        out = {k: round(v * 1e3, 1) for k, v in self.total.items()}
        out["calls"] = self.calls
        return out


def charge(samples, ping_s, fetch_ref_s, stage_ref_s, flush_ref_s=None):
    """Milliseconds per call: the run window less the round trip, plus any time the output copy
    (fetch) or the input copy before it (stage) took beyond a trusted runner's copies of the same
    bytes: work moved out of the timed call, before it or after it, is charged to it. A
    candidate's (flush_ref_s given) also pays, on every call, whatever its median L2 flush took
    beyond the reference and FLUSH_SLACK (pre_run_refs): GPU work queued before "run" delays the
    flush. Charged on the median, not per call: per call, an honest candidate would pay the
    flush's noise above the reference. Moving work into fewer than half the flushes gains nothing
    either: the figure paid is the median call. The trusted baselines pay no such term (their
    figures stay comparable with those measured before it). samples: Samples."""
    late = flush_charge([s.flush for s in samples], flush_ref_s) if flush_ref_s is not None and samples else 0.0
    return [max(s.run - ping_s + max(0.0, s.fetch - fetch_ref_s) + max(0.0, s.stage - stage_ref_s) + late,
                1e-6) * 1e3 for s in samples]


def flush_charge(flushes, ref):
    """What a candidate pays per call for its flushes: their median's excess over the reference
    and its slack (FLUSH_SLACK)."""
    return median_excess(flushes, ref * (1 + FLUSH_SLACK))


def median_excess(values, ref):
    """How far the median of values lies above ref (0 when below): the part of the judge's own
    work a candidate pays for (charge), or is shown (write_excess_ms)."""
    return max(0.0, statistics.median(values) - ref)


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def spread(ms):
    """Coefficient of variation of the middle 80% of the samples (the tails are noise)."""
    s = sorted(ms)
    cut = len(s) // 10
    mid = s[cut: len(s) - cut] if len(s) - 2 * cut >= 3 else s
    mean = statistics.mean(mid)
    return statistics.pstdev(mid) / mean if mean > 0 else 0.0


def flatten(torch, out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten(torch, o)]
    if isinstance(out, (int, float, bool)):
        return [torch.tensor(out)]
    raise Infra(f"the reference returned a {type(out).__name__}")


# timed calls whose outputs a baseline (trusted: PyTorch eager, torch.compile) has checked; the
# candidate's are all checked
BASELINE_CHECKED_CALLS = 3

CHUNK_ELEMS = 1 << 25  # elements compared at once: float64 temporaries of 256 MiB

# An output that is mostly the reference's own rounding noise (its distance from its float64
# twin is at least NOISE_BOUND of its norm, see Judge.reference_noise: an exact answer of 0
# computed in float32) may be off by NOISE_MULTIPLE times that distance in L2 instead of rtol.
# Honest programs sum in another order, fuse, or compute exactly, and land a few times that
# distance away (torch.compile on KernelBench L2/23 on a CPU: 7x); 100x leaves room, and admits
# only answers within 100 rounding errors of the exact one; allclose still applies. Outputs with
# a real signal get no floor at all: TF32 convolutions alone are ~3e-4 of their output, and a
# floor there would loosen half of KernelBench beyond rtol.
NOISE_BOUND = 0.5
NOISE_MULTIPLE = 100

SHM_HEADROOM_MAX = 1 << 30  # shared memory beyond the planned inputs, at most (plan)
PRE_RUN_REF_CALLS, PRE_RUN_REF_SKIP = 12, 3  # staged calls that time the judge's pre-run work, warm-ups
# A candidate's median flush may exceed the flush reference by this fraction of it unpaid: on an
# H100 (session 29) every honest bundled solution's median flush lay 1-5% (3-12 us of ~240 us)
# above the reference, taken with no candidate kernels in flight; charging that would tax small
# kernels most. Work hidden in the flush gains at most this much per call.
FLUSH_SLACK = 0.05


class Sample(NamedTuple):
    """One timed call, in seconds: the run round trip, the output copy after it (fetch), the input
    copy before it (stage), the judge's writes of the inputs, and its L2 flush (none on a CPU: the
    time of an empty call)."""
    run: float
    fetch: float
    stage: float
    write: float
    flush: float


def outlived(torch, refs, outputs):
    """Whether a tensor of refs (weak references) is still alive other than as (memory of) one
    of outputs: a reference returning its input, changed in place or not, keeps it legitimately."""
    ours = {t.untyped_storage().data_ptr() for t in outputs if t.numel()}
    for r in refs:
        t = r()
        if t is not None and (not t.numel() or t.untyped_storage().data_ptr() not in ours):
            return True
    return False


INPUT_SAMPLE_ELEMS = 1 << 16  # elements of each input tensor compared between two draws


def input_sample(torch, values):
    """A small sample of a draw of inputs, bit for bit: each tensor's shape, dtype and evenly
    spaced elements (INPUT_SAMPLE_ELEMS of them), every non-tensor value as it is. Two draws from
    one seed that sample alike are taken as the same draw: random draws that differ, differ
    nearly everywhere (a draw differing only between the sampled elements would pass). None
    when the draw cannot be drawn again in place of a copy: a tensor not contiguous (sampled
    only so without a copy; an expanded one cannot be written in place), or two sharing memory
    (the runner gets them apart, a reference changing one in place would change both)."""
    sample, storages = [], set()
    for v in values:
        if isinstance(v, torch.Tensor):
            if not v.is_contiguous():
                return None
            if v.numel():
                storage = v.untyped_storage().data_ptr()
                if storage in storages:
                    return None
                storages.add(storage)
            flat = v.reshape(-1)  # a view: contiguous
            step = max(1, flat.numel() // INPUT_SAMPLE_ELEMS)
            bits = flat[::step].clone().view(torch.uint8)  # a copy; NaNs, -0.0, float8 compare exactly
            sample.append(("tensor", tuple(v.shape), v.dtype, bits))
        else:
            sample.append(("value", v))
    return sample


def same_sample(torch, a, b):
    """Whether two input_samples are alike."""
    if b is None or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x[0] != y[0]:
            return False
        if x[0] == "tensor":
            if x[1:3] != y[1:3] or not torch.equal(x[3], y[3]):
                return False
            continue
        try:
            if bool(x[1] != y[1]):
                return False
        except Exception:  # a value that cannot be compared: not known to be the same
            return False
    return True


def relative(err, norm):
    """err / norm, capped at 1 (an output that is all noise); 0 for an exact 0."""
    return min(1.0, err / norm) if norm > 0 else (1.0 if err > 0 else 0.0)


def rng_states(torch):
    """The generators a forward may draw from (CPU, and the current GPU's once CUDA is up)."""
    states = [torch.random.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.append(torch.cuda.get_rng_state())
    return [bytes(s.numpy().tobytes()) for s in states]


def chunk_pairs(g, w):
    """(got, want) as float64 chunks on want's device, flattened."""
    g, w = g.reshape(-1), w.reshape(-1)
    for s in range(0, w.numel(), CHUNK_ELEMS):
        yield g[s:s + CHUNK_ELEMS].to(w.device).double(), w[s:s + CHUNK_ELEMS].double()


def diff_norm(torch, a, b=None):
    """L2 norm of the lists of tensors a - b (b None: of a), over all elements, in float64 chunks."""
    sq = 0.0
    for i, t in enumerate(a):
        ref = b[i] if b is not None else t
        for tc, rc in chunk_pairs(t, ref):
            d = tc - rc if b is not None else tc
            sq += float((d * d).sum())
    return math.sqrt(sq)


def cpu_model():
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return "unknown"


def load_reference(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("kgym_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, name):
            raise Infra(f"the task's model.py defines no {name}")
    return mod


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print("usage: judge.py JOB.json   (started by kgym-env for each evaluation)", file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        job = json.load(f)
    result = {"eval_status": "ok", "compiled": True, "correct": False}
    judge = None
    try:
        split_cpus()
        judge = Judge(job)
        if job["mode"] in ("baselines", "warmup"):
            result = {"eval_status": "ok"}
            judge.run_baselines() if job["mode"] == "baselines" else judge.run_warmup()
        else:
            judge.run()
        result.update(judge.components)
    except CandidateFailed as exc:
        if judge is not None:
            result.update(judge.components)
        result["correct"] = False
        result["error_code"] = exc.code
        result["error"] = str(exc)[:8000]
        result.setdefault("checks_failed", []).append(f"{exc.code}: {str(exc).splitlines()[0][:300]}")
    except Exception as exc:  # Infra or a bug of ours: never the agent's fault
        result = {"eval_status": "infra_error", "error": f"{type(exc).__name__}: {exc}",
                  "trace": traceback.format_exc(limit=8)[-4000:]}
    tmp = job["result_path"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, default=str)
    os.replace(tmp, job["result_path"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
