#!/usr/bin/env bash
# Runs each libFuzzer target of build/fuzz/ for FUZZ_SECONDS (default 45) from its seed corpus
# (tests/fuzz/corpus/<target>/, copied so the checkout is never written). A crash, leak or
# sanitizer report fails the run and leaves the reproducer under the printed folder.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
secs=${FUZZ_SECONDS:-45}
work=$(mktemp -d /tmp/kgym-fuzz.XXXXXX) || exit 1
status=0
shopt -s nullglob
bins=("$BUILD"/fuzz/fuzz_*)
[ ${#bins[@]} -gt 0 ] || { echo "kgym: no fuzz targets in $BUILD/fuzz (make fuzz)" >&2; exit 1; }
for bin in "${bins[@]}"; do
    name=$(basename "$bin")
    mkdir -p "$work/$name/corpus" "$work/$name/crashes"
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/$name/corpus/"
    echo "--- $name: ${secs}s"
    if ! "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
            -artifact_prefix="$work/$name/crashes/" "$work/$name/corpus" >"$work/$name/log" 2>&1; then
        echo "FAIL $name: see $work/$name/log and $work/$name/crashes/" >&2
        tail -30 "$work/$name/log" >&2
        status=1
    else
        grep -E "stat::number_of_executed_units|cov:" "$work/$name/log" | tail -2
    fi
done
[ $status -eq 0 ] && rm -rf "$work"
exit $status
