#!/usr/bin/env bats
# bulkhead run's seccomp supervisor: Go and static programs, which the shim
# never sees, capped all the same. What counts is what the hold server saw
# (at most, and in all), what the clients got, and, for permits given
# back, that later connections of the same tree or another get the full
# capacity.
#
# The clients: a Go net/http client (go build here, cached in
# build/tests/gohttp), a gcc -static C client that forks and passes its
# sockets over SCM_RIGHTS (build/tests/fork_share), busybox-static's wget,
# a gcc -static C client that opens its connections with MSG_FASTOPEN
# sends and falls back to connect() on EOPNOTSUPP
# (build/tests/fastopen_fallback).
# (A cli file: `bulkhead run` always preloads build/libbulkhead.so.)

load helpers/common
load helpers/netns
load helpers/uid

GOHTTP="$BH_ROOT/build/tests/gohttp"
FORK_SHARE="$BH_ROOT/build/tests/fork_share"
DISCONNECT="$BH_ROOT/build/tests/disconnect"
GODIAL="$BH_ROOT/build/tests/godial"
CLOSE_CONNECTING="$BH_ROOT/build/tests/close_connecting"
FASTOPEN="$BH_ROOT/build/tests/fastopen_fallback"
REUSE="$BH_ROOT/build/tests/reuse_number"
FLOOD="$BH_ROOT/build/tests/connect_flood"
HOLD="$BH_ROOT/build/tests/hold_connect"

# The clients, built once for the file: in the first test's setup, a cold
# Go build on a loaded machine took longer than the test's time limit.
setup_file() {
    T="$BATS_FILE_TMPDIR"
    build_if_stale "$GOHTTP" "$BH_ROOT/tests/clients/go/gohttp.go" go_build
    build_if_stale "$GODIAL" "$BH_ROOT/tests/clients/go/godial.go" go_build
    local name
    for name in fork_share disconnect close_connecting fastopen_fallback reuse_number \
        connect_flood hold_connect; do
        build_if_stale "$BH_ROOT/build/tests/$name" \
            "$BH_ROOT/tests/clients/static/$name.c" static_build
    done
}

setup() { bh_setup; }
teardown() {
    kill_trees
    [[ -z "${NOBODY_DIR:-}" ]] || rm -rf "$NOBODY_DIR"
    if [[ -f "$T/nobody_dir" ]]; then  # a test's tree run by nobody, and its namespace
        timeout 10 "$BULKHEAD" reset --force -n "$NS" -u nobody >/dev/null 2>&1 || true
        rm -rf "$(cat "$T/nobody_dir")"
    fi
    if [[ -f "$T/other_users" ]]; then uid_teardown; else bh_teardown; fi
}

# bg_tree OUT RUN_ARGS...: bulkhead run in the background (as bg), in a
# process group of its own, so that teardown ends the whole tree even when
# run itself was killed (its orphans go to init, not to this test).
bg_tree() {
    local out=$1
    shift
    bg "$out" setsid "$BULKHEAD" run "$@"
    echo "$BG_PID" >>"$T/trees"
}

# count WORD FILE: lines of FILE that are exactly WORD.
count() {
    grep -cx -- "$1" "$2" || true
}

# server_has_open NAME N: the server holds at least N connections open now.
server_has_open() {
    (("$(server_stat "$1" open)" >= $2))
}

# sv_run OUT CMD...: bulkhead run -c $RULES CMD in the foreground, stdout
# to OUT and stderr to OUT.err; the status in SV_STATUS.
sv_run() {
    local out=$1
    shift
    SV_STATUS=0
    "$BULKHEAD" run -c "$RULES" "$@" >"$out" 2>"$out.err" 3>&- || SV_STATUS=$?
}

# all_in OUT N: the clients' lines in OUT (each refused one has said so)
# and the connections server s holds add up to N.
all_in() {
    (($(grep -c . "$1" || true) + $(server_stat s open) >= $2))
}

# sv_run_all_in OUT N CMD...: sv_run for N clients against server s
# started with --hold-until "$T/release": the server answers once every
# client has connected or been refused, so that they all overlap however
# slowly a loaded machine starts them.
sv_run_all_in() {
    local out=$1 n=$2
    shift 2
    bg "$out" "$BULKHEAD" run -c "$RULES" "$@"
    local run=$BG_PID
    wait_for -t 60 all_in "$out" "$n"
    touch "$T/release"
    SV_STATUS=0
    wait_pid "$run" 60 || SV_STATUS=$?
}

@test "seccomp: a Go client, 8 parallel GETs at limit 3, without and with keep-alive: 3 reach the server, 5 fail fast, and the tree's next process gets 3 again" {
    start_server s 1000
    compartment_rules 3
    local url="http://127.0.0.1:$SERVER_PORT/"
    # one tree, one supervisor: the first client's permits must come back
    # before the second can have any
    sv_run "$T/go" --seccomp -- sh -c "'$GOHTTP' $url 8 0; '$GOHTTP' $url 8 1"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/go")" 6
    assert_equal "$(grep -c 'connect: connection refused' "$T/go")" 10
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 6
}

@test "seccomp: a Go client is capped without being asked to, and says so in one line" {
    start_server s 1000
    compartment_rules 3
    sv_run "$T/go" -- "$GOHTTP" "http://127.0.0.1:$SERVER_PORT/" 8 0
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/go")" 3
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 3
    grep -qx "bulkhead: run: $GOHTTP is a Go program: Go makes its own system calls, which the shim never sees: capped through seccomp" "$T/go.err"
}

@test "seccomp: a Go client with wait_ms: all 8 get through, at most 3 at a time" {
    start_server s 150
    compartment_rules 3 wait_ms=10000
    sv_run "$T/go" -- "$GOHTTP" "http://127.0.0.1:$SERVER_PORT/" 8 0
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/go")" 8
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 8
}

@test "seccomp: a static C client that forks: 3 connect, 5 are refused at once" {
    start_server s -1
    compartment_rules 3
    sv_run "$T/fork" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 8 all="$T/s.stats"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/fork")" 3
    assert_equal "$(count ECONNREFUSED "$T/fork")" 5
    assert_equal "$(server_stat s max)" 3
    grep -qx "bulkhead: run: $FORK_SHARE is statically linked: no dynamic loader reads LD_PRELOAD for it: capped through seccomp" "$T/fork.err"
}

@test "seccomp: sockets dup'd and passed over SCM_RIGHTS stay counted after their makers closed them and exited; given back once, when the last holder closes" {
    start_server s -1
    compartment_rules 3
    bg_tree "$T/share" --seccomp -c "$RULES" -- sh -c \
        "'$FORK_SHARE' 127.0.0.1 $SERVER_PORT 8 1500 --share; '$FORK_SHARE' 127.0.0.1 $SERVER_PORT 8 300"
    local tree=$BG_PID
    # every child has exited; the parent alone holds the 3 sockets
    wait_for file_has "$T/share" '^held 3$'
    # another tree, another supervisor, the same namespace: nothing left
    sv_run "$T/probe" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 1 0
    assert_equal "$(cat "$T/probe")" $'ECONNREFUSED\ndone'
    wait_pid "$tree"
    # the first client: 3 ok; the second, in the same tree: 3 ok again
    assert_equal "$(count ok "$T/share")" 6
    assert_equal "$(count ECONNREFUSED "$T/share")" 10
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 6
}

@test "seccomp: a hostname rule caps a static client that connects to the name's address (the supervisor resolved it; the program never did)" {
    start_server s -1
    printf '[global]\nnamespace = %s\n[api]\nlimit = 3\nmatch = localhost:%s\n' \
        "$NS" "$SERVER_PORT" >"$RULES"
    sv_run "$T/fork" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 8 all="$T/s.stats"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/fork")" 3
    assert_equal "$(count ECONNREFUSED "$T/fork")" 5
    assert_equal "$(server_stat s max)" 3
}

@test "seccomp: a counted socket closed by another thread while it connects is given back once; connect_timeout_ms reaches the program's socket" {
    py_server hole "$BLACKHOLE" --lifetime 60
    local hole=$SERVER_PORT
    start_server s 1000
    printf '[global]\nnamespace = %s\n[api]\nlimit = 1\nconnect_timeout_ms = 1000\nmatch = 127.0.0.1:%s\nmatch = 127.0.0.1:%s\n' \
        "$NS" "$hole" "$SERVER_PORT" >"$RULES"
    # one tree: given back twice, the limit would be 2 for what follows
    sv_run "$T/out" --seccomp -- sh -c "'$CLOSE_CONNECTING' $hole;
        '$FORK_SHARE' 127.0.0.1 $SERVER_PORT 2 300"
    assert_equal "$SV_STATUS" 0
    grep -qx 'close=0' "$T/out"
    grep -qx 'connect=ETIMEDOUT' "$T/out"
    assert_equal "$(count ok "$T/out")" 1
    assert_equal "$(count ECONNREFUSED "$T/out")" 1
    assert_equal "$(server_stat s max)" 1
}

@test "seccomp: connect(AF_UNSPEC) of a counted socket gives its permit back at once, once: at limit 1 another tree connects, then a second socket, and the first cannot again" {
    start_server s -1
    compartment_rules 1
    bg_tree "$T/out" --seccomp -c "$RULES" -- "$DISCONNECT" "$SERVER_PORT" "$T/go"
    local tree=$BG_PID
    wait_for file_has "$T/out" '^unspec='
    # another supervisor: it cannot ask the kernel about the first tree's
    # sockets; only the disconnect itself gave the permit back
    sv_run "$T/other" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 1 0
    assert_equal "$(cat "$T/other")" $'ok\ndone'
    touch "$T/go"
    wait_pid "$tree"
    assert_equal "$(cat "$T/out")" $'a=ok\nunspec=ok\nb=ok\nagain=ECONNREFUSED'
    assert_equal "$(server_stat s total)" 3
}

@test "seccomp: a static client's MSG_FASTOPEN sends (sendto, sendmsg, sendmmsg) to a matched server fail with EOPNOTSUPP; its fallback connects, 8 at limit 3: the server sees 3 at once, and the next tree gets 3 again" {
    start_server s -1
    compartment_rules 3
    bg_tree "$T/fo" -c "$RULES" -- "$FASTOPEN" 127.0.0.1 "$SERVER_PORT" 8 mixed --hold
    local tree=$BG_PID
    # every child tried and holds what it got, until the server took it in
    wait_for file_has "$T/fo" '^tried$'
    wait_for server_has_open s 3
    kill -USR1 "$tree"
    wait_pid "$tree"
    assert_equal "$(count 'fastopen=EOPNOTSUPP connect=ok' "$T/fo")" 3
    assert_equal "$(count 'fastopen=EOPNOTSUPP connect=ECONNREFUSED' "$T/fo")" 5
    assert_equal "$(server_stat s max)" 3
    # every permit came back when the tree ended: another tree gets 3
    sv_run "$T/again" -- "$FASTOPEN" 127.0.0.1 "$SERVER_PORT" 8 sendto
    assert_equal "$(count 'fastopen=EOPNOTSUPP connect=ok' "$T/again")" 3
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 6
}

@test "seccomp: a static client's MSG_FASTOPEN sends to a server no rule matches go through untouched, data and all" {
    start_server other -1
    compartment_rules 1
    start_server s -1
    sv_run "$T/fo" -- "$FASTOPEN" 127.0.0.1 "$SERVER_PORT" 3 mixed --ask
    assert_equal "$SV_STATUS" 0
    # the server answers a request it got: what was sent arrived
    if (($(sysctl -n net.ipv4.tcp_fastopen) & 1)); then
        assert_equal "$(count 'fastopen=ok reply=HTTP/1.0' "$T/fo")" 3
    else  # client Fast Open is off: the kernel's own EOPNOTSUPP
        assert_equal "$(count 'fastopen=EOPNOTSUPP connect=ok reply=HTTP/1.0' "$T/fo")" 3
    fi
    assert_equal "$(server_stat s total)" 3
    assert_equal "$(server_stat other total)" 0
}

@test "seccomp: a python3 client (the shim preloaded) under --seccomp: its MSG_FASTOPEN sends to a matched server fail with EOPNOTSUPP, its fallback connects are counted once: 3 of 8 at limit 3, not fewer" {
    start_server s -1
    compartment_rules 3
    cat >"$T/fastopen.py" <<'EOF'
import errno, signal, socket, sys, threading
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tried = threading.Barrier(count + 1)
release = threading.Event()
lock = threading.Lock()
def name(error):
    return "EOPNOTSUPP" if error.errno == errno.EOPNOTSUPP else errno.errorcode[error.errno]
def client():
    sock = socket.socket()
    try:
        sock.sendto(b"x", socket.MSG_FASTOPEN, (host, port))
        line = "fastopen=ok"
    except OSError as error:
        line = "fastopen=" + name(error)
        if error.errno == errno.EOPNOTSUPP:
            try:
                sock.connect((host, port))
                sock.sendall(b"x")
                line += " connect=ok"
            except OSError as refused:
                line += " connect=" + name(refused)
    with lock:
        print(line, flush=True)
    tried.wait()
    release.wait()  # each holds its connection until SIGUSR1
    sock.close()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # for sigwait alone
threads = [threading.Thread(target=client) for _ in range(count)]
for thread in threads:
    thread.start()
tried.wait()
print("tried", flush=True)
signal.sigwait({signal.SIGUSR1})
release.set()
for thread in threads:
    thread.join()
EOF
    bg_tree "$T/py" --seccomp -c "$RULES" -- python3 "$T/fastopen.py" 127.0.0.1 "$SERVER_PORT" 8
    local tree=$BG_PID
    wait_for file_has "$T/py" '^tried$'
    wait_for server_has_open s 3
    kill -USR1 "$tree"
    wait_pid "$tree"
    assert_equal "$(count 'fastopen=EOPNOTSUPP connect=ok' "$T/py")" 3
    assert_equal "$(count 'fastopen=EOPNOTSUPP connect=ECONNREFUSED' "$T/py")" 5
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 3
}

@test "seccomp: the shim under --seccomp fails a python3 client's MSG_FASTOPEN send to a full compartment with EOPNOTSUPP at once: no permit taken, none waited for" {
    start_server s -1
    compartment_rules 1 wait_ms=5000
    # another tree holds the one permit
    bg_tree "$T/holder" -c "$RULES" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 1 60000
    wait_for server_open_is s 1
    sv_run "$T/py" --seccomp -- python3 -c '
import errno, socket, sys
try:
    socket.socket().sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", int(sys.argv[1])))
    print("ok")
except OSError as error:
    print("EOPNOTSUPP" if error.errno == errno.EOPNOTSUPP else errno.errorcode[error.errno])
' "$SERVER_PORT"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(cat "$T/py")" EOPNOTSUPP
    assert_equal "$(server_stat s total)" 1
}

@test "seccomp: one fd number reused by three sockets (dup2 over a counted one, then close and socket again) at limit 1: each connects, each counted once; the pool is whole after" {
    start_server s -1
    compartment_rules 1
    sv_run "$T/out" -- "$REUSE" "$SERVER_PORT"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(cat "$T/out")" $'first=ok\ndup2=ok\nsame=yes\nreopen=ok'
    assert_equal "$(server_stat s total)" 3
    # neither given back twice (the next tree would get 2) nor kept
    sv_run "$T/next" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 2 all="$T/s.stats"
    assert_equal "$(count ok "$T/next")" 1
    assert_equal "$(count ECONNREFUSED "$T/next")" 1
}

# fds_of PID: the kernel's count of a process's open files.
fds_of() { ls "/proc/$1/fd" | wc -l; }

@test "seccomp: a flood of 2 x 2,000 connect+close at limit 4 leaves the supervisor's memory and open files where the first 2,000 left them" {
    start_server s 0
    compartment_rules 4 wait_ms=2000
    bg_tree "$T/out" --seccomp -c "$RULES" -- "$FLOOD" "$SERVER_PORT" 2000 "$T/go"
    local run=$BG_PID rss fds started
    wait_for -t 60 file_has "$T/out" '^half '
    rss=$(rss_kb "$run") fds=$(fds_of "$run") started=$EPOCHREALTIME
    touch "$T/go"
    wait_for -t 60 file_has "$T/out" '^done '
    local grown=$(($(rss_kb "$run") - rss)) more_fds=$(($(fds_of "$run") - fds))
    rm "$T/go"
    echo "# the second 2,000 at $(python3 -c "print(round(2000 / ($EPOCHREALTIME - $started)))")/s; the supervisor grew $grown kB, $more_fds fds" >&3
    wait_pid "$run"
    assert_equal "$(cat "$T/out")" $'half ok=2000 failed=0\ndone ok=4000 failed=0'
    ((grown <= 256)) || fail "the supervisor's RSS grew $grown kB over the second 2,000 connects"
    ((more_fds <= 0)) || fail "the supervisor holds $more_fds more files after the second 2,000 connects"
    assert_equal "$(server_stat s total)" 4000
    (($(server_stat s max) <= 4)) || fail "the server saw $(server_stat s max) at once (limit 4)"
}

@test "seccomp: busybox wget under bulkhead run is capped" {
    local busybox
    busybox=$(command -v busybox) || fail "no busybox (make deps installs busybox-static)"
    start_server s 1000 127.0.0.1 --hold-until "$T/release"
    compartment_rules 3
    sv_run_all_in "$T/wget" 8 -- "$busybox" sh -c "for i in 1 2 3 4 5 6 7 8; do
        '$busybox' wget -q -O /dev/null http://127.0.0.1:$SERVER_PORT/ && echo ok || echo failed &
    done; wait"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/wget")" 3
    assert_equal "$(count failed "$T/wget")" 5
    assert_equal "$(server_stat s max)" 3
}

@test "seccomp: a Go program starting 8 curls: the server sees 3 at once, not fewer (each connect counted once, by the shim)" {
    start_server s 1000
    compartment_rules 3
    sv_run "$T/curls" -- "$GOHTTP" spawn 8 curl -s -o /dev/null -w '%{http_code}\n' \
        "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count 200 "$T/curls")" 3
    assert_equal "$(count 000 "$T/curls")" 5
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 3
}

@test "seccomp: --seccomp caps dynamic programs whose shim counts nothing (no rules file found): the supervisor does" {
    start_server s 1000 127.0.0.1 --hold-until "$T/release"
    compartment_rules 3
    sv_run_all_in "$T/curls" 8 --seccomp -- "$GOHTTP" spawn 8 env -u BULKHEAD_CONFIG \
        XDG_CONFIG_HOME="$T/nothing" curl -s -o /dev/null -w '%{http_code}\n' \
        "http://127.0.0.1:$SERVER_PORT/"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count 200 "$T/curls")" 3
    assert_equal "$(server_stat s max)" 3
    # with no rules the shim caps nothing: the 5 refusals are the supervisor's
    grep -q 'refused .* for curl\[' "$T/curls.err"
}

@test "seccomp: SIGKILL of the Go program holding permits gives them all back to the tree" {
    start_server held 30000
    local held=$SERVER_PORT
    start_server s 300
    printf '[global]\nnamespace = %s\n[api]\nlimit = 3\nmatch = 127.0.0.1:%s\nmatch = 127.0.0.1:%s\n' \
        "$NS" "$held" "$SERVER_PORT" >"$RULES"
    bg_tree "$T/tree" --seccomp -c "$RULES" -- sh -c \
        "'$GOHTTP' http://127.0.0.1:$held/ 3 0 & echo \$! >'$T/go.pid'; wait; '$GOHTTP' http://127.0.0.1:$SERVER_PORT/ 8 0"
    local tree=$BG_PID
    wait_for server_open_is held 3
    kill -KILL "$(cat "$T/go.pid")"
    wait_pid "$tree"
    assert_equal "$(count ok "$T/tree")" 3
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 3
}

@test "seccomp: a Go program SIGKILLed holding its one permit, its parent alive and nothing else trapped in its tree: another tree gets it" {
    start_server held 30000
    local held=$SERVER_PORT
    start_server s -1
    printf '[global]\nnamespace = %s\n[api]\nlimit = 1\nwait_ms = 20000\nmatch = 127.0.0.1:%s\nmatch = 127.0.0.1:%s\n' \
        "$NS" "$held" "$SERVER_PORT" >"$RULES"
    mkfifo "$T/end"
    bg_tree "$T/tree" --seccomp -c "$RULES" -- sh -c \
        "'$GOHTTP' http://127.0.0.1:$held/ 1 0 & echo \$! >'$T/go.pid'; exec cat '$T/end'"
    local tree=$BG_PID
    wait_for server_open_is held 1
    kill -KILL "$(cat "$T/go.pid")"
    # the supervisor sees the exit (the program is not its child) and gives
    # the permit back: a blocking connect of another tree gets in long
    # before its 20 s wait is up
    sv_run "$T/other" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 1 0
    assert_equal "$(count ok "$T/other")" 1
    echo >"$T/end"
    wait_pid "$tree"
}

@test "seccomp: a program SIGKILLed while its connect waits for a permit leaves none behind" {
    start_server s -1
    compartment_rules 1 wait_ms=60000
    # another tree holds the one permit
    bg_tree "$T/holder" -c "$RULES" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 1 60000
    local holder=$BG_PID
    wait_for server_open_is s 1
    # this tree's first client waits for it, and is killed waiting; its
    # last one, allowed to wait a minute, gets in only if the permit the
    # dead one was waiting for came back
    bg_tree "$T/tree" --seccomp -c "$RULES" -- sh -c "
        '$FORK_SHARE' 127.0.0.1 $SERVER_PORT 1 0 & echo \$! >'$T/waiter.pid'
        wait; '$FORK_SHARE' 127.0.0.1 $SERVER_PORT 1 0"
    local tree=$BG_PID
    wait_for sem_waiters_is "$NS" 1
    # the forked child makes the connect
    kill -KILL $(pgrep -P "$(cat "$T/waiter.pid")") "$(cat "$T/waiter.pid")"
    # the holder's client, not its run: a killed run's permits come back
    # (SEM_UNDO) before its client's socket is closed, and the server
    # could see two at once; run gives them back once the kernel shows
    # the socket gone
    local client
    client=$(pgrep -P "$holder")
    kill -KILL $(pgrep -P "$client") "$client"
    wait_pid "$tree" 30
    assert_equal "$(count ok "$T/tree")" 1
    assert_equal "$(server_stat s max)" 1
}

# orphan_tree N: a tree whose static client holds N connections to the
# server, then makes one more connect per line written to fd $MORE (see
# hold_connect), and closes them all when it is closed; its run is
# $SUPERVISOR, its output $T/tree (run's lines in $T/tree.err).
orphan_tree() {
    mkfifo "$T/more"
    bg_tree "$T/tree" --seccomp -c "$RULES" -- sh -c "exec '$HOLD' 127.0.0.1 $SERVER_PORT $1 <'$T/more'"
    SUPERVISOR=$BG_PID
    exec {MORE}>"$T/more"
    wait_for file_has "$T/tree" '^held$'
}

# no_run_left: no `bulkhead run` of this test's rules is left (the heir
# included).
no_run_left() {
    ! pgrep -f -- "run .*-c $RULES" >/dev/null
}

@test "seccomp: SIGKILL of the supervisor while its program holds 3 permits at limit 3: nobody else gets them while the connections are open; the orphan's next connect fails with the compartment's errno and one line; closed, they come back" {
    start_server s -1
    compartment_rules 3 errno=EHOSTUNREACH
    orphan_tree 3
    assert_equal "$(count ok "$T/tree")" 3
    kill -KILL "$SUPERVISOR"
    wait "$SUPERVISOR" 2>/dev/null || true
    # another tree: the permits are the open connections', not free
    sv_run "$T/other" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 3 0
    assert_equal "$(count EHOSTUNREACH "$T/other")" 3
    assert_equal "$(server_stat s max)" 3
    # the orphan connects again: refused as the compartment refuses, said once
    echo >&"$MORE"
    echo >&"$MORE"
    wait_for eval '(($(grep -c . "$T/tree") == 6))'
    assert_equal "$(tail -2 "$T/tree")" $'EHOSTUNREACH\nEHOSTUNREACH'
    assert_equal "$(grep -c 'supervisor' "$T/tree.err")" 1
    grep -q "^bulkhead: run: the seccomp supervisor (pid $SUPERVISOR) died" "$T/tree.err"
    assert_equal "$(server_stat s total)" 3
    # its connections closed, their permits come back: the next tree gets 3
    exec {MORE}>&-
    wait_for server_open_is s 0
    wait_for no_run_left  # the heir's last reap
    sv_run "$T/after" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 3 0
    assert_equal "$(count ok "$T/after")" 3
    assert_equal "$(server_stat s max)" 3
    wait_for no_run_left
}

@test "seccomp: SIGKILL of the supervisor while a Go program holds 3 permits at limit 3: another tree is refused while they are open, and gets them once the program is gone" {
    start_server held 30000
    local held=$SERVER_PORT
    start_server s -1
    printf '[global]\nnamespace = %s\n[api]\nlimit = 3\nmatch = 127.0.0.1:%s\nmatch = 127.0.0.1:%s\n' \
        "$NS" "$held" "$SERVER_PORT" >"$RULES"
    bg_tree "$T/held" -c "$RULES" -- "$GOHTTP" "http://127.0.0.1:$held/" 3 0
    local supervisor=$BG_PID go
    wait_for server_open_is held 3
    go=$(pgrep -P "$supervisor")
    track_pid "$go"
    kill -KILL "$supervisor"
    wait "$supervisor" 2>/dev/null || true
    sv_run "$T/other" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 3 0
    assert_equal "$(count ECONNREFUSED "$T/other")" 3
    assert_equal "$(server_stat held open)" 3
    assert_equal "$(server_stat s total)" 0
    kill -KILL "$go"
    wait_for server_open_is held 0
    # the tree gone, its heir reaps once more and exits (a connect that
    # finds the compartment full while another process reaps is refused)
    wait_for no_run_left
    sv_run "$T/after" -- "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 3 0
    assert_equal "$(count ok "$T/after")" 3
    assert_equal "$(server_stat s total)" 3
    wait_for no_run_left
}

# nobody_rules LIMIT [KEY=VALUE...]: compartment_rules in a directory user
# nobody can read, as $NOBODY_RULES; nobody's namespace is removed at
# teardown.
nobody_rules() {
    require_other_user
    "${AS_NOBODY[@]}" test -x "$BULKHEAD" -a -x "$HOLD" ||
        skip "$BULKHEAD or $HOLD is out of nobody's reach"
    NOBODY_DIR=$(mktemp -d /tmp/bh-seccomp.XXXXXX)
    chmod 755 "$NOBODY_DIR"
    NOBODY_RULES="$NOBODY_DIR/rules.ini"
    compartment_rules "$@"
    cp "$RULES" "$NOBODY_RULES"
    chmod 644 "$NOBODY_RULES"
    echo nobody >>"$T/other_users"
}

@test "seccomp: a non-dumpable static program run as nobody (its supervisor may not read it) connecting 10 at limit 3: each connect is refused with the compartment's errno and one line says why; with on_failure = open, all go through and the line says so" {
    start_server s -1
    nobody_rules 3 errno=EHOSTUNREACH
    run "${AS_NOBODY[@]}" "$BULKHEAD" run --seccomp -c "$NOBODY_RULES" -- \
        "$HOLD" 127.0.0.1 "$SERVER_PORT" 10 --undumpable </dev/null
    assert_success
    assert_equal "$(grep -cx EHOSTUNREACH <<<"$output")" 10
    assert_equal "$(server_stat s total)" 0
    assert_equal "$(grep -c '^bulkhead: run: cannot inspect hold_connect\[[0-9]*\]' <<<"$output")" 1
    assert_line --regexp "^bulkhead: run: cannot inspect hold_connect\[[0-9]+\]'s connects \(Operation not permitted: it is not dumpable, and run may not read a non-dumpable process without CAP_SYS_PTRACE\): refusing them with EHOSTUNREACH \(on_failure = closed\)$"
    sed -i 's/^\[global\]$/&\non_failure = open/' "$NOBODY_RULES"
    run "${AS_NOBODY[@]}" "$BULKHEAD" run --seccomp -c "$NOBODY_RULES" -- \
        "$HOLD" 127.0.0.1 "$SERVER_PORT" 10 --undumpable </dev/null
    assert_success
    assert_equal "$(grep -cx ok <<<"$output")" 10
    assert_line --regexp "^bulkhead: run: cannot inspect hold_connect\[[0-9]+\]'s connects .*: letting them through uncounted \(on_failure = open\)$"
}

# member_rules: limit 2, of which a reserve of 1 for program=member (the
# static client under another name, $MEMBER); the common pool is 1.
member_rules() {
    compartment_rules 2 'reserve=1 for program=member'
    mkdir -p "$T/bin"
    ln -sf "$FORK_SHARE" "$T/bin/member"
    MEMBER="$T/bin/member"
}

# pools_are_exact OUT: another tree, another supervisor: a non-member gets
# the common pool's 1 and no more, a member its reserve's 1 besides.
pools_are_exact() {
    sv_run "$1" --seccomp -- sh -c "
        '$FORK_SHARE' 127.0.0.1 $SERVER_PORT 2 60000 >'$1.other' & other=\$!
        until [ \$(grep -c . '$1.other') -ge 2 ]; do sleep 0.02; done
        '$MEMBER' 127.0.0.1 $SERVER_PORT 1 0 >'$1.member'
        pkill -P \$other; wait"
    assert_equal "$(count ok "$1.other")" 1
    assert_equal "$(count ECONNREFUSED "$1.other")" 1
    assert_equal "$(head -1 "$1.member")" ok
}

@test "seccomp: one run holding a reserve member's and a non-member's permits gives each back to the pool it came from: the member gets its reserve again, the other is refused past the common pool" {
    start_server s -1
    member_rules
    # the other program holds the common pool's permit; the member takes
    # its reserve's and closes. Given back to the common pool (the order
    # one process's counts would guess), the other's second connect would
    # get it and the member's second would find nothing.
    sv_run "$T/out" --seccomp -- sh -c "
        '$FORK_SHARE' 127.0.0.1 $SERVER_PORT 1 60000 >'$T/other1' & holder=\$!
        until grep -q . '$T/other1'; do sleep 0.02; done
        '$MEMBER' 127.0.0.1 $SERVER_PORT 1 0 >'$T/member1'
        '$FORK_SHARE' 127.0.0.1 $SERVER_PORT 1 60000 >'$T/other2' & asker=\$!
        until grep -q . '$T/other2'; do sleep 0.02; done
        '$MEMBER' 127.0.0.1 $SERVER_PORT 1 0 >'$T/member2'
        pkill -P \$holder; pkill -P \$asker; wait"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(head -1 "$T/other1")" ok
    assert_equal "$(head -1 "$T/member1")" ok
    assert_equal "$(head -1 "$T/other2")" ECONNREFUSED
    assert_equal "$(head -1 "$T/member2")" ok
    assert_equal "$(server_stat s total)" 3
    assert_equal "$(server_stat s max)" 2
    # everything exited: every permit is back, each in its own pool
    pools_are_exact "$T/after"
    assert_equal "$(server_stat s max)" 2
}

@test "seccomp: SIGKILL of bulkhead run holding a reserve member's and a non-member's permits, after giving one back: once its programs are gone, each comes back to its own pool" {
    start_server s -1
    member_rules
    bg_tree "$T/tree" --seccomp -c "$RULES" -- sh -c "
        '$FORK_SHARE' 127.0.0.1 $SERVER_PORT 1 60000 >'$T/other1' &
        until grep -q . '$T/other1'; do sleep 0.02; done
        '$MEMBER' 127.0.0.1 $SERVER_PORT 1 0 >'$T/member1'
        '$MEMBER' 127.0.0.1 $SERVER_PORT 1 60000 >'$T/member2' &
        wait"
    local supervisor=$BG_PID
    wait_for file_has "$T/member2" .
    assert_equal "$(head -1 "$T/member2")" ok
    kill -KILL "$supervisor"
    wait "$supervisor" 2>/dev/null || true
    # its clients still hold their connections, and their permits
    assert_equal "$(server_stat s open)" 2
    kill -KILL -- "-$supervisor"
    wait_for server_open_is s 0
    pools_are_exact "$T/after"
}

@test "seccomp: --no-seccomp leaves a Go client unlimited, with the warning, and its exit status" {
    start_server s 1000
    compartment_rules 3
    sv_run "$T/go" --no-seccomp -- "$GOHTTP" "http://127.0.0.1:$SERVER_PORT/" 8 0
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/go")" 8
    assert_equal "$(server_stat s max)" 8
    assert_equal "$(cat "$T/go.err")" "bulkhead: run: warning: $GOHTTP is a Go program: Go makes its own system calls, which the shim never sees; its connections will not be limited"
    sv_run "$T/status" --no-seccomp -- "$GOHTTP"
    assert_equal "$SV_STATUS" 2
}

@test "seccomp: where the kernel refuses the filter, one line says so; the program runs unlimited with its exit status" {
    start_server s 1000
    compartment_rules 3
    # an outer filter that makes seccomp(2) fail with ENOSYS, as on a
    # kernel without it; bulkhead run starts under it
    python3 -c 'import ctypes' || fail "python3 without ctypes"
    cat >"$T/no_seccomp.py" <<'EOF'
import ctypes, os, platform, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
nr = {"x86_64": 317, "aarch64": 277}[platform.machine()]
def stmt(code, k): return struct.pack("HBBI", code, 0, 0, k)
def jump(code, k, jt, jf): return struct.pack("HBBI", code, jt, jf, k)
code = (stmt(0x20, 0) + jump(0x15, nr, 0, 1) +          # ld nr; jeq seccomp
        stmt(0x06, 0x00050000 | 38) + stmt(0x06, 0x7fff0000))  # ERRNO(ENOSYS); ALLOW
buf = ctypes.create_string_buffer(code)
prog = struct.pack("HxxxxxxQ", len(code) // 8, ctypes.addressof(buf))
pbuf = ctypes.create_string_buffer(prog)
assert libc.prctl(38, 1, 0, 0, 0) == 0                  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.addressof(pbuf), 0, 0) == 0  # SECCOMP_MODE_FILTER
os.execv(sys.argv[1], sys.argv[1:])
EOF
    SV_STATUS=0
    python3 "$T/no_seccomp.py" "$BULKHEAD" run -c "$RULES" -- \
        "$GOHTTP" "http://127.0.0.1:$SERVER_PORT/" 8 0 >"$T/go" 2>"$T/go.err" || SV_STATUS=$?
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/go")" 8
    assert_equal "$(server_stat s max)" 8
    assert_equal "$(cat "$T/go.err")" "bulkhead: run: the kernel refused the seccomp filter (Function not implemented): $GOHTTP is a Go program: Go makes its own system calls, which the shim never sees; its connections will not be limited"
    SV_STATUS=0
    python3 "$T/no_seccomp.py" "$BULKHEAD" run -c "$RULES" -- "$GOHTTP" \
        >/dev/null 2>&1 || SV_STATUS=$?
    assert_equal "$SV_STATUS" 2
}

# ---- the breaker learns what Go's non-blocking connects turned out to be
#
# In a private network namespace (helpers/netns.bash): its TcpActiveOpens
# counts the connects that sent a SYN, and port 7 is closed there (the
# kernel refuses, 111). The compartment refuses with EHOSTUNREACH (113),
# so the client's errno tells the breaker's refusal from the kernel's.

# closed_port_rules OPEN_MS [LINE...]: [down], breaker_failures 3, on
# port 7 and 8080 of the namespace.
closed_port_rules() {
    local open_ms=$1
    shift
    {
        printf '[global]\nnamespace = %s\nlog_file = %s\n' "$NS" "$T/bulkhead.log"
        printf '[down]\nlimit = 10\nerrno = EHOSTUNREACH\nbreaker_failures = 3\n'
        printf 'breaker_open_ms = %s\nmatch = 127.0.0.1:%s\nmatch = 127.0.0.1:8080\n' \
            "$open_ms" "$CLOSED_PORT"
        printf '%s\n' "$@"
    } >"$RULES"
}

# opens_above N: the namespace sent more SYNs than active_opens said N.
opens_above() {
    (($(active_opens) > $1))
}

# ns_dial OUT ARGS...: godial ARGS under bulkhead run in the namespace;
# its line in OUT.
ns_dial() {
    local out=$1
    shift
    in_ns timeout 30 "$BULKHEAD" run --seccomp -c "$RULES" -- "$GODIAL" "$@" \
        >"$out" 2>"$out.err" 3>&- || fail "godial $*: $(cat "$out.err")"
}

@test "seccomp: a Go client's refused non-blocking connects open the breaker: the next ones fail at once with its errno and send no SYN" {
    netns_start
    closed_port_rules 60000
    local before middle
    before=$(active_opens)
    ns_dial "$T/first" "127.0.0.1:$CLOSED_PORT" 3
    assert_equal "$(cat "$T/first")" "111 111 111"
    middle=$(active_opens)
    assert_equal "$((middle - before))" 3
    # another tree, another supervisor: the breaker is the namespace's
    ns_dial "$T/second" "127.0.0.1:$CLOSED_PORT" 5
    assert_equal "$(cat "$T/second")" "113 113 113 113 113"
    assert_equal "$(syns_since "$middle")" 0
}

@test "seccomp: a Go client's blackholed connects time out at connect_timeout_ms and open the breaker" {
    netns_start
    # a full accept queue: SYNs to it are dropped, nothing answers
    ns_py_server hole "$BLACKHOLE" --lifetime 60
    closed_port_rules 60000 "connect_timeout_ms = 1000" "match = 127.0.0.1:$SERVER_PORT"
    sed -i 's/^breaker_failures = 3$/breaker_failures = 2/' "$RULES"
    local before middle
    before=$(active_opens)
    ns_dial "$T/first" "127.0.0.1:$SERVER_PORT" 2 parallel
    assert_equal "$(cat "$T/first")" "110 110"  # the kernel's TCP_USER_TIMEOUT
    middle=$(active_opens)
    assert_equal "$((middle - before))" 2
    ns_dial "$T/second" "127.0.0.1:$SERVER_PORT" 3
    assert_equal "$(cat "$T/second")" "113 113 113"
    assert_equal "$(syns_since "$middle")" 0
}

@test "seccomp: a Go client's failed probe opens the breaker again: the connect right after it sends no SYN" {
    netns_start
    closed_port_rules 1000
    ns_dial "$T/open" "127.0.0.1:$CLOSED_PORT" 3
    assert_equal "$(cat "$T/open")" "111 111 111"
    local before
    before=$(active_opens)
    # refused by the breaker until half-open; the probe is refused by the
    # kernel, and the breaker opens again (for 2 s) before the next connect
    ns_dial "$T/probe" "127.0.0.1:$CLOSED_PORT" probe
    assert_equal "$(cat "$T/probe")" "111 113"
    assert_equal "$(syns_since "$before")" 1
}

@test "seccomp: a Go client's successful probe closes the breaker: the server sees every connect again, and the failures count from zero" {
    netns_start
    closed_port_rules 300
    ns_dial "$T/open" 127.0.0.1:8080 3
    assert_equal "$(cat "$T/open")" "111 111 111"
    ns_holdserver s 0 8080
    local server=$BG_PID
    ns_dial "$T/probe" 127.0.0.1:8080 probe
    assert_equal "$(cat "$T/probe")" "ok ok"
    ns_dial "$T/after" 127.0.0.1:8080 6 parallel
    assert_equal "$(cat "$T/after")" "ok ok ok ok ok ok"
    assert_equal "$(ns_server_stat s total)" 8
    # closed, not half-open: three new failures in a row to open it again
    kill "$server"
    wait_pid "$server" || true
    local before
    before=$(active_opens)
    ns_dial "$T/down" 127.0.0.1:8080 5
    assert_equal "$(cat "$T/down")" "111 111 111 113 113"
    assert_equal "$(syns_since "$before")" 3
}

@test "seccomp: a Go probe still connecting holds the probe slot: another tree's connect meanwhile is refused at once; the probe's timeout opens it again" {
    netns_start
    ns_py_server hole "$BLACKHOLE" --lifetime 60
    local hole=$SERVER_PORT
    closed_port_rules 300 "connect_timeout_ms = 1000" "match = 127.0.0.1:$hole"
    ns_dial "$T/open" "127.0.0.1:$CLOSED_PORT" 3
    assert_equal "$(cat "$T/open")" "111 111 111"
    local before
    before=$(active_opens)
    bg_ns "$T/probe" "$BULKHEAD" run --seccomp -c "$RULES" -- "$GODIAL" "127.0.0.1:$hole" probe
    local probe=$BG_PID
    # its SYN is out, unanswered: the probe is under way for 1 s
    wait_for opens_above "$before"
    ns_dial "$T/other" "127.0.0.1:$CLOSED_PORT" 1
    assert_equal "$(cat "$T/other")" 113
    wait_pid "$probe"
    assert_equal "$(cat "$T/probe")" "110 113"
    assert_equal "$(syns_since "$before")" 1
}

# ---- every static and Go program of the tree, however it was started
#
# Services start through wrappers (env, timeout, nice, a shell, a start
# script, a uid change): run supervises the whole tree whatever CMD is, so
# the Go or static program behind a dynamic wrapper is capped too.

# capped_behind WRAPPER...: the Go client, then the static one, started
# by bulkhead run (no flag) through WRAPPER: 3 of 8 reach the server at
# limit 3, never more at once; no line but the supervisor's refusals.
capped_behind() {
    start_server s 1000
    compartment_rules 3
    sv_run "$T/go" -- "$@" "$GOHTTP" "http://127.0.0.1:$SERVER_PORT/" 8 0
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/go")" 3
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(grep -v '^bulkhead: refused ' "$T/go.err")" ""
    sv_run "$T/static" -- "$@" "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 8 all="$T/s.stats"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/static")" 3
    assert_equal "$(count ECONNREFUSED "$T/static")" 5
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 6
    assert_equal "$(grep -v '^bulkhead: refused ' "$T/static.err")" ""
}

@test "seccomp: a Go and a static client behind env X=1: 3 of 8 at limit 3" {
    capped_behind env X=1
}

@test "seccomp: a Go and a static client behind timeout 30: 3 of 8 at limit 3" {
    capped_behind timeout 30
}

@test "seccomp: a Go and a static client behind sh -c (as its child): 3 of 8 at limit 3" {
    capped_behind sh -c '"$@"; exit $?' sh
}

@test "seccomp: a Go and a static client behind a #!/bin/sh start script that execs them: 3 of 8 at limit 3" {
    printf '#!/bin/sh\nexport X=1\nexec "$@"\n' >"$T/start"
    chmod +x "$T/start"
    capped_behind "$T/start"
}

@test "seccomp: a Go and a static client behind nice and a uid change to nobody with LD_PRELOAD dropped (as sudo -u does) under root's run: 3 of 8 at limit 3" {
    require_other_user
    capped_behind nice env -u LD_PRELOAD setpriv --reuid 65534 --regid 65534 --clear-groups
}

@test "seccomp: run by a user without CAP_SYS_ADMIN (its tree under no_new_privs), a Go and a static client behind env: 3 of 8 at limit 3" {
    require_other_user
    local dir
    dir=$(mktemp -d /tmp/bh-seccomp-nobody.XXXXXX)
    echo "$dir" >"$T/nobody_dir"
    chmod 755 "$dir"
    start_server s 1000
    compartment_rules 3
    install -m 644 "$RULES" "$dir/rules.ini"
    as_nobody "$BULKHEAD" run -c "$dir/rules.ini" -- env X=1 "$GOHTTP" \
        "http://127.0.0.1:$SERVER_PORT/" 8 0 >"$T/go" 2>"$T/go.err" 3>&-
    assert_equal "$(count ok "$T/go")" 3
    as_nobody "$BULKHEAD" run -c "$dir/rules.ini" -- env X=1 "$FORK_SHARE" \
        127.0.0.1 "$SERVER_PORT" 8 all="$T/s.stats" >"$T/static" 2>"$T/static.err" 3>&-
    assert_equal "$(count ok "$T/static")" 3
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(server_stat s total)" 6
}

@test "seccomp: a bulkhead run that has the shim preloaded itself (/etc/ld.so.preload, an outer tree) counts each supervised connect once: 3 of 8 at limit 3" {
    start_server s 1000
    compartment_rules 3
    SV_STATUS=0
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" "$BULKHEAD" run -c "$RULES" -- \
        "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 8 all="$T/s.stats" >"$T/static" 2>"$T/static.err" 3>&- ||
        SV_STATUS=$?
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/static")" 3
    assert_equal "$(server_stat s max)" 3
    assert_equal "$(grep -c 'for bulkhead\[' "$T/static.err")" 0
}

@test "seccomp: a run inside a supervised tree cannot have a listener of its own: the outer supervisor caps its Go client, and its line says so" {
    start_server s 1000
    compartment_rules 3
    sv_run "$T/go" -- "$BULKHEAD" run -c "$RULES" -- "$GOHTTP" "http://127.0.0.1:$SERVER_PORT/" 8 0
    assert_equal "$SV_STATUS" 0
    assert_equal "$(count ok "$T/go")" 3
    assert_equal "$(server_stat s max)" 3
    grep -qx "bulkhead: run: the kernel refused the seccomp filter (Device or resource busy): $GOHTTP is a Go program: Go makes its own system calls, which the shim never sees; an outer bulkhead run's supervisor caps it, by its rules" "$T/go.err"
}

# ---- without run: the shim says what it cannot reach

@test "seccomp: without run, a shimmed process exec'ing a Go or a static program says so in one line naming bulkhead run; a dynamic one, none; under run, none" {
    start_server s 200
    compartment_rules 3
    local tail="which LD_PRELOAD cannot reach: its connections are not limited; \`bulkhead run\` caps them through seccomp"
    run_shim sh -c "exec '$GOHTTP' http://127.0.0.1:$SERVER_PORT/ 1 0" >"$T/go" 2>"$T/go.err"
    assert_equal "$(cat "$T/go")" $'ok\ndone'
    assert_equal "$(cat "$T/go.err")" "bulkhead: exec $GOHTTP: a Go program, $tail"
    run_shim env "$FORK_SHARE" 127.0.0.1 "$SERVER_PORT" 1 0 >"$T/static" 2>"$T/static.err"
    assert_equal "$(count ok "$T/static")" 1
    assert_equal "$(cat "$T/static.err")" "bulkhead: exec $FORK_SHARE: a statically linked program, $tail"
    printf '#!%s\n' "$FORK_SHARE" >"$T/script"
    chmod +x "$T/script"
    run_shim sh -c "exec '$T/script'" >/dev/null 2>"$T/script.err" || true
    assert_equal "$(grep bulkhead "$T/script.err")" "bulkhead: exec $T/script: a script for $FORK_SHARE, a statically linked program, $tail"
    local loader
    loader=$(readelf -lW /bin/true | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
    run_shim sh -c "env true; exec '$loader' /bin/true" 2>"$T/dynamic.err"
    run_shim "$loader" /bin/sh -c "exec '$loader' /bin/true" 2>>"$T/dynamic.err"
    assert_equal "$(cat "$T/dynamic.err")" ""
    sv_run "$T/run" -- sh -c "exec '$GOHTTP' http://127.0.0.1:$SERVER_PORT/ 1 0"
    assert_equal "$SV_STATUS" 0
    assert_equal "$(cat "$T/run")" $'ok\ndone'
    assert_equal "$(cat "$T/run.err")" ""
}

@test "seccomp: without run, the line comes once per process, and the exec goes on: a failed exec of a static program, then a Go program" {
    start_server s 200
    compartment_rules 3
    cp "$FORK_SHARE" "$T/not_executable"
    chmod -x "$T/not_executable"
    SV_STATUS=0
    run_shim python3 -c 'import os, sys
try:
    os.execv(sys.argv[1], [sys.argv[1]])
except PermissionError:
    os.execv(sys.argv[2], sys.argv[2:])' "$T/not_executable" "$GOHTTP" \
        "http://127.0.0.1:$SERVER_PORT/" 1 0 >"$T/out" 2>"$T/err" || SV_STATUS=$?
    assert_equal "$SV_STATUS" 0
    assert_equal "$(cat "$T/out")" $'ok\ndone'
    assert_equal "$(grep -c 'bulkhead: exec' "$T/err")" 1
    grep -q "^bulkhead: exec $T/not_executable: a statically linked program, " "$T/err"
}
