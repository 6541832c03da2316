/* What the files of shim/permits/ share among themselves and nobody else:
 * permits.c (the namespace: making, attaching, registering, reading,
 * removing), pools.c (taking and giving back permits; the common pool,
 * the reserves and their debts), holders.c (what each process holds) and
 * socket_records.c (permits of sockets several processes hold). */
#ifndef BH_PERMITS_INTERNAL_H
#define BH_PERMITS_INTERNAL_H

#include <sys/ipc.h>

#include "permits/layout.h"
#include "permits/permits.h"

enum { BH_SEM_VALUE_MAX = 32767 };

int bh_sem_op(int semid, unsigned short num, short delta, short flags);
int64_t bh_monotonic_ns(void);
static inline int64_t bh_ms_to_ns(int ms) { return (int64_t)ms * 1000000; }

/* The namespace lock (sem 0, SEM_UNDO): registration, limits, reserves. */
int bh_lock_namespace(struct bh_namespace *ns);
void bh_unlock_namespace(struct bh_namespace *ns);

/* Counts one sample in ns into a histogram. Async-signal-safe. */
void bh_histogram_record(struct bh_histogram *histogram, int64_t ns);

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

/* holders.c: this process's share of each compartment. */
struct bh_taken {
    uint32_t common;    /* from the common pool */
    uint32_t reserved;  /* from the reserve `reserve` */
    int reserve;
};
/* The reserve this process holds permits of in compartment index (one
 * at a time: a new program image may be a member of another), or -1. */
int bh_holding_reserve(int index);
void bh_holding_add(struct bh_namespace *ns, int index, struct bh_taken taken);
/* Which pools `weight` permits go back to: the common pool's first, so
 * a member keeps its reserve and others get the common pool back. */
struct bh_taken bh_holding_remove(int index, int weight);
/* Records of processes found dead are freed, their permits taken out of
 * the holders hint. */
void bh_holders_reap(struct bh_namespace *ns);

/* pools.c: taking and giving back, for the face (permits.c), which keeps
 * holders.c's counts. ask->reserve is the reserve to take from: the
 * caller's own, unless it still holds permits of another. What a take
 * got, and whether the holders hint ran past what the semaphores count
 * (a killed holder's record not reaped yet: the caller reaps). */
struct bh_grant {
    struct bh_taken taken;
    int hint_stale;
};
enum bh_acquire_result bh_pools_try(struct bh_namespace *ns, const struct bh_permit_ask *ask,
                                    struct bh_grant *grant);
enum bh_acquire_result bh_pools_wait(struct bh_namespace *ns, const struct bh_permit_ask *ask,
                                     int wait_ms, int max_waiters, struct bh_grant *grant);
/* `weight` permits back to the pools `taken` names; undo: SEM_UNDO when
 * this process's undo record holds them, 0 for parked ones. */
void bh_pools_give(struct bh_namespace *ns, int index, int weight, struct bh_taken taken,
                   short undo);

/* Gives back permits parked in a socket record (socket_records.c): no
 * process's undo record names them, so no SEM_UNDO. Async-signal-safe. */
void bh_permit_release_parked(struct bh_namespace *ns, int index, struct bh_taken taken);

#endif
