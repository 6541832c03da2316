#!/usr/bin/env bats
# mode = shadow: every connect is decided as enforce would decide it and
# let through; what enforce would have refused is counted (stat's
# shadow_refused, the feature itself). The server's own count says what
# got through; `bulkhead set NAME mode=enforce` acts for every process at
# once, and every permit a shadow connection took comes back exactly once.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

# holders N TAG: N connect_hold processes in parallel, each holding its
# connection until $T/TAG.go exists; returns once each has said how its
# connect went (ok or the errno name) in $T/TAG.<i>.
holders() {
    local n=$1 tag=$2 i
    for i in $(seq 1 "$n"); do
        bg_shim "$T/$tag.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" until="$T/$tag.go"
        echo "$BG_PID" >>"$T/$tag.pids"
    done
    for i in $(seq 1 "$n"); do
        wait_for file_has "$T/$tag.$i" '^(ok|E[A-Z]+)$'
    done
}

# outcomes TAG: how many of TAG's holders connected, and how many were
# refused, as they saw it: "ok=N refused=M".
outcomes() {
    local ok refused
    ok=$(cat "$T/$1".[0-9]* | grep -cx ok || true)
    refused=$(cat "$T/$1".[0-9]* | grep -cx ECONNREFUSED || true)
    echo "ok=$ok refused=$refused"
}

# release TAG: the holders close and exit.
release() {
    local pid
    touch "$T/$1.go"
    while read -r pid; do
        wait_pid "$pid" 30 || true
    done <"$T/$1.pids"
}

# shadow_count FIELD: the compartment's FIELD in stat --json.
shadow_count() {
    "$BULKHEAD" stat -n "$NS" --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["compartments"][0][sys.argv[1]])' "$1"
}

# one_process N TAG: one python3 process opens N connections in turn and
# holds them until $T/TAG.go exists; its report ("ok=N refused=M") is
# $T/TAG.out once it has tried them all.
one_process() {
    bg_shim "$T/$2.log" python3 -c '
import os, socket, sys, time
n, out, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
held, refused = [], 0
for _ in range(n):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[4])))
        held.append(s)
    except ConnectionRefusedError:
        refused += 1
        s.close()
with open(out + ".tmp", "w") as f:
    f.write("ok=%d refused=%d\n" % (len(held), refused))
os.rename(out + ".tmp", out)
while not os.path.exists(go):
    time.sleep(0.02)
' "$1" "$T/$2.out" "$T/$2.go" "$SERVER_PORT"
    echo "$BG_PID" >"$T/$2.pids"
    wait_for test -s "$T/$2.out"
}

@test "limit 2 in shadow: six clients at once all reach the server, four counted as would-refuse; set mode=enforce and the next six get 2" {
    start_server srv -1
    compartment_rules 2 'wait_ms=0' 'mode=shadow'
    holders 6 first
    assert_equal "$(outcomes first)" "ok=6 refused=0"
    assert_equal "$(server_stat srv open)" 6
    assert_equal "$(server_stat srv max)" 6
    [[ "$(shadow_count shadow_refused)" -ge 4 ]]
    # Switched while the six hold: none is cut, and a new connect is
    # refused while more than the limit are in use.
    run "$BULKHEAD" set -n "$NS" downstream mode=enforce
    assert_success
    holders 1 during
    assert_equal "$(outcomes during)" "ok=0 refused=1"
    assert_equal "$(server_stat srv open)" 6
    release first
    release during
    wait_for server_open_is srv 0
    holders 6 next
    assert_equal "$(outcomes next)" "ok=2 refused=4"
    assert_equal "$(server_stat srv open)" 2
    assert_equal "$(server_stat srv total)" 8
    release next
}

@test "limit 1 with wait_ms in shadow: three clients at once reach the server without waiting, two counted as would-wait, none as would-refuse" {
    start_server srv -1
    compartment_rules 1 'wait_ms=60000' 'mode=shadow'
    # An enforce wait would last until a holder lets go, which none does
    # before all three are open at the server.
    holders 3 waiting
    assert_equal "$(outcomes waiting)" "ok=3 refused=0"
    assert_equal "$(server_stat srv open)" 3
    [[ "$(shadow_count shadow_waited)" -ge 2 ]]
    assert_equal "$(shadow_count shadow_refused)" 0
    release waiting
}

@test "per_process in shadow: one process gets all six connections past per_process = 2, four counted; in enforce it gets 2" {
    start_server srv -1
    compartment_rules 10 'per_process=2' 'mode=shadow'
    one_process 6 shadowed
    assert_equal "$(cat "$T/shadowed.out")" "ok=6 refused=0"
    assert_equal "$(server_stat srv open)" 6
    assert_equal "$(shadow_count shadow_refused)" 4
    assert_equal "$(shadow_count per_process_refused)" 0
    release shadowed
    wait_for server_open_is srv 0
    "$BULKHEAD" set -n "$NS" downstream mode=enforce
    one_process 6 enforced
    assert_equal "$(cat "$T/enforced.out")" "ok=2 refused=4"
    assert_equal "$(server_stat srv open)" 2
    release enforced
}

@test "an open breaker in shadow: connects reach the server and are counted as would-refuse; in enforce they are refused" {
    start_server srv -1
    compartment_rules 5 'mode=shadow'
    holders 1 warm  # registers the compartment in the namespace
    release warm
    run "$BULKHEAD" set -n "$NS" downstream breaker=open
    assert_success
    one_process 3 shadowed
    assert_equal "$(cat "$T/shadowed.out")" "ok=3 refused=0"
    assert_equal "$(server_stat srv open)" 3
    assert_equal "$(shadow_count shadow_refused)" 3
    release shadowed
    wait_for server_open_is srv 0
    "$BULKHEAD" set -n "$NS" downstream mode=enforce
    one_process 3 enforced
    assert_equal "$(cat "$T/enforced.out")" "ok=0 refused=3"
    assert_equal "$(server_stat srv total)" 4
    release enforced
}

@test "connections let through past the limit whose processes are SIGKILLed give their permits back exactly once: an enforce run then gets exactly the limit" {
    start_server srv -1
    compartment_rules 2 'mode=shadow'
    holders 5 killed
    assert_equal "$(outcomes killed)" "ok=5 refused=0"
    assert_equal "$(server_stat srv open)" 5
    local pid
    while read -r pid; do
        kill -KILL "$pid"
    done <"$T/killed.pids"
    while read -r pid; do
        wait_pid "$pid" 30 || true
    done <"$T/killed.pids"
    wait_for server_open_is srv 0
    "$BULKHEAD" set -n "$NS" downstream mode=enforce
    holders 4 after
    assert_equal "$(outcomes after)" "ok=2 refused=2"
    assert_equal "$(server_stat srv open)" 2
    release after
    # And back in shadow, after every hold ended, the limit is still 2.
    wait_for server_open_is srv 0
    "$BULKHEAD" set -n "$NS" downstream mode=shadow
    "$BULKHEAD" set -n "$NS" downstream mode=enforce
    holders 3 last
    assert_equal "$(outcomes last)" "ok=2 refused=1"
    release last
}

@test "check shows a compartment in shadow, [global]'s mode for compartments that give none; a bad one is one error naming its line" {
    printf '[global]\nnamespace = %s\nmode = shadow\n[a]\nlimit = 1\nmatch = 127.0.0.1:9\n[b]\nlimit = 1\nmode = enforce\nmatch = 127.0.0.1:10\n' "$NS" >"$RULES"
    run "$BULKHEAD" check -c "$RULES"
    assert_success
    run sed -n '/^\[a\]/,/^$/p' <<<"$output"
    assert_line --regexp '^  mode +shadow \(decides as enforce would'
    run "$BULKHEAD" check -c "$RULES"
    run sed -n '/^\[b\]/,/^$/p' <<<"$output"
    refute_line --regexp '^  mode '
    printf '[a]\nlimit = 1\nmode = dry-run\nmatch = 127.0.0.1:9\n' >"$RULES"
    run "$BULKHEAD" check -c "$RULES"
    assert_failure
    assert_output --partial "rules.ini:3: mode: \"dry-run\" is not one of enforce, shadow"
}

# supervised OUT N: bulkhead run's supervisor over the static hold_connect,
# which makes N connects and holds them until supervised_end; returns once
# it has tried them all (its lines in OUT).
supervised() {
    mkfifo "$T/$1.in"
    # The child opens the fifo, so that it holds no writer of it.
    bg "$T/$1" sh -c 'exec "$@" <"$0"' "$T/$1.in" "$BULKHEAD" run --seccomp -c "$RULES" -- \
        "$BH_ROOT/build/tests/hold_connect" 127.0.0.1 "$SERVER_PORT" "$2"
    SUPERVISED=$BG_PID
    exec {SUPERVISED_IN}>"$T/$1.in"
    wait_for file_has "$T/$1" '^held$'
}

# supervised_end: its stdin ends; it closes its connections and exits.
supervised_end() {
    exec {SUPERVISED_IN}>&-
    wait_pid "$SUPERVISED" 30
}

@test "a static program under bulkhead run's supervisor, in shadow: five connects at limit 2 all reach the server, three counted; in enforce it gets 2" {
    build_if_stale "$BH_ROOT/build/tests/hold_connect" \
        "$BH_ROOT/tests/clients/static/hold_connect.c" static_build
    start_server srv -1
    compartment_rules 2 'mode=shadow'
    supervised shadowed 5
    assert_equal "$(grep -cx ok "$T/shadowed")" 5
    wait_for server_open_is srv 5
    assert_equal "$(shadow_count shadow_refused)" 3
    supervised_end
    wait_for server_open_is srv 0
    "$BULKHEAD" set -n "$NS" downstream mode=enforce
    supervised enforced 5
    assert_equal "$(grep -cx ok "$T/enforced")" 2
    assert_equal "$(grep -cx ECONNREFUSED "$T/enforced")" 3
    wait_for server_open_is srv 2
    supervised_end
    assert_equal "$(server_stat srv total)" 7
}

@test "stat -c before anything ran: a compartment the rules put in shadow is listed in shadow, bulkhead_shadow 1" {
    printf '[global]\nnamespace = %s\n[a]\nlimit = 3\nmode = shadow\nmatch = 127.0.0.1:9\n[b]\nlimit = 3\nmatch = 127.0.0.1:10\n' "$NS" >"$RULES"
    run "$BULKHEAD" stat -c "$RULES" --prometheus
    assert_success
    assert_line "bulkhead_shadow{namespace=\"$NS\",compartment=\"a\"} 1"
    assert_line "bulkhead_shadow{namespace=\"$NS\",compartment=\"b\"} 0"
    ! namespace_exists "$NS" || fail "stat made the namespace"
}
