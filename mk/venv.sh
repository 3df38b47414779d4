#!/usr/bin/env bash
# Creates (once) the project virtualenv from requirements.lock and prints its path.
# It lives outside the clone, under ${KGYM_CACHE:-$XDG_CACHE_HOME/kgym}, named after the lock
# file's hash, so a fresh clone or a CI rerun reuses it instead of downloading again.
# Where the base python3 already imports torch (a GPU machine), the venv sees the machine's
# packages (--system-site-packages) and the torch stack is not installed again.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${KGYM_VENV:-}" ]; then echo "$KGYM_VENV"; exit 0; fi
base_py=${KGYM_PYTHON:-python3}
lock=requirements.lock
hash=$(sha256sum "$lock" | cut -c1-16)
machine_torch=0
if "$base_py" -c 'import torch' >/dev/null 2>&1; then machine_torch=1; fi
cache=${KGYM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kgym}
venv="$cache/venv-$hash-t$machine_torch"
mkdir -p "$cache"
exec 9>"$venv.lock"
flock 9   # two makes at once build it once
# .complete is written last: an interrupted install is detected and redone from scratch.
if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then echo "$venv"; exit 0; fi
rm -rf "$venv"
echo "kgym: creating the Python virtualenv $venv (first time only; torch is large)" >&2
if [ "$machine_torch" = 1 ]; then
    "$base_py" -m venv --system-site-packages "$venv"
    grep -vE '^(#|torch==|triton==|nvidia-|cuda-)' "$lock" > "$venv/requirements.txt"
else
    "$base_py" -m venv "$venv"
    grep -v '^#' "$lock" > "$venv/requirements.txt"
fi
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$venv/requirements.txt" >&2; then
    rm -rf "$venv"
    # A GPU machine with no package registry: its own environment (torch, pytest) is all
    # there is. Use it as it is, and say that the pins are not applied.
    if [ "$machine_torch" = 1 ] && "$base_py" -c 'import pytest' >/dev/null 2>&1; then
        prefix=$("$base_py" -c 'import sys; print(sys.prefix)')
        echo "kgym: cannot install requirements.lock here; using the machine's Python ($prefix) as it is, pins not applied" >&2
        echo "$prefix"
        exit 0
    fi
    echo "kgym: installing requirements.lock failed" >&2
    exit 1
fi
touch "$venv/.complete"
echo "$venv"
