# Shared by mk/bench.sh and mk/bench-peer.sh (sourced): a state dir on a real disk, and stopping
# the benchmarked server cleanly. The caller sets BUILD, NAME (for messages) and defines die().

# The state dir must be on a real disk: fsync on tmpfs costs nothing and flatters every figure.
fstype() { stat -f -c %T "$1" 2>/dev/null; }
is_memory_fs() { case "$1" in tmpfs|ramfs) return 0;; *) return 1;; esac; }

# Prints a fresh state dir named PREFIX.XXXXXX under $TMPDIR, or under $BUILD/bench-state when
# $TMPDIR is in memory.
make_state_dir() {
    local parent=${TMPDIR:-/tmp}
    if ! [ -d "$parent" ] || is_memory_fs "$(fstype "$parent")"; then
        parent=$PWD/$BUILD/bench-state
        mkdir -p "$parent" || die "cannot create $parent"
    fi
    mktemp -d "$parent/$1.XXXXXX" || die "cannot create a state dir under $parent"
}

# The EXIT trap: SIGTERM the server (SIGKILL after 10 s), remove the state dir.
server_pid=
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null
        for _ in $(seq 1 100); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$server_pid" 2>/dev/null; then
            echo "kgym $NAME: the server did not stop within 10 s of SIGTERM; killing it" >&2
            kill -KILL "$server_pid" 2>/dev/null
        fi
        wait "$server_pid" 2>/dev/null
    fi
    rm -rf "$STATE"
    rmdir "$PWD/$BUILD/bench-state" 2>/dev/null
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM
