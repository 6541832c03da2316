#!/usr/bin/env bats
# Semantics 2: a process killed by SIGKILL gives its permits back at once
# (SEM_UNDO), and a killed waiter leaves nothing behind.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

@test "SIGKILLed children: permits back as soon as they are reaped (20 rounds)" {
    fdops_setup 3
    fdops sigkill 3
    assert_success
    assert_lines rounds=20 children_connected=60 full_while_held=20 restored_after_kill=20 final_avail=3
    assert_server_saw_connects
}

@test "SIGKILLed holder processes: the next connect succeeds at the first try" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[crash]
limit = 2
errno = EHOSTUNREACH
match = 127.0.0.1:$SERVER_PORT
EOF
    local round a b
    for round in 1 2 3 4 5; do
        bg_shim "$T/a$round" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
        a=$BG_PID
        bg_shim "$T/b$round" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
        b=$BG_PID
        wait_for file_has "$T/a$round" '^ok$'
        wait_for file_has "$T/b$round" '^ok$'
        run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
        assert_output --partial EHOSTUNREACH

        kill -KILL "$a" "$b"
        wait "$a" "$b" || true
        # Reaped: no retry, no sleep — the permits must be there now.
        run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
        assert_success
        assert_line ok
    done
}

@test "a SIGKILLed waiter no longer counts against max_waiters" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[crash]
limit = 1
wait_ms = 30000
max_waiters = 1
errno = EHOSTUNREACH
match = 127.0.0.1:$SERVER_PORT
EOF
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'

    bg_shim "$T/w1" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    local w1=$BG_PID
    wait_for sem_waiters_is "$NS" 1
    kill -KILL "$w1"
    wait "$w1" || true

    # Had the dead waiter been remembered, this one would be refused at once.
    bg_shim "$T/w2" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    local w2=$BG_PID
    wait_for sem_waiters_is "$NS" 1
    [[ ! -s "$T/w2" ]] || fail "second waiter did not wait: $(cat "$T/w2")"

    kill -KILL "$holder"
    wait "$holder" || true
    wait_pid "$w2" 20 || fail "waiter did not get the permit: $(cat "$T/w2")"
    assert_equal "$(head -1 "$T/w2")" ok
}
