#!/usr/bin/env bash
# The trusted evaluation on CUDA through the API (tests/gpu/eval_gpu.py: the template, the
# reference solutions, the GPU exploits, the CPU exploits' pure-Python cheats) for EVAL_S
# seconds (default 330), then (BIG3=1) the three 6 GB-tensor KernelBench tasks for BIG3_S seconds
# (default 200, common.sh's big_three), then baselines. The log comes back as $OUT/eval_gpu.log.
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/calls/common.sh
EV=$(budget "${EVAL_S:-330}" 45)
[ "$EV" -gt 0 ] || { echo "eval: no time left"; exit 1; }
KGYM_SERVER_LIBS=$PWD/carry/lib PYTHONUNBUFFERED=1 timeout -s INT -k 20 "$EV" \
    "$KGYM_PYTHON" tests/gpu/eval_gpu.py --server carry/bin/kgym-env --python "$KGYM_PYTHON" \
    > "$OUT/eval_gpu.log" 2>&1
echo "eval_gpu: exit $?"
grep -E "FAIL|passed|failed" "$OUT/eval_gpu.log" | tail -30
[ "${BIG3:-0}" != 1 ] || big_three "$(budget "${BIG3_S:-200}" 30)"
baselines_for $(( $(left) - 25 ))
