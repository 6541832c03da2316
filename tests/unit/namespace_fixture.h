/* What the unit tests over a real namespace share: opening it, a fresh
 * compartment in it and a plain take. Each test program owns its
 * namespace (opened in its set-up, removed in its tear-down). */
#ifndef BH_TESTS_UNIT_NAMESPACE_FIXTURE_H
#define BH_TESTS_UNIT_NAMESPACE_FIXTURE_H

#include <stdio.h>
#include <unistd.h>

#include "permits/permits.h"

/* Opens (creating) the namespace "unit-WHAT-PID" into ns: 0, or -1 after
 * saying why on stderr. */
static inline int fixture_open(struct bh_namespace *ns, const char *what)
{
    char name[64], err[256];
    snprintf(name, sizeof name, "unit-%s-%d", what, (int)getpid());
    if (bh_namespace_open(name, 1, ns, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

/* A compartment never registered before in ns: `limit` permits, and one
 * reserve of `reserved` for "env=CLASS=critical" when reserved > 0. */
static inline int fixture_compartment(struct bh_namespace *ns, int limit, int reserved)
{
    static int registered;
    struct bh_compartment rules = { .limit = limit };
    snprintf(rules.name, sizeof rules.name, "c%d", registered++);
    if (reserved) {
        rules.reserve_count = 1;
        rules.reserves[0].permits = reserved;
        snprintf(rules.reserves[0].who.text, BH_WHO_MAX, "env=CLASS=critical");
    }
    int live, index = bh_compartment_register(ns, &rules, limit, &live);
    assert_true(index >= 0);
    return index;
}

/* One try for `weight` permits, from reserve `reserve` (-1: none). */
static inline int fixture_take(struct bh_namespace *ns, int index, int reserve, int weight)
{
    struct bh_permit_ask ask = { index, reserve, weight };
    return bh_permit_try(ns, &ask) == BH_ACQUIRED;
}

#endif
