/* bulkhead run: start a program under the shim, like torsocks or
 * proxychains4. The rules are validated first, so a bad file stops here
 * with its errors instead of letting the program run unlimited. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "supervisor/supervisor.h"

#define SHIM_NAME "libbulkhead.so"

/* Where the shim lives relative to the command's own directory: beside it
 * in the build tree; else, installed in PREFIX/bin, PREFIX/lib/<triplet>/
 * bulkhead/ (make install, the libbulkhead package), or PREFIX/lib/
 * bulkhead/ on a system without multiarch (BH_MULTIARCH empty). */
static const char *const shim_places[] = {
    SHIM_NAME,
    "../lib/" BH_MULTIARCH "/bulkhead/" SHIM_NAME,
    "../lib/bulkhead/" SHIM_NAME,
};
enum { MULTIARCH_PLACE = 1 };

/* The multiarch shim is preloaded as PREFIX/$LIB/bulkhead/libbulkhead.so,
 * the token left for the loader: each program's loader makes it its own
 * lib/<triplet>, as faketime's /usr/$LIB/faketime/, so a 32-bit program
 * gets the 32-bit shim where that is installed too (libbulkhead:i386).
 * shim holds PREFIX/lib/<triplet>/bulkhead/libbulkhead.so on entry; "$LIB"
 * is shorter than "lib/<triplet>", so the result fits. */
static void multiarch_preload(char shim[PATH_MAX])
{
    static const char tail[] = "/lib/" BH_MULTIARCH "/bulkhead/" SHIM_NAME;
    size_t length = strlen(shim), tail_length = sizeof tail - 1;
    if (length < tail_length || strcmp(shim + length - tail_length, tail) != 0)
        return;  /* a symlink led elsewhere: keep the path it resolved to */
    strcpy(shim + length - tail_length, "/$LIB/bulkhead/" SHIM_NAME);
}

static int find_shim(char shim[PATH_MAX])
{
    char self[PATH_MAX], candidate[PATH_MAX + 64];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length < 0) {
        cli_error("run: /proc/self/exe: %s", strerror(errno));
        return -1;
    }
    self[length] = '\0';
    const char *directory = dirname(self);
    for (size_t i = 0; i < sizeof shim_places / sizeof shim_places[0]; i++) {
        if (i == MULTIARCH_PLACE && !*BH_MULTIARCH)
            continue;
        snprintf(candidate, sizeof candidate, "%s/%s", directory, shim_places[i]);
        if (!realpath(candidate, shim) || access(shim, R_OK) != 0)
            continue;
        if (i == MULTIARCH_PLACE)
            multiarch_preload(shim);
        return 0;
    }
    cli_error("run: no %s in %s nor in %s/../lib/%s%sbulkhead", SHIM_NAME,
              directory, directory, BH_MULTIARCH, *BH_MULTIARCH ? "/" : "");
    return -1;
}

/* Any libbulkhead.so, this one or another copy: two shims in one process
 * would each take a permit for the same connection. */
static int is_a_shim(const char *entry, const char *shim)
{
    const char *slash = strrchr(entry, '/');
    const char *base = slash ? slash + 1 : entry;
    return strcmp(entry, shim) == 0 || strcmp(base, SHIM_NAME) == 0;
}

/* The shim first, then every other entry of `existing` in its order.
 * LD_PRELOAD separates entries with colons or blanks. */
static char *preload_with_shim(const char *shim, const char *existing)
{
    size_t existing_length = existing ? strlen(existing) : 0;
    char *preload = malloc(strlen(shim) + existing_length + 2);
    char *copy = strdup(existing ? existing : "");
    if (!preload || !copy) {
        free(preload);
        free(copy);
        return NULL;
    }
    strcpy(preload, shim);
    char *rest;
    for (char *entry = strtok_r(copy, ": \t", &rest); entry;
         entry = strtok_r(NULL, ": \t", &rest)) {
        if (!is_a_shim(entry, shim)) {
            strcat(preload, ":");
            strcat(preload, entry);
        }
    }
    free(copy);
    return preload;
}

/* The rules file as an absolute path, once it proved valid; in *watched,
 * whether they count or observe anything (compartments, observe = yes). */
static int valid_rules(const char *given, char absolute[PATH_MAX], int *watched)
{
    char path[PATH_MAX];
    if (cli_locate_rules(given, path) < 0)
        return -1;
    if (!realpath(path, absolute)) {
        cli_error("run: %s: %s", path, strerror(errno));
        return -1;
    }
    struct bh_config config;
    int errors = cli_load_rules(absolute, &config);
    *watched = config.compartment_count > 0 || config.observe;
    bh_config_free(&config);
    if (errors != 0)
        cli_error("run: %s is not valid; nothing was started", absolute);
    return errors == 0 ? 0 : -1;
}

static int prepare_environment(const char *rules, int strict)
{
    char shim[PATH_MAX];
    if (find_shim(shim) < 0)
        return -1;
    char *preload = preload_with_shim(shim, getenv("LD_PRELOAD"));
    if (!preload || setenv("LD_PRELOAD", preload, 1) < 0 ||
        setenv("BULKHEAD_CONFIG", rules, 1) < 0 ||
        (strict && setenv("BULKHEAD_STRICT", "1", 1) < 0)) {
        cli_error("run: environment: %s", strerror(errno));
        free(preload);
        return -1;
    }
    free(preload);
    return 0;
}

enum supervision { NEVER, BY_DEFAULT, ALWAYS };

/* CMD under the seccomp supervisor, which caps every static and Go
 * program of the tree however deep (the shim marks its own calls, which
 * the filter lets through); CMD's exit status, or -1 to exec it without
 * (*said: its line said already). Not when the operator said
 * --no-seccomp or the rules cap and observe nothing; not by default when CMD is set-ID
 * and the filter would cost it its privilege (no_new_privs, which only
 * CAP_SYS_ADMIN spares); not where the kernel has no user notification. */
static int supervised(enum supervision supervise, int watched, const char *rules,
                      char **command, enum cli_reach reach, const char *warning,
                      int *said)
{
    *said = 0;
    if (supervise == NEVER || !watched ||
        (supervise == BY_DEFAULT && reach == CLI_SET_ID &&
         !sv_filter_keeps_privileges()))
        return -1;
    if (!sv_filter_supported()) {
        *said = reach != CLI_REACHED;
        if (*said)
            cli_error("run: the kernel refused the seccomp filter (%s): %s; its "
                      "connections will not be limited", strerror(errno), warning);
        return -1;
    }
    if (reach == CLI_FOREIGN) {
        *said = 1;
        cli_error("run: warning: %s; its connections will not be limited", warning);
    }
    return sv_run(rules, command, reach == CLI_RAW_CALLS || reach == CLI_SET_ID
                                      ? warning : "");
}

static int run(int argc, char **argv)
{
    static const struct option options[] = {
        { "config", required_argument, NULL, 'c' },
        { "strict", no_argument, NULL, 's' },
        { "seccomp", no_argument, NULL, 'S' },
        { "no-seccomp", no_argument, NULL, 'N' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *given_rules = NULL;
    int strict = 0, option;
    enum supervision supervise = BY_DEFAULT;
    opterr = 0;
    while ((option = getopt_long(argc, argv, "+:c:h", options, NULL)) != -1) {
        if (option == 'c')
            given_rules = optarg;
        else if (option == 's')
            strict = 1;
        else if (option == 'S' || option == 'N')
            supervise = option == 'S' ? ALWAYS : NEVER;
        else
            return cli_option_problem(&cli_run_command, option, argv);
    }
    if (optind >= argc)
        return cli_usage_error(&cli_run_command, "no command to run");
    char rules[PATH_MAX];
    int watched;
    if (valid_rules(given_rules, rules, &watched) < 0)
        return CLI_USAGE;
    if (prepare_environment(rules, strict) < 0)
        return CLI_FAILED;
    char warning[3 * PATH_MAX];
    enum cli_reach reach = cli_interpose_warning(argv[optind], warning, sizeof warning);
    int said;
    int status = supervised(supervise, watched, rules, argv + optind, reach,
                            warning, &said);
    if (status >= 0)
        return status;
    /* Only a warning: the program may still be worth running, unlimited. */
    if (reach != CLI_REACHED && !said)
        cli_error("run: warning: %s; its connections will not be limited",
                  warning);
    execvp(argv[optind], argv + optind);
    cli_error("run: %s: %s", argv[optind], strerror(errno));
    return CLI_CANNOT_EXEC;
}

const struct cli_command cli_run_command = {
    .name = "run",
    .synopsis = "bulkhead run [-c rules.ini] [--strict] [--seccomp|--no-seccomp] -- CMD [ARGS...]",
    .help =
        "Runs CMD with the shim preloaded, so that its outbound connections\n"
        "(and those of every child it starts) count against the compartments\n"
        "of the rules file.\n"
        "\n"
        "The rules are checked first: a bad file prints its errors and exits\n"
        "2 without starting CMD. Then the shim goes first in LD_PRELOAD (the\n"
        "entries already there are kept, and no libbulkhead.so is added\n"
        "twice), BULKHEAD_CONFIG is set to the rules file's absolute path, and\n"
        "CMD starts, as below; the exit status is CMD's own.\n"
        "\n"
        "CMD is looked up along PATH as execvp does. run stays as CMD's\n"
        "parent and supervises the whole tree through seccomp user\n"
        "notification: every statically linked or Go program the tree starts,\n"
        "however deep (behind env, timeout, nice, sh -c, a start script), has\n"
        "its connects capped; the shim in the dynamic programs marks its own\n"
        "calls, which the filter lets through. run exits with CMD's status\n"
        "once CMD and every process it left behind are gone. Unless run has\n"
        "CAP_SYS_ADMIN (root), the tree runs with no_new_privs: set-ID\n"
        "programs in it gain no privilege. A static or Go CMD, or a script for\n"
        "one, gets one line saying it is capped.\n"
        "\n"
        "run execs CMD instead, the shim alone reaching it, with --no-seccomp,\n"
        "when the rules have no compartment, where the kernel has no seccomp\n"
        "user notification, and when CMD is set-user-ID or set-group-ID and run\n"
        "lacks CAP_SYS_ADMIN: a static, Go or set-ID CMD then gets one warning\n"
        "line and runs unlimited.\n"
        "\n"
        "  -c, --config FILE  the rules file (default: $BULKHEAD_CONFIG, else\n"
        "                     $XDG_CONFIG_HOME/bulkhead/rules.ini, else\n"
        "                     /etc/bulkhead/rules.ini)\n"
        "      --strict       set BULKHEAD_STRICT=1: a process that finds the\n"
        "                     rules bad exits 78 instead of running unlimited\n"
        "      --seccomp      supervise even a set-ID CMD without CAP_SYS_ADMIN\n"
        "                     (it runs without its privilege); else the default\n"
        "      --no-seccomp   never supervise: exec CMD, which only the shim\n"
        "                     reaches (a static or Go program anywhere in the\n"
        "                     tree runs unlimited)\n"
        "\n"
        "Exit status: CMD's; 2 for a usage error or a bad rules file; 1 when\n"
        "the shim cannot be found; 127 when CMD cannot be executed.\n",
    .run = run,
};
