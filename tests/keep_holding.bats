#!/usr/bin/env bats
# What a hostile pass found to hold, kept in the suite: a storm of SIGKILLs
# leaves every permit free and nobody waiting, as the kernel counts them;
# waiters behind a stopped holder time out with the configured errno.

load helpers/common

setup() {
    bh_setup
    start_server web -1
}
teardown() { bh_teardown; }

# semaphore NUMBER FIELD: the kernel's value (semval) or waiters (semncnt)
# of one semaphore of our set, from ipcs.
semaphore() {
    local semid
    semid=$(ipcs -s | awk -v k="$(ns_key "$NS")" '$1 == k { print $2 }')
    ipcs -s -i "$semid" | awk -v n="$1" -v f="$2" '
        /^semnum/ { table = 1; next }
        table && $1 == n { print (f == "value" ? $2 : $3) }'
}

# 300 here; `make soak` runs storms of this kind for as long as it is given.
@test "300 SIGKILLs of holders and waiters, limit 4: all 4 permits free, nobody waiting" {
    storm_rules 3600000
    local round i pids
    for round in $(seq 1 30); do
        pids=()
        for i in $(seq 1 10); do
            env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
                "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1 >/dev/null 2>&1 3>&- &
            pids+=($!)
        done
        # Four hold, six wait, then all ten die at once.
        wait_for sem_waiters_is "$NS" 6 || fail "round $round: $(sem_waiters "$NS") waiting, free $(semaphore 1 value), server open $(server_stat web open)"
        kill -KILL "${pids[@]}"
        wait "${pids[@]}" 2>/dev/null || true
    done
    # Semaphore 1 is compartment 0's free permits (see shim/permits).
    assert_equal "$(semaphore 1 value)" 4
    assert_equal "$(sem_waiters "$NS")" 0
    # No assertion on the server's maximum: a SIGKILLed holder's permit goes
    # back (exit_sem) a moment before its socket closes (exit_files), and a
    # waiter not yet killed may connect in between. That window is stated
    # in docs/limits.md and measured by make bench.
}

@test "waiters behind a SIGSTOPped holder time out with the configured errno" {
    storm_rules 300 ETIMEDOUT
    local i holders=()
    for i in 1 2 3 4; do
        bg_shim "$T/holder.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
        holders+=("$BG_PID")
        wait_for file_has "$T/holder.$i" '^ok$'
    done
    kill -STOP "${holders[@]}"
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    kill -CONT "${holders[@]}"
    assert_failure 1
    assert_line ETIMEDOUT
    assert_equal "$(server_stat web max)" 4
}
