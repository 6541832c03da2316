/* The bulkhead command: what the subcommand files share.
 *
 * main.c dispatches to one struct cli_command per subcommand; each lives in
 * the file of its group (cmd_run.c, cmd_check.c, cmd_stat.c, cmd_suggest.c, cmd_control.c,
 * cmd_key.c) with its own help text. target.c turns -c FILE / -n NAME into the rules
 * and the namespace a command works on. */
#ifndef BH_CLI_H
#define BH_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "config/config.h"
#include "permits/permits.h"

enum cli_exit {
    CLI_OK = 0,
    CLI_FAILED = 1,     /* check found errors, or an operation failed */
    CLI_USAGE = 2,      /* bad command line; for run, also a bad rules file */
    CLI_CANNOT_EXEC = 127,
};

struct cli_command {
    const char *name;
    const char *synopsis;  /* usage line(s), for --help and errors */
    const char *help;      /* what `bulkhead help NAME` adds below the synopsis */
    int (*run)(int argc, char **argv);  /* argv[0] is the command's name */
};

extern const struct cli_command cli_run_command;
extern const struct cli_command cli_check_command;
extern const struct cli_command cli_explain_command;
extern const struct cli_command cli_stat_command;
extern const struct cli_command cli_set_command;
extern const struct cli_command cli_apply_command;
extern const struct cli_command cli_reset_command;
extern const struct cli_command cli_key_command;
extern const struct cli_command cli_agent_command;
extern const struct cli_command cli_suggest_command;
extern const struct cli_command cli_discover_command;

/* The limit a traffic needs (cmd_suggest.c): Little's law, ceil(rate per
 * second x p99 hold x safety), from 1 to BH_LIMIT_MAX; suggest's default
 * safety factor. */
int cli_sized_limit(double rate, double p99_ms, double safety);
#define CLI_SAFETY 1.5

/* bulkhead set NAME limit=N (cmd_control.c): what changed, said on out;
 * errors reported. CLI_OK or CLI_FAILED. */
int cli_change_limit(struct bh_namespace *ns, const char *namespace_name,
                     const char *name, int limit, FILE *out);

/* "leased", "learning", "kept", "fallback", "lapsed". */
const char *cli_fleet_state_name(enum bh_fleet_state state);

/* bulkhead-agent, beside this command (cmd_agent.c): exec it with argv
 * (argv[0] is replaced), or run it and return its exit status. */
int cli_agent_exec(char **argv);
int cli_agent_run(char **argv);

/* text as a JSON string, quoted and escaped, on stdout (cmd_stat.c). */
void cli_print_json_string(const char *text);

/* "bulkhead: <message>" on stderr. */
void cli_error(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* Reports a command-line mistake with the command's synopsis; returns
 * CLI_USAGE. */
int cli_usage_error(const struct cli_command *command, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Handles what getopt_long returned for anything the command does not
 * know ('?', ':' or 'h'); returns the exit status. */
int cli_option_problem(const struct cli_command *command, int option,
                       char **argv);
/* Prints the synopsis and the full help of a command on stdout. */
void cli_print_help(const struct cli_command *command);

/* Which rules file or namespace a command works on: -c FILE, -n NAME, or
 * the located rules file when neither is given. */
struct cli_target {
    const char *config_path;     /* -c, or NULL */
    const char *namespace_name;  /* -n / --namespace, or NULL */
    const char *user;            /* --user NAME or UID, or NULL: ourselves */
    uid_t uid;                   /* whose namespace, once cli_target_user ran */
};

/* -c, -n and -u, alike in every command that works on a namespace (stat,
 * suggest, set, apply, reset, key): put CLI_TARGET_OPTIONS first in the
 * command's long options and CLI_TARGET_SHORT in its short ones, hand each
 * option to cli_target_option(), and print CLI_TARGET_HELP in its help. */
#define CLI_TARGET_OPTIONS                                \
    { "config", required_argument, NULL, 'c' },           \
    { "namespace", required_argument, NULL, 'n' },        \
    { "user", required_argument, NULL, 'u' }
#define CLI_TARGET_SHORT "c:n:u:"
#define CLI_TARGET_HELP_NAMESPACE                                        \
    "  -c, --config FILE     the namespace of FILE's [global] section\n" \
    "  -n, --namespace NAME  that namespace\n"
#define CLI_TARGET_HELP                                                       \
    CLI_TARGET_HELP_NAMESPACE                                                 \
    "  -u, --user USER       USER's namespace (a name or a uid; root only,\n" \
    "                        unless USER is yourself)\n"
/* Keeps the argument of -c, -n or -u in target: 1 when option was one of
 * them, else 0. */
int cli_target_option(struct cli_target *target, int option, const char *argument);
/* CLI_USAGE, reported, when -c and -n are both given; else CLI_OK. */
int cli_target_usage(const struct cli_command *command,
                     const struct cli_target *target);
/* Resolves target->user (a user name or a numeric uid) into target->uid;
 * without --user, the effective uid. Naming another user than ourselves
 * takes euid 0 unless `anyone` (key: the key is public). Returns CLI_OK,
 * or the status to exit with once reported. */
int cli_target_user(const struct cli_command *command, struct cli_target *target,
                    int anyone);
/* " of user NAME (uid N)" when the target is another user's namespace,
 * else "": for messages. */
const char *cli_target_owner(const struct cli_target *target);
/* bh_namespace_open_for, creating another user's namespace (root only) with
 * that user's effective uid, so that its objects are the user's own. */
int cli_namespace_open(const struct cli_target *target, const char *name,
                       int create, struct bh_namespace *ns, char *why,
                       size_t whylen);
/* The rules file: `given` (-c), else bh_config_locate()'s. 0, or -1 once
 * reported that there is none. path holds PATH_MAX bytes. */
int cli_locate_rules(const char *given, char *path);
/* Loads the rules file cli_locate_rules() finds, printing every error as
 * "bulkhead: file:line: ...". Returns the error count, or -1 when no file
 * was found (reported too). Free the config whatever it returns. */
int cli_load_rules(const char *given, struct bh_config *config);
/* The rules file that names the target's namespace, loaded without a word:
 * 0, or -1 when -n named it or it does not load (cli_target_namespace then
 * says why). Free the config when it returns 0. */
int cli_target_rules(const struct cli_target *target, struct bh_config *config);
/* The namespace the target names, into name; 0, or -1 once reported. */
int cli_target_namespace(const struct cli_target *target,
                         char name[BH_NAME_MAX]);
/* Attaches to the target's namespace without creating it. Returns 0; 1 when
 * it has no shared state yet (nothing ran; not reported); -1 once reported. */
int cli_target_open(const struct cli_target *target, struct bh_namespace *ns,
                    char name[BH_NAME_MAX]);

/* Whether the shim can reach CMD, found as execvp finds it. */
enum cli_reach {
    CLI_REACHED,    /* a dynamic program, or a script for one */
    CLI_RAW_CALLS,  /* static or Go: its own system calls, which the
                       seccomp filter traps */
    CLI_FOREIGN,    /* static or Go of the other word size (i386 on
                       x86_64): the filter lets its calls through */
    CLI_SET_ID,     /* set-ID: the loader drops LD_PRELOAD for it */
};
/* When CMD is not CLI_REACHED (or a script for such an interpreter),
 * text says why, in one line with no newline. */
enum cli_reach cli_interpose_warning(const char *command, char *text,
                                     size_t textlen);
/* Whether the open file is a Go program's image (its build info, as `go
 * version` finds it): an ELF header, the section names, at most 64 kB of
 * data read. */
int cli_is_go_image(int fd);

/* Every process holding permits in a namespace, by compartment then pid;
 * as many as there are. */
struct cli_holder {
    int index;
    pid_t pid;
    uint32_t permits;
    uint32_t waiting;  /* its threads waiting for more: hold and wait */
};
struct cli_holders {
    struct cli_holder *list;
    int count, capacity;
};
/* 0, or -1 out of memory (reported). */
int cli_holders_collect(struct bh_namespace *ns, struct cli_holders *holders);
/* The first of compartment index's holders; how many in *count. */
const struct cli_holder *cli_holders_of(const struct cli_holders *holders, int index,
                                        int *count);
void cli_holders_free(struct cli_holders *holders);
/* "1234(2),1240(1),shared(1)": pids with the permits each holds, then the
 * permits of sockets several processes share (held until the last copy
 * closes, by no one pid); "-" for none. malloc'd (NULL: out of memory). */
char *cli_format_holders(const struct cli_holder *holders, int count,
                         int shared_permits);

#endif
