#!/usr/bin/env bats
# bulkhead key: the key it prints is the key under which the kernel holds
# the namespace's semaphore set once a shim process ran in it (ipcs is the
# observer), and nothing else's.

load helpers/common

BULKHEAD="$BH_ROOT/build/bulkhead"

setup() {
    bh_setup
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
}
teardown() { bh_teardown; }

# The semid ipcs -s shows for KEY, empty when there is none.
semid_of() {
    ipcs -s | awk -v key="$1" '$1 == key { print $2 }'
}

# The value of semaphore NUM of set SEMID, as ipcs -s -i shows it.
semval() {
    ipcs -s -i "$1" | awk -v num="$2" '
        /^semnum/ { table = 1; next }
        table && $1 == num { print $2 }'
}

semval_is() {
    [[ "$(semval "$1" "$2")" == "$3" ]]
}

@test "key: the printed key is the semaphore set a shim process made, and its permits move with it" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[c]
limit = 1
match = 127.0.0.1:$SERVER_PORT
EOF
    run "$BULKHEAD" key -c "$RULES"
    assert_success
    assert_output --regexp '^0x[0-9a-f]{8}$'
    local key=$output
    run "$BULKHEAD" key -n "$NS"
    assert_output "$key"
    [[ -z "$(semid_of "$key")" ]] || fail "a set under $key before anything ran"

    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/holder" '^ok$'
    local semid
    semid=$(semid_of "$key")
    [[ -n "$semid" ]] || fail "ipcs -s shows no set under $key: $(ipcs -s)"
    # Semaphore 1 is compartment c's free permits: the holder took the one.
    assert_equal "$(semval "$semid" 1)" 0
    kill -TERM "$BG_PID"
    wait_pid "$BG_PID" || true
    wait_for semval_is "$semid" 1 1

    run "$BULKHEAD" reset -n "$NS"
    assert_success
    [[ -z "$(semid_of "$key")" ]] || fail "set $key still there after reset"
}

@test "key: another namespace or user gets another key; bad arguments are errors" {
    run "$BULKHEAD" key -n "$NS"
    assert_success
    local mine=$output
    run "$BULKHEAD" key -n "$NS-other"
    assert_success
    [[ "$output" != "$mine" ]]
    if [[ $(id -u) -eq 0 ]] && id nobody >/dev/null 2>&1; then
        run setpriv --reuid=nobody --regid=nogroup --clear-groups "$BULKHEAD" key -n "$NS"
        assert_success
        [[ "$output" != "$mine" ]]
    fi
    run "$BULKHEAD" key -n "$NS" -c "$RULES"
    assert_failure 2
    assert_line --index 0 "bulkhead: key: -c and -n both name the namespace; give one"
    run "$BULKHEAD" key -n "$NS" extra
    assert_failure 2
    assert_line --index 0 'bulkhead: key: unexpected "extra"'
    run "$BULKHEAD" key -c "$T/missing.ini"
    assert_failure 1
    assert_output --partial "missing.ini"
}

@test "key: in the help, its own help and the man page" {
    run "$BULKHEAD" --help
    assert_success
    assert_line "  bulkhead key [-c rules.ini | -n NAMESPACE] [-u USER]"
    run "$BULKHEAD" help key
    assert_success
    assert_line --index 0 "usage: bulkhead key [-c rules.ini | -n NAMESPACE] [-u USER]"
    run "$BULKHEAD" key --help
    assert_success
    assert_line --index 0 "usage: bulkhead key [-c rules.ini | -n NAMESPACE] [-u USER]"
    run env MANWIDTH=80 MANPAGER=cat man -l "$BH_ROOT/man/bulkhead.1"
    assert_success
    assert_line --regexp '^ +bulkhead key \[-c rules\.ini \| -n NAMESPACE\] \[-u USER\]$'
    assert_output --partial "LIMITS"
}
