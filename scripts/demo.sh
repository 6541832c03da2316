#!/usr/bin/env bash
# demo: ten curls at a slow local server, first as they are, then under
# bulkhead with rules.ini.example (compartment local-demo: limit 3, fail
# fast, 127.0.0.1:18080). The server counts what really reaches it.
# Then a dead downstream: workers alternate a healthy server and a
# blackholed one, without the shim, with a limit, and with a limit,
# connect_timeout_ms and the breaker.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=18080
HOLD_MS=2000
CLIENTS=10
SHIM="$PWD/build/libbulkhead.so"
BULKHEAD="$PWD/build/bulkhead"
RULES="$PWD/rules.ini.example"
NAMESPACE=demo

die() {
    echo "demo: $*" >&2
    exit 1
}

[[ -f "$SHIM" && -x "$BULKHEAD" ]] || die "missing $SHIM or $BULKHEAD: run make"
[[ -f "$RULES" ]] || die "missing $RULES"
command -v curl >/dev/null || die "curl is not installed (make deps)"

tmp=$(mktemp -d)
server_pid=
hole_pid=
workers=()

stop_server() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=
    fi
}

cleanup() {
    stop_workers
    stop_server
    [[ -z "$hole_pid" ]] || kill "$hole_pid" 2>/dev/null || true
    "$BULKHEAD" reset --force -n "$NAMESPACE" >/dev/null 2>&1 || true
    "$BULKHEAD" reset --force -n "$NAMESPACE-dead" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

start_server() {
    rm -f "$tmp/ready" "$tmp/stats"
    python3 tests/server/holdserver.py --host 127.0.0.1 --port "$PORT" \
        --hold-ms "${1:-$HOLD_MS}" --ready "$tmp/ready" --stats "$tmp/stats" \
        --lifetime 120 2>"$tmp/server.log" &
    server_pid=$!
    local i
    for ((i = 0; i < 250; i++)); do
        [[ -s "$tmp/ready" ]] && return 0
        if ! kill -0 "$server_pid" 2>/dev/null; then
            server_pid=
            die "cannot listen on 127.0.0.1:$PORT ($(tail -1 "$tmp/server.log")); is the port taken?"
        fi
        sleep 0.02
    done
    die "the server did not start"
}

# wave LABEL [env...]: CLIENTS curls at once; sets ok, refused, other, max.
wave() {
    local label=$1 i
    shift
    local pids=()
    for ((i = 1; i <= CLIENTS; i++)); do
        (
            rc=0
            env "$@" curl -s -o /dev/null --noproxy '*' --max-time 10 \
                "http://127.0.0.1:$PORT/" || rc=$?
            echo "$rc" >"$tmp/$label.$i"
        ) &
        pids+=($!)
    done
    wait "${pids[@]}"
    ok=0 refused=0 other=0
    for ((i = 1; i <= CLIENTS; i++)); do
        case "$(cat "$tmp/$label.$i")" in
            0) ok=$((ok + 1)) ;;
            7) refused=$((refused + 1)) ;;
            *) other=$((other + 1)) ;;
        esac
    done
    # Read after every client is done: the server answered them all.
    max=$(sed -n 's/.*max=\([0-9]*\).*/\1/p' "$tmp/stats")
}

echo "bulkhead demo: $CLIENTS parallel curls at a server on 127.0.0.1:$PORT"
echo "that holds every request for $HOLD_MS ms before answering."
echo

start_server
wave plain
stop_server
echo "Without bulkhead:"
echo "  the server saw $max connections at once"
echo "  $ok curls succeeded, $refused refused, $other failed otherwise"
echo

"$BULKHEAD" reset --force -n "$NAMESPACE" >/dev/null  # counters from this run only
start_server
wave capped LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" BULKHEAD_LOG=error
stop_server
echo "With bulkhead (BULKHEAD_CONFIG=rules.ini.example, compartment local-demo: limit 3, fail fast):"
echo "  the server saw at most $max connections at once"
echo "  $ok curls succeeded, $refused were refused at once (curl exit 7: connection refused)"
((other == 0)) || echo "  $other failed otherwise"
echo

echo "What every process shares, as operators see it (bulkhead stat -c rules.ini.example):"
"$BULKHEAD" stat -c "$RULES" | sed 's/^/  /'
echo

if ((max <= 3 && ok + refused == CLIENTS)); then
    echo "The compartment held: never more than 3 connections reached the server."
else
    echo "Unexpected: the compartment did not hold (max $max)." >&2
    exit 1
fi

# ---- a dead downstream ---------------------------------------------------

WORKERS=12
SECONDS_EACH=6

stop_workers() {
    local pid
    for pid in "${workers[@]}"; do
        pkill -KILL -P "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    workers=()
}

# worker LABEL I: forever, a request to the healthy server, then one to the
# dead one; curl's defaults, no timeouts of its own. Notes each healthy one.
worker() {
    while :; do
        curl -s -o /dev/null --noproxy '*' "http://127.0.0.1:$PORT/" &&
            echo >>"$tmp/served.$1"
        curl -s -o /dev/null --noproxy '*' "http://127.0.0.1:$DEAD/" || true
    done
}

# round LABEL [env...]: WORKERS workers for SECONDS_EACH; sets served.
round() {
    local label=$1 i
    shift
    : >"$tmp/served.$label"
    for ((i = 0; i < WORKERS; i++)); do
        env "$@" bash -c "$(declare -f worker); PORT=$PORT DEAD=$DEAD tmp=$tmp worker $label" \
            2>/dev/null &
        workers+=($!)
    done
    sleep "$SECONDS_EACH"
    stop_workers
    served=$(wc -l <"$tmp/served.$label")
}

dead_rules() {  # dead_rules FILE [extra keys...]
    local file=$1
    shift
    {
        printf '[global]\nnamespace = %s-dead\nlog = error\n\n' "$NAMESPACE"
        printf '[dead]\nlimit = 4\nwait_ms = 0\nmatch = 127.0.0.1:%s\n' "$DEAD"
        printf '%s\n' "$@"
    } >"$file"
}

python3 tests/server/blackhole.py --ready "$tmp/hole" --lifetime 120 2>/dev/null &
hole_pid=$!
for ((i = 0; i < 250; i++)); do
    [[ -s "$tmp/hole" ]] && break
    sleep 0.02
done
[[ -s "$tmp/hole" ]] || die "the blackhole did not start"
DEAD=$(cat "$tmp/hole")
dead_rules "$tmp/limit.ini"
dead_rules "$tmp/breaker.ini" "connect_timeout_ms = 1000" "breaker_failures = 3" \
    "breaker_open_ms = 2000"

echo "A dead downstream: $WORKERS workers, each alternating a request to a healthy"
echo "server (127.0.0.1:$PORT, answers in 300 ms) and one to a blackholed server"
echo "(127.0.0.1:$DEAD, never answers a SYN), with curl's defaults: no timeouts."
echo "Healthy requests served in $SECONDS_EACH s:"
row() {  # row LABEL: one line of the table, from $served
    printf '  %-62s %6d %7s\n' "$1" "$served" \
        "$(awk -v n="$served" -v s="$SECONDS_EACH" 'BEGIN { printf "%.1f", n / s }')"
}
printf '  %-62s %6s %7s\n' "" served "per s"
start_server 300
round none
row "without bulkhead (every worker ends up stuck)"
round limit LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$tmp/limit.ini"
row "limit 4 on the dead one (4 workers stuck, the rest serve)"
"$BULKHEAD" reset --force -n "$NAMESPACE-dead" >/dev/null 2>&1 || true
round breaker LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$tmp/breaker.ini"
row "limit 4 + connect_timeout_ms 1000 + breaker (stuck 1 s at most)"
stop_server
echo
echo "A dead downstream costs milliseconds, not workers."
