#!/usr/bin/env bats
# bulkhead set, apply and stat with the policy keys: reserves
# resized live, the file's reserves applied, and stat's pools and policy
# counts. Members are python clients run with CLASS=billing in their
# environment (reserve = N for env=CLASS=billing); what they got is what
# they report and what the hold server counts.

load helpers/common
load helpers/cli

setup() {
    cli_setup
}

teardown() {
    bh_teardown
}

# reserve_rules FILE LIMIT RESERVE [KEY = VALUE lines...]
reserve_rules() {
    local file=$1 limit=$2 reserve=$3
    shift 3
    {
        printf '[global]\nnamespace = %s\n\n[c]\nlimit = %s\n' "$NS" "$limit"
        printf 'reserve = %s for env=CLASS=billing\n' "$reserve"
        printf 'match = 127.0.0.1:%s\n' "$SERVER_PORT"
        printf '%s\n' "$@"
    } >"$file"
}

@test "set reserve: lowering it cuts no connection; the common pool grows as members give theirs back" {
    start_server srv -1
    reserve_rules "$RULES" 3 2
    CLASS=billing start_client a hold 2
    assert_equal "$(client_report a)" "ok=2 refused=0 "
    start_client b hold 2
    assert_equal "$(client_report b)" "ok=1 refused=1 ECONNREFUSED"
    run timeout 5 "$BULKHEAD" set -c "$RULES" c 'reserve.env=CLASS=billing=0'
    assert_success
    assert_line "c: reserve for env=CLASS=billing 2 -> 0, 2 in use; common pool 3"
    assert_line "c: no connection is cut; the reserve shrinks as they end"
    assert_equal "$(server_stat srv open)" 3
    start_client c hold 1
    assert_equal "$(client_report c)" "ok=0 refused=1 ECONNREFUSED"
    stop_client a
    start_client d hold 3
    assert_equal "$(client_report d)" "ok=2 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat srv max)" 3
}

@test "set reserve: raising it takes free common permits now and held ones as they come back" {
    start_server srv -1
    reserve_rules "$RULES" 4 1
    start_client a hold 3
    assert_equal "$(client_report a)" "ok=3 refused=0 "
    run "$BULKHEAD" set -c "$RULES" c 'reserve.env=CLASS=billing=3'
    assert_success
    assert_line "c: reserve for env=CLASS=billing 1 -> 3, 0 in use; common pool 1"
    # Three common permits held by others, a common pool of one: members
    # get the reserve's one free permit now, the rest as the others leave.
    CLASS=billing start_client m hold 3
    assert_equal "$(client_report m)" "ok=1 refused=2 ECONNREFUSED ECONNREFUSED"
    stop_client a
    # Two of a's permits went to the reserve, one to the common pool, which
    # members may use too: the rest of the limit.
    CLASS=billing start_client n hold 4
    assert_equal "$(client_report n)" "ok=3 refused=1 ECONNREFUSED"
    start_client o hold 1
    assert_equal "$(client_report o)" "ok=0 refused=1 ECONNREFUSED"
    assert_equal "$(server_stat srv max)" 4
}

@test "set reserve: unknown reserves, sums past the limit and bad values are errors; nothing changes" {
    SERVER_PORT=1
    reserve_rules "$RULES" 3 2
    run_shim /bin/true
    run "$BULKHEAD" set -c "$RULES" c 'reserve.env=CLASS=other=1'
    assert_failure 1
    assert_output "bulkhead: set: c has no reserve for env=CLASS=other (reserves come from rules.ini)"
    run "$BULKHEAD" set -c "$RULES" c 'reserve.env=CLASS=billing=4'
    assert_failure 1
    assert_output "bulkhead: set: c: reserve for env=CLASS=billing = 4: the reserves would add up to 4, more than limit 3"
    run "$BULKHEAD" set -c "$RULES" c 'reserve.env=CLASS=billing=x'
    assert_failure 2
    assert_line --index 0 "bulkhead: set: \"reserve.env=CLASS=billing=x\": expected reserve.WHO=N, WHO as in rules.ini, N a whole number"
    run "$BULKHEAD" set -c "$RULES" c limit=1
    assert_failure 1
    assert_output "bulkhead: set: c: limit 1: below its reserves, 2 together (lower them first with reserve.WHO=N)"
    run "$BULKHEAD" stat -c "$RULES" --json
    assert_output --partial '"limit": 3,'
    assert_output --partial '"reserves": [{"who": "env=CLASS=billing", "permits": 2, "in_use": 0, "free": 2, "owes": 0, "waiting": 0}], "common_free": 1, "common_owes": 0'
}

@test "apply: the file's reserve sizes, and the limit, in an order that always fits" {
    SERVER_PORT=1
    reserve_rules "$RULES" 4 3
    run_shim /bin/true
    reserve_rules "$T/smaller.ini" 2 1
    run "$BULKHEAD" apply "$T/smaller.ini"
    assert_success
    assert_output "c: reserve for env=CLASS=billing 3 -> 1
c: limit 4 -> 2"
    reserve_rules "$T/larger.ini" 6 5
    run "$BULKHEAD" apply "$T/larger.ini"
    assert_success
    assert_output "c: limit 2 -> 6
c: reserve for env=CLASS=billing 1 -> 5"
}

@test "stat: the pools, per_process refusals and bypasses, in the table, JSON and Prometheus" {
    start_server srv -1
    reserve_rules "$RULES" 4 2 'per_process = 2' 'bypass = env=CLASS=ops'
    CLASS=billing start_client m hold 1
    assert_equal "$(client_report m)" "ok=1 refused=0 "
    start_client a hold 3
    assert_equal "$(client_report a)" "ok=2 refused=1 ECONNREFUSED"
    CLASS=ops start_client o hold 2
    assert_equal "$(client_report o)" "ok=2 refused=0 "
    assert_equal "$(server_stat srv open)" 5
    run "$BULKHEAD" stat -c "$RULES"
    assert_success
    assert_line --regexp '^c +reserve env=CLASS=billing +2 +1 +1 +0 +0$'
    assert_line --regexp '^c +common +2 +2 +0 +0 +0$'
    assert_line --regexp '^COMPARTMENT +PER_PROCESS_REFUSED +BYPASSED$'
    assert_line --regexp '^c +1 +2$'
    "$BULKHEAD" stat -c "$RULES" --json >"$T/json"
    python3 - "$T/json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["compartments"][0]
assert c["in_use"] == 3 and c["per_process_refused"] == 1 and c["bypassed"] == 2, c
assert c["reserves"] == [{"who": "env=CLASS=billing", "permits": 2, "in_use": 1, "free": 1,
                          "owes": 0, "waiting": 0}], c
assert c["common_free"] == 0 and c["common_owes"] == 0, c
EOF
    "$BULKHEAD" stat -c "$RULES" --prometheus >"$T/metrics"
    run check_prometheus "$T/metrics"
    assert_success
    run grep -E '^bulkhead_(reserve_|per_process|bypassed)' "$T/metrics"
    assert_output "bulkhead_per_process_refused_total{namespace=\"$NS\",compartment=\"c\"} 1
bulkhead_bypassed_total{namespace=\"$NS\",compartment=\"c\"} 2
bulkhead_reserve_permits{namespace=\"$NS\",compartment=\"c\",who=\"env=CLASS=billing\"} 2
bulkhead_reserve_in_use{namespace=\"$NS\",compartment=\"c\",who=\"env=CLASS=billing\"} 1"
}
