/* The shim's process-wide state: config, rule index, namespace. Written
 * once by bh_shim_start() (under pthread_once), read-only afterwards. */
#ifndef BH_SHIM_H
#define BH_SHIM_H

#include <stdatomic.h>

#include "admission/admission.h"
#include "config/config.h"
#include "fdtable/fd_table.h"
#include "permits/permits.h"
#include "rules/rule_index.h"

#define BH_EXPORT __attribute__((visibility("default")))

enum bh_shim_status { BH_SHIM_STARTING, BH_SHIM_ACTIVE, BH_SHIM_OFF };

struct bh_shim {
    _Atomic int status;
    struct bh_config config;
    struct bh_rule_index *rules;
    struct bh_namespace ns;
    /* config compartment i -> its index in the namespace, -1 if unregistered,
     * BH_SHARED_UNREACHABLE when the namespace cannot be reached and
     * on_failure is closed */
    int shared_index[BH_MAX_COMPARTMENTS];
    /* namespace index -> config compartment i, -1 when not in our rules */
    int local_index[BH_MAX_COMPARTMENTS];
    /* config compartment i: what this program image is in it, fixed for
     * the image's life */
    struct bh_membership membership[BH_MAX_COMPARTMENTS];
};

extern struct bh_shim bh_shim;

void bh_shim_start(void);

/* Around a call that may change the effective uid (hooks/credentials.c):
 * before, the log file is held open; after, with the call's result, the
 * process joins the new uid's namespace if its euid changed. */
void bh_shim_before_uid_change(void);
void bh_shim_after_uid_change(int rc);

/* A connection ended: its permit goes back, and its probe slot if it
 * still held one; its hold time is counted. Async-signal-safe (outcome.c). */
void bh_connection_ended(struct bh_fd_ended ended);

/* What every path that can end a connection calls with what the fd table
 * returned; inline, since nearly always nothing ended. */
static inline void bh_give_back(struct bh_fd_ended ended)
{
    if (ended.compartment >= 0)
        bh_connection_ended(ended);
}

/* The rules of namespace compartment `shared` (registered by us). */
static inline const struct bh_compartment *bh_rules_of(int shared)
{
    return &bh_shim.config.compartments[bh_shim.local_index[shared]];
}

/* Nonzero when rules are in force. Starts the shim on first use. */
static inline int bh_shim_active(void)
{
    int status = atomic_load_explicit(&bh_shim.status, memory_order_acquire);
    if (__builtin_expect(status == BH_SHIM_STARTING, 0)) {
        bh_shim_start();
        status = atomic_load_explicit(&bh_shim.status, memory_order_acquire);
    }
    return status == BH_SHIM_ACTIVE;
}

/* A normal exit (see exit.c): closes every counted connection, then gives
 * its permit back; flushes stdio output pending on them first if asked. */
void bh_exit_close_connections(int flush_streams);

/* Exec hand-off: what the next program image must know about our permits. */
#define BH_HANDOFF_VARIABLE "BULKHEAD_HANDOFF"
/* What an exec hands to the next image: the environment to exec with,
 * "BULKHEAD_HANDOFF=..." in place of any old one, in a mapping of its own. */
struct bh_handoff {
    void *mapping;
    unsigned long mapped;
    char **envp;
};
/* 1 with handoff->envp set, or 0 when there is nothing to hand off. No
 * malloc, little stack: exec may run in a signal handler. */
int bh_handoff_encode(struct bh_handoff *handoff, char *const envp[]);
/* After a failed exec. */
void bh_handoff_release(struct bh_handoff *handoff);
void bh_handoff_adopt(void);

#endif
