#!/usr/bin/env bash
# kgym-bench on a GPU machine over the reference solutions: one kgym-env serving the bundled tasks
# and KernelBench (its GPU leases keep every timing exclusive), two kgym-bench clients against
# it (solutions/bundled and solutions/kernelbench), each printing its Table 1.
#   tests/gpu/kgym_bench_gpu.sh OUT_DIR [KERNELBENCH_JSONL]
# Binaries from $KGYM_BIN (default build/); a Python with torch from $KGYM_PYTHON (default the
# python3 on PATH); the build cache (objects, PCH, baselines) in $KGYM_CACHE (default OUT/cache).
# $KGYM_JOBS: each client's parallel tasks (default 2). $KGYM_BASELINES=FILE: a third client
# measures the baselines of KernelBench levels $KGYM_BASELINES_LEVELS (default 1,2) into FILE,
# resuming from what it holds. $KGYM_DEADLINE_S: every client is interrupted (SIGINT: the tasks
# in flight finish, the results so far are written) after that many seconds. $KGYM_PREFETCH=0:
# no baselines pass over the solved tasks before the runs (the default measures them first);
# $KGYM_WARMUP_JOBS: that client's --warmup-jobs (its default: 2 per GPU);
# $KGYM_REMEASURE_ABOVE=CV: its --remeasure-above (stored figures noisier than CV measured again).
# $KGYM_RUNS=0: no runs either (with $KGYM_BASELINES: a baselines-only call that resumes);
# $KGYM_PREFETCH_DEADLINE_S bounds that pass (default $KGYM_DEADLINE_S). $KGYM_KB_ONLY=IDS: only
# these KernelBench tasks (e.g. kb/L1/24,kb/L1/36; default every one with a solution);
# $KGYM_BUNDLED=0: no bundled-task client (nor its baselines pass). Stop the script with
# SIGTERM or SIGINT, never SIGKILL: its exit trap kills the server and the judges under it.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: $0 OUT_DIR [KERNELBENCH_JSONL]}
KB=${2:-../shared/kernelbench/kernelbench-l1-l3.jsonl}
BIN=${KGYM_BIN:-build}
PY=${KGYM_PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}
CACHE=${KGYM_CACHE:-$OUT/cache}
mkdir -p "$OUT" "$CACHE"
"$BIN/kgym-env" serve --port 0 --state-dir "$OUT/state" --template env/template \
    --sandbox-profiles sandbox_profiles --sandbox-python "$PY" --harness env/harness \
    --build-cache "$CACHE" --tasks dataset/tasks --kernelbench "$KB" --idle-timeout 0 --quiet \
    2> "$OUT/server.log" &
SERVER=$!
# the clients are done (or interrupted) by then: no drain to wait for, the state is throwaway
trap 'kill -9 $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
trap 'exit 143' TERM INT  # through the EXIT trap: a stopped script leaves no server on the GPU
for _ in $(seq 1200); do
    PORT=$(sed -n 's/.*"event":"listening".*"port":\([0-9]*\).*/\1/p' "$OUT/server.log" | head -1)
    [ -n "$PORT" ] && break
    kill -0 $SERVER 2>/dev/null || { cat "$OUT/server.log"; exit 1; }
    sleep 0.1
done
[ -n "${PORT:-}" ] || { echo "the server did not start"; cat "$OUT/server.log"; exit 1; }
URL=http://127.0.0.1:$PORT
JOBS=${KGYM_JOBS:-2}
client() { if [ -n "${KGYM_DEADLINE_S:-}" ]; then timeout -s INT "$KGYM_DEADLINE_S" "$@"; else "$@"; fi; }
prefetch() {
    local d=${KGYM_PREFETCH_DEADLINE_S:-${KGYM_DEADLINE_S:-}}
    if [ -n "$d" ]; then timeout -s INT "$d" "$@"; else "$@"; fi
}
BUNDLED_ONLY=$(cd solutions/bundled && for d in */; do [ -f "$d/model_new.py" ] && echo "kgym/${d%/}"; done | paste -sd,)
KB_ONLY=${KGYM_KB_ONLY:-$(cd solutions/kernelbench && ls -d level*/[0-9]* | sed 's#level\([0-9]\)/\([0-9]*\)#kb/L\1/\2#' | paste -sd,)}
BUNDLED=${KGYM_BUNDLED:-1}
if [ "${KGYM_PREFETCH:-1}" = 1 ]; then
    # the baselines first, through kgym-bench baselines: its warm-ups share the GPU and its
    # measurements take turns at it, so the runs' Profiles find them cached and hold the GPU
    # for the candidates' timing alone
    T0=$SECONDS P1=
    [ "$BUNDLED" != 1 ] || { prefetch "$BIN/kgym-bench" baselines --server "$URL" --tasks dataset/tasks --only "$BUNDLED_ONLY" \
        --file "$OUT/prefetch-bundled.json" --out "$OUT/prefetch-bundled" --task-timeout 600 \
        2> "$OUT/prefetch-bundled.log" & P1=$!; }
    prefetch "$BIN/kgym-bench" baselines --server "$URL" --kernelbench "$KB" --only "$KB_ONLY" \
        --file "$OUT/prefetch-kernelbench.json" --out "$OUT/prefetch-kernelbench" --task-timeout 600 \
        2> "$OUT/prefetch-kernelbench.log" &
    P2=$!
    [ -z "$P1" ] || wait $P1 || echo "prefetch (bundled) ended with $?: the runs measure what is missing"
    wait $P2 || echo "prefetch (kernelbench) ended with $?: the runs measure what is missing"
    echo "prefetch: $((SECONDS - T0)) s"
fi
# builds overlap with other tasks' timing; the lease makes the timing itself exclusive
B1= B2=
if [ "${KGYM_RUNS:-1}" = 1 ]; then
    [ "$BUNDLED" != 1 ] || { client "$BIN/kgym-bench" run --server "$URL" --tasks dataset/tasks --solutions solutions/bundled \
        --out "$OUT/bundled" --jobs "$JOBS" --task-timeout "${KGYM_TASK_TIMEOUT:-600}" > "$OUT/bundled.txt" 2> "$OUT/bundled.log" & B1=$!; }
    client "$BIN/kgym-bench" run --server "$URL" --kernelbench "$KB" --solutions solutions/kernelbench \
        --only "$KB_ONLY" \
        --out "$OUT/kernelbench" --jobs "$JOBS" --task-timeout "${KGYM_TASK_TIMEOUT:-600}" > "$OUT/kernelbench.txt" 2> "$OUT/kernelbench.log" &
    B2=$!
fi
B3=
if [ -n "${KGYM_BASELINES:-}" ]; then
    client "$BIN/kgym-bench" baselines --server "$URL" --kernelbench "$KB" \
        --levels "${KGYM_BASELINES_LEVELS:-1,2}" --file "$KGYM_BASELINES" --out "$OUT/baselines" \
        ${KGYM_WARMUP_JOBS:+--warmup-jobs "$KGYM_WARMUP_JOBS"} \
        ${KGYM_REMEASURE_ABOVE:+--remeasure-above "$KGYM_REMEASURE_ABOVE"} \
        --task-timeout 600 2> "$OUT/baselines.log" &
    B3=$!
fi
rc=0
[ -z "$B1" ] || wait $B1 || rc=$?
[ -z "$B2" ] || wait $B2 || rc=$?
[ -z "$B3" ] || wait $B3 || rc=$?
# the clients that ran this time (an OUT reused from an earlier run may hold the other's file)
[ -z "$B1" ] || { echo "== bundled"; cat "$OUT/bundled.txt"; }
[ -z "$B2" ] || { echo "== kernelbench"; cat "$OUT/kernelbench.txt"; }
[ -z "$B3" ] || { echo "== baselines"; tail -3 "$OUT/baselines.log"; }
exit $rc
