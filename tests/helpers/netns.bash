# shellcheck shell=bash
# A private network namespace per test, so that the kernel's own counters
# are the observer: TcpActiveOpens counts the connects that sent a SYN, and
# inside the namespace nothing but the test connects.
#
# netns_start makes the namespace (lo up) and keeps it alive with a tracked
# `sleep`; in_ns runs a command inside it with nsenter (which execs: the
# pid is the command's, so bg/track_pid and teardown's kills work as
# usual). SysV IPC is not unshared: the shim's permits and breaker are the
# ones `bulkhead` sees from outside.
#
# Needs root (unshare -n, nsenter). Load after helpers/common.

# Nothing listens on it inside a fresh namespace: the kernel refuses.
CLOSED_PORT=7

require_netns() {
    [[ $(id -u) -eq 0 ]] || skip "needs root for unshare -n and nsenter"
    unshare -n true 2>/dev/null || skip "unshare -n is not permitted here"
}

# netns_start: sets NETNS_PID, the holder of the namespace.
netns_start() {
    require_netns
    unshare -n bash -c 'ip link set lo up && echo up >"$1.tmp" && mv "$1.tmp" "$1" &&
        exec sleep 600' _ "$T/netns.ready" 3>&- &
    NETNS_PID=$!
    track_pid "$NETNS_PID"
    wait_for -t 10 test -s "$T/netns.ready" || fail "the network namespace did not start"
}

# in_ns CMD...: CMD in the namespace.
in_ns() {
    nsenter -t "$NETNS_PID" -n -- "$@"
}

# in_ns_shim CMD...: CMD in the namespace, under the shim and this test's rules.
in_ns_shim() {
    nsenter -t "$NETNS_PID" -n -- env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$@"
}

# bg_ns OUT CMD... / bg_ns_shim OUT CMD...: bg inside the namespace.
bg_ns() {
    local out=$1
    shift
    bg "$out" nsenter -t "$NETNS_PID" -n -- "$@"
}
bg_ns_shim() {
    local out=$1
    shift
    bg "$out" nsenter -t "$NETNS_PID" -n -- env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$@"
}

# active_opens: the namespace's TcpActiveOpens (connects that sent a SYN),
# read from outside through the holder's /proc/PID/net.
active_opens() {
    awk '/^Tcp:/ { if (!seen) { for (i = 1; i <= NF; i++) if ($i == "ActiveOpens") c = i; seen = 1; next }
                   print $c }' "/proc/$NETNS_PID/net/snmp"
}

# syns_since N: SYNs sent in the namespace since active_opens said N.
syns_since() {
    echo $(($(active_opens) - $1))
}

# ns_py_server NAME SCRIPT ARGS...: a server script that writes its port
# to --ready, in the namespace; sets SERVER_PORT.
ns_py_server() {
    local name=$1 script=$2
    shift 2
    bg_ns "$T/$name.log" python3 "$script" --ready "$T/$name.ready" "$@"
    wait_for -t 10 test -s "$T/$name.ready" ||
        fail "$name did not start: $(cat "$T/$name.log.err")"
    SERVER_PORT=$(sed -n 1p "$T/$name.ready")
}

# ns_holdserver NAME HOLD_MS [PORT]: holdserver.py in the namespace; sets
# SERVER_PORT. Read its counts with ns_server_stat (its control port is
# in the namespace too; the sync's own connect counts as an active open).
ns_holdserver() {
    local name=$1 hold=$2 port=${3:-0}
    bg_ns "$T/$name.log" python3 "$HOLDSERVER" --host 127.0.0.1 --port "$port" \
        --hold-ms "$hold" --ready "$T/$name.ready" --stats "$T/$name.stats"
    wait_for -t 10 test -s "$T/$name.ready" ||
        fail "server $name did not start: $(cat "$T/$name.log.err")"
    SERVER_PORT=$(sed -n 1p "$T/$name.ready")
}

# ns_server_stat NAME max|total|open
ns_server_stat() {
    local ctl
    ctl=$(sed -n 2p "$T/$1.ready")
    in_ns bash -c 'exec {fd}<>"/dev/tcp/127.0.0.1/$1" && read -r -t 10 line <&"$fd" &&
        [[ "$line" == max=* ]]' _ "$ctl" || fail "server $1 does not answer"
    sed -n "s/.*\\b$2=\\([0-9]*\\).*/\\1/p" "$T/$1.stats"
}

# PY_SEQ: python3 -c "$PY_SEQ" ITEM...: one process, blocking connects to
# 127.0.0.1, one after the other, each closed before the next; prints each
# outcome on one line: "ok", "eof" or the errno number. ITEM is PORT with
# optional suffixes: "x" sends an HTTP request head once connected and
# waits for the answer's first bytes, "r" only waits for bytes; "*N"
# repeats the item N times. "7 7 5000x*2" is two connects to port 7, then
# two exchanges with port 5000.
PY_SEQ='
import re, socket, sys
out = []
for item in sys.argv[1:]:
    m = re.fullmatch(r"(\d+)([xr]?)(?:\*(\d+))?", item)
    port, how, n = int(m.group(1)), m.group(2), int(m.group(3) or 1)
    for _ in range(n):
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", port))
            if how == "x":
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            out.append("ok" if not how or s.recv(100) else "eof")
        except OSError as e:
            out.append(str(e.errno))
        s.close()
print(" ".join(out), flush=True)
'
