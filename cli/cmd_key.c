/* bulkhead key: the SysV key of a namespace, so that scripts (ipcs, ipcrm,
 * the bench, the tests) never re-derive the hash: permits.c owns it. */
#include <getopt.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"

static int key_command(int argc, char **argv)
{
    static const struct option options[] = {
        CLI_TARGET_OPTIONS,
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    struct cli_target target = { 0 };
    int option;
    opterr = 0;
    while ((option = getopt_long(argc, argv, ":" CLI_TARGET_SHORT "h", options, NULL)) != -1)
        if (!cli_target_option(&target, option, optarg))
            return cli_option_problem(&cli_key_command, option, argv);
    if (optind < argc)
        return cli_usage_error(&cli_key_command, "unexpected \"%s\"", argv[optind]);
    if (cli_target_usage(&cli_key_command, &target) != CLI_OK)
        return CLI_USAGE;
    /* The key is no secret (anyone can compute the hash): any user may ask
     * for any user's. */
    int user_status = cli_target_user(&cli_key_command, &target, 1);
    if (user_status != CLI_OK)
        return user_status;
    char name[BH_NAME_MAX];
    if (cli_target_namespace(&target, name) < 0)
        return CLI_FAILED;
    /* As ipcs prints it, so that its output can be matched and fed to ipcrm. */
    printf("0x%08x\n", (unsigned)bh_namespace_key(target.user ? target.uid : geteuid(), name));
    return CLI_OK;
}

const struct cli_command cli_key_command = {
    .name = "key",
    .synopsis = "bulkhead key [-c rules.ini | -n NAMESPACE] [-u USER]",
    .help =
        "Prints the System V key of the namespace's semaphore set and shared\n"
        "memory segment, as ipcs prints it (0x%08x), on one line. The key is a\n"
        "function of the effective uid and the namespace name, so it is the\n"
        "key this user's processes use; nothing needs to have run.\n"
        "\n"
        "Unlike the commands that read or steer the state, key takes -u USER\n"
        "from anyone: the key is no secret.\n"
        "\n"
        CLI_TARGET_HELP_NAMESPACE
        "  -u, --user USER       USER's namespace (a name or a uid; anyone may ask)\n"
        "\n"
        "  ipcs -s | grep \"$(bulkhead key -n default)\"\n"
        "  ipcrm -S \"$(bulkhead key -n NAME)\"   (bulkhead reset does this and more)\n"
        "\n"
        "Exit status: 0; 1 when the rules file is bad or missing; 2 for a usage\n"
        "error.\n",
    .run = key_command,
};
