# shellcheck shell=bash
# The wire as the observer: tcpdump on lo, SYN, FIN and RST segments of the
# test server's port only.

# wire_start: capture until wire_stop; returns once tcpdump is listening.
# Headers only (-s 128) into an 8 MB ring (-B): with the whole 64 KB
# packet a slot, the default ring held 32 packets, and a tcpdump that a
# loaded machine did not run for a moment lost the rest, FINs included,
# so connections that had closed looked open to the report.
wire_start() {
    command -v tcpdump >/dev/null || fail "tcpdump is not installed (make deps)"
    tcpdump -i lo --immediate-mode -n -U -s 128 -B 8192 -w "$T/wire.pcap" \
        "tcp port $SERVER_PORT and (tcp[tcpflags] & (tcp-syn|tcp-fin|tcp-rst) != 0)" \
        2>"$T/wire.err" 3>&- &
    WIRE_PID=$!
    track_pid "$WIRE_PID"
    wait_for file_has "$T/wire.err" "listening on" || fail "tcpdump: $(cat "$T/wire.err")"
}

# wire_stop: ends the capture; a capture that lost packets fails the test
# rather than report on part of the wire.
wire_stop() {
    kill -INT "$WIRE_PID"
    wait "$WIRE_PID" || true
    grep -qx '0 packets dropped by kernel' "$T/wire.err" ||
        fail "tcpdump lost packets: $(cat "$T/wire.err")"
}

# wire_report: "connections=N max_open=M": a connection is open from the
# server's SYN-ACK to the client's first FIN or RST, and max_open is the
# most that were open at once.
wire_report() {
    tcpdump -r "$T/wire.pcap" -n -tt 2>/dev/null | python3 -c '
import re, sys
server = sys.argv[1]
events = []
for line in sys.stdin:
    m = re.match(r"(\S+) IP6? (\S+)\.(\d+) > (\S+)\.(\d+): Flags \[([^\]]*)\]", line)
    if not m:
        continue
    t, sport, dport, flags = float(m.group(1)), m.group(3), m.group(5), m.group(6)
    if sport == server and "S" in flags:
        events.append((t, 1, dport))
    elif dport == server and ("F" in flags or "R" in flags):
        events.append((t, -1, sport))
events.sort()
open_ports, most, total = set(), 0, 0
for t, kind, port in events:
    if kind == 1:
        open_ports.add(port)
        total += 1
    else:
        open_ports.discard(port)
    most = max(most, len(open_ports))
print(f"connections={total} max_open={most}")
' "$SERVER_PORT"
}
