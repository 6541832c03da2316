/* The fleet's password files' rule, one for `bulkhead check` and the
 * agent: a password that others may read is refused, as ssh refuses a
 * private key that others may read. */
#ifndef BH_PASSWORD_FILE_H
#define BH_PASSWORD_FILE_H

#include <stddef.h>

#include "config/config.h"

/* The files a fleet may name: Redis's (fleet_password_file) and the
 * sentinels' (fleet_sentinel_password_file). */
enum bh_password_for { BH_PASSWORD_REDIS, BH_PASSWORD_SENTINELS, BH_PASSWORD_FILES };

/* The file is looked at (stat: a symlink is followed), never opened. 0
 * when the config names none or all is well; -1 when it cannot be looked
 * at, 1 when it is a regular file to which group or others have any
 * access (mode & 077); both with the one line to say in why ("rules.ini:4:
 * fleet_password_file: ..."). What is not a regular file is the agent's
 * to refuse, when it reads it. */
int bh_password_file_problem(const struct bh_config *config, enum bh_password_for which,
                             char *why, size_t whylen);

#endif
