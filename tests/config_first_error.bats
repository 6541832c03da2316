#!/usr/bin/env bats
# The shim's one line about bad rules names the same first error that
# `bulkhead check` lists first: the lowest line, though some errors (a
# section without match rules) are only found when their section ends.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

@test "the start-up line names the first error by line, as check lists it" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[a]
limit = 3
[b]
limit = x
match = 127.0.0.1:9
EOF
    run --separate-stderr run_shim /bin/true
    assert_success
    assert_equal "$stderr" \
        "bulkhead: $RULES:3: [a]: no match rules (and 1 more: bulkhead check $RULES)"
    run "$BH_ROOT/build/bulkhead" check "$RULES"
    assert_failure 1
    assert_line --index 0 "bulkhead: $RULES:3: [a]: no match rules"
}
