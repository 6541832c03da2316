#!/usr/bin/env bats
# per_process with curl: a file of its own because curl hangs
# before main under the ASan tier's preloaded runtime (see the Makefile).
# What counts is what curl printed per URL and what the server saw.

load helpers/common
load helpers/cli

setup() { cli_setup; }
teardown() { bh_teardown; }

@test "per_process: curl --parallel fetching 6 URLs gets 2 connections while another process holds 2" {
    start_server web -1
    compartment_rules 10 'per_process=2'
    start_client holder hold 2
    assert_equal "$(client_report holder)" "ok=2 refused=0 "
    local url="http://127.0.0.1:$SERVER_PORT/" rc=0
    run_shim curl -s --noproxy '*' --max-time 15 --parallel --parallel-immediate \
        --parallel-max 6 -o /dev/null -o /dev/null -o /dev/null -o /dev/null \
        -o /dev/null -o /dev/null -w '%{http_code}\n' \
        "$url" "$url" "$url" "$url" "$url" "$url" >"$T/curl" 2>"$T/curl.err" || rc=$?
    [[ $rc -ne 0 ]] || fail "curl exited 0: $(cat "$T/curl")"
    assert_equal "$(grep -c '^200$' "$T/curl")" 2
    assert_equal "$(grep -c '^000$' "$T/curl")" 4
    assert_equal "$(server_stat web total)" 4
    assert_equal "$(server_stat web open)" 2
}
