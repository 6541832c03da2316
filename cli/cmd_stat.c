/* bulkhead stat: the live state of a namespace, read from the shared state
 * itself (semaphores for in_use and waiting, shared counters for the rest),
 * as an aligned table, JSON or Prometheus text exposition. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admission/admission.h"
#include "cli.h"
#include "stat_render.h"

struct compartment_row {
    struct bh_stat_row stat;
    int holder_count;
    const struct cli_holder *holders;  /* in snapshot.holders */
};

struct snapshot {
    char namespace_name[BH_NAME_MAX];
    int present;          /* 0: the namespace has no shared state yet */
    int count;
    struct compartment_row rows[BH_MAX_COMPARTMENTS];
    struct cli_holders holders;
    struct bh_socket_table_view records;  /* shared-socket records */
};

enum output_format { FORMAT_TABLE, FORMAT_JSON, FORMAT_PROMETHEUS };

static void add_holder(pid_t pid, int index, uint32_t permits, uint32_t waiting,
                       void *ctx)
{
    struct cli_holders *holders = ctx;
    if (holders->count == holders->capacity) {
        int capacity = holders->capacity ? 2 * holders->capacity : 64;
        struct cli_holder *grown = realloc(holders->list, capacity * sizeof *grown);
        if (!grown)
            return;  /* counted as missing below */
        holders->list = grown;
        holders->capacity = capacity;
    }
    holders->list[holders->count++] = (struct cli_holder){ index, pid, permits, waiting };
}

static int by_index_then_pid(const void *a, const void *b)
{
    const struct cli_holder *x = a, *y = b;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

/* A process may have several records of one compartment (each program
 * image it exec'd into, each time it came back to the namespace at a uid
 * change): one holder, with what they hold together. The list is sorted. */
static void merge_same_process(struct cli_holders *holders)
{
    int kept = 0;
    for (int i = 0; i < holders->count; i++) {
        struct cli_holder *last = kept ? &holders->list[kept - 1] : NULL;
        const struct cli_holder *next = &holders->list[i];
        if (last && last->index == next->index && last->pid == next->pid) {
            last->permits += next->permits;
            last->waiting += next->waiting;
        } else {
            holders->list[kept++] = *next;
        }
    }
    holders->count = kept;
}

int cli_holders_collect(struct bh_namespace *ns, struct cli_holders *holders)
{
    *holders = (struct cli_holders){ NULL, 0, 0 };
    bh_holders_visit(ns, add_holder, holders);
    if (holders->count == holders->capacity && holders->capacity) {
        /* a full list may have dropped one: grow and read again */
        struct cli_holders again = { NULL, 0, 0 };
        again.list = malloc(2 * (size_t)holders->capacity * sizeof *again.list);
        again.capacity = again.list ? 2 * holders->capacity : 0;
        if (again.list)
            bh_holders_visit(ns, add_holder, &again);
        cli_holders_free(holders);
        *holders = again;
    }
    if (holders->count && !holders->list) {
        cli_error("stat: out of memory");
        return -1;
    }
    qsort(holders->list, holders->count, sizeof *holders->list, by_index_then_pid);
    merge_same_process(holders);
    return 0;
}

const struct cli_holder *cli_holders_of(const struct cli_holders *holders, int index,
                                        int *count)
{
    int first = 0;
    while (first < holders->count && holders->list[first].index < index)
        first++;
    int last = first;
    while (last < holders->count && holders->list[last].index == index)
        last++;
    *count = last - first;
    return holders->list ? holders->list + first : NULL;
}

void cli_holders_free(struct cli_holders *holders)
{
    free(holders->list);
    *holders = (struct cli_holders){ NULL, 0, 0 };
}

char *cli_format_holders(const struct cli_holder *holders, int count,
                         int shared_permits)
{
    char *text = malloc((size_t)count * 32 + 32);
    if (!text)
        return NULL;
    size_t used = 0;
    strcpy(text, "-");
    for (int i = 0; i < count; i++)  /* "+waits": holds, and waits for more */
        used += (size_t)sprintf(text + used, "%s%d(%" PRIu32 "%s)", i ? "," : "",
                                (int)holders[i].pid, holders[i].permits,
                                holders[i].waiting ? "+waits" : "");
    if (shared_permits > 0)
        sprintf(text + used, "%sshared(%d)", count ? "," : "", shared_permits);
    return text;
}

/* Over every wait, granted or refused (the wait histogram's samples). */
static double wait_mean_ms(const struct bh_compartment_view *view)
{
    const struct bh_histogram_view *waits = &view->wait_time;
    return waits->count ? (double)waits->sum_ns / (double)waits->count / 1e6 : 0.0;
}

static double wait_max_ms(const struct bh_compartment_view *view)
{
    return (double)view->wait_ns_max / 1e6;
}

static int is_registered(const struct snapshot *snapshot, const char *name)
{
    for (int i = 0; i < snapshot->count; i++)
        if (strcmp(snapshot->rows[i].stat.view.name, name) == 0)
            return 1;
    return 0;
}

/* The compartments of the rules file that no process registered yet, at
 * the limit they will start at and nothing in use, so that a fresh host
 * already has every series to alert on. Only read: stat registers
 * nothing (a namespace is made by what connects through it). */
static void add_configured(const struct bh_config *config, struct snapshot *snapshot)
{
    for (int i = 0; config && i < config->compartment_count; i++) {
        const struct bh_compartment *rules = &config->compartments[i];
        if (is_registered(snapshot, rules->name) || snapshot->count == BH_MAX_COMPARTMENTS)
            continue;
        struct compartment_row *row = &snapshot->rows[snapshot->count++];
        *row = (struct compartment_row){ .holders = NULL };
        snprintf(row->stat.view.name, sizeof row->stat.view.name, "%s", rules->name);
        row->stat.view.limit = bh_starting_limit(rules);
        row->stat.view.shadow = rules->mode == BH_MODE_SHADOW;
        for (int r = 0; r < rules->reserve_count; r++)
            row->stat.view.reserved += rules->reserves[r].permits;
        int common = row->stat.view.limit - row->stat.view.reserved;
        row->stat.view.common_free = common > 0 ? common : 0;
    }
}

/* Reads every registered compartment. A namespace removed while we read
 * it counts as absent. Returns 0, or -1 once reported. */
static int read_registered(const struct cli_target *target, struct snapshot *snapshot)
{
    struct bh_namespace ns;
    cli_holders_free(&snapshot->holders);  /* the last round's (--watch) */
    snapshot->present = snapshot->count = 0;
    int opened = cli_target_open(target, &ns, snapshot->namespace_name);
    if (opened != 0)
        return opened < 0 ? -1 : 0;
    uint32_t registered = bh_compartment_count(&ns);
    for (uint32_t i = 0; i < registered; i++) {
        struct compartment_row *row = &snapshot->rows[snapshot->count];
        if (bh_stat_read_row(&ns, (int)i, &row->stat) < 0) {
            int gone = errno == EIDRM || errno == EINVAL;
            if (!gone)
                cli_error("stat: namespace \"%s\": %s", snapshot->namespace_name,
                          strerror(errno));
            bh_namespace_close(&ns);
            snapshot->count = 0;
            return gone ? 0 : -1;
        }
        snapshot->count++;
    }
    if (cli_holders_collect(&ns, &snapshot->holders) < 0) {
        bh_namespace_close(&ns);
        return -1;
    }
    bh_socket_table_read(&ns, &snapshot->records);
    for (int i = 0; i < snapshot->count; i++)
        snapshot->rows[i].holders = cli_holders_of(&snapshot->holders, i,
                                                   &snapshot->rows[i].holder_count);
    snapshot->present = 1;
    bh_namespace_close(&ns);
    return 0;
}

/* config: the rules file the namespace was named by, or NULL (-n). */
static int take_snapshot(const struct cli_target *target, const struct bh_config *config,
                         struct snapshot *snapshot)
{
    if (read_registered(target, snapshot) < 0)
        return -1;
    add_configured(config, snapshot);
    return 0;
}

/* The upper bound in ms of the bucket holding the q-quantile, as text:
 * "<=25", or ">60000" past the last bound. The histogram has samples. */
static void quantile_bound(const struct bh_histogram_view *histogram, double q,
                           char *out, size_t outlen)
{
    uint64_t seen = 0, wanted = (uint64_t)(q * (double)histogram->count + 0.999999);
    int b = 0;
    while (b < BH_HISTOGRAM_BUCKETS && (seen += histogram->buckets[b]) < wanted)
        b++;
    if (b == BH_HISTOGRAM_BUCKETS)
        snprintf(out, outlen, ">%g", (double)bh_histogram_bounds_us[b - 1] / 1000);
    else
        snprintf(out, outlen, "<=%g", (double)bh_histogram_bounds_us[b] / 1000);
}

/* Prints cells[rows][columns] aligned under their headings (row 0): the
 * first `left` columns (names, words) left-aligned, figures right-aligned.
 * Callers end rows with a figure, so no line ends in padding. */
static void print_aligned(int rows, int columns, int left,
                          char (*cells)[BH_NAME_MAX])
{
    int widths[columns];
    memset(widths, 0, sizeof widths);
    for (int row = 0; row < rows; row++)
        for (int column = 0; column < columns; column++) {
            int width = (int)strlen(cells[row * columns + column]);
            widths[column] = width > widths[column] ? width : widths[column];
        }
    for (int row = 0; row < rows; row++) {
        for (int column = 0; column < columns; column++) {
            printf("%s%*s", column ? "  " : "",
                   column < left ? -widths[column] : widths[column],
                   cells[row * columns + column]);
        }
        printf("\n");
    }
}

/* "closed", "open (12s left)" (rounded up), "open (forced)", "half-open". */
static void breaker_cell(const struct bh_breaker_view *breaker, char *out, size_t outlen)
{
    if (breaker->forced)
        snprintf(out, outlen, "open (forced)");
    else if (breaker->state == BH_BREAKER_IS_OPEN)
        snprintf(out, outlen, "open (%llds left)",
                 (long long)(breaker->open_left_ms + 999) / 1000);
    else
        snprintf(out, outlen, "%s", bh_breaker_state_name(breaker->state));
}

/* How long ago: "45s ago" up to 2 minutes, "12m ago" up to 2 hours, "5h
 * ago" up to 2 days, then "3d ago"; "-" for never. An age reads at a
 * glance, in --watch too; --json and --prometheus carry the exact time. */
static void age_cell(int64_t since_ns, char *out, size_t outlen)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long seconds = (long long)(now.tv_sec - since_ns / 1000000000);
    seconds = seconds < 0 ? 0 : seconds;  /* the clock was set back */
    if (since_ns == 0)
        snprintf(out, outlen, "-");
    else if (seconds < 120)
        snprintf(out, outlen, "%llds ago", seconds);
    else if (seconds < 120 * 60)
        snprintf(out, outlen, "%lldm ago", seconds / 60);
    else if (seconds < 48 * 3600)
        snprintf(out, outlen, "%lldh ago", seconds / 3600);
    else
        snprintf(out, outlen, "%lldd ago", seconds / 86400);
}

/* Whether a compartment has anything for the breaker table: it saw a
 * connection, a failure, or its breaker ever left closed. */
static int has_outcomes(const struct bh_stat_row *row)
{
    return row->view.connect_time.count || row->view.connect_failures ||
           row->view.io_timeouts || row->breaker.opened ||
           row->breaker.state != BH_BREAKER_IS_CLOSED;
}

static const char *const outcome_headings[] = {
    "COMPARTMENT", "BREAKER", "CHANGED", "OPENED", "REFUSED",
    "CONN_FAILED", "CONN_TIMEOUTS", "IO_TIMEOUTS",
};
enum { OUTCOME_COLUMNS = sizeof outcome_headings / sizeof outcome_headings[0] };

static void fill_outcome_cells(const struct bh_stat_row *row, char (*cells)[BH_NAME_MAX])
{
    snprintf(cells[0], BH_NAME_MAX, "%s", row->view.name);
    breaker_cell(&row->breaker, cells[1], BH_NAME_MAX);
    age_cell(row->breaker.since_ns, cells[2], BH_NAME_MAX);
    snprintf(cells[3], BH_NAME_MAX, "%" PRIu64, row->breaker.opened);
    snprintf(cells[4], BH_NAME_MAX, "%" PRIu64, row->breaker.refused);
    snprintf(cells[5], BH_NAME_MAX, "%" PRIu64, row->view.connect_failures);
    snprintf(cells[6], BH_NAME_MAX, "%" PRIu64, row->view.connect_timeouts);
    snprintf(cells[7], BH_NAME_MAX, "%" PRIu64, row->view.io_timeouts);
}

enum { SECTION_COLUMNS_MAX = 10 };
_Static_assert((int)OUTCOME_COLUMNS <= (int)SECTION_COLUMNS_MAX, "print_section's cells");

/* A table below the permits: one row per compartment that shows(), filled
 * by fill(), under its headings, after a blank line; nothing when no
 * compartment shows. Names and words in the first two columns. */
static void print_section(const struct snapshot *snapshot, const char *const *headings,
                          int columns, int (*shows)(const struct bh_stat_row *),
                          void (*fill)(const struct bh_stat_row *, char (*)[BH_NAME_MAX]))
{
    static char cells[(BH_MAX_COMPARTMENTS + 1) * SECTION_COLUMNS_MAX][BH_NAME_MAX];
    int rows = 1;
    for (int column = 0; column < columns; column++)
        snprintf(cells[column], BH_NAME_MAX, "%s", headings[column]);
    for (int i = 0; i < snapshot->count; i++)
        if (shows(&snapshot->rows[i].stat))
            fill(&snapshot->rows[i].stat, &cells[rows++ * columns]);
    if (rows == 1)
        return;
    printf("\n");
    print_aligned(rows, columns, 2, cells);
}

/* Below the permits: the breaker and how connects turned out, one row per
 * compartment that has any. Kept apart from the permits table so both fit
 * about 100 columns. */
static void print_outcomes(const struct snapshot *snapshot)
{
    print_section(snapshot, outcome_headings, OUTCOME_COLUMNS, has_outcomes,
                  fill_outcome_cells);
}

static const char *const histogram_headings[] = {
    "COMPARTMENT", "TIME", "COUNT", "MEAN_MS", "P50_MS", "P99_MS",
};
enum { HISTOGRAM_COLUMNS = sizeof histogram_headings / sizeof histogram_headings[0] };

/* One row of the histograms table: "NAME connect 12 0.41 <=0.5 <=2.5". */
static void fill_histogram_cells(const char *name, const char *what,
                                 const struct bh_histogram_view *histogram,
                                 char (*cells)[BH_NAME_MAX])
{
    snprintf(cells[0], BH_NAME_MAX, "%s", name);
    snprintf(cells[1], BH_NAME_MAX, "%s", what);
    snprintf(cells[2], BH_NAME_MAX, "%" PRIu64, histogram->count);
    snprintf(cells[3], BH_NAME_MAX, "%.2f",
             (double)histogram->sum_ns / (double)histogram->count / 1e6);
    quantile_bound(histogram, 0.5, cells[4], BH_NAME_MAX);
    quantile_bound(histogram, 0.99, cells[5], BH_NAME_MAX);
}

/* Last: the connect-time, hold-time and wait-time histograms of each
 * compartment, a row each when they have samples. The quantiles are
 * bucket bounds. */
static void print_histograms(const struct snapshot *snapshot)
{
    static char cells[(3 * BH_MAX_COMPARTMENTS + 1) * HISTOGRAM_COLUMNS][BH_NAME_MAX];
    int rows = 1;
    for (int column = 0; column < HISTOGRAM_COLUMNS; column++)
        snprintf(cells[column], BH_NAME_MAX, "%s", histogram_headings[column]);
    for (int i = 0; i < snapshot->count; i++) {
        const struct bh_compartment_view *view = &snapshot->rows[i].stat.view;
        if (view->connect_time.count)
            fill_histogram_cells(view->name, "connect", &view->connect_time,
                                 &cells[rows++ * HISTOGRAM_COLUMNS]);
        if (view->hold_time.count)
            fill_histogram_cells(view->name, "hold", &view->hold_time,
                                 &cells[rows++ * HISTOGRAM_COLUMNS]);
        if (view->wait_time.count)
            fill_histogram_cells(view->name, "wait", &view->wait_time,
                                 &cells[rows++ * HISTOGRAM_COLUMNS]);
    }
    if (rows == 1)
        return;
    printf("\n");
    print_aligned(rows, HISTOGRAM_COLUMNS, 2, cells);
}

static void print_fleet(const struct snapshot *snapshot)
{
    int header = 0;
    for (int i = 0; i < snapshot->count; i++) {
        const struct bh_compartment_view *view = &snapshot->rows[i].stat.view;
        if (view->fleet.limit == 0)
            continue;
        if (!header++)
            printf("\n%-*s  %11s  %5s  %12s  %5s  %-8s  %s\n", BH_NAME_MAX / 3,
                   "COMPARTMENT", "FLEET_LIMIT", "GRANT", "FLEET_IN_USE", "HOSTS",
                   "STATE", "REDIS_ANSWERED");
        char age[32];
        age_cell(view->fleet.updated_ns, age, sizeof age);
        printf("%-*s  %11d  %5d  %12d  %5d  %-8s  %s\n", BH_NAME_MAX / 3, view->name,
               view->fleet.limit, view->fleet.grant, view->fleet.in_use,
               view->fleet.hosts, cli_fleet_state_name(view->fleet.state), age);
    }
}

static const char *const adaptive_headings[] = {
    "COMPARTMENT", "ADAPTIVE", "LIMIT", "MIN", "MAX", "BASELINE_MS", "RECENT_MS",
    "LAST_CHANGE", "WHY", "CHANGED",
};
enum { ADAPTIVE_COLUMNS = sizeof adaptive_headings / sizeof adaptive_headings[0] };
_Static_assert((int)ADAPTIVE_COLUMNS <= (int)SECTION_COLUMNS_MAX, "print_section's cells");

static void fill_adaptive_cells(const struct bh_stat_row *row, char (*cells)[BH_NAME_MAX])
{
    const struct bh_adaptive_view *adaptive = &row->adaptive;
    snprintf(cells[0], BH_NAME_MAX, "%s", row->view.name);
    snprintf(cells[1], BH_NAME_MAX, "%s", bh_adaptive_mode_name(adaptive->mode));
    snprintf(cells[2], BH_NAME_MAX, "%d", row->view.limit);
    snprintf(cells[3], BH_NAME_MAX, "%d", adaptive->min_limit);
    snprintf(cells[4], BH_NAME_MAX, "%d", adaptive->max_limit);
    snprintf(cells[5], BH_NAME_MAX, "%.1f", (double)adaptive->baseline_ns / 1e6);
    snprintf(cells[6], BH_NAME_MAX, "%.1f", (double)adaptive->recent_ns / 1e6);
    if (adaptive->last_change_ns)
        snprintf(cells[7], BH_NAME_MAX, "%d->%d", adaptive->last_from, adaptive->last_to);
    else
        snprintf(cells[7], BH_NAME_MAX, "-");
    snprintf(cells[8], BH_NAME_MAX, "%s", adaptive->last_change_ns
             ? bh_adaptive_reason_name(adaptive->last_reason) : "-");
    age_cell(adaptive->last_change_ns, cells[9], BH_NAME_MAX);
}

/* Compartments whose limit a controller moves (or froze, adaptive=off):
 * its bounds, the latencies it compares, its last change and why. */
static void print_adaptive(const struct snapshot *snapshot)
{
    print_section(snapshot, adaptive_headings, ADAPTIVE_COLUMNS, bh_stat_shows_adaptive,
                  fill_adaptive_cells);
}

static const char *const policy_headings[] = {
    "COMPARTMENT", "POOL", "PERMITS", "IN_USE", "FREE", "OWES", "WAITING",
};
enum { POLICY_COLUMNS = sizeof policy_headings / sizeof policy_headings[0] };

/* One pool's row. FREE and OWES are its semaphores as they are, so that
 * permits stuck on loan in a reserve show, whatever PERMITS says. */
struct pool_figures {
    int permits, in_use, free_now, owes, waiting;
};

static void fill_pool_cells(const char *name, const char *pool, struct pool_figures figures,
                            char (*cells)[BH_NAME_MAX])
{
    snprintf(cells[0], BH_NAME_MAX, "%s", name);
    snprintf(cells[1], BH_NAME_MAX, "%s", pool);
    snprintf(cells[2], BH_NAME_MAX, "%d", figures.permits);
    snprintf(cells[3], BH_NAME_MAX, "%d", figures.in_use);
    snprintf(cells[4], BH_NAME_MAX, "%d", figures.free_now);
    snprintf(cells[5], BH_NAME_MAX, "%d", figures.owes);
    snprintf(cells[6], BH_NAME_MAX, "%d", figures.waiting);
}

/* Compartments with reserves: each reserve ("reserve WHO") and the common
 * pool, what it holds and who waits on it; then the policy's refusals and
 * bypasses, for compartments that had any. */
static void print_policy(const struct snapshot *snapshot)
{
    static char cells[(BH_MAX_RESERVES + 2) * BH_MAX_COMPARTMENTS * POLICY_COLUMNS]
                     [BH_NAME_MAX];
    int rows = 1, counted = 0;
    for (int column = 0; column < POLICY_COLUMNS; column++)
        snprintf(cells[column], BH_NAME_MAX, "%s", policy_headings[column]);
    for (int i = 0; i < snapshot->count; i++) {
        const struct bh_stat_row *row = &snapshot->rows[i].stat;
        int in_reserves = 0, waiting = row->view.waiting;
        counted |= row->view.per_process_refused || row->view.bypassed;
        for (int r = 0; r < row->view.reserve_count; r++) {
            const struct bh_reserve_view *reserve = &row->reserves[r];
            char pool[BH_NAME_MAX];
            snprintf(pool, sizeof pool, "reserve %.*s", BH_NAME_MAX - 9, reserve->who);
            fill_pool_cells(row->view.name, pool,
                            (struct pool_figures){ reserve->permits, reserve->in_use,
                                                   reserve->free_now, reserve->owes,
                                                   reserve->waiting },
                            &cells[rows++ * POLICY_COLUMNS]);
            in_reserves += reserve->in_use;
            waiting -= reserve->waiting;
        }
        if (row->view.reserve_count)
            fill_pool_cells(row->view.name, "common",
                            (struct pool_figures){ row->view.limit - row->view.reserved,
                                                   row->view.in_use - in_reserves,
                                                   row->view.common_free,
                                                   row->view.common_owes, waiting },
                            &cells[rows++ * POLICY_COLUMNS]);
    }
    if (rows > 1) {
        printf("\n");
        print_aligned(rows, POLICY_COLUMNS, 2, cells);
    }
    if (!counted)
        return;
    printf("\n%-*s  %19s  %8s\n", BH_NAME_MAX / 3, "COMPARTMENT", "PER_PROCESS_REFUSED",
           "BYPASSED");
    for (int i = 0; i < snapshot->count; i++) {
        const struct bh_compartment_view *view = &snapshot->rows[i].stat.view;
        if (view->per_process_refused || view->bypassed)
            printf("%-*s  %19" PRIu64 "  %8" PRIu64 "\n", BH_NAME_MAX / 3, view->name,
                   view->per_process_refused, view->bypassed);
    }
}

/* Compartments in shadow mode, or that were: what enforce would have
 * refused (SHADOW_REF) or made wait (SHADOW_WAIT) of what they let
 * through. */
static void print_shadow(const struct snapshot *snapshot)
{
    int any = 0;
    for (int i = 0; i < snapshot->count; i++) {
        const struct bh_compartment_view *view = &snapshot->rows[i].stat.view;
        any |= view->shadow || view->shadow_refused || view->shadow_waited;
    }
    if (!any)
        return;
    printf("\n%-*s  %-7s  %10s  %11s\n", BH_NAME_MAX / 3, "COMPARTMENT", "MODE",
           "SHADOW_REF", "SHADOW_WAIT");
    for (int i = 0; i < snapshot->count; i++) {
        const struct bh_compartment_view *view = &snapshot->rows[i].stat.view;
        if (view->shadow || view->shadow_refused || view->shadow_waited)
            printf("%-*s  %-7s  %10" PRIu64 "  %11" PRIu64 "\n", BH_NAME_MAX / 3,
                   view->name, bh_mode_name(view->shadow ? BH_MODE_SHADOW : BH_MODE_ENFORCE),
                   view->shadow_refused, view->shadow_waited);
    }
}

/* Connections whose fds several processes hold (fork, SCM_RIGHTS): their
 * permits stay in use until the socket's last copy closes. The records
 * that hold them are the namespace's, all compartments together. */
static void print_shared(const struct snapshot *snapshot)
{
    const struct bh_socket_table_view *records = &snapshot->records;
    if (records->in_use || records->refused)
        printf("\nshared-socket records: %d of %d in use%s", records->in_use,
               records->capacity, records->refused ? "" : "\n");
    if (records->refused)
        printf(", %" PRIu64 " refused: table full (those sockets' permits stayed "
               "with the process that connected)\n", records->refused);
    int any = 0;
    for (int i = 0; i < snapshot->count; i++)
        any |= snapshot->rows[i].stat.view.shared > 0;
    if (!any)
        return;
    printf("\n%-*s  %6s  %14s\n", BH_NAME_MAX / 3, "COMPARTMENT", "SHARED",
           "SHARED_PERMITS");
    for (int i = 0; i < snapshot->count; i++) {
        const struct bh_compartment_view *view = &snapshot->rows[i].stat.view;
        if (view->shared)
            printf("%-*s  %6d  %14d\n", BH_NAME_MAX / 3, view->name, view->shared,
                   view->shared_permits);
    }
}

static const char *const table_headings[] = {
    "COMPARTMENT", "LIMIT", "IN_USE", "WAITING", "PEAK", "ACQUIRED",
    "REJECTED", "TIMED_OUT", "WAIT_MEAN_MS", "WAIT_MAX_MS", "UTIL",
};
enum { TABLE_COLUMNS = sizeof table_headings / sizeof table_headings[0] };
/* Wide enough for a whole compartment name; numbers need far less. */
typedef char table_cells[TABLE_COLUMNS][BH_NAME_MAX];

static void fill_cells(const struct bh_compartment_view *view, table_cells cells)
{
    snprintf(cells[0], sizeof cells[0], "%s", view->name);
    snprintf(cells[1], sizeof cells[1], "%d", view->limit);
    snprintf(cells[2], sizeof cells[2], "%d", view->in_use);
    snprintf(cells[3], sizeof cells[3], "%d", view->waiting);
    snprintf(cells[4], sizeof cells[4], "%" PRId64, view->peak);
    snprintf(cells[5], sizeof cells[5], "%" PRIu64, view->acquired);
    snprintf(cells[6], sizeof cells[6], "%" PRIu64, view->rejected);
    snprintf(cells[7], sizeof cells[7], "%" PRIu64, view->timed_out);
    snprintf(cells[8], sizeof cells[8], "%.1f", wait_mean_ms(view));
    snprintf(cells[9], sizeof cells[9], "%.1f", wait_max_ms(view));
}

/* Mean in use over the last minute as a share of the limit, "!" past
 * BH_UTILIZATION_HIGH; "-" when nothing ran in it. */
static void utilization_cell(const struct bh_window_summary *window, char *out,
                             size_t outlen)
{
    if (window->window_s <= 0)
        snprintf(out, outlen, "-");
    else
        snprintf(out, outlen, "%.0f%%%s", window->utilization * 100,
                 window->utilization > BH_UTILIZATION_HIGH ? "!" : "");
}

/* Under the table, when some compartment is flagged. */
static void print_utilization_note(const struct snapshot *snapshot)
{
    for (int i = 0; i < snapshot->count; i++)
        if (snapshot->rows[i].stat.window.utilization > BH_UTILIZATION_HIGH) {
            printf("! above %.0f%% of the limit in use over the last minute: a "
                   "slow downstream will be refused soon; bulkhead suggest sizes it\n",
                   BH_UTILIZATION_HIGH * 100);
            return;
        }
}

/* Names left-aligned, figures right-aligned, holders last and unpadded. */
static void print_table_line(table_cells cells, const int *widths,
                             const char *holders)
{
    printf("%-*s", widths[0], cells[0]);
    for (int column = 1; column < TABLE_COLUMNS; column++)
        printf("  %*s", widths[column], cells[column]);
    printf("  %s\n", holders);
}

static void print_table(const struct snapshot *snapshot)
{
    table_cells cells[BH_MAX_COMPARTMENTS + 1];
    int widths[TABLE_COLUMNS] = { 0 };
    for (int column = 0; column < TABLE_COLUMNS; column++)
        snprintf(cells[0][column], sizeof cells[0][column], "%s",
                 table_headings[column]);
    for (int row = 0; row < snapshot->count; row++) {
        fill_cells(&snapshot->rows[row].stat.view, cells[row + 1]);
        utilization_cell(&snapshot->rows[row].stat.window, cells[row + 1][10],
                         sizeof cells[row + 1][10]);
    }
    for (int row = 0; row <= snapshot->count; row++)
        for (int column = 0; column < TABLE_COLUMNS; column++) {
            int width = (int)strlen(cells[row][column]);
            widths[column] = width > widths[column] ? width : widths[column];
        }
    printf("namespace %s%s\n", snapshot->namespace_name,
           snapshot->present ? "" : ": no shared state yet (nothing has run in it)");
    print_table_line(cells[0], widths, "HOLDERS");
    for (int row = 0; row < snapshot->count; row++) {
        const struct compartment_row *data = &snapshot->rows[row];
        char *holders = cli_format_holders(data->holders, data->holder_count,
                                           data->stat.view.shared_permits);
        print_table_line(cells[row + 1], widths, holders ? holders : "?");
        free(holders);
    }
    print_utilization_note(snapshot);
    print_adaptive(snapshot);
    print_policy(snapshot);
    print_shadow(snapshot);
    print_shared(snapshot);
    print_outcomes(snapshot);
    print_histograms(snapshot);
    print_fleet(snapshot);
}

void cli_print_json_string(const char *text)
{
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            printf("\\%c", *c);
        else if (*c < 0x20)
            printf("\\u%04x", *c);
        else
            putchar(*c);
    }
    putchar('"');
}

static void print_json_histogram(const char *name, const struct bh_histogram_view *histogram)
{
    printf("\"%s\": {\"bounds_ms\": [", name);
    for (int b = 0; b < BH_HISTOGRAM_BUCKETS; b++)
        printf("%s%g", b ? ", " : "", (double)bh_histogram_bounds_us[b] / 1000);
    printf("], \"counts\": [");
    for (int b = 0; b <= BH_HISTOGRAM_BUCKETS; b++)
        printf("%s%" PRIu64, b ? ", " : "", histogram->buckets[b]);
    printf("], \"count\": %" PRIu64 ", \"sum_ms\": %.3f}", histogram->count,
           (double)histogram->sum_ns / 1e6);
}

/* The breaker, failures and timeouts, the histograms (counts per bucket,
 * not cumulative; the last bucket is past 60 s) and, for a fleet
 * compartment, the fleet. */
static void print_json_outcomes(const struct bh_stat_row *row)
{
    const struct bh_breaker_view *breaker = &row->breaker;
    const struct bh_compartment_view *view = &row->view;
    printf("\"breaker\": {\"state\": \"%s\", \"forced\": %s, \"since\": ",
           bh_breaker_state_name(breaker->state), breaker->forced ? "true" : "false");
    if (breaker->since_ns)
        printf("%.3f", (double)breaker->since_ns / 1e9);
    else
        printf("null");
    printf(", \"open_left_ms\": %" PRId64 ", \"open_ms\": %d, \"opened\": %" PRIu64
           ", \"refused\": %" PRIu64 ", \"failures\": %" PRIu32
           ", \"probes_taken_over\": %" PRIu64 "}, "
           "\"connect_failures\": %" PRIu64 ", \"connect_timeouts\": %" PRIu64
           ", \"io_timeouts\": %" PRIu64 ", ",
           breaker->open_left_ms, breaker->open_ms, breaker->opened, breaker->refused,
           breaker->failures, breaker->probes_taken_over, view->connect_failures,
           view->connect_timeouts, view->io_timeouts);
    print_json_histogram("connect_time", &view->connect_time);
    printf(", ");
    print_json_histogram("hold_time", &view->hold_time);
    printf(", ");
    print_json_histogram("wait_time", &view->wait_time);
    if (view->fleet.limit > 0)
        printf(", \"fleet\": {\"limit\": %d, \"grant\": %d, \"in_use\": %d, "
               "\"hosts\": %d, \"state\": \"%s\"}", view->fleet.limit,
               view->fleet.grant, view->fleet.in_use, view->fleet.hosts,
               cli_fleet_state_name(view->fleet.state));
}

/* null for a compartment no controller ever moved. */
static void print_json_adaptive(const struct bh_stat_row *row)
{
    const struct bh_adaptive_view *adaptive = &row->adaptive;
    printf("\"adaptive\": ");
    if (!bh_stat_shows_adaptive(row)) {
        printf("null");
        return;
    }
    printf("{\"mode\": \"%s\", \"min_limit\": %d, \"max_limit\": %d, "
           "\"latency_ms\": %d, \"estimate\": %.3f, \"baseline_ms\": %.3f, "
           "\"recent_ms\": %.3f, \"windows\": %" PRIu64 ", \"changes\": %" PRIu64
           ", \"last_change\": ", bh_adaptive_mode_name(adaptive->mode),
           adaptive->min_limit, adaptive->max_limit, adaptive->latency_ms,
           adaptive->estimate, (double)adaptive->baseline_ns / 1e6,
           (double)adaptive->recent_ns / 1e6, adaptive->windows, adaptive->changes);
    if (adaptive->last_change_ns)
        printf("{\"from\": %d, \"to\": %d, \"why\": \"%s\", \"at\": %.3f}}",
               adaptive->last_from, adaptive->last_to,
               bh_adaptive_reason_name(adaptive->last_reason),
               (double)adaptive->last_change_ns / 1e9);
    else
        printf("null}");
}

/* The last minute: "utilization" and the figures behind it. */
static void print_json_window(const struct bh_window_summary *window)
{
    printf("\"utilization\": %.4f, \"window\": {\"seconds\": %.3f, "
           "\"admitted\": %" PRIu64 ", \"refused\": %" PRIu64 ", \"timed_out\": %" PRIu64
           ", \"arrival_rate\": %.3f, \"refused_rate\": %.3f, \"in_use_mean\": %.3f, "
           "\"hold_count\": %" PRIu64 ", \"hold_p50_ms\": %.3f, \"hold_p99_ms\": %.3f, "
           "\"turnaround_count\": %" PRIu64 ", \"turnaround_p50_ms\": %.3f, "
           "\"turnaround_p99_ms\": %.3f}, \"permit_seconds_total\": %.6f, ",
           window->utilization, window->window_s, window->admitted, window->refused,
           window->timed_out, window->arrival_rate, window->refused_rate,
           window->in_use_mean, window->hold_count, window->hold_p50_ms,
           window->hold_p99_ms, window->turnaround_count, window->turnaround_p50_ms,
           window->turnaround_p99_ms, (double)window->permit_us_total / 1e6);
}

static void print_json_compartment(const struct compartment_row *row)
{
    const struct bh_compartment_view *view = &row->stat.view;
    printf("{\"name\": ");
    cli_print_json_string(view->name);
    printf(", \"limit\": %d, \"in_use\": %d, \"waiting\": %d, \"peak\": %" PRId64
           ", \"acquired\": %" PRIu64 ", \"rejected\": %" PRIu64
           ", \"timed_out\": %" PRIu64 ", \"waits\": %" PRIu64
           ", \"wait_mean_ms\": %.3f, \"wait_max_ms\": %.3f, \"holders\": [",
           view->limit, view->in_use, view->waiting, view->peak, view->acquired,
           view->rejected, view->timed_out, view->waits, wait_mean_ms(view),
           wait_max_ms(view));
    for (int i = 0; i < row->holder_count; i++)
        printf("%s{\"pid\": %d, \"permits\": %" PRIu32 ", \"waiting\": %" PRIu32
               "}", i ? ", " : "", (int)row->holders[i].pid,
               row->holders[i].permits, row->holders[i].waiting);
    printf("], \"per_process_refused\": %" PRIu64 ", \"bypassed\": %" PRIu64
           ", \"mode\": \"%s\", \"shadow_refused\": %" PRIu64 ", \"shadow_waited\": %" PRIu64
           ", \"shared\": %d, \"shared_permits\": %d, \"reserves\": [",
           view->per_process_refused, view->bypassed,
           bh_mode_name(view->shadow ? BH_MODE_SHADOW : BH_MODE_ENFORCE),
           view->shadow_refused, view->shadow_waited, view->shared, view->shared_permits);
    for (int r = 0; r < view->reserve_count; r++) {
        const struct bh_reserve_view *reserve = &row->stat.reserves[r];
        printf("%s{\"who\": ", r ? ", " : "");
        cli_print_json_string(reserve->who);
        printf(", \"permits\": %d, \"in_use\": %d, \"free\": %d, \"owes\": %d"
               ", \"waiting\": %d}", reserve->permits, reserve->in_use,
               reserve->free_now, reserve->owes, reserve->waiting);
    }
    printf("], \"common_free\": %d, \"common_owes\": %d, ", view->common_free,
           view->common_owes);
    print_json_window(&row->stat.window);
    print_json_outcomes(&row->stat);
    printf(", ");
    print_json_adaptive(&row->stat);
    printf("}");
}

static void print_json(const struct snapshot *snapshot)
{
    printf("{\"namespace\": ");
    cli_print_json_string(snapshot->namespace_name);
    printf(", \"compartments\": [");
    for (int i = 0; i < snapshot->count; i++) {
        printf("%s\n  ", i ? "," : "");
        print_json_compartment(&snapshot->rows[i]);
    }
    printf("%s]", snapshot->count ? "\n" : "");
    if (snapshot->present)  /* no records without shared state */
        printf(", \"socket_records\": {\"in_use\": %d, \"capacity\": %d, "
               "\"refused\": %" PRIu64 "}", snapshot->records.in_use,
               snapshot->records.capacity, snapshot->records.refused);
    printf("}\n");
}

static void print_prometheus(const struct snapshot *snapshot)
{
    struct bh_stat_row rows[BH_MAX_COMPARTMENTS];
    for (int i = 0; i < snapshot->count; i++)
        rows[i] = snapshot->rows[i].stat;
    bh_stat_prometheus(stdout, snapshot->namespace_name, rows, snapshot->count,
                       snapshot->present ? &snapshot->records : NULL);
}

static int show_once(const struct cli_target *target, const struct bh_config *config,
                     enum output_format format, struct snapshot *snapshot)
{
    if (take_snapshot(target, config, snapshot) < 0)
        return CLI_FAILED;
    if (!snapshot->present && format != FORMAT_TABLE)
        cli_error("stat: namespace \"%s\" has no shared state yet (nothing has "
                  "run in it)", snapshot->namespace_name);
    if (format == FORMAT_JSON)
        print_json(snapshot);
    else if (format == FORMAT_PROMETHEUS)
        print_prometheus(snapshot);
    else
        print_table(snapshot);
    return CLI_OK;
}

/* Redraws the table every interval until SIGINT or SIGTERM, which are
 * waited for instead of sleeping, so none is missed. */
static int watch_table(const struct cli_target *target, const struct bh_config *config,
                       double seconds, struct snapshot *snapshot)
{
    struct timespec interval = { (time_t)seconds,
                                 (long)((seconds - (double)(time_t)seconds) * 1e9) };
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    for (;;) {
        if (take_snapshot(target, config, snapshot) < 0)
            return CLI_FAILED;
        time_t now = time(NULL);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime(&now));
        printf("\033[H\033[2J%s, every %gs; Ctrl-C to stop\n", stamp, seconds);
        print_table(snapshot);
        fflush(stdout);
        if (sigtimedwait(&stop, NULL, &interval) > 0)
            return CLI_OK;
    }
}

static int parse_interval(const char *text, double *seconds)
{
    char *end;
    errno = 0;
    *seconds = strtod(text, &end);
    return errno == 0 && end != text && *end == '\0' && *seconds >= 0.1 &&
                   *seconds <= 86400
               ? 0 : -1;
}

static int stat_command(int argc, char **argv)
{
    static const struct option options[] = {
        CLI_TARGET_OPTIONS,
        { "json", no_argument, NULL, 'j' },
        { "prometheus", no_argument, NULL, 'p' },
        { "watch", required_argument, NULL, 'w' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    struct cli_target target = { 0 };
    enum output_format format = FORMAT_TABLE;
    double watch_seconds = 0;
    int option, formats_given = 0;
    opterr = 0;
    while ((option = getopt_long(argc, argv, ":" CLI_TARGET_SHORT "h", options, NULL)) != -1) {
        if (cli_target_option(&target, option, optarg))
            continue;
        if (option == 'j' || option == 'p') {
            format = option == 'j' ? FORMAT_JSON : FORMAT_PROMETHEUS;
            formats_given++;
        } else if (option == 'w') {
            if (parse_interval(optarg, &watch_seconds) < 0)
                return cli_usage_error(&cli_stat_command, "--watch \"%s\": not a "
                                       "number of seconds from 0.1 to 86400", optarg);
        } else
            return cli_option_problem(&cli_stat_command, option, argv);
    }
    if (optind < argc)
        return cli_usage_error(&cli_stat_command, "unexpected \"%s\"", argv[optind]);
    if (formats_given > 1 || (formats_given && watch_seconds > 0))
        return cli_usage_error(&cli_stat_command, "give one of --json, "
                               "--prometheus and --watch");
    if (cli_target_usage(&cli_stat_command, &target) != CLI_OK)
        return CLI_USAGE;
    int user_status = cli_target_user(&cli_stat_command, &target, 0);
    if (user_status != CLI_OK)
        return user_status;
    struct snapshot *snapshot = calloc(1, sizeof *snapshot);
    if (!snapshot) {
        cli_error("stat: out of memory");
        return CLI_FAILED;
    }
    struct bh_config config;
    int configured = cli_target_rules(&target, &config) == 0;
    const struct bh_config *rules = configured ? &config : NULL;
    int status = watch_seconds > 0 ? watch_table(&target, rules, watch_seconds, snapshot)
                                   : show_once(&target, rules, format, snapshot);
    if (configured)
        bh_config_free(&config);
    cli_holders_free(&snapshot->holders);
    free(snapshot);
    return status;
}

const struct cli_command cli_stat_command = {
    .name = "stat",
    .synopsis = "bulkhead stat [-c rules.ini | -n NAMESPACE] [-u USER] "
                "[--json | --prometheus | --watch SECONDS]",
    .help =
        "Shows the live state of every compartment registered in the namespace,\n"
        "shared by all its processes: LIMIT (live), IN_USE (permits held,\n"
        "exact, from the semaphores), WAITING (connects waiting now, blocking\n"
        "and non-blocking, from the kernel), PEAK (most\n"
        "in use at once), ACQUIRED (permits granted), REJECTED (connect()\n"
        "calls refused at once), TIMED_OUT (calls that waited wait_ms, then\n"
        "were refused), WAIT_MEAN_MS and WAIT_MAX_MS (over every wait, however\n"
        "it ended: granted, timed out, or cut by a signal; a call refused at\n"
        "once never waited) and HOLDERS (pid(permits) of the processes\n"
        "holding permits; shared(N): permits of sockets several processes\n"
        "share, held until the last copy closes). REJECTED and TIMED_OUT count calls, not connections\n"
        "nor processes: a client that retries counts each refused attempt.\n"
        "Below it, for compartments that have seen connections or whose\n"
        "breaker ever left closed: BREAKER (closed, open (Ns left), open\n"
        "(forced), half-open), CHANGED (how long ago it last changed), OPENED\n"
        "(times), REFUSED (connects the breaker refused; not in REJECTED or\n"
        "TIMED_OUT), CONN_FAILED (connects refused, unreachable, timed out or\n"
        "reset), CONN_TIMEOUTS (connects that timed out) and IO_TIMEOUTS.\n"
        "Then a row per histogram with samples: TIME connect (connect to\n"
        "established), hold (permit taken to given back) or wait (every wait,\n"
        "as WAIT_MEAN_MS), COUNT, MEAN_MS,\n"
        "and P50_MS, P99_MS: the upper bound of the bucket holding that\n"
        "quantile. Compartments with reserves get a row per POOL (each\n"
        "reserve, by its WHO, and the common pool): PERMITS, IN_USE, FREE and\n"
        "OWES (its semaphores as they are: permits free now, and permits it\n"
        "owes another pool, such as common permits lent to a reserve), WAITING;\n"
        "compartments that refused a connect for per_process or let one\n"
        "through for bypass get PER_PROCESS_REFUSED and BYPASSED (apart from\n"
        "every other count). Compartments in mode = shadow (or that let\n"
        "connects through in it) get MODE, SHADOW_REF and SHADOW_WAIT: connects\n"
        "let through that enforce would have refused, or made wait.\n"
        "Fleet compartments get the fleet limit, this\n"
        "host's grant, the fleet's use, its live hosts and the lease's state.\n"
        "Compartments of the rules file (-c, or the one run would use) that no\n"
        "process registered yet are listed too, in every format, at the limit\n"
        "they start at (a fleet one: 0 until the agent's first grant) with\n"
        "nothing in use: a fresh host already has every series. -n shows only\n"
        "what is registered. A namespace where nothing has run yet has no\n"
        "state: stat says so and exits 0.\n"
        "\n"
        CLI_TARGET_HELP
        "      --json            one JSON object: {\"namespace\", \"compartments\":\n"
        "                        [{\"name\", \"limit\", \"in_use\", \"waiting\", \"peak\",\n"
        "                        \"acquired\", \"rejected\", \"timed_out\", \"waits\",\n"
        "                        \"wait_mean_ms\", \"wait_max_ms\",\n"
        "                        \"holders\": [{\"pid\", \"permits\", \"waiting\"}],\n"
        "                        \"per_process_refused\", \"bypassed\", \"mode\"\n"
        "                        (enforce or shadow), \"shadow_refused\",\n"
        "                        \"shadow_waited\" (let through in shadow mode;\n"
        "                        enforce would have refused, or made wait), \"shared\"\n"
        "                        (connections whose fds several processes hold),\n"
        "                        \"shared_permits\", \"reserves\": [{\"who\",\n"
        "                        \"permits\", \"in_use\", \"free\", \"owes\",\n"
        "                        \"waiting\"}], \"common_free\", \"common_owes\",\n"
        "                        \"utilization\" and \"window\" (the last minute):\n"
        "                        {\"seconds\", \"admitted\", \"refused\",\n"
        "                        \"timed_out\", \"arrival_rate\", \"refused_rate\",\n"
        "                        \"in_use_mean\", \"hold_count\", \"hold_p50_ms\",\n"
        "                        \"hold_p99_ms\", \"turnaround_count\",\n"
        "                        \"turnaround_p50_ms\", \"turnaround_p99_ms\"},\n"
        "                        \"permit_seconds_total\", \"breaker\": {\"state\",\n"
        "                        \"forced\", \"since\" (Unix time in s; null: never\n"
        "                        changed), \"open_left_ms\", \"open_ms\", \"opened\",\n"
        "                        \"refused\", \"failures\", \"probes_taken_over\"},\n"
        "                        \"connect_failures\", \"connect_timeouts\",\n"
        "                        \"io_timeouts\", \"connect_time\", \"hold_time\" and\n"
        "                        \"wait_time\" (every wait; \"waits\": those granted):\n"
        "                        {\"bounds_ms\", \"counts\" (per bucket, the last\n"
        "                        past 60 s), \"count\", \"sum_ms\"}, \"fleet\" (fleet\n"
        "                        compartments): {\"limit\", \"grant\", \"in_use\",\n"
        "                        \"hosts\", \"state\"}, \"adaptive\" (null unless a\n"
        "                        controller ever moved it): {\"mode\", \"min_limit\",\n"
        "                        \"max_limit\", \"latency_ms\", \"estimate\",\n"
        "                        \"baseline_ms\", \"recent_ms\", \"windows\",\n"
        "                        \"changes\", \"last_change\": {\"from\", \"to\",\n"
        "                        \"why\", \"at\"}}}], \"socket_records\":\n"
        "                        {\"in_use\", \"capacity\", \"refused\" (sockets\n"
        "                        copied while every record was taken)}}\n"
        "      --prometheus      Prometheus text exposition, labels namespace and\n"
        "                        compartment. Gauges bulkhead_permits_limit,\n"
        "                        bulkhead_permits_in_use, bulkhead_waiters,\n"
        "                        bulkhead_permits_peak, bulkhead_wait_max_seconds,\n"
        "                        bulkhead_shared_connections, bulkhead_utilization\n"
        "                        (the last minute), bulkhead_breaker_state (0\n"
        "                        closed, 1 open, 2 half-open),\n"
        "                        bulkhead_breaker_forced (1: open by set),\n"
        "                        bulkhead_breaker_changed_seconds (Unix time; 0:\n"
        "                        never), and, labelled who,\n"
        "                        bulkhead_reserve_permits and\n"
        "                        bulkhead_reserve_in_use. Counters\n"
        "                        bulkhead_acquired_total, bulkhead_rejected_total,\n"
        "                        bulkhead_timed_out_total,\n"
        "                        bulkhead_breaker_opened_total,\n"
        "                        bulkhead_breaker_refusals_total,\n"
        "                        bulkhead_connect_failures_total,\n"
        "                        bulkhead_connect_timeouts_total,\n"
        "                        bulkhead_io_timeouts_total,\n"
        "                        bulkhead_per_process_refused_total,\n"
        "                        bulkhead_bypassed_total,\n"
        "                        bulkhead_shadow_refused_total,\n"
        "                        bulkhead_shadow_waited_total (and the gauge\n"
        "                        bulkhead_shadow: 1 in mode = shadow) and\n"
        "                        bulkhead_permit_seconds_total (its rate over the\n"
        "                        limit is the utilization over any window). The\n"
        "                        histograms bulkhead_wait_seconds (every wait,\n"
        "                        granted or not), bulkhead_connect_seconds,\n"
        "                        bulkhead_hold_seconds\n"
        "                        and bulkhead_turnaround_seconds (_bucket by le in\n"
        "                        seconds, cumulative up to +Inf, _sum, _count).\n"
        "                        Adaptive compartments: gauges\n"
        "                        bulkhead_adaptive_mode,\n"
        "                        bulkhead_adaptive_min_limit,\n"
        "                        bulkhead_adaptive_max_limit,\n"
        "                        bulkhead_adaptive_baseline_seconds,\n"
        "                        bulkhead_adaptive_recent_seconds,\n"
        "                        bulkhead_adaptive_changed_seconds,\n"
        "                        bulkhead_adaptive_last_reason, counters\n"
        "                        bulkhead_adaptive_changes_total and\n"
        "                        bulkhead_adaptive_windows_total. Fleet\n"
        "                        compartments: bulkhead_fleet_limit,\n"
        "                        bulkhead_fleet_grant, bulkhead_fleet_in_use,\n"
        "                        bulkhead_fleet_hosts and bulkhead_fleet_state.\n"
        "                        Labelled namespace alone: the gauges\n"
        "                        bulkhead_socket_records and\n"
        "                        bulkhead_socket_records_capacity, the counter\n"
        "                        bulkhead_socket_records_refused_total.\n"
        "      --watch SECONDS   redraw the table every SECONDS until Ctrl-C\n",
    .run = stat_command,
};
