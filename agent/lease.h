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
    int hosts;       /* live hosts, this one included */
    int learning;    /* Redis restarted: granted no more than held */
    int limit;       /* the fleet limit in force (set --fleet overrides the file) */
};

/* Connects (AUTH, SELECT, SCRIPT LOAD) within timeout_ms. NULL with a
 * one-line reason in why when it cannot. */
struct bh_lease_client *bh_lease_connect(const struct bh_config *config,
                                         int timeout_ms, char *why, size_t whylen);
void bh_lease_close(struct bh_lease_client *client);

/* One lease call for a compartment. 0, or -1 with why (the connection is
 * then unusable: close it and connect again later). */
int bh_lease_call(struct bh_lease_client *client, const struct bh_config *config,
                  const struct bh_compartment *compartment, int want, int holding,
                  int previous_grant, struct bh_lease_reply *reply,
                  char *why, size_t whylen);

/* `bulkhead set --fleet NAME limit=N`: the fleet limit every agent uses
 * from its next refresh, over the rules file's. */
int bh_lease_set_limit(struct bh_lease_client *client, const struct bh_config *config,
                       const char *compartment, int limit, char *why, size_t whylen);

#endif
