/* bulkhead agent: one per host; leases this host's share of each fleet
 * compartment from Redis and makes it the host's live limit.
 *
 * What is shared, and who writes it:
 *   - Redis (lease.lua): every host's lease of every fleet compartment,
 *     and the totals over them; written only by the script, atomically,
 *     one call per host per compartment per refresh, and a few early ones
 *     while shares move (ask_early in agent.c).
 *   - The namespace (shim/permits): the live limit, written here through
 *     bh_compartment_set_limit as `bulkhead set` does (raising frees
 *     permits at once, lowering retires them as connections end); and the
 *     fleet figures (bh_compartment_set_fleet), which `stat` and /metrics
 *     read. Connects never wait on anything here: they take local permits.
 *   - This process: struct agent, written by the main loop only. The
 *     metrics thread reads the namespace, not this struct.
 *
 * When the agent dies, its lease in Redis runs out, Redis keeps its
 * fallback share reserved for fleet_fallback_ms (it cannot tell a dead
 * agent from one cut off from it), and then the other hosts take it; so
 * that this host stops using its share by then, the agent renews a lease
 * in the namespace too (fleet.lease_until_ns: the grant's lease, or in
 * fallback never past the fallback's end), and the first connect after it
 * lapses lowers the limit to 0. */
#ifndef BH_AGENT_H
#define BH_AGENT_H

#include <stdint.h>

#include "config/config.h"
#include "lease.h"
#include "permits/permits.h"

enum { PEAK_SECONDS = 60 };  /* how long a host keeps the room it needed */

struct fleet_compartment {
    const struct bh_compartment *rules;
    int index;                 /* in the namespace */
    int grant;                 /* last granted (or fallen back to) */
    int hosts_seen;            /* live hosts at the last answer */
    int64_t lease_until_ns;    /* our copy of the lease: from when we asked */
    int fallback_share;        /* what Redis reserves for us once the lease
                                  ends without it (its last answer's) */
    int64_t fallback_until_ns; /* and until when: fleet_fallback_ms past
                                  our lease; then 0 until Redis answers */
    int64_t next_refresh_ns;
    int64_t last_refresh_ns;
    enum bh_fleet_state state;
    int fallback_said;         /* this outage's lines logged: 1 the fallback's,
                                  2 its end's (or no lease yet) */
    char refused_said[512];    /* Redis's last error for it, logged; "": none */
    uint64_t refusals_seen;    /* rejected + timed_out at the last refresh */
    int64_t recent_refusals;   /* refusals counted as demand, halving each refresh */
    int peak_want[PEAK_SECONDS];  /* the most wanted in each second of the last
                                     minute, by second % PEAK_SECONDS */
    int64_t peak_second[PEAK_SECONDS];  /* which second (monotonic) each holds */
    int told_want;             /* want and holding at the last lease call */
    int told_holding;
    int owed;                  /* Redis said more of our share is coming */
    int owed_stalled;          /* and the last call brought none of it */
    int leased_before;         /* Redis has answered a lease call of it */
};

struct agent {
    struct bh_config config;
    struct bh_namespace ns;
    struct fleet_compartment fleet[BH_MAX_COMPARTMENTS];
    int count;                 /* 0: no fleet; the agent only serves /metrics */
    struct bh_lease_client *redis;
    int64_t next_connect_ns;
    char outage_said[512];     /* why Redis was out of reach, as last logged
                                  (a line each time it changes); "": it answers */
    int via_sentinels;         /* fleet = redis-sentinel:// */
    char master[300];          /* HOST:PORT last connected to; "": none yet */
    int64_t new_master_until_ns;  /* a failover's learning: no grant past
                                     what is held until then (agent.c) */
    int verbose;
};

#endif
