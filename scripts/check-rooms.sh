#!/usr/bin/env bash
# Checks that the shim's rooms include downwards only: every quoted
# #include in shim/ names ROOM/FILE, and ROOM is the includer's own room
# or one below it. One line per breach, naming FILE:LINE; exit 1 if any.
#
#   scripts/check-rooms.sh          the checkout's shim/
#   scripts/check-rooms.sh DIR      DIR/shim/ (the test's fixtures)
#
# The order, lowest first (README, Design): a room may use any room of a
# lower rank, none of its own rank or above but itself.
set -uo pipefail
top=${1:-$(cd "$(dirname "$0")/.." && pwd)}

declare -A rank=(
    [libc]=0
    [policy]=1
    [config]=2
    [log]=3 [rules]=3 [fdtable]=3 [breaker]=3 [readiness]=3
    [permits]=4
    [adaptive]=5
    [admission]=6
    [core]=7
    [hooks]=8
)

failures=0
breach() {
    echo "check-rooms: $1" >&2
    failures=$((failures + 1))
}

while IFS= read -r file; do
    relative=${file#"$top"/}
    room=${relative#shim/}
    room=${room%%/*}
    if [[ -z ${rank[$room]+set} ]]; then
        breach "$relative: shim/$room/ is no room of the order (scripts/check-rooms.sh)"
        continue
    fi
    while IFS=: read -r line target; do
        target=${target#*\"}
        target=${target%%\"*}
        used=${target%%/*}
        if [[ $target != */* || -z ${rank[$used]+set} ]]; then
            breach "$relative:$line: \"$target\" is not ROOM/FILE of a room"
        elif [[ $used != "$room" ]] && ((rank[$used] >= rank[$room])); then
            breach "$relative:$line: $room includes $target: $used is not below $room"
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file")
done < <(find "$top/shim" -name '*.[ch]' | sort)

((failures == 0))
