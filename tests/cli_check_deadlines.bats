#!/usr/bin/env bats
# The deadline and breaker keys (connect_timeout_ms, io_timeout_ms,
# breaker_failures, breaker_open_ms, breaker_open_max_ms) as a user meets
# them in `bulkhead check` and `bulkhead explain`: every key accepted and
# shown, each bad value one line naming file, line and key, and explain
# saying a destination's deadlines and breaker.

load helpers/common
load helpers/check

HEAD_NAME=c HEAD_LIMIT=2

setup() { check_setup; }
teardown() { bh_teardown; }

@test "check: a file with every key is valid and shows each where it is set" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[all]
limit = 3
connect_timeout_ms = 1500
io_timeout_ms = 500
breaker_failures = 3
breaker_open_ms = 250
breaker_open_max_ms = 1000
match = 127.0.0.1:7001
[breaker]
limit = 1
breaker_failures = 1
match = 127.0.0.1:7002
[off]
limit = 1
connect_timeout_ms = 0
io_timeout_ms = 0
breaker_failures = 0
match = 127.0.0.1:7003
EOF
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line --index 0 "$RULES: valid"
    # [all]: the five, between errno and the match rules.
    local all
    all=$(sed -n '/^\[all\]/,/^$/p' <<<"$output")
    assert_equal "$all" "[all]  line 3
  limit        3
  wait_ms      0 (fail fast)
  max_waiters  64
  errno        ECONNREFUSED
  connect_timeout_ms 1500
  io_timeout_ms 500
  breaker_failures 3
  breaker_open_ms 250
  breaker_open_max_ms 1000
  match        line 10   address   127.0.0.1:7001"
    # [breaker]: the periods' defaults come with the breaker.
    local breaker
    breaker=$(sed -n '/^\[breaker\]/,/^$/p' <<<"$output")
    assert_equal "$breaker" "[breaker]  line 11
  limit        1
  wait_ms      0 (fail fast)
  max_waiters  64
  errno        ECONNREFUSED
  breaker_failures 1
  breaker_open_ms 5000
  breaker_open_max_ms 60000
  match        line 14   address   127.0.0.1:7002"
    # [off]: all off, so nothing of them is shown.
    local off
    off=$(sed -n '/^\[off\]/,$p' <<<"$output")
    refute [ -z "$off" ]
    refute grep -qE 'timeout|breaker' <<<"$off"
}

@test "check: each bad value is one line naming file, line and key; exit 1" {
    local below="is below 1000: the kernel cannot fail a connect before its first SYN retransmission, 1 s after the SYN"
    check_says_only $'connect_timeout_ms = 500\n' "6: connect_timeout_ms: 500 $below"
    check_says_only $'connect_timeout_ms = 999\n' "6: connect_timeout_ms: 999 $below"
    check_says_only $'connect_timeout_ms = 86400001\n' \
        "6: connect_timeout_ms: 86400001 is out of range (0 to 86400000)"
    check_says_only $'connect_timeout_ms = 1s\n' \
        '6: connect_timeout_ms: "1s" is not a whole number'
    check_says_only $'io_timeout_ms = -5\n' '6: io_timeout_ms: "-5" is not a whole number'
    check_says_only $'io_timeout_ms = 86400001\n' \
        "6: io_timeout_ms: 86400001 is out of range (0 to 86400000)"
    check_says_only $'breaker_failures = 1000001\n' \
        "6: breaker_failures: 1000001 is out of range (0 to 1000000)"
    check_says_only $'breaker_failures = three\nbreaker_open_ms = 100\n' \
        '6: breaker_failures: "three" is not a whole number'
    check_says_only $'breaker_failures = 3\nbreaker_open_ms = 0\n' \
        "7: breaker_open_ms: 0 is out of range (1 to 86400000)"
    check_says_only $'breaker_failures = 3\nbreaker_open_max_ms = 2.5\n' \
        '7: breaker_open_max_ms: "2.5" is not a whole number'
}

@test "check: breaker periods need a breaker, and max may not be below open" {
    check_says_only $'breaker_open_ms = 100\n' \
        "6: breaker_open_ms: has no effect without breaker_failures"
    check_says_only $'breaker_failures = 0\nbreaker_open_max_ms = 100\n' \
        "7: breaker_open_max_ms: has no effect with breaker_failures = 0 (line 6)"
    check_says_only $'breaker_open_max_ms = 3000\nbreaker_failures = 3\nbreaker_open_ms = 10000\n' \
        "6: breaker_open_max_ms: 3000 is below breaker_open_ms (10000 at line 8)"
    check_says_only $'breaker_failures = 3\nbreaker_open_max_ms = 4000\n' \
        "7: breaker_open_max_ms: 4000 is below breaker_open_ms (5000, the default)"
    check_says_only $'breaker_failures = 3\nbreaker_open_ms = 90000\n' \
        "7: breaker_open_ms: 90000 is above breaker_open_max_ms (60000, the default)"
}

@test "check: a check made when the section ends is listed at its key's line" {
    # [a]'s periods are compared only when [b] begins; the line must be the
    # key's, in line order among the other errors.
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[a]
limit = 1
breaker_failures = 2
breaker_open_max_ms = 10
match = 127.0.0.1:1
wait_ms = soon
[b]
limit = x
breaker_open_ms = 7
match = 127.0.0.1:2
EOF
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:6: breaker_open_max_ms: 10 is below breaker_open_ms (5000, the default)
bulkhead: $RULES:8: wait_ms: \"soon\" is not a whole number
bulkhead: $RULES:10: limit: \"x\" is not a whole number
bulkhead: $RULES:11: breaker_open_ms: has no effect without breaker_failures
bulkhead: $RULES: 4 errors"
}

@test "explain: a destination's deadlines and breaker, on the line after its verdict" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[all]
limit = 3
connect_timeout_ms = 1000
io_timeout_ms = 500
breaker_failures = 3
match = 127.0.0.1:7001
[one]
limit = 1
breaker_failures = 1
breaker_open_ms = 100
breaker_open_max_ms = 100
match = 127.0.0.1:7002
[io]
limit = 1
io_timeout_ms = 2500
match = 127.0.0.1:7003
[plain]
limit = 1
match = 127.0.0.1:7004
EOF
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001 127.0.0.1:7002 \
        127.0.0.1:7003 127.0.0.1:7004 127.0.0.1:7005
    assert_success
    assert_output "127.0.0.1:7001 -> compartment all (line 8: match = 127.0.0.1:7001)
  connect_timeout_ms 1000, io_timeout_ms 500, breaker: 3 failures, open 5000..60000 ms
127.0.0.1:7002 -> compartment one (line 14: match = 127.0.0.1:7002)
  breaker: 1 failure, open 100..100 ms
127.0.0.1:7003 -> compartment io (line 18: match = 127.0.0.1:7003)
  io_timeout_ms 2500
127.0.0.1:7004 -> compartment plain (line 21: match = 127.0.0.1:7004)
127.0.0.1:7005 -> not limited"
}

@test "explain: bad deadline keys make explain fail as other bad rules do" {
    rules_with $'connect_timeout_ms = 200\n'
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001
    assert_failure 1
    assert_line "bulkhead: $RULES:6: connect_timeout_ms: 200 is below 1000: the kernel cannot fail a connect before its first SYN retransmission, 1 s after the SYN"
    refute_output --partial "->"
}

@test "the shim's start-up line for a bad deadline key is check's first line" {
    rules_with $'breaker_open_ms = 100\nconnect_timeout_ms = 500\n'
    run --separate-stderr run_shim /bin/true
    assert_success
    assert_equal "$stderr" \
        "bulkhead: $RULES:6: breaker_open_ms: has no effect without breaker_failures (and 1 more: bulkhead check $RULES)"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_line --index 0 "bulkhead: $RULES:6: breaker_open_ms: has no effect without breaker_failures"
}
