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

# start_syslogd: a syslog socket at $T/log.sock whose datagrams land, one a
# line, in $T/syslog.
start_syslogd() {
    bg "$T/syslogd.log" python3 "$BH_ROOT/tests/server/syslogd.py" \
        --socket "$T/log.sock" --out "$T/syslog" --ready "$T/syslogd.ready"
    wait_for -t 10 test -s "$T/syslogd.ready" ||
        fail "syslogd did not start: $(cat "$T/syslogd.log.err")"
}

@test "log_file = syslog: a refusal is one datagram on the syslog socket, facility daemon at warning, nothing on stderr" {
    start_server web -1
    start_syslogd
    payments_rules 0 "log_file = syslog" "syslog_socket = $T/log.sock"
    run --separate-stderr refuse_burst 1
    assert_success
    local pid=$output
    assert_equal "$stderr" ""
    wait_for -t 5 file_has "$T/syslog" "refused"
    run cat "$T/syslog"
    assert_line --index 0 "<28>bulkhead[$pid]: refused 127.0.0.1:$SERVER_PORT to [payments] at once: limit 0 for python3[$pid]"
}

@test "a program that points fd 2 at its own file: the lines go to syslog, never into that file" {
    start_server web -1
    start_syslogd
    payments_rules 0 "syslog_socket = $T/log.sock"
    run --separate-stderr run_shim python3 -c '
import os, socket, sys
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.dup2(fd, 2)
s = socket.socket()
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except ConnectionRefusedError as e:
    print(e.errno)' "$SERVER_PORT" "$T/own.log"
    assert_success
    assert_output "111"
    assert_equal "$stderr" ""
    wait_for -t 5 file_has "$T/syslog" "to \\[payments\\] at once: limit 0 for python3"
    run cat "$T/own.log"
    assert_output ""
}

@test "nginx, whose error log takes fd 2: the workers' refusals reach syslog beside nginx's 502" {
    command -v nginx >/dev/null || fail "nginx is not installed (make deps)"
    start_server web -1
    start_syslogd
    payments_rules 0 "syslog_socket = $T/log.sock"
    local port
    port=$(free_port)
    {
        nginx_conf_head "master_process off;"
        cat <<EOF2
    server {
        listen 127.0.0.1:$port;
        location / { proxy_pass http://127.0.0.1:$SERVER_PORT; }
    }
}
EOF2
    } >"$T/nginx.conf"
    bg_shim "$T/nginx.out" nginx -c "$T/nginx.conf"
    wait_for curl -s -o /dev/null "http://127.0.0.1:$port/" ||
        fail "nginx did not start: $(cat "$T/nginx.out.err" "$T/nginx.err")"
    run curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/"
    assert_output "502"
    wait_for -t 5 file_has "$T/syslog" "refused 127.0.0.1:$SERVER_PORT to \\[payments\\] at once: limit 0 for nginx"
    run grep -c "bulkhead" "$T/nginx.err"
    assert_output "0"
}

@test "syslog_socket longer than a unix socket's path: one line naming file, line and key" {
    local long
    long=/$(printf 'x%.0s' $(seq 1 120))
    SERVER_PORT=9 payments_rules 1 "syslog_socket = $long"
    run "$BULKHEAD" check "$RULES"
    assert_failure
    assert_line --index 0 --regexp "^bulkhead: $RULES:3: syslog_socket: \"/x+\\.\\.\\.\" is longer than a unix socket's path may be \\(107 bytes\\)$"
    assert_line --index 1 "bulkhead: $RULES: 1 error"
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

@test "a tree whose rules.ini disagrees with the live limit says once, at warn, which it uses and who set it" {
    start_server web -1
    payments_rules 0 "log = info"
    run_shim /bin/true 2>/dev/null
    payments_rules 5   # log = warn, the default
    run --separate-stderr run_shim sh -c '/bin/true; sh -c /bin/true; /bin/true'
    assert_success
    assert_equal "$stderr" \
        "bulkhead: using the namespace's live limits, [payments] 0 (file: 5; registered by the rules of a program that started earlier), not $RULES's; bulkhead apply $RULES takes the file's"
    # ...and it does use it: a connection is refused.
    run --separate-stderr run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure
    assert_line ECONNREFUSED
    "$BULKHEAD" set -n "$NS" payments limit=1 >/dev/null
    run --separate-stderr run_shim sh -c '/bin/true; sh -c /bin/true'
    assert_success
    assert_equal "$stderr" \
        "bulkhead: using the namespace's live limits, [payments] 1 (file: 5; set by bulkhead set or apply), not $RULES's; bulkhead apply $RULES takes the file's"
}
