/* match = HOST:PORTS [weight=N]: an address, a network, a host name or a
 * *.suffix, with a port, a range or *; each line one rule. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "config/parser.h"

/* ---- match = HOST:PORTSPEC ---- */

static const char not_a_host[] = "is not an address or host name";

/* The colon before the port: v6 addresses hold colons, but in brackets. */
static char *port_colon(char *text)
{
    char *colon = NULL;
    int depth = 0;

    for (char *c = text; *c; c++) {
        if (*c == '[')
            depth++;
        else if (*c == ']')
            depth--;
        else if (*c == ':' && depth == 0)
            colon = c;
    }
    return colon;
}

static bool parse_port(const char *text, long *port)
{
    return parse_whole(text, PORT_MAX, port) == NUMBER_OK && *port >= 1;
}

/* "*", "N" or "LO-HI"; NULL or what is wrong. */
static const char *parse_ports(char *text, struct bh_rule *rule)
{
    char *dash = strchr(text, '-');
    long low, high;

    if (strcmp(text, "*") == 0) {
        rule->port_lo = 0;
        rule->port_hi = PORT_MAX;
        return NULL;
    }
    if (dash)
        *dash = '\0';
    if (!parse_port(text, &low) || (dash && !parse_port(dash + 1, &high)))
        return "has a bad port";
    if (!dash)
        high = low;
    if (low > high)
        return "has its port range reversed";
    rule->port_lo = (uint16_t)low;
    rule->port_hi = (uint16_t)high;
    return NULL;
}

static void zero_host_bits(uint8_t *address, int prefix_len, int address_bits)
{
    for (int bit = prefix_len; bit < address_bits; bit++)
        address[bit / 8] &= (uint8_t)~(0x80u >> (bit % 8));
}

/* "a.b.c.d", "a.b.c.d/N", "[v6]" or "[v6]/N". */
static const char *parse_network(char *host, struct bh_rule *rule)
{
    char *slash = strchr(host, '/');
    char *address = host;
    int family = AF_INET, max_prefix = 32;
    long prefix_len;

    if (slash)
        *slash = '\0';
    if (host[0] == '[') {
        size_t length = strlen(host);
        if (host[length - 1] != ']')
            return not_a_host;
        host[length - 1] = '\0';
        address = host + 1;
        family = AF_INET6;
        max_prefix = 128;
    }
    if (inet_pton(family, address, rule->address) != 1)
        return not_a_host;
    prefix_len = max_prefix;
    if (slash && parse_whole(slash + 1, max_prefix, &prefix_len) != NUMBER_OK)
        return "has a bad prefix length";
    rule->kind = BH_RULE_ADDRESS;
    rule->family = family;
    rule->prefix_len = (int)prefix_len;
    zero_host_bits(rule->address, rule->prefix_len, max_prefix);
    if (family == AF_INET6 && prefix_len >= 96 &&
        IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)rule->address)) {
        /* [::ffff:a.b.c.d] is a v4 destination: connects to it are matched
         * as v4, so the rule must be one too, or it could never match. */
        memmove(rule->address, rule->address + 12, 4);
        rule->family = AF_INET;
        rule->prefix_len -= 96;
    }
    return NULL;
}

/* Copies a DNS name in lower case without its trailing dot. The last label
 * may not be all digits: "10.0.0.256" is a mistyped address, not a name. */
static bool copy_host_name(const char *name, char *out)
{
    size_t length = strlen(name);
    size_t label_length = 0;
    bool all_digits = true;

    if (length > 0 && name[length - 1] == '.')
        length--;
    if (length == 0 || length > HOSTNAME_MAX)
        return false;
    for (size_t i = 0; i < length; i++) {
        char c = name[i];
        if (c == '.') {
            if (label_length == 0)
                return false;
            label_length = 0;
            all_digits = true;
        } else {
            if (!is_name_char(c) || ++label_length > LABEL_MAX)
                return false;
            all_digits = all_digits && is_digit(c);
        }
        out[i] = to_lower(c);
    }
    out[length] = '\0';
    return label_length > 0 && !all_digits;
}

/* "name" or "*.suffix"; hostname receives the part the rule keeps. */
static const char *parse_host_name(const char *host, struct bh_rule *rule,
                                   char *hostname)
{
    if (strcmp(host, "*") == 0)
        return "has a bare * host; to match every address use 0.0.0.0/0 "
               "and [::]/0";
    rule->kind = BH_RULE_HOSTNAME;
    if (strncmp(host, "*.", 2) == 0) {
        rule->kind = BH_RULE_HOST_SUFFIX;
        *hostname++ = '.';
        host += 2;
    }
    return copy_host_name(host, hostname) ? NULL : not_a_host;
}

static const char *parse_host(char *host, struct bh_rule *rule, char *hostname)
{
    if (host[0] != '[' && strchr(host, ':'))
        return "has an IPv6 address without [brackets]";
    if (host[0] == '[' || strchr(host, '/')
        || inet_pton(AF_INET, host, rule->address) == 1)
        return parse_network(host, rule);
    return parse_host_name(host, rule, hostname);
}

/* Fills rule (and hostname for name rules); NULL or what is wrong. */
static const char *parse_match(const char *value, struct bh_rule *rule,
                               char *hostname)
{
    char text[LINE_BUFFER_SIZE];
    char *colon;
    const char *problem;

    snprintf(text, sizeof text, "%s", value);
    colon = port_colon(text);
    if (!colon)
        return "is missing a port";
    *colon = '\0';
    problem = parse_host(text, rule, hostname);
    return problem ? problem : parse_ports(colon + 1, rule);
}

static int grow_rules(struct parser *p)
{
    struct bh_config *config = p->config;
    int capacity = p->rule_capacity ? 2 * p->rule_capacity : 16;
    struct bh_rule *grown;

    if (config->rule_count < p->rule_capacity)
        return 0;
    grown = realloc(config->rules, capacity * sizeof *grown);
    if (!grown)
        return -1;
    config->rules = grown;
    p->rule_capacity = capacity;
    return 0;
}

static int keep_rule(struct parser *p, struct bh_rule *rule, const char *value,
                     const char *hostname)
{
    rule->text = strdup(value);
    if (rule->kind != BH_RULE_ADDRESS)
        rule->hostname = strdup(hostname);
    if (!rule->text || (rule->kind != BH_RULE_ADDRESS && !rule->hostname)
        || grow_rules(p) != 0) {
        free(rule->text);
        free(rule->hostname);
        report_out_of_memory(p);
        return -1;
    }
    p->config->rules[p->config->rule_count++] = *rule;
    return 0;
}

/* "DEST" or "DEST weight=N": DEST is copied into destination, which explain
 * and check print as the rule. NULL or what is wrong. */
static const char *split_weight(const char *value, char *destination,
                                size_t size, int *weight)
{
    size_t length = strcspn(value, " \t");
    const char *rest = skip_space(value + length);
    long number;

    snprintf(destination, size, "%.*s", (int)length, value);
    if (*rest == '\0')
        return NULL;
    if (strncmp(rest, "weight=", strlen("weight=")) != 0)
        return "has something after its destination other than weight=N";
    if (parse_whole(rest + strlen("weight="), BH_LIMIT_MAX, &number) != NUMBER_OK
        || number < 1)
        return "has a bad weight (a whole number from 1 to 32767)";
    *weight = (int)number;
    return NULL;
}

static int add_match(struct parser *p, const char *key, const char *value)
{
    struct bh_rule rule = { .compartment = p->section.index, .line = p->line,
                           .weight = 1 };
    char destination[LINE_BUFFER_SIZE];
    char hostname[HOSTNAME_BUFFER_SIZE];
    const char *problem = split_weight(value, destination, sizeof destination,
                                       &rule.weight);

    if (!problem)
        problem = parse_match(destination, &rule, hostname);
    if (problem) {
        report(p, p->line, "%s: \"%s\" %s", key, value, problem);
        return -1;
    }
    if (p->section.index < 0)
        return 0;  /* checked, but its section was already reported */
    return keep_rule(p, &rule, destination, hostname);
}

const struct key_spec bh_match_keys[] = {
    { "match", KEY_MATCH, SECTION_COMPARTMENT, add_match },
};
const size_t bh_match_keys_count = sizeof bh_match_keys / sizeof bh_match_keys[0];
