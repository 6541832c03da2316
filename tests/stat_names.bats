#!/usr/bin/env bats
# What stat prints is what its docs name, both ways: every Prometheus
# metric family and JSON key `stat --prometheus` and `stat --json` print
# after real traffic (a compartment with every optional part on: reserves,
# per_process, bypass, a breaker, an adaptive limit, turnaround) is named
# in `bulkhead help stat` and in bulkhead(1), and every name those two
# document is printed.

load helpers/common

setup() {
    bh_setup
}

teardown() {
    bh_teardown
}

# Only a fleet compartment whose host holds a grant from the agent has
# these (the fleet's own tests check them), and only a controller that
# changed the limit has a last change.
NOT_HERE='^(fleet|grant|hosts|bulkhead_fleet_.*|from|to|why|at)$'

traffic_with_every_part() {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[c]
limit = 4
turnaround = yes
reserve = 1 for program=connect_hold
per_process = 3
bypass = program=wget
breaker_failures = 5
adaptive = aimd
match = 127.0.0.1:$SERVER_PORT
EOF
    local i
    for i in 1 2 3; do
        run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0 >/dev/null ||
            fail "connect $i failed"
    done
    # One held, so that the holders list has an entry.
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    wait_for file_has "$T/holder" '^ok$'
}

prometheus_printed() {
    "$BULKHEAD" stat -c "$RULES" --prometheus | sed -n 's/^# TYPE \([a-z_]*\) .*/\1/p' | sort -u
}

json_printed() {
    "$BULKHEAD" stat -c "$RULES" --json | python3 -c '
import json, sys
keys = set()
def walk(o):
    if isinstance(o, dict):
        for k, v in o.items():
            keys.add(k)
            walk(v)
    elif isinstance(o, list):
        for v in o:
            walk(v)
walk(json.load(sys.stdin))
print("\n".join(sorted(keys)))'
}

help_text() {
    "$BULKHEAD" help stat
}

# Wide, so that no name is cut at a line's end.
man_text() {
    MANWIDTH=250 MANPAGER=cat man -l "$BH_ROOT/man/bulkhead.1" 2>/dev/null
}

metric_names_in() {
    grep -o 'bulkhead_[a-z_]*[a-z]' | sort -u
}

# JSON keys: the quoted names of the text's stat document, from
# {"namespace" to its last part, "socket_records" {..., "capacity", ...}.
json_names_in() {
    sed -n '/{"namespace"/,/"capacity"/p' | grep -o '"[a-z0-9_]*"' | tr -d '"' | sort -u
}

# names_match PRINTED EXTRACT: each of PRINTED in the help and in the man
# page, and each name they hold among PRINTED (fleet-only names aside).
names_match() {
    local printed=$1 extract=$2 where doc missing
    [[ -n $printed ]] || fail "stat printed nothing"
    for where in help_text man_text; do
        doc=$($where | $extract)
        missing=$(comm -23 <(echo "$printed") <(echo "$doc"))
        [[ -z $missing ]] || fail "printed, not in $where: $(echo $missing)"
        missing=$(comm -13 <(echo "$printed") <(echo "$doc") | grep -Ev "$NOT_HERE" || true)
        [[ -z $missing ]] || fail "in $where, never printed: $(echo $missing)"
    done
}

@test "stat: every metric it prints is named in help stat and bulkhead(1), and every one they name is printed" {
    traffic_with_every_part
    names_match "$(prometheus_printed)" metric_names_in
}

@test "stat: every JSON key it prints is named in help stat and bulkhead(1), and every one they name is printed" {
    traffic_with_every_part
    names_match "$(json_printed)" json_names_in
}
