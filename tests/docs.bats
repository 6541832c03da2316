#!/usr/bin/env bats
# The docs keep their promises, checked on the real README, docs/ and man/,
# and on fixtures that must fail: links resolve, the blocks marked runnable
# run as written and the man pages refer only to pages that are here
# (scripts/check-docs.sh); bulkhead.ini(5) names exactly the keys the
# parser takes (scripts/check-keys.sh), with the ranges and defaults that
# the parser and rules.ini.example have (scripts/check-key-facts.py).

load helpers/common

CHECK_DOCS="$BH_ROOT/scripts/check-docs.sh"

@test "docs: every link in README.md and docs/ resolves, every runnable block runs" {
    run "$CHECK_DOCS"
    assert_success
    assert_output ""
}

@test "docs: a broken link, a missing heading and a failing block are each one line" {
    local doc="$BATS_TEST_TMPDIR/doc.md"
    printf '%s\n' '# Top' '## The fleet: one limit' \
        '[ok](#the-fleet-one-limit) [web](https://example.com) [gone](nofile.md) [nohead](#nohead)' \
        '```sh runnable' 'bulkhead check rules.ini.example >/dev/null' '```' \
        '```sh runnable' 'echo about to fail; false' '```' >"$doc"
    run "$CHECK_DOCS" "$doc"
    assert_failure 1
    assert_output "check-docs: $doc:3: link to nofile.md: no such file
check-docs: $doc:3: link to #nohead: no heading #nohead in $doc
check-docs: $doc:7: runnable block failed: about to fail"
}

@test "docs: bulkhead.ini(5) has an entry for every key the parser takes, and no other" {
    run "$BH_ROOT/scripts/check-keys.sh"
    assert_success
    assert_output ""
}

@test "docs: a key with no entry and an entry the parser does not know are each one line" {
    local page="$BATS_TEST_TMPDIR/bulkhead.ini.5"
    sed 's/^\.BI limit " N"/.BI limt " N"/' "$BH_ROOT/man/bulkhead.ini.5" >"$page"
    run "$BH_ROOT/scripts/check-keys.sh" "$page"
    assert_failure 1
    assert_output "check-keys: $page: no entry for the key \"limit\"
check-keys: $page: \"limt\" has an entry, but the parser does not know it"
}

@test "docs: bulkhead.ini(5)'s ranges and defaults are rules.ini.example's and the parser's" {
    run python3 "$BH_ROOT/scripts/check-key-facts.py"
    assert_success
    assert_output ""
}

@test "docs: a range the parser does not take and a default the example contradicts are lines" {
    local page="$BATS_TEST_TMPDIR/bulkhead.ini.5"
    sed 's/^0 to 3600000, default 0 (refused at once)\.$/0 to 3600001, default 5 (refused at once)./' \
        "$BH_ROOT/man/bulkhead.ini.5" >"$page"
    run python3 "$BH_ROOT/scripts/check-key-facts.py" "$page"
    assert_failure 1
    assert_output "check-key-facts: wait_ms: $page says (0, 3600001), $BH_ROOT/rules.ini.example says (0, 3600000)
check-key-facts: wait_ms: $page says default 5, $BH_ROOT/rules.ini.example says default 0
check-key-facts: wait_ms: $page says up to 3600001, but check refuses it"
}
