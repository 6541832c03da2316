#!/usr/bin/env bats
# io_timeout_ms for programs that wait in their own event loop (node,
# haproxy, python asyncio): their sockets are non-blocking, so no receive
# blocks for the kernel's SO_RCVTIMEO to end. Against a silent server
# (accepts, reads, never answers), each must see a failure between
# io_timeout_ms and io_timeout_ms + 1 s after its request, and its permit
# must come back: at limit 1, a second request is admitted (the shim
# would refuse it at once otherwise) and fails the same way. The
# watchdog's thread exists only where it has something to time, and the
# fd number a timed socket leaves behind is never hit.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

IO_MS=700

# The program prints, per request, what it saw and after how many ms;
# elapsed_ok LINE: that time is within [IO_MS, IO_MS + 1000].
elapsed_ok() {
    local ms=${1##* }
    ((ms >= IO_MS && ms <= IO_MS + 1000)) || fail "after $ms ms: $1"
}

@test "node http.get to a silent server: an ETIMEDOUT error after io_timeout_ms, and the permit comes back; without the shim it still waits" {
    py_server quiet "$SILENT"
    compartment_rules 1 io_timeout_ms=$IO_MS
    local js='
const http = require("http");
function get(n) {
  const start = Date.now();
  const req = http.get({ host: "127.0.0.1", port: Number(process.argv[1]), agent: false },
                       () => console.log("answered"));
  req.on("error", (e) => {
    console.log(`request ${n}: ${e.code} ${Date.now() - start}`);
    if (n < 2) get(n + 1);
  });
}
get(1);
'
    run run_shim timeout 20 node -e "$js" "$SERVER_PORT"
    assert_success
    assert_equal "${#lines[@]}" 2
    assert_line --index 0 --regexp '^request 1: ETIMEDOUT [0-9]+$'
    assert_line --index 1 --regexp '^request 2: ETIMEDOUT [0-9]+$'
    elapsed_ok "${lines[0]}"
    elapsed_ok "${lines[1]}"
    run timeout 2 node -e "$js" "$SERVER_PORT"
    assert_equal "$status" 124
    assert_output ""
}

@test "python asyncio reading from a silent server: TimeoutError (errno 110) after io_timeout_ms, and the permit comes back" {
    py_server quiet "$SILENT"
    compartment_rules 1 io_timeout_ms=$IO_MS
    run run_shim timeout 20 python3 -c '
import asyncio, sys, time
async def request(n):
    reader, writer = await asyncio.open_connection("127.0.0.1", int(sys.argv[1]))
    writer.write(b"GET / HTTP/1.0\r\n\r\n")
    start = time.monotonic()
    try:
        print("request %d: answered %r" % (n, await reader.read(100)))
    except OSError as e:
        print("request %d: errno=%s %s %d" % (n, e.errno, type(e).__name__,
                                              (time.monotonic() - start) * 1000))
    writer.close()
async def main():
    await request(1)
    await request(2)
asyncio.run(main())
' "$SERVER_PORT"
    assert_success
    assert_equal "${#lines[@]}" 2
    assert_line --index 0 --regexp '^request 1: errno=110 TimeoutError [0-9]+$'
    assert_line --index 1 --regexp '^request 2: errno=110 TimeoutError [0-9]+$'
    elapsed_ok "${lines[0]}"
    elapsed_ok "${lines[1]}"
}

port_listening() {
    ss -Htln "( sport = :$1 )" | grep -q .
}

# The silent server's established connections, as the kernel sees them.
server_connections() {
    ss -Htn state established "( sport = :$SERVER_PORT )" | wc -l
}

@test "haproxy as a reverse proxy with timeout server 30s: a 502 after io_timeout_ms, its server connection closed, and the permit back for the next request" {
    command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
    py_server quiet "$SILENT"
    compartment_rules 1 io_timeout_ms=$IO_MS
    local port
    port=$(free_port)
    haproxy_config "$port" >"$T/haproxy.cfg"
    bg_shim "$T/haproxy" haproxy -db -f "$T/haproxy.cfg"
    wait_for port_listening "$port" || fail "haproxy did not start: $(cat "$T/haproxy.err")"
    local i ms
    for i in 1 2; do
        run curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 20 \
            "http://127.0.0.1:$port/"
        assert_success
        ms=$(awk '{ printf "%d", $2 * 1000 }' <<<"$output")
        assert_equal "${output%% *}" 502   # 503 would be the shim refusing it
        elapsed_ok "request $i: $ms"
        wait_for -t 5 test "$(server_connections)" -eq 0
    done
}

@test "the fd number a timed socket leaves behind: a new connection on it is not hit; a blocking one gets no watchdog, a non-blocking one does" {
    py_server quiet "$SILENT"
    compartment_rules 1 io_timeout_ms=$IO_MS
    run run_shim timeout 20 python3 -c '
import select, socket, sys, time
port, io_s = int(sys.argv[1]), int(sys.argv[2]) / 1000
def threads():
    return [l.split()[1] for l in open("/proc/self/status") if l.startswith("Threads:")][0]
blocking = socket.create_connection(("127.0.0.1", port))
blocking.sendall(b"GET / HTTP/1.0\r\n\r\n")
print("blocking: threads", threads())
blocking.close()
def opened():
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    select.select([], [s], [], 5)
    s.send(b"GET / HTTP/1.0\r\n\r\n")
    return s
first = opened()
print("non-blocking: threads", threads())
number = first.fileno()
time.sleep(io_s * 0.8)          # its deadline is near: close it, and at once
first.close()                   # a new one takes its number (and its permit)
second = opened()
print("same number:", second.fileno() == number)
readable, _, _ = select.select([second], [], [], io_s * 0.6)  # past the first deadline
print("second after the first deadline:", "hit" if readable else "untouched")
readable, _, _ = select.select([second], [], [], io_s + 1)
try:
    second.recv(100)
    print("second: EOF")
except OSError as e:
    print("second: errno=%s" % e.errno)
' "$SERVER_PORT" "$IO_MS"
    assert_success
    assert_lines "blocking: threads 1" "non-blocking: threads 2" "same number: True" \
                 "second after the first deadline: untouched" "second: errno=110"
}

@test "a forked child has no watchdog thread until it needs one: then its own request times out too, as the parent's does" {
    # Under the preloaded ASan runtime (GCC 12's) the child's new thread can
    # block for good on an allocator lock the fork inherited held (seen
    # waiting on a futex in ASan's allocator region); glibc's malloc is
    # fork-safe, and the plain shim passes this every time.
    [[ -z ${ASAN_OPTIONS:-} ]] || skip "ASan's allocator is not fork-safe for a thread started in the child"
    py_server quiet "$SILENT"
    compartment_rules 2 io_timeout_ms=$IO_MS
    run run_shim timeout 20 python3 -c '
import os, select, socket, sys
port, io_s = int(sys.argv[1]), int(sys.argv[2]) / 1000
def threads():
    return [l.split()[1] for l in open("/proc/self/status") if l.startswith("Threads:")][0]
def request():
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    select.select([], [s], [], 5)
    s.send(b"GET / HTTP/1.0\r\n\r\n")
    return s
def outcome(who, s):
    select.select([s], [], [], io_s + 1.5)
    try:
        s.recv(100)
        return "%s: EOF" % who
    except OSError as e:
        return "%s: errno=%s" % (who, e.errno)
parents = request()
pid = os.fork()
if pid == 0:
    print("child: threads", threads(), flush=True)
    mine = request()
    print("child: threads", threads(), flush=True)
    print(outcome("child", mine), flush=True)
    os._exit(0)
os.waitpid(pid, 0)  # first, so that the two never write at once
print(outcome("parent", parents), flush=True)
' "$SERVER_PORT" "$IO_MS"
    assert_success
    assert_lines "child: threads 1" "child: threads 2" "child: errno=110" "parent: errno=110"
}

@test "a request sent in many writes over longer than io_timeout_ms is not cut; its deadline runs from its last write" {
    py_server quiet "$SILENT"
    compartment_rules 1 io_timeout_ms=$IO_MS
    run run_shim timeout 20 python3 -c '
import select, socket, sys, time
port, io_s = int(sys.argv[1]), int(sys.argv[2]) / 1000
s = socket.socket()
s.setblocking(False)
s.connect_ex(("127.0.0.1", port))
select.select([], [s], [], 5)
end = time.monotonic() + io_s * 2.5
while time.monotonic() < end:   # an upload: a write every io_timeout_ms / 4
    s.send(b"x")
    last = time.monotonic()
    readable, _, _ = select.select([s], [], [], io_s / 4)
    if readable:
        print("cut during the upload")
        sys.exit(1)
print("upload: untouched")
select.select([s], [], [], io_s + 1.5)
try:
    s.recv(100)
    print("then: EOF")
except OSError as e:
    print("then: errno=%s %d" % (e.errno, (time.monotonic() - last) * 1000))
' "$SERVER_PORT" "$IO_MS"
    assert_success
    assert_line --index 0 "upload: untouched"
    assert_line --index 1 --regexp '^then: errno=110 [0-9]+$'
    elapsed_ok "${lines[1]}"
}

@test "no watchdog thread in a compartment without io_timeout_ms, however its sockets are used" {
    py_server quiet "$SILENT"
    compartment_rules 1
    run run_shim timeout 20 python3 -c '
import select, socket, sys
s = socket.socket()
s.setblocking(False)
s.connect_ex(("127.0.0.1", int(sys.argv[1])))
select.select([], [s], [], 5)
s.send(b"GET / HTTP/1.0\r\n\r\n")
select.select([s], [], [], 0.3)
print("threads", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Threads:")][0])
' "$SERVER_PORT"
    assert_success
    assert_output "threads 1"
}
