#!/usr/bin/env bats
# bulkhead, the command: run, check, explain, stat, set, apply, reset, help.
# Real processes under the shim, observed by the hold server and by the
# shared state; each test has a namespace of its own.

load helpers/common
load helpers/cli

setup() {
    cli_setup
}

teardown() {
    bh_teardown
}

# --- stat -----------------------------------------------------------------

# Three processes hold 2 + 1 + 1 connections of a limit of 4; a fourth is
# refused twice. Returns with all of them settled.
hold_four_refuse_two() {
    start_server srv -1
    c_rules "$RULES" 4
    start_client a hold 2
    assert_equal "$(client_report a)" "ok=2 refused=0 "
    start_client b hold 1
    start_client c hold 1
    assert_equal "$(client_report b)" "ok=1 refused=0 "
    assert_equal "$(client_report c)" "ok=1 refused=0 "
    start_client d hold 2
    assert_equal "$(client_report d)" "ok=0 refused=2 ECONNREFUSED ECONNREFUSED"
}

@test "stat: in_use is what three processes hold, rejected what they were refused" {
    hold_four_refuse_two
    assert_equal "$(server_stat srv open)" 4
    run "$BULKHEAD" stat -c "$RULES"
    assert_success
    assert_line --index 0 "namespace $NS"
    assert_line --index 1 --regexp '^COMPARTMENT +LIMIT +IN_USE +WAITING +PEAK +ACQUIRED +REJECTED +TIMED_OUT +WAIT_MEAN_MS +WAIT_MAX_MS +UTIL +HOLDERS$'
    assert_line --index 2 --regexp '^c +4 +4 +0 +4 +4 +2 +0 +0\.0 +0\.0 +(-|[0-9]+%!?) +[0-9(),]+$'
    local holders
    holders="$(stat_column c HOLDERS -c "$RULES")"
    assert_equal "$(tr ',' '\n' <<<"$holders" | sort)" "$(printf '%s\n' \
        "$(cat "$T/a.pid")(2)" "$(cat "$T/b.pid")(1)" "$(cat "$T/c.pid")(1)" | sort)"

    stop_client a
    assert_equal "$(server_stat srv open)" 2
    assert_equal "$(stat_column c IN_USE -c "$RULES")" 2
    assert_equal "$(stat_column c IN_USE -n "$NS")" 2
}

@test "stat --json parses and agrees with the table" {
    hold_four_refuse_two
    "$BULKHEAD" stat -c "$RULES" >"$T/table"
    "$BULKHEAD" stat -c "$RULES" --json >"$T/json"
    python3 -m json.tool "$T/json" >/dev/null
    run python3 - "$T/table" "$T/json" "$NS" <<'EOF'
import json, sys
table = [line.split() for line in open(sys.argv[1]).read().split("\n\n")[0].splitlines()]
document = json.load(open(sys.argv[2]))
assert document["namespace"] == sys.argv[3], document
heading, rows = table[1], table[2:]
assert len(rows) == len(document["compartments"]) == 1, (rows, document)
for row, entry in zip(rows, document["compartments"]):
    cells = dict(zip(heading, row))
    assert cells["COMPARTMENT"] == entry["name"]
    for key in ("limit", "in_use", "waiting", "peak", "acquired", "rejected", "timed_out"):
        assert int(cells[key.upper()]) == entry[key], (key, cells, entry)
    assert float(cells["WAIT_MEAN_MS"]) == round(entry["wait_mean_ms"], 1)
    assert float(cells["WAIT_MAX_MS"]) == round(entry["wait_max_ms"], 1)
    holders = ",".join("%d(%d)" % (h["pid"], h["permits"]) for h in entry["holders"])
    assert sorted(cells["HOLDERS"].split(",")) == sorted(holders.split(",")), (cells, entry)
    assert entry["in_use"] == 4 and entry["rejected"] == 2, entry
print("agree")
EOF
    assert_success
    assert_output "agree"
}

@test "stat --prometheus passes a strict format check, one series per compartment" {
    hold_four_refuse_two
    run "$BULKHEAD" stat -c "$RULES" --prometheus
    assert_success
    printf '%s\n' "$output" >"$T/metrics"
    run check_prometheus "$T/metrics"
    assert_success
    local labels="{namespace=\"$NS\",compartment=\"c\"}"
    run cat "$T/metrics"
    assert_line "bulkhead_permits_limit$labels 4"
    assert_line "bulkhead_permits_in_use$labels 4"
    assert_line "bulkhead_waiters$labels 0"
    assert_line "bulkhead_acquired_total$labels 4"
    assert_line "bulkhead_rejected_total$labels 2"
    assert_line "bulkhead_timed_out_total$labels 0"
    assert_line "bulkhead_wait_seconds_sum$labels 0.000000000"
    assert_line "bulkhead_wait_seconds_count$labels 0"
    assert_line "# TYPE bulkhead_wait_seconds histogram"
    assert_line "# TYPE bulkhead_rejected_total counter"
}

@test "the format check rejects what it should" {
    printf '%s\n' '# HELP x_total a' '# TYPE x_total gauge' 'x_total 1' >"$T/m1"
    printf '%s\n' 'y{a="1"} 1' >"$T/m2"
    printf '%s\n' '# HELP z z' '# TYPE z gauge' 'z{a=1} one' >"$T/m3"
    printf '%s\n' '# HELP w w' '# TYPE w gauge' '# TYPE w gauge' 'w 1' >"$T/m4"
    for file in m1 m2 m3 m4; do
        run check_prometheus "$T/$file"
        assert_failure
    done
}

@test "stat of a namespace where nothing ran: says so, and lists the rules' compartments at the limit they start at, 0 in use, in the table, JSON and Prometheus; -n lists none" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
fleet = redis://127.0.0.1:1
[c]
limit = 3
match = 127.0.0.1:1
[fleetwide]
limit = 5
fleet_limit = 20
match = 127.0.0.1:2
EOF
    run "$BULKHEAD" stat -c "$RULES"
    assert_success
    assert_line --index 0 "namespace $NS: no shared state yet (nothing has run in it)"
    # a fleet compartment has no permits here until the agent's first grant
    assert_equal "$(awk 'NR > 2 { print $1, $2, $3, $4 }' <<<"$output")" "c 3 0 0
fleetwide 0 0 0"
    "$BULKHEAD" stat -c "$RULES" --json 2>/dev/null >"$T/json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [(c["name"], c["limit"], c["in_use"], c["holders"]) for c in d["compartments"]]==[("c",3,0,[]),("fleetwide",0,0,[])], d' \
        "$T/json"
    "$BULKHEAD" stat -c "$RULES" --prometheus 2>/dev/null >"$T/metrics"
    run check_prometheus "$T/metrics"
    assert_success
    grep -qx "bulkhead_permits_limit{namespace=\"$NS\",compartment=\"c\"} 3" "$T/metrics"
    grep -qx "bulkhead_permits_in_use{namespace=\"$NS\",compartment=\"c\"} 0" "$T/metrics"
    grep -qx "bulkhead_permits_in_use{namespace=\"$NS\",compartment=\"fleetwide\"} 0" "$T/metrics"
    # every family but the fleet's (none registered) is declared
    run grep -c '^# TYPE ' "$T/metrics"
    assert_output 31
    "$BULKHEAD" stat -n "$NS" --json 2>/dev/null >"$T/json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d=={"namespace":sys.argv[2],"compartments":[]}, d' \
        "$T/json" "$NS"
    ! namespace_exists "$NS" || fail "stat made the namespace"
}

@test "stat -c: a compartment added to the rules after its programs started is listed at its limit, 0 in use, beside one that holds" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[used]
limit = 4
match = 127.0.0.1:$SERVER_PORT
EOF
    start_client a hold 1
    assert_equal "$(client_report a)" "ok=1 refused=0 "
    printf '[idle]\nlimit = 2\nmatch = 127.0.0.1:1\n' >>"$RULES"
    run "$BULKHEAD" stat -c "$RULES"
    assert_success
    assert_equal "$(awk 'NR > 2 && !NF { exit } NR > 2 { print $1, $2, $3 }' <<<"$output")" "used 4 1
idle 2 0"
    run "$BULKHEAD" stat -n "$NS"
    assert_success
    assert_equal "$(awk 'NR > 2 && !NF { exit } NR > 2 { print $1, $2, $3 }' <<<"$output")" "used 4 1"
}

@test "stat counts waits and time-outs from the shared state" {
    start_server srv -1
    c_rules "$RULES" 1 200
    c_rules "$T/patient.ini" 1 10000
    start_client a hold 1
    assert_equal "$(client_report a)" "ok=1 refused=0 "
    start_client b hold 1
    assert_equal "$(client_report b)" "ok=0 refused=1 ECONNREFUSED"
    start_client c hold 1 "$T/patient.ini"
    wait_for stat_column_is c WAITING 1 -c "$RULES"
    stop_client a
    assert_equal "$(client_report c)" "ok=1 refused=0 "
    run "$BULKHEAD" stat -c "$RULES" --json
    assert_success
    python3 - "$output" <<'EOF'
import json, sys
c = json.loads(sys.argv[1])["compartments"][0]
assert c["timed_out"] == 1 and c["rejected"] == 0 and c["acquired"] == 2, c
# Two waits, the one that timed out included; one granted.
assert c["waits"] == 1 and c["wait_time"]["count"] == 2, c
assert 200 <= c["wait_max_ms"] < 10000 and 100 <= c["wait_mean_ms"] <= c["wait_max_ms"], c
assert c["waiting"] == 0 and c["in_use"] == 1, c
EOF
    run "$BULKHEAD" stat -c "$RULES" --prometheus
    assert_line --regexp '^bulkhead_wait_seconds_count\{.*\} 2$'
    assert_line --regexp '^bulkhead_timed_out_total\{.*\} 1$'
}

# True once the watch output holds N screens, each drawn after clearing.
frames_at_least() {
    [ "$(grep -o $'\e\\[H\e\\[2J' "$T/watch" | wc -l)" -ge "$1" ]
}

@test "stat --watch redraws in place until SIGINT, then exits 0" {
    SERVER_PORT=1
    c_rules "$RULES" 1
    "$BULKHEAD" apply "$RULES" >/dev/null
    "$BULKHEAD" stat -c "$RULES" --watch 0.1 >"$T/watch" 2>&1 3>&- &
    local pid=$! status=0
    track_pid $pid
    wait_for frames_at_least 3
    kill -INT $pid
    wait $pid || status=$?
    assert_equal "$status" 0
    run grep -c "^c  *1  *0 " "$T/watch"
    [ "$output" -ge 3 ]
}

# --- set and apply --------------------------------------------------------

@test "set: a raise lets an already running, refused process through" {
    start_server srv -1
    c_rules "$RULES" 1
    start_client a hold 1
    assert_equal "$(client_report a)" "ok=1 refused=0 "
    start_client b retry
    wait_for grep -q '^refused=[1-9]' "$T/b.out"
    run "$BULKHEAD" set -c "$RULES" c limit=2
    assert_success
    assert_output --partial "c: limit 1 -> 2"
    run client_report b
    assert_output --regexp '^ok=1 refused=[1-9][0-9]*$'
    assert_equal "$(server_stat srv open)" 2
    assert_equal "$(server_stat srv max)" 2
    assert_equal "$(stat_column c LIMIT -c "$RULES")" 2
}

@test "set: a new process with another limit in its rules.ini gets the live one" {
    start_server srv -1
    c_rules "$RULES" 5
    run "$BULKHEAD" apply "$RULES"
    assert_success
    assert_output "c: registered, limit 5"
    run "$BULKHEAD" set -n "$NS" c limit=2
    assert_success
    c_rules "$T/other.ini" 7
    start_client a hold 4 "$T/other.ini"
    assert_equal "$(client_report a)" "ok=2 refused=2 ECONNREFUSED ECONNREFUSED"
    assert_equal "$(server_stat srv max)" 2
    assert_equal "$(stat_column c LIMIT -c "$T/other.ini")" 2
}

@test "set: lowering cuts no connection, does not block, and holds new ones back" {
    start_server srv -1
    c_rules "$RULES" 3
    start_client a hold 2
    start_client b hold 1
    assert_equal "$(client_report a)" "ok=2 refused=0 "
    assert_equal "$(client_report b)" "ok=1 refused=0 "
    run timeout 5 "$BULKHEAD" set -c "$RULES" c limit=1
    assert_success
    assert_line "c: limit 3 -> 1, 3 in use"
    assert_equal "$(server_stat srv open)" 3
    start_client c hold 1
    assert_equal "$(client_report c)" "ok=0 refused=1 ECONNREFUSED"
    stop_client a
    assert_equal "$(stat_column c IN_USE -c "$RULES")" 1
    start_client d hold 1
    assert_equal "$(client_report d)" "ok=0 refused=1 ECONNREFUSED"
    stop_client b
    start_client e hold 1
    assert_equal "$(client_report e)" "ok=1 refused=0 "
}

@test "set: unknown compartment, missing state and bad arguments are errors" {
    SERVER_PORT=1
    c_rules "$RULES" 1
    run "$BULKHEAD" set -c "$RULES" c limit=2
    assert_failure 1
    assert_output "bulkhead: namespace \"$NS\" has no shared state yet: nothing has run in it"
    "$BULKHEAD" apply "$RULES" >/dev/null
    run "$BULKHEAD" set -c "$RULES" nosuch limit=2
    assert_failure 1
    assert_output "bulkhead: no compartment \"nosuch\" in namespace \"$NS\" (registered: c)"
    run "$BULKHEAD" set -c "$RULES" c limit=two
    assert_failure 2
    assert_line --index 0 --partial 'bulkhead: set: "limit=two"'
    run "$BULKHEAD" set -c "$RULES" c
    assert_failure 2
    run "$BULKHEAD" set -c "$RULES" -n "$NS" c limit=1
    assert_failure 2
}

@test "set: a number past what a limit can hold says out of range, not what a number is" {
    SERVER_PORT=1
    c_rules "$RULES" 1
    run "$BULKHEAD" set -c "$RULES" c limit=99999999999
    assert_failure 2
    assert_line --index 0 'bulkhead: set: "limit=99999999999": out of range (0 to 32767)'
    run "$BULKHEAD" set -c "$RULES" c reserve.user=root=40000
    assert_failure 2
    assert_line --index 0 'bulkhead: set: "reserve.user=root=40000": out of range (0 to 32767)'
    run "$BULKHEAD" set --fleet -c "$RULES" c limit=0
    assert_failure 2
    assert_line --index 0 'bulkhead: set: "limit=0": out of range (1 to 1000000)'
}

@test "errors cut a long argument they repeat to 60 characters" {
    local long
    long=$(printf 'n%.0s' {1..5000})
    run "$BULKHEAD" stat -n "$long"
    assert_failure
    assert_output "bulkhead: namespace \"$(printf 'n%.0s' {1..60})...\": must be 1 to 47 characters"
}

@test "apply: pushes the file's limits, registers new compartments, leaves others" {
    SERVER_PORT=1
    c_rules "$RULES" 3
    "$BULKHEAD" apply "$RULES" >/dev/null
    cat >"$T/more.ini" <<EOF
[global]
namespace = $NS

[c]
limit = 6
match = 127.0.0.1:1

[d]
limit = 2
match = 127.0.0.1:2
EOF
    run "$BULKHEAD" apply -c "$T/more.ini"
    assert_success
    assert_line "c: limit 3 -> 6"
    assert_line "d: registered, limit 2"
    run "$BULKHEAD" apply "$RULES"
    assert_success
    assert_line "c: limit 6 -> 3"
    assert_line "d: not in $RULES, left at limit 2"
    assert_equal "$(stat_column c LIMIT -n "$NS")" 3
    assert_equal "$(stat_column d LIMIT -n "$NS")" 2
    printf '[global]\nnamespace = %s\n[c]\nlimit = x\nmatch = 127.0.0.1:1\n' "$NS" >"$T/bad.ini"
    run "$BULKHEAD" apply "$T/bad.ini"
    assert_failure 1
    assert_line --partial "bad.ini:4: limit"
    assert_equal "$(stat_column c LIMIT -n "$NS")" 3
}

# --- run ------------------------------------------------------------------

@test "run: the shim goes first in LD_PRELOAD, the rest is kept, never twice" {
    SERVER_PORT=1
    c_rules "$RULES" 1
    local libm shim
    libm="$(ls /lib/*/libm.so.6 /usr/lib/*/libm.so.6 2>/dev/null | head -n 1)"
    [ -n "$libm" ] || skip "no libm.so.6 to preload"
    shim="$(realpath "$SHIM")"
    LD_PRELOAD="$libm" run "$BULKHEAD" run -c "$RULES" -- sh -c 'echo "$LD_PRELOAD"'
    assert_success
    assert_output "$shim:$libm"
    LD_PRELOAD="$libm" run "$BULKHEAD" run -c "$RULES" -- \
        "$BULKHEAD" run -c "$RULES" -- sh -c 'echo "$LD_PRELOAD"'
    assert_success
    assert_output "$shim:$libm"
    LD_PRELOAD="$libm $shim" run "$BULKHEAD" run -c "$RULES" -- sh -c 'echo "$LD_PRELOAD"'
    assert_output "$shim:$libm"
    LD_PRELOAD= run "$BULKHEAD" run -c "$RULES" -- sh -c 'echo "$LD_PRELOAD"'
    assert_output "$shim"
}

@test "run: BULKHEAD_CONFIG is absolute, --strict sets BULKHEAD_STRICT" {
    SERVER_PORT=1
    c_rules "$RULES" 1
    cd "$T"
    run env -u BULKHEAD_STRICT "$BULKHEAD" run -c rules.ini -- \
        sh -c 'echo "$BULKHEAD_CONFIG ${BULKHEAD_STRICT-unset}"'
    assert_success
    assert_output "$(realpath "$RULES") unset"
    run "$BULKHEAD" run --strict -c rules.ini -- sh -c 'echo "$BULKHEAD_STRICT"'
    assert_output "1"
    BULKHEAD_CONFIG="$RULES" run "$BULKHEAD" run -- sh -c 'echo "$BULKHEAD_CONFIG"'
    assert_output "$(realpath "$RULES")"
}

@test "run: the exit status is the command's; 127 when it cannot be run" {
    SERVER_PORT=1
    c_rules "$RULES" 1
    run "$BULKHEAD" run -c "$RULES" -- sh -c 'exit 7'
    assert_failure 7
    run "$BULKHEAD" run -c "$RULES" -- true
    assert_success
    run -127 "$BULKHEAD" run -c "$RULES" -- "$T/no-such-program"
    assert_failure 127
    assert_output --partial "bulkhead: run: $T/no-such-program: No such file or directory"
    run "$BULKHEAD" run -c "$RULES"
    assert_failure 2
}

@test "run: a bad rules file stops it with exit 2 and the error line" {
    printf '[global]\nnamespace = %s\n[c]\nlimit = twenty\nmatch = 127.0.0.1:1\n' "$NS" >"$RULES"
    run "$BULKHEAD" run -c "$RULES" -- touch "$T/ran"
    assert_failure 2
    assert_line --index 0 --regexp "^bulkhead: $RULES:4: limit: .*twenty"
    [ ! -e "$T/ran" ]
    run "$BULKHEAD" run -c "$T/missing.ini" -- touch "$T/ran"
    assert_failure 2
    [ ! -e "$T/ran" ]
}

@test "run: programs it starts are capped" {
    start_server srv -1
    c_rules "$RULES" 2
    "$BULKHEAD" run -c "$RULES" -- python3 "$CLIENT" "$SERVER_PORT" "$T/a.out" hold 4 \
        >"$T/a.log" 2>&1 3>&- &
    track_pid $!
    assert_equal "$(client_report a)" "ok=2 refused=2 ECONNREFUSED ECONNREFUSED"
    assert_equal "$(server_stat srv max)" 2
}

@test "run: finds the shim in the installed layout PREFIX/lib/bulkhead" {
    SERVER_PORT=1
    c_rules "$RULES" 1
    mkdir -p "$T/prefix/bin" "$T/prefix/lib/bulkhead"
    cp "$BULKHEAD" "$T/prefix/bin/"
    cp "$SHIM" "$T/prefix/lib/bulkhead/"
    LD_PRELOAD= run "$T/prefix/bin/bulkhead" run -c "$RULES" -- sh -c 'echo "$LD_PRELOAD"'
    assert_success
    assert_output "$T/prefix/lib/bulkhead/libbulkhead.so"
    rm "$T/prefix/lib/bulkhead/libbulkhead.so"
    run "$T/prefix/bin/bulkhead" run -c "$RULES" -- true
    assert_failure 1
    assert_output --partial "bulkhead: run: no libbulkhead.so in $T/prefix/bin"
}

# --- check and explain ----------------------------------------------------

@test "check: a good file, its compartments, settings and rules with lines" {
    cat >"$RULES" <<EOF
[global]
namespace = $NS
log = info

[api]
limit = 3
wait_ms = 250
errno = ETIMEDOUT
match = 127.0.0.1:7000-7099
match = *.example.com:443
EOF
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line --index 0 "$RULES: valid"
    assert_line "namespace  $NS, on_failure closed"
    assert_line "log        info, to stderr (syslog, /dev/log, once a daemon moves stderr)"
    assert_line "[api]  line 5"
    assert_line "  limit        3"
    assert_line "  wait_ms      250"
    assert_line "  max_waiters  64"
    assert_line "  errno        ETIMEDOUT"
    assert_line --regexp '^  match +line 9 +address +127\.0\.0\.1:7000-7099$'
    assert_line --regexp '^ +line 10 +suffix +\*\.example\.com:443$'
    BULKHEAD_CONFIG="$RULES" run "$BULKHEAD" check
    assert_success
    assert_line --index 0 "$RULES: valid"
}

@test "check: a bad file gives every error with file:line, exit 1" {
    cat >"$RULES" <<EOF
[global]
namespace = $NS

[api]
limit = twenty
match = 127.0.0.1:99999
errno = ENOPE
EOF
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_line --regexp "^bulkhead: $RULES:5: limit: "
    assert_line --regexp "^bulkhead: $RULES:6: match: "
    assert_line --regexp "^bulkhead: $RULES:7: errno: "
    assert_line "bulkhead: $RULES: 3 errors"
    run "$BULKHEAD" check "$T/missing.ini"
    assert_failure 1
    assert_output --partial "missing.ini"
}

@test "explain: compartment and rule line per destination, or not limited" {
    cat >"$RULES" <<EOF
[global]
namespace = $NS

[api]
limit = 3
match = 127.0.0.1:7000-7099
match = [::1]:8080

[named]
limit = 1
match = localhost:9000
EOF
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7050 '[::1]:8080' 127.0.0.1:9000 \
        10.1.2.3:7050 localhost:9000
    assert_success
    assert_line "127.0.0.1:7050 -> compartment api (line 6: match = 127.0.0.1:7000-7099)"
    assert_line "[::1]:8080 -> compartment api (line 7: match = [::1]:8080)"
    assert_line "127.0.0.1:9000 -> not limited"
    assert_line "10.1.2.3:7050 -> not limited"
    assert_line "localhost:9000 = 127.0.0.1 -> compartment named (line 11: match = localhost:9000)"
}

@test "explain: bad destinations, unknown names and bad rules" {
    SERVER_PORT=1
    c_rules "$RULES" 1
    run "$BULKHEAD" explain -c "$RULES" ::1:80
    assert_failure 2
    assert_output --partial 'bulkhead: explain: "::1:80": not HOST:PORT or [V6]:PORT'
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:70000
    assert_failure 2
    run "$BULKHEAD" explain -c "$RULES" no-such-host.invalid:80 127.0.0.1:1
    assert_failure 1
    assert_line "127.0.0.1:1 -> compartment c (line 7: match = 127.0.0.1:1)"
    assert_line --partial "bulkhead: explain: no-such-host.invalid: "
    printf '[c]\nlimit = 1\n' >"$T/bad.ini"
    run "$BULKHEAD" explain -c "$T/bad.ini" 127.0.0.1:1
    assert_failure 1
    assert_output --partial "bad.ini"
    run "$BULKHEAD" explain -c "$RULES"
    assert_failure 2
}

# --- reset ----------------------------------------------------------------

@test "reset: refuses while a permit is held, says who; works once it is free" {
    start_server srv -1
    c_rules "$RULES" 2
    start_client a hold 1
    assert_equal "$(client_report a)" "ok=1 refused=0 "
    run "$BULKHEAD" reset -c "$RULES"
    assert_failure 1
    assert_output --partial "bulkhead: reset: namespace \"$NS\" is in use (c: 1 permit held by $(cat "$T/a.pid")(1), 0 waiting)"
    assert_output --partial "--force"
    namespace_exists "$NS"
    stop_client a
    run "$BULKHEAD" reset -c "$RULES"
    assert_success
    assert_output "namespace $NS: shared state removed"
    run namespace_exists "$NS"
    assert_failure 1
    run "$BULKHEAD" reset -c "$RULES"
    assert_success
    assert_output "namespace $NS: no shared state, nothing to reset"
}

@test "reset --force removes the state while permits are held" {
    start_server srv -1
    c_rules "$RULES" 2
    start_client a hold 1
    assert_equal "$(client_report a)" "ok=1 refused=0 "
    run "$BULKHEAD" reset --force -n "$NS"
    assert_success
    assert_output --partial "namespace $NS: shared state removed while in use"
    run namespace_exists "$NS"
    assert_failure 1
    assert_equal "$(server_stat srv open)" 1
}

@test "reset NAME zeroes that compartment's counters and leaves permits alone" {
    start_server srv -1
    c_rules "$RULES" 1
    start_client a hold 2
    assert_equal "$(client_report a)" "ok=1 refused=1 ECONNREFUSED"
    run "$BULKHEAD" reset -c "$RULES" c
    assert_success
    assert_output "c: counters reset; limit 1 and 1 permit in use untouched"
    run "$BULKHEAD" stat -c "$RULES"
    assert_line --index 2 --regexp '^c +1 +1 +0 +1 +0 +0 +0 '
    start_client b hold 1
    assert_equal "$(client_report b)" "ok=0 refused=1 ECONNREFUSED"
    assert_equal "$(stat_column c REJECTED -c "$RULES")" 1
    run "$BULKHEAD" reset -c "$RULES" c nosuch
    assert_failure 1
    assert_output --partial 'no compartment "nosuch"'
    assert_equal "$(stat_column c REJECTED -c "$RULES")" 1
}

# --- help -----------------------------------------------------------------

@test "help: --help, help CMD, CMD --help, unknown commands, the man page" {
    run "$BULKHEAD" --help
    assert_success
    for command in run check explain stat set apply reset; do
        assert_line --regexp "^  bulkhead $command "
        run "$BULKHEAD" help "$command"
        assert_success
        assert_line --index 0 --partial "usage: bulkhead $command"
        run "$BULKHEAD" "$command" --help
        assert_success
        assert_line --index 0 --partial "usage: bulkhead $command"
        run "$BULKHEAD" --help
    done
    run "$BULKHEAD" frobnicate
    assert_failure 2
    assert_output --partial 'bulkhead: unknown command "frobnicate"'
    run "$BULKHEAD"
    assert_failure 2
    run "$BULKHEAD" stat --bogus
    assert_failure 2
    assert_line --index 0 "bulkhead: stat: unknown option --bogus"
    run "$BULKHEAD" stat -c
    assert_failure 2
    assert_line --index 0 "bulkhead: stat: -c needs a value"
    run env MANWIDTH=80 MANPAGER=cat man -l "$BH_ROOT/man/bulkhead.1"
    assert_success
    for word in run check explain stat set apply reset BULKHEAD_CONFIG \
        BULKHEAD_LOG BULKHEAD_STRICT EXIT; do
        assert_output --partial "$word"
    done
    run groff -man -ww -z "$BH_ROOT/man/bulkhead.1"
    assert_success
    assert_output ""
}

@test "stat: a holder killed and left a zombie by its parent is no holder; a leader ended by pthread_exit whose thread holds still is" {
    start_server srv -1
    compartment_rules 2
    # The parent forks a child that connects and is killed (no exit of its
    # own: its holder record stays); the parent does not wait for it, so
    # it stays a zombie.
    bg_shim "$T/parent.out" python3 -c '
import os, signal, socket, sys, time
pid = os.fork()
if pid == 0:
    s = socket.socket(); s.connect(("127.0.0.1", int(sys.argv[1])))
    os.kill(os.getpid(), signal.SIGKILL)
print(pid, flush=True)
time.sleep(60)' "$SERVER_PORT"
    wait_for -t 10 test -s "$T/parent.out"
    local child
    child=$(cat "$T/parent.out")
    wait_for -t 10 grep -q '^State:.Z' "/proc/$child/status"
    assert_equal "$(stat_column downstream IN_USE -c "$RULES")" 0
    assert_equal "$(stat_column downstream HOLDERS -c "$RULES")" "-"

    bg_shim "$T/leader.out" "$BH_ROOT/build/tests/leader_exit" "$SERVER_PORT"
    wait_for -t 10 test -s "$T/leader.out"
    local leader
    leader=$(cat "$T/leader.out")
    wait_for -t 10 grep -q '^State:.Z' "/proc/$leader/status"
    assert_equal "$(stat_column downstream IN_USE -c "$RULES")" 1
    assert_equal "$(stat_column downstream HOLDERS -c "$RULES")" "$leader(1)"
}
