/* bulkhead discover: the outbound TCP destinations a namespace's
 * processes connected to under `[global] observe = yes` (the table of
 * permits/destinations.h), busiest first; --json for programs; --rules a
 * rules.ini draft, one compartment in shadow mode per downstream, sized
 * as `suggest` sizes a limit. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "permits/destinations.h"

struct destination {
    struct bh_destination_view view;
    char address[INET6_ADDRSTRLEN + 2];   /* [v6] in brackets, as match = wants */
    double rate;                          /* connects per second */
    int group;                            /* --rules: its compartment */
};

struct discover_options {
    struct cli_target target;
    int json, rules;
};

static void format_address(struct destination *d)
{
    char text[INET6_ADDRSTRLEN];
    inet_ntop(d->view.family, d->view.address, text, sizeof text);
    snprintf(d->address, sizeof d->address, d->view.family == AF_INET6 ? "[%s]" : "%s",
             text);
}

/* Two processes that met a new destination at once may have claimed a
 * slot each (destinations.c): one row, the counts added. */
static int same_destination(const struct destination *a, const struct destination *b)
{
    return a->view.family == b->view.family && a->view.port == b->view.port &&
           memcmp(a->view.address, b->view.address, sizeof a->view.address) == 0;
}

static void add_names(struct bh_destination_view *into, const struct bh_destination_view *from)
{
    for (int i = 0; i < BH_DESTINATION_NAMES && from->names[i][0]; i++)
        for (int j = 0; j < BH_DESTINATION_NAMES; j++) {
            if (strcmp(into->names[j], from->names[i]) == 0)
                break;
            if (!into->names[j][0]) {
                memcpy(into->names[j], from->names[i], BH_DESTINATION_NAME_MAX);
                break;
            }
        }
}

static void merge(struct destination *into, const struct destination *from)
{
    struct bh_destination_view *v = &into->view;
    if (from->view.holds > v->holds) {
        v->hold_p50_ms = from->view.hold_p50_ms;
        v->hold_p99_ms = from->view.hold_p99_ms;
    }
    v->connects += from->view.connects;
    v->refused += from->view.refused;
    v->failed += from->view.failed;
    v->holds += from->view.holds;
    v->peak += from->view.peak;
    add_names(v, &from->view);
}

static int busiest_first(const void *a, const void *b)
{
    const struct destination *x = a, *y = b;
    if (x->view.connects != y->view.connects)
        return x->view.connects < y->view.connects ? 1 : -1;
    return strcmp(x->address, y->address);
}

/* Every destination of the table, merged and sorted; how many in *count.
 * NULL when out of memory. */
static struct destination *collect(const struct bh_destinations *table, int *count)
{
    struct destination *list = calloc(BH_DESTINATIONS, sizeof *list);
    double window_s = bh_destinations_window_s(table);
    *count = 0;
    for (int slot = 0; list && slot < BH_DESTINATIONS; slot++) {
        struct destination *d = &list[*count];
        if (bh_destination_read(table, slot, &d->view) < 0)
            continue;
        int known = 0;
        while (known < *count && !same_destination(&list[known], d))
            known++;
        if (known < *count) {
            merge(&list[known], d);
            continue;
        }
        format_address(d);
        (*count)++;
    }
    for (int i = 0; list && i < *count; i++)
        list[i].rate = window_s > 0 ? (double)list[i].view.connects / window_s : 0;
    if (list)
        qsort(list, (size_t)*count, sizeof *list, busiest_first);
    return list;
}

/* ---- output ---- */

static void names_text(const struct bh_destination_view *v, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s%s%s", v->names[0][0] ? v->names[0] : "-",
             v->names[1][0] ? "," : "", v->names[1]);
}

static void print_table(const struct destination *list, int count, const char *name,
                        double window_s, uint64_t dropped)
{
    printf("namespace %s, destinations seen over %.0f s", name, window_s);
    if (dropped)
        printf(" (%" PRIu64 " more did not fit the table)", dropped);
    printf("\n%-46s %-24s %9s %8s %5s %9s %9s %8s %7s\n", "DESTINATION", "NAMES",
           "CONNECTS", "RATE/S", "PEAK", "P50_MS", "P99_MS", "REFUSED", "FAILED");
    for (int i = 0; i < count; i++) {
        const struct destination *d = &list[i];
        char destination[64], names[2 * BH_DESTINATION_NAME_MAX];
        snprintf(destination, sizeof destination, "%s:%u", d->address, d->view.port);
        names_text(&d->view, names, sizeof names);
        printf("%-46s %-24s %9" PRIu64 " %8.2f %5" PRId64 " %9.1f %9.1f %8" PRIu64
               " %7" PRIu64 "\n", destination, names, d->view.connects, d->rate,
               d->view.peak, d->view.hold_p50_ms, d->view.hold_p99_ms, d->view.refused,
               d->view.failed);
    }
}

static void print_json(const struct destination *list, int count, double window_s,
                       uint64_t dropped)
{
    printf("{\"window_s\": %.3f, \"dropped\": %" PRIu64 ", \"destinations\": [",
           window_s, dropped);
    for (int i = 0; i < count; i++) {
        const struct destination *d = &list[i];
        printf("%s\n  {\"names\": [", i ? "," : "");
        for (int n = 0; n < BH_DESTINATION_NAMES && d->view.names[n][0]; n++) {
            printf("%s", n ? ", " : "");
            cli_print_json_string(d->view.names[n]);
        }
        char address[INET6_ADDRSTRLEN];
        inet_ntop(d->view.family, d->view.address, address, sizeof address);
        printf("], \"address\": ");
        cli_print_json_string(address);
        printf(", \"port\": %u, \"connects\": %" PRIu64 ", \"rate\": %.3f, \"peak\": %"
               PRId64 ", \"hold_p50_ms\": %.3f, \"hold_p99_ms\": %.3f, \"refused\": %"
               PRIu64 ", \"failed\": %" PRIu64 "}", d->view.port, d->view.connects,
               d->rate, d->view.peak, d->view.hold_p50_ms, d->view.hold_p99_ms,
               d->view.refused, d->view.failed);
    }
    printf("%s]}\n", count ? "\n" : "");
}

/* ---- --rules ---- */

/* A downstream: the destinations reached by one host name and port (or
 * by one address and port, when no name is known). */
struct group {
    char name[BH_NAME_MAX];       /* its compartment's name */
    const char *host;             /* the host name; NULL: none known */
    unsigned port;
    double rate, p99_ms;
};

/* text with what a compartment name may not hold made '-', cut to fit. */
static void name_from(const char *text, char *name, size_t room)
{
    size_t i = 0;
    for (; text[i] && i + 1 < room; i++) {
        char c = text[i];
        int allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
        name[i] = allowed ? c : '-';
    }
    name[i] = '\0';
}

static int name_taken(const struct group *groups, int count, const char *name)
{
    if (strcmp(name, "global") == 0)
        return 1;
    for (int i = 0; i < count; i++)
        if (strcmp(groups[i].name, name) == 0)
            return 1;
    return 0;
}

/* The host name (or address), then with -PORT, then with -N: unique. */
static void name_group(struct group *groups, int count, const char *base)
{
    struct group *g = &groups[count];
    char stem[BH_NAME_MAX - 10], candidate[96];  /* room for -PORT-N */
    name_from(base, stem, sizeof stem);
    snprintf(candidate, sizeof candidate, "%s", stem);
    if (name_taken(groups, count, candidate))
        snprintf(candidate, sizeof candidate, "%s-%u", stem, g->port);
    for (int n = 2; name_taken(groups, count, candidate); n++)
        snprintf(candidate, sizeof candidate, "%s-%u-%d", stem, g->port, n);
    memcpy(g->name, candidate, BH_NAME_MAX - 1);
    g->name[BH_NAME_MAX - 1] = '\0';
}

static int find_group(const struct group *groups, int count, const char *host,
                      unsigned port)
{
    for (int i = 0; i < count; i++)
        if (host && groups[i].host && groups[i].port == port &&
            strcmp(groups[i].host, host) == 0)
            return i;
    return -1;
}

/* Each destination into its downstream's group; how many groups. */
static int group_destinations(struct destination *list, int count, struct group *groups)
{
    int groups_count = 0;
    for (int i = 0; i < count; i++) {
        struct destination *d = &list[i];
        const char *host = d->view.names[0][0] ? d->view.names[0] : NULL;
        int g = find_group(groups, groups_count, host, d->view.port);
        if (g < 0) {
            g = groups_count++;
            groups[g] = (struct group){ .host = host, .port = d->view.port };
            name_group(groups, g, host ? host : d->address);
        }
        d->group = g;
        groups[g].rate += d->rate;
        if (d->view.hold_p99_ms > groups[g].p99_ms)
            groups[g].p99_ms = d->view.hold_p99_ms;
    }
    return groups_count;
}

static void print_rules(struct destination *list, int count, const char *namespace_name,
                        double window_s)
{
    struct group *groups = calloc(count ? (size_t)count : 1, sizeof *groups);
    if (!groups) {
        cli_error("discover: out of memory");
        return;
    }
    int groups_count = group_destinations(list, count, groups);
    printf("# A draft from bulkhead discover: namespace %s, %.0f s observed.\n"
           "# Each downstream counts in shadow mode: nothing is refused; bulkhead\n"
           "# stat shows what each limit would have refused. Check each limit\n"
           "# (ceil(connects per second x hold p99 x %.1f)), then set mode = enforce.\n\n"
           "[global]\nnamespace = %s\nobserve = yes\n", namespace_name, window_s,
           CLI_SAFETY, namespace_name);
    for (int g = 0; g < groups_count; g++) {
        printf("\n[%s]\nlimit = %d\nmode = shadow\n", groups[g].name,
               cli_sized_limit(groups[g].rate, groups[g].p99_ms, CLI_SAFETY));
        if (groups[g].host)
            printf("match = %s:%u\n", groups[g].host, groups[g].port);
        for (int i = 0; i < count; i++)
            if (list[i].group == g)
                printf("match = %s:%u\n", list[i].address, list[i].view.port);
    }
    free(groups);
}

/* ---- the command ---- */

static int parse_options(int argc, char **argv, struct discover_options *o)
{
    static const struct option options[] = {
        CLI_TARGET_OPTIONS,
        { "json", no_argument, NULL, 'j' },
        { "rules", no_argument, NULL, 'r' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int option;
    opterr = 0;
    while ((option = getopt_long(argc, argv, ":" CLI_TARGET_SHORT "h", options, NULL)) != -1) {
        if (cli_target_option(&o->target, option, optarg))
            continue;
        if (option == 'j' || option == 'r')
            *(option == 'j' ? &o->json : &o->rules) = 1;
        else
            return cli_option_problem(&cli_discover_command, option, argv);
    }
    if (optind < argc)
        return cli_usage_error(&cli_discover_command, "unexpected \"%s\"", argv[optind]);
    if (o->json && o->rules)
        return cli_usage_error(&cli_discover_command, "--json and --rules: one or the other");
    if (cli_target_usage(&cli_discover_command, &o->target) != CLI_OK)
        return CLI_USAGE;
    int status = cli_target_user(&cli_discover_command, &o->target, 0);
    return status == CLI_OK ? -1 : status;
}

static int discover_command(int argc, char **argv)
{
    struct discover_options o = { 0 };
    int parsed = parse_options(argc, argv, &o);
    if (parsed >= 0)
        return parsed;
    char name[BH_NAME_MAX];
    if (cli_target_namespace(&o.target, name) < 0)
        return CLI_FAILED;
    struct bh_destinations *table = bh_destinations_open(o.target.uid, name, 0);
    if (!table) {
        if (errno == ENOENT)
            cli_error("discover: namespace \"%s\"%s has no destinations recorded: "
                      "nothing ran in it with observe = yes in [global]", name,
                      cli_target_owner(&o.target));
        else
            cli_error("discover: namespace \"%s\"%s: its destinations table: %s", name,
                      cli_target_owner(&o.target), strerror(errno));
        return CLI_FAILED;
    }
    int count;
    struct destination *list = collect(table, &count);
    double window_s = bh_destinations_window_s(table);
    if (!list)
        cli_error("discover: out of memory");
    else if (o.json)
        print_json(list, count, window_s, bh_destinations_dropped(table));
    else if (o.rules)
        print_rules(list, count, name, window_s);
    else
        print_table(list, count, name, window_s, bh_destinations_dropped(table));
    free(list);
    bh_destinations_close(table);
    return list ? CLI_OK : CLI_FAILED;
}

const struct cli_command cli_discover_command = {
    .name = "discover",
    .synopsis = "bulkhead discover [-c rules.ini | -n NAMESPACE] [-u USER] "
                "[--json] [--rules]",
    .help =
        "Lists the outbound TCP destinations the namespace's processes connected\n"
        "to while its rules said observe = yes in [global], matched by a rule or\n"
        "not, busiest first: the address and port, the NAMES the programs\n"
        "resolved it by (getaddrinfo, gethostbyname), CONNECTS and RATE/S (over\n"
        "the time since the first was recorded), PEAK (open at once), the hold\n"
        "time's P50_MS and P99_MS (connect to close), REFUSED (by a compartment)\n"
        "and FAILED (the connect failed). The table keeps 4,096 destinations;\n"
        "what did not fit is counted.\n"
        "\n"
        CLI_TARGET_HELP
        "      --json            {\"window_s\", \"dropped\", \"destinations\": [{\"names\",\n"
        "                        \"address\", \"port\", \"connects\", \"rate\", \"peak\",\n"
        "                        \"hold_p50_ms\", \"hold_p99_ms\", \"refused\",\n"
        "                        \"failed\"}]}\n"
        "      --rules           a rules.ini draft: one compartment per downstream\n"
        "                        (named from its host name where one is known), its\n"
        "                        limit ceil(rate x hold p99 x 1.5) as suggest sizes\n"
        "                        it, in mode = shadow\n",
    .run = discover_command,
};
