/* What a command works on: a rules file, and the namespace of shared state
 * it names (or that -n names directly). */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* The parser reports some errors late: "[x]: limit is required" and "[x]:
 * no match rules" name the section's header line but can only be found when
 * the section ends, after the errors on the lines inside it. So errors are
 * kept, then printed sorted by line (a stable sort: the parser's order
 * within one line), errors about the whole file first. */
struct config_error {
    long line;       /* 0: about the whole file */
    int order;       /* as reported */
    char *message;
};

struct config_errors {
    const char *path;  /* messages start "PATH:LINE: " or "PATH: " */
    struct config_error *list;
    int count, capacity;
};

static long message_line(const char *path, const char *message)
{
    size_t length = strlen(path);
    if (strncmp(message, path, length) != 0 || message[length] != ':')
        return 0;
    char *end;
    long line = strtol(message + length + 1, &end, 10);
    return end != message + length + 1 && *end == ':' && line > 0 ? line : 0;
}

static void keep_config_error(void *ctx, const char *message)
{
    struct config_errors *errors = ctx;
    if (errors->count == errors->capacity) {
        int capacity = errors->capacity ? 2 * errors->capacity : 16;
        void *grown = realloc(errors->list, (size_t)capacity * sizeof *errors->list);
        if (grown) {
            errors->list = grown;
            errors->capacity = capacity;
        }
    }
    char *copy = errors->count < errors->capacity ? strdup(message) : NULL;
    if (!copy) {
        cli_error("%s", message);  /* out of memory: at least say it */
        return;
    }
    errors->list[errors->count] = (struct config_error) {
        message_line(errors->path, message), errors->count, copy };
    errors->count++;
}

static int by_line(const void *a, const void *b)
{
    const struct config_error *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->order - y->order;
}

static void print_config_errors(struct config_errors *errors)
{
    if (errors->count)
        qsort(errors->list, (size_t)errors->count, sizeof *errors->list, by_line);
    for (int i = 0; i < errors->count; i++) {
        cli_error("%s", errors->list[i].message);
        free(errors->list[i].message);
    }
    free(errors->list);
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
    struct config_errors errors = { .path = path };
    int count = bh_config_load(path, config, keep_config_error, &errors);
    print_config_errors(&errors);
    return count;
}

static void ignore_config_error(void *ctx, const char *message)
{
    (void)ctx;
    (void)message;  /* cli_target_namespace loads the file again and says them */
}

int cli_target_rules(const struct cli_target *target, struct bh_config *config)
{
    char path[PATH_MAX];
    memset(config, 0, sizeof *config);
    if (target->namespace_name)
        return -1;
    if (target->config_path)
        snprintf(path, sizeof path, "%s", target->config_path);
    else if (bh_config_locate(path, sizeof path) < 0)
        return -1;
    if (bh_config_load(path, config, ignore_config_error, NULL) == 0)
        return 0;
    bh_config_free(config);
    return -1;
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

static uid_t target_uid(const struct cli_target *target)
{
    return target->user ? target->uid : geteuid();
}

int cli_target_user(const struct cli_command *command, struct cli_target *target,
                    int anyone)
{
    if (!target->user)
        return CLI_OK;
    const char *text = target->user;
    char *end;
    errno = 0;
    unsigned long number = strtoul(text, &end, 10);
    struct passwd *entry;
    if (text[0] >= '0' && text[0] <= '9' && *end == '\0') {
        if (errno || number >= (unsigned long)(uid_t)-1)
            return cli_usage_error(command, "--user %s: not a uid", text);
        target->uid = (uid_t)number;
    } else if ((entry = getpwnam(text)) != NULL) {
        target->uid = entry->pw_uid;
    } else {
        return cli_usage_error(command, "--user %s: no such user", text);
    }
    if (target->uid != geteuid() && geteuid() != 0 && !anyone) {
        cli_error("%s: --user %s: only root may work on another user's "
                  "namespace (you are uid %u)", command->name, text,
                  (unsigned)geteuid());
        return CLI_FAILED;
    }
    return CLI_OK;
}

const char *cli_target_owner(const struct cli_target *target)
{
    static char text[64 + BH_NAME_MAX];
    if (!target->user || target->uid == geteuid())
        return "";
    struct passwd *entry = getpwuid(target->uid);
    if (entry && strlen(entry->pw_name) < BH_NAME_MAX)
        snprintf(text, sizeof text, " of user %s (uid %u)", entry->pw_name,
                 (unsigned)target->uid);
    else
        snprintf(text, sizeof text, " of uid %u", (unsigned)target->uid);
    return text;
}

int cli_namespace_open(const struct cli_target *target, const char *name,
                       int create, struct bh_namespace *ns, char *why,
                       size_t whylen)
{
    uid_t uid = target_uid(target), me = geteuid();
    if (!create || uid == me)
        return bh_namespace_open_for(uid, name, create, ns, why, whylen);
    int rc = bh_namespace_open_for(uid, name, 0, ns, why, whylen);
    if (rc == 0 || errno != ENOENT)
        return rc;
    /* Made by root, the objects would be root's and the user's processes
     * would refuse them as foreign: make them as the user. Our saved uid
     * stays 0, so the switch back cannot fail. */
    if (seteuid(uid) < 0) {
        int saved = errno;
        snprintf(why, whylen, "namespace \"%s\": cannot act as uid %u: %s", name,
                 (unsigned)uid, strerror(saved));
        errno = saved;
        return -1;
    }
    rc = bh_namespace_open_for(uid, name, 1, ns, why, whylen);
    int saved = errno;
    if (seteuid(me) < 0)
        abort();
    errno = saved;
    return rc;
}

int cli_target_open(const struct cli_target *target, struct bh_namespace *ns,
                    char name[BH_NAME_MAX])
{
    char why[256];
    if (cli_target_namespace(target, name) < 0)
        return -1;
    if (cli_namespace_open(target, name, 0, ns, why, sizeof why) == 0)
        return 0;
    if (errno == ENOENT)
        return 1;
    cli_error("%s", why);
    return -1;
}

int cli_target_option(struct cli_target *target, int option, const char *argument)
{
    if (option == 'c')
        target->config_path = argument;
    else if (option == 'n')
        target->namespace_name = argument;
    else if (option == 'u')
        target->user = argument;
    return option == 'c' || option == 'n' || option == 'u';
}

int cli_target_usage(const struct cli_command *command,
                     const struct cli_target *target)
{
    if (target->config_path && target->namespace_name)
        return cli_usage_error(command, "-c and -n both name the namespace; "
                                        "give one");
    return CLI_OK;
}
