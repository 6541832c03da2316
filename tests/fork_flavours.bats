#!/usr/bin/env bats
# Copies of a counted socket made the less common ways, and closes of many
# at once: a peeked SCM_RIGHTS message, glibc's _Fork, a socket shared
# while its connect is under way and then killed, close_range and closefrom
# delayed on their way into the kernel. Counts are the test server's, the
# kernel's (ss) and what fresh clients get.

load helpers/common

teardown() {
    touch "$T/go"
    bh_teardown
}

# A fresh fail-fast client under the shim prints WORD.
newcomer_says() {
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$PORT" 0
    assert_line "$1"
}

# setup_holdserver LIMIT [KEY=VALUE...]: a server holding until the client
# closes, a compartment of LIMIT over it.
setup_holdserver() {
    bh_setup
    start_server srv -1
    PORT=$SERVER_PORT
    compartment_rules "$@"
}

@test "recvmsg(MSG_PEEK) of a passed connection: closing the peeked copy gives nothing back" {
    setup_holdserver 1 wait_ms=0
    bg_shim "$T/peek.out" "$CLIENTS/copies" 127.0.0.1 "$PORT" peek "$T/go"
    wait_for file_has "$T/peek.out" '^received$' || fail "$(cat "$T/peek.out.err")"
    newcomer_says ECONNREFUSED
    assert_equal "$(server_stat srv max)" 1
    assert_equal "$(server_stat srv open)" 1
    touch "$T/go"
    wait_for file_has "$T/peek.out" '^closed$'
    wait_for server_open_is srv 0
    newcomer_says ok
    assert_equal "$(server_stat srv max)" 1
}

@test "_Fork: the child's copy keeps the permit past the parent's close; the child's own connects give back" {
    setup_holdserver 1 wait_ms=0
    bg_shim "$T/fork.out" "$CLIENTS/copies" 127.0.0.1 "$PORT" fork_bare "$T/go"
    wait_for file_has "$T/fork.out" '^parent_closed$' || fail "$(cat "$T/fork.out.err")"
    newcomer_says ECONNREFUSED
    assert_equal "$(server_stat srv max)" 1
    touch "$T/go"
    wait_for file_has "$T/fork.out" '^looped$'
    run grep -c '^loop=ok$' "$T/fork.out"
    assert_output 3
    # The child is still alive: what it took and closed is back.
    newcomer_says ok
    newcomer_says ok
    assert_equal "$(server_stat srv max)" 1
}

# No socket to the blackhole's port is open in a copies process, by the
# kernel's word.
no_copies_socket() {
    ! ss -tanpH "dst 127.0.0.1:$PORT" | grep -q '"copies"'
}

# in_flight_killed SIGNAL: two connects still under way (SYNs unanswered)
# are shared with a forked child; the parent exits, the child dies by
# SIGNAL. Then nothing holds the sockets, and a fresh process gets both
# permits.
in_flight_killed() {
    bh_setup
    py_server hole "$BLACKHOLE"
    PORT=$SERVER_PORT
    compartment_rules 2 wait_ms=0 errno=EHOSTUNREACH
    bg_shim "$T/inflight.out" "$CLIENTS/copies" 127.0.0.1 "$PORT" inflight 2
    local parent=$BG_PID child
    wait_for file_has "$T/inflight.out" '^child=[0-9]+$' || fail "$(cat "$T/inflight.out.err")"
    child=$(sed -n 's/^child=//p' "$T/inflight.out")
    track_pid "$child"
    wait_pid "$parent"
    run run_shim "$CLIENTS/copies" 127.0.0.1 "$PORT" take 1
    assert_line "in=0 refused=1"
    kill "-$1" "$child"
    wait_for pid_done "$child"
    wait_for no_copies_socket
    # The kernel is asked at most once per reap interval (a few ms, longer
    # after a slow dump): the permits come back at the first full connect
    # after it.
    wait_for gets_the_whole_limit
}

# A fresh process gets both permits of the compartment, the third refused.
gets_the_whole_limit() {
    run_shim "$CLIENTS/copies" 127.0.0.1 "$PORT" take 3 2>/dev/null | grep -qx 'in=2 refused=1'
}

@test "a connect still under way, shared with a child that is SIGKILLed: the next process gets the whole limit" {
    in_flight_killed KILL
}

@test "a connect still under way, shared with a child that is SIGTERMed: the next process gets the whole limit" {
    in_flight_killed TERM
}

# range_scenario close_range|closefrom: a holder of all 3 permits closes
# them with one call whose entry strace delays by 1 s, as a preemption
# would; 3 waiters are queued for permits meanwhile. The server never sees
# more than 3.
range_scenario() {
    command -v strace >/dev/null || skip "no strace"
    setup_holdserver 3 wait_ms=10000
    bg "$T/range.out" strace -f -qq -o /dev/null -e trace=close_range \
        -e inject=close_range:delay_enter=1000000 \
        env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        "$CLIENTS/copies" 127.0.0.1 "$PORT" "$1" 3 "$T/go"
    wait_for file_has "$T/range.out" '^held=3$' || fail "$(cat "$T/range.out.err")"
    local i
    for i in 1 2 3; do
        bg_shim "$T/waiter.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$PORT" -1
    done
    wait_for sem_waiters_is "$NS" 3
    touch "$T/go"
    wait_for file_has "$T/range.out" '^closed$'
    for i in 1 2 3; do
        wait_for file_has "$T/waiter.$i" '^ok$'
    done
    assert_equal "$(server_stat srv max)" 3
}

@test "close_range delayed on its way into the kernel: no permit is free while its sockets are open" {
    range_scenario close_range
}

@test "closefrom delayed on its way into the kernel: no permit is free while its sockets are open" {
    range_scenario closefrom
}

@test "close_range with CLOSE_RANGE_UNSHARE while another thread runs: its sockets stay open and counted" {
    setup_holdserver 2 wait_ms=0
    bg_shim "$T/unshare.out" "$CLIENTS/copies" 127.0.0.1 "$PORT" unshare 2 "$T/go"
    wait_for file_has "$T/unshare.out" '^held=2$' || fail "$(cat "$T/unshare.out.err")"
    touch "$T/go"
    wait_for file_has "$T/unshare.out" '^closed$'
    assert_equal "$(server_stat srv open)" 2
    newcomer_says ECONNREFUSED
    assert_equal "$(server_stat srv max)" 2
}

# spawner.py PORT MODE GO: connects, starts a python3 child that inherits
# the connection (MODE popen: subprocess.Popen(pass_fds=...), vfork and
# exec; posix_spawn: os.posix_spawn with the socket inheritable), closes
# its own copy ("parent_closed"), and waits for the child, which holds the
# connection until GO exists ("child_done").
write_spawner_py() {
    cat >"$T/spawner.py" <<'PY'
import os, socket, subprocess, sys, time
port, mode, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
held = socket.create_connection(("127.0.0.1", port))
child = ["python3", "-c", "import os, sys, time\n"
         "while not os.path.exists(sys.argv[1]): time.sleep(0.01)", go]
if mode == "popen":
    pid = subprocess.Popen(child, pass_fds=[held.fileno()]).pid
else:
    held.set_inheritable(True)
    pid = os.posix_spawnp("python3", child, os.environ)
held.close()
print("parent_closed", flush=True)
os.waitpid(pid, 0)
print("child_done", flush=True)
time.sleep(3600)
PY
}

# spawned_child_holds MODE: while the spawned child holds the connection a
# newcomer is refused; once it is gone the next connect gets the permit.
spawned_child_holds() {
    setup_holdserver 1 wait_ms=0
    write_spawner_py
    bg_shim "$T/spawner.out" python3 "$T/spawner.py" "$PORT" "$1" "$T/go"
    wait_for file_has "$T/spawner.out" '^parent_closed$' || fail "$(cat "$T/spawner.out.err")"
    newcomer_says ECONNREFUSED
    assert_equal "$(server_stat srv open)" 1
    touch "$T/go"
    wait_for file_has "$T/spawner.out" '^child_done$'
    wait_for server_open_is srv 0
    newcomer_says ok
    assert_equal "$(server_stat srv max)" 1
}

@test "Python's subprocess.Popen(pass_fds=...) (vfork): the child's copy keeps the permit past the parent's close" {
    spawned_child_holds popen
}

@test "posix_spawn of a child inheriting a connection: its copy keeps the permit past the parent's close" {
    spawned_child_holds posix_spawn
}
