#!/usr/bin/env bats
# The shim's rooms include downwards only (scripts/check-rooms.sh): checked
# on the real shim/, and on fixtures that must fail.

load helpers/common

CHECK_ROOMS="$BH_ROOT/scripts/check-rooms.sh"

@test "rooms: every include in shim/ names its own room or a lower one" {
    run "$CHECK_ROOMS"
    assert_success
    assert_output ""
}

@test "rooms: an include upwards, one outside the rooms and an unknown room are each one line" {
    local top="$BATS_TEST_TMPDIR/tree"
    mkdir -p "$top/shim/permits" "$top/shim/core" "$top/shim/extra"
    printf '%s\n' '#include <stdio.h>' '#include "config/config.h"' \
        '#include "core/shim.h"' >"$top/shim/permits/permits.c"
    printf '%s\n' '#include "core/state.h"' '#include "local.h"' >"$top/shim/core/shim.c"
    printf '%s\n' '#include "libc/libc.h"' >"$top/shim/extra/extra.c"
    run "$CHECK_ROOMS" "$top"
    assert_failure 1
    assert_output "check-rooms: shim/core/shim.c:2: \"local.h\" is not ROOM/FILE of a room
check-rooms: shim/extra/extra.c: shim/extra/ is no room of the order (scripts/check-rooms.sh)
check-rooms: shim/permits/permits.c:3: permits includes core/shim.h: core is not below permits"
}

@test "rooms: calls that go round between files of one room are one line; calls down are not" {
    local top="$BATS_TEST_TMPDIR/tree"
    mkdir -p "$top/shim/permits" "$top/cli/supervisor"
    printf '%s\n' 'int bh_a(void);' 'int bh_b(void)' '{' '    return bh_a(); /* bh_c() */' '}' \
        >"$top/shim/permits/b.c"
    printf '%s\n' 'int bh_b(void);' 'int bh_a(void)' '{' '    return bh_b();' '}' \
        >"$top/shim/permits/a.c"
    printf '%s\n' 'int sv_low(void)' '{' '    return 0;' '}' >"$top/cli/supervisor/low.c"
    printf '%s\n' 'int sv_low(void);' 'int sv_high(void)' '{' '    return sv_low();' '}' \
        >"$top/cli/supervisor/high.c"
    run "$CHECK_ROOMS" "$top"
    assert_failure 1
    assert_output "check-rooms: shim/permits/: calls go round: a.c calls b.c (bh_b); b.c calls a.c (bh_a)"
}
