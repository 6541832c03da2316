#!/usr/bin/env bats
# Semantics 1: which destinations a compartment covers (literal, CIDR, IPv6,
# port forms, first match wins), and that everything else is untouched.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

# hold_then_probe HOST PORT: one connection held in the background, then a
# second attempt; sets output/status of the second.
hold_then_probe() {
    bg_shim "$T/holder.$2" "$CLIENTS/connect_hold" "$1" "$2" 60000
    wait_for file_has "$T/holder.$2" '^ok$'
    run run_shim "$CLIENTS/connect_hold" "$1" "$2" 0
}

@test "IPv6 literal rule [::1]:PORT caps IPv6 connects" {
    require_ipv6
    start_server v6 -1 ::1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[v6]
limit = 1
errno = EHOSTUNREACH
match = [::1]:$SERVER_PORT
EOF
    hold_then_probe ::1 "$SERVER_PORT"
    assert_failure 1
    assert_line EHOSTUNREACH
    assert_equal "$(server_stat v6 total)" 1
    assert_equal "$(server_stat v6 max)" 1
}

@test "IPv6 CIDR rule [::1]/128:PORT" {
    require_ipv6
    start_server v6 -1 ::1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[v6]
limit = 0
errno = EHOSTUNREACH
match = [::1]/128:$SERVER_PORT
EOF
    run run_shim "$CLIENTS/connect_hold" ::1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line EHOSTUNREACH
    assert_equal "$(server_stat v6 total)" 0
}

@test "IPv4 CIDR 127.0.0.0/8:PORT covers every loopback address, as one compartment" {
    start_server web -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[loop]
limit = 1
errno = EHOSTUNREACH
match = 127.0.0.0/8:$SERVER_PORT
EOF
    hold_then_probe 127.0.0.1 "$SERVER_PORT"
    assert_failure 1
    assert_line EHOSTUNREACH
    # Nothing listens on 127.0.0.2: only the shim can answer EHOSTUNREACH
    # there (the kernel would say ECONNREFUSED).
    run run_shim "$CLIENTS/connect_hold" 127.0.0.2 "$SERVER_PORT" 0
    assert_failure 1
    assert_line EHOSTUNREACH
    assert_equal "$(server_stat web total)" 1
}

@test "a v4-mapped IPv6 destination matches the IPv4 rule" {
    require_ipv6
    start_server web -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[v4]
limit = 0
errno = EHOSTUNREACH
match = 127.0.0.1:$SERVER_PORT
EOF
    run run_shim "$CLIENTS/connect_hold" ::ffff:127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line EHOSTUNREACH
    assert_equal "$(server_stat web total)" 0
}

@test "port range LO-HI caps ports inside it and leaves the others alone" {
    start_server inside -1
    local pin=$SERVER_PORT
    start_server outside -1
    local pout=$SERVER_PORT
    # A range around pin that excludes pout.
    local lo=$pin hi=$((pin + 1))
    if ((pout == hi)); then
        lo=$((pin - 1))
        hi=$pin
    fi
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[range]
limit = 1
errno = EHOSTUNREACH
match = 127.0.0.1:$lo-$hi
EOF
    hold_then_probe 127.0.0.1 "$pin"
    assert_failure 1
    assert_line EHOSTUNREACH
    local i
    for i in 1 2 3; do
        bg_shim "$T/out.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$pout" 60000
    done
    for i in 1 2 3; do
        wait_for file_has "$T/out.$i" '^ok$'
    done
    assert_equal "$(server_stat outside max)" 3
    assert_equal "$(server_stat inside total)" 1
}

@test "port * covers every port of the address" {
    start_server a -1
    local pa=$SERVER_PORT
    start_server b -1
    local pb=$SERVER_PORT
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[all]
limit = 1
errno = EHOSTUNREACH
match = 127.0.0.1:*
EOF
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$pa" 60000
    wait_for file_has "$T/holder" '^ok$'
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$pb" 0
    assert_failure 1
    assert_line EHOSTUNREACH
    assert_equal "$(server_stat b total)" 0
}

@test "first match in file order wins" {
    start_server a 1000
    local pa=$SERVER_PORT
    start_server b 1000
    local pb=$SERVER_PORT
    # Port pa matches both: [narrow] comes first and caps it at 1, although
    # [broad] would allow 3. Port pb only matches [broad].
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[narrow]
limit = 1
errno = EHOSTUNREACH
match = 127.0.0.1:$pa
[broad]
limit = 3
errno = ETIMEDOUT
match = 127.0.0.0/8:*
EOF
    run run_shim "$CLIENTS/mt_client" 127.0.0.1 "$pa" 4 -1
    assert_success
    assert_lines ok=1 EHOSTUNREACH=3
    assert_equal "$(server_stat a total)" 1

    run run_shim "$CLIENTS/mt_client" 127.0.0.1 "$pb" 4 -1
    assert_success
    assert_lines ok=3 ETIMEDOUT=1
    assert_equal "$(server_stat b total)" 3
}

@test "the same destinations in the other order: the broad compartment wins" {
    start_server a 1000
    local pa=$SERVER_PORT
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[broad]
limit = 3
errno = ETIMEDOUT
match = 127.0.0.0/8:*
[narrow]
limit = 1
errno = EHOSTUNREACH
match = 127.0.0.1:$pa
EOF
    run run_shim "$CLIENTS/mt_client" 127.0.0.1 "$pa" 4 -1
    assert_success
    assert_lines ok=3 ETIMEDOUT=1
}

@test "an unmatched destination is untouched: more than the limit reach it" {
    start_server capped -1
    local pc=$SERVER_PORT
    start_server free -1
    local pf=$SERVER_PORT
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[capped]
limit = 1
errno = EHOSTUNREACH
match = 127.0.0.1:$pc
EOF
    local i
    for i in 1 2 3 4 5; do
        bg_shim "$T/free.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$pf" 60000
    done
    for i in 1 2 3 4 5; do
        wait_for file_has "$T/free.$i" '^ok$'
    done
    assert_equal "$(server_stat free max)" 5
    # ...while the matched port next to it is capped.
    hold_then_probe 127.0.0.1 "$pc"
    assert_failure 1
    assert_line EHOSTUNREACH
}

@test "only TCP is capped: UDP and unix sockets pass through a limit 0 compartment" {
    start_server web -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[zero]
limit = 0
errno = EHOSTUNREACH
match = 127.0.0.1:$SERVER_PORT
EOF
    PORT=$SERVER_PORT
    fdops udp_untouched 0
    assert_success
    assert_lines udp_connect=ok udp_sendto=ok unix_connect=ok tcp_connect=EHOSTUNREACH
    assert_equal "$(server_stat web total)" 0
}

@test "errno is untouched by connects and closes the shim lets through" {
    start_server web -1
    local pm=$SERVER_PORT
    start_server other -1
    local po=$SERVER_PORT
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[m]
limit = 1
errno = EHOSTUNREACH
match = 127.0.0.1:$pm
EOF
    run run_shim "$CLIENTS/fdops" 127.0.0.1 "$pm" errno_untouched 1 "$po"
    assert_success
    assert_lines errno_socket=kept errno_connect_matched=kept errno_socket_unmatched=kept \
        errno_connect_unmatched=kept errno_dup=kept errno_close_dup=kept \
        errno_fcntl_dupfd=kept errno_dup2_onto_dup=kept errno_close_dup2=kept \
        errno_close_matched=kept errno_close_unmatched=kept final_avail=1
    assert_equal "$(server_stat other total)" 1
}
