/* The rules parser, table by table: each row is a small rules file written
 * to a scratch directory and loaded as "rules.ini", with either the exact
 * error lines expected, in order, or the values it must parse to. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
/* [global] with KEYS from line 3, then a valid [cap]. */
#define FLEET(keys) "[global]\nnamespace = t\n" keys "[cap]\nlimit = 0\nmatch = 10.0.0.1:80\n"
/* Lines 1-5: [global] and [db] with limit = 10 and a match; rows add from
 * line 6 on. */
#define POLICY "[global]\nnamespace = t\n[db]\nlimit = 10\nmatch = 10.0.0.1:80\n"
/* A fleet-wide [db] (fleet_limit line 4, limit the host's ceiling). */
#define FLEET_DB(fleet_limit) "[global]\nfleet = redis://r:6379\n[db]\n" fleet_limit "match = 10.0.0.1:80\n"
/* The fleet URL's two forms, as errors name them. */
#define FORMS "redis://HOST:PORT[/DB] or redis-sentinel://HOST[:PORT],.../MASTER[/DB]"
#define LONG63 "h12345678901234567890123456789012345678901234567890123456789012"
#define LONG64 LONG63 "3"

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
    { "turnaround: not yes or no", HEAD "match = 10.0.0.1:80\nturnaround = 1\n",
      { "rules.ini:6: turnaround: \"1\" is not one of yes, no" } },
    { "turnaround: in [global]", "[global]\nturnaround = yes\n[a]\nlimit = 1\n"
      "match = 10.0.0.1:80\n",
      { "rules.ini:2: unknown key \"turnaround\" in [global]" } },
    { "max_waiters: not a number", HEAD "match = 10.0.0.1:80\nmax_waiters = many\n",
      { "rules.ini:6: max_waiters: \"many\" is not a whole number" } },
    { "max_waiters: too many", HEAD "match = 10.0.0.1:80\nmax_waiters = 1000001\n",
      { "rules.ini:6: max_waiters: 1000001 is out of range (0 to 1000000)" } },
    { "hold_wait_ms: negative", HEAD "match = 10.0.0.1:80\nhold_wait_ms = -5\n",
      { "rules.ini:6: hold_wait_ms: \"-5\" is not a whole number" } },
    { "hold_wait_ms: [global] past an hour", "[global]\nhold_wait_ms = 3600001\n[cap]\nlimit = 0\nmatch = 10.0.0.1:80\n",
      { "rules.ini:2: hold_wait_ms: 3600001 is out of range (0 to 3600000)" } },
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
    { "on_failure: neither closed nor open", "[global]\non_failure = pass\n",
      { "rules.ini:2: on_failure: \"pass\" is not one of closed, open" } },
    { "on_failure: in a compartment", HEAD "match = 10.0.0.1:80\non_failure = open\n",
      { "rules.ini:6: unknown key \"on_failure\" in [cap]" } },
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
      { "rules.ini:6: \"[b\": a section header needs its closing ]" } },
    { "a line that is not key = value", HEAD "match = 10.0.0.1:80\nthis is not a setting\n",
      { "rules.ini:6: \"this is not a setting\" is not a key = value line, a [section] header or a comment" } },
    { "a long stray line is cut", HEAD "match = 10.0.0.1:80\n  0123456789012345678901234567890123456789abc\n",
      { "rules.ini:6: \"0123456789012345678901234567890123456789...\" is not a key = value line, a [section] header or a comment" } },
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
    /* The fleet: [global]'s keys from line 3. */
    { "fleet: http://", FLEET("fleet = http://10.0.0.5:6379\n"),
      { "rules.ini:3: fleet: \"http://10.0.0.5:6379\" is not redis:// or redis-sentinel:// (use " FORMS ")" } },
    { "fleet: no scheme", FLEET("fleet = 10.0.0.5:6379\n"),
      { "rules.ini:3: fleet: \"10.0.0.5:6379\" is not a " FORMS " URL" } },
    { "fleet: rediss://", FLEET("fleet = rediss://r.example:6380\n"),
      { "rules.ini:3: fleet: \"rediss://r.example:6380\" uses TLS (rediss://), which bulkhead agent does not speak: use " FORMS } },
    { "fleet: REDIS:// in capitals", FLEET("fleet = REDIS://r:6379\n"),
      { "rules.ini:3: fleet: \"REDIS://r:6379\" is not redis:// or redis-sentinel:// (use " FORMS ")" } },
    { "fleet: no port", FLEET("fleet = redis://10.0.0.5\n"),
      { "rules.ini:3: fleet: \"redis://10.0.0.5\" has no port" } },
    { "fleet: an empty port", FLEET("fleet = redis://10.0.0.5:\n"),
      { "rules.ini:3: fleet: \"redis://10.0.0.5:\" has no port" } },
    { "fleet: a database but no port", FLEET("fleet = redis://10.0.0.5/2\n"),
      { "rules.ini:3: fleet: \"redis://10.0.0.5/2\" has no port" } },
    { "fleet: [v6] without a port", FLEET("fleet = redis://[::1]\n"),
      { "rules.ini:3: fleet: \"redis://[::1]\" has no port" } },
    { "fleet: no host", FLEET("fleet = redis://:6379\n"),
      { "rules.ini:3: fleet: \"redis://:6379\" has no host" } },
    { "fleet: nothing after the scheme", FLEET("fleet = redis://\n"),
      { "rules.ini:3: fleet: \"redis://\" has no host" } },
    { "fleet: port 0", FLEET("fleet = redis://r:0\n"),
      { "rules.ini:3: fleet: \"redis://r:0\" has a bad port (1 to 65535)" } },
    { "fleet: port 65536", FLEET("fleet = redis://r:65536\n"),
      { "rules.ini:3: fleet: \"redis://r:65536\" has a bad port (1 to 65535)" } },
    { "fleet: a port past any integer", FLEET("fleet = redis://r:99999999999999999999999\n"),
      { "rules.ini:3: fleet: \"redis://r:99999999999999999999999\" has a bad port (1 to 65535)" } },
    { "fleet: a negative port", FLEET("fleet = redis://r:-1\n"),
      { "rules.ini:3: fleet: \"redis://r:-1\" has a bad port (1 to 65535)" } },
    { "fleet: a port name", FLEET("fleet = redis://r:redis\n"),
      { "rules.ini:3: fleet: \"redis://r:redis\" has a bad port (1 to 65535)" } },
    { "fleet: junk after the port", FLEET("fleet = redis://r:6379x\n"),
      { "rules.ini:3: fleet: \"redis://r:6379x\" has something after its port other than /DB" } },
    { "fleet: a query after the port", FLEET("fleet = redis://r:6379?timeout=1\n"),
      { "rules.ini:3: fleet: \"redis://r:6379?timeout=1\" has something after its port other than /DB" } },
    { "fleet: database 16", FLEET("fleet = redis://r:6379/16\n"),
      { "rules.ini:3: fleet: \"redis://r:6379/16\" has a bad database number (0 to 15)" } },
    { "fleet: a slash and no database", FLEET("fleet = redis://r:6379/\n"),
      { "rules.ini:3: fleet: \"redis://r:6379/\" has a bad database number (0 to 15)" } },
    { "fleet: a database name", FLEET("fleet = redis://r:6379/cache\n"),
      { "rules.ini:3: fleet: \"redis://r:6379/cache\" has a bad database number (0 to 15)" } },
    { "fleet: junk after the database", FLEET("fleet = redis://r:6379/0x\n"),
      { "rules.ini:3: fleet: \"redis://r:6379/0x\" has something after its database number" } },
    { "fleet: a path after the database", FLEET("fleet = redis://r:6379/0/1\n"),
      { "rules.ini:3: fleet: \"redis://r:6379/0/1\" has something after its database number" } },
    { "fleet: IPv6 without brackets", FLEET("fleet = redis://::1:6379\n"),
      { "rules.ini:3: fleet: \"redis://::1:6379\" has an IPv6 address without [brackets]" } },
    { "fleet: [v6 without ]", FLEET("fleet = redis://[::1:6379\n"),
      { "rules.ini:3: fleet: \"redis://[::1:6379\" has no ] after its IPv6 address" } },
    { "fleet: not v6 in brackets", FLEET("fleet = redis://[redis]:6379\n"),
      { "rules.ini:3: fleet: \"redis://[redis]:6379\" has a bad IPv6 address in [brackets]" } },
    { "fleet: empty brackets", FLEET("fleet = redis://[]:6379\n"),
      { "rules.ini:3: fleet: \"redis://[]:6379\" has a bad IPv6 address in [brackets]" } },
    { "fleet: a bad IPv4 address", FLEET("fleet = redis://10.0.0.256:6379\n"),
      { "rules.ini:3: fleet: \"redis://10.0.0.256:6379\" has a bad IPv4 address" } },
    { "fleet: a space in the host", FLEET("fleet = redis://red is:6379\n"),
      { "rules.ini:3: fleet: \"redis://red is:6379\" has a bad host (a name, an IPv4 address or [IPv6])" } },
    { "fleet: a password in the URL", FLEET("fleet = redis://:secret@r:6379\n"),
      { "rules.ini:3: fleet: \"redis://:secret@r:6379\" holds a user or password: put the password in fleet_password_file" } },
    /* redis-sentinel://HOST[:PORT],.../MASTER[/DB] */
    { "sentinel: no host", FLEET("fleet = redis-sentinel:///m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel:///m\" has no sentinel host (redis-sentinel://HOST[:PORT],.../MASTER)" } },
    { "sentinel: nothing after the scheme", FLEET("fleet = redis-sentinel://\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://\" has no sentinel host (redis-sentinel://HOST[:PORT],.../MASTER)" } },
    { "sentinel: an empty host between two", FLEET("fleet = redis-sentinel://a,,b/m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a,,b/m\" has an empty host in its sentinel list" } },
    { "sentinel: a trailing comma", FLEET("fleet = redis-sentinel://a:26379,/m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a:26379,/m\" has an empty host in its sentinel list" } },
    { "sentinel: no master name", FLEET("fleet = redis-sentinel://a:26379,b:26379\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a:26379,b:26379\" has no master name (redis-sentinel://HOST[:PORT],.../MASTER)" } },
    { "sentinel: a slash and no master name", FLEET("fleet = redis-sentinel://a/\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a/\" has no master name (redis-sentinel://HOST[:PORT],.../MASTER)" } },
    { "sentinel: an empty master name before a database", FLEET("fleet = redis-sentinel://a//2\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a//2\" has no master name (redis-sentinel://HOST[:PORT],.../MASTER)" } },
    { "sentinel: nine sentinels", FLEET("fleet = redis-sentinel://a,b,c,d,e,f,g,h,i/m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a,b,c,d,e,f,g,h,i/m\" has more than 8 sentinels" } },
    { "sentinel: a bad port", FLEET("fleet = redis-sentinel://a:65536/m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a:65536/m\" has a bad port (1 to 65535)" } },
    { "sentinel: junk after a port", FLEET("fleet = redis-sentinel://a:1x,b:2/m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a:1x,b:2/m\" has something after a sentinel's port other than , or /MASTER" } },
    { "sentinel: a bad second host", FLEET("fleet = redis-sentinel://a,b c/m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a,b c/m\" has a bad host (a name, an IPv4 address or [IPv6])" } },
    { "sentinel: [v6 without ] before the next host", FLEET("fleet = redis-sentinel://[::1,b]/m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://[::1,b]/m\" has no ] after its IPv6 address" } },
    { "sentinel: a master name with a space", FLEET("fleet = redis-sentinel://a/my master\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a/my master\" has a bad master name (use A-Z a-z 0-9 _ . -)" } },
    { "sentinel: a 64-character master name", FLEET("fleet = redis-sentinel://a/" LONG64 "\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a/" LONG64 "\" has a master name longer than 63 characters" } },
    { "sentinel: database 16", FLEET("fleet = redis-sentinel://a/m/16\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://a/m/16\" has a bad database number (0 to 15)" } },
    { "sentinel: a password in the URL", FLEET("fleet = redis-sentinel://:pw@a/m\n"),
      { "rules.ini:3: fleet: \"redis-sentinel://:pw@a/m\" holds a user or password: put the passwords in fleet_password_file and fleet_sentinel_password_file" } },
    { "fleet_sentinel_password_file with redis://", FLEET("fleet = redis://r:6379\nfleet_sentinel_password_file = s.pass\n"),
      { "rules.ini:4: fleet_sentinel_password_file: needs fleet = redis-sentinel://HOST[:PORT],.../MASTER in [global]" } },
    { "fleet_sentinel_password_file without fleet", FLEET("fleet_sentinel_password_file = s.pass\n"),
      { "rules.ini:3: fleet_sentinel_password_file: needs fleet = redis-sentinel://HOST[:PORT],.../MASTER in [global]" } },
    { "fleet_sentinel_password_file under a bad fleet: one error", FLEET("fleet_sentinel_password_file = s.pass\nfleet = redis-sentinel://a\n"),
      { "rules.ini:4: fleet: \"redis-sentinel://a\" has no master name (redis-sentinel://HOST[:PORT],.../MASTER)" } },
    { "fleet_sentinel_password_file: empty", FLEET("fleet = redis-sentinel://a/m\nfleet_sentinel_password_file =\n"),
      { "rules.ini:4: fleet_sentinel_password_file: missing value" } },
    { "fleet: empty", FLEET("fleet =\n"),
      { "rules.ini:3: fleet: missing value" } },
    { "fleet: set twice", FLEET("fleet = redis://r:6379\nfleet = redis://s:6379\n"),
      { "rules.ini:4: fleet: already set at line 3" } },
    { "fleet: in a compartment", HEAD "match = 10.0.0.1:80\nfleet = redis://r:6379\n",
      { "rules.ini:6: unknown key \"fleet\" in [cap]" } },
    { "fleet_password_file: empty", FLEET("fleet = redis://r:6379\nfleet_password_file =\n"),
      { "rules.ini:4: fleet_password_file: missing value" } },
    { "fleet_host: a space", FLEET("fleet_host = web 01\n"),
      { "rules.ini:3: fleet_host: \"web 01\" is not a valid host name (use 1 to 63 of A-Z a-z 0-9 _ . -)" } },
    { "fleet_host: a slash", FLEET("fleet_host = eu/web01\n"),
      { "rules.ini:3: fleet_host: \"eu/web01\" is not a valid host name (use 1 to 63 of A-Z a-z 0-9 _ . -)" } },
    { "fleet_host: 64 characters", FLEET("fleet_host = " LONG64 "\n"),
      { "rules.ini:3: fleet_host: \"" LONG64 "\" is not a valid host name (use 1 to 63 of A-Z a-z 0-9 _ . -)" } },
    { "fleet_host: empty", FLEET("fleet_host =\n"),
      { "rules.ini:3: fleet_host: missing value" } },
    { "fleet_refresh_ms: 49", FLEET("fleet_refresh_ms = 49\n"),
      { "rules.ini:3: fleet_refresh_ms: 49 is out of range (50 to 600000)" } },
    { "fleet_refresh_ms: 600001", FLEET("fleet_refresh_ms = 600001\nfleet_lease_ms = 1200002\n"),
      { "rules.ini:3: fleet_refresh_ms: 600001 is out of range (50 to 600000)" } },
    { "fleet_refresh_ms: a unit", FLEET("fleet_refresh_ms = 1s\n"),
      { "rules.ini:3: fleet_refresh_ms: \"1s\" is not a whole number" } },
    { "fleet_lease_ms: 99", FLEET("fleet_refresh_ms = 50\nfleet_lease_ms = 99\n"),
      { "rules.ini:4: fleet_lease_ms: 99 is out of range (100 to 86400000)" } },
    { "fleet_lease_ms: past a day", FLEET("fleet_lease_ms = 86400001\n"),
      { "rules.ini:3: fleet_lease_ms: 86400001 is out of range (100 to 86400000)" } },
    { "fleet_lease_ms below twice fleet_refresh_ms", FLEET("fleet_refresh_ms = 600\nfleet_lease_ms = 1000\n"),
      { "rules.ini:4: fleet_lease_ms: 1000 is less than twice fleet_refresh_ms (600 at line 3): a host would lose its share between two refreshes" } },
    { "fleet_lease_ms first, below twice fleet_refresh_ms after it", FLEET("fleet_lease_ms = 1000\nfleet_refresh_ms = 501\n"),
      { "rules.ini:3: fleet_lease_ms: 1000 is less than twice fleet_refresh_ms (501 at line 4): a host would lose its share between two refreshes" } },
    { "fleet_lease_ms below twice the default refresh", FLEET("fleet_lease_ms = 1999\n"),
      { "rules.ini:3: fleet_lease_ms: 1999 is less than twice fleet_refresh_ms (1000, the default): a host would lose its share between two refreshes" } },
    { "fleet_refresh_ms above half the default lease", FLEET("fleet_refresh_ms = 5001\n"),
      { "rules.ini:3: fleet_refresh_ms: 5001 is more than half of fleet_lease_ms (10000, the default): a host would lose its share between two refreshes" } },
    { "a bad fleet_lease_ms: no check against refresh", FLEET("fleet_refresh_ms = 6000\nfleet_lease_ms = 10s\n"),
      { "rules.ini:4: fleet_lease_ms: \"10s\" is not a whole number" } },
    { "a bad fleet_refresh_ms: no check against lease", FLEET("fleet_refresh_ms = 700000\nfleet_lease_ms = 1000\n"),
      { "rules.ini:3: fleet_refresh_ms: 700000 is out of range (50 to 600000)" } },
    { "fleet_fallback: a word", FLEET("fleet_fallback = half\n"),
      { "rules.ini:3: fleet_fallback: \"half\" is neither split nor a whole number from 0 to 32767" } },
    { "fleet_fallback: past a semaphore", FLEET("fleet_fallback = 32768\n"),
      { "rules.ini:3: fleet_fallback: \"32768\" is neither split nor a whole number from 0 to 32767" } },
    { "fleet_fallback: negative", FLEET("fleet_fallback = -1\n"),
      { "rules.ini:3: fleet_fallback: \"-1\" is neither split nor a whole number from 0 to 32767" } },
    { "fleet_fallback_ms: past a day", FLEET("fleet_fallback_ms = 86400001\n"),
      { "rules.ini:3: fleet_fallback_ms: 86400001 is out of range (0 to 86400000)" } },
    { "fleet_fallback_ms: a word", FLEET("fleet_fallback_ms = long\n"),
      { "rules.ini:3: fleet_fallback_ms: \"long\" is not a whole number" } },
    { "fleet_limit: 0", FLEET("fleet = redis://r:6379\n") "fleet_limit = 0\n",
      { "rules.ini:7: fleet_limit: 0 is out of range (1 to 1000000)" } },
    { "fleet_limit: 1000001", FLEET("fleet = redis://r:6379\n") "fleet_limit = 1000001\n",
      { "rules.ini:7: fleet_limit: 1000001 is out of range (1 to 1000000)" } },
    { "fleet_limit: a word, without limit", "[global]\nfleet = redis://r:6379\n[db]\nmatch = 10.0.0.1:80\nfleet_limit = many\n",
      { "rules.ini:5: fleet_limit: \"many\" is not a whole number" } },
    { "fleet_limit: in [global]", FLEET("fleet_limit = 10\n"),
      { "rules.ini:3: unknown key \"fleet_limit\" in [global]" } },
    { "fleet_limit without fleet", HEAD "match = 10.0.0.1:80\nfleet_limit = 10\n",
      { "rules.ini:6: fleet_limit: needs fleet = redis://HOST:PORT in [global]" } },
    { "fleet_limit without fleet or limit: one error", "[db]\nmatch = 10.0.0.1:80\nfleet_limit = 10\n",
      { "rules.ini:3: fleet_limit: needs fleet = redis://HOST:PORT in [global]" } },
    { "a bad fleet_limit without fleet: one error", HEAD "match = 10.0.0.1:80\nfleet_limit = 0\n",
      { "rules.ini:6: fleet_limit: 0 is out of range (1 to 1000000)" } },
    { "fleet_limit under a bad fleet: the URL's error alone", FLEET("fleet = redis://r\n") "fleet_limit = 10\n",
      { "rules.ini:3: fleet: \"redis://r\" has no port" } },
    /* Policy inside a compartment: POLICY's [db] has limit 10. */
    { "per_process: 0", POLICY "per_process = 0\n",
      { "rules.ini:6: per_process: 0 is out of range (1 to 32767)" } },
    { "per_process: 32768", POLICY "per_process = 32768\n",
      { "rules.ini:6: per_process: 32768 is out of range (1 to 32767)" } },
    { "per_process: a word", POLICY "per_process = two\n",
      { "rules.ini:6: per_process: \"two\" is not a whole number" } },
    { "per_process: empty", POLICY "per_process =\n",
      { "rules.ini:6: per_process: missing value" } },
    { "per_process: set twice", POLICY "per_process = 2\nper_process = 3\n",
      { "rules.ini:7: per_process: already set at line 6" } },
    { "per_process: in [global]", "[global]\nper_process = 2\n",
      { "rules.ini:2: unknown key \"per_process\" in [global]" } },
    { "reserve: a count that is a word", POLICY "reserve = two for program=a\n",
      { "rules.ini:6: reserve: \"two for program=a\" has a bad count \"two\" (a whole number from 1 to 32767)" } },
    { "reserve: a count of 0", POLICY "reserve = 0 for program=a\n",
      { "rules.ini:6: reserve: \"0 for program=a\" has a bad count \"0\" (a whole number from 1 to 32767)" } },
    { "reserve: a count past a semaphore", POLICY "reserve = 32768 for program=a\n",
      { "rules.ini:6: reserve: \"32768 for program=a\" has a bad count \"32768\" (a whole number from 1 to 32767)" } },
    { "reserve: a count past any integer", POLICY "reserve = 99999999999999999999 for program=a\n",
      { "rules.ini:6: reserve: \"99999999999999999999 for program=a\" has a bad count \"99999999999999999999\" (a whole number from 1 to 32767)" } },
    { "reserve: no count", POLICY "reserve = for program=a\n",
      { "rules.ini:6: reserve: \"for program=a\" has a bad count \"for\" (a whole number from 1 to 32767)" } },
    { "reserve: no for", POLICY "reserve = 2 program=a\n",
      { "rules.ini:6: reserve: \"2 program=a\" has no \"for\" (use reserve = N for WHO, e.g. 2 for program=billing-*)" } },
    { "reserve: a count alone", POLICY "reserve = 2\n",
      { "rules.ini:6: reserve: \"2\" has no \"for\" (use reserve = N for WHO, e.g. 2 for program=billing-*)" } },
    { "reserve: fore is not for", POLICY "reserve = 2 fore program=a\n",
      { "rules.ini:6: reserve: \"2 fore program=a\" has no \"for\" (use reserve = N for WHO, e.g. 2 for program=billing-*)" } },
    { "reserve: for=", POLICY "reserve = 2 for=program=a\n",
      { "rules.ini:6: reserve: \"2 for=program=a\" has no \"for\" (use reserve = N for WHO, e.g. 2 for program=billing-*)" } },
    { "reserve: nothing after for", POLICY "reserve = 2 for\n",
      { "rules.ini:6: reserve: \"2 for\" has no WHO after \"for\" (use program=GLOB, user=NAME or env=VAR=VALUE)" } },
    { "reserve: an unknown kind", POLICY "reserve = 2 for group=ops\n",
      { "rules.ini:6: reserve: \"2 for group=ops\" has an unknown kind \"group\"; use program=, user= or env=" } },
    { "reserve: a bare name", POLICY "reserve = 2 for billing\n",
      { "rules.ini:6: reserve: \"2 for billing\" has an unknown kind \"billing\"; use program=, user= or env=" } },
    { "reserve: an empty glob", POLICY "reserve = 2 for program=\n",
      { "rules.ini:6: reserve: \"2 for program=\" has a bad glob (empty)" } },
    { "reserve: a glob with a directory", POLICY "reserve = 2 for program=/usr/bin/billing\n",
      { "rules.ini:6: reserve: \"2 for program=/usr/bin/billing\" has a bad glob (a '/': program= matches the program's short name, without its directory)" } },
    { "reserve: an unclosed [", POLICY "reserve = 2 for program=billing-[ab\n",
      { "rules.ini:6: reserve: \"2 for program=billing-[ab\" has a bad glob (a '[' without its ']')" } },
    { "reserve: no such user", POLICY "reserve = 2 for user=bh-no-such-user\n",
      { "rules.ini:6: reserve: \"2 for user=bh-no-such-user\" names no such user" } },
    { "reserve: no user name", POLICY "reserve = 2 for user=\n",
      { "rules.ini:6: reserve: \"2 for user=\" has no user name (use user=NAME or user=UID)" } },
    { "reserve: env= without a value", POLICY "reserve = 2 for env=CLASS\n",
      { "rules.ini:6: reserve: \"2 for env=CLASS\" has no '=' between variable and value (use env=VAR=VALUE)" } },
    { "reserve: env= with a bad name", POLICY "reserve = 2 for env=2X=y\n",
      { "rules.ini:6: reserve: \"2 for env=2X=y\" has a bad variable name (use A-Z a-z 0-9 _, not starting with a digit)" } },
    { "reserve: a WHO of 64 characters", POLICY "reserve = 2 for program=" LONG63 "4\n",
      { "rules.ini:6: reserve: \"2 for program=" LONG63 "4\" is longer than 63 characters" } },
    { "reserve: empty", POLICY "reserve =\n",
      { "rules.ini:6: reserve: missing value" } },
    { "reserve: the same WHO twice", POLICY "reserve = 2 for program=billing-*\nreserve = 1 for user=root\nreserve = 3 for program=billing-*\n",
      { "rules.ini:8: reserve: program=billing-* already has a reserve at line 6" } },
    { "reserve: a fifth", POLICY "reserve = 1 for program=a\nreserve = 1 for program=b\nreserve = 1 for program=c\nreserve = 1 for program=d\nreserve = 1 for program=e\n",
      { "rules.ini:10: reserve: too many in [db] (at most 4)" } },
    { "reserve: adding up to more than limit", POLICY "reserve = 6 for program=a\nreserve = 6 for user=root\n",
      { "rules.ini:3: [db]: reserves add up to 12, more than limit = 10" } },
    { "reserve: one more than limit", POLICY "reserve = 11 for program=a\n",
      { "rules.ini:3: [db]: reserves add up to 11, more than limit = 10" } },
    { "reserve: limit after the reserves", "[db]\nreserve = 3 for program=a\nmatch = 10.0.0.1:80\nlimit = 2\n",
      { "rules.ini:1: [db]: reserves add up to 3, more than limit = 2" } },
    { "reserve: a bad limit is the only error", "[db]\nlimit = ten\nreserve = 30 for program=a\nmatch = 10.0.0.1:80\n",
      { "rules.ini:2: limit: \"ten\" is not a whole number" } },
    { "reserve: no limit is the only error", "[db]\nreserve = 30 for program=a\nmatch = 10.0.0.1:80\n",
      { "rules.ini:1: [db]: limit is required" } },
    { "reserve: a bad reserve is left out of the sum", POLICY "reserve = 9 for program=a\nreserve = 5 for group=b\n",
      { "rules.ini:7: reserve: \"5 for group=b\" has an unknown kind \"group\"; use program=, user= or env=" } },
    { "reserve: with fleet_limit, one line", FLEET_DB("fleet_limit = 10\n") "reserve = 2 for program=a\nreserve = 1 for user=root\n",
      { "rules.ini:6: reserve: cannot be used with fleet_limit (line 4): this host's share of the fleet moves under the reserves" } },
    { "reserve: with fleet_limit, past its ceiling too: one line", FLEET_DB("fleet_limit = 10\nlimit = 2\n") "reserve = 5 for program=a\n",
      { "rules.ini:7: reserve: cannot be used with fleet_limit (line 4): this host's share of the fleet moves under the reserves" } },
    { "reserve: a bad one with fleet_limit: its own error only", FLEET_DB("fleet_limit = 10\n") "reserve = 0 for program=a\n",
      { "rules.ini:6: reserve: \"0 for program=a\" has a bad count \"0\" (a whole number from 1 to 32767)" } },
    { "reserve: in [global]", "[global]\nreserve = 2 for program=a\n",
      { "rules.ini:2: unknown key \"reserve\" in [global]" } },
    { "bypass: an unknown kind", POLICY "bypass = group=ops\n",
      { "rules.ini:6: bypass: \"group=ops\" has an unknown kind \"group\"; use program=, user= or env=" } },
    { "bypass: a bad glob", POLICY "bypass = program=pg_[dump\n",
      { "rules.ini:6: bypass: \"program=pg_[dump\" has a bad glob (a '[' without its ']')" } },
    { "bypass: no such user", POLICY "bypass = user=bh-no-such-user\n",
      { "rules.ini:6: bypass: \"user=bh-no-such-user\" names no such user" } },
    { "bypass: env= without a value", POLICY "bypass = env=OPS\n",
      { "rules.ini:6: bypass: \"env=OPS\" has no '=' between variable and value (use env=VAR=VALUE)" } },
    { "bypass: empty", POLICY "bypass =\n",
      { "rules.ini:6: bypass: missing value" } },
    { "bypass: the same WHO twice", POLICY "bypass = program=pg_dump\nbypass = user=root\nbypass = program=pg_dump\n",
      { "rules.ini:8: bypass: program=pg_dump already given at line 6" } },
    { "bypass: a ninth", POLICY "bypass = program=a\nbypass = program=b\nbypass = program=c\nbypass = program=d\n"
      "bypass = program=e\nbypass = program=f\nbypass = program=g\nbypass = program=h\nbypass = program=i\n",
      { "rules.ini:14: bypass: too many in [db] (at most 8)" } },
    { "match: weight 0", POLICY "match = 10.0.0.2:80 weight=0\n",
      { "rules.ini:6: match: \"10.0.0.2:80 weight=0\" has a bad weight (a whole number from 1 to 32767)" } },
    { "match: weight a word", POLICY "match = 10.0.0.2:80 weight=heavy\n",
      { "rules.ini:6: match: \"10.0.0.2:80 weight=heavy\" has a bad weight (a whole number from 1 to 32767)" } },
    { "match: weight empty", POLICY "match = 10.0.0.2:80 weight=\n",
      { "rules.ini:6: match: \"10.0.0.2:80 weight=\" has a bad weight (a whole number from 1 to 32767)" } },
    { "match: weight past a semaphore", POLICY "match = 10.0.0.2:80 weight=32768\n",
      { "rules.ini:6: match: \"10.0.0.2:80 weight=32768\" has a bad weight (a whole number from 1 to 32767)" } },
    { "match: weight and more", POLICY "match = 10.0.0.2:80 weight=2 x\n",
      { "rules.ini:6: match: \"10.0.0.2:80 weight=2 x\" has a bad weight (a whole number from 1 to 32767)" } },
    { "match: weight with spaces", POLICY "match = 10.0.0.2:80 weight = 2\n",
      { "rules.ini:6: match: \"10.0.0.2:80 weight = 2\" has something after its destination other than weight=N" } },
    { "match: something else after the destination", POLICY "match = 10.0.0.2:80 heavy\n",
      { "rules.ini:6: match: \"10.0.0.2:80 heavy\" has something after its destination other than weight=N" } },
    { "match: a bad destination with a weight: the destination's error", POLICY "match = nope:99999 weight=2\n",
      { "rules.ini:6: match: \"nope:99999 weight=2\" has a bad port" } },
    { "match: weight above limit", "[db]\nlimit = 3\nmatch = 10.0.0.1:80\nmatch = 10.0.0.2:80 weight=4\n",
      { "rules.ini:4: match: weight=4 is more than limit = 3: such a connection could never be made" } },
    { "match: weights above a limit given after them, each", "[db]\nmatch = 10.0.0.1:80 weight=5\nmatch = 10.0.0.2:80 weight=3\nmatch = 10.0.0.3:80 weight=4\nlimit = 3\n",
      { "rules.ini:2: match: weight=5 is more than limit = 3: such a connection could never be made",
        "rules.ini:4: match: weight=4 is more than limit = 3: such a connection could never be made" } },
    { "match: weight above a bad limit: the limit's error", "[db]\nlimit = -1\nmatch = 10.0.0.1:80 weight=4\n",
      { "rules.ini:2: limit: \"-1\" is not a whole number" } },
    { "match: weight above the fleet ceiling", FLEET_DB("fleet_limit = 3\n") "match = 10.0.0.2:80 weight=4\n",
      { "rules.ini:6: match: weight=4 is more than limit = 3: such a connection could never be made" } },
    { "match: weight above this host's ceiling under fleet_limit", FLEET_DB("fleet_limit = 50\nlimit = 2\n") "match = 10.0.0.2:80 weight=3\n",
      { "rules.ini:7: match: weight=3 is more than limit = 2: such a connection could never be made" } },
    { "match: weight in a compartment against its own limit only", "[a]\nlimit = 1\nmatch = 10.0.0.1:80\n[b]\nlimit = 5\nmatch = 10.0.0.2:80 weight=5\nmatch = 10.0.0.3:80 weight=6\n",
      { "rules.ini:7: match: weight=6 is more than limit = 5: such a connection could never be made" } },
    { "every policy mistake at once, in file order then at the end", POLICY "per_process = 0\nreserve = 2 for group=x\nbypass = prog=y\nmatch = 10.0.0.2:80 weight=11\nreserve = 11 for program=z\n",
      { "rules.ini:6: per_process: 0 is out of range (1 to 32767)",
        "rules.ini:7: reserve: \"2 for group=x\" has an unknown kind \"group\"; use program=, user= or env=",
        "rules.ini:8: bypass: \"prog=y\" has an unknown kind \"prog\"; use program=, user= or env=",
        "rules.ini:3: [db]: reserves add up to 11, more than limit = 10",
        "rules.ini:9: match: weight=11 is more than limit = 10: such a connection could never be made" } },
    /* Known at the end of the file, so reported last; check sorts by line. */
    { "fleet_limit without fleet, in each compartment, after their errors", HEAD "match = 10.0.0.1:80\nfleet_limit = 10\n[b]\nfleet_limit = 20\nwait_ms = soon\nmatch = 10.0.0.2:80\n",
      { "rules.ini:9: wait_ms: \"soon\" is not a whole number",
        "rules.ini:6: fleet_limit: needs fleet = redis://HOST:PORT in [global]",
        "rules.ini:8: fleet_limit: needs fleet = redis://HOST:PORT in [global]" } },
    { "a duplicate compartment's fleet_limit is still checked", HEAD "match = 10.0.0.1:80\n[cap]\nfleet_limit = 5\nmatch = 10.0.0.2:80\n",
      { "rules.ini:6: duplicate compartment [cap] (first at line 3)",
        "rules.ini:7: fleet_limit: needs fleet = redis://HOST:PORT in [global]" } },
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

/* count compartments [c0], [c1]... of three lines each, on the heap (a
 * thousand of them are too much for a test's stack); free it. */
static char *numbered_compartments(int count, size_t *length)
{
    enum { SECTION_TEXT_MAX = 64 };  /* "[c1024]\nlimit = 1\nmatch = ..." */
    size_t size = (size_t)count * SECTION_TEXT_MAX;
    char *text = malloc(size);
    size_t used = 0;

    assert_non_null(text);
    for (int i = 0; i < count; i++)
        used += (size_t)snprintf(text + used, size - used,
                                 "[c%d]\nlimit = 1\nmatch = 10.%d.%d.1:80\n",
                                 i, i / 256, i % 256);
    assert_true(used < size);
    *length = used;
    return text;
}

static void too_many_compartments(void **state)
{
    (void)state;
    size_t length;
    char *text = numbered_compartments(BH_MAX_COMPARTMENTS + 1, &length);
    char want[128];

    /* The one past the most is on line BH_MAX_COMPARTMENTS * 3 + 1. */
    snprintf(want, sizeof want, "rules.ini:%d: [c%d]: too many compartments "
             "(at most %d)", BH_MAX_COMPARTMENTS * 3 + 1, BH_MAX_COMPARTMENTS,
             BH_MAX_COMPARTMENTS);
    expect_one_error(text, length, want);
    free(text);
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

/* As many as allowed: every one is kept, in file order. */
static void most_compartments(void **state)
{
    (void)state;
    size_t length;
    char *text = numbered_compartments(BH_MAX_COMPARTMENTS, &length);
    struct bh_config config;

    parse_ok(text, &config);
    assert_int_equal(config.compartment_count, BH_MAX_COMPARTMENTS);
    assert_int_equal(config.rule_count, BH_MAX_COMPARTMENTS);
    assert_string_equal(config.compartments[BH_MAX_COMPARTMENTS - 1].name, "c1023");
    assert_int_equal(config.rules[BH_MAX_COMPARTMENTS - 1].compartment,
                     BH_MAX_COMPARTMENTS - 1);
    bh_config_free(&config);
    free(text);
}

static void defaults(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[only]\nlimit = 5\nmatch = 10.0.0.1:80\n", &config);
    assert_string_equal(config.namespace_name, "default");
    assert_int_equal(config.log_level, BH_LOG_WARN);
    assert_null(config.log_file);
    assert_int_equal(config.on_failure_open, 0);
    assert_string_equal(config.path, "rules.ini");
    assert_int_equal(config.compartment_count, 1);
    const struct bh_compartment *c = &config.compartments[0];
    assert_string_equal(c->name, "only");
    assert_int_equal(c->limit, 5);
    assert_int_equal(c->wait_ms, 0);
    assert_int_equal(c->max_waiters, 64);
    assert_int_equal(c->hold_wait_ms, 0);
    assert_int_equal(c->refusal_errno, ECONNREFUSED);
    assert_int_equal(c->connect_timeout_ms, 0);
    assert_int_equal(c->io_timeout_ms, 0);
    assert_int_equal(c->breaker_failures, 0);
    assert_int_equal(c->breaker_open_ms, 5000);
    assert_int_equal(c->breaker_open_max_ms, 60000);
    assert_int_equal(c->per_process, 0);
    assert_int_equal(c->reserve_count, 0);
    assert_int_equal(c->bypass_count, 0);
    assert_int_equal(config.rules[0].weight, 1);
    assert_int_equal(c->line, 1);
    bh_config_free(&config);
}

/* [global]'s hold_wait_ms is for compartments without their own, wherever
 * in the file [global] is. */
static void hold_wait_inherited(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[own]\nlimit = 5\nhold_wait_ms = 0\nmatch = 10.0.0.1:80\n"
             "[other]\nlimit = 5\nmatch = 10.0.0.2:80\n"
             "[global]\nhold_wait_ms = 250\n", &config);
    assert_int_equal(config.compartments[0].hold_wait_ms, 0);
    assert_int_equal(config.compartments[1].hold_wait_ms, 250);
    bh_config_free(&config);
}

static void every_key(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("\xEF\xBB\xBF; a byte order mark, then a comment\n"
             "[global]\nnamespace = team-a.1\nlog = debug\nlog_file = /tmp/bh.log\n"
             "on_failure = open\n"
             "\n[slow]\nlimit = 0\nwait_ms = 3600000\nwait_nonblocking = yes\n"
             "max_waiters = 1000000\nerrno = EHOSTUNREACH\nmatch = 10.0.0.1:80\n"
             "nonblocking_wait_ms = 1000\nhold_wait_ms = 3600000\nturnaround = yes\n"
             "[fast]  ; a comment after a header\nlimit = 32767\nerrno = EAGAIN\n"
             "wait_nonblocking = no\nmatch = 10.0.0.2:80\n"
             "connect_timeout_ms = 1000\nio_timeout_ms = 500\nbreaker_failures = 3\n"
             "breaker_open_ms = 250\nbreaker_open_max_ms = 1000\n", &config);
    assert_string_equal(config.namespace_name, "team-a.1");
    assert_int_equal(config.log_level, BH_LOG_DEBUG);
    assert_string_equal(config.log_file, "/tmp/bh.log");
    assert_int_equal(config.on_failure_open, 1);
    assert_int_equal(config.compartment_count, 2);
    const struct bh_compartment *slow = &config.compartments[0];
    assert_string_equal(slow->name, "slow");
    assert_int_equal(slow->line, 8);
    assert_int_equal(slow->limit, 0);
    assert_int_equal(slow->wait_ms, 3600000);
    assert_int_equal(slow->max_waiters, 1000000);
    assert_int_equal(slow->refusal_errno, EHOSTUNREACH);
    assert_int_equal(slow->hold_wait_ms, 3600000);
    assert_int_equal(bh_compartment_turnaround(slow), 1);
    const struct bh_compartment *fast = &config.compartments[1];
    assert_string_equal(fast->name, "fast");
    assert_int_equal(fast->line, 18);
    assert_int_equal(bh_compartment_turnaround(fast), 0);
    assert_int_equal(fast->limit, 32767);
    assert_int_equal(fast->refusal_errno, EAGAIN);
    assert_int_equal(fast->connect_timeout_ms, 1000);
    assert_int_equal(fast->io_timeout_ms, 500);
    assert_int_equal(fast->breaker_failures, 3);
    assert_int_equal(fast->breaker_open_ms, 250);
    assert_int_equal(fast->breaker_open_max_ms, 1000);
    assert_int_equal(config.retired_count, 3);
    assert_string_equal(config.retired[0].key, "wait_nonblocking");
    assert_int_equal(config.retired[0].line, 11);
    assert_string_equal(config.retired[1].key, "nonblocking_wait_ms");
    assert_int_equal(config.retired[1].line, 15);
    assert_int_equal(config.retired[2].line, 21);
    bh_config_free(&config);
}

/* The retired keys never make a file invalid: any value, none, twice. */
static void retired_keys(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[a]\nlimit = 1\nmatch = 10.0.0.1:80\nwait_nonblocking = true\n"
             "wait_nonblocking =\nnonblocking_wait_ms = 99999\n"
             "nonblocking_wait_ms = soon\n", &config);
    assert_int_equal(config.retired_count, 4);
    assert_string_equal(config.retired[0].key, "wait_nonblocking");
    assert_int_equal(config.retired[0].line, 4);
    assert_int_equal(config.retired[1].line, 5);
    assert_string_equal(config.retired[3].key, "nonblocking_wait_ms");
    assert_int_equal(config.retired[3].line, 7);
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

/* The fleet's keys, from defaults to their bounds: [global] lines and the
 * body of compartment [a] (with its match) in, the values out. host NULL:
 * the machine's own name, as the parser makes it; "" when there is no
 * fleet. [b] after it never has fleet_limit. */
struct fleet_case {
    const char *name;
    const char *global;
    const char *a;
    const char *url;
    const char *host;
    int refresh_ms, lease_ms, fallback;
    int fleet_limit, limit;
};

static const struct fleet_case fleet_cases[] = {
    { "fleet: none given", "", "limit = 4\n", NULL, "", 1000, 10000, -1, 0, 4 },
    { "fleet = with no fleet_limit anywhere", "fleet = redis://10.0.0.5:6379\n", "limit = 4\n",
      "redis://10.0.0.5:6379", NULL, 1000, 10000, -1, 0, 4 },
    { "fleet: a name, database 15", "fleet = redis://redis-1.internal.example:6379/15\n", "fleet_limit = 7\n",
      "redis://redis-1.internal.example:6379/15", NULL, 1000, 10000, -1, 7, 7 },
    { "fleet: [v6], database 0", "fleet = redis://[2001:db8::5]:6380/0\n", "fleet_limit = 7\n",
      "redis://[2001:db8::5]:6380/0", NULL, 1000, 10000, -1, 7, 7 },
    { "fleet: port 1", "fleet = redis://localhost:1\n", "fleet_limit = 7\n",
      "redis://localhost:1", NULL, 1000, 10000, -1, 7, 7 },
    { "fleet: port 65535", "fleet = redis://127.0.0.1:65535\n", "fleet_limit = 7\n",
      "redis://127.0.0.1:65535", NULL, 1000, 10000, -1, 7, 7 },
    { "fleet_host given", "fleet = redis://r:6379\nfleet_host = web-01.eu_west\n", "fleet_limit = 7\n",
      "redis://r:6379", "web-01.eu_west", 1000, 10000, -1, 7, 7 },
    { "fleet_host of 63 characters", "fleet = redis://r:6379\nfleet_host = " LONG63 "\n", "fleet_limit = 7\n",
      "redis://r:6379", LONG63, 1000, 10000, -1, 7, 7 },
    { "fleet_password_file given", "fleet = redis://r:6379\nfleet_password_file = /etc/bulkhead/redis.pass\n",
      "fleet_limit = 7\n", "redis://r:6379", NULL, 1000, 10000, -1, 7, 7 },
    { "fleet_refresh_ms = 50, fleet_lease_ms = 100", "fleet = redis://r:6379\nfleet_refresh_ms = 50\nfleet_lease_ms = 100\n",
      "fleet_limit = 7\n", "redis://r:6379", NULL, 50, 100, -1, 7, 7 },
    { "fleet_refresh_ms = 5000: half the default lease", "fleet = redis://r:6379\nfleet_refresh_ms = 5000\n",
      "fleet_limit = 7\n", "redis://r:6379", NULL, 5000, 10000, -1, 7, 7 },
    { "fleet_lease_ms = 2000: twice the default refresh", "fleet = redis://r:6379\nfleet_lease_ms = 2000\n",
      "fleet_limit = 7\n", "redis://r:6379", NULL, 1000, 2000, -1, 7, 7 },
    { "fleet_refresh_ms = 600000 with a lease of a day", "fleet = redis://r:6379\nfleet_lease_ms = 86400000\nfleet_refresh_ms = 600000\n",
      "fleet_limit = 7\n", "redis://r:6379", NULL, 600000, 86400000, -1, 7, 7 },
    { "fleet_fallback = split", "fleet = redis://r:6379\nfleet_fallback = split\n", "fleet_limit = 7\n",
      "redis://r:6379", NULL, 1000, 10000, -1, 7, 7 },
    { "fleet_fallback = 0", "fleet = redis://r:6379\nfleet_fallback = 0\n", "fleet_limit = 7\n",
      "redis://r:6379", NULL, 1000, 10000, 0, 7, 7 },
    { "fleet_fallback = 32767", "fleet = redis://r:6379\nfleet_fallback = 32767\n", "fleet_limit = 7\n",
      "redis://r:6379", NULL, 1000, 10000, 32767, 7, 7 },
    { "fleet_limit = 1", "fleet = redis://r:6379\n", "fleet_limit = 1\n",
      "redis://r:6379", NULL, 1000, 10000, -1, 1, 1 },
    { "fleet_limit = 32767: the ceiling is all of it", "fleet = redis://r:6379\n", "fleet_limit = 32767\n",
      "redis://r:6379", NULL, 1000, 10000, -1, 32767, 32767 },
    { "fleet_limit = 32768: the ceiling is a semaphore's most", "fleet = redis://r:6379\n", "fleet_limit = 32768\n",
      "redis://r:6379", NULL, 1000, 10000, -1, 32768, 32767 },
    { "fleet_limit = 1000000", "fleet = redis://r:6379\n", "fleet_limit = 1000000\n",
      "redis://r:6379", NULL, 1000, 10000, -1, 1000000, 32767 },
    { "fleet_limit with a lower limit: the host's ceiling", "fleet = redis://r:6379\n", "fleet_limit = 50\nlimit = 20\n",
      "redis://r:6379", NULL, 1000, 10000, -1, 50, 20 },
    { "fleet_limit with limit = 0", "fleet = redis://r:6379\n", "limit = 0\nfleet_limit = 50\n",
      "redis://r:6379", NULL, 1000, 10000, -1, 50, 0 },
    { "every fleet key", "fleet = redis://[::1]:6379/3\nfleet_password_file = /run/pass\nfleet_host = db-client-7\n"
      "fleet_refresh_ms = 250\nfleet_lease_ms = 500\nfleet_fallback = 3\nfleet_fallback_ms = 0\n", "limit = 9\nfleet_limit = 30\n",
      "redis://[::1]:6379/3", "db-client-7", 250, 500, 3, 30, 9 },
};

/* What the parser gives as fleet_host by default, worked out here. */
static void own_host_name(char *out, size_t size)
{
    char name[256] = "";
    assert_int_equal(gethostname(name, sizeof name), 0);
    snprintf(out, size, "%s", name[0] ? name : "localhost");
    for (char *c = out; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789_.-", *c))
            *c = '-';
}

static void run_fleet_case(void **state)
{
    const struct fleet_case *row = *state;
    char text[1024], host[BH_FLEET_HOST_MAX];
    struct bh_config config;
    snprintf(text, sizeof text, "[global]\n%s[a]\nmatch = 10.0.0.1:80\n%s"
             "[b]\nlimit = 1\nmatch = 10.0.0.2:80\n", row->global, row->a);
    parse_ok(text, &config);
    if (row->url)
        assert_string_equal(config.fleet_url, row->url);
    else
        assert_null(config.fleet_url);
    if (row->host) {
        assert_string_equal(config.fleet_host, row->host);
    } else {
        own_host_name(host, sizeof host);
        assert_string_equal(config.fleet_host, host);
    }
    if (strstr(row->global, "fleet_password_file"))
        assert_non_null(config.fleet_password_file);
    else
        assert_null(config.fleet_password_file);
    assert_int_equal(config.fleet_refresh_ms, row->refresh_ms);
    assert_int_equal(config.fleet_lease_ms, row->lease_ms);
    assert_int_equal(config.fleet_fallback, row->fallback);
    assert_int_equal(config.fleet_fallback_ms,
                     strstr(row->global, "fleet_fallback_ms = 0") ? 0 : 300000);
    assert_int_equal(config.compartment_count, 2);
    assert_int_equal(config.compartments[0].fleet_limit, row->fleet_limit);
    assert_int_equal(config.compartments[0].limit, row->limit);
    assert_int_equal(config.compartments[1].fleet_limit, 0);
    assert_int_equal(config.compartments[1].limit, 1);
    bh_config_free(&config);
}

/* [global] may come last: fleet_limit above it is not an error. */
static void fleet_global_after_compartments(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[db]\nfleet_limit = 12\nmatch = 10.0.0.1:5432\n"
             "[global]\nfleet = redis://r:6379\nfleet_password_file = /run/p\n", &config);
    assert_string_equal(config.fleet_url, "redis://r:6379");
    assert_string_equal(config.fleet_password_file, "/run/p");
    assert_int_equal(config.compartments[0].fleet_limit, 12);
    assert_int_equal(config.compartments[0].limit, 12);
    bh_config_free(&config);
}

/* bh_fleet_url_parse, as the agent uses it: host, port and database. */
struct url_case {
    const char *url;
    const char *host;
    int port, db;
};

static const struct url_case url_cases[] = {
    { "redis://10.0.0.5:6379", "10.0.0.5", 6379, 0 },
    { "redis://10.0.0.5:6379/0", "10.0.0.5", 6379, 0 },
    { "redis://10.0.0.5:6379/15", "10.0.0.5", 6379, 15 },
    { "redis://localhost:1/7", "localhost", 1, 7 },
    { "redis://Redis_1.example-2.COM:65535", "Redis_1.example-2.COM", 65535, 0 },
    { "redis://[::1]:6379", "::1", 6379, 0 },
    { "redis://[2001:db8::5]:6380/2", "2001:db8::5", 6380, 2 },
    { "redis://[::ffff:10.0.0.1]:6379", "::ffff:10.0.0.1", 6379, 0 },
    { "redis://r:06379/05", "r", 6379, 5 },
};

/* bh_fleet_url_parse of redis-sentinel://: the sentinels as
 * "host:port,..." (the default port filled in), the master, the database. */
struct sentinel_case {
    const char *url;
    const char *sentinels;
    const char *master;
    int db;
};

static const struct sentinel_case sentinel_cases[] = {
    { "redis-sentinel://10.0.0.5/mymaster", "10.0.0.5:26379", "mymaster", 0 },
    { "redis-sentinel://s1:26380,s2,s3:1/shop.db-1/7", "s1:26380,s2:26379,s3:1",
      "shop.db-1", 7 },
    { "redis-sentinel://[::1]:5000,[2001:db8::2]/m", "::1:5000,2001:db8::2:26379", "m", 0 },
    { "redis-sentinel://a,b,c,d,e,f,g,h/M_1", "a:26379,b:26379,c:26379,d:26379,"
      "e:26379,f:26379,g:26379,h:26379", "M_1", 0 },
    { "redis-sentinel://s:026379/m/015", "s:26379", "m", 15 },
};

static void run_sentinel_case(void **state)
{
    const struct sentinel_case *row = *state;
    struct bh_fleet_address address;
    char why[256] = "", sentinels[1024] = "";
    memset(&address, 0x55, sizeof address);
    if (bh_fleet_url_parse(row->url, &address, why, sizeof why) != 0)
        print_error("unexpected: %s\n", why);
    assert_true(address.sentinel_count >= 1 &&
                address.sentinel_count <= BH_FLEET_SENTINELS_MAX);
    for (int i = 0, used = 0; i < address.sentinel_count; i++)
        used += snprintf(sentinels + used, sizeof sentinels - (size_t)used, "%s%s:%d",
                         i ? "," : "", address.sentinels[i].host,
                         address.sentinels[i].port);
    assert_string_equal(sentinels, row->sentinels);
    assert_string_equal(address.master, row->master);
    assert_int_equal(address.db, row->db);
}

static void run_url_case(void **state)
{
    const struct url_case *row = *state;
    struct bh_fleet_address address;
    char why[128] = "";
    memset(&address, 0x55, sizeof address);
    if (bh_fleet_url_parse(row->url, &address, why, sizeof why) != 0)
        print_error("unexpected: %s\n", why);
    assert_string_equal(address.host, row->host);
    assert_int_equal(address.port, row->port);
    assert_int_equal(address.db, row->db);
    assert_int_equal(address.sentinel_count, 0);
}

/* The default fleet_host: the host name whole up to 63 characters, with
 * what a fleet_host may not hold made '-'. Needs its own UTS namespace. */
static void default_host_in_uts_namespace(const char *set, const char *want)
{
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        char out[BH_FLEET_HOST_MAX];
        if (unshare(CLONE_NEWUTS) != 0)
            _exit(77);
        if (sethostname(set, strlen(set)) != 0)
            _exit(3);
        bh_fleet_default_host(out, sizeof out);
        if (strcmp(out, want) != 0) {
            fprintf(stderr, "hostname \"%s\": got \"%s\", want \"%s\"\n", set, out, want);
            _exit(1);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        skip();
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void default_fleet_host(void **state)
{
    (void)state;
    default_host_in_uts_namespace("web-01.eu_west", "web-01.eu_west");
    default_host_in_uts_namespace("web 01/eu+west", "web-01-eu-west");
    /* 64 characters, Linux's most: gethostname would fail on it. */
    default_host_in_uts_namespace(LONG63 "z", LONG63);
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

/* Path settings are read by every process of a tree, whatever its working
 * directory: a relative one is taken from the rules file's directory. */
static void relative_paths_from_the_rules_directory(void **state)
{
    (void)state;
    static const char text[] = "[global]\nlog_file = logs/bh.log\n"
                               "fleet = redis-sentinel://s/m\nfleet_password_file = redis.pass\n"
                               "fleet_sentinel_password_file = sentinel.pass\n";
    assert_int_equal(mkdir("conf", 0700) == 0 || errno == EEXIST, 1);
    write_file("conf/rules.ini", text, sizeof text - 1);
    struct bh_config config;
    struct errors errors = { 0 };
    assert_int_equal(bh_config_load("conf/rules.ini", &config, collect, &errors), 0);
    assert_string_equal(config.log_file, "conf/logs/bh.log");
    assert_string_equal(config.fleet_password_file, "conf/redis.pass");
    assert_string_equal(config.fleet_sentinel_password_file, "conf/sentinel.pass");
    bh_config_free(&config);
    /* absolute ones, and a file named without a directory, as written */
    parse_ok("[global]\nlog_file = /var/log/bh.log\nfleet = redis://r:6379\n"
             "fleet_password_file = pass\n", &config);
    assert_string_equal(config.log_file, "/var/log/bh.log");
    assert_string_equal(config.fleet_password_file, "pass");
    bh_config_free(&config);
    unlink("conf/rules.ini");
    rmdir("conf");
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

/* ---- policy inside a compartment ---- */

static void assert_reserve(const struct bh_reserve *reserve, int permits,
                           enum bh_who_kind kind, const char *text, int line)
{
    assert_int_equal(reserve->permits, permits);
    assert_int_equal(reserve->who.kind, kind);
    assert_string_equal(reserve->who.text, text);
    assert_int_equal(reserve->line, line);
}

static void policy_keys(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[db]\nlimit = 10\nper_process = 3\n"
             "reserve = 2 for program=billing-*\n"
             "reserve =  1\t for \t user=root  ; a comment\n"
             "reserve = 3 for user=0\n"
             "reserve = 4 for env=BULKHEAD_CLASS=critical\n"
             "bypass = program=pg_dump\nbypass = user=root\nbypass = env=OPS=\n"
             "match = 10.0.0.1:5432\nmatch = reports.internal:443 weight=4\n"
             "match = 10.0.0.2:5432   weight=10\n"
             "[other]\nlimit = 1\nmatch = 10.0.0.3:80\n", &config);
    const struct bh_compartment *db = &config.compartments[0];
    assert_int_equal(db->per_process, 3);
    assert_int_equal(db->reserve_count, 4);
    assert_reserve(&db->reserves[0], 2, BH_WHO_PROGRAM, "program=billing-*", 4);
    assert_reserve(&db->reserves[1], 1, BH_WHO_USER, "user=root", 5);
    assert_int_equal(db->reserves[1].who.uid, 0);
    /* The same uid under another text is another WHO. */
    assert_reserve(&db->reserves[2], 3, BH_WHO_USER, "user=0", 6);
    assert_int_equal(db->reserves[2].who.uid, 0);
    assert_reserve(&db->reserves[3], 4, BH_WHO_ENV, "env=BULKHEAD_CLASS=critical", 7);
    assert_int_equal(db->bypass_count, 3);
    assert_int_equal(db->bypasses[0].kind, BH_WHO_PROGRAM);
    assert_string_equal(db->bypasses[0].text, "program=pg_dump");
    assert_int_equal(db->bypasses[1].kind, BH_WHO_USER);
    assert_int_equal(db->bypasses[1].uid, 0);
    assert_string_equal(db->bypasses[2].text, "env=OPS=");
    assert_int_equal(config.rule_count, 4);
    static const int weights[] = { 1, 4, 10, 1 };
    static const char *const texts[] = {
        "10.0.0.1:5432", "reports.internal:443", "10.0.0.2:5432", "10.0.0.3:80",
    };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(config.rules[i].weight, weights[i]);
        assert_string_equal(config.rules[i].text, texts[i]);
    }
    assert_string_equal(config.rules[1].hostname, "reports.internal");
    /* The next compartment starts without any of them. */
    const struct bh_compartment *other = &config.compartments[1];
    assert_int_equal(other->per_process, 0);
    assert_int_equal(other->reserve_count, 0);
    assert_int_equal(other->bypass_count, 0);
    bh_config_free(&config);
}

/* The bounds that are still valid. */
static void policy_bounds(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[db]\nlimit = 32767\nper_process = 32767\n"
             "reserve = 32767 for program=a\n"
             "match = 10.0.0.1:80 weight=32767\n"
             "[one]\nlimit = 1\nper_process = 1\nreserve = 1 for program=[]x]\n"
             "match = 10.0.0.2:80 weight=1\n", &config);
    assert_int_equal(config.compartments[0].per_process, 32767);
    assert_int_equal(config.compartments[0].reserves[0].permits, 32767);
    assert_int_equal(config.rules[0].weight, 32767);
    assert_int_equal(config.compartments[1].per_process, 1);
    assert_string_equal(config.compartments[1].reserves[0].who.text, "program=[]x]");
    assert_int_equal(config.rules[1].weight, 1);
    bh_config_free(&config);
}

/* Four reserves and eight bypasses, the most; reserves may take the whole
 * limit (the common pool is then empty). */
static void policy_most(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[db]\nlimit = 4\nmatch = 10.0.0.1:80\n"
             "reserve = 1 for program=a\nreserve = 1 for program=b\n"
             "reserve = 1 for program=c\nreserve = 1 for program=d\n"
             "bypass = program=a\nbypass = program=b\nbypass = program=c\n"
             "bypass = program=d\nbypass = program=e\nbypass = program=f\n"
             "bypass = program=g\nbypass = program=h\n", &config);
    assert_int_equal(config.compartments[0].reserve_count, BH_MAX_RESERVES);
    assert_int_equal(config.compartments[0].bypass_count, BH_MAX_BYPASSES);
    assert_string_equal(config.compartments[0].bypasses[7].text, "program=h");
    bh_config_free(&config);
}

/* limit = 0 refuses everything: an outage switch must not turn reserves and
 * weights into errors (a shim with bad rules would cap nothing). */
static void policy_limit_zero(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[db]\nlimit = 0\nreserve = 5 for program=a\n"
             "match = 10.0.0.1:80 weight=3\n", &config);
    assert_int_equal(config.compartments[0].reserves[0].permits, 5);
    assert_int_equal(config.rules[0].weight, 3);
    bh_config_free(&config);
}

/* A fleet compartment: bypasses and weights up to the host's ceiling. */
static void policy_fleet(void **state)
{
    (void)state;
    struct bh_config config;
    parse_ok("[global]\nfleet = redis://r:6379\n[db]\nfleet_limit = 50\n"
             "limit = 4\nbypass = user=root\nper_process = 2\n"
             "match = 10.0.0.1:80 weight=4\n", &config);
    assert_int_equal(config.compartments[0].bypass_count, 1);
    assert_int_equal(config.compartments[0].per_process, 2);
    assert_int_equal(config.rules[0].weight, 4);
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
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(line_too_long),
        cmocka_unit_test(nul_byte),
        cmocka_unit_test(missing_file),
        cmocka_unit_test(directory),
        cmocka_unit_test(too_big),
        cmocka_unit_test(too_many_compartments),
        cmocka_unit_test(most_compartments),
        cmocka_unit_test(defaults),
        cmocka_unit_test(every_key),
        cmocka_unit_test(retired_keys),
        cmocka_unit_test(hold_wait_inherited),
        cmocka_unit_test(log_file_stderr),
        cmocka_unit_test(relative_paths_from_the_rules_directory),
        cmocka_unit_test(rules_in_file_order),
        cmocka_unit_test(fleet_global_after_compartments),
        cmocka_unit_test(default_fleet_host),
        cmocka_unit_test(policy_keys),
        cmocka_unit_test(policy_bounds),
        cmocka_unit_test(policy_most),
        cmocka_unit_test(policy_limit_zero),
        cmocka_unit_test(policy_fleet),
    };
    static struct CMUnitTest tests[COUNT(error_cases) + COUNT(rule_cases)
                                   + COUNT(deadline_cases) + COUNT(fleet_cases)
                                   + COUNT(url_cases) + COUNT(sentinel_cases)
                                   + COUNT(fixed)];
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
    for (size_t i = 0; i < COUNT(fleet_cases); i++)
        tests[n++] = (struct CMUnitTest) {
            .name = fleet_cases[i].name, .test_func = run_fleet_case,
            .initial_state = (void *)&fleet_cases[i],
        };
    for (size_t i = 0; i < COUNT(sentinel_cases); i++)
        tests[n++] = (struct CMUnitTest) {
            .name = sentinel_cases[i].url, .test_func = run_sentinel_case,
            .initial_state = (void *)&sentinel_cases[i],
        };
    for (size_t i = 0; i < COUNT(url_cases); i++)
        tests[n++] = (struct CMUnitTest) {
            .name = url_cases[i].url, .test_func = run_url_case,
            .initial_state = (void *)&url_cases[i],
        };
    for (size_t i = 0; i < COUNT(fixed); i++)
        tests[n++] = fixed[i];
    return _cmocka_run_group_tests("config", tests, n, enter_scratch, leave_scratch);
}
