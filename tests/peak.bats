#!/usr/bin/env bats
# PEAK never exceeds what was really in use at once, however holders end:
# closing, exiting without closing, or killed. The truth is known by
# construction (clients one after another) or counted by the server.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

BULKHEAD="$BH_ROOT/build/bulkhead"

# peak_rules PORT [WAIT_MS]
peak_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 3
wait_ms = ${2:-0}
match = 127.0.0.1:$1
EOF
}

# stat_peak: PEAK from `bulkhead stat --json`; prom_peak: from --prometheus.
stat_peak() {
    "$BULKHEAD" stat --json -c "$RULES" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["compartments"][0]["peak"])'
}
prom_peak() {
    "$BULKHEAD" stat --prometheus -c "$RULES" |
        awk '/^bulkhead_permits_peak\{/ { print $2 }'
}

@test "six redis-cli pings one after another: PEAK 1" {
    command -v redis-server >/dev/null || fail "redis-server is not installed (make deps)"
    local port
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    bg "$T/redis" redis-server --bind 127.0.0.1 --port "$port" --save '' \
        --appendonly no --dir "$T"
    wait_for redis-cli -p "$port" ping
    peak_rules "$port"
    local i
    for i in 1 2 3 4 5 6; do
        run run_shim redis-cli -p "$port" ping
        assert_output PONG
    done
    assert_equal "$(stat_peak)" 1
    assert_equal "$(prom_peak)" 1
}

@test "SIGKILL storm: 10 rounds of 3 holders killed; PEAK is what the server saw" {
    start_server web -1
    peak_rules "$SERVER_PORT"
    local round i pids
    for round in $(seq 1 10); do
        pids=()
        for i in 1 2 3; do
            bg_shim "$T/holder.$round.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
            pids+=("$BG_PID")
        done
        wait_for server_open_is web 3
        kill -KILL "${pids[@]}"
        wait_for server_open_is web 0
    done
    assert_equal "$(server_stat web max)" 3
    assert_equal "$(stat_peak)" 3
    assert_equal "$(prom_peak)" 3
}

@test "8 holders killed one after another: PEAK 1" {
    start_server web -1
    peak_rules "$SERVER_PORT"
    local round
    for round in $(seq 1 8); do
        bg_shim "$T/holder.$round" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
        wait_for server_open_is web 1
        kill -KILL "$BG_PID"
        wait_for server_open_is web 0
    done
    assert_equal "$(server_stat web max)" 1
    assert_equal "$(stat_peak)" 1
    assert_equal "$(prom_peak)" 1
}

@test "waiters let in by a live raise: PEAK is what the server saw" {
    start_server web -1
    peak_rules "$SERVER_PORT" 60000
    local i
    for i in 1 2 3 4 5 6; do
        bg_shim "$T/holder.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    done
    wait_for server_open_is web 3
    wait_for sem_waiters_is "$NS" 3
    run "$BULKHEAD" set -c "$RULES" db limit=6
    assert_success
    wait_for server_open_is web 6
    assert_equal "$(server_stat web max)" 6
    assert_equal "$(stat_peak)" 6
    assert_equal "$(prom_peak)" 6
}
