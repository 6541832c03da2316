#!/usr/bin/env bats
# Adaptive limits as a user meets them: each nonsense config is one line
# from `check`; `check` and `explain` show the controller; `stat` shows its
# columns in the table, JSON and Prometheus; `set NAME adaptive=off`
# freezes the limit while traffic goes on, and `set NAME limit=N` moves the
# controller, which continues from N. The traffic is real: python3 threads
# under the shim making one-exchange connections to the holdserver, whose
# count of connections says how much traffic passed.

load helpers/common
load helpers/check

HEAD_NAME=db HEAD_LIMIT=10

setup() { check_setup; }
teardown() { bh_teardown; }

@test "check: each adaptive mistake is one line naming file, line and key" {
    check_says_only $'adaptive = sometimes\n' \
        '6: adaptive: "sometimes" is not one of off, gradient, aimd'
    check_says_only $'adaptive = gradient\nmin_limit = 12\nmax_limit = 8\n' \
        '8: max_limit: 8 is below min_limit (12 at line 7)'
    check_says_only $'adaptive = aimd\nmin_limit = 50\n' \
        '7: min_limit: 50 is above max_limit (40, the default: 4 x limit)'
    check_says_only $'adaptive = aimd\nmin_limit = 20\n' \
        '4: limit: 10 is outside min_limit to max_limit (20 to 40): the controller starts at limit'
    check_says_only $'min_limit = 2\n' '6: min_limit: has no effect without adaptive'
    check_says_only $'adaptive = off\nmax_limit = 20\n' \
        '7: max_limit: has no effect with adaptive = off (line 6)'
    check_says_only $'adaptive = gradient\nadaptive_latency_ms = 100\n' \
        '7: adaptive_latency_ms: has no effect with adaptive = gradient (line 6), which compares latency with its own baseline'
    check_says_only $'adaptive = aimd\nmatch = 127.0.0.1:7002 weight=2\n' \
        '7: match: weight=2 cannot be used with adaptive (line 6): the controller measures connections, the limit counts permits'
    check_says_only $'adaptive = gradient\nreserve = 2 for program=x\n' \
        '6: min_limit: 1 (the default) is below the reserves, 2 together: the limit never goes under them'
    check_says_only $'adaptive = aimd\nmax_limit = 0\n' \
        '7: max_limit: 0 is out of range (1 to 32767)'
}

@test "check: adaptive from limit = 0 is one line" {
    printf '[x]\nlimit = 0\nadaptive = aimd\nmatch = 127.0.0.1:7001\n' >"$RULES"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:2: limit: 0 refuses everything; adaptive (line 3) needs a limit to start from
bulkhead: $RULES: 1 error"
}

@test "check and explain show the controller, its bounds and what it backs off on" {
    rules_with $'adaptive = aimd\nmin_limit = 2\nmax_limit = 30\nadaptive_latency_ms = 250\n'
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "  adaptive aimd: the limit starts at 10 and moves between min_limit 2 and max_limit 30; backs off on drops and on latency over 250 ms"
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001
    assert_success
    assert_line "  adaptive aimd: the limit starts at 10 and moves between min_limit 2 and max_limit 30; backs off on drops and on latency over 250 ms (the live limit: bulkhead stat)"
    rules_with $'adaptive = gradient\n'
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "  adaptive gradient: the limit starts at 10 and moves between min_limit 1 and max_limit 40"
}

# adaptive_rules MODE LIMIT [KEY=VALUE...]: [downstream] over the holdserver.
adaptive_rules() {
    local mode=$1 limit=$2
    shift 2
    compartment_rules "$limit" "adaptive=$mode" "$@"
}

# looping_traffic THREADS: one python3 process under the shim whose threads make
# one-exchange connections (connect, read the answer to its end, close)
# until $T/stop appears; a refusal is retried after 2 ms.
looping_traffic() {
    rm -f "$T/stop"
    bg_shim "$T/traffic.out" python3 -c '
import os, socket, sys, threading, time
def worker():
    while not os.path.exists(sys.argv[3]):
        try:
            s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
            while s.recv(4096):
                pass
            s.close()
        except OSError:
            time.sleep(0.002)
threads = [threading.Thread(target=worker) for _ in range(int(sys.argv[2]))]
for t in threads:
    t.start()
for t in threads:
    t.join()' "$SERVER_PORT" "$1" "$T/stop"
}

# stop_traffic: its threads finish their connections and it exits: no
# window closes while the test looks.
stop_traffic() {
    touch "$T/stop"
    wait_pid "$BG_PID" 30
}

# json EXPRESSION: a python expression over c, the compartment of `stat
# --json`, and a, its "adaptive".
json() {
    "$BULKHEAD" stat -c "$RULES" --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["compartments"][0]
a = c["adaptive"]
print(eval(sys.argv[1]))' "$1"
}

# json_is EXPRESSION EXPECTED: for wait_for.
json_is() {
    [[ "$(json "$1")" == "$2" ]]
}

# More than N connections reached the server since it started.
server_total_past() {
    (($(server_stat srv total) > $1))
}

@test "stat shows the adaptive columns in the table, JSON and Prometheus" {
    start_server srv 5
    adaptive_rules gradient 4 min_limit=2 max_limit=12
    run "$BULKHEAD" apply "$RULES"
    assert_success
    run "$BULKHEAD" stat -c "$RULES"
    assert_success
    assert_line --regexp '^COMPARTMENT +ADAPTIVE +LIMIT +MIN +MAX +BASELINE_MS +RECENT_MS +LAST_CHANGE +WHY +CHANGED$'
    assert_line --regexp '^downstream +gradient +4 +2 +12 +0\.0 +0\.0 +- +- +-$'
    # Traffic: the controller learns a baseline and moves the limit.
    looping_traffic 8
    wait_for -t 30 json_is 'a["baseline_ms"] > 0 and a["last_change"] is not None' True
    run "$BULKHEAD" stat -c "$RULES"
    assert_line --regexp '^downstream +gradient +[0-9]+ +2 +12 +[0-9.]+ +[0-9.]+ +[0-9]+->[0-9]+ +(grew|latency|drops|re-measure|resumed) +[0-9]+s ago$'
    run "$BULKHEAD" stat -c "$RULES" --prometheus
    assert_line --regexp '^bulkhead_adaptive_mode\{namespace="[^"]+",compartment="downstream"\} 1$'
    assert_line --regexp '^bulkhead_adaptive_min_limit\{namespace="[^"]+",compartment="downstream"\} 2$'
    assert_line --regexp '^bulkhead_adaptive_max_limit\{namespace="[^"]+",compartment="downstream"\} 12$'
    assert_line --regexp '^bulkhead_adaptive_baseline_seconds\{namespace="[^"]+",compartment="downstream"\} 0\.[0-9]+$'
    assert_line --regexp '^bulkhead_adaptive_changes_total\{namespace="[^"]+",compartment="downstream"\} [1-9][0-9]*$'
    run json 'a["mode"], a["min_limit"], a["max_limit"], a["last_change"]["why"] in ("grew", "latency", "drops", "re-measure", "resumed")'
    assert_output "('gradient', 2, 12, True)"
}

# grows_from LIMIT CHANGES: after CHANGES changes, with traffic, then
# without: every change since was aimd's +1 from LIMIT (6 threads reach
# any limit under 6, and nothing drops).
grows_from() {
    wait_for -t 30 json_is "a[\"changes\"] > $2" True
    stop_traffic
    run json "c['limit'] - a['changes'], a['last_change']['why']"
    assert_output "($(($1 - $2)), 'grew')"
}

@test "set adaptive=off freezes the limit; set limit=N moves the controller, which goes on from N" {
    # 6 threads, 100 ms answers: windows of about 500 ms (10 samples).
    start_server srv 100
    adaptive_rules aimd 2 min_limit=1 max_limit=40
    run "$BULKHEAD" apply "$RULES"
    assert_success
    looping_traffic 6
    # aimd: +1 a window while the limit is reached (6 threads), no drops.
    wait_for -t 30 json_is 'c["limit"] >= 4' True
    run "$BULKHEAD" set -c "$RULES" downstream adaptive=off
    assert_success
    assert_output --regexp '^downstream: adaptive aimd -> off: the limit stays at [0-9]+$'
    local frozen windows total changes
    frozen=$(json 'c["limit"]')
    windows=$(json 'a["windows"]')
    total=$(server_stat srv total)
    # 60 more connections, six windows' worth: the limit has not moved.
    wait_for -t 30 server_total_past $((total + 60))
    run json 'a["mode"], c["limit"], a["windows"]'
    assert_output "('off', $frozen, $windows)"
    run "$BULKHEAD" stat -c "$RULES"
    assert_line --regexp "^downstream +off +$frozen +1 +40 "
    run "$BULKHEAD" set -c "$RULES" downstream limit=3
    assert_success
    run json 'c["limit"], a["last_change"]["from"], a["last_change"]["to"], a["last_change"]["why"]'
    assert_output "(3, $frozen, 3, 'set')"
    # On again: the controller starts from the live limit, 3.
    stop_traffic
    run "$BULKHEAD" set -c "$RULES" downstream adaptive=aimd
    assert_success
    assert_output "downstream: adaptive off -> aimd, from limit 3 (min_limit 1, max_limit 40)"
    changes=$(json 'a["changes"]')
    looping_traffic 6
    grows_from 3 "$changes"
    # Moved: it goes on from 2.
    run "$BULKHEAD" set -c "$RULES" downstream limit=2
    assert_success
    run json 'c["limit"], a["estimate"], a["last_change"]["why"]'
    assert_output "(2, 2.0, 'set')"
    changes=$(json 'a["changes"]')
    looping_traffic 6
    grows_from 2 "$changes"
}
