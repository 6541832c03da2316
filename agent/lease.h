/* The agent's side of the lease protocol: one Redis connection, and one
 * atomic script call (lease.lua) per compartment per refresh. */
#ifndef BH_AGENT_LEASE_H
#define BH_AGENT_LEASE_H

#include <stddef.h>

#include "config/config.h"

struct bh_lease_client;

/* What one lease call reported. */
struct bh_lease_reply {
    int grant;       /* this host's share */
    int fleet_in_use;
    int hosts;       /* hosts, this one and the silent ones included */
    int learning;    /* Redis restarted: granted no more than held */
    int limit;       /* the fleet limit in force (set --fleet overrides the file) */
    int owed;        /* more of this host's fair share is coming as others shrink */
    int fallback;    /* what this host falls to should it lose Redis now:
                        Redis keeps it reserved for fleet_fallback_ms past
                        the lease (and a refresh of margin) */
};

/* What one host tells Redis in a lease call. */
struct bh_lease_report {
    int want;           /* in use + waiting + recent refusals: what it would use */
    int holding;        /* in use */
    int previous_grant; /* the last grant; 1 if it was 0 but Redis has granted a
                           lease before: a Redis that lost its leases must know
                           that hosts may hold grants from before it (learning
                           mode), even when the first to come back holds none */
    int headroom;       /* room to grow beyond want, granted only from capacity
                           no other host wants */
};

/* Connects (AUTH, SELECT, SCRIPT LOAD) within timeout_ms, to the Redis of
 * fleet = redis://, or to the master the sentinels name (asked in turn,
 * together within timeout_ms, each within 100 ms at least; it must say
 * ROLE master, within timeout_ms). NULL with a one-line reason in why when
 * it cannot. */
struct bh_lease_client *bh_lease_connect(const struct bh_config *config,
                                         int timeout_ms, char *why, size_t whylen);
/* "HOST:PORT" of the Redis it speaks to. */
const char *bh_lease_where(const struct bh_lease_client *client);
void bh_lease_close(struct bh_lease_client *client);

/* The most a fleet limit may be: as fleet_limit in the rules file and
 * `bulkhead set --fleet`. */
enum { BH_LEASE_LIMIT_MAX = 1000000 };

enum bh_lease_result {
    BH_LEASE_OK,
    BH_LEASE_DOWN = -1,   /* no answer, or no master any more (READONLY...):
                             close it; the next connect asks the sentinels */
    BH_LEASE_REFUSED = 1, /* Redis answered, with an error or bad data (the
                             script failed, a bad fleet limit): the
                             connection is fine, keep it */
};

/* One lease call for a compartment: a bh_lease_result, with why unless
 * BH_LEASE_OK. */
int bh_lease_call(struct bh_lease_client *client, const struct bh_config *config,
                  const struct bh_compartment *compartment,
                  const struct bh_lease_report *report, struct bh_lease_reply *reply,
                  char *why, size_t whylen);

/* The script's answer, checked (bh_lease_call's last step): a value out of
 * range (bad data in Redis that got past the script, or a script of
 * another version) must not become a limit, nor 0, which would make the
 * compartment no fleet compartment at all. 0, or -1 with why. */
struct redisReply;
int bh_lease_read_reply(const struct redisReply *reply, const char *meta,
                        struct bh_lease_reply *out, char *why, size_t whylen);

/* `bulkhead set --fleet NAME limit=N`: the fleet limit every agent uses
 * from its next refresh, over the rules file's. */
int bh_lease_set_limit(struct bh_lease_client *client, const struct bh_config *config,
                       const char *compartment, int limit, char *why, size_t whylen);

#endif
