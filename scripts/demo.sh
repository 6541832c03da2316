#!/usr/bin/env bash
# demo: ten curls at a slow local server, first as they are, then under
# bulkhead with rules.ini.example (compartment local-demo: limit 3, fail
# fast, 127.0.0.1:18080). The server counts what really reaches it.
# Then a dead downstream: workers alternate a healthy server and a
# blackholed one, without the shim, with a limit, and with a limit,
# connect_timeout_ms and the breaker. Last, an adaptive limit following a
# downstream whose capacity drops.
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
cap_pid=
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
    [[ -z "$cap_pid" ]] || kill "$cap_pid" 2>/dev/null || true
    local ns
    for ns in "$NAMESPACE" "$NAMESPACE-dead" "$NAMESPACE-adaptive"; do
        "$BULKHEAD" reset --force -n "$ns" >/dev/null 2>&1 || true
    done
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

# wait_ready FILE WHAT: a server's ready file, written within 5 s.
wait_ready() {
    local i
    for ((i = 0; i < 250; i++)); do
        [[ -s "$1" ]] && return 0
        sleep 0.02
    done
    die "$2 did not start"
}

python3 tests/server/blackhole.py --ready "$tmp/hole" --lifetime 120 2>/dev/null &
hole_pid=$!
wait_ready "$tmp/hole" "the blackhole"
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

# ---- a limit that sizes itself ---------------------------------------------

CAP_SERVICE_MS=50
CAP_WORKERS=16

# say COMMAND: one line to the capacity server's control port; its answer.
say() {
    local fd line
    exec {fd}<>"/dev/tcp/127.0.0.1/$cap_ctl" || die "the capacity server does not answer"
    echo "$1" >&"$fd"
    read -r -t 5 line <&"$fd" || true
    exec {fd}<&-
    echo "$line"
}

figure() {  # figure NAME LINE: NAME=N out of a stat line
    sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" <<<"$2"
}

live_limit() {  # the compartment's live limit, from bulkhead stat --json
    "$BULKHEAD" stat -c "$tmp/adaptive.ini" --json 2>/dev/null |
        grep -o '"limit": [0-9]*' | head -1 | grep -o '[0-9]*$' || echo "?"
}

python3 tests/server/capacityserver.py --ready "$tmp/cap" --capacity 8 \
    --service-ms "$CAP_SERVICE_MS" --lifetime 120 2>/dev/null &
cap_pid=$!
wait_ready "$tmp/cap" "the capacity server"
cap_port=$(sed -n 1p "$tmp/cap")
cap_ctl=$(sed -n 2p "$tmp/cap")
cat >"$tmp/adaptive.ini" <<INI
[global]
namespace = $NAMESPACE-adaptive
log = error

[downstream]
limit = 8
wait_ms = 0
adaptive = gradient
match = 127.0.0.1:$cap_port
INI

echo
echo "A limit that sizes itself: a downstream that serves 8 requests at a time"
echo "($CAP_SERVICE_MS ms each) and queues the rest, as an overloaded service does."
echo "$CAP_WORKERS workers call it in a loop through bulkhead, with adaptive = gradient"
echo "(the limit starts at 8). After 3 s the downstream can serve only 2 at a time."
echo "Each second: the live limit at that moment (bulkhead stat) and the most"
echo "requests the downstream itself had at once during that second. In its first"
echo "second the controller pins the limit at 2 for a moment, to learn how fast the"
echo "downstream answers with no queue."
printf '  %6s %9s %6s %10s\n' time capacity limit "at once"
env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$tmp/adaptive.ini" \
    python3 tests/clients/capacity_load.py 127.0.0.1 "$cap_port" "$CAP_WORKERS" 20 \
    >/dev/null 2>&1 &
workers+=($!)
for ((i = 0; i < 500; i++)); do  # until the workers are under way
    (($(figure served "$(say stat)") > 0)) && break
    sleep 0.02
done
say reset >/dev/null
capacity=8 followed=
start=${EPOCHREALTIME/./}
for ((t = 1; t <= 10; t++)); do
    # sleep until t seconds after the start: the lines are a second apart
    left=$((t * 1000000 - (${EPOCHREALTIME/./} - start)))
    ((left <= 0)) || sleep "$(printf '%d.%06d' $((left / 1000000)) $((left % 1000000)))"
    limit=$(live_limit)
    at_once=$(figure max_open "$(say reset)")
    printf '  %4d s %9d %6s %10s\n' "$t" "$capacity" "$limit" "$at_once"
    if ((capacity == 2)) && [[ -z "$followed" && "$limit" =~ ^[0-9]+$ ]] && ((limit <= 4)); then
        followed=$((t - 3))
    fi
    if ((t == 3)); then
        capacity=2
        say "capacity 2" >/dev/null
    fi
done
stop_workers
echo
if [[ -n "$followed" ]]; then
    echo "The limit followed the downstream down to 2 plus a little room, within $followed s;"
    echo "nobody changed it: the shim measured how long the downstream took to answer."
else
    echo "Unexpected: the limit did not come down to the downstream's capacity." >&2
    exit 1
fi
