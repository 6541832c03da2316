#!/usr/bin/env bats
# Hostname rules under bulkhead run's supervisor: it sees no lookup of a Go
# or static program, so it matches a name rule by every address the name
# resolves to, and another name on that address is caught with it, which
# curl under the shim is not. check, explain and run's start-up line say
# so. Names come from a private /etc/hosts (helpers/common.bash make_hosts:
# payments.test and other.test share 127.0.0.1).

load helpers/common

GODIAL="$BH_ROOT/build/tests/godial"

setup_file() {
    build_if_stale "$GODIAL" "$BH_ROOT/tests/clients/go/godial.go" go_build
}

setup() {
    bh_setup
    require_private_hosts
    make_hosts
    echo "127.0.0.2 a.cdn.test" >>"$T/hosts"
    start_server web -1
    write_rules "$RULES" <<RULES
[global]
namespace = $NS
[names]
limit = 0
errno = EHOSTUNREACH
match = payments.test:$SERVER_PORT
[cdn]
limit = 0
match = *.cdn.test:$SERVER_PORT
RULES
}
teardown() { bh_teardown; }

# hosts_cli ARGS...: bulkhead ARGS with the private /etc/hosts.
hosts_cli() {
    unshare -m -- sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts" \
        "$BULKHEAD" "$@"
}

@test "supervisor names: curl reaches other.test on payments.test's address, a Go program is refused it, and run's start-up line says why" {
    run hosts_cli run -c "$RULES" -- curl -sS -o /dev/null "http://other.test:$SERVER_PORT/"
    assert_success
    assert_equal "$(server_stat web total)" 1
    hosts_cli run -c "$RULES" -- "$GODIAL" "other.test:$SERVER_PORT" 1 >"$T/go" 2>"$T/go.err"
    assert_equal "$(cat "$T/go")" 113
    assert_equal "$(server_stat web total)" 1
    grep -qx "bulkhead: run: $GODIAL: hostname rules match by address here: payments.test:$SERVER_PORT (line 6) counts every connection to an address the name resolves to, whatever name the program looked up" "$T/go.err"
    grep -qx "bulkhead: run: $GODIAL: suffix rules match nothing here: \\*.cdn.test:$SERVER_PORT (line 9)" "$T/go.err"
}

@test "supervisor names: explain says where the supervisor answers otherwise than the shim, and check says how name rules match under it" {
    run hosts_cli explain -c "$RULES" "other.test:$SERVER_PORT" "a.cdn.test:$SERVER_PORT"
    assert_success
    assert_output "other.test:$SERVER_PORT = 127.0.0.1 -> not limited
  under bulkhead run's supervisor (a Go or static program): compartment names (line 6: match = payments.test:$SERVER_PORT): hostname rules match by address there, whatever name the program looked up
a.cdn.test:$SERVER_PORT = 127.0.0.2 -> compartment cdn (line 9: match = *.cdn.test:$SERVER_PORT)
  under bulkhead run's supervisor (a Go or static program): not limited (suffix rules match nothing there)"
    run hosts_cli explain -c "$RULES" "payments.test:$SERVER_PORT"
    assert_output "payments.test:$SERVER_PORT = 127.0.0.1 -> compartment names (line 6: match = payments.test:$SERVER_PORT)"
    run hosts_cli check -c "$RULES"
    assert_success
    assert_line "names      a hostname rule matches the addresses a program's own lookup of the name gave; under bulkhead run's supervisor (a Go or static program), every address the name resolves to, whatever name the program used"
    assert_line "           suffix rules match no Go or static program under bulkhead run's supervisor"
}
