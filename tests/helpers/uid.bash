# shellcheck shell=bash
# For tests of processes that change their uid, on top of common.bash:
# the namespaces the other users make, the daemons as process groups, and
# a fail-fast compartment on the hold server.

# The user nobody, for tests of another user's namespace.
AS_NOBODY=(setpriv --reuid 65534 --regid 65534 --clear-groups)

# nobody_connect RULES: one connect to the server as nobody under the shim
# and RULES, through `run`.
nobody_connect() {
    run "${AS_NOBODY[@]}" env LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$1" \
        "$CLIENTS/connect_hold" 127.0.0.1 "$SERVER_PORT" 0
}

# uid_setup: bh_setup, as root (starting something that drops root needs it).
uid_setup() {
    bh_setup
    [[ $(id -u) -eq 0 ]] || skip "starting a process that drops root needs root"
    : >"$T/other_users"
}

# The daemons first, each a process group of its own (a master's workers
# outlive a master killed alone); then the namespaces the daemons' users
# made, removed and checked like ours.
uid_teardown() {
    local user key group left=""
    if [[ -s "$T/groups" ]]; then
        while read -r group; do kill -KILL -- "-$group" 2>/dev/null || true; done <"$T/groups"
        while read -r group; do wait_for -t 5 group_gone "$group" || true; done <"$T/groups"
    fi
    while read -r user; do
        key=$("$BULKHEAD" key -n "$NS" -u "$user")
        timeout 10 "$BULKHEAD" reset --force -n "$NS" -u "$user" >/dev/null 2>&1 || true
        ! ipc_under_key "$key" || left+=" $user's $NS ($key)"
    done <"$T/other_users"
    bh_teardown
    [[ -z "$left" ]] || fail "teardown: SysV objects left behind:$left"
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
