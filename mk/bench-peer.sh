#!/usr/bin/env bash
# The OpenEnv peer benchmark (tests/bench/README.md, "Side-by-side with OpenEnv"): creates (once)
# its own virtualenv from tests/bench/peer_openenv/requirements.txt, starts OpenEnv's server
# (tests/bench/peer_openenv/env_server.py under uvicorn, 1 worker) on a free port and a fresh
# state dir on a real disk, waits until it answers GET /health, runs
# tests/bench/peer_openenv/bench_openenv.py against it, stops the server with SIGTERM, removes
# the state dir and exits with the benchmark's status (0 ok, 1 some requests failed, 2 setup).
# Not part of `make test` or `make bench`: it needs PyPI the first time.
# Arguments (and $PEER_BENCH_ARGS) go to bench_openenv.py (--help); $PEER_SERVE_ARGS to uvicorn.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
HOST=${HOST:-127.0.0.1}
PEER=tests/bench/peer_openenv
REQS=$PEER/requirements.txt
JSON_OUT=${PEER_BENCH_JSON:-$BUILD/bench/bench-peer-openenv.json}
SERVER_LOG=$BUILD/bench/peer-openenv-server.log

die() { echo "kgym bench-peer: $*" >&2; exit 2; }

# ---- the virtualenv, outside the clone, named after the requirements' hash (as mk/venv.sh) ----
base_py=${KGYM_PYTHON:-python3}
hash=$(sha256sum "$REQS" | cut -c1-16) || die "cannot read $REQS"
cache=${KGYM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kgym}
venv="$cache/peer-openenv-$hash"
mkdir -p "$cache" || die "cannot create $cache"
exec 9>"$venv.lock" || die "cannot open $venv.lock"
flock 9   # two runs at once build it once
# .complete is written last: an interrupted install is detected and redone from scratch.
if ! { [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; }; then
    rm -rf "$venv"
    echo "kgym bench-peer: creating the OpenEnv virtualenv $venv (first time only)" >&2
    "$base_py" -m venv "$venv" || { rm -rf "$venv"; die "cannot create $venv with $base_py"; }
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$REQS" >&2; then
        rm -rf "$venv"
        die "installing $REQS failed (it needs PyPI)"
    fi
    touch "$venv/.complete"
fi
exec 9>&-   # the server must not inherit the lock
PY=$venv/bin/python

# ---- the task's model.py (kgym's bench reads the first task's) and a state dir on a disk -------
MODEL=${KGYM_PEER_MODEL_FILE:-}
if [ -z "$MODEL" ]; then
    models=(dataset/tasks/*/model.py)   # sorted: the first is the first task
    MODEL=${models[0]}
fi
[ -f "$MODEL" ] || die "no model.py ($MODEL): set KGYM_PEER_MODEL_FILE"

NAME=bench-peer
# shellcheck source=mk/bench-lib.sh
. mk/bench-lib.sh
mkdir -p "$BUILD/bench" || die "cannot create $BUILD/bench"
STATE=$(make_state_dir kgym-peer-openenv) || exit 2

# ---- the server: OpenEnv's app under uvicorn, as OpenEnv's Dockerfile runs it, 1 worker --------
# --no-access-log: kgym-env runs with --quiet in `make bench`; an access log line per request
# is OpenEnv's default and costs the server some time per request.
serve=(-m uvicorn env_server:app --app-dir "$PEER" --host "$HOST" --port 0 --workers 1
       --no-access-log)
# shellcheck disable=SC2206
serve+=(${PEER_SERVE_ARGS:-})
ENABLE_WEB_INTERFACE=false PYTHONDONTWRITEBYTECODE=1 \
KGYM_PEER_STATE_DIR="$STATE" KGYM_PEER_MODEL_FILE="$MODEL" \
    "$PY" "${serve[@]}" >"$SERVER_LOG" 2>&1 &
server_pid=$!

port=
for _ in $(seq 1 600); do
    port=$(sed -n 's|.*Uvicorn running on http://[^ ]*:\([0-9][0-9]*\).*|\1|p' "$SERVER_LOG" 2>/dev/null |
           head -n1)
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$SERVER_LOG" >&2; die "the server exited"; }
    sleep 0.1
done
[ -n "$port" ] || { cat "$SERVER_LOG" >&2; die "the server did not report its port in 60 s"; }
URL=http://$HOST:$port

# Ready when GET /health says healthy (what OpenEnv's providers poll).
"$PY" - "$URL/health" <<'EOF' || { cat "$SERVER_LOG" >&2; die "$URL/health did not answer healthy in 30 s"; }
import json, sys, time, urllib.request
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
            if json.load(r).get("status") == "healthy":
                sys.exit(0)
    except (OSError, ValueError):
        pass
    time.sleep(0.1)
sys.exit(1)
EOF

# shellcheck disable=SC2086
PYTHONDONTWRITEBYTECODE=1 "$PY" "$PEER/bench_openenv.py" --url "$URL" --server-pid "$server_pid" \
    --state-dir "$STATE" --model-file "$MODEL" --json "$JSON_OUT" \
    --server-args "uvicorn ${serve[*]:2}" ${PEER_BENCH_ARGS:-} "$@"
rc=$?
kill -0 "$server_pid" 2>/dev/null || { echo "kgym bench-peer: the server died during the run" >&2; rc=2; }
echo "figures: $JSON_OUT; server log: $SERVER_LOG"
exit $rc
