#!/usr/bin/env bats
# Semantics 6 and 7: permits across fork and exec. The permit follows the
# socket: it goes back at the last close across the parent and its forked
# children, never while a copy lives on; a child's own connections are its
# own; exec gives back what it closes (CLOEXEC) and keeps what survives,
# until the new image closes it or exits. (shared_sockets.bats checks the
# same at the server with real programs.)

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

@test "fork: a child closing an inherited fd releases nothing; the parent's close does" {
    fdops_setup 1
    fdops fork_child_close
    assert_success
    assert_lines first=ok child_closed_avail=0 child_exited_avail=0 parent_closed_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "fork: the parent's close releases nothing while the child keeps the fd; the child's close does, once" {
    fdops_setup 1
    fdops fork_parent_close
    assert_success
    assert_lines first=ok parent_closed_avail=0 child_closed_avail=1 child_exited_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "fork: a child's own connection is its own, given back when it exits" {
    fdops_setup 1
    fdops fork_child_own
    assert_success
    assert_lines child_connect=ok child_holds_avail=0 child_exited_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "sendmmsg/recvmmsg: a connection passed to a process forked before it keeps its permit past the sender's close; the receiver's close gives it back" {
    fdops_setup 1
    fdops pass_mmsg
    assert_success
    assert_lines first=ok received=yes passed_avail=0 receiver_closed_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "exec: a SOCK_CLOEXEC socket's permit is given back by exec" {
    fdops_setup 1
    fdops exec_cloexec
    assert_success
    assert_lines first=ok held_avail=0 after_exec_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "exec: a socket that survives exec stays held until the new image closes it" {
    fdops_setup 1
    fdops exec_survives
    assert_success
    assert_lines first=ok held_avail=0 after_exec_avail=0 inherited_fd=socket \
        after_close_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "exec: a surviving socket is given back when the new image exits" {
    fdops_setup 1
    fdops exec_survives_exit
    assert_success
    assert_lines exec_child=ready exec_child_alive_avail=0 exec_child_exited_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "exec: CLOEXEC and inherited sockets together (one back, one kept)" {
    fdops_setup 2
    fdops exec_mixed 2
    assert_success
    assert_lines cloexec=ok inherit=ok held_avail=0 after_exec_avail=1 after_close_avail=2 final_avail=2
    assert_server_saw_connects
}

@test "exec that fails leaves the CLOEXEC socket's permit held" {
    fdops_setup 1
    fdops exec_fails
    assert_success
    assert_lines first=ok exec=ENOENT after_failed_exec_avail=0 after_close_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "a real shell: a /dev/tcp fd kept across exec keeps the compartment full" {
    start_server srv -1
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[fd]
limit = 1
errno = EHOSTUNREACH
match = 127.0.0.1:$SERVER_PORT
EOF
    # bash opens fd 5 without CLOEXEC; exec keeps it, so connect_hold finds
    # the only permit taken.
    run run_shim bash -c "exec 5<>/dev/tcp/127.0.0.1/$SERVER_PORT && exec \"\$0\" 127.0.0.1 $SERVER_PORT 0" \
        "$CLIENTS/connect_hold"
    assert_failure 1
    assert_line EHOSTUNREACH

    # Closed before exec: the new image gets the permit.
    run run_shim bash -c "exec 5<>/dev/tcp/127.0.0.1/$SERVER_PORT && exec 5<&- && exec \"\$0\" 127.0.0.1 $SERVER_PORT 0" \
        "$CLIENTS/connect_hold"
    assert_success
    assert_line ok
    [[ $(server_stat srv total) == 3 ]] || fail "server total $(server_stat srv total), expected 3"
}
