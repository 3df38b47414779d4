#!/usr/bin/env bash
# make test-gpu suite: real CUDA inside kgym-sandbox's candidate profile, with only the leased
# GPU's device nodes, and the control: the bash profile (no GPU nodes) sees no GPU at all.
# Needs root and an NVIDIA GPU. KGYM_LAUNCHER: the launcher (default build/kgym-sandbox; a make variable of the same name
# as KGYM_SANDBOX would override it).
set -uo pipefail
cd "$(dirname "$0")/../.."
launcher=${KGYM_LAUNCHER:-${BUILD:-build}/kgym-sandbox}
py=${KGYM_GPU_PYTHON:-python3}
fail() { echo "sandbox_cuda: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root"
[ -x "$launcher" ] || fail "no launcher at $launcher (make, or set KGYM_LAUNCHER)"
read -r prefix base < <("$py" -c 'import sys; print(sys.prefix, sys.base_prefix)')
pybin=$("$py" -c 'import sys; print(sys.executable)')
ws=$(mktemp -d /tmp/kgym-gpu-ws.XXXXXX)
trap 'rm -rf "$ws"' EXIT
cp tests/gpu/cuda_in_sandbox.py "$ws/check.py"
chown -R 200001:200001 "$ws"
run() { # profile, extra args...
    local profile=$1; shift
    "$launcher" --profiles sandbox_profiles --profile "$profile" --workspace "$ws" \
        --uid 200001 --gid 200001 --var "PYTHON_PREFIX=$prefix" --var "PYTHON_BASE_PREFIX=$base" \
        "$@" -- "$pybin" /workspace/check.py
}
gpus=()
for d in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia0; do [ -e "$d" ] && gpus+=(--gpu-device "$d"); done
[ ${#gpus[@]} -eq 6 ] || fail "expected /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia0 on the host"
inside=$(run candidate "${gpus[@]}") || fail "candidate run failed: $inside"
control=$(run bash) || fail "bash-profile run failed: $control"
echo "candidate: $inside"
echo "bash (control): $control"
"$py" - "$inside" "$control" <<'PY'
import json, sys
inside, control = (json.loads(a) for a in sys.argv[1:3])
standard = {"fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
            "urandom", "zero"}
checks = {
    "CUDA works in the candidate sandbox": inside.get("cuda") is True,
    "exactly one GPU visible": inside.get("device_count") == 1,
    "matmul equals the CPU's": inside.get("matmul_max_err", 1) < 1e-2,
    "/dev: only standard nodes + the leased GPU's":
        set(inside["dev"]) == standard | {"nvidiactl", "nvidia-uvm", "nvidia0"},
    "unprivileged": inside["uid"] == 200001 and inside["CapEff"] == "0000000000000000"
        and inside["NoNewPrivs"] == "1" and inside["Seccomp"] == "2",
    "control: the bash profile sees no GPU": control.get("cuda") is False
        and not any(d.startswith("nvidia") for d in control["dev"]),
}
for name, ok in checks.items():
    print(("PASS " if ok else "FAIL ") + name)
sys.exit(0 if all(checks.values()) else 1)
PY
