# Sourced by tests/gpu/calls/*.sh on the GPU machine, from the repo root, with carry/ carried
# (mk/carry-gpu.sh made it). $OUT is the folder whose files come back (at most 8: tar them).
# $LIMIT: the seconds this call may take (default 570, under the device's 600 per command).
set -u
T0=$SECONDS
LIMIT=${LIMIT:-570}
OUT=${OUT:?OUT: the folder whose files come back}
left() { echo $((LIMIT - (SECONDS - T0))); }
# A step's time limit: the smaller of $1 and the time left less ${2:-60} s for what follows;
# 0 (skip the step) under 15 s. No step outlives the call.
budget() {
    local want=$1 room=$(( $(left) - ${2:-60} ))
    [ "$room" -lt "$want" ] && want=$room
    if [ "$want" -ge 15 ]; then echo "$want"; else echo 0; fi
}
nvidia-smi -L | tee "$OUT/gpu.txt"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
# baselines are kept per GPU model: an H100 never resumes the H200's file
case "$GPU" in
    *H200*) BASELINES_FILE=results/baselines-h200.json ;;
    *H100*) BASELINES_FILE=results/baselines-h100.json ;;
    *) BASELINES_FILE=results/baselines-other.json ;;
esac
export KGYM_PYTHON=${KGYM_PYTHON:-$(command -v python3)}
"$KGYM_PYTHON" -c 'import torch; print("torch", torch.__version__)'
KB_JSONL=carry/kernelbench/kernelbench-l1-l3.jsonl

# The CUDA programs (carry/kbin.tar.xz) into /tmp/kbin, and Qwen3's tokenizer into /tmp/tok.
unpack_kernels() {
    mkdir -p /tmp/kbin /tmp/tok
    tar -C /tmp/kbin -xJf carry/kbin.tar.xz
    tar -C /tmp/tok -xJf carry/tok.tar.xz
    export KGYM_TEST_TOKENIZER=/tmp/tok
}

# kgym-bench baselines over KernelBench levels 1-2 for SECS seconds, resuming from the tracked
# file of this GPU model; the file comes back in $OUT. SIGINT first (the tasks in flight
# finish), a hard stop 45 s later: every measurement is written as it comes, so none is lost.
# KGYM_WARMUP_JOBS (--warmup-jobs): torch.compile warm-ups at once. They, not the measurements
# (~7 s of GPU each once compiled, H200), set the pace: ~20 tasks per 10-minute call with 2.
# Those that run out of GPU memory beside the others are compiled again alone.
baselines_for() {
    local secs=$1 work=/tmp/bl-work
    [ "$secs" -gt 90 ] || { echo "baselines: too little time left ($secs s)"; return 0; }
    mkdir -p "$work"
    [ -f "$work/bl.json" ] || [ ! -f "$BASELINES_FILE" ] || cp "$BASELINES_FILE" "$work/bl.json"
    echo "baselines: $secs s into $work/bl.json (from $BASELINES_FILE)"
    KGYM_BIN=carry/w KGYM_RUNS=0 KGYM_PREFETCH=0 KGYM_BASELINES="$work/bl.json" \
        KGYM_DEADLINE_S=$((secs - 45)) KGYM_CACHE=/tmp/kgym-cache \
        timeout -s TERM -k 5 "$secs" tests/gpu/kgym_bench_gpu.sh "$work/out" "$KB_JSONL"
    echo "baselines: exit $?"
    [ -f "$work/bl.json" ] || return 0
    cp "$work/bl.json" "$OUT/$(basename "$BASELINES_FILE")"
    "$KGYM_PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1]))
print("baselines stored:", len(d["tasks"]), d.get("device_name"), d.get("torch_version"))' "$work/bl.json"
    tar -C "$work/out" -czf "$OUT/baselines-logs.tar.gz" --exclude ./cache --exclude ./state .
}

# Issue 5: KernelBench's three 6 GB-tensor tasks (kb/L1/24, 36, 38) alone, one at a time, with
# their baselines measured inside each evaluation, for SECS seconds: do they fit this card?
# Their results come back as $OUT/big3.tar.gz.
big_three() {
    local secs=$1 work=/tmp/big3
    [ "$secs" -gt 60 ] || { echo "big three: too little time left ($secs s)"; return 0; }
    mkdir -p "$work"
    echo "big three: $secs s"
    KGYM_BIN=carry/w KGYM_PREFETCH=0 KGYM_BUNDLED=0 KGYM_JOBS=1 \
        KGYM_KB_ONLY=kb/L1/24,kb/L1/36,kb/L1/38 KGYM_DEADLINE_S=$((secs - 30)) \
        KGYM_CACHE=/tmp/kgym-cache timeout -s TERM -k 5 "$secs" \
        tests/gpu/kgym_bench_gpu.sh "$work" "$KB_JSONL"
    echo "big three: exit $?"
    tar -C "$work" -czf "$OUT/big3.tar.gz" --exclude ./cache --exclude ./state .
}
