#!/usr/bin/env bats
# A wait respects the program's own deadline, and every refusal line says
# why no wait (or no more waiting) happened. Each compartment waits an
# hour, and a holder never lets go: a caller that comes back at all was
# bounded by something else, named in its refusal line.

load helpers/common

setup() {
    bh_setup
    start_server web -1
}
teardown() { bh_teardown; }

# deadline_rules WAIT_NONBLOCKING [MAX_WAITERS [WAIT_MS]]
deadline_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[payments]
limit = 1
wait_ms = ${3:-3600000}
wait_nonblocking = $1
max_waiters = ${2:-64}
match = 127.0.0.1:$SERVER_PORT
EOF
}

hold_the_only_permit() {
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/holder" '^ok$'
}

@test "a blocking socket with SO_SNDTIMEO = 1 s waits no longer than that" {
    deadline_rules no
    hold_the_only_permit
    run --separate-stderr run_shim python3 -c '
import errno, socket, struct, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 1, 0))
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError as e:
    print(errno.errorcode[e.errno])
    sys.exit(1)
print("ok")' "$SERVER_PORT"
    assert_failure 1
    assert_output ECONNREFUSED
    [[ "$stderr" == *"to [payments] after waiting 1000 ms (the socket's SO_SNDTIMEO) for python3"* ]] ||
        fail "refusal line: $stderr"
    assert_equal "$(server_stat web total)" 1
}

@test "requests with a timeout connects non-blocking: its own deadline ends the wait in the background" {
    python3 -c 'import requests' 2>/dev/null || fail "python3-requests is not installed (make deps)"
    deadline_rules no
    hold_the_only_permit
    run --separate-stderr run_shim python3 -c '
import sys, requests
try:
    requests.get("http://127.0.0.1:%s/" % sys.argv[1], timeout=1)
except requests.exceptions.ConnectTimeout:
    print("ConnectTimeout")
    sys.exit(1)
print("ok")' "$SERVER_PORT"
    assert_failure 1
    assert_output ConnectTimeout
    # The program gave up and closed its socket: the wait ended unsaid.
    [[ "$stderr" != *refused* ]] || fail "refusal line: $stderr"
    assert_equal "$(server_stat web total)" 1
}

@test "fail fast: the line says wait_ms = 0" {
    deadline_rules no 64 0
    hold_the_only_permit
    run --separate-stderr run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    [[ "$stderr" == *"to [payments] at once: full; wait_ms = 0 for connect_hold"* ]] ||
        fail "refusal line: $stderr"
}

@test "too many waiters: the line names max_waiters" {
    deadline_rules no 1
    hold_the_only_permit
    bg_shim "$T/waiter" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    wait_for sem_waiters_is "$NS" 1
    run --separate-stderr run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    [[ "$stderr" == *"to [payments] at once: full; max_waiters = 1 already waiting for connect_hold"* ]] ||
        fail "refusal line: $stderr"
}

@test "refusal lines left out by the rate limit are counted when the process exits" {
    deadline_rules no 64 0
    hold_the_only_permit
    run --separate-stderr run_shim python3 -c '
import socket, sys, time
start = int(time.monotonic())
while int(time.monotonic()) == start:   # the burst begins at a fresh second
    pass
for _ in range(5):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    except ConnectionRefusedError:
        pass' "$SERVER_PORT"
    assert_success
    [[ ${#stderr_lines[@]} -eq 2 ]] || fail "expected two lines: $stderr"
    [[ "${stderr_lines[0]}" == "bulkhead: refused 127.0.0.1:$SERVER_PORT to [payments] at once: full; wait_ms = 0 for python3["* ]] ||
        fail "first line: ${stderr_lines[0]}"
    [[ "${stderr_lines[1]}" =~ ^bulkhead:\ python3\[[0-9]+\]\ exits:\ 4\ more\ refused\ to\ \[payments\]\ since\ the\ last\ line$ ]] ||
        fail "exit line: ${stderr_lines[1]}"
}
