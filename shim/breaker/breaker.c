/* The circuit breaker of a compartment, shared across processes.
 *
 * What is shared: struct bh_breaker_shared in the namespace's memory (the
 * layout is permits.h's) and one SysV semaphore per compartment, the probe
 * slot (BH_SEM_PROBE, 1 when free). Only this file writes the fields.
 *
 * States, all read from one word, open_until_ns (CLOCK_MONOTONIC, which
 * every process of the machine shares):
 *   0                 closed: connects go through; failures are counted.
 *   FORCED_OPEN       open by `bulkhead set NAME breaker=open`, until
 *                     `breaker=closed`.
 *   now <  until      open: every connect is refused at once.
 *   now >= until      half-open: the one connect that takes the probe slot
 *                     goes through; the others are refused.
 * So a breaker needs no process to wake it: time alone moves it from open
 * to half-open, and the first connect after that probes.
 *
 * Who writes: any process that sees an outcome. Opening is a
 * compare-and-swap from 0, so of many processes whose failures reach the
 * threshold at once exactly one opens it (and logs). Reopening and closing
 * are done only by the probe, and there is one probe at a time: whoever
 * holds the slot. The other fields (failures, needs_bytes, open_ms,
 * counters) are plain atomics whose races cost at most a count.
 *
 * A process that dies mid-probe: the slot was taken with SEM_UNDO, so the
 * kernel gives it back and the next connect probes. A process that dies
 * between two stores here leaves at worst a stale counter or open_ms.
 *
 * Signal handlers: bh_breaker_abandon (from close) is one semop; the rest
 * are atomics and clock_gettime, all async-signal-safe. */
#include "breaker/breaker.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define FORCED_OPEN INT64_MAX

static int64_t clock_ns(clockid_t clock)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static struct bh_breaker_shared *breaker_of(const struct bh_namespace *ns, int index)
{
    return &ns->state->compartments[index].breaker;
}

static void changed(struct bh_breaker_shared *breaker)
{
    atomic_store(&breaker->changed_at_ns, clock_ns(CLOCK_REALTIME));
}

static void open_for(struct bh_breaker_shared *breaker, int open_ms)
{
    atomic_store(&breaker->open_ms, open_ms);
    atomic_store(&breaker->open_until_ns,
                 clock_ns(CLOCK_MONOTONIC) + (int64_t)open_ms * 1000000);
    atomic_fetch_add(&breaker->opened, 1);
    changed(breaker);
}

enum bh_breaker_admission bh_breaker_admit(struct bh_namespace *ns, int index)
{
    struct bh_breaker_shared *breaker = breaker_of(ns, index);
    int64_t until = atomic_load_explicit(&breaker->open_until_ns, memory_order_relaxed);
    if (until == 0)
        return BH_BREAKER_PASS;
    enum bh_breaker_admission refusal = BH_BREAKER_REFUSE_OPEN;
    if (until != FORCED_OPEN && clock_ns(CLOCK_MONOTONIC) >= until) {
        if (bh_probe_take(ns, index) == 0)
            return BH_BREAKER_PROBE;
        refusal = BH_BREAKER_REFUSE_PROBING;
    }
    atomic_fetch_add_explicit(&breaker->refused, 1, memory_order_relaxed);
    return refusal;
}

enum bh_breaker_change bh_breaker_failure(struct bh_namespace *ns, int index,
                                          const struct bh_breaker_config *config,
                                          int probe, int io)
{
    struct bh_breaker_shared *breaker = breaker_of(ns, index);
    atomic_store(&breaker->needs_bytes, (uint32_t)io);
    if (probe) {
        int64_t until = atomic_load(&breaker->open_until_ns);
        enum bh_breaker_change change = BH_BREAKER_UNCHANGED;
        /* Still half-open (an operator may have forced a state meanwhile). */
        if (until != 0 && until != FORCED_OPEN) {
            int64_t doubled = 2 * (int64_t)atomic_load(&breaker->open_ms);
            open_for(breaker, doubled < config->open_max_ms ? (int)doubled
                                                            : config->open_max_ms);
            change = BH_BREAKER_REOPENED;
        }
        bh_probe_give(ns, index);
        if (change != BH_BREAKER_UNCHANGED)
            return change;
    }
    uint32_t in_a_row = atomic_fetch_add(&breaker->failures, 1) + 1;
    if (config->failures <= 0 || in_a_row < (uint32_t)config->failures)
        return BH_BREAKER_UNCHANGED;
    int64_t closed = 0;
    int64_t until = clock_ns(CLOCK_MONOTONIC) + (int64_t)config->open_ms * 1000000;
    if (!atomic_compare_exchange_strong(&breaker->open_until_ns, &closed, until))
        return BH_BREAKER_UNCHANGED;  /* already open: another process won */
    atomic_store(&breaker->open_ms, config->open_ms);
    atomic_store(&breaker->failures, 0);
    atomic_fetch_add(&breaker->opened, 1);
    changed(breaker);
    return BH_BREAKER_OPENED;
}

int bh_breaker_wants(const struct bh_namespace *ns, int index, int bytes)
{
    return bytes || !atomic_load_explicit(&breaker_of(ns, index)->needs_bytes,
                                          memory_order_relaxed);
}

enum bh_breaker_change bh_breaker_success(struct bh_namespace *ns, int index,
                                          int probe)
{
    struct bh_breaker_shared *breaker = breaker_of(ns, index);
    atomic_store(&breaker->failures, 0);
    atomic_store(&breaker->needs_bytes, 0);
    if (!probe)
        return BH_BREAKER_UNCHANGED;
    int64_t until = atomic_load(&breaker->open_until_ns);
    enum bh_breaker_change change = BH_BREAKER_UNCHANGED;
    if (until != 0 && until != FORCED_OPEN &&
        atomic_compare_exchange_strong(&breaker->open_until_ns, &until, 0)) {
        changed(breaker);
        change = BH_BREAKER_CLOSED;
    }
    bh_probe_give(ns, index);
    return change;
}

void bh_breaker_abandon(struct bh_namespace *ns, int index)
{
    bh_probe_give(ns, index);
}

void bh_breaker_force(struct bh_namespace *ns, int index, int open)
{
    struct bh_breaker_shared *breaker = breaker_of(ns, index);
    if (open) {
        if (atomic_exchange(&breaker->open_until_ns, FORCED_OPEN) != FORCED_OPEN) {
            atomic_fetch_add(&breaker->opened, 1);
            changed(breaker);
        }
        return;
    }
    atomic_store(&breaker->failures, 0);
    atomic_store(&breaker->needs_bytes, 0);
    if (atomic_exchange(&breaker->open_until_ns, 0) != 0)
        changed(breaker);
}

void bh_breaker_read(const struct bh_namespace *ns, int index,
                     struct bh_breaker_view *view)
{
    struct bh_breaker_shared *breaker = breaker_of(ns, index);
    int64_t until = atomic_load(&breaker->open_until_ns);
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    *view = (struct bh_breaker_view){
        .state = until == 0 ? BH_BREAKER_IS_CLOSED
                 : until == FORCED_OPEN || now < until ? BH_BREAKER_IS_OPEN
                                                       : BH_BREAKER_IS_HALF_OPEN,
        .forced = until == FORCED_OPEN,
        .since_ns = atomic_load(&breaker->changed_at_ns),
        .open_ms = atomic_load(&breaker->open_ms),
        .failures = atomic_load(&breaker->failures),
        .opened = atomic_load(&breaker->opened),
        .refused = atomic_load(&breaker->refused),
    };
    if (view->state == BH_BREAKER_IS_OPEN && !view->forced)
        view->open_left_ms = (until - now + 999999) / 1000000;
}

const char *bh_breaker_state_name(enum bh_breaker_state state)
{
    switch (state) {
    case BH_BREAKER_IS_CLOSED: return "closed";
    case BH_BREAKER_IS_OPEN: return "open";
    case BH_BREAKER_IS_HALF_OPEN: return "half-open";
    }
    return "unknown";
}
