/* An admission's permits: the take (bh_permit_take, and
 * bh_permit_take_for_another for a supervisor's applicant) and its
 * give-back (bh_permit_release, bh_permit_give), decided here once: the
 * fleet lease, the breaker, per_process, the reserve or the common pool
 * (now, or after a wait), the holder record, in that order, with one
 * result. pools.c moves permits between the semaphores and counts them;
 * holders.c keeps what each process holds; socket_records.c parks the
 * permits of shared sockets. None of them calls another, nor up here.
 * The namespace itself (making, attaching, registering, the views) is
 * permits.c's.
 *
 * Shared state: none of its own. It writes the namespace's through those
 * files (the semaphores, the compartment's counters and hints, the
 * holder records), a lapsed fleet share's limit (bh_fleet_lapse, through
 * pools.c's bh_compartment_set_limit) and the breaker's probe slot
 * (breaker.c); and process-local counts: this process's own (ns->mine,
 * holders.c), or the applicant's per_process counts its caller keeps
 * (bh_take.claimed). Any process of the user that admits a connect
 * writes them: the shim for its own process, `bulkhead run`'s supervisor
 * for the programs of its tree.
 *
 * Signal safety: the give-backs are async-signal-safe (atomics and
 * semops, no lock, errno kept): a signal handler's close() may give back.
 * A take is not: it may wait, reap records (/proc reads) and claim a
 * holder record under the namespace lock.
 *
 * A process that dies mid-operation: whatever it took with SEM_UNDO the
 * kernel gives back, to the semaphores it came from; its process-local
 * counts die with it; its holder record, if it had permits counted
 * there, is freed by the next reaper, which takes them out of the
 * holders hint; a probe slot it held is taken over (breaker.c). Between
 * its semop and its record, the holders hint is off until that reap
 * (pools.c and holders.c say what each costs). */
#include "permits/permits_internal.h"

#include <errno.h>
#include <sys/sem.h>

#include "breaker/breaker.h"
#include "libc/clock.h"
#include "libc/inlined.h"

/* ---- what a take asks of the compartment: its fleet share, its size ---- */

int bh_fleet_lapse(struct bh_namespace *ns, int index, int64_t seen_until_ns)
{
    struct bh_fleet_shared *shared = &ns->state->compartments[index].fleet;
    if (!atomic_compare_exchange_strong(&shared->lease_until_ns, &seen_until_ns, 0))
        return 0;  /* renewed meanwhile, or another process lapsed it */
    atomic_store(&shared->grant, 0);
    return bh_compartment_set_limit(ns, index, 0) == 0;
}

int bh_fleet_lapse_if_over(struct bh_namespace *ns, int index)
{
    int64_t until = atomic_load_explicit(&ns->state->compartments[index].fleet.lease_until_ns,
                                         memory_order_relaxed);
    return until != 0 && bh_clock_ns(CLOCK_MONOTONIC) > until && bh_fleet_lapse(ns, index, until);
}

int bh_permit_most(const struct bh_namespace *ns, const struct bh_permit_ask *ask)
{
    const struct bh_shared_compartment *shared = &ns->state->compartments[ask->index];
    int most = atomic_load(&shared->limit) - atomic_load(&shared->reserved);
    if (ask->reserve >= 0)
        most += atomic_load(&shared->reserves[ask->reserve].permits);
    return most;
}

/* ---- taking and giving back ---- */

/* The reserve to take from: the caller's own, unless this process still
 * holds permits of another (a program exec'd by a member of another). */
static struct bh_permit_ask own_reserve(struct bh_namespace *ns,
                                        const struct bh_permit_ask *ask)
{
    struct bh_permit_ask own = *ask;
    int holding = ask->reserve >= 0 ? bh_holding_reserve(ns, ask->index) : -1;
    if (holding >= 0 && holding != ask->reserve)
        own.reserve = -1;
    return own;
}

/* A grant's permits are this process's now: its counts and its record;
 * for another process, its record alone (holders.c says why). */
static inline __attribute__((always_inline)) void
keep(struct bh_namespace *ns, int index, const struct bh_grant *grant, int for_another)
{
    if (__builtin_expect(grant->hint_stale, 0)) {
        int saved_errno = errno;
        bh_holders_reap(ns);
        errno = saved_errno;
    }
    if (for_another)
        bh_holding_add_for_another(ns, index, grant->taken);
    else
        bh_holding_add(ns, index, grant->taken);
}

enum bh_acquire_result bh_permit_try(struct bh_namespace *ns,
                                     const struct bh_permit_ask *ask)
{
    struct bh_permit_ask own = own_reserve(ns, ask);
    struct bh_grant grant;
    enum bh_acquire_result result = bh_pools_try(ns, &own, &grant);
    if (result == BH_ACQUIRED)
        keep(ns, ask->index, &grant, 0);
    return result;
}

enum bh_acquire_result bh_permit_wait(struct bh_namespace *ns,
                                      const struct bh_permit_ask *ask,
                                      int wait_ms, int max_waiters)
{
    struct bh_permit_ask own = own_reserve(ns, ask);
    struct bh_grant grant;
    const struct bh_wait wait = { wait_ms, max_waiters, NULL, NULL };
    enum bh_acquire_result result = bh_pools_wait(ns, &own, &wait, &grant);
    if (result == BH_ACQUIRED)
        keep(ns, ask->index, &grant, 0);
    return result;
}

/* Refused (a uid that cannot reach the namespace): still ours, counts
 * and claim as they were, and its opener is told. */
static __attribute__((noinline, cold)) void kept(struct bh_namespace *ns, int index,
                                                 int weight, struct bh_taken taken)
{
    bh_holding_claim(ns->mine, index, (uint32_t)weight, 0);
    bh_holding_add(ns, index, taken);
    if (ns->refused)
        ns->refused(ns, index, weight);
}

BH_INLINED_ACROSS void bh_permit_release(struct bh_namespace *ns, int index, int weight)
{
    struct bh_taken taken = bh_holding_remove(ns, index, weight);
    if (__builtin_expect(bh_pools_give(ns, index, weight, taken, SEM_UNDO) < 0, 0))
        kept(ns, index, weight, taken);
}

void bh_permit_give(struct bh_namespace *ns, int index, struct bh_taken taken,
                    _Atomic uint32_t *claimed)
{
    uint32_t weight = taken.common + taken.reserved;
    bh_holding_remove_for_another(ns, index, taken);
    bh_pools_give(ns, index, (int)weight, taken, SEM_UNDO);
    atomic_fetch_sub(&claimed[index], weight);
}

void bh_permit_give_parked(struct bh_namespace *ns, int index, bh_share share, int weight,
                           _Atomic uint32_t *claimed)
{
    bh_socket_unref(ns, share);
    atomic_fetch_sub(&claimed[index], (uint32_t)weight);
}

/* The pools a take asks: another process's own reserve as its ask names
 * it; this process's, unless it still holds permits of another. */
static struct bh_permit_ask pools_asked(struct bh_namespace *ns, const struct bh_take *take)
{
    return take->claimed ? take->ask : own_reserve(ns, &take->ask);
}

/* Counts the ask against the applicant's per_process cap (0: none). */
static inline __attribute__((always_inline)) int
claim(struct bh_namespace *ns, const struct bh_take *take, int for_another)
{
    int per_process = take->compartment->per_process;
    if (!for_another)
        return bh_holding_claim(ns->mine, take->ask.index, (uint32_t)take->ask.weight,
                                per_process);
    _Atomic uint32_t *claimed = &take->claimed[take->ask.index];
    uint32_t weight = (uint32_t)take->ask.weight;
    uint32_t before = atomic_fetch_add(claimed, weight);
    if (per_process > 0 && before + weight > (uint32_t)per_process) {
        atomic_fetch_sub(claimed, weight);
        return -1;
    }
    return 0;
}

static void unclaim(struct bh_namespace *ns, const struct bh_take *take)
{
    if (take->claimed)
        atomic_fetch_sub(&take->claimed[take->ask.index], (uint32_t)take->ask.weight);
    else
        bh_permit_unclaim(ns, &take->ask);
}

/* A weight above all the permits this caller may ever take (the common
 * pool, and its own reserve) can wait for nothing. Not asked for a weight
 * of 1, nor at limit 0, nor for a fleet compartment, whose share grows
 * when callers wait for it. */
static int never_enough(const struct bh_namespace *ns, const struct bh_take *take, int *most)
{
    const struct bh_permit_ask *ask = &take->ask;
    if (ask->weight == 1 || take->compartment->fleet_limit > 0 ||
        bh_compartment_limit(ns, ask->index) == 0)
        return 0;
    *most = bh_permit_most(ns, ask);
    return ask->weight > *most;
}

static enum bh_take_result take_result(enum bh_acquire_result result)
{
    switch (result) {
    case BH_ACQUIRED: return BH_TAKE_GRANTED;
    case BH_REJECTED: return BH_TAKE_FULL;
    case BH_TIMED_OUT: return BH_TAKE_TIMED_OUT;
    case BH_BYPASS: return BH_TAKE_GONE;
    case BH_INTERRUPTED: return BH_TAKE_INTERRUPTED;
    case BH_FAILED: break;
    }
    return BH_TAKE_FAILED;
}

/* Shadow mode, where enforce would not grant at once (`would`: its
 * refusal; would_wait: it would have waited instead): the connect takes
 * permits of the headroom, held and given back as any others, so they
 * are counted in use and come back exactly once on every path. The first
 * reason is the one counted. Past the headroom, refused as enforce does. */
static enum bh_take_result let_past(struct bh_namespace *ns, const struct bh_permit_ask *own,
                                    struct bh_grant *grant, struct bh_take_outcome *outcome,
                                    enum bh_take_result would, int would_wait)
{
    enum bh_acquire_result got = bh_pools_take_past(ns, own, grant);
    if (got == BH_REJECTED)
        bh_permit_count_rejected(ns, own->index);
    if (got != BH_ACQUIRED)
        return got == BH_REJECTED ? would : take_result(got);
    if (outcome->shadowed == BH_TAKE_GRANTED) {
        outcome->shadowed = would;
        outcome->would_wait = would_wait;
    }
    return BH_TAKE_GRANTED;
}

/* Full at once: permits of sockets whose holders are gone come back
 * first (a shared socket every holder of which died holds its permits
 * until someone asks the kernel: socket_records.c), then the caller says
 * how long it may wait; in shadow mode nobody waits (let_past). */
static enum bh_take_result when_full(struct bh_namespace *ns, const struct bh_take *take,
                                     const struct bh_permit_ask *own, struct bh_grant *grant,
                                     struct bh_take_outcome *outcome)
{
    int index = own->index;
    enum bh_acquire_result result = BH_REJECTED;
    int reaped = bh_socket_reap(ns, index) + (take->reap ? take->reap(take->ctx) : 0);
    if (reaped > 0)
        result = bh_pools_try(ns, own, grant);
    if (result != BH_REJECTED)
        return take_result(result);
    int never = never_enough(ns, take, &outcome->most);
    int (*restart)(void *ctx) = NULL;
    int wait_ms = never || !take->wait_ms ? 0 : take->wait_ms(take->ctx, &take->ask, &restart);
    if (bh_compartment_shadow(ns, index))
        return let_past(ns, own, grant, outcome, never ? BH_TAKE_NEVER_ENOUGH : BH_TAKE_FULL,
                        !never && wait_ms != 0);
    if (wait_ms == BH_WAIT_ELSEWHERE)
        return BH_TAKE_ELSEWHERE;  /* counted by the take that waits */
    if (wait_ms == 0) {
        bh_permit_count_rejected(ns, index);
        return never ? BH_TAKE_NEVER_ENOUGH : BH_TAKE_FULL;
    }
    int holding = take->claimed ? atomic_load(&take->claimed[index]) > (uint32_t)own->weight
                                : bh_permit_held(ns, index) > 0;
    if (holding)  /* hold and wait: stat names it */
        bh_permit_note_waiting(ns, index, +1);
    const struct bh_wait wait = { wait_ms, take->compartment->max_waiters, restart, take->ctx };
    result = bh_pools_wait(ns, own, &wait, grant);
    if (holding)
        bh_permit_note_waiting(ns, index, -1);
    return result == BH_REJECTED ? BH_TAKE_WAITERS : take_result(result);
}

/* Not granted at once (full, gone, failed), or the breaker's word was
 * not "closed", or the fleet's: the rest of the take, out of line. */
static __attribute__((noinline, cold)) enum bh_take_result
take_slowly(struct bh_namespace *ns, const struct bh_take *take,
            struct bh_take_outcome *outcome, enum bh_breaker_admission breaker,
            enum bh_acquire_result tried, struct bh_grant *grant)
{
    const struct bh_permit_ask *ask = &take->ask;
    int64_t probe = breaker == BH_BREAKER_PROBE ? outcome->breaker.since_ns : 0;
    struct bh_permit_ask own = pools_asked(ns, take);
    enum bh_take_result result = take_result(tried);
    outcome->tell = outcome->lapsed || outcome->breaker.replaced_pid;
    if ((breaker == BH_BREAKER_REFUSE_OPEN || breaker == BH_BREAKER_REFUSE_PROBING) &&
        bh_compartment_shadow(ns, ask->index)) {
        if (outcome->shadowed == BH_TAKE_GRANTED)
            outcome->shadowed = breaker == BH_BREAKER_REFUSE_OPEN ? BH_TAKE_BREAKER_OPEN
                                                                  : BH_TAKE_BREAKER_PROBING;
        breaker = BH_BREAKER_PASS;
        tried = bh_pools_try(ns, &own, grant);
        result = take_result(tried);
    }
    if (breaker == BH_BREAKER_REFUSE_OPEN)
        result = BH_TAKE_BREAKER_OPEN;
    else if (breaker == BH_BREAKER_REFUSE_PROBING)
        result = BH_TAKE_BREAKER_PROBING;
    else if (tried == BH_REJECTED)
        result = when_full(ns, take, &own, grant, outcome);
    if (result == BH_TAKE_GRANTED) {
        keep(ns, ask->index, grant, take->claimed != NULL);
        outcome->from_reserve = grant->taken.reserved;
        outcome->probe = probe;
        if (outcome->shadowed != BH_TAKE_GRANTED) {
            bh_permit_count_shadow(ns, ask->index, outcome->would_wait);
            outcome->tell = 1;
        }
        return result;
    }
    unclaim(ns, take);
    if (probe)
        bh_breaker_abandon(bh_breaker_fields(ns, ask->index), probe);
    return result;
}

static __attribute__((noinline, cold)) enum bh_take_result
refuse_per_process(struct bh_namespace *ns, const struct bh_take *take,
                   struct bh_take_outcome *outcome)
{
    *outcome = (struct bh_take_outcome){ .tell = 0 };
    bh_permit_count_per_process(ns, take->ask.index);
    return BH_TAKE_PER_PROCESS;
}

static enum bh_take_result past_cap(struct bh_namespace *ns, const struct bh_take *take,
                                    struct bh_take_outcome *outcome, int for_another);

/* One take, for this process or (for_another, a constant in each caller
 * below) for another: each a straight path of its own. over_cap, a
 * constant too: claimed past per_process in shadow mode (past_cap). */
static inline __attribute__((always_inline)) enum bh_take_result
take_for(struct bh_namespace *ns, const struct bh_take *take,
         struct bh_take_outcome *outcome, int for_another, int over_cap)
{
    const struct bh_permit_ask *ask = &take->ask;
    if (!over_cap && claim(ns, take, for_another) < 0)
        return past_cap(ns, take, outcome, for_another);
    int lapsed = take->compartment->fleet_limit > 0 &&
                 bh_fleet_lapse_if_over(ns, ask->index);
    enum bh_breaker_admission breaker = BH_BREAKER_PASS;
    if (__builtin_expect(!bh_breaker_is_closed(bh_breaker_fields(ns, ask->index)), 0)) {
        *outcome = (struct bh_take_outcome){ .tell = 0 };
        breaker = bh_breaker_admit(bh_breaker_fields(ns, ask->index), take->compartment,
                                   &outcome->breaker);
    }
    struct bh_grant grant;  /* written by bh_pools_try; read only once granted */
    enum bh_acquire_result tried = BH_REJECTED;
    if (breaker == BH_BREAKER_PASS || breaker == BH_BREAKER_PROBE) {
        if (ask->reserve < 0 || for_another) {
            tried = bh_pools_try(ns, ask, &grant);
        } else {
            struct bh_permit_ask own = own_reserve(ns, ask);
            tried = bh_pools_try(ns, &own, &grant);
        }
    }
    if (__builtin_expect(tried != BH_ACQUIRED || breaker != BH_BREAKER_PASS || lapsed ||
                         over_cap, 0)) {
        if (breaker == BH_BREAKER_PASS)
            *outcome = (struct bh_take_outcome){ .tell = 0 };
        outcome->lapsed = lapsed;
        if (over_cap)
            outcome->shadowed = BH_TAKE_PER_PROCESS;
        return take_slowly(ns, take, outcome, breaker, tried, &grant);
    }
    keep(ns, ask->index, &grant, for_another);
    outcome->from_reserve = grant.taken.reserved;
    outcome->probe = 0;
    outcome->tell = 0;
    return BH_TAKE_GRANTED;
}

/* Past per_process: refused, or in shadow mode claimed all the same (the
 * give-back unclaims it) and taken on, counted as enforce's refusal. */
static __attribute__((noinline, cold)) enum bh_take_result
past_cap(struct bh_namespace *ns, const struct bh_take *take,
         struct bh_take_outcome *outcome, int for_another)
{
    if (!bh_compartment_shadow(ns, take->ask.index))
        return refuse_per_process(ns, take, outcome);
    if (for_another) {
        atomic_fetch_add(&take->claimed[take->ask.index], (uint32_t)take->ask.weight);
        return take_for(ns, take, outcome, 1, 1);
    }
    bh_holding_claim(ns->mine, take->ask.index, (uint32_t)take->ask.weight, 0);
    return take_for(ns, take, outcome, 0, 1);
}

BH_INLINED_ACROSS enum bh_take_result bh_permit_take(struct bh_namespace *ns,
                                                     const struct bh_take *take,
                                                     struct bh_take_outcome *outcome)
{
    return take_for(ns, take, outcome, 0, 0);
}

enum bh_take_result bh_permit_take_for_another(struct bh_namespace *ns,
                                               const struct bh_take *take,
                                               struct bh_take_outcome *outcome)
{
    return take_for(ns, take, outcome, 1, 0);
}
