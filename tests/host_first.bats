#!/usr/bin/env bats
# The host program comes first: our log lines never land in its data, a
# rules file that is a stream never stops it from starting, and log_file
# never writes through someone's symlink or into someone else's file.

load helpers/common

setup() {
    bh_setup
    start_server web -1
}
teardown() { bh_teardown; }

# refusing_rules [EXTRA GLOBAL LINES]: limit 0 on the server.
refusing_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
$1
[web]
limit = 0
match = 127.0.0.1:$SERVER_PORT
EOF
}

# refuse_once: one refused connection under the shim (exit 1 expected).
refuse_once() {
    run --separate-stderr run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line ECONNREFUSED
}

@test "a program that reopened fd 2 as a data file finds no log line in it" {
    refusing_rules
    run run_shim python3 -c '
import os, socket, sys
os.close(2)
data = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
assert data == 2
os.write(2, b"record 1\n")
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])))
except ConnectionRefusedError:
    pass
os.write(2, b"record 2\n")' "$SERVER_PORT" "$T/data"
    assert_success
    assert_equal "$(cat "$T/data")" "record 1
record 2"
}

@test "the stderr a program started with still gets the refusal line" {
    refusing_rules
    refuse_once
    [[ "$stderr" == "bulkhead: refused 127.0.0.1:$SERVER_PORT to [web] at once: limit 0 for connect_hold["* ]] ||
        fail "stderr: $stderr"
}

# starts_despite RULES_PATH KIND: a program starts at once, runs unlimited,
# and says in one line what is wrong with the rules file.
starts_despite() {
    run --separate-stderr env BULKHEAD_CONFIG="$1" LD_PRELOAD="$SHIM" \
        timeout 20 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
    assert_equal "$stderr" "bulkhead: $1: is $2, not a regular file"
}

@test "a FIFO as the rules file: the program starts, one line says so" {
    mkfifo "$T/rules.fifo"
    starts_despite "$T/rules.fifo" "a FIFO"
    run timeout 20 "$BH_ROOT/build/bulkhead" check "$T/rules.fifo"
    assert_failure 1
    assert_line "bulkhead: $T/rules.fifo: is a FIFO, not a regular file"
}

@test "/dev/zero and /dev/urandom as the rules file: the program starts at once" {
    starts_despite /dev/zero "a character device"
    starts_despite /dev/urandom "a character device"
    run timeout 20 "$BH_ROOT/build/bulkhead" check /dev/zero
    assert_failure 1
    assert_line "bulkhead: /dev/zero: is a character device, not a regular file"
}

@test "a rules file over 4 MiB is one clear error" {
    refusing_rules
    head -c 5000000 /dev/zero | tr '\0' ';' >>"$RULES"
    run "$BH_ROOT/build/bulkhead" check "$RULES"
    assert_failure 1
    assert_line "bulkhead: $RULES: is $(stat -c %s "$RULES") bytes; a rules file may be at most 4 MiB"
}

@test "log_file through a symlink to someone's file: the file is untouched" {
    echo "secret" >"$T/secret"
    chmod 0600 "$T/secret"
    ln -s "$T/secret" "$T/link.log"
    refusing_rules "log_file = $T/link.log"
    refuse_once
    assert_equal "$(cat "$T/secret")" "secret"
}

@test "log_file as a dangling symlink: nothing is created" {
    ln -s "$T/created-by-us" "$T/dangling.log"
    refusing_rules "log_file = $T/dangling.log"
    refuse_once
    [[ ! -e "$T/created-by-us" ]] || fail "the link's target was created"
}

@test "log_file is created 0600 and written; another user's file is not" {
    refusing_rules "log_file = $T/own.log"
    refuse_once
    assert_equal "$(stat -c %a "$T/own.log")" 600
    run cat "$T/own.log"
    assert_line --partial "bulkhead: refused 127.0.0.1:$SERVER_PORT to [web]"

    [[ $(id -u) -eq 0 ]] || skip "needs root to make a file of another user"
    : >"$T/theirs.log"
    chown 65534 "$T/theirs.log"
    refusing_rules "log_file = $T/theirs.log"
    refuse_once
    assert_equal "$(stat -c %s "$T/theirs.log")" 0
}
