#!/usr/bin/env bash
# bench/run.sh: the bulkhead benchmark (`make bench` runs it after `make all`).
#
#   bench/run.sh [--quick] [--only handoff|deadlines|cost|fleet|fleetsim|adaptive|records|eventloop|seccomp]
#
# Builds the bench's own programs into build/bench/, then runs bench/bench.py,
# which prints the table and the budget lines and writes the raw numbers to
# build/bench/results.tsv. See bench/README.
#
# Whatever happens, everything the bench started is stopped and every
# namespace it created is removed: bench.py does it itself, and this trap
# repeats it from the pids and keys bench.py notes in build/bench/run/, in
# case bench.py was killed outright.
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=build
OUT=$BUILD/bench
RUN=$OUT/run
CC=${CC:-cc}
CFLAGS_BENCH="-std=gnu11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE"

PY=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    # bench.py stops its own processes and removes its namespaces
    if [[ -n $PY ]] && kill -0 "$PY" 2>/dev/null; then
        kill -TERM "$PY" 2>/dev/null || true
        wait "$PY" 2>/dev/null || true
    fi
    # ... and should it have died without doing so, the same from its notes.
    # First whatever is left of its process group (its own, see set -m
    # below: it holds only what this run started), so that no client still
    # starting can create a namespace again after the ipcrm.
    if [[ -n $PY ]]; then
        kill -KILL -- "-$PY" 2>/dev/null || true
        sleep 0.2
    fi
    if [[ -f $RUN/pids ]]; then
        while read -r pid; do
            # only our own processes: the pid must still be the server or
            # haproxy of this run (their command lines name its temp dir)
            if [[ -r /proc/$pid/cmdline && -f $RUN/tmpdir ]] &&
               tr '\0' ' ' </proc/"$pid"/cmdline | grep -qF "$(cat "$RUN/tmpdir")/"; then
                kill "$pid" 2>/dev/null || true
            fi
        done <"$RUN/pids"
    fi
    if [[ -f $RUN/keys ]]; then
        while read -r key; do
            ipcrm -S "$key" 2>/dev/null || true
            ipcrm -M "$key" 2>/dev/null || true
        done <"$RUN/keys"
    fi
    if [[ -f $RUN/tmpdir ]]; then
        rm -rf -- "$(cat "$RUN/tmpdir")"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

for tool in valgrind callgrind_annotate strace haproxy node python3 ipcrm; do
    command -v "$tool" >/dev/null ||
        { echo "bench: $tool is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
[[ -f $BUILD/libbulkhead.so ]] ||
    { echo "bench: $BUILD/libbulkhead.so is missing: run make first" >&2; exit 1; }

mkdir -p "$OUT"
rm -rf "$RUN"
$CC $CFLAGS_BENCH -o "$OUT/bench_client" bench/bench_client.c -lpthread
# The same client with no dynamic loader: what the seccomp supervisor traps.
$CC $CFLAGS_BENCH -static -o "$OUT/bench_client_static" bench/bench_client.c -lpthread
$CC $CFLAGS_BENCH -o "$OUT/bench_server" bench/bench_server.c -lpthread
# The seccomp section's floor: a supervisor that answers CONTINUE at once.
$CC $CFLAGS_BENCH -o "$OUT/notif_floor" bench/notif_floor.c -lpthread
# The readiness layer linked in, to count it with fds waiting (its own
# comment says why).
$CC $CFLAGS_BENCH -Ishim -o "$OUT/readiness_cost" bench/readiness_cost.c \
    shim/readiness/*.c shim/libc/libc.c -ldl -lpthread
# The clock of the cost section's counted runs (bench/fixed_clock.c).
$CC $CFLAGS_BENCH -shared -fPIC -o "$OUT/libfixed_clock.so" bench/fixed_clock.c

# In the background and waited for, so that a signal to this script runs the
# trap at once (bash defers traps while a foreground child runs); in a
# process group of its own (set -m), which the trap can end as a whole.
set -m
python3 bench/bench.py --build "$BUILD" --summary "$OUT/summary.txt" "$@" &
PY=$!
set +m
wait "$PY"
