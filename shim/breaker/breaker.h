/* A circuit breaker per compartment, shared by every process of the
 * namespace like the permits are. See breaker.c for the rules. */
#ifndef BH_BREAKER_H
#define BH_BREAKER_H

#include <errno.h>
#include <stdint.h>

#include "breaker/breaker_fields.h"
#include "config/config.h"

/* Errors that say something about the downstream, not about us: what
 * counts as a connect failure, for the breaker and for `stat`. */
static inline int bh_downstream_failure(int err)
{
    return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH ||
           err == ENETUNREACH || err == ECONNRESET;
}

/* What one process's rules say about a compartment's breaker. */
struct bh_breaker_config {
    int failures;     /* consecutive failures that open it; 0: never opens */
    int open_ms;      /* first open period */
    int open_max_ms;  /* a failed probe doubles the period up to this */
};

enum bh_breaker_admission {
    BH_BREAKER_PASS,           /* closed: connect as usual */
    BH_BREAKER_PROBE,          /* half-open: this connect is the probe */
    BH_BREAKER_REFUSE_OPEN,    /* open: refuse at once */
    BH_BREAKER_REFUSE_PROBING, /* half-open and another process probes */
};

/* What an outcome did to the breaker, for the caller's log line. */
enum bh_breaker_change {
    BH_BREAKER_UNCHANGED,
    BH_BREAKER_OPENED,    /* closed -> open after `failures` in a row */
    BH_BREAKER_REOPENED,  /* the probe failed: open for twice as long */
    BH_BREAKER_CLOSED,    /* the probe succeeded */
};

/* Before a connect is admitted. PROBE holds the probe slot (taken says
 * how): the caller gives it back through bh_breaker_failure/success/
 * abandon. A probe silent past the compartment's probe deadline
 * (breaker.c), or whose process is gone, is taken over by this connect
 * and counted as a failure; its own report later changes nothing. */
enum bh_breaker_admission bh_breaker_admit(struct bh_breaker_shared *breaker,
                                           const struct bh_compartment *compartment,
                                           struct bh_probe_taken *taken);

/* A connection failed: refused, unreachable, timed out or reset before its
 * first byte (io = 0 for connect failures, 1 for io failures). */
enum bh_breaker_change bh_breaker_failure(struct bh_breaker_shared *breaker,
                                          const struct bh_breaker_config *config,
                                          int64_t probe, int io);
/* Whether a success counts now: connected (bytes = 0) or first bytes back
 * (bytes = 1). After an io failure only bytes do: a server that accepts
 * and never answers must not close the breaker by accepting. */
int bh_breaker_wants(const struct bh_breaker_shared *breaker, int bytes);
/* A success that counts: resets the failures; the probe, if this was it,
 * closes the breaker and gives its slot back. */
enum bh_breaker_change bh_breaker_success(struct bh_breaker_shared *breaker,
                                          int64_t probe);
/* The probe ended without an outcome (refused by the gate, closed before
 * it showed anything): the slot goes back and the breaker stays half-open. */
void bh_breaker_abandon(struct bh_breaker_shared *breaker, int64_t probe);

/* `bulkhead set NAME breaker=open|closed`: open stays open until closed. */
void bh_breaker_force(struct bh_breaker_shared *breaker, int open);

enum bh_breaker_state { BH_BREAKER_IS_CLOSED, BH_BREAKER_IS_OPEN, BH_BREAKER_IS_HALF_OPEN };
struct bh_breaker_view {
    enum bh_breaker_state state;
    int forced;               /* open by `bulkhead set`, until set closed */
    int64_t since_ns;         /* CLOCK_REALTIME of the last change, 0: never */
    int64_t open_left_ms;     /* open and not forced: until half-open */
    int open_ms;              /* the period it last opened for */
    uint32_t failures;        /* consecutive failures now */
    uint64_t opened, refused;
    uint64_t probes_taken_over;  /* silent probes replaced by the next connect */
};
void bh_breaker_read(const struct bh_breaker_shared *breaker,
                     struct bh_breaker_view *view);
const char *bh_breaker_state_name(enum bh_breaker_state state);

#endif
