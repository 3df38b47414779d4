#!/usr/bin/env bash
# make bench: builds tests/bench/bench_env, starts a kgym-env server with `make run`'s defaults
# (configs/server.json, fsync durability) on a free port and a fresh state dir on a real disk,
# runs the benchmark against it, stops the server with SIGTERM, removes the state dir and exits
# with the benchmark's status. $SERVE_ARGS go to the server (as with make run, e.g.
# SERVE_ARGS="--durability none"); arguments (and $BENCH_ARGS) go to bench_env; see
# `build/bench/bench_env --help` and tests/bench/README.md.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CC=${CC:-cc}
HOST=${HOST:-127.0.0.1}
CONFIG=${BENCH_CONFIG:-configs/server.json}
KGYM_ENV=$BUILD/kgym-env
BENCH=$BUILD/bench/bench_env
JSON_OUT=${BENCH_JSON:-$BUILD/bench/bench.json}
SERVER_LOG=$BUILD/bench/server.log

die() { echo "kgym bench: $*" >&2; exit 2; }

[ -x "$KGYM_ENV" ] || die "$KGYM_ENV is missing: run make first"
mkdir -p "$BUILD/bench"
# shellcheck disable=SC2046
$CC -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -pthread \
    $(pkg-config --cflags jansson) tests/bench/bench_env.c -o "$BENCH" \
    $(pkg-config --libs jansson) -lm || die "cannot build $BENCH"

NAME=bench
# shellcheck source=mk/bench-lib.sh
. mk/bench-lib.sh
STATE=$(make_state_dir kgym-bench) || exit 2
is_memory_fs "$(fstype "$STATE")" && die "$STATE is on $(fstype "$STATE"), not a real disk"

# shellcheck disable=SC2086
"$KGYM_ENV" serve --config "$CONFIG" --host "$HOST" --port 0 --state-dir "$STATE" --quiet \
    ${SERVE_ARGS:-} 2>"$SERVER_LOG" &
server_pid=$!

port=
for _ in $(seq 1 300); do
    port=$(grep -m1 '"event":"listening"' "$SERVER_LOG" 2>/dev/null |
           sed -n 's/.*"port":\([0-9][0-9]*\).*/\1/p')
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$SERVER_LOG" >&2; die "the server exited"; }
    sleep 0.1
done
[ -n "$port" ] || { cat "$SERVER_LOG" >&2; die "the server did not report its port in 30 s"; }

# shellcheck disable=SC2086
"$BENCH" --url "http://$HOST:$port" --server-pid "$server_pid" --config "$CONFIG" \
    --state-dir "$STATE" --json "$JSON_OUT" ${BENCH_ARGS:-} "$@"
rc=$?
echo "figures: $JSON_OUT; server log: $SERVER_LOG"
echo
# The policy's tokenizer against HF tokenizers (needs ../shared's Qwen3 tokenizer.json).
venv_tok=$(mk/venv.sh) || exit 2
"$venv_tok/bin/python" tests/bench/bench_tokenizer.py || rc=1
echo
# Sandbox overhead and the evaluation (need root, like the sandbox itself).
if [ "$(id -u)" -eq 0 ]; then
    python3 tests/bench/bench_sandbox.py --server "http://$HOST:$port" || rc=1
    echo
    device=cpu
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then device=cuda; fi
    venv=$(mk/venv.sh) || exit 2
    "$venv/bin/python" tests/bench/bench_eval.py --device "$device" --python "$venv/bin/python" \
        --server "$KGYM_ENV" --json "$BUILD/bench/bench_eval.json" || rc=1
    echo
    "$venv/bin/python" tests/bench/bench_kgym_bench.py --device "$device" --python "$venv/bin/python" \
        --json "$BUILD/bench/bench_kgym_bench.json" || rc=1
else
    echo "sandbox overhead and evaluation: not measured (need root)"
fi
exit $rc
