#!/usr/bin/env bats
# The circuit breaker: what counts as a failure and what as a success, how
# long it stays open, and what it logs. breaker.bats shows opening on
# kernel refusals, the probe, one probe across processes and curl/node;
# this file covers the rest of the rules.
#
# Every test runs its servers and clients in a private network namespace
# (helpers/netns.bash), where the kernel's TcpActiveOpens counts the
# connects that sent a SYN and nothing else connects. Port 7 is closed
# there: the kernel refuses with ECONNREFUSED (111). The compartments
# refuse with EHOSTUNREACH (113) unless a test says otherwise, so a client's
# errno tells the kernel's refusal from the shim's, and the SYN count says
# whether a refused connect reached the network at all.

load helpers/common
load helpers/netns

setup() {
    bh_setup
    netns_start
    BEFORE=$(active_opens)
}
teardown() { bh_teardown; }

# down_rules SECTION_LINES...: one compartment [down], limit 10, EHOSTUNREACH,
# then one line per argument ("key = value" or "match = ..."). The shim's
# lines go to $T/shim.log, so a client's stderr is the client's own.
down_rules() {
    {
        printf '[global]\nnamespace = %s\nlog_file = %s\n' "$NS" "$T/shim.log"
        printf '[down]\nlimit = 10\nerrno = EHOSTUNREACH\n'
        printf '%s\n' "$@"
    } >"$RULES"
}

# seq_shim ITEM...: PY_SEQ (helpers/netns.bash) in the namespace, under the shim.
seq_shim() {
    in_ns_shim timeout 30 python3 -c "$PY_SEQ" "$@"
}

# start_probe OUT CMD...: starts CMD in the namespace under the shim again
# and again until its connect is admitted: CMD prints "connected" then, or
# "connect=...", "result=..." or "pending" when it was not. Sets PROBE_PID.
start_probe() {
    local out=$1 i
    shift
    for ((i = 0; i < 500; i++)); do
        bg_ns_shim "$out" "$@"
        PROBE_PID=$BG_PID
        wait_for -t 10 file_has "$out" '^(connected|connect=|result=|pending)' ||
            fail "the probe said nothing: $(cat "$out.err")"
        file_has "$out" '^connected$' && return 0
        wait "$PROBE_PID" || true
        sleep 0.02
    done
    fail "no probe was admitted in 10 s: $(cat "$out")"
}

# exchange_probe OUT GO_FILE PORT: start_probe with nb_learn's exchange:
# connected, it waits for GO_FILE, then sends a request and reads.
exchange_probe() {
    start_probe "$1" "$CLIENTS/nb_learn" 127.0.0.1 "$3" exchange 10000 "$2"
}

@test "control: without breaker_failures, refusals never open it (every connect sends its SYN)" {
    down_rules "match = 127.0.0.1:$CLOSED_PORT"
    run seq_shim "$CLOSED_PORT*8"
    assert_success
    assert_output "111 111 111 111 111 111 111 111"
    assert_equal "$(syns_since "$BEFORE")" 8
}

@test "with the default errno its refusals read as ECONNREFUSED, yet no SYN leaves; one process's failures open it for the next" {
    printf '[global]\nnamespace = %s\nlog_file = %s\n[down]\nlimit = 10\nbreaker_failures = 3\nmatch = 127.0.0.1:%s\n' \
        "$NS" "$T/shim.log" "$CLOSED_PORT" >"$RULES"
    run seq_shim "$CLOSED_PORT*3"
    assert_output "111 111 111"
    assert_equal "$(syns_since "$BEFORE")" 3
    # Another process: the same errno as the kernel's, but nothing sent.
    run seq_shim "$CLOSED_PORT*4"
    assert_output "111 111 111 111"
    assert_equal "$(syns_since "$BEFORE")" 3
}

@test "connect timeouts (connect_timeout_ms to a blackhole) count as failures" {
    ns_py_server hole "$BLACKHOLE"
    local hole=$SERVER_PORT
    BEFORE=$(active_opens)  # the blackhole's own connects are behind us
    down_rules "match = 127.0.0.1:$hole" connect_timeout_ms=1000 breaker_failures=2 \
        breaker_open_ms=60000
    run seq_shim "$hole*4"
    assert_output "110 110 113 113"
    assert_equal "$(syns_since "$BEFORE")" 2
}

@test "an unreachable network (ENETUNREACH) counts as a failure" {
    # The namespace has only lo: 10.9.9.9 has no route, the kernel says 101
    # without sending anything.
    down_rules "match = 10.9.9.9:80" breaker_failures=3 breaker_open_ms=60000
    run in_ns_shim timeout 30 python3 -c '
import socket
out = []
for _ in range(5):
    s = socket.socket()
    try:
        s.connect(("10.9.9.9", 80))
        out.append("ok")
    except OSError as e:
        out.append(str(e.errno))
    s.close()
print(" ".join(out))
'
    assert_output "101 101 101 113 113"
    run cat "$T/shim.log"
    assert_line --regexp "refused.*breaker open"
}

@test "non-blocking connects: the failure counts wherever the program learns it (SO_ERROR, send, write, recv, read, a second connect)" {
    # One compartment per way of learning, each over a closed port of its own.
    local modes=(so_error send write recv read reconnect) i port got before
    {
        printf '[global]\nnamespace = %s\nlog_file = %s\n' "$NS" "$T/shim.log"
        for i in "${!modes[@]}"; do
            printf '[m_%s]\nlimit = 10\nerrno = EHOSTUNREACH\nbreaker_failures = 3\n' "${modes[$i]}"
            printf 'breaker_open_ms = 60000\nmatch = 127.0.0.1:%s\n' $((20 + i))
        done
    } >"$RULES"
    for i in "${!modes[@]}"; do
        port=$((20 + i))
        before=$(active_opens)
        got="${modes[$i]}:"
        for _ in 1 2 3 4; do
            got+=" $(in_ns_shim "$CLIENTS/nb_learn" 127.0.0.1 "$port" "${modes[$i]}" 10000 || true)"
        done
        got+=" syns=$(syns_since "$before")"
        echo "$got" >>"$T/got"
    done
    run cat "$T/got"
    for i in "${!modes[@]}"; do
        assert_line "${modes[$i]}: result=ECONNREFUSED result=ECONNREFUSED result=ECONNREFUSED connect=EHOSTUNREACH syns=3"
    done
}

@test "curl's refused connects open it; the next curl fails through its ordinary error path without a SYN" {
    down_rules "match = 127.0.0.1:$CLOSED_PORT" breaker_failures=3 breaker_open_ms=60000
    local i
    for i in 1 2 3; do
        run in_ns_shim curl -sS "http://127.0.0.1:$CLOSED_PORT/"
        assert_equal "$status" 7
        assert_output --partial "Couldn't connect to server"
    done
    assert_equal "$(syns_since "$BEFORE")" 3
    run in_ns_shim curl -sS "http://127.0.0.1:$CLOSED_PORT/"
    assert_equal "$status" 7
    assert_output --partial "Couldn't connect to server"
    assert_equal "$(syns_since "$BEFORE")" 3
}

@test "a success resets the count: failures must be consecutive" {
    ns_holdserver srv -1
    local srv=$SERVER_PORT
    BEFORE=$(active_opens)
    down_rules "match = 127.0.0.1:$CLOSED_PORT" "match = 127.0.0.1:$srv" breaker_failures=3 \
        breaker_open_ms=60000
    # 2 failures, a success, 3 failures (only now 3 in a row), a refusal.
    run seq_shim "$CLOSED_PORT*2" "${srv}x" "$CLOSED_PORT*4"
    assert_output "111 111 ok 111 111 111 113"
    assert_equal "$(syns_since "$BEFORE")" 6
    assert_equal "$(ns_server_stat srv total)" 1
}

@test "refusals by the bulkhead itself (the compartment full) never count" {
    ns_holdserver srv -1
    local srv=$SERVER_PORT
    BEFORE=$(active_opens)
    down_rules "match = 127.0.0.1:$CLOSED_PORT" "match = 127.0.0.1:$srv" breaker_failures=3 \
        breaker_open_ms=60000
    sed -i 's/^limit = 10$/limit = 1/' "$RULES"
    bg_ns_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$srv" 600000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    # Full: 6 refusals at once, no SYN (more than breaker_failures).
    run seq_shim "$CLOSED_PORT*3" "$srv*3"
    assert_output "113 113 113 113 113 113"
    assert_equal "$(syns_since "$BEFORE")" 1
    kill -KILL "$holder"
    wait "$holder" || true
    # The breaker is still closed: the kernel refuses (SYNs sent) until
    # 3 real failures in a row open it.
    run seq_shim "$CLOSED_PORT*4"
    assert_output "111 111 111 113"
    assert_equal "$(syns_since "$BEFORE")" 4
}

@test "a reset before the first byte counts as a failure" {
    ns_py_server rst "$BADSERVER" --mode reset --stats "$T/rst.stats"
    local rst=$SERVER_PORT
    BEFORE=$(active_opens)
    down_rules "match = 127.0.0.1:$rst" breaker_failures=3 breaker_open_ms=60000
    # Connected, then ECONNRESET (104) at the first receive.
    run seq_shim "${rst}r*3"
    assert_output "104 104 104"
    run seq_shim "${rst}r*2"
    assert_output "113 113"
    assert_equal "$(syns_since "$BEFORE")" 3
    assert_equal "$(cat "$T/rst.stats")" "total=3"
}

@test "io timeouts count; then a probe that only connects keeps it half-open, a SIGKILLed one frees the slot, and one that gets bytes back closes it" {
    ns_py_server quiet "$SILENT"
    local quiet=$SERVER_PORT
    ns_holdserver srv -1
    local srv=$SERVER_PORT
    BEFORE=$(active_opens)
    down_rules "match = 127.0.0.1:$quiet" "match = 127.0.0.1:$srv" io_timeout_ms=500 \
        breaker_failures=2 breaker_open_ms=500
    # Two receives time out (110): open. Then a connect to the healthy
    # server is refused at once (113).
    run seq_shim "${quiet}x*2" "$srv"
    assert_output "110 110 113"
    assert_equal "$(syns_since "$BEFORE")" 2
    # Half-open: a probe connects to the healthy server but sends nothing yet.
    exchange_probe "$T/probe1" "$T/go1" "$srv"
    assert_equal "$(syns_since "$BEFORE")" 3
    # Connected is not enough after io failures: still one probe only.
    : >"$T/shim.log"
    run seq_shim "$srv*2"
    assert_output "113 113"
    assert_equal "$(syns_since "$BEFORE")" 3
    run cat "$T/shim.log"
    assert_line --partial "breaker half-open"
    # The probe dies without an outcome; its slot comes back.
    kill -KILL "$PROBE_PID"
    wait "$PROBE_PID" || true
    exchange_probe "$T/probe2" "$T/go2" "$srv"
    assert_equal "$(syns_since "$BEFORE")" 4
    run seq_shim "$srv"
    assert_output "113"
    # Bytes come back: closed, and traffic flows.
    touch "$T/go2"
    wait_pid "$PROBE_PID" 10
    run cat "$T/probe2"
    assert_output "$(printf 'connected\nreply')"
    run seq_shim "${srv}x*3"
    assert_output "ok ok ok"
    assert_equal "$(syns_since "$BEFORE")" 7
    assert_equal "$(ns_server_stat srv total)" 5  # 2 probes, 3 after
}

@test "a probe that execs gives its slot back: the next connect is the probe" {
    ns_py_server quiet "$SILENT"
    local quiet=$SERVER_PORT
    ns_holdserver srv -1
    local srv=$SERVER_PORT
    down_rules "match = 127.0.0.1:$quiet" "match = 127.0.0.1:$srv" io_timeout_ms=500 \
        breaker_failures=2 breaker_open_ms=300
    run seq_shim "${quiet}x*2"
    assert_output "110 110"
    # The probe connects (no bytes yet: still half-open), then execs sleep
    # with the connection kept open across the exec.
    start_probe "$T/probe1" python3 -c '
import os, socket, sys
s = socket.socket()
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError as e:
    print("connect=%d" % e.errno, flush=True)
    sys.exit(1)
os.set_inheritable(s.fileno(), True)
print("connected", flush=True)
os.execv("/bin/sleep", ["sleep", "600"])
' "$srv"
    local sleeper=$PROBE_PID
    exec_done() { [[ "$(readlink "/proc/$1/exe")" == */sleep ]]; }
    wait_for exec_done "$sleeper"
    # The new image never learns it held the slot; the next connect gets it.
    exchange_probe "$T/probe2" "$T/go2" "$srv"
    touch "$T/go2"
    wait_pid "$PROBE_PID" 10
    run cat "$T/probe2"
    assert_output "$(printf 'connected\nreply')"
    run seq_shim "${srv}x*2"
    assert_output "ok ok"
    kill -0 "$sleeper"  # the exec'd program still holds its connection
}

@test "a failed probe reopens it for twice as long, up to breaker_open_max_ms" {
    down_rules "match = 127.0.0.1:$CLOSED_PORT" breaker_failures=1 breaker_open_ms=1000 \
        breaker_open_max_ms=2000
    # One process connects every 5 ms for the kernel's refusals (111: a
    # SYN went out, the first failure or a probe). Between two of them the
    # breaker was open: at least (next end - this start) and at most about
    # (next start - this end) ms.
    run in_ns_shim timeout 30 python3 -c '
import socket, sys, time
port = int(sys.argv[1])
syns, other = [], set()
give_up = time.monotonic() + 20
while len(syns) < 4 and time.monotonic() < give_up:
    s = socket.socket()
    start = time.monotonic()
    try:
        s.connect(("127.0.0.1", port))
        err = 0
    except OSError as e:
        err = e.errno
    end = time.monotonic()
    s.close()
    if err == 111:
        syns.append((start, end))
    elif err != 113:
        other.add(err)
    time.sleep(0.005)
print("syns=%d other=%s" % (len(syns), sorted(other)))
for a, b in zip(syns, syns[1:]):
    print("open %d %d" % ((b[1] - a[0]) * 1000, (b[0] - a[1]) * 1000))
' "$CLOSED_PORT"
    assert_success
    assert_line --index 0 "syns=4 other=[]"
    local bounds=("1000 1900" "2000 3500" "2000 3500") i least most
    for i in 0 1 2; do
        read -r _ least most <<<"${lines[$((i + 1))]}"
        read -r lo hi <<<"${bounds[$i]}"
        ((least >= lo)) || fail "open period $((i + 1)): ${least} ms < ${lo} ms: ${lines[*]}"
        ((most < hi)) || fail "open period $((i + 1)): ${most} ms >= ${hi} ms: ${lines[*]}"
    done
    assert_equal "$(syns_since "$BEFORE")" 4
}

@test "log lines: opening at warn, each refusal says 'breaker open', closing only at info" {
    ns_holdserver srv -1
    local srv=$SERVER_PORT
    down_rules "match = 127.0.0.1:$CLOSED_PORT" "match = 127.0.0.1:$srv" breaker_failures=2 \
        breaker_open_ms=1000
    # log_lines: what the shim logged since the last call.
    log_lines() { cat "$T/shim.log" 2>/dev/null; : >"$T/shim.log"; }
    # The default level is warn: the failure that opens it says so, and
    # the refusal right after it says why. One process, so that the next
    # connect comes well within breaker_open_ms however loaded the machine.
    run seq_shim "$CLOSED_PORT*2" "$srv"
    assert_output "111 111 113"
    run log_lines
    assert_line --partial "breaker open"
    assert_line --regexp "refused.*breaker open"
    # The probe that closes it, at info: says so.
    local probe='
import socket, sys, time
give_up = time.monotonic() + 10
while time.monotonic() < give_up:
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        if s.recv(100):
            print("ok")
            break
    except OSError:
        pass
    finally:
        s.close()
    time.sleep(0.02)
'
    run env BULKHEAD_LOG=info nsenter -t "$NETNS_PID" -n -- env LD_PRELOAD="$SHIM" \
        BULKHEAD_CONFIG="$RULES" python3 -c "$probe" "$srv"
    assert_output ok
    run log_lines
    assert_line --regexp "breaker.*closed"
    # Again at warn: the opening shows, the closing does not.
    run seq_shim "$CLOSED_PORT*2"
    assert_output "111 111"
    run log_lines
    assert_line --partial "breaker open"
    run in_ns_shim python3 -c "$probe" "$srv"
    assert_output ok
    run log_lines
    refute_output --partial "closed"
}

# SILENT_PROBE PORT GO_FILE: a non-blocking connect that reports nothing
# (a pool's socket, connected ahead and not used): prints "connected" once
# admitted, then does nothing with the socket until GO_FILE exists; then
# sends a request head and reads, and prints "reply" when bytes came back.
SILENT_PROBE='
import os, select, socket, sys, time
s = socket.socket()
s.setblocking(False)
err = s.connect_ex(("127.0.0.1", int(sys.argv[1])))
if err not in (0, 115):
    print("connect=%d" % err, flush=True)
    sys.exit(1)
print("connected", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
select.select([], [s], [], 10)
s.setblocking(True)
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
print("reply" if s.recv(100) else "eof", flush=True)
'

@test "a probe that never reports is taken over after its deadline and counted failed; its late report changes nothing" {
    ns_holdserver srv -1
    local srv=$SERVER_PORT
    # The probe's deadline is breaker_open_max_ms (no connect_timeout_ms),
    # as the connecting process's own rules say: a minute where a step must
    # not depend on how fast this machine is, 3 s where it is waited out.
    deadline() { sed -i "s/^breaker_open_max_ms=.*/breaker_open_max_ms=$1/" "$RULES"; }
    down_rules "match = 127.0.0.1:$CLOSED_PORT" "match = 127.0.0.1:$srv" breaker_failures=1 \
        breaker_open_ms=500 breaker_open_max_ms=60000
    run seq_shim "$CLOSED_PORT"
    assert_output "111"
    start_probe "$T/silent1" python3 -c "$SILENT_PROBE" "$srv" "$T/go1"
    local silent1=$PROBE_PID started=$SECONDS
    # Within the deadline the silent probe is still the one probe.
    run seq_shim "$srv"
    assert_output "113"
    # Past it, the next connect probes, gets bytes back and closes it.
    deadline 3000
    : >"$T/shim.log"
    local give_up=$((SECONDS + 15)) out=""
    while [[ "$out" != ok ]] && ((SECONDS < give_up)); do
        out=$(seq_shim "${srv}x")
    done
    assert_equal "$out" ok
    ((SECONDS - started >= 2)) || fail "taken over before the 3 s deadline"
    run cat "$T/shim.log"
    assert_line --regexp "\[down\]: the probe \(pid [0-9]+\) showed nothing for [0-9]+ ms: counted as failed"
    # Open again, with a new probe holding the slot; then the old one
    # reports a success late: it must not close the breaker nor free the
    # slot, so the next connect is still refused as a second probe.
    deadline 60000
    run seq_shim "$CLOSED_PORT" "$srv"
    assert_output "111 113"
    start_probe "$T/silent2" python3 -c "$SILENT_PROBE" "$srv" "$T/go2"
    touch "$T/go1"
    wait_pid "$silent1" 10
    run cat "$T/silent1"
    assert_output "$(printf 'connected\nreply')"
    run seq_shim "$srv"
    assert_output "113"
    assert_equal "$(ns_server_stat srv total)" 3  # the two silent probes, one exchange
}
