#!/usr/bin/env bats
# Hostile and racy conditions around the shared namespace: processes
# creating it at once, a creator killed half way, a limit lowered while
# holders die, a signal during a wait, and another user's objects under
# our key. The server's count is the observer.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

BULKHEAD="$BH_ROOT/build/bulkhead"

# rules_for NAMESPACE LIMIT [WAIT_MS]
rules_for() {
    write_rules "$RULES" <<EOF
[global]
namespace = $1
[db]
limit = $2
wait_ms = ${3:-0}
match = 127.0.0.1:$SERVER_PORT
EOF
}

# perl_ipc CODE KEY: runs CODE with $key set to KEY (hex, as ns_key
# prints it) folded into key_t's signed 32-bit range.
perl_ipc() {
    perl -MIPC::SysV=IPC_CREAT,IPC_PRIVATE -e '
        our $key = hex($ARGV[0]); $key -= 2**32 if $key >= 2**31;
        eval $ARGV[1]; die $@ if $@' "$2" "$1"
}

@test "8 processes creating a namespace at once, 60 times: none runs unlimited" {
    start_server web -1
    local trial i pids
    for trial in $(seq 1 60); do
        ns_track "$NS-$trial"
        rules_for "$NS-$trial" 0
        pids=()
        for i in 1 2 3 4 5 6 7 8; do
            run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0 \
                >"$T/race.$trial.$i.out" 2>"$T/race.$trial.$i.err" 3>&- &
            pids+=($!)
        done
        wait "${pids[@]}" || true
    done
    assert_equal "$(server_stat web total)" 0
    assert_equal "$(cat "$T"/race.*.out | grep -c "^ECONNREFUSED$")" 480
    # Nothing but refusals was said: no "cannot register", no "not limited".
    run grep -h -v '^bulkhead: refused ' "$T"/race.*.err
    assert_output ""
}

# The layout's sizes (permits.c owns them): NSEMS semaphores and a
# SHM_SIZE-byte segment, read from a namespace made for the purpose, which
# is then removed so the test can make ours empty at those sizes.
layout_sizes() {
    run_shim /bin/true
    NSEMS=$(ipcs -s | awk -v k="$(ns_key "$NS")" '$1 == k { print $5 }')
    SHM_SIZE=$(ipcs -m | awk -v k="$(ns_key "$NS")" '$1 == k { print $5 }')
    [[ -n "$NSEMS" && -n "$SHM_SIZE" ]] || fail "no namespace under our key"
    "$BULKHEAD" reset --force -c "$RULES" >/dev/null
}

@test "a creator killed right after semget (set made, never locked or filled): the next process finishes it" {
    start_server web -1
    rules_for "$NS" 1
    layout_sizes
    # The layout's semaphores, all zero, mode 0600, ours: exactly what a
    # creator leaves when it dies between semget and anything else.
    perl_ipc "semget(\$key, $NSEMS, 0600 | IPC_CREAT) // die \"semget: \$!\"" "$(ns_key "$NS")"
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/holder" '^ok$'
    run --separate-stderr run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line ECONNREFUSED
    # One line, the refusal: no stall on a lock, no "running without limits".
    [[ "$stderr" == "bulkhead: refused 127.0.0.1:$SERVER_PORT to [db] at once: full; wait_ms = 0 for connect_hold["*"]" ]] ||
        fail "stderr: $stderr"
    assert_equal "$(server_stat web max)" 1
}

@test "a creator killed after making both objects but before the table: the next process finishes it" {
    start_server web -1
    rules_for "$NS" 1
    layout_sizes
    perl_ipc "semget(\$key, $NSEMS, 0600 | IPC_CREAT) // die; shmget(\$key, $SHM_SIZE, 0600 | IPC_CREAT) // die" \
        "$(ns_key "$NS")"
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/holder" '^ok$'
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_failure 1
    assert_line ECONNREFUSED
    assert_equal "$(server_stat web max)" 1
}

@test "limit lowered from 4 to 1 while holders are killed: a waiter gets in only when none is left" {
    start_server web -1
    rules_for "$NS" 4 3600000
    local i holders=()
    for i in 1 2 3 4; do
        bg_shim "$T/holder.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
        holders+=("$BG_PID")
        wait_for file_has "$T/holder.$i" '^ok$'
    done
    run "$BULKHEAD" set -c "$RULES" db limit=1
    assert_success
    bg_shim "$T/waiter" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for sem_waiters_is "$NS" 1
    # Killed holders give their permits back through SEM_UNDO, past close.
    for i in 0 1 2; do
        kill -KILL "${holders[$i]}"
        wait_for server_open_is web $((3 - i))
    done
    # One holder left, limit 1: the waiter must still wait.
    assert_equal "$(server_stat web total)" 4
    [[ ! -s "$T/waiter" ]] || fail "waiter got in over the lowered limit: $(cat "$T/waiter")"
    kill -KILL "${holders[3]}"
    wait_for file_has "$T/waiter" '^ok$'
    assert_equal "$(server_stat web total)" 5
    assert_equal "$(server_stat web max)" 4
}

@test "a signal during a permit wait ends connect() with EINTR; nothing taken, nothing leaked" {
    start_server web -1
    rules_for "$NS" 1 3600000
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^ok$'
    # An hour's wait: only the alarm can bring the client back.
    run run_shim python3 -c '
import signal, socket, sys
def alarm(signum, frame):
    raise TimeoutError("alarm")
signal.signal(signal.SIGALRM, alarm)
signal.alarm(1)
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])))
except TimeoutError as e:
    print("interrupted by", e)
    sys.exit(0)
print("connected")' "$SERVER_PORT"
    assert_success
    assert_output "interrupted by alarm"
    kill -KILL "$holder"
    wait_for server_open_is web 0
    # Exactly one permit: one more connects, the next is refused.
    rules_for "$NS" 1 0
    bg_shim "$T/after" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
    wait_for file_has "$T/after" '^ok$'
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_line ECONNREFUSED
    assert_equal "$(server_stat web total)" 2
}

# Another user's objects under our key. Tests run as root, the victim; the
# squatter is nobody.
remove_key() {
    ipcrm -S "$1" 2>/dev/null || true
    ipcrm -M "$1" 2>/dev/null || true
}

# squatted_scenario PERL_CODE: nobody runs PERL_CODE under our key; then
# every matched connect is refused, loudly, and the server sees nothing.
squatted_scenario() {
    require_other_user
    start_server web -1
    rules_for "$NS" 5
    local key
    key=$(ns_key "$NS")
    as_nobody perl -MIPC::SysV=IPC_CREAT -e '
        my $key = hex($ARGV[0]); $key -= 2**32 if $key >= 2**31;
        eval $ARGV[1]; die $@ if $@' "$key" "$1"
    run --separate-stderr run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    remove_key "$key"
    assert_failure 1
    assert_line ECONNREFUSED
    [[ "$stderr" == *"key $key holds "*"of uid 65534, not ours (uid 0, mode 0600); ipcrm removes it (root or its owner); refusing every connection the rules match until it is reachable (on_failure = closed)"* ]] ||
        fail "no line naming the squatter: $stderr"
    assert_equal "$(server_stat web total)" 0
}

@test "another user's semaphore set (0666) under our key: never used, every matched connect refused" {
    squatted_scenario 'semget($key, 129, 0666 | IPC_CREAT) // die "semget: $!"'
}

@test "another user's private semaphore set (0600) under our key: not unlimited, refused" {
    squatted_scenario 'semget($key, 129, 0600 | IPC_CREAT) // die "semget: $!"'
}

@test "another user's memory segment (0666) under our key: never used, refused" {
    squatted_scenario 'shmget($key, 4096, 0666 | IPC_CREAT) // die "shmget: $!"'
}

@test "a hostname rule matches AF_INET6 + AI_V4MAPPED answers" {
    require_private_hosts
    make_hosts
    start_server web -1
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
[payments]
limit = 0
match = payments.test:$SERVER_PORT
EOF2
    run hosts_shim python3 -c '
import errno, socket, sys
infos = socket.getaddrinfo("payments.test", int(sys.argv[1]), socket.AF_INET6,
                           socket.SOCK_STREAM, 0, socket.AI_V4MAPPED)
address = infos[0][4]
assert address[0] == "::ffff:127.0.0.1", address
s = socket.socket(socket.AF_INET6)
try:
    s.connect(address)
except OSError as e:
    print(errno.errorcode[e.errno])
    sys.exit(1)
print("ok")' "$SERVER_PORT"
    assert_failure 1
    assert_line ECONNREFUSED
    assert_equal "$(server_stat web total)" 0
}

@test "connect(AF_UNSPEC) gives the permit back; reconnecting elsewhere is admitted afresh" {
    start_server a -1
    start_server b -1
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
[a]
limit = 1
match = 127.0.0.1:$PORT_a
[b]
limit = 0
match = 127.0.0.1:$PORT_b
EOF2
    run --separate-stderr run_shim python3 -c '
import ctypes, errno, socket, sys
port_a, port_b = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port_a))
unspec = ctypes.create_string_buffer(16)          # sa_family 0: AF_UNSPEC
libc = ctypes.CDLL(None, use_errno=True)
assert libc.connect(s.fileno(), unspec, 16) == 0, ctypes.get_errno()
other = socket.create_connection(("127.0.0.1", port_a))   # a is free again
print("a again: ok")
try:
    s.connect(("127.0.0.1", port_b))
    print("b: ok")
except OSError as e:
    print("b:", errno.errorcode[e.errno])' "$PORT_a" "$PORT_b"
    assert_success
    assert_line "a again: ok"
    assert_line "b: ECONNREFUSED"
    assert_equal "$(server_stat b total)" 0
}

@test "a holder that connected at its fd limit is still named by stat" {
    start_server web -1
    rules_for "$NS" 2
    # The socket takes the last fd the process may have, so the shim cannot
    # open /proc to learn its start time.
    bg_shim "$T/holder" python3 -c '
import os, resource, socket, sys, time
free = os.dup(0); os.close(free)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (free + 1, hard))
s = socket.socket()
assert s.fileno() == free
s.connect(("127.0.0.1", int(sys.argv[1])))
print("held", flush=True)
time.sleep(3600)' "$SERVER_PORT"
    local holder=$BG_PID
    wait_for file_has "$T/holder" '^held$'
    # A second process that reaps dead rows on its way in.
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    run "$BULKHEAD" stat --json -c "$RULES"
    assert_success
    [[ "$output" == *"\"pid\": $holder"* ]] || fail "holder $holder not named: $output"
}
