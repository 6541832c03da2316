#!/usr/bin/env bats
# The docs keep their promises: links resolve and the blocks marked
# runnable run as written (scripts/check-docs.sh), checked on the real
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
