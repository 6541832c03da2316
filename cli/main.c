/* bulkhead: dispatch to a subcommand, and the help that lists them all. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const struct cli_command *const commands[] = {
    &cli_run_command, &cli_check_command, &cli_explain_command,
    &cli_stat_command, &cli_suggest_command, &cli_discover_command, &cli_set_command, &cli_apply_command,
    &cli_reset_command, &cli_key_command, &cli_agent_command,
};
enum { COMMAND_COUNT = sizeof commands / sizeof commands[0] };

static const char overview[] =
    "bulkhead caps the concurrent outbound TCP connections of unmodified\n"
    "programs per named compartment (see rules.ini), shared by every process\n"
    "of the user in a namespace, and shows and steers that live state.\n";

static const char trailer[] =
    "\n"
    "Options of stat, suggest, discover, set, apply, reset and key: -c FILE\n"
    "takes the namespace from FILE's [global] namespace; -n/--namespace NAME\n"
    "names it directly.\n"
    "Without either, the rules file is $BULKHEAD_CONFIG, else\n"
    "$XDG_CONFIG_HOME/bulkhead/rules.ini, else /etc/bulkhead/rules.ini.\n"
    "-u/--user USER works on USER's namespace instead of your own (root only,\n"
    "except for key).\n"
    "\n"
    "Exit status: 0 ok; 1 check found errors, or an operation failed;\n"
    "2 usage error (for run, also a bad rules file); 127 run could not\n"
    "execute CMD; otherwise run exits with CMD's status.\n"
    "\n"
    "`bulkhead help COMMAND` or `bulkhead COMMAND --help` tells more;\n"
    "man bulkhead has it all.\n";

enum { ECHO_MAX = 60 };  /* characters of a quoted argument an error repeats */

/* The message, with every "quoted" part longer than ECHO_MAX cut to that
 * and "...": what a user typed is quoted, and a 5,000-character argument
 * must not bury the line that names it. */
static void print_message(const char *format, va_list args)
{
    char message[8192];
    vsnprintf(message, sizeof message, format, args);
    const char *c = message;
    for (const char *open; (open = strchr(c, '"')); ) {
        const char *close = strchr(open + 1, '"');
        if (!close)
            break;
        int inside = (int)(close - open - 1);
        fprintf(stderr, "%.*s%.*s%s", (int)(open + 1 - c), c,
                inside > ECHO_MAX ? ECHO_MAX : inside, open + 1,
                inside > ECHO_MAX ? "...\"" : "\"");
        c = close + 1;
    }
    fputs(c, stderr);
}

void cli_error(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fputs("bulkhead: ", stderr);
    print_message(format, args);
    fputc('\n', stderr);
    va_end(args);
}

int cli_usage_error(const struct cli_command *command, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "bulkhead: %s: ", command->name);
    print_message(format, args);
    fprintf(stderr, "\nusage: %s\n", command->synopsis);
    va_end(args);
    return CLI_USAGE;
}

int cli_option_problem(const struct cli_command *command, int option,
                       char **argv)
{
    const char *word = argv[optind - 1];
    if (option == 'h') {
        cli_print_help(command);
        return CLI_OK;
    }
    if (option == ':')
        return cli_usage_error(command, "%s needs a value", word);
    if (optopt && word[1] != '-')
        return cli_usage_error(command, "unknown option -%c", optopt);
    return cli_usage_error(command, "unknown option %s", word);
}

void cli_print_help(const struct cli_command *command)
{
    printf("usage: %s\n\n%s", command->synopsis, command->help);
}

static void print_overview(FILE *out)
{
    fprintf(out, "usage: bulkhead COMMAND [OPTIONS] [ARGS]\n\n%s\nCommands:\n",
            overview);
    for (int i = 0; i < COMMAND_COUNT; i++)
        fprintf(out, "  %s\n", commands[i]->synopsis);
    fputs(trailer, out);
}

static const struct cli_command *find_command(const char *name)
{
    for (int i = 0; i < COMMAND_COUNT; i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

static int help(int argc, char **argv)
{
    if (argc < 3) {
        print_overview(stdout);
        return CLI_OK;
    }
    const struct cli_command *command = find_command(argv[2]);
    if (!command) {
        cli_error("help: no command \"%s\"; see bulkhead --help", argv[2]);
        return CLI_USAGE;
    }
    cli_print_help(command);
    return CLI_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_overview(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help"))
        return help(argc, argv);
    const struct cli_command *command = find_command(name);
    if (!command) {
        cli_error("unknown command \"%s\"; see bulkhead --help", name);
        return CLI_USAGE;
    }
    return command->run(argc - 1, argv + 1);
}
