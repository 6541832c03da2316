#!/usr/bin/env bats
# Semantics 11: a bad rules file gives one line on stderr naming file, line,
# key and problem; the program then runs with no caps at all, or, with
# BULKHEAD_STRICT=1, exits 78 before main.
#
# The shim and `bulkhead check` report through the same parser, so each
# message is checked through `bulkhead check` (a few milliseconds, no
# server); the tests at the end start programs under the shim for what only
# the shim does: log the first error alone, run uncapped, exit 78.
#
# Every file below also holds a valid [cap] compartment of limit 0 over the
# test server: had the shim applied any part of a bad file, the probe
# connect would be refused.

load helpers/common

BULKHEAD="$BH_ROOT/build/bulkhead"

setup() {
    bh_setup
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
    # Only the shim tests start a server; [cap] needs some port meanwhile.
    SERVER_PORT=9
    # The message names the file as given: run from its directory.
    cd "$T" || fail "cannot cd to $T"
}
teardown() { bh_teardown; }

# cap_rules_with SECTION_HEADER BODY: lines 1-6 are [global] and [cap]; the
# header is line 7 and BODY starts at line 8.
cap_rules_with() {
    {
        printf '[global]\nnamespace = %s\n[cap]\nlimit = 0\nerrno = EHOSTUNREACH\n' "$NS"
        printf 'match = 127.0.0.1:%s\n' "$SERVER_PORT"
        printf '%s\n' "$1"
        printf '%b\n' "$2"
    } >"$T/rules.ini"
}

# The start of an error line about rules.ini line $1.
error_prefix() {
    echo "^bulkhead: (rules\\.ini|${T//./\\.}/rules\\.ini):$1: "
}

# expect_config_error LINE WORD: `bulkhead check` fails with exactly one
# error line, "bulkhead: rules.ini:LINE: ..." mentioning WORD (the key, or
# what the line is about), then its count, and prints nothing as valid.
expect_config_error() {
    local line=$1 word=$2 prefix
    prefix=$(error_prefix "$line")

    run --separate-stderr "$BULKHEAD" check rules.ini
    assert_failure 1
    assert_output ""
    [[ ${#stderr_lines[@]} -eq 2 ]] ||
        fail "expected one error line and the count, got ${#stderr_lines[@]} lines: $stderr"
    [[ "${stderr_lines[0]}" =~ $prefix ]] ||
        fail "stderr line does not start with 'bulkhead: rules.ini:$line: ': ${stderr_lines[0]}"
    [[ "${stderr_lines[0]}" == *"$word"* ]] ||
        fail "stderr line does not name '$word': ${stderr_lines[0]}"
    assert_equal "${stderr_lines[1]}" "bulkhead: rules.ini: 1 error"
}

# shim_server: the test server [cap] covers, for tests that run the shim.
shim_server() {
    start_server web -1
}

@test "a valid file is silent and capped (the control for this file)" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1'
    run --separate-stderr "$BULKHEAD" check rules.ini
    assert_success
    assert_line "rules.ini: valid"
    assert_equal "$stderr" ""

    shim_server
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1'
    run --separate-stderr env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG=rules.ini \
        "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line EHOSTUNREACH
    run --separate-stderr env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG=rules.ini BULKHEAD_STRICT=1 \
        sh -c 'echo ran'
    assert_success
    assert_output ran
    assert_equal "$stderr" ""
}

@test "limit: not a whole number" {
    cap_rules_with '[b]' 'limit = twenty\nmatch = 127.0.0.1:1'
    expect_config_error 8 limit
    [[ "${stderr_lines[0]}" == *twenty* ]] || fail "value not quoted: $stderr"
}

@test "limit: negative" {
    cap_rules_with '[b]' 'limit = -3\nmatch = 127.0.0.1:1'
    expect_config_error 8 limit
}

@test "limit: fractional" {
    cap_rules_with '[b]' 'limit = 3.5\nmatch = 127.0.0.1:1'
    expect_config_error 8 limit
}

@test "limit: empty" {
    cap_rules_with '[b]' 'limit =\nmatch = 127.0.0.1:1'
    expect_config_error 8 limit
}

@test "limit: too large" {
    cap_rules_with '[b]' 'limit = 99999999999\nmatch = 127.0.0.1:1'
    expect_config_error 8 limit
}

@test "wait_ms: not a number" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nwait_ms = soon'
    expect_config_error 10 wait_ms
}

@test "wait_ms: negative" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nwait_ms = -1'
    expect_config_error 10 wait_ms
}

@test "max_waiters: not a number" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nmax_waiters = many'
    expect_config_error 10 max_waiters
}

@test "errno: unknown name" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nerrno = ENOSUCH'
    expect_config_error 10 errno
}

@test "errno: a real errno that is not allowed" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nerrno = EPERM'
    expect_config_error 10 errno
}

@test "match: port out of range" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nmatch = 127.0.0.1:70000'
    expect_config_error 10 match
}

@test "match: port missing" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nmatch = 127.0.0.1'
    expect_config_error 10 match
}

@test "match: port not a number" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nmatch = 127.0.0.1:https'
    expect_config_error 10 match
}

@test "match: reversed port range" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nmatch = 127.0.0.1:20-10'
    expect_config_error 10 match
}

@test "match: IPv4 prefix too long" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nmatch = 127.0.0.0/33:80'
    expect_config_error 10 match
}

@test "match: IPv6 prefix too long" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nmatch = [::1]/129:80'
    expect_config_error 10 match
}

@test "match: unclosed IPv6 bracket" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nmatch = [::1:80'
    expect_config_error 10 match
}

@test "match: empty list" {
    cap_rules_with '[b]' 'limit = 1'
    expect_config_error 7 match
}

@test "unknown key in a compartment" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\ncolour = blue'
    expect_config_error 10 colour
}

@test "unknown key in [global]" {
    printf '[global]\nnamespace = %s\ncolour = blue\n[cap]\nlimit = 0\nmatch = 127.0.0.1:%s\n' \
        "$NS" "$SERVER_PORT" >"$T/rules.ini"
    expect_config_error 3 colour
}

@test "log: unknown level" {
    printf '[global]\nnamespace = %s\nlog = loud\n[cap]\nlimit = 0\nmatch = 127.0.0.1:%s\n' \
        "$NS" "$SERVER_PORT" >"$T/rules.ini"
    expect_config_error 3 log
}

@test "bad section name" {
    cap_rules_with '[pay ments]' 'limit = 1\nmatch = 127.0.0.1:1'
    expect_config_error 7 'pay ments'
}

@test "duplicate compartment" {
    cap_rules_with '[cap]' 'limit = 1\nmatch = 127.0.0.1:1'
    expect_config_error 7 cap
}

@test "a line that is not key = value" {
    cap_rules_with '[b]' 'limit = 1\nmatch = 127.0.0.1:1\nthis is not a setting'
    expect_config_error 10 ''
}

@test "several errors: check lists every one, in file order" {
    cap_rules_with '[b]' 'limit = twenty\nmatch = 127.0.0.1:1\nwait_ms = soon\ncolour = blue'
    run --separate-stderr "$BULKHEAD" check rules.ini
    assert_failure 1
    assert_output ""
    [[ ${#stderr_lines[@]} -eq 4 ]] || fail "expected three errors and the count: $stderr"
    local i want=(8 limit 10 wait_ms 11 colour) prefix
    for i in 0 1 2; do
        prefix=$(error_prefix "${want[2 * i]}")
        [[ "${stderr_lines[i]}" =~ $prefix && "${stderr_lines[i]}" == *"${want[2 * i + 1]}"* ]] ||
            fail "error $((i + 1)) is not about line ${want[2 * i]}, ${want[2 * i + 1]}: ${stderr_lines[i]}"
    done
    assert_equal "${stderr_lines[3]}" "bulkhead: rules.ini: 3 errors"
}

# --- under the shim ---------------------------------------------------------

@test "shim: several errors give one line, the first, and the program runs uncapped" {
    shim_server
    cap_rules_with '[b]' 'limit = twenty\nmatch = 127.0.0.1:1\nwait_ms = soon\ncolour = blue'
    local prefix
    prefix=$(error_prefix 8)
    run --separate-stderr env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG=rules.ini \
        "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
    [[ ${#stderr_lines[@]} -eq 1 ]] ||
        fail "expected one line on stderr, got ${#stderr_lines[@]}: $stderr"
    [[ "${stderr_lines[0]}" =~ $prefix ]] ||
        fail "stderr line does not start with 'bulkhead: rules.ini:8: ': ${stderr_lines[0]}"
    [[ "${stderr_lines[0]}" == *limit* ]] ||
        fail "stderr line does not name 'limit': ${stderr_lines[0]}"
}

@test "shim: BULKHEAD_STRICT=1 exits 78 before main, with the error" {
    cap_rules_with '[b]' 'limit = twenty\nmatch = 127.0.0.1:1'
    local prefix
    prefix=$(error_prefix 8)
    run --separate-stderr env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG=rules.ini BULKHEAD_STRICT=1 \
        sh -c 'echo ran'
    assert_failure 78
    refute_output --partial ran
    [[ "$stderr" =~ $prefix ]] || fail "strict mode did not print the error: $stderr"
    [[ "$stderr" == *limit* ]] || fail "strict mode's error does not name 'limit': $stderr"
}

@test "shim: a missing BULKHEAD_CONFIG file is an error" {
    shim_server
    run --separate-stderr env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$T/missing.ini" \
        "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
    [[ ${#stderr_lines[@]} -eq 1 ]] || fail "expected one line on stderr: $stderr"
    [[ "${stderr_lines[0]}" =~ ^bulkhead:\ .*missing\.ini ]] ||
        fail "stderr does not name the file: $stderr"

    run --separate-stderr env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$T/missing.ini" BULKHEAD_STRICT=1 \
        sh -c 'echo ran'
    assert_failure 78
    refute_output --partial ran
}
