#!/usr/bin/env bats
# What operators see of waits, in stat (the feature here is what stat
# shows): every wait counts in the wait figures however it ended, a
# refusal after waiting included, and WAITING is the kernel's count of
# waiters, whatever process waits and however its socket connects. The
# clients' own outcomes (exit codes, errno names) are checked beside it.

load helpers/common
load helpers/cli

setup() { bh_setup; }
teardown() { bh_teardown; }

# wait_rules WAIT_MS: [c], limit 1, over the server.
wait_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[c]
limit = 1
wait_ms = $1
match = 127.0.0.1:$SERVER_PORT
EOF
}

# A non-blocking connect that waits for its outcome with no deadline of
# its own, prints "ok" or the errno name, then holds until killed.
NB_WAITER='
import errno, select, socket, sys, time
s = socket.socket()
s.setblocking(False)
rc = s.connect_ex(("127.0.0.1", int(sys.argv[1])))
if rc == errno.EINPROGRESS:
    select.select([], [s], [])
    rc = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
print("ok" if rc == 0 else errno.errorcode[rc], flush=True)
time.sleep(3600)
'

# at_least A B: A >= B, as numbers.
at_least() {
    python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$1" "$2" ||
        fail "$1 is below $2"
}

@test "waits that end in a refusal count in WAIT_MEAN_MS, WAIT_MAX_MS, the wait histogram, JSON and Prometheus" {
    start_server srv -1
    wait_rules 300
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    local i
    for i in 1 2 3; do
        run --separate-stderr run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
        assert_failure 1
        assert_line --index 0 ECONNREFUSED
    done
    # Every wait so far ended in a refusal, each after 300 ms.
    assert_equal "$(stat_column c TIMED_OUT -c "$RULES")" 3
    at_least "$(stat_column c WAIT_MEAN_MS -c "$RULES")" 300
    at_least "$(stat_column c WAIT_MAX_MS -c "$RULES")" 300
    run "$BULKHEAD" stat -c "$RULES"
    assert_line --regexp '^c +wait +3 '

    # One more waits (the rules read anew by its process: an hour), and
    # gets the permit once the holder lets go.
    wait_rules 3600000
    bg_shim "$T/granted" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    wait_for sem_waiters_is "$NS" 1
    kill "$holder"
    wait_for file_has "$T/granted" '^ok$'

    "$BULKHEAD" stat -c "$RULES" --json >"$T/stat.json"
    run python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["compartments"][0]
w = c["wait_time"]
assert c["timed_out"] == 3 and c["waits"] == 1, c
assert w["count"] == 4 and sum(w["counts"]) == 4, w
assert w["sum_ms"] >= 900 and c["wait_mean_ms"] >= 225 and c["wait_max_ms"] >= 300, c
print("ok")' "$T/stat.json"
    assert_output ok

    "$BULKHEAD" stat -c "$RULES" --prometheus >"$T/metrics"
    check_prometheus "$T/metrics"
    local labels="namespace=\"$NS\",compartment=\"c\""
    assert_equal "$(sed -n "s/^bulkhead_wait_seconds_count{$labels} //p" "$T/metrics")" 4
    assert_equal "$(sed -n "s/^bulkhead_wait_seconds_bucket{$labels,le=\"+Inf\"} //p" "$T/metrics")" 4
    assert_equal "$(sed -n "s/^bulkhead_timed_out_total{$labels} //p" "$T/metrics")" 3
    at_least "$(sed -n "s/^bulkhead_wait_seconds_sum{$labels} //p" "$T/metrics")" 0.9
    at_least "$(sed -n "s/^bulkhead_wait_max_seconds{$labels} //p" "$T/metrics")" 0.3
    assert_equal "$(server_stat srv total)" 2
}

@test "WAITING is the kernel's count: a blocking and a non-blocking waiter of two other processes show, and leave it as they connect" {
    start_server srv -1
    wait_rules 3600000
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    bg_shim "$T/blocking" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    local blocking=$BG_PID
    wait_for sem_waiters_is "$NS" 1
    bg_shim "$T/nonblocking" python3 -c "$NB_WAITER" "$SERVER_PORT"
    wait_for sem_waiters_is "$NS" 2

    assert_equal "$(stat_column c WAITING -c "$RULES")" 2
    run "$BULKHEAD" stat -c "$RULES" --json
    assert_success
    assert_equal "$(python3 -c 'import json, sys; print(json.load(sys.stdin)["compartments"][0]["waiting"])' <<<"$output")" 2
    run "$BULKHEAD" stat -c "$RULES" --prometheus
    assert_line "bulkhead_waiters{namespace=\"$NS\",compartment=\"c\"} 2"

    # In arrival order: the blocking one first, then the other.
    kill "$holder"
    wait_for file_has "$T/blocking" '^ok$'
    wait_for stat_column_is c WAITING 1 -c "$RULES"
    refute [ -s "$T/nonblocking" ]
    kill "$blocking"
    wait_for file_has "$T/nonblocking" '^ok$'
    wait_for stat_column_is c WAITING 0 -c "$RULES"
    assert_equal "$(server_stat srv total)" 3
}
