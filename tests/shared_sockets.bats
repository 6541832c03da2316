#!/usr/bin/env bats
# The permit follows the socket, not the process that connected: a copy
# kept by a forked child, an exec'd program or a process the fd was passed
# to (SCM_RIGHTS) keeps the permit until the last copy closes, so the
# server never sees more than the limit; once every copy is gone (closed,
# exited, or SIGKILLed) the permit is back. Every count here is the test
# server's.

load helpers/common

setup() {
    bh_setup
    start_server srv -1
    PORT=$SERVER_PORT
    compartment_rules 1 wait_ms=0
}
# Children the test does not track end once go exists (or $T is gone).
teardown() {
    touch "$T/go"
    bh_teardown
}

# The server has no connection open.
server_idle() {
    [[ $(server_stat srv open) == 0 ]]
}

# A fresh client under the shim gets a connection (every permit is back).
assert_new_connection_gets_in() {
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$PORT" 0
    assert_success
    assert_line ok
}

# The shell loop of the problem: connect, leave a copy with a background
# child ($1: the child's command), close the shell's own copy; five times.
shell_loop() {
    cat >"$T/loop.sh" <<EOF
for i in 1 2 3 4 5; do
    if exec 3<>/dev/tcp/127.0.0.1/$PORT; then
        $1 &
        exec 3>&-
        echo "conn\$i=ok"
    else
        echo "conn\$i=refused"
    fi
done
touch "$T/looped"
wait
EOF
    bg_shim "$T/loop.out" bash "$T/loop.sh"
    LOOP_PID=$BG_PID
    wait_for test -e "$T/looped"
}

@test "fork: a background subshell keeps the /dev/tcp connection; the shell's close gives nothing back" {
    shell_loop "{ until [ -e '$T/go' ] || [ ! -d '$T' ]; do sleep 0.02; done; }"
    run cat "$T/loop.out"
    assert_lines conn1=ok conn2=refused conn3=refused conn4=refused conn5=refused
    [[ $(server_stat srv max) == 1 ]] || fail "server saw $(server_stat srv max) at once"
    [[ $(server_stat srv open) == 1 ]]
    touch "$T/go"
    wait_pid "$LOOP_PID"
    wait_for server_idle
    assert_new_connection_gets_in
}

@test "fork+exec: a program started in the background keeps the connection past the shell's close" {
    shell_loop "bash -c 'until [ -e \"\$1/go\" ] || [ ! -d \"\$1\" ]; do sleep 0.02; done' _ '$T'"
    run cat "$T/loop.out"
    assert_lines conn1=ok conn2=refused conn3=refused conn4=refused conn5=refused
    [[ $(server_stat srv max) == 1 ]] || fail "server saw $(server_stat srv max) at once"
    touch "$T/go"
    wait_pid "$LOOP_PID"
    wait_for server_idle
    assert_new_connection_gets_in
}

# pass.py send SOCKPATH PORT COUNT DONE / pass.py receive SOCKPATH READY GO:
# the sender connects COUNT times, passes each connection to the receiver
# (socket.send_fds) and closes its own copy; the receiver keeps every fd
# it gets until GO exists.
write_pass_py() {
    cat >"$T/pass.py" <<'EOF'
import os, socket, sys, time
role, path = sys.argv[1], sys.argv[2]
if role == "receive":
    ready, go = sys.argv[3], sys.argv[4]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    open(ready, "w").close()
    peer, _ = listener.accept()
    kept = []
    while True:
        msg, fds, _, _ = socket.recv_fds(peer, 16, 4)
        if not msg:
            break
        kept += [socket.socket(fileno=fd) for fd in fds]
        peer.sendall(b"k")
    print("received=%d" % len(kept), flush=True)
    while not os.path.exists(go) and os.path.isdir(os.path.dirname(go)):
        time.sleep(0.02)
else:
    port, count, done = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.connect(path)
    for i in range(count):
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", port))
        except OSError as e:
            print("conn%d=refused" % (i + 1), flush=True)
            s.close()
            continue
        socket.send_fds(unix, [b"x"], [s.fileno()])
        unix.recv(1)
        s.close()
        print("conn%d=ok" % (i + 1), flush=True)
    unix.close()
    open(done, "w").close()
EOF
}

@test "SCM_RIGHTS: a connection passed to another process and closed by the sender keeps its permit" {
    write_pass_py
    bg_shim "$T/receiver.out" python3 "$T/pass.py" receive "$T/pass.sock" "$T/ready" "$T/go"
    local receiver=$BG_PID
    wait_for test -e "$T/ready"
    run run_shim python3 "$T/pass.py" send "$T/pass.sock" "$PORT" 5 "$T/sent"
    assert_success
    assert_lines conn1=ok conn2=refused conn3=refused conn4=refused conn5=refused
    [[ $(server_stat srv max) == 1 ]] || fail "server saw $(server_stat srv max) at once"
    [[ $(server_stat srv open) == 1 ]]
    run "$BULKHEAD" stat -c "$RULES" --json
    assert_output --partial '"in_use": 1,'
    assert_output --partial '"shared": 1, "shared_permits": 1,'
    # The table's HOLDERS says who holds the permit in use: the share.
    run "$BULKHEAD" stat -c "$RULES"
    assert_line --regexp ' shared\(1\)$'
    touch "$T/go"
    wait_pid "$receiver"
    run cat "$T/receiver.out"
    assert_line received=1
    wait_for server_idle
    assert_new_connection_gets_in
}

# prefork.py PORT WORKERS READY GO: opens the upstream connection, forks
# WORKERS workers that inherit it, closes its own copy, then tries a second
# connection (printed) and waits for GO; each worker waits for GO too.
write_prefork_py() {
    cat >"$T/prefork.py" <<'EOF'
import os, socket, sys, time
port, workers, ready, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
upstream = socket.create_connection(("127.0.0.1", port))
pids = []
for _ in range(workers):
    pid = os.fork()
    if pid == 0:
        while not os.path.exists(go) and os.path.isdir(os.path.dirname(go)):
            time.sleep(0.02)
        os._exit(0)
    pids.append(pid)
upstream.close()
try:
    socket.create_connection(("127.0.0.1", port)).close()
    print("second=ok", flush=True)
except OSError:
    print("second=refused", flush=True)
with open(ready, "w") as f:
    f.write(" ".join(map(str, pids)) + "\n")
for pid in pids:
    os.waitpid(pid, 0)
print("workers=done", flush=True)
EOF
}

@test "prefork: workers keep the parent's upstream connection; SIGKILL of the last holder gives the permit back" {
    write_prefork_py
    bg_shim "$T/prefork.out" python3 "$T/prefork.py" "$PORT" 3 "$T/ready" "$T/go"
    local parent=$BG_PID
    wait_for test -s "$T/ready"
    run cat "$T/prefork.out"
    assert_line second=refused
    [[ $(server_stat srv max) == 1 ]] || fail "server saw $(server_stat srv max) at once"
    local -a workers
    read -r -a workers <"$T/ready"
    track_pid "${workers[0]}"; track_pid "${workers[1]}"; track_pid "${workers[2]}"
    # Two workers end normally, the last holder is killed.
    kill -STOP "${workers[2]}"
    touch "$T/go"
    wait_for pid_done "${workers[0]}"
    wait_for pid_done "${workers[1]}"
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$PORT" 0
    assert_failure
    assert_line ECONNREFUSED
    kill -KILL "${workers[2]}"
    wait_pid "$parent"
    wait_for server_idle
    assert_new_connection_gets_in
    [[ $(server_stat srv max) == 1 ]] || fail "server saw $(server_stat srv max) at once"
}

# many.py PORT COUNT READY GO: opens COUNT connections (all must get in),
# forks a child that keeps them all until GO, closes its own copies and
# exits; READY gets the child's pid. third.py PORT TRIES: tries TRIES
# more connections at once, holds those that got in and prints how many.
write_many_py() {
    cat >"$T/many.py" <<'PY'
import os, resource, socket, sys, time
port, count, ready, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
connections = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
child = os.fork()
if child == 0:
    while not os.path.exists(go) and os.path.isdir(os.path.dirname(go)):
        time.sleep(0.02)
    os._exit(0)
for c in connections:
    c.close()
with open(ready + ".tmp", "w") as f:
    f.write("%d\n" % child)
os.rename(ready + ".tmp", ready)
PY
    cat >"$T/third.py" <<'PY'
import socket, sys
port, tries = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(tries):
    try:
        held.append(socket.create_connection(("127.0.0.1", port)))
    except OSError:
        pass
print("third=%d" % len(held), flush=True)
PY
}

@test "4,200 shared sockets at limit 4,200: the parent's exit gives none back while the child holds them" {
    ulimit -n 12000 2>/dev/null || skip "needs an fd limit of 12,000 for the server"
    local count=4200
    start_server many -1
    PORT=$SERVER_PORT
    compartment_rules "$count" wait_ms=0
    write_many_py
    bg_shim "$T/many.out" python3 "$T/many.py" "$PORT" "$count" "$T/ready" "$T/go"
    local parent=$BG_PID
    wait_for -t 120 test -s "$T/ready"
    track_pid "$(cat "$T/ready")"
    wait_pid "$parent"
    run run_shim python3 "$T/third.py" "$PORT" 200
    assert_success
    local max
    max=$(server_stat many max)
    ((max <= count)) || fail "server saw $max at once (limit $count)"
    assert_line third=0
    [[ $(server_stat many open) == "$count" ]]
    run "$BULKHEAD" stat -c "$RULES"
    assert_line --regexp "^shared-socket records: 4200 of [0-9,]+ in use"
    touch "$T/go"
    wait_for -t 60 server_open_is many 0
    run run_shim python3 "$T/third.py" "$PORT" 1
    assert_line third=1
}

# fill.py COUNT READY GO ADDRESS...: COUNT connections (fewer than an
# fd limit of 20,000 allows) spread over 8
# listeners per ADDRESS that never accept (their queues hold them), a
# forked child that exits at once (so every connection gets a record),
# then held until GO; READY once the records are made.
write_fill_py() {
    cat >"$T/fill.py" <<'PY'
import os, socket, sys, time
count, ready, go, addresses = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
listeners = []
for address in addresses:
    for _ in range(8):
        listener = socket.socket()
        listener.bind((address, 0))
        listener.listen(4096)
        listeners.append(listener)
held = [socket.create_connection(listeners[i % len(listeners)].getsockname())
        for i in range(count)]
child = os.fork()
if child == 0:
    os._exit(0)
os.waitpid(child, 0)
open(ready, "w").close()
while not os.path.exists(go) and os.path.isdir(os.path.dirname(go)):
    time.sleep(0.05)
PY
    cat >"$T/pass.py" <<'PY'
import errno, socket, sys
port = int(sys.argv[1])
connection = socket.create_connection(("127.0.0.1", port))
here, there = socket.socketpair()
try:
    socket.send_fds(here, [b"x"], [connection.fileno()])
    print("pass=sent", flush=True)
except OSError as e:
    print("pass=%s" % errno.errorcode[e.errno], flush=True)
PY
}

@test "past the 65,536 records: a forked child's copies keep the cap after the parent exits, and SCM_RIGHTS is refused" {
    (($(ulimit -n) >= 17000)) || skip "needs an fd limit of 17,000 for a filler's connections"
    local count=3 filler
    # Three filler compartments (a limit is at most 32,767) whose 65,536
    # connections fill the namespace's socket records.
    {
        printf '[global]\nnamespace = %s\n' "$NS"
        printf '[downstream]\nlimit = %s\nwait_ms = 0\nmatch = 127.0.0.1:%s\n' "$count" "$PORT"
        for a in 2 3 4; do
            printf '[fill%s]\nlimit = 22000\nwait_ms = 0\nmatch = 127.0.0.%s:*\n' "$a" "$a"
        done
    } >"$RULES"
    write_fill_py
    for filler in 1 2 3 4; do
        bg_shim "$T/fill$filler.out" python3 "$T/fill.py" 16384 "$T/filled$filler" "$T/go" \
            127.0.0.2 127.0.0.3 127.0.0.4
    done
    for filler in 1 2 3 4; do
        wait_for -t 300 test -e "$T/filled$filler" ||
            fail "filler $filler did not finish: $(cat "$T/fill$filler.out.err")"
    done
    run "$BULKHEAD" stat -c "$RULES"
    assert_line --regexp "^shared-socket records: 65536 of 65536 in use"

    # A counted fd passed with the table full: the send fails, as the
    # kernel's own limit on fds in flight does.
    run run_shim python3 "$T/pass.py" "$PORT"
    assert_success
    assert_line pass=ETOOMANYREFS

    write_many_py
    bg_shim "$T/many.out" python3 "$T/many.py" "$PORT" "$count" "$T/ready" "$T/held"
    local parent=$BG_PID
    wait_for -t 60 test -s "$T/ready"
    track_pid "$(cat "$T/ready")"
    wait_pid "$parent"
    run run_shim python3 "$T/third.py" "$PORT" 5
    assert_success
    local max
    max=$(server_stat srv max)
    ((max <= count)) || fail "server saw $max at once (limit $count)"
    assert_line third=0
    # Once the child is gone, its permits are back.
    touch "$T/held"
    wait_for -t 30 server_open_is srv 0
    run run_shim python3 "$T/third.py" "$PORT" "$count"
    assert_line third=$count
}
