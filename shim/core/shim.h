/* Start-up: the shim's state (state.h) filled in once per program image,
 * and again when the effective uid changes. */
#ifndef BH_SHIM_H
#define BH_SHIM_H

#include "core/state.h"

void bh_shim_start(void);

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

/* Around a call that may change the effective uid (hooks/credentials.c):
 * before, the log file is held open; after, with the call's result, the
 * process joins the new uid's namespace if its euid changed. */
void bh_shim_before_uid_change(void);
void bh_shim_after_uid_change(int rc);

/* _Fork: the real one with the handlers fork() runs around it, so that
 * its child's copies are counted as a fork's. */
pid_t bh_shim_fork_bare(void);

/* The namespace refused a connect with EACCES: waits (up to a second)
 * for a uid change under way to end; nonzero when one the shim saw
 * explains the refusal (the namespace is now the euid's, or a change is
 * still under way): the connect asks again. 0: the euid changed behind
 * the shim's back (a raw syscall). Rare path only. */
int bh_shim_uid_settled(void);

#endif
