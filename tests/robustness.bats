#!/usr/bin/env bats
# Semantics 9: the shim never takes its host down. When its shared state
# cannot be had, it says so once and lets every connection through.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

# three_connections: one process opening three connections at once and
# printing how many the kernel accepted.
three_connections() {
    run_shim python3 -c '
import socket, sys
held, ok = [], 0
for _ in range(3):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1]))); ok += 1
    except OSError:
        pass
    held.append(s)
print("ok=%d" % ok)' "$SERVER_PORT"
}

limit_one_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[web]
limit = 1
match = 127.0.0.1:$SERVER_PORT
EOF
}

@test "the control: limit 1 lets one of three through" {
    start_server web -1
    limit_one_rules
    run --separate-stderr three_connections
    assert_success
    assert_output ok=1
}

@test "a namespace key taken by another program's semaphore set: one line, then unlimited" {
    start_server web -1
    limit_one_rules
    # Someone else's set under our key, with the wrong number of semaphores.
    # (key_t is a signed 32-bit int: fold the hex key into that range)
    perl -MIPC::SysV=IPC_CREAT -e '
        my $key = hex($ARGV[0]); $key -= 2**32 if $key >= 2**31;
        semget($key, 3, 0600 | IPC_CREAT) // die "semget: $!"' "$(ns_key "$NS")"
    run --separate-stderr three_connections
    assert_success
    assert_output ok=3
    [[ ${#stderr_lines[@]} -eq 1 ]] || fail "expected one line on stderr: $stderr"
    [[ "${stderr_lines[0]}" == "bulkhead: namespace \"$NS\": semaphores:"* ]] ||
        fail "unexpected stderr: $stderr"
    assert_equal "$(server_stat web max)" 3
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
    run --separate-stderr three_connections
    assert_success
    assert_output ok=1
    # The holder closes into a removed set: it must exit cleanly.
    kill -TERM "$holder"
    wait "$holder" || true
    [[ ! -s "$T/holder.err" ]] || fail "holder said: $(cat "$T/holder.err")"
}
