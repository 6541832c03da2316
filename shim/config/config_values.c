/* Names of the values a rules file may hold, both ways, for the parser and
 * for the command's output. */
#include <errno.h>
#include <string.h>

#include "config/config.h"

static const char *const log_level_names[] = {
    [BH_LOG_ERROR] = "error",
    [BH_LOG_WARN] = "warn",
    [BH_LOG_INFO] = "info",
    [BH_LOG_DEBUG] = "debug",
};

static const char *const adaptive_mode_names[] = {
    [BH_ADAPTIVE_OFF] = "off",
    [BH_ADAPTIVE_GRADIENT] = "gradient",
    [BH_ADAPTIVE_AIMD] = "aimd",
};

static const char *const mode_names[] = {
    [BH_MODE_ENFORCE] = "enforce",
    [BH_MODE_SHADOW] = "shadow",
};

#define COUNT_OF(table) (sizeof table / sizeof table[0])

/* Never NULL, so callers can print the result as it is. */
static const char *name_in(const char *const *names, unsigned count, unsigned value)
{
    return value < count ? names[value] : "unknown";
}

/* Exact lower-case names only: the value, or -1. */
static int parse_in(const char *const *names, unsigned count, const char *text)
{
    for (unsigned i = 0; i < count; i++)
        if (strcmp(text, names[i]) == 0)
            return (int)i;
    return -1;
}

const char *bh_errno_name(int err)
{
    switch (err) {
    case ECONNREFUSED: return "ECONNREFUSED";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EAGAIN: return "EAGAIN";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    default: return "unknown";
    }
}

const char *bh_log_level_name(enum bh_log_level level)
{
    return name_in(log_level_names, COUNT_OF(log_level_names), (unsigned)level);
}

/* 0 and *level set, or -1 and *level as it was. */
int bh_log_level_parse(const char *text, enum bh_log_level *level)
{
    int found = parse_in(log_level_names, COUNT_OF(log_level_names), text);
    if (found >= 0)
        *level = (enum bh_log_level)found;
    return found < 0 ? -1 : 0;
}

const char *bh_adaptive_mode_name(enum bh_adaptive_mode mode)
{
    return name_in(adaptive_mode_names, COUNT_OF(adaptive_mode_names), (unsigned)mode);
}

int bh_adaptive_mode_parse(const char *text, enum bh_adaptive_mode *mode)
{
    int found = parse_in(adaptive_mode_names, COUNT_OF(adaptive_mode_names), text);
    if (found >= 0)
        *mode = (enum bh_adaptive_mode)found;
    return found < 0 ? -1 : 0;
}

const char *bh_mode_name(enum bh_mode mode)
{
    return name_in(mode_names, COUNT_OF(mode_names), (unsigned)mode);
}

int bh_mode_parse(const char *text, enum bh_mode *mode)
{
    int found = parse_in(mode_names, COUNT_OF(mode_names), text);
    if (found >= 0)
        *mode = (enum bh_mode)found;
    return found < 0 ? -1 : 0;
}
