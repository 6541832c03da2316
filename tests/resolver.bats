#!/usr/bin/env bats
# Semantics 10: hostname rules match the addresses the program itself
# resolved, through each resolver entry point. Names come from a private
# /etc/hosts bind-mounted in a mount namespace (see make_hosts).

load helpers/common

setup() {
    bh_setup
    require_private_hosts
    make_hosts
}
teardown() { bh_teardown; }

# refusing_name_rules MATCH: a limit-0 compartment with the given match line.
refusing_name_rules() {
    write_rules "$RULES" <<RULES
[global]
namespace = $NS
[names]
limit = 0
errno = EHOSTUNREACH
match = $1
RULES
}

# refused_via METHOD: payments.test through METHOD is refused; other.test,
# the same address under another name, is not.
refused_via() {
    start_server web -1
    refusing_name_rules "payments.test:$SERVER_PORT"
    run hosts_shim "$CLIENTS/resolve_connect" "$1" payments.test "$SERVER_PORT" 0
    assert_failure 1
    assert_lines resolved=127.0.0.1 EHOSTUNREACH
    run hosts_shim "$CLIENTS/resolve_connect" "$1" other.test "$SERVER_PORT" 0
    assert_success
    assert_lines resolved=127.0.0.1 ok
    assert_equal "$(server_stat web total)" 1
}

@test "hostname rule sees names resolved with getaddrinfo" {
    refused_via getaddrinfo
}

@test "hostname rule sees names resolved with gethostbyname" {
    refused_via gethostbyname
}

@test "hostname rule sees names resolved with gethostbyname2" {
    refused_via gethostbyname2
}

@test "hostname rule sees names resolved with gethostbyname_r" {
    refused_via gethostbyname_r
}

@test "hostname rule sees names resolved with gethostbyname2_r" {
    refused_via gethostbyname2_r
}

@test "a hostname rule does not match the address when the program never resolved the name" {
    start_server web -1
    refusing_name_rules "payments.test:$SERVER_PORT"
    run hosts_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
    # The control: resolved by name, the same address is refused.
    run hosts_shim "$CLIENTS/resolve_connect" getaddrinfo payments.test "$SERVER_PORT" 0
    assert_failure 1
    assert_line EHOSTUNREACH
}

@test "a hostname rule covers only its port" {
    start_server web -1
    local pweb=$SERVER_PORT
    start_server other -1
    refusing_name_rules "payments.test:$pweb"
    run hosts_shim "$CLIENTS/resolve_connect" getaddrinfo payments.test "$SERVER_PORT" 0
    assert_success
    assert_line ok
    run hosts_shim "$CLIENTS/resolve_connect" getaddrinfo payments.test "$pweb" 0
    assert_failure 1
    assert_line EHOSTUNREACH
}

@test "suffix rule *.payments.test:* covers subdomains, not the bare name" {
    start_server web -1
    refusing_name_rules '*.payments.test:*'
    run hosts_shim "$CLIENTS/resolve_connect" getaddrinfo api.payments.test "$SERVER_PORT" 0
    assert_failure 1
    assert_line EHOSTUNREACH
    run hosts_shim "$CLIENTS/resolve_connect" gethostbyname deep.api.payments.test "$SERVER_PORT" 0
    assert_failure 1
    assert_line EHOSTUNREACH
    run hosts_shim "$CLIENTS/resolve_connect" getaddrinfo payments.test "$SERVER_PORT" 0
    assert_success
    assert_line ok
    assert_equal "$(server_stat web total)" 1
}

@test "hostname rules match IPv6 answers (getaddrinfo and gethostbyname2_r, AF_INET6)" {
    require_ipv6
    start_server v6 -1 ::1
    refusing_name_rules "payments6.test:$SERVER_PORT"
    run hosts_shim "$CLIENTS/resolve_connect" getaddrinfo payments6.test "$SERVER_PORT" 0 inet6
    assert_failure 1
    assert_lines resolved=::1 EHOSTUNREACH
    run hosts_shim "$CLIENTS/resolve_connect" gethostbyname2_r payments6.test "$SERVER_PORT" 0 inet6
    assert_failure 1
    assert_lines resolved=::1 EHOSTUNREACH
    # The literal, never resolved by name, is not matched.
    run hosts_shim "$CLIENTS/connect_hold" ::1 "$SERVER_PORT" 0
    assert_success
    assert_equal "$(server_stat v6 total)" 1
}
