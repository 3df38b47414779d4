#!/usr/bin/env bash
# make test: every suite that needs no GPU, each timed. Every suite is required: a failure, or
# a pytest suite that skips anything (KGYM_FAIL_ON_SKIP, see tests/conftest.py), fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
venv=$(mk/venv.sh) || { echo "kgym: cannot create the Python virtualenv" >&2; exit 1; }
export KGYM_FAIL_ON_SKIP=1 KGYM_BUILD="$BUILD" PYTHONDONTWRITEBYTECODE=1
# One build cache (objects, the torch PCH, baselines) for every test server of this run.
KGYM_TEST_BUILD_CACHE=$(mktemp -d /tmp/kgym-test-cache.XXXXXX) || exit 1
export KGYM_TEST_BUILD_CACHE
trap 'rm -rf "$KGYM_TEST_BUILD_CACHE"' EXIT

passed=0 failed=0
summary=()
run_suite() {
    local name=$1; shift
    echo "=== suite $name: $*"
    local t0=$EPOCHREALTIME
    "$@"
    local rc=$?
    local secs
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    if [ $rc -eq 0 ]; then passed=$((passed + 1)); summary+=("  PASS  $name  ${secs}s")
    else failed=$((failed + 1)); summary+=("  FAIL  $name  ${secs}s (exit $rc)"); fi
    echo "=== suite $name: exit $rc in ${secs}s"
}

run_suite unit          mk/run-unit.sh $BUILD/tests/test_*
run_suite unit-asan-ubsan mk/run-unit.sh $BUILD/san/tests/test_*
run_suite api           "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/api
run_suite clients       "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/clients
run_suite tasks         "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/tasks
run_suite sandbox       "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/sandbox
run_suite harness       "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/harness
run_suite kgym-bench    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/kgym_bench
run_suite policy        "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/policy
run_suite fuzz          mk/fuzz.sh

echo
echo "=== make test summary (times per suite)"
printf '%s\n' "${summary[@]}"
echo "suites: $passed passed, $failed failed"
[ $failed -eq 0 ]
