/* Reads rules.ini with inih into a struct bh_config, reporting every problem
 * as one "PATH:LINE: ..." line.
 *
 * Debian's inih gives the handler no line number, and says nothing about a
 * section until it has a key. So inih reads through our own line reader,
 * which counts lines, notes each section header with its line, and notices
 * lines inih rejected: inih calls the handler for a key = value line before
 * it asks for the next line, so a key line that got no call was refused. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <ini.h>

#include "config/config.h"
#include "libc/libc.h"
#include "policy/who.h"

enum {
    LINE_BUFFER_SIZE = 1024,   /* inih's line buffer: text, newline, NUL */
    MESSAGE_SIZE = 8192,
    RULES_MAX_BYTES = 4 << 20, /* a rules file is text an operator wrote */
    WAIT_MS_MAX = 3600000,
    MAX_WAITERS_MAX = 1000000,
    DEFAULT_MAX_WAITERS = 64,
    NONBLOCKING_WAIT_MS_MAX = 1000, /* longer stalls an event loop for good */
    DEFAULT_NONBLOCKING_WAIT_MS = 10,
    DEADLINE_MS_MAX = 86400000,     /* a day, for every deadline and period */
    CONNECT_TIMEOUT_MIN_MS = 1000,  /* Linux's first SYN retransmission */
    BREAKER_FAILURES_MAX = 1000000,
    DEFAULT_BREAKER_OPEN_MS = 5000,
    DEFAULT_BREAKER_OPEN_MAX_MS = 60000,
    DEFAULT_FLEET_REFRESH_MS = 1000,
    DEFAULT_FLEET_LEASE_MS = 10000,
    DEFAULT_FLEET_FALLBACK_MS = 300000,
    FLEET_REFRESH_MIN_MS = 50,
    FLEET_REFRESH_MAX_MS = 600000,
    PORT_MAX = 65535,
    HOSTNAME_MAX = 253,
    LABEL_MAX = 63,
    HOSTNAME_BUFFER_SIZE = HOSTNAME_MAX + 2, /* a suffix's leading '.', NUL */
    COUNT_TEXT_SIZE = 16,      /* reserve's N, as written, cut short */
    WHY_SIZE = 256,            /* what is wrong with a WHO */
    DEFAULT_MAX_LIMIT_FACTOR = 4,   /* max_limit: 4 x limit */
};

enum section_kind { SECTION_NONE, SECTION_GLOBAL, SECTION_COMPARTMENT };

enum key_id {
    KEY_LOG, KEY_LOG_FILE, KEY_NAMESPACE, KEY_ON_FAILURE,
    KEY_LIMIT, KEY_WAIT_MS, KEY_WAIT_NONBLOCKING, KEY_MAX_WAITERS, KEY_ERRNO,
    KEY_MATCH, KEY_CONNECT_TIMEOUT_MS, KEY_IO_TIMEOUT_MS,
    KEY_BREAKER_FAILURES, KEY_BREAKER_OPEN_MS, KEY_BREAKER_OPEN_MAX_MS,
    KEY_FLEET, KEY_FLEET_PASSWORD_FILE, KEY_FLEET_HOST, KEY_FLEET_REFRESH_MS,
    KEY_FLEET_LEASE_MS, KEY_FLEET_FALLBACK, KEY_FLEET_FALLBACK_MS, KEY_FLEET_LIMIT,
    KEY_FLEET_NAME,
    KEY_FLEET_SENTINEL_PASSWORD_FILE,
    KEY_PER_PROCESS, KEY_RESERVE, KEY_BYPASS,
    KEY_NONBLOCKING_WAIT_MS, KEY_HOLD_WAIT_MS,
    KEY_ADAPTIVE, KEY_MIN_LIMIT, KEY_MAX_LIMIT, KEY_ADAPTIVE_LATENCY_MS,
    KEY_TURNAROUND,
    KEY_COUNT
};

/* The section whose keys inih is handing us now. */
struct section {
    enum section_kind kind;
    char name[BH_NAME_MAX];      /* as written, cut short, for messages */
    /* Where values go: into the config, or into parser.scratch when the
     * header was already reported as wrong (index -1) so that its keys are
     * still checked. */
    struct bh_compartment *compartment;
    int index;
    int key_lines[KEY_COUNT];    /* first line of each key; 0 = not yet */
    bool key_bad[KEY_COUNT];     /* its value was reported: checks across
                                    keys leave it out, one error per value */
    int first_rule;              /* the section's rules are from here on */
    int bypass_lines[BH_MAX_BYPASSES]; /* for "already given at line N" */
};

struct parser {
    const char *path;            /* as the caller wrote it, for messages */
    struct bh_config *config;
    bh_config_error_fn on_error;
    void *ctx;
    FILE *file;
    char *raw_line;              /* getline()'s buffer */
    size_t raw_capacity;
    long long bytes_read;        /* bounded by RULES_MAX_BYTES */
    int read_errno;
    int line;                    /* the line inih is working on */
    bool expects_key;            /* it is neither blank, comment nor header */
    bool key_handled;            /* and inih did call the handler for it */
    int global_line;             /* header of [global]; 0 = none yet */
    int global_key_lines[KEY_COUNT]; /* [global]'s keys, kept past the section */
    bool global_key_bad[KEY_COUNT];  /* and whether their values were reported */
    int fleet_limit_lines[BH_MAX_COMPARTMENTS]; /* checked at the end of the file */
    int fleet_limit_count;
    struct section section;
    struct bh_compartment scratch;
    int rule_capacity;
    int compartment_capacity;
    int *error_lines;            /* lines already reported, to tell whether */
    int error_line_count;        /* inih's own error line is news */
    int error_line_capacity;
    int error_count;
};

struct key_spec {
    const char *name;
    enum key_id id;
    enum section_kind section;
    int (*apply)(struct parser *p, const char *key, const char *value);
};

static void remember_error_line(struct parser *p, int line)
{
    if (p->error_line_count == p->error_line_capacity) {
        int capacity = p->error_line_capacity ? 2 * p->error_line_capacity : 16;
        int *grown = realloc(p->error_lines, capacity * sizeof *grown);
        if (!grown)
            return;  /* costs at most a second report for one line */
        p->error_lines = grown;
        p->error_line_capacity = capacity;
    }
    p->error_lines[p->error_line_count++] = line;
}

static bool was_reported(const struct parser *p, int line)
{
    for (int i = 0; i < p->error_line_count; i++)
        if (p->error_lines[i] == line)
            return true;
    return false;
}

/* One error: "PATH:LINE: message", or "PATH: message" when line is 0. */
__attribute__((format(printf, 3, 4)))
static void report(struct parser *p, int line, const char *format, ...)
{
    char message[MESSAGE_SIZE];
    int used = line > 0
        ? snprintf(message, sizeof message, "%s:%d: ", p->path, line)
        : snprintf(message, sizeof message, "%s: ", p->path);
    va_list args;

    va_start(args, format);
    if (used >= 0 && (size_t)used < sizeof message)
        vsnprintf(message + used, sizeof message - used, format, args);
    va_end(args);
    p->error_count++;
    if (line > 0)
        remember_error_line(p, line);
    if (p->on_error)
        p->on_error(p->ctx, message);
}

static void report_out_of_memory(struct parser *p)
{
    report(p, p->line, "out of memory");
}

/* ASCII only: the shim runs under whatever locale the host program set. */
static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
        || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static char to_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* The same characters inih strips (isspace in the C locale). */
static const char *skip_space(const char *text)
{
    while (*text && strchr(" \t\n\v\f\r", *text))
        text++;
    return text;
}

/* Compartment and namespace names. */
static bool is_valid_name(const char *name, size_t length)
{
    if (length == 0 || length >= BH_NAME_MAX)
        return false;
    for (size_t i = 0; i < length; i++)
        if (!is_name_char(name[i]))
            return false;
    return true;
}

enum number_status { NUMBER_OK, NUMBER_NOT_WHOLE, NUMBER_TOO_BIG };

/* Plain decimal digits only: strtol alone would also take " +5" or "5x". */
static enum number_status parse_whole(const char *text, long max, long *number)
{
    char *end;

    if (!is_digit(text[0]))
        return NUMBER_NOT_WHOLE;
    errno = 0;
    *number = strtol(text, &end, 10);
    if (*end != '\0')
        return NUMBER_NOT_WHOLE;
    return errno == ERANGE || *number > max ? NUMBER_TOO_BIG : NUMBER_OK;
}

static int set_number(struct parser *p, const char *key, const char *value,
                      int min, int max, int *field)
{
    long number;
    enum number_status status = parse_whole(value, max, &number);

    if (status == NUMBER_OK && number >= min) {
        *field = (int)number;
        return 0;
    }
    if (status == NUMBER_NOT_WHOLE)
        report(p, p->line, "%s: \"%s\" is not a whole number", key, value);
    else
        report(p, p->line, "%s: %s is out of range (%d to %d)", key, value,
               min, max);
    return -1;
}

/* ---- [global] ---- */

static int set_log(struct parser *p, const char *key, const char *value)
{
    if (bh_log_level_parse(value, &p->config->log_level) == 0)
        return 0;
    report(p, p->line, "%s: \"%s\" is not one of error, warn, info, debug",
           key, value);
    return -1;
}

/* A path setting, as every process of the tree must read it: a relative
 * one is taken from the rules file's directory, not from the working
 * directory, which differs between processes (a daemon's chdir("/")). */
static int set_path(struct parser *p, const char *value, char **field)
{
    free(*field);  /* a second [global] may set it again */
    *field = NULL;
    const char *slash = strrchr(p->path, '/');
    int dir_length = value[0] == '/' || !slash ? 0 : (int)(slash - p->path) + 1;
    size_t size = (size_t)dir_length + strlen(value) + 1;
    if ((*field = malloc(size))) {
        snprintf(*field, size, "%.*s%s", dir_length, p->path, value);
        return 0;
    }
    report_out_of_memory(p);
    return -1;
}

static int set_log_file(struct parser *p, const char *key, const char *value)
{
    (void)key;
    if (strcmp(value, "stderr") != 0)
        return set_path(p, value, &p->config->log_file);
    free(p->config->log_file);
    p->config->log_file = NULL;
    return 0;
}

/* A namespace's or a fleet's name, into name (BH_NAME_MAX bytes). */
static int set_name(struct parser *p, const char *key, const char *value, char *name)
{
    if (is_valid_name(value, strlen(value))) {
        snprintf(name, BH_NAME_MAX, "%s", value);
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not a valid name "
           "(use 1 to %d of A-Z a-z 0-9 _ . -)", key, value, BH_NAME_MAX - 1);
    return -1;
}

static int set_namespace(struct parser *p, const char *key, const char *value)
{
    return set_name(p, key, value, p->config->namespace_name);
}

/* What the shim does when it cannot reach the namespace's shared state
 * (a squatted key, SysV limits used up, permission denied). */
static int set_on_failure(struct parser *p, const char *key, const char *value)
{
    if (strcmp(value, "closed") == 0 || strcmp(value, "open") == 0) {
        p->config->on_failure_open = value[0] == 'o';
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not one of closed, open", key, value);
    return -1;
}

/* ---- the fleet ---- */

static int set_string(struct parser *p, const char *value, char **field)
{
    free(*field);
    *field = strdup(value);
    if (*field)
        return 0;
    report_out_of_memory(p);
    return -1;
}

/* bh_fleet_url_parse, its address on the heap: a few kilobytes (eight
 * sentinels), and the shim may parse on a small stack (its first hook, in
 * any thread). How many sentinels the URL names (0 for redis://), -1 with
 * why when it is bad, -2 when out of memory (reported). */
static int fleet_url_sentinels(struct parser *p, const char *url, char *why,
                               size_t whylen)
{
    struct bh_fleet_address *address = malloc(sizeof *address);
    if (!address) {
        report_out_of_memory(p);
        return -2;
    }
    int sentinels = bh_fleet_url_parse(url, address, why, whylen) == 0
        ? address->sentinel_count : -1;
    free(address);
    return sentinels;
}

static int set_fleet(struct parser *p, const char *key, const char *value)
{
    char why[256];
    int sentinels = fleet_url_sentinels(p, value, why, sizeof why);
    if (sentinels >= 0)
        return set_string(p, value, &p->config->fleet_url);
    if (sentinels == -1)
        report(p, p->line, "%s: \"%s\" %s", key, value, why);
    return -1;
}

/* Only its name: the agent reads it, and check looks at its mode; the shim
 * never touches it. */
static int set_fleet_password_file(struct parser *p, const char *key,
                                   const char *value)
{
    (void)key;
    p->config->fleet_password_file_line = p->line;
    return set_path(p, value, &p->config->fleet_password_file);
}

/* The sentinels' password, as fleet_password_file is Redis's; whether
 * fleet = names sentinels is checked at the end of the file. */
static int set_fleet_sentinel_password_file(struct parser *p, const char *key,
                                            const char *value)
{
    (void)key;
    p->config->fleet_sentinel_password_file_line = p->line;
    return set_path(p, value, &p->config->fleet_sentinel_password_file);
}

static int set_fleet_host(struct parser *p, const char *key, const char *value)
{
    size_t length = strlen(value);
    bool valid = length < BH_FLEET_HOST_MAX;
    for (size_t i = 0; valid && i < length; i++)
        valid = is_name_char(value[i]);
    if (valid) {
        snprintf(p->config->fleet_host, BH_FLEET_HOST_MAX, "%s", value);
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not a valid host name (use 1 to %d of "
           "A-Z a-z 0-9 _ . -)", key, value, BH_FLEET_HOST_MAX - 1);
    return -1;
}

static int set_fleet_name(struct parser *p, const char *key, const char *value)
{
    return set_name(p, key, value, p->config->fleet_name);
}

static int set_fleet_refresh_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, FLEET_REFRESH_MIN_MS, FLEET_REFRESH_MAX_MS,
                      &p->config->fleet_refresh_ms);
}

static int set_fleet_lease_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 2 * FLEET_REFRESH_MIN_MS, DEADLINE_MS_MAX,
                      &p->config->fleet_lease_ms);
}

static int set_fleet_fallback_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 0, DEADLINE_MS_MAX, &p->config->fleet_fallback_ms);
}

static int set_fleet_fallback(struct parser *p, const char *key, const char *value)
{
    if (strcmp(value, "split") == 0) {
        p->config->fleet_fallback = -1;
        return 0;
    }
    long number;
    if (parse_whole(value, BH_LIMIT_MAX, &number) == NUMBER_OK) {
        p->config->fleet_fallback = (int)number;
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is neither split nor a whole number from 0 "
           "to %d", key, value, BH_LIMIT_MAX);
    return -1;
}

/* Whether [global] has a fleet = is known only at the end of the file: the
 * line is kept for then. A value already reported is not kept: one error. */
static int set_fleet_limit(struct parser *p, const char *key, const char *value)
{
    if (set_number(p, key, value, 1, BH_FLEET_LIMIT_MAX,
                   &p->section.compartment->fleet_limit) != 0)
        return -1;
    if (p->fleet_limit_count < BH_MAX_COMPARTMENTS)
        p->fleet_limit_lines[p->fleet_limit_count++] = p->line;
    return 0;
}

/* ---- compartments ---- */

static int set_limit(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 0, BH_LIMIT_MAX, &p->section.compartment->limit);
}

static int set_wait_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 0, WAIT_MS_MAX,
                      &p->section.compartment->wait_ms);
}

static int set_yes_no(struct parser *p, const char *key, const char *value, int *out)
{
    if (strcmp(value, "yes") == 0 || strcmp(value, "no") == 0) {
        *out = strcmp(value, "yes") == 0;
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not one of yes, no", key, value);
    return -1;
}

static int set_wait_nonblocking(struct parser *p, const char *key,
                                const char *value)
{
    return set_yes_no(p, key, value, &p->section.compartment->wait_nonblocking);
}

static int set_turnaround(struct parser *p, const char *key, const char *value)
{
    return set_yes_no(p, key, value, &p->section.compartment->turnaround);
}

static int set_nonblocking_wait_ms(struct parser *p, const char *key,
                                   const char *value)
{
    return set_number(p, key, value, 0, NONBLOCKING_WAIT_MS_MAX,
                      &p->section.compartment->nonblocking_wait_ms);
}

static int set_hold_wait_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 0, WAIT_MS_MAX,
                      &p->section.compartment->hold_wait_ms);
}

/* [global]'s hold_wait_ms: for every compartment that gives none. */
static int set_global_hold_wait_ms(struct parser *p, const char *key,
                                   const char *value)
{
    return set_number(p, key, value, 0, WAIT_MS_MAX, &p->config->hold_wait_ms);
}

static int set_max_waiters(struct parser *p, const char *key,
                           const char *value)
{
    return set_number(p, key, value, 0, MAX_WAITERS_MAX,
                      &p->section.compartment->max_waiters);
}

static int set_errno(struct parser *p, const char *key, const char *value)
{
    static const int refusals[] = {
        ECONNREFUSED, ETIMEDOUT, EAGAIN, EHOSTUNREACH,
    };

    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        if (strcmp(value, bh_errno_name(refusals[i])) == 0) {
            p->section.compartment->refusal_errno = refusals[i];
            return 0;
        }
    }
    report(p, p->line, "%s: \"%s\" is not one of ECONNREFUSED, ETIMEDOUT, "
           "EAGAIN, EHOSTUNREACH", key, value);
    return -1;
}

/* ---- deadlines and the breaker ---- */

/* The shim sets TCP_USER_TIMEOUT, which Linux checks only when the SYN
 * retransmission timer fires: the first time 1 s after the SYN. A shorter
 * value would still fail at 1 s, so it is refused rather than misleading. */
static int set_connect_timeout_ms(struct parser *p, const char *key,
                                  const char *value)
{
    int *timeout = &p->section.compartment->connect_timeout_ms;
    int number;

    if (set_number(p, key, value, 0, DEADLINE_MS_MAX, &number) != 0)
        return -1;
    if (number > 0 && number < CONNECT_TIMEOUT_MIN_MS) {
        report(p, p->line, "%s: %d is below %d: the kernel cannot fail a "
               "connect before its first SYN retransmission, 1 s after the "
               "SYN", key, number, CONNECT_TIMEOUT_MIN_MS);
        return -1;
    }
    *timeout = number;
    return 0;
}

static int set_io_timeout_ms(struct parser *p, const char *key,
                             const char *value)
{
    return set_number(p, key, value, 0, DEADLINE_MS_MAX,
                      &p->section.compartment->io_timeout_ms);
}

static int set_breaker_failures(struct parser *p, const char *key,
                                const char *value)
{
    return set_number(p, key, value, 0, BREAKER_FAILURES_MAX,
                      &p->section.compartment->breaker_failures);
}

static int set_breaker_open_ms(struct parser *p, const char *key,
                               const char *value)
{
    return set_number(p, key, value, 1, DEADLINE_MS_MAX,
                      &p->section.compartment->breaker_open_ms);
}

static int set_breaker_open_max_ms(struct parser *p, const char *key,
                                   const char *value)
{
    return set_number(p, key, value, 1, DEADLINE_MS_MAX,
                      &p->section.compartment->breaker_open_max_ms);
}

/* ---- adaptive limits ---- */

static int set_adaptive(struct parser *p, const char *key, const char *value)
{
    if (bh_adaptive_mode_parse(value, &p->section.compartment->adaptive) == 0)
        return 0;
    report(p, p->line, "%s: \"%s\" is not one of off, gradient, aimd", key, value);
    return -1;
}

static int set_min_limit(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 1, BH_LIMIT_MAX, &p->section.compartment->min_limit);
}

static int set_max_limit(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 1, BH_LIMIT_MAX, &p->section.compartment->max_limit);
}

static int set_adaptive_latency_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 1, DEADLINE_MS_MAX,
                      &p->section.compartment->adaptive_latency_ms);
}

/* ---- policy inside a compartment ---- */

static int set_per_process(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 1, BH_LIMIT_MAX,
                      &p->section.compartment->per_process);
}

/* What follows the word "for" in "N for WHO"; NULL when the word is not
 * there. strchr finds the NUL too: "for" may end the value. */
static const char *after_for(const char *text)
{
    if (strncmp(text, "for", 3) != 0 || !strchr(" \t", text[3]))
        return NULL;
    return skip_space(text + 3);
}

/* "N for WHO"; NULL or what is wrong, which may be written into why. */
static const char *parse_reserve(const char *value, struct bh_reserve *reserve,
                                 char *why, size_t whylen)
{
    size_t length = strcspn(value, " \t");
    const char *who = after_for(skip_space(value + length));
    char count[COUNT_TEXT_SIZE];
    long number;

    snprintf(count, sizeof count, "%.*s", (int)length, value);
    if (length >= sizeof count
        || parse_whole(count, BH_LIMIT_MAX, &number) != NUMBER_OK || number < 1) {
        snprintf(why, whylen, "has a bad count \"%.*s\" (a whole number from 1 "
                 "to %d)", (int)length, value, BH_LIMIT_MAX);
        return why;
    }
    if (!who)
        return "has no \"for\" (use reserve = N for WHO, e.g. 2 for "
               "program=billing-*)";
    if (*who == '\0')
        return "has no WHO after \"for\" (use program=GLOB, user=NAME or "
               "env=VAR=VALUE)";
    reserve->permits = (int)number;
    return bh_who_parse(who, &reserve->who, why, whylen) == 0 ? NULL : why;
}

static const struct bh_reserve *find_reserve(const struct bh_compartment *c,
                                             const char *who)
{
    for (int i = 0; i < c->reserve_count; i++)
        if (strcmp(c->reserves[i].who.text, who) == 0)
            return &c->reserves[i];
    return NULL;
}

/* Repeatable; each WHO once, at most BH_MAX_RESERVES. */
static int add_reserve(struct parser *p, const char *key, const char *value)
{
    struct bh_compartment *c = p->section.compartment;
    struct bh_reserve reserve = { .line = p->line };
    char why[WHY_SIZE];
    const char *problem = parse_reserve(value, &reserve, why, sizeof why);
    const struct bh_reserve *first;

    if (problem) {
        report(p, p->line, "%s: \"%s\" %s", key, value, problem);
        return -1;
    }
    first = find_reserve(c, reserve.who.text);
    if (first) {
        report(p, p->line, "%s: %s already has a reserve at line %d", key,
               reserve.who.text, first->line);
        return -1;
    }
    if (c->reserve_count == BH_MAX_RESERVES) {
        report(p, p->line, "%s: too many in [%s] (at most %d)", key,
               p->section.name, BH_MAX_RESERVES);
        return -1;
    }
    c->reserves[c->reserve_count++] = reserve;
    return 0;
}

/* Repeatable; each WHO once, at most BH_MAX_BYPASSES. */
static int add_bypass(struct parser *p, const char *key, const char *value)
{
    struct bh_compartment *c = p->section.compartment;
    struct bh_who who;
    char why[WHY_SIZE];

    if (bh_who_parse(value, &who, why, sizeof why) != 0) {
        report(p, p->line, "%s: \"%s\" %s", key, value, why);
        return -1;
    }
    for (int i = 0; i < c->bypass_count; i++) {
        if (strcmp(c->bypasses[i].text, who.text) == 0) {
            report(p, p->line, "%s: %s already given at line %d", key,
                   who.text, p->section.bypass_lines[i]);
            return -1;
        }
    }
    if (c->bypass_count == BH_MAX_BYPASSES) {
        report(p, p->line, "%s: too many in [%s] (at most %d)", key,
               p->section.name, BH_MAX_BYPASSES);
        return -1;
    }
    p->section.bypass_lines[c->bypass_count] = p->line;
    c->bypasses[c->bypass_count++] = who;
    return 0;
}

/* ---- match = HOST:PORTSPEC ---- */

static const char not_a_host[] = "is not an address or host name";

/* The colon before the port: v6 addresses hold colons, but in brackets. */
static char *port_colon(char *text)
{
    char *colon = NULL;
    int depth = 0;

    for (char *c = text; *c; c++) {
        if (*c == '[')
            depth++;
        else if (*c == ']')
            depth--;
        else if (*c == ':' && depth == 0)
            colon = c;
    }
    return colon;
}

static bool parse_port(const char *text, long *port)
{
    return parse_whole(text, PORT_MAX, port) == NUMBER_OK && *port >= 1;
}

/* "*", "N" or "LO-HI"; NULL or what is wrong. */
static const char *parse_ports(char *text, struct bh_rule *rule)
{
    char *dash = strchr(text, '-');
    long low, high;

    if (strcmp(text, "*") == 0) {
        rule->port_lo = 0;
        rule->port_hi = PORT_MAX;
        return NULL;
    }
    if (dash)
        *dash = '\0';
    if (!parse_port(text, &low) || (dash && !parse_port(dash + 1, &high)))
        return "has a bad port";
    if (!dash)
        high = low;
    if (low > high)
        return "has its port range reversed";
    rule->port_lo = (uint16_t)low;
    rule->port_hi = (uint16_t)high;
    return NULL;
}

static void zero_host_bits(uint8_t *address, int prefix_len, int address_bits)
{
    for (int bit = prefix_len; bit < address_bits; bit++)
        address[bit / 8] &= (uint8_t)~(0x80u >> (bit % 8));
}

/* "a.b.c.d", "a.b.c.d/N", "[v6]" or "[v6]/N". */
static const char *parse_network(char *host, struct bh_rule *rule)
{
    char *slash = strchr(host, '/');
    char *address = host;
    int family = AF_INET, max_prefix = 32;
    long prefix_len;

    if (slash)
        *slash = '\0';
    if (host[0] == '[') {
        size_t length = strlen(host);
        if (host[length - 1] != ']')
            return not_a_host;
        host[length - 1] = '\0';
        address = host + 1;
        family = AF_INET6;
        max_prefix = 128;
    }
    if (inet_pton(family, address, rule->address) != 1)
        return not_a_host;
    prefix_len = max_prefix;
    if (slash && parse_whole(slash + 1, max_prefix, &prefix_len) != NUMBER_OK)
        return "has a bad prefix length";
    rule->kind = BH_RULE_ADDRESS;
    rule->family = family;
    rule->prefix_len = (int)prefix_len;
    zero_host_bits(rule->address, rule->prefix_len, max_prefix);
    if (family == AF_INET6 && prefix_len >= 96 &&
        IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)rule->address)) {
        /* [::ffff:a.b.c.d] is a v4 destination: connects to it are matched
         * as v4, so the rule must be one too, or it could never match. */
        memmove(rule->address, rule->address + 12, 4);
        rule->family = AF_INET;
        rule->prefix_len -= 96;
    }
    return NULL;
}

/* Copies a DNS name in lower case without its trailing dot. The last label
 * may not be all digits: "10.0.0.256" is a mistyped address, not a name. */
static bool copy_host_name(const char *name, char *out)
{
    size_t length = strlen(name);
    size_t label_length = 0;
    bool all_digits = true;

    if (length > 0 && name[length - 1] == '.')
        length--;
    if (length == 0 || length > HOSTNAME_MAX)
        return false;
    for (size_t i = 0; i < length; i++) {
        char c = name[i];
        if (c == '.') {
            if (label_length == 0)
                return false;
            label_length = 0;
            all_digits = true;
        } else {
            if (!is_name_char(c) || ++label_length > LABEL_MAX)
                return false;
            all_digits = all_digits && is_digit(c);
        }
        out[i] = to_lower(c);
    }
    out[length] = '\0';
    return label_length > 0 && !all_digits;
}

/* "name" or "*.suffix"; hostname receives the part the rule keeps. */
static const char *parse_host_name(const char *host, struct bh_rule *rule,
                                   char *hostname)
{
    if (strcmp(host, "*") == 0)
        return "has a bare * host; to match every address use 0.0.0.0/0 "
               "and [::]/0";
    rule->kind = BH_RULE_HOSTNAME;
    if (strncmp(host, "*.", 2) == 0) {
        rule->kind = BH_RULE_HOST_SUFFIX;
        *hostname++ = '.';
        host += 2;
    }
    return copy_host_name(host, hostname) ? NULL : not_a_host;
}

static const char *parse_host(char *host, struct bh_rule *rule, char *hostname)
{
    if (host[0] != '[' && strchr(host, ':'))
        return "has an IPv6 address without [brackets]";
    if (host[0] == '[' || strchr(host, '/')
        || inet_pton(AF_INET, host, rule->address) == 1)
        return parse_network(host, rule);
    return parse_host_name(host, rule, hostname);
}

/* Fills rule (and hostname for name rules); NULL or what is wrong. */
static const char *parse_match(const char *value, struct bh_rule *rule,
                               char *hostname)
{
    char text[LINE_BUFFER_SIZE];
    char *colon;
    const char *problem;

    snprintf(text, sizeof text, "%s", value);
    colon = port_colon(text);
    if (!colon)
        return "is missing a port";
    *colon = '\0';
    problem = parse_host(text, rule, hostname);
    return problem ? problem : parse_ports(colon + 1, rule);
}

static int grow_rules(struct parser *p)
{
    struct bh_config *config = p->config;
    int capacity = p->rule_capacity ? 2 * p->rule_capacity : 16;
    struct bh_rule *grown;

    if (config->rule_count < p->rule_capacity)
        return 0;
    grown = realloc(config->rules, capacity * sizeof *grown);
    if (!grown)
        return -1;
    config->rules = grown;
    p->rule_capacity = capacity;
    return 0;
}

static int keep_rule(struct parser *p, struct bh_rule *rule, const char *value,
                     const char *hostname)
{
    rule->text = strdup(value);
    if (rule->kind != BH_RULE_ADDRESS)
        rule->hostname = strdup(hostname);
    if (!rule->text || (rule->kind != BH_RULE_ADDRESS && !rule->hostname)
        || grow_rules(p) != 0) {
        free(rule->text);
        free(rule->hostname);
        report_out_of_memory(p);
        return -1;
    }
    p->config->rules[p->config->rule_count++] = *rule;
    return 0;
}

/* "DEST" or "DEST weight=N": DEST is copied into destination, which explain
 * and check print as the rule. NULL or what is wrong. */
static const char *split_weight(const char *value, char *destination,
                                size_t size, int *weight)
{
    size_t length = strcspn(value, " \t");
    const char *rest = skip_space(value + length);
    long number;

    snprintf(destination, size, "%.*s", (int)length, value);
    if (*rest == '\0')
        return NULL;
    if (strncmp(rest, "weight=", strlen("weight=")) != 0)
        return "has something after its destination other than weight=N";
    if (parse_whole(rest + strlen("weight="), BH_LIMIT_MAX, &number) != NUMBER_OK
        || number < 1)
        return "has a bad weight (a whole number from 1 to 32767)";
    *weight = (int)number;
    return NULL;
}

static int add_match(struct parser *p, const char *key, const char *value)
{
    struct bh_rule rule = { .compartment = p->section.index, .line = p->line,
                           .weight = 1 };
    char destination[LINE_BUFFER_SIZE];
    char hostname[HOSTNAME_BUFFER_SIZE];
    const char *problem = split_weight(value, destination, sizeof destination,
                                       &rule.weight);

    if (!problem)
        problem = parse_match(destination, &rule, hostname);
    if (problem) {
        report(p, p->line, "%s: \"%s\" %s", key, value, problem);
        return -1;
    }
    if (p->section.index < 0)
        return 0;  /* checked, but its section was already reported */
    return keep_rule(p, &rule, destination, hostname);
}

/* ---- sections ---- */

static const struct key_spec key_specs[] = {
    { "log", KEY_LOG, SECTION_GLOBAL, set_log },
    { "log_file", KEY_LOG_FILE, SECTION_GLOBAL, set_log_file },
    { "namespace", KEY_NAMESPACE, SECTION_GLOBAL, set_namespace },
    { "on_failure", KEY_ON_FAILURE, SECTION_GLOBAL, set_on_failure },
    { "limit", KEY_LIMIT, SECTION_COMPARTMENT, set_limit },
    { "wait_ms", KEY_WAIT_MS, SECTION_COMPARTMENT, set_wait_ms },
    { "wait_nonblocking", KEY_WAIT_NONBLOCKING, SECTION_COMPARTMENT,
      set_wait_nonblocking },
    { "max_waiters", KEY_MAX_WAITERS, SECTION_COMPARTMENT, set_max_waiters },
    { "nonblocking_wait_ms", KEY_NONBLOCKING_WAIT_MS, SECTION_COMPARTMENT,
      set_nonblocking_wait_ms },
    { "hold_wait_ms", KEY_HOLD_WAIT_MS, SECTION_COMPARTMENT, set_hold_wait_ms },
    { "hold_wait_ms", KEY_HOLD_WAIT_MS, SECTION_GLOBAL, set_global_hold_wait_ms },
    { "errno", KEY_ERRNO, SECTION_COMPARTMENT, set_errno },
    { "match", KEY_MATCH, SECTION_COMPARTMENT, add_match },
    { "connect_timeout_ms", KEY_CONNECT_TIMEOUT_MS, SECTION_COMPARTMENT,
      set_connect_timeout_ms },
    { "io_timeout_ms", KEY_IO_TIMEOUT_MS, SECTION_COMPARTMENT,
      set_io_timeout_ms },
    { "breaker_failures", KEY_BREAKER_FAILURES, SECTION_COMPARTMENT,
      set_breaker_failures },
    { "breaker_open_ms", KEY_BREAKER_OPEN_MS, SECTION_COMPARTMENT,
      set_breaker_open_ms },
    { "breaker_open_max_ms", KEY_BREAKER_OPEN_MAX_MS, SECTION_COMPARTMENT,
      set_breaker_open_max_ms },
    { "fleet", KEY_FLEET, SECTION_GLOBAL, set_fleet },
    { "fleet_password_file", KEY_FLEET_PASSWORD_FILE, SECTION_GLOBAL,
      set_fleet_password_file },
    { "fleet_sentinel_password_file", KEY_FLEET_SENTINEL_PASSWORD_FILE, SECTION_GLOBAL,
      set_fleet_sentinel_password_file },
    { "fleet_host", KEY_FLEET_HOST, SECTION_GLOBAL, set_fleet_host },
    { "fleet_name", KEY_FLEET_NAME, SECTION_GLOBAL, set_fleet_name },
    { "fleet_refresh_ms", KEY_FLEET_REFRESH_MS, SECTION_GLOBAL, set_fleet_refresh_ms },
    { "fleet_lease_ms", KEY_FLEET_LEASE_MS, SECTION_GLOBAL, set_fleet_lease_ms },
    { "fleet_fallback", KEY_FLEET_FALLBACK, SECTION_GLOBAL, set_fleet_fallback },
    { "fleet_fallback_ms", KEY_FLEET_FALLBACK_MS, SECTION_GLOBAL, set_fleet_fallback_ms },
    { "fleet_limit", KEY_FLEET_LIMIT, SECTION_COMPARTMENT, set_fleet_limit },
    { "per_process", KEY_PER_PROCESS, SECTION_COMPARTMENT, set_per_process },
    { "reserve", KEY_RESERVE, SECTION_COMPARTMENT, add_reserve },
    { "bypass", KEY_BYPASS, SECTION_COMPARTMENT, add_bypass },
    { "adaptive", KEY_ADAPTIVE, SECTION_COMPARTMENT, set_adaptive },
    { "min_limit", KEY_MIN_LIMIT, SECTION_COMPARTMENT, set_min_limit },
    { "max_limit", KEY_MAX_LIMIT, SECTION_COMPARTMENT, set_max_limit },
    { "adaptive_latency_ms", KEY_ADAPTIVE_LATENCY_MS, SECTION_COMPARTMENT,
      set_adaptive_latency_ms },
    { "turnaround", KEY_TURNAROUND, SECTION_COMPARTMENT, set_turnaround },
};

/* A breaker period given where there is no breaker. Its key's line, with
 * the line of an explicit breaker_failures = 0. */
static void check_breaker_needed(struct parser *p, enum key_id id,
                                 const char *key)
{
    const struct section *section = &p->section;
    int failures_line = section->key_lines[KEY_BREAKER_FAILURES];

    if (!section->key_lines[id] || section->key_bad[id])
        return;
    if (failures_line)
        report(p, section->key_lines[id], "%s: has no effect with "
               "breaker_failures = 0 (line %d)", key, failures_line);
    else
        report(p, section->key_lines[id], "%s: has no effect without "
               "breaker_failures", key);
}

/* What is given of the two periods, reported on the line of the one that
 * is out of order; a default is said to be one. */
static void check_breaker_periods(struct parser *p)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    int open_line = section->key_lines[KEY_BREAKER_OPEN_MS];
    int max_line = section->key_lines[KEY_BREAKER_OPEN_MAX_MS];

    if (c->breaker_open_max_ms >= c->breaker_open_ms)
        return;
    if (!max_line)
        report(p, open_line, "breaker_open_ms: %d is above breaker_open_max_ms "
               "(%d, the default)", c->breaker_open_ms, c->breaker_open_max_ms);
    else if (!open_line)
        report(p, max_line, "breaker_open_max_ms: %d is below breaker_open_ms "
               "(%d, the default)", c->breaker_open_max_ms, c->breaker_open_ms);
    else
        report(p, max_line, "breaker_open_max_ms: %d is below breaker_open_ms "
               "(%d at line %d)", c->breaker_open_max_ms, c->breaker_open_ms,
               open_line);
}

/* The breaker's keys are checked against each other once all are read. */
static void check_breaker(struct parser *p)
{
    const struct section *section = &p->section;

    if (section->compartment->breaker_failures == 0) {
        if (!section->key_bad[KEY_BREAKER_FAILURES]) {
            check_breaker_needed(p, KEY_BREAKER_OPEN_MS, "breaker_open_ms");
            check_breaker_needed(p, KEY_BREAKER_OPEN_MAX_MS,
                                 "breaker_open_max_ms");
        }
        return;
    }
    if (!section->key_bad[KEY_BREAKER_OPEN_MS]
        && !section->key_bad[KEY_BREAKER_OPEN_MAX_MS])
        check_breaker_periods(p);
}

/* Reserves are carved out of this host's limit; a fleet-wide compartment's
 * share of the fleet changes as hosts come and go. One line, on the first
 * reserve. */
static void check_fleet_reserves(struct parser *p)
{
    const struct section *section = &p->section;

    report(p, section->compartment->reserves[0].line, "reserve: cannot be "
           "used with fleet_limit (line %d): this host's share of the fleet "
           "moves under the reserves", section->key_lines[KEY_FLEET_LIMIT]);
}

static void check_reserve_sum(struct parser *p)
{
    const struct bh_compartment *c = p->section.compartment;
    int sum = 0;

    for (int i = 0; i < c->reserve_count; i++)
        sum += c->reserves[i].permits;
    if (sum > c->limit)
        report(p, c->line, "[%s]: reserves add up to %d, more than limit = %d",
               p->section.name, sum, c->limit);
}

/* A connection through a rule heavier than the limit could never be made. */
static void check_weights(struct parser *p)
{
    const struct bh_config *config = p->config;
    int limit = p->section.compartment->limit;

    for (int i = p->section.first_rule; i < config->rule_count; i++) {
        const struct bh_rule *rule = &config->rules[i];
        if (rule->compartment == p->section.index && rule->weight > limit)
            report(p, rule->line, "match: weight=%d is more than limit = %d: "
                   "such a connection could never be made", rule->weight, limit);
    }
}

/* The policy keys against the limit, in a compartment kept in the config.
 * Nothing is checked against a limit that is missing or wrong (already
 * reported), nor against limit = 0: an outage switch that refuses
 * everything must not make the file invalid. */
static void check_policy(struct parser *p)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    bool fleet = c->fleet_limit > 0;
    bool limit_known = section->key_lines[KEY_LIMIT]
        ? !section->key_bad[KEY_LIMIT] : fleet;

    if (fleet && c->reserve_count > 0)
        check_fleet_reserves(p);
    if (!limit_known || c->limit == 0)
        return;
    if (!fleet)
        check_reserve_sum(p);
    check_weights(p);
}

/* The controller's keys where nothing uses them, each on its own line. */
static void check_adaptive_unused(struct parser *p)
{
    static const struct { enum key_id id; const char *key; } keys[] = {
        { KEY_MIN_LIMIT, "min_limit" },
        { KEY_MAX_LIMIT, "max_limit" },
        { KEY_ADAPTIVE_LATENCY_MS, "adaptive_latency_ms" },
    };
    const struct section *section = &p->section;
    int adaptive_line = section->key_lines[KEY_ADAPTIVE];

    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int line = section->key_lines[keys[i].id];
        if (!line || section->key_bad[keys[i].id])
            continue;
        if (adaptive_line)
            report(p, line, "%s: has no effect with adaptive = off (line %d)",
                   keys[i].key, adaptive_line);
        else
            report(p, line, "%s: has no effect without adaptive", keys[i].key);
    }
}

/* min_limit above max_limit, on the line of the one given (max_limit's
 * when both are); a default is said to be one. */
static bool check_adaptive_range(struct parser *p)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    int min_line = section->key_lines[KEY_MIN_LIMIT];
    int max_line = section->key_lines[KEY_MAX_LIMIT];

    if (c->min_limit <= c->max_limit)
        return true;
    if (!max_line)
        report(p, min_line, "min_limit: %d is above max_limit (%d, the default: "
               "4 x limit)", c->min_limit, c->max_limit);
    else if (!min_line)
        report(p, max_line, "max_limit: %d is below min_limit (%d, the default)",
               c->max_limit, c->min_limit);
    else
        report(p, max_line, "max_limit: %d is below min_limit (%d at line %d)",
               c->max_limit, c->min_limit, min_line);
    return false;
}

/* The controller moves the limit between min_limit and max_limit, starting
 * at limit; the reserves stay under it, and it counts connections. */
static void check_adaptive_fits(struct parser *p, bool limit_known)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    int limit_line = section->key_lines[KEY_LIMIT] ? section->key_lines[KEY_LIMIT] : c->line;
    int reserved = 0;

    int min_line = section->key_lines[KEY_MIN_LIMIT];

    if (limit_known && c->limit == 0)
        report(p, limit_line, "limit: 0 refuses everything; adaptive (line %d) "
               "needs a limit to start from", section->key_lines[KEY_ADAPTIVE]);
    else if (limit_known && (c->limit < c->min_limit || c->limit > c->max_limit))
        report(p, limit_line, "limit: %d is outside min_limit to max_limit (%d to "
               "%d): the controller starts at limit", c->limit, c->min_limit,
               c->max_limit);
    for (int i = 0; i < c->reserve_count; i++)
        reserved += c->reserves[i].permits;
    if (reserved > c->min_limit)
        report(p, min_line ? min_line : section->key_lines[KEY_ADAPTIVE],
               "min_limit: %d%s is below the reserves, %d together: the limit never "
               "goes under them", c->min_limit, min_line ? "" : " (the default)",
               reserved);
    for (int i = section->first_rule; i < p->config->rule_count; i++) {
        const struct bh_rule *rule = &p->config->rules[i];
        if (rule->compartment == section->index && rule->weight > 1) {
            report(p, rule->line, "match: weight=%d cannot be used with adaptive "
                   "(line %d): the controller measures connections, the limit "
                   "counts permits", rule->weight, section->key_lines[KEY_ADAPTIVE]);
            return;
        }
    }
}

/* max_limit's default, 4 x limit (at least 1, at most BH_LIMIT_MAX), for
 * every compartment: `bulkhead set NAME adaptive=...` may turn on one
 * whose rules did not. */
static void default_max_limit(struct parser *p)
{
    struct bh_compartment *c = p->section.compartment;

    if (p->section.key_lines[KEY_MAX_LIMIT])
        return;
    c->max_limit = c->limit < BH_LIMIT_MAX / DEFAULT_MAX_LIMIT_FACTOR
        ? DEFAULT_MAX_LIMIT_FACTOR * c->limit : BH_LIMIT_MAX;
    if (c->max_limit < 1)
        c->max_limit = 1;
}

/* After the limit is known (a fleet compartment's defaults to fleet_limit). */
static void check_adaptive(struct parser *p)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    bool limit_known = section->key_lines[KEY_LIMIT]
        ? !section->key_bad[KEY_LIMIT] : c->fleet_limit > 0;

    if (section->key_bad[KEY_ADAPTIVE])
        return;
    if (c->adaptive == BH_ADAPTIVE_OFF) {
        check_adaptive_unused(p);
        return;
    }
    if (c->adaptive == BH_ADAPTIVE_GRADIENT && section->key_lines[KEY_ADAPTIVE_LATENCY_MS]
        && !section->key_bad[KEY_ADAPTIVE_LATENCY_MS])
        report(p, section->key_lines[KEY_ADAPTIVE_LATENCY_MS], "adaptive_latency_ms: "
               "has no effect with adaptive = gradient (line %d), which compares "
               "latency with its own baseline", section->key_lines[KEY_ADAPTIVE]);
    if (section->key_bad[KEY_MIN_LIMIT] || section->key_bad[KEY_MAX_LIMIT] ||
        !check_adaptive_range(p))
        return;
    check_adaptive_fits(p, limit_known);
}

/* A compartment must say how many permits it has and what it covers; its
 * breaker keys must agree even when its header was already reported. */
static void close_section(struct parser *p)
{
    const struct section *section = &p->section;

    if (section->kind != SECTION_COMPARTMENT)
        return;
    check_breaker(p);
    if (section->index < 0)
        return;
    if (!section->key_lines[KEY_LIMIT] && section->compartment->fleet_limit > 0) {
        /* fleet-wide: this host's ceiling is the fleet limit, at most */
        int fleet = section->compartment->fleet_limit;
        section->compartment->limit = fleet < BH_LIMIT_MAX ? fleet : BH_LIMIT_MAX;
    } else if (!section->key_lines[KEY_LIMIT] && !section->key_bad[KEY_FLEET_LIMIT]) {
        report(p, section->compartment->line, "[%s]: limit is required",
               section->name);
    }
    if (!section->key_lines[KEY_MATCH])
        report(p, section->compartment->line, "[%s]: no match rules",
               section->name);
    check_policy(p);
    default_max_limit(p);
    check_adaptive(p);
}

static void begin_section(struct parser *p, enum section_kind kind,
                          const char *name, size_t length)
{
    memset(&p->section, 0, sizeof p->section);
    p->section.kind = kind;
    p->section.index = -1;
    p->section.first_rule = p->config->rule_count;
    snprintf(p->section.name, sizeof p->section.name, "%.*s", (int)length,
             name);
}

/* The section's values go to `compartment`; index -1 keeps them out of the
 * config. */
static void begin_compartment(struct parser *p, const char *name,
                              size_t length, int index)
{
    struct bh_compartment *compartment = index < 0
        ? &p->scratch : &p->config->compartments[index];

    begin_section(p, SECTION_COMPARTMENT, name, length);
    *compartment = (struct bh_compartment) {
        .max_waiters = DEFAULT_MAX_WAITERS,
        .nonblocking_wait_ms = DEFAULT_NONBLOCKING_WAIT_MS,
        .hold_wait_ms = -1,  /* [global]'s, once the whole file is read */
        .refusal_errno = ECONNREFUSED,
        .breaker_open_ms = DEFAULT_BREAKER_OPEN_MS,
        .breaker_open_max_ms = DEFAULT_BREAKER_OPEN_MAX_MS,
        .min_limit = 1,
        .line = p->line,
    };
    snprintf(compartment->name, sizeof compartment->name, "%s",
             p->section.name);
    p->section.compartment = compartment;
    p->section.index = index;
}

static const struct bh_compartment *find_compartment(
    const struct bh_config *config, const char *name)
{
    for (int i = 0; i < config->compartment_count; i++)
        if (strcmp(config->compartments[i].name, name) == 0)
            return &config->compartments[i];
    return NULL;
}

static void begin_global(struct parser *p)
{
    if (p->global_line)
        report(p, p->line, "duplicate section [global] (first at line %d)",
               p->global_line);
    else
        p->global_line = p->line;
    begin_section(p, SECTION_GLOBAL, "global", strlen("global"));
}

/* Room for one more compartment; -1 when out of memory. */
static int grow_compartments(struct parser *p)
{
    struct bh_config *config = p->config;
    int capacity = p->compartment_capacity ? 2 * p->compartment_capacity : 8;
    struct bh_compartment *grown;

    if (config->compartment_count < p->compartment_capacity)
        return 0;
    grown = realloc(config->compartments, capacity * sizeof *grown);
    if (!grown)
        return -1;
    config->compartments = grown;
    p->compartment_capacity = capacity;
    return 0;
}

/* name is valid here, so shorter than BH_NAME_MAX. */
static void begin_named_section(struct parser *p, const char *name,
                                size_t length)
{
    struct bh_config *config = p->config;
    char whole[BH_NAME_MAX];
    const struct bh_compartment *first;

    snprintf(whole, sizeof whole, "%.*s", (int)length, name);
    if (strcmp(whole, "global") == 0) {
        begin_global(p);
        return;
    }
    first = find_compartment(config, whole);
    if (first) {
        report(p, p->line, "duplicate compartment [%s] (first at line %d)",
               whole, first->line);
        begin_compartment(p, name, length, -1);
    } else if (config->compartment_count == BH_MAX_COMPARTMENTS) {
        report(p, p->line, "[%s]: too many compartments (at most %d)", whole,
               BH_MAX_COMPARTMENTS);
        begin_compartment(p, name, length, -1);
    } else if (grow_compartments(p) != 0) {
        report_out_of_memory(p);
        begin_compartment(p, name, length, -1);
    } else {
        begin_compartment(p, name, length, config->compartment_count++);
    }
}

/* After the ']' inih ignores everything; we allow only a comment. */
static bool ends_header(const char *text)
{
    text = skip_space(text);
    return *text == '\0' || *text == ';';
}

/* A line starting with '['. A wrong header still opens a section, kept out
 * of the config, so that the keys under it are checked. */
static void open_section(struct parser *p, const char *header)
{
    const char *name = header + 1;
    const char *close = strchr(name, ']');
    size_t length = close ? (size_t)(close - name) : strcspn(name, "\r\n");

    close_section(p);
    if (!close) {
        report(p, p->line, "syntax error");
    } else if (!ends_header(close + 1)) {
        report(p, p->line, "unexpected text after [%.*s]", (int)length, name);
    } else if (!is_valid_name(name, length)) {
        report(p, p->line, "bad section name \"[%.*s]\" (use 1 to %d of "
               "A-Z a-z 0-9 _ . -)", (int)length, name, BH_NAME_MAX - 1);
    } else {
        begin_named_section(p, name, length);
        return;
    }
    begin_compartment(p, name, length, -1);
}

/* ---- inih's callbacks ---- */

static const struct key_spec *find_key(struct parser *p, const char *key)
{
    for (size_t i = 0; i < sizeof key_specs / sizeof key_specs[0]; i++)
        if (key_specs[i].section == p->section.kind
            && strcmp(key_specs[i].name, key) == 0)
            return &key_specs[i];
    if (p->section.kind == SECTION_NONE)
        report(p, p->line, "%s: appears before any [section]", key);
    else
        report(p, p->line, "unknown key \"%s\" in [%s]", key, p->section.name);
    return NULL;
}

/* Keys a compartment may give more than once, each line adding one. */
static bool is_repeatable(enum key_id id)
{
    return id == KEY_MATCH || id == KEY_RESERVE || id == KEY_BYPASS;
}

/* Checks and stores one key; nonzero when it was fine, as inih expects. */
static int handle_key(void *user, const char *section_name, const char *key,
                      const char *value)
{
    struct parser *p = user;
    const struct key_spec *spec;
    int *first_line;

    (void)section_name;  /* the reader tracks sections, with their lines */
    p->key_handled = true;
    spec = find_key(p, key);
    if (!spec)
        return 0;
    first_line = &p->section.key_lines[spec->id];
    if (*first_line && !is_repeatable(spec->id)) {
        report(p, p->line, "%s: already set at line %d", key, *first_line);
        return 0;
    }
    if (!*first_line)
        *first_line = p->line;
    if (p->section.kind == SECTION_GLOBAL && !p->global_key_lines[spec->id])
        p->global_key_lines[spec->id] = p->line;
    if (value[0] != '\0' && spec->apply(p, key, value) == 0)
        return 1;
    if (value[0] == '\0')
        report(p, p->line, "%s: missing value", key);
    p->section.key_bad[spec->id] = true;
    if (p->section.kind == SECTION_GLOBAL)
        p->global_key_bad[spec->id] = true;
    return 0;
}

/* Runs before the next line is read, so inih is done with this one. */
static void finish_line(struct parser *p)
{
    if (p->expects_key && !p->key_handled)
        report(p, p->line, "syntax error");
    p->expects_key = false;
    p->key_handled = false;
}

/* inih would split a long line and parse the rest as a line of its own, and
 * would stop reading a line at a NUL byte. */
static bool fits_inih(struct parser *p, ssize_t length, int size)
{
    if (length >= size) {
        report(p, p->line, "line too long (the limit is %d characters)",
               size - 2);
        return false;
    }
    if (strlen(p->raw_line) != (size_t)length) {
        report(p, p->line, "line contains a NUL byte");
        return false;
    }
    return true;
}

static char *read_line(char *buffer, int size, void *stream)
{
    struct parser *p = stream;
    const char *start;
    ssize_t length;

    finish_line(p);
    length = getline(&p->raw_line, &p->raw_capacity, p->file);
    if (length < 0) {
        p->read_errno = ferror(p->file) ? errno : 0;
        return NULL;
    }
    p->bytes_read += length;
    if (p->bytes_read > RULES_MAX_BYTES) {
        report(p, 0, "grew past %d MiB while being read", RULES_MAX_BYTES >> 20);
        return NULL;
    }
    p->line++;
    start = p->raw_line;
    if (p->line == 1 && strncmp(start, "\xEF\xBB\xBF", 3) == 0)
        start += 3;  /* a UTF-8 byte order mark, which inih skips too */
    start = skip_space(start);
    if (*start == '[')
        open_section(p, start);
    if (!fits_inih(p, length, size)) {
        strcpy(buffer, "\n");  /* already reported; inih sees a blank */
        return buffer;
    }
    p->expects_key = *start != '\0' && !strchr("[;#", *start);
    memcpy(buffer, p->raw_line, (size_t)length + 1);
    return buffer;
}

/* ---- the API ---- */

/* A lease must outlive two refreshes. Reported on the line of the key
 * given (the lease's when both are), naming the other and where it is; a
 * key whose own value was reported is left out. */
static void check_fleet_lease(struct parser *p)
{
    const struct bh_config *config = p->config;
    int lease_line = p->global_key_lines[KEY_FLEET_LEASE_MS];
    int refresh_line = p->global_key_lines[KEY_FLEET_REFRESH_MS];
    static const char why[] = "a host would lose its share between two refreshes";

    if (p->global_key_bad[KEY_FLEET_LEASE_MS] ||
        p->global_key_bad[KEY_FLEET_REFRESH_MS] ||
        config->fleet_lease_ms >= 2 * config->fleet_refresh_ms)
        return;
    if (!lease_line)
        report(p, refresh_line, "fleet_refresh_ms: %d is more than half of "
               "fleet_lease_ms (%d, the default): %s", config->fleet_refresh_ms,
               config->fleet_lease_ms, why);
    else if (!refresh_line)
        report(p, lease_line, "fleet_lease_ms: %d is less than twice "
               "fleet_refresh_ms (%d, the default): %s", config->fleet_lease_ms,
               config->fleet_refresh_ms, why);
    else
        report(p, lease_line, "fleet_lease_ms: %d is less than twice "
               "fleet_refresh_ms (%d at line %d): %s", config->fleet_lease_ms,
               config->fleet_refresh_ms, refresh_line, why);
}

/* A sentinels' password without sentinels to give it to; not when fleet =
 * was given but wrong, which is its own error. */
static void check_sentinel_password(struct parser *p)
{
    const struct bh_config *config = p->config;
    char why[256];
    if (!config->fleet_sentinel_password_file || p->global_key_bad[KEY_FLEET])
        return;
    if (!config->fleet_url || fleet_url_sentinels(p, config->fleet_url, why,
                                                  sizeof why) == 0)
        report(p, config->fleet_sentinel_password_file_line,
               "fleet_sentinel_password_file: needs fleet = "
               "redis-sentinel://HOST[:PORT],.../MASTER in [global]");
}

/* The fleet's keys against each other, once the whole file is read: a
 * [global] may come after the compartments. fleet_limit without a fleet is
 * reported on each fleet_limit line (check sorts them into place); not when
 * fleet = was given but wrong, which is its own error. */
static void check_fleet(struct parser *p)
{
    struct bh_config *config = p->config;
    if (!config->fleet_url && !p->global_key_lines[KEY_FLEET])
        for (int i = 0; i < p->fleet_limit_count; i++)
            report(p, p->fleet_limit_lines[i], "fleet_limit: needs fleet = "
                   "redis://HOST:PORT in [global]");
    check_fleet_lease(p);
    check_sentinel_password(p);
    if (config->fleet_url && !config->fleet_host[0])
        bh_fleet_default_host(config->fleet_host, sizeof config->fleet_host);
    if (!config->fleet_name[0])
        snprintf(config->fleet_name, BH_NAME_MAX, "%s", config->namespace_name);
}

/* [global] may come after the compartments: its default is given out last. */
static void inherit_hold_wait(struct bh_config *config)
{
    for (int i = 0; i < config->compartment_count; i++)
        if (config->compartments[i].hold_wait_ms < 0)
            config->compartments[i].hold_wait_ms = config->hold_wait_ms;
}

static void parse_file(struct parser *p)
{
    int inih_error_line;

    /* inih's settings are globals, hidden inside our object: set them
     * every time rather than trust a default. */
    ini_allow_multiline = false;  /* an indented stray line is an error */
    ini_stop_on_first_error = false;
    ini_allow_no_value = false;
    ini_max_line = LINE_BUFFER_SIZE;
    inih_error_line = ini_parse_stream(read_line, p, handle_key, p);
    finish_line(p);
    close_section(p);
    check_fleet(p);
    inherit_hold_wait(p->config);
    if (p->read_errno)
        report(p, 0, "cannot read: %s", strerror(p->read_errno));
    /* Only if the reader's idea of a line ever differs from inih's. */
    if (inih_error_line > 0 && !was_reported(p, inih_error_line))
        report(p, inih_error_line, "syntax error");
}

static const char *file_kind(mode_t mode)
{
    return S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket"
         : S_ISDIR(mode) ? "a directory" : "not a regular file";
}

/* The rules must be a regular file of at most RULES_MAX_BYTES, opened
 * without blocking: a FIFO would stop every program before main, and a
 * device such as /dev/zero never ends. */
static FILE *open_rules(struct parser *p, const char *path)
{
    int fd = libc_open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0);
    if (fd < 0) {
        report(p, 0, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat info;
    FILE *file = NULL;
    if (fstat(fd, &info) < 0)
        report(p, 0, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(info.st_mode))
        report(p, 0, "is %s, not a regular file", file_kind(info.st_mode));
    else if (info.st_size > RULES_MAX_BYTES)
        report(p, 0, "is %lld bytes; a rules file may be at most %d MiB",
               (long long)info.st_size, RULES_MAX_BYTES >> 20);
    else if (!(file = fdopen(fd, "r")))
        report(p, 0, "cannot read: %s", strerror(errno));
    if (!file)
        libc_close(fd);
    return file;
}

static void set_defaults(struct bh_config *config)
{
    memset(config, 0, sizeof *config);
    config->log_level = BH_LOG_WARN;
    snprintf(config->namespace_name, BH_NAME_MAX, "%s", "default");
    config->fleet_refresh_ms = DEFAULT_FLEET_REFRESH_MS;
    config->fleet_lease_ms = DEFAULT_FLEET_LEASE_MS;
    config->fleet_fallback = -1;
    config->fleet_fallback_ms = DEFAULT_FLEET_FALLBACK_MS;
}

int bh_config_load(const char *path, struct bh_config *config,
                   bh_config_error_fn on_error, void *ctx)
{
    struct parser p = {
        .path = path, .config = config, .on_error = on_error, .ctx = ctx,
    };

    set_defaults(config);
    config->path = strdup(path);
    if (!config->path) {
        report_out_of_memory(&p);
        return p.error_count;
    }
    p.file = open_rules(&p, path);
    if (!p.file)
        return p.error_count;
    parse_file(&p);
    libc_fclose(p.file);
    free(p.raw_line);
    free(p.error_lines);
    return p.error_count;
}

void bh_config_free(struct bh_config *config)
{
    for (int i = 0; i < config->rule_count; i++) {
        free(config->rules[i].hostname);
        free(config->rules[i].text);
    }
    free(config->rules);
    free(config->compartments);
    free(config->log_file);
    free(config->fleet_url);
    free(config->fleet_password_file);
    free(config->fleet_sentinel_password_file);
    free(config->path);
    memset(config, 0, sizeof *config);
}
