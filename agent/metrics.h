/* GET /metrics over HTTP (metrics.c), for Prometheus. What it serves and
 * where its lines go come in as arguments: it knows nothing of the agent. */
#ifndef BH_METRICS_H
#define BH_METRICS_H

#include "permits/permits.h"

/* Where metrics' lines go: one line, no newline, called from the main
 * thread in bh_metrics_start and from the metrics thread afterwards. */
typedef void bh_metrics_say(const char *line);

/* Starts a server thread answering GET /metrics at address "HOST:PORT"
 * with what `bulkhead stat --prometheus` prints for namespace ns, named
 * namespace_name. ns and the name must outlive bh_metrics_stop(); the
 * thread only reads them. 0, or -1 once said. */
int bh_metrics_start(const char *address, struct bh_namespace *ns,
                     const char *namespace_name, bh_metrics_say *say);
void bh_metrics_stop(void);

#endif
