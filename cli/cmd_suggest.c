/* bulkhead suggest: what limit each compartment's traffic needs, from the
 * windowed figures every process keeps (permits/window.c), with a verdict
 * in plain words; --apply sets the suggestions live as `set` does.
 *
 * The sizing is Little's law: permits needed = arrivals per second x the
 * time each holds its permit. suggested_limit = ceil(rate x p99 x safety),
 * with p99 the hold time, or the turnaround where connections carry many
 * requests each (keep-alive: a permit is held for minutes while each
 * request takes milliseconds, so the requests' rate and turnaround size
 * it). A compartment with fewer than MIN_SAMPLES requests in the window
 * gets no suggestion, and --apply never touches it. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "stat_render.h"

enum { MIN_SAMPLES = 20, VERDICT_MAX = 320 };

/* Long holds (p50 past this) with no turnaround measured: hold time says
 * nothing of the requests on those connections. */
#define LONG_HOLD_MS 10000.0
/* More answers than this many per connection ended: keep-alive, so size
 * by turnaround. */
#define REQUESTS_PER_CONNECTION 1.5
/* Refusing at least this share of arrivals counts as refusing. */
#define REFUSING 0.01

struct suggestion {
    struct bh_compartment_view view;
    struct bh_window_summary window;
    int by_turnaround;    /* the signal: turnaround, else hold time */
    uint64_t samples;     /* requests with a measured time in the window */
    double rate;          /* of those requests, per second */
    double p50_ms, p99_ms;
    int suggested;        /* -1: none (too little traffic, or no signal) */
    char verdict[VERDICT_MAX];
};

struct suggest_options {
    struct cli_target target;
    int window_s;
    double safety;
    int json, apply;
};

/* Which signal sizes the compartment, and its figures. */
static void pick_signal(struct suggestion *s)
{
    const struct bh_window_summary *w = &s->window;
    s->by_turnaround = w->turnarounds > 0 &&
                       (double)w->turnarounds > REQUESTS_PER_CONNECTION * (double)w->admitted;
    if (s->by_turnaround) {
        s->samples = w->turnarounds;
        s->rate = w->window_s > 0 ? (double)w->turnarounds / w->window_s : 0;
        s->p50_ms = w->turnaround_p50_ms;
        s->p99_ms = w->turnaround_p99_ms;
    } else {
        s->samples = w->hold_count;
        s->rate = w->arrival_rate;
        s->p50_ms = w->hold_p50_ms;
        s->p99_ms = w->hold_p99_ms;
    }
}

/* No suggestion: too little traffic, or connections held long with no
 * turnaround measured. Returns 1 and says why in the verdict, else 0. */
static int cannot_say(struct suggestion *s)
{
    const char *name = s->view.name;
    if (!s->by_turnaround && s->samples >= MIN_SAMPLES && s->p50_ms >= LONG_HOLD_MS) {
        snprintf(s->verdict, VERDICT_MAX, "connections are held long (p50 %.0f s): hold "
                 "time says nothing of the requests on them; set turnaround = yes in "
                 "[%s] and ask again", s->p50_ms / 1000, name);
        return 1;
    }
    if (s->samples >= MIN_SAMPLES)
        return 0;
    /* Without turnaround, a sample is a connection, however many requests
     * it carried: keep-alive traffic of a thousand requests is 8 here. */
    if (!s->by_turnaround && s->window.turnarounds == 0)
        snprintf(s->verdict, VERDICT_MAX, "too little traffic to say (%" PRIu64 " connection%s "
                 "ended, %d open now): if its connections carry many requests each, set "
                 "turnaround = yes in [%s]", s->samples, s->samples == 1 ? "" : "s",
                 s->view.in_use, name);
    else
        snprintf(s->verdict, VERDICT_MAX, "too little traffic to say (%" PRIu64
                 " request%s)", s->samples, s->samples == 1 ? "" : "s");
    return 1;
}

/* The verdict for a compartment with a suggestion: `needs` permits on
 * average at p99, `suggested` with the safety factor. */
static void judge(struct suggestion *s, int needs)
{
    const struct bh_window_summary *w = &s->window;
    int limit = s->view.limit;
    double refused = w->arrival_rate > 0 ? w->refused_rate / w->arrival_rate : 0;
    const char *what = s->by_turnaround ? "requests need" : "traffic needs";
    if (refused >= REFUSING && w->utilization >= BH_UTILIZATION_HIGH)
        snprintf(s->verdict, VERDICT_MAX, "refusing %.0f%% at %.0f%% utilization: the "
                 "limit is low or the downstream slow; %s about %d; suggest %d",
                 refused * 100, w->utilization * 100, what, needs, s->suggested);
    else if (refused >= REFUSING && s->suggested <= limit) {
        s->suggested = limit;
        snprintf(s->verdict, VERDICT_MAX, "refusing %.0f%% at %.0f%% utilization: "
                 "bursts fill the limit while %s about %d on average; keep %d, or "
                 "let connects wait (wait_ms about %.0f)", refused * 100,
                 w->utilization * 100, what, needs, limit, ceil(s->p99_ms));
    } else if (refused >= REFUSING)
        snprintf(s->verdict, VERDICT_MAX, "refusing %.0f%% at %.0f%% utilization: "
                 "%s about %d; suggest %d", refused * 100, w->utilization * 100, what,
                 needs, s->suggested);
    else if (s->suggested * 2 <= limit)
        snprintf(s->verdict, VERDICT_MAX, "limit %d, %s about %d: a slow downstream "
                 "could take %d workers before the bulkhead acts; suggest %d", limit,
                 what, needs, limit, s->suggested);
    else if (s->suggested > limit)
        snprintf(s->verdict, VERDICT_MAX, "limit %d, %s about %d: a burst or a "
                 "slower downstream will be refused; suggest %d", limit, what, needs,
                 s->suggested);
    else
        snprintf(s->verdict, VERDICT_MAX, "limit %d fits: %s about %d; suggest %d",
                 limit, what, needs, s->suggested);
}

int cli_sized_limit(double rate, double p99_ms, double safety)
{
    double limit = ceil(rate * p99_ms / 1000 * safety);
    return limit < 1 ? 1 : limit > BH_LIMIT_MAX ? BH_LIMIT_MAX : (int)limit;
}

static void suggest_one(struct bh_namespace *ns, int index, const struct suggest_options *o,
                        struct suggestion *s)
{
    bh_stat_window(ns, index, o->window_s, s->view.limit, &s->window);
    pick_signal(s);
    s->suggested = -1;
    if (cannot_say(s))
        return;
    double needed = s->rate * s->p99_ms / 1000;
    s->suggested = cli_sized_limit(s->rate, s->p99_ms, o->safety);
    int needs = (int)lround(needed);
    judge(s, needs < 1 ? 1 : needs);
}

/* ---- output ---- */

static void print_json(const struct suggestion *list, int count, int window_s)
{
    printf("{\"window_s\": %d, \"compartments\": [", window_s);
    for (int i = 0; i < count; i++) {
        const struct suggestion *s = &list[i];
        printf("%s\n  {\"name\": ", i ? "," : "");
        cli_print_json_string(s->view.name);
        printf(", \"limit\": %d, \"suggested_limit\": ", s->view.limit);
        if (s->suggested >= 0)
            printf("%d", s->suggested);
        else
            printf("null");
        printf(", \"utilization\": %.4f, \"arrival_rate\": %.3f, \"refused_rate\": %.3f, "
               "\"hold_p50_ms\": %.3f, \"hold_p99_ms\": %.3f, \"in_use_mean\": %.3f, "
               "\"samples\": %" PRIu64 ", \"verdict\": ", s->window.utilization,
               s->window.arrival_rate, s->window.refused_rate, s->p50_ms, s->p99_ms,
               s->window.in_use_mean, s->samples);
        cli_print_json_string(s->verdict);
        printf(", \"signal\": \"%s\", \"request_rate\": %.3f, \"window_s\": %.3f, "
               "\"in_use\": %d, \"peak\": %" PRId64 "}",
               s->by_turnaround ? "turnaround" : "hold", s->rate, s->window.window_s,
               s->view.in_use, s->view.peak);
    }
    printf("%s]}\n", count ? "\n" : "");
}

static void print_table(const struct suggestion *list, int count, const char *namespace_name,
                        int window_s)
{
    printf("namespace %s, the last %d s (or since traffic began)\n", namespace_name,
           window_s);
    printf("%-24s %6s %9s %10s %9s %10s %9s %9s %11s %5s %5s %7s\n", "COMPARTMENT", "LIMIT",
           "SUGGESTED", "ARRIVALS/S", "REFUSED/S", "SIGNAL", "P50_MS", "P99_MS",
           "IN_USE_MEAN", "UTIL", "PEAK", "SAMPLES");
    for (int i = 0; i < count; i++) {
        const struct suggestion *s = &list[i];
        char suggested[16];
        snprintf(suggested, sizeof suggested, s->suggested >= 0 ? "%d" : "-", s->suggested);
        printf("%-24s %6d %9s %10.1f %9.1f %10s %9.1f %9.1f %11.2f %4.0f%% %5" PRId64
               " %7" PRIu64 "\n", s->view.name, s->view.limit, suggested,
               s->window.arrival_rate, s->window.refused_rate,
               s->by_turnaround ? "turnaround" : "hold", s->p50_ms, s->p99_ms,
               s->window.in_use_mean, s->window.utilization * 100, s->view.peak,
               s->samples);
    }
    for (int i = 0; i < count; i++)
        printf("%s%s: %s\n", i ? "" : "\n", list[i].view.name, list[i].verdict);
}

/* ---- --apply ---- */

/* Sets each suggestion that changes something, as `set` does, and prints
 * the rules.ini lines that keep them. Fleet compartments are the agent's
 * to size; a limit never goes below the compartment's reserves. */
static int apply(struct bh_namespace *ns, const char *namespace_name,
                 struct suggestion *list, int count, FILE *out)
{
    int status = CLI_OK, changed = 0;
    for (int i = 0; i < count; i++) {
        struct suggestion *s = &list[i];
        if (s->suggested < 0 || s->suggested == s->view.limit)
            continue;
        if (s->view.fleet.limit > 0) {
            fprintf(out, "%s: left alone: a fleet compartment, its limit is the "
                    "agent's (bulkhead set --fleet)\n", s->view.name);
            continue;
        }
        if (s->suggested < s->view.reserved) {
            fprintf(out, "%s: %d raised to %d, its reserves together\n", s->view.name,
                    s->suggested, s->view.reserved);
            s->suggested = s->view.reserved;
        }
        if (cli_change_limit(ns, namespace_name, s->view.name, s->suggested, out) != CLI_OK)
            status = CLI_FAILED;
        else
            changed++;
    }
    if (!changed) {
        fprintf(out, "nothing to change\n");
        return status;
    }
    fprintf(out, "\nto keep them, in rules.ini:\n");
    for (int i = 0; i < count; i++)
        if (list[i].suggested >= 0 && list[i].suggested != list[i].view.limit &&
            list[i].view.fleet.limit == 0)
            fprintf(out, "[%s]\nlimit = %d\n", list[i].view.name, list[i].suggested);
    return status;
}

/* ---- the command ---- */

static int parse_options(int argc, char **argv, struct suggest_options *o)
{
    static const struct option options[] = {
        CLI_TARGET_OPTIONS,
        { "window", required_argument, NULL, 'w' },
        { "safety", required_argument, NULL, 's' },
        { "json", no_argument, NULL, 'j' },
        { "apply", no_argument, NULL, 'a' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int option;
    char *end;
    opterr = 0;
    while ((option = getopt_long(argc, argv, ":" CLI_TARGET_SHORT "h", options, NULL)) != -1) {
        errno = 0;
        if (cli_target_option(&o->target, option, optarg))
            continue;
        if (option == 'j' || option == 'a')
            *(option == 'j' ? &o->json : &o->apply) = 1;
        else if (option == 'w') {
            long seconds = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || seconds < 1 || seconds > BH_WINDOW_SECONDS)
                return cli_usage_error(&cli_suggest_command, "--window \"%s\": not a "
                                       "whole number of seconds from 1 to %d", optarg,
                                       BH_WINDOW_SECONDS);
            o->window_s = (int)seconds;
        } else if (option == 's') {
            o->safety = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o->safety >= 1 && o->safety <= 10))
                return cli_usage_error(&cli_suggest_command, "--safety \"%s\": not a "
                                       "number from 1 to 10", optarg);
        } else
            return cli_option_problem(&cli_suggest_command, option, argv);
    }
    if (optind < argc)
        return cli_usage_error(&cli_suggest_command, "unexpected \"%s\"", argv[optind]);
    if (cli_target_usage(&cli_suggest_command, &o->target) != CLI_OK)
        return CLI_USAGE;
    int status = cli_target_user(&cli_suggest_command, &o->target, 0);
    return status == CLI_OK ? -1 : status;
}

static int suggest_command(int argc, char **argv)
{
    struct suggest_options o = { .window_s = BH_WINDOW_SECONDS, .safety = CLI_SAFETY };
    int parsed = parse_options(argc, argv, &o);
    if (parsed >= 0)
        return parsed;
    struct bh_namespace ns;
    char name[BH_NAME_MAX];
    int opened = cli_target_open(&o.target, &ns, name);
    if (opened != 0) {
        if (opened == 1)
            cli_error("suggest: namespace \"%s\"%s has no shared state yet: nothing "
                      "has run in it", name, cli_target_owner(&o.target));
        return CLI_FAILED;
    }
    uint32_t count = bh_compartment_count(&ns);
    struct suggestion *list = calloc(count ? count : 1, sizeof *list);
    int status = list ? CLI_OK : CLI_FAILED;
    for (uint32_t i = 0; list && i < count; i++) {
        if (bh_compartment_read(&ns, (int)i, &list[i].view) < 0) {
            cli_error("suggest: namespace \"%s\": %s", name, strerror(errno));
            status = CLI_FAILED;
            break;
        }
        suggest_one(&ns, (int)i, &o, &list[i]);
    }
    /* What was measured first, then what --apply changed below it, so that
     * the table's LIMIT is the limit the suggestion was made against. With
     * --json the changes go to stderr: the document stays one. */
    if (list && o.json)
        print_json(list, (int)count, o.window_s);
    else if (list)
        print_table(list, (int)count, name, o.window_s);
    if (status == CLI_OK && o.apply) {
        if (!o.json)
            putchar('\n');
        status = apply(&ns, name, list, (int)count, o.json ? stderr : stdout);
    }
    if (!list)
        cli_error("suggest: out of memory");
    free(list);
    bh_namespace_close(&ns);
    return status;
}

const struct cli_command cli_suggest_command = {
    .name = "suggest",
    .synopsis = "bulkhead suggest [-c rules.ini | -n NAMESPACE] [-u USER] "
                "[--window SECONDS] [--safety X] [--json] [--apply]",
    .help =
        "Says what limit each compartment's traffic needs, from the figures every\n"
        "process keeps over the last minute: ARRIVALS/S (connects asking for a\n"
        "permit) and REFUSED/S (refused at once or after waiting), the SIGNAL that\n"
        "sizes it and its P50_MS and P99_MS (hold: permit taken to given back;\n"
        "turnaround: from a send to its answer, used when connections\n"
        "carry many requests each and the compartment says turnaround = yes),\n"
        "IN_USE_MEAN and UTIL (mean permits in use, and that over the limit;\n"
        "connections count once they end), PEAK, SAMPLES (requests timed) and\n"
        "SUGGESTED = ceil(rate x p99 x safety), then a verdict per compartment.\n"
        "With fewer than 20 requests it says there is too little traffic and\n"
        "suggests nothing. The window is --window seconds (default 60, at most\n"
        "60), or since the compartment's first traffic in it if that is shorter.\n"
        "\n"
        CLI_TARGET_HELP
        "      --window SECONDS  the window, 1 to 60 (default 60)\n"
        "      --safety X        the factor over rate x p99, 1 to 10 (default 1.5)\n"
        "      --json            {\"window_s\", \"compartments\": [{\"name\", \"limit\",\n"
        "                        \"suggested_limit\" (null: none), \"utilization\",\n"
        "                        \"arrival_rate\", \"refused_rate\", \"hold_p50_ms\",\n"
        "                        \"hold_p99_ms\" (the signal's: turnaround when\n"
        "                        \"signal\" says so), \"in_use_mean\", \"samples\",\n"
        "                        \"verdict\", \"signal\", \"request_rate\",\n"
        "                        \"window_s\", \"in_use\", \"peak\"}]}\n"
        "      --apply           set each suggestion live, as bulkhead set does\n"
        "                        (never for too little traffic, nor a fleet\n"
        "                        compartment), and print the rules.ini lines that\n"
        "                        keep them (with --json, on stderr)\n",
    .run = suggest_command,
};
