#!/usr/bin/env bats
# Semantics 5: a permit goes back exactly once, when the process's last fd
# for the connection goes, whichever call closes it. Each scenario (see
# tests/clients/fdops.c) reports how many more connections would succeed
# after every step ("*_avail"); final_avail checks nothing was given back
# twice, and the server's total checks no refused connect sent a SYN.

load helpers/common
load helpers/cli

setup() { bh_setup; }
teardown() { bh_teardown; }

@test "close gives the permit back" {
    fdops_setup 1
    fdops close
    assert_success
    assert_lines first=ok held_avail=0 after_close_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "dup: closing one of two fds keeps the permit, closing both releases it" {
    fdops_setup 1
    fdops dup_then_close_one
    assert_success
    assert_lines first=ok held_avail=0 after_one_avail=0 after_both_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "dup: closing the copy first, then the original, releases once" {
    fdops_setup 1
    fdops dup_both_closed
    assert_success
    assert_lines first=ok held_avail=0 after_one_avail=0 after_both_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "dup2 to a free fd number counts as a second reference" {
    fdops_setup 1
    fdops dup2_copy
    assert_success
    assert_lines first=ok held_avail=0 after_one_avail=0 after_both_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "dup3 with O_CLOEXEC counts as a second reference" {
    fdops_setup 1
    fdops dup3
    assert_success
    assert_lines first=ok held_avail=0 after_one_avail=0 after_both_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "fcntl F_DUPFD counts as a second reference" {
    fdops_setup 1
    fdops fcntl_dupfd
    assert_success
    assert_lines first=ok held_avail=0 after_one_avail=0 after_both_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "fcntl F_DUPFD_CLOEXEC counts as a second reference" {
    fdops_setup 1
    fdops fcntl_dupfd_cloexec
    assert_success
    assert_lines first=ok held_avail=0 after_one_avail=0 after_both_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "dup2 of another fd onto the tracked socket releases it" {
    fdops_setup 1
    fdops dup2_onto_tracked
    assert_success
    assert_lines first=ok held_avail=0 after_dup_onto_avail=1 after_close_all_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "dup3 of another fd onto the tracked socket releases it" {
    fdops_setup 1
    fdops dup3_onto_tracked
    assert_success
    assert_lines first=ok held_avail=0 after_dup_onto_avail=1 after_close_all_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "dup2 of a socket onto itself changes nothing" {
    fdops_setup 1
    fdops dup2_same_fd
    assert_success
    assert_lines first=ok after_dup2_same_avail=0 after_close_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "dup2 of one tracked socket onto another releases only the overwritten one" {
    fdops_setup 2
    fdops dup2_tracked_onto_tracked 2
    assert_success
    assert_lines first=ok second=ok held_avail=0 after_dup2_avail=1 \
        after_close_source_avail=1 after_close_both_avail=2 final_avail=2
    assert_server_saw_connects
}

@test "fclose of an fdopen'd stream releases" {
    fdops_setup 1
    fdops fdopen_fclose
    assert_success
    assert_lines first=ok held_avail=0 after_fclose_avail=1 final_avail=1
    assert_server_saw_connects
}

@test "fcloseall: the permit follows the fd (glibc's fcloseall leaves fds open)" {
    fdops_setup 1
    fdops fdopen_fcloseall
    assert_success
    assert_lines first=ok held_avail=0 final_avail=1
    if [[ "$(out_value fd_after_fcloseall)" == closed ]]; then
        assert_line after_fcloseall_avail=1
    else
        # The connection is still open in the kernel: releasing now would let
        # one connection more than the limit exist.
        assert_lines fd_after_fcloseall=open after_fcloseall_avail=0 after_close_avail=1
    fi
    assert_server_saw_connects
}

@test "close_range releases every socket in the range; CLOSE_RANGE_CLOEXEC releases none" {
    fdops_setup 2
    fdops close_range 2
    assert_success
    assert_lines first=ok second=ok held_avail=0 after_cloexec_range_avail=0 \
        after_range_avail=2 final_avail=2
    assert_server_saw_connects
}

@test "closefrom releases every socket above the bound" {
    fdops_setup 2
    fdops closefrom 2
    assert_success
    assert_lines first=ok second=ok held_avail=0 after_range_avail=2 final_avail=2
    assert_server_saw_connects
}

@test "syscall(SYS_close) and syscall(SYS_close_range), as libuv (node) closes: the permit comes back at once, with no new fd to notice it" {
    start_server srv -1
    compartment_rules 2
    bg_shim "$T/closer.out" python3 -c '
import ctypes, os, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
port, ready = int(sys.argv[1]), sys.argv[2]
a = socket.socket(); a.connect(("127.0.0.1", port))
b = socket.socket(); b.connect(("127.0.0.1", port))
fa, fb = a.detach(), b.detach()
open(ready + ".held", "w").close()
while not os.path.exists(ready + ".go"):
    time.sleep(0.01)
assert libc.syscall(3, fa) == 0                        # SYS_close
assert libc.syscall(436, fb, fb, 0) == 0               # SYS_close_range
open(ready + ".closed", "w").close()
time.sleep(60)' "$SERVER_PORT" "$T/closer"
    wait_for -t 10 test -e "$T/closer.held"
    assert_equal "$(stat_column downstream IN_USE -c "$RULES")" 2
    touch "$T/closer.go"
    wait_for -t 10 test -e "$T/closer.closed"
    assert_equal "$(stat_column downstream IN_USE -c "$RULES")" 0
    wait_for server_open_is srv 0
}
