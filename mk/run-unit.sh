#!/usr/bin/env bash
# Runs cmocka test binaries; fails if any fails. Each binary prints its own summary.
set -u
rc=0
for t in "$@"; do
    "$t" || { echo "FAILED: $t" >&2; rc=1; }
done
exit $rc
