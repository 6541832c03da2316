#!/usr/bin/env bats
# A process that changes its uid: with setuid(), it is capped in the new
# uid's namespace; with a raw syscall the shim cannot see, the permission
# failure is said in one line and on_failure decides. What counts is what
# the hold server saw and what connect() returned.

load helpers/common
load helpers/uid

setup() { uid_setup; }
teardown() {
    uid_teardown
    [[ -z ${NOBODY_DIR:-} ]] || rm -rf "$NOBODY_DIR"
}

# nobody_rules: $RULES copied where nobody can read them (bats' own
# folders are root's, 0700), for a process that starts or execs as nobody
# and reads its rules then; sets NOBODY_RULES. Its folder takes files
# nobody writes too.
nobody_rules() {
    NOBODY_DIR=$(mktemp -d /tmp/bh-uid-change.XXXXXX)
    chmod 1777 "$NOBODY_DIR"
    NOBODY_RULES="$NOBODY_DIR/rules.ini"
    cp "$RULES" "$NOBODY_RULES"
    chmod 644 "$NOBODY_RULES"
}

@test "a process that setuid()s to nobody is capped in nobody's namespace, which stat -u reads" {
    echo nobody >>"$T/other_users"
    start_server srv -1
    compartment_rules 2
    cat >"$T/drop.py" <<'EOF2'
import os, socket, sys, time
port = int(sys.argv[1])
out = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o600)  # while still root
os.setuid(65534)
held, refused = [], 0
for _ in range(10):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        held.append(s)
    except OSError:
        refused += 1
os.write(out, b"ok=%d refused=%d\n" % (len(held), refused))
time.sleep(600)
EOF2
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        /usr/bin/python3 "$T/drop.py" "$SERVER_PORT" "$T/drop.out" >"$T/drop.log" 2>&1 3>&- &
    track_pid $!
    wait_for grep -qs '^ok=' "$T/drop.out" || fail "$(cat "$T/drop.log")"
    assert_equal "$(cat "$T/drop.out")" "ok=2 refused=8"
    assert_equal "$(server_stat srv open)" 2
    run "$BULKHEAD" stat -n "$NS" -u nobody --json
    assert_success
    assert_output --partial '"name": "downstream", "limit": 2, "in_use": 2'
}

# drop_raw ON_FAILURE: a python process changes its uid with a raw
# syscall the shim cannot see, then connects three times; prints its
# report and its stderr.
drop_raw() {
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
on_failure = $1
[up]
limit = 1
match = 127.0.0.1:$SERVER_PORT
EOF2
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" /usr/bin/python3 -c '
import ctypes, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.syscall(105, 65534) == 0     # SYS_setuid on x86_64
held, ok = [], 0
for _ in range(3):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1]))); ok += 1
    except OSError:
        pass
    held.append(s)
print("ok=%d" % ok)' "$SERVER_PORT" 2>&1
}

@test "a uid change the shim cannot see is a permission failure said in one line, never a silent bypass" {
    [[ $(uname -m) == x86_64 ]] || skip "the raw syscall number is x86_64's"
    start_server srv -1
    run drop_raw closed
    assert_line ok=0
    assert_line --regexp "^bulkhead: namespace \"$NS\" of uid 0: permission denied: python3\[[0-9]+\] runs as uid 65534 now, changed without setuid\(\) or its kin \(a raw syscall\?\); refusing what the rules match \(on_failure = closed\)$"
    assert_equal "$(grep -c 'permission denied' <<<"$output")" 1
    assert_equal "$(server_stat srv total)" 0
    run drop_raw open
    assert_line ok=3
    assert_line --partial "permission denied: python3["
    assert_line --partial "connections pass unlimited (on_failure = open)"
}

# under_shim OUT CMD...: CMD as root under the shim and $RULES, in the
# background (bg), stdout to OUT.
under_shim() {
    local out=$1
    shift
    bg "$out" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$@"
}

@test "a thread waiting for a permit waits on through a sibling's setuid() and connects when the permit frees" {
    start_server srv -1
    compartment_rules 1 wait_ms=20000
    under_shim "$T/holder.out" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    local holder=$BG_PID
    wait_for grep -qx ok "$T/holder.out"
    under_shim "$T/wait.out" "$CLIENTS/uid_threads" wait 127.0.0.1 "$SERVER_PORT" "$T/setuid.done"
    wait_for test -s "$T/setuid.done" || fail "$(cat "$T/wait.out.err")"
    kill "$holder"
    wait_for grep -q '^waiter=' "$T/wait.out" || fail "$(cat "$T/wait.out.err")"
    assert_equal "$(cat "$T/wait.out")" "waiter=ok"
    assert_equal "$(server_stat srv total)" 2
}

@test "connects from threads while a sibling moves the euid with setresuid() are never refused, and every permit comes back to its namespace" {
    echo nobody >>"$T/other_users"
    start_server srv -1
    compartment_rules 5000
    under_shim "$T/storm.out" "$CLIENTS/uid_threads" storm 127.0.0.1 "$SERVER_PORT" 4 40 65534
    wait_for -t 60 grep -q '^changes=' "$T/storm.out" || fail "$(cat "$T/storm.out.err")"
    run cat "$T/storm.out"
    assert_line changes=40
    assert_equal "${#lines[@]}" 2       # ok= and changes=: no errno
    local ok
    ok=$(out_value ok)
    ((ok > 0)) || fail "no connect at all"
    assert_equal "$(server_stat srv total)" "$ok"
    run cat "$T/storm.out.err"
    refute_output --partial "raw syscall"
    refute_output --partial "permission denied"
    # The storm's process lives on as root, holding nothing. Each
    # connection's permit went back where it was taken, root's too when a
    # thread closed it as nobody (at the storm's next uid call): at limit
    # 3, three connections get one in each namespace, open together.
    run "$BULKHEAD" set -n "$NS" -u nobody downstream limit=3
    assert_success
    nobody_rules
    run "${AS_NOBODY[@]}" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$NOBODY_RULES" \
        "$CLIENTS/mt_client" 127.0.0.1 "$SERVER_PORT" 4 all="$T/srv.stats"
    assert_success
    assert_line ok=3
    run "$BULKHEAD" set -n "$NS" downstream limit=3
    assert_success
    run env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        "$CLIENTS/mt_client" 127.0.0.1 "$SERVER_PORT" 4 all="$T/srv.stats"
    assert_success
    assert_line ok=3
}

@test "a permit root's namespace refused back while the process ran as nobody is given back once, at its next seteuid(0), not by a forked child's" {
    echo nobody >>"$T/other_users"
    start_server srv -1
    compartment_rules 1
    # connect as root, seteuid(nobody), close: refused, so owed; a child
    # forked then calls seteuid(0) too, and stays, before the parent does
    setsid env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$CLIENTS/uid_threads" owe \
        127.0.0.1 "$SERVER_PORT" 65534 "$T/owe.done" >"$T/owe.out" 2>&1 3>&- &
    echo $! >>"$T/groups"
    wait_for test -s "$T/owe.done" || fail "$(cat "$T/owe.out")"
    assert_equal "$(cat "$T/owe.done")" ok
    # limit 1: exactly one of two connects gets a permit, as if the first
    # connection had never been
    run env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        "$CLIENTS/mt_client" 127.0.0.1 "$SERVER_PORT" 2 all="$T/srv.stats"
    assert_success
    assert_line ok=1
    assert_equal "$(server_stat srv max)" 1
}

@test "exec after a drop to nobody hands the new image nobody's connection, not root's: at limit 1 nobody gets exactly one, root none until the process exits" {
    echo nobody >>"$T/other_users"
    start_server srv -1
    compartment_rules 1
    nobody_rules
    # root's connection, then nobody's; exec; the new image closes both
    setsid env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$NOBODY_RULES" "$CLIENTS/uid_threads" \
        handoff 127.0.0.1 "$SERVER_PORT" 65534 "$NOBODY_DIR/handoff.done" \
        >"$T/handoff.out" 2>&1 3>&- &
    local group=$!
    echo "$group" >>"$T/groups"
    wait_for test -s "$NOBODY_DIR/handoff.done" || fail "$(cat "$T/handoff.out")"
    run "${AS_NOBODY[@]}" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$NOBODY_RULES" \
        "$CLIENTS/mt_client" 127.0.0.1 "$SERVER_PORT" 2 all="$T/srv.stats"
    assert_success
    assert_line ok=1
    # root's permit is held by the process, which can never reach root's
    # namespace again: refused until it exits, then given back by the kernel
    run env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$CLIENTS/connect_hold" \
        127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    kill -KILL -- "-$group"
    wait_for -t 5 group_gone "$group"
    run env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$CLIENTS/connect_hold" \
        127.0.0.1 "$SERVER_PORT" 0
    assert_success
}

@test "a root daemon that connects as its user between seteuid() calls gives each permit back at its close" {
    echo nobody >>"$T/other_users"
    start_server srv -1
    compartment_rules 1
    under_shim "$T/daemon.out" "$CLIENTS/uid_threads" bracket 127.0.0.1 "$SERVER_PORT" 65534 5 close "$T/daemon.done"
    wait_for test -s "$T/daemon.done" || fail "$(cat "$T/daemon.out.err")"
    run cat "$T/daemon.out"
    assert_output ok=5
    # the daemon still runs: nobody's other processes get the whole limit
    nobody_rules
    nobody_connect "$NOBODY_RULES"
    assert_success
    assert_line ok
    assert_equal "$(server_stat srv total)" 6
}

@test "stat shows a root daemon holding connections it made as its user across seteuid() calls as one holder" {
    echo nobody >>"$T/other_users"
    start_server srv -1
    compartment_rules 5
    under_shim "$T/daemon.out" "$CLIENTS/uid_threads" bracket 127.0.0.1 "$SERVER_PORT" 65534 3 keep "$T/daemon.done"
    local daemon=$BG_PID
    wait_for test -s "$T/daemon.done" || fail "$(cat "$T/daemon.out.err")"
    assert_equal "$(cat "$T/daemon.out")" ok=3
    run "$BULKHEAD" stat -n "$NS" -u nobody --json
    assert_success
    assert_output --partial "\"holders\": [{\"pid\": $daemon, \"permits\": 3"
    assert_equal "$(grep -o '"pid"' <<<"$output" | wc -l)" 1
}
