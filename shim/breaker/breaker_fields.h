/* The fields of a compartment's circuit breaker in the namespace's shared
 * memory. shim/permits keeps them (one per compartment) and hands out
 * where they are (bh_breaker_fields); what they mean, who writes them and
 * when is in breaker.c, the only code that writes them. */
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

#endif
