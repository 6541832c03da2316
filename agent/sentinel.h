/* Redis Sentinel, asked for the address of the fleet's Redis master. The
 * agent asks each sentinel of fleet = redis-sentinel://... in turn (lease.c)
 * on every (re)connect: after a failover, the sentinels name the promoted
 * replica. */
#ifndef BH_AGENT_SENTINEL_H
#define BH_AGENT_SENTINEL_H

#include <stddef.h>

#include "config/config.h"

enum bh_sentinel_answer {
    BH_SENTINEL_NAMED,     /* it names the master's address */
    BH_SENTINEL_UNKNOWN,   /* it answers, but monitors no master by that name */
    BH_SENTINEL_DOWN,      /* no answer, a refused password, not a sentinel */
};

/* SENTINEL get-master-addr-by-name, on a connection of its own made and
 * closed within timeout_ms; password: NULL for no AUTH. The address in
 * *master when BH_SENTINEL_NAMED; else why (for the others). */
enum bh_sentinel_answer bh_sentinel_ask(const struct bh_fleet_endpoint *sentinel,
                                        const char *name, const char *password,
                                        int timeout_ms, struct bh_fleet_endpoint *master,
                                        char *why, size_t whylen);

#endif
