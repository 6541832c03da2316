#!/usr/bin/env bats
# Semantics 12: connect_timeout_ms and io_timeout_ms, seen by real clients
# that set no deadline of their own. A blackhole (a listener whose accept
# queue is full: the kernel drops every SYN) holds a connect for minutes;
# a silent server (accepts, reads, never answers) holds a receive forever.
# Each test shows the client failing with ETIMEDOUT under the shim, and
# still waiting without it: the deadline is the shim's.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

@test "curl to a blackhole, no --connect-timeout: fails with a timeout after connect_timeout_ms; without the shim it still waits" {
    py_server hole "$BLACKHOLE"
    compartment_rules 4 connect_timeout_ms=1000
    run run_shim timeout 20 curl -sS "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$status" 28  # curl's "operation timed out", not timeout(1)'s 124
    assert_output --partial "Failed to connect to 127.0.0.1 port $SERVER_PORT"
    run timeout 3 curl -sS "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$status" 124
}

@test "a blocking python3 connect to a blackhole raises TimeoutError (errno 110)" {
    py_server hole "$BLACKHOLE"
    compartment_rules 4 connect_timeout_ms=1000
    run run_shim timeout 20 python3 -c '
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    print("connected")
except OSError as e:
    print("errno=%s %s" % (e.errno, type(e).__name__))
' "$SERVER_PORT"
    assert_success
    assert_output "errno=110 TimeoutError"
}

@test "a non-blocking connect to a blackhole: poll wakes, SO_ERROR is ETIMEDOUT" {
    py_server hole "$BLACKHOLE"
    compartment_rules 4 connect_timeout_ms=1000
    run run_shim "$CLIENTS/nb_connect" 127.0.0.1 "$SERVER_PORT" 10000
    assert_failure 1
    assert_output "so_error=ETIMEDOUT"
    # Without the shim its own 3 s poll gives up first.
    run "$CLIENTS/nb_connect" 127.0.0.1 "$SERVER_PORT" 3000
    assert_failure 3
    assert_output pending
}

@test "time spent waiting for a permit does not count against connect_timeout_ms" {
    start_server srv -1
    compartment_rules 4 connect_timeout_ms=1000 wait_ms=60000
    sed -i 's/^limit = 4$/limit = 1/' "$RULES"
    # The holder keeps the only permit for 2 s, twice the deadline; the
    # waiter then connects at once: its deadline starts with its SYN.
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 2000
    wait_for file_has "$T/holder" '^ok$'
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_success
    assert_line ok
    assert_equal "$(server_stat srv total)" 2
}

@test "a blocking python3 recv from a silent server fails with errno 110 after io_timeout_ms" {
    py_server quiet "$SILENT"
    compartment_rules 4 io_timeout_ms=500
    run run_shim timeout 20 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
try:
    s.recv(100)
    print("answered")
except OSError as e:
    print("errno=%s %s" % (e.errno, e.strerror))
' "$SERVER_PORT"
    assert_success
    assert_output "errno=110 Connection timed out"
    run timeout 3 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.recv(100)
' "$SERVER_PORT"
    assert_equal "$status" 124
}

@test "a program's own shorter receive timeout keeps its behaviour" {
    py_server quiet "$SILENT"
    compartment_rules 4 io_timeout_ms=5000
    # SO_RCVTIMEO of 200 ms on a blocking socket: EAGAIN, as without the shim.
    run run_shim timeout 20 python3 -c '
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200000))
try:
    s.recv(100)
except OSError as e:
    print("errno=%s" % e.errno)
' "$SERVER_PORT"
    assert_success
    assert_output "errno=11"
}

@test "wget with no timeouts of its own reports a timeout after io_timeout_ms; without the shim it still waits" {
    py_server quiet "$SILENT"
    compartment_rules 4 io_timeout_ms=500
    run run_shim timeout 20 wget --timeout=0 --tries=1 -O /dev/null \
        "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$status" 4  # wget's network failure, not timeout(1)'s 124
    assert_output --partial "Connection timed out"
    run timeout 3 wget --timeout=0 --tries=1 -O /dev/null "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$status" 124
}
