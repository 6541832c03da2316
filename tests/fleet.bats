#!/usr/bin/env bats
# The fleet: one limit across hosts on Redis, through one `bulkhead agent`
# per host. Three hosts are three namespaces on this machine, each with its
# own agent and fleet_host, sharing one fleet (fleet_name) on a real
# redis-server the test starts on a loopback port. What is asserted is what
# the downstream servers saw, and the agent's own lines where the issue is
# what the operator is told.

load helpers/common
load helpers/cli
load helpers/fleet

setup() { fleet_setup; }
teardown() { bh_teardown; }

# three_hosts LIMIT: Redis, one server, hosts a, b and c sharing LIMIT,
# each with its agent running.
three_hosts() {
    start_redis
    start_server srv -1
    for h in a b c; do host $h "$1" "$SERVER_PORT"; done
    for h in a b c; do start_agent $h; done
}

@test "30 clients spread 18/9/3 over three hosts: the server never sees more than fleet_limit" {
    three_hosts 6
    holders a 18 300
    holders b 9 300
    holders c 3 300
    local pid
    while read -r pid; do
        [[ "$pid" == "$REDIS_PID" || "$pid" == "$AGENT_a" || "$pid" == "$AGENT_b" ||
           "$pid" == "$AGENT_c" ]] && continue
        [[ -d /proc/$pid && "$(cat /proc/$pid/comm)" == connect_hold ]] || continue
        wait_pid "$pid" 60 || true
    done <"$T/pids"
    assert_equal "$(server_stat srv total)" 30
    local max
    max=$(server_stat srv max)
    ((max <= 6)) || fail "the server saw $max at once (fleet_limit 6)"
}

@test "a host with demand gets the idle hosts' headroom within two refreshes: all of fleet_limit" {
    three_hosts 6
    # b and c are idle: their permit of headroom each is capacity nobody
    # else wants only until a wants it.
    holders a 8 60000
    wait_for -t 3 open_is srv 6
    assert_equal "$(server_stat srv max)" 6
}

# lease_calls: Redis's own count of lease calls so far (INFO commandstats).
lease_calls() {
    redis-cli -p "$REDIS_PORT" info commandstats |
        sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p'
}

lease_calls_past() { (($(lease_calls) >= $1)); }

@test "full utilization: two busy hosts and an idle one reach fleet_limit at the server, and ask Redis only at their refreshes" {
    three_hosts 4
    holders a 3 60000
    holders b 3 60000
    wait_for -t 3 open_is srv 4
    assert_equal "$(server_stat srv max)" 4
    # Each busy host holds its share with a connection waiting: asking again
    # would get it nothing, so it asks at its refresh only (5 a second),
    # not every 50 ms. 30 calls from 3 hosts take 2 s at that rate.
    local from t0 ms
    from=$(lease_calls)
    t0=${EPOCHREALTIME/./}
    wait_for lease_calls_past $((from + 30))
    ms=$(((${EPOCHREALTIME/./} - t0) / 1000))
    ((ms >= 1400)) || fail "30 lease calls in $ms ms"
}

@test "new demand on a host with no spare permit is served within a tick, not at its next refresh" {
    REFRESH_MS=5000 LEASE_MS=20000 three_hosts 6
    holders a 2 60000
    wait_for -t 3 open_is srv 2
    # c's first connection takes its permit of headroom; its second finds
    # none free on c, and its agent asks Redis at once.
    holders c 1 60000
    wait_for -t 3 open_is srv 3
    local t0 ms
    t0=${EPOCHREALTIME/./}
    run on c timeout 4 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    ms=$(((${EPOCHREALTIME/./} - t0) / 1000))
    assert_success
    # A tick is 20 ms; the rest is a loaded machine's slack, far below the
    # 5,000 ms refresh.
    ((ms < 1000)) || fail "c's second connection waited $ms ms"
}

@test "a SIGKILLed agent's share goes back to the others within lease + fleet_fallback_ms + refresh" {
    start_redis
    start_server srv -1
    # Redis cannot tell a dead agent from one cut off from it and living on
    # its fallback: it keeps b's share for fleet_fallback_ms past its lease.
    for h in a b c; do host $h 6 "$SERVER_PORT" 'fleet_fallback_ms = 1000'; done
    for h in a b c; do start_agent $h; done
    local i b_clients=()
    for i in 1 2; do
        bg "$T/b.client.$i" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$T/b.ini" \
            "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
        b_clients+=("$BG_PID")
    done
    wait_for -t 3 open_is srv 2
    holders a 6 60000
    wait_for -t 3 open_is srv 6   # a: 6 - b's 2
    kill -KILL "$AGENT_b" "${b_clients[@]}"
    wait_for -t 3 open_is srv 4
    wait_for -t 6 open_is srv 6   # b's lease and reserve ended: its 2 went to a
    # and host b, its agent gone, no longer uses a share: its connects wait
    run on b timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_equal "$status" 124
    assert_equal "$(server_stat srv open)" 6
    assert_equal "$(server_stat srv max)" 6
}

@test "Redis gone: no host grows; each keeps its grant until its lease ends, then falls back" {
    start_redis
    start_server pa -1
    start_server pc -1
    host a 6 "$PORT_pa" 'fleet_fallback = split'
    host c 6 "$PORT_pc" 'fleet_fallback = split'
    start_agent a
    start_agent c
    holders a 4 60000 "$PORT_pa"
    wait_for -t 3 open_is pa 4     # a: 4 in use + 1 of headroom; c: 1 of headroom
    kill -KILL "$REDIS_PID"
    wait_for file_has "$T/agent.c.err" 'keeping'
    # c wants more now: it cannot grow without Redis.
    holders c 3 60000 "$PORT_pc"
    wait_for -t 3 open_is pc 1
    # a falls back to min(its grant 5, 6 / 2 hosts) = 3 once its lease ends:
    # its 4 connections stay; a new one on a does not get in.
    wait_for -t 5 file_has "$T/agent.a.err" 'lease ended without Redis: limit 3'
    run on a timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$PORT_pa" 0
    assert_equal "$status" 124
    assert_equal "$(server_stat pa open)" 4
    assert_equal "$(server_stat pc open)" 1
}

@test "Redis restarted empty: learning mode grants no more than held; then it runs normally" {
    start_redis
    start_server srv -1
    for h in a b; do host $h 4 "$SERVER_PORT"; done
    for h in a b; do start_agent $h; done
    holders a 2 60000
    wait_for -t 3 open_is srv 2
    kill -KILL "$REDIS_PID"
    wait_pid "$REDIS_PID" 10 || true
    start_redis_again
    wait_for -t 5 file_has "$T/agent.a.err" 'learning mode'
    # While learning, b (holding none) may not grow past its holding, and a
    # not past its 2; the server never sees more than the fleet's 4.
    holders b 3 60000
    holders a 2 60000
    wait_for -t 5 open_is srv 4
    local max
    max=$(server_stat srv max)
    ((max <= 4)) || fail "the server saw $max at once (fleet_limit 4)"
}

@test "lowering fleet_limit live: hosts converge, and no connection is cut" {
    start_redis
    start_server srv -1
    for h in a b; do host $h 8 "$SERVER_PORT"; done
    for h in a b; do start_agent $h; done
    holders a 6 60000
    wait_for -t 3 open_is srv 6
    local seen_a seen_b
    seen_a=$(wc -l <"$T/agent.a.err")
    seen_b=$(wc -l <"$T/agent.b.err")
    run "$BULKHEAD" set --fleet -c "$T/a.ini" db limit=3
    assert_success
    assert_output --partial "fleet limit 3"
    # Both converge: b's headroom goes (a holds 6 of 3), a's limit drops.
    wait_for -t 3 logged_after "$T/agent.b.err" "$seen_b" 'limit 1 -> 0'
    wait_for -t 3 logged_after "$T/agent.a.err" "$seen_a" 'limit [0-9]+ -> [0-3]$'
    # The six stay open (nothing cut); new ones on either host wait.
    run on b timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_equal "$status" 124
    run on a timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_equal "$status" 124
    assert_equal "$(server_stat srv open)" 6
}

@test "a wrong password: the agent says so once, and the host stays within its last grant" {
    REDIS_PASSWORD=right start_redis
    start_server srv -1
    echo wrong >"$T/password"
    chmod 600 "$T/password"
    host a 6 "$SERVER_PORT" "fleet_password_file = $T/password"
    start_agent a
    wait_for file_has "$T/agent.a.err" 'WRONGPASS|invalid password|AUTH'
    run grep -cE 'WRONGPASS|invalid password|AUTH' "$T/agent.a.err"
    assert_output 1
    # No grant was ever made: the host has no share, so nothing gets through.
    run on a timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_equal "$status" 124
    assert_equal "$(server_stat srv total)" 0
}

@test "the lease script, driven by 2,000 random reports from 5 hosts: the sum of max(grant, holding) never passes the limit, once every host has its grant under the lowered one" {
    start_redis
    run python3 - "$REDIS_PORT" "$BH_ROOT/agent/lease.lua" <<'PY'
import random, socket, sys

def command(sock, *args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(out)
    return read(sock.makefile("rb"))

def read(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"-":
        raise SystemExit(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        return None if int(rest) < 0 else f.read(int(rest) + 2)[:-2].decode()
    if kind == b"*":
        return [read(f) for _ in range(int(rest))]
    return rest.decode()

sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sha = command(sock, "SCRIPT", "LOAD", open(sys.argv[2]).read())
random.seed(7)
limit, hosts = 10, {h: {"grant": 0, "holding": 0} for h in "abcde"}
worst, asked = 0, set()
for step in range(2000):
    if step == 1000:
        limit = 4  # lowered live, as `set --fleet` does
        command(sock, "HSET", "m", "limit", limit)
        asked = set()  # grants made under the old limit stand until renewed
    h = random.choice("abcde")
    me = hosts[h]
    # A host holds at most what its limit lets it: its grant, or more if it
    # held that before a lower grant (connections are never cut).
    me["holding"] = random.randint(0, max(me["grant"], me["holding"]))
    want = me["holding"] + random.randint(0, 6)
    grant = command(sock, "EVALSHA", sha, 3, "h", "e", "m", h, want, me["holding"],
                    me["grant"], 60000, 10, random.randint(0, 2), "split", 0)[0]
    me["grant"] = grant
    asked.add(h)
    if step >= 1000 and len(asked) < len(hosts):
        continue  # converging: some host still holds an old grant
    over = sum(max(x["grant"], x["holding"]) for x in hosts.values())
    # Holdings above a lowered limit are real connections, never cut: only
    # grants on top of them count against it.
    allowed = max(limit, sum(x["holding"] for x in hosts.values()))
    worst = max(worst, over - allowed)
print("worst=%d" % worst)
PY
    assert_success
    assert_output "worst=0"
}

@test "the agent serves /metrics: the fleet's gauges, in a valid exposition" {
    start_redis
    start_server srv -1
    host a 6 "$SERVER_PORT"
    local port
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    bg "$T/agent.a" "$BULKHEAD" agent -v -c "$T/a.ini" --metrics "127.0.0.1:$port"
    wait_for file_has "$T/agent.a.err" 'limit 0 -> 1'
    curl -sS "http://127.0.0.1:$port/metrics" >"$T/metrics"
    run check_prometheus "$T/metrics"
    assert_success
    run grep -E '^bulkhead_fleet_(limit|grant|hosts)\{' "$T/metrics"
    assert_line "bulkhead_fleet_limit{namespace=\"$NS-a\",compartment=\"db\"} 6"
    assert_line "bulkhead_fleet_grant{namespace=\"$NS-a\",compartment=\"db\"} 1"
    assert_line "bulkhead_fleet_hosts{namespace=\"$NS-a\",compartment=\"db\"} 1"
    run curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/other"
    assert_output 404
}

@test "bad fleet input: one clear line each from check and from the agent" {
    start_redis
    host a 6 1
    sed -i "s|^fleet = .*|fleet = redis://127.0.0.1|" "$T/a.ini"
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead: $T/a.ini:3: fleet: \"redis://127.0.0.1\" has no port"
    run "$BULKHEAD" agent -c "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead agent: $T/a.ini:3: fleet: \"redis://127.0.0.1\" has no port"
    # Nothing listens there: check and the agent say so, once.
    sed -i "s|^fleet = .*|fleet = redis://127.0.0.1:1|" "$T/a.ini"
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead agent: cannot reach Redis at 127.0.0.1:1: Connection refused"
    # fleet_limit without fleet
    sed -i '/^fleet = /d' "$T/a.ini"
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line --regexp "^bulkhead: $T/a.ini:[0-9]+: fleet_limit: needs fleet = redis://HOST:PORT in \[global\]$"
}

# burst HOST [HOLD]: 3 threads of one fail-fast process on HOST connect at
# the same moment and hold for a second (or as mt_client's HOLD says); its
# output in $T/HOST.burst.
burst() {
    on "$1" "$CLIENTS/mt_client" 127.0.0.1 "$SERVER_PORT" 3 "${2:-1000}" >"$T/$1.burst"
}

@test "a lone fail-fast host keeps the room its last burst needed: the next burst reaches fleet_limit at the server; another host asking gets it back" {
    start_redis
    start_server srv -1
    DB_WAIT_MS=0 host a 3 "$SERVER_PORT"
    start_agent a
    wait_for -t 3 file_has "$T/agent.a.err" 'limit 0 -> 1'
    # The first burst finds a limit of 1: two are refused, and the agent
    # asks for 3.
    burst a
    run cat "$T/a.burst"
    assert_line ok=1
    assert_equal "$(server_stat srv max)" 1
    wait_for -t 3 file_has "$T/agent.a.err" 'limit [0-9]+ -> 3'
    # Ten refreshes later, its refusals long decayed, the next burst comes.
    local from
    from=$(lease_calls)
    wait_for -t 10 lease_calls_past $((from + 10))
    # held until the server has every connected one open (a handshake
    # done is not yet a connection the server accepted)
    burst a all="$T/srv.stats"
    run cat "$T/a.burst"
    assert_line ok=3
    assert_equal "$(server_stat srv max)" 3
    # a idles; b wants 2 and waits for them: a gives its room up.
    host b 3 "$SERVER_PORT"
    start_agent b
    holders b 2 600000
    wait_for -t 3 open_is srv 2
    assert_equal "$(server_stat srv max)" 3
}
