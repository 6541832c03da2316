#!/usr/bin/env bats
# 32 threads connecting and ending connections every way at once (close,
# dup, dup2, fdopen/fclose, a close from another thread): the server never
# sees more than the limit, and afterwards every permit is free while the
# process still lives. The sanitizer targets run this file too.

load helpers/common

setup() {
    bh_setup
    start_server web -1
}
teardown() { bh_teardown; }

@test "32 threads, 2,000 connections ended every way: never more than 4, all 4 free after" {
    storm_rules 60000
    bg_shim "$T/storm" "$CLIENTS/thread_storm" 127.0.0.1 "$SERVER_PORT" 32 64
    wait_for -t 100 file_has "$T/storm" '^storm done connected=2048$' ||
        fail "storm: $(cat "$T/storm" "$T/storm.err")"
    local max
    max=$(server_stat web max)
    ((max <= 4)) || fail "the server saw $max at once"
    # Exactly 4 permits free: 4 holders get in, a 5th is refused at once.
    storm_rules 0
    local i
    for i in 1 2 3 4; do
        bg_shim "$T/after.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
        wait_for file_has "$T/after.$i" '^(ok|E[A-Z]+)$'
        assert_equal "$(head -1 "$T/after.$i")" ok
    done
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_line ECONNREFUSED
}
