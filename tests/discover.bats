#!/usr/bin/env bats
# observe = yes and bulkhead discover: what real clients connected to, as
# the test servers counted it, with no compartment to match them.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

observe_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
observe = yes
EOF
}

# clients: three curls at once to 127.0.0.1:$PORT_web (held by the server
# until all three are in), two python connects to localhost:$PORT_api,
# one curl to a port nothing listens on.
clients() {
    local i
    for i in 1 2 3; do
        bg_shim "$T/curl.$i" curl -s -o /dev/null --noproxy '*' --max-time 60 \
            "http://127.0.0.1:$PORT_web/"
        echo "$BG_PID" >>"$T/curls"
    done
    wait_for -t 30 server_open_is web 3
    touch "$T/go"
    while read -r i; do
        wait_pid "$i"
    done <"$T/curls"
    rm -f "$T/curls" "$T/go"
    run_shim python3 -c '
import socket, sys
for _ in range(2):
    s = socket.create_connection(("localhost", int(sys.argv[1])), timeout=30)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    s.recv(100)
    s.close()' "$PORT_api"
    local closed
    closed=$(free_port)
    run -7 run_shim curl -s -o /dev/null --noproxy '*' "http://127.0.0.1:$closed/"
}

# destination ADDRESS PORT FIELD: a field of discover --json's row.
destination() {
    "$BULKHEAD" discover -n "$NS" --json |
        jq -c --arg a "$1" --argjson p "$2" \
            ".destinations[] | select(.address == \$a and .port == \$p) | .$3"
}

@test "discover lists the destinations curl and python reached under observe = yes with no compartment: names, connects, peak, failures" {
    start_server web 0 127.0.0.1 --hold-until "$T/go"
    start_server api 0
    observe_rules
    clients
    [[ "$(server_stat web total)" == 3 && "$(server_stat api total)" == 2 ]]
    [[ "$(server_stat web max)" == 3 ]]

    run destination 127.0.0.1 "$PORT_web" connects
    assert_output 3
    run destination 127.0.0.1 "$PORT_web" peak
    assert_output 3
    run destination 127.0.0.1 "$PORT_web" names
    assert_output '[]'
    run destination 127.0.0.1 "$PORT_api" connects
    assert_output 2
    run destination 127.0.0.1 "$PORT_api" names
    assert_output '["localhost"]'
    run destination 127.0.0.1 "$PORT_api" failed
    assert_output 0
    # The refused connect to the closed port: a failure.
    run bash -c "'$BULKHEAD' discover -n '$NS' --json |
        jq '[.destinations[] | select(.failed == 1 and .connects == 1)] | length'"
    assert_output 1
    # Busiest first, in the table as in the document.
    run "$BULKHEAD" discover -n "$NS"
    assert_success
    assert_line --index 2 --regexp "^127\.0\.0\.1:$PORT_web +- +3 "
    assert_line --index 3 --regexp "^127\.0\.0\.1:$PORT_api +localhost +2 "
}

@test "discover --rules drafts one compartment per downstream, named from its host name, that check accepts; under it the same clients are counted in shadow" {
    start_server web 0 127.0.0.1 --hold-until "$T/go"
    start_server api 0
    observe_rules
    clients
    "$BULKHEAD" discover -n "$NS" --rules >"$T/draft.ini"
    run "$BULKHEAD" check -c "$T/draft.ini"
    assert_success
    run grep -c '^mode = shadow$' "$T/draft.ini"
    assert_output 3
    run grep -A4 '^\[localhost\]$' "$T/draft.ini"
    assert_line "match = localhost:$PORT_api"
    assert_line "match = 127.0.0.1:$PORT_api"
    run grep -B3 "^match = 127.0.0.1:$PORT_web\$" "$T/draft.ini"
    assert_line --index 0 '[127.0.0.1]'

    run grep -c '^\[' "$T/draft.ini"
    assert_output 4

    # The same clients under the draft: nothing refused, and the three
    # curls held at once counted in shadow past the web compartment's limit.
    local limit
    limit=$(grep -A1 '^\[127\.0\.0\.1\]$' "$T/draft.ini" | sed -n 's/^limit = //p')
    cp "$T/draft.ini" "$RULES"
    clients
    [[ "$(server_stat web total)" == 6 && "$(server_stat web max)" == 3 ]]
    [[ "$(server_stat api total)" == 4 ]]
    run bash -c "'$BULKHEAD' stat -n '$NS' --json |
        jq '.compartments[] | select(.name == \"127.0.0.1\") | .shadow_refused'"
    assert_output "$((limit < 3 ? 3 - limit : 0))"
}

@test "under bulkhead run's seccomp supervisor, a static program's connects are observed too" {
    local hold="$BH_ROOT/build/tests/hold_connect"
    build_if_stale "$hold" "$BH_ROOT/tests/clients/static/hold_connect.c" static_build
    start_server web 0
    observe_rules
    run "$BULKHEAD" run -c "$RULES" -- "$hold" 127.0.0.1 "$PORT_web" 3 </dev/null
    assert_success
    [[ "$(server_stat web total)" == 3 ]]
    run destination 127.0.0.1 "$PORT_web" connects
    assert_output 3
}
