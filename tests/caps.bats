#!/usr/bin/env bats
# Semantics 1-3 and 8 with real programs: the server's own count of open
# connections is the observer.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

# caps_rules LIMIT WAIT_MS [ERRNO [MAX_WAITERS]]: one compartment over the
# last started server.
caps_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[payments]
limit = $1
wait_ms = $2
errno = ${3:-ECONNREFUSED}
max_waiters = ${4:-64}
match = 127.0.0.1:$SERVER_PORT
EOF
}

@test "20 parallel curls, limit 3, fail fast: 3 reach the server, 17 exit 7 at once" {
    # The server holds the three it admits past the test's end (teardown
    # ends them): however slowly 20 curls start, no permit comes back.
    start_server web 60000
    caps_rules 3 0
    local i
    for i in $(seq 1 20); do
        run_rc "$T/curl.$i" run_shim curl -s -o /dev/null --noproxy '*' --max-time 100 \
            "http://127.0.0.1:$SERVER_PORT/" 3>&- &
        track_pid $!
    done
    # "At once": all 17 refusals are in while the server holds the three
    # admitted connections, so none of them waited for a permit.
    wait_for rc_count_is 7 17 "$T/curl"
    assert_equal "$(server_stat web open)" 3
    assert_equal "$(server_stat web max)" 3
    # A refusal sends nothing: the server saw the three and no more.
    assert_equal "$(server_stat web total)" 3
}

@test "curl connects non-blocking, and its connect waits for the permit in the background when the compartment waits" {
    start_server web 2000
    # An hour's wait, and a holder that closes once the curl waits: the
    # curl gets the permit then, through its own poll, and the server
    # never sees both at once.
    caps_rules 1 3600000
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" until="$T/release"
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    run_rc "$T/curl" run_shim curl -s -o /dev/null --noproxy '*' --max-time 60 \
        "http://127.0.0.1:$SERVER_PORT/" 3>&- &
    local curl=$!
    track_pid "$curl"
    # Waiting on the semaphores, as the kernel counts it: not refused.
    wait_for sem_waiters_is "$NS" 1
    touch "$T/release"
    wait_pid "$holder"
    wait_pid "$curl" 60 || true
    run cat "$T/curl"
    assert_output rc=0
    assert_equal "$(server_stat web total)" 2
    assert_equal "$(server_stat web max)" 1
}

@test "6 parallel curls, limit 3, wait_ms: their non-blocking connects wait like any other, all succeed, 3 at once" {
    # curl's connects are non-blocking: they wait wait_ms as a blocking
    # connect would, far longer than the server holds the first three. It
    # answers none before three are open and three wait, however slowly a
    # loaded machine starts them.
    start_server web 300 127.0.0.1 --hold-until "$T/release"
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[payments]
limit = 3
wait_ms = 20000
match = 127.0.0.1:$SERVER_PORT
EOF
    local i pids=()
    for i in $(seq 1 6); do
        run_rc "$T/curl.$i" run_shim curl -s -o /dev/null --noproxy '*' --max-time 15 \
            "http://127.0.0.1:$SERVER_PORT/" 3>&- &
        pids+=($!)
        track_pid $!
    done
    wait_for server_open_is web 3
    wait_for sem_waiters_is "$NS" 3
    touch "$T/release"
    wait "${pids[@]}" || true
    assert_equal "$(count_rc 0 "$T"/curl.*)" 6
    assert_equal "$(server_stat web max)" 3
    assert_equal "$(server_stat web total)" 6
}

@test "20 parallel wgets, limit 3, long wait: all succeed, never more than 3 at once" {
    # wget connects with a blocking socket, so it waits for a permit. The
    # server answers none before three are open and the rest wait.
    start_server web 400 127.0.0.1 --hold-until "$T/release"
    caps_rules 3 20000
    local i pids=()
    for i in $(seq 1 20); do
        run_rc "$T/wget.$i" run_shim wget -q -O /dev/null --no-proxy -T 15 -t 1 \
            "http://127.0.0.1:$SERVER_PORT/" 3>&- &
        pids+=($!)
        track_pid $!
    done
    wait_for -t 30 server_open_is web 3
    wait_for -t 30 sem_waiters_is "$NS" 17
    touch "$T/release"
    wait "${pids[@]}" || true
    assert_equal "$(count_rc 0 "$T"/wget.*)" 20
    assert_equal "$(server_stat web max)" 3
    assert_equal "$(server_stat web total)" 20
}

@test "short wait: late python clients fail with the configured errno (ETIMEDOUT)" {
    # The holders hold for a minute (the test ends long before): however
    # slowly the late clients start, their 200 ms wait finds no permit.
    start_server web 60000
    caps_rules 2 200 ETIMEDOUT
    local i pids=()
    for i in 1 2; do
        bg_shim "$T/py.$i" python3 -c "$PY_CLIENT" 127.0.0.1 "$SERVER_PORT"
        pids+=("$BG_PID")
    done
    wait_for file_has "$T/py.1" '^ok$'
    wait_for file_has "$T/py.2" '^ok$'
    for i in 3 4 5; do
        bg_shim "$T/py.$i" python3 -c "$PY_CLIENT" 127.0.0.1 "$SERVER_PORT"
        pids+=("$BG_PID")
    done
    for i in 3 4 5; do
        wait_for file_has "$T/py.$i" '.'
        assert_equal "$(cat "$T/py.$i")" ETIMEDOUT
    done
    assert_equal "$(server_stat web max)" 2
    assert_equal "$(server_stat web total)" 2
}

@test "a waiter gets the permit as soon as a holder closes" {
    start_server web -1
    caps_rules 1 20000
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    bg_shim "$T/waiter" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    local waiter=$BG_PID
    wait_for sem_waiters_is "$NS" 1
    [[ ! -s "$T/waiter" ]] || fail "waiter did not wait: $(cat "$T/waiter")"
    kill -KILL "$holder"
    wait_pid "$waiter" 15 || fail "waiter failed: $(cat "$T/waiter")"
    assert_equal "$(head -1 "$T/waiter")" ok
    assert_equal "$(server_stat web total)" 2
}

@test "max_waiters: with 2 already waiting, a third caller is refused at once" {
    # The server closes the holder's connection after 300 ms; the holder is
    # killed only after that (see "waiters are served in arrival order").
    start_server web 300
    caps_rules 1 3600000 EAGAIN 2
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'

    # One at a time, each seen blocked by the kernel before the next comes.
    bg_shim "$T/w1" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    local w1=$BG_PID
    wait_for sem_waiters_is "$NS" 1
    bg_shim "$T/w2" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    local w2=$BG_PID
    wait_for sem_waiters_is "$NS" 2

    # With an hour's wait, the third caller coming back at all means it was
    # refused without waiting.
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line EAGAIN
    # The two waiters are still waiting, not refused.
    [[ ! -s "$T/w1" && ! -s "$T/w2" ]] || fail "a waiter gave up: $(cat "$T/w1" "$T/w2")"

    wait_for server_open_is web 0
    kill -KILL "$holder"
    wait_pid "$w1" 15 || fail "waiter 1: $(cat "$T/w1")"
    wait_pid "$w2" 15 || fail "waiter 2: $(cat "$T/w2")"
    assert_equal "$(head -1 "$T/w1")" ok
    assert_equal "$(head -1 "$T/w2")" ok
    assert_equal "$(server_stat web total)" 3
    assert_equal "$(server_stat web max)" 1
}

@test "waiters are served in arrival order" {
    # The server closes each connection after 300 ms while its client keeps
    # the fd (and the permit) for 60 s. Each holder is killed only once the
    # server has closed its connection: a dying process gets its permits
    # back (SEM_UNDO) a moment before the kernel closes its sockets, and
    # the server's count must not see that overlap as a second connection.
    start_server web 300
    caps_rules 1 30000
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    bg_shim "$T/first" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    local first=$BG_PID
    wait_for sem_waiters_is "$NS" 1
    bg_shim "$T/second" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    local second=$BG_PID
    wait_for sem_waiters_is "$NS" 2

    wait_for server_open_is web 0
    kill -KILL "$holder"
    wait_for file_has "$T/first" '^ok$'
    # The permit went to the first arrival; the second still waits.
    wait_for sem_waiters_is "$NS" 1
    [[ ! -s "$T/second" ]] || fail "second waiter overtook: $(cat "$T/second")"
    wait_for server_open_is web 0
    kill -KILL "$first"
    wait_pid "$second" 15 || fail "second waiter: $(cat "$T/second")"
    assert_equal "$(head -1 "$T/second")" ok
    assert_equal "$(server_stat web max)" 1
}

@test "limit = 0 refuses everything and sends nothing" {
    start_server web -1
    caps_rules 0 0
    local i
    for i in 1 2 3; do
        run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
        assert_failure 1
        assert_line ECONNREFUSED
    done
    assert_equal "$(server_stat web total)" 0
}

@test "each errno setting is what the program sees" {
    start_server web -1
    local e
    for e in ECONNREFUSED ETIMEDOUT EAGAIN EHOSTUNREACH; do
        caps_rules 0 0 "$e"
        run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
        assert_failure 1
        assert_line "$e"
    done
    assert_equal "$(server_stat web total)" 0
}

@test "permits are shared by all processes in a namespace, not across namespaces" {
    start_server web -1
    caps_rules 1 0
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    wait_for file_has "$T/holder" '^ok$'

    # Another process, another rules file, same namespace and compartment.
    local other="$T/other.ini"
    cp "$RULES" "$other"
    run env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$other" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line ECONNREFUSED

    # A different namespace has permits of its own.
    local ns2="${NS}b"
    ns_track "$ns2"
    sed "s/^namespace = .*/namespace = $ns2/" "$RULES" >"$other"
    run env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$other" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
    assert_equal "$(server_stat web total)" 2
}

@test "64 threads, limit 4, fail fast: 4 connect, 60 refused" {
    start_server web 1500
    caps_rules 4 0
    run run_shim "$CLIENTS/mt_client" 127.0.0.1 "$SERVER_PORT" 64 -1
    assert_success
    assert_lines threads=64 ok=4 ECONNREFUSED=60
    assert_equal "$(server_stat web max)" 4
    assert_equal "$(server_stat web total)" 4
}

@test "64 threads, limit 4, waiting: all 64 connect, never more than 4 at once" {
    start_server web 150
    caps_rules 4 30000
    # One process of 64 threads: a thread pool waits wait_ms whatever its
    # siblings hold (hold_wait_ms bounds single-threaded holders only).
    run run_shim "$CLIENTS/mt_client" 127.0.0.1 "$SERVER_PORT" 64 -1
    assert_success
    assert_lines threads=64 ok=64
    assert_equal "$(server_stat web max)" 4
    assert_equal "$(server_stat web total)" 64
}

@test "8 threads churning connect/close: no permit lost or duplicated" {
    fdops_setup 4
    fdops threads 4
    assert_success
    assert_lines churn_ok=400 churn_gave_up=0 final_avail=4
    assert_server_saw_connects
    local max
    max=$(server_stat srv max)
    ((max <= 4)) || fail "server saw $max at once with limit 4"
}
