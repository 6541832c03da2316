#!/usr/bin/env bats
# Daemons that start as root and drop to their own user before they
# connect: nginx (`user www-data;`), haproxy (`user nobody`) and a python
# process calling setuid(). Each is started by the test as root under
# `bulkhead run`; what counts is what the hold server saw at once, and the
# answers the clients got.

load helpers/common

setup() {
    bh_setup
    [[ $(id -u) -eq 0 ]] || skip "starting a daemon that drops root needs root"
    : >"$T/other_users"
}

# The daemons first, each a process group of its own (a master's workers
# outlive a master killed alone); then the namespaces the daemons' users
# made, removed and checked like ours.
teardown() {
    local user key group
    if [[ -s "$T/groups" ]]; then
        while read -r group; do kill -KILL -- "-$group" 2>/dev/null || true; done <"$T/groups"
        while read -r group; do wait_for -t 5 group_gone "$group" || true; done <"$T/groups"
    fi
    while read -r user; do
        key=$("$BULKHEAD" key -n "$NS" -u "$user")
        timeout 10 "$BULKHEAD" reset --force -n "$NS" -u "$user" >/dev/null 2>&1 || true
        ! ipc_under_key "$key" || echo "teardown: $user's namespace $NS left behind" >&2
    done <"$T/other_users"
    bh_teardown
}

# rules LIMIT: one compartment [up] on the hold server, fail-fast.
rules() {
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
[up]
limit = $1
match = 127.0.0.1:$SERVER_PORT
EOF2
}

# burst URL N: N curls at once; prints how many got each HTTP status.
burst() {
    local i
    for i in $(seq 1 "$2"); do
        curl -s -o /dev/null -w '%{http_code}\n' --max-time 20 "$1" >"$T/curl.$i" &
    done
    wait
    cat "$T"/curl.* | sort | uniq -c | awk '{ printf "%s=%s ", $2, $1 }'
}

# daemon NAME CMD...: CMD under `bulkhead run`, as a process group of its
# own, killed whole at teardown.
daemon() {
    local name=$1
    shift
    setsid "$BULKHEAD" run -c "$RULES" -- "$@" >"$T/$name.out" 2>&1 3>&- &
    echo $! >>"$T/groups"
}

group_gone() {
    ! pgrep -g "$1" >/dev/null
}

# nginx_conf PORT: nginx on PORT, two workers as www-data, proxying to
# the hold server; a refused upstream connect is a 502, not retried.
nginx_conf() {
    local port=$1
    cat >"$T/nginx.conf" <<EOF2
daemon off;
master_process on;
worker_processes 2;
user www-data;
pid $T/nginx.pid;
error_log $T/nginx.err warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $T/nginx-body;
    proxy_temp_path $T/nginx-proxy;
    fastcgi_temp_path $T/nginx-fastcgi;
    uwsgi_temp_path $T/nginx-uwsgi;
    scgi_temp_path $T/nginx-scgi;
    upstream up { server 127.0.0.1:$SERVER_PORT max_fails=0; }
    server {
        listen 127.0.0.1:$port;
        location / { proxy_pass http://up; proxy_next_upstream off; }
    }
}
EOF2
}

# listening PORT: something accepts on it (a bare connect: no request goes
# upstream).
listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

@test "nginx with user www-data: its workers stay within the upstream's limit" {
    command -v nginx >/dev/null || fail "nginx is not installed (make deps)"
    echo www-data >>"$T/other_users"
    start_server srv 3000
    rules 3
    local port
    port=$(free_port)
    nginx_conf "$port"
    daemon nginx nginx -c "$T/nginx.conf"
    wait_for listening "$port" || fail "nginx did not start: $(cat "$T/nginx.out" "$T/nginx.err")"
    run burst "http://127.0.0.1:$port/" 10
    assert_output "200=3 502=7 "
    assert_equal "$(server_stat srv max)" 3
}

@test "haproxy with user nobody: its connections stay within the upstream's limit" {
    command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
    echo nobody >>"$T/other_users"
    start_server srv 3000
    rules 3
    local port
    port=$(free_port)
    cat >"$T/haproxy.cfg" <<EOF2
global
    user nobody
    group nogroup
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
EOF2
    daemon haproxy haproxy -db -f "$T/haproxy.cfg"
    wait_for listening "$port" || fail "haproxy did not start: $(cat "$T/haproxy.out")"
    run burst "http://127.0.0.1:$port/" 10
    assert_output "200=3 503=7 "
    assert_equal "$(server_stat srv max)" 3
}

@test "a process that setuid()s to nobody is capped in nobody's namespace, which stat -u reads" {
    echo nobody >>"$T/other_users"
    start_server srv -1
    rules 2
    cat >"$T/drop.py" <<'EOF2'
import os, socket, sys, time
port = int(sys.argv[1])
out = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o600)  # while still root
os.setuid(65534)
held, refused = [], 0
for _ in range(10):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        held.append(s)
    except OSError:
        refused += 1
os.write(out, b"ok=%d refused=%d\n" % (len(held), refused))
time.sleep(600)
EOF2
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" \
        /usr/bin/python3 "$T/drop.py" "$SERVER_PORT" "$T/drop.out" >"$T/drop.log" 2>&1 3>&- &
    track_pid $!
    wait_for grep -qs '^ok=' "$T/drop.out" || fail "$(cat "$T/drop.log")"
    assert_equal "$(cat "$T/drop.out")" "ok=2 refused=8"
    assert_equal "$(server_stat srv open)" 2
    run "$BULKHEAD" stat -n "$NS" -u nobody --json
    assert_success
    assert_output --partial '"name": "up", "limit": 2, "in_use": 2'
}

# drop_raw ON_FAILURE: a python process changes its uid with a raw
# syscall the shim cannot see, then connects three times; prints its
# report and its stderr.
drop_raw() {
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
on_failure = $1
[up]
limit = 1
match = 127.0.0.1:$SERVER_PORT
EOF2
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" /usr/bin/python3 -c '
import ctypes, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.syscall(105, 65534) == 0     # SYS_setuid on x86_64
held, ok = [], 0
for _ in range(3):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1]))); ok += 1
    except OSError:
        pass
    held.append(s)
print("ok=%d" % ok)' "$SERVER_PORT" 2>&1
}

@test "a uid change the shim cannot see is a permission failure said in one line, never a silent bypass" {
    [[ $(uname -m) == x86_64 ]] || skip "the raw syscall number is x86_64's"
    start_server srv -1
    run drop_raw closed
    assert_line ok=0
    assert_line --regexp "^bulkhead: namespace \"$NS\" of uid 0: permission denied: python3\[[0-9]+\] runs as uid 65534 now, changed without setuid\(\) or its kin \(a raw syscall\?\); refusing what the rules match \(on_failure = closed\)$"
    assert_equal "$(grep -c 'permission denied' <<<"$output")" 1
    assert_equal "$(server_stat srv total)" 0
    run drop_raw open
    assert_line ok=3
    assert_line --partial "permission denied: python3["
    assert_line --partial "connections pass unlimited (on_failure = open)"
}

@test "nginx with user www-data and a root log_file: its workers' line about the uid change reaches the log" {
    command -v nginx >/dev/null || fail "nginx is not installed (make deps)"
    echo www-data >>"$T/other_users"
    start_server srv -1
    write_rules "$RULES" <<EOF2
[global]
namespace = $NS
log = info
log_file = $T/shim.log
[up]
limit = 3
match = 127.0.0.1:$SERVER_PORT
EOF2
    local port
    port=$(free_port)
    nginx_conf "$port"
    daemon nginx nginx -c "$T/nginx.conf"
    wait_for listening "$port" || fail "nginx did not start: $(cat "$T/nginx.out" "$T/nginx.err")"
    # One line from each of the two workers, in root's 0600 log.
    wait_for test "$(grep -c 'changed its uid from 0 to 33' "$T/shim.log")" = 2 ||
        fail "not a line per worker about the uid change: $(cat "$T/shim.log")"
    assert_equal "$(stat -c %U "$T/shim.log")" root
    # Loaded once for the whole process tree, not once per process.
    assert_equal "$(grep -c ' loaded: ' "$T/shim.log")" 1
}
