/* The live state of a namespace in Prometheus text exposition: shared by
 * `bulkhead stat --prometheus` and the agent's /metrics. */
#ifndef BH_STAT_RENDER_H
#define BH_STAT_RENDER_H

#include <stdio.h>

#include "adaptive/adaptive.h"
#include "breaker/breaker.h"
#include "permits/permits.h"

/* What is shown of one compartment. */
struct bh_stat_row {
    struct bh_compartment_view view;
    struct bh_breaker_view breaker;
    struct bh_reserve_view reserves[BH_MAX_RESERVES];  /* view.reserve_count */
    struct bh_adaptive_view adaptive;
};

/* Whether stat shows the compartment's controller: adaptive now, or it
 * was (a limit frozen by adaptive=off). */
int bh_stat_shows_adaptive(const struct bh_stat_row *row);

/* Reads compartment `index`: 0, or -1 with errno. */
int bh_stat_read_row(struct bh_namespace *ns, int index, struct bh_stat_row *row);

/* Every family once, with HELP and TYPE; a sample per compartment (fleet
 * families: per fleet compartment; histograms: their buckets, cumulative,
 * then _sum and _count). */
void bh_stat_prometheus(FILE *out, const char *namespace_name,
                        const struct bh_stat_row *rows, int count);

/* The same, read from the namespace now; 0, or -1 with errno. */
int bh_stat_write_prometheus(FILE *out, struct bh_namespace *ns,
                             const char *namespace_name);

#endif
