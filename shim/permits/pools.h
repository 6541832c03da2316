/* pools.c's common paths, inline so that the take (take.c) pays no
 * call for them: a take from the common pool when nothing is owed, and
 * its give-back. Everything else (reserves, debts, a full pool, waiting)
 * is pools.c's, out of line. What the semaphores and hints mean is at the
 * top of pools.c; only shim/permits includes this. */
#ifndef BH_PERMITS_POOLS_H
#define BH_PERMITS_POOLS_H

#include <errno.h>
#include <stdatomic.h>
#include <sys/ipc.h>
#include <sys/sem.h>

#include "libc/semop.h"
#include "permits/holders.h"
#include "permits/layout.h"

/* What a take got, and whether the holders hint ran past what the
 * semaphores count (a killed holder's record not reaped yet: the caller
 * reaps). ask->reserve is the reserve to take from: the caller's own,
 * unless it still holds permits of another. */
struct bh_grant {
    struct bh_taken taken;
    int hint_stale;
};

/* pools.c, out of line: a try that is not the common case, one that
 * found the common pool full (errno says so), a grant that may be a new
 * peak, and a give-back that is not the common case. */
enum bh_acquire_result bh_pools_try_slowly(struct bh_namespace *ns,
                                           const struct bh_permit_ask *ask,
                                           struct bh_grant *grant, int saved_errno);
enum bh_acquire_result bh_pools_try_full(struct bh_namespace *ns,
                                         const struct bh_permit_ask *ask,
                                         struct bh_grant *grant, int saved_errno);
/* Shadow mode, after the take enforce would make found the pool full:
 * ask->weight permits of the headroom, from the common pool (SEM_UNDO),
 * counted in use as any grant; BH_REJECTED once the headroom is used up,
 * or gone (switched to enforce). */
enum bh_acquire_result bh_pools_take_past(struct bh_namespace *ns,
                                          const struct bh_permit_ask *ask,
                                          struct bh_grant *grant);
void bh_pools_raise_peak(struct bh_namespace *ns, int index, int64_t hint,
                         struct bh_grant *grant);
int bh_pools_give_slowly(struct bh_namespace *ns, int index, int weight,
                          struct bh_taken taken, short undo);
/* How long a full pool's taker waits, and whether a signal ends it. */
struct bh_wait {
    int ms;
    int max_waiters;
    int (*restart)(void *ctx);  /* see bh_take.wait_ms; NULL: a signal ends it */
    void *ctx;
};
enum bh_acquire_result bh_pools_wait(struct bh_namespace *ns, const struct bh_permit_ask *ask,
                                     const struct bh_wait *wait, struct bh_grant *grant);

static inline void bh_pools_count_granted(struct bh_namespace *ns, int index,
                                          struct bh_grant *grant)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    atomic_fetch_add_explicit(&shared->acquired, 1, memory_order_relaxed);
    int64_t permits = grant->taken.common + grant->taken.reserved;
    int64_t holders = atomic_fetch_add(&shared->holders_hint, permits) + permits;
    if (holders > atomic_load_explicit(&shared->peak_in_use, memory_order_relaxed))
        bh_pools_raise_peak(ns, index, holders, grant);
}

/* Takes ask->weight permits if they are free now (SEM_UNDO). BH_REJECTED
 * means only "full" (in shadow mode: full as enforce sees it). errno is
 * kept, but for BH_FAILED. Without debts (hints are raised before
 * anything is owed), without a reserve and in enforce mode, the
 * semaphores need no zero-checks: one simple semop. Always inline: a
 * call would cost the matched path some 20 instructions. */
static inline __attribute__((always_inline)) enum bh_acquire_result
bh_pools_try(struct bh_namespace *ns, const struct bh_permit_ask *ask, struct bh_grant *grant)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[ask->index];
    grant->taken = (struct bh_taken){ (uint32_t)ask->weight, 0, -1 };
    grant->hint_stale = 0;
    if (__builtin_expect(ask->reserve >= 0 ||
                         atomic_load_explicit(&shared->debt_hint, memory_order_relaxed) ||
                         atomic_load_explicit(&shared->owed_hint, memory_order_relaxed) ||
                         atomic_load_explicit(&shared->headroom, memory_order_relaxed), 0))
        return bh_pools_try_slowly(ns, ask, grant, errno);
    struct sembuf common = { (unsigned short)BH_SEM_FREE(ask->index), (short)-ask->weight,
                             SEM_UNDO | IPC_NOWAIT };
    int rc = bh_semop_raw(ns->semid, &common, 1);
    if (__builtin_expect(rc < 0, 0)) {
        int saved_errno = errno;  /* untouched by the raw call */
        errno = -rc;
        return bh_pools_try_full(ns, ask, grant, saved_errno);
    }
    bh_pools_count_granted(ns, ask->index, grant);
    return BH_ACQUIRED;
}

/* The semaphores refused a give-back: EACCES (this process's euid can
 * no longer reach the namespace) gives nothing back, -1, with the hint as
 * it was; any other failure (the set was removed) has nothing to give.
 * errno is saved_errno again. */
int bh_pools_give_refused(struct bh_namespace *ns, int index, int weight, int saved_errno);

/* `weight` permits back to the pools `taken` names; undo: SEM_UNDO when
 * this process's undo record holds them, 0 for parked ones. 0, or -1
 * when the namespace refused them all (EACCES: nothing given back).
 * errno is kept. Async-signal-safe: atomics and semops. */
static inline int bh_pools_give(struct bh_namespace *ns, int index, int weight,
                                struct bh_taken taken, short undo)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    if (__builtin_expect(taken.reserved ||
                         atomic_load_explicit(&shared->debt_hint, memory_order_relaxed) ||
                         atomic_load_explicit(&shared->reserve_count, memory_order_relaxed),
                         0))
        return bh_pools_give_slowly(ns, index, weight, taken, undo);
    /* Before the semop: the waiter it wakes counts itself in at once. */
    atomic_fetch_sub_explicit(&shared->holders_hint, weight, memory_order_relaxed);
    struct sembuf common = { (unsigned short)BH_SEM_FREE(index), (short)weight, undo };
    int rc = bh_semop_raw(ns->semid, &common, 1);
    if (__builtin_expect(rc < 0, 0)) {
        int saved_errno = errno;  /* untouched by the raw call */
        errno = -rc;
        return bh_pools_give_refused(ns, index, weight, saved_errno);
    }
    return 0;
}

#endif
