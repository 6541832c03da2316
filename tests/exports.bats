#!/usr/bin/env bats
# Semantics 12: the shim exports nothing but the libc functions it
# interposes, so it can neither clash with nor be clashed by a program's own
# symbols (ini_parse, helper names, ...).

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

libc_path() {
    local p
    p=$(ldd "$CLIENTS/connect_hold" | awk '$1 == "libc.so.6" { print $3 }')
    [[ -n "$p" ]] || p=/lib/x86_64-linux-gnu/libc.so.6
    echo "$p"
}

@test "every exported symbol is a function libc also exports" {
    local libc
    libc=$(libc_path)
    [[ -f "$libc" ]] || skip "cannot find libc.so.6"
    # Names only, version suffixes dropped.
    nm -D --defined-only "$libc" | awk '$2 ~ /^[TWi]$/ { sub(/@.*/, "", $3); print $3 }' |
        sort -u >"$T/libc.names"
    nm -D --defined-only "$SHIM" >"$T/shim.nm"
    [[ -s "$T/shim.nm" ]] || fail "the shim exports nothing"

    local addr type name bad=()
    while read -r addr type name; do
        name=${name%%@*}
        case "$type" in
            T | W | i) ;;
            *)
                bad+=("$name ($type: not a function)")
                continue
                ;;
        esac
        grep -qxF -- "$name" "$T/libc.names" || bad+=("$name (not a libc function)")
    done <"$T/shim.nm"
    ((${#bad[@]} == 0)) || fail "unexpected exports: ${bad[*]}"
}

@test "no helper, inih or shim-internal names are exported" {
    run nm -D --defined-only "$SHIM"
    assert_success
    refute_output --regexp '[[:space:]](ini_|bh_|bulkhead)'
}

# A guard against passing the tests above by exporting nothing: these calls
# cannot be seen any other way from a preloaded library.
@test "the entry points the semantics cannot do without are exported" {
    run nm -D --defined-only "$SHIM"
    assert_success
    local f
    for f in connect close dup dup2 dup3 sendto sendmsg sendmmsg getaddrinfo gethostbyname \
        read write readv writev recv send recvfrom recvmsg recvmmsg getsockopt setsockopt \
        gethostbyname2 gethostbyname_r gethostbyname2_r poll ppoll select pselect \
        epoll_ctl epoll_wait epoll_pwait epoll_pwait2; do
        assert_output --regexp "[[:space:]]$f(@|\$|[[:space:]])"
    done
}
