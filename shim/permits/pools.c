/* Taking and giving back permits: the common pool, the reserves, and the
 * debts between them.
 *
 * A compartment's `limit` permits are split into pools: each reserve's
 * (BH_SEM_RFREE, only its members take from it) and the common pool
 * (BH_SEM_FREE: limit minus the reserves). A member takes from its reserve
 * first, then from the common pool; everyone else from the common pool
 * alone. Each permit goes back to the pool it came from (holders.c knows
 * which, per process: the common pool's first; for a take on behalf of
 * another process, its caller keeps which; the take, take.c, asks and
 * tells this file: this file calls neither). The common take and
 * give-back are inline in pools.h; the rest is here.
 *
 * Debts keep the limit exact while pools change under held permits. Every
 * move between pools is one atomic semop, so a process killed mid-way
 * leaves either the old state or the new one:
 *   - DEBT: permits the common pool retires as they come back (`set`
 *     lowered the limit);
 *   - ROWED(s): permits the common pool owes reserve s (its reserve was
 *     raised while the common pool's permits were in use): given back,
 *     they go to the reserve;
 *   - RDEBT(s): permits reserve s owes the common pool: it was lowered
 *     while its permits were in use, or it was lent a common permit.
 * Counting permits that exist, held or free: the common pool's minus DEBT
 * and ROWED plus RDEBT is its size, each reserve's minus RDEBT plus ROWED
 * is its size; so all of them minus DEBT is the limit, whatever the moves.
 *
 * Waiting stays FIFO within what a waiter may use: others wait on the
 * common pool's semaphore, members on their reserve's. A member waiting
 * could use a common permit too: whoever gives one back while members
 * wait and nobody waits on the common pool lends it to their reserve,
 * with RDEBT recording that it is the common pool's. Lent permits nobody
 * took are taken back by whoever finds the common pool empty while no
 * member waits.
 *
 * "Members wait" is RWAIT(s), a semaphore each member raises with
 * SEM_UNDO before its last look at the common pool and lowers after its
 * wait: a permit given back in between is either seen by that look or
 * lent. The kernel lowers it for a member killed mid-wait, so it is never
 * stale: a count that outlived its waiter would lend every common permit
 * to the reserve and forbid taking them back, draining the common pool
 * for good.
 *
 * Hints (debt_hint, owed_hint, waiting_hint: shared atomics) only save
 * syscalls: each is raised before its semaphore and lowered after, so a
 * zero hint means a zero semaphore, and no decision that moves a permit
 * rests on a nonzero hint alone. What a process killed at each point
 * costs:
 *   - between raising a hint and its semop, or between the semop and
 *     lowering it: the hint stays high for good (until reset). A high
 *     debt_hint or owed_hint costs a zero-check semop per take and a
 *     failing IPC_NOWAIT semop per give-back; a high waiting_hint costs
 *     a GETVAL of RWAIT per common give-back. Never a permit.
 *   - inside a semop: nothing; each is atomic, and SEM_UNDO gives back
 *     what the dead process held (and lowers its RWAIT).
 *   - a lent permit whose member died before taking it: it stays in the
 *     reserve, owed, until the next taker that finds the common pool
 *     empty (or the next member to stop waiting) pays it back.
 *
 * A shadow compartment's headroom (bh_shared_compartment.headroom, the
 * mode's one word): permits of the common pool past the limit, which a
 * take reaches only once enforce's own take, with the headroom kept out
 * of reach in the same semop, found the pool full. Written under the
 * namespace lock only: at registration (before the compartment is
 * named, like its SETVAL) and by bh_compartment_set_shadow; read by
 * takes (a relaxed load beside the debt hints) and by bh_in_use_now;
 * give-backs never read it: a headroom permit goes back as any other.
 * A switch is two steps, the semop and the word (to shadow: the semop
 * first; to enforce: the word first), so a reader racing it errs low.
 * A `set` killed between the two (SIGKILL in those few instructions)
 * leaves the pool and the word apart: killed going to shadow, the pool
 * keeps up to 8,192 permits past the limit in enforce mode until
 * `bulkhead reset`; going to enforce, the same. Nothing but the
 * command's own death does it, and no connect path writes the word.
 *
 * Releasing is async-signal-safe: atomics and semops, no lock. */
#include "permits/permits_internal.h"
#include "libc/clock.h"

#include <errno.h>
#include <string.h>
#include <sys/sem.h>
#include <time.h>

enum { DEBT_SLICE_NS = 50 * 1000000 };

static struct bh_shared_compartment *shared_of(struct bh_namespace *ns, int index)
{
    return &ns->state->compartments[index];
}

static unsigned short slot_of(struct bh_shared_compartment *shared, int reserve)
{
    return (unsigned short)atomic_load_explicit(&shared->reserves[reserve].slot,
                                                memory_order_relaxed);
}

/* Members wait on reserve r, or are about to (see the top): the hint
 * spares the GETVAL when nobody ever waited. */
static int members_waiting(struct bh_namespace *ns, struct bh_shared_compartment *shared,
                           int r)
{
    return atomic_load(&shared->reserves[r].waiting_hint) &&
           semctl(ns->semid, BH_SEM_RWAIT(slot_of(shared, r)), GETVAL) > 0;
}

/* ---- taking ---- */

/* The zero-checks that keep a free common permit from a taker while the
 * common pool owes it (to retirement, or to a reserve). Returns how many
 * were appended. */
static int owed_checks(struct bh_shared_compartment *shared, int index,
                       struct sembuf *ops, short flags)
{
    int n = 0;
    if (atomic_load_explicit(&shared->debt_hint, memory_order_relaxed))
        ops[n++] = (struct sembuf){ BH_SEM_DEBT(index), 0, flags };
    if (atomic_load_explicit(&shared->owed_hint, memory_order_relaxed))
        for (int r = 0; r < atomic_load(&shared->reserve_count); r++)
            ops[n++] = (struct sembuf){ BH_SEM_ROWED(slot_of(shared, r)), 0, flags };
    return n;
}

/* `common` from the common pool and `reserved` from reserve r's, in one
 * semop; timeout NULL: IPC_NOWAIT. `keep`: only if the common pool holds
 * `keep` more besides (a shadow compartment's headroom: the take enforce
 * would make), taken and put back in the same semop. */
static int take_ops(struct bh_namespace *ns, int index, int reserve, int common,
                    int reserved, int keep, const struct timespec *timeout)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    short flags = timeout ? 0 : IPC_NOWAIT;
    struct sembuf ops[3 + 1 + BH_MAX_RESERVES];
    int n = 0;
    if (reserved)
        ops[n++] = (struct sembuf){ BH_SEM_RFREE(slot_of(shared, reserve)),
                                    (short)-reserved, (short)(SEM_UNDO | flags) };
    if (common) {
        ops[n++] = (struct sembuf){ BH_SEM_FREE(index), (short)-(common + keep),
                                    (short)(SEM_UNDO | flags) };
        if (keep)
            ops[n++] = (struct sembuf){ BH_SEM_FREE(index), (short)keep,
                                        (short)(SEM_UNDO | flags) };
        n += owed_checks(shared, index, ops + n, flags);
    }
    return timeout ? semtimedop(ns->semid, ops, n, timeout) : semop(ns->semid, ops, n);
}

/* Without waiting: a member's reserve, then its reserve and the common
 * pool together, then the common pool. 0, or -1 (EAGAIN: full, as
 * enforce sees it: a shadow compartment's headroom is not taken here).
 * Here and below, `cold` keeps the rare paths out of the common one's
 * way. */
static __attribute__((noinline, cold)) int
take_now(struct bh_namespace *ns, const struct bh_permit_ask *ask, struct bh_taken *got)
{
    int reserve = ask->reserve, weight = ask->weight;
    int keep = atomic_load(&shared_of(ns, ask->index)->headroom);
    *got = (struct bh_taken){ .common = (uint32_t)weight, .reserve = reserve };
    if (reserve >= 0) {
        if (take_ops(ns, ask->index, reserve, 0, weight, 0, NULL) == 0) {
            *got = (struct bh_taken){ 0, (uint32_t)weight, reserve };
            return 0;
        }
        int free_now = errno == EAGAIN && weight > 1
            ? semctl(ns->semid, BH_SEM_RFREE(slot_of(shared_of(ns, ask->index), reserve)),
                     GETVAL) : 0;
        if (free_now > 0 && free_now < weight &&
            take_ops(ns, ask->index, reserve, weight - free_now, free_now, keep, NULL) == 0) {
            *got = (struct bh_taken){ (uint32_t)(weight - free_now), (uint32_t)free_now,
                                      reserve };
            return 0;
        }
    }
    return take_ops(ns, ask->index, -1, weight, 0, keep, NULL);
}

/* Free reserved permits while the reserve owes the common pool (lent ones
 * no member took, or a dead member's given back by the kernel after the
 * reserve was lowered) pay it; only while no member waits for them.
 * Returns how many. */
static __attribute__((noinline, cold)) int
reclaim_lent(struct bh_namespace *ns, int index)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    int reclaimed = 0;
    for (int r = 0; r < atomic_load(&shared->reserve_count); r++) {
        struct bh_reserve_shared *reserve = &shared->reserves[r];
        unsigned short slot = slot_of(shared, r);
        struct sembuf pay[3] = {
            { BH_SEM_RFREE(slot), -1, IPC_NOWAIT },
            { BH_SEM_RDEBT(slot), -1, IPC_NOWAIT },
            { BH_SEM_FREE(index), +1, 0 },
        };
        while (atomic_load(&reserve->debt_hint) && !members_waiting(ns, shared, r) &&
               semop(ns->semid, pay, 3) == 0) {
            atomic_fetch_sub(&reserve->debt_hint, 1);
            reclaimed++;
        }
    }
    return reclaimed;
}

static void raise_to(_Atomic int64_t *maximum, int64_t value)
{
    int64_t seen = atomic_load_explicit(maximum, memory_order_relaxed);
    while (value > seen &&
           !atomic_compare_exchange_weak_explicit(maximum, &seen, value,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

static int reserve_values(struct bh_namespace *ns, int slot, int *free_now, int *debt,
                          int *owed)
{
    *free_now = semctl(ns->semid, BH_SEM_RFREE(slot), GETVAL);
    *debt = semctl(ns->semid, BH_SEM_RDEBT(slot), GETVAL);
    *owed = semctl(ns->semid, BH_SEM_ROWED(slot), GETVAL);
    return *free_now < 0 || *debt < 0 || *owed < 0 ? -1 : 0;
}

/* limit + headroom + DEBT - every free permit (see the count at the
 * top). The headroom is read first: a switch to shadow raises the pool
 * before it, one to enforce lowers it after, so a read that races a
 * switch says less than is in use, never more (the peak never jumps). */
int bh_in_use_now(struct bh_namespace *ns, int index)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    int headroom = atomic_load(&shared->headroom);
    int free_now = semctl(ns->semid, BH_SEM_FREE(index), GETVAL);
    int debt = atomic_load(&shared->debt_hint)
                   ? semctl(ns->semid, BH_SEM_DEBT(index), GETVAL) : 0;
    if (free_now < 0 || debt < 0)
        return -1;
    int in_use = atomic_load(&shared->limit) + headroom + debt - free_now;
    for (int r = 0; r < atomic_load(&shared->reserve_count); r++) {
        int reserve_free = semctl(ns->semid, BH_SEM_RFREE(slot_of(shared, r)), GETVAL);
        if (reserve_free < 0)
            return -1;
        in_use -= reserve_free;
    }
    return in_use;
}

int bh_common_read(struct bh_namespace *ns, int index, int *free_now, int *owes)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    *free_now = semctl(ns->semid, BH_SEM_FREE(index), GETVAL);
    *owes = semctl(ns->semid, BH_SEM_DEBT(index), GETVAL);
    for (int r = 0; *owes >= 0 && r < atomic_load(&shared->reserve_count); r++) {
        int owed = semctl(ns->semid, BH_SEM_ROWED(slot_of(shared, r)), GETVAL);
        *owes = owed < 0 ? owed : *owes + owed;
    }
    return *free_now < 0 || *owes < 0 ? -1 : 0;
}

/* The hint says this grant may be a new peak. The hint runs high while a
 * killed holder's record is not reaped yet, so a peak is only ever
 * recorded as the semaphores count it; a hint found high is mended by
 * reaping (the caller's part: grant->hint_stale). This costs a semctl only
 * when the hint passes the peak, which a correct hint does only when a
 * real new peak is reached. */
void bh_pools_raise_peak(struct bh_namespace *ns, int index, int64_t hint,
                         struct bh_grant *grant)
{
    int exact = bh_in_use_now(ns, index);
    if (exact < 0)
        return;
    raise_to(&shared_of(ns, index)->peak_in_use, exact);
    grant->hint_stale = exact < hint;
}

/* A wait's length, however it ended: an operator sees waits that were
 * refused (timed out, cut by a signal) as well as granted ones. */
static void count_wait(struct bh_namespace *ns, int index, int64_t waited_ns)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    bh_histogram_record(&shared->wait_time, waited_ns);
    raise_to(&shared->wait_ns_max, waited_ns);
}

void bh_permit_count_rejected(struct bh_namespace *ns, int index)
{
    atomic_fetch_add_explicit(&shared_of(ns, index)->rejected, 1, memory_order_relaxed);
    bh_window_count(bh_window_of(ns, index), BH_WINDOW_REFUSED, bh_clock_ns(CLOCK_MONOTONIC));
}

void bh_permit_count_per_process(struct bh_namespace *ns, int index)
{
    atomic_fetch_add_explicit(&shared_of(ns, index)->per_process_refused, 1,
                              memory_order_relaxed);
}

void bh_permit_count_bypassed(struct bh_namespace *ns, int index)
{
    atomic_fetch_add_explicit(&shared_of(ns, index)->bypassed, 1, memory_order_relaxed);
}

void bh_permit_count_shadow(struct bh_namespace *ns, int index, int waited)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    atomic_fetch_add_explicit(waited ? &shared->shadow_waited : &shared->shadow_refused, 1,
                              memory_order_relaxed);
}

/* Free common permits that appeared while the common pool owes (a holder
 * died after `set` lowered the limit or raised a reserve) pay what it owes
 * before anyone may take them. */
static __attribute__((noinline, cold)) void
pay_owed_from_free(struct bh_namespace *ns, int index)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    struct sembuf retire[2] = {
        { BH_SEM_FREE(index), -1, IPC_NOWAIT },
        { BH_SEM_DEBT(index), -1, IPC_NOWAIT },
    };
    while (atomic_load(&shared->debt_hint) > 0 && semop(ns->semid, retire, 2) == 0)
        atomic_fetch_sub(&shared->debt_hint, 1);
    for (int r = 0; r < atomic_load(&shared->reserve_count); r++) {
        struct bh_reserve_shared *reserve = &shared->reserves[r];
        unsigned short slot = slot_of(shared, r);
        struct sembuf pay[3] = {
            { BH_SEM_FREE(index), -1, IPC_NOWAIT },
            { BH_SEM_ROWED(slot), -1, IPC_NOWAIT },
            { BH_SEM_RFREE(slot), +1, 0 },
        };
        while (atomic_load(&reserve->owed_hint) > 0 && semop(ns->semid, pay, 3) == 0) {
            atomic_fetch_sub(&reserve->owed_hint, 1);
            atomic_fetch_sub(&shared->owed_hint, 1);
        }
    }
}

/* A semop failed for another reason than a full pool (errno): EIDRM or
 * EINVAL, the set was removed (reset), which lets connections through as
 * documented; anything else (EACCES: a uid change the shim did not see;
 * ENOMEM: no room for undo records) is a failure on_failure decides. */
static __attribute__((noinline, cold)) enum bh_acquire_result
unreachable_result(void)
{
    return errno == EIDRM || errno == EINVAL ? BH_BYPASS : BH_FAILED;
}

/* The end of a try whose first semop returned rc (errno): a full pool
 * may have lent permits to take back. */
static enum bh_acquire_result finish_try(struct bh_namespace *ns,
                                         const struct bh_permit_ask *ask,
                                         struct bh_grant *grant, int rc, int saved_errno)
{
    enum bh_acquire_result result = BH_ACQUIRED;
    if (rc < 0 && errno == EAGAIN && reclaim_lent(ns, ask->index))
        rc = take_now(ns, ask, &grant->taken);
    if (rc == 0)
        bh_pools_count_granted(ns, ask->index, grant);
    else
        result = errno == EAGAIN ? BH_REJECTED : unreachable_result();
    if (result != BH_FAILED)
        errno = saved_errno;
    return result;
}

enum bh_acquire_result bh_pools_try_full(struct bh_namespace *ns,
                                         const struct bh_permit_ask *ask,
                                         struct bh_grant *grant, int saved_errno)
{
    return finish_try(ns, ask, grant, -1, saved_errno);
}

enum bh_acquire_result bh_pools_take_past(struct bh_namespace *ns,
                                          const struct bh_permit_ask *ask,
                                          struct bh_grant *grant)
{
    int saved_errno = errno;
    grant->taken = (struct bh_taken){ (uint32_t)ask->weight, 0, -1 };
    grant->hint_stale = 0;
    if (!atomic_load(&shared_of(ns, ask->index)->headroom)) {
        errno = EAGAIN;  /* switched to enforce meanwhile */
        return finish_try(ns, ask, grant, -1, saved_errno);
    }
    return finish_try(ns, ask, grant, take_ops(ns, ask->index, -1, ask->weight, 0, 0, NULL),
                      saved_errno);
}

enum bh_acquire_result bh_pools_try_slowly(struct bh_namespace *ns,
                                           const struct bh_permit_ask *ask,
                                           struct bh_grant *grant, int saved_errno)
{
    struct bh_shared_compartment *shared = shared_of(ns, ask->index);
    if (atomic_load(&shared->debt_hint) || atomic_load(&shared->owed_hint))
        pay_owed_from_free(ns, ask->index);
    return finish_try(ns, ask, grant, take_now(ns, ask, &grant->taken), saved_errno);
}

/* ---- waiting ---- */

static struct timespec until(int64_t left_ns)
{
    return (struct timespec){ left_ns / 1000000000, left_ns % 1000000000 };
}

/* The common pool until `deadline`: 0, or -1 with errno (EAGAIN when it
 * passed, EINTR for a signal). While the pool owes, a dead holder's
 * permit sits in the free semaphore and the take waits on the debt, so
 * the wait goes in slices, paying from free permits between them
 * (arrival order is given up only then). */
static int take_common_within(struct bh_namespace *ns, int index, int weight,
                              int64_t deadline)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    for (;;) {
        int64_t left = deadline - bh_clock_ns(CLOCK_MONOTONIC);
        if (left <= 0) {
            errno = EAGAIN;
            return -1;
        }
        int owes = atomic_load(&shared->debt_hint) || atomic_load(&shared->owed_hint);
        if (owes) {
            pay_owed_from_free(ns, index);
            if (left > DEBT_SLICE_NS)
                left = DEBT_SLICE_NS;
        }
        struct timespec wait = until(left);
        if (take_ops(ns, index, -1, weight, 0, 0, &wait) == 0)
            return 0;
        if (errno != EAGAIN || !owes)
            return -1;
    }
}

/* A member waits on its reserve; see the top for how common permits
 * reach it meanwhile. */
static int take_reserved_within(struct bh_namespace *ns, const struct bh_permit_ask *ask,
                                int reserve, int64_t deadline, struct bh_taken *got)
{
    struct bh_reserve_shared *shared = &shared_of(ns, ask->index)->reserves[reserve];
    unsigned short waiting = BH_SEM_RWAIT(slot_of(shared_of(ns, ask->index), reserve));
    atomic_fetch_add(&shared->waiting_hint, 1);
    int counted = bh_sem_op(ns->semid, waiting, +1, SEM_UNDO) == 0;
    int rc = take_now(ns, ask, got);  /* after RWAIT: nothing given back is missed */
    while (rc < 0 && errno == EAGAIN) {
        int64_t left = deadline - bh_clock_ns(CLOCK_MONOTONIC);
        if (left <= 0)
            break;
        struct timespec wait = until(left);
        rc = take_ops(ns, ask->index, reserve, 0, ask->weight, 0, &wait);
        if (rc == 0)
            *got = (struct bh_taken){ 0, (uint32_t)ask->weight, reserve };
    }
    int saved = errno;
    if (counted)
        bh_sem_op(ns->semid, waiting, -1, SEM_UNDO);
    atomic_fetch_sub(&shared->waiting_hint, 1);
    if (rc < 0)
        reclaim_lent(ns, ask->index);
    errno = saved;
    return rc;
}

int bh_waiters(struct bh_namespace *ns, int index)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    int count = semctl(ns->semid, BH_SEM_FREE(index), GETNCNT);
    for (int r = 0; count >= 0 && r < atomic_load(&shared->reserve_count); r++) {
        int more = semctl(ns->semid, BH_SEM_RFREE(slot_of(shared, r)), GETNCNT);
        count = more < 0 ? more : count + more;
    }
    return count;
}

/* The wait itself, to `deadline`. A signal the caller's kernel connect()
 * would have gone on through (wait->restart says) does not end it: it
 * waits on to the same deadline, at the end of the kernel's queue (a
 * semaphore's waiter interrupted leaves its queue, and no place in it can
 * be kept). 0, or -1 with errno as take_common_within's. */
static int take_within(struct bh_namespace *ns, const struct bh_permit_ask *ask,
                       int64_t deadline, const struct bh_wait *wait, struct bh_grant *grant)
{
    for (;;) {
        int rc = ask->reserve >= 0
            ? take_reserved_within(ns, ask, ask->reserve, deadline, &grant->taken)
            : take_common_within(ns, ask->index, ask->weight, deadline);
        if (rc == 0 || errno != EINTR || !wait->restart || !wait->restart(wait->ctx))
            return rc;
    }
}

enum bh_acquire_result bh_pools_wait(struct bh_namespace *ns, const struct bh_permit_ask *ask,
                                     const struct bh_wait *wait, struct bh_grant *grant)
{
    int saved_errno = errno;
    enum bh_acquire_result result = BH_REJECTED;
    struct bh_shared_compartment *shared = shared_of(ns, ask->index);
    int64_t started = bh_clock_ns(CLOCK_MONOTONIC), deadline = started + bh_ms_to_ns(wait->ms);
    *grant = (struct bh_grant){ { (uint32_t)ask->weight, 0, -1 }, 0 };
    /* Two callers checking at once may both get in. */
    if (bh_waiters(ns, ask->index) >= wait->max_waiters) {
        bh_permit_count_rejected(ns, ask->index);
        errno = saved_errno;
        return result;
    }
    int rc = take_within(ns, ask, deadline, wait, grant);
    count_wait(ns, ask->index, bh_clock_ns(CLOCK_MONOTONIC) - started);  /* errno kept */
    if (rc == 0) {
        result = BH_ACQUIRED;
        bh_pools_count_granted(ns, ask->index, grant);
        atomic_fetch_add_explicit(&shared->waits, 1, memory_order_relaxed);
    } else if (errno == EAGAIN) {
        result = BH_TIMED_OUT;
        atomic_fetch_add_explicit(&shared->timed_out, 1, memory_order_relaxed);
        bh_window_count(bh_window_of(ns, ask->index), BH_WINDOW_TIMED_OUT,
                        bh_clock_ns(CLOCK_MONOTONIC));
    } else {
        /* EINTR: a signal ends the wait, as it ends a blocking connect()
         * (those it would not end, take_within waited through). */
        result = errno == EINTR ? BH_INTERRUPTED : unreachable_result();
    }
    if (result != BH_FAILED)
        errno = saved_errno;
    return result;
}

/* ---- giving back ---- */

/* One permit back, and straight on to where the pool owes it, in one
 * semop: +1 with `undo` (SEM_UNDO) clears this process's undo record, -1 without
 * takes it out again, the debt shrinks and `to` (if any) grows. */
static int pay_one(struct bh_namespace *ns, unsigned short from, unsigned short debt,
                   int to, short undo)
{
    struct sembuf ops[4] = {
        { from, +1, undo },
        { from, -1, 0 },
        { debt, -1, IPC_NOWAIT },
        { (unsigned short)(to < 0 ? 0 : to), +1, 0 },
    };
    return semop(ns->semid, ops, to < 0 ? 3 : 4);
}

/* Members wait and the common pool's own waiters do not: lend them what
 * was just given back (no more than they wait for, at least one: a member
 * about to sleep is not counted yet). */
static void lend_to_members(struct bh_namespace *ns, int index, int given)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    for (int r = 0; r < atomic_load(&shared->reserve_count) && given > 0; r++) {
        struct bh_reserve_shared *reserve = &shared->reserves[r];
        if (!members_waiting(ns, shared, r) ||
            semctl(ns->semid, BH_SEM_FREE(index), GETNCNT) != 0)
            continue;
        unsigned short slot = slot_of(shared, r);
        int wanted = semctl(ns->semid, BH_SEM_RFREE(slot), GETNCNT);
        struct sembuf lend[3] = {
            { BH_SEM_FREE(index), -1, IPC_NOWAIT },
            { BH_SEM_RDEBT(slot), +1, 0 },
            { BH_SEM_RFREE(slot), +1, 0 },
        };
        for (int lent = 0; given > 0 && (lent == 0 || lent < wanted); lent++, given--) {
            atomic_fetch_add(&reserve->debt_hint, 1);
            if (semop(ns->semid, lend, 3) < 0) {
                atomic_fetch_sub(&reserve->debt_hint, 1);
                return;
            }
        }
    }
}

/* A part of a give-back, as its last semop went: -1 when the namespace
 * refused it (EACCES) before any of it went back. */
static int refused(int count, int wanted, int rc)
{
    return rc < 0 && errno == EACCES && count == wanted ? -1 : 0;
}

static __attribute__((noinline, cold)) int
give_common(struct bh_namespace *ns, int index, int wanted, short undo)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    int count = wanted;
    while (count > 0 && atomic_load_explicit(&shared->debt_hint, memory_order_relaxed) &&
           pay_one(ns, BH_SEM_FREE(index), BH_SEM_DEBT(index), -1, undo) == 0) {
        atomic_fetch_sub(&shared->debt_hint, 1);
        count--;
    }
    for (int r = 0; count > 0 && atomic_load_explicit(&shared->owed_hint, memory_order_relaxed) &&
                    r < atomic_load(&shared->reserve_count); r++) {
        struct bh_reserve_shared *reserve = &shared->reserves[r];
        unsigned short slot = slot_of(shared, r);
        while (count > 0 && atomic_load(&reserve->owed_hint) &&
               pay_one(ns, BH_SEM_FREE(index), BH_SEM_ROWED(slot), BH_SEM_RFREE(slot), undo) == 0) {
            atomic_fetch_sub(&reserve->owed_hint, 1);
            atomic_fetch_sub(&shared->owed_hint, 1);
            count--;
        }
    }
    if (count == 0)
        return 0;
    int rc = bh_sem_op(ns->semid, BH_SEM_FREE(index), (short)count, undo);
    if (rc == 0 && atomic_load_explicit(&shared->reserve_count, memory_order_relaxed))
        lend_to_members(ns, index, count);
    return refused(count, wanted, rc);
}

static __attribute__((noinline, cold)) int
give_reserved(struct bh_namespace *ns, int index, int reserve, int wanted, short undo)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    struct bh_reserve_shared *pool = &shared->reserves[reserve];
    unsigned short slot = slot_of(shared, reserve);
    int count = wanted;
    while (count > 0 && atomic_load(&pool->debt_hint) &&
           pay_one(ns, BH_SEM_RFREE(slot), BH_SEM_RDEBT(slot), BH_SEM_FREE(index), undo) == 0) {
        atomic_fetch_sub(&pool->debt_hint, 1);
        count--;
    }
    if (count == 0)
        return 0;
    return refused(count, wanted, bh_sem_op(ns->semid, BH_SEM_RFREE(slot), (short)count, undo));
}

int bh_pools_give_refused(struct bh_namespace *ns, int index, int weight, int saved_errno)
{
    int refused = errno == EACCES;
    if (refused)
        atomic_fetch_add_explicit(&shared_of(ns, index)->holders_hint, weight,
                                  memory_order_relaxed);
    errno = saved_errno;
    return refused ? -1 : 0;
}

/* Refused when its first part was, before anything went back (a part
 * given back before a uid change refused the rest is the process's until
 * it exits: one semop's window, at a uid change). */
int bh_pools_give_slowly(struct bh_namespace *ns, int index, int weight,
                         struct bh_taken taken, short undo)
{
    int saved_errno = errno;
    struct bh_shared_compartment *shared = shared_of(ns, index);
    /* Before the semop: the waiter it wakes counts itself in at once. */
    atomic_fetch_sub_explicit(&shared->holders_hint, weight, memory_order_relaxed);
    /* Permits no count of ours names (taken before a failed record) were
     * the common pool's: all were, before reserves. */
    int common = weight - (int)taken.reserved;
    if (taken.reserved && taken.reserve >= 0 &&
        taken.reserve < atomic_load(&shared->reserve_count)) {
        if (give_reserved(ns, index, taken.reserve, (int)taken.reserved, undo) < 0)
            return bh_pools_give_refused(ns, index, weight, saved_errno);
    } else {
        common = weight;
    }
    if (common > 0 && give_common(ns, index, common, undo) < 0 && common == weight)
        return bh_pools_give_refused(ns, index, weight, saved_errno);
    errno = saved_errno;
    return 0;
}

void bh_permit_release_parked(struct bh_namespace *ns, int index, struct bh_taken taken)
{
    bh_pools_give(ns, index, (int)(taken.common + taken.reserved), taken, 0);
}

/* A copy's permits, owed when none is free: one semop raises the debt
 * and gives this process an undo of +weight on the common pool (+n
 * without SEM_UNDO, -n with it: pay_one's move the other way). Counting
 * held permits as the pool's, pool minus debt is unchanged, so the limit
 * is: the debt retires the next `weight` permits given back (the
 * parent's close), and the undo or the copy's close puts them back
 * later. Whether the debt was paid first or not, each permit comes back
 * once. */
static int owe_for_copy(struct bh_namespace *ns, int index, int weight)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    struct sembuf ops[3] = {
        { BH_SEM_DEBT(index), (short)weight, 0 },
        { BH_SEM_FREE(index), (short)weight, 0 },
        { BH_SEM_FREE(index), (short)-weight, SEM_UNDO },
    };
    atomic_fetch_add(&shared->debt_hint, (uint32_t)weight);
    if (semop(ns->semid, ops, 3) == 0)
        return 0;
    atomic_fetch_sub(&shared->debt_hint, (uint32_t)weight);
    return -1;
}

int bh_permit_take_for_copy(struct bh_namespace *ns, int index, int weight)
{
    int saved_errno = errno;
    int taken = take_ops(ns, index, -1, weight, 0, 0, NULL) == 0 ||
                owe_for_copy(ns, index, weight) == 0;
    if (taken)
        atomic_fetch_add_explicit(&shared_of(ns, index)->holders_hint, weight,
                                  memory_order_relaxed);
    errno = saved_errno;
    return taken ? 0 : -1;
}

/* ---- changing the limit and the reserves (under the namespace lock) ---- */

/* Takes up to `amount` from one semaphore without blocking; how many. */
static int take_up_to(struct bh_namespace *ns, unsigned short num, int amount)
{
    for (;;) {
        int available = semctl(ns->semid, num, GETVAL);
        if (available < 0)
            return -1;
        int take = available < amount ? available : amount;
        if (take == 0 || bh_sem_op(ns->semid, num, (short)-take, IPC_NOWAIT) == 0)
            return take;
        if (errno != EAGAIN)
            return -1;
    }
}

/* Moves up to `amount` free permits from one pool to another in one
 * semop; how many. */
static int move_free(struct bh_namespace *ns, unsigned short from, unsigned short to,
                     int amount)
{
    for (;;) {
        int available = semctl(ns->semid, from, GETVAL);
        if (available < 0)
            return -1;
        int move = available < amount ? available : amount;
        struct sembuf ops[2] = { { from, (short)-move, IPC_NOWAIT }, { to, (short)move, 0 } };
        if (move == 0 || semop(ns->semid, ops, 2) == 0)
            return move;
        if (errno != EAGAIN)
            return -1;
    }
}

/* Adds `amount` to a debt semaphore, its hint first: a taker that sees
 * no hint must see no debt. */
static int owe(struct bh_namespace *ns, unsigned short num, _Atomic uint32_t *hint,
               _Atomic uint32_t *also, int amount)
{
    if (amount <= 0)
        return 0;
    atomic_fetch_add(hint, amount);
    if (also)
        atomic_fetch_add(also, amount);
    if (bh_sem_op(ns->semid, num, (short)amount, 0) == 0)
        return 0;
    atomic_fetch_sub(hint, amount);
    if (also)
        atomic_fetch_sub(also, amount);
    return -1;
}

/* Takes up to `amount` off a debt semaphore (forgiven); how many. */
static int forgive(struct bh_namespace *ns, unsigned short num, _Atomic uint32_t *hint,
                   _Atomic uint32_t *also, int amount)
{
    int forgiven = take_up_to(ns, num, amount);
    if (forgiven > 0) {
        atomic_fetch_sub(hint, forgiven);
        if (also)
            atomic_fetch_sub(also, forgiven);
    }
    return forgiven;
}

static int lower_limit(struct bh_namespace *ns, int index, int amount)
{
    int retired_now = take_up_to(ns, BH_SEM_FREE(index), amount);
    if (retired_now < 0)
        return -1;
    return owe(ns, BH_SEM_DEBT(index), &shared_of(ns, index)->debt_hint, NULL,
               amount - retired_now);
}

static int raise_limit(struct bh_namespace *ns, int index, int amount)
{
    int forgiven = forgive(ns, BH_SEM_DEBT(index), &shared_of(ns, index)->debt_hint,
                           NULL, amount);
    if (forgiven < 0)
        return -1;
    int added = amount - forgiven;
    return added > 0 ? bh_sem_op(ns->semid, BH_SEM_FREE(index), (short)added, 0) : 0;
}

/* expected < 0: whatever the live limit is. */
static int set_limit(struct bh_namespace *ns, int index, int expected, int limit)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    if (limit < 0 || limit > BH_SEM_VALUE_MAX) {
        errno = ERANGE;
        return -1;
    }
    if (bh_lock_namespace(ns) < 0)
        return -1;
    int old_limit = atomic_load(&shared->limit);
    int rc = 0;
    if (expected >= 0 && old_limit != expected) {
        errno = EAGAIN;
        rc = -1;
    } else if (limit < atomic_load(&shared->reserved) ||
               limit + atomic_load(&shared->headroom) > BH_SEM_VALUE_MAX) {
        errno = ERANGE;
        rc = -1;
    } else if (limit < old_limit) {
        rc = lower_limit(ns, index, old_limit - limit);
    } else if (limit > old_limit) {
        rc = raise_limit(ns, index, limit - old_limit);
    }
    if (rc == 0)
        atomic_store(&shared->limit, limit);
    /* Waiters the raise let in took their permits inside our semop (the
     * kernel completes their operations before it returns), but may have
     * counted their peak against the old limit: count it again here. */
    int in_use = rc == 0 && limit > old_limit ? bh_in_use_now(ns, index) : -1;
    if (in_use > 0)
        raise_to(&shared->peak_in_use, in_use);
    int saved = errno;
    bh_unlock_namespace(ns);
    errno = saved;
    return rc;
}

/* Shadow: the headroom's permits join the common pool, then the field
 * says so; enforce: the field first, then they are retired as a lowered
 * limit's are (free ones now, held ones as they come back, which keeps
 * new connects out until fewer than the limit are in use). In that order
 * a take that races the switch may be let past the limit once (counted
 * in use, and retired when given back), and bh_in_use_now never says
 * more than is in use. */
int bh_compartment_set_shadow(struct bh_namespace *ns, int index, int shadow)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    if (bh_lock_namespace(ns) < 0)
        return -1;
    int headroom = atomic_load(&shared->headroom);
    int rc = 0;
    if (shadow && !headroom) {
        headroom = bh_shadow_headroom(atomic_load(&shared->limit));
        rc = raise_limit(ns, index, headroom);
        if (rc == 0)
            atomic_store(&shared->headroom, headroom);
    } else if (!shadow && headroom) {
        atomic_store(&shared->headroom, 0);
        rc = lower_limit(ns, index, headroom);
    }
    int saved = errno;
    bh_unlock_namespace(ns);
    errno = saved;
    return rc;
}

int bh_compartment_set_limit(struct bh_namespace *ns, int index, int limit)
{
    return set_limit(ns, index, -1, limit);
}

int bh_compartment_set_limit_if(struct bh_namespace *ns, int index, int expected,
                                int limit)
{
    return set_limit(ns, index, expected, limit);
}

/* The reserve grows by `amount` out of the common pool: what it owed the
 * common pool is forgiven first, then free common permits move, and the
 * common pool owes the rest, paid as its permits come back. */
static int grow_reserve(struct bh_namespace *ns, int index, int r, int amount)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    struct bh_reserve_shared *reserve = &shared->reserves[r];
    unsigned short slot = slot_of(shared, r);
    int forgiven = forgive(ns, BH_SEM_RDEBT(slot), &reserve->debt_hint, NULL, amount);
    int moved = forgiven < 0 ? -1
        : move_free(ns, BH_SEM_FREE(index), BH_SEM_RFREE(slot), amount - forgiven);
    if (moved < 0)
        return -1;
    return owe(ns, BH_SEM_ROWED(slot), &reserve->owed_hint, &shared->owed_hint,
               amount - forgiven - moved);
}

/* The mirror image: the reserve shrinks by `amount` into the common pool. */
static int shrink_reserve(struct bh_namespace *ns, int index, int r, int amount)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    struct bh_reserve_shared *reserve = &shared->reserves[r];
    unsigned short slot = slot_of(shared, r);
    int forgiven = forgive(ns, BH_SEM_ROWED(slot), &reserve->owed_hint,
                           &shared->owed_hint, amount);
    int moved = forgiven < 0 ? -1
        : move_free(ns, BH_SEM_RFREE(slot), BH_SEM_FREE(index), amount - forgiven);
    if (moved < 0)
        return -1;
    return owe(ns, BH_SEM_RDEBT(slot), &reserve->debt_hint, NULL,
               amount - forgiven - moved);
}

int bh_reserve_set(struct bh_namespace *ns, int index, int r, int permits)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    if (permits < 0 || permits > BH_SEM_VALUE_MAX) {
        errno = ERANGE;
        return -1;
    }
    if (bh_lock_namespace(ns) < 0)
        return -1;
    int old = atomic_load(&shared->reserves[r].permits);
    int reserved = atomic_load(&shared->reserved) - old + permits, rc = 0;
    if (reserved > atomic_load(&shared->limit)) {
        errno = ERANGE;
        rc = -1;
    } else if (permits > old) {
        rc = grow_reserve(ns, index, r, permits - old);
    } else if (permits < old) {
        rc = shrink_reserve(ns, index, r, old - permits);
    }
    if (rc == 0) {
        atomic_store(&shared->reserves[r].permits, permits);
        atomic_store(&shared->reserved, reserved);
    }
    int saved = errno;
    bh_unlock_namespace(ns);
    errno = saved;
    return rc;
}

int bh_reserve_read(struct bh_namespace *ns, int index, int r,
                    struct bh_reserve_view *view)
{
    struct bh_shared_compartment *shared = shared_of(ns, index);
    struct bh_reserve_shared *reserve = &shared->reserves[r];
    int free_now, debt, owed;
    if (reserve_values(ns, slot_of(shared, r), &free_now, &debt, &owed) < 0)
        return -1;
    memset(view, 0, sizeof *view);
    memcpy(view->who, reserve->who, sizeof view->who);
    view->who[BH_WHO_MAX - 1] = '\0';
    view->permits = atomic_load(&reserve->permits);
    view->in_use = view->permits + debt - owed - free_now;
    view->free_now = free_now;
    view->owes = debt;
    view->waiting = semctl(ns->semid, BH_SEM_RFREE(slot_of(shared, r)), GETNCNT);
    return view->waiting < 0 ? -1 : 0;
}
