#!/usr/bin/env bats
# exec under pressure: from a signal handler on a small alternate stack,
# with more connections than any fixed table, and with a hand-off
# variable the process did not write.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

# exec_rules LIMIT
exec_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = $1
match = 127.0.0.1:$SERVER_PORT
EOF
}

@test "exec from a signal handler on a 16 KiB alternate stack works, and the permit comes back" {
    start_server web -1
    exec_rules 1
    run run_shim "$CLIENTS/exec_altstack" 127.0.0.1 "$SERVER_PORT" /bin/sh -c 'exit 7'
    assert_failure 7
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
}

# Opens as many connections as it may (fail fast), prints how many.
PY_OPEN_ALL='
import socket, sys
held = []
try:
    while len(held) < int(sys.argv[2]):
        held.append(socket.create_connection(("127.0.0.1", int(sys.argv[1]))))
except ConnectionRefusedError:
    pass
print(len(held), flush=True)
'

@test "1,500 connections closed by exec: every permit comes back while the process lives on" {
    ulimit -n 8192
    start_server web -1
    exec_rules 1500
    # Python's sockets are close-on-exec; the new image is the same process
    # and holds nothing, but lives on.
    bg_shim "$T/execer" python3 -c '
import os, socket, sys
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(1500)]
print(len(held), flush=True)
os.execv(sys.executable, [sys.executable, "-c",
    "import time; print(\"exec done\", flush=True); time.sleep(3600)"])' "$SERVER_PORT"
    wait_for -t 60 file_has "$T/execer" '^exec done$'
    run --separate-stderr run_shim python3 -c "$PY_OPEN_ALL" "$SERVER_PORT" 1501
    assert_success
    assert_output 1500
}

@test "a hand-off variable naming permits this process does not hold releases nothing" {
    start_server web -1
    exec_rules 1
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/holder" '^ok$'
    local semid
    semid=$(ipcs -s | awk -v k="$(ns_key "$NS")" '$1 == k { print $2 }')
    [[ -n "$semid" ]] || fail "no semaphore set"
    # A process that holds nothing starts with BULKHEAD_HANDOFF claiming
    # three close-on-exec connections of compartment 0, in its own pid.
    bg "$T/forger" bash -c 'exec env BULKHEAD_HANDOFF="$$/$0/r0,r0,r0" \
        LD_PRELOAD="$1" BULKHEAD_CONFIG="$2" \
        python3 -c "import time; print(\"started\", flush=True); time.sleep(3600)"' \
        "$semid" "$SHIM" "$RULES"
    wait_for file_has "$T/forger" '^started$'
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line ECONNREFUSED
    assert_equal "$(server_stat web max)" 1
}

