#!/usr/bin/env bats
# Adaptive limits end to end: a downstream whose capacity changes under
# load (tests/server/capacityserver.py: C requests at a time, the rest
# queued inside it), closed-loop workers under the shim
# (tests/clients/capacity_load.py), and the limit following the capacity
# down and back up. Observed twice: the live limit (`bulkhead stat --json`,
# where the controller's limit is what the command reports) and the most
# connections the server itself had open at once.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

CAPACITY_SERVER="$BH_ROOT/tests/server/capacityserver.py"
CAPACITY_LOAD="$BH_ROOT/tests/clients/capacity_load.py"
SERVICE_MS=10

# server_says COMMAND: one line to the capacity server's control port (stat,
# capacity N, service MS, reset); prints its answer.
server_says() {
    local ctl fd line
    ctl=$(sed -n 2p "$T/capacity.ready")
    exec {fd}<>"/dev/tcp/127.0.0.1/$ctl" || return 1
    echo "$1" >&"$fd"
    read -r -t 10 line <&"$fd"
    exec {fd}<&-
    [[ "$line" == capacity=* ]] || return 1
    echo "$line"
}

# server_figure NAME: one figure of the server's stat line.
server_figure() {
    server_says stat | sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p"
}

served_past() { (($(server_figure served) >= $1)); }

# live_limit: the compartment's limit now, from `bulkhead stat --json` (a
# python3 start per poll would take longer than the polls' interval).
live_limit() {
    "$BULKHEAD" stat -n "$NS" --json | grep -o '"limit": [0-9]*' | head -1 | grep -o '[0-9]*$'
}

limit_at_most() { (($(live_limit) <= $1)); }
limit_at_least() { (($(live_limit) >= $1)); }
# remeasured: gradient has changed the limit since its start's re-measure
# (its first full window pins the limit low for two windows to learn the
# no-load latency, then resumes): a last change, and not the pin.
remeasured() {
    local json
    json=$("$BULKHEAD" stat -n "$NS" --json)
    [[ "$json" == *'"why": "'* && "$json" != *'"why": "re-measure"'* ]]
}

# most_open_from_now: the most connections the server has open at once from
# now on. Connections let in under an earlier, higher limit may still be
# queued there; the server answers in arrival order, so once it has
# answered as many as it had open, every one of them is gone.
most_open_from_now() {
    local open
    open=$(server_figure open)
    server_says reset >/dev/null
    wait_for -t 20 served_past "$((open + 1))"
    server_says reset >/dev/null
    wait_for -t 20 served_past 40
    server_figure max_open
}

# adaptive_downstream CONTROLLER [KEY=VALUE...]: a capacity-8 server, a
# compartment starting at limit 8 with CONTROLLER, and 24 workers at it.
adaptive_downstream() {
    local controller=$1
    shift
    py_server capacity "$CAPACITY_SERVER" --capacity 8 --service-ms "$SERVICE_MS"
    compartment_rules 8 wait_ms=0 "adaptive=$controller" max_limit=32 "$@"
    bg_shim "$T/load" python3 "$CAPACITY_LOAD" 127.0.0.1 "$SERVER_PORT" 24 120
    wait_for -t 10 served_past 100
}

# follows_capacity HIGH_BOUND LOW_BOUND: capacity 8 -> 2 -> 8; the limit and
# the server's count fall to at most LOW_BOUND, then rise to HIGH_BOUND.
follows_capacity() {
    local high=$1 low=$2 most
    server_says "capacity 2" >/dev/null
    wait_for -t 20 limit_at_most "$low"
    most=$(most_open_from_now)
    ((most <= low)) ||
        fail "capacity 2, limit at most $low: the server still had $most open at once"
    server_says "capacity 8" >/dev/null
    wait_for -t 20 limit_at_least "$high"
    most=$(most_open_from_now)
    ((most >= high)) ||
        fail "capacity 8 again, limit at least $high: the server had at most $most open at once"
}

@test "gradient: the limit falls with the downstream's capacity and rises when it returns" {
    adaptive_downstream gradient
    wait_for -t 10 remeasured
    follows_capacity 7 4
}

@test "aimd: the limit falls with the downstream's capacity and rises when it returns" {
    # latency above 1.5 x the service time: too much queued
    adaptive_downstream aimd adaptive_latency_ms=$((SERVICE_MS * 3 / 2))
    follows_capacity 7 4
}

@test "gradient: a downstream that becomes uniformly slower gets its limit back within seconds" {
    adaptive_downstream gradient
    wait_for -t 10 remeasured
    # 4 x the service time, no queue: the limit falls to the pin, where
    # latency does not fall with it; the next re-measure is a minute away
    server_says "service $((SERVICE_MS * 4))" >/dev/null
    wait_for -t 20 limit_at_most 3
    wait_for -t 20 limit_at_least 7
    local most
    most=$(most_open_from_now)
    ((most >= 7)) ||
        fail "service 4 x slower, limit at least 7: the server had at most $most open at once"
}
