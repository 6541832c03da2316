#!/usr/bin/env bats
# bulkhead check, explain and counts in the command's output: errors come in
# line order, each explained destination stands on its own, and "1 thing"
# is never "1 things".

load helpers/common

BULKHEAD="$BH_ROOT/build/bulkhead"

setup() {
    bh_setup
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
}
teardown() { bh_teardown; }

# The line numbers of the "bulkhead: FILE:LINE: ..." lines of the last run,
# in the order printed, on one line.
error_lines() {
    local line numbers=()
    for line in "${lines[@]}"; do
        if [[ "$line" =~ ^bulkhead:\ $RULES:([0-9]+):\  ]]; then
            numbers+=("${BASH_REMATCH[1]}")
        fi
    done
    echo "${numbers[*]}"
}

@test "check: errors of every kind come out in line order" {
    # Errors the parser finds late (a section's missing limit or match
    # rules, known only when the section ends) sit between errors found on
    # the lines themselves.
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
bogus = 1

[a]
limit = twenty
errno = ENOPE

[b]
match = 127.0.0.1:1
wait_ms = -3

[a]
limit = 1
match = 127.0.0.1:2
match = nope:99999
[c d]
limit = 1
EOF
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_equal "$(error_lines)" "3 5 6 7 9 11 13 16 17"
    assert_line --index 0 --regexp "^bulkhead: $RULES:3: unknown key \"bogus\""
    assert_line --index 1 --regexp "^bulkhead: $RULES:5: \[a\]: no match rules"
    assert_line --index 2 --regexp "^bulkhead: $RULES:6: limit: "
    assert_line --index 3 --regexp "^bulkhead: $RULES:7: errno: "
    assert_line --index 4 --regexp "^bulkhead: $RULES:9: \[b\]: limit is required"
    assert_line --index 5 --regexp "^bulkhead: $RULES:11: wait_ms: "
    assert_line --index 6 --regexp "^bulkhead: $RULES:13: duplicate compartment \[a\]"
    assert_line --index 7 --regexp "^bulkhead: $RULES:16: match: "
    assert_line --index 8 --regexp "^bulkhead: $RULES:17: bad section name"
    assert_line --index 9 "bulkhead: $RULES: 9 errors"
}

@test "check: two errors on one header line keep the parser's order" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[empty]
wait_ms = x
EOF
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_equal "$(error_lines)" "3 3 4"
    assert_line --index 0 "bulkhead: $RULES:3: [empty]: limit is required"
    assert_line --index 1 "bulkhead: $RULES:3: [empty]: no match rules"
    assert_line --index 2 --regexp "^bulkhead: $RULES:4: wait_ms: "
    assert_line --index 3 "bulkhead: $RULES: 3 errors"
}

@test "check: wait_nonblocking and nonblocking_wait_ms are retired: the file is valid, with one warning line each" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[api]
limit = 2
wait_ms = 500
wait_nonblocking = yes
nonblocking_wait_ms = 1000
match = 127.0.0.1:7001
EOF
    run --separate-stderr "$BULKHEAD" check "$RULES"
    assert_success
    assert_line --index 0 "$RULES: valid"
    refute_output --partial nonblocking
    local why="retired, and ignored: non-blocking connects now wait wait_ms without stalling their program"
    assert_equal "${#stderr_lines[@]}" 2
    assert_equal "${stderr_lines[0]}" "bulkhead: $RULES:6: warning: wait_nonblocking: $why"
    assert_equal "${stderr_lines[1]}" "bulkhead: $RULES:7: warning: nonblocking_wait_ms: $why"
}

@test "explain --resolve: a name that resolves nowhere here is explained as resolved to the address given" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[named]
limit = 1
match = orders.invalid:5432
EOF
    run "$BULKHEAD" explain -c "$RULES" orders.invalid:5432
    assert_failure 1
    run "$BULKHEAD" explain -c "$RULES" --resolve orders.invalid=10.9.8.7 \
        --resolve other.invalid=::1 orders.invalid:5432 other.invalid:5432 10.9.8.7:5432
    assert_success
    assert_output "orders.invalid:5432 = 10.9.8.7 -> compartment named (line 5: match = orders.invalid:5432)
other.invalid:5432 = ::1 -> not limited
10.9.8.7:5432 -> not limited
  under bulkhead run's supervisor (a Go or static program): compartment named (line 5: match = orders.invalid:5432): hostname rules match by address there, whatever name the program looked up"
    run "$BULKHEAD" explain -c "$RULES" --resolve orders.invalid=nowhere orders.invalid:5432
    assert_failure 2
    assert_line --index 0 "bulkhead: explain: --resolve orders.invalid=nowhere: not NAME=ADDRESS (an IPv4 or IPv6 address)"
}

@test "explain: a literal address gets the same answer whatever comes before it" {
    # localhost resolves to 127.0.0.1; a rule for the name must not make the
    # literal 127.0.0.1 match once the name was explained first.
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[named]
limit = 1
match = localhost:9000
EOF
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:9000
    assert_success
    assert_line --index 0 "127.0.0.1:9000 -> not limited"
    local alone=${lines[0]}
    run "$BULKHEAD" explain -c "$RULES" localhost:9000 127.0.0.1:9000
    assert_success
    assert_line "localhost:9000 = 127.0.0.1 -> compartment named (line 5: match = localhost:9000)"
    assert_equal "$(grep '^127\.0\.0\.1:9000 ' <<<"$output")" "$alone"
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:9000 localhost:9000 127.0.0.1:9000
    assert_success
    assert_equal "$(grep -c '^127\.0\.0\.1:9000 -> not limited$' <<<"$output")" 2
}

@test "counts: one compartment, one rule, one error, one permit are singular" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[one]
limit = 1
match = 127.0.0.1:1
EOF
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "1 compartment, 1 match rule; the first match in file order wins"
    cat >>"$RULES" <<EOF
match = 127.0.0.1:2
[two]
limit = 2
match = 127.0.0.1:3
EOF
    run "$BULKHEAD" check "$RULES"
    assert_line "2 compartments, 3 match rules; the first match in file order wins"
    printf '[global]\nnamespace = %s\n[bad]\nlimit = x\nmatch = 127.0.0.1:1\n' "$NS" \
        >"$T/bad.ini"
    run "$BULKHEAD" check "$T/bad.ini"
    assert_failure 1
    assert_line "bulkhead: $T/bad.ini: 1 error"
    run "$BULKHEAD" stat -c "$T/bad.ini"
    assert_failure 1
    assert_line --partial "not valid (1 error)"
}

@test "counts: set says how a lowered limit holds, in the singular for 1" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[c]
limit = 3
match = 127.0.0.1:$SERVER_PORT
EOF
    bg_shim "$T/h1" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    bg_shim "$T/h2" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/h1" '^ok$'
    wait_for file_has "$T/h2" '^ok$'
    assert_equal "$(server_stat srv open)" 2
    run "$BULKHEAD" set -c "$RULES" c limit=1
    assert_success
    assert_output "c: limit 3 -> 1, 2 in use
c: no connection is cut; new ones wait or are refused until none is in use"
    run "$BULKHEAD" set -c "$RULES" c limit=0
    assert_output "c: limit 1 -> 0, 2 in use
c: no connection is cut; new ones are refused"
    run "$BULKHEAD" reset -c "$RULES"
    assert_failure 1
    assert_output --partial "c: 2 permits held by "
    run "$BULKHEAD" reset -c "$RULES" c
    assert_success
    assert_output "c: counters reset; limit 0 and 2 permits in use untouched"
    assert_equal "$(server_stat srv open)" 2
}

@test "stat: REJECTED counts refused connect() calls, not processes" {
    start_server srv -1
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
[c]
limit = 1
match = 127.0.0.1:$SERVER_PORT
EOF2
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/holder" '^ok$'
    # one process, three refused calls
    run --separate-stderr run_shim python3 -c '
import socket, sys
refused = 0
for _ in range(3):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    except ConnectionRefusedError:
        refused += 1
print("refused=%d" % refused)' "$SERVER_PORT"
    assert_output "refused=3"
    assert_equal "$(server_stat srv total)" 1
    run "$BULKHEAD" stat -c "$RULES" --json
    assert_success
    assert_equal "$(python3 -c 'import json, sys; print(json.load(sys.stdin)["compartments"][0]["rejected"])' <<<"$output")" 3
}

@test "stat: a compartment name of the longest allowed length (47) is shown whole" {
    local name=abcdefghijklmnopqrstuvwxyz0123456789abcdefghijk
    printf '[global]\nnamespace = %s\n[%s]\nlimit = 1\nmatch = 10.0.0.1:1\n' \
        "$NS" "$name" >"$RULES"
    run_shim /bin/true
    run "$BULKHEAD" stat -c "$RULES"
    assert_success
    assert_line --regexp "^$name +1 +0 +0 +0 "
}
