#!/usr/bin/env bats
# Semantics 13: the circuit breaker, shared by every process. Whether a
# connect sent a SYN is read from the kernel's own counter (TcpActiveOpens)
# inside a private network namespace (unshare -n, lo brought up), where
# nothing but the test connects. Refusals by the breaker carry the
# compartment's errno (EHOSTUNREACH, 113 here), so that they cannot be
# mistaken for the kernel's (ECONNREFUSED, 111, from a closed port).

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

CLOSED=7  # nothing listens on it inside the private namespace

# in_netns SCRIPT: runs bash SCRIPT in a private network namespace with
# only lo, up. Background processes it starts go into $T/pids.
in_netns() {
    export SHIM RULES T NS CLIENTS BULKHEAD BLACKHOLE HOLDSERVER CLOSED
    unshare -n bash -c 'set -e; ip link set lo up; source "$1"' _ "$1"
}

# Helpers for the scripts, run inside the namespace.
cat_netns_helpers() {
    cat <<'EOF'
# The kernel's count of connects that sent a SYN, in this namespace.
active_opens_here() {
    awk '/^Tcp:/ { if (!seen) { for (i = 1; i <= NF; i++) if ($i == "ActiveOpens") c = i; seen = 1 }
                   else print $c }' /proc/net/snmp
}
# connects PORT N: one process, N blocking connects; prints each outcome
# (ok or the errno number) on one line.
connects() {
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" python3 -c '
import socket, sys
out = []
for _ in range(int(sys.argv[2])):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
        out.append("ok")
    except OSError as e:
        out.append(str(e.errno))
    s.close()
print(" ".join(out))
' "$1" "$2"
}
poll() {  # poll CMD...: every 0.02 s, for at most 10 s
    local i
    for ((i = 0; i < 500; i++)); do "$@" && return 0; sleep 0.02; done
    return 1
}
EOF
}

# netns_script FILE <<EOF ... EOF: the helpers, then the test's own lines.
netns_script() {
    { cat_netns_helpers; cat; } >"$1"
}

write_breaker_rules() {  # write_breaker_rules OPEN_MS MATCH...
    local open_ms=$1 match
    shift
    {
        printf '[global]\nnamespace = %s\n[down]\nlimit = 10\n' "$NS"
        printf 'errno = EHOSTUNREACH\nbreaker_failures = 3\nbreaker_open_ms = %s\n' "$open_ms"
        for match in "$@"; do printf 'match = %s\n' "$match"; done
    } >"$RULES"
}

@test "three kernel refusals open it; then another process's connects fail at once and send no SYN" {
    write_breaker_rules 60000 "127.0.0.1:$CLOSED"
    netns_script "$T/run.sh" <<'EOF'
before=$(active_opens_here)
echo "first=$(connects "$CLOSED" 3)"
middle=$(active_opens_here)
echo "second=$(connects "$CLOSED" 5)"
echo "syns=$((middle - before)) $(($(active_opens_here) - middle))"
EOF
    run in_netns "$T/run.sh"
    assert_success
    assert_line "first=111 111 111"       # the kernel's refusals, all sent
    assert_line "second=113 113 113 113 113"  # the breaker's: no SYN at all
    assert_line "syns=3 0"
}

@test "once the server is back, one probe after the open time closes it and traffic flows" {
    write_breaker_rules 300 "127.0.0.1:8080"
    netns_script "$T/run.sh" <<'EOF'
echo "refused=$(connects 8080 3)"
python3 "$HOLDSERVER" --host 127.0.0.1 --port 8080 --hold-ms 0 --ready "$T/srv.ready" \
    --stats "$T/srv.stats" >"$T/srv.log" 2>&1 &
echo $! >>"$T/pids"
poll test -s "$T/srv.ready"
# Refused (113) until the open time ends; then the probe gets through.
probe() { [ "$(connects 8080 1)" = ok ]; }
poll probe
echo "after=$(connects 8080 5)"
EOF
    run in_netns "$T/run.sh"
    assert_success
    assert_line "refused=111 111 111"
    assert_line "after=ok ok ok ok ok"
}

@test "one probe at a time across processes; a SIGKILLed probe's slot goes to the next connect" {
    netns_script "$T/run.sh" <<'EOF'
python3 "$BLACKHOLE" --ready "$T/hole.ready" >"$T/hole.log" 2>&1 &
echo $! >>"$T/pids"
poll test -s "$T/hole.ready"
hole=$(cat "$T/hole.ready")
{
    printf '[global]\nnamespace = %s\n[down]\nlimit = 10\nerrno = EHOSTUNREACH\n' "$NS"
    printf 'breaker_failures = 3\nbreaker_open_ms = 200\n'
    printf 'match = 127.0.0.1:%s\nmatch = 127.0.0.1:%s\n' "$CLOSED" "$hole"
} >"$RULES"
before=$(active_opens_here)
echo "refused=$(connects "$CLOSED" 3)"
# The prober retries until the breaker lets it through; its connect to the
# blackhole then hangs, holding the probe slot. Its SYN shows it got it.
LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" python3 -c '
import socket, sys, time
while True:
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
    except OSError:
        s.close()
        time.sleep(0.02)
' "$hole" &
prober=$!
echo $prober >>"$T/pids"
probing() { [ $(($(active_opens_here) - before)) -eq 4 ]; }
poll probing
echo "while_probing=$(connects "$CLOSED" 2) syns=$(($(active_opens_here) - before))"
kill -KILL $prober
wait $prober 2>/dev/null || true
echo "after_kill=$(connects "$CLOSED" 1) syns=$(($(active_opens_here) - before))"
EOF
    run in_netns "$T/run.sh"
    assert_success
    assert_line "refused=111 111 111"
    assert_line "while_probing=113 113 syns=4"   # refused, no SYN: one probe only
    assert_line "after_kill=111 syns=5"          # the slot came back: a probe, a SYN
}

@test "curl and node see a breaker refusal through their ordinary error path; nothing reaches the server" {
    start_server srv -1
    write_breaker_rules 60000 "127.0.0.1:$SERVER_PORT"
    sed -i 's/^errno = EHOSTUNREACH$/errno = ECONNREFUSED/' "$RULES"
    run_shim /bin/true  # registers the compartment
    "$BULKHEAD" set -c "$RULES" down breaker=open >/dev/null
    run run_shim curl -sS "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$status" 7
    assert_output --partial "Couldn't connect to server"
    assert_output --partial "breaker open"
    run run_shim node -e '
const s = require("net").connect(Number(process.argv[1]), "127.0.0.1");
s.on("connect", () => { console.log("connected"); s.destroy(); });
s.on("error", (e) => console.log("error " + e.code));
' "$SERVER_PORT"
    assert_line "error ECONNREFUSED"
    assert_equal "$(server_stat srv total)" 0
    "$BULKHEAD" set -c "$RULES" down breaker=closed >/dev/null
    run run_shim curl -sS "http://127.0.0.1:$SERVER_PORT/"
    assert_success
    assert_equal "$(server_stat srv total)" 1
}
