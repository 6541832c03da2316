#!/usr/bin/env bats
# bulkhead set NAME breaker=open|closed, and what stat shows of the breaker,
# the connect failures and timeouts and the histograms, in the table, JSON
# and Prometheus. Observers: the test server's counts and the clients' own
# outcomes (exit status, errno name); the breaker refuses with the
# compartment's errno, EHOSTUNREACH here, which loopback never gives.

load helpers/common
load helpers/uid
load helpers/cli


setup() {
    cli_setup
}

teardown() {
    local left=""
    if [[ -n "${NOBODY_NS:-}" ]]; then
        local key
        key=$("$BULKHEAD" key --user nobody -n "$NOBODY_NS")
        ipcrm -S "$key" 2>/dev/null || true
        ipcrm -M "$key" 2>/dev/null || true
        ! ipc_under_key "$key" || left=$key
        rm -rf "$NOBODY_DIR"
    fi
    bh_teardown
    [[ -z "$left" ]] || fail "teardown: nobody's objects left under $left"
}

# breaker_rules FILE PORT [KEY=VALUE...]: compartment c over 127.0.0.1:PORT,
# limit 1, refusing with EHOSTUNREACH.
breaker_rules() {
    local file=$1 port=$2
    shift 2
    {
        printf '[global]\nnamespace = %s\n[c]\nlimit = 1\nerrno = EHOSTUNREACH\n' "$NS"
        printf 'match = 127.0.0.1:%s\n' "$port"
        printf '%s\n' "$@" | sed '/^$/d; s/=/ = /'
    } >"$file"
}

# py_connect PORT: one blocking python3 connect under the shim, no timeout of
# its own; prints ok or the errno name, exit 0 connected, 1 refused. The
# outer timeout only keeps a broken build from hanging the suite.
py_connect() {
    timeout 60 env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        python3 -c "$PY_CLIENT" 127.0.0.1 "$1"
}

# py_connects PORT N: one python3 process under the shim, N blocking
# connects one after another; prints their outcomes (ok or the errno name).
py_connects() {
    run_shim python3 -c '
import errno, socket, sys
out = []
for _ in range(int(sys.argv[2])):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(" ".join(out))' "$1" "$2"
}

# json_check PYTHON: runs the python lines with c, the first compartment
# of `stat --json`, and d, the whole document; prints "ok" when they pass.
json_check() {
    "$BULKHEAD" stat -c "$RULES" --json >"$T/json"
    python3 - "$T/json" <<EOF
import json, sys
d = json.load(open(sys.argv[1]))
c = d["compartments"][0]
b = c["breaker"]
$1
print("ok")
EOF
}

# The breaker table's row for compartment NAME (the table after the first
# empty line of `stat`).
breaker_row() {
    "$BULKHEAD" stat -c "$RULES" | awk -v name="$1" '
        NF == 0 { table++ } table == 1 && $1 == name { print }'
}

@test "set breaker=open: a waiting-allowed client is refused at once, the server sees nothing; closed lets it through" {
    start_server srv 0
    # wait_ms is an hour and the one permit is held: a client the breaker
    # did not refuse would wait for it, not come back.
    breaker_rules "$RULES" "$SERVER_PORT" wait_ms=3600000
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 600000
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    assert_equal "$(server_stat srv total)" 1

    local before after
    before=$(date +%s)
    run "$BULKHEAD" set -c "$RULES" c breaker=open
    after=$(date +%s)
    assert_success
    assert_output "c: breaker closed -> open (forced): every matched connect is refused until breaker=closed"
    run --separate-stderr py_connect "$SERVER_PORT"
    assert_failure 1
    assert_output EHOSTUNREACH
    run --separate-stderr py_connect "$SERVER_PORT"
    assert_failure 1
    assert_equal "$(server_stat srv total)" 1

    run json_check "
assert b['state'] == 'open' and b['forced'] is True, b
assert b['refused'] == 2 and b['opened'] == 1 and b['open_left_ms'] == 0, b
assert $before <= b['since'] < $after + 1, b
assert c['rejected'] == 0 and c['timed_out'] == 0, c  # the full ones, apart"
    assert_output ok
    run breaker_row c
    assert_output --regexp '^c +open \(forced\) +[0-9]+s ago +1 +2 +0 +0 +0$'
    run "$BULKHEAD" stat -c "$RULES" --prometheus
    local labels="{namespace=\"$NS\",compartment=\"c\"}"
    assert_line "bulkhead_breaker_state$labels 1"
    assert_line "bulkhead_breaker_forced$labels 1"
    assert_line "bulkhead_breaker_opened_total$labels 1"
    assert_line "bulkhead_breaker_refusals_total$labels 2"
    assert_line "bulkhead_rejected_total$labels 0"

    run "$BULKHEAD" set -c "$RULES" c breaker=closed
    assert_success
    assert_output "c: breaker open (forced) -> closed, failures cleared"
    kill -KILL "$holder"
    wait_for pid_done "$holder"
    run --separate-stderr py_connect "$SERVER_PORT"
    assert_success
    assert_output ok
    assert_equal "$(server_stat srv total)" 2
    run json_check "
assert b['state'] == 'closed' and b['forced'] is False, b
assert b['refused'] == 2 and b['opened'] == 1, b"
    assert_output ok
}

@test "stat: a breaker opened by three kernel refusals is open (Ns left), not forced, in table, JSON and Prometheus" {
    # Nothing listens on port 1: the kernel refuses.
    breaker_rules "$RULES" 1 breaker_failures=3 breaker_open_ms=60000
    run --separate-stderr py_connects 1 4
    assert_output "ECONNREFUSED ECONNREFUSED ECONNREFUSED EHOSTUNREACH"
    run json_check "
assert b['state'] == 'open' and b['forced'] is False, b
assert 0 < b['open_left_ms'] <= 60000 and b['open_ms'] == 60000, b
assert b['opened'] == 1 and b['refused'] == 1 and b['failures'] == 0, b
assert c['connect_failures'] == 3 and c['connect_timeouts'] == 0, c
assert c['io_timeouts'] == 0 and c['connect_time']['count'] == 0, c"
    assert_output ok
    run breaker_row c
    assert_output --regexp '^c +open \(([1-9]|[1-5][0-9]|60)s left\) +[0-9]+s ago +1 +1 +3 +0 +0$'
    # The tables below the permits fit 100 columns for a short name.
    run bash -c '"$1" stat -c "$2" | awk "NF == 0 { below = 1 } below && length(\$0) > 100"' \
        _ "$BULKHEAD" "$RULES"
    assert_output ""
    run "$BULKHEAD" stat -c "$RULES" --prometheus
    local labels="{namespace=\"$NS\",compartment=\"c\"}"
    assert_line "bulkhead_breaker_state$labels 1"
    assert_line "bulkhead_breaker_forced$labels 0"
    assert_line "bulkhead_breaker_refusals_total$labels 1"
    assert_line "bulkhead_connect_failures_total$labels 3"
    assert_line "bulkhead_connect_timeouts_total$labels 0"
    assert_line --regexp "^bulkhead_breaker_changed_seconds\\{.*\\} [1-9][0-9]{9}\\.[0-9]{9}$"
}

breaker_is_half_open() {
    [[ "$(json_check "assert b['state'] == 'half-open', b" 2>/dev/null)" == ok ]]
}

@test "stat: half-open once the open time is over; set breaker=closed closes it and clears its failures" {
    breaker_rules "$RULES" 1 breaker_failures=2 breaker_open_ms=100
    run --separate-stderr py_connects 1 2
    assert_output "ECONNREFUSED ECONNREFUSED"
    wait_for breaker_is_half_open
    run breaker_row c
    assert_output --regexp '^c +half-open +[0-9]+s ago +1 +0 +2 +0 +0$'
    run "$BULKHEAD" stat -c "$RULES" --prometheus
    assert_line "bulkhead_breaker_state{namespace=\"$NS\",compartment=\"c\"} 2"
    run "$BULKHEAD" set -c "$RULES" c breaker=closed
    assert_success
    assert_output "c: breaker half-open -> closed, failures cleared"
    run json_check "assert b['state'] == 'closed' and b['opened'] == 1, b"
    assert_output ok
    # Closed with no failures counted: two kernel refusals to open it again.
    # Half-open, the first would have been the probe and reopened it.
    run --separate-stderr py_connects 1 3
    assert_output "ECONNREFUSED ECONNREFUSED EHOSTUNREACH"
}

@test "stat --prometheus with real traffic: HELP and TYPE once per family, histograms cumulative up to +Inf = _count" {
    start_server srv 0
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[c]
limit = 2
match = 127.0.0.1:$SERVER_PORT
[dead]
limit = 2
match = 127.0.0.1:1
EOF
    local i
    for i in 1 2 3 4 5; do
        run --separate-stderr py_connect "$SERVER_PORT"
        assert_output ok
    done
    for i in 1 2; do
        run --separate-stderr py_connect 1
        assert_output ECONNREFUSED
    done
    assert_equal "$(server_stat srv total)" 5
    "$BULKHEAD" stat -c "$RULES" --prometheus >"$T/metrics"
    "$BULKHEAD" stat -c "$RULES" --json >"$T/json"
    run check_prometheus "$T/metrics"
    assert_success
    run python3 - "$T/metrics" "$T/json" <<'EOF'
import json, re, sys
helps, types, samples = {}, {}, []
for line in open(sys.argv[1]).read().splitlines():
    m = re.match(r"# (HELP|TYPE) (\S+) (.*)", line)
    if m:
        table = helps if m.group(1) == "HELP" else types
        assert m.group(2) not in table, "second %s for %s" % m.group(1, 2)
        table[m.group(2)] = m.group(3)
        continue
    m = re.match(r'(\w+)\{namespace="[^"]*"(?:,compartment="(\w+)")?(?:,le="([^"]+)")?\} (\S+)$', line)
    assert m, line
    samples.append(m.groups())
def family(name):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) in ("histogram", "summary"):
            return name[: -len(suffix)]
    return name
for name, _, _, _ in samples:
    assert family(name) in helps and family(name) in types, name
assert set(helps) == set(types)
expected = {
    "bulkhead_breaker_state": "gauge", "bulkhead_breaker_forced": "gauge",
    "bulkhead_breaker_changed_seconds": "gauge",
    "bulkhead_breaker_opened_total": "counter", "bulkhead_breaker_refusals_total": "counter",
    "bulkhead_connect_failures_total": "counter", "bulkhead_connect_timeouts_total": "counter",
    "bulkhead_io_timeouts_total": "counter", "bulkhead_connect_seconds": "histogram",
    "bulkhead_hold_seconds": "histogram", "bulkhead_permits_limit": "gauge",
    "bulkhead_acquired_total": "counter", "bulkhead_rejected_total": "counter",
    "bulkhead_timed_out_total": "counter", "bulkhead_wait_seconds": "histogram",
}
for name, kind in expected.items():
    assert types.get(name) == kind, (name, types.get(name))
bounds = ["0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
          "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf"]
document = {c["name"]: c for c in json.load(open(sys.argv[2]))["compartments"]}
def histogram(name, compartment):
    buckets = [(le, float(v)) for n, c, le, v in samples
               if n == name + "_bucket" and c == compartment]
    one = lambda suffix: [float(v) for n, c, _, v in samples
                          if n == name + suffix and c == compartment]
    assert [le for le, _ in buckets] == bounds, buckets
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), ("not cumulative", name, counts)
    assert one("_count") == [counts[-1]], (name, counts, one("_count"))
    return counts, one("_sum")[0]
want = {("bulkhead_connect_seconds", "c"): 5, ("bulkhead_hold_seconds", "c"): 5,
        ("bulkhead_connect_seconds", "dead"): 0}
for (name, compartment), count in want.items():
    counts, total = histogram(name, compartment)
    assert counts[-1] == count, (name, compartment, counts)
    assert (total > 0) == (count > 0), (name, compartment, total)
    key = "connect_time" if name == "bulkhead_connect_seconds" else "hold_time"
    own = document[compartment][key]
    running = [sum(own["counts"][: i + 1]) for i in range(len(own["counts"]))]
    assert running == counts and own["count"] == count, (own, counts)
    assert abs(own["sum_ms"] / 1000 - total) < 0.001, (own, total)
value = {(n, c): float(v) for n, c, le, v in samples if le is None}
assert value[("bulkhead_connect_failures_total", "dead")] == 2, value
assert value[("bulkhead_connect_failures_total", "c")] == 0, value
assert value[("bulkhead_breaker_state", "c")] == 0, value
print("checked")
EOF
    assert_success
    assert_output checked
    run "$BULKHEAD" stat -c "$RULES"
    assert_line --regexp '^c +connect +5 +[0-9]+\.[0-9]{2} +<=[0-9.]+ +<=[0-9.]+$'
    assert_line --regexp '^c +hold +5 +[0-9]+\.[0-9]{2} +<=[0-9.]+ +<=[0-9.]+$'
    refute_line --regexp '^dead +connect '
}

@test "the format check rejects histograms that are not cumulative or whose +Inf is not _count" {
    local head='# HELP h_seconds h
# TYPE h_seconds histogram'
    printf '%s\n' "$head" 'h_seconds_bucket{le="1"} 3' 'h_seconds_bucket{le="+Inf"} 2' \
        'h_seconds_sum 1' 'h_seconds_count 2' >"$T/m1"
    printf '%s\n' "$head" 'h_seconds_bucket{le="1"} 1' 'h_seconds_bucket{le="+Inf"} 2' \
        'h_seconds_sum 1' 'h_seconds_count 3' >"$T/m2"
    printf '%s\n' "$head" 'h_seconds_bucket{le="1"} 1' 'h_seconds_bucket{le="+Inf"} 2' \
        'h_seconds_sum 1' 'h_seconds_count 2' >"$T/good"
    run check_prometheus "$T/m1"
    assert_failure
    run check_prometheus "$T/m2"
    assert_failure
    run check_prometheus "$T/good"
    assert_success
}

@test "set breaker=: bad values are usage errors; unknown compartments and missing state fail; nothing changes" {
    breaker_rules "$RULES" 1
    run "$BULKHEAD" set -c "$RULES" c breaker=open
    assert_failure 1
    assert_output "bulkhead: namespace \"$NS\" has no shared state yet: nothing has run in it"
    "$BULKHEAD" apply "$RULES" >/dev/null
    local value
    for value in breaker=maybe breaker= breaker=OPEN breaker=open,closed; do
        run "$BULKHEAD" set -c "$RULES" c "$value"
        assert_failure 2
        assert_line --index 0 "bulkhead: set: \"$value\": expected breaker=open or breaker=closed"
    done
    run "$BULKHEAD" set -c "$RULES" nosuch breaker=open
    assert_failure 1
    assert_output "bulkhead: no compartment \"nosuch\" in namespace \"$NS\" (registered: c)"
    run "$BULKHEAD" set -c "$RULES" c breaker=open limit=2
    assert_failure 2
    run json_check "assert b['state'] == 'closed' and b['opened'] == 0, b"
    assert_output ok
}

@test "set --user: root forces nobody's breaker open and closed; nobody may not force root's" {
    [[ $(id -u) -eq 0 ]] || skip "needs root (to act as nobody and as root)"
    [[ "$(id -u nobody 2>/dev/null)" == 65534 ]] || skip "no user nobody (65534)"
    "${AS_NOBODY[@]}" test -r "$SHIM" -a -x "$CLIENTS/connect_hold" ||
        skip "$SHIM or $CLIENTS/connect_hold is out of nobody's reach"
    start_server srv 0
    NOBODY_NS=$NS
    NOBODY_DIR=$(mktemp -d /tmp/bh-cli-breaker.XXXXXX)
    chmod 755 "$NOBODY_DIR"
    breaker_rules "$NOBODY_DIR/rules.ini" "$SERVER_PORT"
    chmod 644 "$NOBODY_DIR/rules.ini"
    nobody_connect "$NOBODY_DIR/rules.ini"
    assert_success
    run "$BULKHEAD" set --user nobody -n "$NS" c breaker=open
    assert_success
    assert_output --partial "c: breaker closed -> open (forced)"
    nobody_connect "$NOBODY_DIR/rules.ini"
    assert_failure 1
    assert_line EHOSTUNREACH
    assert_equal "$(server_stat srv total)" 1
    run "$BULKHEAD" stat --user nobody -n "$NS" --json
    assert_output --partial '"breaker": {"state": "open", "forced": true,'
    run "${AS_NOBODY[@]}" "$BULKHEAD" set --user root -n "$NS" c breaker=closed
    assert_failure 1
    assert_output --partial "only root may work on another user's namespace"
    nobody_connect "$NOBODY_DIR/rules.ini"
    assert_failure 1
    run "$BULKHEAD" set --user nobody -n "$NS" c breaker=closed
    assert_success
    nobody_connect "$NOBODY_DIR/rules.ini"
    assert_success
    assert_equal "$(server_stat srv total)" 2
}
