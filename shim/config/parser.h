/* What the rules file's parser shares between its files, lowest first:
 * config_report.c (reporting, names, numbers); the key files
 * config_global.c, config_compartment.c, config_policy.c and
 * config_match.c, each with its table of keys; config_sections.c (opening
 * and closing sections); config_parse.c (inih's callbacks and the API).
 * Each file calls only those before it. */
#ifndef BH_CONFIG_PARSER_H
#define BH_CONFIG_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "config/config.h"

enum {
    LINE_BUFFER_SIZE = 1024,   /* inih's line buffer: text, newline, NUL */
    MESSAGE_SIZE = 8192,
    RULES_MAX_BYTES = 4 << 20, /* a rules file is text an operator wrote */
    WAIT_MS_MAX = 3600000,
    MAX_WAITERS_MAX = 1000000,
    DEFAULT_MAX_WAITERS = 64,
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
    KEY_LOG, KEY_LOG_FILE, KEY_SYSLOG_SOCKET, KEY_NAMESPACE, KEY_ON_FAILURE,
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
    KEY_TURNAROUND, KEY_MODE, KEY_OBSERVE,
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

/* Reporting: one "PATH:LINE: ..." line each, through the caller's error
 * function; was_reported tells whether a line already had one. */
bool was_reported(const struct parser *p, int line);
void report(struct parser *p, int line, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
void report_out_of_memory(struct parser *p);

/* Names and whole numbers. */
bool is_name_char(char c);
bool is_digit(char c);
char to_lower(char c);
const char *skip_space(const char *text);
bool is_valid_name(const char *name, size_t length);
enum number_status { NUMBER_OK, NUMBER_NOT_WHOLE, NUMBER_TOO_BIG };
enum number_status parse_whole(const char *text, long max, long *number);
int set_number(struct parser *p, const char *key, const char *value,
               int min, int max, int *field);
int set_yes_no(struct parser *p, const char *key, const char *value, int *out);

/* Each key file's keys. */
extern const struct key_spec bh_global_keys[], bh_compartment_keys[],
    bh_policy_keys[], bh_match_keys[];
extern const size_t bh_global_keys_count, bh_compartment_keys_count,
    bh_policy_keys_count, bh_match_keys_count;

/* The fleet's keys checked together, once the whole file is read. */
void check_fleet(struct parser *p);

/* Sections: a header line opens one; close_section ends the open one,
 * checking what its keys mean together. */
void open_section(struct parser *p, const char *header);
void close_section(struct parser *p);

#endif
