/* bulkhead-agent: the fleet's per-host agent (see agent.h for what it
 * shares and with whom). `bulkhead agent`, `bulkhead set --fleet` and the
 * fleet part of `bulkhead check` run this program, so that only it links
 * hiredis and libmicrohttpd.
 *
 *   bulkhead-agent [run] [-c rules.ini] [--metrics HOST:PORT] [-v]
 *   bulkhead-agent check [-c rules.ini]        can Redis be reached?
 *   bulkhead-agent set-limit [-c rules.ini] NAME N */
#include "agent.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "adaptive/adaptive.h"
#include "admission/admission.h"
#include "metrics.h"
#include "password_file.h"

enum { EXIT_USAGE = 2, CONNECT_TIMEOUT_MS = 1000, OWED_GAP_MIN_MS = 50, TICK_MS = 20 };

static volatile sig_atomic_t stopping;

static void agent_log(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void agent_log(const char *format, ...)
{
    char line[1024];
    va_list args;
    va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    fprintf(stderr, "bulkhead agent: %s\n", line);
}

/* metrics.c's lines, said as ours. */
static void say_metrics_line(const char *line)
{
    agent_log("%s", line);
}

static int64_t clock_ns(clockid_t clock)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static int64_t ms_ns(int ms) { return (int64_t)ms * 1000000; }

static void config_error(void *ctx, const char *message)
{
    (void)ctx;
    fprintf(stderr, "bulkhead agent: %s\n", message);
}

static int load_config(const char *given, struct bh_config *config)
{
    char path[4096];
    if (given)
        snprintf(path, sizeof path, "%s", given);
    else if (bh_config_locate(path, sizeof path) < 0) {
        agent_log("no rules file (-c FILE, $BULKHEAD_CONFIG, ~/.config/bulkhead/"
                  "rules.ini or /etc/bulkhead/rules.ini)");
        return -1;
    }
    return bh_config_load(path, config, config_error, NULL) != 0 ? -1 : 0;
}

/* check and set-limit need a fleet; run without one only serves /metrics. */
static int need_fleet(const struct bh_config *config, const char *also)
{
    if (config->fleet_url)
        return 0;
    agent_log("%s: no fleet = redis://... in [global]: nothing to lease%s",
              config->path, also);
    return -1;
}

/* A password file others may read is refused with check's line, as ssh
 * refuses such a key; one missing is said when Redis is tried. */
static int password_exposed(const struct bh_config *config)
{
    char why[4200];
    int exposed = 0;
    for (int which = 0; config->fleet_url && which < BH_PASSWORD_FILES; which++)
        if (bh_password_file_problem(config, which, why, sizeof why) > 0) {
            agent_log("%s", why);
            exposed = 1;
        }
    return exposed;
}

/* The fleet compartments, registered in the namespace. A new one starts
 * at 0 on this host: it has no share until Redis grants one. With
 * --metrics, the others too, at their limits, so that /metrics serves
 * every compartment of the rules; without a fleet, the agent joins the
 * namespace only to serve it. */
static int join(struct agent *agent, int metrics)
{
    char why[256];
    if (bh_namespace_open(agent->config.namespace_name, 1, &agent->ns, why,
                          sizeof why) < 0) {
        agent_log("%s", why);
        return -1;
    }
    for (int i = 0; agent->config.fleet_url && i < agent->config.compartment_count; i++) {
        const struct bh_compartment *rules = &agent->config.compartments[i];
        if (rules->fleet_limit == 0)
            continue;
        int live = 0, index = bh_compartment_register(&agent->ns, rules, 0, &live);
        if (index < 0) {
            agent_log("[%s]: cannot register: %s", rules->name, strerror(errno));
            return -1;
        }
        struct bh_compartment_view view = { 0 };
        bh_compartment_read(&agent->ns, index, &view);
        agent->fleet[agent->count++] = (struct fleet_compartment){
            .rules = rules, .index = index, .grant = live,
            .state = BH_FLEET_FALLBACK,
            .refusals_seen = view.rejected + view.timed_out };
    }
    /* With --metrics, every compartment of the rules is there from the
     * start (its limit, 0 in use), not from its first connect: a fresh
     * host has series to alert on. */
    for (int i = 0; metrics && i < agent->config.compartment_count; i++) {
        const struct bh_compartment *rules = &agent->config.compartments[i];
        int live = 0;
        if ((!agent->config.fleet_url || rules->fleet_limit == 0) &&
            bh_compartment_register(&agent->ns, rules, bh_starting_limit(rules), &live) < 0)
            agent_log("[%s]: cannot register: %s", rules->name, strerror(errno));
    }
    if (agent->count == 0 && !metrics) {
        agent_log("%s: %s: nothing to lease (--metrics serves /metrics without one)",
                  agent->config.path, agent->config.fleet_url
                  ? "no compartment has fleet_limit" : "no fleet = redis://... in [global]");
        return -1;
    }
    return 0;
}

/* Redis out of reach, or still: said when the reason is new, not on every
 * refresh. */
static void out_of_reach(struct agent *agent, const char *why, const char *then)
{
    if (strcmp(agent->outage_said, why) == 0)
        return;
    agent_log("%s; %s", why, then);
    snprintf(agent->outage_said, sizeof agent->outage_said, "%s", why);
}

/* The sentinels named another master than the last one: a failover. The
 * promoted replica may lack the old master's last leases (replication is
 * asynchronous), so another host's grant made there may be missing here.
 * As in lease.lua's learning mode after a restart, this host takes no more
 * than it holds for one lease, while every host re-registers what it
 * holds; every agent sees the failover, as each loses the old master. */
static void new_master(struct agent *agent, const char *where, int64_t now)
{
    agent_log("Redis master is now %s (was %s): learning mode for %d ms (this "
              "host is granted no more than it holds)", where, agent->master,
              agent->config.fleet_lease_ms);
    agent->new_master_until_ns = now + ms_ns(agent->config.fleet_lease_ms);
}

static void connect_redis(struct agent *agent, int64_t now)
{
    char why[512];
    if (agent->redis || now < agent->next_connect_ns)
        return;
    agent->next_connect_ns = now + ms_ns(agent->config.fleet_refresh_ms);
    agent->redis = bh_lease_connect(&agent->config, CONNECT_TIMEOUT_MS, why, sizeof why);
    if (!agent->redis) {
        char then[128];
        snprintf(then, sizeof then, "each host keeps its grants until their leases "
                 "end (%d ms), then falls to fleet_fallback for %d ms",
                 agent->config.fleet_lease_ms, agent->config.fleet_fallback_ms);
        out_of_reach(agent, why, then);
        return;
    }
    const char *where = bh_lease_where(agent->redis);
    if (agent->master[0] && strcmp(agent->master, where) != 0)
        new_master(agent, where, now);
    else if (agent->via_sentinels && !agent->master[0])
        agent_log("the sentinels name Redis master %s", where);
    snprintf(agent->master, sizeof agent->master, "%s", where);
}

/* Publishes the fleet figures (first: a fresh lease must be in place
 * before a raised limit can be used), then sets the live limit.
 * limit_in_force and fleet_in_use are -1 when Redis did not say. */
static void apply(struct agent *agent, struct fleet_compartment *c,
                  int limit_in_force, int fleet_in_use)
{
    struct bh_compartment_view view;
    if (bh_compartment_read(&agent->ns, c->index, &view) < 0)
        return;
    struct bh_fleet_view fleet = view.fleet;
    fleet.grant = c->grant;
    fleet.hosts = c->hosts_seen;
    fleet.state = c->state;
    /* Renewed here while we act; if we stop, it lapses (see agent.h). A
     * fallback lapses on time too, whatever this loop is doing then:
     * Redis's reserve for it ends soon after. */
    int64_t renewed = clock_ns(CLOCK_MONOTONIC) + ms_ns(agent->config.fleet_lease_ms);
    if (c->state != BH_FLEET_FALLBACK)
        fleet.lease_until_ns = c->lease_until_ns;
    else if (c->grant > 0 && c->fallback_until_ns < renewed)
        fleet.lease_until_ns = c->fallback_until_ns;
    else
        fleet.lease_until_ns = renewed;
    if (limit_in_force >= 0) {
        fleet.limit = limit_in_force;
        fleet.in_use = fleet_in_use;
        fleet.updated_ns = clock_ns(CLOCK_REALTIME);
    } else if (fleet.limit == 0) {
        fleet.limit = c->rules->fleet_limit;
    }
    bh_compartment_set_fleet(&agent->ns, c->index, &fleet);
    /* An adaptive compartment's ceiling is its controller's limit. */
    int ceiling = bh_adaptive_ceiling(&agent->ns, c->index, c->rules->limit);
    int target = c->grant < ceiling ? c->grant : ceiling;
    if (view.limit == target)
        return;
    if (bh_compartment_set_limit(&agent->ns, c->index, target) < 0)
        agent_log("[%s]: cannot set the limit to %d: %s", c->rules->name, target,
                  strerror(errno));
    else if (agent->verbose)
        agent_log("[%s]: limit %d -> %d", c->rules->name, view.limit, target);
}

/* holding: what this host held when it asked. */
static void leased(struct agent *agent, struct fleet_compartment *c,
                   const struct bh_lease_reply *reply, int holding, int64_t asked_at)
{
    if (reply->learning && c->state != BH_FLEET_LEARNING)
        agent_log("[%s]: Redis lost its leases: learning mode for %d ms "
                  "(every host is granted no more than it holds)", c->rules->name,
                  agent->config.fleet_lease_ms);
    int new_master_learning = asked_at < agent->new_master_until_ns;
    int grant = new_master_learning && holding < reply->grant ? holding : reply->grant;
    c->owed_stalled = c->owed > 0 && reply->owed > 0 && grant <= c->grant;
    c->grant = grant;
    c->owed = reply->owed;
    c->leased_before = 1;
    c->hosts_seen = reply->hosts;
    c->lease_until_ns = asked_at + ms_ns(agent->config.fleet_lease_ms);
    c->fallback_share = reply->fallback;
    c->fallback_until_ns = c->lease_until_ns + ms_ns(agent->config.fleet_fallback_ms);
    c->state = reply->learning || new_master_learning ? BH_FLEET_LEARNING
                                                      : BH_FLEET_LEASED;
    c->fallback_said = 0;
    apply(agent, c, reply->limit, reply->fleet_in_use);
}

/* Without a lease: the grant until our copy of the lease ends, then the
 * fallback share Redis reserves for us, for fleet_fallback_ms, then 0:
 * Redis's reserve ends then, and the others may be granted it. */
static void unleased(struct agent *agent, struct fleet_compartment *c, int64_t now)
{
    if (now < c->lease_until_ns) {
        c->state = BH_FLEET_KEPT;
    } else if (now < c->fallback_until_ns) {
        c->state = BH_FLEET_FALLBACK;
        c->grant = c->fallback_share;
        int limit = c->grant < c->rules->limit ? c->grant : c->rules->limit;
        if (c->fallback_said < 1)
            agent_log("[%s]: lease ended %s: limit %d for %d ms, then 0, until it %s",
                      c->rules->name, c->refused_said[0] ? "while Redis refuses it"
                      : "without Redis", limit, agent->config.fleet_fallback_ms,
                      c->refused_said[0] ? "grants one" : "answers");
        c->fallback_said = 1;
    } else {
        c->state = BH_FLEET_FALLBACK;
        c->grant = 0;
        if (c->fallback_said < 2)
            agent_log("[%s]: %s: limit 0 until Redis %s", c->rules->name,
                      c->leased_before ? "fallback over" : "no lease yet",
                      c->refused_said[0] ? "grants one" : "answers");
        c->fallback_said = 2;
    }
    apply(agent, c, -1, -1);
}

/* Redis answered this compartment's lease with an error (bad data: the
 * script failed, a bad fleet limit). The connection is fine and stays;
 * the error is said once, and again only when it changes. */
static void lease_refused(struct fleet_compartment *c, const char *why)
{
    if (strcmp(c->refused_said, why) == 0)
        return;
    agent_log("[%s]: %s; keeping this host's grant until its lease ends",
              c->rules->name, why);
    snprintf(c->refused_said, sizeof c->refused_said, "%s", why);
}

/* The most wanted in the last PEAK_SECONDS, want (now's) included. */
static int recent_peak(struct fleet_compartment *c, int want, int64_t now)
{
    int64_t second = now / 1000000000;
    int slot = (int)(second % PEAK_SECONDS), peak = 0;
    if (c->peak_second[slot] != second) {
        c->peak_second[slot] = second;
        c->peak_want[slot] = 0;
    }
    if (want > c->peak_want[slot])
        c->peak_want[slot] = want;
    for (int i = 0; i < PEAK_SECONDS; i++)
        if (c->peak_second[i] > second - PEAK_SECONDS && c->peak_want[i] > peak)
            peak = c->peak_want[i];
    return peak;
}

/* want: what is in use and waited for, and what was refused lately: a
 * fail-fast compartment (wait_ms = 0) has no waiters, so its refusals are
 * its only sign of demand. Those since the last refresh count in full,
 * then half as much each refresh, so a burst's demand outlives the refresh
 * that saw it. Never more than this host's ceiling. Room to grow is asked
 * for apart, and Redis grants it only out of capacity no other host
 * wants: a tenth of what is held, at least 1, or up to the most needed in
 * the last minute, so that a host between bursts keeps the room its
 * bursts need while nobody else wants it. */
static void demand(struct fleet_compartment *c, const struct bh_compartment_view *view,
                   int64_t now, struct bh_lease_report *report)
{
    uint64_t refusals = view->rejected + view->timed_out;
    uint64_t fresh = refusals >= c->refusals_seen ? refusals - c->refusals_seen : 0;
    c->refusals_seen = refusals;  /* a reset zeroes the counters: nothing new */
    int64_t halved = c->recent_refusals / 2;
    c->recent_refusals = fresh > (uint64_t)halved
        ? (fresh > INT32_MAX ? INT32_MAX : (int64_t)fresh) : halved;
    int holding = view->in_use;
    int64_t wanted = (int64_t)holding + view->waiting + c->recent_refusals;
    int want = wanted < c->rules->limit ? (int)wanted : c->rules->limit;
    int headroom = holding / 10 > 1 ? holding / 10 : 1;
    /* A connect refused found every permit of the live limit taken: those
     * that have ended since were demand too. */
    int64_t seen = fresh > 0 ? (int64_t)view->limit + c->recent_refusals : want;
    seen = seen > want ? seen : want;
    seen = seen < c->rules->limit ? seen : c->rules->limit;
    int room_for_peak = recent_peak(c, (int)seen, now) - want;
    *report = (struct bh_lease_report){
        .want = want, .holding = holding,
        .previous_grant = c->grant > 0 ? c->grant : c->leased_before,
        .headroom = room_for_peak > headroom ? room_for_peak : headroom };
}

static void refresh(struct agent *agent, struct fleet_compartment *c, int64_t now)
{
    struct bh_compartment_view view;
    char why[512];
    c->last_refresh_ns = now;
    c->next_refresh_ns = now + ms_ns(agent->config.fleet_refresh_ms);
    if (bh_compartment_read(&agent->ns, c->index, &view) < 0)
        return;
    struct bh_lease_report report;
    demand(c, &view, now, &report);
    c->told_want = report.want;
    c->told_holding = report.holding;
    struct bh_lease_reply reply;
    connect_redis(agent, now);
    int rc = agent->redis
        ? bh_lease_call(agent->redis, &agent->config, c->rules, &report, &reply, why,
                        sizeof why)
        : BH_LEASE_DOWN;
    if (rc == BH_LEASE_OK) {
        /* Said on a lease, not on a connect: a Redis that takes the
         * connection and then answers READONLY has not come back. */
        if (agent->outage_said[0])
            agent_log("Redis answers again");
        agent->outage_said[0] = '\0';
        if (c->refused_said[0])
            agent_log("[%s]: Redis grants leases again", c->rules->name);
        c->refused_said[0] = '\0';
        leased(agent, c, &reply, view.in_use, now);
        return;
    }
    if (rc == BH_LEASE_REFUSED) {
        lease_refused(c, why);
    } else if (agent->redis) {
        bh_lease_close(agent->redis);
        agent->redis = NULL;
        out_of_reach(agent, why, "keeping this host's grants until their leases end");
    }
    unleased(agent, c, now);
    /* fall back on time, and end the fallback on time */
    int64_t change = c->state == BH_FLEET_KEPT ? c->lease_until_ns : c->fallback_until_ns;
    if (now < change && change < c->next_refresh_ns)
        c->next_refresh_ns = change;
}

/* Ask now rather than at the next refresh:
 *   - Waiters, no free permit, and the grant is what binds (not the
 *     host's own ceiling, nor an adaptive one): at once when Redis has not
 *     heard of this demand (it was told a want within the grant), so the
 *     first connection waits one tick and one Redis round trip when the
 *     fleet has room; and while Redis says more is owed to us, every
 *     quarter refresh (50 ms at least), to take it as the others give it
 *     up at their refreshes, until a call brings none of it: what is owed
 *     is then held by connections that have not ended (a host that had
 *     more than its share when we came), and asking faster gets nothing.
 *     A host held at its fair share asks only at its refresh: one call per
 *     host per refresh, four while shares move.
 *   - Holding more than the grant (others came, the limit was lowered)
 *     and down to it now: at once, so that what it gave up is free for
 *     the others without waiting for a refresh. */
static int ask_early(struct agent *agent, const struct fleet_compartment *c, int64_t now)
{
    struct bh_compartment_view view;
    if ((c->state != BH_FLEET_LEASED && c->state != BH_FLEET_LEARNING) ||
        bh_compartment_read(&agent->ns, c->index, &view) < 0)
        return 0;
    if (c->told_holding > c->grant && view.in_use <= c->grant)
        return 1;
    if (view.waiting == 0 || view.in_use < view.limit || view.limit < c->grant ||
        c->grant >= c->rules->limit)
        return 0;
    int owed_gap_ms = agent->config.fleet_refresh_ms / 4;
    if (owed_gap_ms < OWED_GAP_MIN_MS)
        owed_gap_ms = OWED_GAP_MIN_MS;
    return c->told_want <= c->grant ||
           (c->owed > 0 && !c->owed_stalled &&
            now >= c->last_refresh_ns + ms_ns(owed_gap_ms));
}

static void on_signal(int signal_number)
{
    (void)signal_number;
    stopping = 1;
}

static void say_fleet(struct agent *agent)
{
    struct bh_fleet_address address;
    char why[256], redis[320];
    bh_fleet_url_parse(agent->config.fleet_url, &address, why, sizeof why);
    agent->via_sentinels = address.sentinel_count > 0;
    if (agent->via_sentinels)
        snprintf(redis, sizeof redis, "Redis master %s/%d via %d sentinel%s",
                 address.master, address.db, address.sentinel_count,
                 address.sentinel_count == 1 ? "" : "s");
    else
        snprintf(redis, sizeof redis, "Redis at %s:%d/%d", address.host, address.port,
                 address.db);
    agent_log("host %s, %s, %d fleet compartment%s, refresh %d ms, lease %d ms",
              agent->config.fleet_host, redis, agent->count, agent->count == 1 ? "" : "s",
              agent->config.fleet_refresh_ms, agent->config.fleet_lease_ms);
}

static int run_loop(struct agent *agent)
{
    struct sigaction action = { .sa_handler = on_signal };
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (agent->count == 0)
        agent_log("namespace %s: no fleet compartment: serving /metrics only, "
                  "leasing nothing", agent->config.namespace_name);
    else
        say_fleet(agent);
    while (!stopping) {
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        for (int i = 0; i < agent->count; i++) {
            struct fleet_compartment *c = &agent->fleet[i];
            if (now >= c->next_refresh_ns || ask_early(agent, c, now))
                refresh(agent, c, now);
        }
        struct timespec tick = { 0, TICK_MS * 1000000L };
        nanosleep(&tick, NULL);
    }
    agent_log("stopping: this host's shares lapse with their leases");
    return 0;
}

/* The soft fd limit up to the hard one: /metrics scrapers and Redis share
 * the fds, and metrics.c keeps a reserve of them for Redis. */
static void raise_fd_limit(void)
{
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
}

struct options {
    const char *config_path;
    const char *metrics;
    int verbose;
    int help;
};

static int parse_options(int argc, char **argv, struct options *options)
{
    static const struct option long_options[] = {
        { "config", required_argument, NULL, 'c' },
        { "metrics", required_argument, NULL, 'm' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int option;
    while ((option = getopt_long(argc, argv, "+c:vh", long_options, NULL)) != -1) {
        if (option == 'h')
            options->help = 1;
        else if (option == 'c')
            options->config_path = optarg;
        else if (option == 'm')
            options->metrics = optarg;
        else if (option == 'v')
            options->verbose = 1;
        else
            return -1;
    }
    return 0;
}

static void print_usage(FILE *out)
{
    fprintf(out, "usage: bulkhead-agent [run] [-c rules.ini] [--metrics HOST:PORT] [-v]\n"
                 "       bulkhead-agent check [-c rules.ini]\n"
                 "       bulkhead-agent set-limit [-c rules.ini] NAME N\n"
                 "(bulkhead agent ... runs the same; man bulkhead-agent)\n");
}

static int usage(void)
{
    print_usage(stderr);
    return EXIT_USAGE;
}

static int check_redis(const struct bh_config *config)
{
    char why[512];
    struct bh_lease_client *client = bh_lease_connect(config, CONNECT_TIMEOUT_MS,
                                                      why, sizeof why);
    if (!client) {
        agent_log("%s", why);
        return 1;
    }
    bh_lease_close(client);
    return 0;
}

static int set_limit(const struct bh_config *config, const char *name, const char *value)
{
    char *end, why[512];
    long limit = strtol(value, &end, 10);
    int known = 0;
    for (int i = 0; i < config->compartment_count; i++)
        known |= strcmp(config->compartments[i].name, name) == 0 &&
                 config->compartments[i].fleet_limit > 0;
    if (*value == '\0' || *end != '\0' || limit < 1 || limit > BH_LEASE_LIMIT_MAX) {
        agent_log("set --fleet: limit=%s: not a whole number from 1 to %d", value,
                  BH_LEASE_LIMIT_MAX);
        return EXIT_USAGE;
    }
    if (!known) {
        agent_log("set --fleet: [%s] is not a fleet compartment of these rules", name);
        return 1;
    }
    struct bh_lease_client *client = bh_lease_connect(config, CONNECT_TIMEOUT_MS,
                                                      why, sizeof why);
    if (!client || bh_lease_set_limit(client, config, name, (int)limit, why,
                                      sizeof why) < 0) {
        agent_log("%s", why);
        bh_lease_close(client);
        return 1;
    }
    bh_lease_close(client);
    printf("[%s]: fleet limit %ld, for every agent from its next refresh\n", name, limit);
    return 0;
}

int main(int argc, char **argv)
{
    const char *verb = argc > 1 && argv[1][0] != '-' ? argv[1] : "run";
    int shift = argc > 1 && argv[1][0] != '-';
    struct options options = { 0 };
    if (parse_options(argc - shift, argv + shift, &options) < 0)
        return usage();
    if (options.help) {
        print_usage(stdout);
        return 0;
    }
    static struct agent agent;
    if (load_config(options.config_path, &agent.config) < 0 ||
        password_exposed(&agent.config))
        return 1;
    int rest = argc - shift - optind;
    char **args = argv + shift + optind;
    if (strcmp(verb, "check") == 0 && rest == 0)
        return need_fleet(&agent.config, "") < 0 ? 1 : check_redis(&agent.config);
    if (strcmp(verb, "set-limit") == 0 && rest == 2)
        return need_fleet(&agent.config, "") < 0 ? 1
             : set_limit(&agent.config, args[0], args[1]);
    if (strcmp(verb, "run") != 0 || rest != 0)
        return usage();
    agent.verbose = options.verbose;
    raise_fd_limit();
    if (join(&agent, options.metrics != NULL) < 0)
        return 1;
    if (options.metrics && bh_metrics_start(options.metrics, &agent.ns,
                                            agent.config.namespace_name,
                                            say_metrics_line) < 0)
        return 1;
    int status = run_loop(&agent);
    if (options.metrics)
        bh_metrics_stop();
    bh_lease_close(agent.redis);
    return status;
}
