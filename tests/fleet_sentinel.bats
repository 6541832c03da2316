#!/usr/bin/env bats
# The fleet on Redis with Sentinel (fleet = redis-sentinel://...): a real
# redis-server master, its replica and a redis-sentinel on loopback ports,
# started and stopped here. A failover is observed from outside: the
# sentinel's own answer, the leases in the promoted replica (redis-cli), and
# the test server's count of connections at once; the sentinels' faults by
# the one line check and the agent give.

load helpers/common
load helpers/fleet

setup() { fleet_setup; }
teardown() { bh_teardown; }


# lease_of PORT HOST: HOST's lease as the Redis at PORT holds it
# ("want holding grant expires_ms satisfied owed"); empty if none.
lease_of() { redis-cli -p "$1" hget "$(leases_key)" "$2"; }

# leases_of PORT HOST...: their leases, one line each, in one read.
leases_of() {
    local port=$1
    shift
    redis-cli -p "$port" hmget "$(leases_key)" "$@"
}

# leases_renewed PORT BEFORE HOST...: the Redis at PORT holds a lease of
# each HOST other than its line in BEFORE: each agent has written there.
leases_renewed() {
    local port=$1 before=$2 now i
    shift 2
    mapfile -t now < <(leases_of "$port" "$@")
    mapfile -t before <<<"$before"
    for ((i = 0; i < $#; i++)); do
        [[ -n "${now[i]}" && "${now[i]}" != "${before[i]}" ]] || return 1
    done
}

leases_on() {
    local port=$1 h
    shift
    for h in "$@"; do [[ -n "$(lease_of "$port" "$h")" ]] || return 1; done
}

open_at_least() { (($(server_stat "$1" open) >= $2)); }

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

@test "the master killed: every host leases from the promoted replica; the server never sees more than fleet_limit" {
    REFRESH_MS=200 LEASE_MS=2000
    start_sentinels
    start_server srv -1
    for h in a b; do sentinel_host $h 4 "$SERVER_PORT"; done
    for h in a b; do start_agent $h; done
    local a_clients=() i
    for ((i = 0; i < 4; i++)); do
        bg "$T/a.client.$i" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$T/a.ini" \
            "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
        a_clients+=("$BG_PID")
    done
    holders b 4 60000
    wait_for -t 5 open_is srv 4
    wait_for leases_on "$REPLICA_PORT" a b
    local killed switched renewed
    killed=$(now_ms)
    kill -KILL "$REDIS_PID"
    wait_pid "$REDIS_PID" 5 || true
    # What replication had brought the replica: frozen until it is promoted.
    local before
    before=$(leases_of "$REPLICA_PORT" a b)
    wait_for -t 20 sentinel_master_is "$REPLICA_PORT"
    switched=$(now_ms)
    wait_for -t 5 leases_renewed "$REPLICA_PORT" "$before" a b
    renewed=$(now_ms)
    # How soon (one refresh) is a timing goal: `make bench --only failover`.
    echo "# failover $((switched - killed)) ms, leases renewed $((renewed - switched)) ms after it" >&3
    # a's clients gone, b's waiters get the capacity the new master grants.
    kill -KILL "${a_clients[@]}"
    for i in "${a_clients[@]}"; do wait_pid "$i" 5 || true; done
    wait_for -t 10 open_at_least srv 3
    local max
    max=$(server_stat srv max)
    echo "# the server saw at most $max at once (fleet_limit 4)" >&3
    ((max <= 4)) || fail "the server saw $max at once (fleet_limit 4)"
}

@test "sentinels that know no such master, none that answers, or a master out of reach: one line from check and from the agent" {
    command -v redis-sentinel >/dev/null || skip "redis-sentinel is not installed"
    start_server srv -1
    # A sentinel watching a master nothing listens on: it names it anyway.
    local dead
    dead=$(free_port)
    SENTINEL_PORT=$(free_port)
    printf '%s\n' "port $SENTINEL_PORT" "bind 127.0.0.1" "dir $T" \
        "sentinel monitor gone 127.0.0.1 $dead 1" >"$T/sentinel.conf"
    redis-sentinel "$T/sentinel.conf" >"$T/sentinel.log" 2>&1 3>&- &
    track_pid $!
    sentinel_up() { [[ "$(redis-cli -p "$SENTINEL_PORT" ping 2>/dev/null)" == PONG ]]; }
    wait_for sentinel_up
    local nobody
    nobody=$(free_port)
    MASTER_NAME=nope sentinel_host a 4 "$SERVER_PORT"
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead agent: no sentinel knows master nope (127.0.0.1:$SENTINEL_PORT: does not know master nope)"
    sed -i "s|^fleet = .*|fleet = redis-sentinel://127.0.0.1:$nobody/nope|" "$T/a.ini"
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead agent: no sentinel answers for master nope (127.0.0.1:$nobody: Connection refused)"
    MASTER_NAME=gone sentinel_host a 4 "$SERVER_PORT"
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead agent: cannot reach Redis at 127.0.0.1:$dead: Connection refused (master gone, named by sentinel 127.0.0.1:$SENTINEL_PORT)"
    # The agent says it once, however many refreshes it tries.
    start_agent a
    wait_for file_has "$T/agent.a.err" "cannot reach Redis at 127.0.0.1:$dead"
    # The sentinel's own count: one connection per question.
    sentinel_asked() {
        (($(redis-cli -p "$SENTINEL_PORT" info stats |
            sed -n 's/^total_connections_received:\([0-9]*\).*/\1/p') >= $1))
    }
    local asked
    asked=$(redis-cli -p "$SENTINEL_PORT" info stats | sed -n 's/^total_connections_received:\([0-9]*\).*/\1/p')
    wait_for sentinel_asked $((asked + 6))
    run grep -c 'cannot reach Redis' "$T/agent.a.err"
    assert_output 1
    # Never granted a share: nothing gets through.
    run on a timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_equal "$status" 124
    assert_equal "$(server_stat srv total)" 0
}

@test "a promoted replica that lacks a host's last lease: learning mode, no over-grant while the hosts re-register" {
    # Learning lasts a lease from a's reconnection, and b must be back
    # before it ends: a paused agent that stays away longer is a dead one,
    # whose host's connections nobody can count (docs/fleet.md). So the
    # lease outlasts every wait below, however slow the machine.
    REFRESH_MS=200 LEASE_MS=60000
    start_sentinels
    start_server srv -1
    for h in a b; do sentinel_host $h 4 "$SERVER_PORT"; done
    for h in a b; do start_agent $h; done
    holders b 4 60000
    wait_for -t 5 open_is srv 4
    local b_holds
    b_holds=$(server_stat srv open)
    # b's agent paused: it cannot tell the new master what it holds.
    kill -STOP "$AGENT_b"
    kill -KILL "$REDIS_PID"
    wait_pid "$REDIS_PID" 5 || true
    # The replica missed b's last writes: it has b holding 1, granted 1,
    # with a lease as fresh as b's real one. The fleet's totals, kept
    # beside the leases, are dropped too, so that the next lease call
    # counts them again from the leases as edited here (a replica that
    # lags has them as they were with its leases: each call's writes
    # reach it as one transaction).
    local time
    mapfile -t time < <(redis-cli -p "$REPLICA_PORT" time)
    run redis-cli -p "$REPLICA_PORT" config set replica-read-only no
    assert_output OK
    redis-cli -p "$REPLICA_PORT" hset "$(leases_key)" b "2 1 1 $((time[0] * 1000 + time[1] / 1000 + LEASE_MS)) 0 0 1 0" >/dev/null
    redis-cli -p "$REPLICA_PORT" hdel "$(meta_key)" hosts >/dev/null
    wait_for -t 20 sentinel_master_is "$REPLICA_PORT"
    # New demand on a, which leases from the new master three times.
    holders a 4 60000
    local seen
    seen=$(leases_of "$REPLICA_PORT" a)
    wait_for leases_renewed "$REPLICA_PORT" "$seen" a
    seen=$(leases_of "$REPLICA_PORT" a)
    wait_for leases_renewed "$REPLICA_PORT" "$seen" a
    seen=$(leases_of "$REPLICA_PORT" a)
    wait_for leases_renewed "$REPLICA_PORT" "$seen" a
    # Without learning a would be granted 4 - 1: past the fleet limit. It
    # may use the grant it kept from the old master, which counted in it.
    local max
    max=$(server_stat srv max)
    ((max <= 4)) || fail "while b was paused the server saw $max at once (fleet_limit 4)"
    # b back: it re-registers what it holds; a gets what is left.
    kill -CONT "$AGENT_b"
    b_registered() { [[ "$(leases_of "$REPLICA_PORT" b)" =~ ^[0-9]+\ $b_holds\  ]]; }
    wait_for -t 5 b_registered
    wait_for -t 10 open_is srv 4
    max=$(server_stat srv max)
    ((max <= 4)) || fail "the server saw $max at once (fleet_limit 4)"
}

@test "the first sentinel down: the agent asks the next, and leases from the master it names" {
    start_sentinels
    start_server srv -1
    local nobody
    nobody=$(free_port)
    sentinel_host a 4 "$SERVER_PORT"
    sed -i "s|^fleet = .*|fleet = redis-sentinel://127.0.0.1:$nobody,127.0.0.1:$SENTINEL_PORT/$MASTER_NAME|" "$T/a.ini"
    run "$BULKHEAD" check "$T/a.ini"
    assert_success
    start_agent a
    holders a 2 60000
    wait_for -t 5 open_is srv 2
    # Its lease is on the master the second sentinel names.
    wait_for leases_on "$REDIS_PORT" a
}

@test "every sentinel and the master gone: one line; each host keeps its grant until its lease ends, then falls back" {
    start_sentinels
    start_server srv -1
    for h in a c; do sentinel_host $h 6 "$SERVER_PORT" 'fleet_fallback = split'; done
    for h in a c; do start_agent $h; done
    holders a 4 60000
    wait_for -t 5 open_is srv 4
    kill -KILL "$SENTINEL_PID" "$REDIS_PID"
    wait_for file_has "$T/agent.a.err" "no sentinel answers for master $MASTER_NAME \\(127\\.0\\.0\\.1:$SENTINEL_PORT: Connection refused\\)"
    # a falls back to min(its grant 5, 6 / 2 hosts) once its lease ends: its
    # 4 connections stay; a new one does not get in.
    wait_for -t 5 file_has "$T/agent.a.err" 'lease ended without Redis: limit 3'
    run on a timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_equal "$status" 124
    assert_equal "$(server_stat srv open)" 4
    # Said once over all those refreshes.
    run grep -c 'no sentinel answers' "$T/agent.a.err"
    assert_output 1
}
