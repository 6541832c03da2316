/* Windowed figures per compartment, in the namespace's memory, kept with
 * no daemon: whoever records turns the slots over.
 *
 * What is shared: per compartment one struct bh_window_shared (window.h):
 * a ring of 64 one-second slots (admitted, refused, timed out, answers
 * timed, permit-us, and when in the second the first figure came), two
 * rings of 8 eight-second periods of log-linear histograms (hold time,
 * turnaround), and when the latest figure came (where a window ends; one
 * plain store, so racing recorders may leave it a few us early). Each
 * slot is tagged with the second (period) + 1 it
 * counts. Readers sum the slots whose tags fall in their window; a slot
 * whose tag is older holds figures from a minute ago and is skipped.
 *
 * Who writes: every process of the namespace, with atomics, no lock.
 * A recorder for second s finds its slot (s mod 64):
 *   - tagged s + 1: it adds;
 *   - tagged with an older second: it claims the slot by CAS from that tag
 *     to -(s + 1), clears the counters, then stores s + 1 (release);
 *   - tagged -(s + 1): another recorder is clearing it: the sample is
 *     dropped;
 *   - tagged with a later second: the sample's second has left the ring
 *     (a hold spread back past it): dropped.
 * What that costs: a recorder that loaded the tag s + 1 and adds after
 * another claimed the slot for a later second puts one sample in the
 * wrong second (it must sleep a whole minute between two instructions);
 * samples that arrive while a slot is being cleared (a few hundred
 * stores) are dropped. A recorder killed while clearing leaves the slot
 * tagged -(s + 1): the rest of that second (or period) is dropped, and
 * the slot's next turn claims it as usual. A death costs a few samples,
 * never a permit: nothing here touches the semaphores.
 *
 * Permit time: a hold's weight x length is added when it ends, spread
 * over the seconds it covered that are still in the ring (a hold of ten
 * minutes adds to the last 63 seconds), and its admission is counted
 * then too, in the second it began (so the connect path pays nothing).
 * Only ended holds count, so nothing can drift: a SIGKILLed holder adds
 * nothing, and its permit's time is missing, not counted forever. The
 * price is that a connection still open is not in the figures yet: rates
 * lag by the connections in flight, and for keep-alive connections held
 * for minutes mean in use and utilization read low and hold time is not
 * the signal; turnaround is (suggest says which it used, and when).
 *
 * Readers take each slot's tag, its counters, then the tag again: a slot
 * turned over meanwhile is left out. Figures of one slot are not one
 * snapshot (an event counted between two loads), which sums tolerate.
 *
 * Recording is async-signal-safe: atomics only, no syscall, no lock. */
#include "permits/permits_internal.h"

#include <string.h>

#include "libc/inlined.h"
#include "permits/window.h"

_Static_assert(sizeof(struct bh_window_fixed) == sizeof(struct bh_histogram),
               "turnaround_total has the layout of a fixed histogram");

enum { NS_PER_S = 1000000000, NS_PER_US = 1000 };

/* ---- log-linear buckets ---- */

int bh_loghist_bucket(uint64_t us)
{
    enum { SUB = 1 << BH_LOGHIST_SUB_BITS };
    if (us < 2 * SUB)
        return (int)us;
    int power = 63 - __builtin_clzll(us);          /* >= 4 */
    int bucket = (power - BH_LOGHIST_SUB_BITS + 1) * SUB +
                 (int)((us >> (power - BH_LOGHIST_SUB_BITS)) & (SUB - 1));
    return bucket < BH_LOGHIST_BUCKETS ? bucket : BH_LOGHIST_BUCKETS - 1;
}

uint64_t bh_loghist_lower_us(int bucket)
{
    enum { SUB = 1 << BH_LOGHIST_SUB_BITS };
    if (bucket < 2 * SUB)
        return (uint64_t)bucket;
    int power = bucket / SUB + BH_LOGHIST_SUB_BITS - 1;
    return (uint64_t)(SUB + bucket % SUB) << (power - BH_LOGHIST_SUB_BITS);
}

uint64_t bh_loghist_width_us(int bucket)
{
    enum { SUB = 1 << BH_LOGHIST_SUB_BITS };
    if (bucket < 2 * SUB)
        return 1;
    return (uint64_t)1 << (bucket / SUB - 1);
}

double bh_loghist_quantile_us(const uint64_t counts[BH_LOGHIST_BUCKETS],
                              uint64_t count, double q)
{
    if (count == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)count + 0.999999), seen = 0;
    rank = rank < 1 ? 1 : rank > count ? count : rank;
    int bucket = 0;
    while (bucket < BH_LOGHIST_BUCKETS - 1 && (seen += counts[bucket]) < rank)
        bucket++;
    return (double)bh_loghist_lower_us(bucket) + (double)bh_loghist_width_us(bucket) / 2;
}

/* ---- slots ---- */

static void clear_second(struct bh_window_second *slot)
{
    for (int e = 0; e < BH_WINDOW_EVENTS; e++)
        atomic_store_explicit(&slot->events[e], 0, memory_order_relaxed);
    atomic_store_explicit(&slot->permit_us, 0, memory_order_relaxed);
    atomic_store_explicit(&slot->first_us, NS_PER_S / NS_PER_US, memory_order_relaxed);
}

static void clear_period(struct bh_window_period *slot)
{
    for (int b = 0; b < BH_LOGHIST_BUCKETS; b++)
        atomic_store_explicit(&slot->counts[b], 0, memory_order_relaxed);
}

/* Whether a sample for `tag` may be added to the slot tagged *slot_tag,
 * claiming it first when it holds an older time (see the top): clear()
 * empties it, with `first_us` the claimer's moment in its second. */
static inline int claim(_Atomic int64_t *slot_tag, int64_t tag,
                        void (*clear)(void *, uint32_t), void *slot, uint32_t first_us)
{
    int64_t seen = atomic_load_explicit(slot_tag, memory_order_acquire);
    for (;;) {
        if (seen == tag)
            return 1;
        if (seen == -tag || seen > tag || -seen > tag)
            return 0;
        if (atomic_compare_exchange_weak_explicit(slot_tag, &seen, -tag,
                                                  memory_order_acquire,
                                                  memory_order_acquire)) {
            clear(slot, first_us);
            atomic_store_explicit(slot_tag, tag, memory_order_release);
            return 1;
        }
    }
}

/* The claimer's moment is the second's first figure: refusals and
 * answers are counted as they happen, a hold's pieces at their starts. */
static void clear_second_slot(void *slot, uint32_t first_us)
{
    clear_second(slot);
    atomic_store_explicit(&((struct bh_window_second *)slot)->first_us, first_us,
                          memory_order_relaxed);
}

static void clear_period_slot(void *slot, uint32_t first_us)
{
    (void)first_us;
    clear_period(slot);
}

/* The claims, out of line: once per slot and second (period), and the
 * recording paths that inline the look at a slot's tag pass them little. */
static __attribute__((noinline)) struct bh_window_second *
claim_second(struct bh_window_second *slot, int64_t second, int64_t at_ns)
{
    uint32_t first_us = (uint32_t)((at_ns - second * NS_PER_S) / NS_PER_US);
    return claim(&slot->tag, second + 1, clear_second_slot, slot, first_us) ? slot : NULL;
}

static __attribute__((noinline)) int claim_period(struct bh_window_period *slot,
                                                  uint64_t period)
{
    return claim(&slot->tag, (int64_t)period + 1, clear_period_slot, slot, 0);
}

/* The slot of `second`, claimed for it (at_ns: the figure's moment in
 * it); NULL when the figure must be dropped. */
static inline struct bh_window_second *second_at(struct bh_window_shared *window,
                                                 int64_t second, int64_t at_ns)
{
    struct bh_window_second *slot = &window->seconds[(uint64_t)second % BH_WINDOW_SLOTS];
    if (__builtin_expect(atomic_load_explicit(&slot->tag, memory_order_acquire) ==
                         second + 1, 1))
        return slot;
    return claim_second(slot, second, at_ns);
}

static inline void add_to_period(struct bh_window_period *ring, uint64_t second, uint64_t us)
{
    uint64_t period = second / BH_WINDOW_PERIOD_S;
    struct bh_window_period *slot = &ring[period % BH_WINDOW_PERIODS];
    if (__builtin_expect(atomic_load_explicit(&slot->tag, memory_order_acquire) !=
                         (int64_t)period + 1, 0) &&
        !claim_period(slot, period))
        return;
    atomic_fetch_add_explicit(&slot->counts[bh_loghist_bucket(us)], 1,
                              memory_order_relaxed);
}

/* The latest figure so far: a plain store, so that racing recorders may
 * leave it a few us early, which a window's end can bear. */
static inline void note_last(struct bh_window_shared *window, int64_t at_ns)
{
    atomic_store_explicit(&window->last_ns, at_ns, memory_order_relaxed);
}

/* A hold's start may come before the figure that claimed its second (a
 * refusal while it was held): the second's first moment moves back to it,
 * so that a window never starts after a permit time it sums. A load and a
 * compare when it does not. */
static inline void note_first(struct bh_window_second *slot, int64_t second,
                              int64_t since_ns)
{
    uint32_t us = (uint32_t)((since_ns - second * NS_PER_S) / NS_PER_US);
    uint32_t first = atomic_load_explicit(&slot->first_us, memory_order_relaxed);
    while (__builtin_expect(us < first, 0) &&
           !atomic_compare_exchange_weak_explicit(&slot->first_us, &first, us,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* ---- recording ---- */

void bh_window_count_many(struct bh_window_shared *window, enum bh_window_event event,
                          uint32_t count, int64_t now_ns)
{
    struct bh_window_second *slot = second_at(window, now_ns / NS_PER_S, now_ns);
    if (!slot)
        return;
    atomic_fetch_add_explicit(&slot->events[event], count, memory_order_relaxed);
    note_last(window, now_ns);
}

void bh_window_count(struct bh_window_shared *window, enum bh_window_event event,
                     int64_t now_ns)
{
    bh_window_count_many(window, event, 1, now_ns);
}

/* weight x the part of [since_ns, now_ns] in each second still in the
 * ring, newest first: a hold that crossed a second. The oldest piece's
 * second, where it began, counts the admission. */
static __attribute__((noinline)) void spread_permit_time(struct bh_window_shared *window,
                                                         int weight, int64_t since_ns,
                                                         int64_t now_ns)
{
    int64_t end = now_ns, second = now_ns / NS_PER_S;
    int64_t oldest = second - (BH_WINDOW_SLOTS - 2);
    for (; second >= oldest && end > since_ns; second--) {
        int64_t start = second * NS_PER_S > since_ns ? second * NS_PER_S : since_ns;
        struct bh_window_second *slot = second_at(window, second, start);
        if (slot) {
            atomic_fetch_add_explicit(&slot->permit_us,
                                      (uint64_t)weight * (uint64_t)((end - start) / NS_PER_US),
                                      memory_order_relaxed);
            if (start == since_ns) {
                atomic_fetch_add_explicit(&slot->events[BH_WINDOW_ADMITTED], 1,
                                          memory_order_relaxed);
                note_first(slot, second, since_ns);
            }
        }
        end = start;
    }
}

static inline __attribute__((always_inline)) void
hold(struct bh_window_shared *window, int weight, int64_t since_ns, int64_t now_ns)
{
    if (now_ns < since_ns)
        return;
    uint64_t held_us = (uint64_t)(now_ns - since_ns) / NS_PER_US;
    int64_t second = now_ns / NS_PER_S;
    note_last(window, now_ns);
    add_to_period(window->hold, (uint64_t)second, held_us);
    atomic_fetch_add_explicit(&window->permit_us_total, (uint64_t)weight * held_us,
                              memory_order_relaxed);
    if (since_ns < second * NS_PER_S) {
        spread_permit_time(window, weight, since_ns, now_ns);
        return;
    }
    /* Within one second, the usual case: one slot for all of it. */
    struct bh_window_second *slot = second_at(window, second, since_ns);
    if (!slot)
        return;
    atomic_fetch_add_explicit(&slot->permit_us, (uint64_t)weight * held_us,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&slot->events[BH_WINDOW_ADMITTED], 1, memory_order_relaxed);
    note_first(slot, second, since_ns);
}

void bh_window_hold(struct bh_window_shared *window, int weight, int64_t since_ns,
                    int64_t now_ns)
{
    hold(window, weight, since_ns, now_ns);
}

/* permits.h's: the window's hold and the cumulative histogram's, in one
 * call from the close path. */
BH_INLINED_ACROSS void bh_count_hold(struct bh_namespace *ns, int index, int weight,
                                     int64_t since_ns, int64_t now_ns)
{
    hold(&ns->state->windows[index], weight, since_ns, now_ns);
    bh_histogram_record(&ns->state->compartments[index].hold_time, now_ns - since_ns);
}

void bh_window_turnaround(struct bh_window_shared *window, int64_t elapsed_ns,
                          int64_t now_ns)
{
    if (elapsed_ns < 0)
        return;
    add_to_period(window->turnaround, (uint64_t)(now_ns / NS_PER_S),
                  (uint64_t)elapsed_ns / NS_PER_US);
    note_last(window, now_ns);
    bh_histogram_record((struct bh_histogram *)&window->turnaround_total, elapsed_ns);
}

void bh_window_clear(struct bh_window_shared *window)
{
    for (int s = 0; s < BH_WINDOW_SLOTS; s++) {
        atomic_store(&window->seconds[s].tag, 0);
        clear_second(&window->seconds[s]);
    }
    for (int p = 0; p < BH_WINDOW_PERIODS; p++) {
        atomic_store(&window->hold[p].tag, 0);
        atomic_store(&window->turnaround[p].tag, 0);
        clear_period(&window->hold[p]);
        clear_period(&window->turnaround[p]);
    }
    atomic_store(&window->permit_us_total, 0);
    atomic_store(&window->last_ns, 0);
    memset((void *)&window->turnaround_total, 0, sizeof window->turnaround_total);
}

/* ---- reading ---- */

/* Adds one second's figures if its slot still counts that second;
 * returns when in it the first came (ns since the clock's origin), or -1
 * when it had none. */
static int64_t read_second(struct bh_window_shared *window, int64_t second,
                           struct bh_window_view *view)
{
    struct bh_window_second *slot = &window->seconds[second % BH_WINDOW_SLOTS];
    if (atomic_load_explicit(&slot->tag, memory_order_acquire) != second + 1)
        return -1;
    uint32_t first_us = atomic_load(&slot->first_us);
    uint64_t events[BH_WINDOW_EVENTS], any = atomic_load(&slot->permit_us);
    uint64_t permit_us = any;
    for (int e = 0; e < BH_WINDOW_EVENTS; e++)
        any |= events[e] = atomic_load(&slot->events[e]);
    if (atomic_load_explicit(&slot->tag, memory_order_acquire) != second + 1)
        return -1;  /* turned over while we read */
    for (int e = 0; e < BH_WINDOW_EVENTS; e++)
        view->events[e] += events[e];
    view->permit_us += permit_us;
    if (!any)
        return -1;
    first_us = first_us < NS_PER_S / NS_PER_US ? first_us : 0;
    return second * NS_PER_S + (int64_t)first_us * NS_PER_US;
}

/* Adds up the periods first..last that still count themselves. */
static uint64_t read_periods(struct bh_window_period *ring, int64_t first, int64_t last,
                             uint64_t counts[BH_LOGHIST_BUCKETS])
{
    uint64_t total = 0, taken[BH_LOGHIST_BUCKETS];
    for (int64_t period = first; period <= last; period++) {
        struct bh_window_period *slot = &ring[period % BH_WINDOW_PERIODS];
        if (atomic_load_explicit(&slot->tag, memory_order_acquire) != period + 1)
            continue;
        uint64_t sum = 0;
        for (int b = 0; b < BH_LOGHIST_BUCKETS; b++)
            sum += taken[b] = atomic_load_explicit(&slot->counts[b], memory_order_relaxed);
        if (atomic_load_explicit(&slot->tag, memory_order_acquire) != period + 1)
            continue;
        for (int b = 0; b < BH_LOGHIST_BUCKETS; b++)
            counts[b] += taken[b];
        total += sum;
    }
    return total;
}

static void read_totals(struct bh_window_shared *window, struct bh_window_view *view)
{
    view->permit_us_total = atomic_load(&window->permit_us_total);
    for (int b = 0; b < 17; b++) {
        view->turnaround_total.buckets[b] = atomic_load(&window->turnaround_total.buckets[b]);
        view->turnaround_total.count += view->turnaround_total.buckets[b];
    }
    view->turnaround_total.sum_ns = atomic_load(&window->turnaround_total.sum_ns);
}

void bh_window_read(struct bh_window_shared *window, int seconds, int64_t now_ns,
                    struct bh_window_view *view)
{
    memset(view, 0, sizeof *view);
    read_totals(window, view);
    seconds = seconds < 1 ? 1 : seconds > BH_WINDOW_SECONDS ? BH_WINDOW_SECONDS : seconds;
    int64_t now_s = now_ns / NS_PER_S, from = now_s - seconds, start_ns = -1;
    for (int64_t second = now_s; second >= from; second--) {
        int64_t first_ns = read_second(window, second, view);
        start_ns = first_ns >= 0 ? first_ns : start_ns;
    }
    if (start_ns < 0)
        return;  /* nothing ran in it */
    int64_t end_ns = atomic_load(&window->last_ns);
    end_ns = end_ns > start_ns && end_ns < now_ns ? end_ns : now_ns;
    /* At least a second, so that a first figure a moment ago is no rate. */
    view->window_ns = end_ns - start_ns;
    view->window_ns = view->window_ns < NS_PER_S ? NS_PER_S : view->window_ns;
    int64_t first = start_ns / NS_PER_S / BH_WINDOW_PERIOD_S;
    int64_t last = now_s / BH_WINDOW_PERIOD_S;
    view->hold_count = read_periods(window->hold, first, last, view->hold);
    view->turnaround_count = read_periods(window->turnaround, first, last, view->turnaround);
}
