#!/usr/bin/env bats
# Semantics 3 and 4 for non-blocking sockets, retried connects and connects
# that fail or are interrupted.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

@test "non-blocking: EINPROGRESS keeps the permit; a second non-blocking connect is refused at once" {
    fdops_setup 1
    fdops nonblock_einprogress
    assert_success
    assert_lines connect=EINPROGRESS second_nonblock=EHOSTUNREACH completed=ok \
        held_avail=0 after_close_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "non-blocking sockets never wait inside connect(), even when the compartment does" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[slow]
limit = 1
wait_ms = 3600000
errno = EAGAIN
match = 127.0.0.1:$SERVER_PORT
EOF
    bg_shim "$T/holder" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 60000
    wait_for file_has "$T/holder" '^ok$'

    # The compartment waits an hour and the holder never lets go: coming
    # back at all means the non-blocking connect did not wait in connect();
    # it waits in the background (async_admission.bats) until it is closed.
    bg_shim "$T/waiter" "$CLIENTS/async_wait" 127.0.0.1 "$SERVER_PORT" close "$T"
    wait_for file_has "$T/waiter" '^send='
    run cat "$T/waiter"
    assert_line connect=EINPROGRESS
    touch "$T/go" "$T/end"
    wait_pid "$BG_PID"
    [[ $(server_stat srv total) == 1 ]] || fail "the waiting connect reached the server"
}

@test "connect() again on the same fd (EALREADY/EISCONN polling) takes no second permit" {
    fdops_setup 2
    fdops poll_connect_again 2
    assert_success
    assert_lines first=EINPROGRESS again_last=EISCONN held_avail=1 blocking=ok \
        blocking_again=EISCONN both_held_avail=0 after_close_avail=2 final_avail=2
    assert_server_saw_connects
}

@test "a connect the kernel refuses gives the permit back at once" {
    fdops_setup 1 '127.0.0.1:*'
    fdops failed_connect_releases
    assert_success
    # ECONNREFUSED comes from the kernel (the compartment's errno is
    # EHOSTUNREACH): the connect really went out and failed.
    assert_lines closed_port=ECONNREFUSED after_failed_avail=1 nb_so_error=ECONNREFUSED \
        after_nb_close_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "a blocking connect interrupted by a signal (EINTR) keeps its permit" {
    fdops_setup 3 '127.0.0.1:*'
    fdops eintr_keeps 3
    assert_success
    assert_lines filler=ok interrupted=EINTR after_eintr_avail=1 after_close_avail=2 final_avail=3
}

@test "sendto/sendmsg/sendmmsg with MSG_FASTOPEN take a permit; refused ones send no SYN" {
    fdops_setup 1
    fdops fastopen
    if [[ $status -eq 3 && $(id -u) -eq 0 ]]; then
        # Client-side Fast Open is off: turn it on for this test only.
        local before
        before=$(sysctl -n net.ipv4.tcp_fastopen)
        sysctl -qw net.ipv4.tcp_fastopen=$((before | 1)) || skip "cannot enable TCP Fast Open"
        fdops fastopen
        sysctl -qw net.ipv4.tcp_fastopen="$before"
    fi
    [[ $status -ne 3 ]] || skip "TCP Fast Open is not available to clients here"
    assert_success
    assert_lines first_fastopen=ok second_fastopen=EHOSTUNREACH sendmsg_fastopen=EHOSTUNREACH \
        sendmmsg_fastopen=EHOSTUNREACH held_avail=0 after_close_avail=1 sendmsg_after_close=ok \
        held_again_avail=0 after_close_again_avail=1 sendmmsg_after_close=ok \
        held_by_sendmmsg_avail=0 after_close_all_avail=1 final_avail=1
    assert_server_saw_connects
}
