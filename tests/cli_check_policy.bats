#!/usr/bin/env bats
# Policy inside a compartment (per_process, reserve, bypass and
# match weights) as a user meets it in `bulkhead check` and `bulkhead
# explain`: every key accepted and shown, each mistake one line naming file,
# line and key, and explain saying which reserve, bypass and weight apply
# to the program, user and environment asked about.

load helpers/common
load helpers/check

HEAD_NAME=db HEAD_LIMIT=10

setup() { check_setup; }
teardown() { bh_teardown; }

# A file with every policy key, for the explain tests: [db] on 127.0.0.1:7001
# (weight 1) and :7002 (weight 4), [plain] on :7003 without any of them.
policy_rules() {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 10
per_process = 3
reserve = 2 for program=billing-*
reserve = 1 for user=$(id -un)
reserve = 1 for env=BULKHEAD_CLASS=critical
bypass = program=pg_dump
match = 127.0.0.1:7001
match = 127.0.0.1:7002 weight=4
[plain]
limit = 1
match = 127.0.0.1:7003
EOF
}

@test "check: every policy key is valid and shown in its compartment" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[db]
limit = 10
per_process = 4
reserve = 2 for program=billing-*
reserve = 1 for user=root
reserve = 3 for env=BULKHEAD_CLASS=critical
bypass = program=pg_dump
bypass = user=0
match = 127.0.0.1:7001
match = 127.0.0.1:7002 weight=4
[plain]
limit = 2
match = 127.0.0.1:7003 weight=1
EOF
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line --index 0 "$RULES: valid"
    assert_line "2 compartments, 3 match rules; the first match in file order wins"
    local db
    db=$(sed -n '/^\[db\]/,/^$/p' <<<"$output")
    assert_equal "$db" "[db]  line 3
  limit        10
  wait_ms      0 (fail fast)
  max_waiters  64
  errno        ECONNREFUSED
  per_process  4 (one process holds at most 4)
  reserve      2 for program=billing-*
  reserve      1 for user=root (uid 0)
  reserve      3 for env=BULKHEAD_CLASS=critical
  common pool  4 (limit less every reserve)
  bypass       program=pg_dump
  bypass       user=0
  match        line 11   address   127.0.0.1:7001
               line 12   address   127.0.0.1:7002  weight 4"
    # [plain]: none of them set, so nothing of them shown; weight 1 is plain.
    local plain
    plain=$(sed -n '/^\[plain\]/,$p' <<<"$output")
    assert_equal "$plain" "[plain]  line 13
  limit        2
  wait_ms      0 (fail fast)
  max_waiters  64
  errno        ECONNREFUSED
  match        line 15   address   127.0.0.1:7003"
}

@test "check: each bad value is one line naming file, line and key; exit 1" {
    check_says_only $'per_process = 0\n' "6: per_process: 0 is out of range (1 to 32767)"
    check_says_only $'per_process = many\n' '6: per_process: "many" is not a whole number'
    check_says_only $'reserve = two for program=a\n' \
        '6: reserve: "two for program=a" has a bad count "two" (a whole number from 1 to 32767)'
    check_says_only $'reserve = 2 program=a\n' \
        '6: reserve: "2 program=a" has no "for" (use reserve = N for WHO, e.g. 2 for program=billing-*)'
    check_says_only $'reserve = 2 for group=ops\n' \
        '6: reserve: "2 for group=ops" has an unknown kind "group"; use program=, user= or env='
    check_says_only $'reserve = 2 for program=billing-[ab\n' \
        "6: reserve: \"2 for program=billing-[ab\" has a bad glob (a '[' without its ']')"
    check_says_only $'reserve = 2 for user=bh-no-such-user\n' \
        '6: reserve: "2 for user=bh-no-such-user" names no such user'
    check_says_only $'bypass = env=OPS\n' \
        "6: bypass: \"env=OPS\" has no '=' between variable and value (use env=VAR=VALUE)"
    check_says_only $'bypass = program=/usr/bin/pg_dump\n' \
        "6: bypass: \"program=/usr/bin/pg_dump\" has a bad glob (a '/': program= matches the program's short name, without its directory)"
    check_says_only $'match = 127.0.0.1:7002 weight=0\n' \
        '6: match: "127.0.0.1:7002 weight=0" has a bad weight (a whole number from 1 to 32767)'
    check_says_only $'match = 127.0.0.1:7002 heavy\n' \
        '6: match: "127.0.0.1:7002 heavy" has something after its destination other than weight=N'
}

@test "check: repeats, too many, and sums and weights past the limit: one line each" {
    check_says_only $'reserve = 1 for program=a\nreserve = 2 for program=a\n' \
        "7: reserve: program=a already has a reserve at line 6"
    check_says_only $'bypass = user=root\nbypass = program=x\nbypass = user=root\n' \
        "8: bypass: user=root already given at line 6"
    check_says_only "$(printf 'reserve = 1 for program=%s\n' a b c d e)"$'\n' \
        "10: reserve: too many in [db] (at most 4)"
    check_says_only "$(printf 'bypass = program=%s\n' a b c d e f g h i)"$'\n' \
        "14: bypass: too many in [db] (at most 8)"
    check_says_only $'reserve = 7 for program=a\nreserve = 5 for env=A=1\n' \
        "3: [db]: reserves add up to 12, more than limit = 10"
    check_says_only $'match = 127.0.0.1:7002 weight=11\n' \
        "6: match: weight=11 is more than limit = 10: such a connection could never be made"
    # Exactly the limit is fine: the common pool is then empty.
    rules_with $'reserve = 6 for program=a\nreserve = 4 for env=A=1\nmatch = 127.0.0.1:7002 weight=10\n'
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "  common pool  0 (limit less every reserve)"
}

@test "check: reserves with fleet_limit are one line, before Redis is ever tried" {
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
fleet = redis://127.0.0.1:1
[db]
fleet_limit = 10
reserve = 2 for program=a
reserve = 1 for program=b
match = 127.0.0.1:7001
EOF
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:6: reserve: cannot be used with fleet_limit (line 5): this host's share of the fleet moves under the reserves
bulkhead: $RULES: 1 error"
}

@test "check: 1,024 compartments are valid and all listed; one more is one error" {
    {
        printf '[global]\nnamespace = %s\n' "$NS"
        for i in $(seq 0 1023); do
            printf '[c%d]\nlimit = 1\nmatch = 10.%d.%d.1:80\n' "$i" $((i / 256)) $((i % 256))
        done
    } >"$RULES"
    run "$BULKHEAD" check "$RULES"
    assert_success
    assert_line "1024 compartments, 1024 match rules; the first match in file order wins"
    assert_equal "$(grep -c '^\[c[0-9]*\]  line ' <<<"$output")" 1024
    assert_line "[c1023]  line 3072"
    printf '[c1024]\nlimit = 1\nmatch = 10.4.0.1:80\n' >>"$RULES"
    run "$BULKHEAD" check "$RULES"
    assert_failure 1
    assert_output "bulkhead: $RULES:3075: [c1024]: too many compartments (at most 1024)
bulkhead: $RULES: 1 error"
}

@test "explain: by default the program is unknown, the user and environment are the caller's" {
    policy_rules
    run env -u BULKHEAD_CLASS "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001
    assert_success
    assert_output "127.0.0.1:7001 -> compartment db (line 10: match = 127.0.0.1:7001)
  per_process 3: one process holds at most 3 of its permits
  reserve 2 for program=billing-*: applies if the program's name matches billing-*
  reserve 1 for user=$(id -un): applies (uid $(id -u))
  reserve 1 for env=BULKHEAD_CLASS=critical: does not apply (BULKHEAD_CLASS=critical is not in the environment)
  bypass program=pg_dump: applies if the program's name matches pg_dump"
    # The caller's environment counts...
    run env BULKHEAD_CLASS=critical "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001
    assert_success
    assert_line "  reserve 1 for env=BULKHEAD_CLASS=critical: applies (BULKHEAD_CLASS=critical is in the environment)"
    # ...exactly: another value is not it.
    run env BULKHEAD_CLASS=critical2 "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001
    assert_success
    assert_line "  reserve 1 for env=BULKHEAD_CLASS=critical: does not apply (BULKHEAD_CLASS=critical is not in the environment)"
}

@test "explain: --program, --user and --env ask for another identity" {
    policy_rules
    # nobody's uid never equals the caller's (root runs the tests or not).
    local other=65534
    [[ "$(id -u)" != "$other" ]] || other=0
    run env BULKHEAD_CLASS=critical "$BULKHEAD" explain -c "$RULES" \
        --program /opt/billing/bin/billing-eu --user "$other" --env PATH=/bin \
        127.0.0.1:7001
    assert_success
    assert_output "127.0.0.1:7001 -> compartment db (line 10: match = 127.0.0.1:7001)
  per_process 3: one process holds at most 3 of its permits
  reserve 2 for program=billing-*: applies (program billing-eu)
  reserve 1 for user=$(id -un): does not apply (uid $other)
  reserve 1 for env=BULKHEAD_CLASS=critical: does not apply (BULKHEAD_CLASS=critical is not in the environment)
  bypass program=pg_dump: does not apply (program billing-eu)"
    # --env is repeatable; a bypass that applies says what it means.
    run "$BULKHEAD" explain -c "$RULES" --program pg_dump --user "$(id -un)" \
        --env HOME=/root --env BULKHEAD_CLASS=critical 127.0.0.1:7001
    assert_success
    assert_line "  reserve 2 for program=billing-*: does not apply (program pg_dump)"
    assert_line "  reserve 1 for user=$(id -un): applies (uid $(id -u))"
    assert_line "  reserve 1 for env=BULKHEAD_CLASS=critical: applies (BULKHEAD_CLASS=critical is in the environment)"
    assert_line "  bypass program=pg_dump: applies (program pg_dump): this compartment does not limit the connection"
}

@test "explain --program SCRIPT: by its own name after #!/usr/bin/python3, by the interpreter's only after #!/usr/bin/env" {
    policy_rules
    printf '#!/usr/bin/python3\n' >"$T/billing-eu"
    printf '#!/usr/bin/env python3\n' >"$T/billing-us"
    run "$BULKHEAD" explain -c "$RULES" --program "$T/billing-eu" 127.0.0.1:7001
    assert_success
    assert_line "  reserve 2 for program=billing-*: applies (program billing-eu, the script python3 runs)"
    run "$BULKHEAD" explain -c "$RULES" --program "$T/billing-us" 127.0.0.1:7001
    assert_success
    assert_line --index 0 "$T/billing-us: a script started through /usr/bin/env python3: its process is known as python3 only (env hides the script's name from program=: write the interpreter's full path after #!)"
    assert_line "  reserve 2 for program=billing-*: does not apply (program python3)"
}

@test "explain: a weight other than 1 is said; policy only for the compartment matched" {
    policy_rules
    run "$BULKHEAD" explain -c "$RULES" --program billing-7 127.0.0.1:7002 \
        127.0.0.1:7003 127.0.0.1:7004
    assert_success
    assert_line --index 0 "127.0.0.1:7002 -> compartment db (line 11: match = 127.0.0.1:7002)"
    assert_line --index 1 "  weight 4: a connection through this rule takes 4 permits"
    assert_line --index 2 "  per_process 3: one process holds at most 3 of its permits"
    assert_line --index 7 "127.0.0.1:7003 -> compartment plain (line 14: match = 127.0.0.1:7003)"
    assert_line --index 8 "127.0.0.1:7004 -> not limited"
    assert_equal "${#lines[@]}" 9
}

@test "explain: a wrong --user, --env or --program is a usage error; bad policy keys fail" {
    policy_rules
    run "$BULKHEAD" explain -c "$RULES" --user bh-no-such-user 127.0.0.1:7001
    assert_failure 2
    assert_line --index 0 "bulkhead: explain: --user bh-no-such-user: no such user or uid"
    refute_output --partial "->"
    run "$BULKHEAD" explain -c "$RULES" --env BULKHEAD_CLASS 127.0.0.1:7001
    assert_failure 2
    assert_line --index 0 "bulkhead: explain: --env BULKHEAD_CLASS: not VAR=VALUE"
    run "$BULKHEAD" explain -c "$RULES" --program / 127.0.0.1:7001
    assert_failure 2
    assert_line --index 0 "bulkhead: explain: --program /: no program name"
    run "$BULKHEAD" explain -c "$RULES" --program
    assert_failure 2
    rules_with $'reserve = 2 for group=ops\n'
    run "$BULKHEAD" explain -c "$RULES" 127.0.0.1:7001
    assert_failure 1
    assert_line "bulkhead: $RULES:6: reserve: \"2 for group=ops\" has an unknown kind \"group\"; use program=, user= or env="
    refute_output --partial "->"
}

@test "explain --help names its identity options" {
    run "$BULKHEAD" explain --help
    assert_success
    assert_line --index 0 "usage: bulkhead explain [-c rules.ini] [--program NAME] [--user NAME|UID] [--env VAR=VALUE]... [--resolve NAME=ADDRESS]... HOST:PORT|[V6]:PORT..."
    assert_line '  --resolve NAME=ADDRESS'
    assert_line --regexp '^  --program NAME +'
    assert_line --regexp '^  --user NAME\|UID +'
    assert_line --regexp '^  --env VAR=VALUE +'
}
