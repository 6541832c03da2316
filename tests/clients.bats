#!/usr/bin/env bats
# Real clients (python3, wget, curl, perl) reaching a capped service by
# name, as users run them. Names come from a private /etc/hosts.

load helpers/common

setup() {
    bh_setup
    require_private_hosts
    make_hosts
}
teardown() { bh_teardown; }

# name_rules LIMIT MATCH [ERRNO]: a fail-fast compartment.
name_rules() {
    write_rules "$RULES" <<RULES
[global]
namespace = $NS
[payments]
limit = $1
wait_ms = 0
errno = ${3:-ECONNREFUSED}
match = $2
RULES
}

@test "python3 socket.create_connection by name: the second is refused while one holds" {
    start_server web 3000
    name_rules 1 "payments.test:$SERVER_PORT"
    bg_hosts "$T/py.1" python3 -c "$PY_CLIENT" payments.test "$SERVER_PORT"
    wait_for file_has "$T/py.1" '^ok$'
    run hosts_shim python3 -c "$PY_CLIENT" payments.test "$SERVER_PORT"
    assert_failure 1
    assert_line ECONNREFUSED
    assert_equal "$(server_stat web total)" 1
}

@test "6 parallel wgets by name, limit 2: 2 fetch, 4 fail with exit 4" {
    # The two admitted are held past the test's end (teardown ends them):
    # however slowly six wgets start, no permit comes back meanwhile.
    start_server web 60000
    name_rules 2 "payments.test:$SERVER_PORT"
    local i
    for i in $(seq 1 6); do
        run_rc "$T/wget.$i" hosts_shim wget -q -O /dev/null --no-proxy -T 100 -t 1 \
            "http://payments.test:$SERVER_PORT/" 3>&- &
        track_pid $!
    done
    wait_for rc_count_is 4 4 "$T/wget"
    assert_equal "$(server_stat web open)" 2
    assert_equal "$(server_stat web max)" 2
    assert_equal "$(server_stat web total)" 2
}

@test "10 parallel curls to a subdomain under *.payments.test:*, limit 2" {
    start_server web 60000  # held past the test, as above
    name_rules 2 '*.payments.test:*'
    local i
    for i in $(seq 1 10); do
        run_rc "$T/curl.$i" hosts_shim curl -s -o /dev/null --noproxy '*' --max-time 100 \
            "http://api.payments.test:$SERVER_PORT/" 3>&- &
        track_pid $!
    done
    wait_for rc_count_is 7 8 "$T/curl"
    assert_equal "$(server_stat web open)" 2
    assert_equal "$(server_stat web max)" 2
    assert_equal "$(server_stat web total)" 2
}

# Perl prints the name of $! (e.g. ECONNREFUSED) or "ok".
PERL_IO='use IO::Socket::INET; use Errno;
my $s = IO::Socket::INET->new(PeerAddr => $ARGV[0], PeerPort => $ARGV[1], Proto => "tcp");
if ($s) { print "ok\n"; exit 0 }
my ($name) = grep { $!{$_} } keys %!; print(($name // "EUNKNOWN"), "\n"); exit 1;'

PERL_RAW='use Socket; use Errno;
my @h = gethostbyname($ARGV[0]) or do { print "resolve failed\n"; exit 2 };
socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
if (connect($s, pack_sockaddr_in($ARGV[1], $h[4]))) { print "ok\n"; exit 0 }
my ($name) = grep { $!{$_} } keys %!; print(($name // "EUNKNOWN"), "\n"); exit 1;'

@test "perl IO::Socket::INET by name is capped; another name for the same address is not" {
    start_server web -1
    name_rules 0 "payments.test:$SERVER_PORT" EHOSTUNREACH
    run hosts_shim perl -e "$PERL_IO" payments.test "$SERVER_PORT"
    assert_failure 1
    assert_line EHOSTUNREACH
    run hosts_shim perl -e "$PERL_IO" other.test "$SERVER_PORT"
    assert_success
    assert_line ok
    assert_equal "$(server_stat web total)" 1
}

@test "perl built-in gethostbyname + connect is capped" {
    start_server web -1
    name_rules 0 "payments.test:$SERVER_PORT" ETIMEDOUT
    run hosts_shim perl -e "$PERL_RAW" payments.test "$SERVER_PORT"
    assert_failure 1
    assert_line ETIMEDOUT
    run hosts_shim perl -e "$PERL_RAW" other.test "$SERVER_PORT"
    assert_success
    assert_line ok
    assert_equal "$(server_stat web total)" 1
}
