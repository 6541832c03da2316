/* bulkhead set, apply and reset: change the live state every process of a
 * namespace shares. Limits change through bh_compartment_set_limit, which
 * never blocks and never cuts a connection. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <unistd.h>

#include "adaptive/adaptive.h"
#include "breaker/breaker.h"
#include "cli.h"
#include "permits/destinations.h"

/* Parses the options of set, apply and reset (-c, -n, -u, --force for
 * reset, --fleet for set, --help). `flag` is where --force or --fleet goes
 * (NULL: the command has neither). Returns -1 when parsing went on to the
 * end, else the status to exit with. */
static int parse_control_options(const struct cli_command *command, int argc,
                                 char **argv, struct cli_target *target,
                                 int *flag)
{
    static const struct option options[] = {
        CLI_TARGET_OPTIONS,
        { "force", no_argument, NULL, 'f' },
        { "fleet", no_argument, NULL, 'F' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int flag_option = command == &cli_reset_command ? 'f' : 'F';
    const char *short_options = command == &cli_reset_command ? ":" CLI_TARGET_SHORT "fh"
                                                              : ":" CLI_TARGET_SHORT "h";
    int option;
    opterr = 0;
    while ((option = getopt_long(argc, argv, short_options, options, NULL)) != -1) {
        if (cli_target_option(target, option, optarg))
            continue;
        if (flag && option == flag_option)
            *flag = 1;
        else
            return cli_option_problem(command, option == 'f' || option == 'F' ? '?'
                                                                              : option,
                                      argv);
    }
    int status = cli_target_user(command, target, 0);
    return status == CLI_OK ? -1 : status;
}

/* Attaches to the target's namespace; reports a missing one as an error. */
static int open_existing(const struct cli_target *target, struct bh_namespace *ns,
                         char name[BH_NAME_MAX])
{
    int opened = cli_target_open(target, ns, name);
    if (opened == 1)
        cli_error("namespace \"%s\"%s has no shared state yet: nothing has run "
                  "in it", name, cli_target_owner(target));
    return opened == 0 ? 0 : -1;
}

static void list_registered(const struct bh_namespace *ns, char *text, size_t textlen)
{
    uint32_t count = bh_compartment_count(ns);
    size_t used = 0;
    snprintf(text, textlen, "none");
    for (uint32_t i = 0; i < count && used < textlen; i++)
        used += (size_t)snprintf(text + used, textlen - used, "%s%s",
                                 i ? ", " : "", bh_compartment_name(ns, (int)i));
}

/* The index of compartment `name`, or -1 once reported. */
static int find_compartment(const struct bh_namespace *ns, const char *namespace_name,
                            const char *name)
{
    int index = bh_compartment_find(ns, name);
    if (index < 0) {
        char registered[BH_MAX_COMPARTMENTS * BH_NAME_MAX];
        list_registered(ns, registered, sizeof registered);
        cli_error("no compartment \"%s\" in namespace \"%s\" (registered: %s)",
                  name, namespace_name, registered);
    }
    return index;
}

/* One setting: "limit=N" with N a whole number of permits,
 * "breaker=open" / "breaker=closed", "reserve.WHO=N" (WHO as written in
 * rules.ini, itself holding '='s: the number is after the last one), or
 * "adaptive=off|gradient|aimd", or "mode=enforce|shadow". */
struct setting {
    enum { SET_LIMIT, SET_BREAKER, SET_RESERVE, SET_ADAPTIVE, SET_MODE } what;
    int value;  /* the limit or the reserve; for the breaker, 1 open, 0
                   closed; for adaptive, an enum bh_adaptive_mode; for
                   mode, an enum bh_mode */
    char who[BH_WHO_MAX];
};

enum { SETTING_BAD = -1, SETTING_OUT_OF_RANGE = -2 };

struct range { int least, most; };

/* A whole number in range: 0, SETTING_BAD when it is not one, or
 * SETTING_OUT_OF_RANGE when it is, but outside (whatever its length). */
static int parse_whole(const char *text, struct range range, int *value)
{
    if (*text < '0' || *text > '9')
        return SETTING_BAD;
    char *end;
    errno = 0;
    long number = strtol(text, &end, 10);
    if (*end)
        return SETTING_BAD;
    if (errno == ERANGE || number < range.least || number > range.most)
        return SETTING_OUT_OF_RANGE;
    *value = (int)number;
    return 0;
}

/* 0, or SETTING_BAD / SETTING_OUT_OF_RANGE; range is a limit's (a reserve
 * may be 0 to its most). */
static int parse_setting(const char *text, struct range range, struct setting *setting)
{
    memset(setting, 0, sizeof *setting);
    if (strcmp(text, "breaker=open") == 0 || strcmp(text, "breaker=closed") == 0) {
        *setting = (struct setting){ SET_BREAKER, text[8] == 'o', "" };
        return 0;
    }
    if (strncmp(text, "limit=", 6) == 0) {
        setting->what = SET_LIMIT;
        return parse_whole(text + 6, range, &setting->value);
    }
    enum bh_mode shadow;
    if (strncmp(text, "mode=", 5) == 0) {
        setting->what = SET_MODE;
        if (bh_mode_parse(text + 5, &shadow) < 0)
            return SETTING_BAD;
        setting->value = (int)shadow;
        return 0;
    }
    enum bh_adaptive_mode mode;
    if (strncmp(text, "adaptive=", 9) == 0) {
        setting->what = SET_ADAPTIVE;
        if (bh_adaptive_mode_parse(text + 9, &mode) < 0)
            return SETTING_BAD;
        setting->value = (int)mode;
        return 0;
    }
    const char *equals = strrchr(text, '=');
    size_t who_length = equals ? (size_t)(equals - text) - 8 : 0;
    if (strncmp(text, "reserve.", 8) != 0 || !equals || equals < text + 8 ||
        who_length == 0 || who_length >= BH_WHO_MAX)
        return SETTING_BAD;
    setting->what = SET_RESERVE;
    memcpy(setting->who, text + 8, who_length);
    return parse_whole(equals + 1, (struct range){ 0, range.most }, &setting->value);
}

/* What a setting parse_setting refused should have been, by its key. */
static const char *setting_expected(const char *text)
{
    if (strncmp(text, "breaker=", 8) == 0)
        return "expected breaker=open or breaker=closed";
    if (strncmp(text, "limit=", 6) == 0)
        return "expected limit=N, N a whole number";
    if (strncmp(text, "reserve.", 8) == 0)
        return "expected reserve.WHO=N, WHO as in rules.ini, N a whole number";
    if (strncmp(text, "adaptive=", 9) == 0)
        return "expected adaptive=off, adaptive=gradient or adaptive=aimd";
    if (strncmp(text, "mode=", 5) == 0)
        return "expected mode=enforce or mode=shadow";
    return "expected limit=N, reserve.WHO=N (N a whole number), "
           "breaker=open|closed, adaptive=off|gradient|aimd, or mode=enforce|shadow";
}

static int change_reserve(struct bh_namespace *ns, const char *namespace_name,
                          const char *name, const struct setting *setting)
{
    int index = find_compartment(ns, namespace_name, name);
    if (index < 0)
        return CLI_FAILED;
    int reserve = bh_reserve_find(ns, index, setting->who);
    if (reserve < 0) {
        cli_error("set: %s has no reserve for %s (reserves come from rules.ini)",
                  name, setting->who);
        return CLI_FAILED;
    }
    struct bh_compartment_view view;
    struct bh_reserve_view before, after;
    if (bh_compartment_read(ns, index, &view) < 0 ||
        bh_reserve_read(ns, index, reserve, &before) < 0) {
        cli_error("set: %s: %s", name, strerror(errno));
        return CLI_FAILED;
    }
    if (bh_reserve_set(ns, index, reserve, setting->value) < 0) {
        if (errno == ERANGE)
            cli_error("set: %s: reserve for %s = %d: the reserves would add up to "
                      "%d, more than limit %d", name, setting->who, setting->value,
                      view.reserved - before.permits + setting->value, view.limit);
        else
            cli_error("set: %s: reserve for %s: %s", name, setting->who,
                      strerror(errno));
        return CLI_FAILED;
    }
    if (bh_reserve_read(ns, index, reserve, &after) < 0) {
        cli_error("set: %s: %s", name, strerror(errno));
        return CLI_FAILED;
    }
    printf("%s: reserve for %s %d -> %d, %d in use; common pool %d\n", name,
           setting->who, before.permits, after.permits, after.in_use,
           view.limit - (view.reserved - before.permits + after.permits));
    if (after.in_use > after.permits)
        printf("%s: no connection is cut; the reserve shrinks as they end\n", name);
    return CLI_OK;
}

/* "closed", "open", "half-open", or "open (forced)" for set's line. */
static const char *breaker_words(const struct bh_breaker_view *breaker)
{
    return breaker->forced ? "open (forced)" : bh_breaker_state_name(breaker->state);
}

static int change_breaker(struct bh_namespace *ns, const char *namespace_name,
                          const char *name, int open)
{
    int index = find_compartment(ns, namespace_name, name);
    if (index < 0)
        return CLI_FAILED;
    struct bh_breaker_view before, after;
    bh_breaker_read(bh_breaker_fields(ns, index), &before);
    bh_breaker_force(bh_breaker_fields(ns, index), open);
    bh_breaker_read(bh_breaker_fields(ns, index), &after);
    printf("%s: breaker %s -> %s%s\n", name, breaker_words(&before),
           breaker_words(&after),
           open ? ": every matched connect is refused until breaker=closed"
                : ", failures cleared");
    return CLI_OK;
}

static int change_adaptive(struct bh_namespace *ns, const char *namespace_name,
                           const char *name, enum bh_adaptive_mode mode)
{
    int index = find_compartment(ns, namespace_name, name);
    if (index < 0)
        return CLI_FAILED;
    struct bh_adaptive_view before;
    bh_adaptive_read(ns, index, &before);
    bh_adaptive_set_mode(ns, index, mode);
    int limit = bh_compartment_limit(ns, index);
    if (mode == BH_ADAPTIVE_OFF)
        printf("%s: adaptive %s -> off: the limit stays at %d\n", name,
               bh_adaptive_mode_name(before.mode), limit);
    else
        printf("%s: adaptive %s -> %s, from limit %d (min_limit %d, max_limit %d)\n",
               name, bh_adaptive_mode_name(before.mode), bh_adaptive_mode_name(mode),
               limit, before.min_limit, before.max_limit);
    return CLI_OK;
}

static int change_mode(struct bh_namespace *ns, const char *namespace_name,
                       const char *name, enum bh_mode mode, FILE *out)
{
    int index = find_compartment(ns, namespace_name, name);
    if (index < 0)
        return CLI_FAILED;
    int was = bh_compartment_shadow(ns, index);
    struct bh_compartment_view after;
    if (bh_compartment_set_shadow(ns, index, mode == BH_MODE_SHADOW) < 0 ||
        bh_compartment_read(ns, index, &after) < 0) {
        cli_error("set: %s: mode %s: %s", name, bh_mode_name(mode), strerror(errno));
        return CLI_FAILED;
    }
    fprintf(out, "%s: mode %s -> %s, limit %d, %d in use\n", name,
            bh_mode_name(was ? BH_MODE_SHADOW : BH_MODE_ENFORCE), bh_mode_name(mode),
            after.limit, after.in_use);
    if (mode == BH_MODE_ENFORCE && after.in_use >= after.limit && after.in_use > 0)
        fprintf(out, "%s: no connection is cut; new ones wait or are refused until "
                "fewer than %d are in use\n", name, after.limit);
    return CLI_OK;
}

/* set --fleet: the fleet limit lives in Redis; the agent program sets it. */
static int change_fleet_limit(const struct cli_target *target, const char *name,
                              const struct setting *setting)
{
    if (setting->what != SET_LIMIT)
        return cli_usage_error(&cli_set_command, "--fleet takes limit=N only");
    if (target->namespace_name)
        return cli_usage_error(&cli_set_command, "--fleet needs the rules file "
                               "(-c), which names the Redis");
    char number[16];
    snprintf(number, sizeof number, "%d", setting->value);
    char *argv[8] = { "bulkhead-agent", "set-limit" };
    int argc = 2;
    if (target->config_path) {
        argv[argc++] = "-c";
        argv[argc++] = (char *)target->config_path;
    }
    argv[argc++] = (char *)name;
    argv[argc++] = number;
    return cli_agent_run(argv);
}

int cli_change_limit(struct bh_namespace *ns, const char *namespace_name,
                     const char *name, int limit, FILE *out)
{
    int index = find_compartment(ns, namespace_name, name);
    if (index < 0)
        return CLI_FAILED;
    struct bh_compartment_view before, after;
    if (bh_compartment_read(ns, index, &before) < 0 ||
        bh_compartment_set_limit(ns, index, limit) < 0 ||
        bh_compartment_read(ns, index, &after) < 0) {
        if (errno == ERANGE && limit < before.reserved)
            cli_error("set: %s: limit %d: below its reserves, %d together (lower "
                      "them first with reserve.WHO=N)", name, limit, before.reserved);
        else
            cli_error("set: %s: limit %d: %s", name, limit, strerror(errno));
        return CLI_FAILED;
    }
    bh_adaptive_moved(ns, index, limit);  /* an adaptive one continues from N */
    fprintf(out, "%s: limit %d -> %d, %d in use\n", name, before.limit, after.limit,
            after.in_use);
    if (after.in_use > limit && limit == 0)
        fprintf(out, "%s: no connection is cut; new ones are refused\n", name);
    else if (after.in_use > limit && limit == 1)
        fprintf(out, "%s: no connection is cut; new ones wait or are refused until "
                "none is in use\n", name);
    else if (after.in_use > limit)
        fprintf(out, "%s: no connection is cut; new ones wait or are refused until "
                "fewer than %d are in use\n", name, limit);
    return CLI_OK;
}

static int set_command(int argc, char **argv)
{
    struct cli_target target = { 0 };
    int fleet = 0;
    int parsed = parse_control_options(&cli_set_command, argc, argv, &target, &fleet);
    if (parsed >= 0)
        return parsed;
    if (cli_target_usage(&cli_set_command, &target) != CLI_OK)
        return CLI_USAGE;
    struct setting setting;
    if (argc - optind != 2)
        return cli_usage_error(&cli_set_command, "give a compartment and limit=N, "
                               "reserve.WHO=N, breaker=open|closed, "
                               "adaptive=off|gradient|aimd or mode=enforce|shadow");
    /* as the rules file allows: a fleet limit of 0 would shut every host */
    struct range range = fleet ? (struct range){ 1, BH_FLEET_LIMIT_MAX }
                               : (struct range){ 0, BH_LIMIT_MAX };
    int setting_parsed = parse_setting(argv[optind + 1], range, &setting);
    if (setting_parsed == SETTING_OUT_OF_RANGE)
        return cli_usage_error(&cli_set_command, "\"%s\": out of range (%d to %d)",
                               argv[optind + 1], range.least, range.most);
    if (setting_parsed < 0)
        return cli_usage_error(&cli_set_command, "\"%s\": %s", argv[optind + 1],
                               setting_expected(argv[optind + 1]));
    if (fleet)
        return change_fleet_limit(&target, argv[optind], &setting);
    struct bh_namespace ns;
    char namespace_name[BH_NAME_MAX];
    if (open_existing(&target, &ns, namespace_name) < 0)
        return CLI_FAILED;
    int status = setting.what == SET_LIMIT
                     ? cli_change_limit(&ns, namespace_name, argv[optind], setting.value,
                                        stdout)
                 : setting.what == SET_RESERVE
                     ? change_reserve(&ns, namespace_name, argv[optind], &setting)
                 : setting.what == SET_ADAPTIVE
                     ? change_adaptive(&ns, namespace_name, argv[optind],
                                       (enum bh_adaptive_mode)setting.value)
                 : setting.what == SET_MODE
                     ? change_mode(&ns, namespace_name, argv[optind],
                                   (enum bh_mode)setting.value, stdout)
                     : change_breaker(&ns, namespace_name, argv[optind], setting.value);
    bh_namespace_close(&ns);
    return status;
}

const struct cli_command cli_set_command = {
    .name = "set",
    .synopsis = "bulkhead set [-c rules.ini | -n NAMESPACE] [-u USER] "
                "COMPARTMENT limit=N | reserve.WHO=N | breaker=open | breaker=closed\n"
                "       | adaptive=off | adaptive=gradient | adaptive=aimd\n"
                "       | mode=enforce | mode=shadow\n"
                "       bulkhead set --fleet [-c rules.ini] COMPARTMENT limit=N",
    .help =
        "Changes the live limit of a registered compartment for every process\n"
        "of the namespace at once; the live limit wins over any rules file, for\n"
        "running processes and for those started later. Raising it hands the\n"
        "new permits to waiters now. Lowering it never cuts a connection and\n"
        "never blocks: new connections wait or are refused until fewer than N\n"
        "are in use. The limit cannot go below the reserves together.\n"
        "\n"
        "reserve.WHO=N resizes the compartment's reserve for WHO, written as in\n"
        "rules.ini (reserve.program=billing-*=3); the common pool gets or gives\n"
        "the difference. Free permits move at once, held ones as they are given\n"
        "back: no connection is cut, and the limit holds throughout.\n"
        "\n"
        "breaker=open forces the compartment's circuit breaker open for every\n"
        "process: each matched connect is refused at once, until breaker=closed,\n"
        "which also clears the count of failures.\n"
        "\n"
        "adaptive=gradient or adaptive=aimd starts the compartment's controller\n"
        "from the live limit (between the min_limit and max_limit its rules\n"
        "gave); adaptive=off freezes the limit where it is. limit=N on an\n"
        "adaptive compartment moves the controller to N; it continues from\n"
        "there.\n"
        "\n"
        "mode=shadow lets every connect through and counts what enforce would\n"
        "have refused or made wait (stat's SHADOW_REF, SHADOW_WAIT); in use and\n"
        "peak count them all. mode=enforce acts again at once: no connection is\n"
        "cut, and new ones wait or are refused until fewer than the limit are\n"
        "in use.\n"
        "\n"
        "With --fleet, limit=N is the\n"
        "fleet-wide limit, kept in the Redis of the rules' fleet = (every host's\n"
        "agent uses it from its next refresh).\n"
        "\n"
        CLI_TARGET_HELP
        "\n"
        "Exit status: 0; 1 when the namespace has no state yet, has no such\n"
        "compartment or reserve, or the change does not fit the limit; 2 for a\n"
        "usage error.\n",
    .run = set_command,
};

/* The file's reserve sizes for reserves the namespace has (a reserve is
 * added or removed by starting afresh: reset). */
static int apply_reserves(struct bh_namespace *ns, int index,
                          const struct bh_compartment *compartment)
{
    for (int r = 0; r < compartment->reserve_count; r++) {
        const struct bh_reserve *wanted = &compartment->reserves[r];
        int reserve = bh_reserve_find(ns, index, wanted->who.text);
        struct bh_reserve_view live;
        if (reserve < 0) {
            printf("%s: reserve for %s is not in the namespace (reset to add "
                   "it)\n", compartment->name, wanted->who.text);
            continue;
        }
        if (bh_reserve_read(ns, index, reserve, &live) < 0 ||
            (live.permits != wanted->permits &&
             bh_reserve_set(ns, index, reserve, wanted->permits) < 0)) {
            cli_error("apply: %s: reserve for %s = %d: %s", compartment->name,
                      wanted->who.text, wanted->permits, strerror(errno));
            return CLI_FAILED;
        }
        if (live.permits != wanted->permits)
            printf("%s: reserve for %s %d -> %d\n", compartment->name,
                   wanted->who.text, live.permits, wanted->permits);
    }
    return CLI_OK;
}

/* The file's controller settings; a limit apply changed is where an
 * adaptive compartment's controller continues from. */
static void apply_adaptive(struct bh_namespace *ns, int index,
                           const struct bh_compartment *compartment, int moved)
{
    struct bh_adaptive_view live;
    bh_adaptive_read(ns, index, &live);
    bh_adaptive_configure(ns, index, compartment);
    if (moved)
        bh_adaptive_moved(ns, index, compartment->limit);
    if (live.mode != compartment->adaptive)
        printf("%s: adaptive %s -> %s\n", compartment->name,
               bh_adaptive_mode_name(live.mode), bh_adaptive_mode_name(compartment->adaptive));
}

/* The file's mode, when the live one is the other. */
static int apply_mode(struct bh_namespace *ns, int index,
                      const struct bh_compartment *compartment)
{
    int shadow = compartment->mode == BH_MODE_SHADOW;
    if (bh_compartment_shadow(ns, index) == shadow)
        return CLI_OK;
    if (bh_compartment_set_shadow(ns, index, shadow) < 0) {
        cli_error("apply: %s: mode %s: %s", compartment->name,
                  bh_mode_name((enum bh_mode)compartment->mode), strerror(errno));
        return CLI_FAILED;
    }
    printf("%s: mode %s -> %s\n", compartment->name,
           bh_mode_name(shadow ? BH_MODE_ENFORCE : BH_MODE_SHADOW),
           bh_mode_name((enum bh_mode)compartment->mode));
    return CLI_OK;
}

static int apply_compartment(struct bh_namespace *ns,
                             const struct bh_compartment *compartment)
{
    int existed = bh_compartment_find(ns, compartment->name) >= 0;
    if (compartment->fleet_limit > 0) {  /* its live limit is the agent's grant */
        int live = 0, index = bh_compartment_register(ns, compartment, 0, &live);
        if (index < 0) {
            cli_error("apply: %s: %s", compartment->name, strerror(errno));
            return CLI_FAILED;
        }
        apply_adaptive(ns, index, compartment, 0);
        printf("%s: fleet-wide, limit %d as granted (bulkhead agent sets it)\n",
               compartment->name, live);
        return apply_mode(ns, index, compartment);
    }
    int live, limit = compartment->limit;
    int index = bh_compartment_register(ns, compartment, limit, &live);
    /* Reserves must fit the limit at every step: they shrink before it
     * does and grow after it has. */
    if (index >= 0 && existed && limit < live &&
        apply_reserves(ns, index, compartment) != CLI_OK)
        return CLI_FAILED;
    if (index < 0 ||
        (live != limit && bh_compartment_set_limit(ns, index, limit) < 0)) {
        cli_error("apply: %s: limit %d: %s", compartment->name, limit,
                  strerror(errno));
        return CLI_FAILED;
    }
    apply_adaptive(ns, index, compartment, live != limit);
    if (!existed)
        printf("%s: registered, limit %d\n", compartment->name, limit);
    else if (live != limit)
        printf("%s: limit %d -> %d\n", compartment->name, live, limit);
    else
        printf("%s: limit %d, unchanged\n", compartment->name, limit);
    if (apply_mode(ns, index, compartment) != CLI_OK)
        return CLI_FAILED;
    return existed && limit >= live ? apply_reserves(ns, index, compartment) : CLI_OK;
}

static int in_config(const struct bh_config *config, const char *name)
{
    for (int i = 0; i < config->compartment_count; i++)
        if (strcmp(config->compartments[i].name, name) == 0)
            return 1;
    return 0;
}

/* Live compartments the file does not name keep their limit: say so. */
static void report_unlisted(const struct bh_namespace *ns,
                            const struct bh_config *config)
{
    uint32_t count = bh_compartment_count(ns);
    for (uint32_t i = 0; i < count; i++) {
        const char *name = bh_compartment_name(ns, (int)i);
        if (!in_config(config, name))
            printf("%s: not in %s, left at limit %d\n", name, config->path,
                   bh_compartment_limit(ns, (int)i));
    }
}

static int apply_config(const struct cli_target *target,
                        const struct bh_config *config, const char *namespace_name)
{
    struct bh_namespace ns;
    char why[256];
    if (cli_namespace_open(target, namespace_name, 1, &ns, why, sizeof why) < 0) {
        cli_error("apply: %s", why);
        return CLI_FAILED;
    }
    int status = CLI_OK;
    for (int i = 0; i < config->compartment_count; i++)
        if (apply_compartment(&ns, &config->compartments[i]) != CLI_OK)
            status = CLI_FAILED;
    report_unlisted(&ns, config);
    bh_namespace_close(&ns);
    return status;
}

static int apply_command(int argc, char **argv)
{
    struct cli_target target = { 0 };
    int parsed = parse_control_options(&cli_apply_command, argc, argv, &target, NULL);
    if (parsed >= 0)
        return parsed;
    if (optind < argc && target.config_path)
        return cli_usage_error(&cli_apply_command, "give the rules file once");
    if (optind < argc)
        target.config_path = argv[optind++];
    if (optind < argc)
        return cli_usage_error(&cli_apply_command, "one rules file at a time");
    char namespace_name[BH_NAME_MAX];
    if (target.namespace_name && cli_target_namespace(&target, namespace_name) < 0)
        return CLI_FAILED;
    struct bh_config config;
    int errors = cli_load_rules(target.config_path, &config);
    int status = CLI_FAILED;
    if (errors > 0)
        cli_error("apply: %s is not valid; nothing was changed", config.path);
    else if (errors == 0)
        status = apply_config(&target, &config, target.namespace_name ? namespace_name
                                                             : config.namespace_name);
    bh_config_free(&config);
    return status;
}

const struct cli_command cli_apply_command = {
    .name = "apply",
    .synopsis = "bulkhead apply [-n NAMESPACE] [-u USER] [[-c] rules.ini]",
    .help =
        "Pushes the limits of a rules file into the live state of its namespace\n"
        "(or of NAMESPACE): compartments not registered yet are registered with\n"
        "the file's limit, the others get it as with `bulkhead set`. Live\n"
        "compartments the file does not name are left as they are. Creates the\n"
        "namespace's shared state when nothing has run in it yet. The rules\n"
        "file defaults to the one the shim would load.\n"
        "\n"
        "The rules file may also be given as the argument, and -n pushes into\n"
        "another namespace than the file's; another user's is made as that\n"
        "user's when nothing has run in it yet.\n"
        "\n"
        CLI_TARGET_HELP
        "\n"
        "Exit status: 0; 1 when the file is not valid or a limit could not be\n"
        "set; 2 for a usage error.\n",
    .run = apply_command,
};

/* Appends "NAME: N permits held by PID(N),...; " for a busy compartment. */
static void describe_use(struct bh_namespace *ns, int index,
                         const struct bh_compartment_view *view,
                         char *text, size_t textlen)
{
    struct cli_holders all;
    int count = 0;
    char *holders = NULL;
    if (cli_holders_collect(ns, &all) == 0) {
        const struct cli_holder *first = cli_holders_of(&all, index, &count);
        holders = cli_format_holders(first, count, view->shared_permits);
    }
    size_t used = strlen(text);
    snprintf(text + used, textlen - used, "%s%s: %d permit%s held by %s, %d waiting",
             used ? "; " : "", view->name, view->in_use,
             view->in_use == 1 ? "" : "s", holders ? holders : "?", view->waiting);
    free(holders);
    cli_holders_free(&all);
}

/* Describes who holds or waits for permits; empty when nobody does. */
static int describe_users(struct bh_namespace *ns, char *text, size_t textlen)
{
    uint32_t count = bh_compartment_count(ns);
    text[0] = '\0';
    for (uint32_t i = 0; i < count; i++) {
        struct bh_compartment_view view;
        if (bh_compartment_read(ns, (int)i, &view) < 0) {
            cli_error("reset: %s", strerror(errno));
            return -1;
        }
        if (view.in_use > 0 || view.waiting > 0)
            describe_use(ns, (int)i, &view, text, textlen);
    }
    return 0;
}

/* " a semaphore set of 3 semaphores" / " a shared memory segment of N
 * bytes" for what uid created under key: what reset --force will remove. */
static void describe_key(key_t key, uid_t uid, char *text, size_t textlen)
{
    struct semid_ds sem_info;
    struct shmid_ds shm_info;
    int semid = semget(key, 0, 0), shmid = shmget(key, 0, 0);
    size_t used = 0;
    text[0] = '\0';
    if (semid >= 0 && semctl(semid, 0, IPC_STAT, &sem_info) == 0 &&
        sem_info.sem_perm.cuid == uid)
        used += (size_t)snprintf(text, textlen, "a semaphore set of %lu "
                                 "semaphore%s (mode %04o)",
                                 (unsigned long)sem_info.sem_nsems,
                                 sem_info.sem_nsems == 1 ? "" : "s",
                                 (unsigned)(sem_info.sem_perm.mode & 0777));
    if (used < textlen && shmid >= 0 && shmctl(shmid, IPC_STAT, &shm_info) == 0 &&
        shm_info.shm_perm.cuid == uid)
        snprintf(text + used, textlen - used, "%sa shared memory segment of "
                 "%zu bytes (mode %04o)", used ? " and " : "",
                 (size_t)shm_info.shm_segsz,
                 (unsigned)(shm_info.shm_perm.mode & 0777));
}

/* reset --force when the key holds objects the namespace cannot use:
 * removes whatever the target's user created under it, of any size. */
static int remove_unusable(const struct cli_target *target, const char *name,
                           const char *why)
{
    uid_t uid = target->user ? target->uid : geteuid();
    key_t key = bh_namespace_key(uid, name);
    char what[256];
    describe_key(key, uid, what, sizeof what);
    int removed = what[0] ? bh_namespace_remove_key(uid, name) : 0;
    if (removed <= 0) {
        cli_error("reset: %s; nothing there was made by uid %u, so --force "
                  "cannot remove it: ipcrm it as root or as its owner", why,
                  (unsigned)uid);
        return CLI_FAILED;
    }
    printf("namespace %s%s: key 0x%08x held %s, not a namespace's state; "
           "removed %d object%s\n", name, cli_target_owner(target),
           (unsigned)key, what, removed, removed == 1 ? "" : "s");
    return CLI_OK;
}

/* The destinations observe recorded (permits/destinations.h) go with
 * the namespace's state. */
static void remove_destinations(const struct cli_target *target, const char *name)
{
    bh_destinations_remove(target->user ? target->uid : geteuid(), name);
}

static int remove_namespace(const struct cli_target *target, int force)
{
    struct bh_namespace ns;
    char name[BH_NAME_MAX], why[256];
    if (cli_target_namespace(target, name) < 0)
        return CLI_FAILED;
    if (cli_namespace_open(target, name, 0, &ns, why, sizeof why) < 0) {
        if (errno == ENOENT) {
            printf("namespace %s%s: no shared state, nothing to reset\n", name,
                   cli_target_owner(target));
            return CLI_OK;
        }
        if ((errno == EEXIST || errno == EPERM) && force)
            return remove_unusable(target, name, why);
        cli_error("reset: %s%s", why, errno == EEXIST
                  ? "; reset --force removes it" : "");
        return CLI_FAILED;
    }
    static char users[65536];
    if (!force) {
        /* Removed only when unused, with no window for a new holder. */
        int unused = bh_namespace_remove_unused(&ns);
        if (unused == 0) {
            remove_destinations(target, name);
            printf("namespace %s%s: shared state removed\n", name,
                   cli_target_owner(target));
            return CLI_OK;
        }
        if (unused < 0 || describe_users(&ns, users, sizeof users) < 0) {
            if (unused < 0)
                cli_error("reset: namespace \"%s\": %s", name, strerror(errno));
            bh_namespace_close(&ns);
            return CLI_FAILED;
        }
        cli_error("reset: namespace \"%s\"%s is in use (%s); stop those "
                  "processes or use --force", name, cli_target_owner(target),
                  users[0] ? users : "its holders just left; try again");
        bh_namespace_close(&ns);
        return CLI_FAILED;
    }
    if (describe_users(&ns, users, sizeof users) < 0) {
        bh_namespace_close(&ns);
        return CLI_FAILED;
    }
    if (bh_namespace_remove(&ns) < 0) {
        cli_error("reset: namespace \"%s\": %s", name, strerror(errno));
        return CLI_FAILED;
    }
    remove_destinations(target, name);
    printf("namespace %s%s: shared state removed%s%s%s\n", name,
           cli_target_owner(target), users[0] ? " while in use (" : "", users,
           users[0] ? "); its running processes are no longer limited" : "");
    return CLI_OK;
}


static int reset_compartments(const struct cli_target *target, int count,
                              char **names)
{
    struct bh_namespace ns;
    char namespace_name[BH_NAME_MAX];
    if (open_existing(target, &ns, namespace_name) < 0)
        return CLI_FAILED;
    int indexes[BH_MAX_COMPARTMENTS], status = CLI_OK;
    for (int i = 0; i < count && i < BH_MAX_COMPARTMENTS; i++)
        if ((indexes[i] = find_compartment(&ns, namespace_name, names[i])) < 0)
            status = CLI_FAILED;
    for (int i = 0; status == CLI_OK && i < count; i++) {
        struct bh_compartment_view view;
        if (bh_compartment_read(&ns, indexes[i], &view) < 0) {
            cli_error("reset: %s: %s", names[i], strerror(errno));
            status = CLI_FAILED;
            break;
        }
        bh_compartment_reset_counters(&ns, indexes[i], view.in_use);
        printf("%s: counters reset; limit %d and %d permit%s in use untouched\n",
               names[i], view.limit, view.in_use, view.in_use == 1 ? "" : "s");
    }
    bh_namespace_close(&ns);
    return status;
}

static int reset_command(int argc, char **argv)
{
    struct cli_target target = { 0 };
    int force = 0;
    int parsed = parse_control_options(&cli_reset_command, argc, argv, &target, &force);
    if (parsed >= 0)
        return parsed;
    if (cli_target_usage(&cli_reset_command, &target) != CLI_OK)
        return CLI_USAGE;
    if (argc - optind > BH_MAX_COMPARTMENTS)
        return cli_usage_error(&cli_reset_command, "at most %d compartments",
                               BH_MAX_COMPARTMENTS);
    if (optind < argc)
        return reset_compartments(&target, argc - optind, argv + optind);
    return remove_namespace(&target, force);
}

const struct cli_command cli_reset_command = {
    .name = "reset",
    .synopsis = "bulkhead reset [-c rules.ini | -n NAMESPACE] [-u USER] [-f | --force] "
                "[COMPARTMENT...]",
    .help =
        "Without COMPARTMENT: removes the namespace's shared state (its one\n"
        "semaphore set and one shared memory segment), so that the next\n"
        "process starts it afresh from its rules file. It refuses, saying which\n"
        "pids hold how many permits, while any permit is held or any connect\n"
        "waits, unless --force is given; waiters then go through unlimited.\n"
        "Unforced, it first takes every free permit itself, so no process can\n"
        "take one between the check and the removal; when it refuses, those\n"
        "permits are put back and nothing has changed. --force also removes\n"
        "whatever the user made under the namespace's key that is not a\n"
        "namespace's state (another program's set, an older bulkhead's), and\n"
        "says what it removed.\n"
        "\n"
        "With COMPARTMENT names: the state cannot be removed one compartment at\n"
        "a time, so only their counters are zeroed (acquired, rejected,\n"
        "timed_out, waits and wait times; peak restarts from in_use). Permits,\n"
        "waiters and the live limit are left alone; --force changes nothing.\n"
        "\n"
        CLI_TARGET_HELP
        "  -f, --force           remove the state even while permits are held\n"
        "\n"
        "Exit status: 0, also when there was no state to remove; 1 when\n"
        "permits are held (without --force) or a COMPARTMENT is unknown;\n"
        "2 for a usage error.\n",
    .run = reset_command,
};
