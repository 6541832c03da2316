/* The fields of a compartment's adaptive limit in the namespace's shared
 * memory. shim/permits keeps them (one per compartment) and hands out
 * where they are (bh_adaptive_fields); what they mean, who writes them
 * and when is in adaptive.c. Registration writes the settings and the
 * starting estimate once, from the creating process's rules, as it
 * writes the limit. Declared here, beside the layout that holds them,
 * since the controller's room sits above this one (it uses permits). */
#ifndef BH_ADAPTIVE_FIELDS_H
#define BH_ADAPTIVE_FIELDS_H

#include <stdatomic.h>
#include <stdint.h>

struct bh_adaptive_shared {
    _Atomic int32_t mode;             /* enum bh_adaptive_mode; 0: off */
    _Atomic int32_t min_limit;
    _Atomic int32_t max_limit;
    _Atomic int32_t latency_ms;       /* aimd's adaptive_latency_ms */
    _Atomic uint64_t window;          /* sequence: even open, odd being closed */
    _Atomic int64_t window_start_ns;  /* CLOCK_MONOTONIC */
    _Atomic uint64_t window_sum;      /* samples << 44 | their latency in us */
    _Atomic uint32_t window_drops;
    _Atomic int32_t window_peak;      /* the most in use a sample saw */
    _Atomic uint64_t window_full;     /* rejected + timed_out + waits as it opened */
    _Atomic int64_t estimate_milli;   /* the controller's limit x 1000 */
    _Atomic int32_t applied;          /* the live limit as the controller left it */
    _Atomic int32_t last_reason;      /* enum bh_adaptive_reason */
    _Atomic int32_t last_from;
    _Atomic int32_t last_to;
    _Atomic int64_t baseline_ns;
    _Atomic int32_t probe;            /* enum bh_adaptive_probe: the re-measure's phase */
    _Atomic int64_t resume_milli;     /* the estimate to go back to after it */
    _Atomic int64_t probe_at_ns;      /* CLOCK_MONOTONIC: the next re-measure; 0: at once */
    _Atomic int64_t recent_ns;        /* the last window's mean latency */
    _Atomic int64_t last_change_ns;   /* CLOCK_REALTIME */
    _Atomic int64_t logged_second;    /* CLOCK_MONOTONIC second of the last line */
    _Atomic uint32_t left_out;        /* changes not logged since */
    _Atomic uint64_t windows;         /* windows closed */
    _Atomic uint64_t changes;         /* limits applied */
};

#endif
