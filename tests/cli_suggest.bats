#!/usr/bin/env bats
# bulkhead suggest and stat's utilization, against traffic of known rate and
# hold: a python3 client makes R connects a second, each held by the hold
# server for H ms, measures what it really did (its rate, each connection's
# time from connect to close) and runs `suggest --json` the moment it is done;
# the test compares suggest's figures with the client's own.

load helpers/common
load helpers/cli

setup() {
    cli_setup
}

teardown() {
    bh_teardown
}

# paced_traffic RATE SECONDS: the client, under the shim, then suggest's JSON in
# $T/suggest.json and the client's own figures in $T/traffic.json.
paced_traffic() {
    cat >"$T/traffic.py" <<'EOF'
import json, math, os, socket, subprocess, sys, threading, time
port, rate, seconds, out = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
held, lock = [], threading.Lock()
def one():
    start = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port))
        while s.recv(256):
            pass
        s.close()
    except OSError:
        return
    with lock:
        held.append(time.monotonic() - start)
first = time.monotonic()
threads, n = [], 0
while n < rate * seconds:
    t = threading.Thread(target=one)
    t.start()
    threads.append(t)
    n += 1
    time.sleep(max(0, first + n / rate - time.monotonic()))
for t in threads:
    t.join()
window = time.monotonic() - first
env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "BULKHEAD_CONFIG")}
suggest = subprocess.run([os.environ["BULKHEAD"], "suggest", "-c", os.environ["RULES"], "--json"],
                         env=env, capture_output=True, text=True, check=True).stdout
open(out + "/suggest.json", "w").write(suggest)
held.sort()
p99 = held[math.ceil(0.99 * len(held)) - 1]
json.dump({"connects": n, "ended": len(held), "rate": n / window, "p99_s": p99},
          open(out + "/traffic.json", "w"))
EOF
    BULKHEAD="$BULKHEAD" RULES="$RULES" LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        python3 "$T/traffic.py" "$SERVER_PORT" "$1" "$2" "$T"
}

@test "suggest: the rate and hold of known traffic give the limit they need" {
    start_server srv 100
    # 200: well above what the traffic needs even when a loaded machine
    # stretches the holds tenfold, so the verdict and --apply lower it
    c_rules "$RULES" 200
    paced_traffic 30 4
    run python3 - "$T/suggest.json" "$T/traffic.json" <<'EOF'
import json, math, sys
got = json.load(open(sys.argv[1]))["compartments"][0]
known = json.load(open(sys.argv[2]))
needed = known["rate"] * known["p99_s"]
want = math.ceil(needed * 1.5)
assert abs(got["arrival_rate"] - known["rate"]) <= 0.15 * known["rate"], (got, known)
assert abs(got["hold_p99_ms"] - known["p99_s"] * 1000) <= 0.2 * known["p99_s"] * 1000, (got, known)
assert got["samples"] == known["ended"], (got, known)
assert abs(got["suggested_limit"] - want) <= max(1, 0.25 * want), (got, want)
assert got["refused_rate"] == 0 and got["limit"] == 200, got
assert 0 < got["in_use_mean"] <= 1.2 * needed, (got, needed)
assert got["verdict"] == ("limit 200, traffic needs about %d: a slow downstream could take "
                          "200 workers before the bulkhead acts; suggest %d"
                          % (round(got["arrival_rate"] * got["hold_p99_ms"] / 1000),
                             got["suggested_limit"])), got
print("ok", got["suggested_limit"], want)
EOF
    assert_success
    assert_output --partial "ok "
}

@test "suggest --apply sets the suggestion live: the server then sees at most that many" {
    start_server srv 100
    # 200: well above what the traffic needs even when a loaded machine
    # stretches the holds tenfold, so the verdict and --apply lower it
    c_rules "$RULES" 200
    paced_traffic 30 4
    local suggested
    suggested=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["compartments"][0]["suggested_limit"])' "$T/suggest.json")
    [[ $suggested -ge 2 && $suggested -lt 100 ]] || fail "suggested $suggested"
    run "$BULKHEAD" suggest -c "$RULES" --apply
    assert_success
    # The table (LIMIT as measured against) comes first, the change after it.
    assert_line --index 1 --regexp '^COMPARTMENT +LIMIT +SUGGESTED'
    assert_line --index 2 --regexp "^c +200 +$suggested "
    assert_line --regexp "^c: limit 200 -> $suggested, 0 in use$"
    assert_line "[c]"
    assert_line "limit = $suggested"
    assert_equal "$(stat_column c LIMIT -c "$RULES")" "$suggested"
    # held connections: the server sees the new limit, no more
    start_server held -1
    c_rules "$RULES" 200
    start_client a hold $((suggested + 3))
    assert_equal "$(client_report a)" "ok=$suggested refused=3 ECONNREFUSED ECONNREFUSED ECONNREFUSED"
    assert_equal "$(server_stat held max)" "$suggested"
}

@test "suggest: too little traffic to say, and --apply leaves it alone" {
    start_server srv 20
    c_rules "$RULES" 50
    paced_traffic 9 1
    run python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["compartments"][0]; print(c["suggested_limit"], c["samples"], c["verdict"])' "$T/suggest.json"
    assert_output "None 9 too little traffic to say (9 connections ended, 0 open now): if its connections carry many requests each, set turnaround = yes in [c]"
    run "$BULKHEAD" suggest -c "$RULES" --apply
    assert_success
    assert_line "nothing to change"
    assert_equal "$(stat_column c LIMIT -c "$RULES")" 50
}

@test "suggest: refusing at a full limit says so and suggests more" {
    start_server srv 200
    c_rules "$RULES" 2
    paced_traffic 40 3
    run python3 - "$T/suggest.json" <<'EOF'
import json, sys
got = json.load(open(sys.argv[1]))["compartments"][0]
assert got["refused_rate"] > 0 and got["suggested_limit"] > 2, got
assert got["verdict"].startswith("refusing "), got
assert "the limit is low or the downstream slow" in got["verdict"], got
print("ok")
EOF
    assert_success
}

@test "stat: utilization in the table, JSON and Prometheus; above 80% flagged, never above 100%" {
    start_server srv 200
    c_rules "$RULES" 2
    paced_traffic 40 3
    run "$BULKHEAD" stat -c "$RULES"
    assert_success
    assert_line --index 1 --regexp ' UTIL +HOLDERS$'
    assert_line --index 2 --regexp '^c +2 .* (8[1-9]|9[0-9]|100)%! +'
    assert_line --partial "! above 80% of the limit in use over the last minute"
    "$BULKHEAD" stat -c "$RULES" --json >"$T/stat.json"
    run python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["compartments"][0]; assert 0.8 < c["utilization"] <= 1 and 1.6 < c["window"]["in_use_mean"] <= 2, c; print("ok")' "$T/stat.json"
    assert_output ok
    "$BULKHEAD" stat -c "$RULES" --prometheus >"$T/metrics"
    run check_prometheus "$T/metrics"
    assert_success
    run awk '/^bulkhead_utilization\{/ { print ($2 > 0.8 && $2 <= 1) }' "$T/metrics"
    assert_output 1
    run awk '/^bulkhead_permit_seconds_total\{/ { print ($2 > 1) }' "$T/metrics"
    assert_output 1
}

@test "suggest: turnaround sizes keep-alive connections" {
    cat >"$T/echo.py" <<'EOF'
import os, socket, sys, threading, time
srv = socket.create_server(("127.0.0.1", 0))
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d\n" % srv.getsockname()[1])
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
def serve(c):
    while c.recv(64):
        time.sleep(0.02)
        c.sendall(b"y")
while True:
    threading.Thread(target=serve, args=(srv.accept()[0],), daemon=True).start()
EOF
    python3 "$T/echo.py" "$T/echo.ready" 3>&- &
    track_pid $!
    wait_for test -s "$T/echo.ready"
    SERVER_PORT=$(cat "$T/echo.ready")
    c_rules "$RULES" 10
    echo "turnaround = yes" >>"$RULES"
    run_shim python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for _ in range(60):
    s.sendall(b"x"); s.recv(8)
' "$SERVER_PORT"
    run "$BULKHEAD" suggest -c "$RULES" --json
    assert_success
    run python3 -c '
import json, math, sys
c = json.loads(sys.argv[1])["compartments"][0]
assert c["signal"] == "turnaround" and c["samples"] == 60, c
assert 19 <= c["hold_p50_ms"] <= 30, c
assert c["suggested_limit"] == math.ceil(c["request_rate"] * c["hold_p99_ms"] / 1000 * 1.5), c
assert c["verdict"].startswith("limit 10, requests need about "), c
print("ok")' "$output"
    assert_output ok
}
