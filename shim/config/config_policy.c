/* Policy inside a compartment: per_process, reserve = N for WHO and
 * bypass = WHO (a WHO is parsed by policy/who.c). */
#include <stdio.h>
#include <string.h>

#include "config/parser.h"
#include "policy/who.h"

/* ---- policy inside a compartment ---- */

static int set_per_process(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 1, BH_LIMIT_MAX,
                      &p->section.compartment->per_process);
}

/* What follows the word "for" in "N for WHO"; NULL when the word is not
 * there. strchr finds the NUL too: "for" may end the value. */
static const char *after_for(const char *text)
{
    if (strncmp(text, "for", 3) != 0 || !strchr(" \t", text[3]))
        return NULL;
    return skip_space(text + 3);
}

/* "N for WHO"; NULL or what is wrong, which may be written into why. */
static const char *parse_reserve(const char *value, struct bh_reserve *reserve,
                                 char *why, size_t whylen)
{
    size_t length = strcspn(value, " \t");
    const char *who = after_for(skip_space(value + length));
    char count[COUNT_TEXT_SIZE];
    long number;

    snprintf(count, sizeof count, "%.*s", (int)length, value);
    if (length >= sizeof count
        || parse_whole(count, BH_LIMIT_MAX, &number) != NUMBER_OK || number < 1) {
        snprintf(why, whylen, "has a bad count \"%.*s\" (a whole number from 1 "
                 "to %d)", (int)length, value, BH_LIMIT_MAX);
        return why;
    }
    if (!who)
        return "has no \"for\" (use reserve = N for WHO, e.g. 2 for "
               "program=billing-*)";
    if (*who == '\0')
        return "has no WHO after \"for\" (use program=GLOB, user=NAME or "
               "env=VAR=VALUE)";
    reserve->permits = (int)number;
    return bh_who_parse(who, &reserve->who, why, whylen) == 0 ? NULL : why;
}

static const struct bh_reserve *find_reserve(const struct bh_compartment *c,
                                             const char *who)
{
    for (int i = 0; i < c->reserve_count; i++)
        if (strcmp(c->reserves[i].who.text, who) == 0)
            return &c->reserves[i];
    return NULL;
}

/* Repeatable; each WHO once, at most BH_MAX_RESERVES. */
static int add_reserve(struct parser *p, const char *key, const char *value)
{
    struct bh_compartment *c = p->section.compartment;
    struct bh_reserve reserve = { .line = p->line };
    char why[WHY_SIZE];
    const char *problem = parse_reserve(value, &reserve, why, sizeof why);
    const struct bh_reserve *first;

    if (problem) {
        report(p, p->line, "%s: \"%s\" %s", key, value, problem);
        return -1;
    }
    first = find_reserve(c, reserve.who.text);
    if (first) {
        report(p, p->line, "%s: %s already has a reserve at line %d", key,
               reserve.who.text, first->line);
        return -1;
    }
    if (c->reserve_count == BH_MAX_RESERVES) {
        report(p, p->line, "%s: too many in [%s] (at most %d)", key,
               p->section.name, BH_MAX_RESERVES);
        return -1;
    }
    c->reserves[c->reserve_count++] = reserve;
    return 0;
}

/* Repeatable; each WHO once, at most BH_MAX_BYPASSES. */
static int add_bypass(struct parser *p, const char *key, const char *value)
{
    struct bh_compartment *c = p->section.compartment;
    struct bh_who who;
    char why[WHY_SIZE];

    if (bh_who_parse(value, &who, why, sizeof why) != 0) {
        report(p, p->line, "%s: \"%s\" %s", key, value, why);
        return -1;
    }
    for (int i = 0; i < c->bypass_count; i++) {
        if (strcmp(c->bypasses[i].text, who.text) == 0) {
            report(p, p->line, "%s: %s already given at line %d", key,
                   who.text, p->section.bypass_lines[i]);
            return -1;
        }
    }
    if (c->bypass_count == BH_MAX_BYPASSES) {
        report(p, p->line, "%s: too many in [%s] (at most %d)", key,
               p->section.name, BH_MAX_BYPASSES);
        return -1;
    }
    p->section.bypass_lines[c->bypass_count] = p->line;
    c->bypasses[c->bypass_count++] = who;
    return 0;
}

const struct key_spec bh_policy_keys[] = {
    { "per_process", KEY_PER_PROCESS, SECTION_COMPARTMENT, set_per_process },
    { "reserve", KEY_RESERVE, SECTION_COMPARTMENT, add_reserve },
    { "bypass", KEY_BYPASS, SECTION_COMPARTMENT, add_bypass },};
const size_t bh_policy_keys_count = sizeof bh_policy_keys / sizeof bh_policy_keys[0];
