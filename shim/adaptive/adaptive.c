/* Adaptive limits: the windows of samples, the one process that closes
 * each, and the limit it applies. No daemon: the processes that make the
 * connections do it, with the state in the namespace's memory.
 *
 * What is shared: struct bh_adaptive_shared (adaptive_fields.h), one per
 * compartment, where shim/permits keeps it (bh_adaptive_fields); what it
 * reads of the rest of a compartment goes through permits' functions.
 * Registration (permits.c) writes the settings and the starting estimate
 * once, when it creates the compartment; after that only this file
 * writes it.
 *
 * The window. A sample adds itself to window_sum with one fetch-add
 * (count in the top 20 bits, latency in us below: a sample's count and
 * latency land in the same window), a drop to window_drops, and each
 * sample raises window_peak to the in use it sees. A window is due at
 * BH_ADAPTIVE_WINDOW_SAMPLES samples and drops, or BH_ADAPTIVE_WINDOW_MS
 * after it opened once it holds BH_ADAPTIVE_MIN_EVENTS, or after
 * BH_ADAPTIVE_LONGEST_WINDOW_MS whatever it holds (then it changes
 * nothing: low traffic).
 *
 * Who closes it: the sample (or drop) that finds it due swaps the window
 * sequence from the even value it read before adding itself to the next,
 * odd, one. One compare-and-swap wins; the others go on adding to the
 * window. The winner restarts the clock, takes the figures with atomic
 * exchanges (every sample counts in exactly one window: those added while
 * it decides count in the next), decides and applies, and only then swaps
 * the sequence to the next even value: no other window can close while a
 * decision is being applied, so decisions follow each other in window
 * order, one per window.
 *
 * Who writes the rest: the estimate, the baseline and the last change are
 * written by winners, and by bh_adaptive_moved/set_mode/configure (the
 * operator's commands). A winner swaps the estimate from the value it
 * computed from, and moves the live limit with bh_compartment_set_limit_if
 * from the value it read, so an operator's `set` (or the fleet agent) in
 * between wins.
 * `applied` is the live limit as the controller last left it: for a
 * compartment that is not a fleet's, a live limit that differs from it
 * was set by someone else, and the controller continues from there.
 *
 * What a death costs, at each point:
 *   - in a sample's adds: that sample, no more.
 *   - between winning and reopening: the window stays odd; samples keep
 *     landing in it, and the first one BH_ADAPTIVE_TAKEOVER_MS after the
 *     winner restarted the clock swaps it back to even, so the next close
 *     happens. One window's decision is lost; no process is waited for.
 *   - inside the namespace lock: its SEM_UNDO releases it (permits.c),
 *     and the window is taken over as above.
 *   - between the estimate's swap and the live limit: the estimate is a
 *     window ahead; the next winner applies from it.
 *   - between the live limit and `applied`: the next winner takes the
 *     live limit as set by someone else, which it was, by the dead one:
 *     the same value.
 *   - in a re-measure (probe, resume_milli, probe_at_ns: stored with the
 *     baseline, before the estimate's swap). Starting one, dead before
 *     the swap: the phase is stale (the estimate is still the one to
 *     resume, not the pin) and the next window pins: a window later.
 *     Dead after the swap, before the live limit: the next winner applies
 *     the pin, and the drain waits for a window that closed with the pin
 *     live, so no window of the old limit is taken for the baseline: a
 *     window later. Resuming, dead before the swap: the new baseline is
 *     kept, the phase is over, and the estimate stays at the pin; the
 *     gradient climbs from there by its allowance a window, as from
 *     min_limit (a few seconds back to a limit of 30). No death leaves
 *     the limit pinned. An operator's `set` during a re-measure ends it
 *     (the estimate is neither the pin nor the one to resume) and puts
 *     the next off a minute, unless it sets the pin itself.
 *
 * Signal handlers: samples and drops are atomics; a close reads the
 * counters and the clock, and a change takes the namespace lock (a
 * semtimedop, bounded), as `set` does. */
#include "adaptive/adaptive.h"

#include <time.h>

enum {
    COUNT_SHIFT = 44,            /* window_sum: samples << 44 | latency in us */
    MILLI = 1000,
};
#define ONE_SAMPLE ((uint64_t)1 << COUNT_SHIFT)
#define LATENCY_MASK (ONE_SAMPLE - 1)
/* The most one sample adds: 60 s, the histograms' top, so that even 2^18
 * of them cannot carry into the count. */
#define SAMPLE_MAX_US ((int64_t)60 * 1000000)

static int64_t ms_ns(int64_t ms)
{
    return ms * 1000000;
}

static int64_t realtime_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static void raise_peak(struct bh_adaptive_shared *adaptive, int32_t in_use)
{
    int32_t seen = atomic_load_explicit(&adaptive->window_peak, memory_order_relaxed);
    while (in_use > seen &&
           !atomic_compare_exchange_weak_explicit(&adaptive->window_peak, &seen, in_use,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* ---- deciding and applying ---- */

static void record_change(struct bh_adaptive_shared *adaptive, int from, int to,
                          enum bh_adaptive_reason reason)
{
    atomic_store(&adaptive->last_from, from);
    atomic_store(&adaptive->last_to, to);
    atomic_store(&adaptive->last_reason, (int32_t)reason);
    atomic_store(&adaptive->last_change_ns, realtime_ns());
    atomic_fetch_add(&adaptive->changes, 1);
}

/* At most one line a second per compartment, across the namespace; the
 * line says how many changes went unlogged before it. */
static int may_log(struct bh_adaptive_shared *adaptive, int64_t now_ns,
                   struct bh_adaptive_change *change)
{
    int64_t second = now_ns / 1000000000, last = atomic_load(&adaptive->logged_second);
    if (last == second ||
        !atomic_compare_exchange_strong(&adaptive->logged_second, &last, second)) {
        atomic_fetch_add(&adaptive->left_out, 1);
        return 0;
    }
    change->left_out = atomic_exchange(&adaptive->left_out, 0);
    return 1;
}

static void read_settings(struct bh_adaptive_shared *adaptive, enum bh_adaptive_mode mode,
                          struct bh_adaptive_settings *settings)
{
    *settings = (struct bh_adaptive_settings){
        mode, atomic_load(&adaptive->min_limit), atomic_load(&adaptive->max_limit),
        atomic_load(&adaptive->latency_ms),
    };
}

/* The winner's part: the window's decision, applied. 1: log *change. */
static int decide(struct bh_namespace *ns, int index, struct bh_adaptive_window *window,
                  int64_t now_ns, struct bh_adaptive_change *change)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    enum bh_adaptive_mode mode = (enum bh_adaptive_mode)atomic_load(&adaptive->mode);
    int live = bh_compartment_limit(ns, index);
    /* The agent publishes the fleet limit before it first sets a live one. */
    struct bh_fleet_view fleet_now;
    bh_fleet_read(ns, index, &fleet_now);
    int fleet = fleet_now.limit != 0;
    if (mode == BH_ADAPTIVE_OFF)
        return 0;  /* turned off while this window was open: frozen */
    if (!fleet && live != atomic_load(&adaptive->applied)) {
        atomic_store(&adaptive->estimate_milli, (int64_t)live * MILLI);
        atomic_store(&adaptive->applied, live);
        return 0;  /* set by someone else: continue from there */
    }
    struct bh_adaptive_settings settings;
    read_settings(adaptive, mode, &settings);
    int64_t estimate = atomic_load(&adaptive->estimate_milli);
    struct bh_adaptive_state state = {
        estimate, atomic_load(&adaptive->baseline_ns),
        (enum bh_adaptive_probe)atomic_load(&adaptive->probe),
        atomic_load(&adaptive->resume_milli), atomic_load(&adaptive->probe_at_ns),
    };
    /* Nothing above the live limit was tried (a fleet's grant caps it). */
    window->reached &= bh_adaptive_limit_of(&state) <= live;
    enum bh_adaptive_reason reason = bh_adaptive_step(&settings, &state, window);
    if (reason == BH_ADAPTIVE_LOW_TRAFFIC)
        return 0;
    atomic_store(&adaptive->baseline_ns, state.baseline_ns);
    atomic_store(&adaptive->probe, (int32_t)state.probe);
    atomic_store(&adaptive->resume_milli, state.resume_milli);
    atomic_store(&adaptive->probe_at_ns, state.probe_at_ns);
    if (window->samples)
        atomic_store(&adaptive->recent_ns, window->latency_ns);
    if (!atomic_compare_exchange_strong(&adaptive->estimate_milli, &estimate,
                                        state.estimate_milli))
        return 0;  /* moved by an operator meanwhile */
    int target = bh_adaptive_limit_of(&state);
    int grant = fleet_now.grant;
    if (fleet && grant < target)
        target = grant;
    if (target == live || bh_compartment_set_limit_if(ns, index, live, target) < 0)
        return 0;
    atomic_store(&adaptive->applied, target);
    record_change(adaptive, live, target, reason);
    *change = (struct bh_adaptive_change){ live, target, reason, state.baseline_ns,
                                           window->latency_ns, 0 };
    return may_log(adaptive, now_ns, change);
}

/* seq: the even sequence read before this caller added itself. 1: log
 * *change. */
static int close_window(struct bh_namespace *ns, int index, uint64_t seq, int64_t now_ns,
                        struct bh_adaptive_change *change)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    if (!atomic_compare_exchange_strong(&adaptive->window, &seq, seq + 1))
        return 0;  /* another process closes it */
    atomic_store(&adaptive->window_start_ns, now_ns);
    uint64_t sum = atomic_exchange(&adaptive->window_sum, 0);
    uint32_t drops = atomic_exchange(&adaptive->window_drops, 0);
    int32_t peak = atomic_exchange(&adaptive->window_peak, 0);
    uint64_t full_now = bh_compartment_full_count(ns, index);
    uint64_t full_then = atomic_exchange(&adaptive->window_full, full_now);
    atomic_fetch_add(&adaptive->windows, 1);
    uint32_t samples = (uint32_t)(sum >> COUNT_SHIFT);
    int limit = bh_compartment_limit(ns, index);
    struct bh_adaptive_window window = {
        samples, samples ? (int64_t)(sum & LATENCY_MASK) / samples * 1000 : 0, drops,
        peak >= limit || full_now != full_then, peak, limit, now_ns,
    };
    int logged = decide(ns, index, &window, now_ns, change);
    uint64_t closing = seq + 1;  /* no longer ours if it was taken over */
    atomic_compare_exchange_strong(&adaptive->window, &closing, seq + 2);
    return logged;
}

/* Whether the window seq (read before this caller added itself) is due;
 * a window left closing by a dead process is reopened here. */
static int due(struct bh_adaptive_shared *adaptive, uint64_t seq, int64_t now_ns)
{
    int64_t age = now_ns - atomic_load_explicit(&adaptive->window_start_ns,
                                                memory_order_relaxed);
    if (seq & 1) {
        if (age > ms_ns(BH_ADAPTIVE_TAKEOVER_MS))
            atomic_compare_exchange_strong(&adaptive->window, &seq, seq + 1);
        return 0;
    }
    uint64_t events = (atomic_load_explicit(&adaptive->window_sum, memory_order_relaxed)
                       >> COUNT_SHIFT) +
                      atomic_load_explicit(&adaptive->window_drops, memory_order_relaxed);
    return events >= BH_ADAPTIVE_WINDOW_SAMPLES ||
           (age >= ms_ns(BH_ADAPTIVE_WINDOW_MS) && events >= BH_ADAPTIVE_MIN_EVENTS) ||
           age >= ms_ns(BH_ADAPTIVE_LONGEST_WINDOW_MS);
}

int bh_adaptive_sample(struct bh_namespace *ns, int index, int64_t latency_ns,
                       int turnaround, int64_t now_ns, struct bh_adaptive_change *change)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    if (!turnaround && latency_ns > ms_ns(BH_ADAPTIVE_LONG_HOLD_MS))
        return 0;
    int64_t us = latency_ns / 1000;
    if (us > SAMPLE_MAX_US)
        us = SAMPLE_MAX_US;
    uint64_t seq = atomic_load(&adaptive->window);
    atomic_fetch_add_explicit(&adaptive->window_sum, ONE_SAMPLE | (uint64_t)(us > 0 ? us : 0),
                              memory_order_relaxed);
    raise_peak(adaptive, (int32_t)bh_compartment_holders_hint(ns, index));
    return due(adaptive, seq, now_ns) &&
           close_window(ns, index, seq, now_ns, change);
}

int bh_adaptive_drop(struct bh_namespace *ns, int index, int64_t now_ns,
                     struct bh_adaptive_change *change)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    uint64_t seq = atomic_load(&adaptive->window);
    atomic_fetch_add_explicit(&adaptive->window_drops, 1, memory_order_relaxed);
    return due(adaptive, seq, now_ns) &&
           close_window(ns, index, seq, now_ns, change);
}

/* ---- the operator's commands ---- */

void bh_adaptive_moved(struct bh_namespace *ns, int index, int limit)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    int from = atomic_exchange(&adaptive->applied, limit);
    atomic_store(&adaptive->estimate_milli, (int64_t)limit * MILLI);
    atomic_store(&adaptive->probe, BH_PROBE_NONE);
    if (from != limit)
        record_change(adaptive, from, limit, BH_ADAPTIVE_SET);
}

/* A controller starting (again): from the live limit, with a baseline to
 * learn (gradient: re-measured at the first window) and a fresh window
 * (the next sample finds it due: low traffic). */
static void start(struct bh_namespace *ns, int index)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    int live = bh_compartment_limit(ns, index);
    atomic_store(&adaptive->estimate_milli, (int64_t)live * MILLI);
    atomic_store(&adaptive->applied, live);
    atomic_store(&adaptive->baseline_ns, 0);
    atomic_store(&adaptive->probe, BH_PROBE_NONE);
    atomic_store(&adaptive->probe_at_ns, 0);
    atomic_store(&adaptive->window_full, bh_compartment_full_count(ns, index));
    atomic_store(&adaptive->window_start_ns, 0);
}

void bh_adaptive_set_mode(struct bh_namespace *ns, int index, enum bh_adaptive_mode mode)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    if (mode != BH_ADAPTIVE_OFF && atomic_load(&adaptive->mode) != (int32_t)mode)
        start(ns, index);
    atomic_store(&adaptive->mode, (int32_t)mode);
}

void bh_adaptive_configure(struct bh_namespace *ns, int index,
                           const struct bh_compartment *compartment)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    atomic_store(&adaptive->min_limit, compartment->min_limit);
    atomic_store(&adaptive->max_limit, compartment->max_limit);
    atomic_store(&adaptive->latency_ms, compartment->adaptive_latency_ms);
    bh_adaptive_set_mode(ns, index, compartment->adaptive);
}

int bh_adaptive_ceiling(const struct bh_namespace *ns, int index, int otherwise)
{
    const struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    if (!bh_adaptive_on(ns, index))
        return otherwise;
    return (int)(atomic_load(&adaptive->estimate_milli) / MILLI);
}

void bh_adaptive_read(const struct bh_namespace *ns, int index,
                      struct bh_adaptive_view *view)
{
    struct bh_adaptive_shared *adaptive = bh_adaptive_fields(ns, index);
    *view = (struct bh_adaptive_view){
        .mode = (enum bh_adaptive_mode)atomic_load(&adaptive->mode),
        .min_limit = atomic_load(&adaptive->min_limit),
        .max_limit = atomic_load(&adaptive->max_limit),
        .latency_ms = atomic_load(&adaptive->latency_ms),
        .estimate = (double)atomic_load(&adaptive->estimate_milli) / MILLI,
        .baseline_ns = atomic_load(&adaptive->baseline_ns),
        .recent_ns = atomic_load(&adaptive->recent_ns),
        .last_from = atomic_load(&adaptive->last_from),
        .last_to = atomic_load(&adaptive->last_to),
        .last_reason = (enum bh_adaptive_reason)atomic_load(&adaptive->last_reason),
        .last_change_ns = atomic_load(&adaptive->last_change_ns),
        .windows = atomic_load(&adaptive->windows),
        .changes = atomic_load(&adaptive->changes),
    };
}
