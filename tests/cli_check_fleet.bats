#!/usr/bin/env bats
# The fleet keys (fleet, in its redis:// and redis-sentinel:// forms,
# fleet_password_file, fleet_sentinel_password_file, fleet_host, fleet_name,
# fleet_refresh_ms, fleet_lease_ms, fleet_fallback; fleet_limit per
# compartment) as a user meets them in `bulkhead check` and `bulkhead
# explain`: every key accepted and shown, the password never; each bad value
# one line naming file, line and key; the password file looked at by check
# (missing, or readable by others), never by the shim. A valid fleet file is
# checked against a real redis-server on a loopback port (and a real
# redis-sentinel for the Sentinel form), as the agent would reach it.

load helpers/common
load helpers/check
load helpers/fleet


setup() { check_setup; }
teardown() { bh_teardown; }

# Lines 1-2 are [global] and its namespace; rules_with adds its argument
# from line 3 on, then compartment [c] (limit, match) follows it. The
# fleet keys are global, so this one stands in for helpers/check.bash's,
# which check_says_only uses.
rules_with() {
    printf '[global]\nnamespace = %s\n%s[c]\nlimit = 2\nmatch = 127.0.0.1:7001\n' \
        "$NS" "$1" >"$RULES"
}

@test "check: every fleet key is accepted and shown, the password never" {
    local password="s3cret-$$"
    REDIS_PASSWORD=$password
    start_redis
    printf '%s\n' "$password" >"$T/redis.pass"
    chmod 600 "$T/redis.pass"
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
fleet = redis://127.0.0.1:$REDIS_PORT/3
fleet_password_file = $T/redis.pass
fleet_host = web-01.eu_west
fleet_name = shop
fleet_refresh_ms = 250
fleet_lease_ms = 500
fleet_fallback = 4
[db]
fleet_limit = 40000
wait_ms = 100
match = 127.0.0.1:7001
[api]
limit = 5
fleet_limit = 30
match = 127.0.0.1:7002
[local]
limit = 3
match = 127.0.0.1:7003
EOF
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line --index 0 "$RULES: valid"
    refute_output --partial "$password"
    local fleet
    fleet=$(sed -n '/^fleet /,/^$/p' <<<"$output")
    assert_equal "$fleet" "fleet      redis://127.0.0.1:$REDIS_PORT/3, as host web-01.eu_west in fleet shop
           password in $T/redis.pass
           refresh 250 ms, lease 500 ms, fallback 4 for 300000 ms"
    # [db]: no limit given: its ceiling is the fleet limit, at most 32767.
    local db
    db=$(sed -n '/^\[db\]/,/^$/p' <<<"$output")
    assert_equal "$db" "[db]  line 10
  limit        32767
  wait_ms      100
  hold_wait_ms 0 (a process already holding its permits is refused at once rather than wait for more)
  max_waiters  64
  errno        ECONNREFUSED
  fleet_limit  40000 (fleet-wide; this host's share is granted by bulkhead agent, up to limit)
  match        line 13   address   127.0.0.1:7001"
    local api plain
    api=$(sed -n '/^\[api\]/,/^$/p' <<<"$output")
    plain=$(sed -n '/^\[local\]/,$p' <<<"$output")
    grep -qx "  limit        5" <<<"$api"
    grep -qx "  fleet_limit  30 (fleet-wide; this host's share is granted by bulkhead agent, up to limit)" <<<"$api"
    refute [ -z "$plain" ]
    refute grep -q fleet <<<"$plain"
}

@test "check: the defaults: the host's own name, split, refresh 1000, lease 10000" {
    start_redis
    rules_with "fleet = redis://127.0.0.1:$REDIS_PORT
"
    printf 'fleet_limit = 8\n' >>"$RULES"
    run "$BULKHEAD" check "$RULES"
    assert_success
    local host
    host=$(hostname | tr -c 'A-Za-z0-9._\n-' '-')
    assert_line "fleet      redis://127.0.0.1:$REDIS_PORT, as host $host in fleet $NS"
    assert_line "           refresh 1000 ms, lease 10000 ms, fallback split (fleet_limit / hosts last seen) for 300000 ms"
    refute_output --partial "password"
    # limit = 2 was given: it stays this host's ceiling.
    assert_line "  limit        2"
    assert_line "  fleet_limit  8 (fleet-wide; this host's share is granted by bulkhead agent, up to limit)"
}

@test "check: a file without fleet keys says nothing of a fleet" {
    rules_with ""
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_output "$RULES: valid
namespace  $NS, on_failure closed
log        warn, to stderr (syslog, /dev/log, once a daemon moves stderr)
1 compartment, 1 match rule; the first match in file order wins

[c]  line 3
  limit        2
  wait_ms      0 (fail fast)
  max_waiters  64
  errno        ECONNREFUSED
  match        line 5    address   127.0.0.1:7001"
}

@test "check: each bad fleet URL is one line saying what is wrong" {
    local u
    u() { check_says_only "fleet = $1"$'\n' "3: fleet: \"$1\" $2"; }
    local forms="redis://HOST:PORT[/DB] or redis-sentinel://HOST[:PORT],.../MASTER[/DB]"
    u http://10.0.0.5:6379 "is not redis:// or redis-sentinel:// (use $forms)"
    u 10.0.0.5:6379 "is not a $forms URL"
    u rediss://10.0.0.5:6379 "uses TLS (rediss://), which bulkhead agent does not speak: use $forms"
    u redis://10.0.0.5 "has no port"
    u redis://10.0.0.5: "has no port"
    u redis://10.0.0.5/1 "has no port"
    u redis://:6379 "has no host"
    u redis://r:0 "has a bad port (1 to 65535)"
    u redis://r:65536 "has a bad port (1 to 65535)"
    u redis://r:six "has a bad port (1 to 65535)"
    u redis://r:6379x "has something after its port other than /DB"
    u 'redis://r:6379?db=1' "has something after its port other than /DB"
    u redis://r:6379/16 "has a bad database number (0 to 15)"
    u redis://r:6379/ "has a bad database number (0 to 15)"
    u redis://r:6379/1/2 "has something after its database number"
    u redis://::1:6379 "has an IPv6 address without [brackets]"
    u 'redis://[::1:6379' "has no ] after its IPv6 address"
    u 'redis://[redis]:6379' "has a bad IPv6 address in [brackets]"
    u redis://10.0.0.300:6379 "has a bad IPv4 address"
    u 'redis://r$1:6379' "has a bad host (a name, an IPv4 address or [IPv6])"
    u redis://:pw@10.0.0.5:6379 "holds a user or password: put the password in fleet_password_file"
    u redis://user:pw@10.0.0.5:6379 "holds a user or password: put the password in fleet_password_file"
    check_says_only $'fleet =\n' "3: fleet: missing value"
}

@test "check: each bad sentinel URL is one line saying what is wrong" {
    local u s=redis-sentinel://
    u() { check_says_only "fleet = $1"$'\n' "3: fleet: \"$1\" $2"; }
    u "$s" "has no sentinel host (redis-sentinel://HOST[:PORT],.../MASTER)"
    u "$s/m" "has no sentinel host (redis-sentinel://HOST[:PORT],.../MASTER)"
    u "${s}h1,,h2/m" "has an empty host in its sentinel list"
    u "${s}h1,/m" "has an empty host in its sentinel list"
    u "${s},h1/m" "has an empty host in its sentinel list"
    u "${s}h1:26379" "has no master name (redis-sentinel://HOST[:PORT],.../MASTER)"
    u "${s}h1:26379/" "has no master name (redis-sentinel://HOST[:PORT],.../MASTER)"
    u "${s}h1,h2,h3,h4,h5,h6,h7,h8,h9/m" "has more than 8 sentinels"
    u "${s}h1:0/m" "has a bad port (1 to 65535)"
    u "${s}h1:/m" "has a bad port (1 to 65535)"
    u "${s}h1:26379x/m" "has something after a sentinel's port other than , or /MASTER"
    u "${s}h1/my master" "has a bad master name (use A-Z a-z 0-9 _ . -)"
    u "${s}h1/m/16" "has a bad database number (0 to 15)"
    u "${s}h1/m/1/2" "has something after its database number"
    u "${s}h1,::1/m" "has an IPv6 address without [brackets]"
    u "${s}h1,10.0.0.300/m" "has a bad IPv4 address"
    u "${s}:pw@h1/m" "holds a user or password: put the passwords in fleet_password_file and fleet_sentinel_password_file"
    u "redis+sentinel://h1/m" "is not redis:// or redis-sentinel:// (use redis://HOST:PORT[/DB] or redis-sentinel://HOST[:PORT],.../MASTER[/DB])"
    check_says_only $'fleet = redis://r:6379\nfleet_sentinel_password_file = s.pass\n' \
        "4: fleet_sentinel_password_file: needs fleet = redis-sentinel://HOST[:PORT],.../MASTER in [global]"
    check_says_only $'fleet_sentinel_password_file = s.pass\n' \
        "3: fleet_sentinel_password_file: needs fleet = redis-sentinel://HOST[:PORT],.../MASTER in [global]"
}

@test "check: each bad value of the other fleet keys is one line" {
    local name="use 1 to 63 of A-Z a-z 0-9 _ . -"
    check_says_only $'fleet_host = web 01\n' "3: fleet_host: \"web 01\" is not a valid host name ($name)"
    check_says_only $'fleet_host = eu/web\n' "3: fleet_host: \"eu/web\" is not a valid host name ($name)"
    local long
    long=$(printf 'h%.0s' {1..64})
    # the error repeats the first 60 characters of what was written
    check_says_only "fleet_host = $long"$'\n' \
        "3: fleet_host: \"${long:0:60}...\" is not a valid host name ($name)"
    check_says_only $'fleet_refresh_ms = 49\n' "3: fleet_refresh_ms: 49 is out of range (50 to 600000)"
    check_says_only $'fleet_refresh_ms = 1s\n' '3: fleet_refresh_ms: "1s" is not a whole number'
    check_says_only $'fleet_lease_ms = 99\n' "3: fleet_lease_ms: 99 is out of range (100 to 86400000)"
    check_says_only $'fleet_fallback = half\n' \
        '3: fleet_fallback: "half" is neither split nor a whole number from 0 to 32767'
    check_says_only $'fleet_fallback = 32768\n' \
        '3: fleet_fallback: "32768" is neither split nor a whole number from 0 to 32767'
    check_says_only $'fleet_name = a b\n' \
        '3: fleet_name: "a b" is not a valid name (use 1 to 47 of A-Z a-z 0-9 _ . -)'
    check_says_only $'fleet = redis://r:1\n[f]\nfleet_limit = 0\nmatch = 127.0.0.1:7002\n' \
        "5: fleet_limit: 0 is out of range (1 to 1000000)"
    check_says_only $'fleet = redis://r:1\n[f]\nfleet_limit = 1000001\nmatch = 127.0.0.1:7002\n' \
        "5: fleet_limit: 1000001 is out of range (1 to 1000000)"
    check_says_only $'fleet_limit = 10\n' '3: unknown key "fleet_limit" in [global]'
}

@test "check: fleet_lease_ms must be at least twice fleet_refresh_ms; the line names both" {
    local why="a host would lose its share between two refreshes"
    check_says_only $'fleet_refresh_ms = 600\nfleet_lease_ms = 1000\n' \
        "4: fleet_lease_ms: 1000 is less than twice fleet_refresh_ms (600 at line 3): $why"
    check_says_only $'fleet_lease_ms = 1000\nfleet_refresh_ms = 600\n' \
        "3: fleet_lease_ms: 1000 is less than twice fleet_refresh_ms (600 at line 4): $why"
    check_says_only $'fleet_lease_ms = 1500\n' \
        "3: fleet_lease_ms: 1500 is less than twice fleet_refresh_ms (1000, the default): $why"
    check_says_only $'fleet_refresh_ms = 6000\n' \
        "3: fleet_refresh_ms: 6000 is more than half of fleet_lease_ms (10000, the default): $why"
    # A value already reported is not compared: one line.
    check_says_only $'fleet_refresh_ms = 6000\nfleet_lease_ms = 10 s\n' \
        '4: fleet_lease_ms: "10 s" is not a whole number'
}

@test "check: fleet_limit without fleet = is reported at each fleet_limit, in line order" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[a]
limit = 1
fleet_limit = 10
match = 127.0.0.1:7001
wait_ms = soon
[b]
fleet_limit = 20
match = 127.0.0.1:7002
[c]
limit = x
match = 127.0.0.1:7003
EOF
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:5: fleet_limit: needs fleet = redis://HOST:PORT in [global]
bulkhead: $RULES:7: wait_ms: \"soon\" is not a whole number
bulkhead: $RULES:9: fleet_limit: needs fleet = redis://HOST:PORT in [global]
bulkhead: $RULES:12: limit: \"x\" is not a whole number
bulkhead: $RULES: 4 errors"
    # The shim names the same first line at start-up.
    run --separate-stderr run_shim /bin/true
    assert_success
    assert_equal "$stderr" \
        "bulkhead: $RULES:5: fleet_limit: needs fleet = redis://HOST:PORT in [global] (and 3 more: bulkhead check $RULES)"
}

@test "check: fleet_limit under a [global] that comes last, or under a bad fleet =" {
    start_redis
    write_rules "$RULES" <<EOF
[db]
fleet_limit = 12
match = 127.0.0.1:7001
[global]
namespace = $NS
fleet = redis://127.0.0.1:$REDIS_PORT
EOF
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "  fleet_limit  12 (fleet-wide; this host's share is granted by bulkhead agent, up to limit)"
    # A wrong URL is its own error; fleet_limit is not reported again.
    sed -i 's|^fleet = .*|fleet = redis://127.0.0.1|' "$RULES"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:6: fleet: \"redis://127.0.0.1\" has no port
bulkhead: $RULES: 1 error"
}

@test "check: a password file that is missing is one line, on its key's line" {
    # Nothing listens on the port: Redis is not tried, the agent would only
    # say the same.
    rules_with "fleet = redis://127.0.0.1:$(free_port)
fleet_password_file = $T/nowhere.pass
"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:4: fleet_password_file: $T/nowhere.pass: No such file or directory
bulkhead: $RULES: 1 error"
}

@test "check: a password file others may read is one line; chmod 600 makes it valid" {
    local password="pw-$$"
    REDIS_PASSWORD=$password
    start_redis
    printf '%s\n' "$password" >"$T/redis.pass"
    rules_with "fleet = redis://127.0.0.1:$REDIS_PORT
fleet_password_file = $T/redis.pass
"
    local mode
    for mode in 644 604 640 660; do
        chmod "$mode" "$T/redis.pass"
        run "$BULKHEAD" check "$RULES"
        assert_failure 1
        assert_output "bulkhead: $RULES:4: fleet_password_file: $T/redis.pass: others may read it (mode 0$mode); chmod 600 it
bulkhead: $RULES: 1 error"
    done
    chmod 600 "$T/redis.pass"
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "           password in $T/redis.pass"
    refute_output --partial "$password"
}

@test "check: a Sentinel fleet with passwords for Redis and for the sentinels: shown, looked at, and reached through the sentinel" {
    command -v redis-sentinel >/dev/null || skip "redis-sentinel is not installed"
    local redis_pw="r-$$" sentinel_pw="s-$$" sentinel_port
    REDIS_PASSWORD=$redis_pw
    start_redis
    sentinel_port=$(free_port)
    printf '%s\n' "port $sentinel_port" "bind 127.0.0.1" "dir $T" "requirepass $sentinel_pw" \
        "sentinel monitor shop 127.0.0.1 $REDIS_PORT 1" "sentinel auth-pass shop $redis_pw" \
        >"$T/sentinel.conf"
    redis-sentinel "$T/sentinel.conf" >"$T/sentinel.log" 2>&1 3>&- &
    track_pid $!
    sentinel_up() {
        [[ "$(redis-cli -p "$sentinel_port" -a "$sentinel_pw" --no-auth-warning ping 2>/dev/null)" == PONG ]]
    }
    wait_for sentinel_up
    printf '%s\n' "$redis_pw" >"$T/redis.pass"
    printf '%s\n' "$sentinel_pw" >"$T/sentinel.pass"
    chmod 600 "$T/redis.pass"
    chmod 644 "$T/sentinel.pass"
    # Relative names: from the rules file's directory.
    rules_with "fleet = redis-sentinel://127.0.0.1:$sentinel_port/shop
fleet_password_file = redis.pass
fleet_sentinel_password_file = sentinel.pass
"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:5: fleet_sentinel_password_file: $T/sentinel.pass: others may read it (mode 0644); chmod 600 it
bulkhead: $RULES: 1 error"
    chmod 600 "$T/sentinel.pass"
    run "$BULKHEAD" check "$RULES"
    assert_success
    local fleet
    fleet=$(sed -n '/^fleet /,/^$/p' <<<"$output" | sed -n 1,3p)
    assert_equal "$fleet" "fleet      redis-sentinel://127.0.0.1:$sentinel_port/shop, as host $(hostname | tr -c 'A-Za-z0-9._\n-' '-') in fleet $NS
           password in $T/redis.pass
           sentinels' password in $T/sentinel.pass"
    refute_output --partial "$redis_pw"
    refute_output --partial "$sentinel_pw"
    # A wrong sentinels' password: the sentinel's own refusal, one line.
    echo wrong >"$T/sentinel.pass"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_equal "${#lines[@]}" 2
    assert_line --index 0 --regexp "^bulkhead agent: no sentinel answers for master shop \(127\.0\.0\.1:$sentinel_port: AUTH: WRONGPASS .*\)\$"
    # The right one, but a wrong password for Redis: Redis's refusal.
    echo "$sentinel_pw" >"$T/sentinel.pass"
    echo wrong >"$T/redis.pass"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_line --regexp "^bulkhead agent: Redis at 127\.0\.0\.1:$REDIS_PORT: AUTH: WRONGPASS .*\(master shop, named by sentinel 127\.0\.0\.1:$sentinel_port\)\$"
}

@test "check: the shim never opens the password file" {
    # A FIFO would block whoever opened it: the shim starting a program with
    # these rules must not.
    mkfifo "$T/redis.pass"
    rules_with "fleet = redis://127.0.0.1:1
fleet_password_file = $T/redis.pass
"
    printf 'fleet_limit = 3\n' >>"$RULES"
    run timeout 5 env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$RULES" /bin/echo ran
    assert_success
    assert_output "ran"
}

@test "explain: a fleet compartment says it is fleet-wide; others do not" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
fleet = redis://127.0.0.1:1
[db]
fleet_limit = 40
connect_timeout_ms = 1000
match = 127.0.0.1:7001
[plain]
limit = 1
match = 127.0.0.1:7002
EOF
    # explain does not reach Redis: nothing listens on port 1.
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001 127.0.0.1:7002 127.0.0.1:7003
    assert_success
    assert_output "127.0.0.1:7001 -> compartment db (line 7: match = 127.0.0.1:7001)
  fleet-wide: fleet_limit 40 (this host's share is granted by bulkhead agent)
  connect_timeout_ms 1000
127.0.0.1:7002 -> compartment plain (line 10: match = 127.0.0.1:7002)
127.0.0.1:7003 -> not limited"
}

@test "explain: fleet_limit without fleet = makes explain fail as other bad rules do" {
    rules_with ""
    printf 'fleet_limit = 3\n' >>"$RULES"
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001
    assert_failure 1
    assert_line "bulkhead: $RULES:6: fleet_limit: needs fleet = redis://HOST:PORT in [global]"
    refute_output --partial "->"
}
