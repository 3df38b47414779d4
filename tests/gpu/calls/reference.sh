#!/usr/bin/env bash
# Issue 5 on the GPU machine: the reference run (tests/gpu/kgym_bench_gpu.sh over
# solutions/bundled and solutions/kernelbench, after a baselines pass over the solved tasks),
# resumed from carry/ref.tar.gz when there is one (save the returned $OUT/ref.tar.gz there to go
# on in the next call). PREF_S: seconds for the baselines pass (default 170; 0 with
# KGYM_PREFETCH=0 to skip it). KGYM_JOBS: tasks at once per client (default 2; 1 for tasks whose
# tensors fill the card).
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/calls/common.sh
REF=/tmp/ref
mkdir -p $REF
if [ -f carry/ref.tar.gz ]; then tar -C $REF -xzf carry/ref.tar.gz && echo "resuming from carry/ref.tar.gz"; fi
PREF_S=${PREF_S:-170}
[ "$PREF_S" -gt 0 ] || export KGYM_PREFETCH=0  # (timeout 0 would mean no limit at all)
RUN_S=$(( $(left) - PREF_S - 60 ))
[ "$RUN_S" -ge 30 ] || { echo "reference: $RUN_S s left for the runs after PREF_S=$PREF_S: too little"; exit 1; }
echo "baselines pass $PREF_S s, runs $RUN_S s"
KGYM_BIN=carry/w KGYM_PREFETCH_DEADLINE_S=$PREF_S KGYM_DEADLINE_S=$RUN_S KGYM_CACHE=/tmp/kgym-cache \
    timeout -s TERM -k 5 $((PREF_S + RUN_S + 45)) tests/gpu/kgym_bench_gpu.sh $REF "$KB_JSONL"
echo "kgym_bench_gpu: exit $?"
tar -C $REF -czf "$OUT/ref.tar.gz" --exclude ./cache --exclude ./state .
for p in bundled kernelbench; do cp $REF/$p/report.md "$OUT/$p-report.md" 2>/dev/null; done
echo "reference run: $((SECONDS - T0)) s"
