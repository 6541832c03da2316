#!/usr/bin/env bats
# Daemons that start as root and drop to their own user before they
# connect, started by the test as root under `bulkhead run`: nginx (`user
# www-data;`) and haproxy (`user nobody`). What counts is what the hold
# server saw at once, the answers the clients got, and the shim's log.
# (A cli file: `bulkhead run` always preloads build/libbulkhead.so, so the
# sanitizer tiers leave it out; tests/uid_change.bats covers the same
# code with the shim preloaded directly.)

load helpers/common
load helpers/uid

setup() { uid_setup; }
teardown() { uid_teardown; }

# burst URL N: N curls at once; prints how many got each HTTP status.
burst() {
    local i
    for i in $(seq 1 "$2"); do
        curl -s -o /dev/null -w '%{http_code}\n' --max-time 20 "$1" >"$T/curl.$i" &
    done
    wait
    cat "$T"/curl.* | sort | uniq -c | awk '{ printf "%s=%s ", $2, $1 }'
}

# nginx_conf PORT: nginx on PORT, two workers as www-data, proxying to
# the hold server; a refused upstream connect is a 502, not retried.
nginx_conf() {
    local port=$1
    {
        nginx_conf_head "master_process on;" "worker_processes 2;" "user www-data;"
        cat <<EOF2
    upstream up { server 127.0.0.1:$SERVER_PORT max_fails=0; }
    server {
        listen 127.0.0.1:$port;
        location / { proxy_pass http://up; proxy_next_upstream off; }
    }
}
EOF2
    } >"$T/nginx.conf"
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
    compartment_rules 3
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
    compartment_rules 3
    local port
    port=$(free_port)
    haproxy_config "$port" "user nobody" "group nogroup" >"$T/haproxy.cfg"
    daemon haproxy haproxy -db -f "$T/haproxy.cfg"
    wait_for listening "$port" || fail "haproxy did not start: $(cat "$T/haproxy.out")"
    run burst "http://127.0.0.1:$port/" 10
    assert_output "200=3 503=7 "
    assert_equal "$(server_stat srv max)" 3
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
