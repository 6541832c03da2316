/* The parsed form of rules.ini, shared by the shim and the bulkhead command.
 *
 * bh_config_load() reads one file with inih and validates every key. It
 * never stops at the first problem: each error is handed to the caller's
 * callback as one line ("rules.ini:12: limit: \"twenty\" is not a whole
 * number"), so `bulkhead check` can list them all and the shim can log the
 * first and run unlimited. */
#ifndef BH_CONFIG_H
#define BH_CONFIG_H

#include <stdint.h>
#include <sys/types.h>

#include "policy/who.h"

enum {
    BH_MAX_COMPARTMENTS = 1024, /* per namespace; sized into the shared state */
    BH_NAME_MAX = 48,          /* compartment and namespace names, with NUL */
    BH_FLEET_HOST_MAX = 64,    /* fleet_host, with NUL */
    BH_MAX_RESERVES = 4,       /* reserve = lines per compartment */
    BH_MAX_BYPASSES = 8,       /* bypass = lines per compartment */
    BH_LIMIT_MAX = 32767,      /* SEMVMX: the most a SysV semaphore holds */
    BH_FLEET_LIMIT_MAX = 1000000,
};

struct bh_reserve {
    struct bh_who who;
    int permits;           /* >= 1 */
    int line;
};

enum bh_log_level { BH_LOG_ERROR, BH_LOG_WARN, BH_LOG_INFO, BH_LOG_DEBUG };

/* adaptive = (shim/adaptive): off, or the controller that moves the limit. */
enum bh_adaptive_mode { BH_ADAPTIVE_OFF, BH_ADAPTIVE_GRADIENT, BH_ADAPTIVE_AIMD };

/* mode =: enforce decides and acts; shadow decides as enforce would, lets
 * every connect through and counts what enforce would have done. -1 in a
 * compartment: [global]'s, once the whole file is read. */
enum bh_mode { BH_MODE_ENFORCE, BH_MODE_SHADOW };

enum bh_rule_kind {
    BH_RULE_ADDRESS,     /* literal address or CIDR, v4 or v6 */
    BH_RULE_HOSTNAME,    /* exact name, matched through what the process resolved */
    BH_RULE_HOST_SUFFIX, /* "*.example.com": any name ending in ".example.com" */
};

struct bh_rule {
    enum bh_rule_kind kind;
    int family;            /* AF_INET or AF_INET6 for BH_RULE_ADDRESS */
    uint8_t address[16];   /* network byte order, host bits already zeroed */
    int prefix_len;        /* 32/128 for a single address */
    char *hostname;        /* lower case, no trailing dot; for suffix rules
                              the part after "*", e.g. ".example.com" */
    uint16_t port_lo, port_hi; /* "*" is 0-65535 */
    int compartment;       /* index into bh_config.compartments */
    int line;              /* line of the match = in the file */
    int weight;            /* permits a connection through it takes (1) */
    char *text;            /* the destination as written, for explain/check */
};

struct bh_compartment {
    char name[BH_NAME_MAX];
    int limit;             /* permits; 0 refuses everything */
    int wait_ms;           /* 0 = fail fast */
    int hold_wait_ms;      /* the most a process already holding permits of
                              the compartment waits for more: waiting while
                              holding deadlocks a fleet of such processes */
    int max_waiters;
    int refusal_errno;     /* ECONNREFUSED, ETIMEDOUT, EAGAIN or EHOSTUNREACH */
    /* Deadlines and the circuit breaker; 0 = off. */
    int connect_timeout_ms;  /* >= 1000: TCP_USER_TIMEOUT acts at SYN retransmits */
    int io_timeout_ms;       /* blocking receives; unacknowledged data */
    int breaker_failures;    /* consecutive failures that open the breaker */
    int breaker_open_ms;     /* first open period (default 5000) */
    int breaker_open_max_ms; /* doubling stops here (default 60000) */
    int fleet_limit;         /* > 0: fleet-wide on Redis; then
                                `limit` is this host's ceiling, by default
                                fleet_limit, and the shim starts it at 0
                                until the agent grants a share */
    /* Policy inside the compartment. */
    int per_process;       /* permits one process may hold; 0 = no cap */
    struct bh_reserve reserves[BH_MAX_RESERVES]; /* in file order */
    int reserve_count;
    struct bh_who bypasses[BH_MAX_BYPASSES];
    int bypass_count;
    /* Adaptive limits: `limit` is where the controller starts. */
    enum bh_adaptive_mode adaptive;
    int min_limit;         /* default 1 */
    int max_limit;         /* default 4 x limit, at most 32767 */
    int adaptive_latency_ms; /* aimd: a window's mean latency over it backs
                                off; 0 (default): drops only */
    /* Two bytes, so that a compartment stays 1,024 bytes: the matched
     * path indexes the table, and a power of two is a shift. */
    unsigned char turnaround; /* 1: measure send-to-answer time on its
                                 connections (sampled; costs each send and
                                 receive) */
    signed char mode;      /* enum bh_mode: where the namespace starts it */
    int line;              /* line of the [section] header */
};

/* Whether the compartment's connections measure turnaround: the one place
 * that decides, for the shim and the command alike. */
static inline int bh_compartment_turnaround(const struct bh_compartment *compartment)
{
    return compartment->turnaround;
}

/* Turnaround counts every exchange and times the first of each connection
 * and then one in BH_TURNAROUND_EVERY (a power of two that divides 2^16;
 * why 32: core/outcome.c). */
enum { BH_TURNAROUND_EVERY = 32 };

/* A retired key the file still gives: accepted whatever its value, so
 * that an old rules file loads as ever, and meaning nothing; `bulkhead
 * check` warns about each. */
struct bh_retired_key {
    char key[32];
    int line;
};

struct bh_config {
    char *path;
    enum bh_log_level log_level;
    char *log_file;        /* NULL means stderr; "syslog": the syslog socket */
    char *syslog_socket;   /* NULL means /dev/log */
    char namespace_name[BH_NAME_MAX];
    /* on_failure = open: run unlimited when the namespace's shared state
     * is out of reach; 0 (closed, the default): refuse what the rules
     * match until it is reachable */
    int on_failure_open;
    int observe;           /* 1: record every outbound destination (discover) */
    struct bh_compartment *compartments; /* compartment_count of them */
    int compartment_count;
    struct bh_rule *rules; /* in file order: the first match wins */
    int rule_count;
    int hold_wait_ms;      /* [global]: for compartments that give none */
    signed char mode;      /* [global]: enum bh_mode, for compartments that give none */
    /* The fleet: read by `bulkhead agent`; the shim only uses
     * fleet_limit's compartments' starting limit. */
    char *fleet_url;            /* redis:// or redis-sentinel://; NULL: no fleet */
    char fleet_host[BH_FLEET_HOST_MAX];   /* default: the hostname */
    char fleet_name[BH_NAME_MAX];  /* the fleet's name in Redis; default:
                                      the namespace */
    char *fleet_password_file;  /* Redis's; NULL: no AUTH */
    int fleet_password_file_line;  /* for check's lines about the file */
    char *fleet_sentinel_password_file;  /* the sentinels'; NULL: no AUTH */
    int fleet_sentinel_password_file_line;
    int fleet_refresh_ms;       /* default 1000 */
    int fleet_lease_ms;         /* default 10000; >= 2 x fleet_refresh_ms */
    int fleet_fallback;         /* -1 (default): fleet_limit / hosts last seen */
    int fleet_fallback_ms;      /* how long past the lease; default 300000 */
    struct bh_retired_key *retired;  /* in file order */
    int retired_count;
};

/* A parsed `fleet =` URL: one Redis (redis://HOST:PORT[/DB]), or the
 * sentinels that name its master
 * (redis-sentinel://HOST[:PORT],.../MASTER[/DB]). */
enum {
    BH_FLEET_SENTINELS_MAX = 8,
    BH_FLEET_SENTINEL_PORT = 26379,   /* Sentinel's own default */
    BH_FLEET_MASTER_MAX = 64,         /* a master name, with NUL */
};
struct bh_fleet_endpoint {
    char host[256];
    int port;
};
struct bh_fleet_address {
    char host[256];          /* redis:// */
    int port;
    int db;                  /* both forms */
    int sentinel_count;      /* redis-sentinel://; 0 for redis:// */
    struct bh_fleet_endpoint sentinels[BH_FLEET_SENTINELS_MAX];
    char master[BH_FLEET_MASTER_MAX];
};
/* Parses either form; 0, or -1 with what is wrong in why ("has no port",
 * ...). */
int bh_fleet_url_parse(const char *url, struct bh_fleet_address *address,
                       char *why, unsigned long whylen);
/* The machine's host name, characters a fleet_host may not hold made '-'. */
void bh_fleet_default_host(char *out, unsigned long outlen);

/* Called once per error with a complete line, without a trailing newline. */
typedef void (*bh_config_error_fn)(void *ctx, const char *message);

/* Parses `path` into `config`. Returns the number of errors (0 = valid).
 * On errors the config may be partly filled; free it either way. */
int bh_config_load(const char *path, struct bh_config *config,
                   bh_config_error_fn on_error, void *ctx);
void bh_config_free(struct bh_config *config);

/* Finds the rules file: $BULKHEAD_CONFIG, else $XDG_CONFIG_HOME/bulkhead/
 * rules.ini (default ~/.config/bulkhead/rules.ini), else
 * /etc/bulkhead/rules.ini. In a secure-execution process (AT_SECURE) the
 * environment is not trusted and only /etc is looked at. Writes the path
 * into buf and returns 0 when a file exists there, -1 when none does.
 * A relative $BULKHEAD_CONFIG comes back joined to the working directory. */
int bh_config_locate(char *buf, unsigned long buflen);
/* A relative $BULKHEAD_CONFIG becomes `located`, the absolute path
 * bh_config_locate gave: every child started after a chdir() ("cd /" in
 * an init script, a daemon's chdir("/") before its workers) finds the same
 * file. Called once, at start-up, before the program runs. */
void bh_config_hand_down(const char *located);

/* Name <-> value helpers shared with the command's output. The *_name
 * functions return "unknown" for values they do not know; parse returns 0,
 * or -1 leaving *level unchanged. */
const char *bh_errno_name(int err);
const char *bh_log_level_name(enum bh_log_level level);
int bh_log_level_parse(const char *text, enum bh_log_level *level);
const char *bh_adaptive_mode_name(enum bh_adaptive_mode mode);
int bh_adaptive_mode_parse(const char *text, enum bh_adaptive_mode *mode);
const char *bh_mode_name(enum bh_mode mode);
int bh_mode_parse(const char *text, enum bh_mode *mode);

#endif
