#!/usr/bin/env bats
# The docs keep their promises: links resolve, the blocks marked
# runnable run as written (scripts/check-docs.sh), and bulkhead.ini(5) names
# exactly the keys the parser takes (scripts/check-keys.sh), checked on the real
# README and docs/, and on fixtures that must fail.

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
