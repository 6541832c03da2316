#!/usr/bin/env bash
# Runs the bats suite (tests/*.bats).
#
#   scripts/run-tests.sh                 every file: two lanes, then the
#                                        timing-bound files two at a time,
#                                        then those that load the machine
#                                        alone
#   scripts/run-tests.sh tests/caps.bats one file, or several in turn
#                                        (extra args go to bats)
#
# The whole suite runs in two lanes side by side (the machine's 2 cores;
# most tests spend their time waiting on servers, agents and deadlines):
# each lane takes the next file from one queue, longest first as the last
# full run timed them. Files in the lanes share nothing global: each test
# has its own namespace, ports, servers and temporary directory, and
# tcpdump filters on its server's port. The files in PAIRED then run two
# at a time, with nothing else beside them: they assert on time windows,
# rates or counts that the lanes' load (floods, hundreds of processes)
# would skew, and spend their time waiting on timers and agents, not on
# the CPU (nonblocking.bats turns client Fast Open on for the machine,
# which cli_seccomp.bats reads: it runs after the lanes). The files in
# ALONE, which load the machine themselves, run last, one at a time.
# build/test-output.tap is the one TAP stream of every file, in file
# order; build/test-durations keeps each file's seconds for the next run's
# queue.
#
# Expects `make all` and the test programs (make build/tests/NAME) built;
# `make test` does both.
set -euo pipefail
cd "$(dirname "$0")/.."

export BATS_LIB_PATH=${BATS_LIB_PATH:-/usr/lib/bats}
# A hung test fails on its own instead of eating CI's time.
export BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-120}

PAIRED=(cli_adaptive cli_suggest deadline_paths event_loops exit_order fleet fleet_partition
        fleet_scale nonblocking)
ALONE=(adaptive_capacity fleet_agent)

missing=0
for f in build/libbulkhead.so build/tests/connect_hold build/tests/mt_client \
    build/tests/fdops build/tests/resolve_connect build/tests/vfork_hold \
    build/tests/exit_hold build/tests/exec_altstack build/tests/thread_storm build/tests/nb_connect \
    build/tests/nb_learn; do
    if [[ ! -e "$f" ]]; then
        echo "run-tests: missing $f (run: make all \$(TEST_BIN), or make test)" >&2
        missing=1
    fi
done
((missing == 0)) || exit 1
mkdir -p build

# summary TAP: a plain closing line that any CI log reader understands;
# fails when a test failed.
summary() {
    local passed failed skipped
    read -r passed failed skipped < <(awk '
        /^ok / { if ($0 ~ /# skip/) s++; else p++ }
        /^not ok / { f++ }
        END { print p + 0, f + 0, s + 0 }' "$1")
    echo "${passed} passed, ${failed} failed, ${skipped} skipped"
    ((failed == 0))
}

if (($# > 0)); then
    set +e
    bats --tap --timing "$@" | tee build/test-output.tap
    status=${PIPESTATUS[0]}
    set -e
    summary build/test-output.tap || status=1
    exit "$status"
fi

OUT=build/test-files
rm -rf "$OUT"
mkdir -p "$OUT"

is_in() {
    local name=$1
    shift
    for item; do [[ "$item" == "$name" ]] && return 0; done
    return 1
}

# queue FILE...: the files, longest first: the last run's seconds, else
# the size of the file (a first run).
queue() {
    local f name seconds
    for f; do
        name=$(basename "$f" .bats)
        seconds=$(awk -v n="$name" '$1 == n { print $2 }' build/test-durations 2>/dev/null || true)
        echo "${seconds:-$(($(wc -c <"$f") / 1000))} $f"
    done | sort -rn | awk '{ print $2 }'
}

lane_files=() paired_files=()
for f in tests/*.bats; do
    name=$(basename "$f" .bats)
    if is_in "$name" "${PAIRED[@]}"; then
        paired_files+=("$f")
    elif ! is_in "$name" "${ALONE[@]}"; then
        lane_files+=("$f")
    fi
done

# run_file FILE: one file's TAP into $OUT/NAME.tap, its lines echoed as
# they come (prefixed by its name) and its seconds into $OUT/NAME.seconds.
run_file() {
    local name start status
    name=$(basename "$1" .bats)
    start=$EPOCHREALTIME
    set +e
    bats --tap --timing "$1" 2>&1 | tee "$OUT/$name.tap" | sed -u "s/^/$name: /"
    status=${PIPESTATUS[0]}
    set -e
    echo "$name $(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.0f", e - s }')" \
        >"$OUT/$name.seconds"
    return "$status"
}

# lane QUEUE: runs files from QUEUE until it is empty.
lane() {
    local file status=0
    while :; do
        # shellcheck disable=SC2016  # the inner shell expands $0
        file=$(flock "$1.lock" sh -c 'head -n 1 "$0"; sed -i 1d "$0"' "$1")
        [[ -n "$file" ]] || return "$status"
        run_file "$file" || status=1
    done
}

# two_lanes FILE...: the files, two at a time, longest first.
two_lanes() {
    local status=0 first second
    queue "$@" >"$OUT/queue"
    lane "$OUT/queue" &
    first=$!
    lane "$OUT/queue" &
    second=$!
    wait "$first" || status=1
    wait "$second" || status=1
    return "$status"
}

status=0
two_lanes "${lane_files[@]}" || status=1
two_lanes "${paired_files[@]}" || status=1
for name in "${ALONE[@]}"; do
    [[ -f "tests/$name.bats" ]] || continue
    run_file "tests/$name.bats" || status=1
done

# One TAP stream, in file order, numbered through.
for f in tests/*.bats; do
    name=$(basename "$f" .bats)
    cat "$OUT/$name.tap" 2>/dev/null || echo "not ok 1 $name.bats: no output"
done | awk '
    /^1\.\.[0-9]+$/ { next }
    /^(not )?ok / { n++; sub(/ok [0-9]+ /, "ok " n " ") }
    { lines[NR] = $0 }
    END { print "1.." n; for (i = 1; i <= NR; i++) if (i in lines) print lines[i] }' \
    >build/test-output.tap
cat "$OUT"/*.seconds >build/test-durations

expected=$(bats --count tests/*.bats)
reported=$(grep -Ec '^(not )?ok ' build/test-output.tap)
if ((reported != expected)); then
    echo "run-tests: $reported of $expected tests reported" >&2
    status=1
fi
summary build/test-output.tap || status=1
exit "$status"
