#!/usr/bin/env bats
# Policy inside a compartment: reserved shares, the per-process
# cap, bypass, weights, a thousand compartments, a reserve lowered under
# live connections, and SIGKILL. Real python3 clients (run under another
# program name with exec -a where the rule names a program) and the C
# multi-threaded client; what counts is what the hold server saw and what
# each client got back from connect().

load helpers/common
load helpers/cli

setup() {
    cli_setup
    write_talker
}

teardown() {
    bh_teardown
}

# exec -a needs the real interpreter: a wrapper (pyenv's shim) would exec
# it again under its own path, and the program name with it.
REAL_PYTHON=/usr/bin/python3
[[ -x $REAL_PYTHON ]] || REAL_PYTHON=$(command -v python3)

# start_as NAME PROGRAM N [PORT]: the hold client as program PROGRAM,
# opening N connections to PORT (default $SERVER_PORT) and holding them.
start_as() {
    local name=$1 program=$2 count=$3 port=${4:-$SERVER_PORT}
    rm -f "$T/$name.out"
    (LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        exec -a "$program" "$REAL_PYTHON" "$CLIENT" "$port" "$T/$name.out" hold "$count" \
        >"$T/$name.log" 2>&1 3>&-) &
    echo $! >"$T/$name.pid"
    track_pid $!
}

# The talker: opens N connections and holds them; once $T/NAME.go exists
# it sends an HTTP request head on each and reads the hold server's answer,
# then reports how many answered. Proves each connection still carries
# data both ways.
write_talker() {
    TALKER="$T/talker.py"
    cat >"$TALKER" <<'EOF'
import os, socket, sys, time
port, out, go, count = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
with open(out + ".tmp", "w") as f:
    f.write("held=%d\n" % len(held))
os.rename(out + ".tmp", out)
while not os.path.exists(go):
    time.sleep(0.02)
answered = 0
for s in held:
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    if s.recv(1024).startswith(b"HTTP/1.0 200"):
        answered += 1
with open(out + ".tmp", "w") as f:
    f.write("answered=%d\n" % answered)
os.rename(out + ".tmp", out)
time.sleep(600)
EOF
}

@test "reserved shares: 20 export clients cannot push out billing's 2 reserved permits" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 5
reserve = 2 for program=billing
match = 127.0.0.1:$SERVER_PORT
EOF
    for i in $(seq 1 20); do
        start_as "export$i" export 1
    done
    local ok=0 refused=0 i
    for i in $(seq 1 20); do
        case "$(client_report "export$i")" in
        "ok=1 refused=0 ") ok=$((ok + 1)) ;;
        "ok=0 refused=1 ECONNREFUSED") refused=$((refused + 1)) ;;
        esac
    done
    assert_equal "$ok $refused" "3 17"
    assert_equal "$(server_stat srv open)" 3
    start_as billing billing 3
    assert_equal "$(client_report billing)" "ok=2 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat srv open)" 5
    start_as late export 1
    assert_equal "$(client_report late)" "ok=0 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat srv max)" 5
}

@test "a script is known by its own name: billing-conn (#!python3) gets billing-*'s reserve" {
    # The kernel starts a script's interpreter with argv[0] "python3": only
    # the executed file's name says billing-conn.
    start_server srv -1
    compartment_rules 2 'reserve=1 for program=billing-*'
    start_as export export 2
    assert_equal "$(client_report export)" "ok=1 refused=1 ECONNREFUSED"
    { echo "#!$REAL_PYTHON"; cat "$CLIENT"; } >"$T/billing-conn"
    chmod +x "$T/billing-conn"
    (LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        exec "$T/billing-conn" "$SERVER_PORT" "$T/billing.out" hold 2 \
        >"$T/billing.log" 2>&1 3>&-) &
    track_pid $!
    assert_equal "$(client_report billing)" "ok=1 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat srv open)" 2
    run "$BULKHEAD" explain -c "$RULES" --program "$T/billing-conn" "127.0.0.1:$SERVER_PORT"
    assert_line "  reserve 1 for program=billing-*: applies (program billing-conn, the script python3 runs)"
}

@test "per_process: threads of one process get 2, refused at once; another process still gets its 2" {
    start_server srv -1
    # wait_ms is long: a refusal that waited would hang the client.
    compartment_rules 10 'per_process=2' 'wait_ms=600000'
    start_as seq python 6
    assert_equal "$(client_report seq)" "ok=2 refused=4 ECONNREFUSED ECONNREFUSED ECONNREFUSED ECONNREFUSED"
    start_as other python 3
    assert_equal "$(client_report other)" "ok=2 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat srv open)" 4
}

@test "per_process: an 8-thread client is held to 2 at once, threads racing" {
    start_server srv -1
    compartment_rules 10 'per_process=2' 'wait_ms=600000'
    # The threads hold until every one has tried and the server has the
    # admitted two open.
    run env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        "$CLIENTS/mt_client" 127.0.0.1 "$SERVER_PORT" 8 all="$T/srv.stats"
    assert_success
    assert_line "ok=2"
    assert_line "ECONNREFUSED=6"
    assert_equal "$(server_stat srv max)" 2
}

@test "bypass: pgdump connects beyond the limit; the others stay capped" {
    start_server srv -1
    compartment_rules 1 'bypass=program=pgdump'
    start_as first python 2
    assert_equal "$(client_report first)" "ok=1 refused=1 ECONNREFUSED"
    start_as dump pgdump 3
    assert_equal "$(client_report dump)" "ok=3 refused=0 "
    start_as second python 1
    assert_equal "$(client_report second)" "ok=0 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat srv open)" 4
    "$BULKHEAD" stat -c "$RULES" --json >"$T/json"
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["compartments"][0]; assert (c["in_use"], c["bypassed"]) == (1, 3), c' "$T/json"
}

@test "weights: weight=4 connections take 4 permits of 8; the servers see the arithmetic" {
    start_server heavy -1
    start_server light -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 8
match = 127.0.0.1:$PORT_heavy weight=4
match = 127.0.0.1:$PORT_light
EOF
    start_as h1 python 1 "$PORT_heavy"
    start_as h2 python 1 "$PORT_heavy"
    assert_equal "$(client_report h1)" "ok=1 refused=0 "
    assert_equal "$(client_report h2)" "ok=1 refused=0 "
    start_as h3 python 1 "$PORT_heavy"
    assert_equal "$(client_report h3)" "ok=0 refused=1 ECONNREFUSED"
    start_as l1 python 1 "$PORT_light"
    assert_equal "$(client_report l1)" "ok=0 refused=1 ECONNREFUSED"
    stop_client h1
    start_as l2 python 5 "$PORT_light"
    assert_equal "$(client_report l2)" "ok=4 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat heavy max)" 2
    assert_equal "$(server_stat light open)" 4
    start_as h4 python 1 "$PORT_heavy"
    assert_equal "$(client_report h4)" "ok=0 refused=1 ECONNREFUSED"
}

@test "1,000 compartments in one file: each caps its own destination, and stat lists them all" {
    start_server srv -1 0.0.0.0
    {
        printf '[global]\nnamespace = %s\n' "$NS"
        for i in $(seq 0 999); do
            printf '[c%d]\nlimit = %d\nmatch = 127.1.%d.%d:%s\n' \
                "$i" $((i % 3 + 1)) $((i / 250)) $((i % 250 + 1)) "$SERVER_PORT"
        done
    } >"$RULES"
    run "$BULKHEAD" check "$RULES"
    assert_success
    write_far_client
    run env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" BULKHEAD_LOG=error \
        python3 "$FAR" "$SERVER_PORT" \
        127.1.0.1 127.1.0.1 127.1.0.2 127.1.0.2 127.1.0.2 127.1.3.250 127.1.3.250 127.1.3.250
    # c0: limit 1, c1: limit 2, c999: limit 1 (999 % 3 + 1)
    assert_output "ok refused ok ok refused ok refused refused"
    run "$BULKHEAD" stat -c "$RULES"
    assert_success
    run bash -c "\"$BULKHEAD\" stat -c \"$RULES\" | awk 'NR > 2 && NF == 0 { exit } NR > 2' | wc -l"
    assert_output 1000
    assert_equal "$(stat_column c999 LIMIT -c "$RULES")" 1
    assert_equal "$(stat_column c998 LIMIT -c "$RULES")" 3
}

# A client that holds one connection to each address given, in order, and
# prints ok/refused for each on one line.
write_far_client() {
    FAR="$T/far.py"
    cat >"$FAR" <<'EOF'
import socket, sys
port, held, out = int(sys.argv[1]), [], []
for host in sys.argv[2:]:
    try:
        held.append(socket.create_connection((host, port)))
        out.append("ok")
    except OSError:
        out.append("refused")
print(" ".join(out))
EOF
}

@test "lowering a reserve live cuts no connection: both still carry data, and the common pool grows as they end" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 3
reserve = 2 for env=CLASS=billing
match = 127.0.0.1:$SERVER_PORT
EOF
    CLASS=billing bg "$T/talk.log" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        python3 "$TALKER" "$SERVER_PORT" "$T/talk.out" "$T/talk.go" 2
    local talker=$BG_PID
    wait_for file_has "$T/talk.out" '^held=2$'
    run "$BULKHEAD" set -c "$RULES" db 'reserve.env=CLASS=billing=0'
    assert_success
    assert_equal "$(server_stat srv open)" 2
    start_as others python 3
    assert_equal "$(client_report others)" "ok=1 refused=2 ECONNREFUSED ECONNREFUSED"
    touch "$T/talk.go"
    wait_for file_has "$T/talk.out" '^answered=2$'
    kill "$talker"
    wait_for pid_done "$talker"
    start_as more python 3
    assert_equal "$(client_report more)" "ok=2 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat srv max)" 3
}

@test "SIGKILL gives everything back: a member's reserved, common and weighted permits" {
    start_server light -1
    start_server heavy -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 6
reserve = 2 for program=billing
match = 127.0.0.1:$PORT_heavy weight=3
match = 127.0.0.1:$PORT_light
EOF
    start_as member billing 1 "$PORT_heavy"
    assert_equal "$(client_report member)" "ok=1 refused=0 "
    start_as member2 billing 1 "$PORT_light"
    assert_equal "$(client_report member2)" "ok=1 refused=0 "
    start_as other python 3 "$PORT_light"
    assert_equal "$(client_report other)" "ok=2 refused=1 ECONNREFUSED"
    kill -KILL "$(cat "$T/member.pid")" "$(cat "$T/member2.pid")" "$(cat "$T/other.pid")"
    wait_for pid_done "$(cat "$T/member.pid")"
    wait_for pid_done "$(cat "$T/member2.pid")"
    wait_for pid_done "$(cat "$T/other.pid")"
    wait_for test "$(server_stat light open)" = 0
    start_as after python 6 "$PORT_light"
    assert_equal "$(client_report after)" "ok=4 refused=2 ECONNREFUSED ECONNREFUSED"
    start_as after2 billing 3 "$PORT_light"
    assert_equal "$(client_report after2)" "ok=2 refused=1 ECONNREFUSED"
}

# A member that dies while it waits on its reserve must not leave the
# common pool lent to the reserve: after the others close, new clients
# get the whole common pool at once.
# killed_reserve_waiter SIGNAL
killed_reserve_waiter() {
    start_server srv -1
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
[db]
limit = 4
wait_ms = 5000
reserve = 1 for env=CLS=gold
match = 127.0.0.1:$SERVER_PORT
EOF2
    CLS=gold start_client gold hold 1
    assert_equal "$(client_report gold)" "ok=1 refused=0 "
    cat >"$T/closer.py" <<'EOF2'
import os, socket, sys, time
port, out, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
open(out, "w").write("held\n")
while not os.path.exists(go):
    time.sleep(0.02)
for s in held:
    s.close()
open(out, "w").write("closed\n")
time.sleep(600)
EOF2
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        python3 "$T/closer.py" "$SERVER_PORT" "$T/common.out" "$T/common.go" 3>&- &
    track_pid $!
    wait_for grep -qs '^held$' "$T/common.out"
    CLS=gold start_client waiter hold 1
    wait_for sem_waiters_is "$NS" 1
    kill -"$1" "$(cat "$T/waiter.pid")"
    wait_for pid_done "$(cat "$T/waiter.pid")"
    # The three common connections close through the shim, which gives
    # each permit back (a kill would leave that to the kernel instead).
    touch "$T/common.go"
    wait_for grep -qs '^closed$' "$T/common.out"
    wait_for test "$(server_stat srv open)" = 1
    start_client fresh hold 3
    assert_equal "$(client_report fresh)" "ok=3 refused=0 "
    assert_equal "$(server_stat srv open)" 4
}

@test "a reserve member SIGKILLed while it waits leaves the common pool whole" {
    killed_reserve_waiter KILL
}

@test "a reserve member SIGTERMed while it waits leaves the common pool whole" {
    killed_reserve_waiter TERM
}
