/* Prometheus text exposition of a namespace (see stat_render.h). */
#include "stat_render.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One sample per compartment. Entries of one family (a summary's _sum and
 * _count) follow each other and share one HELP and TYPE line. */
struct metric {
    const char *family;
    const char *suffix;    /* of the sample name, after the family */
    const char *type;
    const char *help;
    int64_t (*read)(const struct bh_stat_row *row);
    int nanoseconds;       /* read() gives ns, shown in seconds */
    int fleet_only;        /* only compartments with a fleet_limit */
};

#define VIEW_READER(name, expression)                                          \
    static int64_t read_##name(const struct bh_stat_row *row)                  \
    {                                                                          \
        const struct bh_compartment_view *v = &row->view;                      \
        const struct bh_breaker_view *b = &row->breaker;                       \
        const struct bh_adaptive_view *a = &row->adaptive;                     \
        (void)v, (void)b, (void)a;                                             \
        return (int64_t)(expression);                                          \
    }
VIEW_READER(limit, v->limit)
VIEW_READER(in_use, v->in_use)
VIEW_READER(waiting, v->waiting)
VIEW_READER(peak, v->peak)
VIEW_READER(acquired, v->acquired)
VIEW_READER(rejected, v->rejected)
VIEW_READER(timed_out, v->timed_out)
VIEW_READER(wait_max, v->wait_ns_max)
VIEW_READER(breaker_state, b->state)
VIEW_READER(breaker_forced, b->forced)
VIEW_READER(breaker_since, b->since_ns)
VIEW_READER(breaker_opened, b->opened)
VIEW_READER(breaker_refused, b->refused)
VIEW_READER(connect_failures, v->connect_failures)
VIEW_READER(connect_timeouts, v->connect_timeouts)
VIEW_READER(io_timeouts, v->io_timeouts)
VIEW_READER(per_process_refused, v->per_process_refused)
VIEW_READER(bypassed, v->bypassed)
VIEW_READER(shadow, v->shadow)
VIEW_READER(shadow_refused, v->shadow_refused)
VIEW_READER(shadow_waited, v->shadow_waited)
VIEW_READER(shared, v->shared)
VIEW_READER(fleet_limit, v->fleet.limit)
VIEW_READER(fleet_grant, v->fleet.grant)
VIEW_READER(fleet_in_use, v->fleet.in_use)
VIEW_READER(fleet_hosts, v->fleet.hosts)
VIEW_READER(fleet_state, v->fleet.state)
VIEW_READER(adaptive_mode, a->mode)
VIEW_READER(adaptive_min, a->min_limit)
VIEW_READER(adaptive_max, a->max_limit)
VIEW_READER(adaptive_baseline, a->baseline_ns)
VIEW_READER(adaptive_recent, a->recent_ns)
VIEW_READER(adaptive_changed, a->last_change_ns)
VIEW_READER(adaptive_reason, a->last_reason)
VIEW_READER(adaptive_changes, a->changes)
VIEW_READER(adaptive_windows, a->windows)
VIEW_READER(permit_ns_total, row->window.permit_us_total * 1000)

static const struct metric metrics[] = {
    { "bulkhead_permits_limit", "", "gauge",
      "Live limit of the compartment: permits, i.e. concurrent connections.",
      read_limit, 0, 0 },
    { "bulkhead_permits_in_use", "", "gauge",
      "Permits held now (connections open or being opened).", read_in_use, 0, 0 },
    { "bulkhead_waiters", "", "gauge", "Connects waiting for a permit now.",
      read_waiting, 0, 0 },
    { "bulkhead_permits_peak", "", "gauge", "Most permits ever in use at once.",
      read_peak, 0, 0 },
    { "bulkhead_acquired_total", "", "counter", "Permits granted.", read_acquired, 0, 0 },
    { "bulkhead_rejected_total", "", "counter",
      "connect() calls refused at once because the compartment was full (no "
      "wait allowed, or too many waiters); calls, not connections nor processes.",
      read_rejected, 0, 0 },
    { "bulkhead_timed_out_total", "", "counter",
      "connect() calls that waited wait_ms for a permit, then were refused.",
      read_timed_out, 0, 0 },
    { "bulkhead_wait_max_seconds", "", "gauge",
      "Longest wait for a permit, granted or not.", read_wait_max, 1, 0 },
    { "bulkhead_breaker_state", "", "gauge",
      "The circuit breaker: 0 closed, 1 open, 2 half-open (one probe goes through).",
      read_breaker_state, 0, 0 },
    { "bulkhead_breaker_forced", "", "gauge",
      "1 while the breaker is held open by bulkhead set NAME breaker=open.",
      read_breaker_forced, 0, 0 },
    { "bulkhead_breaker_changed_seconds", "", "gauge",
      "Unix time of the breaker's last change of state; 0 if it never changed.",
      read_breaker_since, 1, 0 },
    { "bulkhead_breaker_opened_total", "", "counter",
      "Times the breaker opened (reopenings after a failed probe included).",
      read_breaker_opened, 0, 0 },
    { "bulkhead_breaker_refusals_total", "", "counter",
      "connect() calls refused because the breaker was open or half-open.",
      read_breaker_refused, 0, 0 },
    { "bulkhead_connect_failures_total", "", "counter",
      "Counted connects that failed: refused, unreachable, timed out or reset.",
      read_connect_failures, 0, 0 },
    { "bulkhead_connect_timeouts_total", "", "counter",
      "Counted connects that failed with ETIMEDOUT (connect_timeout_ms included).",
      read_connect_timeouts, 0, 0 },
    { "bulkhead_io_timeouts_total", "", "counter",
      "io_timeout_ms expiries on counted connections.", read_io_timeouts, 0, 0 },
    { "bulkhead_per_process_refused_total", "", "counter",
      "connect() calls refused because the process held per_process permits.",
      read_per_process_refused, 0, 0 },
    { "bulkhead_bypassed_total", "", "counter",
      "connect() calls let through unlimited by a bypass = rule.", read_bypassed, 0, 0 },
    { "bulkhead_shadow", "", "gauge",
      "1 while the compartment runs in mode = shadow (lets every connect through), "
      "0 in enforce.", read_shadow, 0, 0 },
    { "bulkhead_shadow_refused_total", "", "counter",
      "connect() calls let through in shadow mode that enforce would have refused.",
      read_shadow_refused, 0, 0 },
    { "bulkhead_shadow_waited_total", "", "counter",
      "connect() calls let through at once in shadow mode that enforce would have "
      "made wait.", read_shadow_waited, 0, 0 },
    { "bulkhead_shared_connections", "", "gauge",
      "Counted connections whose fds several processes hold; the socket holds "
      "their permits until its last copy closes.", read_shared, 0, 0 },
    { "bulkhead_permit_seconds_total", "", "counter",
      "Permit-seconds of holds that ended: the integral of permits in use. "
      "rate() over a window divided by the limit is the utilization then; "
      "a connection still open counts when it ends.",
      read_permit_ns_total, 1, 0 },
    { "bulkhead_fleet_limit", "", "gauge", "The fleet-wide limit in force.",
      read_fleet_limit, 0, 1 },
    { "bulkhead_fleet_grant", "", "gauge", "This host's share of the fleet limit.",
      read_fleet_grant, 0, 1 },
    { "bulkhead_fleet_in_use", "", "gauge",
      "Permits in use across the fleet, as Redis last said.", read_fleet_in_use, 0, 1 },
    { "bulkhead_fleet_hosts", "", "gauge", "Live hosts sharing the compartment.",
      read_fleet_hosts, 0, 1 },
    { "bulkhead_fleet_state", "", "gauge",
      "0 leased, 1 learning (Redis restarted), 2 kept (Redis unreachable, "
      "lease running), 3 fallback (Redis unreachable past the lease), "
      "4 lapsed (the agent stopped renewing this host's lease).",
      read_fleet_state, 0, 1 },
};

/* Only for compartments stat shows as adaptive (bh_stat_shows_adaptive). */
static const struct metric adaptive_metrics[] = {
    { "bulkhead_adaptive_mode", "", "gauge",
      "The limit's controller: 0 off (frozen), 1 gradient, 2 aimd.",
      read_adaptive_mode, 0, 0 },
    { "bulkhead_adaptive_min_limit", "", "gauge",
      "The least the controller lowers the limit to.", read_adaptive_min, 0, 0 },
    { "bulkhead_adaptive_max_limit", "", "gauge",
      "The most the controller raises the limit to.", read_adaptive_max, 0, 0 },
    { "bulkhead_adaptive_baseline_seconds", "", "gauge",
      "The controller's no-load latency; 0 until learned.", read_adaptive_baseline, 1, 0 },
    { "bulkhead_adaptive_recent_seconds", "", "gauge",
      "Mean latency of the last window the controller judged (a low-traffic window is not judged).", read_adaptive_recent, 1, 0 },
    { "bulkhead_adaptive_changed_seconds", "", "gauge",
      "Unix time of the limit's last change; 0 if it never changed.",
      read_adaptive_changed, 1, 0 },
    { "bulkhead_adaptive_last_reason", "", "gauge",
      "Why the limit last changed: 0 never, 3 grew, 4 latency, 5 drops, 6 set by an operator.",
      read_adaptive_reason, 0, 0 },
    { "bulkhead_adaptive_changes_total", "", "counter",
      "Changes of the limit by the controller and by operators.", read_adaptive_changes, 0, 0 },
    { "bulkhead_adaptive_windows_total", "", "counter",
      "Windows of samples the controller closed.", read_adaptive_windows, 0, 0 },
};

static void print_label_value(FILE *out, const char *text)
{
    for (const char *c = text; *c; c++) {
        if (*c == '\\' || *c == '"')
            fprintf(out, "\\%c", *c);
        else if (*c == '\n')
            fputs("\\n", out);
        else
            fputc(*c, out);
    }
}

static void print_labels(FILE *out, const char *namespace_name, const char *name)
{
    fputs("namespace=\"", out);
    print_label_value(out, namespace_name);
    fputs("\",compartment=\"", out);
    print_label_value(out, name);
    fputc('"', out);
}

static void print_sample(FILE *out, const struct metric *metric,
                         const char *namespace_name, const struct bh_stat_row *row)
{
    fprintf(out, "%s%s{", metric->family, metric->suffix);
    print_labels(out, namespace_name, row->view.name);
    int64_t value = metric->read(row);
    if (metric->nanoseconds)
        fprintf(out, "} %.9f\n", (double)value / 1e9);
    else
        fprintf(out, "} %" PRId64 "\n", value);
}

static const struct bh_histogram_view *connect_time(const struct bh_stat_row *row)
{
    return &row->view.connect_time;
}

static const struct bh_histogram_view *hold_time(const struct bh_stat_row *row)
{
    return &row->view.hold_time;
}

static const struct bh_histogram_view *wait_time(const struct bh_stat_row *row)
{
    return &row->view.wait_time;
}

static const struct bh_histogram_view *turnaround_time(const struct bh_stat_row *row)
{
    return &row->window.turnaround_total;
}

/* Mean permits in use over the last minute (or since traffic began, if
 * later) divided by the live limit. */
static void print_utilization(FILE *out, const char *namespace_name,
                              const struct bh_stat_row *rows, int count)
{
    fputs("# HELP bulkhead_utilization Mean permits in use over the last 60 s "
          "(or since the first traffic in them) divided by the live limit; "
          "holds count when they end.\n# TYPE bulkhead_utilization gauge\n", out);
    for (int i = 0; i < count; i++) {
        fputs("bulkhead_utilization{", out);
        print_labels(out, namespace_name, rows[i].view.name);
        fprintf(out, "} %.6f\n", rows[i].window.utilization);
    }
}

/* Buckets cumulative, as Prometheus wants them, ending in +Inf = _count. */
static void print_histogram(FILE *out, const char *family, const char *help,
                            const struct bh_histogram_view *(*of)(const struct bh_stat_row *),
                            const char *namespace_name,
                            const struct bh_stat_row *rows, int count)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s histogram\n", family, help, family);
    for (int i = 0; i < count; i++) {
        const struct bh_histogram_view *histogram = of(&rows[i]);
        uint64_t cumulative = 0;
        for (int b = 0; b <= BH_HISTOGRAM_BUCKETS; b++) {
            cumulative += histogram->buckets[b];
            fprintf(out, "%s_bucket{", family);
            print_labels(out, namespace_name, rows[i].view.name);
            if (b < BH_HISTOGRAM_BUCKETS)
                fprintf(out, ",le=\"%g\"} %" PRIu64 "\n",
                        (double)bh_histogram_bounds_us[b] / 1e6, cumulative);
            else
                fprintf(out, ",le=\"+Inf\"} %" PRIu64 "\n", cumulative);
        }
        fprintf(out, "%s_sum{", family);
        print_labels(out, namespace_name, rows[i].view.name);
        fprintf(out, "} %.9f\n%s_count{", (double)histogram->sum_ns / 1e9, family);
        print_labels(out, namespace_name, rows[i].view.name);
        fprintf(out, "} %" PRIu64 "\n", cumulative);
    }
}

/* bulkhead_reserve_permits and _in_use, labelled with the reserve's WHO;
 * only when some compartment has reserves. */
static void print_reserves(FILE *out, const char *namespace_name,
                           const struct bh_stat_row *rows, int count)
{
    static const char *const families[2][2] = {
        { "bulkhead_reserve_permits", "Live size of a reserve: permits only its members take." },
        { "bulkhead_reserve_in_use", "Permits held from a reserve now." },
    };
    int any = 0;
    for (int i = 0; i < count; i++)
        any |= rows[i].view.reserve_count > 0;
    for (int f = 0; any && f < 2; f++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", families[f][0], families[f][1],
                families[f][0]);
        for (int i = 0; i < count; i++)
            for (int r = 0; r < rows[i].view.reserve_count; r++) {
                const struct bh_reserve_view *reserve = &rows[i].reserves[r];
                fprintf(out, "%s{", families[f][0]);
                print_labels(out, namespace_name, rows[i].view.name);
                fputs(",who=\"", out);
                print_label_value(out, reserve->who);
                fprintf(out, "\"} %d\n", f ? reserve->in_use : reserve->permits);
            }
    }
}

static int any_fleet(const struct bh_stat_row *rows, int count)
{
    for (int i = 0; i < count; i++)
        if (rows[i].view.fleet.limit > 0)
            return 1;
    return 0;
}

int bh_stat_shows_adaptive(const struct bh_stat_row *row)
{
    return row->adaptive.mode != BH_ADAPTIVE_OFF || row->adaptive.windows ||
           row->adaptive.changes;
}

/* The controllers' families, only when some compartment is shown as
 * adaptive, with a sample for each that is. */
static void print_adaptive(FILE *out, const char *namespace_name,
                           const struct bh_stat_row *rows, int count)
{
    int any = 0;
    for (int i = 0; i < count; i++)
        any |= bh_stat_shows_adaptive(&rows[i]);
    for (size_t m = 0; any && m < sizeof adaptive_metrics / sizeof adaptive_metrics[0]; m++) {
        const struct metric *metric = &adaptive_metrics[m];
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", metric->family, metric->help,
                metric->family, metric->type);
        for (int i = 0; i < count; i++)
            if (bh_stat_shows_adaptive(&rows[i]))
                print_sample(out, metric, namespace_name, &rows[i]);
    }
}

/* The namespace's shared-socket records: one sample each, none when
 * records is NULL (no shared state yet). */
static void print_socket_records(FILE *out, const char *namespace_name,
                                 const struct bh_socket_table_view *records)
{
    static const struct {
        const char *family, *type, *help;
    } families[] = {
        { "bulkhead_socket_records", "gauge",
          "Records of counted sockets several processes hold, in use." },
        { "bulkhead_socket_records_capacity", "gauge",
          "How many such records the namespace can hold." },
        { "bulkhead_socket_records_refused_total", "counter",
          "Sockets copied to another process with every record taken: their "
          "permits stayed with the process that connected." },
    };
    for (int f = 0; f < 3; f++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", families[f].family, families[f].help,
                families[f].family, families[f].type);
        if (!records)
            continue;
        int64_t value = f == 0 ? records->in_use : f == 1 ? records->capacity
                                                           : (int64_t)records->refused;
        fprintf(out, "%s{namespace=\"", families[f].family);
        print_label_value(out, namespace_name);
        fprintf(out, "\"} %" PRId64 "\n", value);
    }
}

void bh_stat_prometheus(FILE *out, const char *namespace_name,
                        const struct bh_stat_row *rows, int count,
                        const struct bh_socket_table_view *records)
{
    int fleet = any_fleet(rows, count);
    for (size_t m = 0; m < sizeof metrics / sizeof metrics[0]; m++) {
        const struct metric *metric = &metrics[m];
        if (metric->fleet_only && !fleet)
            continue;
        if (metric->help)
            fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", metric->family, metric->help,
                    metric->family, metric->type);
        for (int i = 0; i < count; i++)
            if (!metric->fleet_only || rows[i].view.fleet.limit > 0)
                print_sample(out, metric, namespace_name, &rows[i]);
    }
    print_adaptive(out, namespace_name, rows, count);
    print_reserves(out, namespace_name, rows, count);
    print_histogram(out, "bulkhead_connect_seconds",
                    "Counted connects, from the connect to established, as the "
                    "program learned it.", connect_time, namespace_name, rows, count);
    print_histogram(out, "bulkhead_hold_seconds",
                    "Permits, from taken to given back.", hold_time, namespace_name,
                    rows, count);
    print_histogram(out, "bulkhead_wait_seconds",
                    "Waits for a permit, however they ended: granted (a "
                    "connect that waited) or not (timed out, or cut by a "
                    "signal); refusals at once are no wait.", wait_time,
                    namespace_name, rows, count);
    print_histogram(out, "bulkhead_turnaround_seconds",
                    "On connections of compartments with turnaround = yes: from a "
                    "send to the first byte received after it.", turnaround_time,
                    namespace_name, rows, count);
    print_utilization(out, namespace_name, rows, count);
    print_socket_records(out, namespace_name, records);
}

void bh_stat_window(struct bh_namespace *ns, int index, int seconds, int limit,
                    struct bh_window_summary *summary)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    struct bh_window_view view;
    bh_window_read(bh_window_of(ns, index), seconds,
                   (int64_t)now.tv_sec * 1000000000 + now.tv_nsec, &view);
    memset(summary, 0, sizeof *summary);
    summary->window_s = (double)view.window_ns / 1e9;
    summary->admitted = view.events[BH_WINDOW_ADMITTED];
    summary->refused = view.events[BH_WINDOW_REFUSED];
    summary->timed_out = view.events[BH_WINDOW_TIMED_OUT];
    summary->turnarounds = view.events[BH_WINDOW_TURNAROUNDS];
    summary->hold_count = view.hold_count;
    summary->turnaround_count = view.turnaround_count;
    summary->hold_p50_ms = bh_loghist_quantile_us(view.hold, view.hold_count, 0.5) / 1e3;
    summary->hold_p99_ms = bh_loghist_quantile_us(view.hold, view.hold_count, 0.99) / 1e3;
    summary->turnaround_p50_ms =
        bh_loghist_quantile_us(view.turnaround, view.turnaround_count, 0.5) / 1e3;
    summary->turnaround_p99_ms =
        bh_loghist_quantile_us(view.turnaround, view.turnaround_count, 0.99) / 1e3;
    summary->permit_us_total = view.permit_us_total;
    memcpy(summary->turnaround_total.buckets, view.turnaround_total.buckets,
           sizeof summary->turnaround_total.buckets);
    summary->turnaround_total.count = view.turnaround_total.count;
    summary->turnaround_total.sum_ns = view.turnaround_total.sum_ns;
    if (summary->window_s <= 0)
        return;
    summary->arrival_rate =
        (double)(summary->admitted + summary->refused + summary->timed_out) / summary->window_s;
    summary->refused_rate = (double)(summary->refused + summary->timed_out) / summary->window_s;
    summary->in_use_mean = (double)view.permit_us / 1e6 / summary->window_s;
    summary->utilization = limit > 0 ? summary->in_use_mean / limit : 0;
}

int bh_stat_read_row(struct bh_namespace *ns, int index, struct bh_stat_row *row)
{
    bh_socket_reap(ns, index);  /* shared sockets every holder of which died */
    if (bh_compartment_read(ns, index, &row->view) < 0)
        return -1;
    bh_breaker_read(bh_breaker_fields(ns, index), &row->breaker);
    bh_adaptive_read(ns, index, &row->adaptive);
    bh_stat_window(ns, index, BH_WINDOW_SECONDS, row->view.limit, &row->window);
    for (int r = 0; r < row->view.reserve_count; r++)
        if (bh_reserve_read(ns, index, r, &row->reserves[r]) < 0)
            return -1;
    return 0;
}

int bh_stat_write_prometheus(FILE *out, struct bh_namespace *ns,
                             const char *namespace_name)
{
    uint32_t count = bh_compartment_count(ns);
    struct bh_stat_row *rows = calloc(count ? count : 1, sizeof *rows);
    if (!rows)
        return -1;
    int rc = 0;
    for (uint32_t i = 0; i < count && rc == 0; i++)
        rc = bh_stat_read_row(ns, (int)i, &rows[i]);
    struct bh_socket_table_view records;
    bh_socket_table_read(ns, &records);
    if (rc == 0)
        bh_stat_prometheus(out, namespace_name, rows, (int)count, &records);
    free(rows);
    return rc;
}
