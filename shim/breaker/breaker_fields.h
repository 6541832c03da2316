/* The fields of a compartment's circuit breaker in the namespace's shared
 * memory. shim/permits keeps them (one per compartment) and hands out
 * where they are (bh_breaker_fields); what they mean, who writes them and
 * when is in breaker.c, the only code that writes them. With them, what
 * a probe slot's holding looks like, for whoever reports a take of it. */
#ifndef BH_BREAKER_FIELDS_H
#define BH_BREAKER_FIELDS_H

#include <stdatomic.h>
#include <stdint.h>

struct bh_breaker_shared {
    _Atomic int64_t open_until_ns;  /* CLOCK_MONOTONIC; 0: closed */
    _Atomic int64_t changed_at_ns;  /* CLOCK_REALTIME of the last change */
    _Atomic int32_t open_ms;        /* the period it last opened for */
    _Atomic uint32_t failures;      /* consecutive, across processes */
    _Atomic uint32_t needs_bytes;   /* the last failure was an io failure */
    _Atomic uint64_t opened;        /* times it opened (reopens included) */
    _Atomic uint64_t refused;       /* connects it refused */
    _Atomic int64_t probe;          /* the probe slot: who holds it since when
                                       (breaker.c); 0: free */
    _Atomic uint64_t probes_taken_over; /* probes silent past their deadline */
};

/* A probe slot just taken: since_ns (CLOCK_MONOTONIC) names this holding
 * and is what the caller records as its connection's since_ns and hands
 * back to breaker.h's functions (`probe`, 0 for a connection that is not
 * the probe). */
struct bh_probe_taken {
    int64_t since_ns;
    int replaced_pid;     /* > 0: taken over from that process's probe */
    int replaced_gone;    /* ... whose process had exited */
    int64_t replaced_ms;  /* ... silent that long */
};

/* Closed: the one load a connect pays for the breaker (breaker.c says
 * what the other values mean). */
static inline int bh_breaker_is_closed(const struct bh_breaker_shared *breaker)
{
    return atomic_load_explicit(&breaker->open_until_ns, memory_order_relaxed) == 0;
}

#endif
