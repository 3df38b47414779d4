#!/usr/bin/env bash
# Issue 8 on the GPU machine: the decoder's checks with the default switches and with the fused
# norm on (KGYM_MATMUL_FUSED_NORM=1), the model checks, then decode figures (kgym-policy-cuda
# bench --skip-train) of the default and of the fused norm, default again (the spread), and
# after a short training load, each alone on the GPU, with the GPU's clocks logged every 200 ms
# (clocks.csv, marks.txt). SIDE=1 adds the side-by-side with PyTorch (tests/bench/policy/run.sh).
# Leftover time goes to baselines. Logs come back as $OUT/decode.tar.gz.
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/calls/common.sh
unpack_kernels
K=/tmp/kbin/kernels P=/tmp/kbin/kgym-policy-cuda L=/tmp/decode
mkdir -p $L
# the CUDA programs need carried libraries (libutf8proc, jansson, pcre2); the Pythons with torch
# started later (PyTorch's side, the baselines' judges) must not see them
LIBS=$PWD/carry/lib
save() { tar -C $L -czf "$OUT/decode.tar.gz" . 2>/dev/null; }  # after each step: a cut call keeps the rest (clocks.csv may be growing)
check() {  # check NAME CMD...: a log per check, its FAIL/ok counts printed
    local name=$1 t; shift
    t=$(budget 200)
    [ "$t" -gt 0 ] || { echo "$name: skipped (no time left)"; return; }
    LD_LIBRARY_PATH=$LIBS timeout "$t" "$@" > "$L/$name.log" 2>&1
    echo "$name: exit $?, $(grep -c '^FAIL' "$L/$name.log") FAIL, $(grep -c '^ok' "$L/$name.log") ok"
    grep '^FAIL' "$L/$name.log" | head -5
    save
}
check ctest_decode_gpu-default $K/ctest_decode_gpu
check ctest_decode_gpu-fused1 env KGYM_MATMUL_FUSED_NORM=1 $K/ctest_decode_gpu
check ctest_model_gpu-default $K/ctest_model_gpu
check test_matmul-fused1 env KGYM_MATMUL_FUSED_NORM=1 $K/test_matmul
# bench NAME [VAR=VALUE...] [-- BENCH_OPTIONS...]: decode tokens/s at batch 1 and 64; without
# options, --skip-train (the decode alone)
bench() {
    local name=$1 t vars=() opts=(--skip-train); shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
    [ $# -eq 0 ] || { shift; opts=("$@"); }
    t=$(budget 120)
    [ "$t" -gt 0 ] || { echo "$name: skipped (no time left)"; return; }
    echo "$name: $(date +%T.%N | cut -c1-12)" >> "$L/marks.txt"  # to line up with clocks.csv
    # (the ${x[@]+...} form: an empty array under set -u on any bash)
    env LD_LIBRARY_PATH="$LIBS" ${vars[@]+"${vars[@]}"} timeout "$t" $P bench ${opts[@]+"${opts[@]}"} --json "$L/$name.json" > "$L/$name.log" 2>&1
    echo "$name: exit $?, tokens/s $(grep -h '"tokens_per_s"' "$L/$name.json" 2>/dev/null | tr -d ' ,' | cut -d: -f2 | paste -sd/)"
    save
}
# the GPU's clocks, power and temperature every 200 ms while the benches run: session 27's
# decode-only runs took ~10% more GPU time per step than the same binary's decode after training
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,pstate \
    --format=csv -lms 200 > "$L/clocks.csv" 2>&1 &
CLOCKS=$!
trap 'kill $CLOCKS 2>/dev/null' EXIT  # a call cut short leaves no nvidia-smi behind
bench decode-default
bench decode-fused1 KGYM_MATMUL_FUSED_NORM=1
bench decode-default-again
# decode right after a short training load (no PyTorch side): is the side-by-side run's faster
# step the load before it?
bench decode-after-train -- --train-batch 2 --seq 1024 --steps 4
kill $CLOCKS 2>/dev/null
if [ "${SIDE:-0}" = 1 ] && [ "$(budget 300)" -gt 0 ]; then
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LIBS" "$P" > /tmp/kbin/policy-w
    chmod +x /tmp/kbin/policy-w
    KGYM_POLICY_CUDA=/tmp/kbin/policy-w KGYM_BENCH_PYTHON=$KGYM_PYTHON OUT=$L/side timeout "$(budget 300)" tests/bench/policy/run.sh
fi
save
echo "decode checks: $((SECONDS - T0)) s"
baselines_for $(( $(left) - 25 ))
