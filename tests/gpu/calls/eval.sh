#!/usr/bin/env bash
# With BIG3=1 first the three 6 GB-tensor KernelBench tasks for BIG3_S seconds (default 200,
# common.sh's big_three); then the trusted evaluation on CUDA through the API
# (tests/gpu/eval_gpu.py: the template, the reference solutions, the GPU exploits, the CPU
# exploits' pure-Python cheats) for EVAL_S seconds (default 330); then baselines. The log comes
# back as $OUT/eval_gpu.log, the server's log and the episodes' trajectories as $OUT/evlogs.tar.gz.
# EVAL_ARGS: more arguments for eval_gpu.py (e.g. "--only gemm_bias_gelu,mish").
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/calls/common.sh
[ "${BIG3:-0}" != 1 ] || big_three "$(budget "${BIG3_S:-200}" 100)"
EV=$(budget "${EVAL_S:-330}" 60)
[ "$EV" -gt 0 ] || { echo "eval: no time left"; exit 1; }
KGYM_EVAL_LOGS=/tmp/evlogs KGYM_SERVER_LIBS=$PWD/carry/lib PYTHONUNBUFFERED=1 timeout -s INT -k 40 "$EV" \
    "$KGYM_PYTHON" tests/gpu/eval_gpu.py --server carry/bin/kgym-env --python "$KGYM_PYTHON" ${EVAL_ARGS:-} \
    > "$OUT/eval_gpu.log" 2>&1
echo "eval_gpu: exit $?"
tar -C /tmp -czf "$OUT/evlogs.tar.gz" evlogs 2>/dev/null  # the server's log, the trajectories
grep -E "FAIL|passed|failed|raised" "$OUT/eval_gpu.log" | tail -30
baselines_for $(( $(left) - 25 ))
