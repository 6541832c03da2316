#!/usr/bin/env bats
# A relative BULKHEAD_CONFIG, and relative paths inside the rules file, mean
# the same file in every process of the tree, whatever directory a process
# has moved to before it starts its children (an init script's `cd /`, a
# daemon's chdir("/") before it forks its workers).

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

@test "a relative BULKHEAD_CONFIG caps the curls a script starts after cd /" {
    # The server holds the two it admits past the test's end, so the four
    # others can only be refusals by the rules the script's curls found.
    start_server web 60000
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
[web]
limit = 2
match = 127.0.0.1:$SERVER_PORT
EOF2
    cd "$T"
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG=rules.ini bash -c '
        cd / || exit 1
        for i in 1 2 3 4 5 6; do
            (curl -s -o /dev/null --noproxy "*" --max-time 100 "$1"; echo "rc=$?" >"$2.$i") &
        done' script "http://127.0.0.1:$SERVER_PORT/" "$T/curl" 2>"$T/stderr" 3>&- &
    track_pid $!
    wait_for rc_count_is 7 4 "$T/curl"
    assert_equal "$(server_stat web max)" 2
    assert_equal "$(server_stat web total)" 2
    # and no child lost the file on the way
    run cat "$T/stderr"
    refute_output --partial "cannot open"
}

@test "a relative log_file is beside the rules file in every process, not in each one's directory" {
    start_server web 60000
    mkdir "$T/conf" "$T/elsewhere"
    write_rules "$T/conf/rules.ini" <<EOF2
[global]
namespace = $NS
log_file = bulkhead.log
[web]
limit = 0
match = 127.0.0.1:$SERVER_PORT
EOF2
    cd "$T/elsewhere"
    run_rc "$T/curl" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG=../conf/rules.ini \
        curl -s -o /dev/null --noproxy '*' --max-time 10 "http://127.0.0.1:$SERVER_PORT/"
    run cat "$T/curl"
    assert_output rc=7
    run cat "$T/conf/bulkhead.log"
    assert_output --partial "[web]"
    [[ ! -e "$T/elsewhere/bulkhead.log" ]]
}
