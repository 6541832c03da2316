#!/usr/bin/env bats
# bulkhead reset without COMPARTMENT: --force removes whatever this user
# made under the namespace's key, even objects of the wrong size; unforced,
# it refuses while anyone holds or waits, and the refusal leaves the
# namespace working (the permits it drained to check are put back).
# Observers: ipcs (the kernel's objects), the clients' own outcomes.
#
# BULKHEAD_TEST_CLI runs these against another build of the command.

load helpers/common
load helpers/cli

BULKHEAD="${BULKHEAD_TEST_CLI:-$BH_ROOT/build/bulkhead}"

setup() {
    bh_setup
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
}
teardown() { bh_teardown; }

# ipcs -s (or -m with "m") line for KEY, empty when there is none.
ipc_line() {
    ipcs "-${2:-s}" | awk -v key="$1" '$1 == key'
}

@test "reset --force removes a same-user set and segment of the wrong size under the key, and says what" {
    local key
    key=$(ns_key "$NS")
    # Another program of ours got there first: 3 semaphores, 64 bytes.
    perl -MIPC::SysV=IPC_CREAT -e '
        my $key = hex($ARGV[0]);
        $key -= 2**32 if $key >= 2**31;  # key_t is signed
        defined semget($key, 3, 0600 | IPC_CREAT) or die "semget: $!";
        defined shmget($key, 64, 0600 | IPC_CREAT) or die "shmget: $!";' "$key"
    [[ -n "$(ipc_line "$key")" ]] || fail "perl made no set under $key"

    run "$BULKHEAD" reset -n "$NS"
    assert_failure 1
    assert_output --partial "key $key holds something else of ours"
    [[ -n "$(ipc_line "$key")" ]] || fail "unforced reset removed the set"

    run "$BULKHEAD" reset --force -n "$NS"
    assert_success
    assert_output "namespace $NS: key $key held a semaphore set of 3 semaphores (mode 0600) and a shared memory segment of 64 bytes (mode 0600), not a namespace's state; removed 2 objects"
    [[ -z "$(ipc_line "$key")" ]] || fail "set still there: $(ipc_line "$key")"
    [[ -z "$(ipc_line "$key" m)" ]] || fail "segment still there: $(ipc_line "$key" m)"

    # The namespace works again: limit 1 holds.
    start_server srv -1
    c_rules "$RULES" 1
    bg_shim "$T/a" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/a" '^(ok|E[A-Z]+)$'
    assert_equal "$(sed -n 1p "$T/a")" ok
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line ECONNREFUSED
    assert_equal "$(server_stat srv total)" 1
}

@test "reset --force: a set another user made under the key is not removed, and it says so" {
    [[ $(id -u) -eq 0 ]] || skip "needs root to make a set as another user"
    id nobody >/dev/null 2>&1 || skip "no user nobody"
    local key
    key=$(ns_key "$NS")
    setpriv --reuid 65534 --regid 65534 --clear-groups perl -MIPC::SysV=IPC_CREAT -e '
        my $key = hex($ARGV[0]);
        $key -= 2**32 if $key >= 2**31;
        defined semget($key, 3, 0600 | IPC_CREAT) or die "semget: $!";' "$key"
    [[ -n "$(ipc_line "$key")" ]] || fail "perl made no set under $key"
    run "$BULKHEAD" reset --force -n "$NS"
    assert_failure 1
    assert_output --partial "of uid 65534, not ours"
    assert_output --partial "nothing there was made by uid 0, so --force cannot remove it"
    [[ -n "$(ipc_line "$key")" ]] || fail "another user's set was removed"
}

@test "reset refuses while one holds and one waits; the namespace still admits and limits afterwards" {
    start_server srv -1
    c_rules "$RULES" 1 20000
    # The holder closes when told (a holder killed by a signal gives its
    # permit back a moment before its socket closes: see Limits).
    bg_shim "$T/a" python3 -c '
import os, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("ok", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
s.close()' "$SERVER_PORT" "$T/a.go"
    local a=$BG_PID
    wait_for file_has "$T/a" '^ok$'
    bg_shim "$T/b" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    local b=$BG_PID
    wait_for sem_waiters_is "$NS" 1

    local key
    key=$(ns_key "$NS")
    run "$BULKHEAD" reset -n "$NS"
    assert_failure 1
    assert_output "bulkhead: reset: namespace \"$NS\" is in use (c: 1 permit held by $a(1), 1 waiting); stop those processes or use --force"
    [[ -n "$(ipc_line "$key")" ]] || fail "the refused reset removed the set"

    # The waiter is still waiting, and gets the holder's permit when it goes.
    assert_equal "$(sem_waiters "$NS")" 1
    touch "$T/a.go"
    wait_pid "$a"
    wait_for file_has "$T/b" '^(ok|E[A-Z]+)$'
    assert_equal "$(sed -n 1p "$T/b")" ok
    # Limit 1 still: a third is refused (nothing drained was given twice).
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[c]
limit = 1
wait_ms = 0
match = 127.0.0.1:$SERVER_PORT
EOF
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line ECONNREFUSED
    assert_equal "$(server_stat srv max)" 1

    kill -TERM "$b"
    wait_pid "$b" || true
    # Free again: the unforced reset removes the namespace now.
    run "$BULKHEAD" reset -n "$NS"
    assert_success
    assert_output "namespace $NS: shared state removed"
    [[ -z "$(ipc_line "$key")" ]] || fail "set still there"
    [[ -z "$(ipc_line "$key" m)" ]] || fail "segment still there"
}

@test "reset refuses while a holder holds, and a new connection still gets a drained permit back" {
    start_server srv -1
    c_rules "$RULES" 2
    bg_shim "$T/a" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    local a=$BG_PID
    wait_for file_has "$T/a" '^ok$'
    run "$BULKHEAD" reset -n "$NS"
    assert_failure 1
    assert_output --partial "is in use (c: 1 permit held by $a(1), 0 waiting)"
    # The one free permit the reset drained is back: a second gets it.
    bg_shim "$T/b" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/b" '^(ok|E[A-Z]+)$'
    assert_equal "$(sed -n 1p "$T/b")" ok
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line ECONNREFUSED
    assert_equal "$(server_stat srv open)" 2
}
