#!/usr/bin/env bats
# Semantics 9: the shim never takes its host down. When its shared state
# cannot be had, it says so once and does what on_failure says: refuses
# what the rules match (closed, the default) or lets it through (open).

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

# hold_three: one process under the shim opening three connections and
# holding those the kernel accepted, in the background: it prints "ok=N" to
# $T/three once all three connects returned, then keeps them open until
# release_three, so that the server sees at once what the process held at
# once (a process that exits at once can close its first connection before
# the server accepted its last, and the server then counts them one by one).
hold_three() {
    bg_shim "$T/three" python3 -c '
import os, socket, sys, time
port, release = int(sys.argv[1]), sys.argv[2]
held, ok = [], 0
for _ in range(3):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port)); ok += 1
    except OSError:
        pass
    held.append(s)
print("ok=%d" % ok, flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(release):
    if time.monotonic() > deadline:
        sys.exit("hold_three: never released")
    time.sleep(0.01)' "$SERVER_PORT" "$T/three.release"
    THREE_PID=$BG_PID
    wait_for file_has "$T/three" '^ok=' || fail "the client printed nothing: $(cat "$T/three.err")"
}

# release_three: lets the client close its connections and exit; then
# `output` is its stdout and `stderr` its stderr, and it must have exited 0.
release_three() {
    touch "$T/three.release"
    wait_pid "$THREE_PID" || fail "the client exited $?: $(cat "$T/three.err")"
    output=$(cat "$T/three")
    stderr=$(cat "$T/three.err")
    mapfile -t stderr_lines <"$T/three.err"
}

# limit_one_rules [GLOBAL_LINE]
limit_one_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
${1:-}
[web]
limit = 1
match = 127.0.0.1:$SERVER_PORT
EOF
}

@test "the control: limit 1 lets one of three through" {
    start_server web -1
    limit_one_rules
    hold_three
    assert_equal "$(server_stat web max)" 1
    release_three
    assert_output ok=1
}

# Someone else's set under our key, with the wrong number of semaphores.
# (key_t is a signed 32-bit int: fold the hex key into that range)
squat_own_key() {
    perl -MIPC::SysV=IPC_CREAT -e '
        my $key = hex($ARGV[0]); $key -= 2**32 if $key >= 2**31;
        semget($key, 3, 0600 | IPC_CREAT) // die "semget: $!"' "$(ns_key "$NS")"
}

@test "a namespace key taken by another program's semaphore set: one line, then refused (on_failure = closed)" {
    start_server web -1
    limit_one_rules
    squat_own_key
    hold_three
    assert_equal "$(server_stat web total)" 0
    release_three
    assert_output ok=0
    [[ "${stderr_lines[0]}" == "bulkhead: namespace \"$NS\": semaphores:"*"; bulkhead reset --force removes it; refusing every connection the rules match until it is reachable (on_failure = closed)" ]] ||
        fail "unexpected stderr: $stderr"
}

@test "a namespace key taken by another program's semaphore set, on_failure = open: one line, then unlimited" {
    start_server web -1
    limit_one_rules "on_failure = open"
    squat_own_key
    hold_three
    assert_equal "$(server_stat web open)" 3
    assert_equal "$(server_stat web max)" 3
    release_three
    assert_output ok=3
    [[ ${#stderr_lines[@]} -eq 1 ]] || fail "expected one line on stderr: $stderr"
    [[ "${stderr_lines[0]}" == "bulkhead: namespace \"$NS\": semaphores:"*"; running without limits (on_failure = open)" ]] ||
        fail "unexpected stderr: $stderr"
}

# In a private IPC namespace whose semaphore sets are all taken (SEMMNI
# lowered to 1, and one set made by another user), the shim cannot make
# its own: on_failure decides. Prints the client's report, then its stderr.
# exhausted_semaphores [GLOBAL_LINE]
exhausted_semaphores() {
    limit_one_rules "${1:-}"
    unshare --ipc bash -c '
        echo "32000 1024000000 500 1" >/proc/sys/kernel/sem
        setpriv --reuid 65534 --regid 65534 --clear-groups ipcmk -S 1 >/dev/null
        LD_PRELOAD="$1" BULKHEAD_CONFIG="$2" python3 -c "
import socket, sys
held, ok = [], 0
for _ in range(3):
    s = socket.socket()
    try:
        s.connect((\"127.0.0.1\", int(sys.argv[1]))); ok += 1
    except OSError:
        pass
    held.append(s)
print(\"ok=%d\" % ok)" "$3" 2>&1' _ "$SHIM" "$RULES" "$SERVER_PORT"
}

@test "the machine's semaphore sets used up by another user: refused, with what to do (on_failure = closed)" {
    require_other_user
    start_server web -1
    run exhausted_semaphores
    assert_line ok=0
    assert_line --partial "bulkhead: namespace \"$NS\": semaphores: No space left on device (the machine's semaphore sets or semaphores are used up: kernel.sem SEMMNI/SEMMNS; ipcs -u counts them, ipcs -s -c names their owners); refusing every connection the rules match until it is reachable (on_failure = closed)"
    assert_equal "$(server_stat web total)" 0
}

@test "the machine's semaphore sets used up, on_failure = open: unlimited, and said" {
    require_other_user
    start_server web -1
    run exhausted_semaphores "on_failure = open"
    assert_line ok=3
    assert_line --partial "kernel.sem SEMMNI/SEMMNS; ipcs -u counts them, ipcs -s -c names their owners); running without limits (on_failure = open)"
    assert_equal "$(server_stat web total)" 3
}

@test "the namespace removed under a running holder: new processes start afresh, nothing crashes" {
    start_server web -1
    limit_one_rules
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    local key
    key=$(ns_key "$NS")
    ipcrm -S "$key" -M "$key"
    hold_three
    # The holder's connection and one of the new process's three.
    assert_equal "$(server_stat web open)" 2
    release_three
    assert_output ok=1
    # The holder closes into a removed set: it must exit cleanly.
    kill -TERM "$holder"
    local rc=0
    wait_pid "$holder" || rc=$?
    [[ $rc -ne 124 ]] || fail "the holder did not exit on SIGTERM"
    [[ ! -s "$T/holder.err" ]] || fail "holder said: $(cat "$T/holder.err")"
}

@test "rules with no compartment (the packaged /etc/bulkhead/rules.ini is [global] alone) make no namespace: a client connects, and the kernel holds no semaphore set or segment under its key" {
    start_server web -1
    printf '[global]\nnamespace = %s\nlog = warn\n' "$NS" >"$RULES"
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
    assert_equal "$(server_stat web total)" 1
    ! ipc_under_key "$(ns_key "$NS")" || fail "a namespace was made for rules that count nothing"
}
