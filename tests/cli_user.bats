#!/usr/bin/env bats
# --user: root reads and steers a service user's namespace (stat, set,
# apply, reset, key); nobody else may name another user. The service here
# is user nobody running the shim; observers are its clients' outcomes,
# the test server and ipcs (owner and creator of the kernel's objects).
#
# BULKHEAD_TEST_CLI runs these against another build of the command.

load helpers/common
load helpers/uid

BULKHEAD="${BULKHEAD_TEST_CLI:-$BH_ROOT/build/bulkhead}"

setup() {
    bh_setup
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
    [[ $(id -u) -eq 0 ]] || skip "needs root (to act as nobody and as root)"
    [[ "$(id -u nobody 2>/dev/null)" == 65534 ]] || skip "no user nobody (65534)"
    # nobody must reach the shim and the client.
    "${AS_NOBODY[@]}" test -r "$SHIM" -a -x "$CLIENTS/connect_hold" ||
        skip "$SHIM or $CLIENTS/connect_hold is out of nobody's reach"
    # A directory nobody can read (BATS_TEST_TMPDIR's parents are root's).
    NOBODY_DIR=$(mktemp -d /tmp/bh-cli-user.XXXXXX)
    chmod 755 "$NOBODY_DIR"
    NOBODY_RULES="$NOBODY_DIR/rules.ini"
}

teardown() {
    bh_teardown
    local ns key
    for ns in "$NS" "$NS-applied"; do
        key=$("$BH_ROOT/build/bulkhead" key --user nobody -n "$ns" 2>/dev/null) || continue
        ipcrm -S "$key" 2>/dev/null || true
        ipcrm -M "$key" 2>/dev/null || true
    done
    [[ -z "${NOBODY_DIR:-}" ]] || rm -rf "$NOBODY_DIR"
}

# nobody_rules NAMESPACE LIMIT: compartment c on the test server, fail fast.
nobody_rules() {
    cat >"$NOBODY_RULES" <<EOF
[global]
namespace = $1
[c]
limit = $2
wait_ms = 0
match = 127.0.0.1:$SERVER_PORT
EOF
    chmod 644 "$NOBODY_RULES"
}

# "CREATOR OWNER" (cuid, uid) of the set ("s") or segment ("m") under KEY,
# as ipcs -c shows them; empty when there is none.
ipc_owners() {
    local id
    id=$(ipcs "-$2" | awk -v key="$1" '$1 == key { print $2 }')
    [[ -n "$id" ]] || return 0
    ipcs "-$2" -c | awk -v id="$id" '$1 == id { print $3, $5 }'
}

@test "--user: root sees, changes and removes nobody's namespace" {
    start_server srv -1
    nobody_rules "$NS" 1
    bg "$T/holder" "${AS_NOBODY[@]}" env LD_PRELOAD="$SHIM" \
        BULKHEAD_CONFIG="$NOBODY_RULES" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^(ok|E[A-Z]+)$'
    assert_equal "$(sed -n 1p "$T/holder")" ok

    local key
    key=$("$BULKHEAD" key --user nobody -n "$NS")
    run "$BULKHEAD" key --user 65534 -n "$NS"
    assert_output "$key"
    [[ "$key" != "$("$BULKHEAD" key -n "$NS")" ]] || fail "nobody's key is root's"
    assert_equal "$(ipc_owners "$key" s)" "nobody nobody"

    # Root's own namespace of that name is another one, with nothing in it.
    run "$BULKHEAD" stat -n "$NS"
    assert_success
    assert_line --index 0 "namespace $NS: no shared state yet (nothing has run in it)"

    run "$BULKHEAD" stat --user nobody -n "$NS"
    assert_success
    assert_line --regexp "^c +1 +1 +0 +1 +1 +0 +0 .* $holder\\(1\\)$"
    run "$BULKHEAD" stat --user nobody -n "$NS" --json
    assert_output --partial "\"holders\": [{\"pid\": $holder, \"permits\": 1, \"waiting\": 0}]"

    # Full at 1: a second nobody connect is refused.
    nobody_connect "$NOBODY_RULES"
    assert_failure 1
    assert_line ECONNREFUSED
    run "$BULKHEAD" set --user nobody -n "$NS" c limit=2
    assert_success
    assert_output "c: limit 1 -> 2, 1 in use"
    nobody_connect "$NOBODY_RULES"
    assert_success
    assert_line ok
    assert_equal "$(server_stat srv total)" 2

    # Unforced, reset refuses and names nobody's holder.
    run "$BULKHEAD" reset --user nobody -n "$NS"
    assert_failure 1
    assert_output "bulkhead: reset: namespace \"$NS\" of user nobody (uid 65534) is in use (c: 1 permit held by $holder(1), 0 waiting); stop those processes or use --force"
    [[ -n "$(ipc_owners "$key" s)" ]] || fail "the refused reset removed the set"

    run "$BULKHEAD" reset --user nobody --force -n "$NS"
    assert_success
    assert_output --partial "namespace $NS of user nobody (uid 65534): shared state removed while in use"
    assert_equal "$(ipc_owners "$key" s)" ""
    assert_equal "$(ipc_owners "$key" m)" ""
}

@test "--user: apply makes nobody's namespace as nobody's, and nobody's processes use it" {
    start_server srv -1
    local ns="$NS-applied"
    nobody_rules "$ns" 5
    local key
    key=$("$BULKHEAD" key --user nobody -n "$ns")
    # The live limit 1 from root's file wins over nobody's 5.
    write_rules "$RULES" <<EOF
[global]
namespace = $ns
[c]
limit = 1
match = 127.0.0.1:$SERVER_PORT
EOF
    run "$BULKHEAD" apply --user nobody "$RULES"
    assert_success
    assert_output "c: registered, limit 1"
    assert_equal "$(ipc_owners "$key" s)" "nobody nobody"
    assert_equal "$(ipc_owners "$key" m)" "nobody nobody"

    bg "$T/holder" "${AS_NOBODY[@]}" env LD_PRELOAD="$SHIM" \
        BULKHEAD_CONFIG="$NOBODY_RULES" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/holder" '^(ok|E[A-Z]+)$'
    assert_equal "$(sed -n 1p "$T/holder")" ok
    nobody_connect "$NOBODY_RULES"
    assert_failure 1
    assert_line ECONNREFUSED
    run "$BULKHEAD" stat --user nobody -n "$ns" --json
    assert_output --partial '"limit": 1, "in_use": 1,'
    assert_equal "$(server_stat srv total)" 1
}

@test "--user: only root may name another user; unknown users are usage errors" {
    run "${AS_NOBODY[@]}" "$BULKHEAD" stat --user root -n "$NS"
    assert_failure 1
    assert_output "bulkhead: stat: --user root: only root may work on another user's namespace (you are uid 65534)"
    for command in "set --user 0 -n $NS c limit=1" "apply --user root -n $NS /dev/null" \
        "reset --user root --force -n $NS"; do
        # shellcheck disable=SC2086
        run "${AS_NOBODY[@]}" "$BULKHEAD" $command
        assert_failure 1
        assert_output --partial "only root may work on another user's namespace (you are uid 65534)"
    done
    # Naming oneself is no privilege; the key is public, anyone may ask it.
    run "${AS_NOBODY[@]}" "$BULKHEAD" stat --user nobody -n "$NS"
    assert_success
    run "${AS_NOBODY[@]}" "$BULKHEAD" key --user root -n "$NS"
    assert_success
    assert_output "$("$BULKHEAD" key -n "$NS")"

    run "$BULKHEAD" stat --user no-such-user-here -n "$NS"
    assert_failure 2
    assert_line --index 0 "bulkhead: stat: --user no-such-user-here: no such user"
    run "$BULKHEAD" key --user 99999999999 -n "$NS"
    assert_failure 2
    assert_line --index 0 "bulkhead: key: --user 99999999999: not a uid"
}
