#!/usr/bin/env bats
# Asynchronous admission: a non-blocking connect to a full compartment
# returns EINPROGRESS at once and waits for its permit in the common queue
# while its program runs; what the program, the server and the kernel see.

load helpers/common
load helpers/wire

setup() { bh_setup; }
teardown() { bh_teardown; }

# async_rules WAIT_MS: limit 1 over the server, refusals EHOSTUNREACH.
async_rules() {
    compartment_rules 1 "wait_ms=$1" errno=EHOSTUNREACH
}

# hold_the_permit: a blocking client holds the compartment's one permit
# (HOLDER_PID) until $T/release exists, then closes it and exits (a kill
# would give the permit back before the kernel closes the socket).
hold_the_permit() {
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" until="$T/release"
    HOLDER_PID=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
}

# start_waiter MODE: the async client, started while the permit is held;
# returns once its connect waits in the kernel's queue.
start_waiter() {
    bg_shim "$T/waiter" "$CLIENTS/async_wait" 127.0.0.1 "$SERVER_PORT" "$1" "$T"
    WAITER_PID=$BG_PID
    wait_for file_has "$T/waiter" '^send='
    wait_for sem_waiters_is "$NS" 1
}

# The permit comes back at once to whoever asks next: a blocking connect
# with the whole limit to itself, while the earlier processes still live.
next_gets_the_limit() {
    touch "$T/release"
    wait_pid "$HOLDER_PID"
    run timeout 10 env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
}

@test "async: a non-blocking connect to a full compartment returns EINPROGRESS at once and completes when the holder closes" {
    start_server srv -1
    async_rules 30000
    hold_the_permit
    start_waiter wait
    # The connect came back while the permit was still held.
    assert_equal "$(sed -n 1p "$T/waiter")" connect=EINPROGRESS
    run cat "$T/waiter"
    assert_line again=EALREADY
    assert_line send=EAGAIN
    [[ $(server_stat srv total) == 1 ]] || fail "the waiting connect reached the server"
    touch "$T/release"
    wait_pid "$WAITER_PID"
    run cat "$T/waiter"
    assert_line poll=OUT,
    assert_line so_error=ok
    [[ $(server_stat srv total) == 2 ]] || fail "the admitted connect never reached the server"
    [[ $(server_stat srv max) == 1 ]] || fail "the server saw more than the limit at once"
}

@test "async: a wait that times out fails as a refused connect does, and no SYN leaves" {
    start_server srv -1
    async_rules 300
    hold_the_permit
    wire_start
    bg_shim "$T/waiter" "$CLIENTS/async_wait" 127.0.0.1 "$SERVER_PORT" wait "$T"
    wait_pid "$BG_PID"
    wire_stop
    run cat "$T/waiter"
    assert_line connect=EINPROGRESS
    assert_line poll=OUT,ERR,HUP,
    assert_line so_error=EHOSTUNREACH
    # The capture starts after the holder's SYN: it must see none at all.
    run wire_report
    assert_output "connections=0 max_open=0"
    run cat "$T/waiter.err"
    assert_output --partial "after waiting 300 ms"
}

# waiter_leaves MODE: while the connect waits, MODE ends it; the kernel's
# queue is empty at once (well before wait_ms) while the process lives.
waiter_leaves() {
    start_server srv -1
    async_rules 60000
    hold_the_permit
    start_waiter "$1"
    touch "$T/go"
    wait_for file_has "$T/waiter" '^acted$'
    wait_for -t 5 sem_waiters_is "$NS" 0
    next_gets_the_limit
    touch "$T/end"
    wait_pid "$WAITER_PID"
    [[ $(server_stat srv total) == 2 ]] || fail "the abandoned connect reached the server"
}

@test "async: close of a waiting fd leaves the queue at once; nothing is lost" {
    waiter_leaves close
}

@test "async: dup2 onto a waiting fd leaves the queue at once; nothing is lost" {
    waiter_leaves dup2
}

@test "async: fork while waiting; both copies closed leave the queue; nothing is lost" {
    waiter_leaves fork
    assert_equal "$(grep -c child_closed "$T/waiter")" 1
}

@test "async: SIGKILL of a waiting process leaves the queue; nothing is lost" {
    start_server srv -1
    async_rules 60000
    hold_the_permit
    start_waiter close
    kill -KILL "$WAITER_PID"
    wait_for -t 5 sem_waiters_is "$NS" 0
    next_gets_the_limit
    [[ $(server_stat srv total) == 2 ]] || fail "the killed connect reached the server"
}
