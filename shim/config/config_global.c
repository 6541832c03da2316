/* The keys of [global]: the log, the namespace, on_failure, and the fleet
 * (its Redis, this host in it, the lease's timing; and fleet_limit, a
 * compartment's key that needs fleet = in [global]). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "config/parser.h"

/* ---- [global] ---- */

static int set_log(struct parser *p, const char *key, const char *value)
{
    if (bh_log_level_parse(value, &p->config->log_level) == 0)
        return 0;
    report(p, p->line, "%s: \"%s\" is not one of error, warn, info, debug",
           key, value);
    return -1;
}

/* A path setting, as every process of the tree must read it: a relative
 * one is taken from the rules file's directory, not from the working
 * directory, which differs between processes (a daemon's chdir("/")). */
static int set_path(struct parser *p, const char *value, char **field)
{
    free(*field);  /* a second [global] may set it again */
    *field = NULL;
    const char *slash = strrchr(p->path, '/');
    int dir_length = value[0] == '/' || !slash ? 0 : (int)(slash - p->path) + 1;
    size_t size = (size_t)dir_length + strlen(value) + 1;
    if ((*field = malloc(size))) {
        snprintf(*field, size, "%.*s%s", dir_length, p->path, value);
        return 0;
    }
    report_out_of_memory(p);
    return -1;
}

/* "syslog" is a word, not a path: a file of that name is ./syslog. */
static int set_log_file(struct parser *p, const char *key, const char *value)
{
    (void)key;
    if (strcmp(value, "stderr") != 0 && strcmp(value, "syslog") != 0)
        return set_path(p, value, &p->config->log_file);
    free(p->config->log_file);
    p->config->log_file = NULL;
    if (strcmp(value, "syslog") == 0 && !(p->config->log_file = strdup("syslog"))) {
        report_out_of_memory(p);
        return -1;
    }
    return 0;
}

/* A unix socket's path must fit its address (sun_path). */
static int set_syslog_socket(struct parser *p, const char *key, const char *value)
{
    if (set_path(p, value, &p->config->syslog_socket) < 0)
        return -1;
    if (strlen(p->config->syslog_socket) < sizeof(((struct sockaddr_un *)0)->sun_path))
        return 0;
    report(p, p->line, "%s: \"%s\" is longer than a unix socket's path may be "
           "(%zu bytes)", key, p->config->syslog_socket,
           sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
    return -1;
}

/* A namespace's or a fleet's name, into name (BH_NAME_MAX bytes). */
static int set_name(struct parser *p, const char *key, const char *value, char *name)
{
    if (is_valid_name(value, strlen(value))) {
        snprintf(name, BH_NAME_MAX, "%s", value);
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not a valid name "
           "(use 1 to %d of A-Z a-z 0-9 _ . -)", key, value, BH_NAME_MAX - 1);
    return -1;
}

static int set_namespace(struct parser *p, const char *key, const char *value)
{
    return set_name(p, key, value, p->config->namespace_name);
}

/* What the shim does when it cannot reach the namespace's shared state
 * (a squatted key, SysV limits used up, permission denied). */
static int set_on_failure(struct parser *p, const char *key, const char *value)
{
    if (strcmp(value, "closed") == 0 || strcmp(value, "open") == 0) {
        p->config->on_failure_open = value[0] == 'o';
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not one of closed, open", key, value);
    return -1;
}

/* observe = yes: every outbound TCP destination is recorded for
 * `bulkhead discover` (permits/destinations.h). */
static int set_observe(struct parser *p, const char *key, const char *value)
{
    return set_yes_no(p, key, value, &p->config->observe);
}

/* ---- the fleet ---- */

static int set_string(struct parser *p, const char *value, char **field)
{
    free(*field);
    *field = strdup(value);
    if (*field)
        return 0;
    report_out_of_memory(p);
    return -1;
}

/* bh_fleet_url_parse, its address on the heap: a few kilobytes (eight
 * sentinels), and the shim may parse on a small stack (its first hook, in
 * any thread). How many sentinels the URL names (0 for redis://), -1 with
 * why when it is bad, -2 when out of memory (reported). */
static int fleet_url_sentinels(struct parser *p, const char *url, char *why,
                               size_t whylen)
{
    struct bh_fleet_address *address = malloc(sizeof *address);
    if (!address) {
        report_out_of_memory(p);
        return -2;
    }
    int sentinels = bh_fleet_url_parse(url, address, why, whylen) == 0
        ? address->sentinel_count : -1;
    free(address);
    return sentinels;
}

static int set_fleet(struct parser *p, const char *key, const char *value)
{
    char why[256];
    int sentinels = fleet_url_sentinels(p, value, why, sizeof why);
    if (sentinels >= 0)
        return set_string(p, value, &p->config->fleet_url);
    if (sentinels == -1)
        report(p, p->line, "%s: \"%s\" %s", key, value, why);
    return -1;
}

/* Only its name: the agent reads it, and check looks at its mode; the shim
 * never touches it. */
static int set_fleet_password_file(struct parser *p, const char *key,
                                   const char *value)
{
    (void)key;
    p->config->fleet_password_file_line = p->line;
    return set_path(p, value, &p->config->fleet_password_file);
}

/* The sentinels' password, as fleet_password_file is Redis's; whether
 * fleet = names sentinels is checked at the end of the file. */
static int set_fleet_sentinel_password_file(struct parser *p, const char *key,
                                            const char *value)
{
    (void)key;
    p->config->fleet_sentinel_password_file_line = p->line;
    return set_path(p, value, &p->config->fleet_sentinel_password_file);
}

static int set_fleet_host(struct parser *p, const char *key, const char *value)
{
    size_t length = strlen(value);
    bool valid = length < BH_FLEET_HOST_MAX;
    for (size_t i = 0; valid && i < length; i++)
        valid = is_name_char(value[i]);
    if (valid) {
        snprintf(p->config->fleet_host, BH_FLEET_HOST_MAX, "%s", value);
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not a valid host name (use 1 to %d of "
           "A-Z a-z 0-9 _ . -)", key, value, BH_FLEET_HOST_MAX - 1);
    return -1;
}

static int set_fleet_name(struct parser *p, const char *key, const char *value)
{
    return set_name(p, key, value, p->config->fleet_name);
}

static int set_fleet_refresh_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, FLEET_REFRESH_MIN_MS, FLEET_REFRESH_MAX_MS,
                      &p->config->fleet_refresh_ms);
}

static int set_fleet_lease_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 2 * FLEET_REFRESH_MIN_MS, DEADLINE_MS_MAX,
                      &p->config->fleet_lease_ms);
}

static int set_fleet_fallback_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 0, DEADLINE_MS_MAX, &p->config->fleet_fallback_ms);
}

static int set_fleet_fallback(struct parser *p, const char *key, const char *value)
{
    if (strcmp(value, "split") == 0) {
        p->config->fleet_fallback = -1;
        return 0;
    }
    long number;
    if (parse_whole(value, BH_LIMIT_MAX, &number) == NUMBER_OK) {
        p->config->fleet_fallback = (int)number;
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is neither split nor a whole number from 0 "
           "to %d", key, value, BH_LIMIT_MAX);
    return -1;
}

/* Whether [global] has a fleet = is known only at the end of the file: the
 * line is kept for then. A value already reported is not kept: one error. */
static int set_fleet_limit(struct parser *p, const char *key, const char *value)
{
    if (set_number(p, key, value, 1, BH_FLEET_LIMIT_MAX,
                   &p->section.compartment->fleet_limit) != 0)
        return -1;
    if (p->fleet_limit_count < BH_MAX_COMPARTMENTS)
        p->fleet_limit_lines[p->fleet_limit_count++] = p->line;
    return 0;
}

/* ---- at the end of the file ---- */

/* A lease must outlive two refreshes. Reported on the line of the key
 * given (the lease's when both are), naming the other and where it is; a
 * key whose own value was reported is left out. */
static void check_fleet_lease(struct parser *p)
{
    const struct bh_config *config = p->config;
    int lease_line = p->global_key_lines[KEY_FLEET_LEASE_MS];
    int refresh_line = p->global_key_lines[KEY_FLEET_REFRESH_MS];
    static const char why[] = "a host would lose its share between two refreshes";

    if (p->global_key_bad[KEY_FLEET_LEASE_MS] ||
        p->global_key_bad[KEY_FLEET_REFRESH_MS] ||
        config->fleet_lease_ms >= 2 * config->fleet_refresh_ms)
        return;
    if (!lease_line)
        report(p, refresh_line, "fleet_refresh_ms: %d is more than half of "
               "fleet_lease_ms (%d, the default): %s", config->fleet_refresh_ms,
               config->fleet_lease_ms, why);
    else if (!refresh_line)
        report(p, lease_line, "fleet_lease_ms: %d is less than twice "
               "fleet_refresh_ms (%d, the default): %s", config->fleet_lease_ms,
               config->fleet_refresh_ms, why);
    else
        report(p, lease_line, "fleet_lease_ms: %d is less than twice "
               "fleet_refresh_ms (%d at line %d): %s", config->fleet_lease_ms,
               config->fleet_refresh_ms, refresh_line, why);
}

/* A sentinels' password without sentinels to give it to; not when fleet =
 * was given but wrong, which is its own error. */
static void check_sentinel_password(struct parser *p)
{
    const struct bh_config *config = p->config;
    char why[256];
    if (!config->fleet_sentinel_password_file || p->global_key_bad[KEY_FLEET])
        return;
    if (!config->fleet_url || fleet_url_sentinels(p, config->fleet_url, why,
                                                  sizeof why) == 0)
        report(p, config->fleet_sentinel_password_file_line,
               "fleet_sentinel_password_file: needs fleet = "
               "redis-sentinel://HOST[:PORT],.../MASTER in [global]");
}

/* The fleet's keys against each other, once the whole file is read: a
 * [global] may come after the compartments. fleet_limit without a fleet is
 * reported on each fleet_limit line (check sorts them into place); not when
 * fleet = was given but wrong, which is its own error. */
void check_fleet(struct parser *p)
{
    struct bh_config *config = p->config;
    if (!config->fleet_url && !p->global_key_lines[KEY_FLEET])
        for (int i = 0; i < p->fleet_limit_count; i++)
            report(p, p->fleet_limit_lines[i], "fleet_limit: needs fleet = "
                   "redis://HOST:PORT in [global]");
    check_fleet_lease(p);
    check_sentinel_password(p);
    if (config->fleet_url && !config->fleet_host[0])
        bh_fleet_default_host(config->fleet_host, sizeof config->fleet_host);
    if (!config->fleet_name[0])
        snprintf(config->fleet_name, BH_NAME_MAX, "%s", config->namespace_name);
}

/* [global] may come after the compartments: its default is given out last. */

const struct key_spec bh_global_keys[] = {
    { "log", KEY_LOG, SECTION_GLOBAL, set_log },
    { "log_file", KEY_LOG_FILE, SECTION_GLOBAL, set_log_file },
    { "syslog_socket", KEY_SYSLOG_SOCKET, SECTION_GLOBAL, set_syslog_socket },
    { "namespace", KEY_NAMESPACE, SECTION_GLOBAL, set_namespace },
    { "on_failure", KEY_ON_FAILURE, SECTION_GLOBAL, set_on_failure },
    { "observe", KEY_OBSERVE, SECTION_GLOBAL, set_observe },
    { "fleet", KEY_FLEET, SECTION_GLOBAL, set_fleet },
    { "fleet_password_file", KEY_FLEET_PASSWORD_FILE, SECTION_GLOBAL,
      set_fleet_password_file },
    { "fleet_sentinel_password_file", KEY_FLEET_SENTINEL_PASSWORD_FILE, SECTION_GLOBAL,
      set_fleet_sentinel_password_file },
    { "fleet_host", KEY_FLEET_HOST, SECTION_GLOBAL, set_fleet_host },
    { "fleet_name", KEY_FLEET_NAME, SECTION_GLOBAL, set_fleet_name },
    { "fleet_refresh_ms", KEY_FLEET_REFRESH_MS, SECTION_GLOBAL, set_fleet_refresh_ms },
    { "fleet_lease_ms", KEY_FLEET_LEASE_MS, SECTION_GLOBAL, set_fleet_lease_ms },
    { "fleet_fallback", KEY_FLEET_FALLBACK, SECTION_GLOBAL, set_fleet_fallback },
    { "fleet_fallback_ms", KEY_FLEET_FALLBACK_MS, SECTION_GLOBAL, set_fleet_fallback_ms },
    { "fleet_limit", KEY_FLEET_LIMIT, SECTION_COMPARTMENT, set_fleet_limit },};
const size_t bh_global_keys_count = sizeof bh_global_keys / sizeof bh_global_keys[0];
