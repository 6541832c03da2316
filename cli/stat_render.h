/* The live state of a namespace in Prometheus text exposition: shared by
 * `bulkhead stat --prometheus` and the agent's /metrics. */
#ifndef BH_STAT_RENDER_H
#define BH_STAT_RENDER_H

#include <stdint.h>
#include <stdio.h>

#include "adaptive/adaptive.h"
#include "breaker/breaker.h"
#include "permits/permits.h"

/* A compartment's figures over a window (permits/window.h), worked out:
 * rates per second over the time anything ran, quantiles in ms. */
struct bh_window_summary {
    double window_s;         /* 0: nothing ran in it */
    uint64_t admitted, refused, timed_out;
    double arrival_rate;     /* connects asking for a permit: admitted,
                                refused and timed out, per second */
    double refused_rate;     /* refused and timed out, per second */
    double in_use_mean;      /* permit-seconds of ended holds / window */
    double utilization;      /* in_use_mean / limit; 0 for limit 0 */
    uint64_t turnarounds;    /* answers timed in the window */
    uint64_t hold_count, turnaround_count;  /* in the histograms' periods */
    double hold_p50_ms, hold_p99_ms, turnaround_p50_ms, turnaround_p99_ms;
    uint64_t permit_us_total;                  /* cumulative */
    struct bh_histogram_view turnaround_total; /* cumulative, fixed buckets */
};
/* Over the last `seconds` (at most BH_WINDOW_SECONDS), for the live limit. */
void bh_stat_window(struct bh_namespace *ns, int index, int seconds, int limit,
                    struct bh_window_summary *summary);

/* Utilization past which stat flags a compartment. */
#define BH_UTILIZATION_HIGH 0.8

/* What is shown of one compartment. */
struct bh_stat_row {
    struct bh_compartment_view view;
    struct bh_breaker_view breaker;
    struct bh_reserve_view reserves[BH_MAX_RESERVES];  /* view.reserve_count */
    struct bh_adaptive_view adaptive;
    struct bh_window_summary window;                   /* the last minute */
};

/* Whether stat shows the compartment's controller: adaptive now, or it
 * was (a limit frozen by adaptive=off). */
int bh_stat_shows_adaptive(const struct bh_stat_row *row);

/* Reads compartment `index`: 0, or -1 with errno. */
int bh_stat_read_row(struct bh_namespace *ns, int index, struct bh_stat_row *row);

/* Every family once, with HELP and TYPE; a sample per compartment (fleet
 * families: per fleet compartment; histograms: their buckets, cumulative,
 * then _sum and _count), and the namespace's shared-socket records (none
 * when records is NULL: no shared state yet). */
void bh_stat_prometheus(FILE *out, const char *namespace_name,
                        const struct bh_stat_row *rows, int count,
                        const struct bh_socket_table_view *records);

/* The same, read from the namespace now; 0, or -1 with errno. */
int bh_stat_write_prometheus(FILE *out, struct bh_namespace *ns,
                             const char *namespace_name);

#endif
