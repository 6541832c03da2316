#!/usr/bin/env bats
# The shim's log: refusals at warn (compartment, destination, program, pid),
# at most one line per second per compartment per process with a count of
# the lines left out; start-up at info; log_file; BULKHEAD_LOG.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

# payments_rules LIMIT [extra global lines...]
payments_rules() {
    local limit=$1
    shift
    {
        echo "[global]"
        echo "namespace = $NS"
        printf '%s\n' "$@"
        echo "[payments]"
        echo "limit = $limit"
        echo "match = 127.0.0.1:$SERVER_PORT"
    } >"$RULES"
}

# refuse_burst COUNT: one python process, refused COUNT times within one
# second of the monotonic clock, then once more in the next second. Prints
# its pid.
refuse_burst() {
    run_shim python3 -c '
import os, socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
def refused():
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port)); sys.exit("connected: the compartment was not full")
    except ConnectionRefusedError:
        pass
    finally:
        s.close()
start = int(time.monotonic())
while int(time.monotonic()) == start:   # begin at a fresh second
    pass
for _ in range(count):
    refused()
burst = int(time.monotonic())
while int(time.monotonic()) == burst:
    pass
refused()
print(os.getpid())' "$SERVER_PORT" "$1"
}

@test "a refusal is logged at warn with compartment, destination, program and pid" {
    start_server web -1
    payments_rules 0
    run --separate-stderr refuse_burst 1
    assert_success
    local pid=$output
    [[ ${#stderr_lines[@]} -eq 2 ]] || fail "expected two lines: $stderr"
    assert_equal "${stderr_lines[0]}" \
        "bulkhead: refused 127.0.0.1:$SERVER_PORT to [payments] at once: limit 0 for python3[$pid]"
}

@test "a burst of refusals is one line per second, the next line counts the rest" {
    start_server web -1
    payments_rules 0
    run --separate-stderr refuse_burst 50
    assert_success
    [[ ${#stderr_lines[@]} -eq 2 ]] || fail "expected two lines: $stderr"
    [[ "${stderr_lines[1]}" == *"(49 more refused since the last line)" ]] ||
        fail "second line does not count the 49 left out: ${stderr_lines[1]}"
}

@test "log_file: refusals are appended to the file, not stderr" {
    start_server web -1
    payments_rules 0 "log_file = $T/bulkhead.log"
    echo "an earlier line" >"$T/bulkhead.log"
    run --separate-stderr refuse_burst 1
    assert_success
    assert_equal "$stderr" ""
    run cat "$T/bulkhead.log"
    assert_line --index 0 "an earlier line"
    assert_line --index 1 --partial "bulkhead: refused 127.0.0.1:$SERVER_PORT to [payments]"
    assert_equal "${#lines[@]}" 3
}

@test "BULKHEAD_LOG=error silences refusals; log = info tells what was loaded" {
    start_server web -1
    payments_rules 0
    BULKHEAD_LOG=error run --separate-stderr refuse_burst 1
    assert_success
    assert_equal "$stderr" ""

    payments_rules 0 "log = info"
    run --separate-stderr run_shim /bin/true
    assert_success
    assert_equal "$stderr" \
        "bulkhead: $RULES loaded: namespace \"$NS\", 1 compartment, 1 rule"
}

@test "log = info: a wrapper's tree of processes says loaded once, not once per process" {
    start_server web -1
    payments_rules 0 "log = info"
    run --separate-stderr run_shim sh -c '/bin/true; sh -c /bin/true; /bin/true'
    assert_success
    assert_equal "$stderr" \
        "bulkhead: $RULES loaded: namespace \"$NS\", 1 compartment, 1 rule"
}

@test "a tree whose rules.ini disagrees with the live limit says once, at warn, which it uses and why" {
    start_server web -1
    payments_rules 0 "log = info"
    run_shim /bin/true 2>/dev/null
    payments_rules 5   # log = warn, the default
    run --separate-stderr run_shim sh -c '/bin/true; sh -c /bin/true; /bin/true'
    assert_success
    assert_equal "$stderr" \
        "bulkhead: using the namespace's live limits, [payments] 0 (file: 5), not $RULES's: set by bulkhead set or apply, or by the rules of a program that started earlier; bulkhead apply $RULES takes the file's"
    # ...and it does use it: a connection is refused.
    run --separate-stderr run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure
    assert_line ECONNREFUSED
}
