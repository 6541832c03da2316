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

enum { LOG_LEVEL_COUNT = sizeof log_level_names / sizeof log_level_names[0] };

/* Never NULL, so callers can print the result as it is. */
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
    if ((unsigned)level >= LOG_LEVEL_COUNT)
        return "unknown";
    return log_level_names[level];
}

/* Exact lower-case names only: 0 and *level set, or -1 and *level as it was. */
int bh_log_level_parse(const char *text, enum bh_log_level *level)
{
    for (unsigned i = 0; i < LOG_LEVEL_COUNT; i++) {
        if (strcmp(text, log_level_names[i]) == 0) {
            *level = (enum bh_log_level)i;
            return 0;
        }
    }
    return -1;
}
