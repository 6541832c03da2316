/* What the files of shim/permits/ share among themselves and nobody else:
 * permits.c (the namespace: making, attaching, registering, reading,
 * removing), take.c (an admission's take and give-back, in order),
 * pools.c (taking and giving back permits; the common pool, the reserves
 * and their debts), holders.c (what each process holds),
 * socket_records.c (permits of sockets several processes hold), window.c
 * and primitives.c (what all of them use). Who calls whom, never back up:
 * take.c -> permits.c (a view: the live limit) -> socket_records.c ->
 * pools.c, holders.c -> window.c, primitives.c. */
#ifndef BH_PERMITS_INTERNAL_H
#define BH_PERMITS_INTERNAL_H

#include <sys/ipc.h>

#include "permits/layout.h"
#include "permits/permits.h"

enum { BH_SEM_VALUE_MAX = 32767 };

/* A shadow compartment's headroom at `limit`: the pool stays a semaphore. */
static inline int bh_shadow_headroom(int limit)
{
    return limit + BH_SHADOW_HEADROOM > BH_SEM_VALUE_MAX ? BH_SEM_VALUE_MAX - limit
                                                         : BH_SHADOW_HEADROOM;
}

int bh_sem_op(int semid, unsigned short num, short delta, short flags);
static inline int64_t bh_ms_to_ns(int ms) { return (int64_t)ms * 1000000; }

/* The namespace lock (sem 0, SEM_UNDO): registration, limits, reserves. */
int bh_lock_namespace(struct bh_namespace *ns);
void bh_unlock_namespace(struct bh_namespace *ns);

/* Counts one sample in ns into a histogram. Async-signal-safe. */
static inline void bh_histogram_record(struct bh_histogram *histogram, int64_t ns)
{
    int bucket = 0;
    while (bucket < BH_HISTOGRAM_BUCKETS && ns > bh_histogram_bounds_us[bucket] * 1000)
        bucket++;
    atomic_fetch_add_explicit(&histogram->buckets[bucket], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&histogram->sum_ns, ns, memory_order_relaxed);
}

/* Created by and owned by uid, mode 0600. */
int bh_owned_by(const struct ipc_perm *perm, uid_t uid);

/* Permits of compartment `index` in use now, from the semaphores. */
int bh_in_use_now(struct bh_namespace *ns, int index);
/* Waiters on every pool of compartment `index`: GETNCNT, the kernel's
 * count; -1 when the set is gone. */
int bh_waiters(struct bh_namespace *ns, int index);
/* The common pool's semaphores as they are: permits free now, and what
 * it owes (DEBT and every reserve's ROWED). */
int bh_common_read(struct bh_namespace *ns, int index, int *free_now, int *owes);

#include "permits/holders.h"

#include "permits/pools.h"

/* Gives back permits parked in a socket record (socket_records.c): no
 * process's undo record names them, so no SEM_UNDO. Async-signal-safe. */
void bh_permit_release_parked(struct bh_namespace *ns, int index, struct bh_taken taken);

#endif
