/* The destination matcher: one rules file, tables of destinations and the
 * rule (by line) each falls under, before and after names are noted. */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "rules/rule_index.h"

static const char rules_text[] =
    "[global]\n"                              /* 1 */
    "namespace = t\n"                         /* 2 */
    "[first]\n"                               /* 3 */
    "limit = 1\n"                             /* 4 */
    "match = 10.0.0.1:80\n"                   /* 5 */
    "match = 10.1.0.0/16:8000-8099\n"         /* 6 */
    "match = [2001:db8::1]:443\n"             /* 7 */
    "match = [2001:db8:1::]/48:*\n"           /* 8 */
    "[second]\n"                              /* 9 */
    "limit = 1\n"                             /* 10 */
    "match = 10.0.0.0/8:80\n"                 /* 11 */
    "match = 10.1.2.3:8050\n"                 /* 12 */
    "match = 0.0.0.0/0:5432\n"                /* 13 */
    "match = [::]/0:5432\n"                   /* 14 */
    "[third]\n"                               /* 15 */
    "limit = 1\n"                             /* 16 */
    "match = 192.0.2.0/24:*\n"                /* 17 */
    "match = api.example.com:443\n"           /* 18 */
    "match = *.example.net:443\n"             /* 19 */
    "match = 192.0.2.128/25:1-1024\n"         /* 20 */
    "[fourth]\n"                              /* 21 */
    "limit = 1\n"                             /* 22 */
    "match = 10.0.0.0/8:443\n"                /* 23 */
    "match = [2001:db8::]/32:443\n"           /* 24 */
    "match = 198.51.100.0/24:443\n";          /* 25 */

struct fixture {
    struct bh_config config;
    struct bh_rule_index *index;
};

/* "a.b.c.d:port" or "[v6]:port" into a sockaddr; returns its length. */
static socklen_t destination(const char *text, struct sockaddr_storage *out)
{
    char host[64];
    unsigned port;
    memset(out, 0, sizeof *out);
    if (sscanf(text, "[%63[^]]]:%u", host, &port) == 2) {
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        assert_int_equal(inet_pton(AF_INET6, host, &v6->sin6_addr), 1);
        return sizeof *v6;
    }
    assert_int_equal(sscanf(text, "%63[^:]:%u", host, &port), 2);
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET, host, &v4->sin_addr), 1);
    return sizeof *v4;
}

/* The line of the rule the destination matches; 0 when none does. */
static int matched_line(const struct fixture *f, const char *text)
{
    struct sockaddr_storage address;
    socklen_t length = destination(text, &address);
    int rule = bh_rule_index_match(f->index, (struct sockaddr *)&address, length);
    if (rule < 0)
        return 0;
    assert_in_range(rule, 0, f->config.rule_count - 1);
    return f->config.rules[rule].line;
}

static void note(struct fixture *f, const char *name, const char *address)
{
    uint8_t bytes[16];
    int family = strchr(address, ':') ? AF_INET6 : AF_INET;
    assert_int_equal(inet_pton(family, address, bytes), 1);
    bh_rule_index_note_name(f->index, name, family, bytes);
}

struct match_case {
    const char *destination;
    int line;              /* 0: not limited */
};

static void expect_lines(const struct fixture *f, const struct match_case *rows,
                         size_t count)
{
    for (size_t i = 0; i < count; i++) {
        int got = matched_line(f, rows[i].destination);
        if (got != rows[i].line)
            print_error("%s: matched line %d, expected %d\n",
                        rows[i].destination, got, rows[i].line);
        assert_int_equal(got, rows[i].line);
    }
}

#define EXPECT(f, rows) expect_lines(f, rows, sizeof rows / sizeof rows[0])

static void addresses(void **state)
{
    static const struct match_case rows[] = {
        /* v4 literal; the first rule in the file wins over line 11's /8 */
        { "10.0.0.1:80", 5 },
        { "10.0.0.1:81", 0 },
        { "10.0.0.2:80", 11 },
        { "10.255.255.255:80", 11 },
        { "11.0.0.1:80", 0 },
        /* CIDR with a port range, bounds included */
        { "10.1.200.7:8000", 6 },
        { "10.1.200.7:8099", 6 },
        { "10.1.200.7:8100", 0 },
        { "10.1.200.7:7999", 0 },
        { "10.2.0.1:8050", 0 },
        /* a single address inside an earlier CIDR: the CIDR's line wins */
        { "10.1.2.3:8050", 6 },
        /* every v4 and every v6 address on one port */
        { "8.8.8.8:5432", 13 },
        { "0.0.0.0:5432", 13 },
        { "[::1]:5432", 14 },
        { "[2001:db8:1::9]:5432", 8 },
        /* v6 literal and /48 with port * */
        { "[2001:db8::1]:443", 7 },
        { "[2001:db8::2]:443", 24 },
        { "[2001:db8:1:ffff::]:1", 8 },
        { "[2001:db8:1:ffff::]:65535", 8 },
        { "[2001:db8:2::]:80", 0 },
        { "[2001:db9::1]:443", 0 },
        /* port *: 0 and 65535 are in; a later, narrower rule never wins */
        { "192.0.2.200:0", 17 },
        { "192.0.2.200:65535", 17 },
        { "192.0.2.200:80", 17 },
        { "192.0.3.1:80", 0 },
    };
    EXPECT(*state, rows);
}

static void v4_mapped(void **state)
{
    static const struct match_case rows[] = {
        { "[::ffff:10.0.0.1]:80", 5 },
        { "[::ffff:10.1.9.9]:8001", 6 },
        { "[::ffff:8.8.8.8]:5432", 13 },
        { "[::ffff:10.0.0.1]:81", 0 },
        /* not mapped: ::10.0.0.1 (compatible) and 64:ff9b:: are v6 */
        { "[::10.0.0.1]:80", 0 },
        { "[64:ff9b::10.0.0.1]:80", 0 },
    };
    EXPECT(*state, rows);
}

/* A sockaddr shorter than its family's, or of another family, is no TCP
 * destination. */
static void lengths_and_families(void **state)
{
    const struct fixture *f = *state;
    struct sockaddr_storage address;
    socklen_t length = destination("10.0.0.1:80", &address);
    const struct sockaddr *sa = (const struct sockaddr *)&address;
    assert_int_equal(bh_rule_index_match(f->index, sa, length), 0);
    assert_int_equal(bh_rule_index_match(f->index, sa, length - 1), -1);
    assert_int_equal(bh_rule_index_match(f->index, sa, sizeof address), 0);
    length = destination("[2001:db8::1]:443", &address);
    assert_int_equal(bh_rule_index_match(f->index, sa, length), 2);
    assert_int_equal(bh_rule_index_match(f->index, sa, length - 1), -1);
    address.ss_family = AF_UNIX;
    assert_int_equal(bh_rule_index_match(f->index, sa, sizeof address), -1);
    address.ss_family = AF_UNSPEC;
    assert_int_equal(bh_rule_index_match(f->index, sa, sizeof address), -1);
}

static void wanted_names(void **state)
{
    const struct fixture *f = *state;
    static const struct { const char *name; int wanted; } rows[] = {
        { "api.example.com", 1 },
        { "API.Example.COM", 1 },
        { "api.example.com.", 1 },
        { "example.com", 0 },
        { "www.api.example.com", 0 },
        { "a.example.net", 1 },
        { "a.b.Example.NET.", 1 },
        { "example.net", 0 },
        { "xexample.net", 0 },
        { "", 0 },
        { ".", 0 },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int wanted = bh_rule_index_wants_name(f->index, rows[i].name) != 0;
        if (wanted != rows[i].wanted)
            print_error("wants_name(\"%s\") = %d\n", rows[i].name, wanted);
        assert_int_equal(wanted, rows[i].wanted);
    }
}

/* Name rules match the addresses noted for a matching name, on their
 * ports, and keep their place in file order among address rules. */
static void resolved_names(void **state)
{
    struct fixture *f = *state;
    static const struct match_case before[] = {
        { "198.51.100.5:443", 25 },
        { "10.7.7.7:443", 23 },
        { "203.0.113.9:443", 0 },
    };
    EXPECT(f, before);

    note(f, "API.example.com.", "198.51.100.5");
    note(f, "api.example.com", "10.7.7.7");
    note(f, "api.example.com", "2001:db8:ffff::5");
    note(f, "api.example.com", "::ffff:203.0.113.9");
    note(f, "x.y.example.net", "203.0.113.10");
    note(f, "other.example.org", "203.0.113.11");
    static const struct match_case after[] = {
        /* line 18 comes before the address rules at 23-25 */
        { "198.51.100.5:443", 18 },
        { "10.7.7.7:443", 18 },
        { "[2001:db8:ffff::5]:443", 18 },
        /* a v4-mapped answer matches the v4 connect and the mapped one */
        { "203.0.113.9:443", 18 },
        { "[::ffff:203.0.113.9]:443", 18 },
        /* only on the rule's port */
        { "198.51.100.5:80", 0 },
        { "10.7.7.7:80", 11 },
        /* the suffix rule */
        { "203.0.113.10:443", 19 },
        /* a name no rule wants leaves its address alone */
        { "203.0.113.11:443", 0 },
        /* earlier address rules still win over a later name rule */
        { "192.0.2.1:443", 17 },
    };
    EXPECT(f, after);
    note(f, "api.example.com", "192.0.2.1");
    static const struct match_case still[] = { { "192.0.2.1:443", 17 } };
    EXPECT(f, still);
}

/* Names noted on some threads while others match: what the resolver hooks
 * and connect() do at once in a threaded program (run under make test-tsan
 * for the locking). Every noted address matches its rule afterwards. */
enum { RACE_ADDRESSES = 2000 };

static void race_address(int i, uint8_t out[4])
{
    out[0] = 203;
    out[1] = 0;
    out[2] = (uint8_t)(i >> 8);
    out[3] = (uint8_t)i;
}

static void *race_noter(void *arg)
{
    struct fixture *f = arg;
    for (int i = 0; i < RACE_ADDRESSES; i++) {
        uint8_t address[4];
        race_address(i, address);
        bh_rule_index_note_name(f->index, i % 2 ? "api.example.com" : "b.example.net",
                                AF_INET, address);
    }
    return NULL;
}

static void *race_matcher(void *arg)
{
    struct fixture *f = arg;
    for (int i = 0; i < RACE_ADDRESSES; i++) {
        struct sockaddr_in v4 = { .sin_family = AF_INET, .sin_port = htons(443) };
        race_address(i, (uint8_t *)&v4.sin_addr);
        int rule = bh_rule_index_match(f->index, (struct sockaddr *)&v4, sizeof v4);
        /* Unmatched until noted, then the name's rule: nothing else. */
        if (rule != -1 && rule != 9 && rule != 10)
            return (void *)1;
    }
    return NULL;
}

static void notes_race_matches(void **state)
{
    struct fixture *f = *state;
    pthread_t threads[4];
    void *(*bodies[4])(void *) = { race_noter, race_matcher, race_noter, race_matcher };
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, bodies[i], f), 0);
    for (int i = 0; i < 4; i++) {
        void *result;
        assert_int_equal(pthread_join(threads[i], &result), 0);
        assert_null(result);
    }
    for (int i = 0; i < RACE_ADDRESSES; i++) {
        char text[32];
        uint8_t address[4];
        race_address(i, address);
        snprintf(text, sizeof text, "%u.%u.%u.%u:443", address[0], address[1],
                 address[2], address[3]);
        /* odd: api.example.com (line 18), even: *.example.net (line 19) */
        assert_int_equal(matched_line(f, text), i % 2 ? 18 : 19);
    }
}

/* Rules without host names: an index that never changes, whose IPv4
 * results are cached (rule_index.c). */
static const char address_rules_text[] =
    "[global]\n"                              /* 1 */
    "namespace = t\n"                         /* 2 */
    "[first]\n"                               /* 3 */
    "limit = 1\n"                             /* 4 */
    "match = 10.1.0.0/16:80\n"                /* 5 */
    "match = 10.0.0.0/8:80-81\n"              /* 6 */
    "match = 10.1.2.3:81-82\n";               /* 7 */

/* Each destination's rule, asked again and again among a thousand others
 * that share its cache slots: a cached answer is the index's own (the
 * same address on another port, or another address on the same port,
 * never takes it). */
static void cached_matches(void **state)
{
    struct fixture *f = *state;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 1000; i++) {
            char text[32];
            snprintf(text, sizeof text, "10.1.%d.%d:80", i / 250, i % 250);
            assert_int_equal(matched_line(f, text), 5);
            snprintf(text, sizeof text, "10.2.%d.%d:80", i / 250, i % 250);
            assert_int_equal(matched_line(f, text), 6);
            snprintf(text, sizeof text, "11.1.%d.%d:80", i / 250, i % 250);
            assert_int_equal(matched_line(f, text), 0);
            snprintf(text, sizeof text, "10.1.%d.%d:81", i / 250, i % 250);
            assert_int_equal(matched_line(f, text), 6);
            static const int by_port[] = { 0, 5, 6, 7, 0 };  /* ports 79 to 83 */
            snprintf(text, sizeof text, "10.1.2.3:%d", 79 + i % 5);
            assert_int_equal(matched_line(f, text), by_port[i % 5]);
        }
    }
}

static const char *scratch_file(const char *text)
{
    static char path[64];
    size_t length = strlen(text);
    snprintf(path, sizeof path, "/tmp/bh-unit-rules.XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    ssize_t written = write(fd, text, length);
    close(fd);
    return written == (ssize_t)length ? path : NULL;
}

static void no_error_expected(void *ctx, const char *message)
{
    (void)ctx;
    print_error("rules: %s\n", message);
}

/* A fresh index per test: noted names stay in an index for good. */
static int build_from(void **state, const char *text)
{
    static struct fixture f;
    const char *path = scratch_file(text);
    if (!path)
        return -1;
    int errors = bh_config_load(path, &f.config, no_error_expected, NULL);
    unlink(path);
    if (errors)
        return -1;
    f.index = bh_rule_index_build(&f.config);
    *state = &f;
    return f.index ? 0 : -1;
}

static int build(void **state)
{
    return build_from(state, rules_text);
}

static int build_addresses_only(void **state)
{
    return build_from(state, address_rules_text);
}

static int destroy(void **state)
{
    struct fixture *f = *state;
    bh_rule_index_free(f->index);
    bh_config_free(&f->config);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(addresses, build, destroy),
        cmocka_unit_test_setup_teardown(v4_mapped, build, destroy),
        cmocka_unit_test_setup_teardown(lengths_and_families, build, destroy),
        cmocka_unit_test_setup_teardown(wanted_names, build, destroy),
        cmocka_unit_test_setup_teardown(resolved_names, build, destroy),
        cmocka_unit_test_setup_teardown(notes_race_matches, build, destroy),
        cmocka_unit_test_setup_teardown(cached_matches, build_addresses_only, destroy),
    };
    return cmocka_run_group_tests_name("rules", tests, NULL, NULL);
}
