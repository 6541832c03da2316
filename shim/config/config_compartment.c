/* A compartment's values: its limit and how it waits, its deadlines and
 * breaker, and its adaptive limit. Each key alone; what keys mean together
 * is checked when the section closes (config_sections.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/parser.h"

/* ---- compartments ---- */

static int set_limit(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 0, BH_LIMIT_MAX, &p->section.compartment->limit);
}

static int set_wait_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 0, WAIT_MS_MAX,
                      &p->section.compartment->wait_ms);
}

static int set_turnaround(struct parser *p, const char *key, const char *value)
{
    int yes;
    if (set_yes_no(p, key, value, &yes) < 0)
        return -1;
    p->section.compartment->turnaround = (unsigned char)yes;
    return 0;
}

/* wait_nonblocking and nonblocking_wait_ms once let a non-blocking
 * connect wait inside connect(), stalling its program; it now waits
 * wait_ms without stalling anything, so they mean nothing. Any value is
 * taken (an old file must still load), and noted for check's warning. */
static int note_retired(struct parser *p, const char *key, const char *value)
{
    (void)value;
    struct bh_config *config = p->config;
    struct bh_retired_key *grown = realloc(config->retired,
        (size_t)(config->retired_count + 1) * sizeof *grown);
    if (!grown) {
        report_out_of_memory(p);
        return -1;
    }
    config->retired = grown;
    grown = &config->retired[config->retired_count++];
    snprintf(grown->key, sizeof grown->key, "%s", key);
    grown->line = p->line;
    return 0;
}

static int set_hold_wait_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 0, WAIT_MS_MAX,
                      &p->section.compartment->hold_wait_ms);
}

/* [global]'s hold_wait_ms: for every compartment that gives none. */
static int set_global_hold_wait_ms(struct parser *p, const char *key,
                                   const char *value)
{
    return set_number(p, key, value, 0, WAIT_MS_MAX, &p->config->hold_wait_ms);
}

static int set_max_waiters(struct parser *p, const char *key,
                           const char *value)
{
    return set_number(p, key, value, 0, MAX_WAITERS_MAX,
                      &p->section.compartment->max_waiters);
}

static int set_errno(struct parser *p, const char *key, const char *value)
{
    static const int refusals[] = {
        ECONNREFUSED, ETIMEDOUT, EAGAIN, EHOSTUNREACH,
    };

    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        if (strcmp(value, bh_errno_name(refusals[i])) == 0) {
            p->section.compartment->refusal_errno = refusals[i];
            return 0;
        }
    }
    report(p, p->line, "%s: \"%s\" is not one of ECONNREFUSED, ETIMEDOUT, "
           "EAGAIN, EHOSTUNREACH", key, value);
    return -1;
}

/* ---- deadlines and the breaker ---- */

/* The shim sets TCP_USER_TIMEOUT, which Linux checks only when the SYN
 * retransmission timer fires: the first time 1 s after the SYN. A shorter
 * value would still fail at 1 s, so it is refused rather than misleading. */
static int set_connect_timeout_ms(struct parser *p, const char *key,
                                  const char *value)
{
    int *timeout = &p->section.compartment->connect_timeout_ms;
    int number;

    if (set_number(p, key, value, 0, DEADLINE_MS_MAX, &number) != 0)
        return -1;
    if (number > 0 && number < CONNECT_TIMEOUT_MIN_MS) {
        report(p, p->line, "%s: %d is below %d: the kernel cannot fail a "
               "connect before its first SYN retransmission, 1 s after the "
               "SYN", key, number, CONNECT_TIMEOUT_MIN_MS);
        return -1;
    }
    *timeout = number;
    return 0;
}

static int set_io_timeout_ms(struct parser *p, const char *key,
                             const char *value)
{
    return set_number(p, key, value, 0, DEADLINE_MS_MAX,
                      &p->section.compartment->io_timeout_ms);
}

static int set_breaker_failures(struct parser *p, const char *key,
                                const char *value)
{
    return set_number(p, key, value, 0, BREAKER_FAILURES_MAX,
                      &p->section.compartment->breaker_failures);
}

static int set_breaker_open_ms(struct parser *p, const char *key,
                               const char *value)
{
    return set_number(p, key, value, 1, DEADLINE_MS_MAX,
                      &p->section.compartment->breaker_open_ms);
}

static int set_breaker_open_max_ms(struct parser *p, const char *key,
                                   const char *value)
{
    return set_number(p, key, value, 1, DEADLINE_MS_MAX,
                      &p->section.compartment->breaker_open_max_ms);
}

/* ---- adaptive limits ---- */

static int set_adaptive(struct parser *p, const char *key, const char *value)
{
    if (bh_adaptive_mode_parse(value, &p->section.compartment->adaptive) == 0)
        return 0;
    report(p, p->line, "%s: \"%s\" is not one of off, gradient, aimd", key, value);
    return -1;
}

static int set_min_limit(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 1, BH_LIMIT_MAX, &p->section.compartment->min_limit);
}

static int set_max_limit(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 1, BH_LIMIT_MAX, &p->section.compartment->max_limit);
}

static int set_adaptive_latency_ms(struct parser *p, const char *key, const char *value)
{
    return set_number(p, key, value, 1, DEADLINE_MS_MAX,
                      &p->section.compartment->adaptive_latency_ms);
}

static int parse_mode(struct parser *p, const char *key, const char *value,
                      signed char *out)
{
    enum bh_mode mode;
    if (bh_mode_parse(value, &mode) == 0) {
        *out = (signed char)mode;
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not one of enforce, shadow", key, value);
    return -1;
}

static int set_mode(struct parser *p, const char *key, const char *value)
{
    return parse_mode(p, key, value, &p->section.compartment->mode);
}

/* [global]'s mode: for every compartment that gives none. */
static int set_global_mode(struct parser *p, const char *key, const char *value)
{
    return parse_mode(p, key, value, &p->config->mode);
}

const struct key_spec bh_compartment_keys[] = {
    { "limit", KEY_LIMIT, SECTION_COMPARTMENT, set_limit },
    { "wait_ms", KEY_WAIT_MS, SECTION_COMPARTMENT, set_wait_ms },
    { "max_waiters", KEY_MAX_WAITERS, SECTION_COMPARTMENT, set_max_waiters },
    { "wait_nonblocking", KEY_WAIT_NONBLOCKING, SECTION_COMPARTMENT, note_retired },
    { "nonblocking_wait_ms", KEY_NONBLOCKING_WAIT_MS, SECTION_COMPARTMENT,
      note_retired },
    { "hold_wait_ms", KEY_HOLD_WAIT_MS, SECTION_COMPARTMENT, set_hold_wait_ms },
    { "hold_wait_ms", KEY_HOLD_WAIT_MS, SECTION_GLOBAL, set_global_hold_wait_ms },
    { "errno", KEY_ERRNO, SECTION_COMPARTMENT, set_errno },
    { "connect_timeout_ms", KEY_CONNECT_TIMEOUT_MS, SECTION_COMPARTMENT,
      set_connect_timeout_ms },
    { "io_timeout_ms", KEY_IO_TIMEOUT_MS, SECTION_COMPARTMENT,
      set_io_timeout_ms },
    { "breaker_failures", KEY_BREAKER_FAILURES, SECTION_COMPARTMENT,
      set_breaker_failures },
    { "breaker_open_ms", KEY_BREAKER_OPEN_MS, SECTION_COMPARTMENT,
      set_breaker_open_ms },
    { "breaker_open_max_ms", KEY_BREAKER_OPEN_MAX_MS, SECTION_COMPARTMENT,
      set_breaker_open_max_ms },
    { "adaptive", KEY_ADAPTIVE, SECTION_COMPARTMENT, set_adaptive },
    { "min_limit", KEY_MIN_LIMIT, SECTION_COMPARTMENT, set_min_limit },
    { "max_limit", KEY_MAX_LIMIT, SECTION_COMPARTMENT, set_max_limit },
    { "adaptive_latency_ms", KEY_ADAPTIVE_LATENCY_MS, SECTION_COMPARTMENT,
      set_adaptive_latency_ms },
    { "turnaround", KEY_TURNAROUND, SECTION_COMPARTMENT, set_turnaround },
    { "mode", KEY_MODE, SECTION_COMPARTMENT, set_mode },
    { "mode", KEY_MODE, SECTION_GLOBAL, set_global_mode },
};
const size_t bh_compartment_keys_count = sizeof bh_compartment_keys / sizeof bh_compartment_keys[0];
