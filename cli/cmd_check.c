/* bulkhead check and explain: what a rules file says, and where a given
 * destination falls under it, worked out by the shim's own code (config
 * parser, rule index, name notes). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "password_file.h"
#include "policy/who.h"
#include "rules/rule_index.h"

static const char *rule_kind_name(enum bh_rule_kind kind)
{
    switch (kind) {
    case BH_RULE_ADDRESS: return "address";
    case BH_RULE_HOSTNAME: return "hostname";
    case BH_RULE_HOST_SUFFIX: return "suffix";
    }
    return "?";
}

/* Only what is set: a compartment without them reads as before. The breaker
 * periods have defaults, shown with the breaker they belong to. */
static void print_deadlines(const struct bh_compartment *compartment)
{
    if (compartment->connect_timeout_ms)
        printf("  connect_timeout_ms %d\n", compartment->connect_timeout_ms);
    if (compartment->io_timeout_ms)
        printf("  io_timeout_ms %d\n", compartment->io_timeout_ms);
    if (!compartment->breaker_failures)
        return;
    printf("  breaker_failures %d\n", compartment->breaker_failures);
    printf("  breaker_open_ms %d\n", compartment->breaker_open_ms);
    printf("  breaker_open_max_ms %d\n", compartment->breaker_open_max_ms);
}

/* The controller, when there is one, in a line: "gradient from 8, 1..32"
 * and, for aimd, the latency it backs off at. */
static void describe_adaptive(const struct bh_compartment *c, char *text, size_t size)
{
    int used = snprintf(text, size, "adaptive %s: the limit starts at %d and moves "
                        "between min_limit %d and max_limit %d",
                        bh_adaptive_mode_name(c->adaptive), c->limit, c->min_limit,
                        c->max_limit);
    if (c->adaptive == BH_ADAPTIVE_AIMD && used > 0 && (size_t)used < size)
        snprintf(text + used, size - (size_t)used, c->adaptive_latency_ms
                 ? "; backs off on drops and on latency over %d ms"
                 : "; backs off on drops only (no adaptive_latency_ms)",
                 c->adaptive_latency_ms);
}

/* " (uid N)" after a user= WHO written as a name; empty otherwise. */
static const char *user_uid_note(const struct bh_who *who, char *text,
                                 size_t size)
{
    char digits[24];
    snprintf(digits, sizeof digits, "%u", (unsigned)who->uid);
    text[0] = '\0';
    if (who->kind == BH_WHO_USER && strcmp(who->text + strlen("user="), digits))
        snprintf(text, size, " (uid %s)", digits);
    return text;
}

/* per_process, the reserves with the common pool left beside them, and the
 * bypasses; only what is set. */
static void print_policy(const struct bh_compartment *compartment)
{
    char note[40];
    int reserved = 0;
    if (compartment->per_process)
        printf("  per_process  %d (one process holds at most %d)\n",
               compartment->per_process, compartment->per_process);
    for (int i = 0; i < compartment->reserve_count; i++) {
        const struct bh_reserve *reserve = &compartment->reserves[i];
        printf("  reserve      %d for %s%s\n", reserve->permits,
               reserve->who.text, user_uid_note(&reserve->who, note, sizeof note));
        reserved += reserve->permits;
    }
    if (compartment->reserve_count && compartment->limit > 0)
        printf("  common pool  %d (limit less every reserve)\n",
               compartment->limit - reserved);
    for (int i = 0; i < compartment->bypass_count; i++)
        printf("  bypass       %s%s\n", compartment->bypasses[i].text,
               user_uid_note(&compartment->bypasses[i], note, sizeof note));
}

/* How a wait is cut short: a process that holds. */
static void print_wait_bounds(const struct bh_compartment *compartment)
{
    if (compartment->hold_wait_ms == 0)
        printf("  hold_wait_ms 0 (a process already holding its permits is "
               "refused at once rather than wait for more)\n");
    else
        printf("  hold_wait_ms %d (the most a process already holding its "
               "permits waits for more)\n", compartment->hold_wait_ms);
}

/* The common pool: the limit less every reserve. */
static int common_pool(const struct bh_compartment *compartment)
{
    int common = compartment->limit;
    for (int i = 0; i < compartment->reserve_count; i++)
        common -= compartment->reserves[i].permits;
    return common;
}

/* A rule heavier than the common pool: only a reserve's members can ever
 * connect through it. Heavier than per_process: nobody can, since one
 * connection would already hold more than a process may. The file stays
 * valid (limit = 0 switches such rules off too), but each is said on stderr. */
static void warn_heavy_rules(const struct bh_config *config)
{
    for (int i = 0; i < config->rule_count; i++) {
        const struct bh_rule *rule = &config->rules[i];
        const struct bh_compartment *c = &config->compartments[rule->compartment];
        int common = common_pool(c);
        if (c->limit > 0 && c->per_process && rule->weight > c->per_process)
            fprintf(stderr, "bulkhead: %s:%d: warning: match: weight=%d exceeds "
                    "[%s]'s per_process = %d: every connect through it is "
                    "refused\n", config->path, rule->line, rule->weight, c->name,
                    c->per_process);
        else if (c->limit > 0 && rule->weight > common)
            fprintf(stderr, "bulkhead: %s:%d: warning: match: weight=%d exceeds "
                    "the %d permit%s of [%s]'s common pool: only its reserves' "
                    "members can connect through it\n", config->path, rule->line,
                    rule->weight, common, common == 1 ? "" : "s", c->name);
    }
}

/* Keys that mean nothing any more: the file is valid, each is said on
 * stderr so that it can be taken out. */
static void warn_retired_keys(const struct bh_config *config)
{
    for (int i = 0; i < config->retired_count; i++)
        fprintf(stderr, "bulkhead: %s:%d: warning: %s: retired, and ignored: "
                "non-blocking connects now wait wait_ms without stalling their "
                "program\n", config->path, config->retired[i].line,
                config->retired[i].key);
}

static void print_compartment(const struct bh_config *config, int index)
{
    const struct bh_compartment *compartment = &config->compartments[index];
    printf("\n[%s]  line %d\n", compartment->name, compartment->line);
    printf("  limit        %d%s\n", compartment->limit,
           compartment->limit == 0 ? " (refuses everything)" : "");
    if (compartment->mode == BH_MODE_SHADOW)
        printf("  mode         shadow (decides as enforce would, lets every connect "
               "through and counts what it would have refused or made wait)\n");
    printf("  wait_ms      %d%s\n", compartment->wait_ms,
           compartment->wait_ms == 0 ? " (fail fast)" : "");
    if (compartment->wait_ms > 0)
        print_wait_bounds(compartment);
    printf("  max_waiters  %d\n", compartment->max_waiters);
    printf("  errno        %s\n", bh_errno_name(compartment->refusal_errno));
    if (compartment->fleet_limit)
        printf("  fleet_limit  %d (fleet-wide; this host's share is granted by "
               "bulkhead agent, up to limit)\n", compartment->fleet_limit);
    print_deadlines(compartment);
    if (compartment->adaptive) {
        char adaptive[256];
        describe_adaptive(compartment, adaptive, sizeof adaptive);
        printf("  %s\n", adaptive);
    }
    if (bh_compartment_turnaround(compartment))
        printf("  turnaround   yes (counts each exchange and times one in %d from "
               "send to answer; suggest sizes keep-alive connections by it)\n",
               BH_TURNAROUND_EVERY);
    print_policy(compartment);
    const char *label = "match";
    for (int i = 0; i < config->rule_count; i++) {
        const struct bh_rule *rule = &config->rules[i];
        if (rule->compartment != index)
            continue;
        printf("  %-11s  line %-4d %-8s  %s", label, rule->line,
               rule_kind_name(rule->kind), rule->text);
        if (rule->weight != 1)
            printf("  weight %d", rule->weight);
        printf("\n");
        label = "";
    }
}

/* Name rules match otherwise under bulkhead run's supervisor, which sees
 * no lookup of a Go or static program (supervisor/names.c): said here,
 * where the rules are read, not found out when a host is refused. */
static void print_name_rules(const struct bh_config *config)
{
    int hostnames = 0, suffixes = 0;
    for (int i = 0; i < config->rule_count; i++) {
        hostnames += config->rules[i].kind == BH_RULE_HOSTNAME;
        suffixes += config->rules[i].kind == BH_RULE_HOST_SUFFIX;
    }
    if (hostnames)
        printf("names      a hostname rule matches the addresses a program's own "
               "lookup of the name gave; under bulkhead run's supervisor (a Go or "
               "static program), every address the name resolves to, whatever "
               "name the program used\n");
    if (suffixes)
        printf("%s suffix rules match no Go or static program under bulkhead "
               "run's supervisor\n", hostnames ? "          " : "names     ");
}

static void print_config(const struct bh_config *config)
{
    printf("%s: valid\n", config->path);
    printf("namespace  %s, on_failure %s\n", config->namespace_name,
           config->on_failure_open ? "open" : "closed");
    const char *syslog_socket = config->syslog_socket ? config->syslog_socket : "/dev/log";
    if (config->log_file && strcmp(config->log_file, "syslog") == 0)
        printf("log        %s, to syslog (%s)\n", bh_log_level_name(config->log_level),
               syslog_socket);
    else
        printf("log        %s, to %s (syslog, %s, once a daemon moves stderr)\n",
               bh_log_level_name(config->log_level),
               config->log_file ? config->log_file : "stderr", syslog_socket);
    printf("%d compartment%s, %d match rule%s; the first match in file order "
           "wins\n", config->compartment_count,
           config->compartment_count == 1 ? "" : "s", config->rule_count,
           config->rule_count == 1 ? "" : "s");
    print_name_rules(config);
    if (config->fleet_url) {
        /* The URL holds no password (the parser refuses one); the file's
         * name is shown, never what is in it. */
        printf("fleet      %s, as host %s in fleet %s\n", config->fleet_url,
               config->fleet_host, config->fleet_name);
        if (config->fleet_password_file)
            printf("           password in %s\n", config->fleet_password_file);
        if (config->fleet_sentinel_password_file)
            printf("           sentinels' password in %s\n",
                   config->fleet_sentinel_password_file);
        printf("           refresh %d ms, lease %d ms, fallback ", config->fleet_refresh_ms,
               config->fleet_lease_ms);
        if (config->fleet_fallback < 0)
            printf("split (fleet_limit / hosts last seen)");
        else
            printf("%d", config->fleet_fallback);
        printf(" for %d ms\n", config->fleet_fallback_ms);
    }
    for (int i = 0; i < config->compartment_count; i++)
        print_compartment(config, i);
}

/* The fleet's Redis, reached as the agent would (its program does it):
 * a bad address, no answer, a wrong password, sentinels that know no such
 * master are one line from it. The password files (Redis's and the
 * sentinels') are looked at here, never read: one that is missing, or that
 * others may read (the agent refuses it), is a line on its own line, and
 * Redis is then not tried. 0 when all is well. */
static int check_fleet(const struct bh_config *config)
{
    char why[4200];
    int problems = 0;
    for (int which = 0; which < BH_PASSWORD_FILES; which++)
        if (bh_password_file_problem(config, which, why, sizeof why) != 0) {
            cli_error("%s", why);
            problems++;
        }
    if (problems)
        return problems;
    char *argv[] = { "bulkhead-agent", "check", "-c", config->path, NULL };
    return cli_agent_run(argv) != 0;
}

/* The options of check: -c FILE and --help. Returns -1 when parsing went
 * on to the end, else the status to exit with. */
static int parse_config_option(const struct cli_command *command, int argc,
                               char **argv, const char **given)
{
    static const struct option options[] = {
        { "config", required_argument, NULL, 'c' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int option;
    opterr = 0;
    while ((option = getopt_long(argc, argv, ":c:h", options, NULL)) != -1) {
        if (option != 'c')
            return cli_option_problem(command, option, argv);
        *given = optarg;
    }
    return -1;
}

static int check(int argc, char **argv)
{
    const char *given = NULL;
    int parsed = parse_config_option(&cli_check_command, argc, argv, &given);
    if (parsed >= 0)
        return parsed;
    if (optind < argc && given)
        return cli_usage_error(&cli_check_command, "give the rules file once");
    if (optind < argc)
        given = argv[optind++];
    if (optind < argc)
        return cli_usage_error(&cli_check_command, "one rules file at a time");
    struct bh_config config;
    int errors = cli_load_rules(given, &config);
    if (errors == 0 && config.fleet_url)
        errors = check_fleet(&config);
    if (errors == 0) {
        warn_retired_keys(&config);
        warn_heavy_rules(&config);
        print_config(&config);
    }
    else if (errors > 0)
        cli_error("%s: %d error%s", config.path ? config.path : given, errors,
                  errors == 1 ? "" : "s");
    bh_config_free(&config);
    return errors == 0 ? CLI_OK : CLI_FAILED;
}

const struct cli_command cli_check_command = {
    .name = "check",
    .synopsis = "bulkhead check [-c] [rules.ini]",
    .help =
        "Validates a rules file (default: the one the shim would load) and\n"
        "prints the settings in effect: the namespace, the log level, and for\n"
        "each compartment its limit, mode (when shadow), wait_ms,\n"
        "hold_wait_ms, max_waiters, errno, deadlines and breaker\n"
        "(connect_timeout_ms, io_timeout_ms, breaker_failures and its periods,\n"
        "when set), fleet_limit, and match\n"
        "rules with their line numbers. With fleet = in [global], it prints the\n"
        "fleet settings (the URL, never a password), checks that\n"
        "fleet_password_file and fleet_sentinel_password_file exist and that\n"
        "others may not read them (they are not read; the agent refuses such a\n"
        "file, so Redis is then not tried), and reaches that Redis\n"
        "(with redis-sentinel://, the master its sentinels name) as bulkhead\n"
        "agent would, saying so in one line when it cannot.\n"
        "\n"
        "Exit status: 0 when the file is valid; 1 with every error on stderr,\n"
        "one line each (\"bulkhead: rules.ini:12: limit: ...\"), when not. A\n"
        "valid file may still draw a warning on stderr: a match weight above\n"
        "its common pool (only the reserves' members can connect through it)\n"
        "or above per_process (nobody can), and a retired key\n"
        "(wait_nonblocking, nonblocking_wait_ms: taken with any value, and\n"
        "ignored, since non-blocking connects now wait wait_ms without\n"
        "stalling their program).\n",
    .run = check,
};

/* HOST:PORT or [V6]:PORT; host points into `text`, which is cut. */
static const char *split_destination(char *text, unsigned *port)
{
    char *host = text, *colon;
    if (text[0] == '[') {
        char *close = strchr(text, ']');
        if (!close || close[1] != ':')
            return NULL;
        *close = '\0';
        host = text + 1;
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon || memchr(text, ':', (size_t)(colon - text)))
            return NULL;  /* a bare v6 address: its port is ambiguous */
        *colon = '\0';
    }
    char *end;
    unsigned long number = strtoul(colon + 1, &end, 10);
    if (*host == '\0' || colon[1] < '0' || colon[1] > '9' || *end ||
        number > 65535)
        return NULL;
    *port = (unsigned)number;
    return host;
}

static const void *address_bytes(const struct addrinfo *address)
{
    if (address->ai_family == AF_INET)
        return &((const struct sockaddr_in *)address->ai_addr)->sin_addr;
    return &((const struct sockaddr_in6 *)address->ai_addr)->sin6_addr;
}

/* The address --resolve NAME=ADDRESS gives host, or NULL. */
static const char *resolved_as(char *const *overrides, const char *host)
{
    size_t length = strlen(host);
    for (; overrides && *overrides; overrides++)
        if (strncasecmp(*overrides, host, length) == 0 && (*overrides)[length] == '=')
            return *overrides + length + 1;
    return NULL;
}

/* Lists the addresses a program connecting to host would reach: the literal
 * itself, or what --resolve or getaddrinfo gives, noted as the shim's
 * resolver hooks do. */
static int resolve(struct bh_rule_index *index, const char *host, unsigned port,
                   char *const *overrides, struct addrinfo **addresses)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICHOST };
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    if (getaddrinfo(host, service, &hints, addresses) == 0)
        return 0;
    const char *given = resolved_as(overrides, host);
    hints.ai_flags = given ? AI_NUMERICHOST : 0;
    int failure = getaddrinfo(given ? given : host, service, &hints, addresses);
    if (failure) {
        cli_error("explain: %s: %s", host, gai_strerror(failure));
        return -1;
    }
    if (!bh_rule_index_wants_name(index, host))
        return 1;
    for (const struct addrinfo *a = *addresses; a; a = a->ai_next)
        bh_rule_index_note_name(index, host, a->ai_family, address_bytes(a));
    return 1;
}

/* "connect_timeout_ms 1000, io_timeout_ms 500, breaker: 3 failures, open
 * 5000..60000 ms", of what is set; empty when nothing is. */
static void describe_deadlines(const struct bh_compartment *c, char *text,
                               size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    if (c->connect_timeout_ms)
        used += snprintf(text + used, size - used, "connect_timeout_ms %d",
                         c->connect_timeout_ms);
    if (c->io_timeout_ms && used < size)
        used += snprintf(text + used, size - used, "%sio_timeout_ms %d",
                         used ? ", " : "", c->io_timeout_ms);
    if (c->breaker_failures && used < size)
        snprintf(text + used, size - used,
                 "%sbreaker: %d failure%s, open %d..%d ms", used ? ", " : "",
                 c->breaker_failures, c->breaker_failures == 1 ? "" : "s",
                 c->breaker_open_ms, c->breaker_open_max_ms);
}

/* Whether a reserve's or bypass's WHO takes in the identity asked about,
 * and what about it decided. */
static void describe_who(const struct bh_who *who,
                         const struct bh_identity *identity, char *text,
                         size_t size)
{
    int matches = bh_who_matches(who, identity);
    const char *verdict = matches ? "applies" : "does not apply";
    switch (who->kind) {
    case BH_WHO_PROGRAM:
        if (identity->executed && bh_who_program_matched(who, identity) ==
                                      identity->executed)
            snprintf(text, size, "%s (program %s, the script %s runs)", verdict,
                     identity->executed, identity->program);
        else if (identity->executed)
            snprintf(text, size, "%s (program %s, running the script %s)", verdict,
                     identity->program, identity->executed);
        else if (identity->program)
            snprintf(text, size, "%s (program %s)", verdict, identity->program);
        else
            snprintf(text, size, "applies if the program's name matches %s",
                     who->text + strlen("program="));
        return;
    case BH_WHO_USER:
        snprintf(text, size, "%s (uid %u)", verdict, (unsigned)identity->uid);
        return;
    case BH_WHO_ENV:
        snprintf(text, size, "%s (%s %s in the environment)", verdict,
                 who->text + strlen("env="), matches ? "is" : "is not");
        return;
    }
    snprintf(text, size, "%s", verdict);
}

/* The rule's weight and the compartment's policy, as they fall on the
 * identity asked about; only what is set. */
static void explain_policy(const struct bh_rule *rule,
                           const struct bh_compartment *compartment,
                           const struct bh_identity *identity)
{
    char verdict[256];
    if (rule->weight != 1)
        printf("  weight %d: a connection through this rule takes %d permits\n",
               rule->weight, rule->weight);
    if (rule->weight > common_pool(compartment) && compartment->limit > 0)
        printf("  weight %d exceeds the %d permits of the common pool: only "
               "a reserve's members can connect through it\n", rule->weight,
               common_pool(compartment));
    if (compartment->per_process)
        printf("  per_process %d: one process holds at most %d of its permits\n",
               compartment->per_process, compartment->per_process);
    for (int i = 0; i < compartment->reserve_count; i++) {
        const struct bh_reserve *reserve = &compartment->reserves[i];
        describe_who(&reserve->who, identity, verdict, sizeof verdict);
        printf("  reserve %d for %s: %s\n", reserve->permits, reserve->who.text,
               verdict);
    }
    for (int i = 0; i < compartment->bypass_count; i++) {
        const struct bh_who *who = &compartment->bypasses[i];
        describe_who(who, identity, verdict, sizeof verdict);
        printf("  bypass %s: %s%s\n", who->text, verdict,
               bh_who_matches(who, identity)
               ? ": this compartment does not limit the connection" : "");
    }
}

/* How long a connect waits when the compartment is full, in plain words. */
static void explain_waits(const struct bh_compartment *c)
{
    printf("  when full: a connect waits up to %d ms (a non-blocking one "
           "without stalling its program: connect() says EINPROGRESS)\n", c->wait_ms);
    if (c->hold_wait_ms == 0)
        printf("  a process already holding some of its permits is refused at "
               "once rather than wait for more: waiting while holding can "
               "deadlock (hold_wait_ms 0)\n");
    else
        printf("  a process already holding some of its permits waits at most "
               "%d ms for more (hold_wait_ms)\n", c->hold_wait_ms);
}

static void print_verdict(const struct bh_config *config, int rule,
                          const struct bh_identity *identity)
{
    if (rule < 0) {
        printf("not limited\n");
        return;
    }
    const struct bh_rule *matched = &config->rules[rule];
    const struct bh_compartment *compartment =
        &config->compartments[matched->compartment];
    printf("compartment %s (line %d: match = %s)\n", compartment->name,
           matched->line, matched->text);
    if (compartment->fleet_limit)
        printf("  fleet-wide: fleet_limit %d (this host's share is granted by "
               "bulkhead agent)\n", compartment->fleet_limit);
    char deadlines[256];
    describe_deadlines(compartment, deadlines, sizeof deadlines);
    if (deadlines[0])
        printf("  %s\n", deadlines);
    if (compartment->adaptive) {
        char adaptive[256];
        describe_adaptive(compartment, adaptive, sizeof adaptive);
        printf("  %s (the live limit: bulkhead stat)\n", adaptive);
    }
    explain_policy(matched, compartment, identity);
    if (compartment->wait_ms > 0)
        explain_waits(compartment);
}

/* The index bulkhead run's supervisor matches a Go or static program's
 * connects by: every hostname rule's name resolved here (supervisor/names.c
 * does the same), not what the program looked up. NULL when out of memory. */
static struct bh_rule_index *supervisor_index(const struct bh_config *config,
                                              char *const *overrides)
{
    struct bh_rule_index *index = bh_rule_index_build(config);
    for (int i = 0; index && i < config->rule_count; i++) {
        const char *name = config->rules[i].hostname;
        if (config->rules[i].kind != BH_RULE_HOSTNAME)
            continue;
        const char *given = resolved_as(overrides, name);
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                  .ai_flags = given ? AI_NUMERICHOST : 0 };
        struct addrinfo *found;
        if (getaddrinfo(given ? given : name, NULL, &hints, &found) != 0)
            continue;  /* the supervisor skips it too */
        for (const struct addrinfo *a = found; a; a = a->ai_next)
            bh_rule_index_note_name(index, name, a->ai_family, address_bytes(a));
        freeaddrinfo(found);
    }
    return index;
}

/* Where the supervisor's answer differs from the shim's: a name sharing an
 * address with a hostname rule's name, a literal address, a suffix rule. */
static void print_supervised_verdict(const struct bh_config *config, int rule)
{
    printf("  under bulkhead run's supervisor (a Go or static program): ");
    if (rule < 0) {
        printf("not limited (suffix rules match nothing there)\n");
        return;
    }
    const struct bh_rule *matched = &config->rules[rule];
    printf("compartment %s (line %d: match = %s): hostname rules match by "
           "address there, whatever name the program looked up\n",
           config->compartments[matched->compartment].name, matched->line,
           matched->text);
}

static void print_verdicts(const struct bh_config *config,
                           const struct bh_rule_index *index,
                           const struct bh_rule_index *supervised,
                           const struct bh_identity *identity,
                           const char *destination, int resolved,
                           const struct addrinfo *addresses)
{
    for (const struct addrinfo *a = addresses; a; a = a->ai_next) {
        char shown[INET6_ADDRSTRLEN];
        inet_ntop(a->ai_family, address_bytes(a), shown, sizeof shown);
        if (resolved)
            printf("%s = %s -> ", destination, shown);
        else
            printf("%s -> ", destination);
        int rule = bh_rule_index_match(index, a->ai_addr, a->ai_addrlen);
        int supervised_rule = bh_rule_index_match(supervised, a->ai_addr, a->ai_addrlen);
        print_verdict(config, rule, identity);
        if (supervised_rule != rule)
            print_supervised_verdict(config, supervised_rule);
    }
}

/* Each destination gets an index of its own: names noted while explaining
 * one must not make a later literal address match a hostname rule, as if
 * this process had resolved them for it. */
static int explain_one(const struct bh_config *config,
                       const struct bh_identity *identity,
                       char *const *overrides, const char *destination)
{
    char text[512];
    unsigned port;
    snprintf(text, sizeof text, "%s", destination);
    const char *host = split_destination(text, &port);
    if (!host) {
        cli_error("explain: \"%s\": not HOST:PORT or [V6]:PORT", destination);
        return CLI_USAGE;
    }
    struct bh_rule_index *index = bh_rule_index_build(config);
    struct bh_rule_index *supervised = supervisor_index(config, overrides);
    if (!index || !supervised) {
        cli_error("explain: out of memory");
        bh_rule_index_free(index);
        bh_rule_index_free(supervised);
        return CLI_FAILED;
    }
    struct addrinfo *addresses;
    int resolved = resolve(index, host, port, overrides, &addresses);
    if (resolved >= 0) {
        print_verdicts(config, index, supervised, identity, destination, resolved,
                       addresses);
        freeaddrinfo(addresses);
    }
    bh_rule_index_free(index);
    bh_rule_index_free(supervised);
    return resolved < 0 ? CLI_FAILED : CLI_OK;
}

/* What explain is asked: the rules file and whom to explain for. env
 * holds the --env values, NULL-terminated, when any was given. */
struct explain_request {
    const char *config_path;
    struct bh_identity identity;
    char **env;
    int env_count;
    char **resolve;  /* --resolve NAME=ADDRESS values, NULL-terminated */
    int resolve_count;
    char interpreter[256];  /* a script's: what its #! line runs */
};

/* --user NAME|UID, resolved as the rules' user= is. */
static int set_explain_user(struct explain_request *request, const char *user)
{
    char text[BH_WHO_MAX + 8], why[256];
    struct bh_who who;
    snprintf(text, sizeof text, "user=%s", user);
    if (*user == '\0' || bh_who_parse(text, &who, why, sizeof why) != 0)
        return cli_usage_error(&cli_explain_command, "--user %s: no such user "
                               "or uid", user);
    request->identity.uid = who.uid;
    return -1;
}

/* --env VAR=VALUE, repeatable: together they are the environment. */
static int add_explain_env(struct explain_request *request, char *assignment)
{
    if (assignment[0] == '=' || !strchr(assignment, '='))
        return cli_usage_error(&cli_explain_command, "--env %s: not VAR=VALUE",
                               assignment);
    request->env[request->env_count++] = assignment;
    request->identity.env = request->env;
    return -1;
}

/* --resolve NAME=ADDRESS, repeatable: NAME resolves to that address
 * alone, as a program's own lookup would have it, without asking DNS. */
static int add_explain_resolve(struct explain_request *request, char *assignment)
{
    const char *address = strchr(assignment, '=');
    unsigned char bytes[sizeof(struct in6_addr)];
    if (!address || address == assignment ||
        (inet_pton(AF_INET, address + 1, bytes) != 1 &&
         inet_pton(AF_INET6, address + 1, bytes) != 1))
        return cli_usage_error(&cli_explain_command, "--resolve %s: not "
                               "NAME=ADDRESS (an IPv4 or IPv6 address)", assignment);
    request->resolve[request->resolve_count++] = assignment;
    return -1;
}

static const char *short_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The interpreter a script's "#!" line names, and its first argument,
 * into line (both point there); 0, or -1 when path is no such script. */
static int read_shebang(const char *path, char *line, size_t size,
                        char **interpreter, char **argument)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat info;
    ssize_t length = -1;
    if (fd >= 0 && fstat(fd, &info) == 0 && S_ISREG(info.st_mode))
        length = read(fd, line, size - 1);
    if (fd >= 0)
        close(fd);
    if (length < 3 || line[0] != '#' || line[1] != '!')
        return -1;
    line[length] = '\0';
    line[strcspn(line, "\n")] = '\0';
    *interpreter = strtok(line + 2, " \t");
    *argument = *interpreter ? strtok(NULL, " \t") : NULL;
    return *interpreter ? 0 : -1;
}

/* --program NAME: a path is taken by its short name, as the shim sees it.
 * A script's process is its interpreter, started with the script's path:
 * the shim sees both names, unless "#!/usr/bin/env" stood between them. */
static int set_explain_program(struct explain_request *request,
                               const char *program)
{
    char *interpreter, *argument;
    request->identity.program = short_name(program);
    if (*request->identity.program == '\0')
        return cli_usage_error(&cli_explain_command, "--program %s: no program "
                               "name", program);
    if (read_shebang(program, request->interpreter, sizeof request->interpreter,
                     &interpreter, &argument) < 0)
        return -1;
    if (strcmp(short_name(interpreter), "env") != 0 || !argument) {
        request->identity.executed = request->identity.program;
        request->identity.program = short_name(interpreter);
        return -1;
    }
    request->identity.program = short_name(argument);
    printf("%s: a script started through %s %s: its process is known as %s "
           "only (env hides the script's name from program=: write the "
           "interpreter's full path after #!)\n", program, interpreter, argument,
           request->identity.program);
    return -1;
}

/* Like each set_ and add_ above: -1 to go on, else the status to exit
 * with. */
static int explain_option(struct explain_request *request, int option,
                          char **argv)
{
    switch (option) {
    case 'c': request->config_path = optarg; return -1;
    case 'p': return set_explain_program(request, optarg);
    case 'u': return set_explain_user(request, optarg);
    case 'e': return add_explain_env(request, optarg);
    case 'r': return add_explain_resolve(request, optarg);
    }
    return cli_option_problem(&cli_explain_command, option, argv);
}

/* -1 when parsing went on to the end, else the status to exit with.
 * Without options the identity is the caller's, its program unknown. */
static int parse_explain_options(struct explain_request *request, int argc,
                                 char **argv)
{
    static const struct option options[] = {
        { "config", required_argument, NULL, 'c' },
        { "program", required_argument, NULL, 'p' },
        { "user", required_argument, NULL, 'u' },
        { "env", required_argument, NULL, 'e' },
        { "resolve", required_argument, NULL, 'r' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int option, status = -1;
    bh_identity_self(&request->identity);
    request->identity.program = NULL;
    request->env = calloc((size_t)argc + 1, sizeof *request->env);
    request->resolve = calloc((size_t)argc + 1, sizeof *request->resolve);
    if (!request->env || !request->resolve) {
        cli_error("explain: out of memory");
        return CLI_FAILED;
    }
    opterr = 0;
    while (status < 0 &&
           (option = getopt_long(argc, argv, ":c:h", options, NULL)) != -1)
        status = explain_option(request, option, argv);
    return status;
}

static int explain(int argc, char **argv)
{
    struct explain_request request = { 0 };
    int parsed = parse_explain_options(&request, argc, argv);
    if (parsed < 0 && optind >= argc)
        parsed = cli_usage_error(&cli_explain_command, "no destination given");
    if (parsed >= 0) {
        free(request.env);
        free(request.resolve);
        return parsed;
    }
    struct bh_config config;
    int loaded = cli_load_rules(request.config_path, &config) == 0;
    int status = loaded ? CLI_OK : CLI_FAILED;
    for (int i = optind; loaded && i < argc; i++) {
        int outcome = explain_one(&config, &request.identity, request.resolve,
                                  argv[i]);
        status = outcome > status ? outcome : status;
    }
    bh_config_free(&config);
    free(request.env);
    free(request.resolve);
    return status;
}

const struct cli_command cli_explain_command = {
    .name = "explain",
    .synopsis = "bulkhead explain [-c rules.ini] [--program NAME] [--user NAME|UID] "
                "[--env VAR=VALUE]... [--resolve NAME=ADDRESS]... HOST:PORT|[V6]:PORT...",
    .help =
        "Says, for each destination, which compartment and which match rule\n"
        "(by line) a connection to it counts against, or that it is not\n"
        "limited; when that compartment is fleet-wide (fleet_limit), or has\n"
        "deadlines or a breaker, the next lines say so. A name is resolved with getaddrinfo as a program\n"
        "would, and every address it gives is explained: hostname rules match\n"
        "the addresses the name resolved to, as in the shim. Where bulkhead\n"
        "run's supervisor (a Go or static program) answers otherwise, a line\n"
        "says so: it matches a hostname rule by every address its name\n"
        "resolves to, whatever name the program used, and no suffix rule.\n"
        "\n"
        "The next lines also give the rule's weight (when not 1), the\n"
        "compartment's per_process, and whether each of its reserves and\n"
        "bypasses applies to a program run with the identity below.\n"
        "\n"
        "  -c, --config FILE     the rules file (default: as for run)\n"
        "  --program NAME        the program's short name, for program= (a path\n"
        "                        counts by its last part; a script's path, by\n"
        "                        its name and its #! interpreter's); without it,\n"
        "                        program= says \"applies if the program's name\n"
        "                        matches\"\n"
        "  --user NAME|UID       the effective user, for user= (default: yours)\n"
        "  --env VAR=VALUE       an environment variable, for env=; repeat it:\n"
        "                        together they replace your environment\n"
        "  --resolve NAME=ADDRESS\n"
        "                        NAME resolves to ADDRESS (IPv4 or IPv6) alone,\n"
        "                        without DNS, as a program's lookup would give\n"
        "                        it; repeat it for more names\n"
        "\n"
        "Exit status: 0; 1 when the rules are bad or a name does not resolve;\n"
        "2 when a destination is not HOST:PORT or [V6]:PORT, or an option is\n"
        "wrong (an unknown --user, an --env without '=').\n",
    .run = explain,
};
