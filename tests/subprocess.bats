#!/usr/bin/env bats
# A permit is given back only by the process that holds it. vfork and
# posix_spawn children share the parent's memory (Python's subprocess,
# glibc's posix_spawn and system()); whatever they close, dup over, or
# exec, the parent's connections stay counted until the parent closes them.
#
# Every scenario: a holder takes all 3 permits, starts a child, and while
# it still holds them a newcomer must be refused (no permit was freed) and
# the server must never see more than 3. Then the holder closes: exactly 3
# newcomers get in and a 4th is refused (each permit came back once).

load helpers/common

# Every test: a server that holds until the client closes, limit 3.
setup() {
    bh_setup
    start_server web -1
    spawn_rules
}
teardown() { bh_teardown; }

spawn_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 3
wait_ms = 0
match = 127.0.0.1:$SERVER_PORT
EOF
}

# newcomer_says WORD: a fail-fast connect under the shim prints WORD.
newcomer_says() {
    run run_shim "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
    assert_line "$1"
}

# After the holder closed: 3 permits, no more, no fewer.
assert_three_permits_back() {
    local i
    for i in 1 2 3; do
        bg_shim "$T/after.$i" "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" -1
        wait_for file_has "$T/after.$i" '^(ok|E[A-Z]+)$'
        assert_equal "$(head -1 "$T/after.$i")" ok
    done
    newcomer_says ECONNREFUSED
    assert_equal "$(server_stat web max)" 3
}

# holder_scenario OUT CMD...: after server_up, CMD holds 3, runs its child,
# prints child=done, closes once $T/go exists, prints closed.
holder_scenario() {
    local out=$1
    shift
    bg_shim "$out" "$@"
    wait_for file_has "$out" '^child=done$' || fail "holder: $(cat "$out" "$out.err")"
    newcomer_says ECONNREFUSED
    assert_equal "$(server_stat web max)" 3
    touch "$T/go"
    wait_for file_has "$out" '^closed$'
    assert_three_permits_back
}

@test "vfork child closing the parent's connections gives nothing back" {
    holder_scenario "$T/h" "$CLIENTS/vfork_hold" 127.0.0.1 "$SERVER_PORT" 3 close "$T/go"
}

@test "vfork child: close_range then exec gives nothing back" {
    holder_scenario "$T/h" "$CLIENTS/vfork_hold" 127.0.0.1 "$SERVER_PORT" 3 close_range "$T/go"
}

@test "vfork child: closefrom gives nothing back" {
    holder_scenario "$T/h" "$CLIENTS/vfork_hold" 127.0.0.1 "$SERVER_PORT" 3 closefrom "$T/go"
}

@test "vfork child: dup2 over the parent's connections gives nothing back" {
    holder_scenario "$T/h" "$CLIENTS/vfork_hold" 127.0.0.1 "$SERVER_PORT" 3 dup2 "$T/go"
}

@test "vfork child: exec hands off nothing of the parent's" {
    holder_scenario "$T/h" "$CLIENTS/vfork_hold" 127.0.0.1 "$SERVER_PORT" 3 exec "$T/go"
}

@test "vfork child: numbers closed behind the shim's back and opened again" {
    holder_scenario "$T/h" "$CLIENTS/vfork_hold" 127.0.0.1 "$SERVER_PORT" 3 open "$T/go"
}

@test "posix_spawn with close actions gives nothing back" {
    holder_scenario "$T/h" "$CLIENTS/vfork_hold" 127.0.0.1 "$SERVER_PORT" 3 posix_spawn "$T/go"
}

@test "system() gives nothing back" {
    holder_scenario "$T/h" "$CLIENTS/vfork_hold" 127.0.0.1 "$SERVER_PORT" 3 system "$T/go"
}

# Python's subprocess (vfork + exec since 3.10). MODE: popen (a child that
# is still running while the newcomer tries), run (a child that is done),
# posix_spawn, system. The running child is `cat` on a pipe: it ends when
# the holder is killed in teardown.
PY_SPAWNER='
import os, socket, subprocess, sys, time
port, mode, close_fds, go = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", sys.argv[4]
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
if mode == "popen":
    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, close_fds=close_fds)
elif mode == "run":
    subprocess.run(["true"], close_fds=close_fds, check=True)
elif mode == "posix_spawn":
    r, w = os.pipe()
    os.posix_spawn("/bin/cat", ["cat"], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, r, 0)])
elif mode == "system":
    os.system("true")
print("child=done", flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
for s in held:
    s.close()
print("closed", flush=True)
time.sleep(3600)
'

@test "python subprocess.Popen, close_fds=True, child still running" {
    holder_scenario "$T/h" python3 -c "$PY_SPAWNER" "$SERVER_PORT" popen 1 "$T/go"
}

@test "python subprocess.Popen, close_fds=False, child still running" {
    holder_scenario "$T/h" python3 -c "$PY_SPAWNER" "$SERVER_PORT" popen 0 "$T/go"
}

@test "python subprocess.run, then the parent closes its own connections" {
    holder_scenario "$T/h" python3 -c "$PY_SPAWNER" "$SERVER_PORT" run 1 "$T/go"
}

@test "python os.posix_spawn" {
    holder_scenario "$T/h" python3 -c "$PY_SPAWNER" "$SERVER_PORT" posix_spawn 1 "$T/go"
}

@test "python os.system" {
    holder_scenario "$T/h" python3 -c "$PY_SPAWNER" "$SERVER_PORT" system 1 "$T/go"
}
