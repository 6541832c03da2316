#!/usr/bin/env bats
# bulkhead run's seccomp supervisor: how a non-blocking connect of the
# tree waits for a permit. A Go program's waits the full wait_ms (its
# runtime parks only the goroutine); a C program's waits in place as a
# single-threaded program's blocking connect does: wait_ms while it holds
# none of the compartment's permits, hold_wait_ms once it holds some
# (whatever its thread count: the loop that waits is the one that would
# give them back). What counts is what the hold server saw and what the
# clients got, by their own clocks.
#
# The clients: godial (go build here, cached in build/tests/godial), and
# nb_hold and hold_connect (gcc -static, build/tests/).
# (A cli file: `bulkhead run` always preloads build/libbulkhead.so.)

load helpers/common

setup() {
    bh_setup
    GODIAL="$BH_ROOT/build/tests/godial"
    build_if_stale "$GODIAL" "$BH_ROOT/tests/clients/go/godial.go" go_build
    NB_HOLD="$BH_ROOT/build/tests/nb_hold"
    build_if_stale "$NB_HOLD" "$BH_ROOT/tests/clients/static/nb_hold.c" static_build
    HOLD="$BH_ROOT/build/tests/hold_connect"
    build_if_stale "$HOLD" "$BH_ROOT/tests/clients/static/hold_connect.c" static_build
}
teardown() {
    exec 8>&-
    kill_trees
    bh_teardown
}

# bg_tree OUT RUN_ARGS...: bulkhead run in the background, in a session of
# its own, so that teardown ends the whole tree (kill_trees). Without fd 8:
# the test alone holds the write end of hold_one's fifo.
bg_tree() {
    local out=$1
    shift
    bg "$out" setsid "$BULKHEAD" run "$@" 8>&-
    echo "$BG_PID" >>"$T/trees"
}

# words WORD FILE: how many of FILE's words are exactly WORD.
words() {
    tr -s ' ' '\n' <"$2" | grep -cx -- "$1" || true
}

# hold_one: another tree holds one connection to the server until
# release_one (the end of its stdin, a fifo whose write end is fd 8 here);
# returns once the server has it open.
hold_one() {
    mkfifo "$T/release"
    exec 8<>"$T/release"
    bg_tree "$T/holder" -c "$RULES" -- sh -c \
        "exec '$HOLD' 127.0.0.1 $SERVER_PORT 1 <'$T/release'"
    wait_for server_open_is s 1
}
release_one() {
    exec 8>&-
}

@test "seccomp waits: a Go client's 200 dials from 100 goroutines at limit 3 and wait_ms = 30000 all get through, the server never seeing more than 3" {
    start_server s -1
    compartment_rules 3 wait_ms=30000 max_waiters=100
    "$BULKHEAD" run -c "$RULES" -- "$GODIAL" "127.0.0.1:$SERVER_PORT" 200 pool 100 50 \
        >"$T/go" 2>"$T/go.err" 3>&- || fail "godial: $(cat "$T/go.err")"
    assert_equal "$(words ok "$T/go")" 200
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 200
}

@test "seccomp waits: a static C program's non-blocking connect, holding nothing, waits in connect() for the permit another tree gives back; holding it, its next one is refused at once (hold_wait_ms = 0), though it has two threads" {
    start_server s -1
    compartment_rules 1 wait_ms=20000
    hold_one
    bg_tree "$T/nb" -c "$RULES" -- "$NB_HOLD" 127.0.0.1 "$SERVER_PORT" 2 --thread
    local tree=$BG_PID
    # its connect waits on the namespace's semaphore, as the kernel counts
    wait_for sem_waiters_is "$NS" 1
    release_one
    wait_pid "$tree" || fail "nb_hold: $(cat "$T/nb.err")"
    run cut -d' ' -f1 "$T/nb"
    assert_output $'ok\nECONNREFUSED'
    # refused by the hold rule, not after the 20 s wait
    (($(sed -n 2p "$T/nb" | cut -d' ' -f2) < 10000)) ||
        fail "the second connect took $(sed -n 2p "$T/nb") ms"
    assert_equal "$(server_stat s max)" 1
    assert_equal "$(server_stat s total)" 2
}

@test "seccomp waits: while a program's non-blocking connect waits for its permit, the supervisor answers the tree's other connects at once (the wait is a worker's, not the main thread's)" {
    start_server u -1
    start_server s -1
    compartment_rules 1 wait_ms=20000
    hold_one
    bg_tree "$T/tree" -c "$RULES" -- sh -c \
        "'$NB_HOLD' 127.0.0.1 $PORT_s 1 >'$T/waiting' &
         while [ ! -e '$T/go' ]; do sleep 0.01; done
         '$NB_HOLD' 127.0.0.1 $PORT_u 1 >'$T/other'
         wait"
    local tree=$BG_PID
    wait_for sem_waiters_is "$NS" 1
    touch "$T/go"
    wait_for grep -q . "$T/other"
    run cut -d' ' -f1 "$T/other"
    assert_output ok
    # answered while the first still waited
    assert_equal "$(sem_waiters "$NS")" 1
    assert_equal "$(server_stat u total)" 1
    release_one
    wait_pid "$tree" || fail "tree: $(cat "$T/tree.err")"
    run cut -d' ' -f1 "$T/waiting"
    assert_output ok
    assert_equal "$(server_stat s max)" 1
}
