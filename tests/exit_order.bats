#!/usr/bin/env bats
# Exits close before they give back. A client that exits without closing
# would otherwise get its permit back from the kernel (SEM_UNDO, exit_sem)
# a moment before its socket is closed (exit_files), and a waiter could
# open a 4th connection while the 3rd was still open. The observer is the
# wire: each connection is open from the server's SYN-ACK to the client's
# FIN, and never more than 3 may be open at once.

load helpers/common
load helpers/wire

# Every test: a server that answers after 100 ms, once $T/release exists,
# limit 3, long waits.
setup() {
    bh_setup
    start_server web 100 127.0.0.1 --hold-until "$T/release"
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
[web]
limit = 3
wait_ms = 60000
match = 127.0.0.1:$SERVER_PORT
EOF2
}
teardown() { bh_teardown; }

CLIENT_COUNT=12

# every_client_in: each client has a connection the server holds or waits
# for a permit (the kernel's count), so they all overlap however slowly a
# loaded machine starts them.
every_client_in() {
    (($(server_stat web open) + $(sem_waiters "$NS") >= CLIENT_COUNT))
}

# on_the_wire CMD...: CLIENT_COUNT copies of CMD at once under the shim, all
# of which must succeed; the wire must show every connection and never more
# than 3 open at once.
on_the_wire() {
    wire_start
    local i pids=()
    for ((i = 1; i <= CLIENT_COUNT; i++)); do
        run_rc "$T/client.$i" run_shim "$@" 3>&- &
        pids+=($!)
        track_pid $!
    done
    wait_for -t 60 every_client_in
    touch "$T/release"
    wait "${pids[@]}" || true
    assert_equal "$(count_rc 0 "$T"/client.*)" "$CLIENT_COUNT"
    server_sync web
    wire_stop
    run wire_report
    assert_output "connections=$CLIENT_COUNT max_open=3"
}

@test "wget exits without closing: never more than 3 open on the wire" {
    on_the_wire wget -q -O /dev/null "http://127.0.0.1:$SERVER_PORT/"
}

@test "exit() without closing: never more than 3 open on the wire" {
    on_the_wire "$CLIENTS/exit_hold" 127.0.0.1 "$SERVER_PORT" exit
}

@test "return from main without closing: never more than 3 open on the wire" {
    on_the_wire "$CLIENTS/exit_hold" 127.0.0.1 "$SERVER_PORT" return
}

@test "_exit and _Exit without closing: never more than 3 open on the wire" {
    on_the_wire "$CLIENTS/exit_hold" 127.0.0.1 "$SERVER_PORT" _exit
    rm -f "$T"/client.* "$T/release"
    on_the_wire "$CLIENTS/exit_hold" 127.0.0.1 "$SERVER_PORT" _Exit
}

@test "python os._exit without closing: never more than 3 open on the wire" {
    on_the_wire python3 -c '
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
while s.recv(4096):
    pass
os._exit(0)' "$SERVER_PORT"
}

# A server that keeps what one client sent until EOF.
SINK='
import socket, sys
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
open(sys.argv[1] + ".tmp", "w").write(str(listener.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
connection, _ = listener.accept()
data = b""
while chunk := connection.recv(4096):
    data += chunk
open(sys.argv[2], "wb").write(data)
'

@test "stdio output buffered on an fdopen()ed socket still goes out at exit" {
    python3 -c "$SINK" "$T/sink.port" "$T/sink.data" 3>&- &
    track_pid $!
    wait_for test -s "$T/sink.port"
    local port
    port=$(cat "$T/sink.port")
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
[sink]
limit = 1
match = 127.0.0.1:$port
EOF2
    run run_shim "$CLIENTS/exit_hold" 127.0.0.1 "$port" return "buffered, never flushed by the program"
    assert_success
    wait_for test -e "$T/sink.data"
    assert_equal "$(cat "$T/sink.data")" "buffered, never flushed by the program"
}
