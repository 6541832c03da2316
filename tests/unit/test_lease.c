/* The agent's check of the lease script's answer (agent/lease.c,
 * bh_lease_read_reply): replies built as hiredis builds them, each row
 * either read into the figures the agent acts on or refused with the line
 * the operator is told. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "lease.h"

#define META "bulkhead:{shop/db}:meta"

/* An array reply of `count` integers (at most 8), as hiredis hands it over. */
struct array {
    redisReply reply;
    redisReply items[8];
    redisReply *pointers[8];
};

static const redisReply *integers(struct array *a, size_t count, const long long *values)
{
    memset(a, 0, sizeof *a);
    a->reply.type = REDIS_REPLY_ARRAY;
    a->reply.elements = count;
    a->reply.element = a->pointers;
    for (size_t i = 0; i < count; i++) {
        a->items[i].type = REDIS_REPLY_INTEGER;
        a->items[i].integer = values[i];
        a->pointers[i] = &a->items[i];
    }
    return &a->reply;
}

static void a_good_answer_is_read_in_full(void **state)
{
    (void)state;
    struct array a;
    const long long values[] = { 3, 7, 12, 0, 40, 2, 3 };
    struct bh_lease_reply out;
    char why[256] = "";
    assert_int_equal(bh_lease_read_reply(integers(&a, 7, values), META, &out, why,
                                         sizeof why), 0);
    assert_int_equal(out.grant, 3);
    assert_int_equal(out.fleet_in_use, 7);
    assert_int_equal(out.hosts, 12);
    assert_int_equal(out.learning, 0);
    assert_int_equal(out.limit, 40);
    assert_int_equal(out.owed, 2);
    assert_int_equal(out.fallback, 3);
}

/* Each row: one value out of place, and the line that says so. */
static void bad_answers_are_refused(void **state)
{
    (void)state;
    static const struct {
        size_t count;
        long long values[8];
        const char *why;
    } rows[] = {
        /* a script of the version before: six figures, no fallback */
        { 6, { 3, 7, 12, 0, 40, 2 }, "lease: unexpected answer from Redis (" META ")" },
        { 8, { 3, 7, 12, 0, 40, 2, 1, 1 }, "lease: unexpected answer from Redis (" META ")" },
        { 7, { 3, 7, 12, 0, 0, 2, 1 }, "bad fleet limit in Redis: " META " limit is 0, "
          "not a whole number from 1 to 1000000" },
        { 7, { 3, 7, 12, 0, 1000001, 2, 1 }, "bad fleet limit in Redis: " META " limit is "
          "1000001, not a whole number from 1 to 1000000" },
        { 7, { 41, 7, 12, 0, 40, 0, 1 }, "lease: unexpected answer from Redis (" META ")" },
        { 7, { -1, 7, 12, 0, 40, 0, 0 }, "lease: unexpected answer from Redis (" META ")" },
        { 7, { 3, 7, 0, 0, 40, 0, 1 }, "lease: unexpected answer from Redis (" META ")" },
        { 7, { 3, 7, 12, 2, 40, 0, 1 }, "lease: unexpected answer from Redis (" META ")" },
        { 7, { 3, 7, 12, 0, 40, 41, 1 }, "lease: unexpected answer from Redis (" META ")" },
        { 7, { 3, 7, 12, 0, 40, -1, 1 }, "lease: unexpected answer from Redis (" META ")" },
        /* a fallback past the grant would reserve less than the host uses */
        { 7, { 3, 7, 12, 0, 40, 0, 4 }, "lease: unexpected answer from Redis (" META ")" },
        { 7, { 3, 7, 12, 0, 40, 0, -1 }, "lease: unexpected answer from Redis (" META ")" },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct array a;
        struct bh_lease_reply out = { .grant = -7 };
        char why[256] = "";
        int rc = bh_lease_read_reply(integers(&a, rows[i].count, rows[i].values), META,
                                     &out, why, sizeof why);
        if (rc != -1 || strcmp(why, rows[i].why) != 0)
            fail_msg("row %zu: rc %d, \"%s\"", i, rc, why);
        assert_int_equal(out.grant, -7);  /* nothing half-read */
    }
}

static void a_non_integer_element_is_refused(void **state)
{
    (void)state;
    struct array a;
    const long long values[] = { 3, 7, 12, 0, 40, 2, 3 };
    integers(&a, 7, values);
    a.items[6].type = REDIS_REPLY_STRING;
    struct bh_lease_reply out;
    char why[256] = "";
    assert_int_equal(bh_lease_read_reply(&a.reply, META, &out, why, sizeof why), -1);
    assert_string_equal(why, "lease: unexpected answer from Redis (" META ")");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_good_answer_is_read_in_full),
        cmocka_unit_test(bad_answers_are_refused),
        cmocka_unit_test(a_non_integer_element_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
