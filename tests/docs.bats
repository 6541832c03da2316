#!/usr/bin/env bats
# The docs' links resolve and their runnable command blocks run
# (scripts/check-docs.py), and the checker itself catches each kind of
# mistake, with its file and line.

load helpers/common

CHECK_DOCS="$BH_ROOT/scripts/check-docs.py"

@test "docs: every link in README.md and docs/ resolves; every runnable block runs" {
    [[ -x "$BH_ROOT/build/bulkhead" ]] || fail "missing build/bulkhead: run make"
    run "$CHECK_DOCS"
    assert_success
    assert_line --regexp '^[0-9]+ passed, 0 failed$'
}

@test "check-docs: a missing file, a missing anchor and a failing block, each at its line" {
    local d="$BATS_TEST_TMPDIR/docs"
    mkdir -p "$d/sub"
    cat >"$d/sub/b.md" <<'EOF_B'
# Guide
## A heading: `make test`
## Guide
EOF_B
    cat >"$d/a.md" <<'EOF_A'
# Top
See [b](sub/b.md), [its heading](sub/b.md#a-heading-make-test), [the
second Guide](sub/b.md#guide-1) and [here](#top); [web](https://example.org/x).
A [broken one](sub/nope.md) and [a bad anchor](sub/b.md#nowhere).
`[in code](not/checked.md)` is code, not a link.
[ref]: sub/missing.md

```sh run
test -f sub/b.md
```

```sh run
echo about to fail >&2
false
```

```sh
false   # shown, not marked runnable: not run
```
EOF_A
    run "$CHECK_DOCS" --root "$d" "$d/a.md"
    assert_failure 1
    assert_equal "$output" "a.md:4: link sub/nope.md: no such file
a.md:4: link sub/b.md#nowhere: no heading #nowhere in sub/b.md
a.md:6: link sub/missing.md: no such file
a.md:12: runnable block: exit 1: about to fail
6 passed, 4 failed"
}
