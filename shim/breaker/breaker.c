/* The circuit breaker of a compartment, shared across processes.
 *
 * What is shared: struct bh_breaker_shared (breaker_fields.h) in the
 * namespace's memory, one per compartment, where shim/permits keeps it
 * (bh_breaker_fields). Only this file writes the fields.
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
 * The probe slot is one word, `probe`: 0 when free, else who holds it and
 * since when, (ms << 22) | pid (CLOCK_MONOTONIC ms, and a pid below
 * Linux's 2^22 ceiling). Taking it is a compare-and-swap from 0. A probe
 * may never report: a pool's socket connected and never used, a stopped or
 * dead process. It cannot run code to give the slot up, so the next
 * connect does it for it: past the probe's deadline (probe_deadline_ms
 * below), or at once when kill(pid, 0) says the process is gone, it swaps
 * the word it saw for its own. One swap wins; the silent probe is
 * counted as a failure. Giving back is a compare-and-swap from the
 * holder's own word to 0, so a probe that was taken over and reports
 * late finds another word there and changes nothing: the slot is released
 * exactly once, by whoever holds it. (A semaphore with SEM_UNDO cannot be
 * taken over: its holder's undo record would give it back a second time.)
 *
 * Who writes the rest: any process that sees an outcome. Opening is a
 * compare-and-swap from 0, so of many processes whose failures reach the
 * threshold at once exactly one opens it (and logs). Reopening and closing
 * are done only by the probe, whose word is in the slot. The other fields
 * (failures, needs_bytes, open_ms, counters) are plain atomics whose races
 * cost at most a count.
 *
 * What a death costs, at each point:
 *   - holding the slot: nothing is given back, but the next connect finds
 *     the pid gone and probes (at once), or, if the pid was reused, once
 *     the deadline passes: refusals for at most the deadline.
 *   - between its check that it still holds the slot and reopening or
 *     closing: the slot stays held as above; the breaker stays half-open.
 *   - between reopening or closing and giving the slot back: the breaker
 *     has its new state; the slot is held by a dead pid, taken over at the
 *     next half-open as above.
 *   - taking over, between reading the word and swapping it: nothing
 *     changed; the next connect tries again.
 *   - between two stores of the other fields: at worst a stale counter or
 *     open_ms.
 * A process in another pid namespace sharing this IPC namespace may look
 * gone to kill(); its probe is then taken over early, and two probes go
 * out at once, no more.
 *
 * Signal handlers: bh_breaker_abandon (from close) is a getpid and a
 * compare-and-swap; the rest are atomics, clock_gettime and kill, all
 * async-signal-safe. */
#include "breaker/breaker.h"
#include "libc/clock.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define FORCED_OPEN INT64_MAX
enum { PID_BITS = 22 };  /* Linux's PID_MAX_LIMIT is 2^22 */

static void changed(struct bh_breaker_shared *breaker)
{
    atomic_store(&breaker->changed_at_ns, bh_clock_ns(CLOCK_REALTIME));
}

static void open_for(struct bh_breaker_shared *breaker, int open_ms)
{
    atomic_store(&breaker->open_ms, open_ms);
    atomic_store(&breaker->open_until_ns,
                 bh_clock_ns(CLOCK_MONOTONIC) + (int64_t)open_ms * 1000000);
    atomic_fetch_add(&breaker->opened, 1);
    changed(breaker);
}

/* The slot's word for a probe taken at since_ns by this process. */
static int64_t probe_word(int64_t since_ns)
{
    return (since_ns / 1000000) << PID_BITS | (int64_t)getpid();
}

/* Gives the slot back if `probe` still holds it; 1 if it did. */
static int give_probe(struct bh_breaker_shared *breaker, int64_t probe)
{
    int64_t mine = probe_word(probe);
    return probe && atomic_compare_exchange_strong(&breaker->probe, &mine, 0);
}

static int holds_probe(struct bh_breaker_shared *breaker, int64_t probe)
{
    return probe && atomic_load(&breaker->probe) == probe_word(probe);
}

/* Whether the holder of `word` has had its time: silent past the deadline,
 * or its process gone. Fills in what the taker logs. */
static int probe_expired(int64_t word, int64_t now_ns, int deadline_ms,
                         struct bh_probe_taken *taken)
{
    int pid = (int)(word & ((1 << PID_BITS) - 1));
    int64_t silent_ms = now_ns / 1000000 - (word >> PID_BITS);
    int saved_errno = errno;
    int gone = silent_ms < deadline_ms && kill(pid, 0) < 0 && errno == ESRCH;
    errno = saved_errno;
    *taken = (struct bh_probe_taken){ 0, pid, gone, silent_ms };
    return gone || silent_ms >= deadline_ms;
}

/* How long a probe may stay silent before the next connect takes its
 * slot: with connect_timeout_ms, the time a live probe needs to show
 * anything (its connect, then its first bytes within io_timeout_ms);
 * without, a connect may rightly hang for the kernel's minutes of SYN
 * retries, and the longest the breaker ever keeps everyone out,
 * breaker_open_max_ms, bounds what a silent probe may cost. The taker's
 * rules decide: each process applies its own. */
static int probe_deadline_ms(const struct bh_compartment *compartment)
{
    if (compartment->connect_timeout_ms)
        return compartment->connect_timeout_ms + compartment->io_timeout_ms;
    return compartment->breaker_open_max_ms;
}

/* Half-open: the slot if it is free, or if its holder has had its time. */
static int take_probe(struct bh_breaker_shared *breaker, int64_t now_ns,
                      int deadline_ms, struct bh_probe_taken *taken)
{
    int64_t seen = atomic_load(&breaker->probe);
    struct bh_probe_taken mine = { 0, 0, 0, 0 };
    if (seen != 0 && !probe_expired(seen, now_ns, deadline_ms, &mine))
        return 0;
    if (!atomic_compare_exchange_strong(&breaker->probe, &seen, probe_word(now_ns)))
        return 0;  /* another connect took it first */
    mine.since_ns = now_ns;
    *taken = mine;
    if (mine.replaced_pid) {  /* the silent probe failed */
        atomic_fetch_add(&breaker->failures, 1);
        atomic_fetch_add(&breaker->probes_taken_over, 1);
    }
    return 1;
}

enum bh_breaker_admission bh_breaker_admit(struct bh_breaker_shared *breaker,
                                           const struct bh_compartment *compartment,
                                           struct bh_probe_taken *taken)
{
    int64_t until = atomic_load_explicit(&breaker->open_until_ns, memory_order_relaxed);
    if (until == 0)
        return BH_BREAKER_PASS;
    enum bh_breaker_admission refusal = BH_BREAKER_REFUSE_OPEN;
    int64_t now = until != FORCED_OPEN ? bh_clock_ns(CLOCK_MONOTONIC) : 0;
    if (until != FORCED_OPEN && now >= until) {
        if (take_probe(breaker, now, probe_deadline_ms(compartment), taken))
            return BH_BREAKER_PROBE;
        refusal = BH_BREAKER_REFUSE_PROBING;
    }
    atomic_fetch_add_explicit(&breaker->refused, 1, memory_order_relaxed);
    return refusal;
}

enum bh_breaker_change bh_breaker_failure(struct bh_breaker_shared *breaker,
                                          const struct bh_breaker_config *config,
                                          int64_t probe, int io)
{
    atomic_store(&breaker->needs_bytes, (uint32_t)io);
    if (holds_probe(breaker, probe)) {
        int64_t until = atomic_load(&breaker->open_until_ns);
        enum bh_breaker_change change = BH_BREAKER_UNCHANGED;
        /* Still half-open (an operator may have forced a state meanwhile). */
        if (until != 0 && until != FORCED_OPEN) {
            int64_t doubled = 2 * (int64_t)atomic_load(&breaker->open_ms);
            open_for(breaker, doubled < config->open_max_ms ? (int)doubled
                                                            : config->open_max_ms);
            change = BH_BREAKER_REOPENED;
        }
        give_probe(breaker, probe);
        if (change != BH_BREAKER_UNCHANGED)
            return change;
    } else if (probe) {
        return BH_BREAKER_UNCHANGED;  /* taken over: counted as failed then */
    }
    uint32_t in_a_row = atomic_fetch_add(&breaker->failures, 1) + 1;
    if (config->failures <= 0 || in_a_row < (uint32_t)config->failures)
        return BH_BREAKER_UNCHANGED;
    int64_t closed = 0;
    int64_t until = bh_clock_ns(CLOCK_MONOTONIC) + (int64_t)config->open_ms * 1000000;
    if (!atomic_compare_exchange_strong(&breaker->open_until_ns, &closed, until))
        return BH_BREAKER_UNCHANGED;  /* already open: another process won */
    atomic_store(&breaker->open_ms, config->open_ms);
    atomic_store(&breaker->failures, 0);
    atomic_fetch_add(&breaker->opened, 1);
    changed(breaker);
    return BH_BREAKER_OPENED;
}

int bh_breaker_wants(const struct bh_breaker_shared *breaker, int bytes)
{
    return bytes || !atomic_load_explicit(&breaker->needs_bytes,
                                          memory_order_relaxed);
}

enum bh_breaker_change bh_breaker_success(struct bh_breaker_shared *breaker,
                                          int64_t probe)
{
    atomic_store(&breaker->failures, 0);
    atomic_store(&breaker->needs_bytes, 0);
    if (!holds_probe(breaker, probe))  /* not the probe, or taken over */
        return BH_BREAKER_UNCHANGED;
    int64_t until = atomic_load(&breaker->open_until_ns);
    enum bh_breaker_change change = BH_BREAKER_UNCHANGED;
    if (until != 0 && until != FORCED_OPEN &&
        atomic_compare_exchange_strong(&breaker->open_until_ns, &until, 0)) {
        changed(breaker);
        change = BH_BREAKER_CLOSED;
    }
    give_probe(breaker, probe);
    return change;
}

void bh_breaker_abandon(struct bh_breaker_shared *breaker, int64_t probe)
{
    give_probe(breaker, probe);
}

void bh_breaker_force(struct bh_breaker_shared *breaker, int open)
{
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

void bh_breaker_read(const struct bh_breaker_shared *breaker,
                     struct bh_breaker_view *view)
{
    int64_t until = atomic_load(&breaker->open_until_ns);
    int64_t now = bh_clock_ns(CLOCK_MONOTONIC);
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
        .probes_taken_over = atomic_load(&breaker->probes_taken_over),
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
