#!/usr/bin/env bats
# bulkhead run's seccomp supervisor and what a trapped call may meet on
# its way: signals while a connect waits for a permit (each one, before
# Linux 5.19, ends the program's wait for the supervisor's answer, and
# SA_RESTART traps the same connect again), and calls made through the
# 32-bit ABI by a 64-bit program (`int $0x80`). What counts is what the
# hold server saw, what the clients got and when, and how many wait on
# the namespace's semaphores as the kernel counts them.
#
# The clients (gcc -static, built here into build/tests/): signal_connect,
# one blocking connect while a thread signals it 500 times a second;
# int80_connect, connects made through the i386 ABI.
# (A cli file: `bulkhead run` always preloads build/libbulkhead.so.)

load helpers/common

setup() {
    bh_setup
    SIGNAL_CONNECT="$BH_ROOT/build/tests/signal_connect"
    build_if_stale "$SIGNAL_CONNECT" "$BH_ROOT/tests/clients/static/signal_connect.c" \
        static_build
    INT80="$BH_ROOT/build/tests/int80_connect"
    build_if_stale "$INT80" "$BH_ROOT/tests/clients/static/int80_connect.c" static_build
}
teardown() {
    kill_trees
    bh_teardown
}

# bg_tree OUT CMD...: CMD (which starts bulkhead run) in the background, in
# a process group of its own, so that teardown ends the whole tree.
bg_tree() {
    local out=$1
    shift
    bg "$out" setsid "$@"
    echo "$BG_PID" >>"$T/trees"
}

# before_5_19: writes $T/before_5_19.py; `python3 $T/before_5_19.py CMD...`
# runs CMD under an outer filter that refuses
# SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV with EINVAL, as kernels before
# 5.19 do: run's filter then leaves every signal free to end the wait.
before_5_19() {
    cat >"$T/before_5_19.py" <<'EOF'
import ctypes, os, platform, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
nr = {"x86_64": 317, "aarch64": 277}[platform.machine()]
def stmt(code, k): return struct.pack("HBBI", code, 0, 0, k)
def jump(code, k, jt, jf): return struct.pack("HBBI", code, jt, jf, k)
code = (stmt(0x20, 0) + jump(0x15, nr, 0, 3) +          # ld nr; jeq seccomp
        stmt(0x20, 24) + jump(0x45, 1 << 5, 0, 1) +     # ld args[1]; jset WAIT_KILLABLE_RECV
        stmt(0x06, 0x00050000 | 22) + stmt(0x06, 0x7fff0000))  # ERRNO(EINVAL); ALLOW
buf = ctypes.create_string_buffer(code)
prog = struct.pack("HxxxxxxQ", len(code) // 8, ctypes.addressof(buf))
pbuf = ctypes.create_string_buffer(prog)
assert libc.prctl(38, 1, 0, 0, 0) == 0                  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.addressof(pbuf), 0, 0) == 0  # SECCOMP_MODE_FILTER
os.execv(sys.argv[1], sys.argv[1:])
EOF
}

# signalled_wait [WRAPPER...]: limit 1, its permit held by a preloaded
# client; the supervised client's connect waits while signalled at 500 Hz.
signalled_wait() {
    local -a outer=("$@")
    start_server s 60000
    compartment_rules 1 wait_ms=20000 max_waiters=2
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    bg_tree "$T/sig" "${outer[@]}" "$BULKHEAD" run -c "$RULES" -- \
        "$SIGNAL_CONNECT" "$SERVER_PORT" 500 restart
    local sig=$BG_PID
    wait_for sem_waiters_is "$NS" 1 || fail "signal_connect: $(cat "$T/sig" "$T/sig.err")"
    # a second of signals later: still one waiter, the connect unanswered
    wait_for file_has "$T/sig" '^sent=500$'
    assert_equal "$(sem_waiters "$NS")" 1
    run ! grep '^connect=' "$T/sig"
    # another process of the user waits its turn: max_waiters is not spent
    bg_shim "$T/other" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    local other=$BG_PID
    wait_for sem_waiters_is "$NS" 2
    assert_equal "$(sem_waiters "$NS")" 2
    # the permit comes free: the connect succeeds then, once
    kill -KILL "$holder"
    wait_pid "$sig" 30 || fail "signal_connect: $(cat "$T/sig" "$T/sig.err")"
    grep -qx 'connect=ok' "$T/sig"
    wait_pid "$other" 30 || fail "the other client: $(cat "$T/other")"
    grep -qx ok "$T/other"
    # holder, signalled client, other client: one connection each
    assert_equal "$(server_stat s total)" 3
}

@test "seccomp signals: a connect waiting for a permit, signalled at 500 Hz with SA_RESTART, is one waiter and connects once when the permit frees" {
    signalled_wait
}

@test "seccomp signals: the same before Linux 5.19 (the filter's WAIT_KILLABLE_RECV refused): restarts are one admission" {
    before_5_19
    signalled_wait python3 "$T/before_5_19.py"
}

@test "seccomp signals: before Linux 5.19, a connect whose wait a signal ends with EINTR stops waiting and never connects; the permit goes to the next process" {
    before_5_19
    start_server s 60000
    compartment_rules 1 wait_ms=20000
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    bg_tree "$T/sig" python3 "$T/before_5_19.py" "$BULKHEAD" run -c "$RULES" -- \
        "$SIGNAL_CONNECT" "$SERVER_PORT" 0 interrupt "$T/go"
    local sig=$BG_PID
    wait_for sem_waiters_is "$NS" 1 || fail "signal_connect: $(cat "$T/sig" "$T/sig.err")"
    kill -USR1 "$(sed -n 's/^pid=//p' "$T/sig")"
    wait_for file_has "$T/sig" '^connect='
    grep -qx 'connect=EINTR' "$T/sig"
    # its job no longer waits (the program holds the socket, unconnected)
    wait_for sem_waiters_is "$NS" 0
    kill -KILL "$holder"
    run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0 >"$T/other"
    grep -qx ok "$T/other"
    # holder and the next process: the interrupted socket never connected
    assert_equal "$(server_stat s total)" 2
    touch "$T/go"
    wait_pid "$sig" 30 || true
}

@test "seccomp signals: a 64-bit static program connecting through int \$0x80 (connect and socketcall) is capped: at limit 3, 3 of 6 connect" {
    [[ "$("$INT80" 1 1 connect /nonexistent)" != no-int80 ]] ||
        skip "this machine runs no i386 calls (int \$0x80 faults)"
    start_server s 60000
    compartment_rules 3
    local how
    for how in connect socketcall; do
        rm -f "$T/go"
        bg_tree "$T/$how" "$BULKHEAD" run -c "$RULES" -- "$INT80" "$SERVER_PORT" 6 "$how" "$T/go"
        wait_for eval "(( \$(wc -l <\"\$T/$how\") == 6 ))"
        assert_equal "$(grep -cx ok "$T/$how")" 3
        assert_equal "$(grep -cx ECONNREFUSED "$T/$how")" 3
        assert_equal "$(server_stat s open)" 3
        touch "$T/go"
        wait_pid "$BG_PID" 30
        wait_for server_open_is s 0
    done
    assert_equal "$(server_stat s total)" 6
}
