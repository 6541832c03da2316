# shellcheck shell=bash
# Shared setup for the bats suite: servers, clients under the shim, polling,
# and per-test cleanup of shared state.
#
# Every test gets its own namespace ($NS) so that tests never share permits,
# and teardown removes that namespace's SysV objects and kills whatever the
# test started. Synchronisation is by ready files and bounded polls only.

BATS_LIB_PATH=${BATS_LIB_PATH:-/usr/lib/bats}
bats_require_minimum_version 1.5.0

# bh_load_library NAME: bats_load_library without its cost. Every test
# sources its file and helpers anew, and the libraries' load.bash files
# run a $(dirname ...) subshell per file they source: fifteen forks per
# test, seconds of a loaded machine's time over the suite. A load.bash of
# only such lines is read here and its files sourced straight; any other
# goes to bats_load_library.
bh_load_library() {
    local dir line files=()
    for dir in ${BATS_LIB_PATH//:/ }; do
        [[ -f "$dir/$1/load.bash" ]] && break
    done
    [[ -f "$dir/$1/load.bash" ]] || { bats_load_library "$1"; return; }
    while IFS= read -r line; do
        [[ -z "$line" || "$line" == \#* ]] && continue
        [[ "$line" =~ ^source\ \"\$\(dirname\ \"\$\{BASH_SOURCE\[0\]\}\"\)/([^\"]+)\"$ ]] ||
            { bats_load_library "$1"; return; }
        files+=("$dir/$1/${BASH_REMATCH[1]}")
    done <"$dir/$1/load.bash"
    for line in "${files[@]}"; do
        # shellcheck source=/dev/null
        source "$line"
    done
}
bh_load_library bats-support
bh_load_library bats-assert

# The checkout: from this file's own path when it has the usual one (no
# subshell), else by asking the shell.
if [[ "${BASH_SOURCE[0]}" == /*/tests/helpers/common.bash ]]; then
    BH_ROOT=${BASH_SOURCE[0]%/tests/helpers/common.bash}
else
    BH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fi
# BULKHEAD_TEST_SHIM runs the suite against another build (or a do-nothing
# library, to see that the tests can fail).
SHIM="${BULKHEAD_TEST_SHIM:-$BH_ROOT/build/libbulkhead.so}"
CLIENTS="$BH_ROOT/build/tests"
HOLDSERVER="$BH_ROOT/tests/server/holdserver.py"
BLACKHOLE="$BH_ROOT/tests/server/blackhole.py"     # a full accept queue: SYNs dropped
SILENT="$BH_ROOT/tests/server/silentserver.py"    # accepts, reads, never answers
BADSERVER="$BH_ROOT/tests/server/badserver.py"    # resets, never reads, or trickles
# The command: the tests' way to a namespace's key (ns_key) and teardown's
# first way to remove a namespace.
BULKHEAD="$BH_ROOT/build/bulkhead"
# Debian's python3 (with python3-requests from make deps), ahead of a
# version manager's wrapper: pyenv's shim takes 0.6 s to start a python3
# that takes 0.06 s, and the suite starts hundreds of them, servers and
# clients (scripts' "#!/usr/bin/env python3" included).
# The link is made by the run's first test and found by the others.
if [[ -x "$BATS_RUN_TMPDIR/bin/python3" ]]; then
    PATH="$BATS_RUN_TMPDIR/bin:$PATH"
elif [[ -x /usr/bin/python3 && "$(command -v python3)" != /usr/bin/python3 ]]; then
    mkdir -p "$BATS_RUN_TMPDIR/bin"
    ln -sf /usr/bin/python3 "$BATS_RUN_TMPDIR/bin/python3"
    PATH="$BATS_RUN_TMPDIR/bin:$PATH"
fi

# ---------------------------------------------------------------- setup ----

bh_setup() {
    T="$BATS_TEST_TMPDIR"
    NS="t$$-${BATS_TEST_NUMBER}"
    RULES="$T/rules.ini"
    : >"$T/pids"
    : >"$T/namespaces"
    declare -gA BH_KEYS=()
    [[ -f "$SHIM" ]] || fail "missing $SHIM: run make"
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
    ns_track "$NS"
    local c
    for c in connect_hold mt_client fdops resolve_connect; do
        [[ -x "$CLIENTS/$c" ]] || fail "missing $CLIENTS/$c: run make build/tests/$c"
    done
}

# kill_trees: SIGKILLs every process group listed in $T/trees (the
# supervised trees a test started in sessions of their own).
kill_trees() {
    local tree
    [[ -f "$T/trees" ]] || return 0
    while read -r tree; do
        kill -KILL -- "-$tree" 2>/dev/null || true
    done <"$T/trees"
}

# no_process_names TEXT: no process has TEXT in its command line.
no_process_names() {
    ! pgrep -f "$1" >/dev/null
}

bh_teardown() {
    local pid
    # Clients first (they may hold permits), servers last.
    if [[ -s "$T/pids" ]]; then
        while read -r pid; do
            kill -KILL "$pid" 2>/dev/null || true
        done < <(tac "$T/pids")
        while read -r pid; do
            wait "$pid" 2>/dev/null || true
        done <"$T/pids"
    fi
    # Then whatever those left behind that still names the test's folder in
    # its command line: a forked child waiting for a go file, a program
    # whose bulkhead run was killed (its heir outlives run by design).
    pkill -KILL -f "$T/" 2>/dev/null || true
    wait_for -t 5 no_process_names "$T/" || true
    # Then every namespace the test used: the command first (it removes
    # whatever this user made under the key, of any size), ipcrm by key
    # second, in case the command cannot (a broken build, another user's
    # objects). Anything still under the key afterwards is a leak: a process
    # the test started outlived it, or an object nobody may remove.
    local ns key left=""
    while read -r ns; do
        [[ -n "$ns" ]] || continue
        key=$(ns_key "$ns") || { left+=" $ns: no key;"; continue; }
        timeout 10 "$BULKHEAD" reset --force -n "$ns" >/dev/null 2>&1 || true
        ipc_under_key "$key" || continue
        ipcrm -S "$key" 2>/dev/null || true
        ipcrm -M "$key" 2>/dev/null || true
        if ipc_under_key "$key"; then
            left+=" $ns ($key):$(ipcs -s -m | awk -v k="$key" '$1 == k { printf " id %s", $2 }');"
        fi
    done <"$T/namespaces"
    [[ -z "$left" ]] || fail "teardown: SysV objects left behind:$left"
}

# A namespace to remove in teardown (tests that use a second one call it).
# Its key is asked for here, once, so that polls in subshells need not ask.
ns_track() {
    echo "$1" >>"$T/namespaces"
    if [[ -z "${BH_KEYS[$1]:-}" ]]; then
        BH_KEYS[$1]=$("$BULKHEAD" key -n "$1") ||
            fail "$BULKHEAD key -n $1 failed"
    fi
}

# ns_key NAMESPACE: the namespace's SysV key as ipcs prints it (0x%08x), from
# `bulkhead key`: shim/permits owns the hash, the tests never re-derive it.
ns_key() {
    if [[ -n "${BH_KEYS[$1]:-}" ]]; then
        echo "${BH_KEYS[$1]}"
    else
        "$BULKHEAD" key -n "$1"
    fi
}

# ipc_under_key KEY: a semaphore set or memory segment exists under KEY.
ipc_under_key() {
    ipcs -s -m | awk -v k="$1" '$1 == k { found = 1 } END { exit !found }'
}

# True while the namespace's semaphore set exists.
namespace_exists() {
    local key
    key=$(ns_key "$1") || return 2
    ipcs -s | awk -v k="$key" '$1 == k { found = 1 } END { exit !found }'
}

# Processes blocked on the namespace's semaphores right now, as the kernel
# counts them (sum of semncnt): how a test knows a caller is waiting.
sem_waiters() {
    local key semid
    key=$(ns_key "$1")
    semid=$(ipcs -s | awk -v k="$key" '$1 == k { print $2 }')
    [[ -n "$semid" ]] || { echo 0; return; }
    ipcs -s -i "$semid" | awk '
        /^semnum/ { table = 1; next }
        table && NF >= 4 && $1 ~ /^[0-9]+$/ { n += $3 }
        END { print n + 0 }'
}

# sem_waiters_is NAMESPACE N: for wait_for.
sem_waiters_is() {
    [[ "$(sem_waiters "$1")" -eq "$2" ]]
}

# ----------------------------------------------------------- processes ----

# Remembers a background process for teardown.
track_pid() {
    echo "$1" >>"$T/pids"
}

# bg OUT CMD...: runs CMD in the background, stdout to OUT, stderr to
# OUT.err; sets BG_PID. fd 3 is bats' own and must not be inherited.
bg() {
    local out=$1
    shift
    "$@" >"$out" 2>"$out.err" 3>&- &
    BG_PID=$!
    track_pid "$BG_PID"
}

# bg_shim OUT CMD...: bg with the shim loaded.
bg_shim() {
    local out=$1
    shift
    bg "$out" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$@"
}

# run_shim CMD...: CMD with the shim and this test's rules.
run_shim() {
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$@"
}

# wait_for [-t SECONDS] CMD...: polls CMD every 0.02 s until it succeeds.
wait_for() {
    local timeout=10
    if [[ "$1" == -t ]]; then
        timeout=$2
        shift 2
    fi
    # A deadline on the clock, not a count of tries: on a busy machine each
    # try can take far longer than its 20 ms sleep.
    local deadline=$((${EPOCHREALTIME/./} + timeout * 1000000))
    until "$@"; do
        if ((${EPOCHREALTIME/./} >= deadline)); then
            echo "wait_for: timed out after ${timeout}s: $*" >&2
            return 1
        fi
        sleep 0.02
    done
}

# pid_done PID: the process has exited (gone, or a zombie not yet reaped).
pid_done() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    [[ "${stat%% *}" == Z ]]
}

# wait_pid PID [SECONDS]: waits (bounded) for a background child; returns
# its exit status, 124 if it is still running.
wait_pid() {
    local pid=$1 timeout=${2:-30}
    wait_for -t "$timeout" pid_done "$pid" || return 124
    wait "$pid"
}

# file_has FILE REGEX: FILE exists and a line matches.
file_has() {
    [[ -f "$1" ]] && grep -Eq -- "$2" "$1"
}

# build_if_stale BIN SRC HOW: BIN from SRC unless it is newer already;
# built under a temporary name, so that a half-built one never runs.
build_if_stale() {
    local bin=$1 src=$2 how=$3
    [[ -x "$bin" && "$bin" -nt "$src" ]] && return 0
    mkdir -p "$(dirname "$bin")"
    "$how" "$src" "$bin.$$" && mv "$bin.$$" "$bin" || fail "cannot build $bin"
}

# static_build SRC BIN: a gcc -static client (tests/clients/static/), as
# the seccomp supervisor's tests run them.
static_build() {
    gcc -static -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$2" "$1" -lpthread
}

# go_build SRC BIN: a Go client (tests/clients/go/), its build cached in
# build/go-cache.
go_build() {
    command -v go >/dev/null || fail "no Go toolchain (make deps installs golang-go)"
    (cd "$(dirname "$1")" && HOME="$T" GOCACHE="$BH_ROOT/build/go-cache" \
        GOFLAGS=-mod=mod go build -o "$2" "$(basename "$1")")
}

# ------------------------------------------------------------- servers ----

# start_server NAME HOLD_MS [HOST [OPTION...]]: a holdserver in the
# background (OPTIONs are holdserver's). Sets and exports SERVER_PORT and
# PORT_<NAME>.
start_server() {
    local name=$1 hold=$2 host=${3:-127.0.0.1}
    shift $(($# < 3 ? $# : 3))
    python3 "$HOLDSERVER" --host "$host" --port 0 --hold-ms "$hold" "$@" \
        --ready "$T/$name.ready" --stats "$T/$name.stats" \
        >"$T/$name.log" 2>&1 3>&- &
    track_pid $!
    # 30 s: a python3 that long to start is a loaded machine, not a failure.
    if ! wait_for -t 30 test -s "$T/$name.ready"; then
        cat "$T/$name.log" >&2
        fail "server $name did not start"
    fi
    SERVER_PORT=$(sed -n 1p "$T/$name.ready")
    export SERVER_PORT
    export "PORT_$name=$SERVER_PORT"
}

# Tests that act as another user (nobody) need root and setpriv.
require_other_user() {
    [[ $(id -u) -eq 0 ]] || skip "needs root to act as another user"
    command -v setpriv >/dev/null || skip "no setpriv"
}

as_nobody() {
    setpriv --reuid 65534 --regid 65534 --clear-groups "$@"
}

# nginx_conf_head [DIRECTIVE...]: the start of a test's nginx.conf: in the
# foreground, the directives given (master_process, user...), its pid,
# error log and temporary files under $T, and "http {" with the access
# log off; the caller writes its servers and the closing brace.
nginx_conf_head() {
    printf 'daemon off;\n'
    printf '%s\n' "$@"
    printf 'pid %s/nginx.pid;\nerror_log %s/nginx.err warn;\n' "$T" "$T"
    printf 'events { worker_connections 64; }\nhttp {\n    access_log off;\n'
    local kind
    for kind in client_body proxy fastcgi uwsgi scgi; do
        printf '    %s_temp_path %s/nginx-%s;\n' "$kind" "$T" "$kind"
    done
}

# A loopback port nothing listens on now, for servers that take a port
# only on their command line or config (redis-server, nginx, haproxy).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# py_server NAME SCRIPT [ARGS...]: one of tests/server's scripts that write
# their port to a ready file (blackhole, silentserver, badserver), in the
# background; sets SERVER_PORT.
py_server() {
    local name=$1 script=$2
    shift 2
    bg "$T/$name.log" python3 "$script" --ready "$T/$name.ready" "$@"
    wait_for -t 30 test -s "$T/$name.ready" ||
        fail "$name did not start: $(cat "$T/$name.log.err")"
    SERVER_PORT=$(sed -n 1p "$T/$name.ready")
}

# compartment_rules LIMIT KEY=VALUE...: $RULES with one compartment,
# [downstream], of LIMIT permits over 127.0.0.1:$SERVER_PORT.
compartment_rules() {
    local limit=$1
    shift
    {
        printf '[global]\nnamespace = %s\n[downstream]\nlimit = %s\n' "$NS" "$limit"
        printf 'match = 127.0.0.1:%s\n' "$SERVER_PORT"
        printf '%s\n' "$@" | sed 's/=/ = /'
    } >"$RULES"
}

# server_sync NAME: returns once the server has taken in every connection
# and EOF already queued in the kernel (see holdserver's control port):
# after thousands of connections, a loaded machine's python3 takes more
# than 10 s to go through them.
server_sync() {
    local ctl line fd
    ctl=$(sed -n 2p "$T/$1.ready")
    exec {fd}<>"/dev/tcp/127.0.0.1/$ctl" || return 1
    read -r -t 60 line <&"$fd"
    exec {fd}<&-
    [[ "$line" == max=* ]]
}

# server_stat NAME max|total|open: after a sync, the server's count.
server_stat() {
    server_sync "$1" || fail "server $1 does not answer"
    sed -n "s/.*\\b$2=\\([0-9]*\\).*/\\1/p" "$T/$1.stats"
}

# rss_kb PID: the process's resident memory (VmRSS, kB), as the kernel
# counts it (read by the shell: pollers call it often).
rss_kb() {
    local key value rest
    while read -r key value rest; do
        [[ "$key" == VmRSS: ]] && { echo "$value"; return; }
    done <"/proc/$1/status"
}

# server_open_is NAME N: the server has exactly N connections open (for
# wait_for).
server_open_is() {
    [[ "$(server_stat "$1" open)" == "$2" ]]
}

# haproxy_config PORT [GLOBAL_LINE...]: an HTTP reverse proxy on PORT to
# the server, with no retries and 30 s timeouts of its own (the tests'
# deadlines must be the shim's).
haproxy_config() {
    local port=$1
    shift
    if (($#)); then
        echo global
        printf '    %s\n' "$@"
    fi
    cat <<EOF
defaults
    mode http
    retries 0
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend f
    bind 127.0.0.1:$port
    default_backend b
backend b
    server up 127.0.0.1:$SERVER_PORT
EOF
}

# -------------------------------------------------------------- config ----

# storm_rules WAIT_MS [ERRNO]: one compartment [db], limit 4, on the server.
storm_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 4
wait_ms = $1
errno = ${2:-ECONNREFUSED}
match = 127.0.0.1:$SERVER_PORT
EOF
}

# write_rules FILE <<EOF ... EOF
write_rules() {
    cat >"$1"
}

# Value of key=value in the last `run` output (first match).
out_value() {
    local line
    for line in "${lines[@]}"; do
        if [[ "$line" == "$1="* ]]; then
            echo "${line#*=}"
            return 0
        fi
    done
    return 1
}

# assert_lines LINE...: every LINE is a whole line of the last `run` output.
assert_lines() {
    local want
    for want in "$@"; do
        assert_line "$want"
    done
}

# -------------------------------------------------------------- fdops ----

# fdops_setup LIMIT [MATCH]: a server that holds until the client closes and
# a fail-fast compartment over it whose refusals (EHOSTUNREACH) cannot be
# mistaken for anything the loopback kernel says.
fdops_setup() {
    start_server srv -1
    PORT=$SERVER_PORT
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[fd]
limit = $1
wait_ms = 0
errno = EHOSTUNREACH
match = ${2:-127.0.0.1:$PORT}
EOF
}

# fdops SCENARIO [LIMIT [EXTRA...]] under the shim, via `run`.
fdops() {
    run run_shim "$CLIENTS/fdops" 127.0.0.1 "$PORT" "$@"
}

# The server accepted exactly the connections fdops says it made: no refused
# connect sent a SYN.
assert_server_saw_connects() {
    local reported seen
    reported=$(out_value connects_ok) || fail "fdops printed no connects_ok line"
    seen=$(server_stat srv total)
    [[ "$seen" == "$reported" ]] ||
        fail "server accepted $seen connections, the client made $reported: a refused connect reached the network"
}

# --------------------------------------------------------------- hosts ----

# Hostname tests need a private /etc/hosts: a mount namespace (root only).
require_private_hosts() {
    [[ $(id -u) -eq 0 ]] || skip "needs root for unshare -m and a private /etc/hosts"
    unshare -m true 2>/dev/null || skip "unshare -m is not permitted here"
    grep -Eq '^hosts:.*\bfiles\b' /etc/nsswitch.conf 2>/dev/null ||
        skip "nsswitch does not read /etc/hosts"
}

# The names hostname tests resolve. payments.test and its subdomains are
# IPv4-only and payments6.test IPv6-only, so a client never falls back from
# one family to the other; other.test shares payments.test's address and
# must stay unmatched by a payments.test rule.
make_hosts() {
    cat >"$T/hosts" <<EOF
127.0.0.1 localhost
127.0.0.1 payments.test api.payments.test deep.api.payments.test other.test
::1 payments6.test
EOF
}

# hosts_shim CMD...: CMD under the shim with the private /etc/hosts (same
# pid throughout: unshare, sh and env all exec).
hosts_shim() {
    unshare -m -- sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts" \
        env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$@"
}

# bg_hosts OUT CMD...: hosts_shim in the background, tracked like bg.
bg_hosts() {
    local out=$1
    shift
    bg "$out" unshare -m -- sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts" \
        env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$@"
}

# ---------------------------------------------------------------- misc ----

require_ipv6() {
    ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1' || skip "no IPv6 on lo"
    python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1", 0))' \
        2>/dev/null || skip "cannot bind ::1"
}

# A python3 client: connects (blocking, no timeout), prints "ok" or the errno
# name, then reads until the server closes. Exit 0 connected, 1 refused.
PY_CLIENT='
import errno, socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port))
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)), flush=True)
    sys.exit(1)
print("ok", flush=True)
while s.recv(4096):
    pass
s.close()
'

# run_rc OUT CMD...: runs CMD quietly, writes "rc=N" (its exit status) to OUT.
run_rc() {
    local out=$1 rc=0
    shift
    # `|| rc=$?`: bats runs tests under set -e.
    "$@" >/dev/null 2>&1 || rc=$?
    echo "rc=$rc" >"$out"
}

# count_rc RC FILE...: how many `run_rc` outputs have rc=RC.
count_rc() {
    local rc=$1 n=0 f
    shift
    for f in "$@"; do
        grep -qx "rc=$rc" "$f" && n=$((n + 1))
    done
    echo "$n"
}

# rc_count_is RC N PREFIX: exactly N of the PREFIX.* files say rc=RC; the
# glob is taken at each call, for wait_for while run_rc writes them.
rc_count_is() {
    [[ "$(count_rc "$1" "$3".*)" == "$2" ]]
}
