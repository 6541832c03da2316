#!/usr/bin/env bats
# Every command, key included, in the overview, in `help CMD` and in
# `CMD --help`; --user in the help of the commands that take it; the man
# page renders without warnings and states the shim's behaviour.
#
# BULKHEAD_TEST_CLI and BULKHEAD_TEST_MAN run these against another build
# of the command and another man page.

load helpers/common

BULKHEAD="${BULKHEAD_TEST_CLI:-$BH_ROOT/build/bulkhead}"
MANPAGE="${BULKHEAD_TEST_MAN:-$BH_ROOT/man/bulkhead.1}"
COMMANDS=(run check explain stat suggest discover set apply reset key agent)

setup() {
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
}

@test "help: every command, key included, in the overview, help CMD and CMD --help" {
    run "$BULKHEAD" --help
    assert_success
    local overview=("${lines[@]}") command
    for command in "${COMMANDS[@]}"; do
        printf '%s\n' "${overview[@]}" | grep -q "^  bulkhead $command " ||
            fail "the overview does not list $command"
        run "$BULKHEAD" help "$command"
        assert_success
        assert_line --index 0 --partial "usage: bulkhead $command "
        run "$BULKHEAD" "$command" --help
        assert_success
        assert_line --index 0 --partial "usage: bulkhead $command "
        run "$BULKHEAD" "$command" -h
        assert_success
        assert_line --index 0 --partial "usage: bulkhead $command "
    done
    # The overview lists exactly these commands, no more.
    assert_equal "$(printf '%s\n' "${overview[@]}" | grep -c '^  bulkhead ')" "${#COMMANDS[@]}"
}

@test "help: --user in the help of stat, set, apply, reset and key, and in the man page" {
    local command
    for command in stat set apply reset key; do
        run "$BULKHEAD" help "$command"
        assert_success
        assert_line --regexp '^  -u, --user USER +'
    done
    run env MANWIDTH=80 MANPAGER=cat man -l "$MANPAGE"
    assert_success
    assert_line --regexp '^ +-u USER, --user USER$'
}

@test "man page: renders without warnings, states the shim's behaviour, FILES names no old layout" {
    run bash -c 'groff -man -Tutf8 -ww "$1" 2>&1 >/dev/null' _ "$MANPAGE"
    assert_success
    assert_output ""
    # Justified text: spaces squeezed so a phrase matches across the padding.
    run bash -c 'MANWIDTH=200 MANPAGER=cat man -l "$1" | tr -s " "' _ "$MANPAGE"
    assert_success
    refute_output --partial "bulkhead/1/"

    assert_line BEHAVIOUR
    # One fact per promise, as a reader finds it: a phrase may wrap.
    output=$(tr -s '\n ' '  ' <<<"$output")
    local fact
    for fact in "The permit follows the socket, not the process that connected" \
        "Children of vfork() (x86-64), posix_spawn() and _Fork() are counted as copies" \
        "Those of system(), popen() and a raw clone() are not" \
        "on exit(), on a return from main()" "_exit() or _Exit()" \
        "killed by a signal cannot do this" "SO_SNDTIMEO" "EINTR" \
        "at once: limit 0" "at once: full; wait_ms = 0" \
        "already waiting" "after waiting N ms (the socket's SO_SNDTIMEO)" \
        "exact peak: never above what was really in use at once" \
        "refuses every connection the rules match until it is removed" \
        "only while it is the one the program started with" \
        "without following symbolic links, created with mode 0600" \
        "regular file of at most 4 MiB" \
        "no process can take a permit between the check and the removal"; do
        assert_output --partial "$fact"
    done
}

@test "bulkhead.ini(5): renders without warnings and names every key rules.ini.example sets" {
    local page="$BH_ROOT/man/bulkhead.ini.5" key
    run bash -c 'groff -man -Tutf8 -ww "$1" 2>&1 >/dev/null' _ "$page"
    assert_success
    assert_output ""
    run bash -c 'MANWIDTH=200 MANPAGER=cat man -l "$1"' _ "$page"
    assert_success
    local text=$output
    for key in $(sed -n 's/^\([a-z_]*\) *=.*/\1/p' "$BH_ROOT/rules.ini.example" | sort -u); do
        [[ "$text" == *"$key"* ]] || fail "bulkhead.ini(5) does not name $key"
    done
}

@test "bulkhead-agent --help: its own usage on stdout, exit 0; a bad option is exit 2" {
    run "$BH_ROOT/build/bulkhead-agent" --help
    assert_success
    assert_line --index 0 --partial "usage: bulkhead-agent [run]"
    run "$BH_ROOT/build/bulkhead-agent" --bogus
    assert_failure 2
}
