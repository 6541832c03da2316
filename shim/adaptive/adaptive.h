/* Adaptive limits: a controller per compartment that moves the live limit
 * from what connections show (latency, drops), computed inside the shim's
 * own processes, with its state in the namespace's memory. See adaptive.c
 * for the rules of the shared state, controller.c for the arithmetic. */
#ifndef BH_ADAPTIVE_H
#define BH_ADAPTIVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "config/config.h"
#include "permits/permits.h"

enum {
    /* A window closes at this many samples, or after BH_ADAPTIVE_WINDOW_MS
     * once it has BH_ADAPTIVE_MIN_EVENTS, whichever comes first. */
    BH_ADAPTIVE_WINDOW_SAMPLES = 50,
    BH_ADAPTIVE_WINDOW_MS = 500,
    /* Fewer samples and drops than this: the window changes nothing. */
    BH_ADAPTIVE_MIN_EVENTS = 10,
    /* A window still short of them this long closes without a change. */
    BH_ADAPTIVE_LONGEST_WINDOW_MS = 10000,
    /* A connection held longer is not a latency sample (a pooled or
     * streaming connection: its hold says how long the client kept it). */
    BH_ADAPTIVE_LONG_HOLD_MS = 10000,
    /* A window left closing this long (its closer died) is taken over;
     * longer than a live closer can take (the namespace lock's 2 s). */
    BH_ADAPTIVE_TAKEOVER_MS = 5000,
};

/* ---- the arithmetic (controller.c): pure functions ---- */

struct bh_adaptive_settings {
    enum bh_adaptive_mode mode;
    int min_limit, max_limit;
    int latency_ms;              /* aimd: 0, drops only */
};

/* What one window saw. */
struct bh_adaptive_window {
    uint32_t samples;            /* latency samples */
    int64_t latency_ns;          /* their mean */
    uint32_t drops;              /* connect failures and timeouts, io timeouts, resets */
    int reached;                 /* in use reached the limit, or a connect found it full */
    int peak;                    /* the most in use a sample saw */
    int limit;                   /* the live limit as it closed */
    int64_t closed_ns;           /* when it closed: CLOCK_MONOTONIC */
};

/* The re-measure of the no-load latency (gradient): see controller.c. */
enum bh_adaptive_probe {
    BH_PROBE_NONE,
    BH_PROBE_DRAINING,           /* pinned low; what the old limit let in drains */
    BH_PROBE_MEASURING,          /* pinned low; this window is the baseline */
    BH_PROBE_DRAINING_LAST,      /* pinned low; the drain's window still had more in
                                  * use than the pin: one more window drains */
};

/* What the controller carries from window to window. */
struct bh_adaptive_state {
    int64_t estimate_milli;      /* the limit, in thousandths of a permit */
    int64_t baseline_ns;         /* no-load latency; 0: none yet */
    enum bh_adaptive_probe probe;
    int64_t resume_milli;        /* while probing: the estimate to go back to */
    int64_t probe_at_ns;         /* the next re-measure: the first window closed from then */
};

enum bh_adaptive_reason {
    BH_ADAPTIVE_NONE,
    BH_ADAPTIVE_LOW_TRAFFIC,     /* too few samples: nothing changed */
    BH_ADAPTIVE_APP_LIMITED,     /* held: would have grown, but in use never reached the
                                  * limit; or slower, but in use stayed under half of it */
    BH_ADAPTIVE_GREW,
    BH_ADAPTIVE_LATENCY,         /* lowered: latency above the baseline or adaptive_latency_ms */
    BH_ADAPTIVE_DROPS,           /* lowered: the window had drops */
    BH_ADAPTIVE_SET,             /* moved by bulkhead set or apply */
    BH_ADAPTIVE_REMEASURE,       /* pinned low to re-measure the no-load latency */
    BH_ADAPTIVE_RESUMED,         /* back from the re-measure, with a new baseline */
};

/* One window: updates state, returns why the estimate moved (or did not). */
enum bh_adaptive_reason bh_adaptive_step(const struct bh_adaptive_settings *settings,
                                         struct bh_adaptive_state *state,
                                         const struct bh_adaptive_window *window);
/* The limit the estimate stands for: rounded down. */
int bh_adaptive_limit_of(const struct bh_adaptive_state *state);
const char *bh_adaptive_reason_name(enum bh_adaptive_reason reason);

/* ---- the shared state (adaptive.c) ---- */

/* Whether compartment index is adaptive now: one relaxed load, for the
 * hooks' paths. */
static inline int bh_adaptive_on(const struct bh_namespace *ns, int index)
{
    return atomic_load_explicit(&bh_adaptive_fields(ns, index)->mode,
                                memory_order_relaxed) != BH_ADAPTIVE_OFF;
}

/* A change this process applied, for its log line. */
struct bh_adaptive_change {
    int from, to;
    enum bh_adaptive_reason reason;
    int64_t baseline_ns, recent_ns;
    uint32_t left_out;           /* changes not logged since the last line */
};

/* A latency sample: a connection's hold time (turnaround 0; holds past
 * BH_ADAPTIVE_LONG_HOLD_MS are ignored) or one exchange's turnaround on a
 * connection that carries many (1). now_ns: CLOCK_MONOTONIC. May close the
 * window and apply its limit; returns 1 when the caller should log
 * *change (at most one line a second per compartment, namespace-wide).
 * Async-signal-safe but for the namespace lock taken when a limit changes
 * (a semtimedop). */
int bh_adaptive_sample(struct bh_namespace *ns, int index, int64_t latency_ns,
                       int turnaround, int64_t now_ns, struct bh_adaptive_change *change);
/* A drop: a connect failure or timeout, an io timeout or a reset. May
 * close the window as a sample does (a dead downstream gives no samples). */
int bh_adaptive_drop(struct bh_namespace *ns, int index, int64_t now_ns,
                     struct bh_adaptive_change *change);

/* The limit was set by an operator (bulkhead set, apply): the controller
 * continues from it. */
void bh_adaptive_moved(struct bh_namespace *ns, int index, int limit);
/* bulkhead set NAME adaptive=MODE: off freezes the limit where it is; a
 * controller starts from the live limit and learns a new baseline. */
void bh_adaptive_set_mode(struct bh_namespace *ns, int index, enum bh_adaptive_mode mode);
/* bulkhead apply: the file's settings (mode, min_limit, max_limit,
 * adaptive_latency_ms) become the live ones. */
void bh_adaptive_configure(struct bh_namespace *ns, int index,
                           const struct bh_compartment *compartment);
/* A fleet compartment's ceiling for the agent: the controller's limit
 * while adaptive, else `otherwise`. */
int bh_adaptive_ceiling(const struct bh_namespace *ns, int index, int otherwise);

struct bh_adaptive_view {
    enum bh_adaptive_mode mode;
    int min_limit, max_limit, latency_ms;
    double estimate;             /* the controller's limit, unrounded */
    int64_t baseline_ns, recent_ns;
    int last_from, last_to;
    enum bh_adaptive_reason last_reason;  /* NONE: never changed */
    int64_t last_change_ns;      /* CLOCK_REALTIME; 0: never */
    uint64_t windows, changes;
};
void bh_adaptive_read(const struct bh_namespace *ns, int index,
                      struct bh_adaptive_view *view);

#endif
