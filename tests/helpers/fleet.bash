# shellcheck shell=bash
# The fleet's test kit: a real redis-server on a loopback port, hosts as
# namespaces of this machine with rules of their own, and their agents.
# Loaded after helpers/common.

REFRESH_MS=200
LEASE_MS=1000

# fleet_setup: each test's set-up; a machine without redis-server skips.
fleet_setup() {
    bh_setup
    command -v redis-server >/dev/null || skip "redis-server is not installed"
    [[ -x "$BH_ROOT/build/bulkhead-agent" ]] || fail "missing build/bulkhead-agent: run make"
}

# start_redis: a redis-server on $REDIS_PORT (with $REDIS_PASSWORD, if
# set), gone at teardown; a machine without redis-server skips. A replica
# syncs from it at once: Redis 7 otherwise waits 5 s for more replicas
# before a diskless sync.
start_redis() {
    command -v redis-server >/dev/null || skip "redis-server is not installed"
    REDIS_PORT=$(free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        --repl-diskless-sync-delay 0 \
        ${REDIS_PASSWORD:+--requirepass "$REDIS_PASSWORD"} >"$T/redis.log" 2>&1 3>&- &
    REDIS_PID=$!
    track_pid "$REDIS_PID"
    wait_for redis_up || fail "redis-server did not start: $(cat "$T/redis.log")"
}

redis_up() {
    [[ "$(redis-cli -p "$REDIS_PORT" ${REDIS_PASSWORD:+-a "$REDIS_PASSWORD"} \
          --no-auth-warning ping 2>/dev/null)" == PONG ]]
}

# The keys of compartment db of fleet $NS in Redis (docs/fleet.md).
meta_key() { echo "bulkhead:{$NS/db}:meta"; }
leases_key() { echo "bulkhead:{$NS/db}:leases"; }

# host NAME LIMIT PORT [extra global lines]: host NAME's rules in $T/NAME.ini,
# one compartment [db] over PORT (its wait_ms: $DB_WAIT_MS, default 60000).
host() {
    local name=$1 limit=$2 port=$3
    shift 3
    ns_track "$NS-$name"
    {
        printf '[global]\nnamespace = %s-%s\nfleet = redis://127.0.0.1:%s\n' "$NS" "$name" "$REDIS_PORT"
        printf 'fleet_name = %s\nfleet_host = %s\n' "$NS" "$name"
        printf 'fleet_refresh_ms = %s\nfleet_lease_ms = %s\n' "$REFRESH_MS" "$LEASE_MS"
        printf '%s\n' "$@"
        printf '[db]\nfleet_limit = %s\nwait_ms = %s\nmatch = 127.0.0.1:%s\n' "$limit" "${DB_WAIT_MS:-60000}" "$port"
    } >"$T/$name.ini"
}

# start_agent HOST: its agent, logging every limit it sets (-v): the tests
# wait on those lines, and assert on what the servers saw.
start_agent() {
    bg "$T/agent.$1" "$BULKHEAD" agent -v -c "$T/$1.ini"
    eval "AGENT_$1=$BG_PID"
    wait_for file_has "$T/agent.$1.err" 'refresh'
}

# holders HOST N HOLD_MS [PORT]: N clients on HOST, each holding one
# connection to PORT (default: the last server started).
holders() {
    local h=$1 n=$2 hold=$3 port=${4:-$SERVER_PORT} i
    for ((i = 0; i < n; i++)); do
        bg "$T/$h.client.$i.$RANDOM" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$T/$h.ini" \
            "$CLIENTS/connect_hold" 127.0.0.1 "$port" "$hold"
    done
}

# on HOST CMD...: CMD as a program of HOST.
on() {
    local h=$1
    shift
    env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$T/$h.ini" "$@"
}

open_is() { [[ "$(server_stat "$1" open)" == "$2" ]]; }

# logged_after FILE N REGEX: a line past the first N of FILE matches.
logged_after() { tail -n "+$(($2 + 1))" "$1" | grep -Eq -- "$3"; }

start_redis_again() {
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        >"$T/redis.log" 2>&1 3>&- &
    REDIS_PID=$!
    track_pid "$REDIS_PID"
    wait_for redis_up || fail "redis-server did not restart"
}

# start_sentinels: Redis with Sentinel on loopback ports: the master
# (start_redis: $REDIS_PORT), one replica ($REPLICA_PORT) and one sentinel
# ($SENTINEL_PORT, quorum 1) watching them as $MASTER_NAME, quick to fail
# over: down after 500 ms. The sentinel is started once the replica is in
# sync, so that its first look at the master finds the replica. A machine
# without redis-sentinel skips.
start_sentinels() {
    command -v redis-sentinel >/dev/null || skip "redis-sentinel is not installed"
    MASTER_NAME="m-$NS"
    start_redis
    REPLICA_PORT=$(free_port)
    redis-server --port "$REPLICA_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        --replicaof 127.0.0.1 "$REDIS_PORT" >"$T/replica.log" 2>&1 3>&- &
    REPLICA_PID=$!
    track_pid "$REPLICA_PID"
    wait_for replica_in_sync || fail "the replica did not sync: $(cat "$T/replica.log")"
    SENTINEL_PORT=$(free_port)
    # The sentinel rewrites its file: one of its own, in the test's directory.
    printf '%s\n' "port $SENTINEL_PORT" "bind 127.0.0.1" "dir $T" \
        "sentinel monitor $MASTER_NAME 127.0.0.1 $REDIS_PORT 1" \
        "sentinel down-after-milliseconds $MASTER_NAME 500" \
        "sentinel failover-timeout $MASTER_NAME 3000" >"$T/sentinel.conf"
    redis-sentinel "$T/sentinel.conf" >"$T/sentinel.log" 2>&1 3>&- &
    SENTINEL_PID=$!
    track_pid "$SENTINEL_PID"
    wait_for sentinel_knows_replica || fail "the sentinel did not find the replica: $(cat "$T/sentinel.log")"
}

replica_in_sync() {
    redis-cli -p "$REPLICA_PORT" info replication 2>/dev/null | grep -q '^master_link_status:up'
}

sentinel_knows_replica() {
    redis-cli -p "$SENTINEL_PORT" sentinel replicas "$MASTER_NAME" 2>/dev/null |
        grep -qx "127.0.0.1:$REPLICA_PORT"
}

# sentinel_master: the master's port, as the sentinel names it now.
sentinel_master() {
    redis-cli -p "$SENTINEL_PORT" sentinel get-master-addr-by-name "$MASTER_NAME" | sed -n 2p
}

sentinel_master_is() { [[ "$(sentinel_master)" == "$1" ]]; }

# sentinel_host NAME LIMIT PORT [extra global lines]: host NAME (as host)
# with fleet = the sentinel and the master's name.
sentinel_host() {
    host "$@"
    sed -i "s|^fleet = .*|fleet = redis-sentinel://127.0.0.1:$SENTINEL_PORT/$MASTER_NAME|" "$T/$1.ini"
}

# start_proxy [PORT]: a TCP proxy (socat) to Redis on PORT (default: a free
# one), as $PROXY_PORT: a host whose fleet = points there loses Redis when
# cut_proxy ends it, while the others keep theirs. It runs in a process
# group of its own (its pid's), so that cutting it cuts the connections its
# forks carry too. A machine without socat skips.
start_proxy() {
    command -v socat >/dev/null || skip "socat is not installed"
    PROXY_PORT=${1:-$(free_port)}
    setsid socat "TCP-LISTEN:$PROXY_PORT,bind=127.0.0.1,reuseaddr,fork" \
        "TCP:127.0.0.1:$REDIS_PORT" >"$T/proxy.log" 2>&1 3>&- &
    PROXY_PID=$!
    track_pid "$PROXY_PID"
    wait_for proxy_up || fail "socat did not start: $(cat "$T/proxy.log")"
    [[ "$(ps -o pgid= -p "$PROXY_PID" | tr -d ' ')" == "$PROXY_PID" ]] ||
        fail "socat is not its own process group"
}

proxy_up() {
    [[ "$(redis-cli -p "$PROXY_PORT" ping 2>/dev/null)" == PONG ]]
}

# cut_proxy: ends the proxy and every connection it carries.
cut_proxy() {
    kill -KILL -- "-$PROXY_PID" 2>/dev/null || true
    wait "$PROXY_PID" 2>/dev/null || true
}
