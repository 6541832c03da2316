#!/usr/bin/env bats
# The fleet with one host cut off from Redis while its agent lives on (a
# partial partition): host b reaches Redis through a socat proxy, killed
# to cut b off while host a keeps Redis. Two hosts are two namespaces of
# this machine, each with its own agent, sharing one fleet on a real
# redis-server on a loopback port. What is asserted is what the downstream
# server saw.

load helpers/common
load helpers/fleet

setup() { fleet_setup; }
teardown() {
    [[ -n "${PROXY_PID:-}" ]] && cut_proxy
    bh_teardown
}

# lease_calls: Redis's own count of lease calls so far (INFO commandstats).
lease_calls() {
    redis-cli -p "$REDIS_PORT" info commandstats |
        sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p'
}

lease_calls_past() { (($(lease_calls) >= $1)); }

# last_limit_is HOST N: HOST's agent last set the limit to N (its -v
# lines "[db]: limit A -> B").
last_limit_is() {
    [[ "$(grep -o 'limit [0-9]* -> [0-9]*$' "$T/agent.$1.err" | tail -n 1)" == *" -> $2" ]]
}

max_within() {
    local max
    max=$(server_stat srv max)
    ((max <= $1)) || fail "the server saw $max at once (fleet_limit $1)"
}

# clients HOST N: N clients on HOST holding a connection to srv until
# killed; their pids in CLIENT_PIDS, their outputs in CLIENT_OUTS.
clients() {
    local i out
    CLIENT_PIDS=()
    CLIENT_OUTS=()
    for ((i = 0; i < $2; i++)); do
        out="$T/$1.client.$i.$RANDOM"
        bg "$out" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$T/$1.ini" \
            "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 600000
        CLIENT_PIDS+=("$BG_PID")
        CLIENT_OUTS+=("$out")
    done
}

# connected: every client of the last clients() has connected.
connected() {
    local out
    for out in "${CLIENT_OUTS[@]}"; do
        grep -qx ok "$out" 2>/dev/null || return 1
    done
}

@test "a host cut off from Redis while its agent lives, on the default split fallback: the server never sees more than fleet_limit, before, during and after" {
    start_redis
    start_proxy
    start_server srv -1
    host a 6 "$SERVER_PORT"
    host b 6 "$SERVER_PORT"
    sed -i "s|^fleet = .*|fleet = redis://127.0.0.1:$PROXY_PORT|" "$T/b.ini"
    start_agent a
    start_agent b
    # Before: both busy, 3 each.
    clients b 3
    local b_first=("${CLIENT_PIDS[@]}")
    wait_for -t 30 open_is srv 3
    holders a 6 600000
    wait_for -t 30 open_is srv 6
    max_within 6
    # Settled: while b's clients were connecting, a may have been granted
    # a fourth for a refresh or two, and b one less until a gave it back;
    # a cut then would leave b on that smaller grant.
    wait_for -t 30 last_limit_is a 3
    wait_for -t 30 last_limit_is b 3
    # During: b loses Redis; a keeps it, with 3 connections waiting.
    cut_proxy
    wait_for -t 15 file_has "$T/agent.b.err" 'lease ended without Redis: limit 3'
    # b keeps serving on its fallback (3): its clients end and new ones
    # come, while a asks Redis for more at every refresh.
    kill -KILL "${b_first[@]}"
    for pid in "${b_first[@]}"; do wait "$pid" 2>/dev/null || true; done
    clients b 3
    wait_for -t 30 connected
    # Well past b's lease in Redis: a has asked many times since.
    local from
    from=$(lease_calls)
    wait_for -t 30 lease_calls_past $((from + 20))
    max_within 6
    assert_equal "$(server_stat srv open)" 6
    # After: b reaches Redis again, and leases as before.
    local seen
    seen=$(wc -l <"$T/agent.b.err")
    start_proxy "$PROXY_PORT"
    wait_for -t 30 logged_after "$T/agent.b.err" "$seen" 'Redis answers again'
    kill -KILL "${CLIENT_PIDS[@]}"
    from=$(lease_calls)
    wait_for -t 30 lease_calls_past $((from + 20))
    wait_for -t 30 open_is srv 6   # a takes what b gave up, and no more
    max_within 6
}

@test "a host cut off past fleet_fallback_ms: it stops at 0, and Redis gives what it reserved to the others" {
    start_redis
    start_proxy
    start_server srv -1
    host a 6 "$SERVER_PORT"
    host b 6 "$SERVER_PORT" 'fleet_fallback_ms = 1000'
    sed -i "s|^fleet = .*|fleet = redis://127.0.0.1:$PROXY_PORT|" "$T/b.ini"
    start_agent a
    start_agent b
    clients b 3
    wait_for -t 30 open_is srv 3
    holders a 6 600000
    wait_for -t 30 open_is srv 6
    cut_proxy
    # With a fallback of 1 s, an agent whose loop was held up that long by
    # the broken connection goes from its lease straight past its fallback.
    wait_for -t 15 file_has "$T/agent.b.err" 'lease ended without Redis: limit 3|fallback over'
    kill -KILL "${CLIENT_PIDS[@]}"
    for pid in "${CLIENT_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    # b's reserve ends a refresh after its fallback: a takes it all,
    wait_for -t 30 open_is srv 6
    # and b, past its fallback, lets nothing through.
    run on b timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_equal "$status" 124
    max_within 6
    run grep -c 'fallback over: limit 0 until Redis answers' "$T/agent.b.err"
    assert_output 1
}
