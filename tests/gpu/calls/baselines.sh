#!/usr/bin/env bash
# Issue 5 on the GPU machine: KernelBench level 1-2 baselines for the whole call, resuming from
# results/baselines-<gpu>.json; copy the returned file back over it.
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/calls/common.sh
baselines_for $(( $(left) - 20 ))
