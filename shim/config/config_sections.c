/* Sections: a header opens one (a compartment, or [global]), and closing
 * it checks what its keys mean together (breaker periods, reserves against
 * the limit, weights, the adaptive range). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/parser.h"

/* A breaker period given where there is no breaker. Its key's line, with
 * the line of an explicit breaker_failures = 0. */
static void check_breaker_needed(struct parser *p, enum key_id id,
                                 const char *key)
{
    const struct section *section = &p->section;
    int failures_line = section->key_lines[KEY_BREAKER_FAILURES];

    if (!section->key_lines[id] || section->key_bad[id])
        return;
    if (failures_line)
        report(p, section->key_lines[id], "%s: has no effect with "
               "breaker_failures = 0 (line %d)", key, failures_line);
    else
        report(p, section->key_lines[id], "%s: has no effect without "
               "breaker_failures", key);
}

/* What is given of the two periods, reported on the line of the one that
 * is out of order; a default is said to be one. */
static void check_breaker_periods(struct parser *p)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    int open_line = section->key_lines[KEY_BREAKER_OPEN_MS];
    int max_line = section->key_lines[KEY_BREAKER_OPEN_MAX_MS];

    if (c->breaker_open_max_ms >= c->breaker_open_ms)
        return;
    if (!max_line)
        report(p, open_line, "breaker_open_ms: %d is above breaker_open_max_ms "
               "(%d, the default)", c->breaker_open_ms, c->breaker_open_max_ms);
    else if (!open_line)
        report(p, max_line, "breaker_open_max_ms: %d is below breaker_open_ms "
               "(%d, the default)", c->breaker_open_max_ms, c->breaker_open_ms);
    else
        report(p, max_line, "breaker_open_max_ms: %d is below breaker_open_ms "
               "(%d at line %d)", c->breaker_open_max_ms, c->breaker_open_ms,
               open_line);
}

/* The breaker's keys are checked against each other once all are read. */
static void check_breaker(struct parser *p)
{
    const struct section *section = &p->section;

    if (section->compartment->breaker_failures == 0) {
        if (!section->key_bad[KEY_BREAKER_FAILURES]) {
            check_breaker_needed(p, KEY_BREAKER_OPEN_MS, "breaker_open_ms");
            check_breaker_needed(p, KEY_BREAKER_OPEN_MAX_MS,
                                 "breaker_open_max_ms");
        }
        return;
    }
    if (!section->key_bad[KEY_BREAKER_OPEN_MS]
        && !section->key_bad[KEY_BREAKER_OPEN_MAX_MS])
        check_breaker_periods(p);
}

/* Reserves are carved out of this host's limit; a fleet-wide compartment's
 * share of the fleet changes as hosts come and go. One line, on the first
 * reserve. */
static void check_fleet_reserves(struct parser *p)
{
    const struct section *section = &p->section;

    report(p, section->compartment->reserves[0].line, "reserve: cannot be "
           "used with fleet_limit (line %d): this host's share of the fleet "
           "moves under the reserves", section->key_lines[KEY_FLEET_LIMIT]);
}

static void check_reserve_sum(struct parser *p)
{
    const struct bh_compartment *c = p->section.compartment;
    int sum = 0;

    for (int i = 0; i < c->reserve_count; i++)
        sum += c->reserves[i].permits;
    if (sum > c->limit)
        report(p, c->line, "[%s]: reserves add up to %d, more than limit = %d",
               p->section.name, sum, c->limit);
}

/* A connection through a rule heavier than the limit could never be made. */
static void check_weights(struct parser *p)
{
    const struct bh_config *config = p->config;
    int limit = p->section.compartment->limit;

    for (int i = p->section.first_rule; i < config->rule_count; i++) {
        const struct bh_rule *rule = &config->rules[i];
        if (rule->compartment == p->section.index && rule->weight > limit)
            report(p, rule->line, "match: weight=%d is more than limit = %d: "
                   "such a connection could never be made", rule->weight, limit);
    }
}

/* The policy keys against the limit, in a compartment kept in the config.
 * Nothing is checked against a limit that is missing or wrong (already
 * reported), nor against limit = 0: an outage switch that refuses
 * everything must not make the file invalid. */
static void check_policy(struct parser *p)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    bool fleet = c->fleet_limit > 0;
    bool limit_known = section->key_lines[KEY_LIMIT]
        ? !section->key_bad[KEY_LIMIT] : fleet;

    if (fleet && c->reserve_count > 0)
        check_fleet_reserves(p);
    if (!limit_known || c->limit == 0)
        return;
    if (!fleet)
        check_reserve_sum(p);
    check_weights(p);
}

/* The controller's keys where nothing uses them, each on its own line. */
static void check_adaptive_unused(struct parser *p)
{
    static const struct { enum key_id id; const char *key; } keys[] = {
        { KEY_MIN_LIMIT, "min_limit" },
        { KEY_MAX_LIMIT, "max_limit" },
        { KEY_ADAPTIVE_LATENCY_MS, "adaptive_latency_ms" },
    };
    const struct section *section = &p->section;
    int adaptive_line = section->key_lines[KEY_ADAPTIVE];

    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int line = section->key_lines[keys[i].id];
        if (!line || section->key_bad[keys[i].id])
            continue;
        if (adaptive_line)
            report(p, line, "%s: has no effect with adaptive = off (line %d)",
                   keys[i].key, adaptive_line);
        else
            report(p, line, "%s: has no effect without adaptive", keys[i].key);
    }
}

/* min_limit above max_limit, on the line of the one given (max_limit's
 * when both are); a default is said to be one. */
static bool check_adaptive_range(struct parser *p)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    int min_line = section->key_lines[KEY_MIN_LIMIT];
    int max_line = section->key_lines[KEY_MAX_LIMIT];

    if (c->min_limit <= c->max_limit)
        return true;
    if (!max_line)
        report(p, min_line, "min_limit: %d is above max_limit (%d, the default: "
               "4 x limit)", c->min_limit, c->max_limit);
    else if (!min_line)
        report(p, max_line, "max_limit: %d is below min_limit (%d, the default)",
               c->max_limit, c->min_limit);
    else
        report(p, max_line, "max_limit: %d is below min_limit (%d at line %d)",
               c->max_limit, c->min_limit, min_line);
    return false;
}

/* The controller moves the limit between min_limit and max_limit, starting
 * at limit; the reserves stay under it, and it counts connections. */
static void check_adaptive_fits(struct parser *p, bool limit_known)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    int limit_line = section->key_lines[KEY_LIMIT] ? section->key_lines[KEY_LIMIT] : c->line;
    int reserved = 0;

    int min_line = section->key_lines[KEY_MIN_LIMIT];

    if (limit_known && c->limit == 0)
        report(p, limit_line, "limit: 0 refuses everything; adaptive (line %d) "
               "needs a limit to start from", section->key_lines[KEY_ADAPTIVE]);
    else if (limit_known && (c->limit < c->min_limit || c->limit > c->max_limit))
        report(p, limit_line, "limit: %d is outside min_limit to max_limit (%d to "
               "%d): the controller starts at limit", c->limit, c->min_limit,
               c->max_limit);
    for (int i = 0; i < c->reserve_count; i++)
        reserved += c->reserves[i].permits;
    if (reserved > c->min_limit)
        report(p, min_line ? min_line : section->key_lines[KEY_ADAPTIVE],
               "min_limit: %d%s is below the reserves, %d together: the limit never "
               "goes under them", c->min_limit, min_line ? "" : " (the default)",
               reserved);
    for (int i = section->first_rule; i < p->config->rule_count; i++) {
        const struct bh_rule *rule = &p->config->rules[i];
        if (rule->compartment == section->index && rule->weight > 1) {
            report(p, rule->line, "match: weight=%d cannot be used with adaptive "
                   "(line %d): the controller measures connections, the limit "
                   "counts permits", rule->weight, section->key_lines[KEY_ADAPTIVE]);
            return;
        }
    }
}

/* max_limit's default, 4 x limit (at least 1, at most BH_LIMIT_MAX), for
 * every compartment: `bulkhead set NAME adaptive=...` may turn on one
 * whose rules did not. */
static void default_max_limit(struct parser *p)
{
    struct bh_compartment *c = p->section.compartment;

    if (p->section.key_lines[KEY_MAX_LIMIT])
        return;
    c->max_limit = c->limit < BH_LIMIT_MAX / DEFAULT_MAX_LIMIT_FACTOR
        ? DEFAULT_MAX_LIMIT_FACTOR * c->limit : BH_LIMIT_MAX;
    if (c->max_limit < 1)
        c->max_limit = 1;
}

/* After the limit is known (a fleet compartment's defaults to fleet_limit). */
static void check_adaptive(struct parser *p)
{
    const struct section *section = &p->section;
    const struct bh_compartment *c = section->compartment;
    bool limit_known = section->key_lines[KEY_LIMIT]
        ? !section->key_bad[KEY_LIMIT] : c->fleet_limit > 0;

    if (section->key_bad[KEY_ADAPTIVE])
        return;
    if (c->adaptive == BH_ADAPTIVE_OFF) {
        check_adaptive_unused(p);
        return;
    }
    if (c->adaptive == BH_ADAPTIVE_GRADIENT && section->key_lines[KEY_ADAPTIVE_LATENCY_MS]
        && !section->key_bad[KEY_ADAPTIVE_LATENCY_MS])
        report(p, section->key_lines[KEY_ADAPTIVE_LATENCY_MS], "adaptive_latency_ms: "
               "has no effect with adaptive = gradient (line %d), which compares "
               "latency with its own baseline", section->key_lines[KEY_ADAPTIVE]);
    if (section->key_bad[KEY_MIN_LIMIT] || section->key_bad[KEY_MAX_LIMIT] ||
        !check_adaptive_range(p))
        return;
    check_adaptive_fits(p, limit_known);
}

/* A compartment must say how many permits it has and what it covers; its
 * breaker keys must agree even when its header was already reported. */
void close_section(struct parser *p)
{
    const struct section *section = &p->section;

    if (section->kind != SECTION_COMPARTMENT)
        return;
    check_breaker(p);
    if (section->index < 0)
        return;
    if (!section->key_lines[KEY_LIMIT] && section->compartment->fleet_limit > 0) {
        /* fleet-wide: this host's ceiling is the fleet limit, at most */
        int fleet = section->compartment->fleet_limit;
        section->compartment->limit = fleet < BH_LIMIT_MAX ? fleet : BH_LIMIT_MAX;
    } else if (!section->key_lines[KEY_LIMIT] && !section->key_bad[KEY_FLEET_LIMIT]) {
        report(p, section->compartment->line, "[%s]: limit is required",
               section->name);
    }
    if (!section->key_lines[KEY_MATCH])
        report(p, section->compartment->line, "[%s]: no match rules",
               section->name);
    check_policy(p);
    default_max_limit(p);
    check_adaptive(p);
}

static void begin_section(struct parser *p, enum section_kind kind,
                          const char *name, size_t length)
{
    memset(&p->section, 0, sizeof p->section);
    p->section.kind = kind;
    p->section.index = -1;
    p->section.first_rule = p->config->rule_count;
    snprintf(p->section.name, sizeof p->section.name, "%.*s", (int)length,
             name);
}

/* The section's values go to `compartment`; index -1 keeps them out of the
 * config. */
static void begin_compartment(struct parser *p, const char *name,
                              size_t length, int index)
{
    struct bh_compartment *compartment = index < 0
        ? &p->scratch : &p->config->compartments[index];

    begin_section(p, SECTION_COMPARTMENT, name, length);
    *compartment = (struct bh_compartment) {
        .max_waiters = DEFAULT_MAX_WAITERS,
        .hold_wait_ms = -1,  /* [global]'s, once the whole file is read */
        .mode = -1,          /* the same */
        .refusal_errno = ECONNREFUSED,
        .breaker_open_ms = DEFAULT_BREAKER_OPEN_MS,
        .breaker_open_max_ms = DEFAULT_BREAKER_OPEN_MAX_MS,
        .min_limit = 1,
        .line = p->line,
    };
    snprintf(compartment->name, sizeof compartment->name, "%s",
             p->section.name);
    p->section.compartment = compartment;
    p->section.index = index;
}

static const struct bh_compartment *find_compartment(
    const struct bh_config *config, const char *name)
{
    for (int i = 0; i < config->compartment_count; i++)
        if (strcmp(config->compartments[i].name, name) == 0)
            return &config->compartments[i];
    return NULL;
}

static void begin_global(struct parser *p)
{
    if (p->global_line)
        report(p, p->line, "duplicate section [global] (first at line %d)",
               p->global_line);
    else
        p->global_line = p->line;
    begin_section(p, SECTION_GLOBAL, "global", strlen("global"));
}

/* Room for one more compartment; -1 when out of memory. */
static int grow_compartments(struct parser *p)
{
    struct bh_config *config = p->config;
    int capacity = p->compartment_capacity ? 2 * p->compartment_capacity : 8;
    struct bh_compartment *grown;

    if (config->compartment_count < p->compartment_capacity)
        return 0;
    grown = realloc(config->compartments, capacity * sizeof *grown);
    if (!grown)
        return -1;
    config->compartments = grown;
    p->compartment_capacity = capacity;
    return 0;
}

/* name is valid here, so shorter than BH_NAME_MAX. */
static void begin_named_section(struct parser *p, const char *name,
                                size_t length)
{
    struct bh_config *config = p->config;
    char whole[BH_NAME_MAX];
    const struct bh_compartment *first;

    snprintf(whole, sizeof whole, "%.*s", (int)length, name);
    if (strcmp(whole, "global") == 0) {
        begin_global(p);
        return;
    }
    first = find_compartment(config, whole);
    if (first) {
        report(p, p->line, "duplicate compartment [%s] (first at line %d)",
               whole, first->line);
        begin_compartment(p, name, length, -1);
    } else if (config->compartment_count == BH_MAX_COMPARTMENTS) {
        report(p, p->line, "[%s]: too many compartments (at most %d)", whole,
               BH_MAX_COMPARTMENTS);
        begin_compartment(p, name, length, -1);
    } else if (grow_compartments(p) != 0) {
        report_out_of_memory(p);
        begin_compartment(p, name, length, -1);
    } else {
        begin_compartment(p, name, length, config->compartment_count++);
    }
}

/* After the ']' inih ignores everything; we allow only a comment. */
static bool ends_header(const char *text)
{
    text = skip_space(text);
    return *text == '\0' || *text == ';';
}

/* A line starting with '['. A wrong header still opens a section, kept out
 * of the config, so that the keys under it are checked. */
void open_section(struct parser *p, const char *header)
{
    const char *name = header + 1;
    const char *close = strchr(name, ']');
    size_t length = close ? (size_t)(close - name) : strcspn(name, "\r\n");

    close_section(p);
    if (!close) {
        report(p, p->line, "\"[%.*s\": a section header needs its closing ]",
               (int)(length > 40 ? 40 : length), name);
    } else if (!ends_header(close + 1)) {
        report(p, p->line, "unexpected text after [%.*s]", (int)length, name);
    } else if (!is_valid_name(name, length)) {
        report(p, p->line, "bad section name \"[%.*s]\" (use 1 to %d of "
               "A-Z a-z 0-9 _ . -)", (int)length, name, BH_NAME_MAX - 1);
    } else {
        begin_named_section(p, name, length);
        return;
    }
    begin_compartment(p, name, length, -1);
}
