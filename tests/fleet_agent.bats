#!/usr/bin/env bats
# The agent itself, in the faults an operator meets: bad data in Redis, a
# password file that is not a file, a dead agent, a flood of /metrics
# scrapers, a namespace without a fleet, a fail-fast fleet compartment,
# hostile HTTP clients (a slowloris, a flood of dropped connections), a
# Redis Cluster node, a Redis made a replica under the agent.
# Asserted on what real observers saw: Redis's own command counts, the
# test server's connections, `bulkhead stat`, a GET of /metrics with curl,
# the attacker's own count of connections the agent ended, the kernel's
# VmRSS of the agent, and the agent's lines where the line is what the
# operator is told.

load helpers/common
load helpers/cli
load helpers/fleet

setup() { fleet_setup; }
teardown() { bh_teardown; }

# redis_calls COMMAND [FIELD]: Redis's own count of COMMAND (INFO
# commandstats: calls, or failed_calls), 0 if never run.
redis_calls() {
    local n
    n=$(redis-cli -p "$REDIS_PORT" info commandstats |
        sed -n "s/^cmdstat_$1:.*\\b${2:-calls}=\\([0-9]*\\).*/\\1/p")
    echo "${n:-0}"
}

# redis_calls_past COMMAND FIELD N: the count has passed N.
redis_calls_past() { (($(redis_calls "$1" "$2") > $3)); }

# meta_key / leases_key: the compartment [db]'s keys in Redis.

# one_agent [agent options...]: Redis, a server and host a's agent, which
# has set its first limit.
one_agent() {
    start_redis
    start_server srv -1
    host a 6 "$SERVER_PORT"
    bg "$T/agent.a" "$BULKHEAD" agent -v -c "$T/a.ini" "$@"
    AGENT_a=$BG_PID
    wait_for file_has "$T/agent.a.err" 'limit 0 -> 1'
}

@test "a lease script that fails on bad data keeps the connection and is said once, until it clears" {
    one_agent
    redis-cli -p "$REDIS_PORT" set "$(leases_key)" not-a-hash >/dev/null
    wait_for file_has "$T/agent.a.err" 'WRONGTYPE'
    local failed
    failed=$(redis_calls evalsha failed_calls)
    wait_for redis_calls_past evalsha failed_calls $((failed + 5))
    # One login for all those refreshes: nothing dropped the connection.
    assert_equal "$(redis_calls select)" 1
    assert_equal "$(redis_calls 'script|load')" 1
    run grep -c 'WRONGTYPE' "$T/agent.a.err"
    assert_output 1
    redis-cli -p "$REDIS_PORT" del "$(leases_key)" >/dev/null
    wait_for file_has "$T/agent.a.err" '\[db\]: Redis grants leases again'
    assert_equal "$(redis_calls select)" 1
}

@test "a fleet limit of 1e30 in Redis: one line naming key and value; stat, JSON and /metrics keep the last good limit" {
    local port
    port=$(free_port)
    one_agent --metrics "127.0.0.1:$port"
    redis-cli -p "$REDIS_PORT" hset "$(meta_key)" limit 1e30 >/dev/null
    local line="\\[db\\]: lease: bad fleet limit in Redis: bulkhead:\\{$NS/db\\}:meta limit is \"1e30\", not a whole number from 1 to 1000000"
    wait_for file_has "$T/agent.a.err" "$line"
    local failed
    failed=$(redis_calls evalsha failed_calls)
    wait_for redis_calls_past evalsha failed_calls $((failed + 3))
    run grep -c 'bad fleet limit' "$T/agent.a.err"
    assert_output 1
    run "$BULKHEAD" stat -n "$NS-a"
    assert_success
    assert_line --regexp '^db +6 +1 +[0-9]+ +1 +(leased|kept|fallback) '
    run "$BULKHEAD" stat -n "$NS-a" --json
    assert_output --partial '"fleet": {"limit": 6, "grant": 1'
    curl -sS "http://127.0.0.1:$port/metrics" >"$T/metrics"
    run grep -F "bulkhead_fleet_limit{namespace=\"$NS-a\",compartment=\"db\"} 6" "$T/metrics"
    assert_success
}

@test "a password file that is a FIFO: one line, and the agent stays responsive" {
    REDIS_PASSWORD=right start_redis
    start_server srv -1
    mkfifo -m 600 "$T/pass"
    host a 6 "$SERVER_PORT" "fleet_password_file = $T/pass"
    start_agent a
    wait_for file_has "$T/agent.a.err" "fleet_password_file $T/pass: is a FIFO, not a regular file"
    kill -TERM "$AGENT_a"
    local rc=0
    wait_pid "$AGENT_a" 5 || rc=$?
    assert_equal "$rc" 0
    run grep -c 'fleet_password_file' "$T/agent.a.err"
    assert_output 1
}

# auth_calls: the AUTH commands Redis has run (its own count), asked with
# the password.
auth_calls() {
    local n
    n=$(redis-cli -p "$REDIS_PORT" -a "$REDIS_PASSWORD" --no-auth-warning info commandstats |
        sed -n 's/^cmdstat_auth:calls=\([0-9]*\).*/\1/p')
    echo "${n:-0}"
}

@test "a password file others may read: check, the agent and set --fleet refuse it in check's line, and Redis never sees it" {
    REDIS_PASSWORD=right
    start_redis
    printf 'right\n' >"$T/pass"
    chmod 640 "$T/pass"
    host a 6 1 "fleet_password_file = $T/pass"
    local line auth_before
    line=$(grep -n '^fleet_password_file' "$T/a.ini" | cut -d: -f1)
    auth_before=$(auth_calls)
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead: $T/a.ini:$line: fleet_password_file: $T/pass: others may read it (mode 0640); chmod 600 it"
    # (Bounded: an agent that took it would run on.)
    run timeout 5 "$BULKHEAD" agent -c "$T/a.ini" --metrics "127.0.0.1:$(free_port)"
    assert_failure 1
    assert_output "bulkhead agent: $T/a.ini:$line: fleet_password_file: $T/pass: others may read it (mode 0640); chmod 600 it"
    run "$BULKHEAD" set --fleet -c "$T/a.ini" db limit=3
    assert_failure 1
    assert_output "bulkhead agent: $T/a.ini:$line: fleet_password_file: $T/pass: others may read it (mode 0640); chmod 600 it"
    # Only auth_calls's own AUTHs since.
    assert_equal "$(auth_calls)" $((auth_before + 1))
    # chmod 600, and the same agent logs in and leases.
    chmod 600 "$T/pass"
    start_agent a
    wait_for file_has "$T/agent.a.err" 'limit 0 -> 1'
    (($(auth_calls) > auth_before + 2))
}

@test "a password file that is a directory or /dev/zero: check says what it is, no empty password is sent" {
    REDIS_PASSWORD=right start_redis
    mkdir -m 700 "$T/pass.d"
    host a 6 1 "fleet_password_file = $T/pass.d"
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead agent: Redis at 127.0.0.1:$REDIS_PORT: fleet_password_file $T/pass.d: is a directory, not a regular file"
    host a 6 1 "fleet_password_file = /dev/zero"
    run "$BULKHEAD" check "$T/a.ini"
    assert_failure 1
    assert_line "bulkhead agent: Redis at 127.0.0.1:$REDIS_PORT: fleet_password_file /dev/zero: is a character device, not a regular file"
}

@test "a dead agent's compartment shows lapsed once its lease has passed, in the table, JSON and Prometheus" {
    one_agent
    run "$BULKHEAD" stat -n "$NS-a"
    assert_line --regexp '^db +6 +1 +[0-9]+ +1 +leased '
    kill -KILL "$AGENT_a"
    stat_says_lapsed() { "$BULKHEAD" stat -n "$NS-a" | grep -Eq '^db +6 +1 +[0-9]+ +1 +lapsed '; }
    wait_for -t 5 stat_says_lapsed
    run "$BULKHEAD" stat -n "$NS-a" --json
    assert_output --partial '"state": "lapsed"'
    run "$BULKHEAD" stat -n "$NS-a" --prometheus
    assert_line "bulkhead_fleet_state{namespace=\"$NS-a\",compartment=\"db\"} 4"
}

# flood PORT N: N idle connections to PORT, held until killed; the number
# that connected goes to $T/flood.ready.
flood() {
    bg "$T/flood" python3 -c '
import socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
        held.append(s)
    except OSError:
        pass
open(sys.argv[3], "w").write("%d\n" % len(held))
time.sleep(3600)
' "$1" "$2" "$T/flood.ready"
    FLOOD_PID=$BG_PID
    wait_for test -s "$T/flood.ready"
}

# cpu_ms PID: the CPU time the process has used, as the kernel counts it.
cpu_ms() {
    local stat fields
    stat=$(cat "/proc/$1/stat")
    stat=${stat##*) }
    read -r -a fields <<<"$stat"
    # utime and stime: fields 14 and 15 of the line, in clock ticks.
    echo $(((fields[11] + fields[12]) * 1000 / $(getconf CLK_TCK)))
}

# agent_sockets PID: the sockets the process has open.
agent_sockets() { find "/proc/$1/fd" -lname 'socket:*' | wc -l; }

@test "200 idle /metrics connections to an agent with 64 fds: it holds 32, still reconnects to Redis, and its log stays quiet" {
    local port
    port=$(free_port)
    start_redis
    start_server srv -1
    host a 6 "$SERVER_PORT"
    bg "$T/agent.a" bash -c 'ulimit -n 64 && exec "$@"' agent "$BULKHEAD" agent -v \
        -c "$T/a.ini" --metrics "127.0.0.1:$port"
    AGENT_a=$BG_PID
    wait_for file_has "$T/agent.a.err" 'limit 0 -> 1'
    assert file_has "$T/agent.a.err" 'at most 32 connections'
    local cpu_before wall_before
    cpu_before=$(cpu_ms "$AGENT_a")
    wall_before=$(date +%s%3N)
    flood "$port" 200
    # The listening socket, Redis's and 32 scrapers at most.
    (($(agent_sockets "$AGENT_a") <= 34)) || fail "the agent holds $(agent_sockets "$AGENT_a") sockets"
    kill -KILL "$REDIS_PID"
    wait_for file_has "$T/agent.a.err" 'keeping'
    start_redis_again
    wait_for file_has "$T/agent.a.err" 'Redis answers again'
    # At the cap nothing spins: the agent used a fraction of the time.
    local cpu wall
    cpu=$(($(cpu_ms "$AGENT_a") - cpu_before))
    wall=$(($(date +%s%3N) - wall_before))
    ((cpu * 4 < wall)) || fail "the agent used $cpu ms of CPU in $wall ms"
    # A line per reason at most: shedding, and the header deadline.
    (($(grep -c '^bulkhead agent: metrics: ' "$T/agent.a.err") <= 2))
    # The scrapers gone, /metrics answers again.
    kill -KILL "$FLOOD_PID"
    scrape() { curl -sf -m 2 -o "$T/metrics" "http://127.0.0.1:$port/metrics"; }
    wait_for scrape
    run check_prometheus "$T/metrics"
    assert_success
}

@test "--metrics without a fleet: the agent serves the namespace's figures and leases nothing" {
    start_server srv -1
    compartment_rules 2
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    wait_for open_is srv 1
    run "$BULKHEAD" agent -c "$RULES"
    assert_failure 1
    assert_output "bulkhead agent: $RULES: no fleet = redis://... in [global]: nothing to lease (--metrics serves /metrics without one)"
    local port
    port=$(free_port)
    bg "$T/agent" "$BULKHEAD" agent -c "$RULES" --metrics "127.0.0.1:$port"
    wait_for file_has "$T/agent.err" "namespace $NS: no fleet compartment: serving /metrics only"
    curl -sS "http://127.0.0.1:$port/metrics" >"$T/metrics"
    run check_prometheus "$T/metrics"
    assert_success
    run cat "$T/metrics"
    assert_line "bulkhead_permits_in_use{namespace=\"$NS\",compartment=\"downstream\"} 1"
    refute_output --partial bulkhead_fleet_
}

@test "a fail-fast fleet compartment (wait_ms = 0) learns its demand from refusals: bursts of 10 get fleet_limit 3 through at once" {
    REFRESH_MS=500 LEASE_MS=2500
    start_redis
    start_server srv -1
    DB_WAIT_MS=0 host a 3 "$SERVER_PORT"
    start_agent a
    wait_for file_has "$T/agent.a.err" 'limit 0 -> 1'
    # Nobody waits in a fail-fast compartment: past the limit, a burst's
    # connects are refused at once, and those refusals are its demand: the
    # live limit goes to 3 though nothing is held or waiting any more.
    holders a 10 300
    live_limit_is() {
        "$BULKHEAD" stat -n "$NS-a" --prometheus |
            grep -qx "bulkhead_permits_limit{namespace=\"$NS-a\",compartment=\"db\"} $1"
    }
    wait_for -t 5 live_limit_is 3
    # The bursts go on (as a busy service's would) until 3 are open at once.
    local burst
    for ((burst = 0; burst < 10; burst++)); do
        holders a 10 2000
        wait_for -t 1 open_is srv 3 2>/dev/null && break
    done
    assert_equal "$(server_stat srv max)" 3
}

HTTP_ATTACK="$BH_ROOT/tests/clients/http_attack.py"

# attack_stat KEY: KEY's figure in http_attack's stats file.
attack_stat() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" "$T/attack.stats"; }

# attack_past KEY N: the attacker's KEY has passed N.
attack_past() { (($(attack_stat "$1") > $2)); }

# attack PORT MODE N SECONDS: http_attack against the agent's /metrics,
# once it is at full strength (its first stats). Sets ATTACK_PID.
attack() {
    bg "$T/attack" python3 "$HTTP_ATTACK" "$2" 127.0.0.1 "$1" "$3" "$4" "$T/attack.stats"
    ATTACK_PID=$BG_PID
    wait_for test -s "$T/attack.stats"
}

SCRAPE="$BH_ROOT/tests/clients/scrape.py"

# scrape_through PORT UNTIL...: GETs /metrics from agent a every 0.2 s
# (tests/clients/scrape.py) until UNTIL succeeds (14 s at most); each
# answer must come whole within 1 s and hold host a's figures. Sets
# SCRAPES, SLOWEST_S and RSS_PEAK_KB (the agent's largest VmRSS seen at a
# scrape).
scrape_through() {
    local port=$1 scraper
    shift
    bg "$T/scrapes" python3 "$SCRAPE" "http://127.0.0.1:$port/metrics" \
        "bulkhead_permits_limit{namespace=\"$NS-a\",compartment=\"db\"} " "$AGENT_a"
    scraper=$BG_PID
    wait_for -t 14 "$@" || fail "still not $* after 14 s"
    kill -TERM "$scraper"
    wait "$scraper" || true
    ! grep -n '^fail' "$T/scrapes" || fail "scrapes failed: $(grep -n '^fail' "$T/scrapes")"
    SCRAPES=$(grep -c '^ok' "$T/scrapes" || true)
    SLOWEST_S=$(awk '$1 == "ok" && $2 > s { s = $2 } END { print s + 0 }' "$T/scrapes")
    RSS_PEAK_KB=$(awk '$1 == "ok" && $3 > m { m = $3 } END { print m + 0 }' "$T/scrapes")
    echo "# $SCRAPES scrapes, the slowest in ${SLOWEST_S}s; agent RSS $RSS_BEFORE_KB kB" \
         "before, at most $RSS_PEAK_KB kB during; the attacker: $(cat "$T/attack.stats")" >&3
}

# metrics_lines: the agent's lines about /metrics so far.
metrics_lines() { grep -c '^bulkhead agent: metrics: ' "$T/agent.a.err" || true; }

# metrics_agent: Redis, a server and host a's agent serving /metrics on
# $PORT; RSS_BEFORE_KB and LINES_BEFORE are its memory and log then.
metrics_agent() {
    PORT=$(free_port)
    one_agent --metrics "127.0.0.1:$PORT"
    RSS_BEFORE_KB=$(rss_kb "$AGENT_a")
    LINES_BEFORE=$(metrics_lines)
}

# stayed_flat: the agent's memory grew by less than its connections can
# hold (at most 1,024, each with an 8 kB pool for its request and
# libmicrohttpd's record of it: under 10 MB, whatever they send), and it
# said at most a line per reason: shedding, the header deadline and
# libmicrohttpd's own (a connection ended mid-request, in two ways).
stayed_flat() {
    ((RSS_PEAK_KB - RSS_BEFORE_KB < 12 * 1024)) ||
        fail "RSS went from $RSS_BEFORE_KB kB to $RSS_PEAK_KB kB"
    local lines
    lines=$(($(metrics_lines) - LINES_BEFORE))
    echo "# $lines lines about /metrics in the agent's log" >&3
    ((lines <= 4)) || fail "$(tail -n 20 "$T/agent.a.err")"
}

@test "a slowloris of 1,200 connections trickling their headers: /metrics answers within 1 s throughout, the agent's memory stays flat and its log short" {
    (($(ulimit -Hn) >= 1300)) || skip "needs a hard fd limit of 1,300 for the attacker"
    metrics_agent
    local leases_before
    leases_before=$(redis_calls evalsha)
    attack "$PORT" slowloris 1200 7
    scrape_through "$PORT" pid_done "$ATTACK_PID"
    ((SCRAPES >= 5))
    # The agent shed connections to make room: each of the 1,200 first
    # ones was ended by it, and opened again.
    attack_past ended_by_server 1200
    stayed_flat
    # The lease loop went on meanwhile (Redis's own count).
    (($(redis_calls evalsha) > leases_before + 10))
}

@test "100 connections trickling their headers: the agent ends each between 5 and 6.5 s after it opened, answering /metrics throughout" {
    metrics_agent
    attack "$PORT" slowloris 100 20
    scrape_through "$PORT" attack_past ended_by_server 99
    stayed_flat
    run attack_stat shortest_ms
    (($output >= 4900))
    run attack_stat longest_ms
    (($output <= 6500))
}

@test "a flood of connections opened and dropped: /metrics answers within 1 s throughout, the agent's memory stays flat and its log short" {
    metrics_agent
    attack "$PORT" flood 200 5
    scrape_through "$PORT" pid_done "$ATTACK_PID"
    ((SCRAPES >= 5))
    stayed_flat
}

# cluster_node PORT: a Redis Cluster node on PORT, its state in the test's
# directory.
cluster_node() {
    redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        --cluster-enabled yes --cluster-config-file "$T/nodes-$1.conf" \
        >"$T/cluster-$1.log" 2>&1 3>&- &
    track_pid $!
    local port=$1
    node_up() { [[ "$(redis-cli -p "$port" ping 2>/dev/null)" == PONG ]]; }
    wait_for node_up || fail "cluster node $1 did not start: $(cat "$T/cluster-$1.log")"
}

# cluster_port: a loopback port free now, with its cluster bus port (10000
# above it, so at most 55535) free too.
cluster_port() {
    python3 -c '
import socket
while True:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    if port > 55535:
        continue
    bus = socket.socket()
    try:
        bus.bind(("127.0.0.1", port + 10000))
    except OSError:
        continue
    print(port)
    break
'
}

@test "pointed at a Redis Cluster node that does not own the slot: one line naming MOVED, and no share" {
    local owner
    owner=$(cluster_port)
    cluster_node "$owner"
    REDIS_PORT=$(cluster_port)
    cluster_node "$REDIS_PORT"
    redis-cli -p "$owner" cluster addslotsrange 0 16383 >/dev/null
    redis-cli -p "$REDIS_PORT" cluster meet 127.0.0.1 "$owner" >/dev/null
    moved() { [[ "$(redis-cli -p "$REDIS_PORT" hget "$(leases_key)" a)" == MOVED* ]]; }
    wait_for moved
    start_server srv -1
    host a 6 "$SERVER_PORT"
    start_agent a
    wait_for file_has "$T/agent.a.err" "MOVED"
    assert file_has "$T/agent.a.err" "^bulkhead agent: \\[db\\]: lease: Redis at 127\\.0\\.0\\.1:$REDIS_PORT is a Redis Cluster node \\(MOVED [0-9]+ 127\\.0\\.0\\.1:$owner\\): bulkhead agent does not follow Cluster redirections; point fleet = at one Redis or at its sentinels; keeping this host's grant until its lease ends\$"
    # Redis's own count of the lease calls it turned away.
    wait_for redis_calls_past evalsha rejected_calls 5
    run grep -c 'MOVED' "$T/agent.a.err"
    assert_output 1
    run on a timeout 1 "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_equal "$status" 124
    assert_equal "$(server_stat srv total)" 0
}

@test "a Redis made a replica under the agent answers READONLY: the agent reconnects each refresh, says it once, and leases again once it is master" {
    one_agent
    local other_port
    other_port=$(free_port)
    redis-server --port "$other_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        >"$T/other.log" 2>&1 3>&- &
    track_pid $!
    other_up() { [[ "$(redis-cli -p "$other_port" ping 2>/dev/null)" == PONG ]]; }
    wait_for other_up
    local logins
    logins=$(redis_calls select)
    redis-cli -p "$REDIS_PORT" replicaof 127.0.0.1 "$other_port" >/dev/null
    wait_for file_has "$T/agent.a.err" "READONLY"
    # Not kept as if it were bad data: dropped and made again, each refresh
    # (Redis's own count of logins: a SELECT each).
    wait_for redis_calls_past select calls $((logins + 3))
    run grep -c 'READONLY' "$T/agent.a.err"
    assert_output 1
    assert_equal "$(grep -c 'Redis answers again' "$T/agent.a.err")" 0
    redis-cli -p "$REDIS_PORT" replicaof no one >/dev/null
    wait_for file_has "$T/agent.a.err" 'Redis answers again'
    holders a 2 60000
    wait_for -t 5 open_is srv 2
}
