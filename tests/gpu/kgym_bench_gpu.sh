#!/usr/bin/env bash
# kgym-bench on a GPU machine over the reference solutions: one kgym-env serving the bundled tasks
# and KernelBench (its GPU leases keep every timing exclusive), two kgym-bench clients against
# it (solutions/bundled and solutions/kernelbench), each printing its Table 1.
#   tests/gpu/kgym_bench_gpu.sh OUT_DIR [KERNELBENCH_JSONL]
# Binaries from $KGYM_BIN (default build/); a Python with torch from $KGYM_PYTHON (default the
# python3 on PATH); the build cache (objects, PCH, baselines) in $KGYM_CACHE (default OUT/cache).
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
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1200); do
    PORT=$(sed -n 's/.*"event":"listening".*"port":\([0-9]*\).*/\1/p' "$OUT/server.log" | head -1)
    [ -n "$PORT" ] && break
    kill -0 $SERVER 2>/dev/null || { cat "$OUT/server.log"; exit 1; }
    sleep 0.1
done
[ -n "${PORT:-}" ] || { echo "the server did not start"; cat "$OUT/server.log"; exit 1; }
URL=http://127.0.0.1:$PORT
# builds overlap with other tasks' timing; the lease makes the timing itself exclusive
"$BIN/kgym-bench" run --server "$URL" --tasks dataset/tasks --solutions solutions/bundled \
    --out "$OUT/bundled" --jobs 2 --task-timeout 600 > "$OUT/bundled.txt" 2> "$OUT/bundled.log" &
B1=$!
"$BIN/kgym-bench" run --server "$URL" --kernelbench "$KB" --solutions solutions/kernelbench \
    --only "$(cd solutions/kernelbench && ls -d level*/[0-9]* | sed 's#level\([0-9]\)/\([0-9]*\)#kb/L\1/\2#' | paste -sd,)" \
    --out "$OUT/kernelbench" --jobs 2 --task-timeout 600 > "$OUT/kernelbench.txt" 2> "$OUT/kernelbench.log" &
B2=$!
rc=0
wait $B1 || rc=$?
wait $B2 || rc=$?
for part in bundled kernelbench; do echo "== $part"; cat "$OUT/$part.txt"; done
exit $rc
