/* The rules parser, table by table: each row is a small rules file written
 * to a scratch directory and loaded as "rules.ini", with either the exact
 * error lines expected, in order, or the values it must parse to. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"

enum { MAX_ERRORS = 8 };

struct errors {
    char *lines[MAX_ERRORS + 1];
    int count;        /* every call, including any past MAX_ERRORS */
};

static void collect(void *ctx, const char *message)
{
    struct errors *errors = ctx;
    if (errors->count < MAX_ERRORS)
        errors->lines[errors->count] = strdup(message);
    errors->count++;
}

static void free_errors(struct errors *errors)
{
    for (int i = 0; i < errors->count && i < MAX_ERRORS; i++)
        free(errors->lines[i]);
}

static void write_file(const char *path, const char *text, size_t length)
{
    FILE *file = fopen(path, "w");
    assert_non_null(file);
    assert_int_equal(fwrite(text, 1, length, file), length);
    assert_int_equal(fclose(file), 0);
}

/* Loads `text` as rules.ini; the returned count is bh_config_load's. */
static int load_text(const char *text, size_t length, struct bh_config *config,
                     struct errors *errors)
{
    write_file("rules.ini", text, length);
    int count = bh_config_load("rules.ini", config, collect, errors);
    assert_int_equal(count, errors->count);
    return count;
}

/* ---- files with errors: the exact lines ---- */

struct error_case {
    const char *name;
    const char *text;
    const char *errors[MAX_ERRORS]; /* in order; the rest NULL */
};

/* Lines 1-4 are a valid [global] and [cap]; rows add from line 5 on. */
#define HEAD "[global]\nnamespace = t\n[cap]\nlimit = 0\n"

static const struct error_case error_cases[] = {
    { "limit: not a whole number", HEAD "match = 10.0.0.1:80\n[b]\nlimit = twenty\nmatch = 10.0.0.2:80\n",
      { "rules.ini:7: limit: \"twenty\" is not a whole number" } },
    { "limit: negative", HEAD "match = 10.0.0.1:80\n[b]\nlimit = -3\nmatch = 10.0.0.2:80\n",
      { "rules.ini:7: limit: \"-3\" is not a whole number" } },
    { "limit: fractional", HEAD "match = 10.0.0.1:80\n[b]\nlimit = 3.5\nmatch = 10.0.0.2:80\n",
      { "rules.ini:7: limit: \"3.5\" is not a whole number" } },
    { "limit: a sign", HEAD "match = 10.0.0.1:80\n[b]\nlimit = +3\nmatch = 10.0.0.2:80\n",
      { "rules.ini:7: limit: \"+3\" is not a whole number" } },
    { "limit: empty", HEAD "match = 10.0.0.1:80\n[b]\nlimit =\nmatch = 10.0.0.2:80\n",
      { "rules.ini:7: limit: missing value" } },
    { "limit: too large", HEAD "match = 10.0.0.1:80\n[b]\nlimit = 99999999999\nmatch = 10.0.0.2:80\n",
      { "rules.ini:7: limit: 99999999999 is out of range (0 to 32767)" } },
    { "limit: one past SEMVMX", HEAD "match = 10.0.0.1:80\n[b]\nlimit = 32768\nmatch = 10.0.0.2:80\n",
      { "rules.ini:7: limit: 32768 is out of range (0 to 32767)" } },
    { "limit: set twice", HEAD "match = 10.0.0.1:80\nlimit = 2\n",
      { "rules.ini:6: limit: already set at line 4" } },
    { "limit: missing", HEAD "match = 10.0.0.1:80\n[b]\nmatch = 10.0.0.2:80\n",
      { "rules.ini:6: [b]: limit is required" } },
    { "wait_ms: not a number", HEAD "match = 10.0.0.1:80\nwait_ms = soon\n",
      { "rules.ini:6: wait_ms: \"soon\" is not a whole number" } },
    { "wait_ms: negative", HEAD "match = 10.0.0.1:80\nwait_ms = -1\n",
      { "rules.ini:6: wait_ms: \"-1\" is not a whole number" } },
    { "wait_ms: past an hour", HEAD "match = 10.0.0.1:80\nwait_ms = 3600001\n",
      { "rules.ini:6: wait_ms: 3600001 is out of range (0 to 3600000)" } },
    { "wait_nonblocking: not yes or no", HEAD "match = 10.0.0.1:80\nwait_nonblocking = true\n",
      { "rules.ini:6: wait_nonblocking: \"true\" is not one of yes, no" } },
    { "max_waiters: not a number", HEAD "match = 10.0.0.1:80\nmax_waiters = many\n",
      { "rules.ini:6: max_waiters: \"many\" is not a whole number" } },
    { "max_waiters: too many", HEAD "match = 10.0.0.1:80\nmax_waiters = 1000001\n",
      { "rules.ini:6: max_waiters: 1000001 is out of range (0 to 1000000)" } },
    { "errno: unknown name", HEAD "match = 10.0.0.1:80\nerrno = ENOSUCH\n",
      { "rules.ini:6: errno: \"ENOSUCH\" is not one of ECONNREFUSED, ETIMEDOUT, EAGAIN, EHOSTUNREACH" } },
    { "errno: a real errno that is not allowed", HEAD "match = 10.0.0.1:80\nerrno = EPERM\n",
      { "rules.ini:6: errno: \"EPERM\" is not one of ECONNREFUSED, ETIMEDOUT, EAGAIN, EHOSTUNREACH" } },
    { "match: port out of range", HEAD "match = 127.0.0.1:70000\n",
      { "rules.ini:5: match: \"127.0.0.1:70000\" has a bad port" } },
    { "match: port 0", HEAD "match = 127.0.0.1:0\n",
      { "rules.ini:5: match: \"127.0.0.1:0\" has a bad port" } },
    { "match: port missing", HEAD "match = 127.0.0.1\n",
      { "rules.ini:5: match: \"127.0.0.1\" is missing a port" } },
    { "match: port not a number", HEAD "match = 127.0.0.1:https\n",
      { "rules.ini:5: match: \"127.0.0.1:https\" has a bad port" } },
    { "match: reversed port range", HEAD "match = 127.0.0.1:20-10\n",
      { "rules.ini:5: match: \"127.0.0.1:20-10\" has its port range reversed" } },
    { "match: IPv4 prefix too long", HEAD "match = 127.0.0.0/33:80\n",
      { "rules.ini:5: match: \"127.0.0.0/33:80\" has a bad prefix length" } },
    { "match: IPv6 prefix too long", HEAD "match = [::1]/129:80\n",
      { "rules.ini:5: match: \"[::1]/129:80\" has a bad prefix length" } },
    { "match: unclosed IPv6 bracket", HEAD "match = [::1:80\n",
      { "rules.ini:5: match: \"[::1:80\" is missing a port" } },
    { "match: IPv6 without brackets", HEAD "match = ::1:80\n",
      { "rules.ini:5: match: \"::1:80\" has an IPv6 address without [brackets]" } },
    { "match: bare *", HEAD "match = *:80\n",
      { "rules.ini:5: match: \"*:80\" has a bare * host; to match every address use 0.0.0.0/0 and [::]/0" } },
    { "match: a mistyped address is no host name", HEAD "match = 10.0.0.256:80\n",
      { "rules.ini:5: match: \"10.0.0.256:80\" is not an address or host name" } },
    { "match: empty label", HEAD "match = api..example.com:443\n",
      { "rules.ini:5: match: \"api..example.com:443\" is not an address or host name" } },
    { "match: label over 63", HEAD "match = a234567890123456789012345678901234567890123456789012345678901234.com:1\n",
      { "rules.ini:5: match: \"a234567890123456789012345678901234567890123456789012345678901234.com:1\" is not an address or host name" } },
    { "match: empty list", HEAD "match = 10.0.0.1:80\n[b]\nlimit = 1\n",
      { "rules.ini:6: [b]: no match rules" } },
    { "unknown key in a compartment", HEAD "match = 10.0.0.1:80\ncolour = blue\n",
      { "rules.ini:6: unknown key \"colour\" in [cap]" } },
    { "unknown key in [global]", "[global]\ncolour = blue\n[cap]\nlimit = 0\nmatch = 10.0.0.1:80\n",
      { "rules.ini:2: unknown key \"colour\" in [global]" } },
    { "a compartment key in [global]", "[global]\nlimit = 1\n",
      { "rules.ini:2: unknown key \"limit\" in [global]" } },
    { "a key before any section", "limit = 1\n" HEAD "match = 10.0.0.1:80\n",
      { "rules.ini:1: limit: appears before any [section]" } },
    { "log: unknown level", "[global]\nlog = loud\n",
      { "rules.ini:2: log: \"loud\" is not one of error, warn, info, debug" } },
    { "namespace: a bad name", "[global]\nnamespace = a/b\n",
      { "rules.ini:2: namespace: \"a/b\" is not a valid name (use 1 to 47 of A-Z a-z 0-9 _ . -)" } },
    { "bad section name", HEAD "match = 10.0.0.1:80\n[pay ments]\nlimit = 1\nmatch = 10.0.0.2:80\n",
      { "rules.ini:6: bad section name \"[pay ments]\" (use 1 to 47 of A-Z a-z 0-9 _ . -)" } },
    { "a bad section's keys are still checked", HEAD "match = 10.0.0.1:80\n[a b]\nlimit = x\n",
      { "rules.ini:6: bad section name \"[a b]\" (use 1 to 47 of A-Z a-z 0-9 _ . -)",
        "rules.ini:7: limit: \"x\" is not a whole number" } },
    { "duplicate compartment", HEAD "match = 10.0.0.1:80\n[cap]\nlimit = 1\nmatch = 10.0.0.2:80\n",
      { "rules.ini:6: duplicate compartment [cap] (first at line 3)" } },
    { "duplicate [global]", HEAD "match = 10.0.0.1:80\n[global]\n",
      { "rules.ini:6: duplicate section [global] (first at line 1)" } },
    { "text after a header", HEAD "match = 10.0.0.1:80\n[b] x\nlimit = 1\nmatch = 10.0.0.2:80\n",
      { "rules.ini:6: unexpected text after [b]" } },
    { "an unclosed header", HEAD "match = 10.0.0.1:80\n[b\n",
      { "rules.ini:6: syntax error" } },
    { "a line that is not key = value", HEAD "match = 10.0.0.1:80\nthis is not a setting\n",
      { "rules.ini:6: syntax error" } },
    /* Deadlines and the breaker. */
    { "connect_timeout_ms: below the first SYN retransmission", HEAD "match = 10.0.0.1:80\nconnect_timeout_ms = 500\n",
      { "rules.ini:6: connect_timeout_ms: 500 is below 1000: the kernel cannot fail a connect before its first SYN retransmission, 1 s after the SYN" } },
    { "connect_timeout_ms: 1", HEAD "match = 10.0.0.1:80\nconnect_timeout_ms = 1\n",
      { "rules.ini:6: connect_timeout_ms: 1 is below 1000: the kernel cannot fail a connect before its first SYN retransmission, 1 s after the SYN" } },
    { "connect_timeout_ms: one below 1000", HEAD "match = 10.0.0.1:80\nconnect_timeout_ms = 999\n",
      { "rules.ini:6: connect_timeout_ms: 999 is below 1000: the kernel cannot fail a connect before its first SYN retransmission, 1 s after the SYN" } },
    { "connect_timeout_ms: past a day", HEAD "match = 10.0.0.1:80\nconnect_timeout_ms = 86400001\n",
      { "rules.ini:6: connect_timeout_ms: 86400001 is out of range (0 to 86400000)" } },
    { "connect_timeout_ms: a unit", HEAD "match = 10.0.0.1:80\nconnect_timeout_ms = 2s\n",
      { "rules.ini:6: connect_timeout_ms: \"2s\" is not a whole number" } },
    { "connect_timeout_ms: negative", HEAD "match = 10.0.0.1:80\nconnect_timeout_ms = -1000\n",
      { "rules.ini:6: connect_timeout_ms: \"-1000\" is not a whole number" } },
    { "io_timeout_ms: past a day", HEAD "match = 10.0.0.1:80\nio_timeout_ms = 86400001\n",
      { "rules.ini:6: io_timeout_ms: 86400001 is out of range (0 to 86400000)" } },
    { "io_timeout_ms: fractional", HEAD "match = 10.0.0.1:80\nio_timeout_ms = 1.5\n",
      { "rules.ini:6: io_timeout_ms: \"1.5\" is not a whole number" } },
    { "io_timeout_ms: empty", HEAD "match = 10.0.0.1:80\nio_timeout_ms =\n",
      { "rules.ini:6: io_timeout_ms: missing value" } },
    { "breaker_failures: too many", HEAD "match = 10.0.0.1:80\nbreaker_failures = 1000001\n",
      { "rules.ini:6: breaker_failures: 1000001 is out of range (0 to 1000000)" } },
    { "breaker_failures: a word", HEAD "match = 10.0.0.1:80\nbreaker_failures = three\n",
      { "rules.ini:6: breaker_failures: \"three\" is not a whole number" } },
    { "breaker_failures: set twice", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_failures = 4\n",
      { "rules.ini:7: breaker_failures: already set at line 6" } },
    { "breaker_open_ms: 0", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_ms = 0\n",
      { "rules.ini:7: breaker_open_ms: 0 is out of range (1 to 86400000)" } },
    { "breaker_open_ms: past a day", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_ms = 86400001\n",
      { "rules.ini:7: breaker_open_ms: 86400001 is out of range (1 to 86400000)" } },
    { "breaker_open_max_ms: 0", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_max_ms = 0\n",
      { "rules.ini:7: breaker_open_max_ms: 0 is out of range (1 to 86400000)" } },
    { "breaker_open_max_ms: past a day", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_max_ms = 86400001\n",
      { "rules.ini:7: breaker_open_max_ms: 86400001 is out of range (1 to 86400000)" } },
    { "breaker_open_ms without breaker_failures", HEAD "match = 10.0.0.1:80\nbreaker_open_ms = 1000\n",
      { "rules.ini:6: breaker_open_ms: has no effect without breaker_failures" } },
    { "breaker_open_max_ms without breaker_failures", HEAD "match = 10.0.0.1:80\nbreaker_open_max_ms = 1000\n",
      { "rules.ini:6: breaker_open_max_ms: has no effect without breaker_failures" } },
    { "both periods without breaker_failures: each, not their order", HEAD "breaker_open_ms = 9000\nmatch = 10.0.0.1:80\nbreaker_open_max_ms = 1000\n",
      { "rules.ini:5: breaker_open_ms: has no effect without breaker_failures",
        "rules.ini:7: breaker_open_max_ms: has no effect without breaker_failures" } },
    { "breaker_open_ms with breaker_failures = 0", HEAD "match = 10.0.0.1:80\nbreaker_failures = 0\nbreaker_open_ms = 1000\n",
      { "rules.ini:7: breaker_open_ms: has no effect with breaker_failures = 0 (line 6)" } },
    { "a bad breaker_failures: one error, not two", HEAD "match = 10.0.0.1:80\nbreaker_failures = x\nbreaker_open_ms = 1000\n",
      { "rules.ini:6: breaker_failures: \"x\" is not a whole number" } },
    { "a bad breaker_open_ms without a breaker: one error", HEAD "match = 10.0.0.1:80\nbreaker_open_ms = x\n",
      { "rules.ini:6: breaker_open_ms: \"x\" is not a whole number" } },
    { "a bad breaker_open_max_ms: no order check", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_ms = 10000\nbreaker_open_max_ms = 0\n",
      { "rules.ini:8: breaker_open_max_ms: 0 is out of range (1 to 86400000)" } },
    { "breaker_open_max_ms below breaker_open_ms", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_ms = 10000\nbreaker_open_max_ms = 3000\n",
      { "rules.ini:8: breaker_open_max_ms: 3000 is below breaker_open_ms (10000 at line 7)" } },
    { "breaker_open_max_ms first, below breaker_open_ms after it", HEAD "match = 10.0.0.1:80\nbreaker_open_max_ms = 3000\nbreaker_open_ms = 10000\nbreaker_failures = 3\n",
      { "rules.ini:6: breaker_open_max_ms: 3000 is below breaker_open_ms (10000 at line 7)" } },
    { "breaker_open_max_ms below the default breaker_open_ms", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_max_ms = 4999\n",
      { "rules.ini:7: breaker_open_max_ms: 4999 is below breaker_open_ms (5000, the default)" } },
    { "breaker_open_ms above the default breaker_open_max_ms", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_ms = 60001\n",
      { "rules.ini:7: breaker_open_ms: 60001 is above breaker_open_max_ms (60000, the default)" } },
    /* Found when [b] begins, on the key's line, before [b]'s own errors. */
    { "the order check names its key's line, not the next header's", HEAD "match = 10.0.0.1:80\nbreaker_failures = 3\nbreaker_open_max_ms = 10\n[b]\nlimit = x\nmatch = 10.0.0.2:80\n",
      { "rules.ini:7: breaker_open_max_ms: 10 is below breaker_open_ms (5000, the default)",
        "rules.ini:9: limit: \"x\" is not a whole number" } },
    { "a duplicate compartment's breaker keys are still checked", HEAD "match = 10.0.0.1:80\n[cap]\nlimit = 1\nmatch = 10.0.0.2:80\nbreaker_open_ms = 100\n",
      { "rules.ini:6: duplicate compartment [cap] (first at line 3)",
        "rules.ini:9: breaker_open_ms: has no effect without breaker_failures" } },
    { "several errors: every one, in file order", HEAD "match = 10.0.0.1:80\n[b]\nlimit = twenty\nmatch = 10.0.0.2:1\nwait_ms = soon\ncolour = blue\n",
      { "rules.ini:7: limit: \"twenty\" is not a whole number",
        "rules.ini:9: wait_ms: \"soon\" is not a whole number",
        "rules.ini:10: unknown key \"colour\" in [b]" } },
};

static void run_error_case(void **state)
{
    const struct error_case *row = *state;
    struct bh_config config;
    struct errors errors = { 0 };
    int expected = 0;

    while (expected < MAX_ERRORS && row->errors[expected])
        expected++;
    load_text(row->text, strlen(row->text), &config, &errors);
    /* All of them when the count is off, to see what was said instead. */
    for (int i = 0; errors.count != expected && i < errors.count && i < MAX_ERRORS; i++)
        print_error("got: %s\n", errors.lines[i]);
    assert_int_equal(errors.count, expected);
    for (int i = 0; i < expected; i++)
        assert_string_equal(errors.lines[i], row->errors[i]);
    free_errors(&errors);
    bh_config_free(&config);
}

/* ---- what is not a line of text ---- */

static void expect_one_error(const char *text, size_t length, const char *want)
{
    struct bh_config config;
    struct errors errors = { 0 };
    load_text(text, length, &config, &errors);
    assert_int_equal(errors.count, 1);
    assert_string_equal(errors.lines[0], want);
    free_errors(&errors);
    bh_config_free(&config);
}

static void line_too_long(void **state)
{
    (void)state;
    /* 1,022 characters and the newline fit inih's 1,024-byte buffer. */
    char text[2048];
    int used = snprintf(text, sizeof text, HEAD "match = 10.0.0.1:80\nmatch = ");
    memset(text + used, 'a', 1023 - 8);
    strcpy(text + used + 1023 - 8, ".com:80\n");
    expect_one_error(text, strlen(text),
                     "rules.ini:6: line too long (the limit is 1022 characters)");
}

static void nul_byte(void **state)
{
    (void)state;
    static const char text[] = HEAD "match = 10.0.0.1:80\nwait_ms = 1\0junk\n";
    expect_one_error(text, sizeof text - 1, "rules.ini:6: line contains a NUL byte");
}

static void missing_file(void **state)
{
    (void)state;
    struct bh_config config;
    struct errors errors = { 0 };
    assert_int_equal(bh_config_load("missing.ini", &config, collect, &errors), 1);
    assert_string_equal(errors.lines[0],
                        "missing.ini: cannot open: No such file or directory");
    free_errors(&errors);
    bh_config_free(&config);
}

static void directory(void **state)
{
    (void)state;
    struct bh_config config;
    struct errors errors = { 0 };
    assert_int_equal(mkdir("dir.ini", 0700), 0);
    assert_int_equal(bh_config_load("dir.ini", &config, collect, &errors), 1);
    assert_string_equal(errors.lines[0], "dir.ini: is a directory, not a regular file");
    free_errors(&errors);
    bh_config_free(&config);
    assert_int_equal(rmdir("dir.ini"), 0);
}

static void too_big(void **state)
{
    (void)state;
    struct bh_config config;
    struct errors errors = { 0 };
    int fd = open("big.ini", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (4 << 20) + 1), 0);
    close(fd);
    assert_int_equal(bh_config_load("big.ini", &config, collect, &errors), 1);
    assert_string_equal(errors.lines[0],
                        "big.ini: is 4194305 bytes; a rules file may be at most 4 MiB");
    free_errors(&errors);
    bh_config_free(&config);
    assert_int_equal(unlink("big.ini"), 0);
}

static void too_many_compartments(void **state)
{
    (void)state;
    char text[8192];
    int used = 0;
    for (int i = 0; i <= BH_MAX_COMPARTMENTS; i++)
        used += snprintf(text + used, sizeof text - used,
                         "[c%d]\nlimit = 1\nmatch = 10.0.0.%d:80\n", i, i);
    /* The 65th header is line 64 * 3 + 1. */
    expect_one_error(text, (size_t)used,
                     "rules.ini:193: [c64]: too many compartments (at most 64)");
}

/* ---- valid files: the values ---- */

static void parse_ok(const char *text, struct bh_config *config)
{
    struct errors errors = { 0 };
    load_text(text, strlen(text), config, &errors);
    if (errors.count)
        print_error("unexpected: %s\n", errors.lines[0]);
    assert_int_equal(errors.count, 0);
}

static void defaults(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[only]\nlimit = 5\nmatch = 10.0.0.1:80\n", &config);
    assert_string_equal(config.namespace_name, "default");
    assert_int_equal(config.log_level, BH_LOG_WARN);
    assert_null(config.log_file);
    assert_string_equal(config.path, "rules.ini");
    assert_int_equal(config.compartment_count, 1);
    const struct bh_compartment *c = &config.compartments[0];
    assert_string_equal(c->name, "only");
    assert_int_equal(c->limit, 5);
    assert_int_equal(c->wait_ms, 0);
    assert_int_equal(c->wait_nonblocking, 0);
    assert_int_equal(c->max_waiters, 64);
    assert_int_equal(c->refusal_errno, ECONNREFUSED);
    assert_int_equal(c->connect_timeout_ms, 0);
    assert_int_equal(c->io_timeout_ms, 0);
    assert_int_equal(c->breaker_failures, 0);
    assert_int_equal(c->breaker_open_ms, 5000);
    assert_int_equal(c->breaker_open_max_ms, 60000);
    assert_int_equal(c->line, 1);
    bh_config_free(&config);
}

static void every_key(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("\xEF\xBB\xBF; a byte order mark, then a comment\n"
             "[global]\nnamespace = team-a.1\nlog = debug\nlog_file = /tmp/bh.log\n"
             "\n[slow]\nlimit = 0\nwait_ms = 3600000\nwait_nonblocking = yes\n"
             "max_waiters = 1000000\nerrno = EHOSTUNREACH\nmatch = 10.0.0.1:80\n"
             "[fast]  ; a comment after a header\nlimit = 32767\nerrno = EAGAIN\n"
             "wait_nonblocking = no\nmatch = 10.0.0.2:80\n"
             "connect_timeout_ms = 1000\nio_timeout_ms = 500\nbreaker_failures = 3\n"
             "breaker_open_ms = 250\nbreaker_open_max_ms = 1000\n", &config);
    assert_string_equal(config.namespace_name, "team-a.1");
    assert_int_equal(config.log_level, BH_LOG_DEBUG);
    assert_string_equal(config.log_file, "/tmp/bh.log");
    assert_int_equal(config.compartment_count, 2);
    const struct bh_compartment *slow = &config.compartments[0];
    assert_string_equal(slow->name, "slow");
    assert_int_equal(slow->line, 7);
    assert_int_equal(slow->limit, 0);
    assert_int_equal(slow->wait_ms, 3600000);
    assert_int_equal(slow->wait_nonblocking, 1);
    assert_int_equal(slow->max_waiters, 1000000);
    assert_int_equal(slow->refusal_errno, EHOSTUNREACH);
    const struct bh_compartment *fast = &config.compartments[1];
    assert_string_equal(fast->name, "fast");
    assert_int_equal(fast->line, 14);
    assert_int_equal(fast->limit, 32767);
    assert_int_equal(fast->wait_nonblocking, 0);
    assert_int_equal(fast->refusal_errno, EAGAIN);
    assert_int_equal(fast->connect_timeout_ms, 1000);
    assert_int_equal(fast->io_timeout_ms, 500);
    assert_int_equal(fast->breaker_failures, 3);
    assert_int_equal(fast->breaker_open_ms, 250);
    assert_int_equal(fast->breaker_open_max_ms, 1000);
    bh_config_free(&config);
}

/* The deadline and breaker keys, from defaults to their bounds: one row per
 * compartment body (after limit and match), with the five values. */
struct deadline_case {
    const char *name;
    const char *keys;
    int connect_timeout_ms, io_timeout_ms;
    int breaker_failures, breaker_open_ms, breaker_open_max_ms;
};

static const struct deadline_case deadline_cases[] = {
    { "deadlines: none given", "", 0, 0, 0, 5000, 60000 },
    { "connect_timeout_ms = 0 is off", "connect_timeout_ms = 0\n", 0, 0, 0, 5000, 60000 },
    { "connect_timeout_ms = 1000", "connect_timeout_ms = 1000\n", 1000, 0, 0, 5000, 60000 },
    { "connect_timeout_ms = 1500", "connect_timeout_ms = 1500\n", 1500, 0, 0, 5000, 60000 },
    { "connect_timeout_ms = a day", "connect_timeout_ms = 86400000\n", 86400000, 0, 0, 5000, 60000 },
    { "io_timeout_ms = 0 is off", "io_timeout_ms = 0\n", 0, 0, 0, 5000, 60000 },
    { "io_timeout_ms = 1", "io_timeout_ms = 1\n", 0, 1, 0, 5000, 60000 },
    { "io_timeout_ms = a day", "io_timeout_ms = 86400000\n", 0, 86400000, 0, 5000, 60000 },
    { "breaker_failures = 0 is no breaker", "breaker_failures = 0\n", 0, 0, 0, 5000, 60000 },
    { "breaker_failures = 1", "breaker_failures = 1\n", 0, 0, 1, 5000, 60000 },
    { "breaker_failures = 1000000", "breaker_failures = 1000000\n", 0, 0, 1000000, 5000, 60000 },
    { "breaker_open_ms = 1", "breaker_failures = 3\nbreaker_open_ms = 1\n", 0, 0, 3, 1, 60000 },
    { "breaker_open_ms = the default max", "breaker_failures = 3\nbreaker_open_ms = 60000\n", 0, 0, 3, 60000, 60000 },
    { "breaker_open_max_ms = the default open", "breaker_failures = 3\nbreaker_open_max_ms = 5000\n", 0, 0, 3, 5000, 5000 },
    { "breaker periods of a day", "breaker_failures = 3\nbreaker_open_ms = 86400000\nbreaker_open_max_ms = 86400000\n", 0, 0, 3, 86400000, 86400000 },
    { "breaker keys in any order", "breaker_open_max_ms = 7000\nbreaker_open_ms = 7000\nbreaker_failures = 2\n", 0, 0, 2, 7000, 7000 },
    { "every deadline and breaker key", "connect_timeout_ms = 1000\nio_timeout_ms = 500\nbreaker_failures = 3\nbreaker_open_ms = 250\nbreaker_open_max_ms = 1000\n", 1000, 500, 3, 250, 1000 },
};

static void run_deadline_case(void **state)
{
    const struct deadline_case *row = *state;
    char text[512];
    struct bh_config config;
    snprintf(text, sizeof text, "[a]\nlimit = 1\nmatch = 10.0.0.1:80\n%s"
             "[b]\nlimit = 1\nmatch = 10.0.0.2:80\n", row->keys);
    parse_ok(text, &config);
    assert_int_equal(config.compartment_count, 2);
    const struct bh_compartment *a = &config.compartments[0];
    assert_int_equal(a->connect_timeout_ms, row->connect_timeout_ms);
    assert_int_equal(a->io_timeout_ms, row->io_timeout_ms);
    assert_int_equal(a->breaker_failures, row->breaker_failures);
    assert_int_equal(a->breaker_open_ms, row->breaker_open_ms);
    assert_int_equal(a->breaker_open_max_ms, row->breaker_open_max_ms);
    /* The next compartment starts from the defaults again. */
    const struct bh_compartment *b = &config.compartments[1];
    assert_int_equal(b->connect_timeout_ms, 0);
    assert_int_equal(b->io_timeout_ms, 0);
    assert_int_equal(b->breaker_failures, 0);
    assert_int_equal(b->breaker_open_ms, 5000);
    assert_int_equal(b->breaker_open_max_ms, 60000);
    bh_config_free(&config);
}

static void log_file_stderr(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[global]\nlog_file = stderr\nlog = error\n", &config);
    assert_null(config.log_file);
    assert_int_equal(config.log_level, BH_LOG_ERROR);
    bh_config_free(&config);
}

struct rule_case {
    const char *match;
    enum bh_rule_kind kind;
    int family;
    const char *address;   /* inet_pton text, or the stored hostname */
    int prefix_len;
    unsigned port_lo, port_hi;
};

static const struct rule_case rule_cases[] = {
    { "10.1.2.3:80", BH_RULE_ADDRESS, AF_INET, "10.1.2.3", 32, 80, 80 },
    { "10.1.2.3/8:1000-2000", BH_RULE_ADDRESS, AF_INET, "10.0.0.0", 8, 1000, 2000 },
    { "10.1.2.3/0:*", BH_RULE_ADDRESS, AF_INET, "0.0.0.0", 0, 0, 65535 },
    { "192.168.255.255/17:443", BH_RULE_ADDRESS, AF_INET, "192.168.128.0", 17, 443, 443 },
    { "[2001:db8::1]:443", BH_RULE_ADDRESS, AF_INET6, "2001:db8::1", 128, 443, 443 },
    { "[2001:db8:ffff::1]/33:1-65535", BH_RULE_ADDRESS, AF_INET6, "2001:db8:8000::", 33, 1, 65535 },
    /* v4-mapped: connects to it are matched as v4, so the rule is one. */
    { "[::ffff:10.0.0.1]:80", BH_RULE_ADDRESS, AF_INET, "10.0.0.1", 32, 80, 80 },
    { "[::ffff:10.1.2.3]/104:80", BH_RULE_ADDRESS, AF_INET, "10.0.0.0", 8, 80, 80 },
    { "API.Example.COM.:443", BH_RULE_HOSTNAME, 0, "api.example.com", 0, 443, 443 },
    { "*.Example.com:*", BH_RULE_HOST_SUFFIX, 0, ".example.com", 0, 0, 65535 },
    { "localhost:6379", BH_RULE_HOSTNAME, 0, "localhost", 0, 6379, 6379 },
};

static void run_rule_case(void **state)
{
    const struct rule_case *row = *state;
    char text[512];
    struct bh_config config;
    snprintf(text, sizeof text, "[a]\nlimit = 1\nmatch = 10.9.9.9:9\n[b]\nlimit = 2\n"
             "match = %s\n", row->match);
    parse_ok(text, &config);
    assert_int_equal(config.rule_count, 2);
    const struct bh_rule *rule = &config.rules[1];
    assert_int_equal(rule->kind, row->kind);
    assert_int_equal(rule->compartment, 1);
    assert_int_equal(rule->line, 6);
    assert_string_equal(rule->text, row->match);
    assert_int_equal(rule->port_lo, row->port_lo);
    assert_int_equal(rule->port_hi, row->port_hi);
    if (row->kind == BH_RULE_ADDRESS) {
        uint8_t want[16] = { 0 };
        assert_int_equal(inet_pton(row->family, row->address, want), 1);
        assert_int_equal(rule->family, row->family);
        assert_int_equal(rule->prefix_len, row->prefix_len);
        assert_memory_equal(rule->address, want, row->family == AF_INET ? 4 : 16);
        assert_null(rule->hostname);
    } else {
        assert_string_equal(rule->hostname, row->address);
    }
    bh_config_free(&config);
}

/* Rules keep file order across compartments: the first match wins. */
static void rules_in_file_order(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[a]\nlimit = 1\nmatch = 10.0.0.1:80\n[b]\nlimit = 1\n"
             "match = 10.0.0.2:80\n[a2]\nlimit = 1\nmatch = 10.0.0.3:80\n"
             "match = 10.0.0.4:80\n", &config);
    assert_int_equal(config.rule_count, 4);
    static const int compartments[] = { 0, 1, 2, 2 }, lines[] = { 3, 6, 9, 10 };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(config.rules[i].compartment, compartments[i]);
        assert_int_equal(config.rules[i].line, lines[i]);
    }
    bh_config_free(&config);
}

/* ---- a scratch directory for the whole run ---- */

static char scratch[] = "/tmp/bh-unit-config.XXXXXX";
static char previous_dir[PATH_MAX];

static int enter_scratch(void **state)
{
    (void)state;
    if (!getcwd(previous_dir, sizeof previous_dir) || !mkdtemp(scratch))
        return -1;
    return chdir(scratch);
}

static int leave_scratch(void **state)
{
    (void)state;
    unlink("rules.ini");
    if (chdir(previous_dir) != 0)
        return -1;
    return rmdir(scratch);
}

#define COUNT(array) (sizeof array / sizeof array[0])

int main(void)
{
    static struct CMUnitTest tests[COUNT(error_cases) + COUNT(rule_cases)
                                   + COUNT(deadline_cases) + 10];
    size_t n = 0;

    /* One named test per table row. */
    for (size_t i = 0; i < COUNT(error_cases); i++)
        tests[n++] = (struct CMUnitTest) {
            .name = error_cases[i].name, .test_func = run_error_case,
            .initial_state = (void *)&error_cases[i],
        };
    for (size_t i = 0; i < COUNT(rule_cases); i++)
        tests[n++] = (struct CMUnitTest) {
            .name = rule_cases[i].match, .test_func = run_rule_case,
            .initial_state = (void *)&rule_cases[i],
        };
    for (size_t i = 0; i < COUNT(deadline_cases); i++)
        tests[n++] = (struct CMUnitTest) {
            .name = deadline_cases[i].name, .test_func = run_deadline_case,
            .initial_state = (void *)&deadline_cases[i],
        };
    const struct CMUnitTest fixed[] = {
        cmocka_unit_test(line_too_long),
        cmocka_unit_test(nul_byte),
        cmocka_unit_test(missing_file),
        cmocka_unit_test(directory),
        cmocka_unit_test(too_big),
        cmocka_unit_test(too_many_compartments),
        cmocka_unit_test(defaults),
        cmocka_unit_test(every_key),
        cmocka_unit_test(log_file_stderr),
        cmocka_unit_test(rules_in_file_order),
    };
    for (size_t i = 0; i < COUNT(fixed); i++)
        tests[n++] = fixed[i];
    return _cmocka_run_group_tests("config", tests, n, enter_scratch, leave_scratch);
}
