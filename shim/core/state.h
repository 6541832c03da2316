/* The shim's process-wide state: config and rule index; the namespaces
 * are joined.h's. Defined in state.c; written once by start-up (shim.c,
 * under pthread_once); read by the rest of core,
 * which never starts the shim itself (that is shim.h's bh_shim_active,
 * for hooks and the gate). */
#ifndef BH_STATE_H
#define BH_STATE_H

#include <stdatomic.h>

#include "admission/admission.h"
#include "config/config.h"
#include "core/joined.h"
#include "permits/permits.h"
#include "rules/rule_index.h"

enum bh_shim_status { BH_SHIM_STARTING, BH_SHIM_ACTIVE, BH_SHIM_OFF };
/* What a connect does first: 0 until status is known (or when it is off),
 * then plain (rules in force), or observing (rules in force, and every
 * TCP connect recorded: core/observe.h). */
enum bh_shim_gate { BH_SHIM_GATE_NONE, BH_SHIM_GATE_PLAIN, BH_SHIM_GATE_OBSERVING };

struct bh_shim {
    _Atomic int status;
    /* The connect gate's one test (enum bh_shim_gate), written once, just
     * before status (both release): one who reads status set reads it. */
    _Atomic int gate;
    struct bh_config config;
    struct bh_rule_index *rules;
    /* config compartment i: the watch bits its connections start with,
     * but a probe's (bh_outcome_watch, worked out once at start-up) */
    uint32_t watch[BH_MAX_COMPARTMENTS];
    /* under `bulkhead run`'s seccomp supervisor, with rules: set once at
     * start-up, as the marked calls are (libc.h) */
    int supervised;
    /* Calls that may change the euid (hooks/credentials.c) under way, and
     * how many ended (a futex word): while one is under way, siblings
     * already run as the new uid but connects still count in the old
     * uid's namespace, which refuses them (EACCES); such a connect waits
     * for the call to end and asks again (bh_shim_uid_settled). Written
     * with atomics by the calling thread before and after the call. */
    _Atomic int uid_changes_under_way;
    _Atomic uint32_t uid_changes_ended;
};

/* Hidden, as the whole shim is: read straight, not through the GOT. */
extern struct bh_shim bh_shim __attribute__((visibility("hidden")));

/* The rules of a connection's compartment, by its place (joined.h). */
static inline const struct bh_compartment *bh_rules_of(int place)
{
    const struct bh_joined *joined = bh_joined_of(place);
    return &bh_shim.config.compartments[joined->local_index[bh_index_of(place)]];
}

#endif
