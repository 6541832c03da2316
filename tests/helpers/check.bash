# shellcheck shell=bash
# For the `bulkhead check` and `explain` files, on top of common.bash (load
# that first): the command must be built, and a rules file is a fixed head
# plus the body a test gives, checked for exactly one error.

# check_setup: bh_setup, then the command, which these files run directly.
check_setup() {
    bh_setup
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
}

# Lines 1-5: [global] and the head of compartment [$HEAD_NAME] (limit
# $HEAD_LIMIT) on 127.0.0.1:7001; rules_with adds its argument from line 6.
rules_with() {
    printf '[global]\nnamespace = %s\n[%s]\nlimit = %s\nmatch = 127.0.0.1:7001\n%s' \
        "$NS" "$HEAD_NAME" "$HEAD_LIMIT" "$1" >"$RULES"
}

# check on the body "$1" fails with exactly the one error line "$2".
check_says_only() {
    rules_with "$1"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:$2
bulkhead: $RULES: 1 error"
}
