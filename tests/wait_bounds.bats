#!/usr/bin/env bats
# Waits that cannot end, cut short: a process already holding permits of
# the compartment (hold and wait deadlocks a fleet of such processes, and
# an event loop waits for its own connections), and a weight the caller's
# pools can never grant. Each compartment waits an hour, so a
# client that comes back within its timeout did not wait it out.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

# downstream_rules LIMIT KEY=VALUE...: [downstream] over the server (its match at
# line 7, weighted $WEIGHT when set), waiting an hour; the shim's lines go
# to $T/shim.log.
downstream_rules() {
    local limit=$1
    shift
    {
        printf '[global]\nnamespace = %s\nlog_file = %s\n' "$NS" "$T/shim.log"
        printf '[downstream]\nlimit = %s\nwait_ms = 3600000\n' "$limit"
        printf 'match = 127.0.0.1:%s%s\n' "$SERVER_PORT" "${WEIGHT:+ weight=$WEIGHT}"
        printf '%s\n' "$@" | sed 's/=/ = /'
    } >"$RULES"
}

# HOLD_THEN_MORE PORT READY GO: connects once and keeps it, writes READY,
# waits for GO to exist, then connects again; prints "first=R second=R",
# each R "ok" or the errno number, and keeps what it holds until killed (a
# process that exited would give its permits to the other one).
HOLD_THEN_MORE='
import os, socket, sys, time
def connect():
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
        return s, "ok"
    except OSError as e:
        return s, str(e.errno)
first, r1 = connect()
open(sys.argv[2], "w").close()
while not os.path.exists(sys.argv[3]):
    time.sleep(0.01)
second, r2 = connect()
print("first=%s second=%s" % (r1, r2), flush=True)
time.sleep(600)
'

@test "hold and wait: an event loop that holds a permit and asks for another waits in the background at most hold_wait_ms, and the log says why" {
    start_server srv -1
    downstream_rules 1 hold_wait_ms=200
    run timeout 20 env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" python3 -c '
import asyncio, sys
async def main():
    first = await asyncio.open_connection("127.0.0.1", int(sys.argv[1]))
    try:
        await asyncio.open_connection("127.0.0.1", int(sys.argv[1]))
        print("connected")
    except OSError as e:
        print("refused=%d" % e.errno)
asyncio.run(main())
' "$SERVER_PORT"
    assert_success
    assert_output "refused=111"
    run cat "$T/shim.log"
    assert_line --partial "after waiting 200 ms (this process already holds 1 of its permits; hold_wait_ms = 200)"
    assert_equal "$(server_stat srv total)" 1
}

@test "hold and wait: processes that hold permits and want more are refused at once, not deadlocked (hold_wait_ms 0)" {
    start_server srv -1
    downstream_rules 2
    bg_shim "$T/a" python3 -c "$HOLD_THEN_MORE" "$SERVER_PORT" "$T/a.ready" "$T/go"
    bg_shim "$T/b" python3 -c "$HOLD_THEN_MORE" "$SERVER_PORT" "$T/b.ready" "$T/go"
    wait_for test -e "$T/a.ready"
    wait_for test -e "$T/b.ready"
    # Each holds one of the two permits and asks for the other's.
    touch "$T/go"
    wait_for -t 20 file_has "$T/a" '^first='
    wait_for -t 20 file_has "$T/b" '^first='
    run cat "$T/a" "$T/b"
    assert_output "$(printf 'first=ok second=111\nfirst=ok second=111')"
    run cat "$T/shim.log"
    assert_line --partial "at once: full; this process already holds 1 of its permits; hold_wait_ms = 0"
    assert_equal "$(server_stat srv total)" 2
}

@test "hold_wait_ms: a holder waits that long for more; stat marks it, and it connects when a permit comes back" {
    start_server srv -1
    downstream_rules 2 hold_wait_ms=60000
    bg_shim "$T/other" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 600000
    local other=$BG_PID
    wait_for file_has "$T/other" '^ok$'
    bg_shim "$T/a" python3 -c "$HOLD_THEN_MORE" "$SERVER_PORT" "$T/a.ready" "$T/go"
    local a=$BG_PID
    wait_for test -e "$T/a.ready"
    touch "$T/go"
    wait_for sem_waiters_is "$NS" 1
    run "$BULKHEAD" stat -c "$RULES"
    assert_output --regexp "[ ,]$a\(1\+waits\)"
    kill "$other"
    wait_for -t 20 file_has "$T/a" '^first='
    run cat "$T/a"
    assert_output "first=ok second=ok"
    assert_equal "$(server_stat srv total)" 3
}

# connect_once: one blocking python3 connect under the shim to the server;
# prints "connected" or "refused=ERRNO".
connect_once() {
    timeout 20 env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" python3 -c '
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    print("connected")
except OSError as e:
    print("refused=%d" % e.errno)
' "$SERVER_PORT"
}

@test "a weight above per_process is refused at once; check warns that every connect through it is" {
    start_server srv -1
    WEIGHT=3 downstream_rules 8 "per_process=2"
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "bulkhead: $RULES:7: warning: match: weight=3 exceeds [downstream]'s per_process = 2: every connect through it is refused"
    run connect_once
    assert_output "refused=111"
    assert_equal "$(server_stat srv total)" 0
}

@test "a weight above the common pool is refused at once with the reason; check warns about it" {
    start_server srv -1
    WEIGHT=3 downstream_rules 4 "reserve=2 for program=billing"
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "bulkhead: $RULES:7: warning: match: weight=3 exceeds the 2 permits of [downstream]'s common pool: only its reserves' members can connect through it"
    # Nothing is in use, and a blocking connect comes back at once.
    run connect_once
    assert_output "refused=111"
    run cat "$T/shim.log"
    assert_line --partial "at once: weight 3 exceeds the 2 permits of the common pool"
    assert_equal "$(server_stat srv total)" 0
}
