#!/usr/bin/env bats
# connect_timeout_ms and io_timeout_ms along the paths deadlines.bats does
# not take: every blocking receive call, a stall after data, a trickle that
# never pauses for long, a peer that stops reading (zero window: the
# TCP_USER_TIMEOUT half of io_timeout_ms), a program's own shorter
# settimeout, and node's and wget's connects to a blackhole. Each failure
# is the client's own report (Python's errno, node's error code, wget's
# message); where it matters, the same client without the shim is shown
# still waiting, so the deadline is the shim's.

load helpers/common
load helpers/netns

setup() { bh_setup; }
teardown() { bh_teardown; }

@test "every blocking receive call on a silent connection fails with errno 110 after io_timeout_ms" {
    py_server quiet "$SILENT"
    compartment_rules 8 io_timeout_ms=500
    # One connection per call; each sends a request, then receives. The
    # elapsed time is printed in tenths of a second, floored.
    run run_shim timeout 30 python3 -c '
import os, socket, sys, time
port = int(sys.argv[1])
calls = {
    "recv": lambda s: s.recv(100),
    "recv_into": lambda s: s.recv_into(bytearray(100)),
    "recvfrom": lambda s: s.recvfrom(100),
    "recvmsg": lambda s: s.recvmsg(100),
    "read": lambda s: os.read(s.fileno(), 100),
    "readv": lambda s: os.readv(s.fileno(), [bytearray(100)]),
    "makefile": lambda s: s.makefile("rb").readline(),
}
for name, call in calls.items():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"hello\n")
    start = time.monotonic()
    try:
        call(s)
        print(name, "answered")
    except OSError as e:
        tenths = int((time.monotonic() - start) * 10)
        print(name, e.errno, "slow" if tenths >= 5 else "early(%d)" % tenths)
    s.close()
' "$SERVER_PORT"
    assert_success
    assert_lines "recv 110 slow" "recv_into 110 slow" "recvfrom 110 slow" \
        "recvmsg 110 slow" "read 110 slow" "readv 110 slow" "makefile 110 slow"
    # Without the shim os.read() is still waiting.
    run timeout 2 python3 -c '
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
os.read(s.fileno(), 100)
' "$SERVER_PORT"
    assert_equal "$status" 124
}

@test "io_timeout_ms is per receive: a stall after data still fails with errno 110" {
    py_server stall "$BADSERVER" --mode trickle --every-ms 50 --bytes 3 --stall
    compartment_rules 8 io_timeout_ms=500
    run run_shim timeout 20 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
got = 0
try:
    while True:
        data = s.recv(100)
        if not data:
            print("eof")
            break
        got += len(data)
except OSError as e:
    print("got=%d errno=%s" % (got, e.errno))
' "$SERVER_PORT"
    assert_success
    assert_output "got=3 errno=110"
}

@test "a trickle that never pauses for io_timeout_ms is not cut off, though it lasts longer" {
    # 10 bytes, one every 200 ms: 2 s in all, never 1 s without data.
    py_server drip "$BADSERVER" --mode trickle --every-ms 200 --bytes 10
    compartment_rules 8 io_timeout_ms=1000
    run run_shim timeout 20 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
got = 0
try:
    while True:
        data = s.recv(100)
        if not data:
            break
        got += len(data)
    print("got=%d eof" % got)
except OSError as e:
    print("got=%d errno=%s" % (got, e.errno))
' "$SERVER_PORT"
    assert_success
    assert_output "got=10 eof"
}

@test "a peer that stops reading: a blocking sendall fails with errno 110 after io_timeout_ms; without the shim it still blocks" {
    py_server deaf "$BADSERVER" --mode deaf
    compartment_rules 8 io_timeout_ms=1000
    # 64 MiB fills both socket buffers; then the window is zero and the
    # kernel's TCP_USER_TIMEOUT ends the connection.
    run run_shim timeout 20 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
try:
    s.sendall(b"x" * (64 << 20))
    print("sent")
except OSError as e:
    print("errno=%s %s" % (e.errno, e.strerror))
' "$SERVER_PORT"
    assert_success
    assert_output "errno=110 Connection timed out"
    run timeout 3 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"x" * (64 << 20))
' "$SERVER_PORT"
    assert_equal "$status" 124
}

@test "a program's own shorter settimeout keeps its own timeout (no errno), not the shim's 110" {
    py_server quiet "$SILENT"
    compartment_rules 8 io_timeout_ms=5000
    run run_shim timeout 20 python3 -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(0.2)
s.sendall(b"hello\n")
start = time.monotonic()
try:
    s.recv(100)
    print("answered")
except socket.timeout as e:
    print("timeout errno=%s %s %s" % (e.errno, e, "fast" if time.monotonic() - start < 4 else "slow"))
except OSError as e:
    print("errno=%s" % e.errno)
' "$SERVER_PORT"
    assert_success
    assert_output "timeout errno=None timed out fast"
}

@test "node connecting to a blackhole gets an ETIMEDOUT error event after connect_timeout_ms; without the shim it still waits" {
    command -v node >/dev/null || skip "node is not installed"
    py_server hole "$BLACKHOLE"
    compartment_rules 8 connect_timeout_ms=1000
    local js='
const s = require("net").connect(Number(process.argv[1]), "127.0.0.1");
s.on("connect", () => { console.log("connected"); s.destroy(); });
s.on("error", (e) => console.log("error " + e.code));
'
    run run_shim timeout 20 node -e "$js" "$SERVER_PORT"
    assert_success
    assert_output "error ETIMEDOUT"
    run timeout 3 node -e "$js" "$SERVER_PORT"
    assert_equal "$status" 124
    refute_output --partial error
}

@test "wget with no timeouts of its own, connecting to a blackhole: 'Connection timed out' after connect_timeout_ms; without the shim it still waits" {
    py_server hole "$BLACKHOLE"
    compartment_rules 8 connect_timeout_ms=1000
    run run_shim timeout 20 wget --timeout=0 --tries=1 -O /dev/null \
        "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$status" 4  # wget's network failure, not timeout(1)'s 124
    assert_output --partial "Connection timed out"
    run timeout 3 wget --timeout=0 --tries=1 -O /dev/null "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$status" 124
}

@test "connect_timeout_ms on a non-blocking connect: send() after the poll reports ETIMEDOUT as well" {
    py_server hole "$BLACKHOLE"
    compartment_rules 8 connect_timeout_ms=1000
    run run_shim timeout 20 "$CLIENTS/nb_learn" 127.0.0.1 "$SERVER_PORT" send 10000
    assert_failure 1
    assert_output "result=ETIMEDOUT"
    run timeout 5 "$CLIENTS/nb_learn" 127.0.0.1 "$SERVER_PORT" send 2000
    assert_failure 3
    assert_output pending
}

@test "non-blocking receives keep their EAGAIN at once (setblocking(False), MSG_DONTWAIT)" {
    py_server quiet "$SILENT"
    compartment_rules 8 io_timeout_ms=500
    run run_shim timeout 20 python3 -c '
import socket, sys, time
port = int(sys.argv[1])
def attempt(name, call):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"hello\n")
    start = time.monotonic()
    try:
        call(s)
        print(name, "answered")
    except OSError as e:
        print(name, e.errno, "at once" if time.monotonic() - start < 0.4 else "late")
    s.close()
def nonblocking(s):
    s.setblocking(False)
    s.recv(100)
attempt("setblocking", nonblocking)
attempt("dontwait", lambda s: s.recv(100, socket.MSG_DONTWAIT))
' "$SERVER_PORT"
    assert_success
    assert_lines "setblocking 11 at once" "dontwait 11 at once"
}

@test "SO_RCVTIMEO: a program's own longer one is cut to io_timeout_ms (110); a shorter one set later keeps its EAGAIN" {
    py_server quiet "$SILENT"
    compartment_rules 8 io_timeout_ms=500
    run run_shim timeout 20 python3 -c '
import socket, struct, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 10, 0))
start = time.monotonic()
try:
    s.recv(100)
except OSError as e:
    print("own 10 s:", e.errno, "before 5 s" if time.monotonic() - start < 5 else "late")
# After the shim armed its deadline, the program asks for 200 ms.
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200000))
try:
    s.recv(100)
except OSError as e:
    print("own 200 ms:", e.errno)
' "$SERVER_PORT"
    assert_success
    assert_lines "own 10 s: 110 before 5 s" "own 200 ms: 11"
}
