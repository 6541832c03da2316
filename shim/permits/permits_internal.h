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

/* pools.c: what holders.c reports back when a dead holder is reaped. */
void bh_pools_forget_holders(struct bh_namespace *ns, int index, uint32_t permits);

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

/* Gives back permits parked in a socket record (socket_records.c): no
 * process's undo record names them, so no SEM_UNDO. Async-signal-safe. */
void bh_permit_release_parked(struct bh_namespace *ns, int index, struct bh_taken taken);

#endif
