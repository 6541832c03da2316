/* What a command works on: a rules file, and the namespace of shared state
 * it names (or that -n names directly). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void print_config_error(void *ctx, const char *message)
{
    (void)ctx;
    cli_error("%s", message);
}

int cli_locate_rules(const char *given, char *path)
{
    if (given) {
        snprintf(path, PATH_MAX, "%s", given);
        return 0;
    }
    if (bh_config_locate(path, PATH_MAX) == 0)
        return 0;
    cli_error("no rules file: none at $BULKHEAD_CONFIG, "
              "$XDG_CONFIG_HOME/bulkhead/rules.ini or /etc/bulkhead/rules.ini; "
              "name one with -c FILE");
    return -1;
}

int cli_load_rules(const char *given, struct bh_config *config)
{
    char path[PATH_MAX];
    memset(config, 0, sizeof *config);
    if (cli_locate_rules(given, path) < 0)
        return -1;
    return bh_config_load(path, config, print_config_error, NULL);
}

int cli_target_namespace(const struct cli_target *target,
                         char name[BH_NAME_MAX])
{
    if (target->namespace_name) {
        size_t length = strlen(target->namespace_name);
        if (length == 0 || length >= BH_NAME_MAX) {
            cli_error("namespace \"%s\": must be 1 to %d characters",
                      target->namespace_name, BH_NAME_MAX - 1);
            return -1;
        }
        memcpy(name, target->namespace_name, length + 1);
        return 0;
    }
    struct bh_config config;
    int errors = cli_load_rules(target->config_path, &config);
    if (errors == 0)
        snprintf(name, BH_NAME_MAX, "%s", config.namespace_name);
    else if (errors > 0)
        cli_error("%s: not valid (%d error%s); fix it, or name the namespace "
                  "with -n", config.path ? config.path : "rules file", errors,
                  errors == 1 ? "" : "s");
    bh_config_free(&config);
    return errors == 0 ? 0 : -1;
}

int cli_target_open(const struct cli_target *target, struct bh_namespace *ns,
                    char name[BH_NAME_MAX])
{
    char why[256];
    if (cli_target_namespace(target, name) < 0)
        return -1;
    if (bh_namespace_open(name, 0, ns, why, sizeof why) == 0)
        return 0;
    if (errno == ENOENT)
        return 1;
    cli_error("%s", why);
    return -1;
}

int cli_target_usage(const struct cli_command *command,
                     const struct cli_target *target)
{
    if (target->config_path && target->namespace_name)
        return cli_usage_error(command, "-c and -n both name the namespace; "
                                        "give one");
    return CLI_OK;
}
