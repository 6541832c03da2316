/* WHO, table by table: each text either parses to a kind (and a uid for
 * user=) or gives exactly one reason; each identity either matches a WHO or
 * does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "policy/who.h"

#define LONG63 "env=V=" "123456789012345678901234567890123456789012345678901234567"

/* ---- parsing ---- */

struct parse_case {
    const char *text;
    const char *why;         /* NULL: it parses */
    enum bh_who_kind kind;
    long uid;                /* user= only */
};

static const struct parse_case parse_cases[] = {
    { "program=billing-*", NULL, BH_WHO_PROGRAM, 0 },
    { "program=pg_dump", NULL, BH_WHO_PROGRAM, 0 },
    { "program=[a-c]?x", NULL, BH_WHO_PROGRAM, 0 },
    { "program=[]]x", NULL, BH_WHO_PROGRAM, 0 },
    { "program=[!]]x", NULL, BH_WHO_PROGRAM, 0 },
    { "program=[[:alpha:]]*", NULL, BH_WHO_PROGRAM, 0 },
    { "program=\\[literal", NULL, BH_WHO_PROGRAM, 0 },
    { "user=root", NULL, BH_WHO_USER, 0 },
    { "user=0", NULL, BH_WHO_USER, 0 },
    { "user=4000000", NULL, BH_WHO_USER, 4000000 },
    { "env=BULKHEAD_CLASS=critical", NULL, BH_WHO_ENV, 0 },
    { "env=_x1=", NULL, BH_WHO_ENV, 0 },
    { "env=A=b=c", NULL, BH_WHO_ENV, 0 },
    { LONG63, NULL, BH_WHO_ENV, 0 },
    { "group=ops", "has an unknown kind \"group\"; use program=, user= or env=", 0, 0 },
    { "billing", "has an unknown kind \"billing\"; use program=, user= or env=", 0, 0 },
    { "Program=x", "has an unknown kind \"Program\"; use program=, user= or env=", 0, 0 },
    { "", "has an unknown kind \"\"; use program=, user= or env=", 0, 0 },
    { "program=", "has a bad glob (empty)", 0, 0 },
    { "program=/usr/bin/curl", "has a bad glob (a '/': program= matches the program's short name, without its directory)", 0, 0 },
    { "program=billing-[ab", "has a bad glob (a '[' without its ']')", 0, 0 },
    { "program=[]", "has a bad glob (a '[' without its ']')", 0, 0 },
    { "program=[[:alpha]", "has a bad glob (a '[' without its ']')", 0, 0 },
    { "user=", "has no user name (use user=NAME or user=UID)", 0, 0 },
    { "user=bh-no-such-user", "names no such user", 0, 0 },
    { "user=4294967295", "names no such user", 0, 0 },
    { "user=-1", "names no such user", 0, 0 },
    { "env=CLASS", "has no '=' between variable and value (use env=VAR=VALUE)", 0, 0 },
    { "env==x", "has a bad variable name (use A-Z a-z 0-9 _, not starting with a digit)", 0, 0 },
    { "env=1A=x", "has a bad variable name (use A-Z a-z 0-9 _, not starting with a digit)", 0, 0 },
    { "env=A-B=x", "has a bad variable name (use A-Z a-z 0-9 _, not starting with a digit)", 0, 0 },
    { LONG63 "8", "is longer than 63 characters", 0, 0 },
};

static void run_parse_case(void **state)
{
    const struct parse_case *row = *state;
    struct bh_who who;
    char why[256] = "";
    int parsed = bh_who_parse(row->text, &who, why, sizeof why);

    if (!row->why) {
        if (parsed != 0)
            print_error("unexpected: %s\n", why);
        assert_int_equal(parsed, 0);
        assert_int_equal(who.kind, row->kind);
        assert_string_equal(who.text, row->text);
        if (row->kind == BH_WHO_USER)
            assert_int_equal(who.uid, row->uid);
        return;
    }
    assert_int_equal(parsed, -1);
    assert_string_equal(why, row->why);
}

/* A short buffer gets a cut reason, never an overrun. */
static void short_why(void **state)
{
    (void)state;
    struct bh_who who;
    char why[8];
    memset(why, 'x', sizeof why);
    assert_int_equal(bh_who_parse("group=ops", &who, why, sizeof why), -1);
    assert_string_equal(why, "has an ");
    assert_int_equal(bh_who_parse("program=", &who, why, sizeof why), -1);
    assert_string_equal(why, "has a b");
}

/* ---- matching ---- */

static char *const env_critical[] = { "HOME=/root", "BULKHEAD_CLASS=critical", "EMPTY=", NULL };

struct match_case {
    const char *name;
    const char *who;
    const char *program;    /* NULL: unknown */
    uid_t uid;
    char *const *env;
    int matches;
};

static const struct match_case match_cases[] = {
    { "a glob matches", "program=billing-*", "billing-7", 1000, NULL, 1 },
    { "a glob does not match", "program=billing-*", "export", 1000, NULL, 0 },
    { "a glob is whole: no prefix match", "program=billing", "billing-7", 1000, NULL, 0 },
    { "a glob is case sensitive", "program=billing-*", "Billing-7", 1000, NULL, 0 },
    { "a bracket expression", "program=[ab]x", "bx", 1000, NULL, 1 },
    { "a ']' member", "program=[]]x", "]x", 1000, NULL, 1 },
    { "an escaped '['", "program=\\[x", "[x", 1000, NULL, 1 },
    { "an unknown program never matches program=", "program=*", NULL, 1000, NULL, 0 },
    { "the uid", "user=1000", "x", 1000, NULL, 1 },
    { "another uid", "user=1000", "x", 1001, NULL, 0 },
    { "a name, as its uid", "user=root", "x", 0, NULL, 1 },
    { "user= ignores the program", "user=0", NULL, 0, NULL, 1 },
    { "env: the exact entry", "env=BULKHEAD_CLASS=critical", "x", 0, env_critical, 1 },
    { "env: another value", "env=BULKHEAD_CLASS=crit", "x", 0, env_critical, 0 },
    { "env: a longer value", "env=BULKHEAD_CLASS=critical2", "x", 0, env_critical, 0 },
    { "env: an empty value", "env=EMPTY=", "x", 0, env_critical, 1 },
    { "env: an empty value is not unset", "env=UNSET=", "x", 0, env_critical, 0 },
    { "env: no environment at all", "env=EMPTY=", "x", 0, NULL, 0 },
    { "env: no glob in the value", "env=BULKHEAD_CLASS=crit*", "x", 0, env_critical, 0 },
};

static void run_match_case(void **state)
{
    const struct match_case *row = *state;
    struct bh_who who;
    char why[256];
    struct bh_identity identity = {
        .program = row->program, .uid = row->uid, .env = row->env,
    };

    assert_int_equal(bh_who_parse(row->who, &who, why, sizeof why), 0);
    assert_int_equal(bh_who_matches(&who, &identity), row->matches);
}

/* A script: its interpreter's argv[0] and the executed file's name both
 * count, and bh_who_program_matched says which one did. */
static void program_matches_either_name(void **state)
{
    (void)state;
    struct bh_who who;
    char why[256];
    struct bh_identity script = { .program = "python3", .executed = "billing-conn" };
    assert_int_equal(bh_who_parse("program=billing-*", &who, why, sizeof why), 0);
    assert_ptr_equal(bh_who_program_matched(&who, &script), script.executed);
    assert_int_equal(bh_who_parse("program=python*", &who, why, sizeof why), 0);
    assert_ptr_equal(bh_who_program_matched(&who, &script), script.program);
    assert_int_equal(bh_who_parse("program=perl", &who, why, sizeof why), 0);
    assert_null(bh_who_program_matched(&who, &script));
    assert_false(bh_who_matches(&who, &script));
}

/* This process as the shim sees it. */
static void identity_self(void **state)
{
    (void)state;
    struct bh_identity self;
    struct bh_who who;
    char why[256];

    bh_identity_self(&self);
    assert_string_equal(self.program, "test_who");
    assert_null(self.executed);  /* executed as itself: no second name */
    assert_int_equal(self.uid, geteuid());
    assert_int_equal(setenv("BH_TEST_WHO", "here", 1), 0);
    bh_identity_self(&self);
    assert_int_equal(bh_who_parse("env=BH_TEST_WHO=here", &who, why, sizeof why), 0);
    assert_true(bh_who_matches(&who, &self));
    assert_int_equal(bh_who_parse("program=test_*", &who, why, sizeof why), 0);
    assert_true(bh_who_matches(&who, &self));
}

#define COUNT(array) (sizeof array / sizeof array[0])

int main(void)
{
    static struct CMUnitTest tests[COUNT(parse_cases) + COUNT(match_cases) + 3];
    size_t n = 0;

    for (size_t i = 0; i < COUNT(parse_cases); i++)
        tests[n++] = (struct CMUnitTest) {
            .name = parse_cases[i].text[0] ? parse_cases[i].text : "(empty)",
            .test_func = run_parse_case, .initial_state = (void *)&parse_cases[i],
        };
    for (size_t i = 0; i < COUNT(match_cases); i++)
        tests[n++] = (struct CMUnitTest) {
            .name = match_cases[i].name, .test_func = run_match_case,
            .initial_state = (void *)&match_cases[i],
        };
    tests[n++] = (struct CMUnitTest) cmocka_unit_test(short_why);
    tests[n++] = (struct CMUnitTest) cmocka_unit_test(program_matches_either_name);
    tests[n++] = (struct CMUnitTest) cmocka_unit_test(identity_self);
    return _cmocka_run_group_tests("who", tests, n, NULL, NULL);
}
